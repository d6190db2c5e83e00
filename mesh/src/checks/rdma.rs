//! RDMA readiness: RDMA enabled on Thunderbolt 5 hardware, every cabled
//! port's RDMA port ACTIVE, and its GIDs derived from its address.

use std::net::Ipv4Addr;

use meshd_domain::RdmaPortState;
use meshd_domain::facts::{CheckResult, NodeFacts, OsKind, PortFact};

use super::links::{address_fix, cidrs};
use super::{Check, NodeView, peer_label, port_label};
use crate::views::agreed_rdma_service;
use crate::{TB4_MAX_BPS, TB5_LINK_BPS, gbps};

pub(super) const ENABLE_RDMA_FIX: &str = "restart into macOS Recovery (hold the power button, \
     Options), open Utilities > Terminal, run `rdma_ctl enable`, then restart";

const THUNDERBOLT_5_FIX: &str = "RDMA over Thunderbolt needs Thunderbolt 5 ports and macOS 26.2 \
     or later (Apple TN3205); on a Thunderbolt 4 Mac use MLX's TCP ring instead \
     (`mlx.launch --backend ring`)";

/// What a Thunderbolt 4 Mac's RDMA state means, whatever `rdma_ctl` and
/// `ibv_devices` say there: public reports differ (exo PR #1813 saw
/// `rdma_en` devices on Thunderbolt 4 ports, mlx #3777 none on an M4 Mac
/// mini with RDMA enabled, macOS 26.5.1, through cold boots), and neither
/// carries RDMA.
const THUNDERBOLT_4_NO_RDMA: &str =
    "this Mac's Thunderbolt 4 ports carry no RDMA; JACCL needs Thunderbolt 5";

/// RDMA enabled, Thunderbolt 5, and no device: nothing is left to enable
/// or plug, and nothing short of a restart brings the devices back.
const DEVICES_GONE_FIX: &str = "a reboot is needed: restart this Mac once its jobs are \
     stopped (`sudo shutdown -r now`); RDMA devices that vanish while RDMA is enabled come back \
     only at boot, and nothing needs re-enabling";

/// What the facts show of the Mac's Thunderbolt generation.
enum Generation {
    /// A port or the model shows Thunderbolt 5; the evidence.
    Five(String),
    /// Every Thunderbolt port is known and tops out at 40 Gb/s.
    FourOnly(Vec<String>),
    Unknown,
}

/// Thunderbolt 5 shows as an idle port that can do more than 40 Gb/s, a
/// link negotiated at 80 Gb/s, an RDMA port ACTIVE at 80 Gb/s or a model
/// of the table (all of them Thunderbolt 5 Macs).
///
/// Thunderbolt 4 only when every port is known with its speed, none shows
/// more than 40 Gb/s, and one is idle at "Up to 40 Gb/s" or less: a Mac's
/// Thunderbolt ports are of one generation, so an idle port shows what
/// its controllers can do. A link at 40 Gb/s alone shows nothing (a
/// Thunderbolt 5 port cabled to a Thunderbolt 4 Mac links at 40), so a
/// Mac whose every port is linked at 40 stays unknown.
fn generation(node: &NodeView) -> Generation {
    let facts = node.facts;
    for port in &facts.ports {
        let label = port_label(port);
        if port.max_speed_bps > TB4_MAX_BPS {
            return Generation::Five(format!("{label} can do up to {}", gbps(port.max_speed_bps)));
        }
        if port.negotiated_speed_bps >= TB5_LINK_BPS {
            return Generation::Five(format!(
                "{label} negotiated {}",
                gbps(port.negotiated_speed_bps)
            ));
        }
        if let Some(rdma) = &port.rdma
            && rdma.state == RdmaPortState::Active
            && rdma.active_speed_bps >= TB5_LINK_BPS
        {
            return Generation::Five(format!(
                "{} is ACTIVE at {}",
                port.rdma_device,
                gbps(rdma.active_speed_bps)
            ));
        }
    }
    if let Ok((model, source)) = node.model() {
        let seen = source.map(|s| format!(", {s}")).unwrap_or_default();
        return Generation::Five(format!("{} has Thunderbolt 5 ports{seen}", model.name));
    }
    let receptacles: Vec<&PortFact> = facts.ports.iter().filter(|p| p.receptacle != 0).collect();
    let speeds_known = receptacles
        .iter()
        .all(|p| p.max_speed_bps != 0 || p.negotiated_speed_bps != 0);
    let idle_at_most_40 = receptacles.iter().any(|p| p.max_speed_bps != 0);
    if facts.ports_complete && speeds_known && idle_at_most_40 {
        return Generation::FourOnly(
            receptacles
                .iter()
                .map(|p| {
                    let iface = if p.iface.is_empty() {
                        String::new()
                    } else {
                        format!("{}, ", p.iface)
                    };
                    let speed = if p.max_speed_bps != 0 {
                        format!("up to {}", gbps(p.max_speed_bps))
                    } else {
                        format!("linked at {}", gbps(p.negotiated_speed_bps))
                    };
                    format!("{} ({iface}{speed})", p.name)
                })
                .collect(),
        );
    }
    Generation::Unknown
}

