//! Where everything of a demo mesh lives: node ids, ports, cable addresses,
//! proxy addresses, and the generated [`Config`] of every node. Pure: no
//! socket is touched here, so the whole layout is checked by unit tests.
//!
//! Numbering is 1-based (`a` = 1, `b` = 2, …) so no address has a `.0`
//! octet. With base port `P`, node `k`, and an ordered pair of nodes `i → j`:
//!
//! | what | address |
//! |---|---|
//! | gRPC of node `k` (meshctl) | `127.0.0.1:P+k` |
//! | metrics of node `k` | `127.0.0.1:P+10+k` |
//! | node `i`'s end of the cable to `j` (its probe responder) | `127.100.i.j:P+20` |
//! | UDP fault proxy `i → j` (node `i`'s `links[].peer_address`) | `127.101.i.j:P+20` |
//! | TCP management proxy `i → j` (node `i`'s `peers[].address`) | `127.0.0.1:P+100+10i+j` |
//!
//! The UDP proxy `i → j` forwards to `127.100.j.i:P+20` from a socket bound
//! on `127.101.j.i`, which is what node `j`'s config calls the address of
//! node `i` on that cable; replies come back to node `i` from the address
//! node `i` sent to. Both ends therefore see exactly the addresses their
//! configs name.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

use meshd_proto::domain::NodeId;

use crate::config::{Config, LinkConfig, PeerConfig};

pub const MIN_NODES: usize = 2;
/// JACCL meshes cap at 8 ranks (ARCHITECTURE.md, Field facts), and 1-digit indices keep the
/// port scheme readable.
pub const MAX_NODES: usize = 8;
pub const DEFAULT_NODES: usize = 4;
pub const DEFAULT_BASE_PORT: u16 = 17400;
/// Below this, ports are privileged on most systems.
pub const MIN_BASE_PORT: u16 = 1024;
/// The highest offset the scheme uses: the management proxy `h → g`.
const MAX_PORT_OFFSET: u16 = 100 + 10 * 8 + 7;
pub const MAX_BASE_PORT: u16 = u16::MAX - MAX_PORT_OFFSET;

const METRICS_OFFSET: u16 = 10;
const PROBE_OFFSET: u16 = 20;
const MANAGEMENT_OFFSET: u16 = 100;
/// Second octet of the cable ends.
const CABLE_NET: u8 = 100;
/// Second octet of the UDP fault proxies.
const PROXY_NET: u8 = 101;

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
}

/// The layout of a demo mesh of `nodes.len()` nodes.
#[derive(Debug, Clone)]
pub struct Plan {
    pub base_port: u16,
    pub probe_port: u16,
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
}

/// The UDP fault proxy for probes sent by node `from` to node `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpProxyPlan {
    pub from: usize,
    pub to: usize,
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
    /// The source address the upstream sees: the one its config expects.
    pub upstream_bind: IpAddr,
}

/// The TCP management proxy for gRPC opened by node `from` to node `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpProxyPlan {
    pub from: usize,
    pub to: usize,
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
}

