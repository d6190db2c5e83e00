//! The rules a parsed config must follow beyond its types. All rules run and
//! every breach is returned, so one `meshd check-config` shows everything
//! that needs fixing.
//!
//! A config is validated for the OS of the node that reads it (the config
//! of a node is checked and run on that node): the probe size limits
//! depend on it. Advice ([`advise`], [`interface_advice`]) is what works
//! but is likely wrong; it never refuses a config.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use meshd_platform::mesh::plan::{DEFAULT_LINK_RANGE, LINK_NETMASK};
use meshd_proto::domain::NodeId;
use meshd_proto::facts::OsKind;

use super::address::{Host, PeerAddress};
use super::error::Problem;
use super::parse_url;
use super::{Config, DEFAULT_GRPC_PORT, LinkConfig, ProbeConfig};

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
    p
}

const FACTS_INTERVAL_RANGE: (Duration, Duration) = (s(5), s(3600));
/// rdma-core's IBV_SYSFS_NAME_MAX is 64 bytes with the terminator.
const MAX_RDMA_DEVICE_LEN: usize = 63;

fn check_platform(c: &Config, p: &mut Vec<Problem>) {
    check_duration(
        p,
        "platform.facts_interval",
        c.platform.facts_interval,
        FACTS_INTERVAL_RANGE,
    );
    if let Some(dir) = &c.platform.replay_dir
        && !dir.is_dir()
    {
        p.push(Problem::new(
            "platform.replay_dir",
            format!(
                "{} is not a directory; give a bundle directory written by `meshctl bundle`, or leave it out to read this host",
                dir.display()
            ),
        ));
    }
}

fn check_rdma_device(device: &str, key: &str, p: &mut Vec<Problem>) {
    let ok = !device.is_empty()
        && device.len() <= MAX_RDMA_DEVICE_LEN
        && device
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    if !ok {
        p.push(Problem::new(
            key,
            format!(
                "{device:?} is not an RDMA device name; use 1 to {MAX_RDMA_DEVICE_LEN} letters, digits, '_', '-' or '.', like \"rdma_en2\""
            ),
        ));
    }
}

