//! A real Prometheus scraping every node of a lab with the shipped alert
//! rules, and a real Alertmanager with the shipped configuration receiving
//! meshd's own pushes (and, when wired, Prometheus's alerts), both in the
//! lab's management namespace: a pulled cable fires MeshLinkDown in both and
//! plugging it back resolves both; a killed node is one page; the survivor
//! of a 2-node mesh pages for its dead peer.
//!
//! Root, Debian's `prometheus` (promtool) and `prometheus-alertmanager`
//! (amtool); skipped with a message without them, except under `CI=true`.

mod common;

use std::time::Duration;

use common::alerting::{ALERT, can_observe, critical_pages, poll};
use common::{VERDICT, four_nodes, link_is, node_blamed, up};
use meshd_lab::Lab;
use serde_json::Value;

/// Prometheus's MeshLinkDown alerts for a-b, by state (`pending`, `firing`).
fn prometheus_link_down(lab: &Lab) -> Option<Vec<String>> {
    let series = lab
        .prometheus_query(r#"ALERTS{alertname="MeshLinkDown", a="a", b="b"}"#)
        .ok()?;
    Some(
        series
            .iter()
            .filter_map(|s| s["metric"]["alertstate"].as_str().map(str::to_owned))
            .collect(),
    )
}

/// Each node's successful posts to Alertmanager, as Prometheus scraped
/// them last.
fn posts_by_node(lab: &Lab) -> std::collections::BTreeMap<String, f64> {
    let posts = lab
        .prometheus_query(r#"sum by (node) (meshd_alert_posts_total{outcome="ok"} * on (instance) group_left (node) meshd_build_info)"#)
        .expect("query");
    posts
        .iter()
        .filter_map(|s| {
            let node = s["metric"]["node"].as_str()?.to_owned();
            let n = s["value"][1].as_str()?.parse::<f64>().ok()?;
            Some((node, n))
        })
        .collect()
}

fn alertmanager_link_down(lab: &Lab) -> Option<Vec<Value>> {
    lab.alertmanager_alerts(&["alertname=MeshLinkDown", "a=a", "b=b"])
        .ok()
}

fn shipped_rules() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dashboards/prometheus/meshd.rules.yml")
}

fn wait_for_scrapes(lab: &Lab, nodes: usize) {
    poll(
        &format!("Prometheus to scrape all {nodes} nodes"),
        ALERT,
        || {
            let up = lab.prometheus_query(r#"sum(up{job="meshd"})"#).ok()?;
            let value = up.first()?["value"][1].as_str()?.parse::<f64>().ok()?;
            (value >= nodes as f64).then_some(())
        },
    );
}

/// The alert names of what `query` returns from Prometheus's `ALERTS`.
fn prometheus_alerts(lab: &Lab, query: &str) -> Option<Vec<String>> {
    let series = lab.prometheus_query(query).ok()?;
    Some(
        series
            .iter()
            .filter_map(|s| s["metric"]["alertname"].as_str().map(str::to_owned))
            .collect(),
    )
}

#[test]
fn prometheus_rules_and_alertmanager_pushes_fire_on_a_pulled_cable_and_resolve() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = four_nodes(true);
    lab.start_alertmanager().expect("alertmanager");
    lab.start_prometheus(&shipped_rules(), false)
        .expect("prometheus");
    wait_for_scrapes(&lab, 4);
    poll("Alertmanager to answer", ALERT, || {
        alertmanager_link_down(&lab)
    });
    assert!(
        prometheus_link_down(&lab).is_some_and(|s| s.is_empty()),
        "nothing fires on a healthy mesh"
    );
    assert!(alertmanager_link_down(&lab).is_some_and(|a| a.is_empty()));

    // Before every node's first reports say it holds quorum, more than one
    // node can take itself for the leader and post the same alerts
    // (harmless); from then on only the leader posts.
    let before = posts_by_node(&lab);
    lab.pull_cable("a", "b").expect("pull");
    lab.wait_all("a-b down", VERDICT, |s| link_is(s, "a", "b", "down"))
        .unwrap_or_else(|err| panic!("{err}"));
    poll("MeshLinkDown a-b firing in Prometheus", ALERT, || {
        prometheus_link_down(&lab).filter(|s| s.iter().any(|s| s == "firing"))
    });
    let pushed = poll("meshd's MeshLinkDown push in Alertmanager", ALERT, || {
        alertmanager_link_down(&lab).filter(|a| !a.is_empty())
    });
    assert_eq!(pushed.len(), 1, "one alert for one cable: {pushed:#?}");
    // The rule's labels exactly (Alertmanager merges the two into one);
    // the poster is an annotation.
    assert_eq!(
        pushed[0]["labels"],
        serde_json::json!({"alertname": "MeshLinkDown", "severity": "critical", "a": "a", "b": "b"}),
        "{pushed:#?}"
    );
    assert_eq!(
        pushed[0]["annotations"]["meshd_posted_by"], "a",
        "{pushed:#?}"
    );
    // Pushed by meshd's alert leader, not by Prometheus (which has no
    // Alertmanager configured), and by no other node.
    let after = poll("a's post in Prometheus", ALERT, || {
        let after = posts_by_node(&lab);
        (after.get("a") > before.get("a")).then_some(after)
    });
    let posters: Vec<&String> = after
        .iter()
        .filter(|(node, n)| before.get(*node).is_none_or(|b| *n > b))
        .map(|(node, _)| node)
        .collect();
    assert_eq!(
        posters,
        ["a"],
        "only the leader posted the cut: {before:?} {after:?}"
    );

    lab.plug_cable("a", "b").expect("plug");
    poll("MeshLinkDown a-b resolved in Prometheus", ALERT, || {
        prometheus_link_down(&lab).filter(Vec::is_empty)
    });
    poll("MeshLinkDown a-b resolved in Alertmanager", ALERT, || {
        alertmanager_link_down(&lab).filter(Vec::is_empty)
    });
}

/// A killed node with both sources wired (meshd's leader posting, and
/// Prometheus sending its rules' alerts to the same Alertmanager, which
/// runs the shipped configuration): exactly one page, MeshNodeDown; its
/// scrape target's MeshdDown is inhibited (and shown to have fired, so the
/// inhibition is what silenced it); no MeshLink* alert in Prometheus.
#[test]
fn a_killed_node_is_one_page_at_alertmanager_with_prometheus_wired_to_it() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = four_nodes(true);
    lab.start_alertmanager().expect("alertmanager");
    lab.start_prometheus(&shipped_rules(), true)
        .expect("prometheus");
    wait_for_scrapes(&lab, 4);
    // MeshdDown names its node from the target's build info.
    poll("Prometheus to hold c's build info", ALERT, || {
        lab.prometheus_query(r#"meshd_build_info{node="c"}"#)
            .ok()
            .filter(|s| !s.is_empty())
    });

    lab.stop("c").expect("stop c");
    lab.wait_for(
        &["a", "b", "d"],
        "c down, its links blamed on it",
        VERDICT,
        |s| node_blamed(s, "c"),
    )
    .unwrap_or_else(|err| panic!("{err}"));
    poll("MeshdDown for c firing in Prometheus", ALERT, || {
        prometheus_alerts(
            &lab,
            r#"ALERTS{alertname="MeshdDown", alertstate="firing", node="c"}"#,
        )
        .filter(|a| !a.is_empty())
    });
    poll("MeshdDown for c inhibited at Alertmanager", ALERT, || {
        let alerts = lab
            .alertmanager_alerts(&["--inhibited", "alertname=MeshdDown", "node=c"])
            .ok()?;
        alerts
            .iter()
            .any(|a| {
                a["status"]["inhibitedBy"]
                    .as_array()
                    .is_some_and(|by| !by.is_empty())
            })
            .then_some(())
    });
    // Held for a while, not just once: a page that comes and goes is a page.
    for _ in 0..10 {
        let pages = critical_pages(&lab).expect("amtool answers");
        assert_eq!(
            pages,
            [("MeshNodeDown".to_owned(), "c".to_owned())],
            "a dead node is exactly one page"
        );
        let links = prometheus_alerts(&lab, r#"ALERTS{alertname=~"MeshLink.*"}"#)
            .expect("promtool answers");
        assert!(links.is_empty(), "no link alert for a dead node: {links:?}");
        std::thread::sleep(Duration::from_secs(1));
    }

    lab.start("c", "info").expect("start c");
    poll("every page resolved after c returned", ALERT, || {
        critical_pages(&lab).filter(Vec::is_empty)
    });
}

/// Two nodes, one killed: the survivor has no quorum, yet it sees its peer
/// silent on every path, calls it down and pages for it itself.
#[test]
fn the_survivor_of_a_two_node_mesh_pages_for_its_dead_peer() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = up(2, true);
    lab.start_alertmanager().expect("alertmanager");
    poll("Alertmanager to answer", ALERT, || critical_pages(&lab));

    lab.stop("b").expect("stop b");
    lab.wait_for(&["a"], "b down at the survivor", VERDICT, |s| {
        s.nodes.iter().any(|n| n.id == "b" && n.state == "down")
    })
    .unwrap_or_else(|err| panic!("{err}"));
    let alerts = poll("MeshNodeDown for b at Alertmanager", ALERT, || {
        lab.alertmanager_alerts(&["alertname=MeshNodeDown", "node=b"])
            .ok()
            .filter(|a| !a.is_empty())
    });
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    assert_eq!(
        alerts[0]["annotations"]["meshd_posted_by"], "a",
        "{alerts:#?}"
    );
    assert!(
        alerts[0]["annotations"]["seen_by"]
            .as_str()
            .is_some_and(|s| s.contains("without quorum")),
        "marked as seen without quorum: {alerts:#?}"
    );

    lab.start("b", "info").expect("start b");
    poll("MeshNodeDown for b resolved", ALERT, || {
        lab.alertmanager_alerts(&["alertname=MeshNodeDown", "node=b"])
            .ok()
            .filter(Vec::is_empty)
    });
}
