//! A status is the sum of its events: a reader that starts from a snapshot
//! and applies every event after it, in order, holds the verdicts the node
//! holds. [`Outline`] is what that promise covers; [`MeshStatus::apply`]
//! is the folding step, shared by the simulation's check, meshctl and the
//! lab's live check so that all of them fold the same way.

use std::collections::BTreeMap;

use crate::{
    Alarm, AlarmKind, Event, EventDetail, EventKind, LinkEnd, LinkState, LinkVerdict, MeshStatus,
    NodeId, NodeState, NodeVerdict, Severity,
};

/// The verdicts events carry: quorum, every node's and link's state, and
/// the alarms standing with their severity. Evidence, fixes and times move
/// on between events (a down link's "no reply for 3s" grows every look);
/// these change only with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outline {
    pub has_quorum: bool,
    pub nodes: BTreeMap<NodeId, NodeState>,
    pub links: BTreeMap<(LinkEnd, LinkEnd), LinkState>,
    pub alarms: BTreeMap<AlarmKey, Severity>,
}

/// What tells one alarm from another: the same key raised twice is one
/// alarm updated.
pub type AlarmKey = (AlarmKind, NodeId, String);

pub fn alarm_key(alarm: &Alarm) -> AlarmKey {
    (alarm.kind, alarm.node.clone(), alarm.subject.clone())
}

impl Outline {
    pub fn of(status: &MeshStatus) -> Self {
        Self {
            has_quorum: status.quorum.has_quorum,
            nodes: status
                .nodes
                .iter()
                .map(|n| (n.id.clone(), n.state))
                .collect(),
            links: status
                .links
                .iter()
                .map(|l| ((l.a.clone(), l.b.clone()), l.state))
                .collect(),
            alarms: status
                .alarms
                .iter()
                .map(|a| (alarm_key(a), a.severity))
                .collect(),
        }
    }
}

impl Outline {
    /// Where this outline (what events told) and `holds` (what the status
    /// holds) disagree, one line each: "link a/en2 <-> b/en3: told down,
    /// holds unknown". Empty when they agree.
    pub fn differences(&self, holds: &Outline) -> Vec<String> {
        let mut lines = Vec::new();
        if self.has_quorum != holds.has_quorum {
            lines.push(format!(
                "quorum: told {}, holds {}",
                self.has_quorum, holds.has_quorum
            ));
        }
        lines.extend(differ(&self.nodes, &holds.nodes, |id| format!("node {id}")));
        lines.extend(differ(&self.links, &holds.links, |(a, b)| {
            format!("link {a} <-> {b}")
        }));
        lines.extend(differ(
            &self.alarms,
            &holds.alarms,
            |(kind, node, subject)| format!("alarm {kind} on {node} ({subject})"),
        ));
        lines
    }
}

fn differ<K: Ord, V: PartialEq + std::fmt::Display>(
    told: &BTreeMap<K, V>,
    holds: &BTreeMap<K, V>,
    name: impl Fn(&K) -> String,
) -> Vec<String> {
    let shown = |v: Option<&V>| v.map_or_else(|| "nothing".to_owned(), ToString::to_string);
    told.keys()
        .chain(holds.keys().filter(|k| !told.contains_key(k)))
        .filter(|k| told.get(k) != holds.get(k))
        .map(|k| {
            format!(
                "{}: told {}, holds {}",
                name(k),
                shown(told.get(k)),
                shown(holds.get(k))
            )
        })
        .collect()
}

impl MeshStatus {
    /// Applies one event to this status as a reader of the node's events
    /// does. An event without detail (a config reload, a restart) changes
    /// no verdict.
    pub fn apply(&mut self, event: &Event) {
        match &event.detail {
            Some(EventDetail::Snapshot(status)) => *self = (**status).clone(),
            Some(EventDetail::Quorum(quorum)) => self.quorum = quorum.clone(),
            Some(EventDetail::Node(node)) => put_node(&mut self.nodes, node),
            Some(EventDetail::Link(link)) => put_link(&mut self.links, link),
            Some(EventDetail::Alarm(alarm)) => {
                let key = alarm_key(alarm);
                self.alarms.retain(|a| alarm_key(a) != key);
                if event.kind != EventKind::AlarmCleared {
                    self.alarms.push(alarm.clone());
                }
            }
            None => {}
        }
    }
}

