//! The cabled ports themselves: addressed, at full speed, on a port the
//! model can use for RDMA.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use meshd_domain::facts::{
    CheckResult, EXO_NETWORK_DAEMON, Ipv4Cidr, Ipv4Method, NodeFacts, OsKind, PortFact, PortSetup,
};

use super::{
    Check, NodeView, linked_ports, no_linked_port, peer_label, port_label, unknown_cabling,
};
use crate::TB4_MAX_BPS;
use crate::{TB5_LINK_BPS, gbps};

/// The command that gives `port` a static address: on macOS through the
/// port's own network service, by the name it has (a tool may have named
/// it), and, where a tool re-applies its own setup, what undoes it.
pub(super) fn address_fix(facts: &NodeFacts, port: &PortFact, address: &str, prefix: u8) -> String {
    match facts.os {
        OsKind::Macos => {
            let fix = if port.service.is_empty() {
                format!(
                    "sudo networksetup -setmanual \"{}\" {address} {}  # the service of {} \
                     (`networksetup -listnetworkserviceorder` names it); `meshctl plan` assigns \
                     one /30 per cable",
                    port.name,
                    netmask(prefix),
                    if port.iface.is_empty() {
                        "this port"
                    } else {
                        &port.iface
                    },
                )
            } else {
                format!(
                    "sudo networksetup -setmanual \"{}\" {address} {}  # `meshctl plan` assigns \
                     one /30 per cable",
                    port.service,
                    netmask(prefix),
                )
            };
            match facts.port_setup(port) {
                PortSetup::Exo {
                    reapplied: true, ..
                } => format!("{fix}\n{}", exo_undoes_it()),
                PortSetup::Exo { .. } | PortSetup::Owner => fix,
            }
        }
        OsKind::Linux | OsKind::Other => {
            format!("sudo ip addr replace {address}/{prefix} dev {}", port.iface)
        }
    }
}

/// What a manual address meets on a Mac where exo's network daemon runs.
fn exo_undoes_it() -> String {
    format!(
        "exo's {EXO_NETWORK_DAEMON} puts every Thunderbolt port back on DHCP in its location \
         \"exo\" at load and every half hour, undoing this: keep exo's self-assigned addresses \
         (JACCL works on them), or remove its daemon first (`sudo launchctl bootout \
         system/{EXO_NETWORK_DAEMON}; sudo rm /Library/LaunchDaemons/{EXO_NETWORK_DAEMON}.plist`)"
    )
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
pub(super) fn is_link_local(cidr: &Ipv4Cidr) -> bool {
    cidr.address.is_link_local()
}

/// What JACCL needs of a cable's address is only that there is one: any
/// IPv4 address gives the RDMA port its GID, and JACCL reaches the peer by
/// that GID on the port's own device, never by IP routing. So a port on
/// DHCP with a self-assigned 169.254/16 address works, and is what exo's
/// setup configures on purpose. What this check judges is whether the
/// address stays: a self-assigned one changes when the link comes back
/// (IP to the peer over the cable, as the ring backend and ssh use it,
/// follows it), one set by hand over a DHCP service (`ifconfig`, as
/// `mlx.distributed_config --auto-setup` sets them) is gone after a
/// restart, and a static one on a Mac running exo's network daemon is
/// undone within half an hour. Judged by the configuration method of the
/// port's network service (`networksetup -getinfo`), not by the address
/// alone.
pub(super) fn link_address_static(mut check: Check, facts: &NodeFacts) -> CheckResult {
    let ports = check.linked_ports(facts);
    for port in ports {
        let label = port_label(port);
        let setup = facts.port_setup(port);
        let service = if port.service.is_empty() {
            "its service".to_owned()
        } else {
            format!("its service \"{}\"", port.service)
        };
        match port.ipv4_method {
            Some(Ipv4Method::Manual | Ipv4Method::ManualWithDhcpRouter) => match setup {
                PortSetup::Exo {
                    reapplied: true, ..
                } => check.warn(
                    format!(
                        "{label}: a static address ({}) that exo's {EXO_NETWORK_DAEMON} will \
                         put back on DHCP",
                        or_none(port)
                    ),
                    exo_undoes_it(),
                ),
                PortSetup::Exo { .. } | PortSetup::Owner => {
                    check.pass(format!("{label}: a static address ({})", or_none(port)));
                }
            },
            Some(method @ (Ipv4Method::Dhcp | Ipv4Method::Bootp)) => {
                let (self_assigned, by_hand): (Vec<&Ipv4Cidr>, Vec<&Ipv4Cidr>) =
                    port.addresses().iter().partition(|c| is_link_local(c));
                if let Some(kept) = by_hand.first() {
                    check.warn(
                        format!(
                            "{label} holds {} although {service} is on {method}: an address set \
                             by hand (`ifconfig`, as `mlx.distributed_config --auto-setup` sets \
                             them) is gone after a restart",
                            joined(&by_hand)
                        ),
                        address_fix(facts, port, &kept.address.to_string(), kept.prefix),
                    );
                } else if self_assigned.is_empty() {
                    if port.ipv4.is_none() {
                        check.blind(format!(
                            "{label}: {service} is on {method}, and its addresses are unknown"
                        ));
                    } else {
                        check.warn(
                            format!(
                                "{label}: {service} is on {method} and has no address yet (see \
                                 link_addressed)"
                            ),
                            address_fix(facts, port, "<address>", 30),
                        );
                    }
                } else if let PortSetup::Exo { evidence, .. } = &setup {
                    check.pass(format!(
                        "{label}: self-assigned {} on {method}, exo's setup ({evidence}): JACCL \
                         needs only an IPv4 address on the port, which gives its RDMA GID",
                        joined(&self_assigned)
                    ));
                } else {
                    check.warn(
                        format!(
                            "{label}: self-assigned {} ({service} is on {method}, and a cable \
                             has no DHCP server): JACCL works on it (any IPv4 address gives the \
                             port its RDMA GID), but it changes when the link comes back, and IP \
                             to the peer over this cable (the ring backend, ssh) follows it",
                            joined(&self_assigned)
                        ),
                        address_fix(facts, port, "<address>", 30),
                    );
                }
            }
            None => check.blind(format!(
                "{label}: how its address is configured is unknown (no network service of its \
                 own was found, or `networksetup -getinfo` of it was not read)"
            )),
        }
    }
    check.finish_on(facts)
}

fn or_none(port: &PortFact) -> String {
    let addresses = cidrs(port);
    if addresses.is_empty() {
        "none set yet".to_owned()
    } else {
        addresses
    }
}

fn joined(addresses: &[&Ipv4Cidr]) -> String {
    addresses
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
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
        } else if let Some(device) = &port.other_device {
            // The Mac is reached through an enclosure, not a cable: the
            // dock or hub sets the speed, and no cable fixes it.
            check.fail(
                format!(
                    "{link} negotiated {}, through {device} between the two Macs; a Thunderbolt \
                     5 Mac-to-Mac link runs at {}",
                    gbps(speed),
                    gbps(TB5_LINK_BPS)
                ),
                format!(
                    "connect {peer} to {} with a Thunderbolt 5 cable directly, not through \
                     {device}: a dock or hub in the path runs the link at its own speed",
                    port.name
                ),
            );
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
