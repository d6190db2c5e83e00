//! Hung jobs: when a peer or cable dies mid-job, JACCL ranks busy-wait at
//! 100% CPU forever, and nothing says which peer or link they wait on. A
//! job process that keeps burning CPU while the mesh shows a fault
//! involving this node is most likely spinning on that fault. Pure.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::time::Moment;

use meshd_domain::{Alarm, AlarmKind, LinkState, MeshStatus, NodeId, NodeState, Severity};

use crate::cpu::{Hold, ProcessSample};

/// What in the mesh a job on this node may be waiting on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshFault {
    /// "dead peer: b" or "link a <-> b"; the first of `all`.
    pub headline: String,
    pub all: Vec<String>,
}

/// The peers that are down and the links of this node that are down or
/// flapping, as the mesh status says; `None` when there is none.
pub fn mesh_fault(status: &MeshStatus, node: &NodeId) -> Option<MeshFault> {
    let mut all: Vec<String> = status
        .nodes
        .iter()
        .filter(|n| &n.id != node && n.state == NodeState::Down)
        .map(|n| format!("dead peer: {}", n.id))
        .collect();
    all.extend(
        status
            .links
            .iter()
            .filter(|l| &l.a.node == node || &l.b.node == node)
            .filter(|l| matches!(l.state, LinkState::Down | LinkState::Flapping))
            .map(|l| {
                let mut text = format!("{} link {} <-> {}", l.state, l.a.node, l.b.node);
                if let (Some(a), Some(b)) = (&l.a.iface, &l.b.iface) {
                    text.push_str(&format!(" ({a} <-> {b})"));
                }
                text
            }),
    );
    Some(MeshFault {
        headline: all.first()?.clone(),
        all,
    })
}

/// Whether a process is a job rank: a pattern is a case-insensitive
/// substring of its name or command line.
pub fn is_job(process: &ProcessSample, patterns: &[String]) -> bool {
    let name = process.name.to_lowercase();
    let command = process.command.as_deref().map(str::to_lowercase);
    patterns.iter().filter(|p| !p.is_empty()).any(|p| {
        let p = p.to_lowercase();
        name.contains(&p) || command.as_deref().is_some_and(|c| c.contains(&p))
    })
}

/// What marks a process as a job rank and when it counts as hung; the
/// daemon's config (`[watch.jobs]`) supplies the values.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRules {
    /// Case-insensitive substrings of a process's name or command line.
    pub patterns: Vec<String>,
    /// CPU a job process must burn, in cores (1.0 = one full core)...
    pub busy_cores: f64,
    /// ...for this long while a peer or link of the mesh is down.
    pub window: Duration,
}

/// Job processes by what they do right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobCounts {
    pub busy: usize,
    pub idle: usize,
}

/// Raises one `job_hung` per process name on this node (ranks often share
/// a name, `python3`; their pids are in the evidence).
#[derive(Debug, Clone)]
pub struct HungJobDetector {
    node: NodeId,
    config: JobRules,
    /// Per (pid, name), so a reused pid starts afresh.
    tracked: BTreeMap<(u32, String), Tracked>,
}

#[derive(Debug, Clone)]
struct Tracked {
    hold: Hold,
    cores: f64,
}

impl HungJobDetector {
    pub fn new(node: NodeId, config: &JobRules) -> Self {
        Self {
            node,
            config: config.clone(),
            tracked: BTreeMap::new(),
        }
    }

    /// Takes new settings after a config reload; processes already tracked
    /// keep what they have held so far.
    pub fn reconfigure(&mut self, config: &JobRules) {
        self.config = config.clone();
        for tracked in self.tracked.values_mut() {
            tracked.hold.set_window(config.window);
        }
    }

