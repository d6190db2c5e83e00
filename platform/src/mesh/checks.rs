//! The platform checks: each a name, a status, the facts behind it and the
//! step that fixes it. A check whose facts are missing is Skipped with the
//! blind spot as evidence, never passed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;

use meshd_proto::domain::{NodeId, RdmaPortState};
use meshd_proto::facts::{
    BridgeFact, Cable, CableEnd, CheckResult, CheckStatus, Ipv4Cidr, NodeFacts, OsKind, PeerFact,
    PortFact,
};

use super::cables::{cable_label, end_label};
use super::models::{Model, ModelTable};
use super::{JACCL_MAX_RANKS, TB5_LINK_BPS, gbps};

/// Thunderbolt 4 / USB4 ports top out at 40 Gb/s.
const TB4_MAX_BPS: u64 = 40_000_000_000;

const ENABLE_RDMA_FIX: &str = "restart into macOS Recovery (hold the power button, Options), \
     open Utilities > Terminal, run `rdma_ctl enable`, then restart";

/// Every check of one node, in a fixed order.
pub fn node_checks(node: &NodeId, facts: &NodeFacts, models: &ModelTable) -> Vec<CheckResult> {
    let on_node = |name| Check::new(name, Some(node.clone()));
    let mut results = vec![
        rdma_enabled(on_node("rdma_enabled"), facts),
        rdma_port_active(on_node("rdma_port_active"), facts),
        link_addressed(on_node("link_addressed"), facts),
        gid_matches_address(on_node("gid_matches_address"), facts),
    ];
    let thunderbolt_only: [(&str, ThunderboltCheck); 3] = [
        ("link_speed", link_speed),
        ("thunderbolt_bridge_inactive", thunderbolt_bridge_inactive),
        ("port_usable", port_usable),
    ];
    for (name, check) in thunderbolt_only {
        results.push(if facts.os == OsKind::Macos {
            check(on_node(name), facts, models)
        } else {
            let reason = format!(
                "{} node: no Thunderbolt ports; this check applies to macOS",
                facts.os
            );
            on_node(name).skipped(reason, facts)
        });
    }
    results
}

/// Every check of the whole mesh (`node` = None), in a fixed order.
pub fn mesh_checks(
    members: &[NodeId],
    facts: &BTreeMap<NodeId, NodeFacts>,
    cables: &[Cable],
    models: &ModelTable,
) -> Vec<CheckResult> {
    let members: Vec<&NodeId> = {
        let mut seen = BTreeSet::new();
        members.iter().filter(|m| seen.insert(*m)).collect()
    };
    let mesh = Mesh {
        members: &members,
        facts,
        cables,
        models,
    };
    vec![
        mesh.full_mesh_cabled(),
        mesh.cable_peers_known(),
        mesh.link_subnets_isolated(),
        mesh.same_os_version(),
        mesh.mesh_size(),
        mesh.port_budget(),
    ]
}

type ThunderboltCheck = fn(Check, &NodeFacts, &ModelTable) -> CheckResult;

/// Findings of one check: the worst status wins, Fail over Warn over
/// Skipped over Pass, so a check passes only when every finding passes.
struct Check {
    name: &'static str,
    node: Option<NodeId>,
    findings: Vec<(CheckStatus, String)>,
    fixes: Vec<String>,
}

impl Check {
    fn new(name: &'static str, node: Option<NodeId>) -> Self {
        Self {
            name,
            node,
            findings: Vec::new(),
            fixes: Vec::new(),
        }
    }

    fn pass(&mut self, evidence: impl Into<String>) {
        self.findings.push((CheckStatus::Pass, evidence.into()));
    }

    fn blind(&mut self, evidence: impl Into<String>) {
        self.findings.push((CheckStatus::Skipped, evidence.into()));
    }

    fn warn(&mut self, evidence: impl Into<String>, fix: impl Into<String>) {
        self.flag(CheckStatus::Warn, evidence.into(), fix.into());
    }

