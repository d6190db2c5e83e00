//! Events are the differences between two successive verdicts of one node.
//! Deriving them (instead of emitting them where verdicts are made) means an
//! event can never disagree with the status it leads to.

use std::collections::BTreeMap;

use meshd_domain::fold::alarm_key;
use meshd_domain::{
    Alarm, Event, EventDetail, EventKind, LinkEnd, LinkState, LinkVerdict, MeshStatus, NodeId,
    NodeState,
};

/// What [`diff`] compares of the status before: quorum, node and link
/// states, and alarms. A node keeps this between looks instead of a copy of
/// its whole status, and [`Verdicts::remember`] copies only what changed,
/// so a look on a steady mesh copies nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdicts {
    has_quorum: bool,
    nodes: Vec<(NodeId, NodeState)>,
    links: Vec<(LinkEnd, LinkEnd, LinkState)>,
    alarms: Vec<Alarm>,
}

impl Verdicts {
    pub fn of(status: &MeshStatus) -> Self {
        let mut verdicts = Self::default();
        verdicts.remember(status);
        verdicts
    }

    /// Whether `status` judges the same nodes and links as these
    /// verdicts: a node or link only in one of them has no event of its
    /// own, so a change of the set is told by a snapshot.
    fn same_members(&self, status: &MeshStatus) -> bool {
        self.nodes
            .iter()
            .map(|(id, _)| id)
            .eq(status.nodes.iter().map(|n| &n.id))
            && self
                .links
                .iter()
                .map(|(a, b, _)| (a, b))
                .eq(status.links.iter().map(|l| (&l.a, &l.b)))
    }

    /// Takes `status` as the status before the next diff.
    pub fn remember(&mut self, status: &MeshStatus) {
        self.has_quorum = status.quorum.has_quorum;
        let same_nodes = self
            .nodes
            .iter()
            .map(|(id, state)| (id, *state))
            .eq(status.nodes.iter().map(|n| (&n.id, n.state)));
        if !same_nodes {
            self.nodes = status
                .nodes
                .iter()
                .map(|n| (n.id.clone(), n.state))
                .collect();
        }
        let same_links = self
            .links
            .iter()
            .map(|(a, b, state)| (a, b, *state))
            .eq(status.links.iter().map(|l| (&l.a, &l.b, l.state)));
        if !same_links {
            self.links = status
                .links
                .iter()
                .map(|l| (l.a.clone(), l.b.clone(), l.state))
                .collect();
        }
        if self.alarms != status.alarms {
            self.alarms.clone_from(&status.alarms);
        }
    }
}

/// What changed from `before` to `after`, stamped with `after`'s time. With
/// no `before` (the first evaluation) nothing has changed yet.
pub fn diff(before: Option<&Verdicts>, after: &MeshStatus) -> Vec<Event> {
    let Some(before) = before else {
        return Vec::new();
    };
    let mut events = Vec::new();
    events.extend(quorum_event(before, after));
    events.extend(node_events(before, after));
    events.extend(link_events(before, after));
    events.extend(alarm_events(before, after));
    if !before.same_members(after) {
        events.push(snapshot(after));
    }
    events
}

/// The whole of `status` as one event: what a reader folds from.
pub fn snapshot(status: &MeshStatus) -> Event {
    let troubles = status.troubles();
    let health = if troubles.is_empty() {
        "healthy".to_owned()
    } else {
        troubles.join(", ")
    };
    event(
        status,
        EventKind::Snapshot,
        "status".to_owned(),
        format!(
            "status of {}: {} nodes, {} links; {health}",
            status.node.id,
            status.nodes.len(),
            status.links.len()
        ),
        EventDetail::Snapshot(Box::new(status.clone())),
    )
}

/// An event `after`'s node observed at `after`'s time.
fn event(
    after: &MeshStatus,
    kind: EventKind,
    subject: String,
    summary: String,
    detail: EventDetail,
) -> Event {
    Event {
        at: after.evaluated_at,
        observer: after.node.id.clone(),
        kind,
        subject,
        summary,
        detail: Some(detail),
    }
}

/// Quorum lost or regained.
fn quorum_event(before: &Verdicts, after: &MeshStatus) -> Option<Event> {
    if before.has_quorum == after.quorum.has_quorum {
        return None;
    }
    let (kind, verb) = if after.quorum.has_quorum {
        (EventKind::QuorumRegained, "regained")
    } else {
        (EventKind::QuorumLost, "lost")
    };
    Some(event(
        after,
        kind,
        "quorum".to_owned(),
        format!(
            "quorum {verb}: {} of {} members fresh",
            after.quorum.members.len(),
            after.quorum.configured.len()
        ),
        EventDetail::Quorum(after.quorum.clone()),
    ))
}

