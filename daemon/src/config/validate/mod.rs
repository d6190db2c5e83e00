//! The rules a parsed config must follow beyond its types. All rules run and
//! every breach is returned, so one `meshd check-config` shows everything
//! that needs fixing.
//!
//! A config is validated for the OS of the node that reads it (the config
//! of a node is checked and run on that node): the probe size limits
//! depend on it. Advice ([`advise`], [`interface_advice`]) is what works
//! but is likely wrong; it never refuses a config.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use meshd_domain::facts::OsKind;
use meshd_mesh::plan::{DEFAULT_LINK_RANGE, LINK_NETMASK};

use self::alerting::check_alerting;
use self::history::check_history;
use self::links::{check_links, plan_example};
use self::listeners::{check_listeners, check_tls};
use self::mesh::check_mesh;
use self::platform::check_platform;
use self::probe::{check_probe, check_report};
use self::thresholds::check_thresholds;
use self::watch::check_watch;
use super::Config;
use super::error::Problem;

mod alerting;
mod history;
mod links;
mod listeners;
mod mesh;
mod platform;
mod probe;
mod thresholds;
mod watch;

/// The verdict engine is benchmarked up to this many nodes (ARCHITECTURE.md, Targets).
const MAX_MESH_SIZE: usize = 256;
/// Every probe carries a header of this size (sequence, timestamps).
const PROBE_HEADER_BYTES: u32 = 32;
/// UDP payload that fills a 1500-byte IP MTU: above it the small probe
/// would itself be fragmented.
const MAX_PROBE_PAYLOAD_BYTES: u32 = 1472;
/// Largest UDP payload over IPv4 (65535 − 20 IP − 8 UDP).
const MAX_UDP_PAYLOAD_BYTES: u32 = 65507;
/// Largest UDP payload macOS sends: XNU refuses a datagram whose payload
/// exceeds the socket's send buffer with EMSGSIZE (`sosend` compares the
/// payload, not the headers, with `sb_hiwat`), and a UDP socket's buffer is
/// `net.inet.udp.maxdgram`, 9216 bytes by default (`udp_sendspace`).
const MAX_MACOS_UDP_PAYLOAD_BYTES: u32 = 9216;
/// IPv4 and UDP headers around a probe's payload.
const IPV4_UDP_HEADER_BYTES: u32 = 20 + 8;
/// IPv6 (without extension headers) and UDP.
const IPV6_UDP_HEADER_BYTES: u32 = 40 + 8;
/// Fastest Thunderbolt 5 link is 120 Gb/s; 1000 leaves room for NICs while
/// still catching a value typed in Mb/s.
const MAX_LINK_SPEED_GBPS: u32 = 1000;
/// Longest interface name the kernels accept (IFNAMSIZ − 1).
const MAX_IFACE_LEN: usize = 15;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
const fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

const PROBE_INTERVAL_RANGE: (Duration, Duration) = (ms(10), s(10));
const PROBE_TIMEOUT_RANGE: (Duration, Duration) = (ms(1), s(10));
const MTU_INTERVAL_RANGE: (Duration, Duration) = (ms(100), s(60));
const REPORT_INTERVAL_RANGE: (Duration, Duration) = (ms(50), s(10));
const MAX_STALE_AFTER: Duration = s(60);
const DOWN_AFTER_RANGE: (Duration, Duration) = (ms(50), s(60));
/// Below 10 ms, NTP's own jitter between healthy nodes would raise it.
const CLOCK_SKEW_RANGE: (Duration, Duration) = (ms(10), s(3600));
const RTT_MIN_INCREASE_RANGE: (Duration, Duration) = (Duration::ZERO, s(10));
const WATCH_INTERVAL_RANGE: (Duration, Duration) = (ms(100), s(60));
const WATCH_WINDOW_RANGE: (Duration, Duration) = (s(1), s(3600));
/// A connection must outlive a few heartbeats to carry anything; a day
/// is as long as an expired or revoked certificate may keep one.
const MAX_CONNECTION_AGE_RANGE: (Duration, Duration) = (s(1), s(24 * 3600));
/// More names than this would make alarms unreadable and metrics wide.
const MAX_TOP_PROCESSES: usize = 20;
/// The largest Macs have 32 cores.
const MAX_JOB_BUSY_CORES: f64 = 256.0;
const FLAP_WINDOW_RANGE: (Duration, Duration) = (s(1), s(3600));
const RESEND_INTERVAL_RANGE: (Duration, Duration) = (s(1), s(600));
const RTT_P99_FACTOR_RANGE: (f64, f64) = (1.0, 1000.0);
const FLAP_CHANGES_RANGE: (u32, u32) = (2, 100);