impl Plan {
    pub fn new(nodes: usize, base_port: u16) -> Result<Plan, PlanError> {
        if !(MIN_NODES..=MAX_NODES).contains(&nodes) {
            return Err(PlanError::NodeCount(nodes));
        }
        if !(MIN_BASE_PORT..=MAX_BASE_PORT).contains(&base_port) {
            return Err(PlanError::BasePort(base_port));
        }
        let probe_port = base_port + PROBE_OFFSET;
        let ids = (0..nodes).map(node_id).collect::<Result<Vec<_>, _>>()?;
        let nodes = ids
            .iter()
            .enumerate()
            .map(|(index, id)| NodePlan {
                index,
                id: id.clone(),
                config: node_config(index, &ids, base_port),
            })
            .collect();
        Ok(Plan {
            base_port,
            probe_port,
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

    pub fn udp_proxies(&self) -> Vec<UdpProxyPlan> {
        self.ordered_pairs()
            .map(|(from, to)| UdpProxyPlan {
                from,
                to,
                listen: v4(proxy_address(from, to), self.probe_port),
                upstream: v4(cable_address(to, from), self.probe_port),
                upstream_bind: IpAddr::V4(proxy_address(to, from)),
            })
            .collect()
    }

    pub fn tcp_proxies(&self) -> Vec<TcpProxyPlan> {
        self.ordered_pairs()
            .map(|(from, to)| TcpProxyPlan {
                from,
                to,
                listen: v4(
                    Ipv4Addr::LOCALHOST,
                    management_port(self.base_port, from, to),
                ),
                upstream: v4(Ipv4Addr::LOCALHOST, grpc_port(self.base_port, to)),
            })
            .collect()
    }

    /// Every address besides 127.0.0.1 the demo binds: on macOS each one
    /// must first be added to `lo0` as an alias.
    pub fn loopback_aliases(&self) -> Vec<Ipv4Addr> {
        self.ordered_pairs()
            .flat_map(|(i, j)| [cable_address(i, j), proxy_address(i, j)])
            .collect()
    }

    /// A shell loop that adds [`Plan::loopback_aliases`] on macOS.
    pub fn alias_command(&self) -> String {
        let indices: Vec<String> = (1..=self.nodes.len()).map(|k| k.to_string()).collect();
        let list = indices.join(" ");
        format!(
            "for i in {list}; do for j in {list}; do [ $i = $j ] || \
             sudo sh -c \"ifconfig lo0 alias 127.{CABLE_NET}.$i.$j && ifconfig lo0 alias 127.{PROXY_NET}.$i.$j\"; \
             done; done"
        )
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

/// 1-based number of a node, as used in addresses and ports. `index` is
/// below [`MAX_NODES`], which makes the narrowing lossless.
fn number(index: usize) -> u8 {
    u8::try_from(index + 1).unwrap_or(u8::MAX)
}

/// Node `i`'s end of its cable to node `j`.
pub fn cable_address(i: usize, j: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, CABLE_NET, number(i), number(j))
}

/// Where node `i` sends its probes for node `j`.
pub fn proxy_address(i: usize, j: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, PROXY_NET, number(i), number(j))
}

pub fn grpc_port(base: u16, index: usize) -> u16 {
    base + u16::from(number(index))
}

pub fn metrics_port(base: u16, index: usize) -> u16 {
    base + METRICS_OFFSET + u16::from(number(index))
}

pub fn management_port(base: u16, from: usize, to: usize) -> u16 {
    base + MANAGEMENT_OFFSET + 10 * u16::from(number(from)) + u16::from(number(to))
}

fn v4(ip: Ipv4Addr, port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(ip, port))
}

/// See `node_config`; `slow A B 50` clears it with room to spare.
pub const DEMO_RTT_MIN_INCREASE: std::time::Duration = std::time::Duration::from_millis(10);

/// See `node_config`: the longest window the config accepts.
const DEMO_SPIKE_WINDOW: std::time::Duration = std::time::Duration::from_secs(3600);
const DEMO_CPU_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

fn node_config(index: usize, ids: &[NodeId], base: u16) -> Config {
    let mut config = Config::embedded_default("demo");
    config.node.id = ids[index].clone();
    config.listen.grpc = v4(Ipv4Addr::LOCALHOST, grpc_port(base, index));
    config.listen.metrics = v4(Ipv4Addr::LOCALHOST, metrics_port(base, index));
    config.probe.port = base + PROBE_OFFSET;
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
            address: v4(Ipv4Addr::LOCALHOST, management_port(base, index, j)).to_string(),
        })
        .collect();
    config.links = others()
        .enumerate()
        .map(|(port, j)| LinkConfig {
            peer: ids[j].clone(),
            // Loopback has no cable interface or negotiated speed to check.
            local_iface: None,
            local_address: IpAddr::V4(cable_address(index, j)),
            peer_address: IpAddr::V4(proxy_address(index, j)),
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

    #[test]
    fn every_size_gives_valid_configs_and_distinct_addresses() {
        for n in MIN_NODES..=MAX_NODES {
            let plan = Plan::new(n, DEFAULT_BASE_PORT).expect("plan");
            assert_eq!(plan.nodes.len(), n);
            let mut tcp: HashSet<SocketAddr> = HashSet::new();
            let mut udp: HashSet<SocketAddr> = HashSet::new();
            for node in &plan.nodes {
                let problems = node.config.validate();
                assert!(problems.is_empty(), "n={n} {}: {problems:?}", node.id);
                assert_eq!(node.config.members().len(), n);
                assert_eq!(node.config.links.len(), n - 1);
                assert!(tcp.insert(node.grpc()), "gRPC port reused: {}", node.grpc());
                assert!(tcp.insert(node.metrics()), "metrics reused");
                for link in &node.config.links {
                    assert!(udp.insert(SocketAddr::new(link.local_address, plan.probe_port)));
                    assert!(udp.insert(SocketAddr::new(link.peer_address, plan.probe_port)));
                }
            }
            for proxy in plan.tcp_proxies() {
                assert!(tcp.insert(proxy.listen), "taken twice: {}", proxy.listen);
            }
            assert_eq!(plan.udp_proxies().len(), n * (n - 1));
            for proxy in plan.udp_proxies() {
                assert!(udp.contains(&proxy.listen));
                assert!(udp.contains(&proxy.upstream));
            }
            for addr in tcp.iter().chain(&udp) {
                assert!(addr.ip().is_loopback(), "{addr} is not loopback");
            }
            let aliases: HashSet<Ipv4Addr> = plan.loopback_aliases().into_iter().collect();
            assert_eq!(aliases.len(), 2 * n * (n - 1));
        }
    }

    #[test]
    fn ids_and_ports_follow_the_documented_scheme() {
        let plan = Plan::new(3, 17400).expect("plan");
        assert_eq!(plan.ids(), ["a", "b", "c"]);
        let b = &plan.nodes[1];
        assert_eq!(b.grpc().to_string(), "127.0.0.1:17402");
        assert_eq!(b.metrics().to_string(), "127.0.0.1:17412");
        assert_eq!(b.config.probe.port, 17420);
        let to_c = &b.config.links[1];
        assert_eq!(to_c.peer.as_str(), "c");
        assert_eq!(to_c.local_address.to_string(), "127.100.2.3");
        assert_eq!(to_c.peer_address.to_string(), "127.101.2.3");
        assert_eq!(b.config.peers[0].address, "127.0.0.1:17521");
        assert_eq!(plan.index_of("C"), Some(2));
        assert_eq!(plan.index_of("z"), None);
    }

    #[test]
    fn proxies_connect_the_right_ends() {
        let plan = Plan::new(2, 17400).expect("plan");
        let udp = plan.udp_proxies();
        let a_to_b = udp.iter().find(|p| p.from == 0).expect("a->b");
        assert_eq!(a_to_b.listen.to_string(), "127.101.1.2:17420");
        assert_eq!(a_to_b.upstream.to_string(), "127.100.2.1:17420");
        // b's config names a's address on the cable: the source b sees.
        assert_eq!(
            a_to_b.upstream_bind,
            plan.nodes[1].config.links[0].peer_address
        );
        let tcp = plan.tcp_proxies();
        let b_to_a = tcp.iter().find(|p| p.from == 1).expect("b->a");
        assert_eq!(b_to_a.upstream, plan.nodes[0].grpc());
        assert_eq!(
            b_to_a.listen.to_string(),
            plan.nodes[1].config.peers[0].address
        );
    }

    #[test]
    fn sizes_and_ports_outside_the_ranges_are_refused() {
        for n in [0, 1, 9, 100] {
            let err = Plan::new(n, DEFAULT_BASE_PORT).expect_err("refused");
            assert_eq!(err, PlanError::NodeCount(n));
            assert!(err.to_string().contains("2 to 8"), "{err}");
        }
        for port in [0, 80, MAX_BASE_PORT + 1, u16::MAX] {
            let err = Plan::new(4, port).expect_err("refused");
            assert_eq!(err, PlanError::BasePort(port));
        }
        let highest = Plan::new(MAX_NODES, MAX_BASE_PORT).expect("fits");
        let last = highest
            .tcp_proxies()
            .into_iter()
            .map(|p| p.listen.port())
            .max();
        assert_eq!(last, Some(u16::MAX));
    }

    #[test]
    fn alias_command_covers_every_node() {
        let plan = Plan::new(3, DEFAULT_BASE_PORT).expect("plan");
        let cmd = plan.alias_command();
        assert!(cmd.contains("for i in 1 2 3;"), "{cmd}");
        assert!(cmd.contains("ifconfig lo0 alias 127.100.$i.$j"), "{cmd}");
        assert!(cmd.contains("ifconfig lo0 alias 127.101.$i.$j"), "{cmd}");
    }
}
