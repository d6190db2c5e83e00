//! The cable map and the checks on constructed meshes: a healthy mesh
//! passes everything; each injected fault fails exactly its check with
//! evidence naming the facts; missing facts are never a pass.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use meshd_domain::facts::{
    BridgeFact, Cable, CableEnd, CheckResult, CheckStatus, FirewallFact, FirewallRule, Gid,
    Ipv4Cidr, Ipv4Method, NetworkSetupFact, NodeFacts, OsKind, PeerFact, PortFact, PowerSettings,
    RdmaPortFact,
};
use meshd_domain::fixtures::{id, numbered_id};
use meshd_domain::{NodeId, RdmaPortState};
use meshd_mesh::cables::cable_map;
use meshd_mesh::checks::{mesh_checks, node_checks};
use meshd_mesh::models::ModelTable;

const G80: u64 = 80_000_000_000;
const G40: u64 = 40_000_000_000;
/// Mac Studio M3 Ultra: Thunderbolt 2–6 usable, Thunderbolt 1 unreliable.
const ULTRA: &str = "Mac15,14";

fn uuid(node: usize, port: u32) -> String {
    format!("{node:08X}-0000-4000-8000-{port:012X}")
}

/// Port number (Thunderbolt N) that node `i` uses for peer `j` in the
/// healthy mesh: Thunderbolt 2, 3, … in peer order.
fn port_for(i: usize, j: usize) -> u32 {
    (if j < i { j } else { j - 1 }) as u32 + 2
}

fn cable_index(n: usize, i: usize, j: usize) -> u32 {
    let (x, y) = if i < j { (i, j) } else { (j, i) };
    let before: usize = (0..x).map(|k| n - 1 - k).sum();
    (before + (y - x - 1)) as u32
}

fn address(n: usize, i: usize, j: usize) -> Ipv4Addr {
    let host = if i < j { 1 } else { 2 };
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 254, 0, 0)) + 4 * cable_index(n, i, j) + host)
}

fn mapped(a: Ipv4Addr) -> Ipv6Addr {
    a.to_ipv6_mapped()
}

fn idle_port(node: usize, number: u32) -> PortFact {
    PortFact {
        name: format!("Thunderbolt {number}"),
        receptacle: number,
        domain_uuid: uuid(node, number),
        iface: format!("en{}", number + 1),
        rdma_device: format!("rdma_en{}", number + 1),
        max_speed_bps: 120_000_000_000,
        usable_for_rdma: true,
        linked: Some(false),
        ipv4: Some(vec![]),
        iface_up: Some(false),
        rdma: Some(rdma_port(RdmaPortState::Down, 0, vec![])),
        ..PortFact::default()
    }
}

fn rdma_port(state: RdmaPortState, active_speed_bps: u64, gids: Vec<Gid>) -> RdmaPortFact {
    RdmaPortFact {
        port: 1,
        state,
        active_speed_bps,
        gids,
        link_layer: "Thunderbolt".into(),
        active_mtu: Some(4096),
        max_mtu: Some(4096),
        reader: None,
    }
}

/// A healthy full mesh of `n` M3 Ultra Studios on macOS 26.2.
fn healthy(n: usize) -> BTreeMap<NodeId, NodeFacts> {
    (0..n)
        .map(|i| {
            let mut ports: Vec<PortFact> = (1..=6).map(|p| idle_port(i, p)).collect();
            for j in (0..n).filter(|&j| j != i) {
                let number = port_for(i, j);
                let port = &mut ports[number as usize - 1];
                let ip = address(n, i, j);
                port.negotiated_speed_bps = G80;
                port.max_speed_bps = 0;
                port.linked = Some(true);
                port.iface_up = Some(true);
                port.ipv4 = Some(vec![Ipv4Cidr::new(ip, 30).unwrap()]);
                port.ipv4_method = Some(Ipv4Method::Manual);
                port.peer = Some(PeerFact {
                    domain_uuid: uuid(j, port_for(j, i)),
                    model: ULTRA.to_owned(),
                    name: "Mac Studio".to_owned(),
                    rdma_service: Some(true),
                });
                port.rdma = Some(rdma_port(
                    RdmaPortState::Active,
                    G80,
                    vec![
                        Gid {
                            index: 0,
                            address: "fe80::1".parse().unwrap(),
                        },
                        Gid {
                            index: 1,
                            address: mapped(ip),
                        },
                    ],
                ));
            }
            let facts = NodeFacts {
                os: OsKind::Macos,
                os_version: "26.2".to_owned(),
                os_build: "25C56".to_owned(),
                model: ULTRA.to_owned(),
                rdma_enabled: Some(true),
                rdma_devices_read: true,
                bridges: Some(vec![BridgeFact {
                    name: "bridge0".to_owned(),
                    up: Some(false),
                    member_link: Some(false),
                    members: ports.iter().map(|p| p.iface.clone()).collect(),
                    service: Some("Thunderbolt Bridge".to_owned()),
                    service_enabled: Some(false),
                }]),
                ports_complete: true,
                ports,
                source: "test".to_owned(),
                firewall: Some(FirewallFact {
                    enabled: Some(true),
                    block_all: Some(false),
                    meshd_rules: Some(vec![FirewallRule {
                        path: "/usr/local/bin/meshd".to_owned(),
                        allowed: Some(true),
                    }]),
                }),
                power: Some(PowerSettings {
                    sleep_minutes: Some(0),
                    disk_sleep_minutes: Some(0),
                    auto_restart: Some(true),
                    sleep_disabled: None,
                    sleep_prevented_by: vec![],
                }),
                ..NodeFacts::default()
            };
            (numbered_id(i), facts)
        })
        .collect()
}

fn port_mut(facts: &mut BTreeMap<NodeId, NodeFacts>, node: usize, number: u32) -> &mut PortFact {
    &mut facts.get_mut(&numbered_id(node)).unwrap().ports[number as usize - 1]
}

fn members(n: usize) -> Vec<NodeId> {
    (0..n).map(numbered_id).collect()
}

fn check<'r>(results: &'r [CheckResult], check: &str) -> &'r CheckResult {
    results
        .iter()
        .find(|r| r.name == check)
        .unwrap_or_else(|| panic!("no {check}"))
}

fn all_checks(facts: &BTreeMap<NodeId, NodeFacts>, members: &[NodeId]) -> Vec<CheckResult> {
    let models = ModelTable::builtin();
    let cables = cable_map(facts, &[]);
    let mut results: Vec<CheckResult> = facts
        .iter()
        .flat_map(|(node, f)| node_checks(node, f, &models))
        .collect();
    results.extend(mesh_checks(members, facts, &cables, &models));
    results
}

