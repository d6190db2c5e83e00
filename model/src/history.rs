//! Grouping what a node saw into incidents: pure, time passed in.
//!
//! A problem (a link not up, a node not up, quorum lost, an alarm of
//! warning or worse) joins an open incident it belongs with (one that holds
//! it, concerns one of its nodes, or began within [`JOIN_WINDOW`]) or opens
//! its own; an incident gathers what happens to it until every problem in
//! it is well again, and ends then. Pages, restarts, reboots and config
//! notices join the open incident about their nodes, or stand alone as an
//! incident of no duration. A node's
//! reboot or panic alarm stays raised for a while as a reminder
//! (`watch.boot.alarm_for`); it is in the timeline but holds nothing open,
//! and neither does an info alarm: a permanent one (no RDMA on a Linux
//! box) would make one endless incident of a node's whole life.
//!
//! The daemon stores what [`Grouper::take_changed`] returns and hands back
//! the last incidents when it starts again ([`Grouper::resume`]); problems
//! carried over a restart (or over events the history missed) are closed
//! from the status ([`Grouper::reconcile`]), since their recovery events
//! were never seen.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use meshd_domain::fold::alarm_key;
use meshd_domain::history::{Entry, EntryKind, Incident, MAX_ENTRIES_PER_INCIDENT, link_ends};
use meshd_domain::{
    Alarm, Event, EventDetail, EventKind, LinkState, MeshStatus, NodeId, NodeState, Severity,
};

use crate::events::link_subject;

/// What an entry does to the open problems.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Something went wrong (or stays wrong): the problem opens.
    Opens(String),
    /// It is well again: the problem closes.
    Closes(String),
    /// A page: tracked by its subject, never holds an incident open.
    PageSent,
    PageResolved,
    /// Joins the open incident, or stands alone.
    Point,
}

/// One thing to record, with what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Happening {
    pub entry: Entry,
    pub effect: Effect,
}

/// The key of a link's problem.
fn link_key(subject: &str) -> String {
    format!("link:{subject}")
}

fn node_key(node: &str) -> String {
    format!("node:{node}")
}

const QUORUM_KEY: &str = "quorum";

fn alarm_problem_key(alarm: &Alarm) -> String {
    let (kind, node, subject) = alarm_key(alarm);
    format!("alarm:{kind}:{node}:{subject}")
}

/// Whether a raised alarm is a problem that holds an incident open.
fn holds_incident(alarm: &Alarm) -> bool {
    alarm.severity >= Severity::Warning && !alarm.kind.about_a_boot()
}

/// An event of the stream as a history entry, or `None` for a snapshot
/// (the whole status, not a change).
pub fn from_event(event: &Event) -> Option<Happening> {
    let nodes = event_nodes(event);
    let effect = match event.kind {
        EventKind::Snapshot => return None,
        EventKind::LinkDown
        | EventKind::LinkDegraded
        | EventKind::LinkFlapping
        | EventKind::LinkUnknown => Effect::Opens(link_key(&event.subject)),
        EventKind::LinkRecovered | EventKind::LinkUp => Effect::Closes(link_key(&event.subject)),
        EventKind::NodeDown | EventKind::NodeSuspect => Effect::Opens(node_key(&event.subject)),
        EventKind::NodeUp => Effect::Closes(node_key(&event.subject)),
        EventKind::QuorumLost => Effect::Opens(QUORUM_KEY.to_owned()),
        EventKind::QuorumRegained => Effect::Closes(QUORUM_KEY.to_owned()),
        EventKind::AlarmRaised | EventKind::AlarmCleared => match &event.detail {
            Some(EventDetail::Alarm(alarm)) => {
                let key = alarm_problem_key(alarm);
                if event.kind == EventKind::AlarmCleared {
                    Effect::Closes(key)
                } else if holds_incident(alarm) {
                    Effect::Opens(key)
                } else {
                    // Raised to info from warning: no longer a problem.
                    Effect::Closes(key)
                }
            }
            // Without the alarm, its severity is unknown: context only.
            _ => Effect::Point,
        },
        EventKind::ConfigReloaded
        | EventKind::ConfigRejected
        | EventKind::NodeRestarted
        | EventKind::NodeRebooted => Effect::Point,
    };
    Some(Happening {
        entry: Entry {
            at: event.at,
            kind: EntryKind::Event(event.kind),
            subject: event.subject.clone(),
            summary: event.summary.clone(),
            nodes,
        },
        effect,
    })
}