    /// Feeds one sample of the processes and the mesh fault involving this
    /// node at that time (see [`mesh_fault`]); returns the active alarms and
    /// how many job processes are busy/idle.
    pub fn update(
        &mut self,
        processes: &[ProcessSample],
        fault: Option<&MeshFault>,
        moment: Moment,
    ) -> (Vec<Alarm>, JobCounts) {
        let mut counts = JobCounts::default();
        let mut seen = Vec::new();
        // Ranks whose environment names their job are judged with their
        // peers across the mesh (`crate::job_mesh`), once per job.
        for process in processes
            .iter()
            .filter(|p| p.rank.is_none() && is_job(p, &self.config.patterns))
        {
            let busy = process.cores >= self.config.busy_cores;
            if busy {
                counts.busy += 1;
            } else {
                counts.idle += 1;
            }
            let key = (process.pid, process.name.clone());
            let tracked = self.tracked.entry(key.clone()).or_insert_with(|| Tracked {
                hold: Hold::new(self.config.window),
                cores: 0.0,
            });
            tracked.hold.update(busy && fault.is_some(), moment.now);
            tracked.cores = process.cores;
            seen.push(key);
        }
        // An exited process cannot spin: its alarm goes at once.
        self.tracked
            .retain(|key, t| seen.contains(key) && !t.hold.is_idle());

        let mut hung: BTreeMap<&str, Vec<(u32, &Tracked)>> = BTreeMap::new();
        for ((pid, name), tracked) in &self.tracked {
            if tracked.hold.is_active() {
                hung.entry(name.as_str()).or_default().push((*pid, tracked));
            }
        }
        let alarms = hung
            .into_iter()
            .map(|(name, procs)| self.alarm(name, &procs, fault, moment))
            .collect();
        (alarms, counts)
    }

