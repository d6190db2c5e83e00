use std::io::Write;
use std::path::Path;
use std::time::Duration;

use super::*;
use meshd_domain::facts::OsKind;
use meshd_domain::fixtures::id;

const HOST: &str = "studio-1.local";
const EXAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../meshd.example.toml"
));

/// What a node with peers needs and most tests do not care about, appended
/// after the test's own lines so that their line numbers stay.
const MESH_TAIL: &str = "\n[listen]\nmesh = \"10.255.255.1:7420\"\n[tls]\ninsecure = true\n";

/// `src` with [`MESH_TAIL`] when it has peers and says nothing about
/// listeners or TLS.
fn with_mesh_tail(src: &str) -> String {
    let needs_tail =
        src.contains("[[peers]]") && !src.contains("[listen]") && !src.contains("[tls]");
    let tail = if needs_tail { MESH_TAIL } else { "" };
    format!("{src}{tail}")
}

fn parse(src: &str) -> Result<Config, ConfigError> {
    Config::parse(&with_mesh_tail(src), "meshd.toml", HOST)
}

fn diagnostics(src: &str) -> Vec<Diagnostic> {
    match parse(src) {
        Ok(config) => panic!("expected an error for:\n{src}\ngot {config:?}"),
        Err(e) => e.diagnostics(),
    }
}

/// The one-line rendering of every diagnostic, which is what operators see.
fn lines(src: &str) -> Vec<String> {
    diagnostics(src).iter().map(ToString::to_string).collect()
}

/// Asserts that `src` is refused with a problem at `key` whose message
/// contains `fragment`.
#[track_caller]
fn assert_problem(src: &str, key: &str, fragment: &str) {
    let ds = diagnostics(src);
    assert!(
        ds.iter()
            .any(|d| d.key.as_deref() == Some(key) && d.message.contains(fragment)),
        "no problem at {key} containing {fragment:?} for:\n{src}\ngot: {ds:#?}"
    );
}

const TWO_PEERS: &str = r#"
[[peers]]
id = "studio-2"
address = "10.0.0.2:7420"

[[peers]]
id = "studio-3"
address = "10.0.0.3:7420"
"#;

#[test]
fn example_parses_validates_and_shows_the_defaults() {
    let config = Config::parse(EXAMPLE, "meshd.example.toml", "other-host").unwrap();
    assert_eq!(config.node.id, id("studio-1"));
    assert_eq!(
        config.members(),
        vec![id("studio-1"), id("studio-2"), id("studio-3")]
    );
    assert_eq!(config.links.len(), 2);
    assert_eq!(config.links[0].peer, id("studio-2"));
    assert_eq!(config.links[0].local_iface.as_deref(), Some("en2"));
    assert_eq!(config.links[1].expected_speed_gbps, Some(80));
    assert_eq!(
        (config.links[0].local_port, config.links[0].peer_port),
        (None, None)
    );
    // The commented-out link ports are valid as written.
    let ported = EXAMPLE
        .replace("# local_port = ", "local_port = ")
        .replace("# peer_port = ", "peer_port = ");
    let ported = Config::parse(&ported, "meshd.example.toml", "other-host").unwrap();
    assert_eq!(ported.links[0].local_port, Some(DEFAULT_PROBE_PORT));
    assert_eq!(ported.links[0].peer_port, Some(DEFAULT_PROBE_PORT));
    assert_eq!(
        config.peers[1].endpoint().unwrap().host,
        Host::Name("studio-3.local".into())
    );
    assert_eq!(
        config.alerting.alertmanagers,
        [AlertmanagerConfig::url("http://127.0.0.1:9093")]
    );
    // The example documents the defaults: it must not drift from them.
    assert_eq!(
        config.listen,
        ListenConfig {
            mesh: Some("10.0.0.1:7420".parse().unwrap()),
            ..ListenConfig::default()
        }
    );
    assert_eq!(config.tls.ca, Some(std::path::PathBuf::from("tls/ca.pem")));
    assert!(!config.tls.insecure);
    assert_eq!(config.probe, ProbeConfig::default());
    assert_eq!(config.report, ReportConfig::default());
    assert_eq!(config.thresholds, Thresholds::default());
    assert_eq!(
        config.alerting.resend_interval,
        AlertingConfig::default().resend_interval
    );
    assert_eq!(config.platform, PlatformConfig::default());
    assert_eq!(config.history, HistoryConfig::default());
    assert_eq!(config.links[0].rdma_device.as_deref(), Some("rdma_en2"));
}

#[test]
fn meshd_run_keeps_its_history_in_the_state_directory_unless_told() {
    let config = Config::embedded_default("h");
    assert_eq!(config.history.path, None, "the config alone names no file");
    let run = config
        .clone()
        .with_default_history_path(Some("/var/lib/meshd:/other"));
    assert_eq!(
        run.history.path,
        Some(std::path::PathBuf::from("/var/lib/meshd/history.redb"))
    );
    let named = Config::parse("[history]\npath = \"/h.redb\"\n", "meshd.toml", "h")
        .expect("fine")
        .with_default_history_path(Some("/var/lib/meshd"));
    assert_eq!(
        named.history.path,
        Some(std::path::PathBuf::from("/h.redb"))
    );
    let off = Config::parse("[history]\nenabled = false\n", "meshd.toml", "h")
        .expect("fine")
        .with_default_history_path(None);
    assert_eq!(off.history.path, None);
    assert!(default_history_path(None).ends_with("history.redb"));
}

#[test]
fn history_caps_outside_their_ranges_are_refused_by_key() {
    let err = Config::parse(
        "[history]\nmax_bytes = 1000\nmax_age = \"1m\"\n",
        "meshd.toml",
        "h",
    )
    .expect_err("refused")
    .to_string();
    assert!(err.contains("history.max_bytes"), "{err}");
    assert!(err.contains("history.max_age"), "{err}");
    let err = Config::parse("[history]\nkeep = 3\n", "meshd.toml", "h")
        .expect_err("an unknown key")
        .to_string();
    assert!(err.contains("keep"), "{err}");
    let config =
        Config::parse("[history]\npath = \"h/history.redb\"\n", "meshd.toml", "h").expect("fine");
    assert_eq!(
        config.history.path,
        Some(std::path::PathBuf::from("h/history.redb"))
    );
}

#[test]
fn every_default_offender_has_a_fix_of_its_own_and_the_example_lists_them() {
    use meshd_model::cpu::{GENERIC_OFFENDER_FIX, offender_fix};
    // Screen Sharing's invitation agent, besides its viewer and menu agents.
    assert!(DEFAULT_OFFENDERS.contains(&"SSInvitationAgent"));
    for name in DEFAULT_OFFENDERS {
        assert_ne!(offender_fix(name), GENERIC_OFFENDER_FIX, "{name}");
    }
    let config = Config::parse(EXAMPLE, "meshd.example.toml", "other-host").unwrap();
    assert_eq!(config.watch.cpu.offenders, DEFAULT_OFFENDERS);
}

