//! The verdict engine: from what this node has heard (and when) to verdicts on
//! every node and link of the mesh, with the time each verdict started.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use meshd_proto::domain::{
    Alarm, Blame, LinkEnd, LinkState, LinkVerdict, MeshStatus, NodeId, NodeIdentity, NodeState,
    NodeVerdict, Quorum, Severity,
};

use super::quorum;

/// How old a peer's latest report may be before the peer is suspect, and
/// before it is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    pub suspect_after: Duration,
    pub down_after: Duration,
}

impl Freshness {
    /// A report older than `stale_after` is not fresh (the peer is suspect);
    /// three times that and the peer is down. Three missed windows keep one
    /// delayed report from turning into a down verdict.
    pub fn from_stale_after(stale_after: Duration) -> Self {
        Self {
            suspect_after: stale_after,
            down_after: stale_after.saturating_mul(3),
        }
    }
}

/// The latest accepted report of a peer, as far as freshness is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    pub at: SystemTime,
    pub identity: NodeIdentity,
    pub cpu_saturated: bool,
}

/// One expected link: a cable between this node and a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedLink {
    pub local: LinkEnd,
    pub remote: LinkEnd,
}

/// Everything the engine looks at in one evaluation.
#[derive(Debug, Clone)]
pub struct MeshInputs {
    pub local: NodeIdentity,
    /// This node and its configured peers.
    pub configured: BTreeSet<NodeId>,
    pub heard: BTreeMap<NodeId, Heard>,
    pub links: Vec<ExpectedLink>,
    pub local_alarms: Vec<Alarm>,
}

/// Keeps what must outlive one evaluation: since when each verdict holds.
#[derive(Debug)]
pub struct Engine {
    freshness: Freshness,
    node_since: BTreeMap<NodeId, (NodeState, SystemTime)>,
    link_since: BTreeMap<(LinkEnd, LinkEnd), (LinkState, SystemTime)>,
    no_quorum_since: Option<SystemTime>,
}

const NO_QUORUM_ALARM: &str = "no_quorum";

impl Engine {
    pub fn new(freshness: Freshness) -> Self {
        Self {
            freshness,
            node_since: BTreeMap::new(),
            link_since: BTreeMap::new(),
            no_quorum_since: None,
        }
    }

    pub fn set_freshness(&mut self, freshness: Freshness) {
        self.freshness = freshness;
    }

    pub fn evaluate(&mut self, inputs: &MeshInputs, now: SystemTime) -> MeshStatus {
        let local_id = &inputs.local.id;
        let mut fresh: BTreeSet<NodeId> = inputs
            .heard
            .iter()
            .filter(|(_, h)| age(now, h.at) <= self.freshness.suspect_after)
            .map(|(id, _)| id.clone())
            .collect();
        // This node is evaluating, so it is alive by construction.
        fresh.insert(local_id.clone());
        let quorum = quorum::evaluate(&inputs.configured, &fresh);

        let nodes: Vec<NodeVerdict> = inputs
            .configured
            .iter()
            .map(|id| self.node_verdict(id, inputs, now))
            .collect();
        self.node_since
            .retain(|id, _| inputs.configured.contains(id));

        let state_of: BTreeMap<&NodeId, NodeState> =
            nodes.iter().map(|n| (&n.id, n.state)).collect();
        let links: Vec<LinkVerdict> = inputs
            .links
            .iter()
            .map(|link| self.link_verdict(link, &quorum, &state_of, now))
            .collect();
        let live_links: BTreeSet<(LinkEnd, LinkEnd)> =
            links.iter().map(|l| (l.a.clone(), l.b.clone())).collect();
        self.link_since.retain(|key, _| live_links.contains(key));

        let mut alarms = inputs.local_alarms.clone();
        alarms.extend(self.no_quorum_alarm(inputs, &quorum, now));

        MeshStatus {
            node: inputs.local.clone(),
            evaluated_at: now,
            quorum,
            nodes,
            links,
            alarms,
        }
    }

    fn node_verdict(&mut self, id: &NodeId, inputs: &MeshInputs, now: SystemTime) -> NodeVerdict {
        let heard = inputs.heard.get(id);
        let (state, evidence) = if *id == inputs.local.id {
            (NodeState::Up, vec!["this node".to_owned()])
        } else {
            match heard {
                None => (
                    NodeState::Down,
                    vec![format!("no report from {id} since this node started")],
                ),
                Some(h) => {
                    let age = age(now, h.at);
                    let said = format!(
                        "last report {} ago",
                        humantime::format_duration(round_ms(age))
                    );
                    if age <= self.freshness.suspect_after {
                        (NodeState::Up, vec![said])
                    } else if age <= self.freshness.down_after {
                        (NodeState::Suspect, vec![said])
                    } else {
                        (NodeState::Down, vec![said])
                    }
                }
            }
        };
        let since = since(&mut self.node_since, id.clone(), state, now);
        NodeVerdict {
            id: id.clone(),
            state,
            since,
            evidence,
            identity: if *id == inputs.local.id {
                Some(inputs.local.clone())
            } else {
                heard.map(|h| h.identity.clone())
            },
            last_report_at: heard.map(|h| h.at),
            cpu_saturated: heard.is_some_and(|h| h.cpu_saturated),
        }
    }

