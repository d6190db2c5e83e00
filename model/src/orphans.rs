//! Orphaned ranks: when a job's launcher dies, its ranks can live on,
//! re-parented to launchd or init (pid 1; on Linux possibly a subreaper
//! such as `systemd --user`), holding memory and the RDMA device the next
//! job needs. The kernel re-parents a process only when its parent exits,
//! so a job process whose parent changed since it was first seen, for
//! longer than the grace period, is orphaned; one started by launchd or
//! init in the first place (a job run as a service) is not. A rank
//! orphaned before meshd first saw it is not known as one. Pure: samples
//! and their time come in, alarms go out.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use meshd_domain::{Alarm, AlarmKind, NodeId, Severity};

use crate::cpu::ProcessSample;
use crate::jobs::is_job;
use crate::memory::gib;

/// The pid orphans are re-parented to, unless a subreaper takes them:
/// launchd on macOS, init on Linux.
const INIT: u32 = 1;

#[derive(Debug, Clone, PartialEq)]
pub struct OrphanRules {
    /// The job patterns (`watch.jobs.patterns`).
    pub patterns: Vec<String>,
    /// How long a rank may stay re-parented: a launcher shutting its ranks
    /// down takes a moment.
    pub grace: Duration,
}

/// The orphaned job processes right now, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Orphans {
    pub processes: usize,
    /// Their resident memory; the sum of those whose memory is known.
    pub memory_bytes: u64,
}

#[derive(Debug, Clone)]
struct Tracked {
    /// The parent it had when first seen; `None` when unknown then.
    first_parent: Option<u32>,
    /// Since when it has had another parent than its first.
    orphaned_since: Option<SystemTime>,
    parent: Option<u32>,
    memory_bytes: Option<u64>,
}

/// Raises one `job_orphaned` per process name on this node (ranks share
/// names; their pids are in the evidence).
#[derive(Debug, Clone)]
pub struct OrphanDetector {
    node: NodeId,
    rules: OrphanRules,
    /// Per (pid, name), so a reused pid starts afresh.
    tracked: BTreeMap<(u32, String), Tracked>,
}

impl OrphanDetector {
    pub fn new(node: NodeId, rules: OrphanRules) -> Self {
        Self {
            node,
            rules,
            tracked: BTreeMap::new(),
        }
    }

    pub fn reconfigure(&mut self, rules: OrphanRules) {
        self.rules = rules;
    }

    /// Feeds one sample of the processes; returns the active alarms and
    /// what the orphans hold.
    pub fn update(
        &mut self,
        processes: &[ProcessSample],
        now: SystemTime,
    ) -> (Vec<Alarm>, Orphans) {
        let mut seen = Vec::new();
        for process in processes.iter().filter(|p| is_job(p, &self.rules.patterns)) {
            let key = (process.pid, process.name.clone());
            let tracked = self.tracked.entry(key.clone()).or_insert(Tracked {
                first_parent: process.parent,
                orphaned_since: None,
                parent: process.parent,
                memory_bytes: None,
            });
            let adopted = tracked.first_parent.is_some()
                && process.parent.is_some()
                && process.parent != tracked.first_parent;
            tracked.parent = process.parent;
            tracked.orphaned_since = if adopted {
                tracked.orphaned_since.or(Some(now))
            } else {
                None
            };
            tracked.memory_bytes = process.memory_bytes;
            seen.push(key);
        }
        // An exited process is no orphan any more.
        self.tracked.retain(|key, _| seen.contains(key));

        let mut orphans = Orphans::default();
        let mut by_name: BTreeMap<&str, Vec<(u32, &Tracked, SystemTime)>> = BTreeMap::new();
        for ((pid, name), tracked) in &self.tracked {
            if let Some(since) = tracked.orphaned_since
                && now.duration_since(since).unwrap_or_default() >= self.rules.grace
            {
                orphans.processes += 1;
                orphans.memory_bytes += tracked.memory_bytes.unwrap_or(0);
                by_name
                    .entry(name.as_str())
                    .or_default()
                    .push((*pid, tracked, since));
            }
        }
        let alarms = by_name
            .into_iter()
            .map(|(name, procs)| self.alarm(name, &procs, now))
            .collect();
        (alarms, orphans)
    }

