//! A running demo binds nothing but 127.0.0.1, the one loopback address
//! macOS has without root, so `meshd demo` starts on a fresh Mac. Checked
//! on Linux, where the kernel lists every socket: the sockets this test
//! process owns (its /proc/self/fd) are looked up in /proc/net/{tcp,udp}
//! and their IPv6 twins. It is the only test in this binary, so every
//! socket the process owns is the demo's.
#![cfg(target_os = "linux")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use meshd::demo::plan::{Plan, Transport};

/// Eight nodes on a shared two-core machine take a while to open every
/// socket (probers, proxy upstreams, reporters); well above what it needs.
const PATIENCE: Duration = Duration::from_secs(90);
const NODES: usize = 8;
/// `st` of a listening TCP socket in /proc/net/tcp.
const TCP_LISTEN: u8 = 0x0A;

#[derive(Debug, Clone, Copy)]
struct Socket {
    transport: Transport,
    local: SocketAddr,
    remote: SocketAddr,
    state: u8,
}

/// Inodes of the sockets among this process's open files.
fn own_socket_inodes() -> BTreeSet<u64> {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// `0100007F:4E8C` (IPv4) or 32 hex digits and a port (IPv6): the address
/// words are printed in host byte order.
fn endpoint(text: &str) -> SocketAddr {
    let (ip, port) = text.split_once(':').expect("ip:port");
    let port = u16::from_str_radix(port, 16).expect("hex port");
    let words: Vec<[u8; 4]> = (0..ip.len() / 8)
        .map(|i| {
            u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16)
                .expect("hex word")
                .to_ne_bytes()
        })
        .collect();
    let ip = match words.as_slice() {
        [v4] => IpAddr::V4(Ipv4Addr::from(*v4)),
        [a, b, c, d] => {
            let bytes: Vec<u8> = [a, b, c, d].into_iter().flatten().copied().collect();
            let bytes: [u8; 16] = bytes.try_into().expect("16 bytes");
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => panic!("unexpected address {text:?}"),
    };
    SocketAddr::new(ip, port)
}

/// Every socket of this process in the kernel's tables.
fn own_sockets() -> Vec<Socket> {
    let inodes = own_socket_inodes();
    let mut sockets = Vec::new();
    for (table, transport) in [
        ("tcp", Transport::Tcp),
        ("tcp6", Transport::Tcp),
        ("udp", Transport::Udp),
        ("udp6", Transport::Udp),
    ] {
        let text = std::fs::read_to_string(format!("/proc/net/{table}")).expect("table");
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let inode: u64 = fields[9].parse().expect("inode");
            if !inodes.contains(&inode) {
                continue;
            }
            sockets.push(Socket {
                transport,
                local: endpoint(fields[1]),
                remote: endpoint(fields[2]),
                state: u8::from_str_radix(fields[3], 16).expect("state"),
            });
        }
    }
    sockets
}

/// What the demo is expected to have open once its mesh runs.
#[derive(Debug, Default)]
struct Census {
    /// Ports of the plan this process has a socket on (listening for TCP).
    planned_found: BTreeSet<(Transport, u16)>,
    tcp_listeners: usize,
    /// Proxies (management network and cables) a connected TCP socket
    /// reaches: the report streams.
    to_proxies: BTreeSet<u16>,
    /// UDP sockets on ports the plan does not fix: none, since every cable
    /// end probes from its own planned socket and the cable proxies talk to
    /// the ends from their planned sides.
    udp_ephemeral: usize,
}

fn census(sockets: &[Socket], plan: &Plan) -> Census {
    let planned: BTreeMap<(Transport, u16), String> = plan
        .ports()
        .into_iter()
        .map(|p| ((p.transport, p.addr.port()), p.what))
        .collect();
    let proxies: BTreeSet<u16> = plan.tcp_proxies().iter().map(|p| p.listen.port()).collect();
    let mut census = Census::default();
    for socket in sockets {
        let key = (socket.transport, socket.local.port());
        match socket.transport {
            Transport::Tcp if socket.state == TCP_LISTEN => {
                census.tcp_listeners += 1;
                if planned.contains_key(&key) {
                    census.planned_found.insert(key);
                }
            }
            Transport::Tcp => {
                if proxies.contains(&socket.remote.port()) {
                    census.to_proxies.insert(socket.remote.port());
                }
            }
            Transport::Udp if planned.contains_key(&key) => {
                census.planned_found.insert(key);
            }
            Transport::Udp => census.udp_ephemeral += 1,
        }
    }
    census
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eight_node_demo_binds_only_127_0_0_1() {
    let _serial = meshd_test_lock::exclusive();
    let (demo, plan) = common::start_demo(NODES).await;
    let links = NODES * (NODES - 1);
    let planned = plan.ports();
    let planned_tcp = planned
        .iter()
        .filter(|p| p.transport == Transport::Tcp)
        .count();
    // gRPC, metrics and the mesh listener of each node; each link end's
    // cable listener, management proxy and cable proxy side.
    assert_eq!(planned_tcp, 3 * NODES + 3 * links);
    assert_eq!(planned.len(), planned_tcp + 2 * links);

    let started = Instant::now();
    let census = loop {
        let sockets = own_sockets();
        for socket in &sockets {
            assert_eq!(
                socket.local.ip(),
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                "bound elsewhere than 127.0.0.1: {socket:?}"
            );
            let connected = socket.remote.port() != 0;
            assert!(
                !connected || socket.remote.ip() == IpAddr::V4(Ipv4Addr::LOCALHOST),
                "connected elsewhere than 127.0.0.1: {socket:?}"
            );
        }
        let census = census(&sockets, &plan);
        // One upstream socket per cable proxy side once probes flow; one
        // report stream per ordered pair over the management network and
        // one over their cable.
        let complete =
            census.planned_found.len() == planned.len() && census.to_proxies.len() == 2 * links;
        if complete {
            break census;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the demo's sockets did not all show up within {PATIENCE:?}: {census:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(
        census.tcp_listeners, planned_tcp,
        "no listener besides the planned ones: {census:?}"
    );
    assert_eq!(
        census.udp_ephemeral, 0,
        "no UDP socket besides the planned ones: {census:?}"
    );

    tokio::time::timeout(Duration::from_secs(30), demo.stop())
        .await
        .expect("the demo stops");
}
