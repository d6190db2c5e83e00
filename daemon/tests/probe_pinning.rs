//! A prober's socket is pinned to its cable's interface: with the peer's
//! address routed over another cable, the probes still leave (and the
//! replies come back) by the cable the link names.
//!
//! Layout, in two namespaces this test creates and always deletes:
//!
//! ```text
//!   meshd-pin-PID (this node)              meshd-pinpeer-PID (the peer)
//!   a1 10.78.1.1/30  <==== veth ====>  b1 10.78.1.2/30
//!   a2 10.78.2.1/30  <==== veth ====>  b2 10.78.2.2/30, 10.78.9.2/32
//!   route 10.78.9.2 via 10.78.1.2 dev a1
//! ```
//!
//! The link is a2's: local 10.78.2.1 on a2, peer 10.78.9.2. The routing
//! table sends 10.78.9.2 over a1; only the pin keeps the probes on a2,
//! which an nftables counter of the UDP datagrams leaving each cable shows,
//! whether the link names its interface or leaves it to be found by the
//! address. A plain socket bound and connected the same way (the control)
//! goes out by a1, proving that the layout misroutes without the pin.
//!
//! Only UDP counts: the peer probes this node too, and while no socket
//! holds the port here (before the prober binds, after it stops) the kernel
//! answers those probes with ICMP port-unreachable errors that follow the
//! route over a1, with an ARP request ahead of them. They are the kernel's,
//! not meshd's; the interface's own packet counters would count them.
//!
//! Each side runs in its namespace as this test binary under `ip netns
//! exec` with one ignored helper selected (the test may not `setns` itself:
//! no unsafe code); the prober helper prints its counters on one line.

mod netns;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use meshd::metrics::Metrics;
use meshd::probe::{LinkPorts, ProbedLink, ProberSettings, Probes};
use meshd_domain::LinkEnd;
use meshd_domain::fixtures::{id, identity};
use meshd_model::verdict::ExpectedLink;
use netns::{Cleanup, ip, missing_prerequisite};
use tokio_util::sync::CancellationToken;

const RESPOND_ENV: &str = "MESHD_TEST_PIN_RESPOND_ON";
const PROBE_ENV: &str = "MESHD_TEST_PIN_PROBE";
const PORT: u16 = 7421;
const PEER: &str = "10.78.9.2";
const LOCAL: &str = "10.78.2.1";
/// Long enough for about 50 small probes; the helpers stop by themselves.
const PROBE_FOR: Duration = Duration::from_secs(1);
const RESPOND_FOR: Duration = Duration::from_secs(20);

fn settings() -> ProberSettings {
    ProberSettings {
        interval: Duration::from_millis(20),
        payload_bytes: 64,
        mtu_interval: Duration::from_millis(100),
        mtu_payload_bytes: 1472,
        timeout: Duration::from_millis(200),
        outage_gap: Duration::from_millis(100),
    }
}

fn end(node: &str, address: &str, iface: Option<&str>) -> LinkEnd {
    LinkEnd {
        address: Some(address.parse::<IpAddr>().expect("ip")),
        iface: iface.map(str::to_owned),
        ..LinkEnd::node_only(id(node))
    }
}

/// Node `local.node`'s probe engine with one cable, to `remote`, on `PORT`
/// at both ends: it probes the peer and answers the peer's probes.
fn probes(local: LinkEnd, remote: LinkEnd, shutdown: CancellationToken) -> Probes {
    let identity = identity(local.node.as_str(), 1);
    let link = ProbedLink {
        link: ExpectedLink {
            local,
            remote,
            expected_speed_bps: None,
        },
        ports: LinkPorts {
            local: PORT,
            peer: PORT,
        },
    };
    Probes::start(
        vec![link],
        settings(),
        Arc::new(Metrics::new(&identity)),
        shutdown,
    )
}

