//! The scenario bundles under tests/scenarios/ replayed through
//! `ReplaySource` and the macOS collector, with the facts each must give,
//! and a check that every bundle file is exactly the fixtures its README
//! row names.

use std::collections::BTreeMap;
use std::path::Path;

use meshd_platform::ibv::{RdmaDevice, RdmaPort};
use meshd_platform::macos;
use meshd_platform::source::{CaptureError, HostCommand, ReplaySource, Source};
use meshd_proto::domain::RdmaPortState;
use meshd_proto::facts::{BridgeFact, NodeFacts, OsKind, PortFact};

const SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scenarios");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/macos");
const GBPS: u64 = 1_000_000_000;

fn replay(scenario: &str) -> NodeFacts {
    let dir = Path::new(SCENARIOS).join(scenario);
    let source = ReplaySource::open(&dir).expect("scenario directory");
    let facts = meshd_platform::collect(&source, OsKind::Macos);
    assert_eq!(facts.source, format!("replay:{}", dir.display()));
    assert_eq!(facts.os, OsKind::Macos);
    assert!(facts.checks.is_empty(), "the collector runs no checks");
    facts
}

/// One "not in the bundle" blind spot per command the scenario has no file
/// for, in command order, then `extra`.
fn expected_blind_spots(scenario: &str, extra: &[&str]) -> Vec<String> {
    let dir = Path::new(SCENARIOS).join(scenario);
    HostCommand::MACOS
        .iter()
        .filter(|c| !dir.join(c.file_name()).exists())
        .map(|c| {
            CaptureError::NotCaptured {
                command: c.line(),
                file: c.file_name().to_owned(),
            }
            .to_string()
        })
        .chain(extra.iter().map(|s| (*s).to_owned()))
        .collect()
}

/// A port as one comparable row: (name, receptacle, iface, rdma device,
/// negotiated, max, other device).
type PortRow<'a> = (&'a str, u32, &'a str, &'a str, u64, u64, Option<&'a str>);

/// Ports known only from RDMA devices rdma_en2..4: no Thunderbolt or
/// hardware-port output names them.
const RDMA_EN2_TO_EN4_WITHOUT_HARDWARE_PORTS: [PortRow<'static>; 3] = [
    ("", 0, "en2", "rdma_en2", 0, 0, None),
    ("", 0, "en3", "rdma_en3", 0, 0, None),
    ("", 0, "en4", "rdma_en4", 0, 0, None),
];

fn port_rows(facts: &NodeFacts) -> Vec<PortRow<'_>> {
    facts
        .ports
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                p.receptacle,
                p.iface.as_str(),
                p.rdma_device.as_str(),
                p.negotiated_speed_bps,
                p.max_speed_bps,
                p.other_device.as_deref(),
            )
        })
        .collect()
}

/// (peer domain UUID, model, RDMA service) per port.
fn peers(facts: &NodeFacts) -> Vec<Option<(&str, &str, bool)>> {
    facts
        .ports
        .iter()
        .map(|p| {
            p.peer.as_ref().map(|peer| {
                (
                    peer.domain_uuid.as_str(),
                    peer.model.as_str(),
                    peer.rdma_service,
                )
            })
        })
        .collect()
}

/// (state, active speed, GID count) of each port's RDMA port.
fn rdma(facts: &NodeFacts) -> Vec<Option<(RdmaPortState, u64, usize)>> {
    facts
        .ports
        .iter()
        .map(|p| {
            p.rdma
                .as_ref()
                .map(|r| (r.state, r.active_speed_bps, r.gids.len()))
        })
        .collect()
}

fn port<'a>(facts: &'a NodeFacts, iface: &str) -> &'a PortFact {
    facts
        .ports
        .iter()
        .find(|p| p.iface == iface)
        .expect("port present")
}

