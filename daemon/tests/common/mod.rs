//! Helpers shared by the daemon's integration tests.
#![allow(dead_code)]

pub mod cdp;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use meshd::config::Config;
use meshd::demo::plan::Plan;
use meshd::demo::{Demo, DemoError};
use meshd::node::RunningNode;
use meshd_domain::MeshStatus;
use meshd_proto::wire;
use meshd_proto::wire::mesh_client::MeshClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const HOSTNAME: &str = "test-host.local";

/// Every gRPC service a node's local listener serves, sorted: exactly what
/// reflection lists. Peers talk `meshd.v1.Peer` on the mesh listener only.
pub const SERVED_SERVICES: [&str; 5] = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
    "meshd.v1.Mesh",
    "meshd.v1.Topology",
];

/// The embedded default, moved to loopback on ports the OS picks.
pub fn loopback_config() -> Config {
    let mut config = Config::embedded_default(HOSTNAME);
    config.listen.grpc = "127.0.0.1:0".parse().expect("addr");
    config.listen.metrics = "127.0.0.1:0".parse().expect("addr");
    config
}

/// Makes `config` a mesh member: a mesh listener on a loopback port the OS
/// picks and a certificate of a fresh test CA in `certs` (which the caller
/// owns and removes).
pub fn join_mesh(config: &mut Config, certs: &std::path::Path) {
    let (dir, pair) = issue_certificates(certs, config.node.id.as_str());
    config.listen.mesh = Some("127.0.0.1:0".parse().expect("addr"));
    config.tls.ca = Some(dir.ca().cert);
    config.tls.cert = Some(pair.cert);
    config.tls.key = Some(pair.key);
}

/// A fresh test CA in `dir` and a certificate for `node`: the directory
/// and the node's files.
pub fn issue_certificates(
    dir: &std::path::Path,
    node: &str,
) -> (meshd_pki::store::CertDir, meshd_pki::store::Pair) {
    let certs = meshd_pki::store::CertDir::new(dir);
    let now = std::time::SystemTime::now();
    // A year: far from the 30 days under which meshd warns of expiry.
    let year = Duration::from_secs(365 * 24 * 3600);
    let ca = certs.init("meshd test CA", now, year).expect("test CA");
    let pair = certs
        .issue(&ca, node, &[], now, year)
        .expect("node certificate");
    (certs, pair)
}

pub async fn start(config: &Config) -> RunningNode {
    RunningNode::start(config, HOSTNAME)
        .await
        .expect("node starts")
}

pub async fn stop(node: RunningNode) {
    node.shutdown();
    tokio::time::timeout(Duration::from_secs(10), node.wait())
        .await
        .expect("node stops within 10 s")
        .expect("node stops cleanly");
}

/// A plain HTTP/1.0 GET: status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("http response");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (code, body.to_owned())
}

/// A loopback port free a moment ago, for a server the test starts.
pub fn free_port() -> u16 {
    let [port] = free_ports();
    port
}

/// `N` loopback ports free a moment ago, all different: each is held
/// until all are picked, since a port let go at once can be handed out
/// again by the next bind.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
        .collect();
    std::array::from_fn(|i| {
        held[i]
            .local_addr()
            .map(|a| a.port())
            .expect("a free loopback port")
    })
}

pub async fn channel(addr: SocketAddr) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("grpc connect")
}

/// Demos need fixed ports (a revived node must come back where the proxies
/// expect it), so each test picks a base among these slots and moves on
/// when another test, or another program, holds a port. A slot holds a
/// whole demo (ports base to base + 387); all lie below Linux's ephemeral
/// range (32768+), where outgoing connections take their ports.
const FIRST_BASE: u16 = 20_000;
const SLOT: u16 = 400;
const SLOTS: u16 = 31;
const ATTEMPTS: u16 = 8;

