//! The `[probe]` and `[report]` sections: probe sizes (which depend on the
//! OS that sends them) and the intervals and timeouts of probes and reports.

use meshd_domain::facts::OsKind;

use super::super::error::Problem;
use super::super::{Config, RdmaProbeMode};
use super::{
    MAX_MACOS_UDP_PAYLOAD_BYTES, MAX_PROBE_PAYLOAD_BYTES, MAX_STALE_AFTER, MAX_UDP_PAYLOAD_BYTES,
    MTU_INTERVAL_RANGE, PROBE_HEADER_BYTES, PROBE_INTERVAL_RANGE, PROBE_TIMEOUT_RANGE,
    REPORT_INTERVAL_RANGE, check_duration, fmt_duration,
};

/// The largest UDP payload a probe may have on `os`.
fn max_udp_payload(os: OsKind) -> (u32, &'static str) {
    match os {
        OsKind::Macos => (
            MAX_MACOS_UDP_PAYLOAD_BYTES,
            "the largest UDP payload macOS sends (net.inet.udp.maxdgram)",
        ),
        OsKind::Linux | OsKind::Other => (MAX_UDP_PAYLOAD_BYTES, "the largest UDP payload"),
    }
}

pub(super) fn check_probe(c: &Config, os: OsKind, p: &mut Vec<Problem>) {
    let probe = &c.probe;
    check_rdma_probe(probe.rdma, os, p);
    check_duration(p, "probe.interval", probe.interval, PROBE_INTERVAL_RANGE);
    check_duration(p, "probe.timeout", probe.timeout, PROBE_TIMEOUT_RANGE);
    check_duration(
        p,
        "probe.mtu_interval",
        probe.mtu_interval,
        MTU_INTERVAL_RANGE,
    );
    if !(PROBE_HEADER_BYTES..=MAX_PROBE_PAYLOAD_BYTES).contains(&probe.payload_bytes) {
        p.push(Problem::new(
            "probe.payload_bytes",
            format!(
                "{} is out of range; use {PROBE_HEADER_BYTES} (the probe header) to {MAX_PROBE_PAYLOAD_BYTES} (a 1500-byte MTU)",
                probe.payload_bytes
            ),
        ));
    }
    let mtu_min = probe.payload_bytes.max(PROBE_HEADER_BYTES);
    let (mtu_max, why) = max_udp_payload(os);
    if !(mtu_min..=mtu_max).contains(&probe.mtu_payload_bytes) {
        p.push(Problem::new(
            "probe.mtu_payload_bytes",
            format!(
                "{} is out of range on {os}; use probe.payload_bytes ({mtu_min}) to {mtu_max} ({why})",
                probe.mtu_payload_bytes
            ),
        ));
    }
    if probe.port == 0 {
        p.push(Problem::new(
            "probe.port",
            "0 is not a usable port; every node's probe responder needs a fixed port from 1 to 65535",
        ));
    }
}

pub(super) fn check_report(c: &Config, p: &mut Vec<Problem>) {
    let report = &c.report;
    check_duration(p, "report.interval", report.interval, REPORT_INTERVAL_RANGE);
    let min_stale = report.interval.saturating_mul(2);
    if report.stale_after < min_stale || report.stale_after > MAX_STALE_AFTER {
        let what = if report.stale_after < min_stale {
            "too short"
        } else {
            "too long"
        };
        p.push(Problem::new(
            "report.stale_after",
            format!(
                "{} is {what}; use 2 × report.interval ({}) to {} so that one late report does not make a peer stale",
                fmt_duration(report.stale_after),
                fmt_duration(min_stale),
                fmt_duration(MAX_STALE_AFTER),
            ),
        ));
    }
}

fn check_rdma_probe(mode: RdmaProbeMode, os: OsKind, p: &mut Vec<Problem>) {
    match (mode, os) {
        (RdmaProbeMode::Off, _) | (RdmaProbeMode::Always, OsKind::Linux | OsKind::Macos) => {}
        (RdmaProbeMode::Idle, OsKind::Macos) => p.push(Problem::new(
            "probe.rdma",
            "\"idle\" cannot work on macOS: it probes only while no other program holds \
             queue pairs, and macOS does not tell which programs hold them; use \"always\" \
             (probes beside running jobs, one small message a second per cable) or \"off\"",
        )),
        (RdmaProbeMode::Idle, OsKind::Linux) => {}
        (RdmaProbeMode::Idle | RdmaProbeMode::Always, OsKind::Other) => p.push(Problem::new(
            "probe.rdma",
            format!("there is no verbs library on {os}; use \"off\""),
        )),
    }
}