/// The nodes an event concerns, from its detail where it has one.
fn event_nodes(event: &Event) -> Vec<NodeId> {
    let mut nodes: Vec<NodeId> = match &event.detail {
        Some(EventDetail::Link(link)) => vec![link.a.node.clone(), link.b.node.clone()],
        Some(EventDetail::Node(node)) => vec![node.id.clone()],
        Some(EventDetail::Alarm(alarm)) => vec![alarm.node.clone()],
        // Without detail, the subject names them: a link's ends, or the
        // node a node event is about (a config notice or quorum names none).
        _ => match event.kind {
            EventKind::LinkDown
            | EventKind::LinkDegraded
            | EventKind::LinkFlapping
            | EventKind::LinkRecovered
            | EventKind::LinkUp
            | EventKind::LinkUnknown => link_ends(&event.subject)
                .map(|(a, b)| vec![a, b])
                .unwrap_or_default(),
            EventKind::NodeDown
            | EventKind::NodeSuspect
            | EventKind::NodeUp
            | EventKind::NodeRestarted
            | EventKind::NodeRebooted => vec![event.subject.as_str()],
            _ => Vec::new(),
        }
        .into_iter()
        .filter_map(|name| NodeId::new(name).ok())
        .collect(),
    };
    nodes.sort();
    nodes.dedup();
    nodes
}

/// An alert posted to Alertmanager: `firing` for a page sent, otherwise
/// its resolve. `subject` names the alert (its name and what it is about),
/// the same for its firing and its resolve.
pub fn page(
    at: SystemTime,
    subject: String,
    summary: String,
    nodes: Vec<NodeId>,
    firing: bool,
) -> Happening {
    let (kind, effect) = if firing {
        (EntryKind::PageSent, Effect::PageSent)
    } else {
        (EntryKind::PageResolved, Effect::PageResolved)
    };
    Happening {
        entry: Entry {
            at,
            kind,
            subject,
            summary,
            nodes,
        },
        effect,
    }
}

/// An alert posted to Alertmanager (firing or resolved) as a page: named
/// by its alert name and labels, so its resolve finds it.
pub fn page_of(alert: &crate::alerts::Alert, at: SystemTime, firing: bool) -> Happening {
    let name = alert
        .labels
        .get("alertname")
        .map_or("alert", String::as_str);
    let mut subject = name.to_owned();
    let mut nodes = Vec::new();
    for (key, value) in &alert.labels {
        if key == "alertname" || key == "severity" {
            continue;
        }
        subject.push_str(&format!(" {key}={value}"));
        if matches!(key.as_str(), "node" | "a" | "b")
            && let Ok(node) = NodeId::new(value.as_str())
        {
            nodes.push(node);
        }
    }
    nodes.sort();
    nodes.dedup();
    let what = alert
        .annotations
        .get("summary")
        .map_or(name, String::as_str);
    let summary = if firing {
        format!("paged: {what}")
    } else {
        format!("page resolved: {what}")
    };
    page(at, subject, summary, nodes, firing)
}

/// This node's meshd started; `previous_run` says how the run before
/// ended, when the history knows.
pub fn meshd_started(at: SystemTime, node: &NodeId, previous_run: &str) -> Happening {
    Happening {
        entry: Entry {
            at,
            kind: EntryKind::MeshdStarted,
            subject: node.to_string(),
            summary: format!("meshd started on {node}; {previous_run}"),
            nodes: vec![node.clone()],
        },
        effect: Effect::Point,
    }
}

/// The history lost `missed` events (it fell behind the stream).
pub fn events_missed(at: SystemTime, node: &NodeId, missed: u64) -> Happening {
    Happening {
        entry: Entry {
            at,
            kind: EntryKind::EventsMissed,
            subject: node.to_string(),
            summary: format!(
                "the history fell behind and lost {missed} events; what was open is checked \
                 against the status"
            ),
            nodes: Vec::new(),
        },
        effect: Effect::Point,
    }
}

/// Problems that begin this close to an open incident's start are one
/// fault: a node's death and its links, a cut and the pages it raises.
pub const JOIN_WINDOW: Duration = Duration::from_secs(3);

