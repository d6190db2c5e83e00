//! `lab-bench accuracy`: meshd's RTT p50 on one cable beside iputils
//! ping's.

use std::time::Duration;

use anyhow::bail;
use meshd_lab::Options;
use meshd_lab::command;

use crate::metrics::{fetch_metrics, rtt_p50};
use crate::{lab, percentile};

/// meshd's RTT quantile window (RTT_WINDOW in daemon/src/model/linkstats.rs).
const WINDOW: Duration = Duration::from_secs(10);

#[allow(clippy::print_stdout)]
pub(crate) fn run(seconds: u64) -> anyhow::Result<()> {
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
