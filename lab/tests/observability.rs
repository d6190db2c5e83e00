//! A real Prometheus scraping every node of a 4-node lab with the shipped
//! alert rules, and a real Alertmanager receiving meshd's own pushes, both
//! in the lab's management namespace: a pulled cable fires MeshLinkDown in
//! both, plugging it back resolves both.
//!
//! Root, Debian's `prometheus` (promtool) and `prometheus-alertmanager`
//! (amtool); skipped with a message without them, except under `CI=true`.

mod common;

use std::time::{Duration, Instant};

use common::{VERDICT, four_nodes, link_is};
use meshd_lab::Lab;
use serde_json::Value;

/// Prometheus needs a few scrapes and the rule's `for: 3s`; Alertmanager
/// answers at once. Generous for a loaded two-core host.
const ALERT: Duration = Duration::from_secs(60);

fn poll<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(started.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

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

fn alertmanager_link_down(lab: &Lab) -> Option<Vec<Value>> {
    lab.alertmanager_alerts(&["alertname=MeshLinkDown", "a=a", "b=b"])
        .ok()
}

#[test]
fn prometheus_rules_and_alertmanager_pushes_fire_on_a_pulled_cable_and_resolve() {
    if !common::can_run(&[
        "prometheus",
        "promtool",
        "prometheus-alertmanager",
        "amtool",
    ]) {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = four_nodes(true);
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dashboards/prometheus/meshd.rules.yml");
    lab.start_alertmanager().expect("alertmanager");
    lab.start_prometheus(&rules).expect("prometheus");

    poll("Prometheus to scrape all 4 nodes", ALERT, || {
        let up = lab.prometheus_query(r#"sum(up{job="meshd"})"#).ok()?;
        let value = up.first()?["value"][1].as_str()?.parse::<f64>().ok()?;
        (value >= 4.0).then_some(())
    });
    poll("Alertmanager to answer", ALERT, || {
        alertmanager_link_down(&lab)
    });
    assert!(
        prometheus_link_down(&lab).is_some_and(|s| s.is_empty()),
        "nothing fires on a healthy mesh"
    );
    assert!(alertmanager_link_down(&lab).is_some_and(|a| a.is_empty()));

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
    // Alertmanager configured).
    let posts = lab
        .prometheus_query(r#"sum by (node) (meshd_alert_posts_total{outcome="ok"} * on (instance) group_left (node) meshd_build_info)"#)
        .expect("query");
    let posters: Vec<&str> = posts
        .iter()
        .filter_map(|s| s["metric"]["node"].as_str())
        .collect();
    assert_eq!(posters, ["a"], "only the leader posts: {posts:?}");

    lab.plug_cable("a", "b").expect("plug");
    poll("MeshLinkDown a-b resolved in Prometheus", ALERT, || {
        prometheus_link_down(&lab).filter(Vec::is_empty)
    });
    poll("MeshLinkDown a-b resolved in Alertmanager", ALERT, || {
        alertmanager_link_down(&lab).filter(Vec::is_empty)
    });
}
