//! `lab-bench detection`: how long a pulled cable takes to become a
//! link-down verdict on every node, and an alert in Alertmanager.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::bail;
use meshd_lab::events::Events;
use meshd_lab::{Lab, Options, Status};

use crate::latency::{Column, print_latencies, since};
use crate::{SETTLE, lab};

const VERDICT: Duration = Duration::from_secs(10);

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
pub(crate) fn run(trials: usize) -> anyhow::Result<()> {
    // 24 pulls of 6 cables in a few minutes would rightly be called
    // flapping; the benchmark times the down verdict, so flap detection is
    // turned off as in the demo's detection benchmark.
    let options = Options {
        alertmanager: true,
        extra_config: "[thresholds]\nflap_changes = 100\n".to_owned(),
        log_level: "warn".to_owned(),
        ..Options::default()
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
    print_latencies(
        "verdict on",
        &[
            Column::P(50.0),
            Column::P(90.0),
            Column::P(99.0),
            Column::Max,
        ],
        &[
            ("first node", first),
            ("every node", every),
            ("Alertmanager (received)", alert),
        ],
    );
    lab.teardown()?;
    Ok(())
}
