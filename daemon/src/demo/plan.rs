//! Where everything of a demo mesh lives: node ids, ports, certificates,
//! and the generated [`Config`] of every node. Pure: no socket or file is
//! touched here, so the whole layout is checked by unit tests.
//!
//! Everything binds 127.0.0.1 alone, the one loopback address every system
//! has (macOS has no other on `lo0` unless root adds aliases), so every
//! cable end and every proxy gets a port of its own instead of an address.
//! Numbering is 1-based (`a` = 1, `b` = 2, …). With base port `P`, node
//! `k`, and an ordered pair of nodes `i → j`, on 127.0.0.1:
//!
//! | what | port |
//! |---|---|
//! | gRPC of node `k` (meshctl, read-only) | TCP `P+k` |
//! | metrics of node `k` | TCP `P+10+k` |
//! | mesh listener of node `k` (`listen.mesh`, mutual TLS) | TCP `P+20+k` |
//! | management proxy `i → j` (node `i`'s `peers[].address`) | TCP `P+100+10i+j` |
//! | node `i`'s end of the cable to `j` (`links[].local_port`: probes on UDP, report streams on TCP) | UDP and TCP `P+200+10i+j` |
//! | node `i`'s side of the cable proxy `i – j` (`links[].peer_port`) | UDP and TCP `P+300+10i+j` |
//!
//! A cable proxy stands for the cable: what node `i`'s end sends to its
//! side leaves the other side, `P+300+10j+i`, towards node `j`'s end, and
//! back. Each end therefore hears its peer from exactly the address and
//! port its config names, as on a real cable. The TCP side relays the
//! report streams that travel over the cable.
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};

use meshd_domain::NodeId;

use crate::config::{Config, LinkConfig, PeerConfig};

pub const MIN_NODES: usize = 2;
/// JACCL meshes cap at 8 ranks (ARCHITECTURE.md, Field facts), and 1-digit indices keep the
/// port scheme readable.
pub const MAX_NODES: usize = 8;
pub const DEFAULT_NODES: usize = 4;
pub const DEFAULT_BASE_PORT: u16 = meshd_domain::DEMO_BASE_PORT;
/// Below this, ports are privileged on most systems.
pub const MIN_BASE_PORT: u16 = 1024;

pub const METRICS_OFFSET: u16 = 10;
pub const MESH_OFFSET: u16 = 20;
pub const MANAGEMENT_OFFSET: u16 = 100;
pub const CABLE_OFFSET: u16 = 200;
pub const CABLE_PROXY_OFFSET: u16 = 300;
/// The highest offset the scheme uses: node `h`'s side of the cable proxy
/// `h – g`.
pub const MAX_PORT_OFFSET: u16 = CABLE_PROXY_OFFSET + pair_offset(MAX_NODES - 1, MAX_NODES - 2);
pub const MAX_BASE_PORT: u16 = u16::MAX - MAX_PORT_OFFSET;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{0} nodes is out of range; a demo mesh has {MIN_NODES} to {MAX_NODES} nodes")]
    NodeCount(usize),
    #[error(
        "base port {0} is out of range; use {MIN_BASE_PORT} to {MAX_BASE_PORT} (the demo uses ports up to base + {MAX_PORT_OFFSET})"
    )]
    BasePort(u16),
    #[error("cannot build the config of node {node}: {problem}")]
    Config { node: String, problem: String },
    #[error("node id {0:?} is given twice; the demo's commands name nodes regardless of case")]
    DuplicateId(String),
}

/// The layout of a demo mesh of `nodes.len()` nodes.
#[derive(Debug, Clone)]
pub struct Plan {
    pub base_port: u16,
    /// Where the mesh's CA and every node's certificate are written.
    pub certs: PathBuf,
    pub nodes: Vec<NodePlan>,
}

/// One node: `index` is 0-based (its position in [`Plan::nodes`]).
#[derive(Debug, Clone)]
pub struct NodePlan {
    pub index: usize,
    pub id: NodeId,
    pub config: Config,
}

impl NodePlan {
    pub fn grpc(&self) -> SocketAddr {
        self.config.listen.grpc
    }