    fn fail(&mut self, evidence: impl Into<String>, fix: impl Into<String>) {
        self.flag(CheckStatus::Fail, evidence.into(), fix.into());
    }

    fn flag(&mut self, status: CheckStatus, evidence: String, fix: String) {
        self.findings.push((status, evidence));
        if !fix.is_empty() && !self.fixes.contains(&fix) {
            self.fixes.push(fix);
        }
    }

    /// The ports to check (see [`linked_ports`]); none is a blind spot.
    fn linked_ports<'f>(&mut self, facts: &'f NodeFacts) -> Vec<&'f PortFact> {
        let ports = linked_ports(facts);
        if ports.is_empty() {
            self.blind(no_linked_port(facts));
        }
        ports
    }

    /// The whole node check could not be evaluated.
    fn skipped(mut self, reason: impl Into<String>, facts: &NodeFacts) -> CheckResult {
        self.findings = vec![(CheckStatus::Skipped, reason.into())];
        self.fixes.clear();
        self.finish_on(facts)
    }

    fn finish(self) -> CheckResult {
        let severity = |s: CheckStatus| match s {
            CheckStatus::Pass => 0,
            CheckStatus::Skipped => 1,
            CheckStatus::Warn => 2,
            CheckStatus::Fail => 3,
        };
        let status = self
            .findings
            .iter()
            .map(|(s, _)| *s)
            .max_by_key(|s| severity(*s))
            .unwrap_or(CheckStatus::Skipped);
        let fix = match status {
            CheckStatus::Warn | CheckStatus::Fail => self.fixes.join("\n"),
            CheckStatus::Pass | CheckStatus::Skipped => String::new(),
        };
        CheckResult {
            name: self.name.to_owned(),
            node: self.node,
            status,
            evidence: self.findings.into_iter().map(|(_, e)| e).collect(),
            fix,
        }
    }

    /// Finishes a node check; a Skipped one carries the node's blind spots.
    fn finish_on(self, facts: &NodeFacts) -> CheckResult {
        let mut result = self.finish();
        if result.status == CheckStatus::Skipped {
            result.evidence.extend(
                facts
                    .blind_spots
                    .iter()
                    .map(|spot| format!("blind spot: {spot}")),
            );
        }
        result
    }
}

/// "Thunderbolt 2 (en6)".
fn port_label(port: &PortFact) -> String {
    if port.iface.is_empty() {
        port.name.clone()
    } else {
        format!("{} ({})", port.name, port.iface)
    }
}

/// "MacBook Pro (Mac17,6)", falling back to the domain UUID.
fn peer_label(peer: &PeerFact) -> String {
    match (peer.name.as_str(), peer.model.as_str()) {
        ("", "") => format!("Mac with domain {}", peer.domain_uuid),
        (name, "") => name.to_owned(),
        ("", model) => model.to_owned(),
        (name, model) => format!("{name} ({model})"),
    }
}

/// The ports whose links the checks look at: on macOS the Thunderbolt
/// ports cabled to a Mac, elsewhere the ports of RDMA devices.
fn linked_ports(facts: &NodeFacts) -> Vec<&PortFact> {
    facts
        .ports
        .iter()
        .filter(|p| match facts.os {
            OsKind::Macos => p.peer.is_some(),
            OsKind::Linux | OsKind::Other => !p.rdma_device.is_empty() || p.rdma.is_some(),
        })
        .collect()
}

fn no_linked_port(facts: &NodeFacts) -> &'static str {
    match facts.os {
        OsKind::Macos => "no Thunderbolt port is cabled to a Mac",
        OsKind::Linux | OsKind::Other => "no RDMA port is known",
    }
}

fn has_blind_spot_about(facts: &NodeFacts, tool: &str) -> bool {
    facts.blind_spots.iter().any(|spot| spot.contains(tool))
}

