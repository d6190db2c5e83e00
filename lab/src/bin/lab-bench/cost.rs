//! `lab-bench cost`: what every daemon costs in CPU, wake-ups, looks and
//! memory, beside smokeping_prober watching the same cables.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use meshd_lab::{Lab, Options};

use crate::cpu::{CpuClock, load_average};
use crate::lab;
use crate::metrics::fetch_metrics;

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
pub(crate) fn run(nodes: usize, seconds: u64, warmup: u64) -> anyhow::Result<()> {
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