    fn link_verdict(
        &mut self,
        link: &ExpectedLink,
        quorum: &Quorum,
        node_states: &BTreeMap<&NodeId, NodeState>,
        now: SystemTime,
    ) -> LinkVerdict {
        let (a, b) = if link.local.node <= link.remote.node {
            (link.local.clone(), link.remote.clone())
        } else {
            (link.remote.clone(), link.local.clone())
        };
        let down_end = [&a.node, &b.node]
            .into_iter()
            .find(|n| node_states.get(n) == Some(&NodeState::Down))
            .cloned();
        let (state, blame, evidence) = match (&down_end, quorum.has_quorum) {
            (_, false) => (
                LinkState::Unknown,
                Blame::None,
                vec!["no quorum: link verdicts are held back".to_owned()],
            ),
            (Some(node), true) => (
                LinkState::Down,
                Blame::Node,
                vec![format!("{node} is down: the node is blamed, not the link")],
            ),
            (None, true) => (
                LinkState::Unknown,
                Blame::None,
                vec!["no probe results for this link yet".to_owned()],
            ),
        };
        let since = since(&mut self.link_since, (a.clone(), b.clone()), state, now);
        LinkVerdict {
            a,
            b,
            state,
            since,
            evidence,
            blame,
            blamed_node: if blame == Blame::Node { down_end } else { None },
            recent_changes: 0,
        }
    }

    /// Without quorum this node raises no link or node alarm; it says so
    /// instead, once, with the members it cannot hear.
    fn no_quorum_alarm(
        &mut self,
        inputs: &MeshInputs,
        quorum: &Quorum,
        now: SystemTime,
    ) -> Option<Alarm> {
        if quorum.has_quorum {
            self.no_quorum_since = None;
            return None;
        }
        let since = *self.no_quorum_since.get_or_insert(now);
        let unheard: Vec<String> = quorum
            .configured
            .iter()
            .filter(|id| !quorum.members.contains(id))
            .map(ToString::to_string)
            .collect();
        Some(Alarm {
            kind: NO_QUORUM_ALARM.to_owned(),
            severity: Severity::Warning,
            node: inputs.local.id.clone(),
            subject: "quorum".to_owned(),
            summary: format!(
                "no quorum: hears {} of {} members; link and node alarms are held back",
                quorum.members.len(),
                quorum.configured.len()
            ),
            evidence: vec![format!("not heard: {}", unheard.join(", "))],
            fix: Some(
                "check the management network and that meshd runs on the unheard nodes".to_owned(),
            ),
            since,
            updated: now,
        })
    }
}