/// The (name, node) of every check that did not pass.
fn not_passing(results: &[CheckResult]) -> Vec<(String, Option<String>, CheckStatus)> {
    results
        .iter()
        .filter(|r| r.status != CheckStatus::Pass)
        .map(|r| {
            (
                r.name.clone(),
                r.node.as_ref().map(ToString::to_string),
                r.status,
            )
        })
        .collect()
}

fn on(node: usize) -> Option<String> {
    Some(numbered_id(node).to_string())
}

#[test]
fn healthy_four_node_mesh_passes_every_check() {
    let facts = healthy(4);
    let cables = cable_map(&facts, &[]);
    assert_eq!(cables.len(), 6);
    for cable in &cables {
        assert!(cable.discovered);
        assert_eq!(cable.speed_bps, G80);
        assert!(cable.a.node < cable.b.node);
    }
    assert_eq!(
        cables[0],
        Cable {
            a: CableEnd {
                node: numbered_id(0),
                port: "Thunderbolt 2".into(),
                iface: "en3".into(),
                rdma_device: "rdma_en3".into(),
                address: Some(Ipv4Addr::new(10, 254, 0, 1)),
            },
            b: CableEnd {
                node: numbered_id(1),
                port: "Thunderbolt 2".into(),
                iface: "en3".into(),
                rdma_device: "rdma_en3".into(),
                address: Some(Ipv4Addr::new(10, 254, 0, 2)),
            },
            speed_bps: G80,
            discovered: true,
        }
    );
    let results = all_checks(&facts, &members(4));
    assert_eq!(results.len(), 4 * 11 + 7);
    assert_eq!(not_passing(&results), []);
    for r in &results {
        assert!(r.fix.is_empty(), "{r:?}");
        assert!(!r.evidence.is_empty(), "{r:?}");
        assert!(
            r.name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{}",
            r.name
        );
    }
    assert_eq!(
        check(&results, "full_mesh_cabled").evidence[0],
        "n1/Thunderbolt 2 ↔ n2/Thunderbolt 2"
    );
}

#[test]
fn missing_cable_names_free_ports_on_both_nodes() {
    let mut facts = healthy(4);
    for (node, port) in [(0, port_for(0, 2)), (2, port_for(2, 0))] {
        let port = port_mut(&mut facts, node, port);
        port.peer = None;
        port.linked = Some(false);
    }
    let results = all_checks(&facts, &members(4));
    assert_eq!(
        not_passing(&results),
        [("full_mesh_cabled".to_owned(), None, CheckStatus::Fail)]
    );
    let full = check(&results, "full_mesh_cabled");
    assert!(
        full.evidence
            .contains(&"n1/Thunderbolt 3 ↔ n3/Thunderbolt 2: no cable".to_owned()),
        "{full:?}"
    );
    assert_eq!(
        full.fix,
        "connect a Thunderbolt 5 cable n1/Thunderbolt 3 ↔ n3/Thunderbolt 2 (`meshctl plan` prints a full cabling table)"
    );
}

/// A cable is there, but neither end's report identifies the Mac on the
/// other side (trimmed peer identities): unknown, never "no cable".
#[test]
fn a_cable_whose_peers_cannot_be_identified_is_unknown_not_missing() {
    let mut facts = healthy(4);
    for (node, port) in [(0, port_for(0, 2)), (2, port_for(2, 0))] {
        let peer = port_mut(&mut facts, node, port)
            .peer
            .as_mut()
            .expect("cabled");
        peer.domain_uuid.clear();
    }
    let results = all_checks(&facts, &members(4));
    let full = check(&results, "full_mesh_cabled");
    assert_eq!(full.status, CheckStatus::Skipped, "{full:?}");
    assert!(
        full.evidence.iter().any(|e| e
            .starts_with("n1 ↔ n3: no cable known, but n1/Thunderbolt 3")
            && e.contains("that cannot be identified (its domain UUID was not read)")
            && e.ends_with("possibly this one")),
        "{full:?}"
    );
    assert!(full.fix.is_empty(), "{full:?}");

    // One end identified, the other's Mac trimmed: the cable is still
    // found from the end that names its peer, or stays unknown; never
    // missing.
    let mut one_trimmed = healthy(4);
    port_mut(&mut one_trimmed, 0, port_for(0, 2))
        .peer
        .as_mut()
        .expect("cabled")
        .domain_uuid
        .clear();
    let results = all_checks(&one_trimmed, &members(4));
    assert_ne!(
        check(&results, "full_mesh_cabled").status,
        CheckStatus::Fail,
        "{:?}",
        check(&results, "full_mesh_cabled")
    );
}

#[test]
fn a_40_gbps_link_fails_link_speed_on_both_ends() {
    let mut facts = healthy(4);
    port_mut(&mut facts, 0, 2).negotiated_speed_bps = G40;
    port_mut(&mut facts, 1, 2).negotiated_speed_bps = G40;
    assert_eq!(cable_map(&facts, &[])[0].speed_bps, G40);
    let results = all_checks(&facts, &members(4));
    assert_eq!(
        not_passing(&results),
        [
            ("link_speed".to_owned(), on(0), CheckStatus::Fail),
            ("link_speed".to_owned(), on(1), CheckStatus::Fail),
        ]
    );
    let speed = results
        .iter()
        .find(|r| r.name == "link_speed" && r.node == Some(numbered_id(0)))
        .unwrap();
    assert!(speed.evidence.contains(
        &"Thunderbolt 2 (en3) ↔ Mac Studio (Mac15,14) negotiated 40 Gb/s; a Thunderbolt 5 Mac-to-Mac link runs at 80 Gb/s".to_owned()
    ), "{speed:?}");
    assert!(speed.fix.contains("Thunderbolt 5 cable"), "{}", speed.fix);
}

#[test]
fn a_thunderbolt_4_port_at_40_gbps_only_warns() {
    let mut facts = healthy(2);
    for node in 0..2 {
        let port = port_mut(&mut facts, node, 2);
        port.negotiated_speed_bps = G40;
        port.max_speed_bps = G40;
    }
    let results = node_checks(
        &numbered_id(0),
        &facts[&numbered_id(0)],
        &ModelTable::builtin(),
    );
    assert_eq!(check(&results, "link_speed").status, CheckStatus::Warn);
}

