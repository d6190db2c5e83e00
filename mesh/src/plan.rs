//! Cabling plans (`meshctl plan`): which port of which node to cable to
//! which, a /30 per cable, and the steps that configure each node.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use meshd_domain::facts::Ipv4Cidr;

use meshd_domain::facts::HardwarePort;

use super::models::{Model, ModelPort};
use super::{Backend, JACCL_MAX_RANKS};

/// Where plans take their /30s from: 10.254.0.0/24 is private (RFC 1918)
/// and holds 64 /30s, more than the 28 cables of the largest (8-node)
/// mesh. Home routers hand out 192.168.x.0/24 (and MLX's
/// `distributed_config` assigns 192.168.X.Y itself), Docker takes
/// 172.17–172.31, and the top of 10/8 is rarely routed by site networks, so
/// a cable subnet here is unlikely to shadow the management network.
pub const DEFAULT_LINK_RANGE: Ipv4Cidr = Ipv4Cidr {
    address: Ipv4Addr::new(10, 254, 0, 0),
    prefix: 24,
};

/// Each cable is its own /30: two host addresses, netmask 255.255.255.252.
pub const LINK_PREFIX: u8 = 30;
pub const LINK_NETMASK: &str = "255.255.255.252";
const EXPECTED_SPEED_GBPS: u32 = 80;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CablingPlan {
    pub backend: Backend,
    pub address_range: Ipv4Cidr,
    pub nodes: Vec<PlannedNode>,
    pub cables: Vec<PlannedCable>,
    /// Unreliable ports the plan had to use, each named with its reason.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedNode {
    /// As given, or "node1" … "nodeN".
    pub name: String,
    pub model_id: String,
    pub model_name: String,
    /// What to do on this node, in order.
    pub steps: Vec<SetupStep>,
    /// meshd's `[[links]]` entries for this node, as TOML.
    pub links_config: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupStep {
    /// Done by hand (macOS Recovery cannot be scripted).
    Manual(String),
    /// A shell command to run on the node.
    Run(String),
    /// A command whose output confirms the setup.
    Verify(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCable {
    pub a: PlannedEnd,
    pub b: PlannedEnd,
    /// The cable's /30 (network address, prefix 30).
    pub subnet: Ipv4Cidr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEnd {
    pub node: String,
    /// The hardware port: "Thunderbolt 2".
    pub port: String,
    pub address: Ipv4Addr,
    /// The port's interface ("en6"), once that Mac's hardware ports are
    /// known ([`CablingPlan::name_interfaces`]); the numbering differs per
    /// Mac, so the model alone never tells.
    pub iface: Option<String>,
}

/// [`CablingPlan::name_interfaces`] was given a node the plan does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the plan has no node {node}; its nodes are {}", known.join(", "))]
pub struct UnknownNode {
    pub node: String,
    pub known: Vec<String>,
}

impl CablingPlan {
    /// Fills in the interfaces of `node`'s ends from that Mac's hardware
    /// ports (`networksetup -listallhardwareports`), and its `[[links]]`
    /// with them. Returns the planned ports the list does not have (their
    /// `local_iface` stays a comment).
    pub fn name_interfaces(
        &mut self,
        node: &str,
        ports: &[HardwarePort],
    ) -> Result<Vec<String>, UnknownNode> {
        let Some(planned) = self.nodes.iter_mut().find(|n| n.name == node) else {
            return Err(UnknownNode {
                node: node.to_owned(),
                known: self.nodes.iter().map(|n| n.name.clone()).collect(),
            });
        };
        let mut missing = Vec::new();
        for cable in &mut self.cables {
            for end in [&mut cable.a, &mut cable.b] {
                if end.node != node {
                    continue;
                }
                end.iface = ports
                    .iter()
                    .find(|p| p.name == end.port && !p.device.is_empty())
                    .map(|p| p.device.clone());
                if end.iface.is_none() {
                    missing.push(end.port.clone());
                }
            }
        }
        planned.links_config = links_config(node, &self.cables);
        Ok(missing)
    }
}

/// A node whose model has too few Thunderbolt 5 ports for the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortShortfall {
    pub node: String,
    pub model_id: String,
    pub ports: usize,
    pub usable: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanRefusal {
    #[error("a plan needs at least 2 nodes; got {0}")]
    TooFewNodes(usize),
    #[error("{names} names for {nodes} nodes; name every node once")]
    NamesMismatch { names: usize, nodes: usize },
    #[error("{nodes} nodes: a JACCL mesh has at most {max} ranks; plan at most {max} nodes")]
    TooManyNodes { nodes: usize, max: usize },
    #[error("{}", shortfall_reason(*.backend, *.nodes, *.needed, .short, *.ring_fits))]
    NotEnoughPorts {
        backend: Backend,
        nodes: usize,
        /// Ports each node needs.
        needed: usize,
        short: Vec<PortShortfall>,
        /// Whether every node has the 2 ports a ring needs.
        ring_fits: bool,
    },
    #[error("{range} holds {capacity} /30s, but the plan has {cables} cables; pick a larger range")]
    RangeTooSmall {
        range: Ipv4Cidr,
        cables: usize,
        capacity: usize,
    },
}

fn shortfall_reason(
    backend: Backend,
    nodes: usize,
    needed: usize,
    short: &[PortShortfall],
    ring_fits: bool,
) -> String {
    let mut by_model: BTreeMap<(&str, usize, usize), Vec<&str>> = BTreeMap::new();
    for s in short {
        by_model
            .entry((&s.model_id, s.ports, s.usable))
            .or_default()
            .push(&s.node);
    }
    let shapes: Vec<String> = by_model
        .iter()
        .map(|((model, ports, usable), names)| {
            format!(
                "{} ({model}): {ports} Thunderbolt 5 ports, {usable} usable for RDMA",
                names.join(", ")
            )
        })
        .collect();
    let topology = match backend {
        Backend::Jaccl => format!("a full mesh of {nodes} nodes"),
        Backend::JacclRing => format!("a ring of {nodes} nodes"),
    };
    let mut reason = format!("{}; {topology} needs {needed} per node", shapes.join("; "));
    if backend == Backend::Jaccl && ring_fits {
        reason.push_str("; a ring fits: use `--backend jaccl-ring` (2 ports per node)");
    }
    reason
}

/// A plan with the /30s taken from [`DEFAULT_LINK_RANGE`], its nodes named
/// node1…N.
pub fn plan(nodes: &[&Model], backend: Backend) -> Result<CablingPlan, PlanRefusal> {
    plan_in_range(
        &default_names(nodes.len()),
        nodes,
        backend,
        DEFAULT_LINK_RANGE,
    )
}

/// "node1" … "nodeN".
pub fn default_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node{i}")).collect()
}

/// A plan for `nodes` (one model per node, mixed allowed), called by
/// `names` in order: a full mesh for `jaccl` (N(N−1)/2 cables), a ring for
/// `jaccl-ring` (N cables, 2 ports per node; 1 cable for 2 nodes). Usable
/// ports are taken first; unreliable ones only when needed, with a warning
/// naming them.
pub fn plan_in_range(
    names: &[String],
    nodes: &[&Model],
    backend: Backend,
    range: Ipv4Cidr,
) -> Result<CablingPlan, PlanRefusal> {
    check_node_count(names, nodes, backend)?;
    let needed = ports_needed(nodes.len(), backend);
    check_ports(names, nodes, backend, needed)?;
    let pairs = cabled_pairs(nodes.len(), backend);
    check_range(range, pairs.len())?;

    let chosen: Vec<Vec<&ModelPort>> = nodes
        .iter()
        .map(|m| m.ports_by_preference().into_iter().take(needed).collect())
        .collect();
    let warnings = unreliable_port_warnings(names, nodes, &chosen);
    let cables = addressed_cables(names, &chosen, &pairs, range);
    let planned_nodes = nodes
        .iter()
        .zip(names)
        .map(|(model, name)| PlannedNode {
            name: name.clone(),
            model_id: model.id.clone(),
            model_name: model.name.clone(),
            steps: setup_steps(name, &cables),
            links_config: links_config(name, &cables),
        })
        .collect();
    Ok(CablingPlan {
        backend,
        address_range: range,
        nodes: planned_nodes,
        cables,
        warnings,
    })
}

/// One name per node, at least two nodes, and for a full mesh no more than
/// JACCL's [`JACCL_MAX_RANKS`].
fn check_node_count(
    names: &[String],
    nodes: &[&Model],
    backend: Backend,
) -> Result<(), PlanRefusal> {
    let n = nodes.len();
    if names.len() != n {
        return Err(PlanRefusal::NamesMismatch {
            names: names.len(),
            nodes: n,
        });
    }
    if n < 2 {
        return Err(PlanRefusal::TooFewNodes(n));
    }
    if backend == Backend::Jaccl && n > JACCL_MAX_RANKS {
        return Err(PlanRefusal::TooManyNodes {
            nodes: n,
            max: JACCL_MAX_RANKS,
        });
    }
    Ok(())
}

/// Every node has the `needed` ports, usable or not; the refusal names those
/// short and says whether a ring would fit instead.
fn check_ports(
    names: &[String],
    nodes: &[&Model],
    backend: Backend,
    needed: usize,
) -> Result<(), PlanRefusal> {
    let n = nodes.len();
    let short: Vec<PortShortfall> = nodes
        .iter()
        .zip(names)
        .filter(|(model, _)| model.ports.len() < needed)
        .map(|(model, name)| PortShortfall {
            node: name.clone(),
            model_id: model.id.clone(),
            ports: model.ports.len(),
            usable: model.usable_port_count(),
        })
        .collect();
    if short.is_empty() {
        return Ok(());
    }
    Err(PlanRefusal::NotEnoughPorts {
        backend,
        nodes: n,
        needed,
        ring_fits: nodes
            .iter()
            .all(|m| m.ports.len() >= ports_needed(n, Backend::JacclRing)),
        short,
    })
}

/// `range` holds a /30 for each of the `cables`.
fn check_range(range: Ipv4Cidr, cables: usize) -> Result<(), PlanRefusal> {
    let capacity = if range.prefix > LINK_PREFIX {
        0
    } else {
        1usize << (LINK_PREFIX - range.prefix)
    };
    if cables > capacity {
        return Err(PlanRefusal::RangeTooSmall {
            range,
            cables,
            capacity,
        });
    }
    Ok(())
}

/// A warning for each unreliable port among the `chosen`, naming its node
/// and the reason.
fn unreliable_port_warnings(
    names: &[String],
    nodes: &[&Model],
    chosen: &[Vec<&ModelPort>],
) -> Vec<String> {
    let mut warnings = Vec::new();
    for ((model, ports), name) in nodes.iter().zip(chosen).zip(names) {
        for port in ports {
            if let Some(reason) = port.unreliable_reason() {
                warnings.push(format!(
                    "{name} ({}) uses {}, reported unreliable for RDMA: {reason}",
                    model.id, port.name
                ));
            }
        }
    }
    warnings
}

/// The cables of `pairs`, in order: the k-th takes the k-th /30 of `range`
/// and, at each end, the node's next port among the `chosen`.
fn addressed_cables(
    names: &[String],
    chosen: &[Vec<&ModelPort>],
    pairs: &[(usize, usize)],
    range: Ipv4Cidr,
) -> Vec<PlannedCable> {
    let mut next_port = vec![0usize; names.len()];
    let mut take_end = |node: usize, address: Ipv4Addr| {
        let port = chosen[node][next_port[node]].name.clone();
        next_port[node] += 1;
        PlannedEnd {
            node: names[node].clone(),
            port,
            address,
            iface: None,
        }
    };
    let base = u32::from(range.network());
    pairs
        .iter()
        .enumerate()
        .map(|(k, &(i, j))| {
            let network = Ipv4Addr::from(base + 4 * k as u32);
            PlannedCable {
                a: take_end(i, Ipv4Addr::from(u32::from(network) + 1)),
                b: take_end(j, Ipv4Addr::from(u32::from(network) + 2)),
                subnet: Ipv4Cidr {
                    address: network,
                    prefix: LINK_PREFIX,
                },
            }
        })
        .collect()
}

fn ports_needed(n: usize, backend: Backend) -> usize {
    match backend {
        Backend::Jaccl => n - 1,
        Backend::JacclRing => n.min(3) - 1,
    }
}

/// Node index pairs to cable, in table order.
fn cabled_pairs(n: usize, backend: Backend) -> Vec<(usize, usize)> {
    match backend {
        Backend::Jaccl => (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .collect(),
        // Two nodes form a ring of one cable.
        Backend::JacclRing if n == 2 => vec![(0, 1)],
        Backend::JacclRing => (0..n).map(|i| (i, (i + 1) % n)).collect(),
    }
}

/// This node's end of each of its cables, with the far end.
fn ends_of<'c>(
    node: &str,
    cables: &'c [PlannedCable],
) -> impl Iterator<Item = (&'c PlannedEnd, &'c PlannedEnd, &'c PlannedCable)> {
    cables.iter().filter_map(move |c| {
        if c.a.node == node {
            Some((&c.a, &c.b, c))
        } else if c.b.node == node {
            Some((&c.b, &c.a, c))
        } else {
            None
        }
    })
}

fn setup_steps(node: &str, cables: &[PlannedCable]) -> Vec<SetupStep> {
    let mut steps = vec![
        SetupStep::Manual(
            "enable RDMA once: restart into macOS Recovery (hold the power button, Options), \
             open Utilities > Terminal, run `rdma_ctl enable`, restart; `rdma_ctl status` then \
             prints `enabled`"
                .to_owned(),
        ),
        SetupStep::Run(
            "sudo networksetup -setnetworkserviceenabled \"Thunderbolt Bridge\" off  \
             # the service whose device is bridge0; `networksetup -listnetworkserviceorder` \
             shows its name if it was renamed"
                .to_owned(),
        ),
        SetupStep::Run("sudo ifconfig bridge0 down".to_owned()),
    ];
    for (local, far, _) in ends_of(node, cables) {
        steps.push(SetupStep::Run(format!(
            "sudo networksetup -createnetworkservice \"{port}\" \"{port}\"  \
             # skip if `networksetup -listallnetworkservices` lists it",
            port = local.port
        )));
        steps.push(SetupStep::Run(format!(
            "sudo networksetup -setmanual \"{}\" {} {LINK_NETMASK}  # cable to {}/{}",
            local.port, local.address, far.node, far.port
        )));
    }
    steps.push(SetupStep::Verify(format!(
        "networksetup -listallhardwareports  # each Thunderbolt port's enX is its local_iface; \
         `meshctl plan … --hardware-ports {node}=FILE` writes them into the [[links]]"
    )));
    steps.push(SetupStep::Verify(
        "ibv_devinfo  # once every node is set up: one rdma_enX per cabled port, PORT_ACTIVE"
            .to_owned(),
    ));
    for (_, far, _) in ends_of(node, cables) {
        steps.push(SetupStep::Verify(format!(
            "ping -c 3 {}  # {}/{}",
            far.address, far.node, far.port
        )));
    }
    steps.push(SetupStep::Verify("meshctl doctor".to_owned()));
    steps
}

/// The `[[links]]` entries of meshd's config for `node`. The enX of a
/// hardware port differs per Mac: where the node's hardware ports were
/// given, `local_iface` is written; elsewhere it is a comment naming the
/// port.
fn links_config(node: &str, cables: &[PlannedCable]) -> String {
    let mut toml = String::new();
    for (local, far, cable) in ends_of(node, cables) {
        let iface = match &local.iface {
            Some(iface) => format!(
                "local_iface = \"{iface}\"  # the Device of \"{}\"\n",
                local.port
            ),
            None => format!(
                "# local_iface = \"enX\"  # the Device of \"{}\" in `networksetup -listallhardwareports`\n",
                local.port
            ),
        };
        toml.push_str(&format!(
            "# {node}/{} ↔ {}/{} ({})\n\
             [[links]]\n\
             peer = \"{}\"\n\
             {iface}\
             local_address = \"{}\"\n\
             peer_address = \"{}\"\n\
             expected_speed_gbps = {EXPECTED_SPEED_GBPS}\n\n",
            local.port, far.node, far.port, cable.subnet, far.node, local.address, far.address,
        ));
    }
    toml
}
