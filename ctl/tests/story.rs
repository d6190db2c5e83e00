//! Several faults at once, through the binaries: `meshctl watch --json` on
//! every node of a demo mesh, folded from its opening snapshot, always ends
//! at `meshctl status --json`; and the fixes read the whole picture (which
//! members to bring back, a split named once with its groups, a slow cable
//! blamed on a host only when that host is busy, a verdict held while it
//! clears saying so).

mod binary;
#[path = "../../daemon/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshd::demo::Demo;
use meshd_domain::{AlarmKind, LinkState, MeshStatus, NodeState};
use serde_json::Value;

/// What a status says, as the watch lines carry it: quorum, node and link
/// states, alarms with their severity.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Outline {
    has_quorum: bool,
    nodes: BTreeMap<String, String>,
    links: BTreeMap<String, String>,
    alarms: BTreeMap<String, String>,
}

fn text(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or_default().to_owned()
}

fn link_key(link: &Value) -> String {
    format!(
        "{}/{} <-> {}/{}",
        text(link, "a"),
        text(link, "a_iface"),
        text(link, "b"),
        text(link, "b_iface")
    )
}

fn alarm_key(alarm: &Value) -> String {
    format!(
        "{} on {} ({})",
        text(alarm, "kind"),
        text(alarm, "node"),
        text(alarm, "subject")
    )
}

impl Outline {
    /// Of one `meshctl status --json` document (or a snapshot's status).
    fn of(status: &Value) -> Self {
        let list = |key: &str| status[key].as_array().cloned().unwrap_or_default();
        Self {
            has_quorum: status["quorum"]["has_quorum"].as_bool().unwrap_or(false),
            nodes: list("nodes")
                .iter()
                .map(|n| (text(n, "id"), text(n, "state")))
                .collect(),
            links: list("links")
                .iter()
                .map(|l| (link_key(l), text(l, "state")))
                .collect(),
            alarms: list("alarms")
                .iter()
                .map(|a| (alarm_key(a), text(a, "severity")))
                .collect(),
        }
    }

    /// Applies one `meshctl watch --json` line.
    fn apply(&mut self, event: &Value) {
        if let Some(status) = event.get("status") {
            *self = Self::of(status);
        }
        if let Some(quorum) = event.get("quorum") {
            self.has_quorum = quorum["has_quorum"].as_bool().unwrap_or(false);
        }
        if let Some(node) = event.get("node") {
            self.nodes.insert(text(node, "id"), text(node, "state"));
        }
        if let Some(link) = event.get("link") {
            self.links.insert(link_key(link), text(link, "state"));
        }
        if let Some(alarm) = event.get("alarm") {
            if text(event, "kind") == "alarm_cleared" {
                self.alarms.remove(&alarm_key(alarm));
            } else {
                self.alarms
                    .insert(alarm_key(alarm), text(alarm, "severity"));
            }
        }
    }
}

