//! The `[[links]]` cables: their ports, interface names, RDMA devices and
//! addresses (one family per cable, no broadcast or multicast), and the
//! example addressing of a `meshctl plan` cable that messages point to.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use meshd_mesh::plan::{DEFAULT_LINK_RANGE, LINK_NETMASK};

use super::super::error::Problem;
use super::super::{Config, LinkConfig, ProbeConfig};
use super::platform::check_rdma_device;
use super::{MAX_IFACE_LEN, MAX_LINK_SPEED_GBPS};

pub(super) fn check_links(c: &Config, p: &mut Vec<Problem>) {
    let mut responders: HashMap<SocketAddr, usize> = HashMap::new();
    for (i, link) in c.links.iter().enumerate() {
        let key = |field: &str| format!("links[{i}].{field}");
        if !c.peers.iter().any(|peer| peer.id == link.peer) {
            let known = if c.peers.is_empty() {
                "there are no [[peers]]".to_owned()
            } else {
                let ids: Vec<&str> = c.peers.iter().map(|peer| peer.id.as_str()).collect();
                format!("configured peers: {}", ids.join(", "))
            };
            p.push(Problem::new(
                key("peer"),
                format!("{:?} is not a configured peer; {known}", link.peer.as_str()),
            ));
        }
        if let Some(iface) = &link.local_iface {
            check_iface(iface, &key("local_iface"), p);
        }
        if let Some(device) = &link.rdma_device {
            check_rdma_device(device, &key("rdma_device"), p);
        }
        check_link_ports(link, i, c.probe.port, p);
        check_link_addresses(link, i, &c.probe, p);
        // One responder answers on each address and port, so two cables
        // there could not be told apart.
        let responder = link.local_probe_addr(&c.probe);
        let field = |link: &LinkConfig| {
            if link.local_port.is_some() {
                "local_port"
            } else {
                "local_address"
            }
        };
        match responders.get(&responder) {
            Some(&first) => p.push(
                Problem::new(
                    key(field(link)),
                    format!(
                        "links[{i}] (to {}) and links[{first}] (to {}) both answer probes on \
                         {responder}; give each cable its own local_address or local_port",
                        link.peer, c.links[first].peer,
                    ),
                )
                .with_first(format!("links[{first}].{}", field(&c.links[first]))),
            ),
            None => {
                responders.insert(responder, i);
            }
        }
        if let Some(speed) = link.expected_speed_gbps
            && !(1..=MAX_LINK_SPEED_GBPS).contains(&speed)
        {
            p.push(Problem::new(
                key("expected_speed_gbps"),
                format!(
                    "{speed} is out of range; use 1 to {MAX_LINK_SPEED_GBPS} (Gb/s; a Thunderbolt 5 cable negotiates 80), or leave it out"
                ),
            ));
        }
    }
}

/// Port 0 would have the OS pick a port no peer knows.
fn check_link_ports(link: &LinkConfig, i: usize, probe_port: u16, p: &mut Vec<Problem>) {
    for (field, port) in [
        ("local_port", link.local_port),
        ("peer_port", link.peer_port),
    ] {
        if port == Some(0) {
            p.push(Problem::new(
                format!("links[{i}].{field}"),
                format!(
                    "0 is not a usable port; use 1 to 65535, or leave it out for probe.port ({probe_port})"
                ),
            ));
        }
    }
}

fn check_iface(iface: &str, key: &str, p: &mut Vec<Problem>) {
    let ok = !iface.is_empty()
        && iface.len() <= MAX_IFACE_LEN
        && iface
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '/' && c != ':');
    if !ok {
        p.push(Problem::new(
            key,
            format!(
                "{iface:?} is not an interface name; use 1 to {MAX_IFACE_LEN} characters \
                 without spaces, '/' or ':', like \"en2\""
            ),
        ));
    }
}

fn check_link_addresses(link: &LinkConfig, i: usize, probe: &ProbeConfig, p: &mut Vec<Problem>) {
    for (field, ip) in [
        ("local_address", link.local_address),
        ("peer_address", link.peer_address),
    ] {
        if ip.is_unspecified() || ip.is_multicast() || is_broadcast(ip) {
            p.push(Problem::new(
                format!("links[{i}].{field}"),
                format!("{ip} cannot be a cable end; use the unicast address of the interface"),
            ));
        } else if matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local()) {
            // A plain address cannot carry the `%en2` scope an fe80::
            // address needs to mean anything; a probe socket could neither
            // bind to it nor reach the peer's.
            p.push(Problem::new(
                format!("links[{i}].{field}"),
                format!(
                    "{ip} is IPv6 link-local: it exists only together with an interface \
                     (fe80::…%en2), which this key cannot carry, so meshd cannot bind or \
                     reach it; give the cable its own IPv4 /30 as `meshctl plan` prints \
                     ({}, netmask {LINK_NETMASK}), or a unique-local fd00::/8 address",
                    plan_example()
                ),
            ));
        }
    }
    // Both ends on one address is a cable looped back on one host, which
    // works as long as the two responders have their own ports.
    let peer = link.peer_probe_addr(probe);
    if peer == link.local_probe_addr(probe) {
        let field = if link.peer_port.is_some() {
            "peer_port"
        } else {
            "peer_address"
        };
        p.push(Problem::new(
            format!("links[{i}].{field}"),
            format!(
                "{peer} is also this end's own responder (local_address and local_port); \
                 the two ends of a cable need different addresses or ports"
            ),
        ));
    } else if link.local_address.is_ipv4() != link.peer_address.is_ipv4() {
        p.push(Problem::new(
            format!("links[{i}].peer_address"),
            format!(
                "{} is {} but local_address {} is {}; both ends of a cable use the same address family",
                link.peer_address,
                family(link.peer_address),
                link.local_address,
                family(link.local_address),
            ),
        ));
    }
}

/// The first cable of a plan, to show what the plan's addressing looks like.
pub(super) fn plan_example() -> String {
    let base = u32::from(DEFAULT_LINK_RANGE.network());
    format!(
        "{} and {}",
        std::net::Ipv4Addr::from(base + 1),
        std::net::Ipv4Addr::from(base + 2)
    )
}

fn is_broadcast(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V4(v4) if v4.is_broadcast())
}

pub(super) fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}
