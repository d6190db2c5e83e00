//! The `[watch]` section: what the host watcher samples (CPU, processes,
//! jobs, reboots), how often, and the ratios and windows that raise alarms.

use std::time::Duration;

use super::super::Config;
use super::super::error::Problem;
use super::{
    MAX_IFACE_LEN, MAX_JOB_BUSY_CORES, MAX_TOP_PROCESSES, WATCH_INTERVAL_RANGE, WATCH_WINDOW_RANGE,
    check_duration, check_ratio, s,
};

pub(super) fn check_watch(c: &Config, p: &mut Vec<Problem>) {
    let w = &c.watch;
    check_duration(
        p,
        "watch.bridge.interval",
        w.bridge.interval,
        WATCH_INTERVAL_RANGE,
    );
    check_duration(
        p,
        "watch.bridge.storm_window",
        w.bridge.storm_window,
        WATCH_WINDOW_RANGE,
    );
    if w.bridge.storm_packets_per_second == 0 {
        p.push(Problem::new(
            "watch.bridge.storm_packets_per_second",
            "0 would call every packet a storm; use at least 1".to_owned(),
        ));
    }
    for (i, iface) in w.bridge.mesh_ifaces.iter().enumerate() {
        if iface.is_empty() || iface.len() > MAX_IFACE_LEN || iface.contains([' ', '/', ':']) {
            p.push(Problem::new(
                format!("watch.bridge.mesh_ifaces[{i}]"),
                format!("{iface:?} is not an interface name"),
            ));
        }
    }
    check_duration(
        p,
        "watch.cpu.interval",
        w.cpu.interval,
        WATCH_INTERVAL_RANGE,
    );
    check_duration(
        p,
        "watch.cpu.spike_window",
        w.cpu.spike_window,
        WATCH_WINDOW_RANGE,
    );
    check_ratio(p, "watch.cpu.spike_ratio", w.cpu.spike_ratio);
    if !(1..=MAX_TOP_PROCESSES).contains(&w.cpu.top) {
        p.push(Problem::new(
            "watch.cpu.top",
            format!(
                "{} is out of range; use 1 to {MAX_TOP_PROCESSES}",
                w.cpu.top
            ),
        ));
    }
    for (key, list) in [
        ("watch.cpu.offenders", &w.cpu.offenders),
        ("watch.jobs.patterns", &w.jobs.patterns),
    ] {
        for (i, name) in list.iter().enumerate() {
            if name.trim().is_empty() {
                p.push(Problem::new(format!("{key}[{i}]"), "empty name".to_owned()));
            }
        }
    }
    if !(w.jobs.busy_cores > 0.0 && w.jobs.busy_cores <= MAX_JOB_BUSY_CORES) {
        p.push(Problem::new(
            "watch.jobs.busy_cores",
            format!(
                "{} is out of range; use more than 0 and up to {MAX_JOB_BUSY_CORES} cores",
                w.jobs.busy_cores
            ),
        ));
    }
    check_duration(p, "watch.jobs.window", w.jobs.window, WATCH_WINDOW_RANGE);
    check_duration(
        p,
        "watch.jobs.orphan_grace",
        w.jobs.orphan_grace,
        WATCH_WINDOW_RANGE,
    );
    check_duration(
        p,
        "watch.jobs.stall_window",
        w.jobs.stall_window,
        WATCH_WINDOW_RANGE,
    );
    if !(w.jobs.idle_cores >= 0.0 && w.jobs.idle_cores < w.jobs.busy_cores) {
        p.push(Problem::new(
            "watch.jobs.idle_cores",
            format!(
                "{} is out of range; use 0 or more and less than watch.jobs.busy_cores ({})",
                w.jobs.idle_cores, w.jobs.busy_cores
            ),
        ));
    }
    check_duration(
        p,
        "watch.memory.interval",
        w.memory.interval,
        WATCH_INTERVAL_RANGE,
    );
    check_ratio(
        p,
        "watch.memory.wired_leak_ratio",
        w.memory.wired_leak_ratio,
    );
    check_duration(
        p,
        "watch.memory.leak_window",
        w.memory.leak_window,
        WATCH_WINDOW_RANGE,
    );
    check_duration(
        p,
        "watch.memory.pressure_window",
        w.memory.pressure_window,
        WATCH_WINDOW_RANGE,
    );
    check_ratio(
        p,
        "watch.memory.stall_critical_ratio",
        w.memory.stall_critical_ratio,
    );
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