#[test]
fn subnet_collision_names_the_colliding_cables() {
    let mut facts = healthy(4);
    let wide = |a: [u8; 4]| Some(vec![Ipv4Cidr::new(Ipv4Addr::from(a), 24).unwrap()]);
    port_mut(&mut facts, 0, port_for(0, 2)).ipv4 = wide([10, 254, 0, 5]);
    port_mut(&mut facts, 2, port_for(2, 0)).ipv4 = wide([10, 254, 0, 6]);
    let results = all_checks(&facts, &members(4));
    let isolated = check(&results, "link_subnets_isolated");
    assert_eq!(isolated.status, CheckStatus::Fail);
    assert!(isolated.evidence.contains(
        &"n1/Thunderbolt 3 ↔ n3/Thunderbolt 2: 10.254.0.5/24 / 10.254.0.6/24 is wider than /30 and can take in other cables' addresses".to_owned()
    ), "{isolated:?}");
    assert!(isolated.evidence.contains(
        &"n1: n1/Thunderbolt 2 ↔ n2/Thunderbolt 2 (10.254.0.1/30) and n1/Thunderbolt 3 ↔ n3/Thunderbolt 2 (10.254.0.5/24) overlap: one peer is routed through the other cable's interface".to_owned()
    ), "{isolated:?}");
    assert!(isolated.fix.contains("255.255.255.252"));
    assert_eq!(
        not_passing(&results),
        [("link_subnets_isolated".to_owned(), None, CheckStatus::Fail)]
    );
}

#[test]
fn ends_in_different_subnets_fail() {
    let mut facts = healthy(2);
    port_mut(&mut facts, 1, 2).ipv4 = Some(vec!["10.254.0.6/30".parse().unwrap()]);
    let results = mesh_checks(
        &members(2),
        &facts,
        &cable_map(&facts, &[]),
        &ModelTable::builtin(),
    );
    let isolated = check(&results, "link_subnets_isolated");
    assert_eq!(isolated.status, CheckStatus::Fail);
    assert_eq!(
        isolated.evidence,
        [
            "n1/Thunderbolt 2 ↔ n2/Thunderbolt 2: 10.254.0.1/30 and 10.254.0.6/30 are not in one subnet"
        ]
    );
}

#[test]
fn link_local_on_several_ports_warns() {
    let mut facts = healthy(3);
    let local = |a: [u8; 4]| Some(vec![Ipv4Cidr::new(Ipv4Addr::from(a), 16).unwrap()]);
    for (node, port, a) in [
        (0, 2, [169, 254, 1, 1]),
        (1, 2, [169, 254, 1, 2]),
        (0, 3, [169, 254, 2, 1]),
        (2, 2, [169, 254, 2, 2]),
    ] {
        port_mut(&mut facts, node, port).ipv4 = local(a);
    }
    let results = mesh_checks(
        &members(3),
        &facts,
        &cable_map(&facts, &[]),
        &ModelTable::builtin(),
    );
    let isolated = check(&results, "link_subnets_isolated");
    assert_eq!(isolated.status, CheckStatus::Warn, "{isolated:?}");
    assert!(isolated.evidence.iter().any(|e| e.starts_with("n1: n1/Thunderbolt 2 ↔ n2/Thunderbolt 2 and n1/Thunderbolt 3 ↔ n3/Thunderbolt 2 are both link-local")), "{isolated:?}");
}

/// A mesh of `n` whose cabled ports are all on DHCP with self-assigned
/// 169.254/16 addresses (their GIDs with them), as a port with no DHCP
/// server on its cable ends up; `exo` puts them in exo's setup (its
/// services, its location, its daemon).
fn self_assigned(n: usize, exo: bool) -> BTreeMap<NodeId, NodeFacts> {
    let mut facts = healthy(n);
    for (i, f) in facts.values_mut().enumerate() {
        if exo {
            f.network_setup = Some(NetworkSetupFact {
                location: Some("exo".to_owned()),
                exo_daemon: Some(true),
            });
        }
        for port in f.ports.iter_mut().filter(|p| p.peer.is_some()) {
            let [_, _, c, d] = port.addresses()[0].address.octets();
            let ip = Ipv4Addr::new(169, 254, c.wrapping_add(u8::try_from(i).unwrap()), d);
            port.ipv4 = Some(vec![Ipv4Cidr::new(ip, 16).unwrap()]);
            port.ipv4_method = Some(Ipv4Method::Dhcp);
            port.service = if exo {
                format!("EXO {}", port.name)
            } else {
                port.name.clone()
            };
            port.rdma.as_mut().unwrap().gids[1].address = mapped(ip);
        }
    }
    facts
}

#[test]
fn self_assigned_cables_get_one_verdict_in_every_check_exos_valid_and_others_warned() {
    let owned = all_checks(&self_assigned(3, false), &members(3));
    assert_eq!(
        not_passing(&owned),
        [
            ("link_address_static".to_owned(), on(0), CheckStatus::Warn),
            ("link_address_static".to_owned(), on(1), CheckStatus::Warn),
            ("link_address_static".to_owned(), on(2), CheckStatus::Warn),
            ("link_subnets_isolated".to_owned(), None, CheckStatus::Warn),
        ]
    );
    let node = check(&owned, "link_address_static");
    assert!(
        node.fix
            .starts_with("sudo networksetup -setmanual \"Thunderbolt 2\" <address>"),
        "{node:?}"
    );
    let mesh = check(&owned, "link_subnets_isolated");
    assert!(
        mesh.fix
            .contains("sudo networksetup -setmanual \"Thunderbolt 2\" <address>")
            && mesh
                .fix
                .contains("sudo networksetup -setmanual \"Thunderbolt 3\" <address>"),
        "the services of both ports: {mesh:?}"
    );

    // exo's setup: the same addresses are what it configures on purpose,
    // and JACCL works on them: every check passes.
    let exo = all_checks(&self_assigned(3, true), &members(3));
    assert_eq!(not_passing(&exo), []);
    assert!(
        check(&exo, "link_subnets_isolated")
            .evidence
            .iter()
            .any(|e| e.contains("both self-assigned (169.254/16) by exo's setup")),
        "{:?}",
        check(&exo, "link_subnets_isolated")
    );
}

#[test]
fn gid_mismatch_fails_with_both_addresses() {
    let mut facts = healthy(4);
    let port = port_mut(&mut facts, 1, 2);
    port.rdma.as_mut().unwrap().gids[1].address = mapped(Ipv4Addr::new(169, 254, 5, 5));
    let results = all_checks(&facts, &members(4));
    assert_eq!(
        not_passing(&results),
        [("gid_matches_address".to_owned(), on(1), CheckStatus::Fail)]
    );
    let gid = results
        .iter()
        .find(|r| r.name == "gid_matches_address" && r.node == Some(numbered_id(1)))
        .unwrap();
    assert!(
        gid.evidence.contains(
            &"rdma_en3 GID[1] ::ffff:169.254.5.5 ≠ en3 address 10.254.0.2 (::ffff:10.254.0.2)"
                .to_owned()
        ),
        "{gid:?}"
    );
    assert!(
        gid.fix.starts_with(
            "sudo networksetup -setmanual \"Thunderbolt 2\" 10.254.0.2 255.255.255.252"
        ),
        "{}",
        gid.fix
    );
}

fn bridges_mut(facts: &mut NodeFacts) -> &mut Vec<BridgeFact> {
    facts.bridges.as_mut().unwrap()
}

