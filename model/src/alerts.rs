//! What the alert leader tells Alertmanager: alerts derived from the
//! verdicts and alarms of its status, and the state machine that decides
//! what to send when — firing alerts at once and again every resend
//! interval, resolved alerts explicitly, nothing from a node that does not
//! lead the quorum.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use meshd_proto::domain::{AlarmKind, Blame, LinkState, MeshStatus, NodeState, Severity};

pub type Labels = BTreeMap<String, String>;

/// Where the runbook sections live; the alert name, lowercased, is the anchor.
pub const RUNBOOK: &str = "https://github.com/meshd/meshd/blob/main/docs/RUNBOOK.md";

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

/// The alert an alarm kind becomes. `no_quorum` becomes none: only a node
/// with quorum leads, so it is never pushed.
fn alert_name(kind: AlarmKind) -> Option<&'static str> {
    match kind {
        AlarmKind::NoQuorum => None,
        AlarmKind::BridgeLoop => Some("MeshBridgeLoop"),
        AlarmKind::BroadcastStorm => Some("MeshBroadcastStorm"),
        AlarmKind::CpuSpike => Some("MeshCpuSpike"),
        AlarmKind::RdmaDisabled => Some("MeshRdmaDisabled"),
        AlarmKind::LinkSpeedLow => Some("MeshLinkSpeedLow"),
        AlarmKind::JobHung => Some("MeshJobHung"),
        AlarmKind::MemoryPressure => Some("MeshMemoryPressure"),
        AlarmKind::WiredMemoryLeak => Some("MeshWiredMemoryLeak"),
        AlarmKind::NodeRebooted => Some("MeshNodeRebooted"),
        AlarmKind::KernelPanic => Some("MeshKernelPanic"),
        AlarmKind::JobOrphaned => Some("MeshJobOrphaned"),
        AlarmKind::JobStalled => Some("MeshJobStalled"),
    }
}

fn alert(
    name: &str,
    severity: Severity,
    labels: &[(&str, &str)],
    summary: String,
    description: String,
    starts_at: SystemTime,
) -> Alert {
    let mut all: Labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    all.insert("alertname".to_owned(), name.to_owned());
    all.insert("severity".to_owned(), severity.as_str().to_owned());
    all.insert("source".to_owned(), "meshd".to_owned());
    let annotations = [
        ("summary".to_owned(), summary),
        ("description".to_owned(), description),
        (
            "runbook_url".to_owned(),
            format!("{RUNBOOK}#{}", name.to_lowercase()),
        ),
    ]
    .into_iter()
    .collect();
    Alert {
        labels: all,
        annotations,
        starts_at,
    }
}

/// The alerts a status calls for. Link alerts only for faults blamed on the
/// link (a dead node's links are its own alert), node alerts only for
/// nodes that are down.
pub fn alerts(status: &MeshStatus) -> Vec<Alert> {
    let mut out = Vec::new();
    for link in &status.links {
        let named = match (link.state, link.blame) {
            (LinkState::Down, Blame::Link) => Some(("MeshLinkDown", Severity::Critical, "down")),
            (LinkState::Degraded, _) => Some(("MeshLinkDegraded", Severity::Warning, "degraded")),
            (LinkState::Flapping, _) => Some(("MeshLinkFlapping", Severity::Warning, "flapping")),
            _ => None,
        };
        if let Some((name, severity, what)) = named {
            let (a, b) = (link.a.node.as_str(), link.b.node.as_str());
            out.push(alert(
                name,
                severity,
                &[("a", a), ("b", b)],
                format!("Link {a} <-> {b} is {what}"),
                link.evidence.join("; "),
                link.since,
            ));
        }
    }
    for node in &status.nodes {
        if node.state == NodeState::Down {
            out.push(alert(
                "MeshNodeDown",
                Severity::Critical,
                &[("node", node.id.as_str())],
                format!("Node {} is down", node.id),
                node.evidence.join("; "),
                node.since,
            ));
        }
    }
    for alarm in &status.alarms {
        if let Some(name) = alert_name(alarm.kind) {
            let mut description = alarm.evidence.join("; ");
            if let Some(fix) = &alarm.fix {
                description.push_str(&format!(" Fix: {fix}"));
            }
            out.push(alert(
                name,
                alarm.severity,
                &[("node", alarm.node.as_str()), ("subject", &alarm.subject)],
                alarm.summary.clone(),
                description,
                alarm.since,
            ));
        }
    }
    out
}

/// Firing alerts are posted with an end this many resend intervals ahead:
/// if the leader dies, Alertmanager resolves them by itself unless the new
/// leader keeps them alive.
const LEASE_RESENDS: u32 = 4;

#[derive(Debug, Default)]
pub struct AlertState {
    /// Firing alerts by labels, with when they were last posted.
    firing: BTreeMap<Labels, (Alert, SystemTime)>,
}

