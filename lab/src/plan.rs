//! The lab's layout, decided before anything is created: namespace and
//! interface names, the cables' /30s, management addresses and each node's
//! meshd config. Pure, so the layout is tested without root.
//!
//! ```text
//!  meshlab-NAME-a             meshlab-NAME-b         (one namespace per node)
//!   mesh-b 10.77.12.1/30 <== veth ==> mesh-a 10.77.12.2/30   (one pair per cable)
//!   mgmt0 10.78.0.1/24          mgmt0 10.78.0.2/24
//!      \\                         /
//!       node-a ---- bridge mgmt ---- node-b         meshlab-NAME-mgmt 10.78.0.254/24
//! ```
//!
//! All addresses live inside the lab's namespaces, so they never meet the
//! host's networks; the same plan can run twice under different names.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// Every namespace of every lab starts with this, so leftovers are found.
pub const PREFIX: &str = "meshlab-";
pub const MIN_NODES: usize = 2;
pub const MAX_NODES: usize = 8;
pub const GRPC_PORT: u16 = 7420;
pub const METRICS_PORT: u16 = 9420;
/// The mesh listener, where peers open their report streams.
pub const MESH_PORT: u16 = 7421;
/// The certificates' directory, beside the configs.
pub const TLS_DIR: &str = "tls";
pub const PROMETHEUS_PORT: u16 = 9090;
pub const ALERTMANAGER_PORT: u16 = 9093;
/// The management bridge inside the management namespace.
pub const MGMT_BRIDGE: &str = "mgmt";
/// Each node's interface on the management network.
pub const MGMT_IFACE: &str = "mgmt0";
const MGMT_PREFIX_LEN: u8 = 24;
/// The management namespace's own address: Prometheus and Alertmanager.
pub const MGMT_HOST: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 254);
const NODE_IDS: [&str; MAX_NODES] = ["a", "b", "c", "d", "e", "f", "g", "h"];
const MAX_NAME_LEN: usize = 16;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("a lab has {MIN_NODES} to {MAX_NODES} nodes, not {0}")]
    Nodes(usize),
    #[error("lab name {0:?}: 1 to {MAX_NAME_LEN} lowercase letters and digits")]
    Name(String),
    #[error("no node {0:?} in this lab")]
    UnknownNode(String),
    #[error("no cable between {0} and {1}")]
    NoCable(String, String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: &'static str,
    /// 1-based: a = 1.
    pub number: u8,
    pub namespace: String,
    pub mgmt_address: Ipv4Addr,
    /// The management bridge's port for this node, in the management namespace.
    pub mgmt_port: String,
}

impl Node {
    pub fn metrics(&self) -> String {
        format!("{}:{METRICS_PORT}", self.mgmt_address)
    }

    pub fn mesh(&self) -> String {
        format!("{}:{MESH_PORT}", self.mgmt_address)
    }
}

/// One end of a cable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub node: &'static str,
    pub iface: String,
    pub address: Ipv4Addr,
}

/// A veth pair on its own /30, like a Thunderbolt cable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cable {
    pub a: End,
    pub b: End,
}

impl Cable {
    /// `node`'s end and the far end, if `node` is on this cable.
    pub fn ends_from(&self, node: &str) -> Option<(&End, &End)> {
        if self.a.node == node {
            Some((&self.a, &self.b))
        } else if self.b.node == node {
            Some((&self.b, &self.a))
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub name: String,
    pub nodes: Vec<Node>,
    pub cables: Vec<Cable>,
}

/// Whether `address` is one of the lab's cable addresses (10.77.0.0/16):
/// the only place a job's ranks may send to.
pub fn is_cable_address(address: Ipv4Addr) -> bool {
    matches!(address.octets(), [10, 77, _, _])
}

/// The name of a node's mesh port towards `peer`.
pub fn mesh_iface(peer: &str) -> String {
    format!("mesh-{peer}")
}

/// The namespaces of lab `name` start with this.
pub fn namespace_prefix(name: &str) -> String {
    format!("{PREFIX}{name}-")
}

pub fn validate_name(name: &str) -> Result<(), PlanError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if valid {
        Ok(())
    } else {
        Err(PlanError::Name(name.to_owned()))
    }
}

impl Plan {
    pub fn new(name: &str, nodes: usize) -> Result<Self, PlanError> {
        validate_name(name)?;
        if !(MIN_NODES..=MAX_NODES).contains(&nodes) {
            return Err(PlanError::Nodes(nodes));
        }
        let prefix = namespace_prefix(name);
        let nodes: Vec<Node> = NODE_IDS[..nodes]
            .iter()
            .zip(1u8..)
            .map(|(&id, number)| Node {
                id,
                number,
                namespace: format!("{prefix}{id}"),
                mgmt_address: Ipv4Addr::new(10, 78, 0, number),
                mgmt_port: format!("node-{id}"),
            })
            .collect();
        let mut cables = Vec::new();
        for (i, x) in nodes.iter().enumerate() {
            for y in &nodes[i + 1..] {
                // 10.77.XY.0/30 for nodes X < Y: readable, and unique up to 8 nodes.
                let subnet = x.number * 10 + y.number;
                cables.push(Cable {
                    a: End {
                        node: x.id,
                        iface: mesh_iface(y.id),
                        address: Ipv4Addr::new(10, 77, subnet, 1),
                    },
                    b: End {
                        node: y.id,
                        iface: mesh_iface(x.id),
                        address: Ipv4Addr::new(10, 77, subnet, 2),
                    },
                });
            }
        }
        Ok(Self {
            name: name.to_owned(),
            nodes,
            cables,
        })
    }