fn bridge_check(f: &NodeFacts) -> CheckResult {
    check(
        &node_checks(&numbered_id(0), f, &ModelTable::builtin()),
        "thunderbolt_bridge_inactive",
    )
    .clone()
}

#[test]
fn active_bridge_fails_and_the_fix_uses_the_service_found_by_device() {
    let mut facts = healthy(4);
    let bridge = &mut bridges_mut(facts.get_mut(&numbered_id(3)).unwrap())[0];
    bridge.up = Some(true);
    bridge.member_link = Some(true);
    bridge.service = Some("My Mesh Bridge".to_owned());
    bridge.service_enabled = Some(true);
    let results = all_checks(&facts, &members(4));
    assert_eq!(
        not_passing(&results),
        [
            (
                "thunderbolt_bridge_inactive".to_owned(),
                on(3),
                CheckStatus::Fail
            ),
            // Its service is on: the drift that brings it back.
            (
                "thunderbolt_bridge_service_off".to_owned(),
                on(3),
                CheckStatus::Warn
            )
        ]
    );
    let bridge = results
        .iter()
        .find(|r| r.name == "thunderbolt_bridge_inactive" && r.node == Some(numbered_id(3)))
        .unwrap();
    assert_eq!(
        bridge.evidence,
        [
            "bridge0 (Thunderbolt members en2, en3, en4, en5, en6, en7; service \"My Mesh Bridge\" enabled) is up and a member has link: broadcast frames loop through the mesh"
        ]
    );
    assert_eq!(
        bridge.fix,
        "sudo networksetup -setnetworkserviceenabled \"My Mesh Bridge\" off\nsudo ifconfig bridge0 down"
    );
}

#[test]
fn a_bridge_taken_down_passes_although_its_status_says_active_and_its_service_is_on() {
    let mut f = healthy(2).remove(&numbered_id(0)).unwrap();
    let bridge = &mut bridges_mut(&mut f)[0];
    // `sudo ifconfig bridge0 down` on a cabled Mac: XNU keeps `status:
    // active` (a member has link), the flags lose UP and RUNNING.
    bridge.up = Some(false);
    bridge.member_link = Some(true);
    bridge.service_enabled = Some(true);
    let result = bridge_check(&f);
    assert_eq!(result.status, CheckStatus::Pass, "{result:?}");
    assert!(
        result.evidence[0].contains("is down (no UP/RUNNING): it forwards nothing")
            && result.evidence[0].contains("its status says active")
            && result.evidence[0].contains("its service is enabled"),
        "{result:?}"
    );
}

#[test]
fn an_up_bridge_fails_on_cabled_members_whatever_its_service_says() {
    let mut f = healthy(2).remove(&numbered_id(0)).unwrap();
    let bridge = &mut bridges_mut(&mut f)[0];
    // The service was made inactive, but bridge0 stayed up with its
    // members; no member has link at the moment of the capture.
    bridge.up = Some(true);
    bridge.member_link = Some(false);
    bridge.service_enabled = Some(false);
    let result = bridge_check(&f);
    assert_eq!(result.status, CheckStatus::Fail, "{result:?}");
    assert!(
        result.evidence[0]
            .contains("is up (no member has link now) with Thunderbolt 2 (en3) cabled to a Mac"),
        "{result:?}"
    );
    assert!(
        result.fix.starts_with("sudo ifconfig bridge0 down"),
        "{result:?}"
    );

    // Only idle ports as members: no loop now, one as soon as they are cabled.
    bridges_mut(&mut f)[0].members = vec!["en5".into(), "en6".into()];
    let result = bridge_check(&f);
    assert_eq!(result.status, CheckStatus::Warn, "{result:?}");

    // Idle members whose cabling is unknown: neither.
    for port in &mut f.ports {
        if port.iface == "en5" {
            port.linked = None;
        }
    }
    let result = bridge_check(&f);
    assert_eq!(result.status, CheckStatus::Skipped, "{result:?}");
    assert!(
        result.evidence[0].contains("whether en5 is cabled to a Mac is unknown"),
        "{result:?}"
    );
}

#[test]
fn other_bridges_are_ignored_and_unknown_bridges_are_no_pass() {
    let mut f = healthy(2).remove(&numbered_id(0)).unwrap();
    bridges_mut(&mut f).push(BridgeFact {
        name: "bridge100".into(),
        up: Some(true),
        member_link: Some(true),
        members: vec!["en10".into()],
        ..BridgeFact::default()
    });
    bridges_mut(&mut f).remove(0);
    let bridge = bridge_check(&f);
    assert_eq!(
        (bridge.status, bridge.evidence.as_slice()),
        (
            CheckStatus::Pass,
            ["no bridge has a Thunderbolt member (other bridges: bridge100)".to_owned()].as_slice()
        )
    );
    // Without the hardware ports the Thunderbolt interfaces are unknown, so
    // bridge100's member might be one.
    f.ports_complete = false;
    for port in &mut f.ports {
        port.iface.clear();
    }
    assert_eq!(bridge_check(&f).status, CheckStatus::Skipped);
    f.bridges = None;
    let bridge = bridge_check(&f);
    assert_eq!(bridge.status, CheckStatus::Skipped);
    assert_eq!(
        bridge.evidence[0],
        "the bridges are unknown (ifconfig could not be read)"
    );
}

#[test]
fn thunderbolt_5_node_whose_rdma_devices_vanished_needs_a_reboot() {
    let mut f = healthy(2).remove(&numbered_id(0)).unwrap();
    for port in &mut f.ports {
        port.rdma_device.clear();
        port.rdma = None;
    }
    let results = node_checks(&numbered_id(0), &f, &ModelTable::builtin());
    let rdma = check(&results, "rdma_enabled");
    assert_eq!(rdma.status, CheckStatus::Fail);
    assert!(
        rdma.evidence[0].contains("a Thunderbolt 5 Mac (")
            && rdma.evidence[0].ends_with("its devices are gone"),
        "{rdma:?}"
    );
    assert!(rdma.fix.starts_with("a reboot is needed"), "{rdma:?}");
}

/// mlx #3777's Mac: an M4 Mac mini (Mac16,10, not in the table) with RDMA
/// enabled, no RDMA device, one port linked at 40 Gb/s to its peer and the
/// others idle at "Up to 40 Gb/s" (a linked port shows no "Up to").
fn thunderbolt_4_node() -> NodeFacts {
    let mut f = healthy(2).remove(&numbered_id(0)).unwrap();
    for port in &mut f.ports {
        port.rdma_device.clear();
        port.rdma = None;
        if port.negotiated_speed_bps != 0 {
            port.negotiated_speed_bps = G40;
        } else {
            port.max_speed_bps = G40;
        }
    }
    f.model = "Mac16,10".into();
    f
}

