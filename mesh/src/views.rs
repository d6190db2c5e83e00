//! What each node's Thunderbolt report shows of the Mac at the other end
//! of its cables: the peer's model, whether it offers the RDMA service
//! (which a Mac does only with RDMA enabled) and the negotiated speed. A
//! view fills in a node's own unknowns (its model when `sysctl` was not
//! captured, its RDMA state when `rdma_ctl` was not), and where both ends
//! were captured the `peer_views_agree` check compares them.
//!
//! Views come only from discovered cables: only there is the Mac at the far
//! end known to be that member.

use std::collections::BTreeMap;

use meshd_domain::NodeId;
use meshd_domain::facts::{Cable, CableEnd, NodeFacts, PortFact};

/// One node as the node at the other end of a cable sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerView {
    /// The node that sees, and its port.
    pub seen_by: NodeId,
    pub seen_from_port: String,
    /// The viewed node's port on this cable.
    pub port: String,
    /// Model identifier as the viewer's report shows it; empty when it
    /// shows none.
    pub model: String,
    /// The viewed node offers the RDMA service; `None` when the viewer's
    /// report lists no services for it.
    pub rdma_service: Option<bool>,
    /// The speed the viewer negotiated on this cable; 0 when unknown.
    pub speed_bps: u64,
}

impl PeerView {
    /// "a/Thunderbolt 2".
    pub fn viewer(&self) -> String {
        format!("{}/{}", self.seen_by, self.seen_from_port)
    }
}

/// Every node's views, by the node seen.
pub type PeerViews = BTreeMap<NodeId, Vec<PeerView>>;

/// The views across every discovered cable whose both ends' facts are
/// known.
pub fn peer_views(facts: &BTreeMap<NodeId, NodeFacts>, cables: &[Cable]) -> PeerViews {
    let mut views = PeerViews::new();
    for cable in cables.iter().filter(|c| c.discovered) {
        for (viewer, seen) in [(&cable.a, &cable.b), (&cable.b, &cable.a)] {
            let (Some(port), Some(_)) = (port_of(facts, viewer), port_of(facts, seen)) else {
                continue;
            };
            let Some(peer) = &port.peer else {
                continue;
            };
            views.entry(seen.node.clone()).or_default().push(PeerView {
                seen_by: viewer.node.clone(),
                seen_from_port: viewer.port.clone(),
                port: seen.port.clone(),
                model: peer.model.clone(),
                rdma_service: peer.rdma_service,
                speed_bps: port.negotiated_speed_bps,
            });
        }
    }
    views
}

/// The port of `end` in its node's facts.
pub(crate) fn port_of<'f>(
    facts: &'f BTreeMap<NodeId, NodeFacts>,
    end: &CableEnd,
) -> Option<&'f PortFact> {
    facts
        .get(&end.node)?
        .ports
        .iter()
        .find(|p| !end.port.is_empty() && p.name == end.port)
}

/// The model every view of a node agrees on, with the first viewer as its
/// source; `None` when no view shows one or views disagree.
pub fn agreed_model(views: &[PeerView]) -> Option<(&str, &PeerView)> {
    agreed(views, |v| (!v.model.is_empty()).then_some(v.model.as_str()))
}

/// Whether the node offers the RDMA service, as every view that lists its
/// services agrees; `None` when none does or they disagree.
pub fn agreed_rdma_service(views: &[PeerView]) -> Option<(bool, &PeerView)> {
    agreed(views, |v| v.rdma_service)
}

fn agreed<'v, T: PartialEq + Copy>(
    views: &'v [PeerView],
    value: impl Fn(&'v PeerView) -> Option<T>,
) -> Option<(T, &'v PeerView)> {
    let mut seen = views.iter().filter_map(|v| Some((value(v)?, v)));
    let first = seen.next()?;
    seen.all(|(other, _)| other == first.0).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshd_domain::facts::PeerFact;
    use meshd_domain::fixtures::id;

    fn end(node: &str, port: &str) -> CableEnd {
        CableEnd {
            node: id(node),
            port: port.to_owned(),
            iface: String::new(),
            rdma_device: String::new(),
            address: None,
        }
    }

    fn node(port: &str, model: &str, service: Option<bool>, speed: u64) -> NodeFacts {
        NodeFacts {
            ports: vec![PortFact {
                name: port.to_owned(),
                negotiated_speed_bps: speed,
                peer: Some(PeerFact {
                    domain_uuid: "X".into(),
                    model: model.to_owned(),
                    name: String::new(),
                    rdma_service: service,
                }),
                ..PortFact::default()
            }],
            ..NodeFacts::default()
        }
    }

    #[test]
    fn each_end_of_a_discovered_cable_describes_the_other() {
        let facts = BTreeMap::from([
            (id("a"), node("Thunderbolt 2", "Mac16,9", Some(true), 80)),
            (id("b"), node("Thunderbolt 1", "", None, 40)),
        ]);
        let cable = Cable {
            a: end("a", "Thunderbolt 2"),
            b: end("b", "Thunderbolt 1"),
            speed_bps: 40,
            discovered: true,
        };
        let views = peer_views(&facts, std::slice::from_ref(&cable));
        let of_b = &views[&id("b")];
        assert_eq!(of_b[0].viewer(), "a/Thunderbolt 2");
        assert_eq!(agreed_model(of_b).map(|(m, _)| m), Some("Mac16,9"));
        assert_eq!(agreed_rdma_service(of_b).map(|(s, _)| s), Some(true));
        let of_a = &views[&id("a")];
        assert_eq!((of_a[0].speed_bps, agreed_model(of_a)), (40, None));
        assert_eq!(agreed_rdma_service(of_a), None);

        let configured = Cable {
            discovered: false,
            ..cable
        };
        assert!(peer_views(&facts, &[configured]).is_empty());
    }

    #[test]
    fn disagreeing_views_agree_on_nothing() {
        let view = |model: &str, service| PeerView {
            seen_by: id("a"),
            seen_from_port: "Thunderbolt 1".into(),
            port: "Thunderbolt 2".into(),
            model: model.to_owned(),
            rdma_service: service,
            speed_bps: 0,
        };
        let views = [view("Mac16,9", Some(true)), view("Mac15,14", Some(false))];
        assert_eq!(agreed_model(&views), None);
        assert_eq!(agreed_rdma_service(&views), None);
        assert_eq!(agreed_model(&[]), None);
    }
}