#[test]
fn rdma_devices_default_to_the_macos_pairing() {
    let config = parse(&format!(
        "{TWO_PEERS}\n[[links]]\npeer = \"studio-2\"\nlocal_iface = \"en6\"\n\
         local_address = \"10.9.0.1\"\npeer_address = \"10.9.0.2\"\n"
    ))
    .unwrap();
    let link = &config.links[0];
    assert_eq!(
        link.rdma_device_on(OsKind::Macos).as_deref(),
        Some("rdma_en6")
    );
    assert_eq!(link.rdma_device_on(OsKind::Linux), None);
}

#[test]
fn platform_rules() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[platform]\nfacts_interval = \"1s\"",
            "platform.facts_interval",
            "too short; use 5s to 1h",
        ),
        (
            "[platform]\nreplay_dir = \"/nonexistent/meshd-bundle\"",
            "platform.replay_dir",
            "is not a directory",
        ),
        (
            "[[peers]]\nid = \"b\"\naddress = \"10.0.0.2:7420\"\n[[links]]\npeer = \"b\"\n\
             local_address = \"10.9.0.1\"\npeer_address = \"10.9.0.2\"\nrdma_device = \"rdma en2\"",
            "links[0].rdma_device",
            "not an RDMA device name",
        ),
    ];
    for (body, key, fragment) in cases {
        assert_problem(&format!("{body}\n"), key, fragment);
    }
}

#[test]
fn embedded_default_is_valid_single_node_mesh_on_documented_ports() {
    let config = Config::embedded_default(HOST);
    assert_eq!(config.validate(), vec![]);
    assert_eq!(config.node.id, id("studio-1"));
    assert_eq!(config.members(), vec![id("studio-1")]);
    assert_eq!(config.listen.grpc, "127.0.0.1:7420".parse().unwrap());
    assert_eq!(config.listen.metrics, "127.0.0.1:9420".parse().unwrap());
    assert_eq!(
        config.listen.mesh, None,
        "a node alone listens on loopback only"
    );
    assert_eq!(config.probe.port, 7421);
    assert_eq!(config.probe.interval, Duration::from_millis(100));
    assert_eq!(config.report.interval, Duration::from_secs(1));
    assert!(config.alerting.alertmanagers.is_empty());
}

#[test]
fn empty_file_is_the_embedded_default() {
    assert_eq!(parse("").unwrap(), Config::embedded_default(HOST));
    assert_eq!(
        parse("# nothing but a comment\n\n").unwrap(),
        Config::embedded_default(HOST)
    );
    assert_eq!(
        parse("[node]\n[probe]\n").unwrap(),
        Config::embedded_default(HOST)
    );
}

#[test]
fn configured_node_id_wins_over_host_name() {
    let config = parse("[node]\nid = \"rack-a.3\"\n").unwrap();
    assert_eq!(config.node.id, id("rack-a.3"));
    assert_eq!(
        lines("[node]\nid = \"a b\"\n"),
        [
            "meshd.toml:2: node.id: node id \"a b\" contains ' '; use only letters, digits, '.', '_' and '-'"
        ]
    );
}

#[test]
fn members_are_sorted() {
    let config = parse(&format!("[node]\nid = \"studio-9\"\n{TWO_PEERS}")).unwrap();
    assert_eq!(
        config.members(),
        vec![id("studio-2"), id("studio-3"), id("studio-9")]
    );
}

#[test]
fn unknown_keys_are_named_with_their_line() {
    assert_eq!(
        lines("[probe]\nport = 7421\nintervl = \"1s\"\n"),
        [
            "meshd.toml:3: probe.intervl: unknown key `intervl`, expected one of `interval`, \
             `payload_bytes`, `mtu_interval`, `mtu_payload_bytes`, `timeout`, `port`, `rdma`"
        ]
    );
    let ds = diagnostics("# c\n\n[nodes]\nid = \"x\"\n");
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].line, Some(3));
    assert_eq!(ds[0].key.as_deref(), Some("nodes"));
    assert!(ds[0].message.starts_with("unknown key `nodes`"));

    let ds = diagnostics(&format!("{TWO_PEERS}rdma = true\n"));
    assert_eq!(ds[0].line, Some(9));
    assert_eq!(ds[0].key.as_deref(), Some("peers[1].rdma"));

    let ds = diagnostics("peers = [\n  { id = \"b\", address = \"10.0.0.2:1\", port = 1 },\n]\n");
    assert_eq!(ds[0].line, Some(2));
    assert_eq!(ds[0].key.as_deref(), Some("peers[0].port"));
}

#[test]
fn wrong_types_name_the_key_and_line() {
    assert_eq!(
        lines("[probe]\ninterval = 5\n"),
        [
            "meshd.toml:2: probe.interval: invalid type: integer `5`, expected a duration \
             such as \"100ms\", \"1s\" or \"1m\""
        ]
    );
    assert_eq!(
        lines("[report]\n\nstale_after = \"5 parsecs\"\n"),
        [
            "meshd.toml:3: report.stale_after: invalid value: string \"5 parsecs\", expected a \
             duration such as \"100ms\", \"1s\" or \"1m\""
        ]
    );
    let ds = diagnostics("[alerting]\nalertmanagers = [\n  \"http://a:9093\",\n  5,\n]\n");
    assert_eq!(ds[0].line, Some(4));
    assert_eq!(ds[0].key.as_deref(), Some("alerting.alertmanagers[1]"));

    let ds = diagnostics("[probe]\nport = 70000\n");
    assert_eq!(
        (ds[0].line, ds[0].key.as_deref()),
        (Some(2), Some("probe.port"))
    );

    assert_eq!(
        lines("\nprobe = 3\n"),
        ["meshd.toml:2: probe: invalid type: integer `3`, expected a table"]
    );
    assert_eq!(
        lines("[probe]\nport = 1e3\n"),
        [
            "meshd.toml:2: probe.port: invalid type: floating point `1000.0`, expected an integer from 0 to 65535"
        ]
    );

    let ds = diagnostics("[listen]\ngrpc = \"localhost\"\n");
    assert_eq!(
        (ds[0].line, ds[0].key.as_deref()),
        (Some(2), Some("listen.grpc"))
    );
    assert!(ds[0].message.contains("use ip:port"), "{}", ds[0]);

    let src = format!(
        "{TWO_PEERS}\n[[links]]\npeer = \"studio-2\"\nlocal_address = \"169.254.1.1/30\"\npeer_address = \"169.254.1.2\"\n"
    );
    let ds = diagnostics(&src);
    assert_eq!(
        (ds[0].line, ds[0].key.as_deref()),
        (Some(12), Some("links[0].local_address"))
    );
}

