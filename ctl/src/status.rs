//! `meshctl status`: the answering node's view as tables, or as the stable
//! JSON document scripts rely on.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use meshd_proto::domain::{Alarm, LinkState, LinkVerdict, MeshStatus, NodeId, NodeVerdict};
use meshd_proto::facts::{Cable, CheckResult};
use serde::Serialize;

use crate::checklist::{self, Show};
use crate::client::{self, Target, Unreachable};

/// Prints the status; `Ok(healthy)` decides the exit code.
#[allow(clippy::print_stdout)]
pub async fn run(target: &Target, json: bool) -> Result<bool, Unreachable> {
    let status = client::status(target).await?;
    if json {
        let text = to_json(&status)
            .map_err(|e| Unreachable(format!("cannot encode the status as JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", render(&status, SystemTime::now()));
    }
    Ok(status.is_healthy())
}

/// The JSON contract of `meshctl status --json`. Fields are only ever added,
/// never renamed or removed.
#[derive(Debug, Serialize)]
struct StatusJson<'a> {
    node: &'a str,
    healthy: bool,
    evaluated_at: String,
    /// A string: 64-bit integers lose digits in JavaScript and jq.
    incarnation: String,
    version: &'a str,
    quorum: QuorumJson<'a>,
    nodes: Vec<NodeJson<'a>>,
    links: Vec<LinkJson<'a>>,
    alarms: Vec<AlarmJson<'a>>,
    /// The cable map: node/port ↔ node/port, discovered or configured.
    cables: &'a [Cable],
    /// Platform checks of every node heard, then the mesh-wide ones.
    checks: &'a [CheckResult],
}

#[derive(Debug, Serialize)]
struct QuorumJson<'a> {
    has_quorum: bool,
    members: Vec<&'a str>,
    configured: Vec<&'a str>,
    leader: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct NodeJson<'a> {
    id: &'a str,
    state: &'static str,
    since: String,
    evidence: &'a [String],
    last_report_at: Option<String>,
    cpu_saturated: bool,
}

#[derive(Debug, Serialize)]
struct LinkJson<'a> {
    a: &'a str,
    b: &'a str,
    a_iface: Option<&'a str>,
    b_iface: Option<&'a str>,
    state: &'static str,
    blame: &'static str,
    blamed_node: Option<&'a str>,
    since: String,
    evidence: &'a [String],
}

#[derive(Debug, Serialize)]
struct AlarmJson<'a> {
    kind: &'a str,
    node: &'a str,
    severity: &'static str,
    subject: &'a str,
    summary: &'a str,
    evidence: &'a [String],
    fix: Option<&'a str>,
    since: String,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn ids(list: &[NodeId]) -> Vec<&str> {
    list.iter().map(NodeId::as_str).collect()
}

impl<'a> From<&'a MeshStatus> for StatusJson<'a> {
    fn from(s: &'a MeshStatus) -> Self {
        Self {
            node: s.node.id.as_str(),
            healthy: s.is_healthy(),
            evaluated_at: rfc3339(s.evaluated_at),
            incarnation: s.node.incarnation.0.to_string(),
            version: &s.node.version,
            quorum: QuorumJson {
                has_quorum: s.quorum.has_quorum,
                members: ids(&s.quorum.members),
                configured: ids(&s.quorum.configured),
                leader: s.quorum.leader.as_ref().map(NodeId::as_str),
            },
            nodes: s.nodes.iter().map(NodeJson::from).collect(),
            links: s.links.iter().map(LinkJson::from).collect(),
            alarms: s.alarms.iter().map(AlarmJson::from).collect(),
            cables: &s.cables,
            checks: &s.checks,
        }
    }
}

/// The stable JSON document of a status, for `--json` and bundles.
pub fn to_json(status: &MeshStatus) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(&StatusJson::from(status))
}

impl<'a> From<&'a NodeVerdict> for NodeJson<'a> {
    fn from(n: &'a NodeVerdict) -> Self {
        Self {
            id: n.id.as_str(),
            state: n.state.as_str(),
            since: rfc3339(n.since),
            evidence: &n.evidence,
            last_report_at: n.last_report_at.map(rfc3339),
            cpu_saturated: n.cpu_saturated,
        }
    }
}