pub(super) fn rdma_enabled(mut check: Check, node: &NodeView) -> CheckResult {
    let facts = node.facts;
    let mac = facts.os == OsKind::Macos;
    let (source, disabled_fix) = if mac {
        ("rdma_ctl status", ENABLE_RDMA_FIX)
    } else {
        (
            "/sys/class/infiniband",
            "load the NIC's RDMA driver (e.g. `sudo modprobe mlx5_ib`, or `sudo rdma link add rxe0 type rxe netdev <iface>` for soft RoCE) and check `ibv_devices`",
        )
    };
    let devices: Vec<&str> = facts
        .ports
        .iter()
        .map(|p| p.rdma_device.as_str())
        .filter(|d| !d.is_empty())
        .collect();
    // A peer sees the RDMA service only while RDMA is enabled here (TN3205);
    // that fills in an unread `rdma_ctl`, and never overrides it.
    let seen = agreed_rdma_service(node.views).filter(|_| facts.rdma_enabled.is_none());
    let (enabled, source) = match (facts.rdma_enabled, seen) {
        (Some(enabled), _) => (Some(enabled), source.to_owned()),
        (None, Some((offered, view))) => (
            Some(offered),
            format!(
                "{} sees this Mac {} the RDMA service (rdma_ctl status not read)",
                view.viewer(),
                if offered { "offer" } else { "not offer" }
            ),
        ),
        (None, None) => (None, source.to_owned()),
    };
    match enabled {
        // A Linux host without RDMA hardware (a test lab, an IP-only node)
        // is monitored over IP; it is worth knowing, not worth a page.
        Some(false) if !mac => check.warn(
            format!("{source}: no RDMA device on this host; meshd watches its IP links only, and RDMA jobs cannot run here"),
            disabled_fix,
        ),
        Some(false) => check.fail(format!("{source}: RDMA is disabled"), disabled_fix),
        _ if !devices.is_empty() => {
            let state = match enabled {
                Some(_) => format!("{source}: enabled"),
                None => format!("{source}: not read"),
            };
            let listed = format!("{state}; RDMA devices: {}", devices.join(", "));
            if !mac {
                check.pass(listed);
            } else {
                // Devices prove nothing of the generation: some Thunderbolt
                // 4 Macs list them too (see THUNDERBOLT_4_NO_RDMA).
                match generation(node) {
                    Generation::Five(evidence) => check.pass(format!("{listed}; {evidence}")),
                    Generation::FourOnly(ports) => check.fail(
                        format!(
                            "{listed}, but every Thunderbolt port is Thunderbolt 4 ({}): \
                             {THUNDERBOLT_4_NO_RDMA}",
                            ports.join(", ")
                        ),
                        THUNDERBOLT_5_FIX,
                    ),
                    Generation::Unknown => check.blind(format!(
                        "{listed}, but whether this Mac has Thunderbolt 5 ports is unknown \
                         (some Thunderbolt 4 Macs list rdma_en devices too, and carry no RDMA)"
                    )),
                }
            }
        }
        // The device list was read and is empty: no device exists, whatever
        // `rdma_ctl` would say. Enabling helps only where the ports could
        // carry RDMA.
        None if mac && facts.rdma_devices_read => {
            let evidence = "ibv_devices lists no RDMA device (rdma_ctl status could not be read)";
            match generation(node) {
                Generation::FourOnly(ports) => check.fail(
                    format!(
                        "{evidence}; Thunderbolt 4 ports: {}: {THUNDERBOLT_4_NO_RDMA}",
                        ports.join(", ")
                    ),
                    THUNDERBOLT_5_FIX,
                ),
                Generation::Five(_) | Generation::Unknown => check.fail(evidence, ENABLE_RDMA_FIX),
            }
        }
        None => check.blind(format!("{source}: RDMA state could not be read")),
        Some(true) if !facts.rdma_devices_read => check.blind(format!(
            "{source}: enabled, but the RDMA device list could not be read"
        )),
        Some(true) => {
            let mut evidence = format!("{source}: enabled, but no RDMA device exists");
            if mac {
                evidence.push_str(" (ibv_devices lists none)");
            }
            match generation(node) {
                _ if !mac => check.fail(evidence, disabled_fix),
                // Enabled with no device is what macOS does on Thunderbolt
                // 4 (mlx #3777): no reboot or re-enabling changes it.
                Generation::FourOnly(ports) => {
                    evidence.push_str(&format!(
                        "; Thunderbolt 4 ports: {}: {THUNDERBOLT_4_NO_RDMA}",
                        ports.join(", ")
                    ));
                    check.fail(evidence, THUNDERBOLT_5_FIX);
                }
                // A Thunderbolt 5 Mac with RDMA enabled lists a device per
                // port from boot: none means they went away under it.
                Generation::Five(five) => {
                    evidence.push_str(&format!("; a Thunderbolt 5 Mac ({five}): its devices are gone"));
                    check.fail(evidence, DEVICES_GONE_FIX);
                }
                // No RDMA here either way; which fix applies depends on
                // the generation, so both are given.
                Generation::Unknown => {
                    evidence.push_str(
                        "; whether this Mac has Thunderbolt 5 ports is unknown: on Thunderbolt 4 \
                         this is what macOS does (its ports carry no RDMA; JACCL needs \
                         Thunderbolt 5), on Thunderbolt 5 its devices are gone",
                    );
                    check.fail(
                        evidence,
                        format!(
                            "on a Thunderbolt 5 Mac: {DEVICES_GONE_FIX}\non a Thunderbolt 4 Mac: \
                             {THUNDERBOLT_5_FIX}"
                        ),
                    );
                }
            }
        }
    }
    check.finish_on(facts)
}

