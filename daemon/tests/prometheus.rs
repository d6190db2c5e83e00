//! The shipped Prometheus rules and Grafana dashboards against real tools:
//! `promtool` checks the rules, runs their unit tests, lints a live node's
//! `/metrics`, and runs the rules on what a node exports for each fault to
//! hold their alerts' labels equal to meshd's own posts; a real
//! `prometheus` scrapes a demo mesh, answers every query of every
//! dashboard, and fires (then resolves) MeshLinkDown when a cable is cut.
//!
//! Needs Debian's `prometheus` package (`promtool` and `prometheus` on the
//! PATH). Without it the tests are skipped with a message, except under
//! `CI=true`, where they fail. Loopback only; deadlines are generous bounds,
//! never speed measurements.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_port, start_demo};
use meshd::metrics::Metrics;
use meshd::state::Published;
use meshd_domain::fixtures::{id, identity, wall};
use meshd_domain::{
    Alarm, AlarmKind, Blame, LinkEnd, LinkState, LinkVerdict, MeshStatus, NodeState, NodeVerdict,
    Quorum, Severity,
};
use meshd_model::alerts::{Alert, Role, alerts};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TARGETS_DEADLINE: Duration = Duration::from_secs(60);
const QUERIES_DEADLINE: Duration = Duration::from_secs(60);
const ALERT_DEADLINE: Duration = Duration::from_secs(30);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace holds the daemon crate")
        .to_path_buf()
}

/// `name` on the PATH, or `None` (the caller skips) — a failure under
/// `CI=true`, where the tools must be installed.
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        let reason = format!("`{name}` is not installed (Debian: apt-get install prometheus)");
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{reason}, and CI=true"
        );
        eprintln!("skipped: {reason}");
    }
    found
}

/// Runs a command to completion; its combined output, and panics with it
/// when the command fails.
fn run(command: &mut Command, stdin: Option<&str>) -> String {
    let described = format!("{command:?}");
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("{described}: {err}"));
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    let output = child.wait_with_output().expect("wait");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{described} failed:\n{text}");
    text
}

#[test]
fn shipped_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let prometheus = repo().join("dashboards/prometheus");
    let rules = prometheus.join("meshd.rules.yml");
    let out = run(
        Command::new(&promtool)
            .arg("check")
            .arg("rules")
            .arg(&rules),
        None,
    );
    assert!(out.contains("SUCCESS"), "{out}");

    let mut tests: Vec<PathBuf> = std::fs::read_dir(prometheus.join("tests"))
        .expect("dashboards/prometheus/tests")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yml"))
        .collect();
    tests.sort();
    assert!(!tests.is_empty(), "no rule tests");
    let out = run(
        Command::new(&promtool).args(["test", "rules"]).args(&tests),
        None,
    );
    assert_eq!(
        out.matches("SUCCESS").count(),
        tests.len(),
        "every rule test file passes:\n{out}"
    );
}

/// Alerts meshd posts that no shipped rule raises. MeshNoQuorum is the
/// minority's own word for its lost quorum (Prometheus says it per
/// instance, as MeshQuorumLost); the others come from alarms only the
/// merged view of the mesh raises.
const POSTED_WITHOUT_RULE: &[&str] = &[
    "MeshNoQuorum",
    "MeshManagementUnreachable",
    "MeshManagementSplit",
    "MeshClockSkew",
    "MeshDuplicateNodeId",
    "MeshSaturated",
];

/// Rules for faults meshd does not post: what only Prometheus sees (its
/// scrape targets, a node's lost quorum) and the incomplete mesh.
const RULES_WITHOUT_POST: &[&str] = &[
    "MeshLinkMissing",
    "MeshQuorumLost",
    "MeshdDown",
    "MeshdUnscraped",
];

/// Samples of each input series, one a second, and when the alerts are
/// read: longer than any rule's `for`.
const PARITY_SAMPLES: u32 = 120;
const PARITY_EVAL: &str = "100s";