/// Incidents that ended and are kept in memory, for a page resolved after
/// its incident's end.
const RECENTLY_CLOSED: usize = 16;

/// One incident still open, with what keeps it open.
#[derive(Debug, Clone)]
struct Open {
    incident: Incident,
    /// What is wrong in it.
    problems: BTreeSet<String>,
    /// The nodes it concerns, for relating what comes next.
    nodes: BTreeSet<NodeId>,
}

/// The incidents of one node, as they happen. Several can be open at once:
/// a problem joins an open incident that already holds it, that concerns a
/// node it concerns, or that began within [`JOIN_WINDOW`]; otherwise it
/// opens its own, so a long alarm (a busy CPU all night) does not swallow
/// an unrelated cut.
#[derive(Debug, Clone)]
pub struct Grouper {
    observer: NodeId,
    next_id: u64,
    /// By id.
    open: BTreeMap<u64, Open>,
    /// Problems whose recovery may have happened unseen (carried over a
    /// restart, or open when events were missed): closed from the status.
    unsure: BTreeSet<String>,
    /// The incidents that ended last, newest last.
    closed: Vec<Incident>,
    /// Pages sent and not resolved: their subject, and the incident they
    /// are in.
    open_pages: BTreeMap<String, u64>,
    /// Incidents changed since [`Grouper::take_changed`], by id.
    changed: BTreeMap<u64, Incident>,
}

impl Grouper {
    /// A node with no history.
    pub fn new(observer: NodeId) -> Self {
        Self::resume(observer, 1, Vec::new())
    }

    /// Carries on from the stored history: `next_id` is one past the
    /// largest id ever given, `latest` the newest incidents (those still
    /// open among them). Incidents left open by the run before stay open
    /// with their problems, which the status settles
    /// ([`Grouper::reconcile`]).
    pub fn resume(observer: NodeId, next_id: u64, mut latest: Vec<Incident>) -> Self {
        latest.sort_by_key(|i| i.id);
        let next_id = latest
            .iter()
            .map(|i| i.id.saturating_add(1))
            .chain([next_id, 1])
            .max()
            .unwrap_or(1);
        let mut grouper = Self {
            observer,
            next_id,
            open: BTreeMap::new(),
            unsure: BTreeSet::new(),
            closed: Vec::new(),
            open_pages: BTreeMap::new(),
            changed: BTreeMap::new(),
        };
        for incident in latest {
            for entry in &incident.entries {
                match entry.kind {
                    EntryKind::PageSent => {
                        grouper
                            .open_pages
                            .insert(entry.subject.clone(), incident.id);
                    }
                    EntryKind::PageResolved => {
                        grouper.open_pages.remove(&entry.subject);
                    }
                    _ => {}
                }
            }
            if incident.ended_at.is_none() && !incident.open_problems.is_empty() {
                let problems: BTreeSet<String> = incident.open_problems.iter().cloned().collect();
                grouper.unsure.extend(problems.iter().cloned());
                let nodes = incident
                    .entries
                    .iter()
                    .flat_map(|e| e.nodes.iter().cloned())
                    .collect();
                grouper.open.insert(
                    incident.id,
                    Open {
                        incident,
                        problems,
                        nodes,
                    },
                );
            } else if incident.ended_at.is_some() {
                grouper.remember_closed(incident);
            }
        }
        grouper
    }

    /// The id the next incident will get.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// How many incidents are open.
    pub fn open_incidents(&self) -> usize {
        self.open.len()
    }

    /// Whether some open problem may have recovered unseen.
    pub fn has_unsure(&self) -> bool {
        !self.unsure.is_empty()
    }

