//! What meshd tells Alertmanager: alerts derived from the verdicts and
//! alarms of a node's status, and the state machine that decides what to
//! send when — firing alerts at once and again every resend interval,
//! resolved alerts explicitly — and who sends: the leader of the quorum
//! everything, a node without quorum only what it alone can still vouch for
//! (a peer silent on every path, the lost quorum itself).
//!
//! An alert's labels are exactly those of the shipped Prometheus rule for
//! the same fault (dashboards/prometheus/meshd.rules.yml), so when both are
//! wired to one Alertmanager it sees one alert, not two.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{AlarmKind, Blame, LinkState, MeshStatus, NodeId, NodeState, Severity};

pub type Labels = BTreeMap<String, String>;

/// Where the runbook sections live; the alert name, lowercased, is the anchor.
pub const RUNBOOK: &str = "https://github.com/meshd/meshd/blob/main/docs/RUNBOOK.md";

/// The annotation that marks an alert as one meshd posted, naming the node
/// that posted it: a new leader finds the alerts to reconcile by it.
pub const POSTED_BY: &str = "meshd_posted_by";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    pub labels: Labels,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: SystemTime,
}

/// One alert to post, with the end Alertmanager should assume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub alert: Alert,
    pub ends_at: SystemTime,
}

/// What a node posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The leader of the quorum: every alert of its status.
    Leader,
    /// Without quorum: only what it can vouch for alone.
    Minority,
    /// A member of the quorum that does not lead it: nothing.
    Follower,
}

impl Role {
    pub fn of(status: &MeshStatus) -> Self {
        match (&status.quorum.leader, status.quorum.has_quorum) {
            (_, false) => Role::Minority,
            (Some(leader), true) if *leader == status.node.id => Role::Leader,
            _ => Role::Follower,
        }
    }
}

/// The alert an alarm kind becomes, and whether it is about one node (its
/// `node` label) or the whole mesh (no node label: every node raises the
/// same one).
fn alert_of_kind(kind: AlarmKind) -> Option<(&'static str, bool)> {
    Some(match kind {
        // Only a node without quorum raises it, and then as MeshNoQuorum.
        AlarmKind::NoQuorum => return None,
        AlarmKind::BridgeLoop => ("MeshBridgeLoop", true),
        AlarmKind::BroadcastStorm => ("MeshBroadcastStorm", true),
        AlarmKind::CpuSpike => ("MeshCpuSpike", true),
        AlarmKind::RdmaDisabled => ("MeshRdmaDisabled", true),
        AlarmKind::LinkSpeedLow => ("MeshLinkSpeedLow", true),
        AlarmKind::JobHung => ("MeshJobHung", true),
        AlarmKind::ManagementUnreachable => ("MeshManagementUnreachable", true),
        AlarmKind::ClockSkew => ("MeshClockSkew", true),
        AlarmKind::DuplicateNodeId => ("MeshDuplicateNodeId", true),
        AlarmKind::MeshSaturated => ("MeshSaturated", false),
        AlarmKind::MemoryPressure => ("MeshMemoryPressure", true),
        AlarmKind::WiredMemoryLeak => ("MeshWiredMemoryLeak", true),
        AlarmKind::NodeRebooted => ("MeshNodeRebooted", true),
        AlarmKind::KernelPanic => ("MeshKernelPanic", true),
        AlarmKind::JobOrphaned => ("MeshJobOrphaned", true),
        AlarmKind::JobStalled => ("MeshJobStalled", true),
    })
}

fn alert(
    name: &str,
    severity: Severity,
    labels: &[(&str, &str)],
    summary: String,
    description: String,
    starts_at: SystemTime,
    posted_by: &NodeId,
) -> Alert {
    let mut all: Labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    all.insert("alertname".to_owned(), name.to_owned());
    all.insert("severity".to_owned(), severity.as_str().to_owned());
    let annotations = [
        ("summary".to_owned(), summary),
        ("description".to_owned(), description),
        (
            "runbook_url".to_owned(),
            format!("{RUNBOOK}#{}", name.to_lowercase()),
        ),
        (POSTED_BY.to_owned(), posted_by.to_string()),
    ]
    .into_iter()
    .collect();
    Alert {
        labels: all,
        annotations,
        starts_at,
    }
}

fn node_down(node: &meshd_domain::NodeVerdict, posted_by: &NodeId) -> Alert {
    alert(
        "MeshNodeDown",
        Severity::Critical,
        &[("node", node.id.as_str())],
        format!("Node {} is down", node.id),
        node.evidence.join("; "),
        node.since,
        posted_by,
    )
}

