//! What the page shows, gathered from one status: the nodes in drawing
//! order and one entry per pair of nodes joined by a cable or a link
//! verdict, with that pair's cables and figures; and which current fault
//! is the worst, for the inspector to open on. Nothing is judged here:
//! states, blame and evidence are the status's own.

use std::collections::BTreeMap;

use meshd_domain::facts::{Cable, CheckResult, CheckStatus};
use meshd_domain::{
    Alarm, LinkMeasurement, LinkState, LinkVerdict, MeshStatus, NodeId, NodeState, NodeVerdict,
    Severity,
};

#[derive(Debug)]
pub struct Scene<'a> {
    pub status: &'a MeshStatus,
    /// Every node the status names, in the verdicts' order, then any node
    /// only a link or cable names.
    pub nodes: Vec<SceneNode<'a>>,
    pub pairs: Vec<Pair<'a>>,
    /// Alarms of nodes that have no verdict, and checks of the whole mesh
    /// that did not pass.
    pub mesh_alarms: Vec<&'a Alarm>,
    pub mesh_checks: Checks<'a>,
}

/// Checks that did not pass, failures apart from warnings: a warning is
/// worth a look, never called a failure.
#[derive(Debug, Default)]
pub struct Checks<'a> {
    pub failing: Vec<&'a CheckResult>,
    pub warnings: Vec<&'a CheckResult>,
}

impl<'a> Checks<'a> {
    fn push(&mut self, check: &'a CheckResult) {
        match check.status {
            CheckStatus::Fail => self.failing.push(check),
            CheckStatus::Warn => self.warnings.push(check),
            _ => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.failing.is_empty() && self.warnings.is_empty()
    }
}

#[derive(Debug)]
pub struct SceneNode<'a> {
    pub id: &'a NodeId,
    pub verdict: Option<&'a NodeVerdict>,
    pub alarms: Vec<&'a Alarm>,
    pub checks: Checks<'a>,
}

/// Two nodes joined by a link verdict, a cable of the cable map, or both.
#[derive(Debug)]
pub struct Pair<'a> {
    /// The lower node id.
    pub a: &'a NodeId,
    pub b: &'a NodeId,
    pub verdict: Option<&'a LinkVerdict>,
    pub cables: Vec<&'a Cable>,
    /// Both ends' figures, `a`'s first.
    pub measurements: Vec<&'a LinkMeasurement>,
}

impl Pair<'_> {
    /// The verdict's state; a cable with no verdict is unknown.
    pub fn state(&self) -> LinkState {
        self.verdict.map_or(LinkState::Unknown, |v| v.state)
    }

    /// Unique among pairs, and safe in an element id: node ids never hold `~`.
    pub fn key(&self) -> String {
        format!("{}~{}", self.a, self.b)
    }

    /// The id of the pair's article (unescaped).
    pub fn anchor(&self) -> String {
        format!("cable~{}", self.key())
    }

    /// Down because a node at one end is, not the cable.
    pub fn down_with_node(&self) -> bool {
        self.verdict.is_some_and(LinkVerdict::down_with_node)
    }
}

impl SceneNode<'_> {
    pub fn is_self(&self, status: &MeshStatus) -> bool {
        *self.id == status.node.id
    }

    /// The id of the node's article (unescaped).
    pub fn anchor(&self) -> String {
        format!("node~{}", self.id)
    }
}

fn ordered<'a>(x: &'a NodeId, y: &'a NodeId) -> (&'a NodeId, &'a NodeId) {
    if x <= y { (x, y) } else { (y, x) }
}

#[derive(Default)]
struct PairParts<'a> {
    verdict: Option<&'a LinkVerdict>,
    cables: Vec<&'a Cable>,
    measurements: Vec<&'a LinkMeasurement>,
}

/// The id of the article of the whole mesh's alarms and checks.
pub const MESH_ANCHOR: &str = "mesh~wide";

/// What can be wrong, worst first: the inspector opens on the worst one
/// there is, so a reader sees first what to fix first. A node down comes
/// before its links (they go down with it and their fix is the node's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// Shown on this node, whose alarm says what to do.
    NoQuorum,
    NodeDown,
    NodeSuspect,
    /// A cable or its ports: both ends are alive.
    CableDown,
    Flapping,
    Degraded,
    /// Only when the node it blames is not down itself: otherwise that
    /// node's fault, ranked above, says it all.
    DownWithNode,
    CriticalAlarm,
    Alarm,
    FailingCheck,
}

