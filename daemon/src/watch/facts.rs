//! This node's platform facts: ports, Thunderbolt peers, negotiated speeds,
//! RDMA state, addresses and bridges, read through the platform layer every
//! `platform.facts_interval` and right after a config change, with the
//! node's own checks run on them.
//!
//! Failing checks that break jobs (RDMA off, a slow cable) are raised as
//! alarms too ([`meshd_model::check_alarms`]).
//!
//! On macOS it also reads again when the network configuration changes.
//!
//! The opt-in RDMA probe's reasons for not running (this node's stack does
//! not offer what it needs) are blind spots of these facts, added to the
//! last read as soon as they change, without reading again.
//!
//! Reading runs commands (`system_profiler` takes about a second) and sysfs,
//! so it runs on the blocking pool; every command has its own timeout in
//! the platform layer, and this task never waits for more than one read at
//! a time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::facts::{NodeFacts, OsKind};
use meshd_domain::{Alarm, Counter, NodeId};
use meshd_mesh::checks::node_checks;
use meshd_mesh::models::ModelTable;
use meshd_platform::counters::{CounterSample, CounterTracker};
use meshd_platform::linux::counters::read_port_counters;
use meshd_platform::source::{LiveSource, ReplaySource, Source};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, PlatformConfig};
use crate::logging::{REPEAT_INTERVAL, Throttle};
use crate::metrics::Metrics;
use crate::probe::rdma::{RdmaUnsupported, blind_spots};
use crate::watch::publish;
use meshd_model::check_alarms::alarms_from_checks;

/// The latest facts; `None` until the first read finished.
pub type FactsFeed = watch::Receiver<Option<Arc<NodeFacts>>>;

/// Each port's error counters (running totals, saturation flagged), by
/// port name.
pub type PortCounters = Arc<BTreeMap<String, Vec<Counter>>>;

#[derive(Debug, Clone)]
pub struct FactsWatch {
    pub facts: FactsFeed,
    /// Alarms from this node's failing checks.
    pub alarms: watch::Receiver<Vec<Alarm>>,
    pub counters: watch::Receiver<PortCounters>,
}

/// One read: the facts, and the raw counter samples of each RDMA port
/// (Linux sysfs; macOS exposes none).
#[derive(Debug)]
pub struct Reading {
    pub facts: NodeFacts,
    pub counter_samples: BTreeMap<String, Vec<CounterSample>>,
}

pub fn spawn(
    node: NodeId,
    mut configs: watch::Receiver<Arc<Config>>,
    mut rdma_unsupported: watch::Receiver<RdmaUnsupported>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> FactsWatch {
    let (tx, rx) = watch::channel(None);
    let (alarms_tx, alarms_rx) = watch::channel(Vec::new());
    let (counters_tx, counters_rx) = watch::channel(PortCounters::default());
    tokio::spawn(async move {
        let models = ModelTable::builtin();
        let mut trackers: BTreeMap<String, CounterTracker> = BTreeMap::new();
        let mut platform = configs.borrow_and_update().platform.clone();
        // On macOS a network change (a service switched, a bridge brought
        // back) is read at once, not a facts interval later.
        let (network_changed, mut network_changes) = tokio::sync::mpsc::channel(1);
        let _network_watch = (meshd_platform::this_os() == OsKind::Macos)
            .then(|| crate::watch::network::watch_network_config(network_changed));
        // Network changes can make reads come fast; their warnings do not.
        let mut warnings = Throttle::new(REPEAT_INTERVAL);
        let mut tick = crate::cadence::every(platform.facts_interval);
        // The facts as last read, before the RDMA probe's blind spots and
        // the checks, and how long that read took.
        let mut last: Option<(NodeFacts, Duration)> = None;
        loop {
            let started = Instant::now();
            let read = {
                let platform = platform.clone();
                tokio::task::spawn_blocking(move || read_facts(&platform))
            };
            match read.await {
                Ok(Reading {
                    facts,
                    counter_samples,
                }) => {
                    trackers.retain(|port, _| counter_samples.contains_key(port));
                    let counters = counter_samples
                        .iter()
                        .map(|(port, samples)| {
                            let tracker = trackers.entry(port.clone()).or_default();
                            tracker.observe(samples);
                            (port.clone(), error_counters(tracker.totals()))
                        })
                        .collect();
                    counters_tx.send_replace(Arc::new(counters));
                    let took = started.elapsed();
                    if took > SLOW_READ
                        && let Some(suppressed) = warnings.admit("slow", Instant::now())
                    {
                        tracing::warn!(took = ?took, suppressed, "reading platform facts was slow");
                    }
                    last = Some((facts, took));
                }
                Err(err) => {
                    if let Some(suppressed) = warnings.admit("failed", Instant::now()) {
                        tracing::warn!(suppressed, "reading platform facts failed: {err}");
                    }
                }
            }
            // Settles the last read with the RDMA probe's blind spots, then
            // again each time those change, until the next read is due.
            loop {
                if let Some((read, took)) = &last {
                    let probe_spots = blind_spots(&rdma_unsupported.borrow_and_update());
                    let facts = settle(&node, &models, read.clone(), probe_spots);
                    metrics.watchers.record_facts(
                        *took,
                        facts.blind_spots.len(),
                        facts.boot.booted_at_unix,
                    );
                    for spot in &facts.blind_spots {
                        tracing::debug!(blind_spot = %spot, "platform fact not available");
                    }
                    let held = alarms_tx.borrow().clone();
                    let alarms = alarms_from_checks(&node, &facts.checks, &held, SystemTime::now());
                    // Unchanged facts are not news: neither the aggregator
                    // nor the peers (who get facts when their `Arc` changes)
                    // hear them again.
                    publish(&alarms_tx, alarms);
                    publish(&tx, Some(Arc::new(facts)));
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = tick.tick() => break,
                    Some(()) = network_changes.recv() => break,
                    changed = configs.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        platform = configs.borrow_and_update().platform.clone();
                        tick = crate::cadence::every(platform.facts_interval);
                        break;
                    }
                    Ok(()) = rdma_unsupported.changed() => {}
                }
            }
        }
    });
    FactsWatch {
        facts: rx,
        alarms: alarms_rx,
        counters: counters_rx,
    }
}

