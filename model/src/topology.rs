//! The mesh's cable map and platform checks, from every member's facts and
//! the cables the members declare in their configs (`[[links]]`, which
//! every node's link observations carry to its peers).
//!
//! Discovery (Thunderbolt domain UUIDs) wins where it finds a cable; the
//! declared cables fill in the node pairs it did not find, which on Linux
//! and in the demo is all of them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use meshd_domain::facts::{Cable, CableEnd, CheckResult, NodeFacts};
use meshd_domain::{LinkEnd, NodeId};
use meshd_mesh::cables::cable_map;
use meshd_mesh::checks::mesh_checks;
use meshd_mesh::models::ModelTable;

use crate::peers::BookSnapshot;

/// What the mesh is made of, as this node sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MeshTopology {
    pub cables: Vec<Cable>,
    /// Every member's own checks (from its facts), then the mesh-wide ones.
    pub checks: Vec<CheckResult>,
}

/// One cable as a node declares it: its own end in full, the far end as
/// far as the config knows it (node and address).
#[derive(Debug, Clone, Copy)]
pub struct Declared<'a> {
    pub local: &'a LinkEnd,
    pub remote: &'a LinkEnd,
}

/// The declared cables, one per node pair. Each end is described by the
/// node it is on where that node declared the cable, else by the other
/// node's config.
pub fn declared_cables<'a>(declarations: impl IntoIterator<Item = Declared<'a>>) -> Vec<Cable> {
    // (lower id, higher id) -> ends by node, own declarations first.
    let mut pairs: BTreeMap<(NodeId, NodeId), BTreeMap<NodeId, (bool, CableEnd)>> = BTreeMap::new();
    for Declared { local, remote } in declarations {
        if local.node == remote.node {
            continue;
        }
        let key = if local.node < remote.node {
            (local.node.clone(), remote.node.clone())
        } else {
            (remote.node.clone(), local.node.clone())
        };
        let ends = pairs.entry(key).or_default();
        ends.insert(local.node.clone(), (true, cable_end(local)));
        let far = ends
            .entry(remote.node.clone())
            .or_insert_with(|| (false, cable_end(remote)));
        if !far.0 && far.1.address.is_none() {
            far.1.address = cable_end(remote).address;
        }
    }
    pairs
        .into_iter()
        .filter_map(|((a, b), mut ends)| {
            Some(Cable {
                a: ends.remove(&a)?.1,
                b: ends.remove(&b)?.1,
                speed_bps: 0,
                discovered: false,
            })
        })
        .collect()
}

fn cable_end(end: &LinkEnd) -> CableEnd {
    CableEnd {
        node: end.node.clone(),
        port: String::new(),
        iface: end.iface.clone().unwrap_or_default(),
        rdma_device: end.rdma_device.clone().unwrap_or_default(),
        address: match end.address {
            Some(std::net::IpAddr::V4(v4)) => Some(v4),
            _ => None,
        },
    }
}

/// The cable map and every check over the members' facts.
pub fn mesh_topology(
    members: &BTreeSet<NodeId>,
    facts: &BTreeMap<NodeId, NodeFacts>,
    declared: &[Cable],
    models: &ModelTable,
) -> MeshTopology {
    let members: Vec<NodeId> = members.iter().cloned().collect();
    let cables = cable_map(facts, declared);
    let mut checks: Vec<CheckResult> = members
        .iter()
        .filter_map(|m| facts.get(m))
        .flat_map(|f| f.checks.iter().cloned())
        .collect();
    checks.extend(mesh_checks(&members, facts, &cables, models));
    MeshTopology { cables, checks }
}

/// The cable map and checks, redone only when what they are made of
/// changed: a member's facts, the declared cables (this node's config, its
/// peers' reports) or the membership. They change with cables and
/// settings, not with verdicts, so most looks reuse them.
#[derive(Debug)]
pub struct TopologyCache {
    models: ModelTable,
    topology: MeshTopology,
    basis: Option<Basis>,
}

