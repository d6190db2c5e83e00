//! `meshctl plan --write --certs`, from unboxing to a watched mesh: the
//! real meshctl writes a 4-node plan's configs and certificates, `meshd
//! check-config` accepts each file as written, and four `meshd run`
//! processes started from those files, unchanged, form a mesh over mutual
//! TLS whose cables (loopback addresses from `--link-range`) are up.
//! Everything stays on loopback.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "../../daemon/tests/common/mod.rs"]
mod common;

const NODES: [&str; 4] = ["plan-1", "plan-2", "plan-3", "plan-4"];
/// Four ports each, and a full mesh of four needs three cables each.
const MODEL: &str = "m4-max-studio";
/// How long four fresh nodes may take to hear each other and judge every
/// cable: far more than the few report intervals and probe windows needed.
const SETTLE: Duration = Duration::from_secs(30);

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

/// This build's meshd, beside meshctl as a workspace build leaves it
/// (`cargo nextest run --workspace`, `cargo test --workspace`, `cargo
/// build`), as the lab finds it. Cargo builds only meshctl's own binaries
/// for its tests, so when meshd is not there yet (`cargo test -p meshctl`
/// on a fresh target directory) it is built here. A present one is not
/// rebuilt: a build of meshd alone unifies features differently from the
/// workspace's, and would rebuild half the workspace on every run.
fn meshd() -> &'static Path {
    static MESHD: OnceLock<PathBuf> = OnceLock::new();
    MESHD.get_or_init(|| {
        let meshctl = Path::new(env!("CARGO_BIN_EXE_meshctl"));
        let profile_dir = meshctl.parent().expect("target/<profile>");
        let meshd = profile_dir.join("meshd");
        if meshd.is_file() {
            return meshd;
        }
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev",
            Some(other) => other,
        };
        let target_dir = profile_dir.parent().expect("target");
        let built = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "meshd", "--bin", "meshd"])
            .args(["--profile", profile])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(built.success(), "cargo build -p meshd failed");
        assert!(meshd.is_file(), "no {}", meshd.display());
        meshd
    })
}

/// A /24 of loopback that differs between runs, so that two checkouts
/// testing at once do not meet on the cables' probe port: 127.64.0.0/10
/// holds 16384 of them, away from 127.0.0.1 where the management and
/// gRPC ports are.
fn loopback_link_range() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let slot = (std::process::id() ^ nanos) % (64 * 256);
    format!("127.{}.{}.0/24", 64 + slot / 256, slot % 256)
}

/// The meshd processes of a test: killed and reaped however the test
/// ends, a panic included.
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Each node's own gRPC port (meshctl's way in) and metrics port, and the
/// flags that give them.
struct Ports {
    grpc: Vec<u16>,
    metrics: Vec<u16>,
    args: Vec<String>,
}

fn ports() -> Ports {
    let mut grpc = Vec::new();
    let mut metrics = Vec::new();
    let mut args = Vec::new();
    // All picked while held: a plan naming one port twice is refused.
    let picked: [u16; 3 * NODES.len()] = common::free_ports();
    for (node, [own, page, management]) in NODES.iter().zip(picked.as_chunks::<3>().0) {
        grpc.push(*own);
        metrics.push(*page);
        args.extend([
            "--management".to_owned(),
            format!("{node}=127.0.0.1:{management}"),
            "--grpc".to_owned(),
            format!("{node}=127.0.0.1:{own}"),
            "--metrics".to_owned(),
            format!("{node}=127.0.0.1:{page}"),
        ]);
    }
    Ports {
        grpc,
        metrics,
        args,
    }
}

fn plan(dir: &Path, link_range: &str, extra: &[&str], ports: &Ports) -> Output {
    let mut args = vec![
        "plan",
        "--names",
        "plan-1,plan-2,plan-3,plan-4",
        "--model",
        MODEL,
        "--link-range",
        link_range,
        "--write",
        dir.to_str().expect("utf-8 path"),
    ];
    args.extend(extra);
    args.extend(ports.args.iter().map(String::as_str));
    meshctl(&args)
}

