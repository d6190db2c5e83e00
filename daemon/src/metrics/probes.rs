//! The probe responders: what they answered and what they dropped, summed
//! over this node's responders (one per cable end), so the family is five
//! series however many cables the node has. Per cable, the prober's series
//! at the far end (`meshd_link_probes_*`) say what was answered.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::catalogue as c;
use super::exposition::{Exposition, as_f64};
use super::lock;

/// Live counters of one probe responder: the probe task counts, the
/// exporter reads them at scrape time.
#[derive(Debug, Default)]
pub struct ResponderCounters {
    replies: AtomicU64,
    invalid: AtomicU64,
    rate_limited: AtomicU64,
    send_errors: AtomicU64,
    recv_errors: AtomicU64,
}

/// A snapshot of [`ResponderCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponderStats {
    pub replies: u64,
    /// Datagrams that were not a valid probe request (dropped unanswered).
    pub invalid: u64,
    pub rate_limited: u64,
    pub send_errors: u64,
    pub recv_errors: u64,
}

impl ResponderCounters {
    pub fn snapshot(&self) -> ResponderStats {
        ResponderStats {
            replies: self.replies.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
            send_errors: self.send_errors.load(Ordering::Relaxed),
            recv_errors: self.recv_errors.load(Ordering::Relaxed),
        }
    }
}

fn bump(counter: &AtomicU64) -> u64 {
    add(counter, 1)
}

fn add(counter: &AtomicU64, n: u64) -> u64 {
    counter.fetch_add(n, Ordering::Relaxed).saturating_add(n)
}

impl ResponderCounters {
    pub fn count_reply(&self) {
        bump(&self.replies);
    }

    /// Answers that left together, as echoes in one probe.
    pub fn count_replies(&self, n: usize) {
        add(&self.replies, u64::try_from(n).unwrap_or(u64::MAX));
    }

    pub fn count_invalid(&self) -> u64 {
        bump(&self.invalid)
    }

    pub fn count_rate_limited(&self) -> u64 {
        bump(&self.rate_limited)
    }

    pub fn count_send_error(&self) -> u64 {
        bump(&self.send_errors)
    }

    /// Answers that could not leave together, as echoes in one probe.
    pub fn count_send_errors(&self, n: usize) {
        add(&self.send_errors, u64::try_from(n).unwrap_or(u64::MAX));
    }

    pub fn count_recv_error(&self) -> u64 {
        bump(&self.recv_errors)
    }
}

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
