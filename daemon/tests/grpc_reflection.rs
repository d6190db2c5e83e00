//! meshd's gRPC API through a reflection client that is not ours and has
//! none of meshd's .proto files: `grpc_reflection/client.py` (Python's
//! grpcio-reflection and grpc_requests, pinned in
//! `grpc_reflection/requirements.txt`) against a running `meshd run`. It
//! lists every service and resolves each one, calls `meshd.v1.Mesh/GetStatus`
//! and `grpc.health.v1.Health/Check`, and watches `WatchEvents` while the
//! node's config changes; this test judges what it saw. The grpcurl
//! examples in docs/CLI.md, "gRPC API", are the same calls.
//!
//! How the client reaches the node is decided in two places only, to change
//! together when the listener gets TLS or reflection moves to another
//! listener: [`Setup::config_text`] and [`Setup::client_args`] here, and
//! `connect()` in client.py.
//!
//! Needs a Python with the pinned packages: `MESHD_TEST_PYTHON`, or the
//! venv at `target/test-venv` that `.ci/run` makes. Without one the test is
//! skipped with a message, except under `CI=true`, where it must run.

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use common::free_ports;
use serde_json::{Value, json};
use tempfile::TempDir;

const NODE_ID: &str = "reflect-test";
/// Generous: the client's own calls time out after 30 s each.
const STEP_DEADLINE: Duration = Duration::from_secs(60);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Python to run the client with, or why there is none.
fn client_python() -> Result<PathBuf, String> {
    let python = std::env::var_os("MESHD_TEST_PYTHON").map_or_else(
        || workspace().join("target/test-venv/bin/python"),
        PathBuf::from,
    );
    if python.is_file() {
        Ok(python)
    } else {
        Err(format!(
            "no Python at {} (set MESHD_TEST_PYTHON, or make the venv: python3 -m venv \
             target/test-venv && target/test-venv/bin/pip install -r \
             daemon/tests/grpc_reflection/requirements.txt)",
            python.display()
        ))
    }
}

/// Where the node listens and keeps its config and log.
struct Setup {
    dir: TempDir,
    grpc: SocketAddr,
    metrics: SocketAddr,
}

