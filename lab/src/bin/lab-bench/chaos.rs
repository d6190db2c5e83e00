//! `lab-bench chaos`: link and node verdicts that no injected fault
//! explains, while CPU hogs, daemon restarts and storms outside the mesh
//! come and go; with `--job`, beside a job on every node, whose alarms
//! count as false as well.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use meshd_lab::events::{Event, Events};
use meshd_lab::{Lab, Options};

use meshd_lab::job::JobSpec;

use crate::cpu::CpuClock;
use crate::{SETTLE, job, lab};

const ROUND: Duration = Duration::from_secs(25);
const HOLD: Duration = Duration::from_secs(12);
const RESTART_GRACE: Duration = Duration::from_secs(5);

/// What a chaos round injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Chaos {
    Hogs,
    Restart,
    Storm,
}

impl Chaos {
    fn name(self) -> &'static str {
        match self {
            Self::Hogs => "UniversalControl hogs",
            Self::Restart => "daemon restart",
            Self::Storm => "storm outside the mesh",
        }
    }
}

/// An injected fault, when it was in force (restarts: until the node was
/// back in every view, plus a grace period for its first judgements), and
/// the measurement that proves it happened.
#[derive(Debug)]
struct Injected {
    what: Chaos,
    node: &'static str,
    from: SystemTime,
    to: SystemTime,
    proof: String,
    happened: bool,
}

/// A storm circles at hundreds of thousands of packets a second on this
/// host; below this, none started.
const MIN_STORM_PPS: f64 = 10_000.0;
/// Fresh broadcasts tried before a storm round is given up as not started.
const STORM_SEEDS: usize = 3;

/// Packets per second through the storm's bridge over `over`.
fn storm_rate(lab: &Lab, node: &str, over: Duration) -> anyhow::Result<f64> {
    let before = lab.storm_packets(node)?;
    let t0 = Instant::now();
    std::thread::sleep(over);
    let after = lab.storm_packets(node)?;
    Ok(after.saturating_sub(before) as f64 / t0.elapsed().as_secs_f64())
}

/// Starts a storm outside the mesh in `node` and holds it for `hold`,
/// seeding it again while it does not run; the proof is its mean rate.
fn storm_round(lab: &Lab, node: &str, hold: Duration) -> anyhow::Result<(String, bool)> {
    lab.storm_outside_mesh(node)?;
    let mut seeds = 1;
    while storm_rate(lab, node, Duration::from_secs(1))? < MIN_STORM_PPS && seeds < STORM_SEEDS {
        lab.reseed_storm_outside_mesh(node)?;
        seeds += 1;
    }
    let started = Instant::now();
    let first = lab.storm_packets(node)?;
    std::thread::sleep(hold);
    let carried = lab.storm_packets(node)?.saturating_sub(first);
    lab.calm_storm_outside_mesh(node)?;
    let pps = carried as f64 / started.elapsed().as_secs_f64();
    let happened = pps >= MIN_STORM_PPS;
    let proof = format!(
        "{pps:.0} pps over {} s, {seeds} seed(s){}",
        hold.as_secs(),
        if happened { "" } else { ": DID NOT STORM" }
    );
    Ok((proof, happened))
}

/// Runs `count` hogs in `node` for `hold`; the proof is the CPU they got,
/// all of their lives (they start with the window).
fn hog_round(
    lab: &mut Lab,
    clock: CpuClock,
    node: &str,
    count: usize,
    hold: Duration,
) -> anyhow::Result<(String, bool)> {
    lab.start_hogs(node, count)?;
    std::thread::sleep(hold);
    let used: u64 = lab
        .hog_pids()
        .into_iter()
        .map(|pid| clock.sample(pid).unwrap_or(0))
        .sum();
    lab.stop_hogs();
    let cores = clock.seconds(used) / hold.as_secs_f64();
    // Half a core at least, whatever else shares the host.
    let happened = cores >= 0.5;
    Ok((
        format!(
            "{count} hogs used {cores:.2} cores{}",
            if happened { "" } else { ": DID NOT RUN" }
        ),
        happened,
    ))
}

