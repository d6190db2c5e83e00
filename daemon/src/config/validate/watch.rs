//! The `[watch]` section: what the host watcher samples (CPU, processes,
//! jobs, reboots), how often, and the ratios and windows that raise alarms.

use std::time::Duration;

use super::super::error::Problem;
use super::super::{BridgeWatchConfig, Config, CpuWatchConfig, JobWatchConfig, MemoryWatchConfig};
use super::{
    MAX_IFACE_LEN, MAX_JOB_BUSY_CORES, MAX_TOP_PROCESSES, WATCH_INTERVAL_RANGE, WATCH_WINDOW_RANGE,
    check_duration, check_ratio, s,
};

pub(super) fn check_watch(c: &Config, p: &mut Vec<Problem>) {
    let w = &c.watch;
    check_bridge(&w.bridge, p);
    check_cpu(&w.cpu, p);
    check_jobs(&w.jobs, p);
    check_memory(&w.memory, p);
    check_duration(
        p,
        "watch.boot.alarm_for",
        w.boot.alarm_for,
        REBOOT_ALARM_RANGE,
    );
}

/// A reboot alarm shorter than a minute is missed; one longer than a day
/// is noise.
const REBOOT_ALARM_RANGE: (Duration, Duration) = (s(60), s(86_400));

fn check_bridge(bridge: &BridgeWatchConfig, p: &mut Vec<Problem>) {
    check_duration(
        p,
        "watch.bridge.interval",
        bridge.interval,
        WATCH_INTERVAL_RANGE,
    );
    check_duration(
        p,
        "watch.bridge.storm_window",
        bridge.storm_window,
        WATCH_WINDOW_RANGE,
    );
    if bridge.storm_packets_per_second == 0 {
        p.push(Problem::new(
            "watch.bridge.storm_packets_per_second",
            "0 would call every packet a storm; use at least 1".to_owned(),
        ));
    }
    for (i, iface) in bridge.mesh_ifaces.iter().enumerate() {
        if iface.is_empty() || iface.len() > MAX_IFACE_LEN || iface.contains([' ', '/', ':']) {
            p.push(Problem::new(
                format!("watch.bridge.mesh_ifaces[{i}]"),
                format!("{iface:?} is not an interface name"),
            ));
        }
    }
}

fn check_cpu(cpu: &CpuWatchConfig, p: &mut Vec<Problem>) {
    check_duration(p, "watch.cpu.interval", cpu.interval, WATCH_INTERVAL_RANGE);
    check_duration(
        p,
        "watch.cpu.spike_window",
        cpu.spike_window,
        WATCH_WINDOW_RANGE,
    );
    check_ratio(p, "watch.cpu.spike_ratio", cpu.spike_ratio);
    if !(1..=MAX_TOP_PROCESSES).contains(&cpu.top) {
        p.push(Problem::new(
            "watch.cpu.top",
            format!("{} is out of range; use 1 to {MAX_TOP_PROCESSES}", cpu.top),
        ));
    }
    check_names(p, "watch.cpu.offenders", &cpu.offenders);
}

fn check_jobs(jobs: &JobWatchConfig, p: &mut Vec<Problem>) {
    check_names(p, "watch.jobs.patterns", &jobs.patterns);
    if !(jobs.busy_cores > 0.0 && jobs.busy_cores <= MAX_JOB_BUSY_CORES) {
        p.push(Problem::new(
            "watch.jobs.busy_cores",
            format!(
                "{} is out of range; use more than 0 and up to {MAX_JOB_BUSY_CORES} cores",
                jobs.busy_cores
            ),
        ));
    }
    check_duration(p, "watch.jobs.window", jobs.window, WATCH_WINDOW_RANGE);
    check_duration(
        p,
        "watch.jobs.orphan_grace",
        jobs.orphan_grace,
        WATCH_WINDOW_RANGE,
    );
    check_duration(
        p,
        "watch.jobs.stall_window",
        jobs.stall_window,
        WATCH_WINDOW_RANGE,
    );
    check_duration(
        p,
        "watch.jobs.silent_rank_window",
        jobs.silent_rank_window,
        WATCH_WINDOW_RANGE,
    );
    check_duration(
        p,
        "watch.jobs.silent_rank_blocked_window",
        jobs.silent_rank_blocked_window,
        WATCH_WINDOW_RANGE,
    );
    if !(jobs.idle_cores >= 0.0 && jobs.idle_cores < jobs.busy_cores) {
        p.push(Problem::new(
            "watch.jobs.idle_cores",
            format!(
                "{} is out of range; use 0 or more and less than watch.jobs.busy_cores ({})",
                jobs.idle_cores, jobs.busy_cores
            ),
        ));
    }
}

fn check_memory(memory: &MemoryWatchConfig, p: &mut Vec<Problem>) {
    check_duration(
        p,
        "watch.memory.interval",
        memory.interval,
        WATCH_INTERVAL_RANGE,
    );
    check_ratio(p, "watch.memory.wired_leak_ratio", memory.wired_leak_ratio);
    check_duration(
        p,
        "watch.memory.leak_window",
        memory.leak_window,
        WATCH_WINDOW_RANGE,
    );
    check_duration(
        p,
        "watch.memory.pressure_window",
        memory.pressure_window,
        WATCH_WINDOW_RANGE,
    );
    check_ratio(
        p,
        "watch.memory.stall_critical_ratio",
        memory.stall_critical_ratio,
    );
}

/// Every entry of the list `key` (process names, job patterns) is more
/// than blanks.
fn check_names(p: &mut Vec<Problem>, key: &str, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        if name.trim().is_empty() {
            p.push(Problem::new(format!("{key}[{i}]"), "empty name".to_owned()));
        }
    }
}