#[test]
fn missing_required_keys_are_named() {
    assert_eq!(
        lines("[[peers]]\nid = \"b\"\n\n[[peers]]\nid = \"c\"\n"),
        [
            "meshd.toml:1: peers[0].address: required key is missing",
            "meshd.toml:4: peers[1].address: required key is missing"
        ]
    );
    assert_eq!(
        lines(&format!(
            "{TWO_PEERS}\n[[links]]\npeer = \"studio-2\"\nlocal_address = \"169.254.1.1\"\n"
        )),
        ["meshd.toml:10: links[0].peer_address: required key is missing"]
    );
}

#[test]
fn syntax_errors_name_the_line_on_one_line() {
    let ds = diagnostics("[probe]\ninterval = \"1s\n");
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].line, Some(2));
    assert_eq!(ds[0].key, None);
    assert!(!ds[0].to_string().contains('\n'));

    let ds = diagnostics("[probe]\nport = 1\nport = 2\n");
    assert_eq!(ds[0].line, Some(3));
    assert_eq!(ds[0].to_string(), "meshd.toml:3: duplicate key");
}

#[test]
fn duplicate_peer_id_names_both_lines() {
    let src = r#"[node]
id = "a"

[[peers]]
id = "b"
address = "10.0.0.2:7420"

[[peers]]
id = "b"
address = "10.0.0.3:7420"
"#;
    assert_eq!(
        lines(src),
        ["meshd.toml:9: peers[1].id: duplicate peer id \"b\" (first at line 5)"]
    );
}

#[test]
fn malformed_peer_addresses_name_key_and_line() {
    let src = r#"[[peers]]
id = "b"
address = "10.0.0.2"

[[peers]]
id = "c"
address = "10.0.0.3:99999"

[[peers]]
id = "d"
address = "fd00::4:7420"
"#;
    let ds = diagnostics(src);
    let got: Vec<_> = ds.iter().map(|d| (d.line, d.key.as_deref())).collect();
    assert_eq!(
        got,
        [
            (Some(3), Some("peers[0].address")),
            (Some(7), Some("peers[1].address")),
            (Some(11), Some("peers[2].address")),
        ]
    );
    assert_eq!(
        ds[0].to_string(),
        "meshd.toml:3: peers[0].address: \"10.0.0.2\" is not a valid address: the port is \
         missing; use host:port with an IPv4 address, [IPv6] or DNS name, e.g. \"10.0.0.2:7420\""
    );
    assert!(ds[1].message.contains("port 99999 is above 65535"));
    assert!(ds[2].message.contains("brackets"));
}

#[test]
fn mesh_rules() {
    // The node listed as its own peer, also when the id comes from the host name.
    assert_problem(
        "[node]\nid = \"a\"\n[[peers]]\nid = \"a\"\naddress = \"10.0.0.2:7420\"\n",
        "peers[0].id",
        "this node's own id",
    );
    assert_problem(
        "[[peers]]\nid = \"studio-1\"\naddress = \"10.0.0.2:7420\"\n",
        "peers[0].id",
        "this node's own id",
    );
    // Duplicate addresses, also when spelled differently.
    let src = "[[peers]]\nid = \"b\"\naddress = \"Studio-2.local:7420\"\n\
               [[peers]]\nid = \"c\"\naddress = \"studio-2.local:7420\"\n";
    assert_eq!(
        lines(src),
        [
            "meshd.toml:6: peers[1].address: duplicate peer address \"studio-2.local:7420\" (first at line 3)"
        ]
    );
    for bad in [
        "10.0.0.2:0",
        ":7420",
        "[fd00::2:7420",
        "studio_2:7420",
        "10.0.0.2:x",
    ] {
        assert_problem(
            &format!("[[peers]]\nid = \"b\"\naddress = \"{bad}\"\n"),
            "peers[0].address",
            "is not a valid address",
        );
    }
    assert!(parse("[[peers]]\nid = \"b\"\naddress = \"[fd00::2]:7420\"\n").is_ok());

    // listen.grpc == listen.metrics, with grpc left at its default.
    assert_eq!(
        lines("[listen]\nmetrics = \"0.0.0.0:7420\"\n"),
        [
            "meshd.toml:2: listen.metrics: 0.0.0.0:7420 is also listen.grpc; every listener \
             needs its own port (first at listen.grpc)"
        ]
    );

    // Mesh size: 256 members is fine, 257 is not.
    let peers = |n: usize| -> String {
        (0..n)
            .map(|i| {
                format!(
                    "[[peers]]\nid = \"p{i}\"\naddress = \"10.1.{}.{}:7420\"\n",
                    i / 250,
                    i % 250 + 1
                )
            })
            .collect()
    };
    assert!(parse(&peers(255)).is_ok());
    assert_eq!(
        lines(&peers(256)),
        [
            "meshd.toml:1: peers: the mesh has 257 members (this node and 256 peers); at most 256 are supported"
        ]
    );
}

#[test]
fn link_rules() {
    let link = |body: &str| format!("{TWO_PEERS}\n[[links]]\n{body}\n");
    let ok = "peer = \"studio-2\"\nlocal_address = \"169.254.1.1\"\npeer_address = \"169.254.1.2\"";
    assert!(parse(&link(ok)).is_ok());
    assert!(
        parse(&link(
            "peer = \"studio-2\"\nlocal_address = \"fd00::1\"\npeer_address = \"fd00::2\""
        ))
        .is_ok()
    );

    assert_eq!(
        lines(&link(
            "peer = \"studio-7\"\nlocal_address = \"169.254.1.1\"\npeer_address = \"169.254.1.2\""
        )),
        [
            "meshd.toml:11: links[0].peer: \"studio-7\" is not a configured peer; configured peers: studio-2, studio-3"
        ]
    );
    assert_problem(
        "[[links]]\npeer = \"x\"\nlocal_address = \"169.254.1.1\"\npeer_address = \"169.254.1.2\"\n",
        "links[0].peer",
        "there are no [[peers]]",
    );
    assert_problem(
        &link(
            "peer = \"studio-2\"\nlocal_address = \"169.254.1.1\"\npeer_address = \"169.254.1.1\"",
        ),
        "links[0].peer_address",
        "169.254.1.1:7421 is also this end's own responder",
    );
    assert_problem(
        &link("peer = \"studio-2\"\nlocal_address = \"169.254.1.1\"\npeer_address = \"fe80::2\""),
        "links[0].peer_address",
        "fe80::2 is IPv6 but local_address 169.254.1.1 is IPv4",
    );
    assert_problem(
        &link("peer = \"studio-2\"\nlocal_address = \"0.0.0.0\"\npeer_address = \"224.0.0.1\""),
        "links[0].local_address",
        "cannot be a cable end",
    );
    assert_problem(
        &link(
            "peer = \"studio-2\"\nlocal_address = \"169.254.1.1\"\npeer_address = \"255.255.255.255\"",
        ),
        "links[0].peer_address",
        "cannot be a cable end",
    );
    assert_problem(
        &link(&format!("{ok}\nlocal_iface = \"en 2\"")),
        "links[0].local_iface",
        "is not an interface name",
    );
    assert_problem(
        &link(&format!("{ok}\nlocal_iface = \"\"")),
        "links[0].local_iface",
        "is not an interface name",
    );
    for speed in [0, 1001] {
        assert_problem(
            &link(&format!("{ok}\nexpected_speed_gbps = {speed}")),
            "links[0].expected_speed_gbps",
            "use 1 to 1000",
        );
    }
    let two = format!(
        "{TWO_PEERS}\n[[links]]\n{ok}\n\n[[links]]\npeer = \"studio-3\"\nlocal_address = \"169.254.1.1\"\npeer_address = \"169.254.2.2\"\n"
    );
    assert_eq!(
        lines(&two),
        [
            "meshd.toml:17: links[1].local_address: links[1] (to studio-3) and links[0] (to \
             studio-2) both answer probes on 169.254.1.1:7421; give each cable its own \
             local_address or local_port (first at line 12)"
        ]
    );
}

