//! The alert leader's pushes reach a real Alertmanager (Debian's
//! prometheus-alertmanager, started by this test on loopback): cutting a
//! cable in a demo mesh fires MeshLinkDown there, healing it resolves it,
//! and only the leader posts; a leader that posts nothing cannot silence a
//! page; the shipped inhibit rules quiet the scrape alerts of a node under
//! the mesh's own page for it.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{free_port, http_get};

/// The test needs the real thing; on a laptop without it, it says so and
/// passes, but under CI it must run.
fn alertmanager_binary() -> Option<&'static str> {
    let found = Command::new("prometheus-alertmanager")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some("prometheus-alertmanager");
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "prometheus-alertmanager is missing, and under CI this test must run (.ci/run installs it)"
    );
    eprintln!(
        "skipped: prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager)"
    );
    None
}

/// The example configuration the repo ships (with the inhibit rule that
/// makes a dead node one page).
const SHIPPED_CONFIG: &str = include_str!("../../dashboards/alertmanager/alertmanager.yml");

#[test]
fn the_shipped_alertmanager_config_passes_amtool() {
    if alertmanager_binary().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("alertmanager.yml");
    std::fs::write(&config, SHIPPED_CONFIG).expect("write config");
    let out = Command::new("amtool")
        .arg("check-config")
        .arg(&config)
        .output()
        .expect("amtool runs (it ships with prometheus-alertmanager)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("3 inhibit rules"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shipped inhibit rules on a real Alertmanager: Prometheus' alerts
/// about a scrape target (MeshdDown, MeshdUnscraped) are quiet under the
/// mesh's own page for the same node, a dead node (MeshNodeDown) or one cut
/// from the management network alone (MeshManagementUnreachable), and stand
/// otherwise (a node Prometheus cannot scrape that the mesh hears up); while
/// meshd names a management split (MeshManagementSplit), a node unscraped
/// across it is that split.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_alerts_are_quiet_under_the_meshs_own_page_for_the_same_node() {
    let Some(binary) = alertmanager_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (_alertmanager, addr) = start_alertmanager(binary, dir.path());
    wait_ready(addr).await;
    let posted = [
        ("MeshManagementUnreachable", "c", "warning"),
        ("MeshdUnscraped", "c", "warning"),
        ("MeshdDown", "c", "critical"),
        ("MeshNodeDown", "d", "critical"),
        ("MeshdDown", "d", "critical"),
        ("MeshdUnscraped", "d", "warning"),
        ("MeshdUnscraped", "e", "warning"),
    ];
    for (alertname, node, severity) in posted {
        let out = Command::new("amtool")
            .arg(format!("--alertmanager.url=http://{addr}"))
            .args(["alert", "add"])
            .arg(format!("alertname={alertname}"))
            .arg(format!("node={node}"))
            .arg(format!("severity={severity}"))
            .output()
            .expect("amtool runs (it ships with prometheus-alertmanager)");
        assert!(
            out.status.success(),
            "amtool alert add {alertname} {node}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let held = |alerts: Vec<serde_json::Value>| -> Vec<(String, String)> {
        let mut held: Vec<(String, String)> = alerts
            .iter()
            .map(|a| {
                let label = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_owned();
                (label("alertname"), label("node"))
            })
            .collect();
        held.sort();
        held
    };
    wait_for_alerts(
        "every posted alert, inhibited or not",
        true,
        Duration::from_secs(30),
        || async {
            let (_, body) = http_get(addr, "/api/v2/alerts?inhibited=true").await;
            let all: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap_or_default();
            if all.len() == posted.len() {
                all
            } else {
                Vec::new()
            }
        },
    )
    .await;
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|&(name, node)| (name.to_owned(), node.to_owned()))
            .collect()
    };
    assert_eq!(
        held(active_alerts(addr, &serde_json::json!({})).await),
        pairs(&[
            ("MeshManagementUnreachable", "c"),
            ("MeshNodeDown", "d"),
            ("MeshdUnscraped", "e"),
        ]),
        "one alert per node: the mesh's own where it has one"
    );
    let out = Command::new("amtool")
        .arg(format!("--alertmanager.url=http://{addr}"))
        .args([
            "alert",
            "add",
            "alertname=MeshManagementSplit",
            "severity=warning",
        ])
        .output()
        .expect("amtool runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_alerts(
        "e's scrape alert quiet under the split",
        true,
        Duration::from_secs(30),
        || async {
            let active = held(active_alerts(addr, &serde_json::json!({})).await);
            let expected = pairs(&[
                ("MeshManagementSplit", ""),
                ("MeshManagementUnreachable", "c"),
                ("MeshNodeDown", "d"),
            ]);
            if active == expected {
                vec![serde_json::Value::Null]
            } else {
                Vec::new()
            }
        },
    )
    .await;
}