#[test]
fn thunderbolt_4_node_with_rdma_enabled_but_no_device_fails() {
    let f = thunderbolt_4_node();
    let results = node_checks(&numbered_id(0), &f, &ModelTable::builtin());
    let rdma = check(&results, "rdma_enabled");
    assert_eq!(rdma.status, CheckStatus::Fail);
    assert!(rdma.evidence[0].starts_with(
        "rdma_ctl status: enabled, but no RDMA device exists (ibv_devices lists none); Thunderbolt 4 ports: Thunderbolt 1 (en2, up to 40 Gb/s), Thunderbolt 2 (en3, linked at 40 Gb/s)"
    ), "{rdma:?}");
    assert!(
        rdma.evidence[0]
            .ends_with(": this Mac's Thunderbolt 4 ports carry no RDMA; JACCL needs Thunderbolt 5"),
        "{rdma:?}"
    );
    // Neither a reboot nor re-enabling: the hardware.
    assert!(
        rdma.fix
            .starts_with("RDMA over Thunderbolt needs Thunderbolt 5")
    );
    assert!(!rdma.fix.contains("reboot") && !rdma.fix.contains("rdma_ctl enable"));
    let active = check(&results, "rdma_port_active");
    assert_eq!(active.status, CheckStatus::Fail);
    assert_eq!(
        active.evidence,
        [
            "Thunderbolt 2 (en3) is cabled but has no RDMA device: this Mac's Thunderbolt 4 ports carry no RDMA; JACCL needs Thunderbolt 5 (see rdma_enabled)"
        ]
    );
    assert_eq!(active.fix, rdma.fix);
    assert_eq!(check(&results, "port_usable").status, CheckStatus::Skipped);

    // rdma_ctl not read: the empty device list says the same, and
    // enabling RDMA in Recovery is not the fix.
    let mut unread = thunderbolt_4_node();
    unread.rdma_enabled = None;
    let results = node_checks(&numbered_id(0), &unread, &ModelTable::builtin());
    let rdma = check(&results, "rdma_enabled");
    assert_eq!(rdma.status, CheckStatus::Fail);
    assert!(
        rdma.evidence[0].starts_with("ibv_devices lists no RDMA device (rdma_ctl status could not be read); Thunderbolt 4 ports: ")
            && rdma.evidence[0].ends_with("JACCL needs Thunderbolt 5"),
        "{rdma:?}"
    );
    assert!(!rdma.fix.contains("rdma_ctl enable"), "{rdma:?}");
}

#[test]
fn no_rdma_device_on_a_mac_of_unknown_generation_names_both_causes() {
    // Every port linked at 40 Gb/s: Thunderbolt 4 Macs, or Thunderbolt 5
    // ports cabled to them; nothing idle shows what the ports can do.
    let mut f = thunderbolt_4_node();
    for port in &mut f.ports {
        port.max_speed_bps = 0;
        port.negotiated_speed_bps = G40;
    }
    let results = node_checks(&numbered_id(0), &f, &ModelTable::builtin());
    let rdma = check(&results, "rdma_enabled");
    assert_eq!(rdma.status, CheckStatus::Fail);
    assert!(
        rdma.evidence[0].ends_with(
            "whether this Mac has Thunderbolt 5 ports is unknown: on Thunderbolt 4 this is what \
             macOS does (its ports carry no RDMA; JACCL needs Thunderbolt 5), on Thunderbolt 5 \
             its devices are gone"
        ),
        "{rdma:?}"
    );
    assert!(
        rdma.fix
            .starts_with("on a Thunderbolt 5 Mac: a reboot is needed")
            && rdma
                .fix
                .contains("\non a Thunderbolt 4 Mac: RDMA over Thunderbolt needs Thunderbolt 5"),
        "{rdma:?}"
    );
    // Its cabled port is judged as before: no device where one was due.
    assert_eq!(
        check(&results, "rdma_port_active").evidence,
        ["Thunderbolt 2 (en3) is cabled but has no RDMA device"]
    );
}

#[test]
fn rdma_disabled_fails_and_port_down_names_the_peer_without_rdma() {
    let mut facts = healthy(2);
    facts.get_mut(&numbered_id(1)).unwrap().rdma_enabled = Some(false);
    let port = port_mut(&mut facts, 0, 2);
    port.rdma.as_mut().unwrap().state = RdmaPortState::Down;
    port.peer.as_mut().unwrap().rdma_service = Some(false);
    let results = all_checks(&facts, &members(2));
    assert_eq!(
        not_passing(&results),
        [
            ("rdma_port_active".to_owned(), on(0), CheckStatus::Fail),
            ("rdma_enabled".to_owned(), on(1), CheckStatus::Fail),
            ("rdma_port_active".to_owned(), on(1), CheckStatus::Skipped),
        ]
    );
    let down = check(&results, "rdma_port_active");
    assert!(down.evidence[0].starts_with("Thunderbolt 2 (en3): rdma_en3 port 1 is DOWN while cabled; the peer Mac Studio (Mac15,14) does not advertise the RDMA service"), "{down:?}");
    assert!(down.fix.contains("rdma_ctl enable"), "{}", down.fix);
}

#[test]
fn mixed_macos_versions_are_listed() {
    let mut facts = healthy(4);
    let n3 = facts.get_mut(&numbered_id(2)).unwrap();
    n3.os_version = "26.3".into();
    n3.os_build = "25D125".into();
    let results = all_checks(&facts, &members(4));
    assert_eq!(
        not_passing(&results),
        [("same_os_version".to_owned(), None, CheckStatus::Fail)]
    );
    assert_eq!(
        check(&results, "same_os_version").evidence,
        ["different versions: macos 26.2 (25C56): n1, n2, n4; macos 26.3 (25D125): n3"]
    );
}

#[test]
fn a_beta_and_a_release_of_one_version_are_told_apart_by_their_build() {
    let mut facts = healthy(3);
    facts.get_mut(&numbered_id(1)).unwrap().os_build = "25C5031i".into();
    let results = mesh_checks(
        &members(3),
        &facts,
        &cable_map(&facts, &[]),
        &ModelTable::builtin(),
    );
    let versions = check(&results, "same_os_version");
    assert_eq!(versions.status, CheckStatus::Fail, "{versions:?}");
    assert_eq!(
        versions.evidence,
        [
            "the same version in different builds (a beta and a release, or two betas): macos 26.2 (25C5031i): n2; macos 26.2 (25C56): n1, n3"
        ]
    );
    // A build that is unknown cannot be compared: no pass.
    facts.get_mut(&numbered_id(1)).unwrap().os_build.clear();
    let results = mesh_checks(
        &members(3),
        &facts,
        &cable_map(&facts, &[]),
        &ModelTable::builtin(),
    );
    assert_eq!(
        check(&results, "same_os_version").status,
        CheckStatus::Skipped
    );
}