#[test]
fn link_ports_default_to_the_probe_port_and_are_checked() {
    let link = |body: &str| format!("{TWO_PEERS}\n[probe]\nport = 7500\n\n[[links]]\n{body}\n");
    let ends = "local_address = \"169.254.1.1\"\npeer_address = \"169.254.1.2\"";
    let config = parse(&link(&format!("peer = \"studio-2\"\n{ends}"))).expect("valid");
    let only = &config.links[0];
    assert_eq!((only.local_port, only.peer_port), (None, None));
    assert_eq!(
        only.local_probe_addr(&config.probe).to_string(),
        "169.254.1.1:7500"
    );
    assert_eq!(
        only.peer_probe_addr(&config.probe).to_string(),
        "169.254.1.2:7500"
    );

    let config = parse(&link(&format!(
        "peer = \"studio-2\"\n{ends}\nlocal_port = 8001\npeer_port = 65535"
    )))
    .expect("valid");
    let own = &config.links[0];
    assert_eq!(
        own.local_probe_addr(&config.probe).to_string(),
        "169.254.1.1:8001"
    );
    assert_eq!(
        own.peer_probe_addr(&config.probe).to_string(),
        "169.254.1.2:65535"
    );

    for field in ["local_port", "peer_port"] {
        assert_problem(
            &link(&format!("peer = \"studio-2\"\n{ends}\n{field} = 0")),
            &format!("links[0].{field}"),
            "0 is not a usable port; use 1 to 65535, or leave it out for probe.port (7500)",
        );
    }
    assert_eq!(
        lines(&link(&format!(
            "peer = \"studio-2\"\n{ends}\npeer_port = 65536"
        ))),
        [
            "meshd.toml:17: links[0].peer_port: invalid value: integer `65536`, expected an integer from 0 to 65535"
        ]
    );

    // Both ends on one host: fine with two ports, refused with one.
    let looped = "peer = \"studio-2\"\nlocal_address = \"127.0.0.1\"\npeer_address = \"127.0.0.1\"";
    assert!(parse(&link(&format!("{looped}\npeer_port = 7501"))).is_ok());
    assert_problem(
        &link(&format!("{looped}\nlocal_port = 7501\npeer_port = 7501")),
        "links[0].peer_port",
        "127.0.0.1:7501 is also this end's own responder (local_address and local_port); \
         the two ends of a cable need different addresses or ports",
    );

    // Two cables on one address need their own ports; a port given
    // explicitly collides with the default one too.
    let second = |extra: &str| {
        link(&format!(
            "peer = \"studio-2\"\n{ends}\n\n[[links]]\npeer = \"studio-3\"\n\
             local_address = \"169.254.1.1\"\npeer_address = \"169.254.2.2\"\n{extra}"
        ))
    };
    assert!(parse(&second("local_port = 7501")).is_ok());
    assert_eq!(
        lines(&second("local_port = 7500")),
        [
            "meshd.toml:22: links[1].local_port: links[1] (to studio-3) and links[0] (to \
             studio-2) both answer probes on 169.254.1.1:7500; give each cable its own \
             local_address or local_port (first at line 15)"
        ]
    );
}

#[test]
fn duration_rules() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[thresholds]\ndown_after = \"10ms\"",
            "thresholds.down_after",
            "10ms is too short; use 50ms to 1m",
        ),
        (
            "[probe]\ninterval = \"1s\"\n[thresholds]\ndown_after = \"1500ms\"",
            "thresholds.down_after",
            "shorter than 2 × probe.interval (2s)",
        ),
        (
            "[thresholds]\nrtt_min_increase = \"11s\"",
            "thresholds.rtt_min_increase",
            "11s is too long; use 0s to 10s",
        ),
        (
            "[probe]\ninterval = \"0s\"",
            "probe.interval",
            "0s is too short; use 10ms to 10s",
        ),
        (
            "[probe]\ninterval = \"11s\"",
            "probe.interval",
            "11s is too long; use 10ms to 10s",
        ),
        (
            "[probe]\ntimeout = \"0s\"",
            "probe.timeout",
            "use 1ms to 10s",
        ),
        (
            "[probe]\ntimeout = \"1m\"",
            "probe.timeout",
            "1m is too long",
        ),
        (
            "[probe]\nmtu_interval = \"50ms\"",
            "probe.mtu_interval",
            "use 100ms to 1m",
        ),
        (
            "[probe]\nmtu_interval = \"61s\"",
            "probe.mtu_interval",
            "1m 1s is too long",
        ),
        (
            "[report]\ninterval = \"10ms\"",
            "report.interval",
            "use 50ms to 10s",
        ),
        (
            "[report]\ninterval = \"11s\"\nstale_after = \"30s\"",
            "report.interval",
            "too long",
        ),
        (
            "[report]\ninterval = \"200ms\"\nstale_after = \"300ms\"",
            "report.stale_after",
            "300ms is too short; use 2 × report.interval (400ms) to 1m",
        ),
        (
            "[report]\nstale_after = \"61s\"",
            "report.stale_after",
            "too long",
        ),
        ("[report]\ninterval = \"2s\"", "report.stale_after", "(4s)"),
        (
            "[thresholds]\nflap_window = \"500ms\"",
            "thresholds.flap_window",
            "use 1s to 1h",
        ),
        (
            "[thresholds]\nflap_window = \"2h\"",
            "thresholds.flap_window",
            "too long",
        ),
        (
            "[alerting]\nresend_interval = \"0s\"",
            "alerting.resend_interval",
            "use 1s to 10m",
        ),
        (
            "[alerting]\nresend_interval = \"11m\"",
            "alerting.resend_interval",
            "too long",
        ),
    ];
    for (src, key, fragment) in cases {
        assert_problem(src, key, fragment);
    }
    assert_eq!(
        lines("[probe]\ninterval = \"0s\"\n"),
        ["meshd.toml:2: probe.interval: 0s is too short; use 10ms to 10s"]
    );
    // A rule about a key left at its default points at the section.
    assert_eq!(
        diagnostics("[report]\ninterval = \"2s\"\n")[0].line,
        Some(1)
    );
    // Bounds are inclusive.
    assert!(
        parse(
            "[probe]\ninterval = \"10ms\"\ntimeout = \"10s\"\n[thresholds]\ndown_after = \"10s\"\n"
        )
        .is_ok()
    );
    assert!(parse("[report]\ninterval = \"500ms\"\nstale_after = \"1s\"\n").is_ok());
}

