//! What this node sent: reports to its peers and alerts to Alertmanager.

use std::collections::BTreeMap;
use std::sync::Mutex;

use meshd_domain::NodeId;

use super::catalogue as c;
use super::exposition::{Exposition, as_f64, count};
use super::lock;

/// How a report sent to a peer fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReportOutcome {
    Accepted,
    Rejected,
    Failed,
}

impl ReportOutcome {
    fn as_str(self) -> &'static str {
        match self {
            ReportOutcome::Accepted => "accepted",
            ReportOutcome::Rejected => "rejected",
            ReportOutcome::Failed => "failed",
        }
    }
}

/// How a post to an Alertmanager fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AlertPostOutcome {
    Ok,
    Failed,
}

impl AlertPostOutcome {
    fn as_str(self) -> &'static str {
        match self {
            AlertPostOutcome::Ok => "ok",
            AlertPostOutcome::Failed => "failed",
        }
    }
}

#[derive(Debug, Default)]
pub struct DeliverySeries {
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    reports_sent: BTreeMap<(NodeId, ReportOutcome), u64>,
    /// By Alertmanager (host:port, from the config).
    alert_posts: BTreeMap<(String, AlertPostOutcome), u64>,
    alerts_firing: usize,
}

impl DeliverySeries {
    pub fn count_report_sent(&self, peer: &NodeId, outcome: ReportOutcome) {
        *lock(&self.counts)
            .reports_sent
            .entry((peer.clone(), outcome))
            .or_default() += 1;
    }

    pub fn count_alert_post(&self, alertmanager: &str, outcome: AlertPostOutcome) {
        *lock(&self.counts)
            .alert_posts
            .entry((alertmanager.to_owned(), outcome))
            .or_default() += 1;
    }

    pub fn set_alerts_firing(&self, firing: usize) {
        lock(&self.counts).alerts_firing = firing;
    }

    pub fn write(&self, out: &mut Exposition) {
        let counts = lock(&self.counts);
        let mut family = out.family(&c::REPORTS_SENT_TOTAL);
        for ((peer, outcome), n) in &counts.reports_sent {
            family.sample(&[peer.as_str(), outcome.as_str()], as_f64(*n));
        }
        out.family(&c::ALERTS_FIRING)
            .sample(&[], count(counts.alerts_firing));
        let mut family = out.family(&c::ALERT_POSTS_TOTAL);
        for ((alertmanager, outcome), n) in &counts.alert_posts {
            family.sample(&[alertmanager, outcome.as_str()], as_f64(*n));
        }
    }
}