fn put_node(nodes: &mut Vec<NodeVerdict>, node: &NodeVerdict) {
    match nodes.iter_mut().find(|n| n.id == node.id) {
        Some(held) => *held = node.clone(),
        None => nodes.push(node.clone()),
    }
}

fn put_link(links: &mut Vec<LinkVerdict>, link: &LinkVerdict) {
    match links.iter_mut().find(|l| l.a == link.a && l.b == link.b) {
        Some(held) => *held = link.clone(),
        None => links.push(link.clone()),
    }
}

#[cfg(test)]
mod tests {
    use crate::fixtures::{empty_status, id, wall};
    use crate::{Blame, Quorum};

    use super::*;

    fn link(state: LinkState) -> LinkVerdict {
        LinkVerdict {
            a: LinkEnd::node_only(id("a")),
            b: LinkEnd::node_only(id("b")),
            state,
            since: wall(0),
            evidence: Vec::new(),
            blame: Blame::Link,
            blamed_node: None,
            recent_changes: 0,
            flapping: false,
            fix: None,
        }
    }

    fn alarm(severity: Severity) -> Alarm {
        Alarm {
            kind: AlarmKind::BridgeLoop,
            severity,
            node: id("a"),
            subject: "bridge0".into(),
            summary: "loop".into(),
            evidence: Vec::new(),
            fix: None,
            since: wall(0),
            updated: wall(0),
        }
    }

    fn event(kind: EventKind, detail: EventDetail) -> Event {
        Event {
            at: wall(1),
            observer: id("a"),
            kind,
            subject: String::new(),
            summary: String::new(),
            detail: Some(detail),
        }
    }

    #[test]
    fn each_detail_replaces_what_it_is_about() {
        let mut status = empty_status("a", wall(0));
        status.links.push(link(LinkState::Up));
        status.apply(&event(
            EventKind::LinkDown,
            EventDetail::Link(link(LinkState::Down)),
        ));
        assert_eq!(status.links.len(), 1);
        assert_eq!(status.links[0].state, LinkState::Down);
        status.apply(&event(
            EventKind::QuorumLost,
            EventDetail::Quorum(Quorum {
                has_quorum: false,
                ..Quorum::default()
            }),
        ));
        assert!(!status.quorum.has_quorum);
    }

    #[test]
    fn an_alarm_raised_again_is_one_alarm_and_a_cleared_one_is_gone() {
        let mut status = empty_status("a", wall(0));
        status.apply(&event(
            EventKind::AlarmRaised,
            EventDetail::Alarm(alarm(Severity::Warning)),
        ));
        status.apply(&event(
            EventKind::AlarmRaised,
            EventDetail::Alarm(alarm(Severity::Critical)),
        ));
        assert_eq!(
            Outline::of(&status)
                .alarms
                .into_values()
                .collect::<Vec<_>>(),
            vec![Severity::Critical]
        );
        status.apply(&event(
            EventKind::AlarmCleared,
            EventDetail::Alarm(alarm(Severity::Critical)),
        ));
        assert!(status.alarms.is_empty());
    }

    #[test]
    fn differences_name_what_disagrees() {
        let mut told = empty_status("a", wall(0));
        told.links.push(link(LinkState::Down));
        let mut holds = told.clone();
        holds.links[0].state = LinkState::Unknown;
        holds.alarms.push(alarm(Severity::Warning));
        assert_eq!(
            Outline::of(&told).differences(&Outline::of(&holds)),
            vec![
                "link a <-> b: told down, holds unknown".to_owned(),
                "alarm bridge_loop on a (bridge0): told nothing, holds warning".to_owned(),
            ]
        );
        assert!(
            Outline::of(&told)
                .differences(&Outline::of(&told))
                .is_empty()
        );
    }

    #[test]
    fn a_snapshot_replaces_everything() {
        let mut status = empty_status("a", wall(0));
        status.links.push(link(LinkState::Down));
        let fresh = empty_status("a", wall(0));
        status.apply(&event(
            EventKind::Snapshot,
            EventDetail::Snapshot(Box::new(fresh.clone())),
        ));
        assert_eq!(status, fresh);
    }
}