/// One fault as the node `status` belongs to sees it, and what meshd posts
/// for it in that node's role.
struct Fault {
    name: String,
    status: MeshStatus,
    posted: Vec<Alert>,
}

impl Fault {
    fn new(name: String, status: MeshStatus) -> Self {
        let posted = alerts(&status, Role::of(&status));
        Self {
            name,
            status,
            posted,
        }
    }
}

fn node_up(name: &str) -> NodeVerdict {
    NodeVerdict {
        id: id(name),
        state: NodeState::Up,
        since: wall(1),
        evidence: vec![],
        identity: None,
        last_report_at: None,
        cpu_saturated: false,
        boot: Default::default(),
        fix: None,
    }
}

fn link_up(a: &str, b: &str) -> LinkVerdict {
    LinkVerdict {
        a: LinkEnd::node_only(id(a)),
        b: LinkEnd::node_only(id(b)),
        state: LinkState::Up,
        since: wall(1),
        evidence: vec![],
        blame: Blame::None,
        blamed_node: None,
        recent_changes: 0,
        flapping: false,
        fix: None,
    }
}

/// A mesh of a, b and c, all up, as a sees it: a leads the quorum, so it
/// posts every alert of its status.
fn healthy() -> MeshStatus {
    MeshStatus {
        node: identity("a", 1),
        evaluated_at: wall(10),
        quorum: Quorum {
            configured: vec![id("a"), id("b"), id("c")],
            members: vec![id("a"), id("b"), id("c")],
            has_quorum: true,
            leader: Some(id("a")),
        },
        nodes: ["a", "b", "c"].into_iter().map(node_up).collect(),
        links: vec![link_up("a", "b"), link_up("a", "c")],
        alarms: vec![],
        cables: vec![],
        checks: vec![],
        measurements: vec![],
        jobs: Vec::new(),
    }
}

/// Every fault meshd posts alerts for: each link verdict blamed on the
/// link, a node down, and every alarm kind at every severity (no_quorum as
/// the node without quorum that raises it). A flapping link that stays
/// dark is left out: meshd holds MeshLinkFlapping beside MeshLinkDown
/// while the metrics say only `down`, so the rule's flapping alert ends
/// (one source then, never two alerts).
fn faults() -> Vec<Fault> {
    let mut faults = Vec::new();
    for state in [LinkState::Down, LinkState::Degraded, LinkState::Flapping] {
        let mut status = healthy();
        status.links[0].state = state;
        status.links[0].blame = Blame::Link;
        status.links[0].flapping = state == LinkState::Flapping;
        faults.push(Fault::new(format!("link a-b {}", state.as_str()), status));
    }
    let mut status = healthy();
    status.nodes[2].state = NodeState::Down;
    status.links[1].state = LinkState::Down;
    status.links[1].blame = Blame::Node;
    status.links[1].blamed_node = Some(id("c"));
    faults.push(Fault::new("node c down".to_owned(), status));
    for &kind in AlarmKind::ALL {
        let mut status = healthy();
        let about = if kind == AlarmKind::NoQuorum {
            status.quorum.members = vec![id("a")];
            status.quorum.has_quorum = false;
            status.quorum.leader = None;
            "a"
        } else {
            "b"
        };
        status.alarms = Severity::ALL
            .iter()
            .map(|&severity| Alarm {
                kind,
                severity,
                node: id(about),
                subject: "subject".into(),
                summary: format!("{kind} on {about}"),
                evidence: vec![],
                fix: None,
                since: wall(2),
                updated: wall(9),
            })
            .collect();
        faults.push(Fault::new(format!("alarm {kind}"), status));
    }
    faults
}