/// Kills Alertmanager however the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_alertmanager(binary: &str, dir: &std::path::Path) -> (Running, SocketAddr) {
    let config = dir.join("alertmanager.yml");
    std::fs::write(&config, SHIPPED_CONFIG).expect("write config");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let child = Command::new(binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address={addr}"))
        // No cluster: a lone Alertmanager must not gossip on any network.
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("alertmanager starts");
    (Running(child), addr)
}

async fn wait_ready(addr: SocketAddr) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok()
            && http_get(addr, "/-/ready").await.0 == 200
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Alertmanager did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A real Alertmanager on loopback, and a demo mesh of `nodes` whose
/// members `posting` names have it configured; settled for 3 s. The
/// Alertmanager process and its directory live as long as the guard.
async fn mesh_with_alertmanager(
    binary: &str,
    nodes: usize,
    posting: impl Fn(&str) -> bool,
) -> (meshd::demo::Demo, SocketAddr, (Running, tempfile::TempDir)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (alertmanager, addr) = start_alertmanager(binary, dir.path());
    wait_ready(addr).await;
    let (demo, _) = common::start_demo_with(nodes, |plan| {
        for node in plan.nodes.iter_mut().filter(|n| posting(n.id.as_str())) {
            node.config.alerting.alertmanagers = vec![meshd::config::AlertmanagerConfig::url(
                format!("http://{addr}"),
            )];
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    (demo, addr, (alertmanager, dir))
}

/// How many posts a node made to Alertmanager that succeeded.
async fn posts_ok(metrics: SocketAddr) -> u64 {
    let (_, text) = http_get(metrics, "/metrics").await;
    text.lines()
        .filter(|l| l.starts_with("meshd_alert_posts_total{") && l.contains("outcome=\"ok\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Active (firing) alerts in Alertmanager whose labels include `labels`.
async fn active_alerts(addr: SocketAddr, labels: &serde_json::Value) -> Vec<serde_json::Value> {
    let (code, body) = http_get(
        addr,
        "/api/v2/alerts?active=true&silenced=false&inhibited=false",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let alerts: Vec<serde_json::Value> = serde_json::from_str(&body).expect("alerts JSON");
    let wanted = labels.as_object().expect("labels");
    alerts
        .into_iter()
        .filter(|a| wanted.iter().all(|(k, v)| a["labels"][k] == *v))
        .filter(|a| a["status"]["state"] == "active")
        .collect()
}

/// Active (firing) MeshLinkDown alerts for a-b in Alertmanager.
async fn link_down_alerts(addr: SocketAddr) -> Vec<serde_json::Value> {
    active_alerts(
        addr,
        &serde_json::json!({"alertname": "MeshLinkDown", "a": "a", "b": "b"}),
    )
    .await
}

async fn wait_for(addr: SocketAddr, what: &str, want_firing: bool) -> Vec<serde_json::Value> {
    wait_for_alerts(what, want_firing, Duration::from_secs(30), || {
        link_down_alerts(addr)
    })
    .await
}

/// Polls `alerts` until they are firing (or not, with `want_firing`
/// false), failing after `within`.
async fn wait_for_alerts<F, Fut>(
    what: &str,
    want_firing: bool,
    within: Duration,
    alerts: F,
) -> Vec<serde_json::Value>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Vec<serde_json::Value>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let alerts = alerts().await;
        if alerts.is_empty() != want_firing {
            return alerts;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Alertmanager never showed {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_cable_fires_in_alertmanager_and_heal_resolves_it() {
    let Some(binary) = alertmanager_binary() else {
        return;
    };
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, addr, _alertmanager) = mesh_with_alertmanager(binary, 4, |_| true).await;
    let early = link_down_alerts(addr).await;
    assert!(
        early.is_empty(),
        "nothing fires on a healthy mesh: {early:#?}"
    );

    // Before every node's first reports say it holds quorum, more than one
    // node can take itself for the leader and post the same alerts
    // (harmless); from then on only the leader posts.
    let plan = demo.plan().clone();
    let mut before = Vec::new();
    for node in &plan.nodes {
        before.push(posts_ok(node.metrics()).await);
    }

    let reply = demo.execute("cut a b").await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{reply}");
    let firing = wait_for(addr, "MeshLinkDown for a-b", true).await;
    assert_eq!(firing.len(), 1, "one alert for one cable: {firing:#?}");
    let alert = &firing[0];
    // Exactly the labels of the Prometheus rule for the same fault, so
    // Alertmanager merges the two into one alert; who posted it is an
    // annotation.
    assert_eq!(
        alert["labels"],
        serde_json::json!({"alertname": "MeshLinkDown", "severity": "critical", "a": "a", "b": "b"}),
        "{alert:#}"
    );
    assert_eq!(alert["annotations"]["meshd_posted_by"], "a");
    assert!(
        alert["annotations"]["runbook_url"]
            .as_str()
            .is_some_and(|u| u.ends_with("#meshlinkdown"))
    );

    // Only the leader (a, the lowest id) posted the cut.
    for (node, before) in plan.nodes.iter().zip(before) {
        let posted = posts_ok(node.metrics()).await > before;
        assert_eq!(posted, node.id.as_str() == "a", "{} posted", node.id);
    }

    let reply = demo.execute("heal a b").await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{reply}");
    wait_for(addr, "the alert resolved", false).await;
    demo.stop().await;
}

/// The alert leader (a, the lowest id) posts nothing: here it has no
/// Alertmanager configured, as an insider holding a's key might post
/// nothing on purpose. A killed node still reaches Alertmanager within
/// 15 s, posted by a follower that found the leader had not posted it, as
/// one alert; bringing it back resolves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_posts_nothing_cannot_silence_a_page() {
    let Some(binary) = alertmanager_binary() else {
        return;
    };
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, addr, _alertmanager) = mesh_with_alertmanager(binary, 4, |id| id != "a").await;
    let d_down = serde_json::json!({"alertname": "MeshNodeDown", "node": "d"});
    assert!(active_alerts(addr, &d_down).await.is_empty());

    let reply = demo.execute("kill d").await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{reply}");
    let firing = wait_for_alerts("MeshNodeDown for d", true, Duration::from_secs(15), || {
        active_alerts(addr, &d_down)
    })
    .await;
    assert_eq!(firing.len(), 1, "one alert for one dead node: {firing:#?}");
    let posted_by = firing[0]["annotations"]["meshd_posted_by"].clone();
    assert!(
        posted_by == "b" || posted_by == "c",
        "a follower posted it: {posted_by}"
    );

    let reply = demo.execute("revive d").await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{reply}");
    wait_for_alerts(
        "MeshNodeDown for d resolved",
        false,
        Duration::from_secs(30),
        || active_alerts(addr, &d_down),
    )
    .await;
    demo.stop().await;
}
