//! Stalled jobs on healthy links: a job rank busy-waiting at a full core,
//! or blocked at none, while the RDMA ports of its node move no data,
//! although the mesh shows no fault (a fault is `job_hung`'s). Where the
//! OS counts RDMA data per port (Linux sysfs `port_xmit_data` /
//! `port_rcv_data`, or rxe's `hw_counters`), data that stops moving for
//! the window is the progress signal. macOS has no such counter: there
//! this is never judged. Pure: samples and their time come in.

use std::time::{Duration, SystemTime};

use meshd_domain::{Alarm, AlarmKind, NodeId, Severity};

use crate::cpu::ProcessSample;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StallRules {
    /// No data on any RDMA port for this long...
    pub window: Duration,
    /// ...while a job process burns at least this many cores (spinning)...
    pub busy_cores: f64,
    /// ...or at most this many (blocked).
    pub idle_cores: f64,
}

/// One reading of the RDMA data counters: the sum over this node's RDMA
/// ports, and the ports it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataCounters {
    pub total: u64,
    pub ports: Vec<String>,
}

/// Raises `job_stalled` on this node.
#[derive(Debug, Clone)]
pub struct StallDetector {
    node: NodeId,
    rules: StallRules,
    /// The counters' total, and since when it has not moved.
    still: Option<(u64, SystemTime)>,
    alarm_since: Option<SystemTime>,
}

impl StallDetector {
    pub fn new(node: NodeId, rules: StallRules) -> Self {
        Self {
            node,
            rules,
            still: None,
            alarm_since: None,
        }
    }

    pub fn reconfigure(&mut self, rules: StallRules) {
        self.rules = rules;
    }

    /// Feeds the job processes, the data counters (`None`: not readable on
    /// this node) and whether the mesh shows a fault involving this node,
    /// all of one moment.
    pub fn update(
        &mut self,
        jobs: &[&ProcessSample],
        counters: Option<&DataCounters>,
        mesh_fault: bool,
        now: SystemTime,
    ) -> Option<Alarm> {
        let Some(counters) = counters else {
            self.still = None;
            self.alarm_since = None;
            return None;
        };
        match self.still {
            Some((total, _)) if total == counters.total => {}
            _ => self.still = Some((counters.total, now)),
        }
        let still_for = self
            .still
            .map(|(_, since)| now.duration_since(since).unwrap_or_default())
            .unwrap_or_default();
        let stuck: Vec<&&ProcessSample> = jobs
            .iter()
            .filter(|p| p.cores >= self.rules.busy_cores || p.cores <= self.rules.idle_cores)
            .collect();
        let stalled = !mesh_fault && !stuck.is_empty() && still_for >= self.rules.window;
        if !stalled {
            self.alarm_since = None;
            return None;
        }
        let since = *self.alarm_since.get_or_insert(now);
        let mut evidence = vec![format!(
            "RDMA data on {} unchanged for {}s (window {}s)",
            counters.ports.join(", "),
            still_for.as_secs(),
            self.rules.window.as_secs()
        )];
        evidence.extend(stuck.iter().map(|p| {
            let how = if p.cores >= self.rules.busy_cores {
                "spinning"
            } else {
                "blocked"
            };
            format!("{} (pid {}) {how} at {:.2} cores", p.name, p.pid, p.cores)
        }));
        evidence.push("the mesh shows no fault involving this node".to_owned());
        Some(Alarm {
            kind: AlarmKind::JobStalled,
            severity: Severity::Warning,
            node: self.node.clone(),
            subject: "rdma".to_owned(),
            summary: format!(
                "a job on {} moves no RDMA data although its links are up",
                self.node
            ),
            evidence,
            fix: Some(
                "look at the job's own log for a rank that failed or waits on another; a \
                 deadlocked collective does not recover: stop the job and relaunch it"
                    .to_owned(),
            ),
            since,
            updated: now,
        })
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, wall};

    use super::*;

    fn detector() -> StallDetector {
        StallDetector::new(
            id("b"),
            StallRules {
                window: Duration::from_secs(60),
                busy_cores: 0.9,
                idle_cores: 0.05,
            },
        )
    }

    fn rank(cores: f64) -> ProcessSample {
        ProcessSample {
            name: "python3".into(),
            pid: 42,
            cores,
            ..ProcessSample::default()
        }
    }

    fn data(total: u64) -> DataCounters {
        DataCounters {
            total,
            ports: vec!["mlx5_0/1".into()],
        }
    }

    #[test]
    fn a_spinning_or_blocked_rank_over_still_counters_is_stalled() {
        for cores in [1.0, 0.0] {
            let mut d = detector();
            let job = rank(cores);
            assert_eq!(d.update(&[&job], Some(&data(5)), false, wall(0)), None);
            assert_eq!(d.update(&[&job], Some(&data(5)), false, wall(59)), None);
            let alarm = d
                .update(&[&job], Some(&data(5)), false, wall(60))
                .expect("stalled");
            assert_eq!(alarm.kind, AlarmKind::JobStalled);
            assert_eq!(
                alarm.evidence[0],
                "RDMA data on mlx5_0/1 unchanged for 60s (window 60s)"
            );
            assert!(alarm.evidence[1].contains(if cores > 0.5 { "spinning" } else { "blocked" }));
            assert_eq!(alarm.since, wall(60));
            // Data moves: clear at once.
            assert_eq!(d.update(&[&job], Some(&data(6)), false, wall(61)), None);
        }
    }

    #[test]
    fn working_jobs_faults_and_unreadable_counters_are_no_stall() {
        let mut d = detector();
        let working = rank(0.5);
        for s in 0..200 {
            assert_eq!(d.update(&[&working], Some(&data(5)), false, wall(s)), None);
        }
        let mut d = detector();
        let spinning = rank(1.0);
        for s in 0..200 {
            assert_eq!(
                d.update(&[&spinning], Some(&data(5)), true, wall(s)),
                None,
                "job_hung's"
            );
            assert_eq!(
                d.update(&[], Some(&data(5)), false, wall(s)),
                None,
                "no job"
            );
        }
        let mut d = detector();
        for s in 0..200 {
            assert_eq!(d.update(&[&spinning], None, false, wall(s)), None, "macOS");
        }
    }
}