/// Restarts `node`'s daemon after 2 s down; the proof is a new process.
fn restart_round(
    lab: &mut Lab,
    events: &mut Events,
    node: &str,
    grace: Duration,
) -> anyhow::Result<(String, bool)> {
    let before = lab.daemon_pid(node)?;
    lab.stop(node)?;
    std::thread::sleep(Duration::from_secs(2));
    lab.start(node, "warn")?;
    lab.wait_all("back after the restart", SETTLE, |s| {
        s.nodes.iter().all(|n| n.state == "up")
    })?;
    let after = lab.daemon_pid(node)?;
    std::thread::sleep(grace);
    events.watch(lab, node)?;
    let happened = before != after;
    Ok((format!("pid {before} -> {after}"), happened))
}

#[allow(clippy::print_stdout)]
pub(crate) fn run(seconds: u64, with_job: bool) -> anyhow::Result<()> {
    let options = Options {
        log_level: "warn".to_owned(),
        ..Options::default()
    };
    let mut lab = lab("chaos", 4, &options)?;
    let spec = JobSpec::new(job::lab_binary()?);
    let running = if with_job {
        Some(job::start(&mut lab, &spec)?)
    } else {
        None
    };
    let mut events = Events::new();
    for id in lab.ids() {
        events.watch(&lab, id)?;
    }
    let clock = CpuClock::detect()?;
    let started = Instant::now();
    let injected = inject(&mut lab, &mut events, clock, Duration::from_secs(seconds))?;
    let wall = started.elapsed();
    // The job ran through the whole run: the same ranks, all live.
    let job_proof = match &running {
        Some(record) => {
            let status = lab.status(lab.ids()[0])?;
            let live = job::running(&status, record);
            job::stop(&mut lab, &spec.id)?;
            Some(if live {
                format!(
                    "job {}: its {} ranks ran live throughout",
                    record.id,
                    record.ranks.len()
                )
            } else {
                format!(
                    "job {}: NOT RUNNING at the end ({:?})",
                    record.id, status.jobs
                )
            })
        }
        None => None,
    };
    let all: Vec<Event> = events.drain();
    let verdicts: Vec<&Event> = all
        .iter()
        .filter(|e| e.is_link_or_node_verdict() || is_job_alarm(e))
        .collect();
    let false_verdicts: Vec<&Event> = verdicts
        .iter()
        .copied()
        .filter(|e| !caused_by_restart(&injected, e))
        .collect();

    println!("{}\n", clock.describe());
    if let Some(proof) = &job_proof {
        println!("{proof}\n");
    }
    print_rounds(&injected, &false_verdicts);
    print_by_fault(&injected, &false_verdicts);
    print_by_kind(&false_verdicts);
    let not_happened = injected.iter().filter(|i| !i.happened).count();
    println!(
        "\nrun: {:.0} s, events seen: {}, link/node verdicts: {} (caused by a restart: {}), false: {}, rounds whose fault did not happen: {not_happened}",
        wall.as_secs_f64(),
        all.len(),
        verdicts.len(),
        verdicts.len() - false_verdicts.len(),
        false_verdicts.len()
    );
    print_false_verdicts(&injected, &false_verdicts);
    lab.teardown()?;
    Ok(())
}

/// Rounds of `ROUND` each, for as many as fit in `run_for`: hogs, a
/// restart and a storm in turn, on each node in turn.
fn inject(
    lab: &mut Lab,
    events: &mut Events,
    clock: CpuClock,
    run_for: Duration,
) -> anyhow::Result<Vec<Injected>> {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    let ids = lab.ids();
    let mut injected = Vec::new();
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() + ROUND <= run_for {
        let node = ids[round % ids.len()];
        let from = SystemTime::now();
        let what = [Chaos::Hogs, Chaos::Restart, Chaos::Storm][round % 3];
        let (proof, happened) = match what {
            Chaos::Hogs => hog_round(lab, clock, node, cores, HOLD)?,
            Chaos::Restart => restart_round(lab, events, node, RESTART_GRACE)?,
            Chaos::Storm => storm_round(lab, node, HOLD)?,
        };
        injected.push(Injected {
            what,
            node,
            from,
            to: SystemTime::now(),
            proof,
            happened,
        });
        let rest = ROUND.saturating_sub(from.elapsed().unwrap_or_default());
        std::thread::sleep(rest);
        round += 1;
    }
    Ok(injected)
}

