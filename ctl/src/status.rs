//! `meshctl status`: the answering node's view as tables, or as the stable
//! JSON document scripts rely on.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use meshd_domain::facts::{Cable, CheckResult};
use meshd_domain::human;
use meshd_domain::{
    Alarm, LinkState, LinkVerdict, MeshStatus, NodeId, NodeState, NodeVerdict, Quorum,
};
use serde::Serialize;

use crate::checklist::{self, Show};
use crate::client::{self, Target};
use crate::jobs::JobJson;
use crate::layout::{WIDTH, hanging, table};
use crate::outcome::{Failure, emit};

/// Prints the status; `Ok(healthy)` decides the exit code.
pub async fn run(target: &Target, json: bool) -> Result<bool, Failure> {
    let status = client::status(target).await?;
    if json {
        let text = to_json(&status)
            .map_err(|e| Failure::Refused(format!("cannot encode the status as JSON: {e}")))?;
        emit(&format!("{text}\n"))?;
    } else {
        emit(&render(&status, SystemTime::now()))?;
    }
    Ok(status.is_healthy())
}

/// The JSON contract of `meshctl status --json`. Fields are only ever added,
/// never renamed or removed.
#[derive(Debug, Serialize)]
pub(crate) struct StatusJson<'a> {
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
    /// The distributed jobs the nodes run (as `meshctl jobs --json`).
    jobs: Vec<JobJson<'a>>,
}

#[derive(Debug, Serialize)]
pub(crate) struct QuorumJson<'a> {
    has_quorum: bool,
    members: Vec<&'a str>,
    configured: Vec<&'a str>,
    leader: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub(crate) struct NodeJson<'a> {
    id: &'a str,
    state: &'static str,
    since: String,
    evidence: &'a [String],
    last_report_at: Option<String>,
    cpu_saturated: bool,
    /// What to do about a node that is not up; null while it is up.
    fix: Option<&'a str>,
    /// Which boot of its host the node is in; `null` when unknown. It
    /// changes when the host reboots, not when meshd restarts.
    boot: Option<BootJson<'a>>,
}

#[derive(Debug, Serialize)]
struct BootJson<'a> {
    /// macOS `kern.bootsessionuuid`, Linux `boot_id`; `null` when unknown.
    id: Option<&'a str>,
    /// When the host booted; `null` when unknown.
    booted_at: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct LinkJson<'a> {
    a: &'a str,
    b: &'a str,
    a_iface: Option<&'a str>,
    b_iface: Option<&'a str>,
    state: &'static str,
    blame: &'static str,
    blamed_node: Option<&'a str>,
    since: String,
    evidence: &'a [String],
    /// What to do about a link that is not up; null while it is up.
    fix: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub(crate) struct AlarmJson<'a> {
    kind: &'a str,
    node: &'a str,
    severity: &'static str,
    subject: &'a str,
    summary: &'a str,
    evidence: &'a [String],
    fix: Option<&'a str>,
    since: String,
}

pub fn rfc3339(t: SystemTime) -> String {
    meshd_domain::time::rfc3339_millis(t)
        .unwrap_or_else(|| meshd_domain::time::OUT_OF_RANGE.to_owned())
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
            quorum: QuorumJson::from(&s.quorum),
            nodes: s.nodes.iter().map(NodeJson::from).collect(),
            links: s.links.iter().map(LinkJson::from).collect(),
            alarms: s.alarms.iter().map(AlarmJson::from).collect(),
            cables: &s.cables,
            checks: &s.checks,
            jobs: s.jobs.iter().map(JobJson::from).collect(),
        }
    }
}