    /// Records one happening.
    pub fn record(&mut self, happening: Happening) {
        let Happening { entry, effect } = happening;
        match effect {
            Effect::Opens(key) => {
                self.unsure.remove(&key);
                let id = match self.holding(&key) {
                    Some(id) => id,
                    None => match self.related(&entry, true) {
                        Some(id) => id,
                        None => self.open_new(entry.at),
                    },
                };
                if let Some(open) = self.open.get_mut(&id) {
                    open.problems.insert(key);
                }
                self.attach(id, entry);
            }
            Effect::Closes(key) => {
                self.unsure.remove(&key);
                // A recovery of what nobody knew was wrong (a link judged
                // for the first time) is no news.
                let Some(id) = self.holding(&key) else {
                    return;
                };
                let at = entry.at;
                if let Some(open) = self.open.get_mut(&id) {
                    open.problems.remove(&key);
                }
                self.attach(id, entry);
                self.end_if_well(id, at);
            }
            Effect::PageSent => {
                if self.open_pages.contains_key(&entry.subject) {
                    return; // A resend.
                }
                let subject = entry.subject.clone();
                let id = match self.related(&entry, true) {
                    Some(id) => {
                        self.attach(id, entry);
                        id
                    }
                    None => self.point(entry),
                };
                self.open_pages.insert(subject, id);
            }
            Effect::PageResolved => {
                // Resolved already, or never paged by this history.
                let Some(id) = self.open_pages.remove(&entry.subject) else {
                    return;
                };
                if self.open.contains_key(&id) {
                    self.attach(id, entry);
                } else if let Some(closed) = self.closed.iter_mut().find(|i| i.id == id) {
                    push_entry(closed, entry);
                    self.changed.insert(closed.id, closed.clone());
                } else {
                    self.point(entry);
                }
            }
            Effect::Point => match self.related(&entry, false) {
                Some(id) => self.attach(id, entry),
                None => {
                    self.point(entry);
                }
            },
        }
    }

    /// Events were missed: what is open may have recovered unseen.
    pub fn missed(&mut self, happening: Happening) {
        self.unsure = self
            .open
            .values()
            .flat_map(|o| o.problems.iter().cloned())
            .collect();
        self.record(happening);
    }

    /// Closes the problems that may have recovered unseen and are well in
    /// `status`, at its time, each with a [`EntryKind::SeenWell`] entry.
    pub fn reconcile(&mut self, status: &MeshStatus) {
        if self.unsure.is_empty() {
            return;
        }
        let at = status.evaluated_at;
        let well: Vec<String> = self
            .unsure
            .iter()
            .filter(|key| is_well(key, status))
            .cloned()
            .collect();
        for key in well {
            self.unsure.remove(&key);
            let Some(id) = self.holding(&key) else {
                continue;
            };
            if let Some(open) = self.open.get_mut(&id) {
                open.problems.remove(&key);
            }
            self.attach(
                id,
                Entry {
                    at,
                    kind: EntryKind::SeenWell,
                    subject: key.clone(),
                    summary: format!(
                        "{key} is well in the status; its recovery was not seen (meshd was not \
                         running, or the history fell behind)"
                    ),
                    nodes: Vec::new(),
                },
            );
            self.end_if_well(id, at);
        }
    }

    /// Every incident changed since the last call, by id, with its open
    /// problems filled in: what the store writes.
    pub fn take_changed(&mut self) -> Vec<Incident> {
        std::mem::take(&mut self.changed).into_values().collect()
    }

    /// The open incident that holds problem `key`.
    fn holding(&self, key: &str) -> Option<u64> {
        self.open
            .iter()
            .find(|(_, o)| o.problems.contains(key))
            .map(|(id, _)| *id)
    }

    /// The open incident `entry` belongs with: the newest that concerns
    /// one of its nodes, or (with `by_time`, for a new problem or a page)
    /// the newest that began within [`JOIN_WINDOW`] of it.
    fn related(&self, entry: &Entry, by_time: bool) -> Option<u64> {
        let by_node = self
            .open
            .iter()
            .rev()
            .find(|(_, o)| entry.nodes.iter().any(|n| o.nodes.contains(n)))
            .map(|(id, _)| *id);
        by_node.or_else(|| {
            by_time
                .then(|| {
                    self.open
                        .iter()
                        .rev()
                        .find(|(_, o)| {
                            entry
                                .at
                                .duration_since(o.incident.started_at)
                                .is_ok_and(|since| since <= JOIN_WINDOW)
                        })
                        .map(|(id, _)| *id)
                })
                .flatten()
        })
    }

    fn open_new(&mut self, at: SystemTime) -> u64 {
        let incident = self.incident(at);
        let id = incident.id;
        self.open.insert(
            id,
            Open {
                incident,
                problems: BTreeSet::new(),
                nodes: BTreeSet::new(),
            },
        );
        id
    }