#[test]
fn plan_write_refuses_wrong_flags_and_existing_files_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = ports();
    let range = "10.77.0.0/24";

    let out = plan(dir.path(), range, &["--management", "zz=10.0.0.9"], &ports);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("the plan has no node zz; its nodes are plan-1"),
        "{stderr}"
    );

    let out = plan(dir.path(), "10.77.0.0/33", &[], &ports);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("--link-range 10.77.0.0/33"));

    // Six cables of a full mesh of four need six /30s; a /29 holds two.
    let out = plan(dir.path(), "10.77.0.0/29", &[], &ports);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("pick a larger range"), "{stderr}");
    assert!(
        fs::read_dir(dir.path()).expect("dir").next().is_none(),
        "nothing written when refused"
    );

    let out = meshctl(&["plan", "--names", "a,b", "--model", MODEL, "--certs"]);
    assert_eq!(out.status.code(), Some(64), "--certs needs --write");

    let out = plan(dir.path(), range, &[], &ports);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let config = dir.path().join("plan-2/meshd.toml");
    assert!(
        stdout.contains(&format!("meshd config: {}", config.display())),
        "{stdout}"
    );
    assert!(stdout.contains("sudo meshd check-config /usr/local/etc/meshd/meshd.toml"));

    let out = plan(dir.path(), range, &[], &ports);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("plan-1/meshd.toml"), "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");

    fs::write(&config, "# edited\n").expect("edit");
    let out = plan(dir.path(), range, &["--force", "--json"], &ports);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        fs::read_to_string(&config)
            .expect("read")
            .contains("[[peers]]")
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["address_range"], range);
    assert_eq!(
        doc["written"].as_array().map(Vec::len),
        Some(NODES.len()),
        "one config per node: {doc:#}"
    );
}

/// `meshctl status --json` of the node on `port`, once it answers.
fn status(port: u16) -> Option<Value> {
    let out = meshctl(&["--addr", &format!("127.0.0.1:{port}"), "status", "--json"]);
    serde_json::from_slice(&out.stdout).ok()
}

/// Every node up, quorum among all four, and every cable up.
fn settled(doc: &Value) -> bool {
    let nodes = doc["nodes"].as_array().cloned().unwrap_or_default();
    let links = doc["links"].as_array().cloned().unwrap_or_default();
    doc["quorum"]["has_quorum"] == true
        && doc["quorum"]["members"].as_array().map(Vec::len) == Some(NODES.len())
        && nodes.len() == NODES.len()
        && nodes.iter().all(|n| n["state"] == "up")
        && links.len() == NODES.len() * (NODES.len() - 1) / 2
        && links.iter().all(|l| l["state"] == "up")
}

#[test]
fn a_written_plan_with_certificates_runs_as_a_mesh_over_mutual_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plan_dir = dir.path().join("plan");
    let ports = ports();
    let out = plan(&plan_dir, &loopback_link_range(), &["--certs"], &ports);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("ca-key.pem signs the mesh's certificates"),
        "{stdout}"
    );

    for node in NODES {
        let config = plan_dir.join(node).join("meshd.toml");
        let out = Command::new(meshd())
            .arg("check-config")
            .arg(&config)
            .output()
            .expect("meshd runs");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{node}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let toml = fs::read_to_string(&config).expect("read");
        assert!(
            !toml.contains("insecure"),
            "mutual TLS, not plain TCP: {toml}"
        );
    }

    // A whole mesh judged against a deadline: alone on the machine.
    let _serial = meshd_test_lock::exclusive();
    let logs = dir.path().join("logs");
    fs::create_dir(&logs).expect("logs dir");
    let mut daemons = Daemons(Vec::new());
    for node in NODES {
        let log = fs::File::create(logs.join(format!("{node}.log"))).expect("log");
        let child = Command::new(meshd())
            .arg("run")
            .arg("--config")
            .arg(plan_dir.join(node).join("meshd.toml"))
            .env_remove("RUST_LOG")
            // Each node's incident history in its own directory.
            .env("STATE_DIRECTORY", plan_dir.join(node))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("meshd run starts");
        daemons.0.push(child);
    }

    let started = Instant::now();
    loop {
        let last: Vec<Option<Value>> = ports.grpc.iter().map(|&port| status(port)).collect();
        if last.iter().all(|doc| doc.as_ref().is_some_and(settled)) {
            break;
        }
        for (node, child) in NODES.iter().zip(&mut daemons.0) {
            if let Ok(Some(exit)) = child.try_wait() {
                panic!("{node}'s meshd exited ({exit}): {}", read_logs(&logs));
            }
        }
        assert!(
            started.elapsed() < SETTLE,
            "the mesh never settled: {last:#?}\n{}",
            read_logs(&logs)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    for (node, &port) in NODES.iter().zip(&ports.grpc) {
        let out = meshctl(&["--addr", &format!("127.0.0.1:{port}"), "status"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{node} healthy: {}",
            text(&out.stdout)
        );
    }
    // The streams between them are mutual TLS: no node runs insecure.
    for (node, &port) in NODES.iter().zip(&ports.metrics) {
        let metrics = http_get(port, "/metrics");
        assert!(
            metrics.lines().any(|l| l == "meshd_insecure 0"),
            "{node}: {metrics}"
        );
    }
    drop(daemons);
}

/// The body of a plain HTTP GET of `path` on loopback `port`.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or(response)
}

fn read_logs(dir: &Path) -> String {
    NODES
        .iter()
        .map(|node| {
            let log = fs::read_to_string(dir.join(format!("{node}.log"))).unwrap_or_default();
            format!("--- {node}\n{log}")
        })
        .collect()
}
