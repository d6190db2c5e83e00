//! Which peer reports to believe. A report is taken only from a configured
//! member, only if it is newer than the last one taken from that member
//! (incarnation first, then sequence), and only if it was not sent too long
//! ago. Everything rejected is counted by reason.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd_proto::domain::{Incarnation, NodeId, PeerReport, RejectReason};
use meshd_proto::facts::NodeFacts;

/// A report taken, with the time it arrived on this node's clock: freshness
/// is always judged on the receiver's clock, so skew between nodes cannot
/// make a dead peer look alive.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub report: PeerReport,
    pub at: SystemTime,
}

#[derive(Debug)]
pub struct ReportBook {
    local: NodeId,
    members: BTreeSet<NodeId>,
    /// Reports sent further in the past than this (on the sender's clock
    /// against ours) are refused: a report held up that long describes a
    /// mesh that no longer exists.
    max_delay: Duration,
    /// Shared with the aggregator's inputs, so taking a snapshot ten times
    /// a second copies pointers, not reports.
    latest: BTreeMap<NodeId, Arc<Received>>,
    /// Each member's latest platform facts. Reports carry them only now and
    /// then, so they are kept apart from the reports (which the aggregator
    /// copies ten times a second).
    facts: BTreeMap<NodeId, Arc<NodeFacts>>,
    /// Bumped whenever `facts` changes, so readers redo the cable map and
    /// checks only then.
    facts_version: u64,
    rejected: BTreeMap<RejectReason, u64>,
}

impl ReportBook {
    pub fn new(local: NodeId, members: BTreeSet<NodeId>, max_delay: Duration) -> Self {
        Self {
            local,
            members,
            max_delay,
            latest: BTreeMap::new(),
            facts: BTreeMap::new(),
            facts_version: 0,
            rejected: BTreeMap::new(),
        }
    }

    /// Applies a new membership; reports of members that left are dropped.
    pub fn set_members(&mut self, members: BTreeSet<NodeId>, max_delay: Duration) {
        self.latest.retain(|id, _| members.contains(id));
        let before = self.facts.len();
        self.facts.retain(|id, _| members.contains(id));
        if self.facts.len() != before {
            self.facts_version += 1;
        }
        self.members = members;
        self.max_delay = max_delay;
    }

    pub fn accept(&mut self, mut report: PeerReport, now: SystemTime) -> Result<(), RejectReason> {
        let verdict = self.check(&report, now);
        match verdict {
            Ok(()) => {
                let sender = report.sender.id.clone();
                if let Some(facts) = report.facts.take()
                    && self.facts.get(&sender).is_none_or(|known| **known != facts)
                {
                    self.facts.insert(sender.clone(), Arc::new(facts));
                    self.facts_version += 1;
                }
                self.latest
                    .insert(sender, Arc::new(Received { report, at: now }));
            }
            Err(reason) => *self.rejected.entry(reason).or_default() += 1,
        }
        verdict
    }

    /// Counts a report that could not even be decoded.
    pub fn count_malformed(&mut self) {
        *self.rejected.entry(RejectReason::Malformed).or_default() += 1;
    }

    fn check(&self, report: &PeerReport, now: SystemTime) -> Result<(), RejectReason> {
        let sender = &report.sender;
        if sender.id == self.local || !self.members.contains(&sender.id) {
            return Err(RejectReason::UnknownNode);
        }
        if report.foreign_alarm().is_some() {
            return Err(RejectReason::ForeignAlarm);
        }
        if let Some(last) = self.latest.get(&sender.id) {
            let last_incarnation: Incarnation = last.report.sender.incarnation;
            if sender.incarnation < last_incarnation {
                return Err(RejectReason::OldIncarnation);
            }
            if sender.incarnation == last_incarnation && report.sequence <= last.report.sequence {
                return Err(RejectReason::Replayed);
            }
        }
        if now
            .duration_since(report.sent_at)
            .is_ok_and(|delay| delay > self.max_delay)
        {
            return Err(RejectReason::Stale);
        }
        Ok(())
    }

    pub fn latest(&self) -> &BTreeMap<NodeId, Arc<Received>> {
        &self.latest
    }

    pub fn rejected(&self) -> &BTreeMap<RejectReason, u64> {
        &self.rejected
    }

    /// The members' latest facts and their version.
    pub fn facts(&self) -> (&BTreeMap<NodeId, Arc<NodeFacts>>, u64) {
        (&self.facts, self.facts_version)
    }
}

#[cfg(test)]
mod tests {
    use meshd_proto::domain::{NodeIdentity, NodeLoad};

    use super::*;

    fn id(s: &str) -> NodeId {
        NodeId::new(s).expect("valid id")
    }

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn report(sender: &str, incarnation: u64, sequence: u64, sent_ms: u64) -> PeerReport {
        PeerReport {
            sender: NodeIdentity {
                id: id(sender),
                incarnation: Incarnation(incarnation),
                version: "test".into(),
                hostname: sender.into(),
            },
            sequence,
            sent_at: t(sent_ms),
            links: vec![],
            alarms: vec![],
            hears: vec![],
            load: NodeLoad::default(),
            facts: None,
        }
    }

