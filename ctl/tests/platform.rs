//! `meshctl doctor`, `plan` and `bundle` run as the binary, on the scenario
//! bundles of real macOS outputs (platform/tests/scenarios), on this host,
//! and on the model data.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn meshctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshctl"))
        .args(args)
        .env_remove("MESHCTL_ADDR")
        .output()
        .expect("meshctl runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", text(&out.stdout), text(&out.stderr)))
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../platform/tests/scenarios")
        .join(name)
}

/// check name → status, for the checks about one node.
fn statuses(doc: &Value) -> BTreeMap<String, String> {
    doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().expect("name").to_owned(),
                c["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect()
}

/// A scenario, the checks its outputs decide (the others are skipped), and
/// doctor's exit code.
type Scenario = (&'static str, &'static [(&'static str, &'static str)], i32);

#[test]
fn doctor_gives_each_scenario_its_pass_fail_set() {
    // What each captured Mac shows (see the scenarios' README): the checks
    // its outputs decide, and `skipped` where a command was not captured.
    let cases: &[Scenario] = &[
        (
            "mac-mini-m4-pro-tn3205-bridge-active",
            &[
                ("rdma_enabled", "pass"),
                ("thunderbolt_bridge_inactive", "fail"),
                ("thunderbolt_bridge_service_off", "warn"),
            ],
            1,
        ),
        (
            "macbook-m5-max-rdma-disabled",
            // No ifconfig: whether the cabled port has an address is
            // unknown, not "none".
            &[("rdma_enabled", "fail"), ("link_speed", "pass")],
            1,
        ),
        (
            "macbook-m5-max-rdma-enabled-ports-down",
            &[
                ("rdma_enabled", "pass"),
                ("rdma_port_active", "fail"),
                ("link_speed", "pass"),
            ],
            1,
        ),
        (
            "tb4-mac-rdma-enabled-no-devices",
            &[("rdma_enabled", "fail")],
            1,
        ),
        // RDMA devices, but nothing shows whether a port is Thunderbolt 5:
        // nothing judged, which is no pass.
        ("tb4-mac-patched-one-port-active-40g", &[], 1),
        (
            "tb4-mac-rdma-devices-on-40g-ports",
            &[("rdma_enabled", "fail")],
            1,
        ),
        ("studio-m3-ultra-ibv-devices-only", &[], 1),
        (
            "studio-m3-ultra-tb5-peer-usb4-drive",
            &[("link_speed", "pass")],
            0,
        ),
        // An excerpt: one of its buses is cut before its receptacle, so not
        // every cabled port is known.
        ("mac-mini-pasted-text-profiler", &[], 1),
        // bridge0 is up; whether its members are cabled is unknown.
        // Its Thunderbolt Bridge service is enabled: a warning.
        (
            "intel-mac-bridge0-inactive-vm-bridge100",
            &[("thunderbolt_bridge_service_off", "warn")],
            0,
        ),
        (
            "firewall-on-without-a-meshd-rule",
            &[("firewall_allows_meshd", "fail")],
            1,
        ),
        ("firewall-off", &[("firewall_allows_meshd", "pass")], 0),
    ];
    for (name, decided, exit) in cases {
        let dir = scenario(name);
        let out = meshctl(&["doctor", "--from", dir.to_str().expect("utf-8"), "--json"]);
        assert_eq!(
            out.status.code(),
            Some(*exit),
            "{name}: {}",
            text(&out.stderr)
        );
        let doc = json(&out);
        let mut expected: BTreeMap<String, String> = statuses(&doc)
            .into_keys()
            .map(|check| (check, "skipped".to_owned()))
            .collect();
        assert_eq!(expected.len(), 11, "{name}: every node check runs: {doc:#}");
        for (check, status) in *decided {
            expected.insert((*check).to_owned(), (*status).to_owned());
        }
        assert_eq!(statuses(&doc), expected, "{name}");
        assert_eq!(doc["nodes"][0]["facts"]["os"], "macos", "{name}");
        assert_eq!(doc["passed"], *exit == 0, "{name}");
        // Unknown is never a pass: a run that judged nothing says so.
        let outcome = match (*exit, decided.is_empty()) {
            (0, _) => "pass",
            (_, true) => "unknown",
            (_, false) => "fail",
        };
        assert_eq!(doc["outcome"], outcome, "{name}");
    }
}

#[test]
fn doctor_that_judged_nothing_exits_1_and_says_so_in_text_and_json() {
    let dir = scenario("studio-m3-ultra-ibv-devices-only");
    let path = dir.to_str().expect("utf-8");
    let out = meshctl(&["doctor", "--from", path]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "checks: 0 pass, 0 warn, 0 fail, 11 skipped\n  nothing was judged (every check was \
             skipped, each for the reason under it): that is no pass (exit 1)"
        ),
        "{stdout}"
    );
    let out = meshctl(&["doctor", "--from", path, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc = json(&out);
    assert_eq!(
        (&doc["passed"], &doc["outcome"]),
        (&Value::Bool(false), &Value::from("unknown"))
    );
    // A judged run says nothing of the kind.
    let judged = scenario("firewall-off");
    let out = meshctl(&["doctor", "--from", judged.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!text(&out.stdout).contains("nothing was judged"));
}

#[test]
fn doctor_text_shows_evidence_fixes_and_what_was_not_seen() {
    let dir = scenario("mac-mini-m4-pro-tn3205-bridge-active");
    let out = meshctl(&["doctor", "--from", dir.to_str().expect("utf-8")]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("not seen here:"), "{stdout}");
    assert!(
        stdout.contains(
            "FAIL  thunderbolt_bridge_inactive\n          bridge0 (Thunderbolt members en2, en3, en4;"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("fix: sudo networksetup -setnetworkserviceenabled"),
        "{stdout}"
    );
}

#[test]
fn doctor_on_a_directory_of_bundles_builds_the_cable_map_and_checks_the_mesh() {
    let mesh = tempfile::tempdir().expect("tempdir");
    // The two MacBook Pros of one capture are cabled to each other; the
    // Studio is cabled to a third Mac that is not in this mesh.
    for (node, name) in [
        ("mbp1", "macbook-m5-max-rdma-disabled"),
        ("mbp2", "macbook-m5-max-rdma-enabled-ports-down"),
        ("studio", "studio-m3-ultra-tb5-peer-usb4-drive"),
    ] {
        let to = mesh.path().join(node);
        std::fs::create_dir(&to).expect("mkdir");
        for entry in std::fs::read_dir(scenario(name)).expect("scenario") {
            let from = entry.expect("entry").path();
            std::fs::copy(&from, to.join(from.file_name().expect("name"))).expect("copy");
        }
    }
    let out = meshctl(&[
        "doctor",
        "--from",
        mesh.path().to_str().expect("utf-8"),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let doc = json(&out);
    let cables = doc["cables"].as_array().expect("cables");
    assert_eq!(cables.len(), 1, "{doc:#}");
    assert_eq!(cables[0]["a"]["node"], "mbp1");
    assert_eq!(cables[0]["a"]["port"], "Thunderbolt 2");
    assert_eq!(cables[0]["b"]["node"], "mbp2");
    assert_eq!(cables[0]["speed_bps"], 80_000_000_000_u64);
    assert_eq!(cables[0]["discovered"], true);
    let mesh_checks: BTreeMap<&str, (&str, &Value)> = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["node"].is_null())
        .map(|c| {
            (
                c["name"].as_str().expect("name"),
                (c["status"].as_str().expect("status"), &c["evidence"]),
            )
        })
        .collect();
    let (status, evidence) = mesh_checks["full_mesh_cabled"];
    assert_eq!(status, "fail");
    let evidence = evidence.to_string();
    assert!(
        evidence.contains("mbp1/Thunderbolt 1 ↔ studio/Thunderbolt 1: no cable"),
        "{evidence}"
    );
    assert_eq!(mesh_checks["cable_peers_known"].0, "warn");
    assert_eq!(mesh_checks["mesh_size"].0, "pass");
}

#[test]
fn doctor_on_this_linux_host_says_what_it_cannot_see() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: this test reads a Linux host");
        return;
    }
    let out = meshctl(&["doctor", "--node", "this-host", "--json"]);
    let doc = json(&out);
    assert_eq!(doc["nodes"][0]["node"], "this-host");
    assert_eq!(doc["nodes"][0]["facts"]["os"], "linux");
    assert_eq!(doc["nodes"][0]["facts"]["source"], "live");
    let checks = statuses(&doc);
    assert_eq!(checks["link_speed"], "skipped", "no Thunderbolt on Linux");
    assert!(checks.contains_key("rdma_enabled"), "{doc:#}");
    for check in doc["checks"].as_array().expect("checks") {
        assert!(
            !check["evidence"].as_array().expect("evidence").is_empty(),
            "every result says why: {check}"
        );
    }
    let passed = !checks.values().any(|s| s == "fail") && checks.values().any(|s| s != "skipped");
    assert_eq!(out.status.code(), Some(if passed { 0 } else { 1 }));
}

#[test]
fn a_bundle_of_this_host_replays_anywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("b.tar.gz");
    let archive_arg = archive.to_str().expect("utf-8");
    // No daemon there: the bundle is still written, without its status.
    let out = meshctl(&[
        "--addr",
        "127.0.0.1:1",
        "bundle",
        "--node",
        "lab-1",
        "--out",
        archive_arg,
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("without the daemon's status"), "{stdout}");
    assert!(archive.is_file());

    let out = meshctl(&["doctor", "--from", archive_arg, "--json"]);
    let doc = json(&out);
    assert_eq!(doc["nodes"][0]["node"], "lab-1", "{doc:#}");
    let source = doc["nodes"][0]["facts"]["source"].as_str().expect("source");
    assert!(source.starts_with("replay:"), "{source}");
    assert_eq!(
        doc["nodes"][0]["facts"]["os"],
        serde_json::json!(std::env::consts::OS)
    );

    let out = meshctl(&["doctor", "--from", "/nonexistent/bundle.tar.gz"]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "a path that is not there is usage"
    );
    assert!(text(&out.stderr).contains("neither a bundle directory nor a .tar.gz"));
}

#[test]
fn plan_covers_the_required_clusters_and_refuses_with_the_reason() {
    let out = meshctl(&["plan", "--nodes", "5", "--model", "m4-max-studio", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc = json(&out);
    let cables = doc["cables"].as_array().expect("cables");
    assert_eq!(cables.len(), 10);
    // All four ports of every Studio are used...
    let mut ports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for cable in cables {
        for end in ["a", "b"] {
            ports
                .entry(cable[end]["node"].as_str().expect("node").to_owned())
                .or_default()
                .push(cable[end]["port"].as_str().expect("port").to_owned());
        }
    }
    for (node, used) in &ports {
        let mut used = used.clone();
        used.sort();
        assert_eq!(
            used,
            [
                "Thunderbolt 1",
                "Thunderbolt 2",
                "Thunderbolt 3",
                "Thunderbolt 4"
            ],
            "{node}"
        );
    }
    // ...with a warning for the port reported unreliable for RDMA.
    let warnings = doc["warnings"].to_string();
    assert!(warnings.contains("unreliable for RDMA"), "{warnings}");

    let out = meshctl(&["plan", "--nodes", "6", "--model", "m4-max-studio"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cannot plan this cluster"), "{stderr}");
    assert!(stderr.contains("jaccl-ring"), "suggests the ring: {stderr}");

    let out = meshctl(&[
        "plan",
        "--nodes",
        "7",
        "--model",
        "m3-ultra-studio",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json(&out)["cables"].as_array().expect("cables").len(), 21);

    let out = meshctl(&[
        "plan",
        "--nodes",
        "3",
        "--model",
        "m4-pro-mini",
        "--model",
        "m3-ultra-studio",
    ]);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("one model for all nodes, or one per node"));

    let out = meshctl(&["plan", "--nodes", "3", "--model", "no-such-mac"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        text(&out.stderr).contains("m3-ultra-studio"),
        "lists known ids"
    );
}

/// A copy of a scenario bundle to spoil.
fn bundle_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = scenario("macbook-m5-max-rdma-disabled");
    for entry in std::fs::read_dir(&source).expect("scenario") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_file() {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).expect("copy");
        }
    }
    dir
}

/// A copy of a scenario bundle whose `file` is replaced by a symbolic link
/// to `target`.
fn bundle_with_link(file: &str, target: &str) -> tempfile::TempDir {
    let dir = bundle_copy();
    let link = dir.path().join(file);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(target, &link).expect("symlink");
    dir
}

/// The bundle attacks of issue 14 through the binary: a file linked to
/// `/dev/zero` used to make `doctor --from` read gigabytes, one linked to
/// `/etc/hostname` was read and printed. Both are refused by name and
/// nothing behind the link is read.
#[test]
fn doctor_refuses_a_bundle_whose_files_link_out_of_it() {
    let zero = bundle_with_link("system_profiler_SPThunderboltDataType.json", "/dev/zero");
    let out = meshctl(&["doctor", "--from", zero.path().to_str().expect("utf-8")]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "system_profiler_SPThunderboltDataType.json: refused: is a symbolic link; \
             a bundle holds regular files and directories only"
        ),
        "{stderr}"
    );

    let host = bundle_with_link("sw_vers.txt", "/etc/hostname");
    let out = meshctl(&[
        "doctor",
        "--from",
        host.path().to_str().expect("utf-8"),
        "--json",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("sw_vers.txt: refused: is a symbolic link"),
        "{stderr}"
    );
    if let Ok(hostname) = std::fs::read_to_string("/etc/hostname")
        && !hostname.trim().is_empty()
    {
        let everything = format!("{}{stderr}", text(&out.stdout));
        assert!(!everything.contains(hostname.trim()), "{everything}");
    }
}

/// 2000 nested directories in a bundle used to cost 87 s of kernel CPU
/// under `doctor --from`: the walk stops at the depth cap and says so.
#[test]
fn doctor_refuses_a_bundle_nested_two_thousand_directories_deep() {
    let bundle = bundle_copy();
    // 4000 characters below the bundle: within PATH_MAX, so made in one go.
    let deep = bundle.path().join("d/".repeat(2000));
    std::fs::create_dir_all(&deep).expect("nested directories");
    let out = meshctl(&["doctor", "--from", bundle.path().to_str().expect("utf-8")]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "nested deeper than {} levels",
            meshd_platform::bundle::MAX_DEPTH
        )),
        "{stderr}"
    );
}

#[test]
fn plan_writes_local_iface_where_a_nodes_hardware_ports_are_given() {
    // The M5 Max MacBook Pro's ports: Thunderbolt 1 → en1, 2 → en6, 3 → en2.
    let ports = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../platform/tests/scenarios/macbook-m5-max-rdma-disabled/networksetup_listallhardwareports.txt"
    );
    let given = format!("node2={ports}");
    let out = meshctl(&[
        "plan",
        "--nodes",
        "3",
        "--model",
        "m5-max-macbook-pro",
        "--hardware-ports",
        &given,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc = json(&out);
    let nodes = doc["nodes"].as_array().expect("nodes");
    let links: toml::Table =
        toml::from_str(nodes[1]["links_config"].as_str().expect("toml")).expect("valid TOML");
    let ifaces: Vec<&str> = links["links"]
        .as_array()
        .expect("links")
        .iter()
        .map(|l| l["local_iface"].as_str().expect("local_iface written"))
        .collect();
    assert_eq!(ifaces.len(), 2);
    for iface in &ifaces {
        assert!(["en1", "en6", "en2"].contains(iface), "{ifaces:?}");
    }
    // The other nodes' ports are unknown: still a comment.
    let node1 = nodes[0]["links_config"].as_str().expect("toml");
    assert!(node1.contains("# local_iface = \"enX\""), "{node1}");
    let cables = doc["cables"].as_array().expect("cables");
    let node2_ends: Vec<&serde_json::Value> = cables
        .iter()
        .flat_map(|c| [&c["a"], &c["b"]])
        .filter(|end| end["node"] == "node2")
        .collect();
    for end in node2_ends {
        let port = end["port"].as_str().expect("port");
        let expected = match port {
            "Thunderbolt 1" => "en1",
            "Thunderbolt 2" => "en6",
            "Thunderbolt 3" => "en2",
            other => panic!("unexpected port {other}"),
        };
        assert_eq!(end["iface"], expected, "{end}");
    }

    let out = meshctl(&[
        "plan",
        "--nodes",
        "3",
        "--model",
        "m5-max-macbook-pro",
        "--hardware-ports",
        &format!("node9={ports}"),
    ]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        text(&out.stderr).contains("the plan has no node node9; its nodes are node1, node2, node3"),
        "{}",
        text(&out.stderr)
    );
    let out = meshctl(&[
        "plan",
        "--nodes",
        "3",
        "--model",
        "m5-max-macbook-pro",
        "--hardware-ports",
        "node2",
    ]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        text(&out.stderr).contains("write NODE=FILE"),
        "{}",
        text(&out.stderr)
    );
}

/// Bundle archives of two nodes in one folder: read as a mesh of those two
/// nodes; a folder with no bundle is refused, not read as a bogus node.
#[test]
fn doctor_reads_a_folder_of_bundle_archives() {
    let dir = tempfile::tempdir().expect("tempdir");
    for node in ["lab-1", "lab-2"] {
        let archive = dir.path().join(format!("meshd-bundle-{node}.tar.gz"));
        let out = meshctl(&[
            "--addr",
            "127.0.0.1:1",
            "bundle",
            "--node",
            node,
            "--out",
            archive.to_str().expect("utf-8"),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let out = meshctl(&[
        "doctor",
        "--from",
        dir.path().to_str().expect("utf-8"),
        "--json",
    ]);
    let doc = json(&out);
    let nodes: Vec<&str> = doc["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["node"].as_str().expect("node"))
        .collect();
    assert_eq!(nodes, ["lab-1", "lab-2"], "{doc:#}");
    assert!(
        doc["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .any(|c| c["node"].is_null()),
        "mesh-wide checks too"
    );

    let empty = tempfile::tempdir().expect("tempdir");
    let out = meshctl(&["doctor", "--from", empty.path().to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("holds no bundle"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn plan_lists_models_alone_and_names_the_nodes_with_the_mac_config_path() {
    let out = meshctl(&["plan", "--list-models"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("m4-max-studio"));

    let out = meshctl(&[
        "plan",
        "--names",
        "studio-1,studio-2,studio-3",
        "--model",
        "m4-max-studio",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("on studio-2 (Mac Studio"), "{stdout}");
    assert!(stdout.contains("peer = \"studio-3\""), "{stdout}");
    assert!(
        stdout.contains("[[links]] in /usr/local/etc/meshd/meshd.toml"),
        "the Mac's config path: {stdout}"
    );
    assert!(!stdout.contains("/etc/meshd/meshd.toml)"), "{stdout}");

    let out = meshctl(&[
        "plan",
        "--nodes",
        "2",
        "--names",
        "a,b,c",
        "--model",
        "m4-max-studio",
    ]);
    assert_eq!(out.status.code(), Some(64));
    let out = meshctl(&["plan", "--names", "a,a", "--model", "m4-max-studio"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("a is named twice"));
}

/// `meshctl plan --json | head -c 100`: the reader goes away mid-output and
/// meshctl ends quietly with its own exit code, no panic.
#[test]
fn a_closed_pipe_is_not_a_panic() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_meshctl"))
        .args([
            "plan",
            "--nodes",
            "7",
            "--model",
            "m3-ultra-studio",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("meshctl runs");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0_u8; 100];
    stdout.read_exact(&mut first).expect("some output");
    drop(stdout);
    let out = child.wait_with_output().expect("meshctl exits");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// The docs show the plan's addressing scheme, not another one: every
/// address command the README's quick start and docs/INSTALL-macOS.md give
/// for the three-Studio example is in the plan.
#[test]
fn the_docs_use_the_plans_addresses() {
    let out = meshctl(&[
        "plan",
        "--names",
        "studio-1,studio-2,studio-3",
        "--model",
        "m4-max-studio",
    ]);
    let plan = text(&out.stdout);
    for file in ["README.md", "docs/INSTALL-macOS.md"] {
        let doc = repo_file(file);
        let shown: Vec<&str> = doc
            .lines()
            .filter(|l| l.contains("networksetup -setmanual"))
            .collect();
        assert!(!shown.is_empty(), "{file} shows the address commands");
        for line in shown {
            let command = line.split('#').next().unwrap_or_default().trim();
            assert!(
                plan.contains(command),
                "{file}: {command:?} is not in the plan:\n{plan}"
            );
        }
    }
}

/// A file of the repository, by its path from the top.
fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Every message meshctl gives when it cannot do what was asked has an
/// entry in docs/TROUBLESHOOTING.md: the ones produced here, taken from
/// meshctl's own stderr, and those that need a daemon by the words the
/// tests in `status.rs` see.
#[test]
fn the_docs_troubleshoot_the_messages_meshctl_gives() {
    let troubleshooting = repo_file("docs/TROUBLESHOOTING.md");
    assert!(
        troubleshooting.starts_with("# Troubleshooting"),
        "docs/TROUBLESHOOTING.md is the troubleshooting page"
    );
    let empty = tempfile::tempdir().expect("tempdir");
    let produced: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--addr", "no-port-here", "status"],
            "needs a host and a port",
        ),
        (
            vec!["doctor", "--from", empty.path().to_str().expect("utf-8")],
            "holds no bundle",
        ),
        (
            vec!["plan", "--nodes", "6", "--model", "m4-max-studio"],
            "cannot plan this cluster",
        ),
        (
            vec!["plan", "--names", "a,a", "--model", "m4-max-studio"],
            "is named twice",
        ),
        (
            vec!["doctor", "--from", "/nonexistent/x.tar.gz"],
            "is neither a bundle directory nor a .tar.gz",
        ),
        (
            vec!["--addr", "127.0.0.1:1", "status"],
            "cannot reach meshd at",
        ),
    ];
    for (args, words) in produced {
        let stderr = text(&meshctl(&args).stderr);
        assert!(stderr.contains(words), "meshctl {args:?} said {stderr}");
        assert!(
            troubleshooting.contains(words),
            "no troubleshooting entry for {words:?} ({stderr})"
        );
    }
    for words in [
        "that is meshd's HTTP port",
        "answers plain HTTP, not gRPC",
        "is not a member of the mesh",
        "did not answer within",
        "sent a malformed status",
        "needs an RDMA device at both ends",
    ] {
        assert!(
            troubleshooting.contains(words),
            "no troubleshooting entry for {words:?}"
        );
    }
}
