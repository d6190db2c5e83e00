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

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

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
    /// When this node first saw `first`.
    first_seen: Instant,
    /// When this node first saw `latest`'s process.
    latest_seen: Instant,
}

#[derive(Debug, Clone)]
struct Tracked {
    backend: JobBackend,
    world: Option<u32>,
    since: SystemTime,
    ranks: BTreeMap<u32, Seen>,
    spinning: Hold,
    blocked: Hold,
    /// The node the last cause was about: a cause about another node is
    /// another fault, held afresh (a relaunch's new ranks must not inherit
    /// the hold of the old run's dead one).
    cause_node: Option<NodeId>,
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
    /// Seen in the rank itself (stopped, gone, replaced), not inferred from
    /// a node or link verdict: only then do ranks that merely wait count
    /// as hung. A node called down whose ranks' peers do not spin may be
    /// a dead meshd beside a healthy job.
    direct: bool,
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
        // Only a node heard now speaks for its ranks (this node always is).
        let heard: Vec<Reported<'_>> = reports
            .iter()
            .filter(|r| *r.node == status.node.id || state_of(r.node) == Some(NodeState::Up))
            .copied()
            .collect();
        self.take_reports(&heard, moment);
        let mut views = Vec::new();
        let mut alarms = Vec::new();
        self.jobs.retain(|id, job| {
            for seen in job.ranks.values_mut() {
                let report = heard.iter().find(|r| *r.node == seen.node);
                let reported = report.is_some_and(|r| {
                    r.ranks
                        .iter()
                        .any(|rank| rank.job == *id && rank.rank == seen.first.rank)
                });
                if reported {
                    continue;
                }
                if report.is_some() {
                    seen.condition = RankCondition::Gone;
                } else if state_of(&seen.node) == Some(NodeState::Down) {
                    seen.condition = RankCondition::Unheard;
                }
                // A node merely unheard for now (suspect, restarting) says
                // nothing new: its ranks stay as last known.
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
            if let Some(node) = cause.as_ref().map(|c| &c.node)
                && job.cause_node.as_ref().is_some_and(|old| old != node)
            {
                job.spinning = Hold::new(self.rules.spinning_for);
                job.blocked = Hold::new(self.rules.blocked_for);
            }
            if let Some(cause) = &cause {
                job.cause_node = Some(cause.node.clone());
            }
            let survivors: Vec<&Seen> = job
                .ranks
                .values()
                .filter(|s| s.condition == RankCondition::Live)
                .collect();
            let spinning = survivors.iter().any(|s| s.latest.busy);
            let waiting = cause.is_some() && !survivors.is_empty();
            let direct = cause.as_ref().is_some_and(|c| c.direct);
            job.spinning.update(waiting && spinning, moment.now);
            job.blocked.update(waiting && direct, moment.now);
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
        let mut reported: BTreeSet<(String, u32)> = BTreeSet::new();
        for (node, rank) in reports
            .iter()
            .flat_map(|r| r.ranks.iter().map(move |rank| (r.node, rank)))
        {
            reported.insert((rank.job.clone(), rank.rank));
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
                    cause_node: None,
                });
            job.world = rank.world.or(job.world);
            let seen = job.ranks.entry(rank.rank).or_insert_with(|| Seen {
                node: node.clone(),
                first: rank.clone(),
                latest: rank.clone(),
                condition: RankCondition::Live,
                first_seen: moment.now,
                latest_seen: moment.now,
            });
            if !seen.latest.same_process(rank) {
                seen.latest_seen = moment.now;
            }
            seen.node = node.clone();
            seen.latest = rank.clone();
        }
        for (id, job) in &mut self.jobs {
            if relaunched(job) {
                // The old run's ranks that are gone, or unheard with their
                // nodes, are not the new run's: it reports its own.
                job.ranks.retain(|rank, seen| {
                    reported.contains(&(id.clone(), *rank))
                        || !matches!(seen.condition, RankCondition::Gone | RankCondition::Unheard)
                });
                for seen in job.ranks.values_mut() {
                    seen.first = seen.latest.clone();
                    seen.first_seen = seen.latest_seen;
                }
                job.since = moment.wall;
            }
            // What is not reported now stays as it was (see `judge`).
            for (_, seen) in job
                .ranks
                .iter_mut()
                .filter(|(rank, _)| reported.contains(&(id.clone(), **rank)))
            {
                seen.condition = if !seen.first.same_process(&seen.latest) {
                    RankCondition::Restarted
                } else if seen.latest.state == ProcessState::Stopped {
                    RankCondition::Stopped
                } else {
                    RankCondition::Live
                };
            }
        }
    }
}

