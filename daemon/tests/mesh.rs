//! The mesh end to end: 4 and 5 real nodes in one process (the demo's
//! harness: real probers over distinct 127.x cable addresses, real gRPC
//! reports through the demo's fault proxies), faults injected with the
//! demo's commands, verdicts read from every live node.
//!
//! Each test holds the machine-wide test lock (`meshd_test_lock`), so no
//! other mesh, lab or CPU hog shares the two cores with it under either
//! runner; the deadlines are generous bounds on behaviour, never speed
//! measurements.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::start_demo;
use meshd::demo::Demo;
use meshd_domain::{AlarmKind, Blame, EventKind, LinkState, MeshStatus, NodeState};
use meshd_proto::wire;
use meshd_proto::wire::mesh_client::MeshClient;
use tokio_stream::StreamExt;

const SETTLE: Duration = Duration::from_secs(15);

fn link(status: &MeshStatus, x: &str, y: &str) -> (LinkState, Blame, Option<String>) {
    status
        .links
        .iter()
        .find(|l| {
            let ends = (l.a.node.as_str(), l.b.node.as_str());
            ends == (x, y) || ends == (y, x)
        })
        .map(|l| {
            (
                l.state,
                l.blame,
                l.blamed_node.as_ref().map(ToString::to_string),
            )
        })
        .unwrap_or_else(|| panic!("no link {x}-{y} in {status:#?}"))
}

fn node(status: &MeshStatus, id: &str) -> NodeState {
    status
        .nodes
        .iter()
        .find(|n| n.id.as_str() == id)
        .map(|n| n.state)
        .unwrap_or_else(|| panic!("no node {id} in {status:#?}"))
}

/// One node's view in a few lines: quorum, nodes, and links with evidence.
fn summary(s: &MeshStatus) -> String {
    let nodes: Vec<String> = s
        .nodes
        .iter()
        .map(|n| format!("{}={}", n.id, n.state))
        .collect();
    let mut text = format!(
        "{}: quorum {} nodes [{}]",
        s.node.id,
        s.quorum.has_quorum,
        nodes.join(" ")
    );
    for l in &s.links {
        text.push_str(&format!(
            "\n  {}-{} {} blame {} {:?}",
            l.a.node, l.b.node, l.state, l.blame, l.evidence
        ));
    }
    for a in &s.alarms {
        text.push_str(&format!(
            "\n  alarm {} on {}: {}",
            a.kind, a.node, a.summary
        ));
    }
    text
}

fn all_up(s: &MeshStatus) -> bool {
    s.quorum.has_quorum
        && s.nodes.iter().all(|n| n.state == NodeState::Up)
        && s.links.iter().all(|l| l.state == LinkState::Up)
}