/// Each node known before whose state changed.
fn node_events(before: &Verdicts, after: &MeshStatus) -> Vec<Event> {
    let old_nodes: BTreeMap<&NodeId, NodeState> = before
        .nodes
        .iter()
        .map(|(id, state)| (id, *state))
        .collect();
    after
        .nodes
        .iter()
        .filter(|node| {
            old_nodes
                .get(&node.id)
                .is_some_and(|old| *old != node.state)
        })
        .map(|node| {
            let kind = match node.state {
                NodeState::Up => EventKind::NodeUp,
                NodeState::Suspect => EventKind::NodeSuspect,
                NodeState::Down => EventKind::NodeDown,
            };
            event(
                after,
                kind,
                node.id.to_string(),
                with_evidence(
                    &format!("node {} is {}", node.id, node.state),
                    &node.evidence,
                ),
                EventDetail::Node(node.clone()),
            )
        })
        .collect()
}

/// Each link known before whose state changed.
fn link_events(before: &Verdicts, after: &MeshStatus) -> Vec<Event> {
    let old_links: BTreeMap<(&LinkEnd, &LinkEnd), LinkState> = before
        .links
        .iter()
        .map(|(a, b, state)| ((a, b), *state))
        .collect();
    after
        .links
        .iter()
        .filter_map(|link| {
            let old = old_links.get(&(&link.a, &link.b))?;
            let kind = link_event_kind(*old, link.state)?;
            Some(event(
                after,
                kind,
                link_subject(link),
                with_evidence(
                    &format!("link {} is {}", link_subject(link), link.state),
                    &link.evidence,
                ),
                EventDetail::Link(link.clone()),
            ))
        })
        .collect()
}

/// The alarms raised since `before` (or raised to another severity), then
/// those cleared, each set in the order of its key (kind, node, subject).
fn alarm_events(before: &Verdicts, after: &MeshStatus) -> Vec<Event> {
    let old_alarms: BTreeMap<_, &Alarm> = before.alarms.iter().map(|a| (alarm_key(a), a)).collect();
    let new_alarms: BTreeMap<_, &Alarm> = after.alarms.iter().map(|a| (alarm_key(a), a)).collect();
    let raised = new_alarms.iter().filter_map(|(k, alarm)| {
        let summary = match old_alarms.get(k) {
            None => format!("{} on {}: {}", alarm.kind, alarm.node, alarm.summary),
            Some(old) if old.severity != alarm.severity => format!(
                "{} on {} is now {}: {}",
                alarm.kind, alarm.node, alarm.severity, alarm.summary
            ),
            Some(_) => return None,
        };
        Some(event(
            after,
            EventKind::AlarmRaised,
            alarm.subject.clone(),
            summary,
            EventDetail::Alarm((*alarm).clone()),
        ))
    });
    let cleared = old_alarms
        .iter()
        .filter(|(k, _)| !new_alarms.contains_key(k))
        .map(|(_, alarm)| {
            event(
                after,
                EventKind::AlarmCleared,
                alarm.subject.clone(),
                format!("{} on {} cleared", alarm.kind, alarm.node),
                EventDetail::Alarm((*alarm).clone()),
            )
        });
    raised.chain(cleared).collect()
}

/// "a/en2 <-> b/en3": how links are named in events and by meshctl.
pub fn link_subject(link: &LinkVerdict) -> String {
    format!("{} <-> {}", link.a, link.b)
}

/// Every change of a link's state is an event: a reader that missed the
/// loss of evidence (down → unknown) would hold the link down forever.
fn link_event_kind(before: LinkState, after: LinkState) -> Option<EventKind> {
    let kind = match (before, after) {
        (b, a) if b == a => return None,
        (_, LinkState::Down) => EventKind::LinkDown,
        (_, LinkState::Degraded) => EventKind::LinkDegraded,
        (_, LinkState::Flapping) => EventKind::LinkFlapping,
        (_, LinkState::Unknown) => EventKind::LinkUnknown,
        (LinkState::Unknown, LinkState::Up) => EventKind::LinkUp,
        (_, LinkState::Up) => EventKind::LinkRecovered,
    };
    Some(kind)
}