impl Scene<'_> {
    /// Every current fault with the article that shows it, worst first;
    /// among equals, in drawing order.
    fn faults(&self) -> Vec<(Fault, String)> {
        let mut faults = Vec::new();
        if !self.status.quorum.has_quorum
            && let Some(me) = self.nodes.iter().find(|n| n.is_self(self.status))
        {
            faults.push((Fault::NoQuorum, me.anchor()));
        }
        for node in &self.nodes {
            let anchor = node.anchor();
            match node.verdict.map(|v| v.state) {
                Some(NodeState::Down) => faults.push((Fault::NodeDown, anchor.clone())),
                Some(NodeState::Suspect) => faults.push((Fault::NodeSuspect, anchor.clone())),
                _ => {}
            }
            match node.alarms.iter().map(|a| a.severity).max() {
                Some(Severity::Critical) => faults.push((Fault::CriticalAlarm, anchor.clone())),
                Some(Severity::Warning) => faults.push((Fault::Alarm, anchor.clone())),
                _ => {}
            }
            if !node.checks.failing.is_empty() {
                faults.push((Fault::FailingCheck, anchor));
            }
        }
        let blamed_node_down = |pair: &Pair<'_>| {
            pair.verdict
                .and_then(|v| v.blamed_node.as_ref())
                .is_some_and(|blamed| {
                    self.nodes.iter().any(|n| {
                        n.id == blamed && n.verdict.is_some_and(|v| v.state == NodeState::Down)
                    })
                })
        };
        for pair in &self.pairs {
            let fault = match pair.state() {
                LinkState::Down if pair.down_with_node() => {
                    (!blamed_node_down(pair)).then_some(Fault::DownWithNode)
                }
                LinkState::Down => Some(Fault::CableDown),
                LinkState::Flapping => Some(Fault::Flapping),
                LinkState::Degraded => Some(Fault::Degraded),
                LinkState::Up | LinkState::Unknown => None,
            };
            if let Some(fault) = fault {
                faults.push((fault, pair.anchor()));
            }
        }
        for alarm in &self.mesh_alarms {
            match alarm.severity {
                Severity::Critical => faults.push((Fault::CriticalAlarm, MESH_ANCHOR.to_owned())),
                Severity::Warning => faults.push((Fault::Alarm, MESH_ANCHOR.to_owned())),
                Severity::Info => {}
            }
        }
        if !self.mesh_checks.failing.is_empty() {
            faults.push((Fault::FailingCheck, MESH_ANCHOR.to_owned()));
        }
        // Stable: equals keep their drawing order.
        faults.sort_by_key(|(fault, _)| *fault);
        faults
    }

    /// The article of the worst current fault, if anything is wrong.
    pub fn worst_fault(&self) -> Option<String> {
        self.faults().into_iter().next().map(|(_, anchor)| anchor)
    }
}

pub fn scene(status: &MeshStatus) -> Scene<'_> {
    let mut ids: Vec<&NodeId> = status.nodes.iter().map(|n| &n.id).collect();
    let mut parts: BTreeMap<(&NodeId, &NodeId), PairParts<'_>> = BTreeMap::new();
    for link in &status.links {
        parts
            .entry(ordered(&link.a.node, &link.b.node))
            .or_default()
            .verdict = Some(link);
    }
    for cable in &status.cables {
        parts
            .entry(ordered(&cable.a.node, &cable.b.node))
            .or_default()
            .cables
            .push(cable);
    }
    for m in &status.measurements {
        // Figures of a pair with neither verdict nor cable have no line
        // to hang on.
        if let Some(pair) = parts.get_mut(&ordered(&m.node, &m.peer)) {
            pair.measurements.push(m);
        }
    }
    let known: std::collections::BTreeSet<&NodeId> = ids.iter().copied().collect();
    let mut extra: std::collections::BTreeSet<&NodeId> = parts
        .keys()
        .flat_map(|(a, b)| [*a, *b])
        .filter(|id| !known.contains(id))
        .collect();
    if !known.contains(&status.node.id) {
        extra.insert(&status.node.id);
    }
    ids.extend(extra);

    let mut alarms: BTreeMap<&NodeId, Vec<&Alarm>> = BTreeMap::new();
    for alarm in &status.alarms {
        alarms.entry(&alarm.node).or_default().push(alarm);
    }
    let mut checks: BTreeMap<Option<&NodeId>, Checks<'_>> = BTreeMap::new();
    for check in &status.checks {
        if matches!(check.status, CheckStatus::Fail | CheckStatus::Warn) {
            checks.entry(check.node.as_ref()).or_default().push(check);
        }
    }
    let verdicts: BTreeMap<&NodeId, &NodeVerdict> =
        status.nodes.iter().map(|n| (&n.id, n)).collect();
    let nodes: Vec<SceneNode<'_>> = ids
        .into_iter()
        .map(|id| SceneNode {
            id,
            verdict: verdicts.get(id).copied(),
            alarms: alarms.remove(id).unwrap_or_default(),
            checks: checks.remove(&Some(id)).unwrap_or_default(),
        })
        .collect();
    let pairs = parts
        .into_iter()
        .map(|((a, b), mut p)| {
            p.measurements.sort_by_key(|m| (&m.node != a, &m.node));
            Pair {
                a,
                b,
                verdict: p.verdict,
                cables: p.cables,
                measurements: p.measurements,
            }
        })
        .collect();
    let mut mesh_checks = checks.remove(&None).unwrap_or_default();
    // Checks naming a node the status does not know still deserve a line.
    for other in checks.into_values() {
        mesh_checks.failing.extend(other.failing);
        mesh_checks.warnings.extend(other.warnings);
    }
    Scene {
        status,
        nodes,
        pairs,
        mesh_alarms: alarms.into_values().flatten().collect(),
        mesh_checks,
    }
}
