//! Platform checks that page someone: a failing check of this node's own
//! facts becomes an alarm, so it reaches `status`, the metrics and
//! Alertmanager like every other fault. Only checks that break jobs are
//! mapped; the rest stay checks (`meshctl doctor`, `meshd_check_status`).

use std::collections::BTreeMap;
use std::time::SystemTime;

use meshd_domain::facts::{CheckResult, CheckStatus};
use meshd_domain::{Alarm, AlarmKind, NodeId, Severity};

/// A check whose failure pages, and the alarm it becomes.
struct Mapping {
    check: &'static str,
    kind: AlarmKind,
    severity: Severity,
    summary: fn(&NodeId) -> String,
}

/// The kinds are the ones the shipped alert rules and the Alertmanager push
/// know (`alerts`).
const MAPPED: &[Mapping] = &[
    Mapping {
        check: "rdma_enabled",
        kind: AlarmKind::RdmaDisabled,
        severity: Severity::Critical,
        summary: |node| format!("RDMA is not usable on {node}"),
    },
    Mapping {
        check: "link_speed",
        kind: AlarmKind::LinkSpeedLow,
        severity: Severity::Warning,
        summary: |node| format!("a cable of {node} negotiated less than its full speed"),
    },
];

/// The alarms for `checks` (this node's own), keeping the `since` of alarms
/// already held in `previous` so a condition that persists across reads
/// keeps its start time.
pub fn alarms_from_checks(
    node: &NodeId,
    checks: &[CheckResult],
    previous: &[Alarm],
    now: SystemTime,
) -> Vec<Alarm> {
    // One alarm per kind: the failing results of one check (one per port)
    // are its evidence.
    let mut failing: BTreeMap<AlarmKind, (&Mapping, Vec<&CheckResult>)> = BTreeMap::new();
    for check in checks.iter().filter(|c| c.status == CheckStatus::Fail) {
        if let Some(mapping) = MAPPED.iter().find(|m| m.check == check.name) {
            failing
                .entry(mapping.kind)
                .or_insert_with(|| (mapping, Vec::new()))
                .1
                .push(check);
        }
    }
    failing
        .into_iter()
        .map(|(kind, (mapping, results))| {
            let since = previous
                .iter()
                .find(|a| a.kind == kind)
                .map_or(now, |a| a.since);
            let fixes: Vec<&str> = results
                .iter()
                .map(|c| c.fix.as_str())
                .filter(|f| !f.is_empty())
                .collect();
            Alarm {
                kind,
                severity: mapping.severity,
                node: node.clone(),
                subject: node.to_string(),
                summary: (mapping.summary)(node),
                evidence: results
                    .iter()
                    .flat_map(|c| c.evidence.iter().cloned())
                    .collect(),
                fix: (!fixes.is_empty()).then(|| dedup(fixes).join("; ")),
                since,
                updated: now,
            }
        })
        .collect()
}

fn dedup(mut items: Vec<&str>) -> Vec<&str> {
    let mut seen = Vec::new();
    items.retain(|i| {
        let new = !seen.contains(i);
        seen.push(*i);
        new
    });
    items
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, wall};

    use super::*;

    fn check(name: &str, status: CheckStatus, evidence: &str, fix: &str) -> CheckResult {
        CheckResult {
            name: name.into(),
            node: Some(id("a")),
            status,
            evidence: vec![evidence.into()],
            fix: fix.into(),
        }
    }

    #[test]
    fn failing_mapped_checks_raise_one_alarm_per_kind_and_keep_their_start() {
        let checks = vec![
            check(
                "rdma_enabled",
                CheckStatus::Fail,
                "rdma_ctl status: disabled",
                "rdma_ctl enable in Recovery",
            ),
            check(
                "link_speed",
                CheckStatus::Fail,
                "Thunderbolt 2: 40 Gb/s",
                "reseat the cable",
            ),
            check(
                "link_speed",
                CheckStatus::Fail,
                "Thunderbolt 3: 40 Gb/s",
                "reseat the cable",
            ),
            check(
                "link_speed",
                CheckStatus::Pass,
                "Thunderbolt 1: 80 Gb/s",
                "",
            ),
            check(
                "thunderbolt_bridge_inactive",
                CheckStatus::Fail,
                "bridge0 active",
                "off",
            ),
        ];
        let first = alarms_from_checks(&id("a"), &checks, &[], wall(10));
        assert_eq!(first.len(), 2, "{first:#?}");
        let speed = first
            .iter()
            .find(|a| a.kind == AlarmKind::LinkSpeedLow)
            .expect("speed");
        assert_eq!(speed.severity, Severity::Warning);
        assert_eq!(
            speed.evidence,
            ["Thunderbolt 2: 40 Gb/s", "Thunderbolt 3: 40 Gb/s"]
        );
        assert_eq!(speed.fix.as_deref(), Some("reseat the cable"));
        let rdma = first
            .iter()
            .find(|a| a.kind == AlarmKind::RdmaDisabled)
            .expect("rdma");
        assert_eq!(rdma.severity, Severity::Critical);

        let later = alarms_from_checks(&id("a"), &checks, &first, wall(40));
        assert!(
            later
                .iter()
                .all(|a| a.since == wall(10) && a.updated == wall(40))
        );

        let healed = alarms_from_checks(
            &id("a"),
            &[check("rdma_enabled", CheckStatus::Pass, "enabled", "")],
            &later,
            wall(70),
        );
        assert!(healed.is_empty());
        let skipped = alarms_from_checks(
            &id("a"),
            &[check(
                "rdma_enabled",
                CheckStatus::Skipped,
                "no rdma_ctl here",
                "",
            )],
            &[],
            wall(70),
        );
        assert!(skipped.is_empty(), "only failures page");
    }
}