fn rdma_enabled(mut check: Check, facts: &NodeFacts) -> CheckResult {
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
    // `ibv_devices` answering with its header only is proof that no device
    // exists, whatever `rdma_ctl` says (or whether it was read at all).
    let device_list_read = if mac {
        !has_blind_spot_about(facts, "ibv_devices")
    } else {
        facts.rdma_enabled.is_some()
    };
    match facts.rdma_enabled {
        // A Linux host without RDMA hardware (a test lab, an IP-only node)
        // is monitored over IP; it is worth knowing, not worth a page.
        Some(false) if !mac => check.warn(
            format!("{source}: no RDMA device on this host; meshd watches its IP links only, and RDMA jobs cannot run here"),
            disabled_fix,
        ),
        Some(false) => check.fail(format!("{source}: RDMA is disabled"), disabled_fix),
        _ if !devices.is_empty() => {
            let state = if facts.rdma_enabled.is_some() {
                "enabled"
            } else {
                "not read"
            };
            check.pass(format!(
                "{source}: {state}; RDMA devices: {}",
                devices.join(", ")
            ));
        }
        // Ports known but no device among them: the device list was read
        // and is empty.
        None if mac && device_list_read && !facts.ports.is_empty() => check.fail(
            "ibv_devices lists no RDMA device (rdma_ctl status could not be read)",
            ENABLE_RDMA_FIX,
        ),
        None => check.blind(format!("{source}: RDMA state could not be read")),
        Some(true) if !device_list_read => check.blind(format!(
            "{source}: enabled, but the RDMA device list could not be read"
        )),
        Some(true) => {
            let tb4_ports: Vec<String> = facts
                .ports
                .iter()
                .filter(|p| p.max_speed_bps != 0 && p.max_speed_bps <= TB4_MAX_BPS)
                .map(|p| format!("{} (up to {})", p.name, gbps(p.max_speed_bps)))
                .collect();
            let mut evidence = format!("{source}: enabled, but no RDMA device exists");
            if mac {
                evidence.push_str(" (ibv_devices lists none)");
            }
            if !tb4_ports.is_empty() {
                evidence.push_str(&format!(
                    "; Thunderbolt 4 ports: {}; RDMA over Thunderbolt needs Thunderbolt 5",
                    tb4_ports.join(", ")
                ));
            }
            check.fail(
                evidence,
                "RDMA over Thunderbolt needs Thunderbolt 5 ports and macOS 26.2 or later; \
                 on a Thunderbolt 4 Mac use MLX's TCP ring instead (`mlx.launch --backend ring`)",
            );
        }
    }
    check.finish_on(facts)
}