impl AlertState {
    /// What to post now. A node that is not the leader posts nothing and
    /// forgets what it posted: the new leader owns the alerts from now on.
    pub fn step(
        &mut self,
        current: Vec<Alert>,
        leader: bool,
        now: SystemTime,
        resend_every: Duration,
    ) -> Vec<Post> {
        if !leader {
            self.firing.clear();
            return Vec::new();
        }
        let lease = now + resend_every.saturating_mul(LEASE_RESENDS);
        let mut posts = Vec::new();
        let current_labels: BTreeSet<Labels> = current.iter().map(|a| a.labels.clone()).collect();
        for (labels, (alert, _)) in &self.firing {
            if !current_labels.contains(labels) {
                posts.push(Post {
                    alert: alert.clone(),
                    ends_at: now,
                });
            }
        }
        self.firing
            .retain(|labels, _| current_labels.contains(labels));
        for alert in current {
            let due = match self.firing.get(&alert.labels) {
                None => true,
                Some((_, sent)) => now.duration_since(*sent).unwrap_or_default() >= resend_every,
            };
            if due {
                posts.push(Post {
                    alert: alert.clone(),
                    ends_at: lease,
                });
                self.firing.insert(alert.labels.clone(), (alert, now));
            }
        }
        posts
    }

    /// Every firing alert, for an Alertmanager that missed earlier posts.
    pub fn all_firing(&self, now: SystemTime, resend_every: Duration) -> Vec<Post> {
        let lease = now + resend_every.saturating_mul(LEASE_RESENDS);
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
    use meshd_proto::domain::{
        Alarm, Incarnation, LinkEnd, LinkVerdict, NodeId, NodeIdentity, NodeVerdict, Quorum,
    };

    use super::*;

    fn id(s: &str) -> NodeId {
        NodeId::new(s).expect("id")
    }

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + s)
    }

    fn status(link: LinkState, blame: Blame, c: NodeState, alarms: Vec<Alarm>) -> MeshStatus {
        MeshStatus {
            node: NodeIdentity {
                id: id("a"),
                incarnation: Incarnation(1),
                version: "t".into(),
                hostname: "a".into(),
            },
            evaluated_at: t(10),
            quorum: Quorum {
                configured: vec![id("a"), id("b"), id("c")],
                members: vec![id("a"), id("b")],
                has_quorum: true,
                leader: Some(id("a")),
            },
            nodes: vec![NodeVerdict {
                id: id("c"),
                state: c,
                since: t(3),
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
                since: t(5),
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
    fn verdicts_and_alarms_become_alerts_with_labels_and_runbooks() {
        let bridge = Alarm {
            kind: AlarmKind::BridgeLoop,
            severity: Severity::Critical,
            node: id("b"),
            subject: "bridge0".into(),
            summary: "Thunderbolt Bridge over mesh ports".into(),
            evidence: vec!["members: en1, en2".into()],
            fix: Some("networksetup -setnetworkserviceenabled 'Thunderbolt Bridge' off".into()),
            since: t(1),
            updated: t(9),
        };
        let out = alerts(&status(
            LinkState::Down,
            Blame::Link,
            NodeState::Down,
            vec![bridge],
        ));
        assert_eq!(
            names(&out),
            ["MeshLinkDown", "MeshNodeDown", "MeshBridgeLoop"]
        );
        let link = &out[0];
        assert_eq!(link.labels["a"], "a");
        assert_eq!(link.labels["b"], "b");
        assert_eq!(link.labels["severity"], "critical");
        assert_eq!(link.starts_at, t(5));
        assert_eq!(
            link.annotations["runbook_url"],
            format!("{RUNBOOK}#meshlinkdown")
        );
        assert!(
            out[2].annotations["description"]
                .ends_with("Fix: networksetup -setnetworkserviceenabled 'Thunderbolt Bridge' off")
        );
    }

    #[test]
    fn a_link_down_because_its_node_is_down_is_the_node_alert_only() {
        let out = alerts(&status(
            LinkState::Down,
            Blame::Node,
            NodeState::Down,
            vec![],
        ));
        assert_eq!(names(&out), ["MeshNodeDown"]);
    }

    #[test]
    fn firing_alerts_are_posted_at_once_then_every_resend_interval_and_resolved_explicitly() {
        let mut state = AlertState::default();
        let resend = Duration::from_secs(30);
        let down = alerts(&status(LinkState::Down, Blame::Link, NodeState::Up, vec![]));

        let posts = state.step(down.clone(), true, t(10), resend);
        assert_eq!(posts.len(), 1);
        assert_eq!(posts[0].ends_at, t(10) + resend * 4, "a lease, not forever");
        assert!(
            state.step(down.clone(), true, t(20), resend).is_empty(),
            "not due yet"
        );
        assert_eq!(
            state.step(down.clone(), true, t(40), resend).len(),
            1,
            "re-sent"
        );

        let posts = state.step(Vec::new(), true, t(41), resend);
        assert_eq!(posts.len(), 1);
        assert_eq!(posts[0].ends_at, t(41), "resolved now");
        assert_eq!(state.firing(), 0);
        assert!(state.step(Vec::new(), true, t(42), resend).is_empty());
    }

    #[test]
    fn a_node_that_does_not_lead_posts_nothing() {
        let mut state = AlertState::default();
        let down = alerts(&status(LinkState::Down, Blame::Link, NodeState::Up, vec![]));
        assert!(
            state
                .step(down.clone(), false, t(10), Duration::from_secs(30))
                .is_empty()
        );
        assert_eq!(
            state.step(down, true, t(11), Duration::from_secs(30)).len(),
            1
        );
    }
}
