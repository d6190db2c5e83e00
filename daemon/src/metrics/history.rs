//! The incident history's store: its size on disk, its failed writes and
//! the incidents it recorded.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::catalogue as c;
use super::exposition::Exposition;

#[derive(Debug, Default)]
pub struct HistorySeries {
    /// Whether a store is open: without one there are no series, since a
    /// node that keeps no history has nothing to say about it.
    open: AtomicBool,
    store_bytes: AtomicU64,
    write_errors: AtomicU64,
    incidents_recorded: AtomicU64,
}

impl HistorySeries {
    /// The store opened, `bytes` long.
    pub fn opened(&self, bytes: u64) {
        self.store_bytes.store(bytes, Ordering::Relaxed);
        self.open.store(true, Ordering::Relaxed);
    }

    pub fn set_store_bytes(&self, bytes: u64) {
        self.store_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn count_write_error(&self) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_incidents_recorded(&self, incidents: u64) {
        self.incidents_recorded
            .fetch_add(incidents, Ordering::Relaxed);
    }

    pub fn write(&self, out: &mut Exposition) {
        if !self.open.load(Ordering::Relaxed) {
            return;
        }
        out.family(&c::HISTORY_STORE_BYTES)
            .sample(&[], self.store_bytes.load(Ordering::Relaxed) as f64);
        out.family(&c::HISTORY_WRITE_ERRORS_TOTAL)
            .sample(&[], self.write_errors.load(Ordering::Relaxed) as f64);
        out.family(&c::HISTORY_INCIDENTS_RECORDED_TOTAL)
            .sample(&[], self.incidents_recorded.load(Ordering::Relaxed) as f64);
    }
}