#[test]
fn studio_m3_ultra_with_one_tb5_peer_and_a_usb4_drive() {
    let scenario = "studio-m3-ultra-tb5-peer-usb4-drive";
    let facts = replay(scenario);
    let idle = 120 * GBPS;
    let linked = 80 * GBPS;
    assert_eq!(
        port_rows(&facts),
        [
            ("Thunderbolt 1", 1, "", "", 0, idle, None),
            ("Thunderbolt 2", 2, "", "", linked, 0, None),
            ("Thunderbolt 3", 3, "", "", 0, idle, None),
            ("Thunderbolt 4", 4, "", "", linked, 0, Some("Envoy Ultra")),
            ("Thunderbolt 5", 5, "", "", 0, idle, None),
            ("Thunderbolt 6", 6, "", "", 0, idle, None),
        ]
    );
    let macbook = Some(("817DCFA4-B481-4100-80FC-91C7AA969F0B", "Mac17,7", true));
    assert_eq!(peers(&facts), [None, macbook, None, None, None, None]);
    assert_eq!(
        facts.ports[1].domain_uuid,
        "28CA4C30-A263-4C55-B302-953416D0B209"
    );
    assert_eq!(
        facts.ports[1].peer.as_ref().map(|p| p.name.as_str()),
        Some("MacBook Pro")
    );
    assert!(
        facts
            .ports
            .iter()
            .all(|p| p.usable_for_rdma && p.iface_up.is_none())
    );
    assert!(facts.bridges.is_empty());
    assert_eq!(
        (
            facts.rdma_enabled,
            facts.os_version.as_str(),
            facts.model.as_str()
        ),
        (None, "", "")
    );
    assert_eq!(facts.blind_spots, expected_blind_spots(scenario, &[]));
}

#[test]
fn m5_max_with_rdma_disabled_a_peer_and_a_tb5_dock() {
    let scenario = "macbook-m5-max-rdma-disabled";
    let facts = replay(scenario);
    assert_eq!(
        port_rows(&facts),
        [
            ("Thunderbolt 1", 1, "en1", "", 0, 120 * GBPS, None),
            ("Thunderbolt 2", 2, "en6", "", 80 * GBPS, 0, None),
            ("Thunderbolt 3", 3, "en2", "", 80 * GBPS, 0, Some("SB-XTM5")),
        ]
    );
    assert_eq!(
        peers(&facts),
        [
            None,
            Some(("00000003-0000-4000-8000-000000000003", "Mac17,6", true)),
            None
        ]
    );
    assert_eq!(
        rdma(&facts),
        [None, None, None],
        "ibv_devices lists no device"
    );
    assert_eq!(facts.rdma_enabled, None, "not captured, so not guessed");
    assert_eq!(facts.blind_spots, expected_blind_spots(scenario, &[]));
}

#[test]
fn m5_max_with_rdma_enabled_and_every_port_down() {
    let scenario = "macbook-m5-max-rdma-enabled-ports-down";
    let facts = replay(scenario);
    assert_eq!(facts.rdma_enabled, Some(true));
    assert_eq!(
        port_rows(&facts),
        [
            ("Thunderbolt 1", 1, "en1", "rdma_en1", 0, 120 * GBPS, None),
            ("Thunderbolt 2", 2, "en6", "rdma_en6", 80 * GBPS, 0, None),
            (
                "Thunderbolt 3",
                3,
                "en2",
                "rdma_en2",
                40 * GBPS,
                0,
                Some("TBU405Pro")
            ),
        ]
    );
    assert_eq!(
        peers(&facts),
        [
            None,
            Some(("00000004-0000-4000-8000-000000000004", "Mac17,6", false)),
            None
        ],
        "the peer has RDMA off: no RDMA service"
    );
    let down = Some((RdmaPortState::Down, 0, 0));
    assert_eq!(rdma(&facts), [down, down, down]);
    assert_eq!(facts.blind_spots, expected_blind_spots(scenario, &[]));
}

#[test]
fn tn3205_mac_mini_all_active_with_gids_and_an_active_bridge() {
    let scenario = "mac-mini-m4-pro-tn3205-bridge-active";
    let facts = replay(scenario);
    assert_eq!(
        (facts.os_version.as_str(), facts.rdma_enabled),
        ("26.5", Some(true))
    );
    assert_eq!(port_rows(&facts), RDMA_EN2_TO_EN4_WITHOUT_HARDWARE_PORTS);
    assert_eq!(
        rdma(&facts),
        [
            Some((RdmaPortState::Active, 80 * GBPS, 3)),
            Some((RdmaPortState::Active, 0, 0)),
            Some((RdmaPortState::Active, 0, 0)),
        ]
    );
    let en2 = port(&facts, "en2");
    let gid1 = en2.rdma.as_ref().and_then(|r| r.gid(1)).expect("GID[1]");
    assert_eq!(
        gid1,
        "::ffff:169.254.205.255"
            .parse::<std::net::Ipv6Addr>()
            .expect("v6")
    );
    let address = en2.ipv4[0].address;
    assert_eq!(
        gid1,
        address.to_ipv6_mapped(),
        "GID[1] is en2's IPv4, mapped"
    );
    assert_eq!(en2.ipv4[0].to_string(), "169.254.205.255/16");
    assert_eq!(en2.iface_up, Some(true));
    assert_eq!(port(&facts, "en3").iface_up, None);
    assert_eq!(
        facts.bridges,
        [BridgeFact {
            name: "bridge0".into(),
            active: true,
            members: vec!["en2".into(), "en3".into(), "en4".into()],
            service: Some("Thunderbolt Bridge".into()),
            service_enabled: Some(true),
        }]
    );
    assert_eq!(
        facts.blind_spots,
        expected_blind_spots(
            scenario,
            &[
                "ifconfig -a: no en3 stanza, so its address and status are unknown",
                "ifconfig -a: no en4 stanza, so its address and status are unknown",
            ]
        )
    );
}

