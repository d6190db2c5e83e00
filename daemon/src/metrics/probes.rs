//! The probe responders: what they answered and what they dropped, summed
//! over this node's responders (one per cable end), so the family is five
//! series however many cables the node has. Per cable, the prober's series
//! at the far end (`meshd_link_probes_*`) say what was answered.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::catalogue as c;
use super::exposition::{Exposition, as_f64};
use super::lock;
use crate::probe::{ResponderCounters, ResponderStats};

#[derive(Debug, Default)]
pub struct ProbeSeries {
    state: Mutex<Responders>,
}

#[derive(Debug, Default)]
struct Responders {
    live: BTreeMap<SocketAddr, Arc<ResponderCounters>>,
    /// What the responders that stopped had counted: kept in the totals,
    /// which would otherwise fall (and read as a counter reset).
    retired: ResponderStats,
}

impl ProbeSeries {
    /// A responder started on `address`; its counters are read at scrape time.
    pub fn responder_started(&self, address: SocketAddr, counters: Arc<ResponderCounters>) {
        let mut state = lock(&self.state);
        if let Some(replaced) = state.live.insert(address, counters) {
            state.retired = plus(state.retired, replaced.snapshot());
        }
    }

    pub fn responder_stopped(&self, address: SocketAddr) {
        let mut state = lock(&self.state);
        if let Some(stopped) = state.live.remove(&address) {
            state.retired = plus(state.retired, stopped.snapshot());
        }
    }

    /// The counts of the responder on `address` alone, while it runs.
    #[cfg(test)]
    pub fn responder_stats(&self, address: SocketAddr) -> Option<ResponderStats> {
        lock(&self.state).live.get(&address).map(|c| c.snapshot())
    }

    pub fn write(&self, out: &mut Exposition) {
        let state = lock(&self.state);
        let s = state.live.values().fold(state.retired, |sum, counters| {
            plus(sum, counters.snapshot())
        });
        let mut family = out.family(&c::PROBE_RESPONDER_DATAGRAMS_TOTAL);
        for (outcome, n) in [
            ("answered", s.replies),
            ("invalid", s.invalid),
            ("rate_limited", s.rate_limited),
            ("send_error", s.send_errors),
            ("recv_error", s.recv_errors),
        ] {
            family.sample(&[outcome], as_f64(n));
        }
    }
}

fn plus(a: ResponderStats, b: ResponderStats) -> ResponderStats {
    ResponderStats {
        replies: a.replies.saturating_add(b.replies),
        invalid: a.invalid.saturating_add(b.invalid),
        rate_limited: a.rate_limited.saturating_add(b.rate_limited),
        send_errors: a.send_errors.saturating_add(b.send_errors),
        recv_errors: a.recv_errors.saturating_add(b.recv_errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(series: &ProbeSeries) -> String {
        let mut out = Exposition::new();
        series.write(&mut out);
        out.into_text()
            .lines()
            .find(|l| l.starts_with("meshd_probe_responder_datagrams_total{outcome=\"answered\"}"))
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn responders_are_summed_and_a_stopped_one_keeps_its_counts() {
        let series = ProbeSeries::default();
        let (x, y): (SocketAddr, SocketAddr) = (
            "10.0.0.1:9421".parse().unwrap(),
            "10.0.1.1:9421".parse().unwrap(),
        );
        let (cx, cy) = (
            Arc::new(ResponderCounters::default()),
            Arc::new(ResponderCounters::default()),
        );
        series.responder_started(x, cx.clone());
        series.responder_started(y, cy.clone());
        cx.count_reply();
        cx.count_reply();
        cy.count_reply();
        cy.count_invalid();
        assert!(answered(&series).ends_with(" 3"), "{}", answered(&series));
        series.responder_stopped(x);
        cx.count_reply();
        cy.count_reply();
        // x's two stay in the total; what it counted after stopping does not.
        assert!(answered(&series).ends_with(" 4"), "{}", answered(&series));
        assert_eq!(series.responder_stats(y).map(|s| s.replies), Some(2));
        assert_eq!(series.responder_stats(x), None);
    }
}