/// Base ports to try, starting from a slot that differs between runs.
pub fn bases() -> impl Iterator<Item = u16> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let start = (std::process::id() ^ nanos) % u32::from(SLOTS);
    let start = u16::try_from(start).expect("below SLOTS");
    (0..ATTEMPTS).map(move |i| FIRST_BASE + SLOT * ((start + i * 7) % SLOTS))
}

pub async fn status(addr: SocketAddr) -> MeshStatus {
    let mut client = MeshClient::new(channel(addr).await);
    let reply = client
        .get_status(wire::GetStatusRequest {})
        .await
        .expect("status")
        .into_inner();
    MeshStatus::try_from(reply).expect("well-formed status")
}

/// Polls a node until `done` holds for its status; fails the test, naming
/// `what`, after 20 s.
pub async fn until(addr: SocketAddr, what: &str, done: impl Fn(&MeshStatus) -> bool) -> MeshStatus {
    until_within(addr, what, Duration::from_secs(20), done).await
}

/// [`until`], failing after `limit` instead.
pub async fn until_within(
    addr: SocketAddr,
    what: &str,
    limit: Duration,
    done: impl Fn(&MeshStatus) -> bool,
) -> MeshStatus {
    let started = std::time::Instant::now();
    loop {
        let status = status(addr).await;
        if done(&status) {
            return status;
        }
        assert!(
            started.elapsed() < limit,
            "{what} never happened: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A directory no other demo uses, for one demo's certificates (the demo
/// removes what it wrote when it stops).
pub fn demo_certs(base: u16) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "meshd-test-certs-{}-{base}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A started demo of `nodes` nodes and its plan.
pub async fn start_demo(nodes: usize) -> (Demo, Plan) {
    start_demo_with(nodes, |_| {}).await
}

/// A started demo of `nodes` nodes, its plan changed by `adjust` first,
/// on the first base port whose ports are all free.
pub async fn start_demo_with(nodes: usize, adjust: impl Fn(&mut Plan)) -> (Demo, Plan) {
    let mut last = None;
    for base in bases() {
        let mut plan = Plan::new(nodes, base, &demo_certs(base)).expect("plan");
        adjust(&mut plan);
        match Demo::start(plan.clone(), HOSTNAME).await {
            Ok(demo) => return (demo, plan),
            // Taken between the check and the bind: retried the same way.
            Err(err @ DemoError::PortTaken { .. }) => last = Some(err),
            Err(err) if err.to_string().contains("in use") => last = Some(err),
            Err(err) => panic!("demo starts: {err}"),
        }
    }
    panic!("no free base port: {last:?}");
}

/// A `meshd demo` child that printed its banner, with its input and the
/// rest of its output.
pub struct Child {
    pub process: std::process::Child,
    pub stdin: std::process::ChildStdin,
    pub lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    pub banner: String,
    pub base: u16,
}

/// `meshd demo` with `args` (besides `--base-port`), on the first base
/// port whose ports are all free; `meshd` is the binary (its path is known
/// to the daemon's tests alone, which share this module with meshctl's).
pub fn spawn_demo(meshd: &str, args: &[&str]) -> Child {
    let mut last = String::new();
    for base in bases() {
        let mut process = Command::new(meshd)
            .arg("demo")
            .args(args)
            .args(["--base-port", &base.to_string()])
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("meshd demo runs");
        let stdin = process.stdin.take().expect("stdin");
        let mut lines = BufReader::new(process.stdout.take().expect("stdout")).lines();
        let mut banner = Vec::new();
        for line in lines.by_ref() {
            let line = line.expect("line");
            let last_line = line.trim_start().starts_with("quit");
            banner.push(line);
            if last_line {
                break;
            }
        }
        if !banner.is_empty() {
            return Child {
                process,
                stdin,
                lines,
                banner: banner.join("\n"),
                base,
            };
        }
        // No banner: the demo refused to start; retry elsewhere if a port
        // was taken.
        let output = process.wait_with_output().expect("exit");
        last = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            last.contains("is taken") || last.contains("in use"),
            "meshd demo failed: {last}"
        );
    }
    panic!("no free base port: {last}");
}