    pub fn metrics(&self) -> SocketAddr {
        self.config.listen.metrics
    }

    /// Its listener for peers and remote tools.
    pub fn mesh(&self) -> Option<SocketAddr> {
        self.config.listen.mesh
    }
}

/// One end of a cable proxy: the side a node's end talks to, and that end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CableSide {
    pub node: usize,
    /// The proxy's port for this node (its `links[].peer_port`).
    pub listen: SocketAddr,
    /// The node's end of the cable (its `links[].local_port`).
    pub end: SocketAddr,
}

/// The cable between two nodes, as a proxy that can cut, slow and lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CableProxyPlan {
    pub a: CableSide,
    pub b: CableSide,
}

/// What lets a relayed TCP connection through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The management network between nodes `from` and `to` (partitions).
    Management { from: usize, to: usize },
    /// The cable between nodes `a` and `b` (cuts).
    Cable { a: usize, b: usize },
}

/// A TCP relay: connections opened on `listen` go on to `upstream` while
/// the gate is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpProxyPlan {
    pub gate: Gate,
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
}

/// A port the demo binds: on 127.0.0.1, like everything of the demo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPort {
    pub transport: Transport,
    pub addr: SocketAddr,
    /// What binds it, for a person: "metrics of node b".
    pub what: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    Tcp,
    Udp,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        })
    }
}

impl Plan {
    /// The layout of a mesh of `nodes` nodes on ports from `base_port`, its
    /// certificates in `certs` (written by the demo at start).
    pub fn new(nodes: usize, base_port: u16, certs: &Path) -> Result<Plan, PlanError> {
        if !(MIN_NODES..=MAX_NODES).contains(&nodes) {
            return Err(PlanError::NodeCount(nodes));
        }
        let ids = (0..nodes).map(node_id).collect::<Result<Vec<_>, _>>()?;
        Plan::with_ids(ids, base_port, certs)
    }

    /// The same layout with the nodes named `ids` instead of `a`, `b`, …:
    /// a mesh that looks like a real one (`--ids`), say to see how the
    /// page draws long names. Numbering follows the order of `ids`.
    pub fn with_ids(ids: Vec<NodeId>, base_port: u16, certs: &Path) -> Result<Plan, PlanError> {
        if !(MIN_NODES..=MAX_NODES).contains(&ids.len()) {
            return Err(PlanError::NodeCount(ids.len()));
        }
        if !(MIN_BASE_PORT..=MAX_BASE_PORT).contains(&base_port) {
            return Err(PlanError::BasePort(base_port));
        }
        // Commands find a node by its id typed in any case.
        let mut seen = std::collections::BTreeSet::new();
        if let Some(twice) = ids
            .iter()
            .find(|id| !seen.insert(id.as_str().to_ascii_lowercase()))
        {
            return Err(PlanError::DuplicateId(twice.to_string()));
        }
        let nodes = ids
            .iter()
            .enumerate()
            .map(|(index, id)| NodePlan {
                index,
                id: id.clone(),
                config: node_config(index, &ids, base_port, certs),
            })
            .collect();
        Ok(Plan {
            base_port,
            certs: certs.to_owned(),
            nodes,
        })
    }