/// A restart takes its node down on purpose: the node verdicts about it
/// (and its links' verdicts blamed on it) are caused by the fault, and
/// so is what the restarted node says of the others while it starts. A
/// link verdict blamed on a link is false whenever it comes.
fn caused_by_restart(injected: &[Injected], e: &Event) -> bool {
    injected.iter().any(|i| {
        i.what == Chaos::Restart
            && (i.from..=i.to).contains(&e.at)
            && (e.blames_a_node(i.node) || (e.observer == i.node && e.kind.starts_with("node_")))
    })
}

/// A job alarm raised: no chaos round touches a rank, so any is false.
fn is_job_alarm(e: &Event) -> bool {
    e.kind == "alarm_raised" && e.summary.starts_with("job_")
}

/// The round whose fault was in force when `e` came.
fn round_of(injected: &[Injected], e: &Event) -> Option<usize> {
    injected
        .iter()
        .position(|i| (i.from..=i.to).contains(&e.at))
}

/// How many of the false verdicts came during round `n`.
fn false_during(injected: &[Injected], false_verdicts: &[&Event], n: usize) -> usize {
    false_verdicts
        .iter()
        .filter(|e| round_of(injected, e) == Some(n))
        .count()
}

#[allow(clippy::print_stdout)]
fn print_rounds(injected: &[Injected], false_verdicts: &[&Event]) {
    println!(
        "| round | injected | node | proof it happened | false verdicts |\n|---:|---|---|---|---:|"
    );
    for (n, i) in injected.iter().enumerate() {
        let false_here = false_during(injected, false_verdicts, n);
        println!(
            "| {} | {} | {} | {} | {false_here} |",
            n + 1,
            i.what.name(),
            i.node,
            i.proof
        );
    }
}

#[allow(clippy::print_stdout)]
fn print_by_fault(injected: &[Injected], false_verdicts: &[&Event]) {
    println!(
        "\n| injected | rounds | happened | false verdicts during them |\n|---|---:|---:|---:|"
    );
    let mut by_fault: BTreeMap<Chaos, (usize, usize, usize)> = BTreeMap::new();
    for (n, i) in injected.iter().enumerate() {
        let row = by_fault.entry(i.what).or_default();
        row.0 += 1;
        row.1 += usize::from(i.happened);
        row.2 += false_during(injected, false_verdicts, n);
    }
    for (what, (rounds, happened, false_n)) in &by_fault {
        println!("| {} | {rounds} | {happened} | {false_n} |", what.name());
    }
}

#[allow(clippy::print_stdout)]
fn print_by_kind(false_verdicts: &[&Event]) {
    println!("\n| false verdict kind | count |\n|---|---:|");
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for e in false_verdicts {
        *by_kind.entry(e.kind.as_str()).or_default() += 1;
    }
    for (kind, n) in &by_kind {
        println!("| {kind} | {n} |");
    }
}

/// Each false verdict, with the fault in force when it came.
#[allow(clippy::print_stdout)]
fn print_false_verdicts(injected: &[Injected], false_verdicts: &[&Event]) {
    for e in false_verdicts {
        let when = round_of(injected, e)
            .and_then(|n| injected.get(n))
            .map_or("between faults".to_owned(), |i| {
                format!("{} on {}", i.what.name(), i.node)
            });
        println!(
            "  false: {} seen by {}: {} ({when})",
            e.kind, e.observer, e.summary
        );
    }
}