fn check_watch(c: &Config, p: &mut Vec<Problem>) {
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

/// Two listeners collide on one port when their addresses overlap: equal,
/// or either one every interface. Port 0 asks the OS for any free port, so
/// two of those never collide.
fn collide(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.port() != 0
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// A reboot alarm shorter than a minute is missed; one longer than a day
/// is noise.
const REBOOT_ALARM_RANGE: (Duration, Duration) = (s(60), s(86_400));

fn check_listeners(c: &Config, p: &mut Vec<Problem>) {
    let l = &c.listen;
    let mut listeners = vec![("listen.grpc", l.grpc), ("listen.metrics", l.metrics)];
    if let Some(mesh) = l.mesh {
        listeners.push(("listen.mesh", mesh));
    }
    for (i, &(key, addr)) in listeners.iter().enumerate() {
        if let Some(&(first, _)) = listeners
            .get(..i)
            .unwrap_or_default()
            .iter()
            .find(|(_, earlier)| collide(*earlier, addr))
        {
            p.push(
                Problem::new(
                    key,
                    format!("{addr} is also {first}; every listener needs its own port"),
                )
                .with_first(first),
            );
        }
    }
    match l.mesh {
        None if !c.peers.is_empty() => p.push(Problem::new(
            "listen.mesh",
            format!(
                "a node with peers needs listen.mesh: this node's address on the management \
                 network, which its peers' addresses point at, like \"10.0.0.1:{DEFAULT_GRPC_PORT}\""
            ),
        )),
        Some(mesh) if mesh.port() == 0 && !c.peers.is_empty() => p.push(Problem::new(
            "listen.mesh",
            "port 0 would change at every start, and peers could not find this node; use a fixed port",
        )),
        Some(mesh) => {
            // Each cable's report listener is TCP on the cable end's probe
            // address and port.
            for (i, link) in c.links.iter().enumerate() {
                let cable = link.local_probe_addr(&c.probe);
                if collide(mesh, cable) {
                    p.push(Problem::new(
                        "listen.mesh",
                        format!(
                            "{mesh} overlaps links[{i}]'s report listener on {cable}; use another port for the mesh"
                        ),
                    ));
                }
            }
        }
        None => {}
    }
}

fn check_tls(c: &Config, p: &mut Vec<Problem>) {
    let tls = &c.tls;
    let files = [
        ("tls.ca", &tls.ca),
        ("tls.cert", &tls.cert),
        ("tls.key", &tls.key),
    ];
    if tls.insecure {
        for (key, path) in files {
            if path.is_some() {
                p.push(
                    Problem::new(
                        key,
                        "tls.insecure = true sends reports in the clear and would ignore this file; \
                         remove one of the two",
                    )
                    .see("tls.insecure"),
                );
            }
        }
        return;
    }
    let needed = !c.peers.is_empty() || c.listen.mesh.is_some();
    let any = files.iter().any(|(_, path)| path.is_some());
    // The files themselves are read at start (and by `meshd check-config`),
    // which names what is wrong with them.
    for (key, path) in files {
        if path.is_none() && (needed || any) {
            p.push(Problem::new(
                key,
                "required: nodes talk mutual TLS with the mesh's certificates; \
                 `meshctl certs init` and `meshctl certs issue` write them \
                 (or set tls.insecure = true on a lab network)",
            ));
        }
    }
}

fn check_mesh(c: &Config, p: &mut Vec<Problem>) {
    let members = c.peers.len() + 1;
    if members > MAX_MESH_SIZE {
        p.push(Problem::new(
            "peers",
            format!(
                "the mesh has {members} members (this node and {} peers); at most {MAX_MESH_SIZE} are supported",
                c.peers.len()
            ),
        ));
    }

    let mut ids: HashMap<&NodeId, usize> = HashMap::new();
    let mut addresses: HashMap<PeerAddress, usize> = HashMap::new();
    for (i, peer) in c.peers.iter().enumerate() {
        let id_key = format!("peers[{i}].id");
        if peer.id == c.node.id {
            p.push(Problem::new(
                &id_key,
                format!(
                    "{:?} is this node's own id (node.id); list only the other members of the mesh",
                    peer.id.as_str()
                ),
            ));
        }
        match ids.get(&peer.id) {
            Some(first) => p.push(
                Problem::new(&id_key, format!("duplicate peer id {:?}", peer.id.as_str()))
                    .with_first(format!("peers[{first}].id")),
            ),
            None => {
                ids.insert(&peer.id, i);
            }
        }

        let address_key = format!("peers[{i}].address");
        match peer.address.parse::<PeerAddress>() {
            Ok(address) => match addresses.get(&address) {
                _ if own_address(c, &address).is_some() => p.push(
                    Problem::new(
                        &address_key,
                        format!(
                            "{:?} is this node's own listener; give the peer's address on the management network",
                            peer.address
                        ),
                    )
                    .see(own_address(c, &address).unwrap_or_default()),
                ),
                Some(first) => p.push(
                    Problem::new(
                        &address_key,
                        format!("duplicate peer address {:?}", peer.address),
                    )
                    .with_first(format!("peers[{first}].address")),
                ),
                None => {
                    addresses.insert(address, i);
                }
            },
            Err(e) => p.push(Problem::new(
                &address_key,
                format!(
                    "{:?} is not a valid address: {e}; use host:port with an IPv4 address, \
                     [IPv6] or DNS name, e.g. \"10.0.0.2:7420\"",
                    peer.address
                ),
            )),
        }
    }
}

/// The key of this node's own listener or cable end at `address`, if any.
fn own_address(c: &Config, address: &PeerAddress) -> Option<String> {
    let Host::Ip(ip) = address.host else {
        return None;
    };
    let at = SocketAddr::new(ip, address.port);
    if c.listen.mesh == Some(at) || c.listen.grpc == at {
        return Some(
            if c.listen.grpc == at {
                "listen.grpc"
            } else {
                "listen.mesh"
            }
            .to_owned(),
        );
    }
    c.links
        .iter()
        .position(|link| link.local_probe_addr(&c.probe) == at)
        .map(|i| format!("links[{i}].local_address"))
}

fn check_links(c: &Config, p: &mut Vec<Problem>) {
    let mut responders: HashMap<SocketAddr, usize> = HashMap::new();
    for (i, link) in c.links.iter().enumerate() {
        let key = |field: &str| format!("links[{i}].{field}");
        if !c.peers.iter().any(|peer| peer.id == link.peer) {
            let known = if c.peers.is_empty() {
                "there are no [[peers]]".to_owned()
            } else {
                let ids: Vec<&str> = c.peers.iter().map(|peer| peer.id.as_str()).collect();
                format!("configured peers: {}", ids.join(", "))
            };
            p.push(Problem::new(
                key("peer"),
                format!("{:?} is not a configured peer; {known}", link.peer.as_str()),
            ));
        }
        if let Some(iface) = &link.local_iface {
            check_iface(iface, &key("local_iface"), p);
        }
        if let Some(device) = &link.rdma_device {
            check_rdma_device(device, &key("rdma_device"), p);
        }
        check_link_ports(link, i, c.probe.port, p);
        check_link_addresses(link, i, &c.probe, p);
        // One responder answers on each address and port, so two cables
        // there could not be told apart.
        let responder = link.local_probe_addr(&c.probe);
        let field = |link: &LinkConfig| {
            if link.local_port.is_some() {
                "local_port"
            } else {
                "local_address"
            }
        };
        match responders.get(&responder) {
            Some(&first) => p.push(
                Problem::new(
                    key(field(link)),
                    format!(
                        "links[{i}] (to {}) and links[{first}] (to {}) both answer probes on \
                         {responder}; give each cable its own local_address or local_port",
                        link.peer, c.links[first].peer,
                    ),
                )
                .with_first(format!("links[{first}].{}", field(&c.links[first]))),
            ),
            None => {
                responders.insert(responder, i);
            }
        }
        if let Some(speed) = link.expected_speed_gbps
            && !(1..=MAX_LINK_SPEED_GBPS).contains(&speed)
        {
            p.push(Problem::new(
                key("expected_speed_gbps"),
                format!(
                    "{speed} is out of range; use 1 to {MAX_LINK_SPEED_GBPS} (Gb/s; a Thunderbolt 5 cable negotiates 80), or leave it out"
                ),
            ));
        }
    }
}

/// Port 0 would have the OS pick a port no peer knows.
fn check_link_ports(link: &LinkConfig, i: usize, probe_port: u16, p: &mut Vec<Problem>) {
    for (field, port) in [
        ("local_port", link.local_port),
        ("peer_port", link.peer_port),
    ] {
        if port == Some(0) {
            p.push(Problem::new(
                format!("links[{i}].{field}"),
                format!(
                    "0 is not a usable port; use 1 to 65535, or leave it out for probe.port ({probe_port})"
                ),
            ));
        }
    }
}

fn check_iface(iface: &str, key: &str, p: &mut Vec<Problem>) {
    let ok = !iface.is_empty()
        && iface.len() <= MAX_IFACE_LEN
        && iface
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '/' && c != ':');
    if !ok {
        p.push(Problem::new(
            key,
            format!(
                "{iface:?} is not an interface name; use 1 to {MAX_IFACE_LEN} characters \
                 without spaces, '/' or ':', like \"en2\""
            ),
        ));
    }
}

fn check_link_addresses(link: &LinkConfig, i: usize, probe: &ProbeConfig, p: &mut Vec<Problem>) {
    for (field, ip) in [
        ("local_address", link.local_address),
        ("peer_address", link.peer_address),
    ] {
        if ip.is_unspecified() || ip.is_multicast() || is_broadcast(ip) {
            p.push(Problem::new(
                format!("links[{i}].{field}"),
                format!("{ip} cannot be a cable end; use the unicast address of the interface"),
            ));
        } else if matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local()) {
            // A plain address cannot carry the `%en2` scope an fe80::
            // address needs to mean anything; a probe socket could neither
            // bind to it nor reach the peer's.
            p.push(Problem::new(
                format!("links[{i}].{field}"),
                format!(
                    "{ip} is IPv6 link-local: it exists only together with an interface \
                     (fe80::…%en2), which this key cannot carry, so meshd cannot bind or \
                     reach it; give the cable its own IPv4 /30 as `meshctl plan` prints \
                     ({}, netmask {LINK_NETMASK}), or a unique-local fd00::/8 address",
                    plan_example()
                ),
            ));
        }
    }
    // Both ends on one address is a cable looped back on one host, which
    // works as long as the two responders have their own ports.
    let peer = link.peer_probe_addr(probe);
    if peer == link.local_probe_addr(probe) {
        let field = if link.peer_port.is_some() {
            "peer_port"
        } else {
            "peer_address"
        };
        p.push(Problem::new(
            format!("links[{i}].{field}"),
            format!(
                "{peer} is also this end's own responder (local_address and local_port); \
                 the two ends of a cable need different addresses or ports"
            ),
        ));
    } else if link.local_address.is_ipv4() != link.peer_address.is_ipv4() {
        p.push(Problem::new(
            format!("links[{i}].peer_address"),
            format!(
                "{} is {} but local_address {} is {}; both ends of a cable use the same address family",
                link.peer_address,
                family(link.peer_address),
                link.local_address,
                family(link.local_address),
            ),
        ));
    }
}

