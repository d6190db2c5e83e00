//! `lab-bench job`: how long a hung rank of an emulated MLX job (issue 33)
//! takes to become a `job_hung` alarm about its node, on the first node and
//! on every node; and what a running job costs meshd's own CPU.
//!
//! Verdict times come from the timestamps meshd puts on its events
//! (`meshctl watch --json`, an `alarm_raised` whose summary reads
//! `job_hung on NODE: …`), as in `lab-bench detection`: nothing polls while
//! a trial is timed, and the host clock is shared. Each fault is proven:
//! the stopped rank's `/proc` state is `T`, the killed pid is gone, and the
//! other ranks spin (ask for ≥ 0.8 of a core from 1 s to 2 s after the
//! signal). Each node's status is then read once to check it holds the
//! alarm, and the job is restored (SIGCONT, or the job stopped and started
//! again) until every node shows it running with no `job_hung`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use meshd_lab::events::{Event, Events};
use meshd_lab::job::{JobRecord, JobSpec, Load, loads};
use meshd_lab::rank::Mode;
use meshd_lab::{Lab, Options, Status};

use crate::cpu::{CpuClock, load_average};
use crate::lab;
use crate::latency::{Column, print_latencies, since};

/// A bound for a verdict to arrive; never a speed check.
const VERDICT: Duration = Duration::from_secs(20);
/// A bound for the ranks to settle on the shared host.
const RANKS_SETTLE: Duration = Duration::from_secs(30);
/// When, after the signal, the other ranks' CPU is measured, and for how
/// long: as `lab/tests/job.rs` does, past their 500 ms silence threshold.
const SPIN_AFTER: Duration = Duration::from_secs(1);
const SPIN_WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Stop,
    Kill,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Self::Stop => "SIGSTOP",
            Self::Kill => "SIGKILL",
        }
    }
}

/// The `lab` binary beside this one: it runs the ranks (`lab rank …`).
pub(crate) fn lab_binary() -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name("lab");
    if !path.is_file() {
        bail!(
            "no {} (build it: cargo build --release -p meshd-lab)",
            path.display()
        );
    }
    Ok(path)
}

/// Every node lists job `job` with exactly its ranks (these pids), all
/// live, and holds no `job_hung`.
pub(crate) fn running(s: &Status, job: &JobRecord) -> bool {
    let mut want: Vec<u32> = job.ranks.iter().map(|r| r.pid).collect();
    want.sort_unstable();
    s.jobs.len() == 1
        && s.alarms.iter().all(|a| a.kind != "job_hung")
        && s.jobs[0].ranks.iter().all(|r| r.condition == "live")
        && {
            let mut seen: Vec<u32> = s.jobs[0].ranks.iter().map(|r| r.pid).collect();
            seen.sort_unstable();
            seen == want
        }
}

/// Starts the job and waits until its ranks make progress and every node
/// shows it running; its record.
pub(crate) fn start(lab: &mut Lab, spec: &JobSpec) -> anyhow::Result<JobRecord> {
    let job = lab.start_job(spec)?;
    lab.wait_job(&spec.id, Mode::Paced, RANKS_SETTLE)?;
    lab.wait_all("the job running on every node", VERDICT, |s| {
        running(s, &job)
    })?;
    Ok(job)
}

/// Stops the job and waits until no node lists a job or a `job_hung`.
pub(crate) fn stop(lab: &mut Lab, id: &str) -> anyhow::Result<()> {
    lab.stop_job(id)?;
    lab.wait_all("no job on any node", VERDICT, |s| {
        s.jobs.is_empty() && s.alarms.iter().all(|a| a.kind != "job_hung")
    })?;
    Ok(())
}

/// The node a `job_hung` raised event is about, from its summary
/// (`job_hung on NODE: …`).
fn hung_about(e: &Event) -> Option<&str> {
    if e.kind != "alarm_raised" {
        return None;
    }
    let rest = e.summary.strip_prefix("job_hung on ")?;
    rest.split(':').next()
}