#[test]
fn too_many_nodes_for_the_ports_fails_port_budget_and_mesh_size() {
    let mut facts = healthy(4);
    for f in facts.values_mut() {
        f.model = "Mac16,11".into();
    }
    let results = mesh_checks(
        &members(5),
        &facts,
        &cable_map(&facts, &[]),
        &ModelTable::builtin(),
    );
    let budget = check(&results, "port_budget");
    assert_eq!(budget.status, CheckStatus::Fail);
    assert_eq!(
        budget.evidence[0],
        "n1 (m4-pro-mini, Mac16,11): 3 Thunderbolt 5 ports, 3 usable for RDMA; a full mesh of 5 nodes needs 4"
    );
    assert_eq!(budget.evidence[4], "n5: facts unknown");
    assert!(budget.fix.contains("at most 4 nodes"), "{}", budget.fix);

    let results = mesh_checks(&members(9), &facts, &[], &ModelTable::builtin());
    let size = check(&results, "mesh_size");
    assert_eq!(
        (size.status, size.evidence[0].as_str()),
        (
            CheckStatus::Fail,
            "9 members; a JACCL mesh has at most 8 ranks"
        )
    );
}

#[test]
fn budget_that_needs_the_unreliable_port_warns_and_port_usable_warns_on_it() {
    let mut facts = healthy(2);
    for f in facts.values_mut() {
        f.model = "Mac16,9".into();
    }
    let results = mesh_checks(
        &members(5),
        &facts,
        &cable_map(&facts, &[]),
        &ModelTable::builtin(),
    );
    assert_eq!(check(&results, "port_budget").status, CheckStatus::Warn);

    let mut facts = healthy(2);
    let (from, to) = (port_mut(&mut facts, 0, 2).clone(), 1u32);
    let tb1 = port_mut(&mut facts, 0, to);
    *tb1 = PortFact {
        name: "Thunderbolt 1".into(),
        receptacle: 1,
        domain_uuid: tb1.domain_uuid.clone(),
        iface: "en2".into(),
        rdma_device: "rdma_en2".into(),
        ..from
    };
    *port_mut(&mut facts, 0, 2) = idle_port(0, 2);
    port_mut(&mut facts, 1, 2)
        .peer
        .as_mut()
        .unwrap()
        .domain_uuid = uuid(0, 1);
    let results = all_checks(&facts, &members(2));
    assert_eq!(
        not_passing(&results),
        [("port_usable".to_owned(), on(0), CheckStatus::Warn)]
    );
    let usable = check(&results, "port_usable");
    assert!(usable.evidence[0].starts_with("Thunderbolt 1 (en2) is cabled, but on Mac Studio (M3 Ultra, 2025) it is reported unreliable for RDMA: "), "{usable:?}");
    assert_eq!(
        usable.fix,
        "move that cable to a free usable port: Thunderbolt 2, Thunderbolt 3, Thunderbolt 4, Thunderbolt 5, Thunderbolt 6"
    );
}

#[test]
fn a_peer_outside_the_mesh_is_not_a_cable_but_is_reported() {
    let mut facts = healthy(2);
    port_mut(&mut facts, 0, 5).peer = Some(PeerFact {
        domain_uuid: "STRANGER".into(),
        model: "Mac17,6".into(),
        name: "MacBook Pro".into(),
        rdma_service: Some(true),
    });
    assert_eq!(cable_map(&facts, &[]).len(), 1);
    let results = mesh_checks(
        &members(2),
        &facts,
        &cable_map(&facts, &[]),
        &ModelTable::builtin(),
    );
    let peers = check(&results, "cable_peers_known");
    assert_eq!(peers.status, CheckStatus::Warn);
    assert_eq!(
        peers.evidence,
        [
            "n1/Thunderbolt 5 (en6) is cabled to a Mac that is not a member: MacBook Pro (Mac17,6) (domain STRANGER)"
        ]
    );
}

fn config_end(node: &str, port: &str, iface: &str, address: [u8; 4]) -> CableEnd {
    CableEnd {
        node: id(node),
        port: port.into(),
        iface: iface.into(),
        rdma_device: String::new(),
        address: Some(Ipv4Addr::from(address)),
    }
}

#[test]
fn a_cable_seen_from_one_end_counts_when_config_names_it() {
    let mut facts = healthy(3);
    facts.remove(&numbered_id(2));
    let configured = [Cable {
        a: config_end("n3", "", "en4", [10, 254, 0, 10]),
        b: config_end("n1", "", "en4", [10, 254, 0, 9]),
        speed_bps: 0,
        discovered: false,
    }];
    let cables = cable_map(&facts, &configured);
    assert_eq!(cables.len(), 2);
    let one_sided = &cables[1];
    assert!(one_sided.discovered);
    assert_eq!(
        (
            one_sided.a.node.as_str(),
            one_sided.a.port.as_str(),
            one_sided.a.rdma_device.as_str()
        ),
        ("n1", "Thunderbolt 3", "rdma_en4")
    );
    assert_eq!(one_sided.b, configured[0].a);
    assert_eq!(one_sided.speed_bps, G80);

    let results = mesh_checks(&members(3), &facts, &cables, &ModelTable::builtin());
    assert_eq!(
        check(&results, "full_mesh_cabled").status,
        CheckStatus::Skipped
    );
    assert!(
        check(&results, "full_mesh_cabled")
            .evidence
            .contains(&"n2 ↔ n3: no cable known, and the facts of n3 are unknown".to_owned())
    );
    assert_eq!(
        check(&results, "same_os_version").status,
        CheckStatus::Skipped
    );
    // Without the config, n1's port leads to an unknown Mac: maybe n3.
    let alone = mesh_checks(
        &members(3),
        &facts,
        &cable_map(&facts, &[]),
        &ModelTable::builtin(),
    );
    let peers = check(&alone, "cable_peers_known");
    assert_eq!(
        peers.status,
        CheckStatus::Skipped,
        "no 'not a member' warning"
    );
    assert!(
        peers.evidence.iter().any(|e| e.ends_with(
            "which matches no known port; it may be n3 (not all of whose ports are known)"
        )),
        "{peers:?}"
    );
}

fn linux_node(iface: &str, device: &str, address: &str) -> NodeFacts {
    NodeFacts {
        os: OsKind::Linux,
        os_version: "6.12.0".into(),
        rdma_enabled: Some(true),
        rdma_devices_read: true,
        ports_complete: true,
        ports: vec![PortFact {
            name: iface.into(),
            iface: iface.into(),
            rdma_device: device.into(),
            negotiated_speed_bps: 100_000_000_000,
            ipv4: Some(vec![address.parse().unwrap()]),
            rdma: Some(rdma_port(
                RdmaPortState::Active,
                100_000_000_000,
                vec![Gid {
                    index: 3,
                    address: mapped(address.parse::<Ipv4Cidr>().unwrap().address),
                }],
            )),
            ..PortFact::default()
        }],
        ..NodeFacts::default()
    }
}

