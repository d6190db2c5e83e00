//! Platform checks as a checklist: one line per check with its status, the
//! evidence under it and the command that fixes a failure. Shared by
//! `meshctl doctor` (every check) and `meshctl status` (only the ones that
//! need attention).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use meshd_domain::NodeId;
use meshd_domain::facts::{CheckResult, CheckStatus};

use crate::layout::{WIDTH, hanging};

/// Which checks to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    All,
    /// Failures and warnings only.
    Attention,
}

fn label(status: CheckStatus) -> &'static str {
    match status {
        CheckStatus::Pass => "PASS",
        CheckStatus::Warn => "WARN",
        CheckStatus::Fail => "FAIL",
        CheckStatus::Skipped => "SKIP",
    }
}

/// "7 pass, 1 warn, 1 fail, 2 skipped".
pub fn summary(checks: &[CheckResult]) -> String {
    let mut counts: BTreeMap<CheckStatus, usize> = BTreeMap::new();
    for check in checks {
        *counts.entry(check.status).or_default() += 1;
    }
    [
        CheckStatus::Pass,
        CheckStatus::Warn,
        CheckStatus::Fail,
        CheckStatus::Skipped,
    ]
    .iter()
    .map(|s| format!("{} {s}", counts.get(s).copied().unwrap_or(0)))
    .collect::<Vec<_>>()
    .join(", ")
}

pub fn any_failed(checks: &[CheckResult]) -> bool {
    checks.iter().any(|c| c.status == CheckStatus::Fail)
}

/// Some check was decided (passed, warned or failed): a list of skipped
/// checks, or none, says nothing about the node.
pub fn any_judged(checks: &[CheckResult]) -> bool {
    checks.iter().any(|c| c.status != CheckStatus::Skipped)
}

/// Node ids as a group heading: "a", or "4 nodes: a, b, c, d".
fn heading(nodes: &[&NodeId]) -> String {
    let names: Vec<&str> = nodes.iter().map(|n| n.as_str()).collect();
    match names.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("{} nodes: {}", many.len(), many.join(", ")),
    }
}

/// The checks under headings: each result that several nodes share word
/// for word (same check, status, evidence and fix) once, under the list of
/// those nodes; a node's own results under its id; the mesh-wide ones last,
/// under "mesh". Within a heading, in the order given.
pub fn render(out: &mut String, checks: &[CheckResult], show: Show) {
    let shown: Vec<&CheckResult> = checks
        .iter()
        .filter(|c| show == Show::All || matches!(c.status, CheckStatus::Fail | CheckStatus::Warn))
        .collect();
    // Each distinct result of a node check, with the nodes that have it.
    let mut sharing: Vec<(&CheckResult, Vec<&NodeId>)> = Vec::new();
    for check in &shown {
        let Some(node) = &check.node else { continue };
        let same = |seen: &CheckResult| {
            seen.name == check.name
                && seen.status == check.status
                && seen.evidence == check.evidence
                && seen.fix == check.fix
        };
        match sharing.iter_mut().find(|(seen, _)| same(seen)) {
            Some((_, nodes)) => nodes.push(node),
            None => sharing.push((check, vec![node])),
        }
    }
    let mut groups: BTreeMap<Vec<&NodeId>, Vec<&CheckResult>> = BTreeMap::new();
    for (check, mut nodes) in sharing {
        nodes.sort();
        nodes.dedup();
        groups.entry(nodes).or_default().push(check);
    }
    let mesh: Vec<&CheckResult> = shown.iter().copied().filter(|c| c.node.is_none()).collect();
    let width = shown.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for (nodes, list) in &groups {
        hanging(out, "  ", &heading(nodes));
        for check in list {
            item(out, check, width);
        }
    }
    if !mesh.is_empty() {
        let _ = writeln!(out, "  mesh");
        for check in mesh {
            item(out, check, width);
        }
    }
}

