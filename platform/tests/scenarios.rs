//! The scenario bundles under tests/scenarios/ replayed through
//! `ReplaySource` and the macOS collector, with the facts and checks each
//! must give, and a check that every bundle file is exactly the fixtures
//! its README row names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use meshd_domain::facts::{
    BridgeFact, CheckResult, CheckStatus, FirewallFact, NodeFacts, OsKind, PortFact,
};
use meshd_domain::fixtures::id;
use meshd_domain::{NodeId, RdmaPortState};
use meshd_mesh::checks::{Diagnosis, diagnose};
use meshd_mesh::models::ModelTable;
use meshd_platform::bundle;
use meshd_platform::ibv::{RdmaDevice, RdmaPort};
use meshd_platform::macos;
use meshd_platform::macos::NO_RDMA_TRAFFIC_COUNTER;
use meshd_platform::source::{CaptureError, HostCommand, ReplaySource, Source, VerbsDevices};

const SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scenarios");
/// The captures in macos-captures/, and the ones this crate adds.
const FIXTURE_DIRS: [&str; 2] = [
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/macos-captures"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/macos"),
];
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
/// for, in command order, then `extra`, then the panic reports no scenario
/// holds and the RDMA traffic counter macOS does not have.
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
        .chain([
            "kernel panic reports unknown: cannot list /Library/Logs/DiagnosticReports: No such \
             file or directory (os error 2)"
                .to_owned(),
            "whether exo's network daemon is installed: cannot list /Library/LaunchDaemons: No \
             such file or directory (os error 2)"
                .to_owned(),
            NO_RDMA_TRAFFIC_COUNTER.to_owned(),
        ])
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
fn peers(facts: &NodeFacts) -> Vec<Option<(&str, &str, Option<bool>)>> {
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
    let macbook = Some((
        "817DCFA4-B481-4100-80FC-91C7AA969F0B",
        "Mac17,7",
        Some(true),
    ));
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
            .all(|p| p.usable_for_rdma && p.iface_up.is_none() && p.ipv4.is_none())
    );
    let linked: Vec<Option<bool>> = facts.ports.iter().map(|p| p.linked).collect();
    let (idle, busy) = (Some(false), Some(true));
    assert_eq!(linked, [idle, busy, idle, busy, idle, idle]);
    assert!(facts.ports_complete && !facts.rdma_devices_read);
    assert_eq!(
        facts.bridges, None,
        "no ifconfig: bridges unknown, not none"
    );
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
            Some((
                "00000003-0000-4000-8000-000000000003",
                "Mac17,6",
                Some(true)
            )),
            None
        ]
    );
    assert_eq!(
        rdma(&facts),
        [None, None, None],
        "ibv_devices lists no device"
    );
    assert!(facts.rdma_devices_read, "an empty list is a list");
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
            Some((
                "00000004-0000-4000-8000-000000000004",
                "Mac17,6",
                Some(false)
            )),
            None
        ],
        "the peer has RDMA off: no RDMA service"
    );
    assert_eq!(facts.ports[1].rdma_node_guid, "0000000000000002");
    let rdma_en6 = facts.ports[1].rdma.as_ref().expect("rdma port");
    assert_eq!(
        (rdma_en6.link_layer.as_str(), rdma_en6.active_mtu),
        ("Thunderbolt", Some(4096))
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
    let address = en2.addresses()[0].address;
    assert_eq!(
        gid1,
        address.to_ipv6_mapped(),
        "GID[1] is en2's IPv4, mapped"
    );
    assert_eq!(en2.addresses()[0].to_string(), "169.254.205.255/16");
    assert_eq!(en2.iface_up, Some(true));
    assert_eq!(port(&facts, "en3").iface_up, None);
    assert_eq!(
        port(&facts, "en3").ipv4,
        None,
        "no stanza: unknown, not none"
    );
    assert_eq!(port(&facts, "en2").rdma_node_guid, "e0c5797d9c8fac05");
    assert_eq!(
        facts.bridges,
        Some(vec![BridgeFact {
            name: "bridge0".into(),
            up: Some(true),
            member_link: Some(true),
            members: vec!["en2".into(), "en3".into(), "en4".into()],
            service: Some("Thunderbolt Bridge".into()),
            service_enabled: Some(true),
        }])
    );
    assert_eq!(facts.os_build, "25F71");
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
        Some(vec![
            BridgeFact {
                name: "bridge0".into(),
                up: Some(true),
                member_link: Some(false),
                members: ["en1", "en2", "en3", "en4"].map(String::from).to_vec(),
                service: Some("Thunderbolt Bridge".into()),
                service_enabled: Some(true),
            },
            BridgeFact {
                name: "bridge100".into(),
                up: Some(true),
                member_link: Some(true),
                members: vec!["en10".into()],
                service: None,
                service_enabled: None,
            },
        ])
    );
    assert_eq!(facts.blind_spots, expected_blind_spots(scenario, &[]));
}