impl<'a> From<&'a Quorum> for QuorumJson<'a> {
    fn from(q: &'a Quorum) -> Self {
        Self {
            has_quorum: q.has_quorum,
            members: ids(&q.members),
            configured: ids(&q.configured),
            leader: q.leader.as_ref().map(NodeId::as_str),
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
            boot: n.boot.is_known().then(|| BootJson {
                id: n.boot.id.as_deref(),
                booted_at: n
                    .boot
                    .booted_at_unix
                    .map(|s| rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(s))),
            }),
            fix: n.fix.as_deref(),
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
            fix: l.fix.as_deref(),
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

/// How long ago `then` was, in meshd's one duration format.
pub fn ago(now: SystemTime, then: SystemTime) -> String {
    human::duration(now.duration_since(then).unwrap_or(Duration::ZERO))
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

/// The link matrix, with node ids as column headings when that fits in
/// [`WIDTH`]; otherwise numbered columns and short states.
fn matrix(out: &mut String, status: &MeshStatus) {
    let cells = link_matrix(status);
    let names: Vec<&NodeId> = status.nodes.iter().map(|n| &n.id).collect();
    let cell = |row: &NodeId, col: &NodeId, short: bool| {
        if row == col {
            return "-".to_owned();
        }
        match cells.get(&(row, col)) {
            None => "·".to_owned(),
            Some(state) if short => short_state(*state).to_owned(),
            Some(state) => state.to_string(),
        }
    };
    let widest = |short: bool| {
        names
            .iter()
            .flat_map(|r| names.iter().map(move |c| (r, c)))
            .map(|(r, c)| cell(r, c, short).chars().count())
            .max()
            .unwrap_or(0)
    };
    let label = names
        .iter()
        .map(|n| n.as_str().chars().count())
        .max()
        .unwrap_or(0);
    let name_columns = names
        .iter()
        .map(|n| n.as_str().chars().count().max(widest(false)) + 2)
        .sum::<usize>();
    let mut rows = Vec::new();
    if 2 + label + 2 + name_columns <= WIDTH {
        rows.push(
            std::iter::once(String::new())
                .chain(names.iter().map(|n| n.to_string()))
                .collect::<Vec<_>>(),
        );
        for row in &names {
            rows.push(
                std::iter::once(row.to_string())
                    .chain(names.iter().map(|col| cell(row, col, false)))
                    .collect(),
            );
        }
    } else {
        rows.push(
            std::iter::once(String::new())
                .chain((1..=names.len()).map(|i| i.to_string()))
                .collect(),
        );
        for (i, row) in names.iter().enumerate() {
            rows.push(
                std::iter::once(format!("{} {row}", i + 1))
                    .chain(names.iter().map(|col| cell(row, col, true)))
                    .collect(),
            );
        }
    }
    // The matrix has no free-text column: an empty one keeps every cell
    // aligned instead of wrapping the last.
    for row in &mut rows {
        row.push(String::new());
    }
    table(out, &rows);
    if rows
        .first()
        .is_some_and(|r| r.get(1).is_some_and(|c| c == "1"))
    {
        let _ = writeln!(
            out,
            "  (columns in row order; deg degraded, flap flapping, ? unknown)"
        );
    }
}

fn short_state(state: LinkState) -> &'static str {
    match state {
        LinkState::Up => "up",
        LinkState::Down => "down",
        LinkState::Degraded => "deg",
        LinkState::Flapping => "flap",
        LinkState::Unknown => "?",
    }
}

/// A table whose rows after the header are `items`, each followed by what
/// `details` writes for it (after the row's wrapped lines, if any).
fn table_with_details<T>(
    out: &mut String,
    rows: &[Vec<String>],
    items: &[T],
    details: impl Fn(&mut String, &T),
) {
    let mut rendered = String::new();
    table(&mut rendered, rows);
    let mut lines = rendered.lines();
    if let Some(header) = lines.next() {
        let _ = writeln!(out, "{header}");
    }
    let mut items = items.iter();
    let mut pending = None;
    for line in lines {
        // A row starts at column 2; the wrapped rest of its last column is
        // indented further.
        if !line.starts_with("   ") {
            if let Some(item) = pending.take() {
                details(out, item);
            }
            pending = items.next();
        }
        let _ = writeln!(out, "{line}");
    }
    if let Some(item) = pending {
        details(out, item);
    }
}

/// Evidence lines and the fix under an item, indented by four.
fn details(out: &mut String, evidence: &[String], fix: Option<&str>) {
    for fact in evidence {
        hanging(out, "    - ", fact);
    }
    if let Some(fix) = fix {
        hanging(out, "    fix: ", fix);
    }
}

pub fn render(status: &MeshStatus, now: SystemTime) -> String {
    let mut out = String::new();
    headline(&mut out, status, now);
    nodes(&mut out, status, now);
    let troubled: Vec<&LinkVerdict> = status
        .links
        .iter()
        .filter(|l| l.state != LinkState::Up)
        .collect();
    links(&mut out, status, &troubled, now);
    alarms(&mut out, status, troubled.len(), now);
    jobs(&mut out, status);
    checks(&mut out, &status.checks);
    out
}

/// How many distributed jobs run and how many hang, in one line; nothing
/// when no node runs a rank. Their ranks are `meshctl jobs`'.
fn jobs(out: &mut String, status: &MeshStatus) {
    if status.jobs.is_empty() {
        return;
    }
    let hung = status.jobs.iter().filter(|j| j.hung.is_some()).count();
    let _ = writeln!(
        out,
        "\njobs: {} running, {hung} hung (meshctl jobs shows their ranks)",
        status.jobs.len() - hung
    );
}

/// The answering node, the quorum and the overall health, one line each.
fn headline(out: &mut String, status: &MeshStatus, now: SystemTime) {
    let q = &status.quorum;
    hanging(
        out,
        "",
        &format!(
            "meshd {} on {} (incarnation {}), evaluated {} ago",
            status.node.version,
            status.node.id,
            status.node.incarnation.0,
            ago(now, status.evaluated_at)
        ),
    );
    hanging(
        out,
        "quorum: ",
        &format!(
            "{}, {} of {} members fresh ({}), leader {}",
            if q.has_quorum { "yes" } else { "NO" },
            q.members.len(),
            q.configured.len(),
            ids(&q.members).join(", "),
            q.leader.as_ref().map_or("none", NodeId::as_str)
        ),
    );
    if status.is_healthy() {
        let _ = writeln!(out, "health: healthy");
    } else {
        hanging(
            out,
            "health: ",
            &format!("UNHEALTHY: {}", status.troubles().join(", ")),
        );
    }
}

/// Every node's verdict. Evidence in the table for nodes that are up; under
/// the row, with the fix, for the others.
fn nodes(out: &mut String, status: &MeshStatus, now: SystemTime) {
    let _ = writeln!(out, "\nnodes");
    let up = |n: &NodeVerdict| n.state == NodeState::Up;
    let rows: Vec<Vec<String>> = std::iter::once(vec![
        "NODE".into(),
        "STATE".into(),
        "SINCE".into(),
        "EVIDENCE".into(),
    ])
    .chain(status.nodes.iter().map(|n| {
        vec![
            n.id.to_string(),
            n.state.to_string(),
            ago(now, n.since),
            if up(n) {
                n.evidence.join("; ")
            } else {
                String::new()
            },
        ]
    }))
    .collect();
    table_with_details(out, &rows, &status.nodes, |out, node| {
        if !up(node) {
            details(out, &node.evidence, node.fix.as_deref());
        }
    });
}

/// The link matrix, then a table of the `troubled` links (those not up) with
/// their evidence and fix.
fn links(out: &mut String, status: &MeshStatus, troubled: &[&LinkVerdict], now: SystemTime) {
    if !status.links.is_empty() {
        let _ = writeln!(out, "\nlinks");
        matrix(out, status);
    }
    if troubled.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nlinks not up");
    let rows: Vec<Vec<String>> = std::iter::once(vec![
        "LINK".into(),
        "STATE".into(),
        "BLAME".into(),
        "SINCE".into(),
        String::new(),
    ])
    .chain(troubled.iter().map(|l| {
        vec![
            format!("{} <-> {}", l.a, l.b),
            l.state.to_string(),
            l.blamed_node
                .as_ref()
                .map_or_else(|| l.blame.to_string(), |n| format!("node {n}")),
            ago(now, l.since),
            String::new(),
        ]
    }))
    .collect();
    table_with_details(out, &rows, troubled, |out, link| {
        details(out, &link.evidence, link.fix.as_deref());
    });
}

/// The alarms, most severe and then oldest first. With none, the line says
/// whether the links and nodes above are all the trouble there is.
fn alarms(out: &mut String, status: &MeshStatus, troubled_links: usize, now: SystemTime) {
    if status.alarms.is_empty() {
        let besides = troubled_links
            + status
                .nodes
                .iter()
                .filter(|n| n.state != NodeState::Up)
                .count();
        let _ = writeln!(
            out,
            "\nalarms: {}",
            if besides == 0 {
                "none"
            } else {
                "none besides the links and nodes above"
            }
        );
        return;
    }
    let _ = writeln!(out, "\nalarms");
    let mut alarms: Vec<&Alarm> = status.alarms.iter().collect();
    alarms.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.since.cmp(&b.since)));
    let rows: Vec<Vec<String>> = std::iter::once(vec![
        "SEVERITY".into(),
        "NODE".into(),
        "KIND".into(),
        "SUBJECT".into(),
        "SINCE".into(),
        String::new(),
    ])
    .chain(alarms.iter().map(|alarm| {
        vec![
            alarm.severity.to_string(),
            alarm.node.to_string(),
            alarm.kind.to_string(),
            alarm.subject.clone(),
            ago(now, alarm.since),
            String::new(),
        ]
    }))
    .collect();
    table_with_details(out, &rows, &alarms, |out, alarm| {
        hanging(out, "    ", &alarm.summary);
        details(out, &alarm.evidence, alarm.fix.as_deref());
    });
}

