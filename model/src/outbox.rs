//! What this node sends its peers, and when: one sequence of updates that
//! goes out on every stream (the management network and each cable), each
//! carrying only what changed — a link's observation at once when it
//! changes in the terms verdicts rest on ([`EndClass`]), its figures at most
//! every refresh interval, alarms, the members heard, quorum, clock offsets
//! and facts when they change — and a heartbeat when nothing did. A stream
//! that opens starts with everything sent so far, as one full update.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshd_domain::facts::NodeFacts;
use meshd_domain::jobs::JobRank;
use meshd_domain::{Alarm, ClockOffset, Lateness, LinkObservation, NodeId, NodeLoad, ReportUpdate};

use crate::link::EndClass;
use crate::link_rules::LinkRules;
use crate::time::Moment;

/// A clock offset that moved less than this since it was sent is not
/// news: offsets wander by the jitter of their samples.
const OFFSET_NEWS: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutboxSettings {
    /// An update goes out at least this often.
    pub heartbeat: Duration,
    /// A link's figures (RTT, loss) go out at most this often when nothing
    /// the verdicts rest on changed.
    pub refresh: Duration,
    pub rules: LinkRules,
}

/// What this node has to tell right now.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    pub links: &'a [LinkObservation],
    pub alarms: &'a [Alarm],
    pub hears: &'a [NodeId],
    pub heard_on_management: &'a [NodeId],
    pub has_quorum: bool,
    pub leader: Option<&'a NodeId>,
    pub clock_offsets: &'a [ClockOffset],
    pub facts: Option<&'a Arc<NodeFacts>>,
    /// The job ranks this node runs.
    pub jobs: &'a [JobRank],
    pub load: NodeLoad,
    pub lateness: Lateness,
}

/// What the peers hold of this node: everything sent so far.
#[derive(Debug)]
struct Sent {
    links: BTreeMap<NodeId, (LinkObservation, Instant)>,
    alarms: Vec<Alarm>,
    hears: Vec<NodeId>,
    heard_on_management: Vec<NodeId>,
    has_quorum: bool,
    leader: Option<NodeId>,
    clock_offsets: Vec<ClockOffset>,
    facts: Option<Arc<NodeFacts>>,
    jobs: Vec<JobRank>,
    load: NodeLoad,
    lateness: Lateness,
}

#[derive(Debug)]
pub struct Outbox {
    settings: OutboxSettings,
    sequence: u64,
    sent: Option<Sent>,
    last_sent_at: Option<Instant>,
}

/// Alarms are the same news when they say the same; `updated` moves with
/// every sample.
fn same_alarms(a: &[Alarm], b: &[Alarm]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.kind == y.kind
                && x.node == y.node
                && x.subject == y.subject
                && x.severity == y.severity
                && x.summary == y.summary
                && x.evidence == y.evidence
                && x.fix == y.fix
                && x.since == y.since
        })
}

fn offsets_moved(old: &[ClockOffset], new: &[ClockOffset]) -> bool {
    old.len() != new.len()
        || old.iter().zip(new).any(|(a, b)| {
            a.peer != b.peer
                || a.offset_ns.abs_diff(b.offset_ns)
                    > u64::try_from(OFFSET_NEWS.as_nanos()).unwrap_or(u64::MAX)
        })
}

impl Outbox {
    pub fn new(settings: OutboxSettings) -> Self {
        Self {
            settings,
            sequence: 0,
            sent: None,
            last_sent_at: None,
        }
    }

    pub fn set_settings(&mut self, settings: OutboxSettings) {
        self.settings = settings;
    }

    /// The last update's sequence number (0 before the first).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// When the next update is due if nothing changes: the heartbeat.
    pub fn next_due(&self) -> Option<Instant> {
        self.last_sent_at
            .and_then(|at| at.checked_add(self.settings.heartbeat))
    }