/// `meshctl watch --json` on one node, its lines kept as they come.
struct Watcher {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl Watcher {
    fn start(addr: SocketAddr) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_meshctl"))
            .args(["--addr", &addr.to_string(), "watch", "--json"])
            .env_remove("MESHCTL_ADDR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("meshctl watch runs");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped");
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|err| panic!("watch line is JSON ({err}): {line}"));
                kept.lock().expect("lines").push(value);
            }
        });
        Self { child, lines }
    }

    fn folded(&self) -> Option<Outline> {
        let lines = self.lines.lock().expect("lines");
        let first = lines.first()?;
        assert_eq!(
            text(first, "kind"),
            "snapshot",
            "the stream opens with the status"
        );
        let mut outline = Outline::default();
        lines.iter().for_each(|event| outline.apply(event));
        Some(outline)
    }

    fn kinds(&self) -> Vec<String> {
        let lines = self.lines.lock().expect("lines");
        lines.iter().map(|l| text(l, "kind")).collect()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn status_json(addr: SocketAddr) -> Option<Value> {
    let out = binary::meshctl(&["--addr", &addr.to_string(), "status", "--json"]).await;
    serde_json::from_slice(&out.stdout).ok()
}

/// Every watched node's events fold to its status: the status can move on
/// meanwhile, so each is given 10 s to agree.
async fn events_fold_to_status(watchers: &BTreeMap<&str, (SocketAddr, Watcher)>, when: &str) {
    for (name, (addr, watcher)) in watchers {
        let started = Instant::now();
        loop {
            let status = status_json(*addr).await.map(|s| Outline::of(&s));
            let folded = watcher.folded();
            if status.is_some() && status == folded {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{when}: {name}'s events fold to {folded:#?}\nbut its status is {status:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn run(demo: &mut Demo, command: &str) {
    let reply = demo.execute(command).await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{command}: {reply}");
}

fn node_state(s: &MeshStatus, id: &str) -> Option<NodeState> {
    s.nodes
        .iter()
        .find(|n| n.id.as_str() == id)
        .map(|n| n.state)
}

fn link_of<'a>(s: &'a MeshStatus, a: &str, b: &str) -> Option<&'a meshd_domain::LinkVerdict> {
    s.links
        .iter()
        .find(|l| l.a.node.as_str() == a && l.b.node.as_str() == b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_four_killed_then_healed_again_and_again_fold_to_the_status() {
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, plan) = common::start_demo(4).await;
    let names = ["a", "b", "c", "d"];
    let addr = |i: usize| plan.nodes[i].grpc();
    common::until(addr(0), "all up", MeshStatus::is_healthy).await;
    let mut watchers: BTreeMap<&str, (SocketAddr, Watcher)> = names
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, (addr(i), Watcher::start(addr(i)))))
        .collect();
    for round in 0..2 {
        run(&mut demo, "kill b").await;
        run(&mut demo, "kill c").await;
        let a = common::until(addr(0), "a without quorum, its alarm settled", |s| {
            !s.quorum.has_quorum && s.alarms.iter().any(|al| al.kind == AlarmKind::NoQuorum)
        })
        .await;
        let no_quorum = a
            .alarms
            .iter()
            .find(|al| al.kind == AlarmKind::NoQuorum)
            .expect("no_quorum");
        assert_eq!(
            no_quorum.fix.as_deref(),
            Some(
                "b, c look down: bring back 1 of them for quorum (3 of 4 members), then check \
                 that meshd runs there"
            ),
            "{no_quorum:#?}"
        );
        for link in &a.links {
            assert_eq!(
                link.fix.as_deref(),
                Some(
                    "this node has no quorum, so it judges no link: follow the no_quorum alarm's fix"
                )
            );
        }
        // b's and c's watchers ended with their nodes.
        let alive: BTreeMap<&str, (SocketAddr, Watcher)> = ["a", "d"]
            .into_iter()
            .filter_map(|n| watchers.remove(n).map(|w| (n, w)))
            .collect();
        events_fold_to_status(&alive, &format!("round {round}, b and c dead")).await;
        watchers = alive;
        run(&mut demo, "heal").await;
        for i in [1, 2] {
            common::until(addr(i), "revived and healthy", MeshStatus::is_healthy).await;
            watchers.insert(names[i], (addr(i), Watcher::start(addr(i))));
        }
        common::until(addr(0), "a healthy again", MeshStatus::is_healthy).await;
        events_fold_to_status(&watchers, &format!("round {round}, healed")).await;
    }
    // The event that took a's b-c link out of the dead nodes' blame: it
    // was lost with quorum, and proved itself up again.
    let kinds = watchers["a"].1.kinds();
    assert!(kinds.iter().any(|k| k == "link_unknown"), "{kinds:?}");
    assert!(kinds.iter().any(|k| k == "link_up"), "{kinds:?}");
    demo.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_and_a_slow_cable_are_told_once_and_fold_to_the_status() {
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, plan) = common::start_demo(4).await;
    let addr = |i: usize| plan.nodes[i].grpc();
    common::until(addr(0), "all up", MeshStatus::is_healthy).await;
    // Slowness is judged against a link's own baseline, which needs three
    // 10 s windows of history.
    let baseline_known = Instant::now() + Duration::from_secs(32);
    let watchers: BTreeMap<&str, (SocketAddr, Watcher)> = ["a", "b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, (addr(i), Watcher::start(addr(i)))))
        .collect();

    run(&mut demo, "partition a,b c,d").await;
    for i in 0..4 {
        let s = common::until(addr(i), "the split named", |s| {
            s.alarms
                .iter()
                .any(|al| al.kind == AlarmKind::ManagementSplit)
        })
        .await;
        // A loaded test host may add its own lateness (mesh_saturated) or
        // CPU alarms: those are the host's, not the split's story.
        let summaries: Vec<&str> = s
            .alarms
            .iter()
            .filter(|al| !matches!(al.kind, AlarmKind::MeshSaturated | AlarmKind::CpuSpike))
            .map(|al| al.summary.as_str())
            .collect();
        assert_eq!(
            summaries,
            ["the management network is split: a, b | c, d"],
            "one alarm naming both groups, no port blamed"
        );
        assert!(s.nodes.iter().all(|n| n.state == NodeState::Up), "{s:#?}");
    }
    events_fold_to_status(&watchers, "management split").await;
    run(&mut demo, "heal").await;
    common::until(addr(0), "healthy after heal", MeshStatus::is_healthy).await;

    tokio::time::sleep_until(baseline_known.into()).await;
    // Far above what a loaded two-core host does to loopback RTTs.
    run(&mut demo, "slow a b 200").await;
    let slow = common::until_within(addr(2), "a-b degraded", Duration::from_secs(30), |s| {
        link_of(s, "a", "b").is_some_and(|l| l.state == LinkState::Degraded)
    })
    .await;
    let link = link_of(&slow, "a", "b").expect("a-b");
    let fix = link.fix.as_deref().unwrap_or_default();
    // The host is blamed only when the status says it is busy.
    let busy: Vec<&str> = slow
        .nodes
        .iter()
        .filter(|n| ["a", "b"].contains(&n.id.as_str()))
        .filter(|n| {
            n.cpu_saturated
                || slow
                    .alarms
                    .iter()
                    .any(|al| al.kind == AlarmKind::CpuSpike && al.node == n.id)
        })
        .map(|n| n.id.as_str())
        .collect();
    if busy.is_empty() {
        assert!(
            fix.contains("adds delay while both hosts are idle"),
            "{fix}"
        );
    } else {
        assert!(
            fix.starts_with(&format!("free the CPU of {}", busy[0])),
            "{fix}"
        );
    }
    run(&mut demo, "heal a b").await;
    let clearing = common::until_within(
        addr(2),
        "a-b held while it clears, saying so",
        Duration::from_secs(30),
        |s| {
            link_of(s, "a", "b").is_some_and(|l| {
                l.state == LinkState::Degraded
                    && l.evidence.iter().any(|e| e.contains("called up after"))
            })
        },
    )
    .await;
    let held = link_of(&clearing, "a", "b").expect("a-b");
    assert!(
        held.fix
            .as_deref()
            .is_some_and(|f| f.starts_with("nothing, if it stays clean")),
        "{held:#?}"
    );
    common::until(addr(2), "a-b up again", |s| {
        link_of(s, "a", "b").is_some_and(|l| l.state == LinkState::Up)
    })
    .await;
    events_fold_to_status(&watchers, "slow cable healed").await;
    assert_eq!(node_state(&clearing, "a"), Some(NodeState::Up));
    demo.stop().await;
}