/// The alerts a status calls for, as `role` posts them. Link alerts only
/// for faults blamed on the link (a dead node is its own one alert), node
/// alerts only for nodes that are down.
pub fn alerts(status: &MeshStatus, role: Role) -> Vec<Alert> {
    let me = &status.node.id;
    let mut out: Vec<Alert> = match role {
        Role::Follower => Vec::new(),
        Role::Minority => minority_alerts(status, me),
        Role::Leader => link_alerts(status, me)
            .chain(node_down_alerts(status, me))
            .chain(alarm_alerts(status, me))
            .collect(),
    };
    // One alert per label set: two alarms of a kind about one node (a
    // bridge loop on two bridges) are one page.
    let mut seen = BTreeSet::new();
    out.retain(|a| seen.insert(a.labels.clone()));
    out
}

/// What a node without quorum can vouch for alone: a peer silent on every
/// path is down whatever the quorum (a two-node mesh that lost a node must
/// still page), and the lost quorum itself.
fn minority_alerts(status: &MeshStatus, me: &NodeId) -> Vec<Alert> {
    let seen_by = format!(
        "seen by {me} alone, without quorum ({} of {} members heard)",
        status.quorum.members.len(),
        status.quorum.configured.len()
    );
    let mut out: Vec<Alert> = node_down_alerts(status, me)
        .map(|mut down| {
            down.annotations
                .insert("seen_by".to_owned(), seen_by.clone());
            down
        })
        .collect();
    out.extend(no_quorum_alert(status, me));
    out
}

/// `MeshNoQuorum`, once the engine raised no_quorum on this node: it does
/// so only once the condition settled, since a node that starts, or
/// restarts, is without quorum for a moment.
fn no_quorum_alert(status: &MeshStatus, me: &NodeId) -> Option<Alert> {
    let no_quorum = status
        .alarms
        .iter()
        .find(|a| a.kind == AlarmKind::NoQuorum && a.node == *me)?;
    let unheard: Vec<&str> = status
        .quorum
        .configured
        .iter()
        .filter(|id| !status.quorum.members.contains(id))
        .map(NodeId::as_str)
        .collect();
    Some(alert(
        "MeshNoQuorum",
        Severity::Warning,
        &[],
        "A part of the mesh has no quorum: link verdicts are held".to_owned(),
        format!(
            "{me} hears {} of {} members; not heard: {}",
            status.quorum.members.len(),
            status.quorum.configured.len(),
            unheard.join(", ")
        ),
        no_quorum.since,
        me,
    ))
}

/// An alert for each link that is down, degraded or flapping by its own
/// fault.
fn link_alerts<'a>(status: &'a MeshStatus, me: &'a NodeId) -> impl Iterator<Item = Alert> + 'a {
    status.links.iter().filter_map(move |link| {
        let (name, severity, what) = match (link.state, link.blame) {
            (LinkState::Down, Blame::Link) => ("MeshLinkDown", Severity::Critical, "down"),
            (LinkState::Degraded, Blame::Link) => {
                ("MeshLinkDegraded", Severity::Warning, "degraded")
            }
            (LinkState::Flapping, Blame::Link) => {
                ("MeshLinkFlapping", Severity::Warning, "flapping")
            }
            _ => return None,
        };
        let (a, b) = (link.a.node.as_str(), link.b.node.as_str());
        Some(alert(
            name,
            severity,
            &[("a", a), ("b", b)],
            format!("Link {a} <-> {b} is {what}"),
            link.evidence.join("; "),
            link.since,
            me,
        ))
    })
}

/// `MeshNodeDown` for each node that is down.
fn node_down_alerts<'a>(
    status: &'a MeshStatus,
    me: &'a NodeId,
) -> impl Iterator<Item = Alert> + 'a {
    status
        .nodes
        .iter()
        .filter(|n| n.state == NodeState::Down)
        .map(move |node| node_down(node, me))
}

/// An alert for each alarm of a kind that has one, its fix appended to
/// the description.
fn alarm_alerts<'a>(status: &'a MeshStatus, me: &'a NodeId) -> impl Iterator<Item = Alert> + 'a {
    status.alarms.iter().filter_map(move |alarm| {
        let (name, about_a_node) = alert_of_kind(alarm.kind)?;
        let mut description = alarm.evidence.join("; ");
        if let Some(fix) = &alarm.fix {
            description.push_str(&format!(" Fix: {fix}"));
        }
        let node = [("node", alarm.node.as_str())];
        let labels: &[(&str, &str)] = if about_a_node { &node } else { &[] };
        Some(alert(
            name,
            alarm.severity,
            labels,
            alarm.summary.clone(),
            description,
            alarm.since,
            me,
        ))
    })
}

