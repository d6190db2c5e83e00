//! The cable map: which port of which node is cabled to which port of which
//! node, matched from Thunderbolt domain UUIDs, with meshd's configured
//! static links filling in what discovery cannot see.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use meshd_domain::facts::{Cable, CableEnd, NodeFacts, PortFact};
use meshd_domain::{LinkEnd, LinkVerdict, NodeId};

/// Every cable of the mesh, in a deterministic order (by node ids, then
/// ports); each cable's `a` end is on the lower node id.
///
/// - A port whose peer domain UUID is another known node's port domain
///   UUID is a discovered cable; its speed is the lower of the two ends'.
/// - A port whose peer matches no known port is a cable only when a
///   configured cable names that port and its far node's facts are unknown:
///   the cable is seen from one end, and carries what that end knows. Other
///   unmatched peers (a Mac that is not a member) are not cables; the
///   `cable_peers_known` check reports them.
/// - Configured cables fill in the node pairs discovery did not find
///   (`discovered = false`), completed with what the facts know about
///   their ports.
pub fn cable_map(facts: &BTreeMap<NodeId, NodeFacts>, configured: &[Cable]) -> Vec<Cable> {
    let mut owners: HashMap<&str, (&NodeId, &PortFact)> = HashMap::new();
    for (node, node_facts) in facts {
        for port in &node_facts.ports {
            if !port.domain_uuid.is_empty() {
                owners.insert(port.domain_uuid.as_str(), (node, port));
            }
        }
    }

    let mut cables = Vec::new();
    let mut seen_ends = BTreeSet::new();
    let mut used_configured = BTreeSet::new();
    for (node, node_facts) in facts {
        for port in &node_facts.ports {
            let Some(peer) = port.peer.as_ref().filter(|p| !p.domain_uuid.is_empty()) else {
                continue;
            };
            match owners.get(peer.domain_uuid.as_str()) {
                // A cable from a node back to itself is no mesh link.
                Some((far_node, _)) if *far_node == node => {}
                Some((far_node, far_port)) => {
                    let key = ordered_pair(
                        (node.clone(), port.name.clone()),
                        ((*far_node).clone(), far_port.name.clone()),
                    );
                    if seen_ends.insert(key) {
                        cables.push(oriented(
                            end_from_port(node, port),
                            end_from_port(far_node, far_port),
                            lower_known_speed(
                                port.negotiated_speed_bps,
                                far_port.negotiated_speed_bps,
                            ),
                            true,
                        ));
                    }
                }
                None => {
                    let one_sided = configured.iter().enumerate().find_map(|(i, cable)| {
                        let (near, far) = ends_from(cable, node)?;
                        (end_names_port(near, port)
                            && !facts.contains_key(&far.node)
                            && !used_configured.contains(&i))
                        .then_some((i, far))
                    });
                    if let Some((index, far)) = one_sided {
                        used_configured.insert(index);
                        cables.push(oriented(
                            end_from_port(node, port),
                            far.clone(),
                            port.negotiated_speed_bps,
                            true,
                        ));
                    }
                }
            }
        }
    }

    let discovered_pairs: BTreeSet<(NodeId, NodeId)> = cables
        .iter()
        .map(|c: &Cable| (c.a.node.clone(), c.b.node.clone()))
        .collect();
    for (index, cable) in configured.iter().enumerate() {
        let pair = ordered_pair(cable.a.node.clone(), cable.b.node.clone());
        if used_configured.contains(&index)
            || discovered_pairs.contains(&pair)
            || cable.a.node == cable.b.node
        {
            continue;
        }
        let (a, a_speed) = completed_end(facts, &cable.a);
        let (b, b_speed) = completed_end(facts, &cable.b);
        let speed = if cable.speed_bps != 0 {
            cable.speed_bps
        } else {
            lower_known_speed(a_speed, b_speed)
        };
        cables.push(oriented(a, b, speed, false));
    }

    cables.sort_by(|x, y| {
        (&x.a.node, &x.b.node, &x.a.port, &x.b.port, &x.a.iface)
            .cmp(&(&y.a.node, &y.b.node, &y.a.port, &y.b.port, &y.a.iface))
    });
    cables
}

/// What evidence calls a cable end: "studio-1/Thunderbolt 2", or the
/// interface, or only the node when the config named neither.
pub fn end_label(end: &CableEnd) -> String {
    match (end.port.as_str(), end.iface.as_str()) {
        ("", "") => end.node.to_string(),
        ("", iface) => format!("{}/{iface}", end.node),
        (port, _) => format!("{}/{port}", end.node),
    }
}

/// "a/Thunderbolt 2 ↔ b/Thunderbolt 1".
pub fn cable_label(cable: &Cable) -> String {
    format!("{} ↔ {}", end_label(&cable.a), end_label(&cable.b))
}

fn ordered_pair<T: Ord>(x: T, y: T) -> (T, T) {
    if x <= y { (x, y) } else { (y, x) }
}

fn oriented(x: CableEnd, y: CableEnd, speed_bps: u64, discovered: bool) -> Cable {
    let (a, b) = if (&x.node, &x.port) <= (&y.node, &y.port) {
        (x, y)
    } else {
        (y, x)
    };
    Cable {
        a,
        b,
        speed_bps,
        discovered,
    }
}