fn with_evidence(summary: &str, evidence: &[String]) -> String {
    match evidence.first() {
        Some(first) => format!("{summary}: {first}"),
        None => summary.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, identity, wall};
    use meshd_domain::fold::Outline;
    use meshd_domain::{AlarmKind, Blame, NodeVerdict, Quorum, Severity};

    use super::*;

    fn status(
        at: u64,
        has_quorum: bool,
        b: NodeState,
        link: LinkState,
        alarms: Vec<Alarm>,
    ) -> MeshStatus {
        MeshStatus {
            node: identity("a", 1),
            evaluated_at: wall(at),
            quorum: Quorum {
                configured: vec![id("a"), id("b")],
                members: vec![id("a")],
                has_quorum,
                leader: None,
            },
            nodes: vec![NodeVerdict {
                id: id("b"),
                state: b,
                since: wall(at),
                evidence: vec!["last report 5s ago".into()],
                identity: None,
                last_report_at: None,
                cpu_saturated: false,
                boot: Default::default(),
                fix: None,
            }],
            links: vec![LinkVerdict {
                a: LinkEnd::node_only(id("a")),
                b: LinkEnd::node_only(id("b")),
                state: link,
                since: wall(at),
                evidence: vec![],
                blame: Blame::None,
                blamed_node: None,
                recent_changes: 0,
                flapping: false,
                fix: None,
            }],
            alarms,
            cables: vec![],
            checks: vec![],
            measurements: vec![],
            jobs: Vec::new(),
        }
    }

    fn alarm(kind: AlarmKind) -> Alarm {
        Alarm {
            kind,
            severity: Severity::Warning,
            node: id("a"),
            subject: "bridge0".into(),
            summary: "s".into(),
            evidence: vec![],
            fix: None,
            since: wall(0),
            updated: wall(0),
        }
    }

    fn kinds(events: &[Event]) -> Vec<EventKind> {
        events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn first_evaluation_has_no_events() {
        let s = status(0, true, NodeState::Up, LinkState::Up, vec![]);
        assert!(diff(None, &s).is_empty());
    }

    #[test]
    fn unchanged_status_has_no_events() {
        let s = status(
            0,
            true,
            NodeState::Up,
            LinkState::Up,
            vec![alarm(AlarmKind::CpuSpike)],
        );
        let mut later = s.clone();
        later.evaluated_at = wall(9);
        assert!(diff(Some(&Verdicts::of(&s)), &later).is_empty());
    }

    #[test]
    fn each_kind_of_change_is_one_event() {
        let before = status(
            0,
            true,
            NodeState::Up,
            LinkState::Up,
            vec![alarm(AlarmKind::CpuSpike)],
        );
        let after = status(
            1,
            false,
            NodeState::Down,
            LinkState::Down,
            vec![alarm(AlarmKind::BridgeLoop)],
        );
        let events = diff(Some(&Verdicts::of(&before)), &after);
        assert_eq!(
            kinds(&events),
            vec![
                EventKind::QuorumLost,
                EventKind::NodeDown,
                EventKind::LinkDown,
                EventKind::AlarmRaised,
                EventKind::AlarmCleared,
            ]
        );
        assert!(
            events
                .iter()
                .all(|e| e.at == wall(1) && e.observer.as_str() == "a")
        );
        assert_eq!(events[1].summary, "node b is down: last report 5s ago");
        assert_eq!(events[2].subject, "a <-> b");
    }

    #[test]
    fn recovery_and_regain_are_reported() {
        let before = status(0, false, NodeState::Down, LinkState::Down, vec![]);
        let after = status(1, true, NodeState::Up, LinkState::Up, vec![]);
        assert_eq!(
            kinds(&diff(Some(&Verdicts::of(&before)), &after)),
            vec![
                EventKind::QuorumRegained,
                EventKind::NodeUp,
                EventKind::LinkRecovered
            ]
        );
    }

    #[test]
    fn gaining_or_losing_evidence_is_told_apart_from_a_recovery() {
        let unknown = status(0, true, NodeState::Up, LinkState::Unknown, vec![]);
        let up = status(1, true, NodeState::Up, LinkState::Up, vec![]);
        let down = status(2, true, NodeState::Up, LinkState::Down, vec![]);
        let told = |a: &MeshStatus, b: &MeshStatus| kinds(&diff(Some(&Verdicts::of(a)), b));
        assert_eq!(told(&unknown, &up), vec![EventKind::LinkUp]);
        assert_eq!(told(&up, &unknown), vec![EventKind::LinkUnknown]);
        assert_eq!(told(&down, &unknown), vec![EventKind::LinkUnknown]);
        assert_eq!(told(&down, &up), vec![EventKind::LinkRecovered]);
    }

    #[test]
    fn an_alarm_raised_to_another_severity_is_raised_again() {
        let warning = alarm(AlarmKind::BridgeLoop);
        let critical = Alarm {
            severity: Severity::Critical,
            ..warning.clone()
        };
        let before = status(0, true, NodeState::Up, LinkState::Up, vec![warning]);
        let after = status(1, true, NodeState::Up, LinkState::Up, vec![critical]);
        let events = diff(Some(&Verdicts::of(&before)), &after);
        assert_eq!(kinds(&events), vec![EventKind::AlarmRaised]);
        assert!(
            events[0].summary.contains("is now critical"),
            "{}",
            events[0].summary
        );
    }

    #[test]
    fn a_changed_set_of_links_is_told_by_a_snapshot_to_fold_from() {
        let before = status(0, true, NodeState::Up, LinkState::Up, vec![]);
        let mut after = status(1, true, NodeState::Up, LinkState::Down, vec![]);
        let mut added = after.links[0].clone();
        added.b = LinkEnd::node_only(id("c"));
        after.links.push(added);
        let events = diff(Some(&Verdicts::of(&before)), &after);
        assert_eq!(
            kinds(&events),
            vec![EventKind::LinkDown, EventKind::Snapshot]
        );
        let mut folded = before.clone();
        for event in &events {
            folded.apply(event);
        }
        assert_eq!(Outline::of(&folded), Outline::of(&after));
    }
}