/// Whether `condition` holds within `limit` (polled every 10 ms).
fn within(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn describe_loads(loads: &[Option<Load>]) -> String {
    loads
        .iter()
        .map(|l| match l {
            Some(l) => format!("{:.2}", l.demand),
            None => "gone".to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One timed fault: the first and the last node's `job_hung` (ms after
/// the signal), and whether the fault was proven.
#[derive(Debug)]
struct Trial {
    fault: Fault,
    first: f64,
    every: f64,
    proven: bool,
}

#[allow(clippy::print_stdout)]
fn trial(
    lab: &mut Lab,
    events: &Events,
    spec: &JobSpec,
    n: usize,
    fault: Fault,
    node: &str,
) -> anyhow::Result<Trial> {
    let job = lab.job(&spec.id)?;
    let rank = job.rank_on(node)?.clone();
    let others: Vec<u32> = job
        .ranks
        .iter()
        .filter(|r| r.node != node)
        .map(|r| r.pid)
        .collect();
    events.drain();
    let t0 = SystemTime::now();
    match fault {
        Fault::Stop => lab.stop_rank(&spec.id, node)?,
        Fault::Kill => lab.kill_rank(&spec.id, node)?,
    }
    let spin = std::thread::spawn(move || {
        std::thread::sleep(SPIN_AFTER);
        loads(&others, SPIN_WINDOW)
    });
    let (happened, proof) = match fault {
        Fault::Stop => {
            let stopped = within(Duration::from_secs(1), || rank.state() == Some('T'));
            (
                stopped,
                format!("pid {} state {:?}", rank.pid, rank.state()),
            )
        }
        Fault::Kill => {
            let gone = within(Duration::from_secs(1), || !rank.alive());
            (
                gone,
                format!("pid {} {}", rank.pid, if gone { "gone" } else { "ALIVE" }),
            )
        }
    };
    let mut seen: BTreeMap<String, f64> = BTreeMap::new();
    let mut elsewhere: Vec<String> = Vec::new();
    let deadline = Instant::now() + VERDICT;
    while seen.len() < lab.plan.nodes.len() && Instant::now() < deadline {
        let Some(e) = events.next(Duration::from_millis(100)) else {
            continue;
        };
        if e.at < t0 {
            continue;
        }
        match hung_about(&e) {
            Some(about) if about == node => {
                seen.entry(e.observer.clone()).or_insert(since(t0, e.at));
            }
            Some(about) => elsewhere.push(format!("{} about {about}", e.observer)),
            None => {}
        }
    }
    let spun = spin
        .join()
        .map_err(|_| anyhow::anyhow!("the load thread panicked"))?;
    if seen.len() < lab.plan.nodes.len() {
        bail!(
            "trial {n}: {} {node}: job_hung about {node} only on {seen:?} within {VERDICT:?} ({proof}; others asked {} cores)",
            fault.name(),
            describe_loads(&spun)
        );
    }
    // Each node's status holds what its event said, and why.
    let says = match fault {
        Fault::Stop => format!("on {node} is stopped"),
        Fault::Kill => format!("on {node} exited or was killed"),
    };
    lab.wait_all(&format!("job_hung about {node}: {says}"), VERDICT, |s| {
        s.alarms
            .iter()
            .any(|a| a.kind == "job_hung" && a.node == node && a.summary.contains(&says))
    })?;
    let spinning = spun.iter().all(|l| l.is_some_and(|l| l.spinning()));
    let proven = happened && spinning;
    let first = seen.values().copied().fold(f64::INFINITY, f64::min);
    let every = seen.values().copied().fold(0.0, f64::max);
    println!(
        "trial {n:2} {} {node} ({proof}; others asked {} cores): first {first:.0} ms, every {every:.0} ms{}{}",
        fault.name(),
        describe_loads(&spun),
        if elsewhere.is_empty() {
            String::new()
        } else {
            format!("; job_hung about another node: {}", elsewhere.join(", "))
        },
        if proven { "" } else { " NOT PROVEN, left out" }
    );
    Ok(Trial {
        fault,
        first,
        every,
        proven,
    })
}

/// Puts the job back as it was before a trial: every node shows it
/// running, with no `job_hung`.
fn restore(lab: &mut Lab, spec: &JobSpec, fault: Fault, node: &str) -> anyhow::Result<()> {
    match fault {
        Fault::Stop => {
            lab.cont_rank(&spec.id, node)?;
            lab.wait_job(&spec.id, Mode::Paced, RANKS_SETTLE)?;
            let job = lab.job(&spec.id)?;
            lab.wait_all("the job running again", VERDICT, |s| running(s, &job))?;
        }
        Fault::Kill => {
            stop(lab, &spec.id)?;
            start(lab, spec)?;
        }
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn hung_trials(lab: &mut Lab, spec: &JobSpec, trials: usize) -> anyhow::Result<()> {
    let mut events = Events::new();
    for id in lab.ids() {
        events.watch(lab, id)?;
    }
    start(lab, spec)?;
    std::thread::sleep(Duration::from_secs(2));
    let ids = lab.ids();
    let mut done = Vec::new();
    for n in 0..trials {
        // Every node has each fault in turn: (a, stop), (b, kill), (c,
        // stop), (a, kill), …
        let fault = if n % 2 == 0 { Fault::Stop } else { Fault::Kill };
        let node = ids[n % ids.len()];
        done.push(trial(lab, &events, spec, n, fault, node)?);
        restore(lab, spec, fault, node)?;
        std::thread::sleep(Duration::from_secs(2));
    }
    let proven: Vec<&Trial> = done.iter().filter(|t| t.proven).collect();
    println!(
        "\n{} trials, {} proven; job_hung about the signalled rank's node, from the signal:\n",
        done.len(),
        proven.len()
    );
    let of = |fault: Option<Fault>, every: bool| -> Vec<f64> {
        proven
            .iter()
            .filter(|t| fault.is_none_or(|f| t.fault == f))
            .map(|t| if every { t.every } else { t.first })
            .collect()
    };
    print_latencies(
        "job_hung on",
        &[Column::Min, Column::P(50.0), Column::P(99.0), Column::Max],
        &[
            ("first node, SIGSTOP", of(Some(Fault::Stop), false)),
            ("every node, SIGSTOP", of(Some(Fault::Stop), true)),
            ("first node, SIGKILL", of(Some(Fault::Kill), false)),
            ("every node, SIGKILL", of(Some(Fault::Kill), true)),
            ("first node, both", of(None, false)),
            ("every node, both", of(None, true)),
        ],
    );
    stop(lab, &spec.id)?;
    Ok(())
}

/// Each rank's steps so far (from its status file), by node.
fn steps(job: &JobRecord) -> anyhow::Result<Vec<u64>> {
    job.ranks
        .iter()
        .map(|r| {
            r.report()
                .map(|p| p.steps)
                .with_context(|| format!("no report from the rank on {}", r.node))
        })
        .collect()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// meshd's CPU on every node over `seconds` with no job, then with the
/// job running paced beside it; nothing polls during either window.
#[allow(clippy::print_stdout)]
fn cpu_beside_job(
    lab: &mut Lab,
    spec: &JobSpec,
    clock: CpuClock,
    seconds: u64,
    warmup: u64,
) -> anyhow::Result<()> {
    let window = Duration::from_secs(seconds);
    let ids = lab.ids();
    let mut daemons = Vec::new();
    for id in &ids {
        daemons.push(lab.daemon_pid(id)?);
    }
    std::thread::sleep(Duration::from_secs(warmup));
    let load_idle = load_average();
    let idle = clock.percent_over(&daemons, window)?;
    let load_idle_after = load_average();

    let job = start(lab, spec)?;
    std::thread::sleep(Duration::from_secs(warmup));
    let ranks: Vec<u32> = job.ranks.iter().map(|r| r.pid).collect();
    let mut pids = daemons.clone();
    pids.extend(&ranks);
    let load_job = load_average();
    let steps_before = steps(&job)?;
    let measured = clock.percent_over(&pids, window)?;
    let steps_after = steps(&job)?;
    let load_job_after = load_average();
    let (busy, rank_cpu) = measured.split_at(daemons.len());
    let modes: Vec<Option<Mode>> = job
        .ranks
        .iter()
        .map(|r| r.report().filter(|_| r.alive()).map(|p| p.mode))
        .collect();
    let progressed = steps_before.iter().zip(&steps_after).all(|(b, a)| a > b)
        && modes.iter().all(|m| *m == Some(Mode::Paced));

    println!("\n{}\n", clock.describe());
    println!("| node | meshd, no job | meshd, job running | difference |\n|---|---:|---:|---:|");
    for ((id, before), with) in ids.iter().zip(&idle).zip(busy) {
        println!(
            "| {id} | {before:.3} % | {with:.3} % | {:+.3} % |",
            with - before
        );
    }
    let (m0, m1) = (mean(&idle), mean(busy));
    println!("| mean | {m0:.3} % | {m1:.3} % | {:+.3} % |", m1 - m0);
    println!(
        "\nCPU in % of one core over {seconds} s windows, after {warmup} s warm-ups; load average {load_idle} → {load_idle_after} (no job), {load_job} → {load_job_after} (job)"
    );
    println!(
        "\n| rank | node | pid | mode | steps in the window | steps/s | rank's CPU |\n|---:|---|---:|---|---:|---:|---:|"
    );
    for ((((r, b), a), mode), cpu) in job
        .ranks
        .iter()
        .zip(&steps_before)
        .zip(&steps_after)
        .zip(&modes)
        .zip(rank_cpu)
    {
        let stepped = a.saturating_sub(*b);
        println!(
            "| {} | {} | {} | {} | {stepped} | {:.1} | {cpu:.2} % |",
            r.rank,
            r.node,
            r.pid,
            mode.map_or_else(|| "gone".to_owned(), |m| format!("{m:?}")),
            stepped as f64 / seconds as f64
        );
    }
    println!(
        "\nthe job {} during the window (rate {} datagrams/s per peer)",
        if progressed {
            "ran paced: every rank's steps went up"
        } else {
            "DID NOT run paced throughout"
        },
        spec.rate
    );
    stop(lab, &spec.id)?;
    Ok(())
}

pub(crate) fn run(trials: usize, seconds: u64, warmup: u64) -> anyhow::Result<()> {
    let options = Options {
        log_level: "warn".to_owned(),
        ..Options::default()
    };
    let spec = JobSpec::new(lab_binary()?);
    let mut lab = lab("job", 3, &options)?;
    let clock = CpuClock::detect()?;
    hung_trials(&mut lab, &spec, trials)?;
    cpu_beside_job(&mut lab, &spec, clock, seconds, warmup)?;
    lab.teardown()?;
    Ok(())
}