    fn alarm(
        &self,
        name: &str,
        procs: &[(u32, &Tracked)],
        fault: Option<&MeshFault>,
        moment: Moment,
    ) -> Alarm {
        let since = moment.wall_of(
            procs
                .iter()
                .filter_map(|(_, t)| t.hold.active_since())
                .min()
                .unwrap_or(moment.now),
        );
        let cause = fault.map_or_else(
            // Clearing after the mesh recovered: the alarm is about to go.
            || "the mesh fault it waited on has cleared".to_owned(),
            |f| match f.headline.strip_prefix("dead peer: ") {
                Some(peer) => format!("likely spinning on a dead peer: {peer}"),
                None => format!("likely spinning on the {}", f.headline),
            },
        );
        let ranks = if procs.len() == 1 {
            "a job process".to_owned()
        } else {
            format!("{} job processes", procs.len())
        };
        let mut evidence: Vec<String> = procs
            .iter()
            .map(|(pid, t)| {
                format!(
                    "{name} (pid {pid}) burns {:.2} cores (busy at {:.2})",
                    t.cores, self.config.busy_cores
                )
            })
            .collect();
        if let Some(f) = fault {
            evidence.extend(f.all.iter().map(|a| format!("mesh: {a}")));
        }
        Alarm {
            kind: AlarmKind::JobHung,
            severity: Severity::Warning,
            node: self.node.clone(),
            subject: name.to_owned(),
            summary: format!("{ranks} {name} on {} is {cause}", self.node),
            evidence,
            fix: Some(
                "fix or replace the failed peer or cable (see the mesh status), then stop the \
                 job and relaunch it; JACCL ranks do not recover from a lost peer"
                    .to_owned(),
            ),
            since,
            updated: moment.wall,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use meshd_domain::fixtures::{end, id, node_verdict};
    use meshd_domain::{Blame, Incarnation, LinkVerdict, NodeIdentity, Quorum};

    use super::*;
    use crate::fixtures::moment;

    fn config() -> JobRules {
        JobRules {
            patterns: vec!["mlx".to_owned(), "exo".to_owned()],
            busy_cores: 0.9,
            window: Duration::from_secs(10),
        }
    }

    fn p(name: &str, pid: u32, cores: f64, command: Option<&str>) -> ProcessSample {
        ProcessSample {
            name: name.to_owned(),
            pid,
            cores,
            command: command.map(str::to_owned),
            ..ProcessSample::default()
        }
    }

    fn status(down_node: Option<&str>, link: Option<(&str, &str, LinkState)>) -> MeshStatus {
        let nodes = ["a", "b", "c"]
            .iter()
            .map(|n| {
                let state = if Some(*n) == down_node {
                    NodeState::Down
                } else {
                    NodeState::Up
                };
                node_verdict(id(n), state, moment(0).wall)
            })
            .collect();
        let links = link
            .map(|(a, b, state)| LinkVerdict {
                a: end(a, "en2"),
                b: end(b, "en3"),
                state,
                since: moment(0).wall,
                evidence: vec![],
                blame: Blame::Link,
                blamed_node: None,
                recent_changes: 0,
                flapping: false,
                fix: None,
            })
            .into_iter()
            .collect();
        MeshStatus {
            node: NodeIdentity {
                id: id("a"),
                incarnation: Incarnation(1),
                version: String::new(),
                hostname: String::new(),
            },
            evaluated_at: moment(0).wall,
            quorum: Quorum::default(),
            nodes,
            links,
            alarms: vec![],
            cables: vec![],
            checks: vec![],
            measurements: vec![],
            jobs: Vec::new(),
        }
    }

    /// What `status` shows of a fault involving node a, as the core hands it
    /// to the detector.
    fn fault(status: &MeshStatus) -> Option<MeshFault> {
        mesh_fault(status, &id("a"))
    }

    #[test]
    fn job_patterns_match_name_or_command_line_ignoring_case() {
        let patterns = config().patterns;
        assert!(is_job(&p("mlx-rank0", 1, 0.0, None), &patterns));
        assert!(is_job(&p("MLX_worker", 1, 0.0, None), &patterns));
        assert!(is_job(
            &p(
                "python3",
                1,
                0.0,
                Some("python3 -m mlx.launch --backend jaccl")
            ),
            &patterns
        ));
        assert!(is_job(
            &p("Python", 1, 0.0, Some("/usr/bin/EXO run")),
            &patterns
        ));
        assert!(!is_job(
            &p("python3", 1, 0.0, Some("python3 train.py")),
            &patterns
        ));
        assert!(!is_job(&p("python3", 1, 0.0, None), &patterns));
        assert!(!is_job(&p("mlx", 1, 0.0, None), &[String::new()]));
    }

    #[test]
    fn mesh_faults_are_dead_peers_and_this_nodes_bad_links() {
        let me = id("a");
        assert_eq!(mesh_fault(&status(None, None), &me), None);
        assert_eq!(
            mesh_fault(&status(Some("b"), None), &me).unwrap().headline,
            "dead peer: b"
        );
        // This node being called down by itself is no peer fault.
        assert_eq!(mesh_fault(&status(Some("a"), None), &me), None);
        let link = mesh_fault(&status(None, Some(("a", "c", LinkState::Flapping))), &me).unwrap();
        assert_eq!(link.headline, "flapping link a <-> c (en2 <-> en3)");
        assert!(mesh_fault(&status(None, Some(("a", "c", LinkState::Down))), &me).is_some());
        assert!(mesh_fault(&status(None, Some(("a", "c", LinkState::Degraded))), &me).is_none());
        // A link between two other nodes does not stall this node's ranks.
        assert!(mesh_fault(&status(None, Some(("b", "c", LinkState::Down))), &me).is_none());
        let both = mesh_fault(&status(Some("b"), Some(("a", "c", LinkState::Down))), &me).unwrap();
        assert_eq!(both.all.len(), 2);
    }

    #[test]
    fn a_busy_job_during_a_dead_peer_raises_after_the_window() {
        let mut d = HungJobDetector::new(id("a"), &config());
        let procs = [
            p("mlx-rank0", 42, 1.0, None),
            p("mlx-rank1", 43, 0.1, None),
            p("Safari", 7, 2.0, None),
        ];
        let down = fault(&status(Some("b"), None));
        let (alarms, counts) = d.update(&procs, down.as_ref(), moment(0));
        assert!(alarms.is_empty());
        assert_eq!(counts, JobCounts { busy: 1, idle: 1 });
        assert!(d.update(&procs, down.as_ref(), moment(9)).0.is_empty());
        let (alarms, _) = d.update(&procs, down.as_ref(), moment(10));
        assert_eq!(alarms.len(), 1, "{alarms:?}");
        let alarm = &alarms[0];
        assert_eq!(alarm.kind, AlarmKind::JobHung);
        assert_eq!(alarm.subject, "mlx-rank0");
        assert_eq!(alarm.node, id("a"));
        assert_eq!(alarm.since, moment(0).wall);
        assert!(
            alarm.summary.contains("likely spinning on a dead peer: b"),
            "{alarm:?}"
        );
        assert!(!alarm.summary.contains("42"), "no pid in the summary");
        assert!(alarm.evidence[0].contains("mlx-rank0 (pid 42)"));
        assert!(alarm.evidence.iter().any(|e| e == "mesh: dead peer: b"));
    }

    #[test]
    fn a_busy_job_on_a_healthy_mesh_is_just_working() {
        let mut d = HungJobDetector::new(id("a"), &config());
        let procs = [p("mlx-rank0", 42, 4.0, None)];
        for s in 0..60 {
            assert!(
                d.update(&procs, fault(&status(None, None)).as_ref(), moment(s))
                    .0
                    .is_empty()
            );
            assert!(d.update(&procs, None, moment(s)).0.is_empty());
        }
    }

    #[test]
    fn a_bad_link_of_this_node_is_named() {
        let mut d = HungJobDetector::new(id("a"), &config());
        let procs = [p("python3", 42, 1.0, Some("python3 -m mlx.launch"))];
        let flapping = fault(&status(None, Some(("a", "c", LinkState::Flapping))));
        d.update(&procs, flapping.as_ref(), moment(0));
        let (alarms, _) = d.update(&procs, flapping.as_ref(), moment(10));
        assert!(
            alarms[0]
                .summary
                .contains("likely spinning on the flapping link a <-> c"),
            "{alarms:?}"
        );
    }

    #[test]
    fn ranks_sharing_a_name_make_one_alarm() {
        let mut d = HungJobDetector::new(id("a"), &config());
        let procs = [
            p("python3", 42, 1.0, Some("python3 -m mlx.launch --rank 0")),
            p("python3", 43, 1.0, Some("python3 -m mlx.launch --rank 1")),
        ];
        let down = fault(&status(Some("c"), None));
        d.update(&procs, down.as_ref(), moment(0));
        let (alarms, counts) = d.update(&procs, down.as_ref(), moment(10));
        assert_eq!(counts.busy, 2);
        assert_eq!(alarms.len(), 1);
        assert_eq!(alarms[0].evidence.len(), 3);
        assert!(alarms[0].summary.starts_with("2 job processes python3"));
    }

    #[test]
    fn clears_when_the_mesh_recovers_or_the_process_calms_down_after_the_window() {
        let procs = [p("mlx-rank0", 42, 1.0, None)];
        let calm = [p("mlx-rank0", 42, 0.0, None)];
        let down = fault(&status(Some("b"), None));
        let healthy = fault(&status(None, None));
        for (after, mesh) in [(&procs, &healthy), (&calm, &down)] {
            let mut d = HungJobDetector::new(id("a"), &config());
            d.update(&procs, down.as_ref(), moment(0));
            assert_eq!(d.update(&procs, down.as_ref(), moment(10)).0.len(), 1);
            // One good sample does not clear it...
            assert_eq!(d.update(after, mesh.as_ref(), moment(11)).0.len(), 1);
            assert_eq!(d.update(after, mesh.as_ref(), moment(20)).0.len(), 1);
            // ...a whole window of them does.
            assert!(d.update(after, mesh.as_ref(), moment(21)).0.is_empty());
        }
    }

    #[test]
    fn clears_at_once_when_the_process_exits() {
        let mut d = HungJobDetector::new(id("a"), &config());
        let procs = [p("mlx-rank0", 42, 1.0, None)];
        let down = fault(&status(Some("b"), None));
        d.update(&procs, down.as_ref(), moment(0));
        assert_eq!(d.update(&procs, down.as_ref(), moment(10)).0.len(), 1);
        let (alarms, counts) = d.update(&[], down.as_ref(), moment(11));
        assert!(alarms.is_empty());
        assert_eq!(counts, JobCounts::default());
        // The pid comes back as something else: a new process, a new clock.
        let reused = [p("mlx-rank0", 42, 1.0, None)];
        assert!(d.update(&reused, down.as_ref(), moment(12)).0.is_empty());
    }
}
