//! This node's platform facts: ports, Thunderbolt peers, negotiated speeds,
//! RDMA state, addresses and bridges, read through the platform layer every
//! `platform.facts_interval` and right after a config change, with the
//! node's own checks run on them.
//!
//! Failing checks that break jobs (RDMA off, a slow cable) are raised as
//! alarms too ([`crate::model::check_alarms`]).
//!
//! Reading runs commands (`system_profiler` takes about a second) and sysfs,
//! so it runs on the blocking pool; every command has its own timeout in
//! the platform layer, and this task never waits for more than one read at
//! a time.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_platform::mesh::checks::node_checks;
use meshd_platform::mesh::models::ModelTable;
use meshd_platform::source::{LiveSource, ReplaySource, Source};
use meshd_proto::domain::{Alarm, NodeId};
use meshd_proto::facts::{NodeFacts, OsKind};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, PlatformConfig};
use crate::metrics::Metrics;
use crate::model::check_alarms::alarms_from_checks;

/// The latest facts; `None` until the first read finished.
pub type FactsFeed = watch::Receiver<Option<Arc<NodeFacts>>>;

#[derive(Debug, Clone)]
pub struct FactsWatch {
    pub facts: FactsFeed,
    /// Alarms from this node's failing checks.
    pub alarms: watch::Receiver<Vec<Alarm>>,
}

pub fn spawn(
    node: NodeId,
    mut configs: watch::Receiver<Arc<Config>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> FactsWatch {
    let (tx, rx) = watch::channel(None);
    let (alarms_tx, alarms_rx) = watch::channel(Vec::new());
    tokio::spawn(async move {
        let models = Arc::new(ModelTable::builtin());
        let mut platform = configs.borrow_and_update().platform.clone();
        loop {
            let started = Instant::now();
            let read = {
                let (node, platform, models) = (node.clone(), platform.clone(), models.clone());
                tokio::task::spawn_blocking(move || read_facts(&node, &platform, &models))
            };
            match read.await {
                Ok(facts) => {
                    let took = started.elapsed();
                    if took > SLOW_READ {
                        tracing::warn!(took = ?took, "reading platform facts was slow");
                    }
                    metrics.record_facts(&facts, took);
                    for spot in &facts.blind_spots {
                        tracing::debug!(blind_spot = %spot, "platform fact not available");
                    }
                    let held = alarms_tx.borrow().clone();
                    alarms_tx.send_replace(alarms_from_checks(
                        &node,
                        &facts.checks,
                        &held,
                        SystemTime::now(),
                    ));
                    tx.send_replace(Some(Arc::new(facts)));
                }
                Err(err) => tracing::warn!("reading platform facts failed: {err}"),
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(platform.facts_interval) => {}
                changed = configs.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    platform = configs.borrow_and_update().platform.clone();
                }
            }
        }
    });
    FactsWatch {
        facts: rx,
        alarms: alarms_rx,
    }
}

/// One read of this node's facts, with its own checks. A replay directory
/// that vanished since the config was validated becomes a blind spot, not
/// a crash.
pub fn read_facts(node: &NodeId, platform: &PlatformConfig, models: &ModelTable) -> NodeFacts {
    let mut facts = match &platform.replay_dir {
        None => meshd_platform::collect(&LiveSource, meshd_platform::this_os()),
        Some(dir) => match ReplaySource::open(dir) {
            Ok(source) => {
                let os = meshd_platform::bundle::os_of(source.dir());
                meshd_platform::collect(&source as &dyn Source, os)
            }
            Err(err) => NodeFacts {
                os: OsKind::Other,
                source: format!("replay:{}", dir.display()),
                blind_spots: vec![format!(
                    "cannot read the replay directory {}: {err}",
                    dir.display()
                )],
                ..NodeFacts::default()
            },
        },
    };
    facts.checks = node_checks(node, &facts, models);
    facts
}

/// Reads slower than this are logged: the facts interval is tens of seconds,
/// and a read that takes a large part of it points at a hanging command.
const SLOW_READ: Duration = Duration::from_secs(10);