/// The peer's end of the cable (its probe engine answers), for
/// `RESPOND_FOR` at most.
#[tokio::test]
#[ignore = "helper: run by probes_leave_by_the_pinned_cable inside the peer's namespace"]
async fn respond_helper() {
    let Ok(on) = std::env::var(RESPOND_ENV) else {
        return;
    };
    let addr: SocketAddr = on.parse().expect("address");
    let cancel = CancellationToken::new();
    let _probes = probes(
        end("b", &addr.ip().to_string(), None),
        end("a", LOCAL, None),
        cancel.clone(),
    );
    tokio::time::sleep(RESPOND_FOR).await;
    cancel.cancel();
}

/// The nftables table, in this node's namespace, that counts the UDP
/// datagrams leaving by each cable.
const COUNTERS: &str = "meshd_pin";

fn counting_rules() -> String {
    format!(
        "table inet {COUNTERS} {{
            counter udp_a1 {{ }}
            counter udp_a2 {{ }}
            chain out {{
                type filter hook output priority 0; policy accept;
                oifname \"a1\" meta l4proto udp counter name \"udp_a1\"
                oifname \"a2\" meta l4proto udp counter name \"udp_a2\"
            }}
        }}"
    )
}

/// UDP datagrams this namespace has sent out of `iface` (a1 or a2).
fn udp_sent(iface: &str) -> u64 {
    let out = Command::new("nft")
        .args(["list", "counter", "inet", COUNTERS, &format!("udp_{iface}")])
        .output()
        .expect("run nft");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nft list counter udp_{iface}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut words = text.split_whitespace();
    words
        .find(|w| *w == "packets")
        .and_then(|_| words.next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in:\n{text}"))
}

/// Probes the peer for `PROBE_FOR` from 10.78.2.1 and prints what each
/// cable carried and whether replies came. `MESHD_TEST_PIN_PROBE` says how:
/// `a2` is a link whose `local_iface` is a2; `auto` a link without one (the
/// interface is found by the address); `unpinned` is the control, a plain
/// socket bound and connected the same way but never pinned.
#[tokio::test]
#[ignore = "helper: run by probes_leave_by_the_pinned_cable inside this node's namespace"]
async fn probe_helper() {
    let Ok(mode) = std::env::var(PROBE_ENV) else {
        return;
    };
    let before = (udp_sent("a1"), udp_sent("a2"));
    let replied = if mode == "unpinned" {
        let socket = tokio::net::UdpSocket::bind((LOCAL, 0)).await.expect("bind");
        socket.connect((PEER, PORT)).await.expect("connect");
        let started = Instant::now();
        while started.elapsed() < PROBE_FOR {
            // Not a probe the responder answers: only the way out counts.
            // The peer refuses these (ICMP port unreachable: its responder
            // is pinned to b2), which a connected socket reports on the
            // next send.
            let _ = socket.send(b"meshd pinning control").await;
            tokio::time::sleep(settings().interval).await;
        }
        false
    } else {
        let iface = (mode != "auto").then_some(mode.as_str());
        let cancel = CancellationToken::new();
        let probes = probes(end("a", LOCAL, iface), end("b", PEER, None), cancel.clone());
        let board = probes.subscribe();
        tokio::time::sleep(PROBE_FOR).await;
        cancel.cancel();
        let peer = id("b");
        board
            .borrow()
            .read(std::time::Instant::now())
            .links
            .get(&peer)
            .is_some_and(|stats| stats.last_reply_at.is_some())
    };
    let after = (udp_sent("a1"), udp_sent("a2"));
    println!(
        "RESULT a1={} a2={} replied={replied}",
        after.0 - before.0,
        after.1 - before.1
    );
}

/// What one probing run carried on each cable.
#[derive(Debug)]
struct Carried {
    a1: u64,
    a2: u64,
    replied: bool,
}

fn probe_from(ns: &str, iface: &str) -> Carried {
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(["probe_helper", "--exact", "--ignored", "--nocapture"])
        .env(PROBE_ENV, iface)
        .output()
        .expect("run the prober helper");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "prober helper failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line in:\n{stdout}"));
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    Carried {
        a1: field("a1").parse().expect("a1"),
        a2: field("a2").parse().expect("a2"),
        replied: field("replied") == "true",
    }
}