impl<'a> From<&'a LinkVerdict> for LinkJson<'a> {
    fn from(l: &'a LinkVerdict) -> Self {
        Self {
            a: l.a.node.as_str(),
            b: l.b.node.as_str(),
            a_iface: l.a.iface.as_deref(),
            b_iface: l.b.iface.as_deref(),
            state: l.state.as_str(),
            blame: l.blame.as_str(),
            blamed_node: l.blamed_node.as_ref().map(NodeId::as_str),
            since: rfc3339(l.since),
            evidence: &l.evidence,
        }
    }
}

impl<'a> From<&'a Alarm> for AlarmJson<'a> {
    fn from(a: &'a Alarm) -> Self {
        Self {
            kind: a.kind.as_str(),
            node: a.node.as_str(),
            severity: a.severity.as_str(),
            subject: &a.subject,
            summary: &a.summary,
            evidence: &a.evidence,
            fix: a.fix.as_deref(),
            since: rfc3339(a.since),
        }
    }
}

/// "12s", "3m", "2h": how long ago, coarse enough to read at a glance.
fn ago(now: SystemTime, then: SystemTime) -> String {
    let d = now.duration_since(then).unwrap_or(Duration::ZERO).as_secs();
    match d {
        0..60 => format!("{d}s"),
        60..3600 => format!("{}m", d / 60),
        3600..86400 => format!("{}h", d / 3600),
        _ => format!("{}d", d / 86400),
    }
}

/// Left-aligned columns, two spaces apart.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::from(" ");
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, " {cell:<width$} ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// The worst state among the links between each pair of nodes.
fn link_matrix(status: &MeshStatus) -> BTreeMap<(&NodeId, &NodeId), LinkState> {
    let mut cells: BTreeMap<(&NodeId, &NodeId), LinkState> = BTreeMap::new();
    for link in &status.links {
        for key in [(&link.a.node, &link.b.node), (&link.b.node, &link.a.node)] {
            let cell = cells.entry(key).or_insert(link.state);
            *cell = (*cell).max(link.state);
        }
    }
    cells
}

