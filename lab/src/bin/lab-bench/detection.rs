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

/// How a trial breaks its cable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Break {
    /// Pulled: the carrier goes at both ends, as a real unplug.
    Pull,
    /// Every frame dropped both ways at one end (nftables); the ports
    /// keep their carrier: a silent fault only probes can find.
    SilentDrop,
}

impl Break {
    fn name(self) -> &'static str {
        match self {
            Break::Pull => "pull",
            Break::SilentDrop => "silent drop",
        }
    }

    fn inject(self, lab: &Lab, x: &str, y: &str) -> anyhow::Result<()> {
        match self {
            Break::Pull => lab.pull_cable(x, y)?,
            Break::SilentDrop => lab.lose(x, y, 100)?,
        }
        Ok(())
    }

    /// Proves the fault happened as it should: a pull left no carrier at
    /// either end; a silent drop left both carriers and dropped frames.
    fn prove(self, lab: &Lab, x: &str, y: &str) -> anyhow::Result<()> {
        let carriers = (lab.carrier(x, y)?, lab.carrier(y, x)?);
        match self {
            Break::Pull if carriers != (false, false) => {
                bail!("pulled {x}-{y}, but the carriers are {carriers:?}")
            }
            Break::SilentDrop if carriers != (true, true) => {
                bail!("dropped on {x}-{y}, but the carriers are {carriers:?}")
            }
            Break::SilentDrop if lab.dropped_packets(x)? == 0 => {
                bail!("dropped on {x}-{y}, but nftables dropped nothing")
            }
            _ => Ok(()),
        }
    }

    fn undo(self, lab: &Lab, x: &str, y: &str) -> anyhow::Result<()> {
        match self {
            Break::Pull => lab.plug_cable(x, y)?,
            Break::SilentDrop => lab.clear_loss(x)?,
        }
        Ok(())
    }
}

/// One kind of break's figures, in ms from the break.
#[derive(Default)]
struct Figures {
    first: Vec<f64>,
    every: Vec<f64>,
    alert: Vec<f64>,
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
    let mut figures: BTreeMap<&str, Figures> = BTreeMap::new();
    for trial in 0..trials * 2 {
        // Alternate, so both kinds meet the same host load over the run.
        let how = if trial % 2 == 0 {
            Break::Pull
        } else {
            Break::SilentDrop
        };
        let (x, y) = cables[(trial / 2) % cables.len()];
        events.drain();
        let t0 = SystemTime::now();
        how.inject(&lab, x, y)?;
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
            bail!(
                "trial {trial} ({}): {x}-{y} down only on {seen:?}",
                how.name()
            );
        }
        how.prove(&lab, x, y)?;
        let received = alertmanager_receipt(&lab, x, y)?;
        let kind = figures.entry(how.name()).or_default();
        let first = seen.values().copied().fold(f64::INFINITY, f64::min);
        let every = seen.values().copied().fold(0.0, f64::max);
        let alert = since(t0, received);
        kind.first.push(first);
        kind.every.push(every);
        kind.alert.push(alert);
        println!(
            "trial {trial:2} {:<11} {x}-{y}: first {first:.0} ms, every {every:.0} ms, alertmanager {alert:.0} ms",
            how.name()
        );
        how.undo(&lab, x, y)?;
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
    for (name, f) in figures {
        println!();
        print_latencies(
            &format!("{name}: verdict on"),
            &[
                Column::P(50.0),
                Column::P(90.0),
                Column::P(99.0),
                Column::Max,
            ],
            &[
                ("first node", f.first),
                ("every node", f.every),
                ("Alertmanager (received)", f.alert),
            ],
        );
    }
    lab.teardown()?;
    Ok(())
}