#[test]
fn linux_nodes_take_cables_from_config_and_skip_thunderbolt_checks() {
    let facts = BTreeMap::from([
        (id("l1"), linux_node("eth1", "mlx5_0", "10.9.0.1/30")),
        (id("l2"), linux_node("eth2", "mlx5_1", "10.9.0.2/30")),
    ]);
    let configured = [Cable {
        a: config_end("l2", "", "eth2", [10, 9, 0, 2]),
        b: config_end("l1", "", "eth1", [10, 9, 0, 1]),
        speed_bps: 0,
        discovered: false,
    }];
    let cables = cable_map(&facts, &configured);
    assert_eq!(cables.len(), 1);
    assert!(!cables[0].discovered);
    assert_eq!(
        (
            cables[0].a.node.as_str(),
            cables[0].a.rdma_device.as_str(),
            cables[0].b.rdma_device.as_str()
        ),
        ("l1", "mlx5_0", "mlx5_1")
    );
    assert_eq!(cables[0].speed_bps, 100_000_000_000);

    let models = ModelTable::builtin();
    let results = node_checks(&id("l1"), &facts[&id("l1")], &models);
    for name in [
        "rdma_enabled",
        "rdma_port_active",
        "link_addressed",
        "gid_matches_address",
    ] {
        assert_eq!(check(&results, name).status, CheckStatus::Pass, "{name}");
    }
    for name in ["link_speed", "thunderbolt_bridge_inactive", "port_usable"] {
        let r = check(&results, name);
        assert_eq!(
            (r.status, r.evidence[0].as_str()),
            (
                CheckStatus::Skipped,
                "linux node: no Thunderbolt ports; this check applies to macOS"
            )
        );
    }
    let mesh = mesh_checks(&[id("l1"), id("l2")], &facts, &cables, &models);
    assert_eq!(check(&mesh, "full_mesh_cabled").status, CheckStatus::Pass);
    assert_eq!(
        check(&mesh, "link_subnets_isolated").status,
        CheckStatus::Pass
    );
    assert_eq!(check(&mesh, "port_budget").status, CheckStatus::Skipped);
}

#[test]
fn missing_facts_are_never_a_pass() {
    let models = ModelTable::builtin();
    let blind = NodeFacts {
        os: OsKind::Macos,
        blind_spots: vec!["system_profiler: timed out after 5s".into()],
        ..NodeFacts::default()
    };
    for result in node_checks(&id("x"), &blind, &models) {
        assert_eq!(result.status, CheckStatus::Skipped, "{result:?}");
        assert!(
            result
                .evidence
                .contains(&"blind spot: system_profiler: timed out after 5s".to_owned()),
            "{result:?}"
        );
    }
    let facts = BTreeMap::from([(id("x"), blind)]);
    let mesh = mesh_checks(&[id("x"), id("y")], &facts, &[], &models);
    for name in [
        "full_mesh_cabled",
        "same_os_version",
        "port_budget",
        "link_subnets_isolated",
    ] {
        assert_eq!(check(&mesh, name).status, CheckStatus::Skipped, "{name}");
    }
}

#[test]
fn an_unknown_model_skips_port_usable_naming_the_known_ones() {
    let mut f = healthy(2).remove(&numbered_id(0)).unwrap();
    f.model = "Mac99,1".into();
    let results = node_checks(&numbered_id(0), &f, &ModelTable::builtin());
    let usable = check(&results, "port_usable");
    assert_eq!(usable.status, CheckStatus::Skipped);
    assert!(
        usable.evidence[0]
            .starts_with("model Mac99,1 is not in the model table (known: m3-ultra-studio, "),
        "{usable:?}"
    );
}

#[test]
fn a_linux_host_without_rdma_hardware_warns_instead_of_failing() {
    let facts = NodeFacts {
        os: OsKind::Linux,
        rdma_enabled: Some(false),
        ..NodeFacts::default()
    };
    let results = node_checks(&id("lab"), &facts, &ModelTable::builtin());
    let rdma = check(&results, "rdma_enabled");
    assert_eq!(rdma.status, CheckStatus::Warn, "{rdma:?}");
    assert!(
        rdma.evidence[0].contains("no RDMA device on this host"),
        "{rdma:?}"
    );
}

#[test]
fn an_empty_ibv_devices_list_fails_even_when_rdma_ctl_was_not_read() {
    let mut f = healthy(2).remove(&numbered_id(0)).unwrap();
    f.rdma_enabled = None;
    f.blind_spots = vec!["rdma_ctl status: not in the bundle (no rdma_ctl_status.txt)".into()];
    for port in &mut f.ports {
        port.rdma_device.clear();
        port.rdma = None;
    }
    let rdma = check(
        &node_checks(&numbered_id(0), &f, &ModelTable::builtin()),
        "rdma_enabled",
    )
    .clone();
    assert_eq!(rdma.status, CheckStatus::Fail, "{rdma:?}");
    assert_eq!(
        rdma.evidence[0],
        "ibv_devices lists no RDMA device (rdma_ctl status could not be read)"
    );

    f.rdma_devices_read = false;
    let rdma = check(
        &node_checks(&numbered_id(0), &f, &ModelTable::builtin()),
        "rdma_enabled",
    )
    .clone();
    assert_eq!(
        rdma.status,
        CheckStatus::Skipped,
        "an unread list proves nothing: {rdma:?}"
    );
}

#[test]
fn bridge0_is_judged_by_device_when_the_thunderbolt_ports_are_unknown() {
    let bridge0 = |up, member_link| NodeFacts {
        os: OsKind::Macos,
        bridges: Some(vec![BridgeFact {
            name: "bridge0".into(),
            up,
            member_link,
            members: vec!["en1".into(), "en2".into()],
            service: Some("Thunderbolt Bridge".into()),
            service_enabled: Some(true),
        }]),
        ..NodeFacts::default()
    };
    let result = |facts: &NodeFacts| {
        check(
            &node_checks(&id("x"), facts, &ModelTable::builtin()),
            "thunderbolt_bridge_inactive",
        )
        .clone()
    };
    let forwarding = result(&bridge0(Some(true), Some(true)));
    assert_eq!(forwarding.status, CheckStatus::Fail, "{forwarding:?}");
    assert!(
        forwarding.evidence[0].starts_with("bridge0 (Thunderbolt members en1, en2;"),
        "{forwarding:?}"
    );
    // Up, no member with link, and no Thunderbolt report: whether its
    // members are cabled is unknown; the enabled service proves nothing.
    let idle = result(&bridge0(Some(true), Some(false)));
    assert_eq!(idle.status, CheckStatus::Skipped, "{idle:?}");
    assert_eq!(
        result(&bridge0(Some(false), Some(true))).status,
        CheckStatus::Pass
    );
    assert_eq!(result(&bridge0(None, None)).status, CheckStatus::Skipped);
}

