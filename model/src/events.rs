//! Events are the differences between two successive verdicts of one node.
//! Deriving them (instead of emitting them where verdicts are made) means an
//! event can never disagree with the status it leads to.

use std::collections::BTreeMap;

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
    events
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

/// Each link known before whose state changed in a way that is news (see
/// [`link_event_kind`]).
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

/// The alarms raised since `before`, then those cleared, each set in the
/// order of its key (kind, node, subject).
fn alarm_events(before: &Verdicts, after: &MeshStatus) -> Vec<Event> {
    let key = |a: &Alarm| (a.kind, a.node.clone(), a.subject.clone());
    let old_alarms: BTreeMap<_, &Alarm> = before.alarms.iter().map(|a| (key(a), a)).collect();
    let new_alarms: BTreeMap<_, &Alarm> = after.alarms.iter().map(|a| (key(a), a)).collect();
    let raised = new_alarms
        .iter()
        .filter(|(k, _)| !old_alarms.contains_key(k))
        .map(|(_, alarm)| {
            event(
                after,
                EventKind::AlarmRaised,
                alarm.subject.clone(),
                format!("{} on {}: {}", alarm.kind, alarm.node, alarm.summary),
                EventDetail::Alarm((*alarm).clone()),
            )
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

fn link_event_kind(before: LinkState, after: LinkState) -> Option<EventKind> {
    match (before, after) {
        (b, a) if b == a => None,
        (_, LinkState::Down) => Some(EventKind::LinkDown),
        (_, LinkState::Degraded) => Some(EventKind::LinkDegraded),
        (_, LinkState::Flapping) => Some(EventKind::LinkFlapping),
        (LinkState::Down | LinkState::Degraded | LinkState::Flapping, LinkState::Up) => {
            Some(EventKind::LinkRecovered)
        }
        // Unknown → up is a link proving itself, and anything → unknown is a
        // loss of evidence (quorum lost, reported once as such): neither is
        // news about the link.
        _ => None,
    }
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
    fn gaining_or_losing_evidence_is_not_link_news() {
        let unknown = status(0, true, NodeState::Up, LinkState::Unknown, vec![]);
        let up = status(1, true, NodeState::Up, LinkState::Up, vec![]);
        assert!(diff(Some(&Verdicts::of(&unknown)), &up).is_empty());
        assert!(diff(Some(&Verdicts::of(&up)), &unknown).is_empty());
    }
}