/// Firing alerts are posted with an end this many resend intervals ahead:
/// if every poster dies, Alertmanager resolves them by itself.
const LEASE_RESENDS: u32 = 4;

#[derive(Debug, Default)]
pub struct AlertState {
    /// Firing alerts by labels, with when they were last posted.
    firing: BTreeMap<Labels, (Alert, Instant)>,
    /// When this node last looked up what Alertmanager holds.
    reconciled_at: Option<Instant>,
    /// The role of the last step.
    role: Option<Role>,
}

/// What one step wants done.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    pub posts: Vec<Post>,
    /// This node just took over posting: the alerts another node left
    /// firing at Alertmanager must be looked up and, unless still true,
    /// resolved (see [`AlertState::reconcile`]).
    pub reconcile: bool,
}

impl AlertState {
    /// What to post after a look that produced `status`: its alerts, as
    /// this node's role in it posts them (the daemon's alert pusher and the
    /// whole-cluster simulation both step this way).
    pub fn after_look(
        &mut self,
        status: &MeshStatus,
        now: Instant,
        wall: SystemTime,
        resend_every: Duration,
    ) -> Step {
        let role = Role::of(status);
        self.step(alerts(status, role), role, now, wall, resend_every)
    }

    /// What to post now. A follower posts nothing and forgets what it
    /// posted: the leader owns the alerts from now on and reconciles what
    /// it finds at Alertmanager.
    pub fn step(
        &mut self,
        current: Vec<Alert>,
        role: Role,
        now: Instant,
        wall: SystemTime,
        resend_every: Duration,
    ) -> Step {
        // The leader also looks again every resend interval: a node that
        // posted alone while it had no quorum forgets its alerts when it
        // rejoins as a follower, and only the leader can resolve them.
        let reconcile_due = role == Role::Leader
            && self
                .reconciled_at
                .is_none_or(|at| now.saturating_duration_since(at) >= resend_every);
        let took_over = role != Role::Follower && self.role != Some(role);
        if took_over || reconcile_due {
            self.reconciled_at = Some(now);
        }
        self.role = Some(role);
        if role == Role::Follower {
            self.firing.clear();
            return Step::default();
        }
        let lease = wall + resend_every.saturating_mul(LEASE_RESENDS);
        let mut posts = Vec::new();
        let current_labels: BTreeSet<Labels> = current.iter().map(|a| a.labels.clone()).collect();
        for (labels, (alert, _)) in &self.firing {
            if !current_labels.contains(labels) {
                posts.push(Post {
                    alert: alert.clone(),
                    ends_at: wall,
                });
            }
        }
        self.firing
            .retain(|labels, _| current_labels.contains(labels));
        for alert in current {
            let due = match self.firing.get(&alert.labels) {
                None => true,
                Some((_, sent)) => now.saturating_duration_since(*sent) >= resend_every,
            };
            if due {
                posts.push(Post {
                    alert: alert.clone(),
                    ends_at: lease,
                });
                self.firing.insert(alert.labels.clone(), (alert, now));
            }
        }
        Step {
            posts,
            reconcile: took_over || reconcile_due,
        }
    }

    /// Resolves what Alertmanager still has firing from meshd (`active`:
    /// their labels and annotations) that this node does not hold true.
    pub fn reconcile(&self, active: Vec<Alert>, wall: SystemTime) -> Vec<Post> {
        active
            .into_iter()
            .filter(|a| a.annotations.contains_key(POSTED_BY))
            .filter(|a| !self.firing.contains_key(&a.labels))
            .map(|alert| Post {
                alert,
                ends_at: wall,
            })
            .collect()
    }

    /// Every firing alert, for an Alertmanager that missed earlier posts.
    pub fn all_firing(&self, wall: SystemTime, resend_every: Duration) -> Vec<Post> {
        let lease = wall + resend_every.saturating_mul(LEASE_RESENDS);
        self.firing
            .values()
            .map(|(alert, _)| Post {
                alert: alert.clone(),
                ends_at: lease,
            })
            .collect()
    }

    pub fn firing(&self) -> usize {
        self.firing.len()
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, wall};
    use meshd_domain::{
        Alarm, Incarnation, LinkEnd, LinkVerdict, NodeIdentity, NodeVerdict, Quorum,
    };

    use super::*;
    use crate::fixtures::instant;

