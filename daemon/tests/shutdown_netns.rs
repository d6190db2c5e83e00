//! `meshd run` stops promptly on SIGTERM even when a cable is pulled: a
//! restart during a cable fault must not hang on connections over the dead
//! path (a graceful HTTP/2 shutdown waiting on a peer that cannot answer).
//!
//! Layout, all inside two namespaces this test creates and always deletes
//! (so no packet touches the host's own interfaces):
//!
//! ```text
//!   meshd-sd-a-PID (node a)                  meshd-sd-b-PID (node b)
//!   ca 10.254.0.1/30  <==== veth ====>  cb 10.254.0.2/30
//! ```
//!
//! Both nodes run the real binary under `ip netns exec`, with the cable as
//! their only link and the management path over it too. Once a report
//! stream crosses the cable, the test pulls it (`ip link set ca down` in
//! a's namespace) and sends a SIGTERM to a, which must exit within
//! [`STOP_WITHIN`].

mod netns;

use netns::{Cleanup, ip, missing_prerequisite};
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Generous: the node's shutdown budget is 2 s; before it, the mesh gRPC
/// server's graceful HTTP/2 shutdown waited on the peer behind the pulled
/// cable for about 18 s (its keepalive's interval and timeout).
const STOP_WITHIN: Duration = Duration::from_secs(5);
/// How long both nodes get to start and connect over the cable.
const CONNECT_WITHIN: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

fn config(dir: &Path, me: &str, my_ip: &str, peer: &str, peer_ip: &str, iface: &str) -> String {
    let text = format!(
        "[node]\nid = \"{me}\"\n\n\
         [listen]\ngrpc = \"127.0.0.1:7420\"\nmetrics = \"127.0.0.1:9420\"\nmesh = \"{my_ip}:7420\"\n\n\
         [tls]\ninsecure = true\n\n\
         [[peers]]\nid = \"{peer}\"\naddress = \"{peer_ip}:7420\"\n\n\
         [[links]]\npeer = \"{peer}\"\nlocal_iface = \"{iface}\"\nlocal_address = \"{my_ip}\"\npeer_address = \"{peer_ip}\"\n\n\
         [probe]\nport = 7421\n"
    );
    let path = dir.join(format!("{me}.toml"));
    fs::write(&path, text).expect("write config");
    path.to_string_lossy().into_owned()
}

/// Runs meshd in `ns`; its log lines arrive on the returned channel.
fn meshd(ns: &str, config: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_meshd")])
        .args(["run", "--config", config])
        .env("RUST_LOG", "info")
        // Its incident history beside its config, not in the machine's.
        .env(
            "STATE_DIRECTORY",
            std::path::Path::new(config).with_extension("state"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("meshd starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Whether `ns` holds an established TCP connection with `peer_hex`
/// (an IPv4 address as `/proc/net/tcp` writes it).
fn connected(ns: &str, peer_hex: &str) -> bool {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/proc/net/tcp"])
        .output()
        .expect("read /proc/net/tcp");
    String::from_utf8_lossy(&out.stdout).lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() > 3 && fields[2].starts_with(peer_hex) && fields[3] == "01"
    })
}

#[test]
fn sigterm_with_a_pulled_cable_stops_promptly() {
    if let Some(reason) = missing_prerequisite() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "shutdown_netns must run in CI: {reason}"
        );
        eprintln!("skipping shutdown_netns: {reason}");
        return;
    }
    let pid = std::process::id();
    let (a, b) = (format!("meshd-sd-a-{pid}"), format!("meshd-sd-b-{pid}"));
    let mut cleanup = Cleanup {
        namespaces: Vec::new(),
        children: Vec::new(),
    };
    for name in [&a, &b] {
        ip(&["netns", "add", name]);
        cleanup.namespaces.push(name.clone());
        ip(&["-n", name, "link", "set", "lo", "up"]);
    }
    ip(&[
        "-n", &a, "link", "add", "ca", "type", "veth", "peer", "name", "cb", "netns", &b,
    ]);
    ip(&["-n", &a, "addr", "add", "10.254.0.1/30", "dev", "ca"]);
    ip(&["-n", &b, "addr", "add", "10.254.0.2/30", "dev", "cb"]);
    ip(&["-n", &a, "link", "set", "ca", "up"]);
    ip(&["-n", &b, "link", "set", "cb", "up"]);

    let dir = tempfile::tempdir().expect("tempdir");
    let config_a = config(dir.path(), "a", "10.254.0.1", "b", "10.254.0.2", "ca");
    let config_b = config(dir.path(), "b", "10.254.0.2", "a", "10.254.0.1", "cb");
    let (node_b, _logs_b) = meshd(&b, &config_b);
    cleanup.children.push(node_b);
    let (node_a, logs_a) = meshd(&a, &config_a);
    cleanup.children.push(node_a);

    // Report streams both ways over the cable (b's peer, 10.254.0.2).
    let deadline = Instant::now() + CONNECT_WITHIN;
    while !connected(&a, "0200FE0A") {
        assert!(
            Instant::now() < deadline,
            "a and b never connected over the cable"
        );
        std::thread::sleep(POLL);
    }

    ip(&["-n", &a, "link", "set", "ca", "down"]);
    let node_a = cleanup.children.last_mut().expect("node a");
    let status = Command::new("kill")
        .args(["-TERM", &node_a.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let signalled = Instant::now();
    let exit = loop {
        if let Some(exit) = node_a.try_wait().expect("wait for meshd") {
            break exit;
        }
        assert!(
            signalled.elapsed() < STOP_WITHIN,
            "meshd did not stop within {STOP_WITHIN:?} of SIGTERM with its cable pulled; logs:\n{}",
            logs_a.try_iter().collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(POLL);
    };
    let took = signalled.elapsed();
    // The pipe closed with the process: every line is in.
    let logs: Vec<String> = logs_a.iter().collect();
    let stopping = logs
        .iter()
        .skip_while(|line| !line.contains("shutting down"))
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("meshd stopped {took:?} after SIGTERM with its cable pulled:\n{stopping}");
    assert_eq!(exit.code(), Some(0), "graceful stop exits 0: {stopping}");
    assert!(
        logs.iter().any(|line| line.ends_with("meshd: stopped")),
        "no `stopped` line: {stopping}"
    );
}