    /// Adds `entry` to open incident `id`.
    fn attach(&mut self, id: u64, entry: Entry) {
        let Some(open) = self.open.get_mut(&id) else {
            return;
        };
        open.nodes.extend(entry.nodes.iter().cloned());
        push_entry(&mut open.incident, entry);
        open.incident.open_problems = open.problems.iter().cloned().collect();
        self.changed.insert(id, open.incident.clone());
    }

    /// An incident of no duration holding `entry` alone; its id.
    fn point(&mut self, entry: Entry) -> u64 {
        let mut incident = self.incident(entry.at);
        incident.ended_at = Some(entry.at);
        push_entry(&mut incident, entry);
        let id = incident.id;
        self.changed.insert(id, incident.clone());
        self.remember_closed(incident);
        id
    }

    /// Ends open incident `id` at `at` once nothing in it is wrong.
    fn end_if_well(&mut self, id: u64, at: SystemTime) {
        if self.open.get(&id).is_some_and(|o| o.problems.is_empty())
            && let Some(open) = self.open.remove(&id)
        {
            let mut incident = open.incident;
            incident.ended_at = Some(at.max(incident.started_at));
            incident.open_problems.clear();
            self.changed.insert(id, incident.clone());
            self.remember_closed(incident);
        }
    }

    fn remember_closed(&mut self, incident: Incident) {
        self.closed.push(incident);
        let excess = self.closed.len().saturating_sub(RECENTLY_CLOSED);
        self.closed.drain(..excess);
    }

    fn incident(&mut self, at: SystemTime) -> Incident {
        let id = self.next_id;
        self.next_id = self.next_id.saturating_add(1);
        Incident {
            id,
            observer: self.observer.clone(),
            started_at: at,
            ended_at: None,
            entries: Vec::new(),
            entries_left_out: 0,
            open_problems: Vec::new(),
        }
    }
}

/// Appends `entry`, keeping the first half of the cap and the latest
/// entries when the timeline is longer.
fn push_entry(incident: &mut Incident, entry: Entry) {
    if incident.entries.len() >= MAX_ENTRIES_PER_INCIDENT {
        incident.entries.remove(MAX_ENTRIES_PER_INCIDENT / 2);
        incident.entries_left_out = incident.entries_left_out.saturating_add(1);
    }
    incident.entries.push(entry);
}

