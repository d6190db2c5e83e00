//! The verdict series: quorum, node and link states, active alarms, checks
//! and cables, and what the evaluation rested on (report ages, refused
//! reports, links observed, events, evaluation times).
//!
//! What one node exports grows linearly with the mesh: its view of every
//! node, but only the links it is an end of and only its own checks (plus
//! the mesh-wide ones). Every end of a link exports the same labels for it,
//! so `max by (a, b, state)` over the quorate nodes is the quorum's verdict
//! on every link with a live end. A state set writes the current state at 1
//! and the states it left within [`super::exposition::VANISHED_HOLD`] at 0,
//! not every state at all times.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use meshd_domain::facts::CheckStatus;
use meshd_domain::{EventKind, MeshStatus, RejectReason};
use meshd_model::histogram::DurationHistogram;

use super::catalogue::{self as c, MetricSpec};
use super::exposition::{
    Exposition, Histogram, HistogramValues, LabelValues, Vanishing, as_f64, count, flag,
};
use super::links::unix_seconds;
use super::lock;
use crate::state::Published;

/// The evaluation times exported: the aggregator's bounds at each decade.
const EXPORTED_EVALUATION_BOUNDS: [Duration; 5] = [
    Duration::from_micros(10),
    Duration::from_micros(100),
    Duration::from_millis(1),
    Duration::from_millis(10),
    Duration::from_millis(100),
];

#[derive(Debug, Default)]
pub struct MeshSeries {
    /// Alarms and checks come and go: a cleared one reads 0 for a while;
    /// so does a state a node or link left.
    alarms: Mutex<Vanishing>,
    checks: Mutex<Vanishing>,
    node_states: Mutex<Vanishing>,
    link_states: Mutex<Vanishing>,
    jobs: Mutex<Vanishing>,
    job_ranks: Mutex<Vanishing>,
}

impl MeshSeries {
    pub fn write(&self, out: &mut Exposition, published: &Published, now: Instant) {
        let status = &published.status;
        write_quorum(out, status);
        self.write_verdicts(out, status, now);
        write_cables(out, status);
        write_link_counts(out, published);
        write_peers(out, published);
        write_rejected_reports(out, &published.rejected);
        out.family(&c::NODE_CPU_BUSY_RATIO)
            .sample(&[], published.load.cpu_busy_ratio);
        out.family(&c::TIMER_LATENESS_SECONDS)
            .sample(&[], published.lateness.worst.as_secs_f64());
        out.family(&c::TIMER_HELD_UP_SECONDS_TOTAL)
            .sample(&[], published.lateness.held_up_total.as_secs_f64());
        write_events(out, &published.events);
        write_evaluation_times(out, &published.evaluation_times);
    }

    /// The series that come and go: node and link states, alarms, checks,
    /// jobs.
    fn write_verdicts(&self, out: &mut Exposition, status: &MeshStatus, now: Instant) {
        write_vanishing(
            out,
            &c::NODE_STATE,
            &self.node_states,
            node_states(status),
            now,
        );
        let links = own_link_states(status);
        write_vanishing(out, &c::LINK_STATE, &self.link_states, links, now);
        write_vanishing(
            out,
            &c::ALARMS_ACTIVE,
            &self.alarms,
            active_alarms(status),
            now,
        );
        write_vanishing(out, &c::CHECK_STATUS, &self.checks, own_checks(status), now);
        let (jobs, ranks) = job_counts(status);
        write_vanishing(out, &c::JOBS, &self.jobs, jobs, now);
        write_vanishing(out, &c::JOB_RANKS, &self.job_ranks, ranks, now);
    }
}

/// Series and their values.
type Samples = Vec<(LabelValues, f64)>;