#[test]
fn thunderbolt_4_mac_where_rdma_ctl_says_enabled_but_no_device_exists() {
    let scenario = "tb4-mac-rdma-enabled-no-devices";
    let facts = replay(scenario);
    assert_eq!(facts.rdma_enabled, Some(true));
    assert_eq!(
        port_rows(&facts),
        [("Thunderbolt 3", 3, "", "", 0, 40 * GBPS, None)]
    );
    assert_eq!(
        facts.ports[0].domain_uuid,
        "5693EDBE-82A0-4A7D-ADD4-E861D14CBE36"
    );
    assert_eq!(rdma(&facts), [None]);
    assert_eq!(facts.blind_spots, expected_blind_spots(scenario, &[]));
}

#[test]
fn patched_thunderbolt_4_mac_with_one_40g_rdma_port_active() {
    let scenario = "tb4-mac-patched-one-port-active-40g";
    let facts = replay(scenario);
    assert_eq!(facts.rdma_enabled, Some(true));
    assert_eq!(port_rows(&facts), RDMA_EN2_TO_EN4_WITHOUT_HARDWARE_PORTS);
    assert_eq!(
        rdma(&facts),
        [
            Some((RdmaPortState::Down, 80 * GBPS, 0)),
            Some((RdmaPortState::Down, 80 * GBPS, 0)),
            Some((RdmaPortState::Active, 40 * GBPS, 0)),
        ]
    );
    assert_eq!(facts.blind_spots, expected_blind_spots(scenario, &[]));
}

#[test]
fn intel_mac_with_an_inactive_thunderbolt_bridge_and_a_vm_bridge() {
    let scenario = "intel-mac-bridge0-inactive-vm-bridge100";
    let facts = replay(scenario);
    assert!(facts.ports.is_empty(), "no Thunderbolt or RDMA output");
    assert_eq!(
        facts.bridges,
        [
            BridgeFact {
                name: "bridge0".into(),
                active: false,
                members: ["en1", "en2", "en3", "en4"].map(String::from).to_vec(),
                service: Some("Thunderbolt Bridge".into()),
                service_enabled: Some(true),
            },
            BridgeFact {
                name: "bridge100".into(),
                active: true,
                members: vec!["en10".into()],
                service: None,
                service_enabled: None,
            },
        ]
    );
    assert_eq!(facts.blind_spots, expected_blind_spots(scenario, &[]));
}

#[test]
fn pasted_text_profiler_output_is_read() {
    let scenario = "mac-mini-pasted-text-profiler";
    let facts = replay(scenario);
    assert_eq!(
        port_rows(&facts),
        [("Thunderbolt 3", 3, "", "", 80 * GBPS, 0, None)]
    );
    assert_eq!(
        peers(&facts),
        [Some((
            "88F10ACA-5CAA-4F5D-8361-03EED54ACB5A",
            "Mac16,9",
            true
        ))]
    );
    assert_eq!(
        facts.blind_spots,
        expected_blind_spots(
            scenario,
            &[
                "system_profiler SPThunderboltDataType -json: bus \"Thunderbolt/USB4 Bus 1\" \
               has no receptacle number; left out"
            ]
        )
    );
}

/// scenario → bundle file → the fixtures it is made of, from the README.
fn readme_provenance() -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let readme = std::fs::read_to_string(Path::new(SCENARIOS).join("README.md")).expect("README");
    let mut scenarios: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            current = Some(name.trim().to_owned());
            scenarios.entry(name.trim().to_owned()).or_default();
            continue;
        }
        let (Some(scenario), Some(row)) = (&current, line.strip_prefix('|')) else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let [file, fixtures, ..] = cells[..] else {
            continue;
        };
        if !fixtures.contains('`') {
            continue;
        }
        let parts = fixtures
            .split(" + ")
            .map(|f| f.trim().trim_matches('`').to_owned())
            .collect();
        scenarios
            .get_mut(scenario)
            .expect("section")
            .insert(file.to_owned(), parts);
    }
    scenarios
}

