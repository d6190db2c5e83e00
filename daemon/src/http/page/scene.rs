//! What the page shows, gathered from one status: the nodes in drawing
//! order and one entry per pair of nodes joined by a cable or a link
//! verdict, with that pair's cables and figures. Nothing is judged here:
//! states, blame and evidence are the status's own.

use std::collections::BTreeMap;

use meshd_domain::facts::{Cable, CheckResult, CheckStatus};
use meshd_domain::{
    Alarm, LinkMeasurement, LinkState, LinkVerdict, MeshStatus, NodeId, NodeVerdict,
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
    pub mesh_checks: Vec<&'a CheckResult>,
}

#[derive(Debug)]
pub struct SceneNode<'a> {
    pub id: &'a NodeId,
    pub verdict: Option<&'a NodeVerdict>,
    pub alarms: Vec<&'a Alarm>,
    /// Checks of this node that warn or fail.
    pub failing_checks: Vec<&'a CheckResult>,
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
}

impl SceneNode<'_> {
    pub fn is_self(&self, status: &MeshStatus) -> bool {
        *self.id == status.node.id
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
    let mut checks: BTreeMap<Option<&NodeId>, Vec<&CheckResult>> = BTreeMap::new();
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
            failing_checks: checks.remove(&Some(id)).unwrap_or_default(),
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
    mesh_checks.extend(checks.into_values().flatten());
    Scene {
        status,
        nodes,
        pairs,
        mesh_alarms: alarms.into_values().flatten().collect(),
        mesh_checks,
    }
}