#[test]
fn probe_size_and_port_rules() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[probe]\npayload_bytes = 31",
            "probe.payload_bytes",
            "use 32 (the probe header) to 1472",
        ),
        (
            "[probe]\npayload_bytes = 1473",
            "probe.payload_bytes",
            "out of range",
        ),
        (
            "[probe]\nmtu_payload_bytes = 63",
            "probe.mtu_payload_bytes",
            "use probe.payload_bytes (64) to 65507",
        ),
        (
            "[probe]\nmtu_payload_bytes = 65508",
            "probe.mtu_payload_bytes",
            "out of range",
        ),
        ("[probe]\nport = 0", "probe.port", "0 is not a usable port"),
    ];
    for (src, key, fragment) in cases {
        assert_problem(src, key, fragment);
    }
    assert!(parse("[probe]\npayload_bytes = 32\nmtu_payload_bytes = 65507\n").is_ok());
    let ds = diagnostics("[probe]\npayload_bytes = -1\n");
    assert_eq!(ds[0].key.as_deref(), Some("probe.payload_bytes"));
}

#[test]
fn threshold_rules() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "loss_degraded = 0.0",
            "thresholds.loss_degraded",
            "use a ratio above 0 and at most 1",
        ),
        (
            "loss_degraded = nan",
            "thresholds.loss_degraded",
            "NaN is out of range",
        ),
        (
            "loss_down = 1.5",
            "thresholds.loss_down",
            "1.5 is out of range",
        ),
        ("loss_down = -0.1", "thresholds.loss_down", "out of range"),
        (
            "loss_degraded = 0.5\nloss_down = 0.5",
            "thresholds.loss_degraded",
            "is not below thresholds.loss_down (0.5)",
        ),
        (
            "loss_degraded = 0.6",
            "thresholds.loss_degraded",
            "a link must be degraded before it is down",
        ),
        (
            "rtt_p99_factor = 0.5",
            "thresholds.rtt_p99_factor",
            "use 1.0 to 1000.0",
        ),
        (
            "rtt_p99_factor = 1000.5",
            "thresholds.rtt_p99_factor",
            "out of range",
        ),
        ("rtt_p99_factor = nan", "thresholds.rtt_p99_factor", "NaN"),
        (
            "rtt_p99_factor = inf",
            "thresholds.rtt_p99_factor",
            "inf is out of range",
        ),
        (
            "flap_changes = 1",
            "thresholds.flap_changes",
            "use 2 to 100",
        ),
        (
            "flap_changes = 101",
            "thresholds.flap_changes",
            "out of range",
        ),
        (
            "cpu_saturated = 0.0",
            "thresholds.cpu_saturated",
            "out of range",
        ),
        (
            "cpu_saturated = 1.01",
            "thresholds.cpu_saturated",
            "out of range",
        ),
        ("cpu_saturated = nan", "thresholds.cpu_saturated", "NaN"),
    ];
    for (body, key, fragment) in cases {
        assert_problem(&format!("[thresholds]\n{body}\n"), key, fragment);
    }
    assert!(parse("[thresholds]\nloss_degraded = 0.99\nloss_down = 1\nrtt_p99_factor = 1\ncpu_saturated = 1\nflap_changes = 100\n").is_ok());
}

#[test]
fn watch_rules() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[watch.bridge]\ninterval = \"10ms\"",
            "watch.bridge.interval",
            "too short; use 100ms to 1m",
        ),
        (
            "[watch.bridge]\nstorm_packets_per_second = 0",
            "watch.bridge.storm_packets_per_second",
            "use at least 1",
        ),
        (
            "[watch.bridge]\nstorm_window = \"2h\"",
            "watch.bridge.storm_window",
            "too long",
        ),
        (
            "[watch.bridge]\nmesh_ifaces = [\"en 2\"]",
            "watch.bridge.mesh_ifaces[0]",
            "not an interface name",
        ),
        (
            "[watch.cpu]\nspike_ratio = 1.5",
            "watch.cpu.spike_ratio",
            "out of range",
        ),
        ("[watch.cpu]\ntop = 0", "watch.cpu.top", "use 1 to 20"),
        (
            "[watch.cpu]\noffenders = [\"sharingd\", \" \"]",
            "watch.cpu.offenders[1]",
            "empty name",
        ),
        (
            "[watch.jobs]\nbusy_cores = 0.0",
            "watch.jobs.busy_cores",
            "out of range",
        ),
        (
            "[watch.jobs]\nwindow = \"0s\"",
            "watch.jobs.window",
            "too short",
        ),
    ];
    for (body, key, fragment) in cases {
        assert_problem(&format!("{body}\n"), key, fragment);
    }
    assert!(
        parse("[watch.cpu]\nunknown = 1\n").is_err(),
        "unknown keys are refused here too"
    );
}

#[test]
fn alerting_rules() {
    let src = r#"[alerting]
alertmanagers = [
  "http://am-1:9093",
  "ftp://am-2",
  "http://",
  "http://AM-1:9093/",
  "http://am-3:0",
]
"#;
    let got = lines(src);
    assert_eq!(got.len(), 4, "{got:#?}");
    assert!(
        got[0].starts_with(
            "meshd.toml:4: alerting.alertmanagers[1]: \"ftp://am-2\" is not a valid Alertmanager \
             URL: its scheme is \"ftp\"; use http:// or https://"
        ),
        "{}",
        got[0]
    );
    assert!(
        got[1].starts_with(
            "meshd.toml:5: alerting.alertmanagers[2]: \"http://\" is not a valid Alertmanager URL:"
        ),
        "{}",
        got[1]
    );
    assert_eq!(
        got[2],
        "meshd.toml:6: alerting.alertmanagers[3]: duplicate Alertmanager \"http://AM-1:9093/\" (first at line 3)"
    );
    assert!(got[3].contains("port 0 cannot be reached"), "{}", got[3]);
}