    /// The node whose id is `name`, as typed by the user (case-insensitive).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.id.as_str().eq_ignore_ascii_case(name))
    }

    pub fn ids(&self) -> Vec<&str> {
        self.nodes.iter().map(|n| n.id.as_str()).collect()
    }

    /// Every ordered pair of distinct nodes.
    pub fn ordered_pairs(&self) -> impl Iterator<Item = (usize, usize)> + use<> {
        let n = self.nodes.len();
        (0..n).flat_map(move |i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
    }

    /// Every cable, once per unordered pair.
    pub fn cable_proxies(&self) -> Vec<CableProxyPlan> {
        let side = |node, other| CableSide {
            node,
            listen: localhost(cable_proxy_port(self.base_port, node, other)),
            end: localhost(cable_port(self.base_port, node, other)),
        };
        self.ordered_pairs()
            .filter(|(i, j)| i < j)
            .map(|(i, j)| CableProxyPlan {
                a: side(i, j),
                b: side(j, i),
            })
            .collect()
    }

    /// The management network's relays (node `i`'s connections to node
    /// `j`'s mesh listener) and each cable's (node `i`'s report stream over
    /// the cable to node `j`'s end).
    pub fn tcp_proxies(&self) -> Vec<TcpProxyPlan> {
        let base = self.base_port;
        let management = self.ordered_pairs().map(move |(from, to)| TcpProxyPlan {
            gate: Gate::Management { from, to },
            listen: localhost(management_port(base, from, to)),
            upstream: localhost(mesh_port(base, to)),
        });
        let cables = self.ordered_pairs().map(move |(i, j)| TcpProxyPlan {
            gate: Gate::Cable { a: i, b: j },
            listen: localhost(cable_proxy_port(base, i, j)),
            upstream: localhost(cable_port(base, j, i)),
        });
        management.chain(cables).collect()
    }

    /// Every port the demo binds, taken from the node configs and the
    /// proxies, so a check of these covers whatever a caller changed.
    pub fn ports(&self) -> Vec<PlannedPort> {
        let port = |transport, addr, what: String| PlannedPort {
            transport,
            addr,
            what,
        };
        let mut ports = Vec::new();
        for node in &self.nodes {
            let id = &node.id;
            ports.push(port(
                Transport::Tcp,
                node.grpc(),
                format!("gRPC of node {id}"),
            ));
            ports.push(port(
                Transport::Tcp,
                node.metrics(),
                format!("metrics of node {id}"),
            ));
            if let Some(mesh) = node.mesh() {
                ports.push(port(
                    Transport::Tcp,
                    mesh,
                    format!("mesh listener of node {id}"),
                ));
            }
            for link in &node.config.links {
                let end = link.local_probe_addr(&node.config.probe);
                let what = format!("node {id}'s end of the cable to {}", link.peer);
                ports.push(port(Transport::Udp, end, what.clone()));
                ports.push(port(Transport::Tcp, end, what));
            }
        }
        for p in self.tcp_proxies() {
            let what = match p.gate {
                Gate::Management { from, to } => {
                    format!("management proxy {} → {}", self.id(from), self.id(to))
                }
                Gate::Cable { a, b } => format!(
                    "cable proxy {}–{}, {}'s side",
                    self.id(a),
                    self.id(b),
                    self.id(a)
                ),
            };
            ports.push(port(Transport::Tcp, p.listen, what));
        }
        for p in self.cable_proxies() {
            for (side, other) in [(p.a, p.b), (p.b, p.a)] {
                ports.push(port(
                    Transport::Udp,
                    side.listen,
                    format!(
                        "cable proxy {}–{}, {}'s side",
                        self.id(side.node),
                        self.id(other.node),
                        self.id(side.node)
                    ),
                ));
            }
        }
        ports
    }

    fn id(&self, index: usize) -> &str {
        self.nodes.get(index).map_or("?", |n| n.id.as_str())
    }
}

/// `a`, `b`, … `h`.
fn node_id(index: usize) -> Result<NodeId, PlanError> {
    let letter = u8::try_from(index)
        .ok()
        .and_then(|i| b'a'.checked_add(i))
        .map(char::from)
        .unwrap_or('?');
    NodeId::new(letter.to_string()).map_err(|e| PlanError::Config {
        node: letter.to_string(),
        problem: e.to_string(),
    })
}

/// 1-based number of a node, as used in ports. `index` is
/// below [`MAX_NODES`], which makes the narrowing lossless.
fn number(index: usize) -> u8 {
    u8::try_from(index + 1).unwrap_or(u8::MAX)
}

/// A base port for a demo next to one on `base`: the first round hundred
/// above all of its ports.
pub fn suggested_base(base: u16) -> u16 {
    let above = (u32::from(base) + u32::from(MAX_PORT_OFFSET)) / 100 * 100 + 100;
    u16::try_from(above)
        .ok()
        .filter(|b| *b <= MAX_BASE_PORT)
        .unwrap_or(DEFAULT_BASE_PORT)
}

