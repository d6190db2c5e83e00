//! This node's load, for Lifeguard: a node that runs its probes and timers
//! late must weigh its own timeouts less.
//!
//! Saturated is measured where it matters: meshd's own timers fire late.
//! 20 ms late or more is saturated whatever the CPU figure says (a softirq
//! flood or a noisy neighbour delays meshd without showing as a busy CPU);
//! with the CPU busier than `thresholds.cpu_saturated`, 5 ms late is
//! enough. A busy CPU alone is not: on a machine whose cores are all taken
//! by a job meshd still wakes on time (its few wake-ups are short), and then
//! its silences and losses are as true as on an idle node and must not wait
//! twice as long.
//!
//! The lateness is the probe task's: it wakes every probe interval (100 ms
//! by default) and measures how late each tick was. A timer of its own
//! here would wake the thread twenty times a second more, for a figure the
//! probe task already has.

use std::time::Duration;

use meshd_proto::domain::NodeLoad;
use sysinfo::{CpuRefreshKind, RefreshKind, System};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// sysinfo needs at least its minimum interval between two samples for a
/// meaningful usage figure; one second also keeps the sampler's own cost
/// negligible.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Timers this late mean meshd's judgements are late too: a tenth of the
/// shortest `down_after` in use (600 ms by default) would be 60 ms; this
/// stays well below it so a struggling runtime is caught early.
pub const LATE: Duration = Duration::from_millis(20);

/// On a busy CPU, this much lateness already counts: the delays are
/// starting, and they grow with the load.
pub const LATE_WHEN_BUSY: Duration = Duration::from_millis(5);

/// Samples the busy share of all cores (0-1) every second. A sample reads
/// one kernel table (microseconds), so it runs inline on the runtime.
pub fn spawn(shutdown: CancellationToken) -> watch::Receiver<f64> {
    let (tx, rx) = watch::channel(0.0);
    tokio::spawn(async move {
        let refresh = RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing().with_usage());
        let mut system = match System::new_with_specifics(refresh) {
            Ok(system) => system,
            Err(err) => {
                // Without a load figure the node is saturated only by late
                // timers, as before Lifeguard's busy rule.
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
            tx.send_replace(busy_ratio(system.global_cpu_usage()));
        }
    });
    rx
}

/// A CPU usage in percent as a ratio within 0-1 (0 when unknown).
fn busy_ratio(usage_percent: f32) -> f64 {
    let busy = (f64::from(usage_percent) / 100.0).clamp(0.0, 1.0);
    if busy.is_nan() { 0.0 } else { busy }
}

/// This node's load from its busy share and how late its timers ran;
/// `saturated_above` is `thresholds.cpu_saturated`.
pub fn node_load(busy: f64, lateness: Duration, saturated_above: f64) -> NodeLoad {
    NodeLoad {
        cpu_busy_ratio: busy,
        cpu_saturated: lateness >= LATE || (busy > saturated_above && lateness >= LATE_WHEN_BUSY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON_TIME: Duration = Duration::from_millis(1);
    const LATE_BY: Duration = Duration::from_millis(80);

    #[test]
    fn saturated_means_late_timers_not_a_busy_cpu_alone() {
        let load = |percent, late| node_load(busy_ratio(percent), late, 0.9);
        assert_eq!(
            load(45.0, ON_TIME),
            NodeLoad {
                cpu_busy_ratio: 0.45,
                cpu_saturated: false
            }
        );
        assert!(load(95.0, LATE_BY).cpu_saturated);
        assert!(
            !load(95.0, ON_TIME).cpu_saturated,
            "a busy CPU that still wakes meshd on time"
        );
        assert!(
            load(50.0, LATE_BY).cpu_saturated,
            "late without a busy CPU (a softirq flood) is saturated too"
        );
        assert!(load(95.0, Duration::from_millis(8)).cpu_saturated);
        assert!(!load(50.0, Duration::from_millis(8)).cpu_saturated);
        assert_eq!(load(250.0, ON_TIME).cpu_busy_ratio, 1.0);
        assert_eq!(load(f32::NAN, ON_TIME), NodeLoad::default());
    }
}