#[test]
fn all_problems_are_reported_sorted_by_line() {
    let src = r#"[node]
id = "a"

[[peers]]
id = "a"
address = "10.0.0.2"

[probe]
interval = "0s"
port = 0

[thresholds]
loss_degraded = 0.9
loss_down = 0.5
"#;
    let err = parse(src).unwrap_err();
    assert!(matches!(err, ConfigError::Invalid(_)));
    assert_eq!(
        err.to_string(),
        "meshd.toml:5: peers[0].id: \"a\" is this node's own id (node.id); list only the other members of the mesh\n\
         meshd.toml:6: peers[0].address: \"10.0.0.2\" is not a valid address: the port is missing; use host:port with an IPv4 address, [IPv6] or DNS name, e.g. \"10.0.0.2:7420\"\n\
         meshd.toml:9: probe.interval: 0s is too short; use 10ms to 10s\n\
         meshd.toml:10: probe.port: 0 is not a usable port; every node's probe responder needs a fixed port from 1 to 65535\n\
         meshd.toml:13: thresholds.loss_degraded: 0.9 is not below thresholds.loss_down (0.5); a link must be degraded before it is down"
    );
}

#[test]
fn validate_is_pure_and_works_without_a_file() {
    let mut config = Config::embedded_default(HOST);
    config.peers.push(PeerConfig {
        id: id("b"),
        address: "10.0.0.2:7420".into(),
    });
    config.peers.push(PeerConfig {
        id: id("b"),
        address: "10.0.0.3:7420".into(),
    });
    config.listen.mesh = Some("10.0.0.1:7420".parse().unwrap());
    config.tls.insecure = true;
    config.probe.interval = Duration::ZERO;
    let problems = config.validate();
    assert_eq!(
        problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "peers[1].id: duplicate peer id \"b\" (first at peers[0].id)",
            "probe.interval: 0s is too short; use 10ms to 10s",
        ]
    );
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let deep = format!("a = {}", "[".repeat(100_000));
    let deep_tables = format!("a = {}", "{ b = ".repeat(10_000));
    let inputs = [
        "\0",
        "[[[",
        "= =",
        "peers = 5",
        "[[peers]]\n[[peers]]\n",
        "node = { id = 7 }",
        "[probe]\ninterval = \"\"",
        "[probe]\ninterval = \"18446744073709551616s\"",
        "[probe]\ninterval = \"-1s\"",
        "[listen]\ngrpc = \"[::1]:\"",
        "links = [[]]",
        "\u{feff}[node]\nid = \"\"",
        "[probe]\nport = 1e3",
        "\"\\ud800\" = 1",
        "[alerting]\nalertmanagers = [\"http://\u{1F600}\"]",
        "[[peers]]\nid = \"b\"\naddress = \"[\u{1F600}]:1\"",
        deep.as_str(),
        deep_tables.as_str(),
    ];
    for input in inputs {
        let result = parse(input);
        assert!(result.is_err(), "{input:?} was accepted: {result:?}");
        for d in result.unwrap_err().diagnostics() {
            assert!(!d.to_string().contains('\n'), "{d}");
        }
    }
}

#[test]
fn load_reads_the_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meshd.toml");
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(EXAMPLE.as_bytes()).unwrap();
    let config = Config::load(&path, HOST).unwrap();
    assert_eq!(config.node.id, id("studio-1"));
    // Relative paths are from the file's directory, absolute ones stay.
    assert_eq!(config.tls.ca, Some(dir.path().join("tls/ca.pem")));
    std::fs::write(
        &path,
        "[tls]\ninsecure = false\nca = \"/etc/ca.pem\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
    )
    .unwrap();
    let config = Config::load(&path, HOST).unwrap();
    assert_eq!(config.tls.ca, Some(std::path::PathBuf::from("/etc/ca.pem")));
    assert_eq!(config.tls.key, Some(dir.path().join("k.pem")));

    std::fs::write(&path, "[probe]\ninterval = \"0s\"\n").unwrap();
    let err = Config::load(&path, HOST).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}:2: probe.interval: 0s is too short; use 10ms to 10s",
            path.display()
        )
    );

    let missing = dir.path().join("absent.toml");
    let err = Config::load(&missing, HOST).unwrap_err();
    assert!(matches!(err, ConfigError::Unreadable { .. }));
    assert!(err.to_string().starts_with(&format!(
        "{}: cannot read the config file: ",
        missing.display()
    )));
    assert_eq!(err.diagnostics()[0].line, None);
}

const ONE_PEER: &str = "[[peers]]\nid = \"b\"\naddress = \"10.0.0.2:7420\"\n";

#[test]
fn a_node_with_peers_needs_a_mesh_listener_and_certificates() {
    let ds = lines(&format!("[tls]\ninsecure = true\n{ONE_PEER}"));
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert!(
        ds[0].starts_with("meshd.toml: listen.mesh: a node with peers needs listen.mesh"),
        "{ds:?}"
    );

    let src = format!("[listen]\nmesh = \"10.0.0.1:7420\"\n{ONE_PEER}");
    let keys: Vec<_> = diagnostics(&src)
        .into_iter()
        .filter_map(|d| d.key)
        .collect();
    assert_eq!(keys, ["tls.ca", "tls.cert", "tls.key"]);
    assert_problem(&src, "tls.cert", "meshctl certs issue");

    // Half a set of files is refused even on a node alone.
    assert_problem("[tls]\nca = \"ca.pem\"\n", "tls.key", "required");
    // Certificates and plain TCP contradict each other.
    assert_eq!(
        lines("[tls]\ninsecure = true\ncert = \"c.pem\"\n"),
        [
            "meshd.toml:3: tls.cert: tls.insecure = true sends reports in the clear and would \
          ignore this file; remove one of the two (see tls.insecure at line 2)"
        ]
    );
    let ok = format!(
        "[listen]\nmesh = \"10.0.0.1:7420\"\n[tls]\nca = \"ca.pem\"\ncert = \"a.pem\"\nkey = \"a-key.pem\"\n{ONE_PEER}"
    );
    assert!(parse(&ok).is_ok(), "the files are read at start, not here");
}