#[test]
fn probes_leave_by_the_pinned_cable() {
    if let Some(reason) = missing_prerequisite() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "probe_pinning must run in CI: {reason}"
        );
        eprintln!("skipping probe_pinning: {reason}");
        return;
    }
    let pid = std::process::id();
    let (ns, peer) = (format!("meshd-pin-{pid}"), format!("meshd-pinpeer-{pid}"));
    let mut cleanup = Cleanup {
        namespaces: Vec::new(),
        children: Vec::new(),
    };
    for name in [&ns, &peer] {
        ip(&["netns", "add", name]);
        cleanup.namespaces.push(name.clone());
        // Before any link exists, so that the cables carry IPv4 only (no
        // router solicitations, no MLD reports) and the layout stays the
        // one drawn above. A kernel without IPv6 has nothing to turn off.
        let _ = Command::new("ip")
            .args(["netns", "exec", name, "sh", "-c"])
            .arg("echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6")
            .stderr(Stdio::null())
            .status();
    }
    for (a, b) in [("a1", "b1"), ("a2", "b2")] {
        ip(&[
            "-n", &ns, "link", "add", a, "type", "veth", "peer", "name", b, "netns", &peer,
        ]);
    }
    ip(&["-n", &ns, "addr", "add", "10.78.1.1/30", "dev", "a1"]);
    ip(&["-n", &ns, "addr", "add", "10.78.2.1/30", "dev", "a2"]);
    ip(&["-n", &peer, "addr", "add", "10.78.1.2/30", "dev", "b1"]);
    ip(&["-n", &peer, "addr", "add", "10.78.2.2/30", "dev", "b2"]);
    ip(&["-n", &peer, "addr", "add", "10.78.9.2/32", "dev", "b2"]);
    for dev in ["a1", "a2"] {
        ip(&["-n", &ns, "link", "set", dev, "up"]);
    }
    for dev in ["b1", "b2"] {
        ip(&["-n", &peer, "link", "set", dev, "up"]);
    }
    ip(&[
        "-n",
        &ns,
        "route",
        "add",
        "10.78.9.2/32",
        "via",
        "10.78.1.2",
        "dev",
        "a1",
    ]);
    let mut nft = Command::new("ip")
        .args(["netns", "exec", &ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft");
    nft.stdin
        .take()
        .expect("stdin")
        .write_all(counting_rules().as_bytes())
        .expect("write the counting rules");
    let loaded = nft.wait_with_output().expect("nft");
    assert!(
        loaded.status.success(),
        "nft: {}",
        String::from_utf8_lossy(&loaded.stderr)
    );

    let exe = std::env::current_exe().expect("test binary");
    cleanup.children.push(
        Command::new("ip")
            .args(["netns", "exec", &peer])
            .arg(&exe)
            .args(["respond_helper", "--exact", "--ignored"])
            .env(RESPOND_ENV, format!("{PEER}:{PORT}"))
            .stdout(Stdio::null())
            .spawn()
            .expect("start the responder helper"),
    );
    // The responder binds within milliseconds; probe until it answers, so a
    // slow start is not read as a routing fault.
    for mode in ["a2", "auto"] {
        let deadline = Instant::now() + Duration::from_secs(10);
        let pinned = loop {
            let carried = probe_from(&ns, mode);
            if carried.replied || Instant::now() > deadline {
                break carried;
            }
        };
        assert!(
            pinned.replied,
            "{mode}: no reply over the pinned cable: {pinned:?}"
        );
        assert!(
            pinned.a2 >= 20,
            "{mode}: the probes did not leave by a2: {pinned:?}"
        );
        assert_eq!(
            pinned.a1, 0,
            "{mode}: a pinned probe left by a1: {pinned:?}"
        );
    }

    let routed = probe_from(&ns, "unpinned");
    assert!(
        routed.a1 >= 20,
        "control: an unpinned socket should follow the route over a1: {routed:?}"
    );
    assert_eq!(routed.a2, 0, "control: {routed:?}");
}
