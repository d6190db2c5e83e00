//! Platform facts end to end in a real two-node mesh: each node reads its
//! facts from a bundle of real macOS outputs (`platform.replay_dir`), the
//! facts travel in the peer reports, and both nodes build the same cable
//! map from the Thunderbolt domain UUIDs, run the mesh-wide checks, raise
//! the alarms of failing checks and export them as metrics; the Topology
//! service turns the cable map into a JACCL hostfile.

mod common;

use std::path::{Path, PathBuf};

use meshd::demo::Demo;
use meshd::demo::plan::Plan;
use meshd_domain::facts::CheckStatus;
use meshd_domain::{AlarmKind, LinkState};
use meshd_mesh::hostfile::{Hostfile, to_mlx_json, validate_mlx_hostfile};
use meshd_proto::wire;
use meshd_proto::wire::topology_client::TopologyClient;

use common::{channel, http_get, until};

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../platform/tests/scenarios")
        .join(name)
}

/// A two-node demo whose nodes read the two MacBook Pros of one capture,
/// which are cabled to each other.
async fn start_replaying_demo() -> (Demo, Plan) {
    common::start_demo_with(2, |plan| {
        plan.nodes[0].config.platform.replay_dir = Some(scenario("macbook-m5-max-rdma-disabled"));
        plan.nodes[1].config.platform.replay_dir =
            Some(scenario("macbook-m5-max-rdma-enabled-ports-down"));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facts_travel_cables_are_discovered_and_failing_checks_alarm() {
    let _serial = meshd_test_lock::exclusive();
    let (demo, plan) = start_replaying_demo().await;
    for node in &plan.nodes {
        let other = plan.nodes.iter().find(|n| n.id != node.id).expect("other");
        let status = until(
            node.grpc(),
            "a discovered cable and both nodes' checks",
            |s| {
                s.cables.iter().any(|c| c.discovered)
                    && s.checks.iter().any(|c| c.node.as_ref() == Some(&other.id))
            },
        )
        .await;
        let discovered: Vec<_> = status.cables.iter().filter(|c| c.discovered).collect();
        assert_eq!(discovered.len(), 1, "{:#?}", status.cables);
        let cable = discovered[0];
        assert_eq!(
            (cable.a.port.as_str(), cable.b.port.as_str()),
            ("Thunderbolt 2", "Thunderbolt 2")
        );
        assert_eq!(
            (cable.a.iface.as_str(), cable.b.iface.as_str()),
            ("en6", "en6")
        );
        assert_eq!(cable.speed_bps, 80_000_000_000);

        // Node a's capture has RDMA off: its check fails on every node's
        // view, and the alarm it raises reaches the peer too.
        let rdma_a = status
            .checks
            .iter()
            .find(|c| c.name == "rdma_enabled" && c.node.as_ref() == Some(&plan.nodes[0].id))
            .expect("a's rdma check");
        assert_eq!(rdma_a.status, CheckStatus::Fail);
        let alarm = until(node.grpc(), "the rdma_disabled alarm", |s| {
            s.alarms.iter().any(|a| a.kind == AlarmKind::RdmaDisabled)
        })
        .await
        .alarms
        .into_iter()
        .find(|a| a.kind == AlarmKind::RdmaDisabled)
        .expect("alarm");
        assert_eq!(alarm.node, plan.nodes[0].id);
        assert!(
            alarm
                .fix
                .as_deref()
                .unwrap_or("")
                .contains("rdma_ctl enable"),
            "{alarm:?}"
        );
        assert!(
            status
                .checks
                .iter()
                .any(|c| c.node.is_none() && c.name == "full_mesh_cabled"),
            "mesh-wide checks: {:#?}",
            status.checks
        );

        // Each node exports its own checks only: a's failing check is on
        // a's /metrics, not on its peer's.
        let (code, metrics) = http_get(node.metrics(), "/metrics").await;
        assert_eq!(code, 200);
        let a = plan.nodes[0].id.as_str();
        let failing =
            format!(r#"meshd_check_status{{node="{a}",check="rdma_enabled",status="fail"}} 1"#);
        assert_eq!(
            metrics.contains(&failing),
            node.id.as_str() == a,
            "{metrics}"
        );
        assert!(
            !metrics.contains(&format!(r#"meshd_check_status{{node="{}""#, other.id)),
            "{metrics}"
        );
        assert!(
            metrics.contains(r#"meshd_cables{source="discovered"} 1"#),
            "{metrics}"
        );
        assert!(metrics.contains("meshd_facts_blind_spots "), "{metrics}");
    }

    // Node a has no RDMA device on the discovered cable (RDMA is off there),
    // so no JACCL hostfile can be built, and the refusal says why.
    let mut topology = TopologyClient::new(channel(plan.nodes[0].grpc()).await);
    let refused = topology
        .get_hostfile(wire::GetHostfileRequest {
            backend: wire::HostfileBackend::Jaccl as i32,
            ..Default::default()
        })
        .await
        .expect_err("no device at a");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused
            .message()
            .contains("cable a/Thunderbolt 2 ↔ b/Thunderbolt 2 has no RDMA device at a"),
        "{refused:?}"
    );
    demo.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_serves_a_valid_jaccl_hostfile_and_refuses_bad_requests() {
    let _serial = meshd_test_lock::exclusive();
    let (demo, plan) = common::start_demo(4).await;
    let addr = plan.nodes[1].grpc();
    // Each end's device comes from its own node's config, through that
    // node's reports: wait until every node has been heard declaring, and
    // every link judged up (a hostfile over a link that is not is refused).
    until(
        addr,
        "every cable declared by both ends, every link up",
        |s| {
            s.cables.len() == 6
                && s.cables
                    .iter()
                    .all(|c| !c.a.rdma_device.is_empty() && !c.b.rdma_device.is_empty())
                && s.links.len() == 6
                && s.links.iter().all(|l| l.state == LinkState::Up)
        },
    )
    .await;
    let mut topology = TopologyClient::new(channel(addr).await);
    for backend in [
        wire::HostfileBackend::Jaccl,
        wire::HostfileBackend::JacclRing,
    ] {
        let reply = topology
            .get_hostfile(wire::GetHostfileRequest {
                backend: backend as i32,
                ssh: [("a".to_owned(), "admin@10.0.0.1".to_owned())].into(),
                ..Default::default()
            })
            .await
            .expect("hostfile")
            .into_inner();
        let hostfile = Hostfile::try_from(reply).expect("well-formed");
        let json = to_mlx_json(&hostfile);
        assert_eq!(
            validate_mlx_hostfile(&json),
            Vec::<String>::new(),
            "{json:#}"
        );
        assert_eq!(hostfile.hosts.len(), 4);
        assert_eq!(hostfile.hosts[0].ssh, "admin@10.0.0.1");
        assert_eq!(hostfile.hosts[1].ssh, "b");
        // Rank 0 is a peer of the answering node: its management address.
        assert_eq!(hostfile.hosts[0].ips, ["127.0.0.1"]);
    }
    let refused = topology
        .get_hostfile(wire::GetHostfileRequest {
            ranks: vec!["a".into(), "zz".into()],
            ..Default::default()
        })
        .await
        .expect_err("an unknown rank");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("ranks[1]: zz is not a member of the mesh"),
        "{refused:?}"
    );
    let refused = topology
        .get_hostfile(wire::GetHostfileRequest {
            rank0_ip: "not-an-ip".into(),
            ..Default::default()
        })
        .await
        .expect_err("a bad address");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("rank0_ip"), "{refused:?}");
    demo.stop().await;
}