#[test]
fn listeners_need_their_own_ports_and_peers_are_not_this_node() {
    // Every interface overlaps any address on the same port.
    assert_problem(
        "[listen]\nmesh = \"0.0.0.0:7420\"\n[tls]\ninsecure = true\n",
        "listen.mesh",
        "0.0.0.0:7420 is also listen.grpc",
    );
    assert!(parse("[listen]\nmesh = \"0.0.0.0:7430\"\n[tls]\ninsecure = true\n").is_ok());
    assert_problem(
        &format!("[listen]\nmesh = \"10.0.0.1:0\"\n[tls]\ninsecure = true\n{ONE_PEER}"),
        "listen.mesh",
        "port 0 would change at every start",
    );
    // A cable's report listener is TCP on its probe address and port.
    assert_problem(
        &format!(
            "[listen]\nmesh = \"0.0.0.0:7421\"\n[tls]\ninsecure = true\n{ONE_PEER}\
             [[links]]\npeer = \"b\"\nlocal_address = \"169.254.1.1\"\npeer_address = \"169.254.1.2\"\n"
        ),
        "listen.mesh",
        "overlaps links[0]'s report listener on 169.254.1.1:7421",
    );
    // A peer whose address is this node's own listener: a copy-paste slip.
    let ds = lines(
        "[listen]\nmesh = \"10.0.0.1:7420\"\n[tls]\ninsecure = true\n\
         [[peers]]\nid = \"b\"\naddress = \"10.0.0.1:7420\"\n",
    );
    assert_eq!(
        ds,
        [
            "meshd.toml:7: peers[0].address: \"10.0.0.1:7420\" is this node's own listener; give \
          the peer's address on the management network (see listen.mesh at line 2)"
        ]
    );
}

#[test]
fn timers_that_contradict_each_other_name_both_keys() {
    assert_eq!(
        lines("[probe]\ntimeout = \"1s\"\n[thresholds]\ndown_after = \"600ms\"\n"),
        [
            "meshd.toml:2: probe.timeout: 1s is longer than thresholds.down_after (600ms); a link \
          would be called down before any of its probes counted as lost (see \
          thresholds.down_after at line 4)"
        ]
    );
    assert_problem(
        "[probe]\ninterval = \"500ms\"\n[thresholds]\ndown_after = \"600ms\"\n",
        "thresholds.down_after",
        "(see probe.interval at line 2)",
    );
    assert_problem(
        "[thresholds]\nclock_skew = \"1ms\"\n",
        "thresholds.clock_skew",
        "use 10ms to 1h",
    );
}

#[test]
fn an_alertmanager_is_a_url_or_a_table_with_credentials_from_files() {
    let config = parse(
        r#"[alerting]
alertmanagers = [
  "http://am-1:9093",
  { url = "https://am-2:9093", ca_file = "/etc/meshd/am-ca.pem", bearer_token_file = "/etc/meshd/am.token" },
  { url = "https://am-3", basic_auth = { username = "meshd", password_file = "/etc/meshd/am.password" } },
]
"#,
    )
    .unwrap();
    let ams = &config.alerting.alertmanagers;
    assert_eq!(ams[0], AlertmanagerConfig::url("http://am-1:9093"));
    assert_eq!(
        ams[1].ca_file.as_deref(),
        Some(Path::new("/etc/meshd/am-ca.pem"))
    );
    assert_eq!(
        ams[1].bearer_token_file.as_deref(),
        Some(Path::new("/etc/meshd/am.token"))
    );
    assert_eq!(
        ams[2].basic_auth,
        Some(BasicAuth {
            username: "meshd".into(),
            password_file: "/etc/meshd/am.password".into()
        })
    );
}

#[test]
fn alertmanager_credentials_never_sit_in_the_url_and_files_are_absolute() {
    assert_problem(
        "[alerting]\nalertmanagers = [\"https://meshd:s3cret@am:9093\"]\n",
        "alerting.alertmanagers[0]",
        "carries a user name or password, which would be logged and exported",
    );
    assert_problem(
        "[alerting]\nalertmanagers = [{ url = \"https://am:9093\", bearer_token_file = \"am.token\" }]\n",
        "alerting.alertmanagers[0].bearer_token_file",
        "am.token is relative",
    );
    assert_problem(
        "[alerting]\nalertmanagers = [{ url = \"http://am:9093\", ca_file = \"/ca.pem\" }]\n",
        "alerting.alertmanagers[0].ca_file",
        "a CA file applies to https only",
    );
    assert_problem(
        "[alerting]\nalertmanagers = [{ url = \"https://am:9093\", bearer_token_file = \"/t\", \
         basic_auth = { username = \"u\", password_file = \"/p\" } }]\n",
        "alerting.alertmanagers[0]",
        "basic_auth and bearer_token_file both set",
    );
    let ds = diagnostics(
        "[alerting]\nalertmanagers = [{ url = \"https://am:9093\", password = \"x\" }]\n",
    );
    assert!(ds[0].message.contains("unknown key `password`"), "{ds:?}");
}

/// Loads `path` on another thread, failing the test if that takes more than
/// five seconds (a FIFO opened for a blocking read would never return).
fn load_within_5s(path: &std::path::Path) -> Result<Config, ConfigError> {
    let (done, result) = std::sync::mpsc::channel();
    let path = path.to_owned();
    std::thread::spawn(move || {
        let _ = done.send(Config::load(&path, HOST));
    });
    result
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("Config::load returns within 5 s")
}

#[test]
fn a_config_that_is_a_fifo_a_device_or_a_directory_fails_fast_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let zero = dir.path().join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let fifo = dir.path().join("fifo.toml");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for (path, named) in [
        (&zero, "is a character device, not a regular file"),
        (&fifo, "is a FIFO, not a regular file"),
        (&dir.path().to_owned(), "is a directory, not a regular file"),
    ] {
        let err = load_within_5s(path).unwrap_err();
        assert!(matches!(err, ConfigError::Unreadable { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            format!("{}: cannot read the config file: {named}", path.display())
        );
    }
}

#[test]
fn a_config_over_1_mib_is_refused_and_a_link_to_a_regular_file_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.toml");
    let mut text = String::from("[node]\nid = \"studio-1\"\n");
    text.push_str(&"# padding\n".repeat(200_000));
    std::fs::write(&big, &text).unwrap();
    let err = load_within_5s(&big).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: cannot read the config file: larger than {MAX_CONFIG_BYTES} bytes",
            big.display()
        )
    );

    let real = dir.path().join("releases-meshd.toml");
    std::fs::write(&real, "[node]\nid = \"studio-1\"\n").unwrap();
    let link = dir.path().join("meshd.toml");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(load_within_5s(&link).unwrap().node.id, id("studio-1"));
}

/// The config is validated for the OS of the node that reads it; macOS
/// sends no UDP payload above net.inet.udp.maxdgram (9216).
#[test]
fn the_largest_probe_depends_on_the_os() {
    let mut config = Config::embedded_default(HOST);
    config.probe.mtu_payload_bytes = 9216;
    assert_eq!(config.validate_for(OsKind::Macos), vec![]);
    config.probe.mtu_payload_bytes = 9217;
    let problems = config.validate_for(OsKind::Macos);
    assert_eq!(
        problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "probe.mtu_payload_bytes: 9217 is out of range on macos; use probe.payload_bytes (64) \
          to 9216 (the largest UDP payload macOS sends (net.inet.udp.maxdgram))"
        ]
    );
    assert_eq!(config.validate_for(OsKind::Linux), vec![]);
    config.probe.mtu_payload_bytes = 65507;
    assert_eq!(config.validate_for(OsKind::Linux), vec![]);
    config.probe.mtu_payload_bytes = 65508;
    assert_eq!(
        config.validate_for(OsKind::Linux)[0].to_string(),
        "probe.mtu_payload_bytes: 65508 is out of range on linux; use probe.payload_bytes (64) \
         to 65507 (the largest UDP payload)"
    );
}