    fn alarm(&self, name: &str, procs: &[(u32, &Tracked, SystemTime)], now: SystemTime) -> Alarm {
        let since = procs.iter().map(|(_, _, s)| *s).min().unwrap_or(now);
        let known: Vec<u64> = procs
            .iter()
            .filter_map(|(_, t, _)| t.memory_bytes)
            .collect();
        let held = if known.len() == procs.len() {
            format!("hold {}", gib(known.iter().sum()))
        } else {
            "hold memory (how much is not known for all)".to_owned()
        };
        let ranks = if procs.len() == 1 {
            "a job process".to_owned()
        } else {
            format!("{} job processes", procs.len())
        };
        let evidence = procs
            .iter()
            .map(|(pid, tracked, since)| {
                let memory = tracked.memory_bytes.map_or_else(
                    || "memory unknown".to_owned(),
                    |m| format!("holds {}", gib(m)),
                );
                let was = tracked
                    .first_parent
                    .map(|p| format!(", launched by pid {p}"))
                    .unwrap_or_default();
                let now_under = match tracked.parent {
                    Some(INIT) => "pid 1 (launchd/init)".to_owned(),
                    Some(reaper) => format!("pid {reaper} (a subreaper)"),
                    None => "another parent".to_owned(),
                };
                format!(
                    "{name} (pid {pid}): re-parented to {now_under} {}s ago{was}; {memory}",
                    now.duration_since(*since).unwrap_or_default().as_secs()
                )
            })
            .collect();
        let pids: Vec<String> = procs.iter().map(|(pid, _, _)| pid.to_string()).collect();
        Alarm {
            kind: AlarmKind::JobOrphaned,
            severity: Severity::Warning,
            node: self.node.clone(),
            subject: name.to_owned(),
            summary: format!(
                "{ranks} {name} on {} outlived their launcher and {held}",
                self.node
            ),
            evidence,
            fix: Some(format!(
                "their launcher is gone: stop them (kill {}; kill -9 if they ignore it) to free \
                 their memory and the RDMA device, then relaunch the job",
                pids.join(" ")
            )),
            since,
            updated: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, wall};

    use super::*;

    fn detector() -> OrphanDetector {
        OrphanDetector::new(
            id("c"),
            OrphanRules {
                patterns: vec!["mlx".into()],
                grace: Duration::from_secs(30),
            },
        )
    }

    fn rank(pid: u32, parent: u32, memory_gib: Option<u64>) -> ProcessSample {
        ProcessSample {
            name: "python3".into(),
            pid,
            cores: 1.0,
            command: Some("python3 -m mlx.launch --rank 1".into()),
            parent: Some(parent),
            memory_bytes: memory_gib.map(|g| g << 30),
            ..ProcessSample::default()
        }
    }

    #[test]
    fn ranks_whose_launcher_died_are_orphans_after_the_grace_period() {
        let mut d = detector();
        let launched = [rank(42, 40, Some(38)), rank(43, 40, Some(38))];
        assert_eq!(d.update(&launched, wall(0)).1, Orphans::default());
        let adopted = [rank(42, 1, Some(38)), rank(43, 1, Some(38))];
        assert!(
            d.update(&adopted, wall(5)).0.is_empty(),
            "within the grace period"
        );
        let (alarms, orphans) = d.update(&adopted, wall(35));
        assert_eq!(
            orphans,
            Orphans {
                processes: 2,
                memory_bytes: 76 << 30
            }
        );
        assert_eq!(alarms.len(), 1);
        let alarm = &alarms[0];
        assert_eq!(
            (alarm.kind, alarm.subject.as_str()),
            (AlarmKind::JobOrphaned, "python3")
        );
        assert_eq!(
            alarm.summary,
            "2 job processes python3 on c outlived their launcher and hold 76.0 GiB"
        );
        assert_eq!(
            alarm.evidence[0],
            "python3 (pid 42): re-parented to pid 1 (launchd/init) 30s ago, launched by pid 40; holds 38.0 GiB"
        );
        assert!(alarm.fix.as_deref().expect("fix").contains("kill 42 43"));
        assert_eq!(alarm.since, wall(5));
        // Killed: gone at once.
        assert_eq!(d.update(&[], wall(36)), (vec![], Orphans::default()));
    }

    #[test]
    fn a_job_started_by_launchd_or_of_unknown_parentage_is_no_orphan() {
        let mut d = detector();
        let service = [rank(7, 1, Some(1))];
        for s in 0..100 {
            assert!(d.update(&service, wall(s)).0.is_empty());
        }
        let mut d = detector();
        let mut unknown = rank(8, 1, None);
        unknown.parent = None;
        d.update(&[unknown], wall(0));
        for s in 1..100 {
            assert!(d.update(&[rank(8, 1, None)], wall(s)).0.is_empty());
        }
        // Other processes under pid 1 are not jobs.
        let mut d = detector();
        let mut daemon = rank(9, 30, None);
        daemon.name = "sshd".into();
        daemon.command = None;
        d.update(&[daemon.clone()], wall(0));
        daemon.parent = Some(1);
        assert!(d.update(&[daemon], wall(100)).0.is_empty());
    }

    #[test]
    fn a_subreaper_adopting_the_rank_is_named() {
        let mut d = detector();
        d.update(&[rank(42, 40, Some(1))], wall(0));
        d.update(&[rank(42, 977, Some(1))], wall(1));
        let (alarms, _) = d.update(&[rank(42, 977, Some(1))], wall(31));
        assert!(
            alarms[0].evidence[0]
                .starts_with("python3 (pid 42): re-parented to pid 977 (a subreaper) 30s ago"),
            "{alarms:?}"
        );
    }

    #[test]
    fn unknown_memory_is_said_and_a_reused_pid_starts_afresh() {
        let mut d = detector();
        d.update(&[rank(42, 40, None)], wall(0));
        d.update(&[rank(42, 1, None)], wall(1));
        let (alarms, orphans) = d.update(&[rank(42, 1, None)], wall(40));
        assert!(
            alarms[0]
                .summary
                .ends_with("hold memory (how much is not known for all)")
        );
        assert_eq!(orphans.memory_bytes, 0);
        // The pid now names another program, first seen under pid 1.
        let mut other = rank(42, 1, None);
        other.name = "mlx-server".into();
        assert!(d.update(&[other], wall(100)).0.is_empty());
    }
}