/// How far apart a launcher may start the ranks of one run (`mlx.launch`
/// reaches the hosts one ssh after another), and how stale a peer's report
/// of a rank may be (a sample and a report).
const RUN_SPREAD: Duration = Duration::from_secs(3);

/// Whether `job`'s ranks that are other processes than first seen are a new
/// run of it rather than ranks restarted alone: none of them has a rank
/// beside it that still runs its first process (as its node, heard, says)
/// and was seen `RUN_SPREAD` before the new process appeared. A rank restarted alone has the run's
/// other ranks, long running, beside it; a relaunch's new processes appear
/// within seconds of each other.
fn relaunched(job: &Tracked) -> bool {
    let replaced: Vec<&Seen> = job
        .ranks
        .values()
        .filter(|s| !s.first.same_process(&s.latest))
        .collect();
    !replaced.is_empty()
        && replaced.iter().all(|new| {
            !job.ranks.values().any(|old| {
                old.first.same_process(&old.latest)
                    && matches!(old.condition, RankCondition::Live | RankCondition::Stopped)
                    && old.first_seen + RUN_SPREAD <= new.latest_seen
            })
        })
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
/// rank (stopped, gone, replaced), else a rank whose node is down, else a
/// link between two live ranks' nodes that is down or flapping. A rank whose
/// node is merely unheard for now keeps its last condition.
fn cause(
    id: &str,
    job: &Tracked,
    status: &MeshStatus,
    state_of: impl Fn(&NodeId) -> Option<NodeState>,
) -> Option<Cause> {
    let silent = || {
        job.ranks.values().filter_map(|seen| {
            let rank = seen.first.rank;
            let node = &seen.node;
            let pid = seen.first.pid;
            let (what, fix, direct) = match seen.condition {
                RankCondition::Stopped => (
                    format!("rank {rank} (pid {pid}) on {node} is stopped"),
                    format!(
                        "continue it (kill -CONT {pid} on {node}) if it was stopped by mistake, \
                     and the job goes on; otherwise stop the job's ranks and relaunch it; no \
                     reboot is needed"
                    ),
                    true,
                ),
                RankCondition::Gone => (
                    format!("rank {rank} (pid {pid}) on {node} exited or was killed"),
                    relaunch(id),
                    true,
                ),
                RankCondition::Restarted => (
                    format!(
                        "rank {rank} on {node} is a new process (pid {}, was {pid}), which the \
                     others cannot take back",
                        seen.latest.pid
                    ),
                    relaunch(id),
                    true,
                ),
                RankCondition::Unheard if state_of(node) == Some(NodeState::Down) => (
                    format!("rank {rank} (pid {pid}) ran on {node}, which is down"),
                    format!(
                        "bring {node} back (see its node verdict), then {}",
                        relaunch(id)
                    ),
                    false,
                ),
                RankCondition::Live | RankCondition::Unheard => return None,
            };
            Some(Cause {
                node: node.clone(),
                what,
                fix,
                between: None,
                direct,
            })
        })
    };
    // What a rank itself shows first, then a node called down; and the
    // node already blamed while it still is a cause (a second silent rank
    // does not move the page).
    let mut silent: Vec<Cause> = silent().collect();
    silent.sort_by_key(|c| (!c.direct, job.cause_node.as_ref() != Some(&c.node)));
    silent.into_iter().next().or_else(|| {
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
                direct: false,
            })
        })
    })
}