    pub fn mgmt_namespace(&self) -> String {
        format!("{}mgmt", namespace_prefix(&self.name))
    }

    /// Every namespace of the lab, nodes first.
    pub fn namespaces(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.namespace.clone())
            .chain(std::iter::once(self.mgmt_namespace()))
            .collect()
    }

    pub fn node(&self, id: &str) -> Result<&Node, PlanError> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| PlanError::UnknownNode(id.to_owned()))
    }

    pub fn cable(&self, x: &str, y: &str) -> Result<&Cable, PlanError> {
        self.node(x)?;
        self.node(y)?;
        self.cables
            .iter()
            .find(|c| c.ends_from(x).is_some_and(|(_, far)| far.node == y))
            .ok_or_else(|| PlanError::NoCable(x.to_owned(), y.to_owned()))
    }

    pub fn mgmt_cidr(address: Ipv4Addr) -> String {
        format!("{address}/{MGMT_PREFIX_LEN}")
    }

    /// Each node's own history beside its config (the lab's nodes share
    /// one host, and its state directory): for a node on the lab's own
    /// build, which knows `[history]`; a release before refuses the key.
    pub fn history_section(id: &str) -> String {
        format!("\n[history]\npath = \"history/{id}.redb\"\n")
    }

    /// Node `id`'s meshd config: every other node a peer on the management
    /// network, every cable of the node a link; `alertmanager` the URL meshd
    /// pushes to, `extra` more TOML appended as is (sections the plan does
    /// not write, e.g. `[thresholds]`). Without `[history]`, which
    /// `Lab` adds for the builds that know it ([`Self::history_section`]).
    pub fn config(
        &self,
        id: &str,
        alertmanager: Option<&str>,
        extra: &str,
    ) -> Result<String, PlanError> {
        let me = self.node(id)?;
        let mut toml = String::new();
        let _ = writeln!(
            toml,
            "# meshd config of lab node {id}, written by `lab up`."
        );
        let _ = writeln!(toml, "[node]\nid = \"{id}\"\n");
        // What a user would bind: the local listener on loopback (meshctl's
        // default 127.0.0.1, inside the namespace), metrics on the
        // management network for the lab's Prometheus, and the mesh
        // listener there for the peers, with the certificates `lab up`
        // issued. Never every address.
        let _ = writeln!(
            toml,
            "[listen]\ngrpc = \"127.0.0.1:{GRPC_PORT}\"\nmetrics = \"{}\"\nmesh = \"{}\"\n",
            me.metrics(),
            me.mesh()
        );
        let _ = writeln!(
            toml,
            "[tls]\nca = \"{TLS_DIR}/ca.pem\"\ncert = \"{TLS_DIR}/{id}.pem\"\nkey = \"{TLS_DIR}/{id}-key.pem\"\n"
        );
        for peer in self.nodes.iter().filter(|n| n.id != me.id) {
            let _ = writeln!(
                toml,
                "[[peers]]\nid = \"{}\"\naddress = \"{}\"\n",
                peer.id,
                peer.mesh()
            );
        }
        for cable in &self.cables {
            if let Some((mine, far)) = cable.ends_from(id) {
                let _ = writeln!(
                    toml,
                    "[[links]]\npeer = \"{}\"\nlocal_iface = \"{}\"\nlocal_address = \"{}\"\npeer_address = \"{}\"\n",
                    far.node, mine.iface, mine.address, far.address
                );
            }
        }
        if let Some(url) = alertmanager {
            let _ = writeln!(toml, "[alerting]\nalertmanagers = [\"{url}\"]\n");
        }
        // Every node's namespace shares the host's processes: a node's job
        // ranks are those in its own network namespace. And its two cores:
        // a spinning rank gets a share of one (0.3-0.5 beside two other
        // spinners and the daemons), a paced one a few hundredths.
        let _ = writeln!(
            toml,
            "[watch.jobs]\nown_network_namespace_only = true\nbusy_cores = 0.25\n"
        );
        toml.push_str(extra);
        Ok(toml)
    }
}