/// Every rule `config` breaks on a node running `os`.
pub(super) fn validate(config: &Config, os: OsKind) -> Vec<Problem> {
    let mut p = Vec::new();
    check_mesh(config, &mut p);
    check_listeners(config, &mut p);
    check_tls(config, &mut p);
    check_links(config, &mut p);
    check_probe(config, os, &mut p);
    check_report(config, &mut p);
    check_thresholds(config, &mut p);
    check_alerting(config, &mut p);
    check_watch(config, &mut p);
    check_platform(config, &mut p);
    check_history(config, &mut p);
    p
}

/// What works but is likely wrong in `config`, wherever it runs.
pub(super) fn advise(config: &Config) -> Vec<Problem> {
    let mut p = Vec::new();
    for (i, link) in config.links.iter().enumerate() {
        for (field, ip) in [
            ("local_address", link.local_address),
            ("peer_address", link.peer_address),
        ] {
            if matches!(ip, IpAddr::V4(v4) if v4.is_link_local()) {
                p.push(Problem::new(
                    format!("links[{i}].{field}"),
                    format!(
                        "{ip} is IPv4 link-local (169.254/16, what macOS self-assigns): the \
                         kernel ties no interface to it, so with several ports in 169.254/16 \
                         traffic to a peer leaves by whichever port the routing table lists \
                         first, and the other cables look down. meshd pins its own probes to \
                         the cable's interface; the rest of the traffic is not. Give every \
                         cable its own /30 as `meshctl plan` prints: two addresses of {} \
                         with netmask {LINK_NETMASK} ({} on one end, the next on the other)",
                        DEFAULT_LINK_RANGE,
                        plan_example()
                    ),
                ));
            }
        }
    }
    p
}

/// What `config` does not fit on this host's interfaces, given their MTUs
/// (`mtus`, by name; an interface missing from it has an unknown MTU and
/// is not judged): an MTU-sized probe larger than the link's interface
/// takes leaves fragmented and tests nothing.
pub(super) fn interface_advice(config: &Config, mtus: &BTreeMap<String, u32>) -> Vec<Problem> {
    let probe = config
        .probe
        .mtu_payload_bytes
        .max(config.probe.payload_bytes);
    let mut p = Vec::new();
    for (i, link) in config.links.iter().enumerate() {
        let Some(iface) = &link.local_iface else {
            continue;
        };
        let Some(&mtu) = mtus.get(iface) else {
            continue;
        };
        let (headers, family) = if link.local_address.is_ipv4() {
            (IPV4_UDP_HEADER_BYTES, "IPv4")
        } else {
            (IPV6_UDP_HEADER_BYTES, "IPv6")
        };
        if probe.saturating_add(headers) > mtu {
            p.push(Problem::new(
                "probe.mtu_payload_bytes",
                format!(
                    "{probe} bytes plus {headers} of {family} and UDP headers do not fit the \
                     MTU of {iface} ({mtu}), the interface of links[{i}]: MTU-sized probes would \
                     leave fragmented and test nothing; use at most {} (or raise {iface}'s MTU)",
                    mtu.saturating_sub(headers)
                ),
            ));
        }
    }
    p
}

/// Ratios are in (0, 1]: 0 would fire on every sample. Written so that NaN
/// fails too.
fn check_ratio(p: &mut Vec<Problem>, key: &str, value: f64) -> bool {
    let ok = value > 0.0 && value <= 1.0;
    if !ok {
        p.push(Problem::new(
            key,
            format!("{value} is out of range; use a ratio above 0 and at most 1 (0.02 = 2 %)"),
        ));
    }
    ok
}

fn check_duration(
    p: &mut Vec<Problem>,
    key: &str,
    value: Duration,
    (lo, hi): (Duration, Duration),
) {
    let what = if value < lo {
        "too short"
    } else if value > hi {
        "too long"
    } else {
        return;
    };
    p.push(Problem::new(
        key,
        format!(
            "{} is {what}; use {} to {}",
            fmt_duration(value),
            fmt_duration(lo),
            fmt_duration(hi)
        ),
    ));
}

fn fmt_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_owned();
    }
    humantime::format_duration(d).to_string()
}
