//! This node's CPU load, for Lifeguard: a node whose CPU is saturated runs
//! its probes and timers late, so its own timeouts must weigh less.

use std::time::Duration;

use meshd_proto::domain::NodeLoad;
use sysinfo::{CpuRefreshKind, RefreshKind, System};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// sysinfo needs at least its minimum interval between two samples for a
/// meaningful usage figure; one second also keeps the sampler's own cost
/// negligible.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Samples the busy share of all cores every second; `saturated_above` is
/// `thresholds.cpu_saturated`. A sample reads one kernel table (microseconds),
/// so it runs inline on the runtime.
pub fn spawn(saturated_above: f64, shutdown: CancellationToken) -> watch::Receiver<NodeLoad> {
    let (tx, rx) = watch::channel(NodeLoad::default());
    tokio::spawn(async move {
        let refresh = RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing().with_usage());
        let mut system = match System::new_with_specifics(refresh) {
            Ok(system) => system,
            Err(err) => {
                // Without a load figure the node is never saturated: its
                // timeouts keep their full weight, as without Lifeguard.
                tracing::warn!("cannot read CPU load, assuming an idle CPU: {err}");
                return;
            }
        };
        let mut tick =
            tokio::time::interval(SAMPLE_INTERVAL.max(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            system.refresh_cpu_usage();
            tx.send_replace(load(system.global_cpu_usage(), saturated_above));
        }
    });
    rx
}

fn load(usage_percent: f32, saturated_above: f64) -> NodeLoad {
    let busy = (f64::from(usage_percent) / 100.0).clamp(0.0, 1.0);
    NodeLoad {
        cpu_busy_ratio: if busy.is_nan() { 0.0 } else { busy },
        cpu_saturated: busy > saturated_above,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_becomes_a_ratio_and_a_saturation_flag() {
        assert_eq!(
            load(45.0, 0.9),
            NodeLoad {
                cpu_busy_ratio: 0.45,
                cpu_saturated: false
            }
        );
        assert!(load(95.0, 0.9).cpu_saturated);
        assert_eq!(load(250.0, 0.9).cpu_busy_ratio, 1.0);
        assert_eq!(load(f32::NAN, 0.9), NodeLoad::default());
    }
}