/// Polls every running node until `check` holds on all of them, or fails
/// with the statuses that did not satisfy it.
async fn wait_all(
    demo: &Demo,
    within: Duration,
    what: &str,
    check: impl Fn(&MeshStatus) -> bool,
) -> Vec<Arc<MeshStatus>> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let statuses: Vec<Arc<MeshStatus>> = (0..demo.plan().nodes.len())
            .filter_map(|i| demo.node(i))
            .map(|n| n.state.current())
            .collect();
        if statuses.iter().all(|s| check(s)) {
            return statuses;
        }
        if tokio::time::Instant::now() > deadline {
            let failing: Vec<String> = statuses
                .iter()
                .filter(|s| !check(s))
                .map(|s| summary(s))
                .collect();
            panic!(
                "not every node saw {what} within {within:?}:\n{}",
                failing.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn command(demo: &mut Demo, line: &str) {
    let reply = demo.execute(line).await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{line}: {reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_nodes_cut_kill_partition_and_heal() {
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, plan) = start_demo(4).await;
    // Every node has learned every link (a node that has not heard its
    // peers' links yet reads all up over fewer).
    wait_all(&demo, SETTLE, "4 nodes and 6 links up", |s| {
        all_up(s) && s.links.len() == 6 && s.nodes.len() == 4
    })
    .await;

    // A cut cable: exactly that link down, blamed on the link, on every node.
    command(&mut demo, "cut a b").await;
    wait_all(&demo, SETTLE, "a-b down", |s| {
        link(s, "a", "b") == (LinkState::Down, Blame::Link, None)
    })
    .await;
    let statuses = wait_all(&demo, SETTLE, "nothing else down", |s| {
        s.nodes.iter().all(|n| n.state == NodeState::Up)
            && s.links.iter().filter(|l| l.state != LinkState::Up).count() == 1
    })
    .await;
    assert!(statuses.iter().all(|s| s.quorum.has_quorum));
    // The verdict is exported by both ends of the link, and only by them:
    // a node's series grow with its own links, not with the mesh's.
    for node in &plan.nodes {
        let (code, body) = common::http_get(node.metrics(), "/metrics").await;
        assert_eq!(code, 200);
        let end = ["a", "b"].contains(&node.id.as_str());
        assert_eq!(
            body.contains("meshd_link_state{a=\"a\",b=\"b\",state=\"down\",blame=\"link\"} 1"),
            end,
            "{}: {body}",
            node.id
        );
        assert_eq!(body.contains("meshd_link_state{a=\"a\",b=\"b\""), end);
        assert!(body.contains("meshd_quorum_has_quorum 1"));
    }
    command(&mut demo, "heal a b").await;
    wait_all(&demo, SETTLE, "all up after heal", all_up).await;

    // A dead node: the node is down and its links are blamed on it.
    command(&mut demo, "kill c").await;
    wait_all(&demo, SETTLE, "c down, its links on c", |s| {
        node(s, "c") == NodeState::Down
            && ["a", "b", "d"]
                .iter()
                .all(|n| link(s, n, "c") == (LinkState::Down, Blame::Node, Some("c".to_owned())))
            && s.links.iter().all(|l| l.blame != Blame::Link)
    })
    .await;
    command(&mut demo, "revive c").await;
    wait_all(&demo, SETTLE, "all up after revive", all_up).await;

    // A 2+2 management partition: the reports also travel over the
    // cables, so every node keeps quorum and nothing is down; and as no
    // member reaches most of the others on the management network, none
    // can say which is cut off from it: no node is named.
    command(&mut demo, "partition a,b c,d").await;
    let across = |s: &MeshStatus| -> [&str; 2] {
        if ["a", "b"].contains(&s.node.id.as_str()) {
            ["c", "d"]
        } else {
            ["a", "b"]
        }
    };
    let split_seen = |s: &MeshStatus| {
        across(s).iter().all(|far| {
            s.nodes.iter().any(|n| {
                n.id.as_str() == *far
                    && n.evidence
                        .first()
                        .is_some_and(|e| !e.contains("management"))
            })
        })
    };
    wait_all(
        &demo,
        SETTLE,
        "the split heard over the cables only",
        split_seen,
    )
    .await;
    wait_all(
        &demo,
        SETTLE,
        "quorum over the cables, no node blamed, the split named once",
        |s| {
            split_seen(s)
                && s.quorum.has_quorum
                && s.nodes.iter().all(|n| n.state == NodeState::Up)
                && s.links.iter().all(|l| l.state == LinkState::Up)
                && management_split_only(s, "a, b | c, d")
        },
    )
    .await;
    // Cut the cables between the halves too: a real split. No side has
    // quorum, nobody raises link or node alarms, and each says why.
    for (x, y) in [("a", "c"), ("a", "d"), ("b", "c"), ("b", "d")] {
        command(&mut demo, &format!("cut {x} {y}")).await;
    }
    wait_all(&demo, SETTLE, "no quorum anywhere", |s| {
        !s.quorum.has_quorum
            && s.links.iter().all(|l| l.state == LinkState::Unknown)
            && s.alarms.iter().all(|a| a.kind == AlarmKind::NoQuorum)
            && s.alarms.len() == 1
    })
    .await;
    command(&mut demo, "heal").await;
    wait_all(&demo, SETTLE, "all up after heal", all_up).await;
    demo.stop().await;
}

/// The status's only alarm is one management split naming `groups`.
/// The split is the only alarm, a loaded test host's own (its timers late,
/// its CPU spiking: true, and not about the split) aside.
fn management_split_only(s: &MeshStatus, groups: &str) -> bool {
    let about_the_mesh: Vec<_> = s
        .alarms
        .iter()
        .filter(|a| !matches!(a.kind, AlarmKind::MeshSaturated | AlarmKind::CpuSpike))
        .collect();
    let summaries: Vec<&str> = about_the_mesh.iter().map(|a| a.summary.as_str()).collect();
    summaries == [format!("the management network is split: {groups}").as_str()]
        && about_the_mesh[0].kind == AlarmKind::ManagementSplit
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_tell_a_dead_node_from_a_cut_cable_at_the_same_time() {
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, _plan) = start_demo(5).await;
    wait_all(&demo, SETTLE, "5 nodes and 10 links up", all_up).await;
    command(&mut demo, "cut a b").await;
    command(&mut demo, "kill e").await;
    wait_all(&demo, SETTLE, "a-b cut and e dead", |s| {
        s.quorum.has_quorum
            && node(s, "e") == NodeState::Down
            && link(s, "a", "b") == (LinkState::Down, Blame::Link, None)
            && ["a", "b", "c", "d"]
                .iter()
                .all(|n| link(s, n, "e").1 == Blame::Node)
            && s.links.iter().filter(|l| l.blame == Blame::Link).count() == 1
    })
    .await;
    // A 3+2 management partition: every node keeps quorum over the
    // cables; d and e still hear each other, so it is one split, named the
    // same by all five, and nobody is down.
    command(&mut demo, "heal").await;
    wait_all(&demo, SETTLE, "all up after heal", all_up).await;
    command(&mut demo, "partition a,b,c d,e").await;
    wait_all(
        &demo,
        SETTLE,
        "quorum everywhere, the split named once",
        |s| {
            s.quorum.has_quorum
                && s.nodes.iter().all(|n| n.state == NodeState::Up)
                && management_split_only(s, "a, b, c | d, e")
        },
    )
    .await;
    command(&mut demo, "heal").await;
    wait_all(&demo, SETTLE, "all up after heal", all_up).await;
    demo.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_cable_is_flapping_not_a_stream_of_events() {
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, plan) = start_demo(4).await;
    wait_all(&demo, SETTLE, "all up", all_up).await;
    let mut client = MeshClient::new(common::channel(plan.nodes[3].grpc()).await);
    let mut events = client
        .watch_events(wire::WatchEventsRequest {})
        .await
        .expect("watch")
        .into_inner();

    for _ in 0..4 {
        command(&mut demo, "cut a b").await;
        wait_all(&demo, SETTLE, "a-b not up", |s| {
            link(s, "a", "b").0 != LinkState::Up
        })
        .await;
        command(&mut demo, "heal a b").await;
        // Back up (or already called flapping): a loaded host may take longer
        // than the 1 s recovery hold, and a fixed sleep would then miss swings.
        wait_all(&demo, SETTLE, "a-b back", |s| {
            matches!(link(s, "a", "b").0, LinkState::Up | LinkState::Flapping)
        })
        .await;
    }
    wait_all(&demo, SETTLE, "a-b flapping", |s| {
        link(s, "a", "b").0 == LinkState::Flapping
    })
    .await;
    // More swings change nothing while it flaps.
    command(&mut demo, "cut a b").await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    command(&mut demo, "heal a b").await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    wait_all(&demo, SETTLE, "still flapping", |s| {
        link(s, "a", "b").0 == LinkState::Flapping
    })
    .await;

    let mut kinds = Vec::new();
    while let Ok(Some(Ok(event))) =
        tokio::time::timeout(Duration::from_millis(200), events.next()).await
    {
        if event.subject.contains("a") && event.subject.contains("b") {
            kinds.push(meshd_domain::Event::try_from(event).expect("event").kind);
        }
    }
    let flapping = kinds.iter().position(|k| *k == EventKind::LinkFlapping);
    assert!(flapping.is_some(), "a link_flapping event: {kinds:?}");
    assert!(
        kinds.len() <= 5,
        "at most three plain changes before flapping, then quiet: {kinds:?}"
    );
    demo.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_and_slow_cables_are_degraded_not_down() {
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, _plan) = start_demo(4).await;
    wait_all(&demo, SETTLE, "all up", all_up).await;
    // Loss is judged over 10 s; slowness against the link's own baseline,
    // which needs three 10 s windows of history first.
    tokio::time::sleep(Duration::from_secs(32)).await;
    command(&mut demo, "lossy b c 20").await;
    // Far above what a loaded two-core host does to loopback RTTs (its
    // baseline p99 can reach tens of milliseconds), so only the fault counts.
    command(&mut demo, "slow a d 200").await;
    wait_all(
        &demo,
        Duration::from_secs(20),
        "b-c and a-d degraded",
        |s| {
            link(s, "b", "c") == (LinkState::Degraded, Blame::Link, None)
                && link(s, "a", "d") == (LinkState::Degraded, Blame::Link, None)
                && s.links.iter().filter(|l| l.state == LinkState::Up).count() == 4
        },
    )
    .await;
    command(&mut demo, "heal").await;
    wait_all(&demo, Duration::from_secs(30), "all up after heal", all_up).await;
    demo.stop().await;
}