/// Jobs by state and their ranks by condition, the counts that are not 0:
/// a node that runs no job exports none, and a count that fell to 0 reads
/// 0 for a while.
fn job_counts(status: &MeshStatus) -> (Samples, Samples) {
    let mut jobs: BTreeMap<LabelValues, f64> = BTreeMap::new();
    let mut ranks: BTreeMap<LabelValues, f64> = BTreeMap::new();
    for job in &status.jobs {
        let state = if job.hung.is_some() {
            "hung"
        } else {
            "running"
        };
        *jobs.entry(vec![state.to_owned()]).or_default() += 1.0;
        for rank in &job.ranks {
            *ranks
                .entry(vec![rank.condition.as_str().to_owned()])
                .or_default() += 1.0;
        }
    }
    (jobs.into_iter().collect(), ranks.into_iter().collect())
}

fn write_quorum(out: &mut Exposition, status: &MeshStatus) {
    let quorum = &status.quorum;
    out.family(&c::QUORUM_HAS_QUORUM)
        .sample(&[], flag(quorum.has_quorum));
    out.family(&c::QUORUM_MEMBERS)
        .sample(&[], count(quorum.members.len()));
    out.family(&c::QUORUM_CONFIGURED_MEMBERS)
        .sample(&[], count(quorum.configured.len()));
    out.family(&c::QUORUM_IS_LEADER)
        .sample(&[], flag(quorum.leader.as_ref() == Some(&status.node.id)));
}

/// Writes `current` and, at 0, what `held` remembers vanished from it.
fn write_vanishing(
    out: &mut Exposition,
    spec: &MetricSpec,
    held: &Mutex<Vanishing>,
    current: Vec<(LabelValues, f64)>,
    now: Instant,
) {
    let series = lock(held).update(current, now);
    out.family(spec).samples(&series);
}

fn node_states(status: &MeshStatus) -> Vec<(LabelValues, f64)> {
    status
        .nodes
        .iter()
        .map(|node| {
            (
                vec![node.id.to_string(), node.state.as_str().to_owned()],
                1.0,
            )
        })
        .collect()
}

/// The links this node is an end of.
fn own_link_states(status: &MeshStatus) -> Vec<(LabelValues, f64)> {
    let me = &status.node.id;
    status
        .links
        .iter()
        .filter(|link| &link.a.node == me || &link.b.node == me)
        .map(|link| {
            let key = vec![
                link.a.node.to_string(),
                link.b.node.to_string(),
                link.state.as_str().to_owned(),
                // Whom the verdict blames: a change of blame is a new
                // series, the old one reads 0 for a while.
                link.blame.as_str().to_owned(),
            ];
            (key, 1.0)
        })
        .collect()
}

/// How many alarms are active by node, kind and severity.
fn active_alarms(status: &MeshStatus) -> Vec<(LabelValues, f64)> {
    let mut alarms: BTreeMap<LabelValues, f64> = BTreeMap::new();
    for alarm in &status.alarms {
        let key = vec![
            alarm.node.to_string(),
            alarm.kind.as_str().to_owned(),
            alarm.severity.as_str().to_owned(),
        ];
        *alarms.entry(key).or_default() += 1.0;
    }
    alarms.into_iter().collect()
}

/// This node's own checks and the mesh-wide ones: a peer exports its own.
/// Several results of one check (one per port): the worst one stands for
/// the series.
fn own_checks(status: &MeshStatus) -> Vec<(LabelValues, f64)> {
    let me = &status.node.id;
    let mut worst: BTreeMap<(String, &str), CheckStatus> = BTreeMap::new();
    for check in &status.checks {
        let node = match &check.node {
            Some(node) if node == me => node.to_string(),
            Some(_) => continue,
            None => String::new(),
        };
        let entry = worst.entry((node, &check.name)).or_insert(check.status);
        *entry = worse(*entry, check.status);
    }
    worst
        .into_iter()
        .map(|((node, check), current)| {
            let key = vec![node, check.to_owned(), current.as_str().to_owned()];
            (key, 1.0)
        })
        .collect()
}

