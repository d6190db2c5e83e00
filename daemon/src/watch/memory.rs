//! Reads this node's memory every `watch.memory.interval` (macOS `vm_stat`
//! and `sysctl`, Linux `/proc/meminfo` and `/proc/pressure/memory`, or the
//! replay directory's), keeps the memory metrics, and raises
//! `memory_pressure` and `wired_memory_leak` ([`meshd_model::memory`]),
//! the latter knowing from the CPU watcher's latest sample whether a job
//! process runs.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use meshd_model::time::Moment;

use meshd_domain::facts::MemoryFacts;
use meshd_domain::{Alarm, NodeId};
use meshd_model::jobs::is_job;
use meshd_model::memory::{JobsRunning, MemoryWatch};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cadence;
use crate::config::{Config, settings};
use crate::metrics::Metrics;
use crate::watch::facts::with_source;
use crate::watch::{Wake, next_wake, publish};
use meshd_model::job_watch::Sampled;

/// Runs until shutdown; publishes the active memory alarms.
pub fn spawn(
    node: NodeId,
    mut configs: watch::Receiver<Arc<Config>>,
    samples: watch::Receiver<Option<Arc<Sampled>>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> watch::Receiver<Vec<Alarm>> {
    let (alarms_tx, alarms) = watch::channel(Vec::new());
    tokio::spawn(async move {
        let mut config = configs.borrow_and_update().clone();
        let mut judge = MemoryWatch::new(node, settings::memory_rules(&config.watch.memory));
        let mut tick = cadence::every(config.watch.memory.interval);
        while let Some(wake) = next_wake(&mut tick, &mut configs, &shutdown).await {
            if let Wake::Reconfigured(new) = wake {
                config = new;
                judge.reconfigure(settings::memory_rules(&config.watch.memory));
                tick = cadence::every(config.watch.memory.interval);
                continue;
            }
            let platform = config.platform.clone();
            // `vm_stat` and `sysctl` are processes: off the runtime.
            let read = tokio::task::spawn_blocking(move || {
                let mut blind_spots = Vec::new();
                let memory = with_source(&platform, |source, os| {
                    meshd_platform::read_memory(source, os, &mut blind_spots)
                });
                (memory, blind_spots)
            })
            .await;
            let memory: Option<MemoryFacts> = match read {
                Ok((Ok(memory), blind_spots)) => {
                    for spot in &blind_spots {
                        tracing::debug!(blind_spot = %spot, "memory fact not available");
                    }
                    memory
                }
                Ok((Err(why), _)) => {
                    tracing::debug!("memory not read: {why}");
                    None
                }
                Err(err) => {
                    tracing::warn!("reading memory failed: {err}");
                    None
                }
            };
            metrics.watchers.record_memory(memory.as_ref());
            let jobs = samples.borrow().as_ref().map(|sampled| JobsRunning {
                names: sampled
                    .sample
                    .processes
                    .iter()
                    .filter(|p| is_job(p, &config.watch.jobs.patterns))
                    .map(|p| p.name.clone())
                    .collect(),
            });
            publish(
                &alarms_tx,
                judge.update(
                    memory.as_ref(),
                    jobs.as_ref(),
                    Moment {
                        now: Instant::now(),
                        wall: SystemTime::now(),
                    },
                ),
            );
        }
    });
    alarms
}