/// The input series of a promtool test: every sample of `exposition`, as
/// Prometheus would store it from `instance` of job `meshd`, held for
/// [`PARITY_SAMPLES`].
fn input_series(exposition: &str, instance: &str) -> Vec<Value> {
    let target = format!(r#"job="meshd",instance="{instance}""#);
    exposition
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not a sample: {line}"));
            let value: f64 = value.parse().unwrap_or_else(|err| panic!("{line}: {err}"));
            // promtool's series notation has no NaN or infinities; no rule
            // reads such a sample.
            if !value.is_finite() {
                return None;
            }
            let series = match series.split_once('{') {
                Some((name, "}")) => format!("{name}{{{target}}}"),
                Some((name, labels)) => format!("{name}{{{target},{labels}"),
                None => format!("{series}{{{target}}}"),
            };
            Some(json!({"series": series, "values": format!("{value}x{PARITY_SAMPLES}")}))
        })
        .collect()
}

/// The name of every alerting rule in `rules`.
fn rule_alert_names(rules: &str) -> BTreeSet<String> {
    rules
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("- alert: "))
        .map(|name| name.trim().to_owned())
        .collect()
}

/// `rules` without their annotations: promtool compares an alert's
/// annotations too, and parity is about labels (a fault's summary and
/// description are each source's own words).
fn without_annotations(rules: &str) -> String {
    let mut kept = String::new();
    let mut skipping_under: Option<usize> = None;
    for line in rules.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(depth) = skipping_under {
            if line.trim().is_empty() || indent > depth {
                continue;
            }
            skipping_under = None;
        }
        if line.trim() == "annotations:" {
            skipping_under = Some(indent);
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// What `promtool check rules` says it found in `file`.
fn rules_found(promtool: &Path, file: &Path) -> String {
    let out = run(
        Command::new(promtool).arg("check").arg("rules").arg(file),
        None,
    );
    out.lines()
        .find(|line| line.contains("SUCCESS"))
        .unwrap_or_else(|| panic!("{out}"))
        .trim()
        .to_owned()
}

/// Where meshd and the shipped rules both raise an alert for a fault, they
/// raise it with one label set, so an Alertmanager fed by both holds one
/// alert. For every fault the alert leader posts, the rules run under
/// promtool on exactly the series the node exports, and must fire every
/// alert name they share with meshd exactly as meshd posts it, label for
/// label (none where meshd posts none). What only one side raises is named
/// in [`POSTED_WITHOUT_RULE`] and [`RULES_WITHOUT_POST`], and those lists
/// are held exact.
#[test]
fn meshd_posts_each_fault_with_the_labels_the_rules_fire_it_with() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let shipped = repo().join("dashboards/prometheus/meshd.rules.yml");
    let rules = std::fs::read_to_string(&shipped).expect("meshd.rules.yml");
    let ruled = rule_alert_names(&rules);
    let faults = faults();
    let posted: BTreeSet<String> = faults
        .iter()
        .flat_map(|f| f.posted.iter().map(|a| a.labels["alertname"].clone()))
        .collect();

    let named = |list: &[&str]| list.iter().map(|&n| n.to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(
        posted.difference(&ruled).cloned().collect::<BTreeSet<_>>(),
        named(POSTED_WITHOUT_RULE),
        "alerts meshd posts without a rule: a new one needs a rule or a place in POSTED_WITHOUT_RULE"
    );
    assert_eq!(
        ruled.difference(&posted).cloned().collect::<BTreeSet<_>>(),
        named(RULES_WITHOUT_POST),
        "rules for no alert meshd posts: a new one is misnamed, or belongs in RULES_WITHOUT_POST"
    );
    let shared: Vec<&String> = posted.intersection(&ruled).collect();

    let dir = tempfile::tempdir().expect("tempdir");
    let stripped = dir.path().join("rules.yml");
    std::fs::write(&stripped, without_annotations(&rules)).expect("write rules");
    assert_eq!(
        rules_found(&promtool, &stripped),
        rules_found(&promtool, &shipped),
        "the rules without annotations are the same rules"
    );

    let groups: Vec<Value> = faults
        .iter()
        .map(|fault| {
            let node = &fault.status.node;
            let exposition = Metrics::new(node).render(&Published {
                status: Arc::new(fault.status.clone()),
                ..Published::placeholder(node)
            });
            let checks: Vec<Value> = shared
                .iter()
                .map(|&name| {
                    let expected: Vec<Value> = fault
                        .posted
                        .iter()
                        .filter(|a| a.labels["alertname"] == *name)
                        .map(|a| {
                            let mut labels = a.labels.clone();
                            labels.remove("alertname");
                            json!({ "exp_labels": labels })
                        })
                        .collect();
                    json!({"eval_time": PARITY_EVAL, "alertname": name, "exp_alerts": expected})
                })
                .collect();
            json!({
                "name": fault.name,
                "interval": "1s",
                "input_series": input_series(&exposition, &format!("{}:9420", node.id)),
                "alert_rule_test": checks,
            })
        })
        .collect();
    // JSON is YAML: promtool reads it as a rule test file.
    let test = json!({
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1s",
        "tests": groups,
    });
    let file = dir.path().join("parity.yml");
    std::fs::write(&file, test.to_string()).expect("write the test");
    let out = run(
        Command::new(&promtool).args(["test", "rules"]).arg(&file),
        None,
    );
    assert!(out.contains("SUCCESS"), "{out}");
    eprintln!(
        "{} faults, {} alert names both raise: {shared:?}",
        faults.len(),
        shared.len()
    );
}

/// The `prometheus` server, killed when the test ends however it ends.
struct Server {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Server {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_prometheus(binary: &Path, dir: &Path, targets: &[SocketAddr]) -> Server {
    let rules = repo().join("dashboards/prometheus/meshd.rules.yml");
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - '{}'\n\
         scrape_configs:\n  - job_name: meshd\n    static_configs:\n      - targets: [{}]\n",
        rules.display(),
        targets.join(", ")
    );
    let config_file = dir.join("prometheus.yml");
    std::fs::write(&config_file, config).expect("write prometheus.yml");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let log = dir.join("prometheus.log");
    let log_file = std::fs::File::create(&log).expect("log file");
    let child = Command::new(binary)
        .arg(format!("--config.file={}", config_file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--log.level=warn")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log file"))
        .stderr(log_file)
        .spawn()
        .expect("prometheus starts");
    Server { child, addr, log }
}

/// A plain HTTP/1.0 GET that reports failure instead of panicking (the
/// server may not listen yet): status code and body.
async fn try_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.ok()?;
        let (head, body) = raw.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

async fn api(server: &Server, path: &str) -> Option<Value> {
    let (code, body) = try_get(server.addr, path).await?;
    let value: Value = serde_json::from_str(&body).ok()?;
    (code == 200 && value["status"] == "success").then_some(value)
}

/// Percent-encodes everything but the unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The result of an instant query, or `None` when it failed.
async fn query(server: &Server, expr: &str) -> Option<Vec<Value>> {
    let answer = api(server, &format!("/api/v1/query?query={}", encode(expr))).await?;
    match &answer["data"]["result"] {
        Value::Array(series) => Some(series.clone()),
        scalar @ (Value::String(_) | Value::Number(_)) => Some(vec![scalar.clone()]),
        _ => None,
    }
}

/// Every `targets[].expr` in a Grafana dashboard, wherever the panel sits
/// (rows nest panels).
fn exprs(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(targets)) = map.get("targets") {
                for target in targets {
                    if let Some(Value::String(expr)) = target.get("expr") {
                        found.push(expr.clone());
                    }
                }
            }
            for child in map.values() {
                exprs(child, found);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| exprs(item, found)),
        _ => {}
    }
}

/// Grafana's variables, as Grafana would fill them in for node a's end of
/// the cable to b.
fn substitute(expr: &str) -> String {
    let filled = [
        ("$__rate_interval", "5s"),
        ("$__interval", "5s"),
        ("$__range", "1m"),
        ("${job}", "meshd"),
        ("$job", "meshd"),
        ("${node}", "a"),
        ("$node", "a"),
        ("${peer}", "b"),
        ("$peer", "b"),
    ]
    .iter()
    .fold(expr.to_owned(), |text, (var, value)| {
        text.replace(var, value)
    });
    assert!(!filled.contains('$'), "a variable left in {filled}");
    filled
}

/// Every dashboard file, parsed, with its file name.
fn dashboards() -> Vec<(String, Value)> {
    let dir = repo().join("dashboards/grafana");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dashboards/grafana")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "dashboards: {files:?}");
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("dashboard");
            let json: Value = serde_json::from_str(&text)
                .unwrap_or_else(|err| panic!("{}: {err}", file.display()));
            let name = file
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, json)
        })
        .collect()
}