/// The named check of this scenario's only node.
fn node_check(scenario: &str, name: &str) -> CheckResult {
    let facts = replay(scenario);
    let node = id("mac");
    diagnose(&BTreeMap::from([(node, facts)]), &ModelTable::builtin())
        .all_checks()
        .find(|c| c.name == name)
        .cloned()
        .expect("the check ran")
}

#[test]
fn a_firewall_without_a_meshd_rule_fails_and_one_that_is_off_passes() {
    let scenario = "firewall-on-without-a-meshd-rule";
    let facts = replay(scenario);
    assert_eq!(
        facts.firewall,
        Some(FirewallFact {
            enabled: Some(true),
            block_all: Some(false),
            meshd_rules: Some(vec![]),
        })
    );
    assert_eq!(facts.blind_spots, expected_blind_spots(scenario, &[]));
    let check = node_check(scenario, "firewall_allows_meshd");
    assert_eq!(check.status, CheckStatus::Fail, "{check:#?}");
    assert!(
        check.evidence[0].contains("has no rule for meshd"),
        "{check:#?}"
    );
    assert!(
        check
            .fix
            .contains("socketfilterfw --add /usr/local/bin/meshd"),
        "{check:#?}"
    );

    let scenario = "firewall-off";
    let facts = replay(scenario);
    assert_eq!(
        facts.firewall,
        Some(FirewallFact {
            enabled: Some(false),
            block_all: Some(false),
            meshd_rules: None,
        })
    );
    let check = node_check(scenario, "firewall_allows_meshd");
    assert_eq!(check.status, CheckStatus::Pass, "{check:#?}");
    assert_eq!(check.evidence, ["the Application Firewall is off"]);
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
            Some(true)
        ))]
    );
    assert_eq!(
        facts.blind_spots,
        expected_blind_spots(
            scenario,
            &[
                "system_profiler SPThunderboltDataType -json: bus \"Thunderbolt/USB4 Bus 1\" \
                 has no receptacle; left out"
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

/// Every file under `dir`, as paths relative to it, sorted.
fn files_below(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        for entry in std::fs::read_dir(dir.join(&relative)).expect("directory") {
            let entry = entry.expect("entry");
            let path = relative.join(entry.file_name());
            if entry.path().is_dir() {
                pending.push(path);
            } else {
                found.push(path.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

fn fixture(name: &str) -> Vec<u8> {
    FIXTURE_DIRS
        .iter()
        .find_map(|dir| std::fs::read(Path::new(dir).join(name)).ok())
        .unwrap_or_else(|| panic!("no fixture {name}"))
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
    // The README's last section lists shapes without a scenario.
    let named: Vec<String> = provenance
        .iter()
        .filter(|(_, files)| !files.is_empty())
        .map(|(name, _)| name.clone())
        .collect();
    assert_eq!(dirs, named);
    let bundle_files: Vec<&str> = HostCommand::ALL.iter().map(|c| c.file_name()).collect();
    for (scenario, files) in provenance.iter().filter(|(_, f)| !f.is_empty()) {
        let dir = Path::new(SCENARIOS).join(scenario);
        assert_eq!(
            files_below(&dir),
            files.keys().cloned().collect::<Vec<_>>(),
            "{scenario}"
        );
        for (file, fixtures) in files {
            let name = Path::new(file).file_name().expect("name").to_string_lossy();
            assert!(
                bundle_files.contains(&name.as_ref()),
                "{scenario}/{file} is no bundle file"
            );
            let expected: Vec<u8> = fixtures.iter().flat_map(|f| fixture(f)).collect();
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
    devices: Result<VerbsDevices, String>,
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
    fn capture_for(&self, command: HostCommand, operand: &str) -> Result<String, CaptureError> {
        self.commands.capture_for(command, operand)
    }
    fn read_file(&self, path: &str) -> std::io::Result<String> {
        self.commands.read_file(path)
    }
    fn read_file_head(&self, path: &str, max_bytes: usize) -> std::io::Result<String> {
        self.commands.read_file_head(path, max_bytes)
    }
    fn list_dir(&self, path: &str) -> std::io::Result<Vec<String>> {
        self.commands.list_dir(path)
    }
    fn describe(&self) -> String {
        "live".to_owned()
    }
    fn rdma_devices(&self, _: OsKind) -> Option<Result<VerbsDevices, String>> {
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
            active_mtu: Some(4096),
            max_mtu: Some(4096),
            gids: vec![(1, "::ffff:10.254.0.1".parse().expect("gid"))],
        }],
    };
    let source = WithVerbs {
        commands: ReplaySource::open(&dir).expect("scenario"),
        devices: Ok(VerbsDevices {
            devices: vec![active.clone()],
            unknown: Vec::new(),
        }),
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

    // A library without the optional calls: its devices are kept (no
    // fallback to the tools), the GUID unknown, and the blind spots say so.
    let lacking = "/usr/lib/librdma.dylib: no ibv_get_device_guid; node GUIDs unknown";
    let source = WithVerbs {
        commands: ReplaySource::open(&dir).expect("scenario"),
        devices: Ok(VerbsDevices {
            devices: vec![RdmaDevice {
                node_guid: String::new(),
                ..active
            }],
            unknown: vec![lacking.to_owned()],
        }),
    };
    let facts = macos::collect(&source);
    assert!(
        facts.blind_spots.contains(&lacking.to_owned()),
        "{:?}",
        facts.blind_spots
    );
    let port = facts
        .ports
        .iter()
        .find(|p| p.rdma_device == "rdma_en6")
        .expect("en6");
    assert_eq!(port.rdma_node_guid, "", "unknown, not guessed");
    assert_eq!(
        port.rdma.as_ref().expect("rdma").state,
        RdmaPortState::Active,
        "still from verbs"
    );

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

/// The facts of a bundle directory, as `meshctl doctor --from` reads one.
fn replay_dir(dir: &Path) -> NodeFacts {
    bundle::replay_facts(dir).expect("bundle directory")
}

/// What `meshctl doctor --from` gives for a scenario: one bundle, or a
/// `mesh-*` directory with a bundle per node.
fn doctor(scenario: &str) -> Diagnosis {
    doctor_dir(&Path::new(SCENARIOS).join(scenario))
}

fn doctor_dir(dir: &Path) -> Diagnosis {
    let mut nodes: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("scenario")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    nodes.sort();
    let facts: BTreeMap<NodeId, NodeFacts> = if nodes.is_empty() {
        BTreeMap::from([(id("node"), replay_dir(dir))])
    } else {
        nodes
            .iter()
            .map(|node| {
                let name = node.file_name().expect("name").to_string_lossy();
                (id(&name), replay_dir(node))
            })
            .collect()
    };
    diagnose(&facts, &ModelTable::builtin())
}

fn result<'d>(diagnosis: &'d Diagnosis, name: &str, node: Option<&str>) -> &'d CheckResult {
    diagnosis
        .all_checks()
        .find(|r| r.name == name && r.node.as_ref().map(NodeId::as_str) == node)
        .unwrap_or_else(|| panic!("no {name} on {node:?}"))
}

fn evidence_has(result: &CheckResult, text: &str) -> bool {
    result.evidence.iter().any(|e| e.contains(text))
}

#[test]
fn a_bundle_of_ibv_devices_alone_is_a_mac_with_six_rdma_ports() {
    let dir = Path::new(SCENARIOS).join("studio-m3-ultra-ibv-devices-only");
    assert_eq!(
        bundle::os_of(&dir),
        OsKind::Macos,
        "rdma_en devices name macOS"
    );
    let facts = replay_dir(&dir);
    assert_eq!(facts.os, OsKind::Macos);
    let devices: Vec<(&str, &str, &str)> = facts
        .ports
        .iter()
        .map(|p| {
            (
                p.iface.as_str(),
                p.rdma_device.as_str(),
                p.rdma_node_guid.as_str(),
            )
        })
        .collect();
    assert_eq!(
        devices,
        [
            ("en2", "rdma_en2", "8096a9d9edbaac05"),
            ("en3", "rdma_en3", "8196a9d9edbaac05"),
            ("en5", "rdma_en5", "8396a9d9edbaac05"),
            ("en4", "rdma_en4", "8296a9d9edbaac05"),
            ("en6", "rdma_en6", "8496a9d9edbaac05"),
            ("en7", "rdma_en7", "8596a9d9edbaac05"),
        ]
    );
    assert!(facts.rdma_devices_read && !facts.ports_complete);
    assert!(
        facts
            .blind_spots
            .iter()
            .all(|s| !s.contains("platform layer")),
        "{:?}",
        facts.blind_spots
    );
    let doctor = doctor("studio-m3-ultra-ibv-devices-only");
    let rdma = result(&doctor, "rdma_enabled", Some("node"));
    assert_eq!(rdma.status, CheckStatus::Skipped, "{rdma:?}");
    assert!(
        evidence_has(
            rdma,
            "RDMA devices: rdma_en2, rdma_en3, rdma_en5, rdma_en4, rdma_en6, rdma_en7, but whether this Mac has Thunderbolt 5 ports is unknown"
        ),
        "{rdma:?}"
    );
}

#[test]
fn a_bundle_naming_no_os_does_not_name_the_os_reading_it() {
    let empty = tempfile::tempdir().expect("tempdir");
    let facts = replay_dir(empty.path());
    assert_eq!(facts.os, OsKind::Other);
    assert!(
        !facts.blind_spots[0].contains(std::env::consts::OS),
        "{:?}",
        facts.blind_spots
    );
}

#[test]
fn bridge0_without_the_service_state_or_the_thunderbolt_report_is_skipped() {
    for scenario in [
        "intel-mac-bridge0-no-service-state",
        "intel-mac-bridge0-inactive-vm-bridge100",
    ] {
        let doctor = doctor(scenario);
        let bridge = result(&doctor, "thunderbolt_bridge_inactive", Some("node"));
        assert_eq!(
            bridge.status,
            CheckStatus::Skipped,
            "{scenario}: {bridge:?}"
        );
        assert!(
            evidence_has(
                bridge,
                "is up (no member has link now); whether en1, en2, en3, en4 are cabled to a Mac is unknown"
            ),
            "{scenario}: {bridge:?}"
        );
        assert!(
            evidence_has(
                bridge,
                "bridge100: whether its members en10 are Thunderbolt ports is unknown"
            ),
            "{scenario}: {bridge:?}"
        );
    }
}

/// The TN3205 Mac, and the same after `sudo ifconfig bridge0 down`: XNU
/// clears UP and RUNNING and keeps `status: active` while a member has
/// link (derived here from the captured stanza by those rules; no capture
/// of a downed bridge exists).
#[test]
fn a_bridge_taken_down_passes_although_its_status_still_says_active() {
    let up = doctor("mac-mini-m4-pro-tn3205-bridge-active");
    let bridge = result(&up, "thunderbolt_bridge_inactive", Some("node"));
    assert_eq!(bridge.status, CheckStatus::Fail, "{bridge:?}");
    assert!(
        evidence_has(bridge, "is up and a member has link"),
        "{bridge:?}"
    );

    let down = tempfile::tempdir().expect("tempdir");
    let scenario = Path::new(SCENARIOS).join("mac-mini-m4-pro-tn3205-bridge-active");
    for file in files_below(&scenario) {
        let text = std::fs::read_to_string(scenario.join(&file)).expect("file");
        let text = text.replace(
            "bridge0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST>",
            "bridge0: flags=8822<BROADCAST,SMART,SIMPLEX,MULTICAST>",
        );
        std::fs::write(down.path().join(&file), text).expect("write");
    }
    let down = doctor_dir(down.path());
    let bridge = result(&down, "thunderbolt_bridge_inactive", Some("node"));
    assert_eq!(bridge.status, CheckStatus::Pass, "{bridge:?}");
    assert!(
        evidence_has(
            bridge,
            "is down (no UP/RUNNING): it forwards nothing (its status says active"
        ) && evidence_has(bridge, "its service is enabled"),
        "{bridge:?}"
    );
}

#[test]
fn without_ifconfig_the_addresses_are_unknown_not_missing() {
    let doctor = doctor("macbook-m5-max-rdma-enabled-ports-down");
    let addressed = result(&doctor, "link_addressed", Some("node"));
    assert_eq!(addressed.status, CheckStatus::Skipped, "{addressed:?}");
    assert!(
        evidence_has(
            addressed,
            "Thunderbolt 2 (en6): the addresses of en6 are unknown"
        ),
        "{addressed:?}"
    );
    assert!(!evidence_has(addressed, "no IPv4 address"));
}

#[test]
fn rdma_devices_on_thunderbolt_4_ports_are_no_pass() {
    let doctor = doctor("tb4-mac-rdma-devices-on-40g-ports");
    let rdma = result(&doctor, "rdma_enabled", Some("node"));
    assert_eq!(rdma.status, CheckStatus::Fail, "{rdma:?}");
    assert!(
        evidence_has(
            rdma,
            "RDMA devices: rdma_en2, rdma_en3, rdma_en4, but every Thunderbolt port is Thunderbolt 4 (Thunderbolt 3 (up to 40 Gb/s))"
        ),
        "{rdma:?}"
    );
    assert!(rdma.fix.contains("TN3205"), "{rdma:?}");
    // The same devices with nothing known of the ports: unknown, not pass.
    let patched = doctor_dir(&Path::new(SCENARIOS).join("tb4-mac-patched-one-port-active-40g"));
    let rdma = result(&patched, "rdma_enabled", Some("node"));
    assert_eq!(rdma.status, CheckStatus::Skipped, "{rdma:?}");
}

#[test]
fn a_peer_whose_services_are_not_listed_has_an_unknown_rdma_state() {
    let facts = replay("peer-behind-hub-services-unlisted");
    assert_eq!(
        peers(&facts),
        [Some(("F74D8F9B-DCDF-40D4-A428-3A3674BCB3F4", "", None))]
    );
    assert_eq!(facts.ports[0].linked, Some(true));
}

#[test]
fn a_mac_behind_a_dock_is_told_to_cable_directly_not_to_replace_a_cable() {
    // exo's hub capture as a Thunderbolt 3 dock between two Thunderbolt 5
    // Macs negotiates it: 40 Gb/s, which the dock sets.
    let mut facts = replay("peer-behind-hub-services-unlisted");
    facts.ports[0].negotiated_speed_bps = 40 * GBPS;
    let doctor = diagnose(
        &BTreeMap::from([(id("node"), facts)]),
        &ModelTable::builtin(),
    );
    let speed = result(&doctor, "link_speed", Some("node"));
    assert_eq!(speed.status, CheckStatus::Fail, "{speed:?}");
    assert!(
        evidence_has(
            speed,
            "through iVANKY Fusiondock Ultra between the two Macs"
        ),
        "{speed:?}"
    );
    assert!(
        speed.fix.starts_with("connect ")
            && speed
                .fix
                .contains("directly, not through iVANKY Fusiondock Ultra"),
        "{speed:?}"
    );
    assert!(!speed.fix.contains("replace the cable"), "{speed:?}");
}

#[test]
fn the_two_ends_of_a_cable_fill_in_each_other() {
    let doctor = doctor("mesh-m5-max-pair");
    assert_eq!(doctor.cables.len(), 1);
    let cable = &doctor.cables[0];
    assert!(cable.discovered);
    assert_eq!(
        (
            cable.a.port.as_str(),
            cable.b.port.as_str(),
            cable.speed_bps
        ),
        ("Thunderbolt 2", "Thunderbolt 2", 80 * GBPS)
    );
    assert_eq!(
        result(&doctor, "full_mesh_cabled", None).status,
        CheckStatus::Pass
    );
    // rdma_ctl was not captured on rdma-off; rdma-on sees it offer no RDMA
    // service, which a Mac does only with RDMA off.
    let rdma = result(&doctor, "rdma_enabled", Some("rdma-off"));
    assert_eq!(rdma.status, CheckStatus::Fail, "{rdma:?}");
    assert_eq!(
        rdma.evidence[0],
        "rdma-on/Thunderbolt 2 sees this Mac not offer the RDMA service (rdma_ctl status not read): RDMA is disabled"
    );
    // Neither captured hw.model; each sees the other as Mac17,6.
    for node in ["rdma-off", "rdma-on"] {
        let usable = result(&doctor, "port_usable", Some(node));
        assert!(
            evidence_has(usable, "m5-max-macbook-pro (as rdma-"),
            "{node}: {usable:?}"
        );
    }
    let down = result(&doctor, "rdma_port_active", Some("rdma-on"));
    assert!(
        down.fix.contains("on the peer MacBook Pro (Mac17,6)"),
        "{down:?}"
    );
    let views = result(&doctor, "peer_views_agree", None);
    assert_eq!(views.status, CheckStatus::Skipped, "{views:?}");
    assert!(
        evidence_has(
            views,
            "rdma-off/Thunderbolt 2 sees rdma-on's RDMA state (by the RDMA service it offers) as enabled, as its own rdma_ctl says"
        ),
        "{views:?}"
    );
    assert!(
        evidence_has(
            views,
            "rdma-on/Thunderbolt 2 sees rdma-off's model as Mac17,6; its own hw.model was not captured"
        ),
        "{views:?}"
    );
}

#[test]
fn a_member_without_its_thunderbolt_report_is_no_missing_cable() {
    let doctor = doctor("mesh-m5-max-pair-one-profiler-missing");
    assert!(doctor.cables.is_empty());
    let cabled = result(&doctor, "full_mesh_cabled", None);
    assert_eq!(cabled.status, CheckStatus::Skipped, "{cabled:?}");
    assert!(
        evidence_has(
            cabled,
            "rdma-off/Thunderbolt 2 (en6) leads to MacBook Pro (Mac17,6) that matches no known port: possibly rdma-on"
        ),
        "{cabled:?}"
    );
    let peers = result(&doctor, "cable_peers_known", None);
    assert_eq!(peers.status, CheckStatus::Skipped, "{peers:?}");
    assert!(!evidence_has(peers, "not a member"), "{peers:?}");
    for check in doctor.all_checks() {
        for text in check.evidence.iter().chain(std::iter::once(&check.fix)) {
            assert!(
                !text.contains("rdma-on/ ") && !text.contains("rdma-off/ ") && !text.ends_with('/'),
                "a port without a name: {text}"
            );
            assert!(!text.ends_with(": no cable"), "{text}");
        }
    }
}

#[test]
fn interface_mtus_come_from_ifconfig_on_a_mac() {
    let dir = Path::new(SCENARIOS).join("intel-mac-bridge0-inactive-vm-bridge100");
    let source = ReplaySource::open(&dir).expect("scenario");
    let mtus = meshd_platform::interface_mtus(&source, OsKind::Macos);
    assert_eq!(mtus.get("lo0"), Some(&16384));
    assert_eq!(mtus.get("en2"), Some(&1500));
    assert_eq!(mtus.get("p2p0"), Some(&2304));
    assert_eq!(mtus.get("bridge0"), Some(&1500));
    // Without an ifconfig capture every MTU is unknown, none guessed.
    let empty = tempfile::tempdir().expect("tempdir");
    let source = ReplaySource::open(empty.path()).expect("empty bundle");
    assert!(meshd_platform::interface_mtus(&source, OsKind::Macos).is_empty());
}
