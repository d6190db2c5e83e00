//! `meshctl status` against a real meshd node started in this process: the
//! table, the JSON contract and the exit codes.

mod binary;

use meshd::config::Config;
use meshd::node::RunningNode;

use binary::{meshctl, text};

const HOSTNAME: &str = "ctl-test";

fn loopback_config() -> Config {
    let mut config = Config::embedded_default(HOSTNAME);
    config.listen.grpc = "127.0.0.1:0".parse().expect("addr");
    config.listen.metrics = "127.0.0.1:0".parse().expect("addr");
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_single_node_exits_zero_with_tables_and_json() {
    let node = RunningNode::start(&loopback_config(), HOSTNAME)
        .await
        .expect("start");
    let addr = node.grpc_addr.to_string();

    let out = meshctl(&["--addr", &addr, "status"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("on ctl-test"), "{stdout}");
    assert!(
        stdout.contains("quorum: yes, 1 of 1 members fresh (ctl-test), leader ctl-test"),
        "{stdout}"
    );
    assert!(stdout.contains("health: healthy"), "{stdout}");

    let out = meshctl(&["--addr", &addr, "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc["node"], "ctl-test");
    assert_eq!(doc["quorum"]["has_quorum"], true);
    assert_eq!(doc["quorum"]["members"], serde_json::json!(["ctl-test"]));
    assert_eq!(doc["quorum"]["leader"], "ctl-test");
    assert_eq!(doc["nodes"][0]["id"], "ctl-test");
    assert_eq!(doc["nodes"][0]["state"], "up");
    assert_eq!(doc["links"], serde_json::json!([]));
    assert_eq!(doc["alarms"], serde_json::json!([]));

    node.shutdown();
    node.wait().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_mesh_exits_one_and_shows_why() {
    let mut config = loopback_config();
    config.peers = vec![
        meshd::config::PeerConfig {
            id: "peer-b".parse().expect("id"),
            address: "127.0.0.1:1".into(),
        },
        meshd::config::PeerConfig {
            id: "peer-c".parse().expect("id"),
            address: "127.0.0.1:2".into(),
        },
    ];
    // The mesh's certificates as an operator makes them.
    let certs = tempfile::tempdir().expect("tempdir");
    let dir = certs.path().to_str().expect("utf-8 path");
    for args in [
        &["certs", "--dir", dir, "init"][..],
        &["certs", "--dir", dir, "issue", "ctl-test"][..],
    ] {
        let out = meshctl(args).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    config.listen.mesh = Some("127.0.0.1:0".parse().expect("addr"));
    config.tls.ca = Some(certs.path().join("ca.pem"));
    config.tls.cert = Some(certs.path().join("ctl-test.pem"));
    config.tls.key = Some(certs.path().join("ctl-test-key.pem"));
    let node = RunningNode::start(&config, HOSTNAME).await.expect("start");
    let addr = node.grpc_addr.to_string();
    // The peers had `report.stale_after` to connect: now they are down.
    let deadline = tokio::time::Instant::now() + config.report.stale_after * 4;
    while node.state.current().alarms.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no alarm");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let out = meshctl(&["--addr", &addr, "status"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("quorum: NO, 1 of 3 members fresh"),
        "{stdout}"
    );
    assert!(stdout.contains("no_quorum"), "{stdout}");
    assert!(stdout.contains("not heard: peer-b, peer-c"), "{stdout}");
    assert!(stdout.contains("    fix: bring peer-b back"), "{stdout}");
    assert!(
        stdout.lines().all(|l| l.chars().count() <= 80),
        "80 columns: {stdout}"
    );

    let out = meshctl(&["--addr", &addr, "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc["quorum"]["has_quorum"], false);
    assert_eq!(doc["quorum"]["leader"], serde_json::Value::Null);
    assert_eq!(doc["nodes"][0]["id"], "ctl-test");
    assert_eq!(doc["nodes"][1]["state"], "down");
    assert!(
        doc["nodes"][1]["fix"]
            .as_str()
            .is_some_and(|f| f.starts_with("bring peer-b back")),
        "{doc:#}"
    );
    assert_eq!(doc["nodes"][0]["fix"], serde_json::Value::Null);
    assert_eq!(doc["alarms"][0]["kind"], "no_quorum");
    assert_eq!(doc["alarms"][0]["severity"], "warning");

    node.shutdown();
    node.wait().await.expect("clean stop");
}

#[tokio::test]
async fn unreachable_daemon_exits_two_naming_the_address() {
    let out = meshctl(&["--addr", "127.0.0.1:1", "status"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("meshctl: cannot reach meshd at 127.0.0.1:1: "),
        "{stderr}"
    );
}

#[tokio::test]
async fn malformed_address_is_a_usage_error_with_a_hint() {
    let out = meshctl(&["--addr", "no-port-here", "status"]).await;
    assert_eq!(out.status.code(), Some(64));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("needs a host and a port"), "{stderr}");
}

#[tokio::test]
async fn unknown_flags_are_usage_errors_and_help_is_not() {
    let out = meshctl(&["status", "--no-such-flag"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    let out = meshctl(&["--help"]).await;
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    assert!(help.contains("Exit codes:"), "{help}");
    assert!(help.contains("64  wrong usage"), "{help}");
}

/// meshctl pointed at the metrics port is told which port it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_port_is_named_as_the_wrong_port() {
    let node = RunningNode::start(&loopback_config(), HOSTNAME)
        .await
        .expect("start");
    let out = meshctl(&["--addr", &node.metrics_addr.to_string(), "status"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("that is meshd's HTTP port"), "{stderr}");
    assert!(
        stderr.contains(&format!("gRPC is on {}", node.grpc_addr)),
        "names the node's own gRPC address: {stderr}"
    );
    node.shutdown();
    node.wait().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_that_is_no_member_is_named_and_refused() {
    let node = RunningNode::start(&loopback_config(), HOSTNAME)
        .await
        .expect("start");
    let addr = node.grpc_addr.to_string();
    let out = meshctl(&["--addr", &addr, "hostfile", "--ranks", "ctl-test,zz"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "refused, not unreachable: {stderr}"
    );
    assert!(
        stderr.contains("zz is not a member of the mesh; its members are ctl-test"),
        "{stderr}"
    );
    node.shutdown();
    node.wait().await.expect("clean stop");
}
