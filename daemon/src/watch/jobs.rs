//! Watches job ranks (MLX, exo) for busy-waiting on a dead peer or cable:
//! each CPU sample is judged against the mesh status of the same moment.

use std::sync::Arc;

use meshd_proto::domain::{Alarm, MeshStatus, NodeId};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, settings};
use crate::metrics::Metrics;
use crate::watch::cpu::Sampled;
use meshd_model::jobs::HungJobDetector;

/// Runs until shutdown or until the CPU watcher stops; publishes the active
/// `job_hung` alarms on `alarms`, which the caller created before the
/// aggregator so the aggregator could take its receiver.
pub fn spawn(
    node: NodeId,
    mut configs: watch::Receiver<Arc<Config>>,
    mut samples: watch::Receiver<Option<Arc<Sampled>>>,
    status: watch::Receiver<Arc<MeshStatus>>,
    alarms: watch::Sender<Vec<Alarm>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        let mut detector = HungJobDetector::new(
            node,
            &settings::job_rules(&configs.borrow_and_update().watch.jobs),
        );
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = samples.changed() => if changed.is_err() { return },
                changed = configs.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    detector.reconfigure(&settings::job_rules(&configs.borrow_and_update().watch.jobs));
                    continue;
                }
            }
            let Some(sampled) = samples.borrow_and_update().clone() else {
                continue;
            };
            let mesh = status.borrow().clone();
            let (active, counts) =
                detector.update(&sampled.sample.processes, Some(&mesh), sampled.at);
            metrics
                .watchers
                .record_job_processes(counts.busy, counts.idle);
            alarms.send_if_modified(|current| {
                let changed = *current != active;
                if changed {
                    *current = active;
                }
                changed
            });
        }
    });
}