fn rdma_port_active(mut check: Check, facts: &NodeFacts) -> CheckResult {
    match facts.rdma_enabled {
        Some(true) => {}
        Some(false) => return check.skipped("RDMA is disabled here (see rdma_enabled)", facts),
        None => return check.skipped("RDMA state unknown (see rdma_enabled)", facts),
    }
    let ports = check.linked_ports(facts);
    for port in ports {
        let label = port_label(port);
        if port.rdma_device.is_empty() {
            check.fail(
                format!("{label} is cabled but has no RDMA device"),
                "check `ibv_devices` lists rdma_<iface> for every cabled Thunderbolt 5 port",
            );
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
            Some(peer) if !peer.rdma_service => (
                format!(
                    "; the peer {} does not advertise the RDMA service, so RDMA is off there \
                     (TN3205: ports are ACTIVE only when every connected Mac has RDMA enabled)",
                    peer_label(peer)
                ),
                format!("on the peer {}: {ENABLE_RDMA_FIX}", peer_label(peer)),
            ),
            Some(peer) => (
                format!("; the peer {} advertises RDMA", peer_label(peer)),
                "reseat the cable; if the port stays DOWN, restart this Mac \
                 (a wedged RDMA port recovers only after a reboot)"
                    .to_owned(),
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

/// 80 Gb/s passes. Below that on a port that can do more fails: on a
/// Thunderbolt 5 port between two Thunderbolt 5 Macs, 40 Gb/s means a
/// Thunderbolt 3/4 cable, which halves JACCL's bandwidth silently and is
/// fixed by recabling. A port that itself tops out at 40 Gb/s (Thunderbolt
/// 4) only warns: no cable fixes it, and rdma_enabled names the real
/// problem.
fn link_speed(mut check: Check, facts: &NodeFacts, _: &ModelTable) -> CheckResult {
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

fn address_fix(facts: &NodeFacts, port: &PortFact, address: &str, prefix: u8) -> String {
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

fn cidrs(port: &PortFact) -> String {
    port.ipv4
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn link_addressed(mut check: Check, facts: &NodeFacts) -> CheckResult {
    let ports = check.linked_ports(facts);
    for port in ports {
        let label = port_label(port);
        if port.iface.is_empty() {
            check.blind(format!("{label}: paired interface unknown"));
        } else if port.ipv4.is_empty() {
            check.fail(
                format!(
                    "{label} has no IPv4 address: JACCL fails with errno 22 on an unaddressed port"
                ),
                address_fix(facts, port, "<address>", 30),
            );
        } else {
            check.pass(format!("{label}: {}", cidrs(port)));
        }
    }
    check.finish_on(facts)
}

/// GIDs are derived from the IPv4 address of the paired interface; the
/// IPv4-mapped GID is GID[1] on the captures, but its index varies (1 or
/// 2, mlx PR #3389), so any index holding the interface's address passes.
fn gid_matches_address(mut check: Check, facts: &NodeFacts) -> CheckResult {
    let ports = check.linked_ports(facts);
    for port in ports {
        let label = port_label(port);
        let Some(rdma) = &port.rdma else {
            check.blind(format!("{label}: no GID table (no RDMA port facts)"));
            continue;
        };
        let Some(first) = port.ipv4.first() else {
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
            .find(|(_, a)| port.ipv4.iter().any(|c| c.address == *a));
        let fix = format!(
            "{}\nrestart the Mac if {device}'s GID[1] still differs",
            address_fix(facts, port, &first.address.to_string(), first.prefix)
        );
        match (matching, mapped.first()) {
            (Some((index, address)), _) => check.pass(format!(
                "{device} GID[{index}] ::ffff:{address} = {} {address}",
                port.iface
            )),
            (None, None) => check.fail(
                format!(
                    "{device} has no IPv4-mapped GID (::ffff:a.b.c.d) although {} has {}",
                    port.iface,
                    cidrs(port)
                ),
                fix,
            ),
            (None, Some((index, stale))) => check.fail(
                format!(
                    "{device} GID[{index}] ::ffff:{stale} ≠ {} address {} (::ffff:{})",
                    port.iface, first.address, first.address
                ),
                fix,
            ),
        }
    }
    check.finish_on(facts)
}

fn bridge_fix(bridge: &BridgeFact) -> String {
    match &bridge.service {
        Some(service) if bridge.service_enabled != Some(false) => format!(
            "sudo networksetup -setnetworkserviceenabled \"{service}\" off\nsudo ifconfig {} down",
            bridge.name
        ),
        _ => format!(
            "sudo ifconfig {name} down\nfind the service whose device is {name} with \
             `networksetup -listnetworkserviceorder` and run \
             `sudo networksetup -setnetworkserviceenabled \"<service>\" off`",
            name = bridge.name
        ),
    }
}

/// The bridge over the Thunderbolt ports is found by its members, never
/// by the user-editable service name.
/// The device of macOS's Thunderbolt Bridge service (ARCHITECTURE.md, Field facts).
const THUNDERBOLT_BRIDGE_DEVICE: &str = "bridge0";

fn thunderbolt_bridge_inactive(mut check: Check, facts: &NodeFacts, _: &ModelTable) -> CheckResult {
    let thunderbolt: BTreeSet<&str> = facts
        .ports
        .iter()
        .map(|p| p.iface.as_str())
        .filter(|i| !i.is_empty())
        .collect();
    // Without the hardware ports the Thunderbolt interfaces are unknown;
    // `bridge0` is still the Thunderbolt Bridge's device on every Mac.
    let by_device = thunderbolt.is_empty() && facts.os == OsKind::Macos;
    if thunderbolt.is_empty()
        && !(by_device
            && facts
                .bridges
                .iter()
                .any(|b| b.name == THUNDERBOLT_BRIDGE_DEVICE))
    {
        return check.skipped("no Thunderbolt interface is known", facts);
    }
    if facts.bridges.is_empty() && has_blind_spot_about(facts, "ifconfig") {
        check.blind("bridges unknown: ifconfig could not be read");
        return check.finish_on(facts);
    }
    let mut other_bridges = Vec::new();
    for bridge in &facts.bridges {
        let members: Vec<&str> = bridge
            .members
            .iter()
            .map(String::as_str)
            .filter(|m| {
                thunderbolt.contains(m) || (by_device && bridge.name == THUNDERBOLT_BRIDGE_DEVICE)
            })
            .collect();
        if members.is_empty() {
            other_bridges.push(bridge.name.as_str());
            continue;
        }
        let service = match (&bridge.service, bridge.service_enabled) {
            (Some(s), Some(true)) => format!("service \"{s}\" enabled"),
            (Some(s), Some(false)) => format!("service \"{s}\" disabled"),
            (Some(s), None) => format!("service \"{s}\", enabled state unknown"),
            (None, _) => "no network service found for it".to_owned(),
        };
        let subject = format!(
            "{} (Thunderbolt members {}; {service})",
            bridge.name,
            members.join(", ")
        );
        if bridge.active {
            check.fail(
                format!("{subject} is active: broadcast frames loop through the mesh"),
                bridge_fix(bridge),
            );
        } else if bridge.service_enabled == Some(true) {
            check.fail(
                format!("{subject} is inactive, but its service is enabled and brings it back"),
                bridge_fix(bridge),
            );
        } else {
            check.pass(format!("{subject} is inactive"));
        }
    }
    if check.findings.is_empty() {
        let others = if other_bridges.is_empty() {
            String::new()
        } else {
            format!(" (other bridges: {})", other_bridges.join(", "))
        };
        check.pass(format!("no bridge has a Thunderbolt member{others}"));
    }
    check.finish_on(facts)
}

fn model_of<'m>(facts: &NodeFacts, models: &'m ModelTable) -> Result<&'m Model, String> {
    if facts.model.is_empty() {
        return Err("hardware model unknown".to_owned());
    }
    models.by_identifier(&facts.model).ok_or_else(|| {
        format!(
            "model {} is not in the model table (known: {})",
            facts.model,
            models.ids().join(", ")
        )
    })
}

fn port_usable(mut check: Check, facts: &NodeFacts, models: &ModelTable) -> CheckResult {
    let model = match model_of(facts, models) {
        Ok(model) => model,
        Err(reason) => return check.skipped(reason, facts),
    };
    let ports = linked_ports(facts);
    if ports.is_empty() {
        return check.skipped(no_linked_port(facts), facts);
    }
    let taken: BTreeSet<&str> = facts
        .ports
        .iter()
        .filter(|p| p.peer.is_some() || p.other_device.is_some())
        .map(|p| p.name.as_str())
        .collect();
    let free_usable: Vec<&str> = model
        .ports
        .iter()
        .filter(|p| p.is_usable() && !taken.contains(p.name.as_str()))
        .map(|p| p.name.as_str())
        .collect();
    for port in ports {
        let label = port_label(port);
        match model.port(&port.name) {
            None => check.blind(format!("{label} is not in the port data of {}", model.id)),
            Some(known) => match known.unreliable_reason() {
                None => check.pass(format!("{label}: usable for RDMA on {}", model.id)),
                Some(reason) => check.warn(
                    format!(
                        "{label} is cabled, but on {} it is reported unreliable for RDMA: {reason}",
                        model.name
                    ),
                    if free_usable.is_empty() {
                        "no usable port is free; keep the cable there and watch rdma_port_active"
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

struct Mesh<'a> {
    members: &'a [&'a NodeId],
    facts: &'a BTreeMap<NodeId, NodeFacts>,
    cables: &'a [Cable],
    models: &'a ModelTable,
}

impl Mesh<'_> {
    fn pairs(&self) -> impl Iterator<Item = (&NodeId, &NodeId)> {
        self.members.iter().enumerate().flat_map(move |(i, a)| {
            self.members[i + 1..]
                .iter()
                .map(move |b| if a <= b { (*a, *b) } else { (*b, *a) })
        })
    }

    fn cable_between(&self, a: &NodeId, b: &NodeId) -> Option<&Cable> {
        self.cables
            .iter()
            .find(|c| c.end_at(a).is_some() && c.end_at(b).is_some())
    }

    /// Ports with nothing on them, the ones the model prefers first.
    fn free_ports(&self, node: &NodeId) -> VecDeque<String> {
        let Some(facts) = self.facts.get(node) else {
            return VecDeque::new();
        };
        let preference: Vec<String> = model_of(facts, self.models)
            .map(|m| {
                m.ports_by_preference()
                    .into_iter()
                    .map(|p| p.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        let rank = |name: &str| {
            preference
                .iter()
                .position(|p| p == name)
                .unwrap_or(preference.len())
        };
        let mut free: Vec<&PortFact> = facts
            .ports
            .iter()
            .filter(|p| p.peer.is_none() && p.other_device.is_none())
            .collect();
        free.sort_by_key(|p| rank(&p.name));
        free.into_iter().map(|p| p.name.clone()).collect()
    }

    fn full_mesh_cabled(&self) -> CheckResult {
        let mut check = Check::new("full_mesh_cabled", None);
        let mut free: BTreeMap<&NodeId, VecDeque<String>> = self
            .members
            .iter()
            .map(|m| (*m, self.free_ports(m)))
            .collect();
        for (a, b) in self.pairs() {
            if let Some(cable) = self.cable_between(a, b) {
                check.pass(cable_label(cable));
                continue;
            }
            let unknown: Vec<&str> = [a, b]
                .into_iter()
                .filter(|n| !self.facts.contains_key(*n))
                .map(NodeId::as_str)
                .collect();
            if !unknown.is_empty() {
                check.blind(format!(
                    "{a} ↔ {b}: no cable known, and the facts of {} are unknown",
                    unknown.join(", ")
                ));
                continue;
            }
            let mut side = |node: &NodeId| {
                free.get_mut(node)
                    .and_then(VecDeque::pop_front)
                    .map_or_else(|| node.to_string(), |port| format!("{node}/{port}"))
            };
            let missing = format!("{} ↔ {}", side(a), side(b));
            check.fail(
                format!("{missing}: no cable"),
                format!("connect a Thunderbolt 5 cable {missing} (`meshctl plan` prints a full cabling table)"),
            );
        }
        if self.members.len() < 2 {
            check.pass(format!(
                "{} member(s): no pair to cable",
                self.members.len()
            ));
        }
        check.finish()
    }

    fn cable_peers_known(&self) -> CheckResult {
        let mut check = Check::new("cable_peers_known", None);
        let cable_ends: BTreeSet<(&NodeId, &str)> = self
            .cables
            .iter()
            .flat_map(|c| [&c.a, &c.b])
            .map(|e| (&e.node, e.port.as_str()))
            .collect();
        let member_uuids: BTreeSet<&str> = self
            .members
            .iter()
            .filter_map(|m| self.facts.get(*m))
            .flat_map(|f| f.ports.iter().map(|p| p.domain_uuid.as_str()))
            .filter(|u| !u.is_empty())
            .collect();
        let unknown: Vec<&str> = self
            .members
            .iter()
            .filter(|m| !self.facts.contains_key(**m))
            .map(|m| m.as_str())
            .collect();
        for member in self.members {
            let Some(facts) = self.facts.get(*member) else {
                check.blind(format!("{member}: facts unknown"));
                continue;
            };
            for port in &facts.ports {
                let Some(peer) = &port.peer else { continue };
                if cable_ends.contains(&(*member, port.name.as_str()))
                    || member_uuids.contains(peer.domain_uuid.as_str())
                {
                    continue;
                }
                let maybe = if unknown.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", or a member whose facts are unknown ({})",
                        unknown.join(", ")
                    )
                };
                check.warn(
                    format!(
                        "{member}/{} is cabled to a Mac that is not a member: {} \
                         (domain {}){maybe}",
                        port_label(port),
                        peer_label(peer),
                        peer.domain_uuid
                    ),
                    "add that Mac to meshd's members, or unplug the cable",
                );
            }
        }
        if check.findings.is_empty() {
            check.pass("every cabled port leads to a member");
        }
        check.finish()
    }

    /// The address and prefix of a cable end, from its node's facts.
    fn end_cidr(&self, end: &CableEnd) -> Result<Ipv4Cidr, String> {
        let address = end
            .address
            .ok_or_else(|| format!("{} has no address", end_label(end)))?;
        self.facts
            .get(&end.node)
            .and_then(|f| {
                f.ports
                    .iter()
                    .filter(|p| {
                        p.name == end.port || (!end.iface.is_empty() && p.iface == end.iface)
                    })
                    .flat_map(|p| &p.ipv4)
                    .find(|c| c.address == address)
                    .copied()
            })
            .ok_or_else(|| format!("the netmask of {address} on {} is unknown", end_label(end)))
    }

    fn link_subnets_isolated(&self) -> CheckResult {
        let mut check = Check::new("link_subnets_isolated", None);
        let link_local = Ipv4Cidr {
            address: Ipv4Addr::new(169, 254, 0, 0),
            prefix: 16,
        };
        let fix = "give each cable its own /30 on both ends: `sudo networksetup -setmanual \
                   \"<Thunderbolt port>\" <address> 255.255.255.252` (`meshctl plan` assigns them)";
        let mut per_node: BTreeMap<&NodeId, Vec<(String, Ipv4Cidr)>> = BTreeMap::new();
        for cable in self.cables {
            let label = cable_label(cable);
            let (a, b) = match (self.end_cidr(&cable.a), self.end_cidr(&cable.b)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(why), _) | (_, Err(why)) => {
                    check.blind(format!("{label}: {why}"));
                    continue;
                }
            };
            let local = link_local.contains(a.address) && link_local.contains(b.address);
            if !a.contains(b.address) || !b.contains(a.address) {
                check.fail(format!("{label}: {a} and {b} are not in one subnet"), fix);
            } else if !local && a.prefix.min(b.prefix) < 30 {
                check.fail(
                    format!(
                        "{label}: {a} / {b} is wider than /30 and can take in other cables' addresses"
                    ),
                    fix,
                );
            } else {
                check.pass(format!("{label}: {}/{}", a.network(), a.prefix));
            }
            per_node
                .entry(&cable.a.node)
                .or_default()
                .push((label.clone(), a));
            per_node.entry(&cable.b.node).or_default().push((label, b));
        }
        for (node, links) in &per_node {
            for (i, (first, x)) in links.iter().enumerate() {
                for (second, y) in &links[i + 1..] {
                    if !x.overlaps(*y) {
                        continue;
                    }
                    if link_local.contains(x.address) && link_local.contains(y.address) {
                        check.warn(
                            format!(
                                "{node}: {first} and {second} are both link-local (169.254/16): \
                                 IP traffic to either peer may leave through the wrong port"
                            ),
                            fix,
                        );
                    } else {
                        check.fail(
                            format!(
                                "{node}: {first} ({x}) and {second} ({y}) overlap: one peer is \
                                 routed through the other cable's interface"
                            ),
                            fix,
                        );
                    }
                }
            }
        }
        if check.findings.is_empty() {
            check.blind("no cable known");
        }
        check.finish()
    }

    fn same_os_version(&self) -> CheckResult {
        let mut check = Check::new("same_os_version", None);
        let mut versions: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for member in self.members {
            match self.facts.get(*member) {
                Some(f) if !f.os_version.is_empty() => versions
                    .entry(format!("{} {}", f.os, f.os_version))
                    .or_default()
                    .push(member.as_str()),
                Some(_) => check.blind(format!("{member}: OS version unknown")),
                None => check.blind(format!("{member}: facts unknown")),
            }
        }
        let listed: Vec<String> = versions
            .iter()
            .map(|(version, nodes)| format!("{version}: {}", nodes.join(", ")))
            .collect();
        if versions.len() > 1 {
            check.fail(
                format!("different versions: {}", listed.join("; ")),
                "update every node to the same macOS version (System Settings > General > \
                 Software Update); JACCL and exo expect matching versions",
            );
        } else if let Some(only) = listed.first() {
            check.pass(only.clone());
        }
        check.finish()
    }

    fn mesh_size(&self) -> CheckResult {
        let mut check = Check::new("mesh_size", None);
        let n = self.members.len();
        if n > JACCL_MAX_RANKS {
            check.fail(
                format!("{n} members; a JACCL mesh has at most {JACCL_MAX_RANKS} ranks"),
                format!(
                    "run JACCL jobs on at most {JACCL_MAX_RANKS} of these nodes \
                     (`meshctl hostfile` with {JACCL_MAX_RANKS} ranks or fewer)"
                ),
            );
        } else {
            check.pass(format!(
                "{n} members (a JACCL mesh has at most {JACCL_MAX_RANKS})"
            ));
        }
        check.finish()
    }

    fn port_budget(&self) -> CheckResult {
        let mut check = Check::new("port_budget", None);
        let n = self.members.len();
        let needed = n.saturating_sub(1);
        for member in self.members {
            let Some(facts) = self.facts.get(*member) else {
                check.blind(format!("{member}: facts unknown"));
                continue;
            };
            if facts.os != OsKind::Macos {
                check.blind(format!(
                    "{member}: a {} node; the port budget is about Thunderbolt ports",
                    facts.os
                ));
                continue;
            }
            let model = match model_of(facts, self.models) {
                Ok(model) => model,
                Err(reason) => {
                    check.blind(format!("{member}: {reason}"));
                    continue;
                }
            };
            let total = model.ports.len();
            let usable = model.usable_port_count();
            let counts = format!(
                "{member} ({}, {}): {total} Thunderbolt 5 ports, {usable} usable for RDMA; \
                 a full mesh of {n} nodes needs {needed}",
                model.id, facts.model
            );
            if usable >= needed {
                check.pass(counts);
            } else if total >= needed {
                let unreliable: Vec<&str> = model
                    .ports
                    .iter()
                    .filter(|p| !p.is_usable())
                    .map(|p| p.name.as_str())
                    .collect();
                check.warn(
                    format!("{counts}, so it must also use {}", unreliable.join(", ")),
                    "expect RDMA trouble on the unreliable ports; watch rdma_port_active there",
                );
            } else {
                check.fail(
                    counts,
                    format!(
                        "use at most {} nodes in a full mesh with this model, \
                         or the ring backend (`--backend jaccl-ring`, 2 ports per node)",
                        total + 1
                    ),
                );
            }
        }
        check.finish()
    }
}
