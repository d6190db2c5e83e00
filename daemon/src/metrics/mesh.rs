//! The verdict series: quorum, node and link states, active alarms, checks
//! and cables, and what the evaluation rested on (report ages, refused
//! reports, links observed, events, evaluation times).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use meshd_proto::domain::{LinkState, NodeState, RejectReason};
use meshd_proto::facts::CheckStatus;

use super::catalogue as c;
use super::exposition::{Exposition, HistogramValues, LabelValues, Vanishing, as_f64, count, flag};
use super::links::unix_seconds;
use super::lock;
use crate::aggregator::Published;

#[derive(Debug, Default)]
pub struct MeshSeries {
    /// Alarms and checks come and go: a cleared one reads 0 for a while.
    alarms: Mutex<Vanishing>,
    checks: Mutex<Vanishing>,
}

const CHECK_STATUSES: [CheckStatus; 4] = [
    CheckStatus::Pass,
    CheckStatus::Warn,
    CheckStatus::Fail,
    CheckStatus::Skipped,
];

impl MeshSeries {
    pub fn write(&self, out: &mut Exposition, published: &Published, now: Instant) {
        let status = &published.status;
        let quorum = &status.quorum;
        out.family(&c::QUORUM_HAS_QUORUM)
            .sample(&[], flag(quorum.has_quorum));
        out.family(&c::QUORUM_MEMBERS)
            .sample(&[], count(quorum.members.len()));
        out.family(&c::QUORUM_CONFIGURED_MEMBERS)
            .sample(&[], count(quorum.configured.len()));
        out.family(&c::QUORUM_IS_LEADER)
            .sample(&[], flag(quorum.leader.as_ref() == Some(&status.node.id)));

        let mut family = out.family(&c::NODE_STATE);
        for node in &status.nodes {
            for state in NodeState::ALL {
                family.sample(
                    &[node.id.as_str(), state.as_str()],
                    flag(node.state == *state),
                );
            }
        }
        let mut family = out.family(&c::LINK_STATE);
        for link in &status.links {
            // The current blame on every state's series: a change of blame
            // replaces the link's series, it never adds to them.
            let blame = link.blame.as_str();
            for state in LinkState::ALL {
                family.sample(
                    &[
                        link.a.node.as_str(),
                        link.b.node.as_str(),
                        state.as_str(),
                        blame,
                    ],
                    flag(link.state == *state),
                );
            }
        }

        let mut alarms: BTreeMap<LabelValues, f64> = BTreeMap::new();
        for alarm in &status.alarms {
            let key = vec![
                alarm.node.to_string(),
                alarm.kind.as_str().to_owned(),
                alarm.severity.as_str().to_owned(),
            ];
            *alarms.entry(key).or_default() += 1.0;
        }
        let alarms = lock(&self.alarms).update(alarms.into_iter().collect(), now);
        out.family(&c::ALARMS_ACTIVE).samples(&alarms);

        // Several results of one check about one node (one per port): the
        // worst one stands for the series.
        let mut worst: BTreeMap<(String, &str), CheckStatus> = BTreeMap::new();
        for check in &status.checks {
            let node = check
                .node
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            let entry = worst.entry((node, &check.name)).or_insert(check.status);
            *entry = worse(*entry, check.status);
        }
        let checks: Vec<(LabelValues, f64)> = worst
            .into_iter()
            .flat_map(|((node, check), current)| {
                CHECK_STATUSES.map(|state| {
                    let key = vec![node.clone(), check.to_owned(), state.as_str().to_owned()];
                    (key, flag(state == current))
                })
            })
            .collect();
        let checks = lock(&self.checks).update(checks, now);
        out.family(&c::CHECK_STATUS).samples(&checks);

        let mut family = out.family(&c::CABLES);
        for (source, discovered) in [("discovered", true), ("configured", false)] {
            let n = status
                .cables
                .iter()
                .filter(|cable| cable.discovered == discovered)
                .count();
            family.sample(&[source], count(n));
        }

        let members = quorum.configured.len();
        out.family(&c::LINKS_EXPECTED)
            .sample(&[], count(members * members.saturating_sub(1) / 2));
        out.family(&c::LINKS_OBSERVED)
            .sample(&[], count(published.links_observed));
        let mut family = out.family(&c::PEER_LAST_REPORT_TIMESTAMP_SECONDS);
        let evaluated_at = published.status.evaluated_at;
        for (peer, view) in &published.peers {
            let age = published.at.saturating_duration_since(view.received_at);
            let heard = evaluated_at.checked_sub(age).unwrap_or(evaluated_at);
            family.sample(&[peer.as_str()], unix_seconds(heard));
        }
        let mut family = out.family(&c::PEER_PATH_UP);
        for (peer, path, up) in &published.paths {
            family.sample(&[peer.as_str(), path], flag(*up));
        }
        let mut family = out.family(&c::PEER_CLOCK_OFFSET_SECONDS);
        for offset in &published.clock_offsets {
            #[allow(clippy::cast_precision_loss)]
            let seconds = offset.offset_ns as f64 / 1e9;
            family.sample(&[offset.peer.as_str()], seconds);
        }
        let mut family = out.family(&c::REPORTS_REJECTED_TOTAL);
        for reason in RejectReason::ALL {
            let total = published.rejected.get(reason).copied().unwrap_or(0);
            family.sample(&[reason.as_str()], as_f64(total));
        }
        out.family(&c::NODE_CPU_BUSY_RATIO)
            .sample(&[], published.load.cpu_busy_ratio);
        let mut family = out.family(&c::EVENTS_TOTAL);
        for (kind, total) in &published.events {
            family.sample(&[kind.as_str()], as_f64(*total));
        }
        let times = &published.evaluation_times;
        out.family(&c::EVALUATION_DURATION_SECONDS).histogram(
            &[],
            &HistogramValues {
                bounds: times.bounds(),
                counts: times.counts(),
                sum: times.sum(),
            },
        );
    }
}

/// Fail over warn over skipped over pass.
fn worse(a: CheckStatus, b: CheckStatus) -> CheckStatus {
    let rank = |s: CheckStatus| match s {
        CheckStatus::Pass => 0,
        CheckStatus::Skipped => 1,
        CheckStatus::Warn => 2,
        CheckStatus::Fail => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}
