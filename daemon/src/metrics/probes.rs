//! The probe responders: what they answered and what they dropped.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::catalogue as c;
use super::exposition::{Exposition, as_f64};
use super::lock;
use crate::probe::ResponderCounters;

#[derive(Debug, Default)]
pub struct ProbeSeries {
    responders: Mutex<BTreeMap<SocketAddr, Arc<ResponderCounters>>>,
}

impl ProbeSeries {
    /// A responder started on `address`; its counters are read at scrape time.
    pub fn responder_started(&self, address: SocketAddr, counters: Arc<ResponderCounters>) {
        lock(&self.responders).insert(address, counters);
    }

    pub fn responder_stopped(&self, address: SocketAddr) {
        lock(&self.responders).remove(&address);
    }

    pub fn write(&self, out: &mut Exposition) {
        let responders = lock(&self.responders);
        let mut family = out.family(&c::PROBE_RESPONDER_DATAGRAMS_TOTAL);
        for (address, counters) in responders.iter() {
            let address = address.to_string();
            let s = counters.snapshot();
            for (outcome, n) in [
                ("answered", s.replies),
                ("invalid", s.invalid),
                ("rate_limited", s.rate_limited),
                ("send_error", s.send_errors),
                ("recv_error", s.recv_errors),
            ] {
                family.sample(&[&address, outcome], as_f64(n));
            }
        }
    }
}