fn dashboard_queries() -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for (name, json) in dashboards() {
        let mut found = Vec::new();
        exprs(&json, &mut found);
        assert!(!found.is_empty(), "{name} has no queries");
        queries.extend(found.into_iter().map(|e| (name.clone(), e)));
    }
    queries
}

/// Every panel, wherever it sits (rows nest panels).
fn panels(value: &Value, found: &mut Vec<Value>) {
    if let Some(list) = value["panels"].as_array() {
        for panel in list {
            if panel["type"] != "row" {
                found.push(panel.clone());
            }
            panels(panel, found);
        }
    }
}

/// The dashboards follow whatever job scrapes meshd, say in what unit each
/// panel is, judge nodes and links by the views with quorum only, and
/// draw RTT from the exact gauges. No Prometheus needed.
#[test]
fn dashboards_have_a_job_variable_units_quorum_filters_and_exact_rtt() {
    for (name, json) in dashboards() {
        let variables: Vec<&str> = json["templating"]["list"]
            .as_array()
            .expect("templating")
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert!(
            variables.contains(&"job"),
            "{name}: no job variable: {variables:?}"
        );
        let text = json.to_string();
        assert!(
            !text.contains("job=\\\"meshd\\\""),
            "{name} hard-codes job=\"meshd\""
        );
        let mut all = Vec::new();
        panels(&json, &mut all);
        for panel in &all {
            let title = panel["title"].as_str().unwrap_or_default();
            let unit = panel["fieldConfig"]["defaults"]["unit"].as_str();
            assert!(
                unit.is_some_and(|u| !u.is_empty()),
                "{name}: {title:?} has no unit"
            );
            let mut queries = Vec::new();
            exprs(panel, &mut queries);
            for expr in &queries {
                assert!(
                    expr.contains("job=~\"$job\"") || !expr.contains("meshd_"),
                    "{name}: {title:?} does not select $job: {expr}"
                );
                assert!(
                    !(expr.contains("histogram_quantile") && expr.contains("meshd_link_rtt")),
                    "{name}: {title:?} estimates RTT from buckets: {expr}"
                );
                for verdict in ["meshd_node_state", "meshd_link_state"] {
                    if name == "meshd-overview.json" && expr.contains(verdict) {
                        assert!(
                            expr.matches(verdict).count()
                                == expr.matches("meshd_quorum_has_quorum").count(),
                            "{name}: {title:?} does not filter every view on quorum: {expr}"
                        );
                    }
                }
            }
        }
    }
}

