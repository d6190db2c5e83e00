//! The cabled ports themselves: addressed, at full speed, on a port the
//! model can use for RDMA.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use meshd_domain::facts::{CheckResult, Ipv4Cidr, Ipv4Method, NodeFacts, OsKind, PortFact};

use super::{
    Check, NodeView, linked_ports, no_linked_port, peer_label, port_label, unknown_cabling,
};
use crate::TB4_MAX_BPS;
use crate::{TB5_LINK_BPS, gbps};

pub(super) fn address_fix(facts: &NodeFacts, port: &PortFact, address: &str, prefix: u8) -> String {
    match facts.os {
        OsKind::Macos => format!(
            "sudo networksetup -setmanual \"{}\" {address} {}  # the service of {}; `meshctl plan` assigns one /30 per cable",
            port.name,
            netmask(prefix),
            if port.iface.is_empty() {
                "this port"
            } else {
                &port.iface
            },
        ),
        OsKind::Linux | OsKind::Other => {
            format!("sudo ip addr replace {address}/{prefix} dev {}", port.iface)
        }
    }
}

fn netmask(prefix: u8) -> String {
    let any = Ipv4Cidr {
        address: Ipv4Addr::UNSPECIFIED,
        prefix: prefix.min(32),
    };
    Ipv4Addr::from(any.mask()).to_string()
}

