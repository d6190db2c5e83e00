//! Watches job ranks (MLX, exo) on every CPU sample: busy-waiting on a
//! dead peer or cable (`job_hung`, judged against the mesh status of the
//! same moment), outliving their launcher (`job_orphaned`), and moving no
//! RDMA data while the mesh is up (`job_stalled`; Linux, from the RDMA
//! ports' data counters, which macOS does not have).

use std::sync::Arc;

use meshd_domain::facts::{NodeFacts, OsKind};
use meshd_domain::{Alarm, MeshStatus, NodeId};
use meshd_model::jobs::{HungJobDetector, is_job, mesh_fault};
use meshd_model::orphans::OrphanDetector;
use meshd_model::stall::{DataCounters, StallDetector};
use meshd_platform::linux::counters::read_data_counters;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, PlatformConfig, settings};
use crate::metrics::Metrics;
use crate::watch::cpu::Sampled;
use crate::watch::facts::{FactsFeed, with_source};
use crate::watch::publish;

/// What the job watcher follows.
#[derive(Debug)]
pub struct JobFeeds {
    pub samples: watch::Receiver<Option<Arc<Sampled>>>,
    pub status: watch::Receiver<Arc<MeshStatus>>,
    pub facts: FactsFeed,
}

/// Runs until shutdown or until the CPU watcher stops; publishes the active
/// job alarms on `alarms`, which the caller created before the aggregator
/// so the aggregator could take its receiver.
pub fn spawn(
    node: NodeId,
    mut configs: watch::Receiver<Arc<Config>>,
    mut feeds: JobFeeds,
    alarms: watch::Sender<Vec<Alarm>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        let mut config = configs.borrow_and_update().clone();
        let jobs = &config.watch.jobs;
        let mut hung = HungJobDetector::new(node.clone(), &settings::job_rules(jobs));
        let mut orphans = OrphanDetector::new(node.clone(), settings::orphan_rules(jobs));
        let mut stalls = StallDetector::new(node.clone(), settings::stall_rules(jobs));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = feeds.samples.changed() => if changed.is_err() { return },
                changed = configs.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    config = configs.borrow_and_update().clone();
                    let jobs = &config.watch.jobs;
                    hung.reconfigure(&settings::job_rules(jobs));
                    orphans.reconfigure(settings::orphan_rules(jobs));
                    stalls.reconfigure(settings::stall_rules(jobs));
                    continue;
                }
            }
            let Some(sampled) = feeds.samples.borrow_and_update().clone() else {
                continue;
            };
            let mesh = feeds.status.borrow().clone();
            let processes = &sampled.sample.processes;
            let (mut active, counts) = hung.update(processes, Some(&mesh), sampled.at);
            let (orphaned, held) = orphans.update(processes, sampled.at.wall);
            active.extend(orphaned);
            let facts = feeds.facts.borrow().clone();
            let counters = match facts {
                Some(facts) => {
                    let platform = config.platform.clone();
                    tokio::task::spawn_blocking(move || data_counters(&platform, &facts))
                        .await
                        .unwrap_or_else(|err| {
                            tracing::warn!("reading RDMA data counters failed: {err}");
                            None
                        })
                }
                None => None,
            };
            let job_processes: Vec<_> = processes
                .iter()
                .filter(|p| is_job(p, &config.watch.jobs.patterns))
                .collect();
            active.extend(stalls.update(
                &job_processes,
                counters.as_ref(),
                mesh_fault(&mesh, &node).is_some(),
                sampled.at.wall,
            ));
            metrics
                .watchers
                .record_job_processes(counts.busy, counts.idle);
            metrics
                .watchers
                .record_orphans(held.processes, held.memory_bytes);
            publish(&alarms, active);
        }
    });
}

/// The data counters of this node's active RDMA ports, summed (Linux
/// sysfs); `None` where there are none to read: macOS, no RDMA port, or a
/// counter that cannot be read or has stopped at its maximum.
fn data_counters(platform: &PlatformConfig, facts: &NodeFacts) -> Option<DataCounters> {
    if facts.os != OsKind::Linux {
        return None;
    }
    with_source(platform, |source, _| {
        let mut total: u64 = 0;
        let mut ports = Vec::new();
        for port in &facts.ports {
            let Some(rdma) = &port.rdma else { continue };
            if port.rdma_device.is_empty() {
                continue;
            }
            let value = read_data_counters(source, &port.rdma_device, rdma.port)?;
            total = total.wrapping_add(value);
            ports.push(format!("{}/{}", port.rdma_device, rdma.port));
        }
        (!ports.is_empty()).then_some(DataCounters { total, ports })
    })
    .ok()
    .flatten()
}
