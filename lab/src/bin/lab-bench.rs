//! The lab's benchmarks (ARCHITECTURE.md, Targets), each printing a table for
//! BENCHMARKS.md. Figures only: nothing here is asserted by a test.
//!
//! Run as root from a release build, so meshd and meshctl are found beside
//! this binary:
//!
//! ```sh
//! cargo build --release -p meshd -p meshctl -p meshd-lab
//! sudo target/release/lab-bench detection
//! ```

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use meshd_lab::command::{self, QUICK};
use meshd_lab::events::{Event, Events};
use meshd_lab::plan::METRICS_PORT;
use meshd_lab::{Binaries, Lab, Options, Plan, Status};
use meshd_platform::linux::procs::parse_stat;

const SETTLE: Duration = Duration::from_secs(60);
const VERDICT: Duration = Duration::from_secs(10);
/// meshd's RTT quantile window (RTT_WINDOW in daemon/src/model/linkstats.rs).
const WINDOW: Duration = Duration::from_secs(10);

#[derive(Debug, Parser)]
#[command(name = "lab-bench", about = "Benchmarks on the Linux mesh lab (root)")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Cable pulled → link-down verdict on every node, and → the alert
    /// received by Alertmanager (4 nodes, cables in turn).
    Detection {
        #[arg(long, default_value_t = 24)]
        trials: usize,
    },
    /// Link or node verdicts not caused by an injected fault while CPU
    /// hogs, daemon restarts and storms outside the mesh come and go.
    Chaos {
        #[arg(long, default_value_t = 300)]
        seconds: u64,
    },
    /// CPU (% of one core), main-thread wake-ups, engine looks and resident
    /// memory of every daemon, beside smokeping_prober pinging the same
    /// peers every 100 ms where it is installed, and the series count of
    /// one node.
    Cost {
        #[arg(long, default_value_t = 7)]
        nodes: usize,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long, default_value_t = 10)]
        warmup: u64,
    },
    /// meshd's RTT p50 on one cable against iputils ping on the same cable,
    /// side by side.
    Accuracy {
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// What hostile clients cost one meshd on loopback (issue 14): an
    /// 8000-rank GetHostfile, 1100 idle connections at 1024 open files, and
    /// `doctor --from` a bundle linked to /dev/zero. No root, no lab.
    Hostile {
        /// The scenario bundle the /dev/zero link is planted in.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../platform/tests/scenarios/macbook-m5-max-rdma-disabled"))]
        scenario: std::path::PathBuf,
    },
    /// The RDMA probe's round trip beside the UDP probe's on one Soft-RoCE
    /// cable between two VMs (qemu, no root), with rdma-core's UC
    /// ping-pong and ping on the same cable for reference.
    Rdma {
        #[arg(long, default_value_t = 30)]
        seconds: u64,
    },
    /// Helper run inside a namespace: print the body of GET /metrics at ADDR.
    #[command(hide = true)]
    FetchMetrics { addr: String },
    /// Helper: run a command as the only child and print its peak RSS.
    #[command(hide = true)]
    PeakRss {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
}

fn lab(name: &str, nodes: usize, options: &Options) -> anyhow::Result<Lab> {
    if let Some(reason) = meshd_lab::missing_prerequisite() {
        bail!("the lab cannot run here: {reason}");
    }
    let lab = Lab::up(
        Plan::new(name, nodes)?,
        Binaries::beside_current_exe()?,
        options,
    )?;
    lab.wait_all("the whole mesh up", SETTLE, Status::all_up)?;
    Ok(lab)
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

#[allow(clippy::print_stdout)]
fn print_latencies(rows: &[(&str, Vec<f64>)]) {
    println!("| verdict on | trials | p50 | p90 | p99 | max |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (what, values) in rows {
        let mut v = values.clone();
        v.sort_by(f64::total_cmp);
        println!(
            "| {what} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |",
            v.len(),
            percentile(&v, 50.0),
            percentile(&v, 90.0),
            percentile(&v, 99.0),
            v.last().copied().unwrap_or(f64::NAN)
        );
    }
}

fn since(t0: SystemTime, at: SystemTime) -> f64 {
    millis(at.duration_since(t0).unwrap_or_default())
}

/// The moment Alertmanager took MeshLinkDown for x-y (its `updatedAt`,
/// set on receipt; the first push, since resends are 30 s apart).
fn alertmanager_receipt(lab: &Lab, x: &str, y: &str) -> anyhow::Result<SystemTime> {
    let (a, b) = (format!("a={x}"), format!("b={y}"));
    let started = Instant::now();
    while started.elapsed() < VERDICT {
        let alerts = lab.alertmanager_alerts(&["alertname=MeshLinkDown", &a, &b])?;
        if let Some(at) = alerts.first().and_then(|al| al["updatedAt"].as_str()) {
            return Ok(humantime::parse_rfc3339(at)?);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("no MeshLinkDown for {x}-{y} in Alertmanager within {VERDICT:?}")
}

#[allow(clippy::print_stdout)]
fn detection(trials: usize) -> anyhow::Result<()> {
    // 24 pulls of 6 cables in a few minutes would rightly be called
    // flapping; the benchmark times the down verdict, so flap detection is
    // turned off as in the demo's detection benchmark.
    let options = Options {
        alertmanager: true,
        extra_config: "[thresholds]\nflap_changes = 100\n".to_owned(),
        log_level: "warn".to_owned(),
    };
    let mut lab = lab("bench", 4, &options)?;
    lab.start_alertmanager()?;
    let mut events = Events::new();
    for id in lab.ids() {
        events.watch(&lab, id)?;
    }
    std::thread::sleep(Duration::from_secs(2));
    let cables: Vec<(&str, &str)> = lab
        .plan
        .cables
        .iter()
        .map(|c| (c.a.node, c.b.node))
        .collect();
    let (mut first, mut every, mut alert) = (Vec::new(), Vec::new(), Vec::new());
    for trial in 0..trials {
        let (x, y) = cables[trial % cables.len()];
        events.drain();
        let t0 = SystemTime::now();
        lab.pull_cable(x, y)?;
        let mut seen: BTreeMap<String, f64> = BTreeMap::new();
        let deadline = Instant::now() + VERDICT;
        while seen.len() < lab.plan.nodes.len() && Instant::now() < deadline {
            if let Some(e) = events.next(Duration::from_millis(100))
                && e.kind == "link_down"
                && e.is_about_link(x, y)
                && e.at >= t0
            {
                seen.entry(e.observer.clone()).or_insert(since(t0, e.at));
            }
        }
        if seen.len() < lab.plan.nodes.len() {
            bail!("trial {trial}: {x}-{y} down only on {seen:?}");
        }
        let received = alertmanager_receipt(&lab, x, y)?;
        first.push(seen.values().copied().fold(f64::INFINITY, f64::min));
        every.push(seen.values().copied().fold(0.0, f64::max));
        alert.push(since(t0, received));
        println!(
            "trial {trial:2} {x}-{y}: first {:.0} ms, every {:.0} ms, alertmanager {:.0} ms",
            first[trial], every[trial], alert[trial]
        );
        lab.plug_cable(x, y)?;
        lab.wait_all("all up again", SETTLE, Status::all_up)?;
        let started = Instant::now();
        while !lab
            .alertmanager_alerts(&["alertname=MeshLinkDown"])?
            .is_empty()
        {
            if started.elapsed() > SETTLE {
                bail!("MeshLinkDown not resolved in Alertmanager");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    print_latencies(&[
        ("first node", first),
        ("every node", every),
        ("Alertmanager (received)", alert),
    ]);
    lab.teardown()?;
    Ok(())
}

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
fn chaos(seconds: u64) -> anyhow::Result<()> {
    const ROUND: Duration = Duration::from_secs(25);
    const HOLD: Duration = Duration::from_secs(12);
    const RESTART_GRACE: Duration = Duration::from_secs(5);
    let options = Options {
        log_level: "warn".to_owned(),
        ..Options::default()
    };
    let mut lab = lab("chaos", 4, &options)?;
    let mut events = Events::new();
    for id in lab.ids() {
        events.watch(&lab, id)?;
    }
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    let clock = CpuClock::detect()?;
    let ids = lab.ids();
    let mut injected = Vec::new();
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() + ROUND <= Duration::from_secs(seconds) {
        let node = ids[round % ids.len()];
        let from = SystemTime::now();
        let what = [Chaos::Hogs, Chaos::Restart, Chaos::Storm][round % 3];
        let (proof, happened) = match what {
            Chaos::Hogs => hog_round(&mut lab, clock, node, cores, HOLD)?,
            Chaos::Restart => restart_round(&mut lab, &mut events, node, RESTART_GRACE)?,
            Chaos::Storm => storm_round(&lab, node, HOLD)?,
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
    let wall = started.elapsed();
    let all: Vec<Event> = events.drain();
    // A restart takes its node down on purpose: the node verdicts about it
    // (and its links' verdicts blamed on it) are caused by the fault, and
    // so is what the restarted node says of the others while it starts. A
    // link verdict blamed on a link is false whenever it comes.
    let caused = |e: &Event| {
        injected.iter().any(|i| {
            i.what == Chaos::Restart
                && (i.from..=i.to).contains(&e.at)
                && (e.blames_a_node(i.node)
                    || (e.observer == i.node && e.kind.starts_with("node_")))
        })
    };
    let verdicts: Vec<&Event> = all.iter().filter(|e| e.is_link_or_node_verdict()).collect();
    let false_verdicts: Vec<&Event> = verdicts.iter().copied().filter(|e| !caused(e)).collect();
    let during = |e: &Event| {
        injected
            .iter()
            .position(|i| (i.from..=i.to).contains(&e.at))
    };

    println!("{}\n", clock.describe());
    println!(
        "| round | injected | node | proof it happened | false verdicts |\n|---:|---|---|---|---:|"
    );
    for (n, i) in injected.iter().enumerate() {
        let false_here = false_verdicts
            .iter()
            .filter(|e| during(e) == Some(n))
            .count();
        println!(
            "| {} | {} | {} | {} | {false_here} |",
            n + 1,
            i.what.name(),
            i.node,
            i.proof
        );
    }
    println!(
        "\n| injected | rounds | happened | false verdicts during them |\n|---|---:|---:|---:|"
    );
    let mut by_fault: BTreeMap<Chaos, (usize, usize, usize)> = BTreeMap::new();
    for (n, i) in injected.iter().enumerate() {
        let row = by_fault.entry(i.what).or_default();
        row.0 += 1;
        row.1 += usize::from(i.happened);
        row.2 += false_verdicts
            .iter()
            .filter(|e| during(e) == Some(n))
            .count();
    }
    for (what, (rounds, happened, false_n)) in &by_fault {
        println!("| {} | {rounds} | {happened} | {false_n} |", what.name());
    }
    println!("\n| false verdict kind | count |\n|---|---:|");
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &false_verdicts {
        *by_kind.entry(e.kind.as_str()).or_default() += 1;
    }
    for (kind, n) in &by_kind {
        println!("| {kind} | {n} |");
    }
    let not_happened = injected.iter().filter(|i| !i.happened).count();
    println!(
        "\nrun: {:.0} s, events seen: {}, link/node verdicts: {} (caused by a restart: {}), false: {}, rounds whose fault did not happen: {not_happened}",
        wall.as_secs_f64(),
        all.len(),
        verdicts.len(),
        verdicts.len() - false_verdicts.len(),
        false_verdicts.len()
    );
    for e in &false_verdicts {
        let when = during(e)
            .and_then(|n| injected.get(n))
            .map_or("between faults".to_owned(), |i| {
                format!("{} on {}", i.what.name(), i.node)
            });
        println!(
            "  false: {} seen by {}: {} ({when})",
            e.kind, e.observer, e.summary
        );
    }
    lab.teardown()?;
    Ok(())
}

/// The 1-minute load average.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The clock ticks `/proc/PID/stat` counts CPU time in.
fn ticks_per_second() -> anyhow::Result<f64> {
    command::run("getconf", &["CLK_TCK"], QUICK)?
        .trim()
        .parse()
        .context("CLK_TCK")
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read(&path).with_context(|| format!("reading {path}"))?;
    parse_stat(&stat)
        .with_context(|| format!("parsing {path}"))
        .map(|stat| stat.cpu_ticks)
}

/// How a process's CPU time over a window is measured, the same way for
/// every process of a run.
///
/// utime and stime in `/proc/PID/stat` come in whole clock ticks (10 ms at
/// 100 a second): a daemon using 0.5 % of a core gets about 30 a minute,
/// too coarse for the 5–10 % differences the cost bench is for. The
/// process's CPU-time clock (`clock_getcpuclockid`) counts the scheduler's
/// run time of all its threads, those that exited included, in
/// nanoseconds; it is used wherever the kernel gives it, the ticks only
/// where it does not.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CpuClock {
    /// The process's CPU-time clock, in ns.
    Process,
    /// utime + stime of the process, `hz` clock ticks a second.
    Ticks { hz: f64 },
}

impl CpuClock {
    /// The process clock where this kernel gives it (judged on this
    /// process), the ticks otherwise.
    fn detect() -> anyhow::Result<Self> {
        if process_cpu_ns(std::process::id()).is_ok() {
            Ok(Self::Process)
        } else {
            Ok(Self::Ticks {
                hz: ticks_per_second()?,
            })
        }
    }

    /// The output line saying how CPU was measured.
    fn describe(self) -> &'static str {
        match self {
            Self::Process => {
                "CPU: the processes' CPU-time clocks (clock_getcpuclockid), ns precision"
            }
            Self::Ticks { .. } => {
                "CPU: utime+stime clock ticks (no process CPU-time clock), ±1 tick per process"
            }
        }
    }

    /// The CPU time process `pid` has used so far, in this clock's unit.
    fn sample(self, pid: u32) -> anyhow::Result<u64> {
        match self {
            Self::Process => process_cpu_ns(pid),
            Self::Ticks { .. } => cpu_ticks(pid),
        }
    }

    /// Seconds of CPU in `used` units of this clock.
    fn seconds(self, used: u64) -> f64 {
        match self {
            Self::Process => used as f64 / 1e9,
            Self::Ticks { hz } => used as f64 / hz,
        }
    }

    /// The heading of the column showing a window's `used` units.
    fn column(self) -> &'static str {
        match self {
            Self::Process => "CPU ms",
            Self::Ticks { .. } => "ticks",
        }
    }

    /// `used` units of this clock, for [`Self::column`].
    fn amount(self, used: u64) -> String {
        match self {
            Self::Process => format!("{:.1}", used as f64 / 1e6),
            Self::Ticks { .. } => used.to_string(),
        }
    }
}

/// The CPU time process `pid` has used so far, in ns, from its CPU-time
/// clock.
#[cfg(target_os = "linux")]
fn process_cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let process = nix::unistd::Pid::from_raw(
        i32::try_from(pid).with_context(|| format!("pid {pid} is out of range"))?,
    );
    let clock = nix::time::clock_getcpuclockid(process)
        .with_context(|| format!("no CPU-time clock for process {pid}"))?;
    let now = nix::time::clock_gettime(clock)
        .with_context(|| format!("reading the CPU-time clock of process {pid}"))?;
    let ns = i128::from(now.tv_sec()) * 1_000_000_000 + i128::from(now.tv_nsec());
    u64::try_from(ns).with_context(|| format!("process {pid}: CPU time {ns} ns"))
}

/// The lab runs on Linux only; elsewhere there is no other process's
/// CPU-time clock to read (macOS has no `clock_getcpuclockid`).
#[cfg(not(target_os = "linux"))]
fn process_cpu_ns(pid: u32) -> anyhow::Result<u64> {
    anyhow::bail!("no CPU-time clock for process {pid} on this OS")
}

/// A `/proc/PID/status` value in kB, as MB (10⁶ bytes).
fn status_mb(pid: u32, key: &str) -> anyhow::Result<f64> {
    Ok(status_field(&format!("/proc/{pid}/status"), key)? * 1024.0 / 1e6)
}

/// The first number after `key` in a `status` file.
fn status_field(path: &str, key: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(path)?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .with_context(|| format!("{key} in {path}"))?
        .parse()?)
}

/// How often the main thread (meshd's one runtime thread) has gone to
/// sleep and been woken: its voluntary context switches.
fn wake_ups(pid: u32) -> anyhow::Result<f64> {
    status_field(
        &format!("/proc/{pid}/task/{pid}/status"),
        "voluntary_ctxt_switches:",
    )
}

/// How many times node `id`'s engine has looked (evaluated) so far.
fn looks(lab: &Lab, id: &str) -> anyhow::Result<f64> {
    let metrics = fetch_metrics(lab, id)?;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("meshd_evaluation_duration_seconds_count "))
        .context("no meshd_evaluation_duration_seconds_count")?
        .trim()
        .parse()
        .context("meshd_evaluation_duration_seconds_count")
}

/// Debian's `prometheus-smokeping-prober`, the pinger meshd's cost is
/// compared with.
const SMOKEPING_PROBER: &str = "prometheus-smokeping-prober";

/// A smokeping_prober in every node's namespace, pinging the far end of
/// each of its cables every 100 ms (ICMP, privileged): what a user would
/// run instead of meshd to watch the same cables. Killed on drop.
struct Pingers {
    children: Vec<(&'static str, std::process::Child)>,
}

impl Pingers {
    /// `None`, with the reason printed, where the prober is not installed.
    #[allow(clippy::print_stdout)]
    fn start(lab: &Lab) -> anyhow::Result<Option<Self>> {
        let installed = std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|dir| dir.join(SMOKEPING_PROBER).is_file())
        });
        if !installed {
            println!(
                "{SMOKEPING_PROBER} is not installed (Debian: apt-get install {SMOKEPING_PROBER}): meshd alone\n"
            );
            return Ok(None);
        }
        // The package's own config pings localhost: none of that here.
        let config = lab.state_dir().join("smokeping_prober.yml");
        std::fs::write(&config, "targets: []\n")?;
        let mut pingers = Self {
            children: Vec::new(),
        };
        for id in lab.ids() {
            let peers: Vec<String> = lab
                .plan
                .cables
                .iter()
                .filter_map(|cable| cable.ends_from(id))
                .map(|(_, far)| far.address.to_string())
                .collect();
            let log = std::fs::File::create(lab.state_dir().join(format!("smokeping-{id}.log")))?;
            let child = std::process::Command::new("ip")
                .args(["netns", "exec", lab.namespace(id)?, SMOKEPING_PROBER])
                .arg(format!("--config.file={}", config.display()))
                .args(["--privileged", "-i", "100ms", "--log.level=warn"])
                .arg("--web.listen-address=127.0.0.1:9374")
                .args(&peers)
                .stdin(std::process::Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("starting {SMOKEPING_PROBER} in {id}"))?;
            pingers.children.push((id, child));
        }
        Ok(Some(pingers))
    }

    /// `ip netns exec` execs the prober: the child's pid is the prober's.
    fn pids(&self) -> Vec<(&'static str, u32)> {
        self.children.iter().map(|(id, c)| (*id, c.id())).collect()
    }
}

impl Drop for Pingers {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The series on node `id`'s `/metrics`, and the three biggest families.
fn series_count(lab: &Lab, id: &str) -> anyhow::Result<(usize, Vec<(String, usize)>)> {
    let body = fetch_metrics(lab, id)?;
    let mut families: BTreeMap<String, usize> = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        *families.entry(name.to_owned()).or_default() += 1;
    }
    let total = families.values().sum();
    let mut biggest: Vec<(String, usize)> = families.into_iter().collect();
    biggest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    biggest.truncate(3);
    Ok((total, biggest))
}

#[allow(clippy::print_stdout)]
fn cost(nodes: usize, seconds: u64, warmup: u64) -> anyhow::Result<()> {
    let options = Options {
        log_level: "warn".to_owned(),
        ..Options::default()
    };
    let mut lab = lab("cost", nodes, &options)?;
    let clock = CpuClock::detect()?;
    let pingers = Pingers::start(&lab)?;
    std::thread::sleep(Duration::from_secs(warmup));
    let mut pids = Vec::new();
    for id in lab.ids() {
        pids.push((id, lab.daemon_pid(id)?));
    }
    let pinger_pids = pingers.as_ref().map(Pingers::pids).unwrap_or_default();
    let load_before = load_average();
    let t0 = Instant::now();
    let before: Vec<u64> = pids
        .iter()
        .map(|&(_, p)| clock.sample(p))
        .collect::<Result<_, _>>()?;
    let pingers_before: Vec<u64> = pinger_pids
        .iter()
        .map(|&(_, p)| clock.sample(p))
        .collect::<Result<_, _>>()?;
    let wakes_before: Vec<f64> = pids
        .iter()
        .map(|&(_, p)| wake_ups(p))
        .collect::<Result<_, _>>()?;
    let looks_before: Vec<f64> = pids
        .iter()
        .map(|&(id, _)| looks(&lab, id))
        .collect::<Result<_, _>>()?;
    std::thread::sleep(Duration::from_secs(seconds));
    let wall = t0.elapsed().as_secs_f64();
    let percent = |used: u64| clock.seconds(used) / wall * 100.0;
    println!("{}\n", clock.describe());
    println!(
        "| node | CPU, % of one core | {} | wake-ups/s | looks/s | VmRSS | VmHWM |\n|---|---:|---:|---:|---:|---:|---:|",
        clock.column()
    );
    let (mut cpus, mut rsss) = (Vec::new(), Vec::new());
    for ((((id, pid), start), wakes), looked) in
        pids.iter().zip(before).zip(wakes_before).zip(looks_before)
    {
        let used = clock.sample(*pid)?.saturating_sub(start);
        let cpu = percent(used);
        let amount = clock.amount(used);
        let wakes = (wake_ups(*pid)? - wakes) / wall;
        let looked = (looks(&lab, id)? - looked) / wall;
        let rss = status_mb(*pid, "VmRSS:")?;
        let hwm = status_mb(*pid, "VmHWM:")?;
        println!(
            "| {id} | {cpu:.3} % | {amount} | {wakes:.1} | {looked:.2} | {rss:.1} MB | {hwm:.1} MB |"
        );
        cpus.push(cpu);
        rsss.push(rss);
    }
    let mean = cpus.iter().sum::<f64>() / cpus.len() as f64;
    println!(
        "\n{nodes} nodes, {wall:.1} s window after {warmup} s warm-up: CPU mean {mean:.3} %, max {:.3} %; RSS max {:.1} MB; load average before {} after {}",
        cpus.iter().copied().fold(0.0, f64::max),
        rsss.iter().copied().fold(0.0, f64::max),
        load_before,
        load_average(),
    );
    if !pinger_pids.is_empty() {
        println!(
            "\n| node | meshd | {SMOKEPING_PROBER} -i 100ms | meshd / prober |\n|---|---:|---:|---:|"
        );
        let mut pinger_cpus = Vec::new();
        for (((id, pid), start), meshd) in pinger_pids.iter().zip(pingers_before).zip(&cpus) {
            let cpu = percent(clock.sample(*pid)?.saturating_sub(start));
            println!("| {id} | {meshd:.3} % | {cpu:.3} % | {:.2} |", meshd / cpu);
            pinger_cpus.push(cpu);
        }
        let pinger_mean = pinger_cpus.iter().sum::<f64>() / pinger_cpus.len() as f64;
        println!(
            "\nmean: meshd {mean:.3} %, {SMOKEPING_PROBER} {pinger_mean:.3} %, ratio {:.2}",
            mean / pinger_mean
        );
    }
    drop(pingers);
    if let Some(first) = lab.ids().first().copied() {
        let (total, biggest) = series_count(&lab, first)?;
        let biggest: Vec<String> = biggest.iter().map(|(f, n)| format!("{f} {n}")).collect();
        println!(
            "\nseries on {first}'s /metrics: {total} (biggest families: {})",
            biggest.join(", ")
        );
    }
    lab.teardown()?;
    Ok(())
}

/// The gauge `meshd_link_rtt_p50_seconds{peer, iface}` in seconds: exact
/// over meshd's last 10 s of probes; None when absent or NaN.
fn rtt_p50(metrics: &str, peer: &str) -> Option<f64> {
    let series = format!("meshd_link_rtt_p50_seconds{{peer=\"{peer}\"");
    metrics
        .lines()
        .find(|l| {
            l.strip_prefix(&series)
                .is_some_and(|rest| rest.starts_with(',') || rest.starts_with('}'))
        })?
        .rsplit(' ')
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

fn fetch_metrics(lab: &Lab, id: &str) -> anyhow::Result<String> {
    let me = std::env::current_exe()?;
    let addr = format!("127.0.0.1:{METRICS_PORT}");
    Ok(lab.exec(id, &me.to_string_lossy(), &["fetch-metrics", &addr])?)
}

#[allow(clippy::print_stdout)]
fn accuracy(seconds: u64) -> anyhow::Result<()> {
    let options = Options {
        log_level: "warn".to_owned(),
        ..Options::default()
    };
    let mut lab = lab("acc", 2, &options)?;
    let cable = lab.plan.cable("a", "b")?.clone();
    std::thread::sleep(Duration::from_secs(5));
    // Same cable, same ten packets a second as meshd's small probes.
    let count = (seconds * 10).to_string();
    let ns = lab.namespace("a")?.to_owned();
    let peer = cable.b.address.to_string();
    let ping_args = [
        "netns", "exec", &ns, "ping", "-n", "-i", "0.1", "-c", &count, "-s", "64", &peer,
    ];
    // meshd's gauge covers its last WINDOW of probes: read it once per
    // window while ping runs, so the readings cover the run without overlap.
    let (pinged, mut meshd_us) = std::thread::scope(|scope| {
        let ping =
            scope.spawn(|| command::run("ip", &ping_args, Duration::from_secs(seconds + 30)));
        let mut readings = Vec::new();
        for _ in 0..seconds / WINDOW.as_secs() {
            std::thread::sleep(WINDOW);
            let metrics = fetch_metrics(&lab, "a")?;
            if let Some(p50) = rtt_p50(&metrics, "b") {
                readings.push(p50 * 1e6);
            }
        }
        let pinged = ping
            .join()
            .map_err(|_| anyhow::anyhow!("ping thread panicked"))??;
        anyhow::Ok((pinged, readings))
    })?;
    let mut ping_us: Vec<f64> = pinged
        .lines()
        .filter_map(|l| {
            l.split("time=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .map(|ms| ms * 1000.0)
        .collect();
    ping_us.sort_by(f64::total_cmp);
    meshd_us.sort_by(f64::total_cmp);
    if meshd_us.is_empty() {
        bail!("no meshd RTT p50 in the window");
    }
    let meshd_p50 = percentile(&meshd_us, 50.0);
    let ping_p50 = percentile(&ping_us, 50.0);
    println!("| pinger | samples | RTT p50 |\n|---|---:|---:|");
    println!(
        "| meshd (median of its exact p50s, {:.1}–{:.1} µs) | {} windows of {} s | {meshd_p50:.1} µs |",
        meshd_us[0],
        meshd_us[meshd_us.len() - 1],
        meshd_us.len(),
        WINDOW.as_secs(),
    );
    println!("| iputils ping | {} | {ping_p50:.1} µs |", ping_us.len());
    println!(
        "\ndifference: {:.1} µs ({}s side by side on cable a-b)",
        meshd_p50 - ping_p50,
        seconds
    );
    lab.teardown()?;
    Ok(())
}

#[allow(clippy::print_stdout)]
fn fetch(addr: &str) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(QUICK))?;
    stream.set_write_timeout(Some(QUICK))?;
    stream.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let body = raw.split_once("\r\n\r\n").context("HTTP response")?.1;
    print!("{body}");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().bench {
        Bench::Detection { trials } => detection(trials),
        Bench::Chaos { seconds } => chaos(seconds),
        Bench::Cost {
            nodes,
            seconds,
            warmup,
        } => cost(nodes, seconds, warmup),
        Bench::Accuracy { seconds } => accuracy(seconds),
        Bench::Hostile { scenario } => hostile(&scenario),
        Bench::Rdma { seconds } => rdma(seconds),
        Bench::FetchMetrics { addr } => fetch(&addr),
        Bench::PeakRss { command } => {
            std::process::exit(meshd_lab::hostile::peak_rss(&command)?);
        }
    }
}

#[allow(clippy::print_stdout)]
fn rdma(seconds: u64) -> anyhow::Result<()> {
    if let Some(reason) = meshd_lab::vm::missing_prerequisite() {
        bail!("VMs cannot run here: {reason}");
    }
    let rows = meshd_lab::vm::rtt::rdma_beside_udp(&Binaries::beside_current_exe()?, seconds)?;
    println!("| path | measured by | samples | min | median | max |");
    println!("|---|---|---:|---:|---:|---:|");
    for row in rows {
        let mut sorted = row.samples_us.clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "| {} | {} | {} | {:.0} µs | {:.0} µs | {:.0} µs |",
            row.path,
            row.how,
            sorted.len(),
            sorted.first().copied().unwrap_or(f64::NAN),
            percentile(&sorted, 50.0),
            sorted.last().copied().unwrap_or(f64::NAN),
        );
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn hostile(scenario: &std::path::Path) -> anyhow::Result<()> {
    use meshd_lab::hostile;
    let bin = Binaries::beside_current_exe()?;
    let mut rows = hostile::dev_zero_bundle(&bin, scenario)?;
    rows.extend(hostile::hostfile(&bin)?);
    rows.extend(hostile::idle_flood(&bin)?);
    println!("| what | measured | target |");
    println!("|---|---|---|");
    for row in rows {
        println!("| {} | {} | {} |", row.what, row.figure, row.target);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_p50_gauge_is_read_per_peer() {
        let metrics = "# TYPE meshd_link_rtt_p50_seconds gauge
meshd_link_rtt_p50_seconds{peer=\"b\",iface=\"veth0\"} 0.0000545
meshd_link_rtt_p50_seconds{peer=\"bb\",iface=\"veth1\"} 0.1
meshd_link_rtt_p99_seconds{peer=\"b\",iface=\"veth0\"} 0.00009
meshd_link_rtt_p50_seconds{peer=\"c\",iface=\"\"} NaN
";
        assert_eq!(rtt_p50(metrics, "b"), Some(0.000_054_5));
        assert_eq!(rtt_p50(metrics, "bb"), Some(0.1));
        assert_eq!(rtt_p50(metrics, "c"), None);
        assert_eq!(rtt_p50(metrics, "d"), None);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 99.0), 4.0);
    }

    #[test]
    fn this_process_cpu_time_grows_while_it_works() {
        let clock = CpuClock::detect().unwrap();
        let pid = std::process::id();
        let before = clock.sample(pid).unwrap();
        // Work until the clock has counted some of it, however busy the
        // host is (the tick fallback counts in 10 ms steps).
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut x = 0_u64;
        let grew = loop {
            let slice = Instant::now();
            while slice.elapsed() < Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
            let used = clock.sample(pid).unwrap().saturating_sub(before);
            if used > 0 || Instant::now() > deadline {
                break used;
            }
        };
        assert!(grew > 0, "no CPU time counted in 20 s of work");
        assert!(clock.seconds(grew) > 0.0);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_process_that_is_not_there_is_an_error_naming_it() {
        // Above pid_max (at most 2^22): no such process.
        let pid = 1 << 23;
        let error = CpuClock::Process.sample(pid).unwrap_err();
        assert!(format!("{error:#}").contains(&pid.to_string()), "{error:#}");
        let error = process_cpu_ns(u32::MAX).unwrap_err();
        assert!(format!("{error:#}").contains("out of range"), "{error:#}");
    }
}