pub fn render(status: &MeshStatus, now: SystemTime) -> String {
    let mut out = String::new();
    let q = &status.quorum;
    let _ = writeln!(
        out,
        "meshd {} on {} (incarnation {}), evaluated {} ago",
        status.node.version,
        status.node.id,
        status.node.incarnation.0,
        ago(now, status.evaluated_at)
    );
    let _ = writeln!(
        out,
        "quorum: {}, {} of {} members fresh ({}), leader {}",
        if q.has_quorum { "yes" } else { "NO" },
        q.members.len(),
        q.configured.len(),
        ids(&q.members).join(", "),
        q.leader.as_ref().map_or("none", NodeId::as_str)
    );
    let _ = writeln!(
        out,
        "health: {}",
        if status.is_healthy() {
            "healthy"
        } else {
            "UNHEALTHY"
        }
    );

    let _ = writeln!(out, "\nnodes");
    let mut rows = vec![vec![
        "NODE".into(),
        "STATE".into(),
        "SINCE".into(),
        "EVIDENCE".into(),
    ]];
    rows.extend(status.nodes.iter().map(|n| {
        vec![
            n.id.to_string(),
            n.state.to_string(),
            ago(now, n.since),
            n.evidence.join("; "),
        ]
    }));
    table(&mut out, &rows);

    if !status.links.is_empty() {
        let _ = writeln!(out, "\nlinks");
        let cells = link_matrix(status);
        let names: Vec<&NodeId> = status.nodes.iter().map(|n| &n.id).collect();
        let mut rows = vec![
            std::iter::once(String::new())
                .chain(names.iter().map(|n| n.to_string()))
                .collect::<Vec<_>>(),
        ];
        for row in &names {
            let mut line = vec![row.to_string()];
            for col in &names {
                line.push(if row == col {
                    "-".to_owned()
                } else {
                    cells
                        .get(&(*row, *col))
                        .map_or("·".to_owned(), |s| s.to_string())
                });
            }
            rows.push(line);
        }
        table(&mut out, &rows);
        let troubled: Vec<&LinkVerdict> = status
            .links
            .iter()
            .filter(|l| l.state != LinkState::Up)
            .collect();
        if !troubled.is_empty() {
            let _ = writeln!(out);
            let mut rows = vec![vec![
                "LINK".into(),
                "STATE".into(),
                "BLAME".into(),
                "SINCE".into(),
                "EVIDENCE".into(),
            ]];
            rows.extend(troubled.iter().map(|l| {
                vec![
                    format!("{} <-> {}", l.a, l.b),
                    l.state.to_string(),
                    l.blamed_node
                        .as_ref()
                        .map_or_else(|| l.blame.to_string(), |n| format!("node {n}")),
                    ago(now, l.since),
                    l.evidence.join("; "),
                ]
            }));
            table(&mut out, &rows);
        }
    }

    let _ = writeln!(out, "\nalarms");
    if status.alarms.is_empty() {
        let _ = writeln!(out, "  none");
    } else {
        let mut rows = vec![vec![
            "SEVERITY".into(),
            "NODE".into(),
            "KIND".into(),
            "SUBJECT".into(),
            "SINCE".into(),
            "SUMMARY".into(),
        ]];
        let mut alarms: Vec<&Alarm> = status.alarms.iter().collect();
        alarms.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.since.cmp(&b.since)));
        for alarm in alarms {
            rows.push(vec![
                alarm.severity.to_string(),
                alarm.node.to_string(),
                alarm.kind.to_string(),
                alarm.subject.clone(),
                ago(now, alarm.since),
                alarm.summary.clone(),
            ]);
            // Evidence and fix go under the summary, in its column.
            let under_summary = |text: String| {
                let mut row = vec![String::new(); 5];
                row.push(text);
                row
            };
            rows.extend(
                alarm
                    .evidence
                    .iter()
                    .map(|fact| under_summary(format!("- {fact}"))),
            );
            if let Some(fix) = &alarm.fix {
                rows.push(under_summary(format!("fix: {fix}")));
            }
        }
        table(&mut out, &rows);
    }

    if !status.checks.is_empty() {
        let _ = writeln!(
            out,
            "\nchecks: {} (`meshctl doctor --mesh` lists them all)",
            checklist::summary(&status.checks)
        );
        checklist::render(&mut out, &status.checks, Show::Attention);
    }
    out
}

#[cfg(test)]
mod tests {
    use meshd_proto::domain::{
        Blame, Incarnation, LinkEnd, NodeIdentity, NodeState, Quorum, Severity,
    };

    use super::*;

    fn id(s: &str) -> NodeId {
        NodeId::new(s).expect("valid id")
    }

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn node(name: &str, state: NodeState) -> NodeVerdict {
        NodeVerdict {
            id: id(name),
            state,
            since: t(0),
            evidence: vec![format!("{name} evidence")],
            identity: None,
            last_report_at: None,
            cpu_saturated: false,
            fix: None,
        }
    }

    fn link(a: &str, b: &str, state: LinkState) -> LinkVerdict {
        LinkVerdict {
            a: LinkEnd {
                iface: Some("en2".into()),
                ..LinkEnd::node_only(id(a))
            },
            b: LinkEnd::node_only(id(b)),
            state,
            since: t(10),
            evidence: vec!["loss 100% over 1s".into()],
            blame: if state == LinkState::Up {
                Blame::None
            } else {
                Blame::Link
            },
            blamed_node: None,
            recent_changes: 0,
            fix: None,
        }
    }