/// The RDMA probe is off unless asked for; "idle" needs the kernel's
/// resource tracking, which macOS does not offer.
#[test]
fn the_rdma_probe_is_opt_in_and_idle_is_refused_where_it_cannot_work() {
    assert_eq!(
        Config::embedded_default(HOST).probe.rdma,
        RdmaProbeMode::Off
    );
    let always = parse("[probe]\nrdma = \"always\"\n").expect("always parses");
    assert_eq!(always.probe.rdma, RdmaProbeMode::Always);
    assert_eq!(always.validate_for(OsKind::Macos), vec![]);
    assert_eq!(always.validate_for(OsKind::Linux), vec![]);
    let idle = parse("[probe]\nrdma = \"idle\"\n").expect("idle parses");
    assert_eq!(idle.validate_for(OsKind::Linux), vec![]);
    let problems = idle.validate_for(OsKind::Macos);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .to_string()
            .starts_with("probe.rdma: \"idle\" cannot work on macOS"),
        "{}",
        problems[0]
    );
    assert_eq!(
        lines("[probe]\nrdma = \"sometimes\"\n").len(),
        1,
        "an unknown mode is one error"
    );
}

fn link_config(local: &str, peer: &str) -> String {
    format!(
        "{TWO_PEERS}\n[[links]]\npeer = \"studio-2\"\nlocal_iface = \"en2\"\n\
         local_address = \"{local}\"\npeer_address = \"{peer}\"\n"
    )
}

fn advice(src: &str, mtus: &[(&str, u32)]) -> Vec<String> {
    let mtus = mtus.iter().map(|(n, m)| ((*n).to_owned(), *m)).collect();
    Config::parse_with_advice(&with_mesh_tail(src), "meshd.toml", HOST, &mtus)
        .expect("valid")
        .warnings
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn link_local_ipv4_cable_addresses_are_warned_about_with_the_plan() {
    let warnings = advice(&link_config("169.254.12.1", "169.254.12.2"), &[]);
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].starts_with(
            "meshd.toml:13: links[0].local_address: 169.254.12.1 is IPv4 link-local (169.254/16, \
             what macOS self-assigns): the kernel ties no interface to it"
        ),
        "{warnings:#?}"
    );
    assert!(
        warnings[0].ends_with(
            "Give every cable its own /30 as `meshctl plan` prints: two addresses of \
             10.254.0.0/24 with netmask 255.255.255.252 (10.254.0.1 and 10.254.0.2 on one end, \
             the next on the other)"
        ),
        "{warnings:#?}"
    );
    assert!(
        warnings[1].starts_with("meshd.toml:14: links[0].peer_address: 169.254.12.2 is IPv4"),
        "{warnings:#?}"
    );
    // Warnings never refuse the config, and the plan's addressing draws none.
    assert!(parse(&link_config("169.254.12.1", "169.254.12.2")).is_ok());
    assert_eq!(
        advice(&link_config("10.254.0.1", "10.254.0.2"), &[]),
        Vec::<String>::new()
    );
}

#[test]
fn ipv6_link_local_cable_addresses_are_refused() {
    assert_problem(
        &link_config("fe80::1", "fe80::2"),
        "links[0].local_address",
        "fe80::1 is IPv6 link-local: it exists only together with an interface",
    );
    assert_problem(
        &link_config("fd00::1", "fe80::2"),
        "links[0].peer_address",
        "give the cable its own IPv4 /30 as `meshctl plan` prints (10.254.0.1 and 10.254.0.2",
    );
    // A scope cannot even be written: the key is a plain address.
    assert_problem(
        &link_config("fe80::1%en2", "fe80::2"),
        "links[0].local_address",
        "without a port or scope",
    );
    assert!(parse(&link_config("fd00::1", "fd00::2")).is_ok());
}

#[test]
fn probes_larger_than_the_links_interface_mtu_are_warned_about() {
    let src = format!(
        "{}\n[probe]\nmtu_payload_bytes = 8972\n",
        link_config("10.254.0.1", "10.254.0.2")
    );
    assert_eq!(advice(&src, &[("en2", 9000)]), Vec::<String>::new());
    assert_eq!(
        advice(&src, &[("en2", 1500)]),
        [
            "meshd.toml:17: probe.mtu_payload_bytes: 8972 bytes plus 28 of IPv4 and UDP headers do \
          not fit the MTU of en2 (1500), the interface of links[0]: MTU-sized probes would leave \
          fragmented and test nothing; use at most 1472 (or raise en2's MTU)"
        ]
    );
    // Unknown MTU (no such interface here): not judged.
    assert_eq!(advice(&src, &[("en9", 1500)]), Vec::<String>::new());
    // IPv6 headers are larger.
    let v6 = format!(
        "{}\n[probe]\nmtu_payload_bytes = 1460\n",
        link_config("fd00::1", "fd00::2")
    );
    assert!(advice(&v6, &[("en2", 1500)])[0].contains("use at most 1452"));
}

#[test]
fn the_example_draws_no_warnings() {
    assert_eq!(
        Config::parse_with_advice(EXAMPLE, "meshd.example.toml", HOST, &BTreeMap::new())
            .expect("valid")
            .warnings,
        vec![]
    );
}

#[test]
fn revoked_serials_must_be_serials_and_the_connection_age_bounded() {
    assert_problem(
        "[tls]\ninsecure = true\nrevoked_serials = [\"4f:1a\", \"not hex\"]\n",
        "tls.revoked_serials[1]",
        "\"not hex\" is not a certificate serial number",
    );
    assert_problem(
        "[tls]\ninsecure = true\nmax_connection_age = \"100ms\"\n",
        "tls.max_connection_age",
        "too short",
    );
    let config = parse(
        "[tls]\ninsecure = true\nrevoked_serials = [\"4F:1A\"]\nmax_connection_age = \"10m\"\n",
    )
    .expect("valid");
    assert_eq!(config.tls.revoked_serials, ["4F:1A"]);
    assert_eq!(config.tls.max_connection_age, Duration::from_secs(600));
    assert_eq!(
        Config::embedded_default(HOST).tls.max_connection_age,
        DEFAULT_MAX_CONNECTION_AGE
    );
    let wrong_type = lines("[tls]\ninsecure = true\nrevoked_serials = \"4f1a\"\n");
    assert!(
        wrong_type.iter().any(|l| l.contains("tls.revoked_serials")),
        "{wrong_type:?}"
    );
}