/// The first cable of a plan, to show what the plan's addressing looks like.
fn plan_example() -> String {
    let base = u32::from(DEFAULT_LINK_RANGE.network());
    format!(
        "{} and {}",
        std::net::Ipv4Addr::from(base + 1),
        std::net::Ipv4Addr::from(base + 2)
    )
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

fn is_broadcast(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V4(v4) if v4.is_broadcast())
}

fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

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

fn check_probe(c: &Config, os: OsKind, p: &mut Vec<Problem>) {
    let probe = &c.probe;
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

fn check_report(c: &Config, p: &mut Vec<Problem>) {
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

fn check_thresholds(c: &Config, p: &mut Vec<Problem>) {
    let t = &c.thresholds;
    check_duration(p, "thresholds.down_after", t.down_after, DOWN_AFTER_RANGE);
    let min_down = c.probe.interval.saturating_mul(2);
    if t.down_after < min_down {
        p.push(
            Problem::new(
                "thresholds.down_after",
                format!(
                    "{} is shorter than 2 × probe.interval ({}); one late reply would cut the link",
                    fmt_duration(t.down_after),
                    fmt_duration(min_down)
                ),
            )
            .see("probe.interval"),
        );
    }
    if c.probe.timeout > t.down_after {
        p.push(
            Problem::new(
                "probe.timeout",
                format!(
                    "{} is longer than thresholds.down_after ({}); a link would be called down \
                     before any of its probes counted as lost",
                    fmt_duration(c.probe.timeout),
                    fmt_duration(t.down_after)
                ),
            )
            .see("thresholds.down_after"),
        );
    }
    check_duration(p, "thresholds.clock_skew", t.clock_skew, CLOCK_SKEW_RANGE);
    check_duration(
        p,
        "thresholds.rtt_min_increase",
        t.rtt_min_increase,
        RTT_MIN_INCREASE_RANGE,
    );
    let degraded_ok = check_ratio(p, "thresholds.loss_degraded", t.loss_degraded);
    let down_ok = check_ratio(p, "thresholds.loss_down", t.loss_down);
    if degraded_ok && down_ok && t.loss_degraded >= t.loss_down {
        p.push(Problem::new(
            "thresholds.loss_degraded",
            format!(
                "{} is not below thresholds.loss_down ({}); a link must be degraded before it is down",
                t.loss_degraded, t.loss_down
            ),
        ));
    }
    let (lo, hi) = RTT_P99_FACTOR_RANGE;
    if !(t.rtt_p99_factor >= lo && t.rtt_p99_factor <= hi) {
        p.push(Problem::new(
            "thresholds.rtt_p99_factor",
            format!(
                "{} is out of range; use {lo:.1} to {hi:.1} (a multiple of the link's baseline p99)",
                t.rtt_p99_factor
            ),
        ));
    }
    check_duration(
        p,
        "thresholds.flap_window",
        t.flap_window,
        FLAP_WINDOW_RANGE,
    );
    let (lo, hi) = FLAP_CHANGES_RANGE;
    if !(lo..=hi).contains(&t.flap_changes) {
        p.push(Problem::new(
            "thresholds.flap_changes",
            format!(
                "{} is out of range; use {lo} to {hi} state changes",
                t.flap_changes
            ),
        ));
    }
    check_ratio(p, "thresholds.cpu_saturated", t.cpu_saturated);
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

fn check_alerting(c: &Config, p: &mut Vec<Problem>) {
    let a = &c.alerting;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, am) in a.alertmanagers.iter().enumerate() {
        let key = format!("alerting.alertmanagers[{i}]");
        let url = &am.url;
        match parse_url(url) {
            Ok(parsed) => {
                match seen.get(&parsed.normal_form()) {
                    Some(first) => p.push(
                        Problem::new(&key, format!("duplicate Alertmanager {url:?}"))
                            .with_first(format!("alerting.alertmanagers[{first}]")),
                    ),
                    None => {
                        seen.insert(parsed.normal_form(), i);
                    }
                }
                if am.ca_file.is_some() && !parsed.tls {
                    p.push(Problem::new(
                        format!("{key}.ca_file"),
                        format!("{url:?} is plain http; a CA file applies to https only"),
                    ));
                }
            }
            Err(e) => p.push(Problem::new(
                &key,
                format!(
                    "{url:?} is not a valid Alertmanager URL: {e}; write it like \"http://127.0.0.1:9093\" or \"https://am.example:9093\""
                ),
            )),
        }
        if am.basic_auth.is_some() && am.bearer_token_file.is_some() {
            p.push(Problem::new(
                &key,
                "basic_auth and bearer_token_file both set; Alertmanager takes one Authorization, choose one",
            ));
        }
        if let Some(auth) = &am.basic_auth
            && auth.username.is_empty()
        {
            p.push(Problem::new(
                format!("{key}.basic_auth.username"),
                "empty; name the user Alertmanager (or its proxy) expects",
            ));
        }
        let files = [
            ("ca_file", am.ca_file.as_ref()),
            (
                "basic_auth.password_file",
                am.basic_auth.as_ref().map(|b| &b.password_file),
            ),
            ("bearer_token_file", am.bearer_token_file.as_ref()),
        ];
        for (field, path) in files {
            if let Some(path) = path
                && !path.is_absolute()
            {
                p.push(Problem::new(
                    format!("{key}.{field}"),
                    format!(
                        "{} is relative; a service starts in /, so give the absolute path",
                        path.display()
                    ),
                ));
            }
        }
    }
    check_duration(
        p,
        "alerting.resend_interval",
        a.resend_interval,
        RESEND_INTERVAL_RANGE,
    );
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