fn age(now: SystemTime, then: SystemTime) -> Duration {
    // A report stamped in the future (clock skew) counts as just heard.
    now.duration_since(then).unwrap_or_default()
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Returns since when `key` has been in `state`, starting a new period when
/// the state changed.
fn since<K: Ord, S: PartialEq + Copy>(
    table: &mut BTreeMap<K, (S, SystemTime)>,
    key: K,
    state: S,
    now: SystemTime,
) -> SystemTime {
    let entry = table.entry(key).or_insert((state, now));
    if entry.0 != state {
        *entry = (state, now);
    }
    entry.1
}

#[cfg(test)]
mod tests {
    use meshd_proto::domain::Incarnation;

    use super::*;

    fn id(s: &str) -> NodeId {
        NodeId::new(s).expect("valid id")
    }

    fn identity(s: &str) -> NodeIdentity {
        NodeIdentity {
            id: id(s),
            incarnation: Incarnation(1),
            version: "test".into(),
            hostname: s.into(),
        }
    }

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn inputs(members: &[&str]) -> MeshInputs {
        MeshInputs {
            local: identity(members[0]),
            configured: members.iter().map(|m| id(m)).collect(),
            heard: BTreeMap::new(),
            links: vec![],
            local_alarms: vec![],
        }
    }

    fn hear(inputs: &mut MeshInputs, node: &str, at_ms: u64) {
        inputs.heard.insert(
            id(node),
            Heard {
                at: t(at_ms),
                identity: identity(node),
                cpu_saturated: false,
            },
        );
    }

    fn engine() -> Engine {
        Engine::new(Freshness::from_stale_after(Duration::from_secs(1)))
    }

    fn state(status: &MeshStatus, node: &str) -> NodeState {
        status
            .nodes
            .iter()
            .find(|n| n.id.as_str() == node)
            .map(|n| n.state)
            .expect("node in status")
    }

    #[test]
    fn single_node_is_healthy() {
        let status = engine().evaluate(&inputs(&["solo"]), t(0));
        assert!(status.quorum.has_quorum);
        assert_eq!(state(&status, "solo"), NodeState::Up);
        assert!(status.alarms.is_empty());
        assert!(status.is_healthy());
    }

    #[test]
    fn peers_go_suspect_then_down_as_reports_age() {
        let mut engine = engine();
        let mut inputs = inputs(&["a", "b", "c"]);
        hear(&mut inputs, "b", 1_000);
        hear(&mut inputs, "c", 1_000);
        let status = engine.evaluate(&inputs, t(1_500));
        assert_eq!(state(&status, "b"), NodeState::Up);

        hear(&mut inputs, "b", 2_400);
        let status = engine.evaluate(&inputs, t(2_500));
        assert_eq!(state(&status, "b"), NodeState::Up);
        assert_eq!(state(&status, "c"), NodeState::Suspect);

        let status = engine.evaluate(&inputs, t(4_100));
        assert_eq!(state(&status, "c"), NodeState::Down);
        let c = status
            .nodes
            .iter()
            .find(|n| n.id.as_str() == "c")
            .expect("c");
        assert_eq!(c.since, t(4_100), "since restarts when the state changes");
        assert_eq!(c.evidence, vec!["last report 3s 100ms ago".to_owned()]);
    }

    #[test]
    fn never_heard_peer_is_down_with_evidence() {
        let status = engine().evaluate(&inputs(&["a", "b", "c"]), t(0));
        assert_eq!(state(&status, "b"), NodeState::Down);
        assert!(!status.quorum.has_quorum);
    }

    #[test]
    fn without_quorum_only_the_no_quorum_alarm_is_raised() {
        let mut engine = engine();
        let mut inputs = inputs(&["a", "b", "c"]);
        inputs.links.push(ExpectedLink {
            local: LinkEnd::node_only(id("a")),
            remote: LinkEnd::node_only(id("b")),
        });
        let status = engine.evaluate(&inputs, t(0));
        assert_eq!(status.alarms.len(), 1);
        assert_eq!(status.alarms[0].kind, NO_QUORUM_ALARM);
        assert_eq!(
            status.alarms[0].evidence,
            vec!["not heard: b, c".to_owned()]
        );
        assert_eq!(status.links[0].state, LinkState::Unknown);
        assert_eq!(status.links[0].blame, Blame::None);

        let later = engine.evaluate(&inputs, t(5_000));
        assert_eq!(later.alarms[0].since, t(0), "alarm keeps its start time");
        assert_eq!(later.alarms[0].updated, t(5_000));

        hear(&mut inputs, "b", 5_900);
        let healed = engine.evaluate(&inputs, t(6_000));
        assert!(healed.quorum.has_quorum);
        assert!(healed.alarms.is_empty());
    }

    #[test]
    fn link_to_a_down_node_blames_the_node() {
        let mut engine = engine();
        let mut inputs = inputs(&["b", "a", "c"]);
        inputs.local = identity("b");
        hear(&mut inputs, "a", 0);
        inputs.links.push(ExpectedLink {
            local: LinkEnd::node_only(id("b")),
            remote: LinkEnd::node_only(id("c")),
        });
        let status = engine.evaluate(&inputs, t(500));
        let link = &status.links[0];
        assert_eq!(link.a.node.as_str(), "b", "ends are ordered by node id");
        assert_eq!(link.state, LinkState::Down);
        assert_eq!(link.blame, Blame::Node);
        assert_eq!(link.blamed_node.as_ref().map(NodeId::as_str), Some("c"));
    }

    #[test]
    fn link_between_live_nodes_is_unknown_until_probed() {
        let mut engine = engine();
        let mut inputs = inputs(&["a", "b"]);
        hear(&mut inputs, "b", 0);
        inputs.links.push(ExpectedLink {
            local: LinkEnd::node_only(id("a")),
            remote: LinkEnd::node_only(id("b")),
        });
        let status = engine.evaluate(&inputs, t(100));
        assert_eq!(status.links[0].state, LinkState::Unknown);
        assert!(!status.is_healthy(), "an unproven link is not healthy");
    }

    #[test]
    fn future_stamped_report_counts_as_fresh() {
        let mut inputs = inputs(&["a", "b"]);
        hear(&mut inputs, "b", 10_000);
        let status = engine().evaluate(&inputs, t(0));
        assert_eq!(state(&status, "b"), NodeState::Up);
    }
}