/// The counters that count faults (the rest count traffic), so the link's
/// error series stay few and meaningful.
fn error_counters(totals: Vec<Counter>) -> Vec<Counter> {
    const FAULT_WORDS: &[&str] = &[
        "error",
        "discard",
        "drop",
        "downed",
        "recovery",
        "integrity",
        "overrun",
        "symbol",
    ];
    totals
        .into_iter()
        .filter(|c| FAULT_WORDS.iter().any(|w| c.name.contains(w)))
        .collect()
}

/// Runs `read` on where this node's platform text comes from: this host,
/// or `platform.replay_dir` (with the OS its files name). `Err` names a
/// replay directory that vanished since the config was validated.
pub fn with_source<T>(
    platform: &PlatformConfig,
    read: impl FnOnce(&dyn Source, OsKind) -> T,
) -> Result<T, String> {
    match &platform.replay_dir {
        None => Ok(read(&LiveSource, meshd_platform::this_os())),
        Some(dir) => match ReplaySource::open(dir) {
            Ok(source) => {
                let os = meshd_platform::bundle::os_of(source.dir());
                Ok(read(&source, os))
            }
            Err(err) => Err(format!(
                "cannot read the replay directory {}: {err}",
                dir.display()
            )),
        },
    }
}

/// One read of this node's facts, before its checks ([`settle`]). A replay
/// directory that vanished since the config was validated becomes a blind
/// spot, not a crash.
fn read_facts(platform: &PlatformConfig) -> Reading {
    with_source(platform, read_from).unwrap_or_else(|why| Reading {
        facts: NodeFacts {
            os: OsKind::Other,
            source: platform
                .replay_dir
                .as_ref()
                .map(|dir| format!("replay:{}", dir.display()))
                .unwrap_or_default(),
            blind_spots: vec![why],
            ..NodeFacts::default()
        },
        counter_samples: BTreeMap::new(),
    })
}

/// The facts as read, with the blind spots of what else this node cannot
/// see (`more`: the RDMA probe's), and its own checks run on them, so a
/// skipped check names them too.
fn settle(
    node: &NodeId,
    models: &ModelTable,
    mut facts: NodeFacts,
    more: Vec<String>,
) -> NodeFacts {
    facts.blind_spots.extend(more);
    facts.checks = node_checks(node, &facts, models);
    facts
}

fn read_from(source: &dyn Source, os: OsKind) -> Reading {
    let facts = meshd_platform::collect(source, os);
    let counter_samples = if os == OsKind::Linux {
        facts
            .ports
            .iter()
            .filter_map(|p| {
                let rdma = p.rdma.as_ref()?;
                let iface = (!p.iface.is_empty()).then_some(p.iface.as_str());
                let reading = read_port_counters(source, &p.rdma_device, rdma.port, iface);
                for problem in &reading.problems {
                    tracing::debug!(port = %p.name, "counter not read: {problem}");
                }
                Some((p.name.clone(), reading.samples))
            })
            .collect()
    } else {
        BTreeMap::new()
    };
    Reading {
        facts,
        counter_samples,
    }
}

/// Reads slower than this are logged: the facts interval is tens of seconds,
/// and a read that takes a large part of it points at a hanging command.
const SLOW_READ: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use meshd_domain::facts::CheckStatus;
    use meshd_domain::fixtures::id;

    use super::*;

    #[test]
    fn the_rdma_probes_blind_spots_join_the_facts_and_their_skipped_checks() {
        let read = NodeFacts {
            os: OsKind::Linux,
            blind_spots: vec!["boot id unknown".to_owned()],
            ..NodeFacts::default()
        };
        let spot = "the RDMA probe cannot run here (links to b), so their RDMA paths are not \
                    probed: no ibv_create_qp";
        let facts = settle(
            &id("a"),
            &ModelTable::builtin(),
            read.clone(),
            vec![spot.to_owned()],
        );
        assert_eq!(facts.blind_spots, ["boot id unknown", spot]);
        let skipped = facts
            .checks
            .iter()
            .find(|c| c.status == CheckStatus::Skipped)
            .expect("a Linux node skips the macOS checks");
        assert!(
            skipped.evidence.contains(&format!("blind spot: {spot}")),
            "{skipped:?}"
        );
        // Without it, the facts are the read's.
        let plain = settle(&id("a"), &ModelTable::builtin(), read, Vec::new());
        assert_eq!(plain.blind_spots, ["boot id unknown"]);
    }
}