pub(super) fn rdma_port_active(mut check: Check, node: &NodeView) -> CheckResult {
    let facts = node.facts;
    match facts.rdma_enabled {
        Some(true) => {}
        Some(false) => return check.skipped("RDMA is disabled here (see rdma_enabled)", facts),
        None => return check.skipped("RDMA state unknown (see rdma_enabled)", facts),
    }
    let thunderbolt_4 = matches!(generation(node), Generation::FourOnly(_));
    let ports = check.linked_ports(facts);
    for port in ports {
        let label = port_label(port);
        if port.rdma_device.is_empty() {
            if thunderbolt_4 {
                // Nothing to plug or enable: the port itself has no RDMA.
                check.fail(
                    format!(
                        "{label} is cabled but has no RDMA device: {THUNDERBOLT_4_NO_RDMA} (see \
                         rdma_enabled)"
                    ),
                    THUNDERBOLT_5_FIX,
                );
            } else if port.iface.is_empty() {
                // Devices pair with ports by interface (`rdma_<iface>`).
                check.blind(format!(
                    "{label}: its interface, so its RDMA device, is unknown (no hardware-port list)"
                ));
            } else if facts.rdma_devices_read {
                check.fail(
                    format!("{label} is cabled but has no RDMA device"),
                    "check `ibv_devices` lists rdma_<iface> for every cabled Thunderbolt 5 port",
                );
            } else {
                check.blind(format!(
                    "{label}: its RDMA device is unknown (the device list was not read)"
                ));
            }
            continue;
        }
        let device = &port.rdma_device;
        let Some(rdma) = &port.rdma else {
            check.blind(format!("{label}: state of {device} unknown"));
            continue;
        };
        let state = rdma.state.as_str().to_uppercase();
        if rdma.state == RdmaPortState::Active {
            check.pass(format!("{label}: {device} port {} ACTIVE", rdma.port));
            continue;
        }
        let (peer_note, fix) = match &port.peer {
            Some(peer) if peer.rdma_service == Some(false) => (
                format!(
                    "; the peer {} does not advertise the RDMA service, so RDMA is off there \
                     (TN3205: ports are ACTIVE only when every connected Mac has RDMA enabled)",
                    peer_label(peer)
                ),
                format!("on the peer {}: {ENABLE_RDMA_FIX}", peer_label(peer)),
            ),
            Some(peer) if peer.rdma_service == Some(true) => (
                format!("; the peer {} advertises RDMA", peer_label(peer)),
                "reseat the cable (no reboot needed if it comes back ACTIVE); if the port \
                 stays DOWN, a reboot is needed: restart this Mac (a wedged RDMA port recovers \
                 only after one)"
                    .to_owned(),
            ),
            Some(peer) => (
                format!(
                    "; whether the peer {} has RDMA enabled is unknown (its services are not \
                     listed)",
                    peer_label(peer)
                ),
                format!(
                    "check `rdma_ctl status` on the peer {}, then the cable; `ibv_devinfo -d \
                     {device}` shows the state",
                    peer_label(peer)
                ),
            ),
            None => (
                String::new(),
                format!(
                    "check the cable and the far port; `ibv_devinfo -d {device}` shows the state"
                ),
            ),
        };
        check.fail(
            format!(
                "{label}: {device} port {} is {state} while cabled{peer_note}",
                rdma.port
            ),
            fix,
        );
    }
    check.finish_on(facts)
}

