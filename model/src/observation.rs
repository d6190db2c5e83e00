//! The one place a link observation is built: what this node's prober
//! measured on the cable, what the config says the cable should do, and
//! what the platform knows about this end's port (interface state,
//! negotiated speed, RDMA port state, whether GID[1] matches the address,
//! error counters). The verdict engine judges the result; this node's
//! report carries it to the peers; the metrics and the status show it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use meshd_domain::facts::{NodeFacts, PortFact};
use meshd_domain::{Counter, InterfaceState, LinkFigures, LinkObservation, RdmaPortState};

use crate::linkstats::ProbeStats;
use crate::rdma::RdmaProbeEnd;
use crate::time::Moment;
use crate::verdict::ExpectedLink;

/// The observation of `link` from its probe statistics, its RDMA probe's
/// and, when known, this node's platform facts, its ports' error counters
/// (by port name) and its port's carrier (from the kernel's events).
pub fn link_observation(
    link: &ExpectedLink,
    probes: &ProbeStats,
    rdma: Option<&RdmaProbeEnd>,
    facts: Option<&NodeFacts>,
    counters: &BTreeMap<String, Vec<Counter>>,
    carrier: Option<bool>,
    moment: Moment,
) -> LinkObservation {
    let mut observation = LinkObservation {
        local: link.local.clone(),
        remote: link.remote.clone(),
        figures: LinkFigures {
            interface_state: InterfaceState::Unknown,
            negotiated_speed_bps: None,
            expected_speed_bps: link.expected_speed_bps,
            rdma_port_state: RdmaPortState::None,
            rtt: probes.rtt,
            loss: probes.loss.clone(),
            silence: probes.silence,
        },
        gid_matches_address: None,
        rtt_histogram: probes.rtt_histogram.clone(),
        mtu_loss: probes.mtu_loss.clone(),
        probes_sent_total: probes.probes_sent_total,
        probes_lost_total: probes.probes_lost_total,
        last_reply_at: probes.last_reply_at.map(|at| moment.wall_of(at)),
        error_counters: Vec::new(),
        consecutive_lost: probes.consecutive_lost,
        silence_confirmed: probes.silence_confirmed,
        lateness: probes.lateness,
        rdma_probe: rdma.and_then(|r| r.probe),
        rdma_endpoint: rdma.and_then(|r| r.endpoint),
        carrier,
    };
    if let Some(facts) = facts {
        add_port_facts(&mut observation, facts, counters);
    }
    observation
}

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
fn add_port_facts(
    observation: &mut LinkObservation,
    facts: &NodeFacts,
    counters: &BTreeMap<String, Vec<Counter>>,
) {
    let Some(port) = port_of(observation, facts) else {
        return;
    };
    observation.figures.interface_state = match port.iface_up {
        Some(true) => InterfaceState::Up,
        Some(false) => InterfaceState::Down,
        None => InterfaceState::Unknown,
    };
    if port.negotiated_speed_bps > 0 {
        observation.figures.negotiated_speed_bps = Some(port.negotiated_speed_bps);
    }
    if observation.local.rdma_device.is_none() && !port.rdma_device.is_empty() {
        observation.local.rdma_device = Some(port.rdma_device.clone());
    }
    if let Some(rdma) = &port.rdma {
        observation.figures.rdma_port_state = rdma.state;
        if let Some(IpAddr::V4(address)) = observation.local.address {
            observation.gid_matches_address =
                rdma.gid(1).map(|gid| gid == address.to_ipv6_mapped());
        }
    } else if !port.rdma_device.is_empty() {
        observation.figures.rdma_port_state = RdmaPortState::None;
    }
    if let Some(port_counters) = counters.get(&port.name) {
        observation.error_counters.clone_from(port_counters);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use meshd_domain::LinkEnd;
    use meshd_domain::facts::{Gid, RdmaPortFact};
    use meshd_domain::fixtures::id;

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
                ..LinkEnd::node_only(id("a"))
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
        assert_eq!(by_iface.figures.interface_state, InterfaceState::Up);
        assert_eq!(by_iface.figures.negotiated_speed_bps, Some(80_000_000_000));
        assert_eq!(by_iface.figures.rdma_port_state, RdmaPortState::Down);
        assert_eq!(by_iface.gid_matches_address, Some(true));
        assert_eq!(by_iface.local.rdma_device.as_deref(), Some("rdma_en6"));
        assert!(by_iface.error_counters[0].saturated);

        let mut by_address = observation(None, [10, 254, 0, 1]);
        add_port_facts(&mut by_address, &facts, &counters);
        assert_eq!(by_address.figures.rdma_port_state, RdmaPortState::Active);
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

    #[test]
    fn the_observation_joins_probes_config_and_port_facts() {
        use std::time::{Duration, SystemTime};

        use crate::linkstats::{LinkStats, LinkStatsConfig, ProbeClass};

        let t0 = crate::fixtures::epoch();
        let mut stats = LinkStats::new(LinkStatsConfig {
            timeout: Duration::from_millis(500),
            outage_gap: Duration::from_millis(600),
            interval: Duration::from_millis(100),
            tick_gap: Duration::from_millis(128),
        });
        stats.on_sent(1, ProbeClass::Small, t0);
        stats.on_reply(
            1,
            ProbeClass::Small,
            Duration::ZERO,
            t0 + Duration::from_micros(40),
        );
        let probes = stats.stats(t0 + Duration::from_secs(1));
        let link = ExpectedLink {
            local: observation(Some("en6"), [10, 254, 0, 5]).local,
            remote: LinkEnd::node_only(id("b")),
            expected_speed_bps: Some(80_000_000_000),
        };
        let moment = Moment {
            now: t0 + Duration::from_secs(1),
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
        };

        // Without facts the platform fields stay unknown.
        let bare = link_observation(&link, &probes, None, None, &BTreeMap::new(), None, moment);
        assert_eq!(bare.figures.interface_state, InterfaceState::Unknown);
        assert_eq!(bare.figures.rdma_port_state, RdmaPortState::None);
        assert_eq!(bare.figures.negotiated_speed_bps, None);
        assert_eq!(bare.figures.expected_speed_bps, Some(80_000_000_000));
        assert_eq!(bare.figures.rtt.samples, 1);
        assert_eq!(
            bare.last_reply_at,
            Some(
                SystemTime::UNIX_EPOCH + Duration::from_secs(1_000) - Duration::from_secs(1)
                    + Duration::from_micros(40)
            )
        );

        let facts = NodeFacts {
            ports: vec![port(
                "Thunderbolt 2",
                "en6",
                "10.254.0.5",
                RdmaPortState::Active,
            )],
            ..NodeFacts::default()
        };
        let full = link_observation(
            &link,
            &probes,
            None,
            Some(&facts),
            &BTreeMap::new(),
            Some(false),
            moment,
        );
        assert_eq!(full.figures.interface_state, InterfaceState::Up);
        assert_eq!(full.figures.rdma_port_state, RdmaPortState::Active);
        assert_eq!(full.figures.negotiated_speed_bps, Some(80_000_000_000));
        assert_eq!(full.figures.rtt, bare.figures.rtt);
    }
}
