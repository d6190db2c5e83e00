//! meshd's own process as every Prometheus client library exports it
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …), read
//! at scrape time through sysinfo, which knows Linux's `/proc` and macOS's
//! `proc_pidinfo` alike. A figure the OS does not give is left out, not
//! written as 0.

use std::sync::Mutex;

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use super::catalogue as c;
use super::exposition::{Exposition, as_f64, count};
use super::lock;

#[derive(Debug)]
pub struct ProcessSeries {
    /// `None` where sysinfo cannot read processes here: no series then.
    reader: Option<Mutex<(System, Pid)>>,
}

impl Default for ProcessSeries {
    fn default() -> Self {
        let reader = System::new()
            .ok()
            .zip(sysinfo::get_current_pid().ok())
            .map(Mutex::new);
        Self { reader }
    }
}

impl ProcessSeries {
    pub fn write(&self, out: &mut Exposition) {
        let Some(reader) = &self.reader else {
            return;
        };
        let mut guard = lock(reader);
        let (system, pid) = &mut *guard;
        let pid = *pid;
        // This process only: a few small reads of its own entries.
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[pid]),
            false,
            ProcessRefreshKind::nothing().with_cpu().with_memory(),
        );
        let Some(process) = system.process(pid) else {
            return;
        };
        out.family(&c::PROCESS_CPU_SECONDS_TOTAL)
            .sample(&[], as_f64(process.accumulated_cpu_time()) / 1000.0);
        out.family(&c::PROCESS_RESIDENT_MEMORY_BYTES)
            .sample(&[], as_f64(process.memory()));
        out.family(&c::PROCESS_VIRTUAL_MEMORY_BYTES)
            .sample(&[], as_f64(process.virtual_memory()));
        if let Some(open) = process.open_files() {
            out.family(&c::PROCESS_OPEN_FDS).sample(&[], count(open));
        }
        if let Some(limit) = process.open_files_limit() {
            out.family(&c::PROCESS_MAX_FDS).sample(&[], count(limit));
        }
        out.family(&c::PROCESS_START_TIME_SECONDS)
            .sample(&[], as_f64(process.start_time()));
    }
}
