//! Platform checks as a checklist: one line per check with its status, the
//! evidence under it and the command that fixes a failure. Shared by
//! `meshctl doctor` (every check) and `meshctl status` (only the ones that
//! need attention).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use meshd_proto::facts::{CheckResult, CheckStatus};

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

/// The checks grouped under their node (mesh-wide ones last, under "mesh"),
/// in the order given within each group.
pub fn render(out: &mut String, checks: &[CheckResult], show: Show) {
    let mut groups: BTreeMap<(bool, String), Vec<&CheckResult>> = BTreeMap::new();
    for check in checks {
        if show == Show::Attention && !matches!(check.status, CheckStatus::Fail | CheckStatus::Warn)
        {
            continue;
        }
        let key = match &check.node {
            Some(node) => (false, node.to_string()),
            None => (true, "mesh".to_owned()),
        };
        groups.entry(key).or_default().push(check);
    }
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for ((_, group), list) in groups {
        let _ = writeln!(out, "  {group}");
        for check in list {
            let first = check.evidence.first().map_or("", String::as_str);
            let _ = writeln!(
                out,
                "    {}  {:width$}  {first}",
                label(check.status),
                check.name
            );
            let indent = " ".repeat(4 + 4 + 2 + width + 2);
            // The blind spots are listed once per node above the checks.
            for more in check
                .evidence
                .iter()
                .skip(1)
                .filter(|e| !e.starts_with("blind spot: "))
            {
                let _ = writeln!(out, "{indent}{more}");
            }
            if check.status != CheckStatus::Pass && !check.fix.is_empty() {
                let _ = writeln!(out, "{indent}fix: {}", check.fix);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use meshd_proto::domain::NodeId;

    use super::*;

    fn check(
        node: Option<&str>,
        name: &str,
        status: CheckStatus,
        evidence: &[&str],
    ) -> CheckResult {
        CheckResult {
            name: name.into(),
            node: node.map(|n| NodeId::new(n).expect("id")),
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
    }
}