    fn book() -> ReportBook {
        ReportBook::new(
            id("a"),
            [id("a"), id("b"), id("c")].into_iter().collect(),
            Duration::from_secs(5),
        )
    }

    #[test]
    fn accepts_increasing_sequences() {
        let mut book = book();
        assert_eq!(book.accept(report("b", 1, 1, 1_000), t(1_001)), Ok(()));
        assert_eq!(book.accept(report("b", 1, 2, 1_200), t(1_201)), Ok(()));
        assert_eq!(book.latest()[&id("b")].report.sequence, 2);
        assert_eq!(book.latest()[&id("b")].at, t(1_201));
    }

    #[test]
    fn facts_outlive_the_reports_without_them_and_bump_the_version_on_change() {
        let mut book = book();
        let with_facts = |sequence, version: &str| PeerReport {
            facts: Some(NodeFacts {
                os_version: version.into(),
                ..NodeFacts::default()
            }),
            ..report("b", 1, sequence, 1_000)
        };
        book.accept(with_facts(1, "26.2"), t(1_000)).expect("first");
        assert_eq!(book.facts().1, 1);
        assert!(book.latest()[&id("b")].report.facts.is_none(), "kept apart");
        book.accept(report("b", 1, 2, 1_000), t(1_000))
            .expect("no facts");
        book.accept(with_facts(3, "26.2"), t(1_000))
            .expect("same facts");
        assert_eq!(book.facts().1, 1, "unchanged facts keep the version");
        assert_eq!(book.facts().0[&id("b")].os_version, "26.2");
        book.accept(with_facts(4, "26.3"), t(1_000))
            .expect("new facts");
        assert_eq!(book.facts().1, 2);
        // A rejected report's facts are not taken.
        assert!(book.accept(with_facts(4, "27.0"), t(1_000)).is_err());
        assert_eq!(book.facts().0[&id("b")].os_version, "26.3");
        book.set_members(
            [id("a"), id("c")].into_iter().collect(),
            Duration::from_secs(5),
        );
        assert!(book.facts().0.is_empty());
        assert_eq!(book.facts().1, 3);
    }

    #[test]
    fn rejects_replays_and_old_incarnations_keeping_the_newest() {
        let mut book = book();
        book.accept(report("b", 5, 10, 1_000), t(1_000))
            .expect("first");
        assert_eq!(
            book.accept(report("b", 5, 10, 1_000), t(1_100)),
            Err(RejectReason::Replayed)
        );
        assert_eq!(
            book.accept(report("b", 5, 9, 1_000), t(1_100)),
            Err(RejectReason::Replayed)
        );
        assert_eq!(
            book.accept(report("b", 4, 99, 1_000), t(1_100)),
            Err(RejectReason::OldIncarnation)
        );
        assert_eq!(book.latest()[&id("b")].report.sequence, 10);
        assert_eq!(book.rejected()[&RejectReason::Replayed], 2);
        assert_eq!(book.rejected()[&RejectReason::OldIncarnation], 1);
    }

    #[test]
    fn a_restart_starts_a_new_sequence() {
        let mut book = book();
        book.accept(report("b", 5, 1_000, 1_000), t(1_000))
            .expect("old run");
        assert_eq!(book.accept(report("b", 6, 1, 2_000), t(2_000)), Ok(()));
    }

    #[test]
    fn rejects_strangers_and_itself() {
        let mut book = book();
        assert_eq!(
            book.accept(report("x", 1, 1, 0), t(0)),
            Err(RejectReason::UnknownNode)
        );
        assert_eq!(
            book.accept(report("a", 1, 1, 0), t(0)),
            Err(RejectReason::UnknownNode)
        );
        assert!(book.latest().is_empty());
    }

    #[test]
    fn rejects_reports_held_up_too_long_but_tolerates_a_fast_sender_clock() {
        let mut book = book();
        assert_eq!(
            book.accept(report("b", 1, 1, 0), t(5_001)),
            Err(RejectReason::Stale)
        );
        assert_eq!(book.accept(report("c", 1, 1, 9_000), t(5_000)), Ok(()));
    }

    #[test]
    fn membership_changes_drop_departed_members() {
        let mut book = book();
        book.accept(report("b", 1, 1, 0), t(0)).expect("b");
        book.accept(report("c", 1, 1, 0), t(0)).expect("c");
        book.set_members(
            [id("a"), id("c")].into_iter().collect(),
            Duration::from_secs(5),
        );
        assert_eq!(book.latest().keys().collect::<Vec<_>>(), vec![&id("c")]);
        assert_eq!(
            book.accept(report("b", 1, 2, 0), t(0)),
            Err(RejectReason::UnknownNode)
        );
    }
}