/// One check: its status and name, with its first piece of evidence on the
/// same line when it fits in [`WIDTH`]; the evidence and the fix under it.
fn item(out: &mut String, check: &CheckResult, width: usize) {
    let lead = format!("    {}  {:width$}", label(check.status), check.name);
    let indent = "          ";
    // The blind spots are listed once per node above the checks.
    let mut evidence = check
        .evidence
        .iter()
        .enumerate()
        .filter(|(i, e)| *i == 0 || !e.starts_with("blind spot: "))
        .map(|(_, e)| e.as_str())
        .peekable();
    match evidence.peek() {
        Some(first) if lead.chars().count() + 2 + first.chars().count() <= WIDTH => {
            let _ = writeln!(out, "{lead}  {first}");
            evidence.next();
        }
        _ => {
            let _ = writeln!(out, "{}", lead.trim_end());
        }
    }
    for more in evidence {
        hanging(out, indent, more);
    }
    if check.status != CheckStatus::Pass && !check.fix.is_empty() {
        hanging(out, &format!("{indent}fix: "), &check.fix);
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::id;

    use super::*;

    fn check(
        node: Option<&str>,
        name: &str,
        status: CheckStatus,
        evidence: &[&str],
    ) -> CheckResult {
        CheckResult {
            name: name.into(),
            node: node.map(id),
            status,
            evidence: evidence.iter().map(|e| (*e).to_owned()).collect(),
            fix: if status == CheckStatus::Fail {
                "rdma_ctl enable (in macOS Recovery)".into()
            } else {
                String::new()
            },
        }
    }

    #[test]
    fn groups_by_node_with_mesh_last_and_fixes_under_failures() {
        let checks = vec![
            check(
                None,
                "full_mesh_cabled",
                CheckStatus::Pass,
                &["6 of 6 cables"],
            ),
            check(
                Some("b"),
                "rdma_enabled",
                CheckStatus::Fail,
                &["rdma_ctl status: disabled", "ibv_devices: none"],
            ),
            check(
                Some("a"),
                "rdma_enabled",
                CheckStatus::Pass,
                &["rdma_ctl status: enabled"],
            ),
        ];
        let mut out = String::new();
        render(&mut out, &checks, Show::All);
        let a = out.find("  a\n").expect("a group");
        let b = out.find("  b\n").expect("b group");
        let mesh = out.find("  mesh\n").expect("mesh group");
        assert!(a < b && b < mesh, "{out}");
        assert!(
            out.contains("FAIL  rdma_enabled      rdma_ctl status: disabled"),
            "{out}"
        );
        assert!(out.contains("ibv_devices: none\n"), "{out}");
        assert!(
            out.contains("fix: rdma_ctl enable (in macOS Recovery)"),
            "{out}"
        );
        assert_eq!(out.matches("fix:").count(), 1, "no fix under passes: {out}");

        let mut attention = String::new();
        render(&mut attention, &checks, Show::Attention);
        assert!(!attention.contains("PASS"), "{attention}");
        assert!(attention.contains("FAIL"), "{attention}");

        assert_eq!(summary(&checks), "2 pass, 0 warn, 1 fail, 0 skipped");
        assert!(any_failed(&checks));
        assert!(any_judged(&checks));
        let skipped = check(
            Some("a"),
            "rdma_enabled",
            CheckStatus::Skipped,
            &["unknown"],
        );
        assert!(!any_judged(&[skipped]));
        assert!(!any_judged(&[]));
    }

    #[test]
    fn results_shared_word_for_word_are_listed_once_for_all_their_nodes() {
        let no_device = |node| {
            check(
                Some(node),
                "rdma_enabled",
                CheckStatus::Warn,
                &["no RDMA device"],
            )
        };
        let checks = vec![
            no_device("d"),
            no_device("a"),
            no_device("c"),
            no_device("b"),
            check(
                Some("b"),
                "link_speed",
                CheckStatus::Warn,
                &["40 Gb/s on en2"],
            ),
        ];
        let mut out = String::new();
        render(&mut out, &checks, Show::Attention);
        assert_eq!(out.matches("rdma_enabled").count(), 1, "{out}");
        let shared = out.find("  4 nodes: a, b, c, d\n").expect("shared heading");
        let own = out.find("  b\n").expect("b's own heading");
        assert!(shared < own, "{out}");
        assert!(out.contains("WARN  link_speed    40 Gb/s on en2"), "{out}");
    }
}