fn relaunch(id: &str) -> String {
    format!(
        "stop the job's remaining ranks and relaunch it: JACCL ranks do not recover from a lost \
         peer (job {id}); no reboot is needed unless wired memory stays held once they are \
         stopped (then wired_memory_leak says so)"
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
    use meshd_domain::facts::{Cable, CableEnd};
    use meshd_domain::fixtures::{empty_status, end, id, link_verdict, node_verdict};

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
            cables: pairs.iter().map(|(x, y)| cable(x, y)).collect(),
            ..empty_status("a", moment(0).wall)
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
            alarm.fix.as_deref().is_some_and(
                |f| f.contains("kill -CONT 200 on b") && f.ends_with("no reboot is needed")
            ),
            "a stopped rank is recoverable, and the fix says so: {alarm:?}"
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
            // The job has run a while (a rank replaced within seconds of
            // the start is a staggered launch's, not a restart).
            let mut jobs = MeshJobs::new(rules());
            look(&mut jobs, running(false), &healthy(), 0);
            let now = with_b(Some(b.clone().into_iter().collect()), true);
            look(&mut jobs, now.clone(), &healthy(), 10_000);
            let (views, alarms) = look(&mut jobs, now, &healthy(), 12_500);
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
            let fix = alarms[0].fix.as_deref().unwrap_or_default();
            assert!(
                fix.starts_with("stop the job's remaining ranks and relaunch it")
                    && fix.contains("no reboot is needed unless wired memory stays held"),
                "a lost rank needs a relaunch, not a reboot: {fix}"
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

    /// A rank on a node called down is unheard, and with its peers
    /// spinning the job hangs; a node merely suspect (restarting, not heard
    /// for a moment) says nothing new: its ranks stay as last known, so a
    /// stopped rank's page holds through its node's meshd restart.
    /// A node that never saw one rank (its meshd started after that rank
    /// died) still takes a relaunch for one, whichever report it reads first.
    #[test]
    fn a_relaunch_is_one_even_beside_a_rank_never_seen_before() {
        let mut jobs = MeshJobs::new(rules());
        let [_, b, c] = running(true);
        look(&mut jobs, [Some(vec![]), b, c], &healthy(), 0);
        let relaunched = [
            Some(vec![rank(0, 101, ProcessState::Running, false)]),
            Some(vec![rank(1, 201, ProcessState::Running, false)]),
            Some(vec![rank(2, 301, ProcessState::Running, false)]),
        ];
        let (views, alarms) = look(&mut jobs, relaunched.clone(), &healthy(), 1_000);
        assert!(alarms.is_empty());
        assert_eq!(conditions(&views), [RankCondition::Live; 3]);
        // Its own new rank reported before the peers' new ones: still one
        // relaunch, not two restarted ranks.
        let mut jobs = MeshJobs::new(rules());
        let [_, b, c] = running(true);
        look(
            &mut jobs,
            [Some(vec![]), b.clone(), c.clone()],
            &healthy(),
            0,
        );
        let [a_new, b_new, c_new] = relaunched;
        look(&mut jobs, [a_new.clone(), b, c], &healthy(), 1_000);
        let all_new = [a_new, b_new, c_new];
        for ms in [1_100, 5_000] {
            let (views, alarms) = look(&mut jobs, all_new.clone(), &healthy(), ms);
            assert!(alarms.is_empty(), "{ms}: {alarms:?}");
            assert_eq!(conditions(&views), [RankCondition::Live; 3], "{ms}");
        }
    }

    #[test]
    fn a_rank_on_a_down_node_hangs_the_job_and_on_a_suspect_one_stays_as_it_was() {
        let down = status([NodeState::Up, NodeState::Down, NodeState::Up], None);
        let suspect = status([NodeState::Up, NodeState::Suspect, NodeState::Up], None);
        for (status, hung) in [(down, true), (suspect, false)] {
            let mut jobs = MeshJobs::new(rules());
            look(&mut jobs, running(false), &healthy(), 0);
            look(&mut jobs, with_b(None, true), &status, 1_000);
            let (views, alarms) = look(&mut jobs, with_b(None, true), &status, 3_500);
            let expected = if hung {
                RankCondition::Unheard
            } else {
                RankCondition::Live
            };
            assert_eq!(conditions(&views)[1], expected);
            assert_eq!(alarms.len(), usize::from(hung), "{alarms:?}");
            if hung {
                assert!(alarms[0].summary.contains("ran on b, which is down"));
            }
        }
        // Stopped, then its node restarts its meshd: still stopped, still hung.
        let mut jobs = MeshJobs::new(rules());
        let stopped = with_b(Some(vec![rank(1, 200, ProcessState::Stopped, false)]), true);
        look(&mut jobs, running(false), &healthy(), 0);
        look(&mut jobs, stopped.clone(), &healthy(), 1_000);
        assert_eq!(look(&mut jobs, stopped, &healthy(), 3_500).1.len(), 1);
        let restarting = status([NodeState::Up, NodeState::Suspect, NodeState::Up], None);
        let (views, alarms) = look(&mut jobs, with_b(None, true), &restarting, 4_000);
        assert_eq!(conditions(&views)[1], RankCondition::Stopped);
        assert_eq!(alarms.len(), 1, "{alarms:?}");
    }

    /// A node called down beside ranks that go on (a dead meshd, not a
    /// dead host) hangs nothing, however long; a link down beside ranks
    /// that go on neither.
    #[test]
    fn verdicts_alone_hang_a_job_only_while_its_ranks_spin() {
        let down = status([NodeState::Up, NodeState::Down, NodeState::Up], None);
        let cut = status([NodeState::Up; 3], Some(("a", "c")));
        for status in [down, cut] {
            let mut jobs = MeshJobs::new(rules());
            look(&mut jobs, running(false), &healthy(), 0);
            for ms in [1_000, 40_000, 80_000] {
                let (_, alarms) = look(&mut jobs, with_b(None, false), &status, ms);
                assert!(alarms.is_empty(), "{alarms:?}");
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