    fn sample() -> MeshStatus {
        MeshStatus {
            node: NodeIdentity {
                id: id("a"),
                incarnation: Incarnation(7),
                version: "0.1.0".into(),
                hostname: "a".into(),
            },
            evaluated_at: t(100),
            quorum: Quorum {
                configured: vec![id("a"), id("b"), id("c")],
                members: vec![id("a"), id("b"), id("c")],
                has_quorum: true,
                leader: Some(id("a")),
            },
            nodes: vec![
                node("a", NodeState::Up),
                node("b", NodeState::Up),
                node("c", NodeState::Up),
            ],
            links: vec![
                link("a", "b", LinkState::Up),
                link("a", "c", LinkState::Down),
                link("b", "c", LinkState::Up),
            ],
            alarms: vec![Alarm {
                kind: meshd_proto::domain::AlarmKind::CpuSpike,
                severity: Severity::Warning,
                node: id("b"),
                subject: "cpu".into(),
                summary: "CPU 97% for 30s".into(),
                evidence: vec!["UniversalControl 85%".into()],
                fix: Some("turn off Universal Control".into()),
                since: t(40),
                updated: t(90),
            }],
            cables: vec![],
            checks: vec![],
            measurements: vec![],
        }
    }

    #[test]
    fn json_has_the_contract_fields() {
        let status = sample();
        let value = serde_json::to_value(StatusJson::from(&status)).expect("json");
        assert_eq!(value["node"], "a");
        assert_eq!(value["healthy"], false);
        assert_eq!(value["quorum"]["has_quorum"], true);
        assert_eq!(
            value["quorum"]["members"],
            serde_json::json!(["a", "b", "c"])
        );
        assert_eq!(value["quorum"]["leader"], "a");
        assert_eq!(
            value["nodes"][2],
            serde_json::json!({
                "id": "c", "state": "up", "since": "2027-01-15T08:00:00.000Z",
                "evidence": ["c evidence"], "last_report_at": null, "cpu_saturated": false,
            })
        );
        assert_eq!(value["links"][1]["a"], "a");
        assert_eq!(value["links"][1]["b"], "c");
        assert_eq!(value["links"][1]["state"], "down");
        assert_eq!(value["alarms"][0]["kind"], "cpu_spike");
        assert_eq!(value["alarms"][0]["node"], "b");
        assert_eq!(value["alarms"][0]["severity"], "warning");
        assert_eq!(value["alarms"][0]["summary"], "CPU 97% for 30s");
    }

    #[test]
    fn table_shows_matrix_troubled_links_and_alarms() {
        let text = render(&sample(), t(130));
        assert!(
            text.contains("quorum: yes, 3 of 3 members fresh (a, b, c), leader a"),
            "{text}"
        );
        assert!(text.contains("health: UNHEALTHY"), "{text}");
        let matrix: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "links")
            .skip(1)
            .take(4)
            .map(str::trim_end)
            .collect();
        assert_eq!(
            matrix,
            vec![
                "     a     b   c",
                "  a  -     up  down",
                "  b  up    -   up",
                "  c  down  up  -",
            ],
            "{text}"
        );
        assert!(
            text.contains("a/en2 <-> c  down   link   2m     loss 100% over 1s"),
            "{text}"
        );
        assert!(
            text.contains("warning   b     cpu_spike  cpu      1m     CPU 97% for 30s"),
            "{text}"
        );
        assert!(text.contains("fix: turn off Universal Control"), "{text}");
    }

    #[test]
    fn healthy_single_node_reads_healthy() {
        let mut status = sample();
        status.nodes.truncate(1);
        status.links.clear();
        status.alarms.clear();
        status.quorum.configured.truncate(1);
        status.quorum.members.truncate(1);
        let text = render(&status, t(100));
        assert!(text.contains("health: healthy"), "{text}");
        assert!(text.contains("alarms\n  none"), "{text}");
        assert!(!text.contains("links"), "{text}");
    }

    #[test]
    fn ago_is_coarse() {
        assert_eq!(ago(t(59), t(0)), "59s");
        assert_eq!(ago(t(3599), t(0)), "59m");
        assert_eq!(ago(t(7200), t(0)), "2h");
        assert_eq!(ago(t(0), t(5)), "0s", "a future time is now");
    }
}