#[test]
fn the_far_ends_view_fills_unknowns_and_a_contradiction_warns() {
    use meshd_mesh::checks::diagnose;
    let models = ModelTable::builtin();
    // n2's own capture has neither its model nor rdma_ctl; n1 sees it as
    // a Mac Studio that offers the RDMA service.
    let mut facts = healthy(2);
    let n2 = facts.get_mut(&numbered_id(1)).unwrap();
    n2.model.clear();
    n2.rdma_enabled = None;
    let diagnosis = diagnose(&facts, &models);
    let n2_checks = &diagnosis.node_checks[&numbered_id(1)];
    let usable = check(n2_checks, "port_usable");
    assert_eq!(usable.status, CheckStatus::Pass, "{usable:?}");
    assert!(
        usable.evidence[0]
            .ends_with("usable for RDMA on m3-ultra-studio (as n1/Thunderbolt 2 sees it)"),
        "{usable:?}"
    );
    let rdma = check(n2_checks, "rdma_enabled");
    assert_eq!(rdma.status, CheckStatus::Pass, "{rdma:?}");
    assert!(
        rdma.evidence[0].starts_with("n1/Thunderbolt 2 sees this Mac offer the RDMA service"),
        "{rdma:?}"
    );
    // Alone, n2's checks cannot know either.
    let alone = node_checks(&numbered_id(1), &facts[&numbered_id(1)], &models);
    assert_eq!(check(&alone, "port_usable").status, CheckStatus::Skipped);
    let views = check(&diagnosis.mesh_checks, "peer_views_agree");
    assert_eq!(views.status, CheckStatus::Skipped, "{views:?}");

    // Both ends captured, and they disagree: one capture is stale.
    let mut facts = healthy(2);
    port_mut(&mut facts, 0, 2).peer.as_mut().unwrap().model = "Mac16,9".into();
    let diagnosis = diagnose(&facts, &models);
    let views = check(&diagnosis.mesh_checks, "peer_views_agree");
    assert_eq!(views.status, CheckStatus::Warn, "{views:?}");
    assert!(
        views.evidence.contains(
            &"n1/Thunderbolt 2 sees n2's model as Mac16,9, but its own hw.model says Mac15,14"
                .to_owned()
        ),
        "{views:?}"
    );
    // A view never overrides what the node captured itself.
    let usable = check(&diagnosis.node_checks[&numbered_id(1)], "port_usable");
    assert!(
        usable.evidence[0].ends_with("usable for RDMA on m3-ultra-studio"),
        "{usable:?}"
    );
}

#[test]
fn a_peer_seen_offering_no_rdma_service_has_rdma_off() {
    let mut facts = healthy(2);
    facts.get_mut(&numbered_id(1)).unwrap().rdma_enabled = None;
    port_mut(&mut facts, 0, 2)
        .peer
        .as_mut()
        .unwrap()
        .rdma_service = Some(false);
    let diagnosis = meshd_mesh::checks::diagnose(&facts, &ModelTable::builtin());
    let rdma = check(&diagnosis.node_checks[&numbered_id(1)], "rdma_enabled");
    assert_eq!(rdma.status, CheckStatus::Fail, "{rdma:?}");
    assert_eq!(
        rdma.evidence[0],
        "n1/Thunderbolt 2 sees this Mac not offer the RDMA service (rdma_ctl status not read): RDMA is disabled"
    );
}

#[test]
fn the_firewall_must_let_meshd_be_reached() {
    let mac = |firewall: Option<FirewallFact>| NodeFacts {
        os: OsKind::Macos,
        firewall,
        ..NodeFacts::default()
    };
    let on = |block_all, rules: Option<Vec<(&str, Option<bool>)>>| {
        mac(Some(FirewallFact {
            enabled: Some(true),
            block_all,
            meshd_rules: rules.map(|rules| {
                rules
                    .into_iter()
                    .map(|(path, allowed)| FirewallRule {
                        path: path.into(),
                        allowed,
                    })
                    .collect()
            }),
        }))
    };
    let result = |facts: &NodeFacts| {
        check(
            &node_checks(&id("x"), facts, &ModelTable::builtin()),
            "firewall_allows_meshd",
        )
        .clone()
    };
    const MESHD: &str = "/usr/local/bin/meshd";

    let allowed = result(&on(Some(false), Some(vec![(MESHD, Some(true))])));
    assert_eq!(allowed.status, CheckStatus::Pass, "{allowed:?}");
    assert_eq!(
        allowed.evidence,
        ["the Application Firewall allows incoming connections to /usr/local/bin/meshd"]
    );

    let blocked = result(&on(Some(false), Some(vec![(MESHD, Some(false))])));
    assert_eq!(blocked.status, CheckStatus::Fail, "{blocked:?}");
    assert!(
        blocked
            .fix
            .contains("socketfilterfw --unblockapp /usr/local/bin/meshd"),
        "{blocked:?}"
    );

    // An old binary still allowed does not excuse the one that is blocked.
    let mixed = result(&on(
        Some(false),
        Some(vec![("/opt/meshd/meshd", Some(true)), (MESHD, Some(false))]),
    ));
    assert_eq!(mixed.status, CheckStatus::Fail, "{mixed:?}");

    let everything_blocked = result(&on(Some(true), Some(vec![(MESHD, Some(true))])));
    assert_eq!(everything_blocked.status, CheckStatus::Fail);
    assert!(
        everything_blocked
            .fix
            .contains("socketfilterfw --setblockall off"),
        "{everything_blocked:?}"
    );

    let no_rule = result(&on(Some(false), Some(vec![])));
    assert_eq!(no_rule.status, CheckStatus::Fail, "{no_rule:?}");

    // Unknowns are never a verdict.
    for unknown in [
        mac(None),
        on(Some(false), None),
        on(Some(false), Some(vec![(MESHD, None)])),
        mac(Some(FirewallFact::default())),
    ] {
        let skipped = result(&unknown);
        assert_eq!(skipped.status, CheckStatus::Skipped, "{skipped:?}");
    }

    let off = result(&mac(Some(FirewallFact {
        enabled: Some(false),
        ..FirewallFact::default()
    })));
    assert_eq!(off.status, CheckStatus::Pass, "{off:?}");

    let linux = NodeFacts {
        os: OsKind::Linux,
        ..NodeFacts::default()
    };
    let skipped = result(&linux);
    assert_eq!(skipped.status, CheckStatus::Skipped);
    assert!(
        skipped.evidence[0].contains("this check applies to macOS"),
        "{skipped:?}"
    );
}
