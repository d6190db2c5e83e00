//! `meshctl hostfile` and `meshctl doctor --mesh` through the binary
//! against a demo mesh: a hostfile never routes ranks over a cut cable
//! without saying so, and the doctor never shows a dead cable as usable.

mod binary;
#[path = "../../daemon/tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::process::Output;

use meshd_domain::{LinkState, MeshStatus};
use serde_json::Value;

use binary::text;

async fn meshctl(addr: SocketAddr, args: &[&str]) -> Output {
    let addr = addr.to_string();
    let mut all = vec!["--addr", addr.as_str()];
    all.extend_from_slice(args);
    binary::meshctl(&all).await
}

fn link_state(status: &MeshStatus, a: &str, b: &str) -> Option<LinkState> {
    status
        .links
        .iter()
        .find(|l| l.a.node.as_str() == a && l.b.node.as_str() == b)
        .map(|l| l.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostfile_over_a_cut_cable_is_refused_naming_the_pair() {
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, plan) = common::start_demo(3).await;
    let addr = plan.nodes[2].grpc();
    common::until(addr, "every cable declared and every link up", |s| {
        s.cables.len() == 3
            && s.cables
                .iter()
                .all(|c| !c.a.rdma_device.is_empty() && !c.b.rdma_device.is_empty())
            && s.links.len() == 3
            && s.links.iter().all(|l| l.state == LinkState::Up)
    })
    .await;

    let healthy = meshctl(addr, &["hostfile"]).await;
    assert_eq!(healthy.status.code(), Some(0), "{}", text(&healthy.stderr));
    let json: Value = serde_json::from_slice(&healthy.stdout).expect("JSON");
    assert_eq!(json["hosts"].as_array().map(Vec::len), Some(3));
    assert!(json.get("meshd").is_none(), "{json:#}");
    let doctor = meshctl(addr, &["doctor", "--mesh"]).await;
    let report = text(&doctor.stdout);
    assert!(!report.contains("link down"), "{report}");

    let reply = demo.execute("cut a b").await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{reply}");
    common::until(addr, "a-b down", |s| {
        link_state(s, "a", "b") == Some(LinkState::Down)
    })
    .await;

    let refused = meshctl(addr, &["hostfile"]).await;
    let why = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{why}");
    assert!(refused.stdout.is_empty(), "{}", text(&refused.stdout));
    assert!(why.contains("rank 0 (a) ↔ rank 1 (b): link down"), "{why}");
    assert!(why.contains("--allow-degraded"), "{why}");
    assert!(!why.contains("rank 1 (b) ↔ rank 2 (c)"), "{why}");

    // A job on b and c alone does not use the cut cable.
    let pair = meshctl(addr, &["hostfile", "--ranks", "b,c"]).await;
    assert_eq!(pair.status.code(), Some(0), "{}", text(&pair.stderr));

    let allowed = meshctl(addr, &["hostfile", "--allow-degraded"]).await;
    let warned = text(&allowed.stderr);
    assert_eq!(allowed.status.code(), Some(0), "{warned}");
    assert!(
        warned.contains("rank 0 (a) ↔ rank 1 (b) is joined over a link that is down"),
        "{warned}"
    );
    let json: Value = serde_json::from_slice(&allowed.stdout).expect("JSON");
    let marked = &json["meshd"]["links_not_up"];
    assert_eq!(marked.as_array().map(Vec::len), Some(1), "{json:#}");
    assert_eq!(marked[0]["nodes"], serde_json::json!(["a", "b"]));
    assert_eq!(marked[0]["state"], "down");

    let doctor = meshctl(addr, &["doctor", "--mesh"]).await;
    let report = text(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(1), "{report}");
    assert!(report.contains(", link down"), "{report}");
    let doctor = meshctl(addr, &["doctor", "--mesh", "--json"]).await;
    let doc: Value = serde_json::from_slice(&doctor.stdout).expect("JSON");
    assert_eq!(doc["passed"], false);
    let states: Vec<&str> = doc["cables"]
        .as_array()
        .expect("cables")
        .iter()
        .filter_map(|c| c["link"].as_str())
        .collect();
    assert_eq!(
        states.iter().filter(|s| **s == "down").count(),
        1,
        "{doc:#}"
    );
    assert_eq!(states.iter().filter(|s| **s == "up").count(), 2, "{doc:#}");

    demo.stop().await;
}