/// Whether the problem `key` is well in `status`: a link up, a node up,
/// quorum held, an alarm no longer raised (a link or node the status no
/// longer judges is gone from the config, so nothing is wrong with it).
fn is_well(key: &str, status: &MeshStatus) -> bool {
    if key == QUORUM_KEY {
        return status.quorum.has_quorum;
    }
    if let Some(subject) = key.strip_prefix("link:") {
        return status
            .links
            .iter()
            .find(|l| link_subject(l) == subject)
            .is_none_or(|l| l.state == LinkState::Up);
    }
    if let Some(node) = key.strip_prefix("node:") {
        return status
            .nodes
            .iter()
            .find(|n| n.id.as_str() == node)
            .is_none_or(|n| n.state == NodeState::Up);
    }
    if key.starts_with("alarm:") {
        return !status
            .alarms
            .iter()
            .any(|a| holds_incident(a) && alarm_problem_key(a) == key);
    }
    false
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use meshd_domain::fixtures::{empty_status, end, id, link_verdict, node_verdict, wall};
    use meshd_domain::{AlarmKind, LinkEnd, LinkVerdict, Quorum};

    use super::*;

    fn link_event(at: u64, kind: EventKind, state: LinkState) -> Event {
        let link = link_verdict(end("a", "en2"), end("b", "en3"), state);
        Event {
            at: wall(at),
            observer: id("a"),
            kind,
            subject: link_subject(&link),
            summary: format!("link {} is {state}", link_subject(&link)),
            detail: Some(EventDetail::Link(link)),
        }
    }

    fn node_event(at: u64, kind: EventKind, node: &str, state: NodeState) -> Event {
        Event {
            at: wall(at),
            observer: id("a"),
            kind,
            subject: node.to_owned(),
            summary: format!("node {node} is {state}"),
            detail: Some(EventDetail::Node(node_verdict(id(node), state, wall(at)))),
        }
    }

    fn alarm_event(at: u64, kind: EventKind, alarm_kind: AlarmKind, severity: Severity) -> Event {
        let alarm = Alarm {
            kind: alarm_kind,
            severity,
            node: id("b"),
            subject: "b".into(),
            summary: "something".into(),
            evidence: vec![],
            fix: None,
            since: wall(at),
            updated: wall(at),
        };
        Event {
            at: wall(at),
            observer: id("a"),
            kind,
            subject: "b".into(),
            summary: format!("{alarm_kind} on b"),
            detail: Some(EventDetail::Alarm(alarm)),
        }
    }

    fn record(grouper: &mut Grouper, event: Event) {
        grouper.record(from_event(&event).expect("not a snapshot"));
    }

    fn kinds(incident: &Incident) -> Vec<&'static str> {
        incident.entries.iter().map(|e| e.kind.as_str()).collect()
    }

    #[test]
    fn a_cut_and_its_recovery_are_one_incident_with_its_page() {
        let mut grouper = Grouper::new(id("a"));
        record(
            &mut grouper,
            link_event(10, EventKind::LinkDown, LinkState::Down),
        );
        grouper.record(page(
            wall(11),
            "MeshLinkDown a/en2 <-> b/en3".into(),
            "paged".into(),
            vec![id("a"), id("b")],
            true,
        ));
        // The same page resent by the leader is not a second page.
        grouper.record(page(
            wall(40),
            "MeshLinkDown a/en2 <-> b/en3".into(),
            "paged".into(),
            vec![id("a"), id("b")],
            true,
        ));
        let open = grouper.take_changed();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].ended_at, None);
        assert_eq!(open[0].open_problems, ["link:a/en2 <-> b/en3"]);
        record(
            &mut grouper,
            link_event(70, EventKind::LinkRecovered, LinkState::Up),
        );
        grouper.record(page(
            wall(71),
            "MeshLinkDown a/en2 <-> b/en3".into(),
            "resolved".into(),
            vec![],
            false,
        ));
        let changed = grouper.take_changed();
        assert_eq!(
            changed.len(),
            1,
            "the late resolve joins the ended incident"
        );
        let incident = &changed[0];
        assert_eq!(incident.id, 1);
        assert_eq!(incident.started_at, wall(10));
        assert_eq!(incident.ended_at, Some(wall(70)));
        assert_eq!(incident.duration(wall(1000)), Duration::from_secs(60));
        assert_eq!(
            kinds(incident),
            ["link_down", "page_sent", "link_recovered", "page_resolved"]
        );
        assert!(incident.open_problems.is_empty());
        assert!(incident.concerns_link(&id("b"), &id("a")));
        assert!(incident.concerns_node(&id("b")));
        assert!(!incident.concerns_node(&id("c")));
    }

    #[test]
    fn a_page_is_named_by_its_alert_and_labels_and_names_its_nodes() {
        let alert = crate::alerts::Alert {
            labels: [
                ("alertname".to_owned(), "MeshLinkDown".to_owned()),
                ("a".to_owned(), "a".to_owned()),
                ("b".to_owned(), "b".to_owned()),
                ("severity".to_owned(), "critical".to_owned()),
            ]
            .into(),
            annotations: [("summary".to_owned(), "Link a <-> b is down".to_owned())].into(),
            starts_at: wall(1),
        };
        let sent = page_of(&alert, wall(2), true);
        assert_eq!(sent.entry.subject, "MeshLinkDown a=a b=b");
        assert_eq!(sent.entry.summary, "paged: Link a <-> b is down");
        assert_eq!(sent.entry.nodes, [id("a"), id("b")]);
        assert_eq!(sent.effect, Effect::PageSent);
        let resolved = page_of(&alert, wall(3), false);
        assert_eq!(resolved.entry.subject, sent.entry.subject);
        assert_eq!(resolved.effect, Effect::PageResolved);
    }

    #[test]
    fn overlapping_faults_are_one_incident_until_the_last_heals() {
        let mut grouper = Grouper::new(id("a"));
        record(
            &mut grouper,
            link_event(10, EventKind::LinkDown, LinkState::Down),
        );
        record(
            &mut grouper,
            node_event(12, EventKind::NodeDown, "c", NodeState::Down),
        );
        record(
            &mut grouper,
            link_event(20, EventKind::LinkRecovered, LinkState::Up),
        );
        assert!(grouper.open_incidents() == 1, "c is still down");
        record(
            &mut grouper,
            node_event(30, EventKind::NodeUp, "c", NodeState::Up),
        );
        assert!(grouper.open_incidents() == 0);
        record(
            &mut grouper,
            link_event(50, EventKind::LinkDegraded, LinkState::Degraded),
        );
        let changed = grouper.take_changed();
        assert_eq!(changed.len(), 2);
        assert_eq!(changed[0].ended_at, Some(wall(30)));
        assert_eq!(changed[1].id, 2);
        assert_eq!(changed[1].started_at, wall(50));
        assert_eq!(grouper.next_id(), 3);
    }

    #[test]
    fn an_unrelated_fault_during_a_long_alarm_is_an_incident_of_its_own() {
        let mut grouper = Grouper::new(id("a"));
        record(
            &mut grouper,
            alarm_event(
                10,
                EventKind::AlarmRaised,
                AlarmKind::CpuSpike,
                Severity::Warning,
            ),
        );
        let cut = link_verdict(end("c", "en2"), end("d", "en3"), LinkState::Down);
        let cut_event = |at: u64, kind: EventKind, state: LinkState| Event {
            at: wall(at),
            observer: id("a"),
            kind,
            subject: link_subject(&cut),
            summary: format!("link c <-> d is {state}"),
            detail: Some(EventDetail::Link(LinkVerdict {
                state,
                ..cut.clone()
            })),
        };
        record(
            &mut grouper,
            cut_event(100, EventKind::LinkDown, LinkState::Down),
        );
        assert_eq!(
            grouper.open_incidents(),
            2,
            "b's busy CPU is not the c-d cut"
        );
        record(
            &mut grouper,
            cut_event(104, EventKind::LinkRecovered, LinkState::Up),
        );
        assert_eq!(grouper.open_incidents(), 1);
        let changed = grouper.take_changed();
        let cut_incident = changed.iter().find(|i| i.id == 2).expect("the cut");
        assert_eq!(cut_incident.started_at, wall(100));
        assert_eq!(cut_incident.ended_at, Some(wall(104)));
        assert_eq!(kinds(cut_incident), ["link_down", "link_recovered"]);
        // A page about b joins the alarm's incident, not a new one.
        grouper.record(page(
            wall(110),
            "MeshCpuSpike node=b".into(),
            "paged".into(),
            vec![id("b")],
            true,
        ));
        let changed = grouper.take_changed();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].id, 1);
    }

    #[test]
    fn a_recovery_nobody_knew_of_and_a_snapshot_record_nothing() {
        let mut grouper = Grouper::new(id("a"));
        record(
            &mut grouper,
            link_event(10, EventKind::LinkUp, LinkState::Up),
        );
        let snapshot = crate::events::snapshot(&empty_status("a", wall(11)));
        assert!(from_event(&snapshot).is_none());
        assert!(grouper.take_changed().is_empty());
    }

    #[test]
    fn restarts_and_reloads_stand_alone_when_nothing_is_wrong() {
        let mut grouper = Grouper::new(id("a"));
        grouper.record(meshd_started(wall(5), &id("a"), "it stopped cleanly"));
        record(
            &mut grouper,
            node_event(9, EventKind::NodeRestarted, "b", NodeState::Up),
        );
        let changed = grouper.take_changed();
        assert_eq!(changed.len(), 2);
        for incident in &changed {
            assert_eq!(Some(incident.started_at), incident.ended_at);
        }
        assert_eq!(changed[1].entries[0].nodes, [id("b")]);
    }

    #[test]
    fn info_alarms_and_reboot_reminders_hold_nothing_open() {
        let mut grouper = Grouper::new(id("a"));
        record(
            &mut grouper,
            alarm_event(
                10,
                EventKind::AlarmRaised,
                AlarmKind::RdmaDisabled,
                Severity::Info,
            ),
        );
        record(
            &mut grouper,
            alarm_event(
                10,
                EventKind::AlarmRaised,
                AlarmKind::NodeRebooted,
                Severity::Warning,
            ),
        );
        assert!(grouper.open_incidents() == 0);
        record(
            &mut grouper,
            alarm_event(
                20,
                EventKind::AlarmRaised,
                AlarmKind::CpuSpike,
                Severity::Warning,
            ),
        );
        assert!(grouper.open_incidents() == 1);
        record(
            &mut grouper,
            alarm_event(
                30,
                EventKind::AlarmCleared,
                AlarmKind::CpuSpike,
                Severity::Warning,
            ),
        );
        assert!(grouper.open_incidents() == 0);
        let changed = grouper.take_changed();
        assert_eq!(changed.last().map(|i| i.ended_at), Some(Some(wall(30))));
    }

    #[test]
    fn an_incident_open_over_a_restart_ends_when_the_status_shows_it_well() {
        let mut before = Grouper::new(id("a"));
        record(
            &mut before,
            link_event(10, EventKind::LinkDown, LinkState::Down),
        );
        record(
            &mut before,
            Event {
                at: wall(10),
                observer: id("a"),
                kind: EventKind::QuorumLost,
                subject: "quorum".into(),
                summary: "quorum lost".into(),
                detail: None,
            },
        );
        let stored = before.take_changed();
        let mut after = Grouper::resume(id("a"), before.next_id(), stored);
        assert!(after.open_incidents() == 1);
        assert!(after.has_unsure());
        // Links unknown and no quorum yet: nothing settles.
        let mut status = empty_status("a", wall(40));
        status.links.push(link_verdict(
            end("a", "en2"),
            end("b", "en3"),
            LinkState::Unknown,
        ));
        after.reconcile(&status);
        assert!(after.open_incidents() == 1);
        status.quorum = Quorum {
            configured: vec![id("a"), id("b")],
            members: vec![id("a"), id("b")],
            has_quorum: true,
            leader: None,
        };
        status.links[0].state = LinkState::Up;
        status.evaluated_at = wall(45);
        after.reconcile(&status);
        assert!(after.open_incidents() == 0);
        let changed = after.take_changed();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].id, 1);
        assert_eq!(changed[0].ended_at, Some(wall(45)));
        assert_eq!(kinds(&changed[0]).last(), Some(&"seen_well"));
        // The next incident does not reuse an id.
        record(
            &mut after,
            link_event(50, EventKind::LinkDown, LinkState::Down),
        );
        assert_eq!(after.take_changed()[0].id, 2);
    }

    #[test]
    fn problems_seen_live_are_not_closed_from_the_status() {
        let mut grouper = Grouper::new(id("a"));
        record(
            &mut grouper,
            link_event(10, EventKind::LinkDown, LinkState::Down),
        );
        let mut status = empty_status("a", wall(11));
        status.links.push(link_verdict(
            end("a", "en2"),
            end("b", "en3"),
            LinkState::Up,
        ));
        grouper.reconcile(&status);
        assert!(
            grouper.open_incidents() == 1,
            "the recovery event will come"
        );
        grouper.missed(events_missed(wall(12), &id("a"), 5));
        grouper.reconcile(&status);
        assert!(
            grouper.open_incidents() == 0,
            "after missed events the status decides"
        );
    }

    #[test]
    fn a_long_flapping_night_keeps_its_first_and_latest_entries() {
        let mut grouper = Grouper::new(id("a"));
        for i in 0..1000 {
            let (kind, state) = if i % 2 == 0 {
                (EventKind::LinkFlapping, LinkState::Flapping)
            } else {
                (EventKind::LinkDown, LinkState::Down)
            };
            record(&mut grouper, link_event(i, kind, state));
        }
        let incident = grouper.take_changed().remove(0);
        assert_eq!(incident.entries.len(), MAX_ENTRIES_PER_INCIDENT);
        assert_eq!(
            incident.entries_left_out,
            1000 - MAX_ENTRIES_PER_INCIDENT as u64
        );
        assert_eq!(incident.entries[0].at, wall(0));
        assert_eq!(incident.entries.last().map(|e| e.at), Some(wall(999)));
        assert!(incident.entries.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn a_link_end_without_detail_still_names_its_nodes() {
        let event = Event {
            at: wall(1),
            observer: id("a"),
            kind: EventKind::LinkDown,
            subject: "a/en2 <-> b".into(),
            summary: "down".into(),
            detail: None,
        };
        let happening = from_event(&event).expect("entry");
        assert_eq!(happening.entry.nodes, [id("a"), id("b")]);
        let reload = Event {
            kind: EventKind::ConfigReloaded,
            subject: "config".into(),
            ..event
        };
        assert!(from_event(&reload).expect("entry").entry.nodes.is_empty());
        let _ = LinkEnd::node_only(id("a"));
    }
}