/// The lower of two speeds where 0 means unknown.
fn lower_known_speed(x: u64, y: u64) -> u64 {
    match (x, y) {
        (0, other) | (other, 0) => other,
        (x, y) => x.min(y),
    }
}

fn end_from_port(node: &NodeId, port: &PortFact) -> CableEnd {
    CableEnd {
        node: node.clone(),
        port: port.name.clone(),
        iface: port.iface.clone(),
        rdma_device: port.rdma_device.clone(),
        address: port.addresses().first().map(|cidr| cidr.address),
    }
}

/// The end of `cable` on `node` and the one opposite.
fn ends_from<'c>(cable: &'c Cable, node: &NodeId) -> Option<(&'c CableEnd, &'c CableEnd)> {
    Some((cable.end_at(node)?, cable.far_end(node)?))
}

/// A configured end names a port by its hardware name or its interface.
fn end_names_port(end: &CableEnd, port: &PortFact) -> bool {
    (!end.port.is_empty() && end.port == port.name)
        || (!end.iface.is_empty() && end.iface == port.iface)
}

/// A configured end with what its node's facts add, and that port's speed.
fn completed_end(facts: &BTreeMap<NodeId, NodeFacts>, end: &CableEnd) -> (CableEnd, u64) {
    let port = facts
        .get(&end.node)
        .and_then(|f| f.ports.iter().find(|p| end_names_port(end, p)));
    let Some(port) = port else {
        return (end.clone(), 0);
    };
    let from_facts = end_from_port(&end.node, port);
    let filled = |configured: &str, known: String| {
        if configured.is_empty() {
            known
        } else {
            configured.to_owned()
        }
    };
    (
        CableEnd {
            node: end.node.clone(),
            port: filled(&end.port, from_facts.port),
            iface: filled(&end.iface, from_facts.iface),
            rdma_device: filled(&end.rdma_device, from_facts.rdma_device),
            address: end.address.or(from_facts.address),
        },
        port.negotiated_speed_bps,
    )
}

/// The mesh's verdict on `cable`: the link between the same two nodes whose
/// interfaces agree with the cable's where both name one (two cables may
/// join one pair of nodes). `None` when no link matches: the cable is not
/// judged, which is not the same as up.
pub fn link_of<'a>(cable: &Cable, links: &'a [LinkVerdict]) -> Option<&'a LinkVerdict> {
    let agrees = |cable_end: &CableEnd, link_end: &LinkEnd| {
        cable_end.node == link_end.node
            && (cable_end.iface.is_empty()
                || link_end
                    .iface
                    .as_deref()
                    .is_none_or(|iface| iface == cable_end.iface))
    };
    links.iter().find(|link| {
        (agrees(&cable.a, &link.a) && agrees(&cable.b, &link.b))
            || (agrees(&cable.a, &link.b) && agrees(&cable.b, &link.a))
    })
}

#[cfg(test)]
mod tests {
    use meshd_domain::LinkState;
    use meshd_domain::fixtures::{id, link_verdict};

    use super::*;

    fn cable(a: (&str, &str), b: (&str, &str)) -> Cable {
        let end = |(node, iface): (&str, &str)| CableEnd {
            node: id(node),
            port: String::new(),
            iface: iface.to_owned(),
            rdma_device: String::new(),
            address: None,
        };
        Cable {
            a: end(a),
            b: end(b),
            speed_bps: 0,
            discovered: true,
        }
    }

    fn link(a: (&str, Option<&str>), b: (&str, Option<&str>), state: LinkState) -> LinkVerdict {
        let end = |(node, iface): (&str, Option<&str>)| LinkEnd {
            iface: iface.map(str::to_owned),
            ..LinkEnd::node_only(id(node))
        };
        link_verdict(end(a), end(b), state)
    }

    #[test]
    fn a_cable_is_judged_by_the_link_of_its_nodes_and_interfaces() {
        let links = [
            link(("a", Some("en2")), ("b", Some("en3")), LinkState::Down),
            link(("a", Some("en4")), ("b", Some("en5")), LinkState::Up),
            link(("a", None), ("c", None), LinkState::Degraded),
        ];
        let state = |c: &Cable| link_of(c, &links).map(|l| l.state);
        assert_eq!(
            state(&cable(("a", "en2"), ("b", "en3"))),
            Some(LinkState::Down)
        );
        assert_eq!(
            state(&cable(("a", "en4"), ("b", "en5"))),
            Some(LinkState::Up)
        );
        // Ends listed the other way round are the same cable.
        assert_eq!(
            state(&cable(("b", "en5"), ("a", "en4"))),
            Some(LinkState::Up)
        );
        // A side that names no interface matches on the node alone.
        assert_eq!(
            state(&cable(("a", "en9"), ("c", ""))),
            Some(LinkState::Degraded)
        );
        assert_eq!(state(&cable(("a", ""), ("b", ""))), Some(LinkState::Down));
        // Interfaces that disagree, or a pair with no link: not judged.
        assert_eq!(state(&cable(("a", "en9"), ("b", "en3"))), None);
        assert_eq!(state(&cable(("b", "en1"), ("c", "en1"))), None);
    }
}