/// What the topology was last made from; membership is not in it because a
/// new membership clears it ([`TopologyCache::forget`]).
#[derive(Debug)]
struct Basis {
    local_facts: Option<Arc<NodeFacts>>,
    facts_version: u64,
    declared: Vec<Cable>,
}

impl Default for TopologyCache {
    fn default() -> Self {
        Self {
            models: ModelTable::builtin(),
            topology: MeshTopology::default(),
            basis: None,
        }
    }
}

impl TopologyCache {
    /// The membership changed: the next refresh builds afresh.
    pub fn forget(&mut self) {
        self.basis = None;
    }

    /// The topology of `members` from this node's facts, the peers' facts
    /// in `book` and the `declared` cables.
    pub fn refresh(
        &mut self,
        members: &BTreeSet<NodeId>,
        local: &NodeId,
        local_facts: Option<&Arc<NodeFacts>>,
        book: &BookSnapshot,
        declared: Vec<Cable>,
    ) -> &MeshTopology {
        let unchanged = self.basis.as_ref().is_some_and(|basis| {
            basis.facts_version == book.facts_version
                && same_facts(basis.local_facts.as_ref(), local_facts)
                && basis.declared == declared
        });
        if !unchanged {
            let mut facts: BTreeMap<NodeId, NodeFacts> = book
                .facts
                .iter()
                .map(|(id, f)| (id.clone(), (**f).clone()))
                .collect();
            if let Some(own) = local_facts {
                facts.insert(local.clone(), (**own).clone());
            }
            self.topology = mesh_topology(members, &facts, &declared, &self.models);
            self.basis = Some(Basis {
                local_facts: local_facts.cloned(),
                facts_version: book.facts_version,
                declared,
            });
        }
        &self.topology
    }
}

/// The same read of the facts: facts are shared, and a new read is a new
/// `Arc`.
fn same_facts(a: Option<&Arc<NodeFacts>>, b: Option<&Arc<NodeFacts>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use meshd_domain::fixtures::id;

    use super::*;

    fn end(node: &str, address: Option<[u8; 4]>, device: Option<&str>) -> LinkEnd {
        LinkEnd {
            address: address.map(|a| IpAddr::V4(Ipv4Addr::from(a))),
            rdma_device: device.map(str::to_owned),
            ..LinkEnd::node_only(id(node))
        }
    }

    #[test]
    fn declarations_from_both_ends_make_one_cable_described_by_its_ends() {
        let a_local = end("a", Some([10, 0, 0, 1]), Some("rdma_en2"));
        let a_remote = end("b", Some([10, 0, 0, 2]), None);
        let b_local = end("b", Some([10, 0, 0, 2]), Some("rdma_en5"));
        let b_remote = end("a", Some([10, 0, 0, 1]), None);
        // Only c declares its cable to a.
        let c_local = end("c", Some([10, 0, 1, 2]), Some("rdma_en1"));
        let c_remote = end("a", Some([10, 0, 1, 1]), None);
        let cables = declared_cables([
            Declared {
                local: &b_local,
                remote: &b_remote,
            },
            Declared {
                local: &a_local,
                remote: &a_remote,
            },
            Declared {
                local: &c_local,
                remote: &c_remote,
            },
        ]);
        assert_eq!(cables.len(), 2, "{cables:#?}");
        let ab = &cables[0];
        assert_eq!((ab.a.node.as_str(), ab.b.node.as_str()), ("a", "b"));
        assert_eq!(ab.a.rdma_device, "rdma_en2");
        assert_eq!(ab.b.rdma_device, "rdma_en5", "b's own declaration wins");
        assert!(!ab.discovered);
        let ac = &cables[1];
        assert_eq!((ac.a.node.as_str(), ac.b.node.as_str()), ("a", "c"));
        assert_eq!(ac.a.rdma_device, "", "a did not declare it");
        assert_eq!(ac.a.address, Some(Ipv4Addr::new(10, 0, 1, 1)));
        assert_eq!(ac.b.rdma_device, "rdma_en1");
    }
}