#[test]
fn every_bundle_file_is_exactly_the_fixtures_the_readme_names() {
    let provenance = readme_provenance();
    let mut dirs: Vec<String> = std::fs::read_dir(SCENARIOS)
        .expect("scenarios")
        .map(|e| e.expect("entry"))
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs, provenance.keys().cloned().collect::<Vec<_>>());
    let bundle_files: Vec<&str> = HostCommand::MACOS.iter().map(|c| c.file_name()).collect();
    for (scenario, files) in &provenance {
        let dir = Path::new(SCENARIOS).join(scenario);
        let mut present: Vec<String> = std::fs::read_dir(&dir)
            .expect("scenario")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        present.sort();
        assert_eq!(
            present,
            files.keys().cloned().collect::<Vec<_>>(),
            "{scenario}"
        );
        for (file, fixtures) in files {
            assert!(
                bundle_files.contains(&file.as_str()),
                "{scenario}/{file} is no bundle file"
            );
            let expected: Vec<u8> = fixtures
                .iter()
                .flat_map(|f| std::fs::read(Path::new(FIXTURES).join(f)).expect("fixture"))
                .collect();
            let actual = std::fs::read(dir.join(file)).expect("bundle file");
            assert!(
                actual == expected,
                "{scenario}/{file} is not {fixtures:?} verbatim"
            );
        }
    }
}

/// A live source whose verbs library answers: the scenario's commands, and
/// the devices as verbs would list them.
struct WithVerbs {
    commands: ReplaySource,
    devices: Result<Vec<RdmaDevice>, String>,
}

impl Source for WithVerbs {
    fn capture(&self, command: HostCommand) -> Result<String, CaptureError> {
        assert!(
            !matches!(command, HostCommand::IbvDevices | HostCommand::IbvDevinfo)
                || self.devices.is_err(),
            "{command} runs although verbs answered"
        );
        self.commands.capture(command)
    }
    fn read_file(&self, path: &str) -> std::io::Result<String> {
        self.commands.read_file(path)
    }
    fn list_dir(&self, path: &str) -> std::io::Result<Vec<String>> {
        self.commands.list_dir(path)
    }
    fn describe(&self) -> String {
        "live".to_owned()
    }
    fn rdma_devices(&self, _: OsKind) -> Option<Result<Vec<RdmaDevice>, String>> {
        Some(self.devices.clone())
    }
}

#[test]
fn verbs_devices_replace_the_ibv_tools_and_their_failure_falls_back() {
    let dir = Path::new(SCENARIOS).join("macbook-m5-max-rdma-enabled-ports-down");
    let active = RdmaDevice {
        name: "rdma_en6".into(),
        node_guid: "0000000000000002".into(),
        transport: String::new(),
        ports: vec![RdmaPort {
            port: 1,
            state: RdmaPortState::Active,
            active_width_lanes: Some(4),
            active_lane_speed_bps: Some(20_000_000_000),
            link_layer: "Thunderbolt".into(),
            gids: vec![(1, "::ffff:10.254.0.1".parse().expect("gid"))],
        }],
    };
    let source = WithVerbs {
        commands: ReplaySource::open(&dir).expect("scenario"),
        devices: Ok(vec![active]),
    };
    let facts = macos::collect(&source);
    assert!(
        !facts.blind_spots.iter().any(|s| s.contains("ibv")),
        "{:?}",
        facts.blind_spots
    );
    let port = facts
        .ports
        .iter()
        .find(|p| p.rdma_device == "rdma_en6")
        .expect("the verbs device pairs with en6");
    let rdma = port.rdma.as_ref().expect("rdma port");
    assert_eq!(
        rdma.state,
        RdmaPortState::Active,
        "from verbs, not ibv_devinfo"
    );
    assert_eq!(rdma.active_speed_bps, 80_000_000_000);
    assert_eq!(rdma.gid(1), Some("::ffff:10.254.0.1".parse().expect("gid")));

    let source = WithVerbs {
        commands: ReplaySource::open(&dir).expect("scenario"),
        devices: Err("rdma_en6: ibv_query_port failed: EIO".into()),
    };
    let facts = macos::collect(&source);
    assert!(
        facts.blind_spots.contains(
            &"verbs: rdma_en6: ibv_query_port failed: EIO; used ibv_devinfo instead".to_owned()
        ),
        "{:?}",
        facts.blind_spots
    );
    let port = facts
        .ports
        .iter()
        .find(|p| p.rdma_device == "rdma_en6")
        .expect("en6");
    assert_eq!(
        port.rdma.as_ref().expect("rdma").state,
        RdmaPortState::Down,
        "from ibv_devinfo"
    );
}