/// The summary of the platform and mesh checks, and those that need
/// attention.
fn checks(out: &mut String, checks: &[CheckResult]) {
    if checks.is_empty() {
        return;
    }
    let _ = writeln!(out);
    hanging(
        out,
        "checks: ",
        &format!(
            "{} (`meshctl doctor --mesh` lists them all)",
            checklist::summary(checks)
        ),
    );
    checklist::render(out, checks, Show::Attention);
}

#[cfg(test)]
mod tests {
    use meshd_domain::facts::CheckStatus;
    use meshd_domain::fixtures::{id, wall};
    use meshd_domain::{Blame, Incarnation, LinkEnd, NodeIdentity, Quorum, Severity};

    use super::*;

    fn node(name: &str, state: NodeState) -> NodeVerdict {
        NodeVerdict {
            id: id(name),
            state,
            since: wall(0),
            evidence: vec![format!("{name} evidence")],
            identity: None,
            last_report_at: None,
            cpu_saturated: false,
            boot: Default::default(),
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
            since: wall(10),
            evidence: vec!["loss 100% over 1s".into()],
            blame: if state == LinkState::Up {
                Blame::None
            } else {
                Blame::Link
            },
            blamed_node: None,
            recent_changes: 0,
            flapping: false,
            fix: (state != LinkState::Up).then(|| "reseat or replace the cable".to_owned()),
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
            evaluated_at: wall(100),
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
                kind: meshd_domain::AlarmKind::CpuSpike,
                severity: Severity::Warning,
                node: id("b"),
                subject: "cpu".into(),
                summary: "CPU 97% for 30s".into(),
                evidence: vec!["UniversalControl 85%".into()],
                fix: Some("turn off Universal Control".into()),
                since: wall(40),
                updated: wall(90),
            }],
            cables: vec![],
            checks: vec![],
            measurements: vec![],
            jobs: Vec::new(),
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
                "fix": null,
                "boot": null,
            })
        );
        let mut booted = sample();
        booted.nodes[0].boot = meshd_domain::facts::BootIdentity {
            id: Some("40962879-B7EE-4F13-AF6E-E7266EF5E732".into()),
            booted_at_unix: Some(1_790_421_415),
        };
        let value = serde_json::to_value(StatusJson::from(&booted)).expect("json");
        assert_eq!(
            value["nodes"][0]["boot"],
            serde_json::json!({
                "id": "40962879-B7EE-4F13-AF6E-E7266EF5E732",
                "booted_at": "2026-09-26T11:16:55.000Z",
            })
        );
        assert_eq!(value["links"][1]["a"], "a");
        assert_eq!(value["links"][1]["b"], "c");
        assert_eq!(value["links"][1]["state"], "down");
        assert_eq!(value["links"][1]["fix"], "reseat or replace the cable");
        assert_eq!(value["links"][0]["fix"], serde_json::Value::Null);
        assert_eq!(value["alarms"][0]["kind"], "cpu_spike");
        assert_eq!(value["alarms"][0]["node"], "b");
        assert_eq!(value["alarms"][0]["severity"], "warning");
        assert_eq!(value["alarms"][0]["summary"], "CPU 97% for 30s");
    }

    #[test]
    fn table_shows_matrix_troubled_links_with_fixes_and_alarms() {
        let text = render(&sample(), wall(130));
        assert!(
            text.contains("quorum: yes, 3 of 3 members fresh (a, b, c), leader a"),
            "{text}"
        );
        assert!(
            text.contains("health: UNHEALTHY: 1 link down, 1 alarm"),
            "{text}"
        );
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
        let troubled: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "links not up")
            .skip(1)
            .take(4)
            .collect();
        assert_eq!(
            troubled,
            vec![
                "  LINK         STATE  BLAME  SINCE",
                "  a/en2 <-> c  down   link   2m00s",
                "    - loss 100% over 1s",
                "    fix: reseat or replace the cable",
            ],
            "{text}"
        );
        assert!(
            text.contains("  warning   b     cpu_spike  cpu      1m30s\n    CPU 97% for 30s\n"),
            "{text}"
        );
        assert!(
            text.contains("    fix: turn off Universal Control"),
            "{text}"
        );
    }

    #[test]
    fn a_node_not_up_gets_its_evidence_and_fix_under_it() {
        let mut status = sample();
        status.nodes[2] = NodeVerdict {
            state: NodeState::Down,
            evidence: vec!["last report 42s ago".into()],
            fix: Some("bring c back".into()),
            ..node("c", NodeState::Down)
        };
        let text = render(&status, wall(130));
        assert!(
            text.contains(
                "  c     down   2m10s\n    - last report 42s ago\n    fix: bring c back\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_dead_nodes_links_are_counted_with_it_in_the_health_line() {
        let mut status = sample();
        status.nodes[2].state = NodeState::Down;
        for link in status.links.iter_mut().filter(|l| l.b.node.as_str() == "c") {
            link.state = LinkState::Down;
            link.blame = Blame::Node;
            link.blamed_node = Some(id("c"));
        }
        let text = render(&status, wall(130));
        assert!(
            text.contains("health: UNHEALTHY: 1 node down, 2 links down with node c, 1 alarm\n"),
            "{text}"
        );
    }

    #[test]
    fn no_alarm_with_a_link_down_does_not_read_as_all_clear() {
        let mut status = sample();
        status.alarms.clear();
        let text = render(&status, wall(130));
        assert!(
            text.contains("alarms: none besides the links and nodes above"),
            "{text}"
        );
    }

    /// A worst case for width: eight long node names, long evidence and
    /// fixes, a check shared by every node. Nothing is wider than 80
    /// columns, and wrapped text never splits a word.
    #[test]
    fn everything_fits_in_80_columns() {
        let names: Vec<String> = (1..=8).map(|i| format!("studio-{i:02}")).collect();
        let mut status = sample();
        status.quorum.configured = names.iter().map(|n| id(n)).collect();
        status.quorum.members = status.quorum.configured.clone();
        status.nodes = names.iter().map(|n| node(n, NodeState::Up)).collect();
        status.nodes[7] = NodeVerdict {
            evidence: vec!["no report from studio-08 since this node started".into()],
            fix: Some(
                "bring studio-08 back: check that it is on and awake, then that meshd runs \
                 there (`sudo launchctl print system/io.meshd.agent`, or `systemctl status \
                 meshd`)"
                    .into(),
            ),
            ..node("studio-08", NodeState::Down)
        };
        status.links = vec![LinkVerdict {
            state: LinkState::Degraded,
            evidence: vec![
                "studio-01: 12% of MTU-sized probes lost over 10s (12 of 100)".into(),
                "studio-02: RTT p90 4.2ms (p99 5.1ms) against a baseline p99 of 85µs".into(),
            ],
            fix: Some(
                "give both ends of studio-01/en2 <-> studio-02/en3 the same MTU \
                 (`ifconfig IFACE mtu 1500`): full-size probes are lost, small ones pass"
                    .into(),
            ),
            ..link("studio-01", "studio-02", LinkState::Flapping)
        }];
        status.checks = names
            .iter()
            .map(|n| CheckResult {
                name: "thunderbolt_bridge_inactive".into(),
                node: Some(id(n)),
                status: CheckStatus::Warn,
                evidence: vec![
                    "bridge0 is up and a member has link although the service is off".into(),
                ],
                fix: "sudo ifconfig bridge0 down (macOS re-creates it on hotplug)".into(),
            })
            .collect();
        let text = render(&status, wall(130));
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?} in\n{text}");
        }
        assert!(text.contains("8 nodes: studio-01, studio-02"), "{text}");
        assert_eq!(text.matches("thunderbolt_bridge_inactive").count(), 1);
        assert!(text.contains("(columns in row order"), "{text}");
        // Every word of the fix survives wrapping whole.
        let fix = status.nodes[7].fix.clone().unwrap_or_default();
        let words: Vec<&str> = text.split_whitespace().collect();
        for word in fix.split_whitespace() {
            assert!(words.contains(&word), "{word:?} cut in\n{text}");
        }
    }

    #[test]
    fn healthy_single_node_reads_healthy() {
        let mut status = sample();
        status.nodes.truncate(1);
        status.links.clear();
        status.alarms.clear();
        status.quorum.configured.truncate(1);
        status.quorum.members.truncate(1);
        let text = render(&status, wall(100));
        assert!(text.contains("health: healthy"), "{text}");
        assert!(text.contains("alarms: none\n"), "{text}");
        assert!(!text.contains("links"), "{text}");
    }

    /// Times a peer could once put in an alarm: one second before 1970 and
    /// the year 10000. Formatting them used to panic `status --json` and
    /// `bundle`; they read as out of range instead.
    fn out_of_range_times() -> [SystemTime; 2] {
        [
            SystemTime::UNIX_EPOCH - Duration::from_secs(1),
            SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_800),
        ]
    }

    #[test]
    fn times_outside_1970_to_9999_never_panic_the_json_or_the_table() {
        for when in out_of_range_times() {
            let mut status = sample();
            status.alarms[0].since = when;
            status.nodes[0].since = when;
            status.nodes[0].last_report_at = Some(when);
            status.links[0].since = when;
            status.evaluated_at = when;
            let value: serde_json::Value =
                serde_json::from_str(&to_json(&status).expect("json")).expect("parses");
            assert_eq!(value["alarms"][0]["since"], "out of range");
            assert_eq!(value["evaluated_at"], "out of range");
            let _ = render(&status, wall(130));
        }
    }

    #[test]
    fn durations_use_meshds_one_format() {
        assert_eq!(ago(wall(59), wall(0)), "59s");
        assert_eq!(ago(wall(3599), wall(0)), "59m59s");
        assert_eq!(ago(wall(7200), wall(0)), "2h00m");
        assert_eq!(ago(wall(0), wall(5)), "0µs", "a future time is now");
    }
}