/// The URL of an Alertmanager run in the management namespace.
pub fn alertmanager_url() -> String {
    format!("http://{MGMT_HOST}:{ALERTMANAGER_PORT}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_mesh_has_a_cable_per_pair_each_on_its_own_30() {
        let plan = Plan::new("t1", 4).unwrap();
        assert_eq!(plan.cables.len(), 6);
        let ab = plan.cable("b", "a").unwrap();
        assert_eq!(ab.a.address, Ipv4Addr::new(10, 77, 12, 1));
        assert_eq!(ab.b.address, Ipv4Addr::new(10, 77, 12, 2));
        assert_eq!(
            (ab.a.iface.as_str(), ab.b.iface.as_str()),
            ("mesh-b", "mesh-a")
        );
        let mut subnets: Vec<_> = plan
            .cables
            .iter()
            .map(|c| c.a.address.octets()[2])
            .collect();
        subnets.dedup();
        assert_eq!(subnets.len(), 6);
        assert_eq!(Plan::new("t1", 8).unwrap().cables.len(), 28);
        assert_eq!(
            plan.namespaces(),
            [
                "meshlab-t1-a",
                "meshlab-t1-b",
                "meshlab-t1-c",
                "meshlab-t1-d",
                "meshlab-t1-mgmt"
            ]
        );
    }

    #[test]
    fn every_cable_address_is_in_the_cable_network_and_nothing_else_is() {
        let plan = Plan::new("t1", 8).unwrap();
        for cable in &plan.cables {
            assert!(is_cable_address(cable.a.address) && is_cable_address(cable.b.address));
        }
        for node in &plan.nodes {
            assert!(!is_cable_address(node.mgmt_address));
        }
        assert!(!is_cable_address(MGMT_HOST));
        assert!(!is_cable_address(Ipv4Addr::new(10, 76, 12, 1)));
    }

    #[test]
    fn sizes_and_names_are_checked() {
        assert_eq!(Plan::new("x", 1).unwrap_err(), PlanError::Nodes(1));
        assert_eq!(Plan::new("x", 9).unwrap_err(), PlanError::Nodes(9));
        assert!(matches!(Plan::new("Bad-name", 3), Err(PlanError::Name(_))));
        assert!(matches!(Plan::new("", 3), Err(PlanError::Name(_))));
        let plan = Plan::new("x", 3).unwrap();
        assert_eq!(
            plan.cable("a", "a").unwrap_err(),
            PlanError::NoCable("a".into(), "a".into())
        );
        assert_eq!(
            plan.node("z").unwrap_err(),
            PlanError::UnknownNode("z".into())
        );
    }

    #[test]
    fn a_config_lists_every_peer_and_every_cable_of_its_node() {
        let plan = Plan::new("t1", 3).unwrap();
        let toml = plan
            .config(
                "b",
                Some(&alertmanager_url()),
                "[thresholds]\nflap_changes = 100\n",
            )
            .unwrap();
        assert!(toml.contains("id = \"b\""));
        assert!(toml.contains("mesh = \"10.78.0.2:7421\""), "{toml}");
        assert!(toml.contains("grpc = \"127.0.0.1:7420\""), "{toml}");
        assert!(toml.contains("metrics = \"10.78.0.2:9420\""), "{toml}");
        assert!(!toml.contains("0.0.0.0"), "{toml}");
        assert!(
            toml.contains("cert = \"tls/b.pem\"\nkey = \"tls/b-key.pem\""),
            "{toml}"
        );
        assert!(
            toml.contains("id = \"a\"\naddress = \"10.78.0.1:7421\""),
            "{toml}"
        );
        assert!(
            toml.contains("id = \"c\"\naddress = \"10.78.0.3:7421\""),
            "{toml}"
        );
        assert!(
            !toml.contains("address = \"10.78.0.2:7421\"\n"),
            "not itself: {toml}"
        );
        assert!(toml.contains(
            "peer = \"a\"\nlocal_iface = \"mesh-a\"\nlocal_address = \"10.77.12.2\"\npeer_address = \"10.77.12.1\""
        ));
        assert!(toml.contains(
            "peer = \"c\"\nlocal_iface = \"mesh-c\"\nlocal_address = \"10.77.23.1\"\npeer_address = \"10.77.23.2\""
        ));
        assert!(toml.contains("alertmanagers = [\"http://10.78.0.254:9093\"]"));
        assert!(toml.ends_with("flap_changes = 100\n"));
    }
}