impl Setup {
    fn new() -> Self {
        let [grpc, metrics] = free_ports();
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            grpc: SocketAddr::from(([127, 0, 0, 1], grpc)),
            metrics: SocketAddr::from(([127, 0, 0, 1], metrics)),
        }
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("meshd.toml")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("meshd.log")
    }

    /// The node's config: where it listens, then `extra`.
    fn config_text(&self, extra: &str) -> String {
        format!(
            "[node]\nid = \"{NODE_ID}\"\n\n[listen]\ngrpc = \"{}\"\nmetrics = \"{}\"\n{extra}",
            self.grpc, self.metrics
        )
    }

    /// Writes like an editor: a new file renamed over the old one.
    fn write_config(&self, extra: &str) {
        let path = self.config_path();
        let tmp = path.with_extension("swp");
        std::fs::write(&tmp, self.config_text(extra)).expect("write config");
        std::fs::rename(&tmp, &path).expect("rename config");
    }

    /// The client's arguments that say how to reach this node.
    fn client_args(&self) -> Vec<String> {
        vec!["--target".to_owned(), self.grpc.to_string()]
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

/// A `meshd run` of `setup`; killed however the test ends.
struct Node {
    setup: Setup,
    process: Child,
}

impl Node {
    fn start() -> Self {
        let setup = Setup::new();
        setup.write_config("");
        let log = File::create(setup.log_path()).expect("log file");
        let process = Command::new(env!("CARGO_BIN_EXE_meshd"))
            .args(["run", "--config"])
            .arg(setup.config_path())
            .env_remove("RUST_LOG")
            // Its incident history beside its config, not in the machine's.
            .env(
                "STATE_DIRECTORY",
                setup.config_path().parent().expect("config dir"),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("meshd starts");
        Self { setup, process }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The client process, its stdout lines arriving on a channel so that
/// every wait for one is bounded; killed however the test ends.
struct Client {
    process: Child,
    lines: Receiver<String>,
}

impl Client {
    fn start(python: &Path, node: &Node) -> Self {
        let mut process = Command::new(python)
            .arg(workspace().join("daemon/tests/grpc_reflection/client.py"))
            .args(node.setup.client_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Its traceback, if any, lands in the test's output.
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|err| panic!("{} runs: {err}", python.display()));
        let stdout = process.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self { process, lines }
    }

    /// The value of the client's next line, which must be `step`.
    fn next(&mut self, step: &str, node: &Node) -> Value {
        let line = self.lines.recv_timeout(STEP_DEADLINE).unwrap_or_else(|err| {
            let exit = self.process.try_wait().ok().flatten();
            panic!(
                "no {step:?} line from the client ({err}; client exit: {exit:?}); meshd's log:\n{}",
                node.setup.log()
            )
        });
        let mut entry: Value = serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("client line is not JSON ({err}): {line}"));
        assert_eq!(entry["step"], step, "{line}");
        entry["value"].take()
    }

    fn wait_success(mut self) {
        let deadline = Instant::now() + STEP_DEADLINE;
        loop {
            if let Some(exit) = self.process.try_wait().expect("client status") {
                assert!(exit.success(), "client failed: {exit}");
                return;
            }
            assert!(Instant::now() < deadline, "the client did not exit");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

#[test]
fn a_foreign_reflection_client_describes_every_service_and_calls_them() {
    let python = match client_python() {
        Ok(python) => python,
        Err(reason) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "the reflection client must run under CI=true: {reason}"
            );
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let node = Node::start();
    let mut client = Client::start(&python, &node);

    // Every listed service resolved, with its methods' message types.
    let services = client.next("services", &node);
    let mut names: Vec<&str> = services
        .as_object()
        .expect("services by name")
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(names, common::SERVED_SERVICES);
    assert_eq!(
        services["meshd.v1.Mesh"],
        json!({
            "GetHistory": ["meshd.v1.GetHistoryRequest", "meshd.v1.History"],
            "GetStatus": ["meshd.v1.GetStatusRequest", "meshd.v1.MeshStatus"],
            "WatchEvents": ["meshd.v1.WatchEventsRequest", "meshd.v1.Event"],
        })
    );
    for version in ["v1", "v1alpha"] {
        let package = format!("grpc.reflection.{version}");
        assert_eq!(
            services[format!("{package}.ServerReflection")],
            json!({"ServerReflectionInfo": [
                format!("{package}.ServerReflectionRequest"),
                format!("{package}.ServerReflectionResponse"),
            ]})
        );
    }

    let status = client.next("status", &node);
    assert_eq!(status["node"]["id"], NODE_ID, "{status:#}");
    assert_eq!(status["quorum"]["has_quorum"], true, "{status:#}");
    assert_eq!(status["nodes"][0]["id"], NODE_ID, "{status:#}");
    assert_eq!(status["nodes"][0]["state"], "NODE_STATE_UP", "{status:#}");

    let health = client.next("health", &node);
    assert_eq!(
        health,
        json!({"": {"status": "SERVING"}, "meshd.v1.Mesh": {"status": "SERVING"}})
    );

    // The client is subscribed: a config change must reach it.
    assert_eq!(client.next("watching", &node), true);
    let snapshot = client.next("snapshot", &node);
    assert_eq!(snapshot["kind"], "EVENT_KIND_SNAPSHOT", "{snapshot:#}");
    assert_eq!(snapshot["snapshot"]["node"]["id"], NODE_ID, "{snapshot:#}");
    node.setup
        .write_config("\n[thresholds]\nflap_window = \"30s\"\n");
    let event = client.next("event", &node);
    assert_eq!(event["kind"], "EVENT_KIND_CONFIG_RELOADED", "{event:#}");
    assert_eq!(event["observer"], NODE_ID, "{event:#}");
    assert_eq!(
        event["summary"], "config reloaded: 1 members, 0 links",
        "{event:#}"
    );
    client.wait_success();
}