/// Where in a block of ports the ordered pair `i → j` is: `10i+j`, which
/// stays below 100 for up to [`MAX_NODES`] nodes.
const fn pair_offset(i: usize, j: usize) -> u16 {
    10 * (i as u16 + 1) + (j as u16 + 1)
}

pub fn grpc_port(base: u16, index: usize) -> u16 {
    base + u16::from(number(index))
}

pub fn metrics_port(base: u16, index: usize) -> u16 {
    base + METRICS_OFFSET + u16::from(number(index))
}

pub fn mesh_port(base: u16, index: usize) -> u16 {
    base + MESH_OFFSET + u16::from(number(index))
}

pub fn management_port(base: u16, from: usize, to: usize) -> u16 {
    base + MANAGEMENT_OFFSET + pair_offset(from, to)
}

/// Node `i`'s end of its cable to node `j`: its probe responder.
pub fn cable_port(base: u16, i: usize, j: usize) -> u16 {
    base + CABLE_OFFSET + pair_offset(i, j)
}

/// Node `i`'s side of the cable proxy to node `j`: where node `i` sends
/// its probes and opens its report stream over that cable.
pub fn cable_proxy_port(base: u16, i: usize, j: usize) -> u16 {
    base + CABLE_PROXY_OFFSET + pair_offset(i, j)
}