    fn status(link: LinkState, blame: Blame, c: NodeState, alarms: Vec<Alarm>) -> MeshStatus {
        MeshStatus {
            node: NodeIdentity {
                id: id("a"),
                incarnation: Incarnation(1),
                version: "t".into(),
                hostname: "a".into(),
            },
            evaluated_at: wall(10),
            quorum: Quorum {
                configured: vec![id("a"), id("b"), id("c")],
                members: vec![id("a"), id("b")],
                has_quorum: true,
                leader: Some(id("a")),
            },
            nodes: vec![NodeVerdict {
                id: id("c"),
                state: c,
                since: wall(3),
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
                since: wall(5),
                evidence: vec!["a: no reply for 700ms".into()],
                blame,
                blamed_node: None,
                recent_changes: 1,
                fix: None,
            }],
            alarms,
            cables: vec![],
            checks: vec![],
            measurements: vec![],
        }
    }

    fn names(alerts: &[Alert]) -> Vec<&str> {
        alerts
            .iter()
            .map(|a| a.labels["alertname"].as_str())
            .collect()
    }

    #[test]
    fn verdicts_and_alarms_become_alerts_with_the_rules_labels_and_runbooks() {
        let bridge = Alarm {
            kind: AlarmKind::BridgeLoop,
            severity: Severity::Critical,
            node: id("b"),
            subject: "bridge0".into(),
            summary: "Thunderbolt Bridge over mesh ports".into(),
            evidence: vec!["members: en1, en2".into()],
            fix: Some("networksetup -setnetworkserviceenabled 'Thunderbolt Bridge' off".into()),
            since: wall(1),
            updated: wall(9),
        };
        let out = alerts(
            &status(LinkState::Down, Blame::Link, NodeState::Down, vec![bridge]),
            Role::Leader,
        );
        assert_eq!(
            names(&out),
            ["MeshLinkDown", "MeshNodeDown", "MeshBridgeLoop"]
        );
        let link = &out[0];
        let labels: Vec<(&str, &str)> = link
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("a", "a"),
                ("alertname", "MeshLinkDown"),
                ("b", "b"),
                ("severity", "critical")
            ],
            "exactly the labels of the Prometheus rule"
        );
        assert_eq!(link.starts_at, wall(5));
        assert_eq!(
            link.annotations["runbook_url"],
            format!("{RUNBOOK}#meshlinkdown")
        );
        assert_eq!(link.annotations[POSTED_BY], "a");
        let loop_alert = &out[2];
        assert_eq!(loop_alert.labels.get("node").map(String::as_str), Some("b"));
        assert!(!loop_alert.labels.contains_key("subject"));
        assert!(
            loop_alert.annotations["description"]
                .ends_with("Fix: networksetup -setnetworkserviceenabled 'Thunderbolt Bridge' off")
        );
    }

    #[test]
    fn a_link_down_because_its_node_is_down_is_the_node_alert_only() {
        let out = alerts(
            &status(LinkState::Down, Blame::Node, NodeState::Down, vec![]),
            Role::Leader,
        );
        assert_eq!(names(&out), ["MeshNodeDown"]);
    }

    #[test]
    fn without_quorum_only_a_node_silent_everywhere_and_the_lost_quorum_page() {
        let mut s = status(LinkState::Down, Blame::Link, NodeState::Down, vec![]);
        s.quorum.has_quorum = false;
        s.quorum.leader = None;
        assert_eq!(Role::of(&s), Role::Minority);
        // Without quorum but before the engine raised no_quorum (a start):
        // no quorum page yet.
        assert_eq!(names(&alerts(&s, Role::Minority)), ["MeshNodeDown"]);
        s.alarms.push(Alarm {
            kind: AlarmKind::NoQuorum,
            severity: Severity::Warning,
            node: id("a"),
            subject: "quorum".into(),
            summary: "no quorum".into(),
            evidence: vec!["not heard: b".into()],
            fix: None,
            since: wall(3),
            updated: wall(9),
        });
        let out = alerts(&s, Role::Minority);
        assert_eq!(names(&out), ["MeshNodeDown", "MeshNoQuorum"]);
        assert_eq!(out[1].starts_at, wall(3), "since the alarm");
        assert!(out[0].annotations["seen_by"].contains("without quorum"));
        assert_eq!(
            out[0].labels,
            alerts(
                &status(LinkState::Up, Blame::None, NodeState::Down, vec![]),
                Role::Leader
            )[0]
            .labels,
            "the same labels as the leader's page, so Alertmanager sees one"
        );
        assert!(
            !out[1].labels.contains_key("node"),
            "one for the whole mesh"
        );
    }

    #[test]
    fn firing_alerts_are_posted_at_once_then_every_resend_interval_and_resolved_explicitly() {
        let mut state = AlertState::default();
        let resend = Duration::from_secs(30);
        let down = alerts(
            &status(LinkState::Down, Blame::Link, NodeState::Up, vec![]),
            Role::Leader,
        );

        let step = state.step(down.clone(), Role::Leader, instant(10), wall(10), resend);
        assert!(
            step.reconcile,
            "taking over: look at what others left firing"
        );
        assert_eq!(step.posts.len(), 1);
        assert_eq!(
            step.posts[0].ends_at,
            wall(10) + resend * 4,
            "a lease, not forever"
        );
        assert!(
            state
                .step(down.clone(), Role::Leader, instant(20), wall(20), resend)
                .posts
                .is_empty(),
            "not due yet"
        );
        let step = state.step(down.clone(), Role::Leader, instant(40), wall(40), resend);
        assert_eq!(step.posts.len(), 1, "re-sent");
        assert!(
            step.reconcile,
            "the leader looks again every resend interval"
        );
        assert!(
            !state
                .step(down.clone(), Role::Leader, instant(41), wall(41), resend)
                .reconcile
        );

        let posts = state
            .step(Vec::new(), Role::Leader, instant(41), wall(41), resend)
            .posts;
        assert_eq!(posts.len(), 1);
        assert_eq!(posts[0].ends_at, wall(41), "resolved now");
        assert_eq!(state.firing(), 0);
        assert!(
            state
                .step(Vec::new(), Role::Leader, instant(42), wall(42), resend)
                .posts
                .is_empty()
        );
    }

    #[test]
    fn what_a_minority_left_firing_is_resolved_by_the_leader_within_a_resend_interval() {
        let resend = Duration::from_secs(30);
        let mut minority = AlertState::default();
        let mut no_quorum = status(LinkState::Up, Blame::None, NodeState::Up, vec![]);
        no_quorum.quorum.has_quorum = false;
        no_quorum.alarms.push(Alarm {
            kind: AlarmKind::NoQuorum,
            severity: Severity::Warning,
            node: no_quorum.node.id.clone(),
            subject: "quorum".into(),
            summary: "no quorum".into(),
            evidence: vec![],
            fix: None,
            since: wall(0),
            updated: wall(0),
        });
        let posted = minority
            .step(
                alerts(&no_quorum, Role::Minority),
                Role::Minority,
                instant(1),
                wall(1),
                resend,
            )
            .posts;
        assert_eq!(posted.len(), 1);
        // It rejoins as a follower: it posts nothing more, resolves nothing.
        assert!(
            minority
                .step(Vec::new(), Role::Follower, instant(2), wall(2), resend)
                .posts
                .is_empty()
        );
        // The leader, leading all along, looks at Alertmanager again within
        // a resend interval and resolves it.
        let mut leader = AlertState::default();
        assert!(
            leader
                .step(Vec::new(), Role::Leader, instant(0), wall(0), resend)
                .reconcile
        );
        assert!(
            !leader
                .step(Vec::new(), Role::Leader, instant(2), wall(2), resend)
                .reconcile
        );
        assert!(
            leader
                .step(Vec::new(), Role::Leader, instant(30), wall(30), resend)
                .reconcile
        );
        let resolves = leader.reconcile(vec![posted[0].alert.clone()], wall(30));
        assert_eq!(resolves.len(), 1);
        assert_eq!(resolves[0].ends_at, wall(30));
    }

    #[test]
    fn a_new_leader_resolves_what_is_no_longer_true_and_keeps_what_is() {
        let resend = Duration::from_secs(30);
        let down = alerts(
            &status(LinkState::Down, Blame::Link, NodeState::Up, vec![]),
            Role::Leader,
        );
        let mut follower = AlertState::default();
        assert!(
            follower
                .step(down.clone(), Role::Follower, instant(1), wall(1), resend)
                .posts
                .is_empty()
        );
        let step = follower.step(down.clone(), Role::Leader, instant(2), wall(2), resend);
        assert!(step.reconcile);
        // The old leader left the link and a cleared node alert firing.
        let stale_node = alerts(
            &status(LinkState::Up, Blame::None, NodeState::Down, vec![]),
            Role::Leader,
        );
        let mut found = down.clone();
        found.extend(stale_node.clone());
        let resolves = follower.reconcile(found, wall(2));
        assert_eq!(resolves.len(), 1);
        assert_eq!(resolves[0].alert.labels, stale_node[0].labels);
        assert_eq!(resolves[0].ends_at, wall(2));
        // An alert nobody from meshd posted (a Prometheus rule's) is left alone.
        let mut foreign = stale_node[0].clone();
        foreign.annotations.remove(POSTED_BY);
        assert!(follower.reconcile(vec![foreign], wall(3)).is_empty());
    }
}
