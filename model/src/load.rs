//! This node's load, for Lifeguard: a node that runs its probes and timers
//! late must weigh its own timeouts less.
//!
//! Saturated is measured where it matters: meshd's own timers fire late.
//! [`LATE`] or more is saturated whatever the CPU figure says (a softirq
//! flood or a noisy neighbour delays meshd without showing as a busy CPU);
//! with the CPU busier than `thresholds.cpu_saturated`, [`LATE_WHEN_BUSY`]
//! is enough. A busy CPU alone is not: on a machine whose cores are all
//! taken by a job meshd still wakes on time (its few wake-ups are short),
//! and then its silences and losses are as true as on an idle node and
//! must not wait twice as long.

use std::time::Duration;

use meshd_domain::NodeLoad;

use crate::lateness::LATE;

/// On a busy CPU, this much lateness already counts: the delays are
/// starting, and they grow with the load.
pub const LATE_WHEN_BUSY: Duration = Duration::from_millis(5);

/// This node's load from the busy share of all its cores in the latest CPU
/// sample (`None`: not read, taken as idle) and how late its timers ran
/// lately; `saturated_above` is `thresholds.cpu_saturated`.
pub fn node_load(cpu_busy: Option<f64>, lateness: Duration, saturated_above: f64) -> NodeLoad {
    let busy = cpu_busy
        .filter(|b| b.is_finite())
        .unwrap_or(0.0)
        .clamp(0.0, 1.0);
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
            node_load(Some(0.45), ON_TIME, 0.9),
            NodeLoad {
                cpu_busy_ratio: 0.45,
                cpu_saturated: false
            }
        );
        assert!(node_load(Some(0.95), LATE_BY, 0.9).cpu_saturated);
        assert!(
            !node_load(Some(0.95), ON_TIME, 0.9).cpu_saturated,
            "a busy CPU that still wakes meshd on time"
        );
        assert!(
            node_load(Some(0.5), LATE_BY, 0.9).cpu_saturated,
            "late without a busy CPU (a softirq flood) is saturated too"
        );
        assert!(node_load(Some(0.95), Duration::from_millis(8), 0.9).cpu_saturated);
        assert!(!node_load(Some(0.5), Duration::from_millis(8), 0.9).cpu_saturated);
        assert!(
            node_load(None, LATE_BY, 0.9).cpu_saturated,
            "an unread CPU is idle; late timers still count"
        );
        assert_eq!(node_load(Some(2.5), ON_TIME, 0.9).cpu_busy_ratio, 1.0);
        assert_eq!(node_load(Some(f64::NAN), ON_TIME, 0.9), NodeLoad::default());
    }
}