/// GIDs are derived from the IPv4 address of the paired interface; the
/// IPv4-mapped GID is GID[1] on the captures, but its index varies (1 or
/// 2, mlx PR #3389), so any index holding the interface's address passes.
pub(super) fn gid_matches_address(mut check: Check, facts: &NodeFacts) -> CheckResult {
    let ports = check.linked_ports(facts);
    for port in ports {
        let label = port_label(port);
        let Some(rdma) = &port.rdma else {
            check.blind(format!("{label}: no GID table (no RDMA port facts)"));
            continue;
        };
        let Some(addresses) = &port.ipv4 else {
            check.blind(format!(
                "{label}: its IPv4 addresses are unknown (see link_addressed)"
            ));
            continue;
        };
        let Some(first) = addresses.first() else {
            check.blind(format!(
                "{label}: no IPv4 address to compare (see link_addressed)"
            ));
            continue;
        };
        let device = &port.rdma_device;
        let mapped: Vec<(u32, Ipv4Addr)> = rdma
            .gids
            .iter()
            .filter_map(|g| g.address.to_ipv4_mapped().map(|a| (g.index, a)))
            .collect();
        let matching = mapped
            .iter()
            .find(|(_, a)| addresses.iter().any(|c| c.address == *a));
        let fix = format!(
            "{}\nrestart the Mac if {device}'s GID[1] still differs",
            address_fix(facts, port, &first.address.to_string(), first.prefix)
        );
        let bridged = bridged_note(facts, port);
        match (matching, mapped.first()) {
            (Some((index, address)), _) => check.pass(format!(
                "{device} GID[{index}] ::ffff:{address} = {} {address}",
                port.iface
            )),
            (None, None) => check.fail(
                format!(
                    "{device} has no IPv4-mapped GID (::ffff:a.b.c.d) although {} has {}{bridged}",
                    port.iface,
                    cidrs(port)
                ),
                fix,
            ),
            (None, Some((index, stale))) => check.fail(
                format!(
                    "{device} GID[{index}] ::ffff:{stale} ≠ {} address {} (::ffff:{}){bridged}",
                    port.iface, first.address, first.address
                ),
                fix,
            ),
        }
    }
    check.finish_on(facts)
}

/// Operators report that ports in an up bridge lose their GIDs beyond
/// GID[0]: the likely cause of a missing or stale one.
fn bridged_note(facts: &NodeFacts, port: &PortFact) -> String {
    facts
        .bridges
        .iter()
        .flatten()
        .find(|b| b.up == Some(true) && b.members.contains(&port.iface))
        .map(|b| {
            format!(
                "; {} is a member of {}, and bridged ports lose their GIDs beyond GID[0] \
                 (see thunderbolt_bridge_inactive)",
                port.iface, b.name
            )
        })
        .unwrap_or_default()
}