    /// The update due now, if any: `urgent` asks for one even when only a
    /// figure moved (a verdict changed and the peers should hear at once).
    pub fn next(
        &mut self,
        now: &Snapshot<'_>,
        moment: Moment,
        urgent: bool,
    ) -> Option<ReportUpdate> {
        let heartbeat_due = self.next_due().is_none_or(|due| moment.now >= due);
        let Some(sent) = self.sent.as_mut() else {
            return Some(self.first(now, moment));
        };
        let rules = &self.settings.rules;
        let refresh = self.settings.refresh;
        let mut update = ReportUpdate {
            sequence: self.sequence + 1,
            sent_at: moment.wall,
            lateness: now.lateness,
            full: false,
            links: Vec::new(),
            removed_links: Vec::new(),
            alarms: None,
            hears: None,
            heard_on_management: None,
            load: now.load,
            facts: None,
            has_quorum: None,
            leader: None,
            clock_offsets: None,
            jobs: None,
        };
        // `sent` is brought up to date in place rather than copied: whatever
        // changes in it goes into the update too, so when the update
        // carries no news `sent` is as it was. Every link is judged against
        // what was sent before this update.
        update.links = now
            .links
            .iter()
            .filter(|link| match sent.links.get(&link.remote.node) {
                None => true,
                Some((old, at)) => {
                    EndClass::of(old, rules) != EndClass::of(link, rules)
                        || ((urgent || moment.now.saturating_duration_since(*at) >= refresh)
                            && old != *link)
                }
            })
            .cloned()
            .collect();
        for link in &update.links {
            sent.links
                .insert(link.remote.node.clone(), (link.clone(), moment.now));
        }
        sent.links.retain(|peer, (old, _)| {
            let still_observed = now.links.iter().any(|l| l.remote.node == *peer);
            if !still_observed {
                update.removed_links.push(old.remote.clone());
            }
            still_observed
        });
        if !same_alarms(&sent.alarms, now.alarms) {
            update.alarms = Some(now.alarms.to_vec());
            sent.alarms = now.alarms.to_vec();
        }
        if sent.hears != now.hears {
            update.hears = Some(now.hears.to_vec());
            sent.hears = now.hears.to_vec();
        }
        if sent.heard_on_management != now.heard_on_management {
            update.heard_on_management = Some(now.heard_on_management.to_vec());
            sent.heard_on_management = now.heard_on_management.to_vec();
        }
        if sent.has_quorum != now.has_quorum {
            update.has_quorum = Some(now.has_quorum);
            sent.has_quorum = now.has_quorum;
        }
        if sent.leader.as_ref() != now.leader {
            update.leader = Some(now.leader.cloned());
            sent.leader = now.leader.cloned();
        }
        if offsets_moved(&sent.clock_offsets, now.clock_offsets) {
            update.clock_offsets = Some(now.clock_offsets.to_vec());
            sent.clock_offsets = now.clock_offsets.to_vec();
        }
        let facts_changed = match (&sent.facts, now.facts) {
            (Some(old), Some(new)) => !Arc::ptr_eq(old, new),
            (None, None) => false,
            _ => true,
        };
        if facts_changed {
            update.facts = now.facts.map(|f| (**f).clone());
            sent.facts = now.facts.cloned();
        }
        if sent.jobs != now.jobs {
            update.jobs = Some(now.jobs.to_vec());
            sent.jobs = now.jobs.to_vec();
        }
        let news = update.carries_changes();
        if !news && !heartbeat_due {
            return None;
        }
        sent.load = now.load;
        sent.lateness = now.lateness;
        self.sequence += 1;
        self.last_sent_at = Some(moment.now);
        Some(update)
    }

    fn first(&mut self, now: &Snapshot<'_>, moment: Moment) -> ReportUpdate {
        let sent = Sent {
            links: now
                .links
                .iter()
                .map(|l| (l.remote.node.clone(), (l.clone(), moment.now)))
                .collect(),
            alarms: now.alarms.to_vec(),
            hears: now.hears.to_vec(),
            heard_on_management: now.heard_on_management.to_vec(),
            has_quorum: now.has_quorum,
            leader: now.leader.cloned(),
            clock_offsets: now.clock_offsets.to_vec(),
            facts: now.facts.cloned(),
            jobs: now.jobs.to_vec(),
            load: now.load,
            lateness: now.lateness,
        };
        self.sequence += 1;
        self.last_sent_at = Some(moment.now);
        let update = full_update(&sent, self.sequence, moment);
        self.sent = Some(sent);
        update
    }

    /// Everything sent so far as one full update with the last sequence
    /// number: what a stream that opens starts with. `None` before the
    /// first update.
    pub fn full(&self, moment: Moment) -> Option<ReportUpdate> {
        let sent = self.sent.as_ref()?;
        Some(full_update(sent, self.sequence, moment))
    }
}

fn full_update(sent: &Sent, sequence: u64, moment: Moment) -> ReportUpdate {
    ReportUpdate {
        sequence,
        sent_at: moment.wall,
        lateness: sent.lateness,
        full: true,
        links: sent.links.values().map(|(l, _)| l.clone()).collect(),
        removed_links: Vec::new(),
        alarms: Some(sent.alarms.clone()),
        hears: Some(sent.hears.clone()),
        heard_on_management: Some(sent.heard_on_management.clone()),
        load: sent.load,
        facts: sent.facts.as_deref().cloned(),
        has_quorum: Some(sent.has_quorum),
        leader: Some(sent.leader.clone()),
        clock_offsets: Some(sent.clock_offsets.clone()),
        jobs: Some(sent.jobs.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{link_rules, moment, stalled_once};

    /// A stream that opens learns how late this node runs from its first
    /// update, as every other update says it: a zero there would read as
    /// on time and end the peers' memory of its lateness.
    #[test]
    fn a_full_update_says_how_late_the_node_runs_now() {
        let mut outbox = Outbox::new(OutboxSettings {
            heartbeat: Duration::from_secs(1),
            refresh: Duration::from_secs(2),
            rules: link_rules(),
        });
        let snapshot = |lateness| Snapshot {
            links: &[],
            alarms: &[],
            hears: &[],
            heard_on_management: &[],
            has_quorum: true,
            leader: None,
            clock_offsets: &[],
            facts: None,
            jobs: &[],
            load: NodeLoad::default(),
            lateness,
        };
        let first = outbox
            .next(
                &snapshot(stalled_once(Duration::from_millis(40))),
                moment(0),
                false,
            )
            .expect("the first update");
        assert_eq!(first.lateness, stalled_once(Duration::from_millis(40)));
        let beat = outbox
            .next(
                &snapshot(stalled_once(Duration::from_millis(700))),
                moment(1),
                false,
            )
            .expect("a heartbeat");
        assert_eq!(beat.lateness, stalled_once(Duration::from_millis(700)));
        let full = outbox.full(moment(1)).expect("sent before");
        assert!(full.full);
        assert_eq!(full.lateness, stalled_once(Duration::from_millis(700)));
    }
}