fn localhost(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// See `node_config`; `slow A B 50` clears it with room to spare.
pub const DEMO_RTT_MIN_INCREASE: std::time::Duration = std::time::Duration::from_millis(10);

/// See `node_config`: the longest window the config accepts.
const DEMO_SPIKE_WINDOW: std::time::Duration = std::time::Duration::from_secs(3600);
const DEMO_CPU_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

fn node_config(index: usize, ids: &[NodeId], base: u16, certs: &Path) -> Config {
    let mut config = Config::embedded_default("demo");
    config.node.id = ids[index].clone();
    config.listen.grpc = localhost(grpc_port(base, index));
    config.listen.metrics = localhost(metrics_port(base, index));
    config.listen.mesh = Some(localhost(mesh_port(base, index)));
    let dir = meshd_pki::store::CertDir::new(certs);
    let own = dir.node(ids[index].as_str());
    config.tls.ca = Some(dir.ca().cert);
    config.tls.cert = Some(own.cert);
    config.tls.key = Some(own.key);
    // Loopback RTTs on a shared host jitter by milliseconds (eight daemons
    // and their proxies on two cores), not by the microseconds of a real
    // cable: only a rise this large is degradation here.
    config.thresholds.rtt_min_increase = DEMO_RTT_MIN_INCREASE;
    // Every demo daemon samples the same host CPU: a busy host would raise
    // one cpu_spike per node and bury the mesh faults the demo is about, and
    // eight process scans a second are wasted on two cores.
    config.watch.cpu.spike_window = DEMO_SPIKE_WINDOW;
    config.watch.cpu.interval = DEMO_CPU_INTERVAL;
    let others = || (0..ids.len()).filter(move |&j| j != index);
    config.peers = others()
        .map(|j| PeerConfig {
            id: ids[j].clone(),
            address: localhost(management_port(base, index, j)).to_string(),
        })
        .collect();
    config.links = others()
        .enumerate()
        .map(|(port, j)| LinkConfig {
            peer: ids[j].clone(),
            // Loopback has no cable interface or negotiated speed to check.
            local_iface: None,
            // Both ends on 127.0.0.1: the ports tell the cables apart.
            local_address: Ipv4Addr::LOCALHOST.into(),
            peer_address: Ipv4Addr::LOCALHOST.into(),
            local_port: Some(cable_port(base, index, j)),
            peer_port: Some(cable_proxy_port(base, index, j)),
            expected_speed_gbps: None,
            // The simulated RDMA device of this node's port on the cable,
            // named as on a Mac, so `meshctl hostfile` has a device per cable.
            rdma_device: Some(demo_rdma_device(port)),
        })
        .collect();
    config
}

/// A demo node's `port`-th cable (0-based) ends on `rdma_en{port + 1}`.
pub fn demo_rdma_device(port: usize) -> String {
    format!("rdma_en{}", port + 1)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn plan(n: usize, base: u16) -> Result<Plan, PlanError> {
        Plan::new(n, base, Path::new("/demo/tls"))
    }

    #[test]
    fn every_size_binds_distinct_ports_on_127_0_0_1_alone() {
        for n in MIN_NODES..=MAX_NODES {
            let plan = plan(n, DEFAULT_BASE_PORT).expect("plan");
            assert_eq!(plan.nodes.len(), n);
            let ports = plan.ports();
            let pairs = n * (n - 1);
            let count = |t| ports.iter().filter(|p| p.transport == t).count();
            // gRPC, metrics and mesh per node; per ordered pair a cable end,
            // a management proxy and a cable proxy side.
            assert_eq!(count(Transport::Tcp), 3 * n + 3 * pairs, "n={n}");
            assert_eq!(count(Transport::Udp), 2 * pairs, "n={n}");
            let mut seen = HashSet::new();
            for p in &ports {
                assert_eq!(p.addr.ip(), Ipv4Addr::LOCALHOST, "{p:?}");
                assert!(seen.insert((p.transport, p.addr.port())), "reused: {p:?}");
                let offset = p.addr.port() - DEFAULT_BASE_PORT;
                assert!((1..=MAX_PORT_OFFSET).contains(&offset), "{p:?}");
            }
            let bound = |t, addr| seen.contains(&(t, addr)) && addr != 0;
            for node in &plan.nodes {
                let problems = node.config.validate();
                assert!(problems.is_empty(), "n={n} {}: {problems:?}", node.id);
                assert_eq!(node.config.members().len(), n);
                assert_eq!(node.config.links.len(), n - 1);
                assert!(!node.config.tls.insecure, "the demo runs mutual TLS");
                for peer in &node.config.peers {
                    let addr: SocketAddr = peer.address.parse().expect("ip:port");
                    assert!(bound(Transport::Tcp, addr.port()), "{addr}");
                }
                for link in &node.config.links {
                    let peer = link.peer_probe_addr(&node.config.probe);
                    assert_eq!(peer.ip(), Ipv4Addr::LOCALHOST);
                    assert!(bound(Transport::Udp, peer.port()), "{peer}");
                    assert!(bound(Transport::Tcp, peer.port()), "{peer}");
                }
            }
            for proxy in plan.cable_proxies() {
                for side in [proxy.a, proxy.b] {
                    assert!(bound(Transport::Udp, side.end.port()));
                }
            }
            for proxy in plan.tcp_proxies() {
                assert!(bound(Transport::Tcp, proxy.upstream.port()));
            }
        }
    }

    #[test]
    fn nodes_can_be_named_and_keep_their_numbers() {
        let named = |names: &[&str]| {
            let ids = names.iter().map(|n| NodeId::new(*n).expect("id")).collect();
            Plan::with_ids(ids, 17400, Path::new("/tmp/certs"))
        };
        let plan = named(&["mac-studio-1", "mac-studio-2", "mac-studio-3"]).expect("plan");
        assert_eq!(plan.ids(), ["mac-studio-1", "mac-studio-2", "mac-studio-3"]);
        assert_eq!(plan.index_of("MAC-STUDIO-2"), Some(1));
        let b = &plan.nodes[1];
        assert_eq!(b.config.node.id.as_str(), "mac-studio-2");
        assert_eq!(b.grpc().to_string(), "127.0.0.1:17402");
        assert_eq!(b.config.links[1].peer.as_str(), "mac-studio-3");
        assert_eq!(
            named(&["x", "y", "X"]).err(),
            Some(PlanError::DuplicateId("X".into()))
        );
        assert_eq!(named(&["x"]).err(), Some(PlanError::NodeCount(1)));
    }

    #[test]
    fn ids_ports_and_certificates_follow_the_documented_scheme() {
        let plan = plan(3, 17400).expect("plan");
        assert_eq!(plan.ids(), ["a", "b", "c"]);
        let b = &plan.nodes[1];
        assert_eq!(b.grpc().to_string(), "127.0.0.1:17402");
        assert_eq!(b.metrics().to_string(), "127.0.0.1:17412");
        assert_eq!(
            b.mesh().map(|m| m.to_string()).as_deref(),
            Some("127.0.0.1:17422")
        );
        let to_c = &b.config.links[1];
        assert_eq!(to_c.peer.as_str(), "c");
        let probe = &b.config.probe;
        assert_eq!(to_c.local_probe_addr(probe).to_string(), "127.0.0.1:17623");
        assert_eq!(to_c.peer_probe_addr(probe).to_string(), "127.0.0.1:17723");
        assert_eq!(b.config.peers[0].address, "127.0.0.1:17521");
        assert_eq!(b.config.tls.cert, Some(PathBuf::from("/demo/tls/b.pem")));
        assert_eq!(b.config.tls.ca, Some(PathBuf::from("/demo/tls/ca.pem")));
        assert_eq!(plan.index_of("C"), Some(2));
        assert_eq!(plan.index_of("z"), None);
        let named = |port: u16, transport| {
            plan.ports()
                .into_iter()
                .find(|p| p.addr.port() == port && p.transport == transport)
                .map(|p| format!("{}/{}: {}", p.addr, p.transport, p.what))
        };
        assert_eq!(
            named(17623, Transport::Udp).as_deref(),
            Some("127.0.0.1:17623/udp: node b's end of the cable to c")
        );
        assert_eq!(
            named(17723, Transport::Tcp).as_deref(),
            Some("127.0.0.1:17723/tcp: cable proxy b–c, b's side")
        );
    }

    #[test]
    fn proxies_connect_the_right_ends() {
        let plan = plan(2, 17400).expect("plan");
        let (a, b) = (&plan.nodes[0].config, &plan.nodes[1].config);
        let [cable] = plan.cable_proxies()[..] else {
            panic!("one cable");
        };
        // Each node talks to its own side, which is where its config says
        // the peer is, and the proxy reaches each node's own end.
        assert_eq!(cable.a.listen.to_string(), "127.0.0.1:17712");
        assert_eq!(cable.a.listen, a.links[0].peer_probe_addr(&a.probe));
        assert_eq!(cable.a.end, a.links[0].local_probe_addr(&a.probe));
        assert_eq!(cable.b.listen, b.links[0].peer_probe_addr(&b.probe));
        assert_eq!(cable.b.end.to_string(), "127.0.0.1:17621");
        assert_eq!(cable.b.end, b.links[0].local_probe_addr(&b.probe));
        let tcp = plan.tcp_proxies();
        let b_to_a = tcp
            .iter()
            .find(|p| p.gate == Gate::Management { from: 1, to: 0 })
            .expect("b->a");
        assert_eq!(Some(b_to_a.upstream), plan.nodes[0].mesh());
        assert_eq!(b_to_a.listen.to_string(), b.peers[0].address);
        let over_cable = tcp
            .iter()
            .find(|p| p.gate == Gate::Cable { a: 0, b: 1 })
            .expect("a's stream over the cable");
        assert_eq!(over_cable.listen, cable.a.listen);
        assert_eq!(over_cable.upstream, cable.b.end);
    }

    #[test]
    fn sizes_and_ports_outside_the_ranges_are_refused() {
        for n in [0, 1, 9, 100] {
            let err = plan(n, DEFAULT_BASE_PORT).expect_err("refused");
            assert_eq!(err, PlanError::NodeCount(n));
            assert!(err.to_string().contains("2 to 8"), "{err}");
        }
        for port in [0, 80, MAX_BASE_PORT + 1, u16::MAX] {
            let err = plan(4, port).expect_err("refused");
            assert_eq!(err, PlanError::BasePort(port));
            assert!(err.to_string().contains("1024 to 65148"), "{err}");
        }
        assert_eq!(suggested_base(DEFAULT_BASE_PORT), 17_800);
        assert_eq!(suggested_base(17_413), 17_900);
        assert_eq!(suggested_base(MAX_BASE_PORT), DEFAULT_BASE_PORT);
        let highest = plan(MAX_NODES, MAX_BASE_PORT).expect("fits");
        let last = highest.ports().iter().map(|p| p.addr.port()).max();
        assert_eq!(last, Some(u16::MAX));
    }
}
