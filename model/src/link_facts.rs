//! What the platform knows about this node's end of a cable, added to the
//! link's probe observation: interface state, negotiated speed, RDMA port
//! state, whether GID[1] matches the address, and the port's error
//! counters. The verdict engine then judges them with the probes (a port
//! not ACTIVE while IP works, a speed below the expected one).

use std::collections::BTreeMap;
use std::net::IpAddr;

use meshd_proto::domain::{Counter, InterfaceState, LinkObservation, RdmaPortState};
use meshd_proto::facts::{NodeFacts, PortFact};

/// The port of `facts` this link leaves through: by interface name, else by
/// the link's local address, else by RDMA device.
fn port_of<'a>(observation: &LinkObservation, facts: &'a NodeFacts) -> Option<&'a PortFact> {
    let local = &observation.local;
    let by_iface = local.iface.as_deref().and_then(|iface| {
        facts
            .ports
            .iter()
            .find(|p| !p.iface.is_empty() && p.iface == iface)
    });
    let by_address = || match local.address {
        Some(IpAddr::V4(address)) => facts
            .ports
            .iter()
            .find(|p| p.addresses().iter().any(|cidr| cidr.address == address)),
        _ => None,
    };
    let by_device = || {
        local.rdma_device.as_deref().and_then(|device| {
            facts
                .ports
                .iter()
                .find(|p| !p.rdma_device.is_empty() && p.rdma_device == device)
        })
    };
    by_iface.or_else(by_address).or_else(by_device)
}

/// Fills the platform fields of `observation` from the port it leaves
/// through; leaves them unknown when no port of `facts` matches.
/// `counters` are the ports' error counters by port name.
pub fn add_port_facts(
    observation: &mut LinkObservation,
    facts: &NodeFacts,
    counters: &BTreeMap<String, Vec<Counter>>,
) {
    let Some(port) = port_of(observation, facts) else {
        return;
    };
    observation.interface_state = match port.iface_up {
        Some(true) => InterfaceState::Up,
        Some(false) => InterfaceState::Down,
        None => InterfaceState::Unknown,
    };
    if port.negotiated_speed_bps > 0 {
        observation.negotiated_speed_bps = Some(port.negotiated_speed_bps);
    }
    if observation.local.rdma_device.is_none() && !port.rdma_device.is_empty() {
        observation.local.rdma_device = Some(port.rdma_device.clone());
    }
    if let Some(rdma) = &port.rdma {
        observation.rdma_port_state = rdma.state;
        if let Some(IpAddr::V4(address)) = observation.local.address {
            observation.gid_matches_address =
                rdma.gid(1).map(|gid| gid == address.to_ipv6_mapped());
        }
    } else if !port.rdma_device.is_empty() {
        observation.rdma_port_state = RdmaPortState::None;
    }
    if let Some(port_counters) = counters.get(&port.name) {
        observation.error_counters.clone_from(port_counters);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use meshd_proto::domain::{LinkEnd, NodeId};
    use meshd_proto::facts::{Gid, RdmaPortFact};

    use super::*;
    use crate::fixtures::healthy_observation;

    fn port(name: &str, iface: &str, address: &str, state: RdmaPortState) -> PortFact {
        PortFact {
            name: name.into(),
            iface: iface.into(),
            rdma_device: format!("rdma_{iface}"),
            negotiated_speed_bps: 80_000_000_000,
            ipv4: Some(vec![format!("{address}/30").parse().expect("cidr")]),
            iface_up: Some(true),
            rdma: Some(RdmaPortFact {
                port: 1,
                state,
                active_speed_bps: 80_000_000_000,
                gids: vec![Gid {
                    index: 1,
                    address: address.parse::<Ipv4Addr>().expect("ip").to_ipv6_mapped(),
                }],
                link_layer: "Thunderbolt".into(),
                active_mtu: None,
                max_mtu: None,
                reader: None,
            }),
            ..PortFact::default()
        }
    }

    fn observation(iface: Option<&str>, address: [u8; 4]) -> LinkObservation {
        LinkObservation {
            local: LinkEnd {
                iface: iface.map(str::to_owned),
                address: Some(IpAddr::V4(Ipv4Addr::from(address))),
                ..LinkEnd::node_only(NodeId::new("a").expect("id"))
            },
            ..healthy_observation("a", "b")
        }
    }

    #[test]
    fn the_port_is_found_by_interface_then_address_and_its_facts_are_added() {
        let facts = NodeFacts {
            ports: vec![
                port("Thunderbolt 1", "en1", "10.254.0.1", RdmaPortState::Active),
                port("Thunderbolt 2", "en6", "10.254.0.5", RdmaPortState::Down),
            ],
            ..NodeFacts::default()
        };
        let counters = BTreeMap::from([(
            "Thunderbolt 2".to_owned(),
            vec![Counter {
                name: "symbol_error".into(),
                value: 65_535,
                saturated: true,
            }],
        )]);

        let mut by_iface = observation(Some("en6"), [10, 254, 0, 5]);
        add_port_facts(&mut by_iface, &facts, &counters);
        assert_eq!(by_iface.interface_state, InterfaceState::Up);
        assert_eq!(by_iface.negotiated_speed_bps, Some(80_000_000_000));
        assert_eq!(by_iface.rdma_port_state, RdmaPortState::Down);
        assert_eq!(by_iface.gid_matches_address, Some(true));
        assert_eq!(by_iface.local.rdma_device.as_deref(), Some("rdma_en6"));
        assert!(by_iface.error_counters[0].saturated);

        let mut by_address = observation(None, [10, 254, 0, 1]);
        add_port_facts(&mut by_address, &facts, &counters);
        assert_eq!(by_address.rdma_port_state, RdmaPortState::Active);
        assert!(by_address.error_counters.is_empty());

        // GID[1] left over from another address: JACCL fails with errno 22.
        let mut stale_gid = observation(Some("en1"), [10, 254, 0, 9]);
        add_port_facts(&mut stale_gid, &facts, &counters);
        assert_eq!(stale_gid.gid_matches_address, Some(false));
    }

    #[test]
    fn a_link_no_port_matches_keeps_its_unknowns() {
        let facts = NodeFacts {
            ports: vec![port(
                "Thunderbolt 1",
                "en1",
                "10.254.0.1",
                RdmaPortState::Active,
            )],
            ..NodeFacts::default()
        };
        let mut loopback = observation(None, [127, 100, 1, 2]);
        let before = loopback.clone();
        add_port_facts(&mut loopback, &facts, &BTreeMap::new());
        assert_eq!(loopback, before);
    }
}
