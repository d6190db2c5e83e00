//! Jobs across the mesh: every node reports the ranks it runs (found by
//! what MLX's launcher put in their environment), and every node puts the
//! reports together into one view per job and one `job_hung` alarm per
//! job that cannot go on. A JACCL rank whose peer rank stopped, died or was
//! replaced by a new process waits forever, spinning at a full core (Apple's
//! UC queue pairs give no error for a dead peer), on a node and cables
//! that are all healthy; so is one whose peer's node is down or whose cable
//! to it is. The alarm names the job, the silent rank, its node and the
//! cable between them, and is the same on every node (its `node` is the
//! silent rank's), so the alert leader pages it once. Pure: the ranks each
//! node reports, the status and the time come in.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use meshd_domain::jobs::{
    JobBackend, JobRank, JobView, MAX_JOB_TEXT, MAX_RANKS, ProcessState, RankCondition, RankView,
};
use meshd_domain::{Alarm, AlarmKind, LinkState, MeshStatus, NodeId, NodeState, Severity};
use meshd_mesh::cables::cable_label;

use crate::cpu::{Hold, ProcessSample};
use crate::time::Moment;

/// When a job whose peer rank is silent counts as hung.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeshJobRules {
    /// With a rank spinning on it (JACCL's busy wait), this long...
    pub spinning_for: Duration,
    /// ...and with every other rank waiting without burning CPU (a TCP
    /// ring blocks), this long: a job that ends has its ranks exit a
    /// moment apart.
    pub blocked_for: Duration,
}

/// The ranks one node reports, as this node holds them.
#[derive(Debug, Clone, Copy)]
pub struct Reported<'a> {
    pub node: &'a NodeId,
    pub ranks: &'a [JobRank],
}

/// The job ranks among `processes`, as this node reports them: those whose
/// environment names a job, in `network_namespace` where one is given (a
/// lab's nodes share one host's processes), busy at `busy_cores` or more;
/// at most [`MAX_RANKS`], by job and rank.
pub fn local_ranks(
    processes: &[ProcessSample],
    busy_cores: f64,
    network_namespace: Option<u64>,
) -> Vec<JobRank> {
    let mut ranks: Vec<JobRank> = processes
        .iter()
        .filter(|p| network_namespace.is_none_or(|ns| p.network_namespace == Some(ns)))
        .filter_map(|p| {
            let identity = p.rank.as_deref()?;
            Some(JobRank {
                job: identity.job.clone(),
                backend: identity.backend,
                rank: identity.rank,
                world: identity.world,
                pid: p.pid,
                started: p.started,
                name: p.name.chars().take(MAX_JOB_TEXT).collect(),
                state: p.state,
                busy: p.cores >= busy_cores,
                devices: identity.devices.clone(),
            })
        })
        .collect();
    ranks.sort_by(|x, y| (&x.job, x.rank, x.pid).cmp(&(&y.job, y.rank, y.pid)));
    ranks.truncate(MAX_RANKS);
    ranks
}

#[derive(Debug, Clone)]
struct Seen {
    node: NodeId,
    /// The process first seen with this rank number.
    first: JobRank,
    /// As its node reports it now (the first process or another).
    latest: JobRank,
    condition: RankCondition,
}

#[derive(Debug, Clone)]
struct Tracked {
    backend: JobBackend,
    world: Option<u32>,
    since: SystemTime,
    ranks: BTreeMap<u32, Seen>,
    spinning: Hold,
    blocked: Hold,
}

/// Every job the mesh's nodes report, followed from look to look.
#[derive(Debug, Clone)]
pub struct MeshJobs {
    rules: MeshJobRules,
    jobs: BTreeMap<String, Tracked>,
}

/// Why a job cannot go on: the rank it waits on and what happened to it,
/// or the node or cable between its ranks that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cause {
    /// The node the alarm is about.
    node: NodeId,
    /// "rank 1 (pid 4242) on b is stopped".
    what: String,
    fix: String,
    /// The nodes whose link the cause lies across, for naming the cable.
    between: Option<(NodeId, NodeId)>,
}

impl MeshJobs {
    pub fn new(rules: MeshJobRules) -> Self {
        Self {
            rules,
            jobs: BTreeMap::new(),
        }
    }

