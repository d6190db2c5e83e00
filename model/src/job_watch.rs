//! Every judgement about the job ranks on this node, from one sample of its
//! processes (and, on Linux, its RDMA ports' data counters): ranks busy on
//! a mesh fault that involves this node (`job_hung`, [`crate::jobs`]),
//! ranks outliving their launcher (`job_orphaned`, [`crate::orphans`]),
//! and ranks moving no RDMA data while the mesh is up (`job_stalled`,
//! [`crate::stall`]). The node core judges each new sample once, against
//! the mesh fault its previous look saw, and keeps the alarms until the
//! next sample.

use std::time::Instant;

use meshd_domain::{Alarm, NodeId};

use crate::cpu::{CpuSample, ProcessSample};
use crate::job_mesh::MeshJobRules;
use crate::jobs::{HungJobDetector, JobCounts, JobRules, MeshFault, is_job};
use crate::orphans::{OrphanDetector, OrphanRules, Orphans};
use crate::stall::{DataCounters, StallDetector, StallRules};
use crate::time::Moment;

/// The job watcher's rules (`[watch.jobs]`).
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    pub hung: JobRules,
    pub orphans: OrphanRules,
    pub stalls: StallRules,
    /// When a job whose ranks run on several nodes is hung.
    pub mesh: MeshJobRules,
    /// Only ranks in this network namespace are this node's (Linux; a lab
    /// whose nodes share one host); `None`: every rank on the host.
    pub network_namespace: Option<u64>,
}

/// One sample of this node's processes and RDMA data counters, and when it
/// was taken.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub at: Moment,
    pub sample: CpuSample,
    /// The sum of this node's active RDMA ports' data counters; `None` where
    /// they cannot be read (macOS, no RDMA port, a counter at its maximum).
    pub data_counters: Option<DataCounters>,
}

/// What the job processes amount to, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobFigures {
    pub counts: JobCounts,
    pub orphans: Orphans,
}

#[derive(Debug, Clone)]
pub struct JobWatch {
    patterns: Vec<String>,
    hung: HungJobDetector,
    orphans: OrphanDetector,
    stalls: StallDetector,
    /// When the sample judged last was taken: a sample is judged once.
    judged: Option<Instant>,
    alarms: Vec<Alarm>,
    /// The figures of the sample judged last; `None` before the first.
    figures: Option<JobFigures>,
}

impl JobWatch {
    pub fn new(node: NodeId, settings: &JobSettings) -> Self {
        Self {
            patterns: settings.hung.patterns.clone(),
            hung: HungJobDetector::new(node.clone(), &settings.hung),
            orphans: OrphanDetector::new(node.clone(), settings.orphans.clone()),
            stalls: StallDetector::new(node, settings.stalls),
            judged: None,
            alarms: Vec::new(),
            figures: None,
        }
    }

    /// Takes new rules after a config reload; what the detectors hold so
    /// far stays.
    pub fn reconfigure(&mut self, settings: &JobSettings) {
        self.patterns.clone_from(&settings.hung.patterns);
        self.hung.reconfigure(&settings.hung);
        self.orphans.reconfigure(settings.orphans.clone());
        self.stalls.reconfigure(settings.stalls);
    }

    /// Judges `sampled` unless it was judged already, with `fault`, the mesh
    /// fault involving this node as last seen; returns the active job alarms.
    pub fn judge(&mut self, sampled: Option<&Sampled>, fault: Option<&MeshFault>) -> &[Alarm] {
        let Some(sampled) = sampled.filter(|s| self.judged != Some(s.at.now)) else {
            return &self.alarms;
        };
        self.judged = Some(sampled.at.now);
        let processes = &sampled.sample.processes;
        let (mut alarms, counts) = self.hung.update(processes, fault, sampled.at);
        let (orphaned, orphans) = self.orphans.update(processes, sampled.at.wall);
        alarms.extend(orphaned);
        let ranks: Vec<&ProcessSample> = processes
            .iter()
            .filter(|p| is_job(p, &self.patterns))
            .collect();
        alarms.extend(self.stalls.update(
            &ranks,
            sampled.data_counters.as_ref(),
            fault.is_some(),
            sampled.at.wall,
        ));
        self.alarms = alarms;
        self.figures = Some(JobFigures { counts, orphans });
        &self.alarms
    }

    /// The figures of the sample judged last; `None` before the first.
    pub fn figures(&self) -> Option<JobFigures> {
        self.figures
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use meshd_domain::AlarmKind;
    use meshd_domain::fixtures::id;

    use super::*;
    use crate::fixtures::moment;

    fn settings() -> JobSettings {
        let patterns = vec!["mlx".to_owned()];
        JobSettings {
            hung: JobRules {
                patterns: patterns.clone(),
                busy_cores: 0.9,
                window: Duration::from_secs(10),
            },
            orphans: OrphanRules {
                patterns,
                grace: Duration::from_secs(5),
            },
            stalls: StallRules {
                window: Duration::from_secs(60),
                busy_cores: 0.9,
                idle_cores: 0.05,
            },
            mesh: MeshJobRules {
                spinning_for: Duration::from_secs(2),
                blocked_for: Duration::from_secs(30),
            },
            network_namespace: None,
        }
    }

    fn sampled(secs: u64, rank_parent: u32) -> Sampled {
        Sampled {
            at: moment(secs),
            sample: CpuSample {
                busy_ratio: 0.5,
                processes: vec![ProcessSample {
                    name: "mlx-rank0".to_owned(),
                    pid: 42,
                    cores: 1.0,
                    parent: Some(rank_parent),
                    ..ProcessSample::default()
                }],
            },
            data_counters: None,
        }
    }

    fn dead_peer() -> MeshFault {
        MeshFault {
            headline: "dead peer: b".to_owned(),
            all: vec!["dead peer: b".to_owned()],
        }
    }

    #[test]
    fn a_sample_is_judged_once_and_its_alarms_last_until_the_next() {
        let mut watch = JobWatch::new(id("a"), &settings());
        let fault = dead_peer();
        assert!(watch.judge(Some(&sampled(0, 7)), Some(&fault)).is_empty());
        assert_eq!(
            watch.figures().map(|f| f.counts),
            Some(JobCounts { busy: 1, idle: 0 })
        );
        let hung = watch.judge(Some(&sampled(10, 7)), Some(&fault)).to_vec();
        assert_eq!(hung.len(), 1, "{hung:?}");
        assert_eq!(hung[0].kind, AlarmKind::JobHung);
        // The same sample again (a look without a new one) changes nothing,
        // even though the mesh healed meanwhile.
        assert_eq!(watch.judge(Some(&sampled(10, 7)), None), hung.as_slice());
        assert_eq!(watch.judge(None, None), hung.as_slice());
    }

    #[test]
    fn orphans_and_hung_ranks_are_judged_from_one_sample() {
        let mut watch = JobWatch::new(id("a"), &settings());
        assert_eq!(watch.figures(), None, "nothing judged yet");
        watch.judge(Some(&sampled(0, 7)), None);
        watch.judge(Some(&sampled(1, 1)), None);
        let alarms = watch.judge(Some(&sampled(7, 1)), None).to_vec();
        assert_eq!(
            alarms.iter().map(|a| a.kind).collect::<Vec<_>>(),
            vec![AlarmKind::JobOrphaned]
        );
        assert_eq!(watch.figures().map(|f| f.orphans.processes), Some(1));
    }
}