fn write_cables(out: &mut Exposition, status: &MeshStatus) {
    let mut family = out.family(&c::CABLES);
    for (source, discovered) in [("discovered", true), ("configured", false)] {
        let n = status
            .cables
            .iter()
            .filter(|cable| cable.discovered == discovered)
            .count();
        family.sample(&[source], count(n));
    }
}

/// The links a full mesh of the configured members has, and those observed.
fn write_link_counts(out: &mut Exposition, published: &Published) {
    let members = published.status.quorum.configured.len();
    out.family(&c::LINKS_EXPECTED)
        .sample(&[], count(members * members.saturating_sub(1) / 2));
    out.family(&c::LINKS_OBSERVED)
        .sample(&[], count(published.links_observed));
}

/// When each peer was last heard, its paths, and its clock.
fn write_peers(out: &mut Exposition, published: &Published) {
    let mut family = out.family(&c::PEER_LAST_REPORT_TIMESTAMP_SECONDS);
    let evaluated_at = published.status.evaluated_at;
    for (peer, view) in &published.peers {
        let age = published.at.saturating_duration_since(view.received_at);
        let heard = evaluated_at.checked_sub(age).unwrap_or(evaluated_at);
        family.sample(&[peer.as_str()], unix_seconds(heard));
    }
    let mut family = out.family(&c::PEER_PATH_UP);
    for path in &published.paths {
        family.sample(&[path.peer.as_str(), &path.path.to_string()], flag(path.up));
    }
    let mut family = out.family(&c::PEER_CLOCK_OFFSET_SECONDS);
    for offset in &published.clock_offsets {
        #[allow(clippy::cast_precision_loss)]
        let seconds = offset.offset_ns as f64 / 1e9;
        family.sample(&[offset.peer.as_str()], seconds);
    }
}

/// Every reason a mesh meets in its life, refused or not, so each series
/// exists from the start; `protocol` (releases too far apart to talk,
/// which a mesh upgraded one release at a time never meets) once it
/// happened, so it costs no series on the meshes that never see it.
fn write_rejected_reports(out: &mut Exposition, rejected: &BTreeMap<RejectReason, u64>) {
    let mut family = out.family(&c::REPORTS_REJECTED_TOTAL);
    for reason in RejectReason::ALL {
        let total = rejected.get(reason).copied();
        if total.is_none() && *reason == RejectReason::Protocol {
            continue;
        }
        family.sample(&[reason.as_str()], as_f64(total.unwrap_or(0)));
    }
}

fn write_events(out: &mut Exposition, events: &BTreeMap<EventKind, u64>) {
    let mut family = out.family(&c::EVENTS_TOTAL);
    for (kind, total) in events {
        family.sample(&[kind.as_str()], as_f64(*total));
    }
}

fn write_evaluation_times(out: &mut Exposition, times: &DurationHistogram) {
    let values = HistogramValues {
        bounds: times.bounds(),
        counts: times.counts(),
        sum: times.sum(),
    };
    if let Some(coarse) = Histogram::regrouped(&values, &EXPORTED_EVALUATION_BOUNDS) {
        out.family(&c::EVALUATION_DURATION_SECONDS)
            .histogram(&[], &coarse.values());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(counts: &[(RejectReason, u64)]) -> String {
        let mut out = Exposition::new();
        write_rejected_reports(&mut out, &counts.iter().copied().collect());
        out.into_text()
    }

    #[test]
    fn every_refusal_reason_is_there_from_the_start_but_protocol_once_it_happened() {
        let quiet = rejected(&[]);
        for reason in RejectReason::ALL
            .iter()
            .filter(|r| **r != RejectReason::Protocol)
        {
            assert!(
                quiet.contains(&format!("{{reason=\"{reason}\"}} 0\n")),
                "{reason}: {quiet}"
            );
        }
        assert!(!quiet.contains("reason=\"protocol\""), "{quiet}");
        let refused = rejected(&[(RejectReason::Protocol, 2)]);
        assert!(
            refused.contains("meshd_reports_rejected_total{reason=\"protocol\"} 2\n"),
            "{refused}"
        );
    }
}