    pub fn set_rules(&mut self, rules: MeshJobRules) {
        self.rules = rules;
        for job in self.jobs.values_mut() {
            job.spinning.set_window(rules.spinning_for);
            job.blocked.set_window(rules.blocked_for);
        }
    }

    /// Takes this look's reports (this node's own ranks and each peer's, as
    /// held) and the status judged from the same look; returns every job's
    /// view and the `job_hung` alarms.
    pub fn judge(
        &mut self,
        reports: &[Reported<'_>],
        status: &MeshStatus,
        moment: Moment,
    ) -> (Vec<JobView>, Vec<Alarm>) {
        let state_of = |node: &NodeId| status.nodes.iter().find(|n| &n.id == node).map(|n| n.state);
        self.take_reports(reports, moment);
        let reporting: Vec<&NodeId> = reports.iter().map(|r| r.node).collect();
        let mut views = Vec::new();
        let mut alarms = Vec::new();
        self.jobs.retain(|id, job| {
            for seen in job.ranks.values_mut() {
                let reported = reports
                    .iter()
                    .filter(|r| *r.node == seen.node)
                    .flat_map(|r| r.ranks)
                    .any(|r| r.job == *id && r.rank == seen.first.rank);
                if !reported {
                    let heard = reporting.contains(&&seen.node)
                        && state_of(&seen.node) == Some(NodeState::Up);
                    seen.condition = if heard {
                        RankCondition::Gone
                    } else {
                        RankCondition::Unheard
                    };
                }
            }
            // Every rank exited: the job is over, not hung.
            let over = job
                .ranks
                .values()
                .all(|s| s.condition == RankCondition::Gone);
            !over
        });
        for (id, job) in &mut self.jobs {
            let cause = cause(id, job, status, state_of);
            let survivors: Vec<&Seen> = job
                .ranks
                .values()
                .filter(|s| s.condition == RankCondition::Live)
                .collect();
            let spinning = survivors.iter().any(|s| s.latest.busy);
            let waiting = cause.is_some() && !survivors.is_empty();
            job.spinning.update(waiting && spinning, moment.now);
            job.blocked.update(waiting, moment.now);
            let hung_since = [&job.spinning, &job.blocked]
                .iter()
                .filter(|h| h.is_active())
                .filter_map(|h| h.active_since())
                .min();
            let alarm = match (hung_since, &cause) {
                (Some(since), Some(cause)) if !survivors.is_empty() => Some(hung_alarm(
                    id,
                    job,
                    cause,
                    &survivors,
                    status,
                    moment.wall_of(since),
                    moment.wall,
                )),
                _ => None,
            };
            views.push(JobView {
                job: id.clone(),
                backend: job.backend,
                world: job.world,
                ranks: job.ranks.values().map(view).collect(),
                hung: alarm.as_ref().map(|a| a.summary.clone()),
                since: job.since,
            });
            alarms.extend(alarm);
        }
        (views, alarms)
    }

    /// Records what each node reports now: new jobs and ranks, a rank's
    /// latest process and state. A job whose every reported rank is a new
    /// process is a new run of it (a relaunch with the same coordinator),
    /// followed afresh.
    fn take_reports(&mut self, reports: &[Reported<'_>], moment: Moment) {
        for report in reports {
            for rank in report.ranks {
                let job = self
                    .jobs
                    .entry(rank.job.clone())
                    .or_insert_with(|| Tracked {
                        backend: rank.backend,
                        world: rank.world,
                        since: moment.wall,
                        ranks: BTreeMap::new(),
                        spinning: Hold::new(self.rules.spinning_for),
                        blocked: Hold::new(self.rules.blocked_for),
                    });
                let relaunched = job.ranks.get(&rank.rank).is_some_and(|seen| {
                    !seen.first.same_process(rank)
                        && !reports.iter().flat_map(|r| r.ranks).any(|other| {
                            other.job == rank.job
                                && job
                                    .ranks
                                    .get(&other.rank)
                                    .is_some_and(|s| s.first.same_process(other))
                        })
                });
                if relaunched {
                    job.ranks.clear();
                    job.since = moment.wall;
                }
                job.world = rank.world.or(job.world);
                let seen = job.ranks.entry(rank.rank).or_insert_with(|| Seen {
                    node: report.node.clone(),
                    first: rank.clone(),
                    latest: rank.clone(),
                    condition: RankCondition::Live,
                });
                seen.node = report.node.clone();
                seen.latest = rank.clone();
                seen.condition = if !seen.first.same_process(rank) {
                    RankCondition::Restarted
                } else if rank.state == ProcessState::Stopped {
                    RankCondition::Stopped
                } else {
                    RankCondition::Live
                };
            }
        }
    }
}

fn view(seen: &Seen) -> RankView {
    RankView {
        rank: seen.first.rank,
        node: seen.node.clone(),
        pid: seen.latest.pid,
        name: seen.latest.name.clone(),
        condition: seen.condition,
        busy: seen.latest.busy,
    }
}

/// The first reason, in rank order, that `job` cannot go on: a silent
/// rank (stopped, gone, replaced), a rank whose node is down, or a link
/// between two live ranks' nodes that is down or flapping. A rank whose
/// node is merely unheard is no reason either way.
fn cause(
    id: &str,
    job: &Tracked,
    status: &MeshStatus,
    state_of: impl Fn(&NodeId) -> Option<NodeState>,
) -> Option<Cause> {
    let silent = job.ranks.values().find_map(|seen| {
        let rank = seen.first.rank;
        let node = &seen.node;
        let pid = seen.first.pid;
        let (what, fix) = match seen.condition {
            RankCondition::Stopped => (
                format!("rank {rank} (pid {pid}) on {node} is stopped"),
                format!(
                    "continue it (kill -CONT {pid} on {node}) if it was stopped by mistake; \
                     otherwise stop the job's ranks and relaunch it"
                ),
            ),
            RankCondition::Gone => (
                format!("rank {rank} (pid {pid}) on {node} exited or was killed"),
                relaunch(id),
            ),
            RankCondition::Restarted => (
                format!(
                    "rank {rank} on {node} is a new process (pid {}, was {pid}), which the \
                     others cannot take back",
                    seen.latest.pid
                ),
                relaunch(id),
            ),
            RankCondition::Unheard if state_of(node) == Some(NodeState::Down) => (
                format!("rank {rank} (pid {pid}) ran on {node}, which is down"),
                format!(
                    "bring {node} back (see its node verdict), then {}",
                    relaunch(id)
                ),
            ),
            RankCondition::Live | RankCondition::Unheard => return None,
        };
        Some(Cause {
            node: node.clone(),
            what,
            fix,
            between: None,
        })
    });
    silent.or_else(|| {
        let live: Vec<&NodeId> = job
            .ranks
            .values()
            .filter(|s| s.condition == RankCondition::Live)
            .map(|s| &s.node)
            .collect();
        status.links.iter().find_map(|link| {
            let (a, b) = (&link.a.node, &link.b.node);
            (matches!(link.state, LinkState::Down | LinkState::Flapping)
                && live.contains(&a)
                && live.contains(&b))
            .then(|| Cause {
                node: a.clone(),
                what: format!("the link {a} ↔ {b} between its ranks is {}", link.state),
                fix: format!(
                    "fix that link ({}), then {}",
                    link.fix.as_deref().unwrap_or("see its verdict"),
                    relaunch(id)
                ),
                between: Some((a.clone(), b.clone())),
            })
        })
    })
}

fn relaunch(id: &str) -> String {
    format!(
        "stop the job's remaining ranks and relaunch it: JACCL ranks do not recover from a lost \
         peer (job {id})"
    )
}

fn hung_alarm(
    id: &str,
    job: &Tracked,
    cause: &Cause,
    survivors: &[&Seen],
    status: &MeshStatus,
    since: SystemTime,
    now: SystemTime,
) -> Alarm {
    let waiting = survivors
        .iter()
        .find(|s| s.latest.busy)
        .or_else(|| survivors.first());
    let (a, b) = cause.between.clone().unwrap_or_else(|| {
        (
            waiting.map_or_else(|| cause.node.clone(), |s| s.node.clone()),
            cause.node.clone(),
        )
    });
    let cable = status
        .cables
        .iter()
        .find(|c| c.end_at(&a).is_some() && c.end_at(&b).is_some() && a != b)
        .map(cable_label);
    let mut summary = format!("job {id} hangs: {}", cause.what);
    if let Some(w) = waiting {
        let how = if w.latest.busy {
            "spins waiting on it"
        } else {
            "waits on it"
        };
        summary.push_str(&format!("; rank {} on {} {how}", w.first.rank, w.node));
    }
    if let Some(cable) = &cable {
        summary.push_str(&format!(" (cable {cable})"));
    }
    let evidence = job
        .ranks
        .values()
        .map(|s| {
            format!(
                "rank {} on {}: {} {} (pid {}){}",
                s.first.rank,
                s.node,
                s.latest.name,
                s.condition,
                s.latest.pid,
                if s.latest.busy { ", spinning" } else { "" }
            )
        })
        .collect();
    Alarm {
        kind: AlarmKind::JobHung,
        severity: Severity::Warning,
        node: cause.node.clone(),
        subject: format!("job {id}"),
        summary,
        evidence,
        fix: Some(cause.fix.clone()),
        since,
        updated: now,
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::Quorum;
    use meshd_domain::facts::{Cable, CableEnd};
    use meshd_domain::fixtures::{end, id, link_verdict, node_verdict};

    use super::*;
    use crate::fixtures::{moment, moment_ms};

    const JOB: &str = "10.78.0.1:7430";

    fn rules() -> MeshJobRules {
        MeshJobRules {
            spinning_for: Duration::from_secs(2),
            blocked_for: Duration::from_secs(30),
        }
    }

    fn rank(r: u32, pid: u32, state: ProcessState, busy: bool) -> JobRank {
        JobRank {
            job: JOB.to_owned(),
            backend: JobBackend::Jaccl,
            rank: r,
            world: Some(3),
            pid,
            started: u64::from(pid) * 10,
            name: "python3".to_owned(),
            state,
            busy,
            devices: Vec::new(),
        }
    }

    /// A three-node mesh; `states` says each node's state, `down` a link.
    fn status(states: [NodeState; 3], down: Option<(&str, &str)>) -> MeshStatus {
        let names = ["a", "b", "c"];
        let cable = |x: &str, y: &str| {
            let end = |node: &str, peer: &str| CableEnd {
                node: id(node),
                port: String::new(),
                iface: format!("mesh-{peer}"),
                rdma_device: String::new(),
                address: None,
            };
            Cable {
                a: end(x, y),
                b: end(y, x),
                speed_bps: 0,
                discovered: false,
            }
        };
        let pairs = [("a", "b"), ("a", "c"), ("b", "c")];
        MeshStatus {
            node: meshd_domain::fixtures::identity("a", 1),
            evaluated_at: moment(0).wall,
            quorum: Quorum::default(),
            nodes: names
                .iter()
                .zip(states)
                .map(|(n, state)| node_verdict(id(n), state, moment(0).wall))
                .collect(),
            links: pairs
                .iter()
                .map(|(x, y)| {
                    let state = if down == Some((*x, *y)) {
                        LinkState::Down
                    } else {
                        LinkState::Up
                    };
                    link_verdict(
                        end(x, &format!("mesh-{y}")),
                        end(y, &format!("mesh-{x}")),
                        state,
                    )
                })
                .collect(),
            alarms: vec![],
            cables: pairs.iter().map(|(x, y)| cable(x, y)).collect(),
            checks: vec![],
            measurements: vec![],
            jobs: vec![],
        }
    }

    fn healthy() -> MeshStatus {
        status([NodeState::Up; 3], None)
    }

    /// One look: each node's ranks (`None`: the node reports nothing).
    fn look(
        jobs: &mut MeshJobs,
        ranks: [Option<Vec<JobRank>>; 3],
        status: &MeshStatus,
        at_ms: u64,
    ) -> (Vec<JobView>, Vec<Alarm>) {
        let ids = [id("a"), id("b"), id("c")];
        let reports: Vec<Reported<'_>> = ids
            .iter()
            .zip(&ranks)
            .filter_map(|(node, ranks)| {
                Some(Reported {
                    node,
                    ranks: ranks.as_deref()?,
                })
            })
            .collect();
        jobs.judge(&reports, status, moment_ms(at_ms))
    }

    fn running(busy: bool) -> [Option<Vec<JobRank>>; 3] {
        [
            Some(vec![rank(0, 100, ProcessState::Running, busy)]),
            Some(vec![rank(1, 200, ProcessState::Running, busy)]),
            Some(vec![rank(2, 300, ProcessState::Running, busy)]),
        ]
    }

    fn with_b(b: Option<Vec<JobRank>>, busy: bool) -> [Option<Vec<JobRank>>; 3] {
        let [a, _, c] = running(busy);
        [a, b, c]
    }

    fn conditions(views: &[JobView]) -> Vec<RankCondition> {
        views[0].ranks.iter().map(|r| r.condition).collect()
    }

    #[test]
    fn a_healthy_job_is_one_view_of_live_ranks_and_no_alarm() {
        let mut jobs = MeshJobs::new(rules());
        for ms in [0, 1_000, 5_000] {
            let (views, alarms) = look(&mut jobs, running(true), &healthy(), ms);
            assert!(alarms.is_empty(), "{alarms:?}");
            assert_eq!(views.len(), 1);
            assert_eq!(views[0].world, Some(3));
            assert_eq!(conditions(&views), [RankCondition::Live; 3]);
            assert_eq!(views[0].hung, None);
        }
    }

    #[test]
    fn a_stopped_rank_with_spinning_peers_hangs_its_job_once_and_clears_when_continued() {
        let mut jobs = MeshJobs::new(rules());
        look(&mut jobs, running(false), &healthy(), 0);
        let stopped = with_b(Some(vec![rank(1, 200, ProcessState::Stopped, false)]), true);
        let (_, alarms) = look(&mut jobs, stopped.clone(), &healthy(), 1_000);
        assert!(alarms.is_empty(), "not before the window");
        let (views, alarms) = look(&mut jobs, stopped.clone(), &healthy(), 3_000);
        assert_eq!(alarms.len(), 1, "{alarms:?}");
        let alarm = &alarms[0];
        assert_eq!(alarm.kind, AlarmKind::JobHung);
        assert_eq!(alarm.node, id("b"), "about the silent rank's node");
        assert_eq!(alarm.subject, format!("job {JOB}"));
        assert_eq!(
            alarm.summary,
            format!(
                "job {JOB} hangs: rank 1 (pid 200) on b is stopped; rank 0 on a spins waiting \
                 on it (cable a/mesh-b ↔ b/mesh-a)"
            )
        );
        assert!(
            alarm
                .fix
                .as_deref()
                .is_some_and(|f| f.contains("kill -CONT 200 on b"))
        );
        assert_eq!(alarm.since, moment(1).wall, "since the wait began");
        assert_eq!(views[0].hung.as_deref(), Some(alarm.summary.as_str()));
        assert_eq!(
            conditions(&views),
            [
                RankCondition::Live,
                RankCondition::Stopped,
                RankCondition::Live
            ]
        );
        // Continued: the job goes on, and the alarm goes at once.
        let (views, alarms) = look(&mut jobs, running(false), &healthy(), 4_000);
        assert!(alarms.is_empty(), "{alarms:?}");
        assert_eq!(views[0].hung, None);
    }

    #[test]
    fn a_killed_or_replaced_rank_on_a_healthy_node_hangs_its_job() {
        for b in [
            None::<JobRank>,
            Some(rank(1, 999, ProcessState::Running, false)),
        ] {
            let mut jobs = MeshJobs::new(rules());
            look(&mut jobs, running(false), &healthy(), 0);
            let now = with_b(Some(b.clone().into_iter().collect()), true);
            look(&mut jobs, now.clone(), &healthy(), 1_000);
            let (views, alarms) = look(&mut jobs, now, &healthy(), 3_500);
            assert_eq!(alarms.len(), 1, "{b:?}: {alarms:?}");
            assert_eq!(alarms[0].node, id("b"));
            let expected = if b.is_some() {
                "rank 1 on b is a new process (pid 999, was 200)"
            } else {
                "rank 1 (pid 200) on b exited or was killed"
            };
            assert!(
                alarms[0].summary.contains(expected),
                "{}",
                alarms[0].summary
            );
            let condition = if b.is_some() {
                RankCondition::Restarted
            } else {
                RankCondition::Gone
            };
            assert_eq!(conditions(&views)[1], condition);
        }
    }

    #[test]
    fn peers_that_wait_without_spinning_hang_only_after_the_longer_window() {
        let mut jobs = MeshJobs::new(rules());
        look(&mut jobs, running(false), &healthy(), 0);
        let gone = with_b(Some(Vec::new()), false);
        look(&mut jobs, gone.clone(), &healthy(), 1_000);
        let (_, alarms) = look(&mut jobs, gone.clone(), &healthy(), 20_000);
        assert!(alarms.is_empty(), "a job that ends has ranks exit apart");
        let (_, alarms) = look(&mut jobs, gone, &healthy(), 31_000);
        assert_eq!(alarms.len(), 1);
        assert!(
            alarms[0].summary.contains("rank 0 on a waits on it"),
            "{}",
            alarms[0].summary
        );
    }

    #[test]
    fn a_job_whose_ranks_all_exit_is_over_not_hung() {
        let mut jobs = MeshJobs::new(rules());
        look(&mut jobs, running(true), &healthy(), 0);
        let (views, alarms) = look(
            &mut jobs,
            [Some(vec![]), Some(vec![]), Some(vec![])],
            &healthy(),
            1_000,
        );
        assert!(views.is_empty() && alarms.is_empty());
    }

    #[test]
    fn a_relaunch_under_the_same_coordinator_is_a_new_run() {
        let mut jobs = MeshJobs::new(rules());
        look(&mut jobs, running(true), &healthy(), 0);
        let relaunched = [
            Some(vec![rank(0, 101, ProcessState::Running, true)]),
            Some(vec![rank(1, 201, ProcessState::Running, true)]),
            Some(vec![rank(2, 301, ProcessState::Running, true)]),
        ];
        for ms in [1_000, 5_000] {
            let (views, alarms) = look(&mut jobs, relaunched.clone(), &healthy(), ms);
            assert!(alarms.is_empty(), "{alarms:?}");
            assert_eq!(conditions(&views), [RankCondition::Live; 3]);
            assert_eq!(views[0].since, moment(1).wall);
        }
    }

    #[test]
    fn a_rank_on_a_down_node_hangs_the_job_and_on_an_unheard_one_says_nothing() {
        let down = status([NodeState::Up, NodeState::Down, NodeState::Up], None);
        let suspect = status([NodeState::Up, NodeState::Suspect, NodeState::Up], None);
        for (status, hung) in [(down, true), (suspect, false)] {
            let mut jobs = MeshJobs::new(rules());
            look(&mut jobs, running(false), &healthy(), 0);
            look(&mut jobs, with_b(None, true), &status, 1_000);
            let (views, alarms) = look(&mut jobs, with_b(None, true), &status, 3_500);
            assert_eq!(conditions(&views)[1], RankCondition::Unheard);
            assert_eq!(alarms.len(), usize::from(hung), "{alarms:?}");
            if hung {
                assert!(alarms[0].summary.contains("ran on b, which is down"));
            }
        }
    }

    #[test]
    fn a_link_down_between_live_ranks_hangs_the_job_naming_the_link() {
        let mut jobs = MeshJobs::new(rules());
        let cut = status([NodeState::Up; 3], Some(("a", "b")));
        look(&mut jobs, running(true), &cut, 0);
        let (_, alarms) = look(&mut jobs, running(true), &cut, 2_500);
        assert_eq!(alarms.len(), 1, "{alarms:?}");
        assert_eq!(alarms[0].node, id("a"));
        assert!(
            alarms[0]
                .summary
                .contains("the link a ↔ b between its ranks is down"),
            "{}",
            alarms[0].summary
        );
        let (_, alarms) = look(&mut jobs, running(false), &healthy(), 3_000);
        assert!(alarms.is_empty());
    }

    #[test]
    fn local_ranks_are_the_processes_whose_environment_names_a_job() {
        use std::sync::Arc;

        use meshd_domain::jobs::RankIdentity;

        let identity = Arc::new(RankIdentity {
            job: JOB.to_owned(),
            backend: JobBackend::Jaccl,
            rank: 1,
            world: Some(2),
            devices: vec![Some("rdma_en5".to_owned()), None],
        });
        let process = |pid, cores, ns| ProcessSample {
            name: "python3".to_owned(),
            pid,
            cores,
            state: ProcessState::Running,
            started: 5,
            rank: Some(identity.clone()),
            network_namespace: ns,
            ..ProcessSample::default()
        };
        let processes = [
            process(7, 1.0, Some(1)),
            process(8, 0.1, Some(2)),
            ProcessSample::default(),
        ];
        let all = local_ranks(&processes, 0.9, None);
        assert_eq!(all.len(), 2);
        assert!(all[0].busy && !all[1].busy);
        assert_eq!(all[0].devices, identity.devices);
        let own = local_ranks(&processes, 0.9, Some(2));
        assert_eq!(own.iter().map(|r| r.pid).collect::<Vec<_>>(), [8]);
    }
}