async fn alert_states(server: &Server, name: &str, a: &str, b: &str) -> Vec<String> {
    let Some(answer) = api(server, "/api/v1/alerts").await else {
        return Vec::new();
    };
    answer["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|alert| {
            let labels = &alert["labels"];
            labels["alertname"] == name && labels["a"] == a && labels["b"] == b
        })
        .filter_map(|alert| alert["state"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_demo_answers_every_dashboard_query_and_fires_link_down() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, plan) = start_demo(3).await;
    let targets: Vec<SocketAddr> = plan.nodes.iter().map(|n| n.metrics()).collect();

    // meshd's exposition passes promtool's lint, on every node.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for addr in &targets {
        let (code, body) = common::http_get(*addr, "/metrics").await;
        assert_eq!(code, 200);
        let out = run(
            Command::new(&promtool).args(["check", "metrics"]),
            Some(&body),
        );
        assert!(
            out.trim().is_empty(),
            "promtool check metrics on {addr}:\n{out}"
        );
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_prometheus(&prometheus, dir.path(), &targets);

    // Every node scraped.
    let start = Instant::now();
    loop {
        let up = api(&server, "/api/v1/targets").await.map(|answer| {
            let active = answer["data"]["activeTargets"].as_array().cloned();
            active.unwrap_or_default()
        });
        let healthy = up
            .as_ref()
            .map(|t| t.iter().filter(|t| t["health"] == "up").count());
        if healthy == Some(targets.len()) {
            break;
        }
        assert!(
            start.elapsed() < TARGETS_DEADLINE,
            "targets not all up: {up:?}\nprometheus log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Every query of every dashboard returns data (rates need a few scrapes,
    // so each is retried until the deadline).
    let mut pending = dashboard_queries();
    let total = pending.len();
    let start = Instant::now();
    loop {
        let mut still = Vec::new();
        for (file, expr) in pending {
            let result = query(&server, &substitute(&expr)).await;
            if result.is_none_or(|r| r.is_empty()) {
                still.push((file, expr));
            }
        }
        pending = still;
        if pending.is_empty() {
            eprintln!("{total} dashboard queries return data");
            break;
        }
        assert!(
            start.elapsed() < QUERIES_DEADLINE,
            "dashboard queries without data:\n{}\nprometheus log:\n{}",
            pending
                .iter()
                .map(|(file, expr)| format!("{file}: {}", substitute(expr)))
                .collect::<Vec<_>>()
                .join("\n"),
            server.log()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // The mesh is settled: both ends of a-b (the nodes that export it) call
    // it up with quorum, and no alert fires for it.
    let settled = r#"count(meshd_link_state{a="a", b="b", state="up"} == 1
        and on (instance) meshd_quorum_has_quorum == 1)"#;
    let start = Instant::now();
    loop {
        let count = query(&server, settled).await.and_then(|r| {
            r.first()
                .and_then(|s| s["value"][1].as_str())
                .and_then(|v| v.parse::<usize>().ok())
        });
        if count == Some(2) {
            break;
        }
        assert!(
            start.elapsed() < QUERIES_DEADLINE,
            "a-b not up in every quorate view: {count:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        alert_states(&server, "MeshLinkDown", "a", "b")
            .await
            .is_empty()
    );

    let cut = demo.execute("cut a b").await.reply.unwrap_or_default();
    assert!(cut.starts_with("ok"), "{cut}");
    let start = Instant::now();
    while !alert_states(&server, "MeshLinkDown", "a", "b")
        .await
        .iter()
        .any(|s| s == "firing")
    {
        assert!(
            start.elapsed() < ALERT_DEADLINE,
            "MeshLinkDown a-b not firing after the cut: {:?}\nprometheus log:\n{}",
            api(&server, "/api/v1/alerts").await,
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "MeshLinkDown a-b firing {:?} after the cut",
        start.elapsed()
    );
    // One alert for the cable, not one per node.
    assert_eq!(
        alert_states(&server, "MeshLinkDown", "a", "b").await,
        vec!["firing".to_owned()]
    );

    let healed = demo.execute("heal a b").await.reply.unwrap_or_default();
    assert!(healed.starts_with("ok"), "{healed}");
    let start = Instant::now();
    while !alert_states(&server, "MeshLinkDown", "a", "b")
        .await
        .is_empty()
    {
        assert!(
            start.elapsed() < ALERT_DEADLINE,
            "MeshLinkDown a-b still active after the heal: {:?}",
            api(&server, "/api/v1/alerts").await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("MeshLinkDown a-b gone {:?} after the heal", start.elapsed());

    drop(server);
    demo.stop().await;
}