pub(super) fn cidrs(port: &PortFact) -> String {
    port.addresses()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A port without an address fails only when its addresses were read.
pub(super) fn link_addressed(mut check: Check, facts: &NodeFacts) -> CheckResult {
    let ports = check.linked_ports(facts);
    for port in ports {
        let label = port_label(port);
        if port.iface.is_empty() {
            check.blind(format!("{label}: paired interface unknown"));
            continue;
        }
        match &port.ipv4 {
            None => check.blind(format!(
                "{label}: the addresses of {} are unknown (its interface was not read)",
                port.iface
            )),
            Some(addresses) if addresses.is_empty() => check.fail(
                format!(
                    "{label} has no IPv4 address: JACCL fails with errno 22 on an unaddressed port"
                ),
                address_fix(facts, port, "<address>", 30),
            ),
            Some(_) => check.pass(format!("{label}: {}", cidrs(port))),
        }
    }
    check.finish_on(facts)
}

/// The self-assigned range a port on DHCP falls back to when the cable
/// has no DHCP server (every mesh cable).
fn is_link_local(cidr: &Ipv4Cidr) -> bool {
    cidr.address.is_link_local()
}

/// A cable's address must stay the static /30 it was given: an update or
/// a re-created network service can put the port back on DHCP, which on a
/// cable without a DHCP server means a self-assigned 169.254.x.x/16 that
/// changes on every link-up, so the peer's hostfile and the RDMA GIDs no
/// longer match. Judged by the configuration method of the port's network
/// service (`networksetup -getinfo`), not by the address alone.
pub(super) fn link_address_static(mut check: Check, facts: &NodeFacts) -> CheckResult {
    let ports = check.linked_ports(facts);
    for port in ports {
        let label = port_label(port);
        match port.ipv4_method {
            Some(Ipv4Method::Manual) => check.pass(format!("{label}: a static address ({})", {
                let addresses = cidrs(port);
                if addresses.is_empty() {
                    "none set yet".to_owned()
                } else {
                    addresses
                }
            })),
            Some(method) => {
                let fallback: Vec<String> = port
                    .addresses()
                    .iter()
                    .filter(|c| is_link_local(c))
                    .map(ToString::to_string)
                    .collect();
                let now = if fallback.is_empty() {
                    String::new()
                } else {
                    format!(" (self-assigned now: {})", fallback.join(", "))
                };
                check.fail(
                    format!(
                        "{label}: its network service gets its address by {method} instead of a \
                         static /30{now}"
                    ),
                    address_fix(facts, port, "<address>", 30),
                );
            }
            None => check.blind(format!(
                "{label}: how its address is configured is unknown (no network service of its \
                 own was found, or `networksetup -getinfo` of it was not read)"
            )),
        }
    }
    check.finish_on(facts)
}

/// 80 Gb/s passes. Below that on a port that can do more fails: on a
/// Thunderbolt 5 port between two Thunderbolt 5 Macs, 40 Gb/s means a
/// Thunderbolt 3/4 cable, which halves JACCL's bandwidth silently and is
/// fixed by recabling. A port that itself tops out at 40 Gb/s (Thunderbolt
/// 4) only warns: no cable fixes it, and rdma_enabled names the real
/// problem.
pub(super) fn link_speed(mut check: Check, node: &NodeView) -> CheckResult {
    let facts = node.facts;
    let ports = check.linked_ports(facts);
    for port in ports {
        let peer = port.peer.as_ref().map(peer_label).unwrap_or_default();
        let speed = port.negotiated_speed_bps;
        let link = format!("{} ↔ {peer}", port_label(port));
        if speed == 0 {
            check.blind(format!("{link}: negotiated speed unknown"));
        } else if speed >= TB5_LINK_BPS {
            check.pass(format!("{link} negotiated {}", gbps(speed)));
        } else if port.max_speed_bps != 0 && port.max_speed_bps <= TB4_MAX_BPS {
            check.warn(
                format!(
                    "{link} negotiated {}: this port is Thunderbolt 4 (up to {})",
                    gbps(speed),
                    gbps(port.max_speed_bps)
                ),
                "cable the mesh through Thunderbolt 5 ports (80 Gb/s)",
            );
        } else {
            check.fail(
                format!(
                    "{link} negotiated {}; a Thunderbolt 5 Mac-to-Mac link runs at {}",
                    gbps(speed),
                    gbps(TB5_LINK_BPS)
                ),
                format!(
                    "replace the cable on {} with a Thunderbolt 5 cable (80 Gb/s), \
                     and check the far end is a Thunderbolt 5 port",
                    port.name
                ),
            );
        }
    }
    check.finish_on(facts)
}

pub(super) fn port_usable(mut check: Check, node: &NodeView) -> CheckResult {
    let facts = node.facts;
    let (model, source) = match node.model() {
        Ok(found) => found,
        Err(reason) => return check.skipped(reason, facts),
    };
    let ports = linked_ports(facts);
    if ports.is_empty() {
        let reason = unknown_cabling(facts).unwrap_or_else(|| no_linked_port(facts).to_owned());
        return check.skipped(reason, facts);
    }
    if let Some(unknown) = unknown_cabling(facts) {
        check.blind(unknown);
    }
    // Free: known to have nothing linked, not merely not known to.
    let free: BTreeSet<&str> = facts
        .ports
        .iter()
        .filter(|p| p.linked == Some(false))
        .map(|p| p.name.as_str())
        .collect();
    let free_usable: Vec<&str> = model
        .ports
        .iter()
        .filter(|p| p.is_usable() && free.contains(p.name.as_str()))
        .map(|p| p.name.as_str())
        .collect();
    let on = match &source {
        Some(source) => format!("{} ({source})", model.id),
        None => model.id.clone(),
    };
    for port in ports {
        let label = port_label(port);
        match model.port(&port.name) {
            None => check.blind(format!("{label} is not in the port data of {on}")),
            Some(known) => match known.unreliable_reason() {
                None => check.pass(format!("{label}: usable for RDMA on {on}")),
                Some(reason) => check.warn(
                    format!(
                        "{label} is cabled, but on {} it is reported unreliable for RDMA: {reason}",
                        model.name
                    ),
                    if free_usable.is_empty() {
                        "no usable port is known to be free; keep the cable there and watch \
                         rdma_port_active"
                            .to_owned()
                    } else {
                        format!(
                            "move that cable to a free usable port: {}",
                            free_usable.join(", ")
                        )
                    },
                ),
            },
        }
    }
    check.finish_on(facts)
}
