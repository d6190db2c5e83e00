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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use meshd_domain::NodeLoad;
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

/// The worst lateness of meshd's timers since it was last taken. The probe
/// task notes its tick's, ten a second at the default interval: a timer of
/// its own would cost as many wake-ups again, and no finer a sample (a
/// stall that delays no probe tick delays no measurement either).
#[derive(Debug, Clone, Default)]
pub struct TimerLateness(Arc<AtomicU64>);

impl TimerLateness {
    pub fn note(&self, late: Duration) {
        let late_us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        self.0.fetch_max(late_us, Ordering::Relaxed);
    }

    /// The worst noted since the last call.
    pub fn take(&self) -> Duration {
        Duration::from_micros(self.0.swap(0, Ordering::Relaxed))
    }
}

/// Samples the busy share of all cores every second, and the worst
/// lateness of a timer in that second (as noted in `lateness`);
/// `saturated_above` is `thresholds.cpu_saturated`. A sample reads one
/// kernel table (microseconds), so it runs inline on the runtime.
pub fn spawn(
    saturated_above: f64,
    lateness: TimerLateness,
    shutdown: CancellationToken,
) -> watch::Receiver<NodeLoad> {
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
            crate::cadence::every(SAMPLE_INTERVAL.max(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            system.refresh_cpu_usage();
            tx.send_replace(load(
                system.global_cpu_usage(),
                lateness.take(),
                saturated_above,
            ));
        }
    });
    rx
}

fn load(usage_percent: f32, lateness: Duration, saturated_above: f64) -> NodeLoad {
    let busy = (f64::from(usage_percent) / 100.0).clamp(0.0, 1.0);
    let busy = if busy.is_nan() { 0.0 } else { busy };
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
        assert_eq!(
            load(45.0, ON_TIME, 0.9),
            NodeLoad {
                cpu_busy_ratio: 0.45,
                cpu_saturated: false
            }
        );
        assert!(load(95.0, LATE_BY, 0.9).cpu_saturated);
        assert!(
            !load(95.0, ON_TIME, 0.9).cpu_saturated,
            "a busy CPU that still wakes meshd on time"
        );
        assert!(
            load(50.0, LATE_BY, 0.9).cpu_saturated,
            "late without a busy CPU (a softirq flood) is saturated too"
        );
        assert!(load(95.0, Duration::from_millis(8), 0.9).cpu_saturated);
        assert!(!load(50.0, Duration::from_millis(8), 0.9).cpu_saturated);
        assert_eq!(load(250.0, ON_TIME, 0.9).cpu_busy_ratio, 1.0);
        assert_eq!(load(f32::NAN, ON_TIME, 0.9), NodeLoad::default());
    }

    #[test]
    fn timer_lateness_is_the_worst_since_it_was_last_taken() {
        let lateness = TimerLateness::default();
        assert_eq!(lateness.take(), Duration::ZERO);
        for ms in [3, 40, 7] {
            lateness.clone().note(Duration::from_millis(ms));
        }
        assert_eq!(lateness.take(), Duration::from_millis(40));
        assert_eq!(lateness.take(), Duration::ZERO, "taken");
        lateness.note(Duration::MAX);
        assert_eq!(lateness.take(), Duration::from_micros(u64::MAX));
    }
}
