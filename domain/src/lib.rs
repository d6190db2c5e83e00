//! meshd's vocabulary: the facts of the wire messages with their invariants
//! checked (node ids valid, enums known, times present). The pure model,
//! the mesh checks, the daemon and meshctl all speak it; the wire protocol
//! (`meshd-proto`) converts to and from it and nothing else reads raw wire
//! structs. Plain data and pure functions, so a crate that depends only on
//! this one stays free of I/O.

pub mod facts;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod fold;
pub mod history;
pub mod human;
pub mod time;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::facts::{BootIdentity, Cable, CheckResult, NodeFacts};
use crate::jobs::{JobRank, JobView};

/// Longest node id accepted: fits a DNS label, and keeps metric labels short.
pub const NODE_ID_MAX_LEN: usize = 63;

/// The first of the loopback ports `meshd demo` uses by default: its node
/// `a` serves gRPC on the next one. Here so that meshctl, which does not
/// depend on the daemon, can point a user at a running demo.
pub const DEMO_BASE_PORT: u16 = 17400;

/// A node's stable name in the mesh: 1 to 63 of `A-Z a-z 0-9 . _ -`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeIdError {
    #[error("node id is empty")]
    Empty,
    #[error("node id {0:?} is longer than {NODE_ID_MAX_LEN} characters")]
    TooLong(String),
    #[error("node id {id:?} contains {bad:?}; use only letters, digits, '.', '_' and '-'")]
    BadCharacter { id: String, bad: char },
}

impl NodeId {
    pub fn new(id: impl Into<String>) -> Result<Self, NodeIdError> {
        let id = id.into();
        if id.is_empty() {
            return Err(NodeIdError::Empty);
        }
        if id.len() > NODE_ID_MAX_LEN {
            return Err(NodeIdError::TooLong(id));
        }
        if let Some(bad) = id.chars().find(|c| !is_node_id_char(*c)) {
            return Err(NodeIdError::BadCharacter { id, bad });
        }
        Ok(Self(id))
    }

    /// A valid id derived from a host name: the first DNS label
    /// (`studio-1.local` → `studio-1`), other characters replaced by `-`.
    pub fn from_hostname(hostname: &str) -> Self {
        let label = hostname.split('.').next().unwrap_or_default();
        let mut id: String = label
            .chars()
            .map(|c| if is_node_id_char(c) { c } else { '-' })
            .take(NODE_ID_MAX_LEN)
            .collect();
        if id.is_empty() {
            id.push_str("localhost");
        }
        Self(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_node_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

impl FromStr for NodeId {
    type Err = NodeIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for NodeId {
    type Error = NodeIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl AsRef<str> for NodeId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(s).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for NodeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Which run of a node: the start time in unix nanoseconds, so a restart
/// always carries a larger incarnation than the run before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Incarnation(pub u64);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub id: NodeId,
    pub incarnation: Incarnation,
    pub version: String,
    pub hostname: String,
}

/// Generates `as_str`, `Display` and `FromStr` for a fieldless enum from one
/// table of (variant, lowercase name), so the names used by meshctl, metrics
/// labels and JSON cannot drift apart.
macro_rules! named_enum {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(UnknownName { what: stringify!($ty), name: s.to_owned() }),
                }
            }
        }
    };
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?}")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
}

// After `named_enum!`, which it uses.
pub mod jobs;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeState {
    Up,
    Suspect,
    Down,
}
named_enum!(NodeState { Up => "up", Suspect => "suspect", Down => "down" });

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkState {
    Unknown,
    Up,
    Degraded,
    Flapping,
    Down,
}
named_enum!(LinkState {
    Unknown => "unknown",
    Up => "up",
    Degraded => "degraded",
    Flapping => "flapping",
    Down => "down",
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Info,
    Warning,
    Critical,
}
named_enum!(Severity { Info => "info", Warning => "warning", Critical => "critical" });

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Blame {
    None,
    Link,
    Node,
}
named_enum!(Blame { None => "none", Link => "link", Node => "node" });

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventKind {
    LinkDown,
    LinkDegraded,
    LinkFlapping,
    LinkRecovered,
    /// A link proved itself: unknown (never judged, or judged without
    /// quorum) to up. Not a recovery: nothing was wrong that anyone knew.
    LinkUp,
    /// A link's verdict was lost: quorum gone, or its ends no longer heard.
    LinkUnknown,
    NodeDown,
    NodeSuspect,
    NodeUp,
    QuorumLost,
    QuorumRegained,
    AlarmRaised,
    AlarmCleared,
    ConfigReloaded,
    ConfigRejected,
    NodeRestarted,
    NodeRebooted,
    /// The whole status: the first message of every event stream, again
    /// when a reader fell behind, and when the set of nodes or links
    /// changed (a config reload), so that folding never needs to guess.
    Snapshot,
}
named_enum!(EventKind {
    LinkDown => "link_down",
    LinkDegraded => "link_degraded",
    LinkFlapping => "link_flapping",
    LinkRecovered => "link_recovered",
    LinkUp => "link_up",
    LinkUnknown => "link_unknown",
    NodeDown => "node_down",
    NodeSuspect => "node_suspect",
    NodeUp => "node_up",
    QuorumLost => "quorum_lost",
    QuorumRegained => "quorum_regained",
    AlarmRaised => "alarm_raised",
    AlarmCleared => "alarm_cleared",
    ConfigReloaded => "config_reloaded",
    ConfigRejected => "config_rejected",
    NodeRestarted => "node_restarted",
    NodeRebooted => "node_rebooted",
    Snapshot => "snapshot",
});

impl EventKind {
    /// Whether the event is a change of a verdict (a link, a node, quorum,
    /// an alarm, a boot), which `meshd_events_total` counts; a config
    /// notice has its own metrics and a snapshot is the whole status again.
    pub fn is_verdict_change(self) -> bool {
        !matches!(
            self,
            EventKind::ConfigReloaded | EventKind::ConfigRejected | EventKind::Snapshot
        )
    }
}

/// What an alarm is about. The wire carries the name (`as_str`); a name
/// this build does not know is refused where the message is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AlarmKind {
    /// This node hears too few members to judge links and nodes.
    NoQuorum,
    /// A bridge with mesh ports as members: broadcast frames loop.
    BridgeLoop,
    /// Broadcast and multicast frames far above normal on a mesh port.
    BroadcastStorm,
    /// This node's CPU busy for long, with the processes behind it.
    CpuSpike,
    /// A job rank spinning while the mesh it runs on is broken.
    JobHung,
    /// The RDMA check fails: no usable RDMA device.
    RdmaDisabled,
    /// A cable negotiated less than it should.
    LinkSpeedLow,
    /// A node answers on its cables but not on the management network.
    ManagementUnreachable,
    /// The management network is split into groups that hear each other
    /// on it but not across, while the cables still join them all.
    ManagementSplit,
    /// This node's clock is off the mesh's by more than the bound.
    ClockSkew,
    /// Two live daemons claim one node id.
    DuplicateNodeId,
    /// Most of the mesh runs its timers late: verdicts are held.
    MeshSaturated,
    /// The kernel says memory is critically short.
    MemoryPressure,
    /// Far more memory wired than the live jobs account for, with no job
    /// running: only a reboot frees it.
    WiredMemoryLeak,
    /// A peer's host booted again (raised by every peer that saw both
    /// boots; the alarm's node is the one that rebooted).
    NodeRebooted,
    /// A peer's host booted again after a kernel panic (raised like
    /// `NodeRebooted`).
    KernelPanic,
    /// A job rank whose launcher is gone (re-parented to launchd/init).
    JobOrphaned,
    /// A job rank whose RDMA ports move no data although the mesh is up.
    JobStalled,
    /// A job's traffic to a peer node leaves by another interface than the
    /// cable to it (a route through Wi-Fi, Ethernet or a VPN).
    JobOffMesh,
    /// This node's TLS certificate ends within 30 days, or has ended.
    CertificateExpiring,
    /// A member's daemon is refused at the TLS handshake for a certificate
    /// reason (expired, unknown CA, wrong name or unknown id, revoked):
    /// raised by the member that refused it, about the node whose
    /// certificate it is.
    CertificateRefused,
    /// Members run different meshd releases (a rolling upgrade under way,
    /// or one left behind): a notice, never a page.
    VersionSkew,
}
named_enum!(AlarmKind {
    NoQuorum => "no_quorum",
    BridgeLoop => "bridge_loop",
    BroadcastStorm => "broadcast_storm",
    CpuSpike => "cpu_spike",
    JobHung => "job_hung",
    RdmaDisabled => "rdma_disabled",
    LinkSpeedLow => "link_speed_low",
    ManagementUnreachable => "management_unreachable",
    ManagementSplit => "management_split",
    ClockSkew => "clock_skew",
    DuplicateNodeId => "duplicate_node_id",
    MeshSaturated => "mesh_saturated",
    MemoryPressure => "memory_pressure",
    WiredMemoryLeak => "wired_memory_leak",
    NodeRebooted => "node_rebooted",
    KernelPanic => "kernel_panic",
    JobOrphaned => "job_orphaned",
    JobStalled => "job_stalled",
    JobOffMesh => "job_off_mesh",
    CertificateExpiring => "certificate_expiring",
    CertificateRefused => "certificate_refused",
    VersionSkew => "version_skew",
});

impl AlarmKind {
    /// About a host's boot: a reboot, a panic. Only a node that saw the
    /// host's run change can vouch for one.
    pub fn about_a_boot(self) -> bool {
        matches!(self, AlarmKind::NodeRebooted | AlarmKind::KernelPanic)
    }

    /// Raised by a node's peers about it, not by the node itself (a host
    /// cannot see its own reboot while it is down, a daemon whose
    /// certificate is refused cannot report at all): a report may carry
    /// these about another node.
    pub fn raised_by_peers(self) -> bool {
        matches!(
            self,
            AlarmKind::NodeRebooted | AlarmKind::KernelPanic | AlarmKind::CertificateRefused
        )
    }
}

/// One end of a link: the node and, where known, its interface, address and
/// RDMA device on the cable.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkEnd {
    pub node: NodeId,
    pub iface: Option<String>,
    pub address: Option<std::net::IpAddr>,
    pub rdma_device: Option<String>,
    pub rdma_port: Option<u32>,
}

impl LinkEnd {
    pub fn node_only(node: NodeId) -> Self {
        Self {
            node,
            iface: None,
            address: None,
            rdma_device: None,
            rdma_port: None,
        }
    }
}

impl fmt::Display for LinkEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.iface {
            Some(iface) => write!(f, "{}/{}", self.node, iface),
            None => write!(f, "{}", self.node),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alarm {
    pub kind: AlarmKind,
    pub severity: Severity,
    pub node: NodeId,
    pub subject: String,
    pub summary: String,
    pub evidence: Vec<String>,
    pub fix: Option<String>,
    pub since: SystemTime,
    pub updated: SystemTime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeVerdict {
    pub id: NodeId,
    pub state: NodeState,
    pub since: SystemTime,
    pub evidence: Vec<String>,
    pub identity: Option<NodeIdentity>,
    pub last_report_at: Option<SystemTime>,
    pub cpu_saturated: bool,
    /// Which boot of its host the node is in, from its latest facts;
    /// unknown parts stay `None`.
    pub boot: BootIdentity,
    /// What to do about a node that is not up, in one line.
    pub fix: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkVerdict {
    /// The end with the lower node id.
    pub a: LinkEnd,
    pub b: LinkEnd,
    pub state: LinkState,
    pub since: SystemTime,
    pub evidence: Vec<String>,
    pub blame: Blame,
    pub blamed_node: Option<NodeId>,
    pub recent_changes: u32,
    /// Enough outages within the flap window to call the link flapping:
    /// while such a link is down, its flapping holds too.
    pub flapping: bool,
    /// What to do about a link that is not up, in one line.
    pub fix: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Quorum {
    pub configured: Vec<NodeId>,
    pub members: Vec<NodeId>,
    pub has_quorum: bool,
    pub leader: Option<NodeId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshStatus {
    pub node: NodeIdentity,
    pub evaluated_at: SystemTime,
    pub quorum: Quorum,
    pub nodes: Vec<NodeVerdict>,
    pub links: Vec<LinkVerdict>,
    pub alarms: Vec<Alarm>,
    /// The cable map.
    pub cables: Vec<Cable>,
    /// The platform checks of every node heard, then the mesh-wide ones.
    pub checks: Vec<CheckResult>,
    /// Each end's latest figures for its links: this node's own, then its
    /// peers'. Gathered when the status is read from outside the daemon
    /// (`GetStatus`, the mesh page); the daemon's own status updates leave
    /// it empty.
    pub measurements: Vec<LinkMeasurement>,
    /// The distributed jobs whose ranks the mesh's nodes run.
    pub jobs: Vec<JobView>,
}

impl MeshStatus {
    /// Healthy means: quorum, every node up, every link up, and no warning or
    /// critical alarm. Anything else is worth a non-zero exit in scripts.
    pub fn is_healthy(&self) -> bool {
        self.quorum.has_quorum
            && self.nodes.iter().all(|n| n.state == NodeState::Up)
            && self.links.iter().all(|l| l.state == LinkState::Up)
            && self.alarms.iter().all(|a| a.severity == Severity::Info)
    }

    /// What keeps the status from being healthy, counted, worst first:
    /// "no quorum", "1 node down", "3 links down with node d", "2 links
    /// degraded", "1 alarm". Empty when it is healthy. The links a down node
    /// takes with it are counted apart from the cable faults, so that one
    /// dead node never reads as four broken cables.
    pub fn troubles(&self) -> Vec<String> {
        let counted = |n: usize, what: &str, state: &dyn fmt::Display| {
            format!("{n} {what}{} {state}", plural(n))
        };
        let mut troubles = Vec::new();
        if !self.quorum.has_quorum {
            troubles.push("no quorum".to_owned());
        }
        for state in [NodeState::Down, NodeState::Suspect] {
            let n = self.nodes.iter().filter(|v| v.state == state).count();
            if n > 0 {
                troubles.push(counted(n, "node", &state));
            }
        }
        let with_nodes: Vec<&LinkVerdict> =
            self.links.iter().filter(|l| l.down_with_node()).collect();
        if !with_nodes.is_empty() {
            troubles.push(format!(
                "{} link{} down {}",
                with_nodes.len(),
                plural(with_nodes.len()),
                with_their_nodes(&with_nodes)
            ));
        }
        for state in [
            LinkState::Down,
            LinkState::Flapping,
            LinkState::Degraded,
            LinkState::Unknown,
        ] {
            let n = self
                .links
                .iter()
                .filter(|l| l.state == state && !l.down_with_node())
                .count();
            if n > 0 {
                troubles.push(counted(n, "link", &state));
            }
        }
        let alarms = self
            .alarms
            .iter()
            .filter(|a| a.severity != Severity::Info)
            .count();
        if alarms > 0 {
            troubles.push(format!("{alarms} alarm{}", plural(alarms)));
        }
        troubles
    }
}

impl LinkVerdict {
    /// Down because a node at one end is, not the cable: such a link is
    /// counted with its node, never as a cable fault.
    pub fn down_with_node(&self) -> bool {
        self.state == LinkState::Down && self.blame == Blame::Node
    }
}

/// Names the nodes `links` (each [`LinkVerdict::down_with_node`]) went
/// down with: "with node d", "with nodes c, d", or "with 4 nodes" when
/// naming them all would make a long line; "with their node" when no
/// verdict names one. One wording for every count of them (`meshctl
/// status`, the mesh page).
pub fn with_their_nodes(links: &[&LinkVerdict]) -> String {
    /// More names than this are counted instead.
    const NAMED: usize = 3;
    let named: std::collections::BTreeSet<&str> = links
        .iter()
        .filter_map(|l| l.blamed_node.as_ref().map(NodeId::as_str))
        .collect();
    let names: Vec<&str> = named.into_iter().collect();
    match names.len() {
        0 => "with their node".to_owned(),
        1 => format!("with node {}", names[0]),
        n if n <= NAMED => format!("with nodes {}", names.join(", ")),
        n => format!("with {n} nodes"),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// What an event is about, when it is about one verdict, quorum or alarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventDetail {
    Link(LinkVerdict),
    Node(NodeVerdict),
    Quorum(Quorum),
    Alarm(Alarm),
    /// The whole status the node held at the event.
    Snapshot(Box<MeshStatus>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub at: SystemTime,
    pub observer: NodeId,
    pub kind: EventKind,
    pub subject: String,
    pub summary: String,
    pub detail: Option<EventDetail>,
}

#[cfg(test)]
mod tests {

    #[test]
    fn protocols_that_do_not_overlap_name_the_side_to_upgrade() {
        let ours = Protocols {
            spoken: 3,
            oldest: 2,
        };
        let at = |spoken, oldest| Protocols { spoken, oldest };
        assert_eq!(ours.mismatch(at(2, 1)), None, "the release before");
        assert_eq!(ours.mismatch(at(4, 3)), None, "the release after");
        assert_eq!(
            ours.mismatch(at(1, 0)).as_deref(),
            Some("it speaks peer protocol 1, and this node understands 2 or newer: upgrade it")
        );
        assert_eq!(
            ours.mismatch(at(5, 4)).as_deref(),
            Some(
                "it understands peer protocol 4 or newer, and this node speaks 3: upgrade this \
                 node"
            )
        );
        assert_eq!(Protocols::THIS_RELEASE.mismatch(at(0, 0)), None);
    }
    use super::*;

    /// d dead with its three links, a–b cut, b–c degraded.
    fn dead_node_and_a_cut_cable() -> MeshStatus {
        use crate::fixtures::{empty_status, id, link_verdict, node_verdict, wall};
        let mut status = empty_status("a", wall(100));
        status.quorum.has_quorum = true;
        for (name, state) in [("a", NodeState::Up), ("d", NodeState::Down)] {
            status.nodes.push(node_verdict(id(name), state, wall(10)));
        }
        for x in ["a", "b", "c"] {
            let mut link = link_verdict(
                LinkEnd::node_only(id(x)),
                LinkEnd::node_only(id("d")),
                LinkState::Down,
            );
            link.blame = Blame::Node;
            link.blamed_node = Some(id("d"));
            status.links.push(link);
        }
        let mut cut = link_verdict(
            LinkEnd::node_only(id("a")),
            LinkEnd::node_only(id("b")),
            LinkState::Down,
        );
        cut.blame = Blame::Link;
        status.links.push(cut);
        status.links.push(link_verdict(
            LinkEnd::node_only(id("b")),
            LinkEnd::node_only(id("c")),
            LinkState::Degraded,
        ));
        status
    }

    #[test]
    fn a_dead_nodes_links_are_counted_with_it_not_as_cable_faults() {
        let status = dead_node_and_a_cut_cable();
        assert_eq!(
            status.troubles(),
            [
                "1 node down",
                "3 links down with node d",
                "1 link down",
                "1 link degraded"
            ]
        );
        let with_d: Vec<&LinkVerdict> =
            status.links.iter().filter(|l| l.down_with_node()).collect();
        assert_eq!(with_d.len(), 3);
    }

    #[test]
    fn the_nodes_links_went_down_with_are_named_while_few() {
        use crate::fixtures::id;
        let mut status = dead_node_and_a_cut_cable();
        let links = |status: &MeshStatus| -> Vec<LinkVerdict> {
            status
                .links
                .iter()
                .filter(|l| l.down_with_node())
                .cloned()
                .collect()
        };
        let phrase = |links: &[LinkVerdict]| with_their_nodes(&links.iter().collect::<Vec<_>>());
        status.links[0].blamed_node = Some(id("c"));
        assert_eq!(phrase(&links(&status)), "with nodes c, d");
        for (link, name) in status.links.iter_mut().zip(["e", "f", "g", "h"]) {
            link.blame = Blame::Node;
            link.state = LinkState::Down;
            link.blamed_node = Some(id(name));
        }
        assert_eq!(phrase(&links(&status)), "with 4 nodes");
        for link in &mut status.links {
            link.blamed_node = None;
        }
        assert_eq!(phrase(&links(&status)), "with their node");
        assert_eq!(status.troubles()[1], "4 links down with their node");
    }

    #[test]
    fn node_ids_are_checked() {
        assert!(NodeId::new("studio-1.lab_a").is_ok());
        assert_eq!(NodeId::new(""), Err(NodeIdError::Empty));
        assert!(matches!(
            NodeId::new("a b"),
            Err(NodeIdError::BadCharacter { bad: ' ', .. })
        ));
        assert!(matches!(
            NodeId::new("x".repeat(64)),
            Err(NodeIdError::TooLong(_))
        ));
    }

    #[test]
    fn node_id_from_hostname_takes_first_label_and_sanitises() {
        assert_eq!(NodeId::from_hostname("studio-1.local").as_str(), "studio-1");
        assert_eq!(NodeId::from_hostname("Jane's Mac").as_str(), "Jane-s-Mac");
        assert_eq!(NodeId::from_hostname("").as_str(), "localhost");
        assert_eq!(NodeId::from_hostname(&"h".repeat(80)).as_str().len(), 63);
    }

    #[test]
    fn enum_names_round_trip() {
        for s in LinkState::ALL {
            assert_eq!(s.as_str().parse::<LinkState>(), Ok(*s));
        }
        for s in EventKind::ALL {
            assert_eq!(s.as_str().parse::<EventKind>(), Ok(*s));
        }
        assert!("sideways".parse::<NodeState>().is_err());
    }
}

/// State of the IP interface on a link's cable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InterfaceState {
    Up,
    Down,
    Absent,
    Unknown,
}
named_enum!(InterfaceState { Up => "up", Down => "down", Absent => "absent", Unknown => "unknown" });

/// RDMA port state as the verbs API reports it; `None` when no RDMA device
/// is paired with the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmaPortState {
    None,
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
}
named_enum!(RdmaPortState {
    None => "none",
    Down => "down",
    Init => "init",
    Armed => "armed",
    Active => "active",
    ActiveDefer => "active_defer",
});

/// Round-trip times of the small probes (wire time: the responder's own
/// delay is taken out and reported as `host_delay_p50`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RttSummary {
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub host_delay_p50: Duration,
    /// The link's own long-window baseline; zero until there is one.
    pub baseline_p50: Duration,
    pub baseline_p99: Duration,
    pub samples: u64,
}

/// `counts[i]` samples fell in (`bounds[i-1]`, `bounds[i]`]; the last count
/// is for everything above the last bound.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RttHistogram {
    pub bounds: Vec<Duration>,
    pub counts: Vec<u64>,
    /// The sum of every counted RTT.
    pub sum: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossWindow {
    pub window: Duration,
    pub sent: u64,
    pub lost: u64,
}

impl LossWindow {
    /// Lost share of the probes whose fate is known, 0–1; 0 with no probes.
    pub fn ratio(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            #[allow(clippy::cast_precision_loss)]
            let ratio = self.lost as f64 / self.sent as f64;
            ratio.min(1.0)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub name: String,
    pub value: u64,
    pub saturated: bool,
}

/// The figures of one end of a link that readers are shown and the link
/// verdicts rest on: its port as the platform knows it, and what its
/// probes measured lately.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkFigures {
    pub interface_state: InterfaceState,
    pub negotiated_speed_bps: Option<u64>,
    pub expected_speed_bps: Option<u64>,
    pub rdma_port_state: RdmaPortState,
    pub rtt: RttSummary,
    /// Small-probe loss over the sliding windows, shortest first.
    pub loss: Vec<LossWindow>,
    /// Time since the last reply, as measured when the figures were taken.
    pub silence: Duration,
}

/// What one end measured on one link: its figures, and what else the
/// verdicts and the metrics read of it.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkObservation {
    pub local: LinkEnd,
    pub remote: LinkEnd,
    pub figures: LinkFigures,
    pub gid_matches_address: Option<bool>,
    pub rtt_histogram: RttHistogram,
    pub mtu_loss: Vec<LossWindow>,
    pub probes_sent_total: u64,
    pub probes_lost_total: u64,
    pub last_reply_at: Option<SystemTime>,
    pub error_counters: Vec<Counter>,
    pub consecutive_lost: u32,
    /// A burst of probes sent into the present silence went unanswered:
    /// it is no lost probe or two, and counts sooner (`LinkRules`).
    pub silence_confirmed: bool,
    /// How late the observer's own timers ran while it gathered this (the
    /// worst in the last two seconds): evidence gathered late is suspect.
    pub lateness: Duration,
    /// The opt-in active RDMA probe over this cable; `None` when it is off,
    /// paused, or has not reached the peer's queue pair yet.
    pub rdma_probe: Option<RdmaProbe>,
    /// This end's queue pair of the RDMA probe, for the peer to connect to;
    /// `None` while the probe is off, paused, or cannot open the device.
    pub rdma_endpoint: Option<RdmaEndpoint>,
    /// Whether this end's port has a carrier, from the kernel's link-state
    /// events as they happen (a pulled cable loses it at both ends at
    /// once); `None` where they cannot be read. Unlike the polled
    /// `figures.interface_state` it is never stale.
    pub carrier: Option<bool>,
}

/// One end's queue pair of the RDMA probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaEndpoint {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// First packet sequence number this end sends with (24 bits).
    pub psn: u32,
    /// The GID this end sends from: the IPv4-mapped address of its end.
    pub gid: std::net::Ipv6Addr,
    /// The peer's queue pair this one is connected to, once it is.
    pub connected_qpn: Option<u32>,
}

/// What the active RDMA probe of one link measured: one queue pair
/// exchanging a small message with the peer's about once a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaProbe {
    /// Round trip of the last answered probe.
    pub last_rtt: Option<Duration>,
    /// Probes unanswered, or that could not be sent, in a row up to now.
    pub consecutive_failures: u32,
    pub last_ok_at: Option<SystemTime>,
    pub probes_sent_total: u64,
    pub probes_failed_total: u64,
}

impl LinkObservation {
    /// The loss window of exactly `window`, if measured.
    pub fn loss_over(&self, window: Duration) -> Option<&LossWindow> {
        self.figures.loss.iter().find(|w| w.window == window)
    }
}

/// What one end last measured on one of its links: the figures behind the
/// link verdicts, without the observation's histogram and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkMeasurement {
    /// The measuring end.
    pub node: NodeId,
    pub peer: NodeId,
    /// When the answering node got these figures, on its own clock.
    pub at: SystemTime,
    pub figures: LinkFigures,
}

impl LinkMeasurement {
    /// The figures of `observation`, which this node got at `at`.
    pub fn of(observation: &LinkObservation, at: SystemTime) -> Self {
        Self {
            node: observation.local.node.clone(),
            peer: observation.remote.node.clone(),
            at,
            figures: observation.figures.clone(),
        }
    }
}

/// How late a node's timers run. The worst alone cannot tell one 700-ms
/// stall every 1.5 s from every tick 700 ms late; how much of the time they
/// were held up can: a peer's probe waits past its timeout only while the
/// node is held up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lateness {
    /// The latest any timer fired in the last two seconds.
    pub worst: Duration,
    /// The time the timers were held up since the process started (from
    /// when each late firing was due until it fired): a counter, so that
    /// two messages tell exactly how long it was held up between them,
    /// however often either was sent.
    pub held_up_total: Duration,
}

/// Load of the reporting node: a saturated node's own timeouts weigh less.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NodeLoad {
    pub cpu_busy_ratio: f64,
    pub cpu_saturated: bool,
}

/// All a node holds of one peer's report: the last full report with every
/// update since applied to it.
///
/// The lists are shared slices: a report is copied on write while the last
/// look's readers still hold it (once per peer per look), and most updates
/// (heartbeats) change none of them, so a copy shares them instead of
/// cloning every observation.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerReport {
    pub sender: NodeIdentity,
    /// The last update applied.
    pub sequence: u64,
    /// When the sender sent it, on the sender's wall clock: for display and
    /// clock offsets only.
    pub sent_at: SystemTime,
    pub links: Arc<[LinkObservation]>,
    pub alarms: Arc<[Alarm]>,
    /// Members the sender has evidence of life for.
    pub hears: Arc<[NodeId]>,
    /// Members whose management path the sender hears.
    pub heard_on_management: Arc<[NodeId]>,
    pub load: NodeLoad,
    /// How late the sender's timers ran when it sent its last update.
    pub lateness: Lateness,
    pub has_quorum: bool,
    /// The member the sender follows as its alert leader.
    pub leader: Option<NodeId>,
    /// The sender's clock against its peers'.
    pub clock_offsets: Arc<[ClockOffset]>,
    /// The job ranks the sender runs.
    pub jobs: Arc<[JobRank]>,
}

impl PeerReport {
    /// What a peer's report is before its first update arrived.
    pub fn empty(sender: NodeIdentity) -> Self {
        Self {
            sender,
            sequence: 0,
            sent_at: SystemTime::UNIX_EPOCH,
            links: Arc::new([]),
            alarms: Arc::new([]),
            hears: Arc::new([]),
            heard_on_management: Arc::new([]),
            load: NodeLoad::default(),
            lateness: Lateness::default(),
            has_quorum: false,
            leader: None,
            clock_offsets: Arc::new([]),
            jobs: Arc::new([]),
        }
    }
}

/// `peer`'s clock minus the measuring node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockOffset {
    pub peer: NodeId,
    pub offset_ns: i64,
    /// The round trip of the sample it was taken from: its uncertainty.
    pub rtt: Duration,
}

/// The first message of a stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamOpen {
    pub sender: NodeIdentity,
    /// Random per process start.
    pub instance: u64,
    /// The bucket bounds of every RTT histogram on the stream.
    pub rtt_bounds: Vec<Duration>,
    /// The peer protocols the sender speaks and understands.
    pub protocols: Protocols,
}

/// Which versions of the peer protocol (the report stream) a release
/// speaks and understands. The rule: every release understands the
/// protocol of the release before it, both ways, so a mesh is upgraded
/// one node at a time with no node refusing another. A change a release
/// before cannot ignore (protobuf ignores unknown fields; a receiver skips
/// message kinds and alarm kinds it does not know) takes a new `spoken`,
/// and `oldest` moves up only a release after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocols {
    /// The version this release speaks.
    pub spoken: u32,
    /// The oldest version it understands; 0 is the releases from before
    /// streams said (they send no version).
    pub oldest: u32,
}

impl Protocols {
    /// This release's.
    pub const THIS_RELEASE: Protocols = Protocols {
        spoken: 1,
        oldest: 0,
    };

    /// Whether `theirs` is too old for this side: it must be upgraded.
    pub fn is_ahead_of(self, theirs: Protocols) -> bool {
        theirs.spoken < self.oldest
    }

    /// Why a release with these protocols and one with `theirs` cannot
    /// talk, in words naming which must be upgraded; `None` when they can.
    pub fn mismatch(self, theirs: Protocols) -> Option<String> {
        if self.is_ahead_of(theirs) {
            Some(format!(
                "it speaks peer protocol {}, and this node understands {} or newer: upgrade it",
                theirs.spoken, self.oldest
            ))
        } else if theirs.oldest > self.spoken {
            Some(format!(
                "it understands peer protocol {} or newer, and this node speaks {}: upgrade this \
                 node",
                theirs.oldest, self.spoken
            ))
        } else {
            None
        }
    }
}

/// One update of a report: everything (`full`), or what changed.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportUpdate {
    pub sequence: u64,
    pub sent_at: SystemTime,
    pub lateness: Lateness,
    pub full: bool,
    pub links: Vec<LinkObservation>,
    /// Links gone, by their far end.
    pub removed_links: Vec<LinkEnd>,
    pub alarms: Option<Vec<Alarm>>,
    pub hears: Option<Vec<NodeId>>,
    pub heard_on_management: Option<Vec<NodeId>>,
    pub load: NodeLoad,
    pub facts: Option<NodeFacts>,
    pub has_quorum: Option<bool>,
    /// When changed: the member the sender follows as its alert leader
    /// (`Some(None)`: none).
    pub leader: Option<Option<NodeId>>,
    pub clock_offsets: Option<Vec<ClockOffset>>,
    /// When changed: every job rank the sender runs.
    pub jobs: Option<Vec<JobRank>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PeerMessage {
    Open(StreamOpen),
    Update(Box<ReportUpdate>),
}

/// The wall-clock times of one update's round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    pub echoed: SystemTime,
    pub received: SystemTime,
    pub replied: SystemTime,
}

/// Why a receiver refused a stream or an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RejectReason,
    pub detail: String,
    /// With `OldIncarnation`: the incarnation to exceed.
    pub known_incarnation: Option<Incarnation>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerReply {
    pub receiver: NodeIdentity,
    /// The update answered; 0 answers the open.
    pub sequence: u64,
    pub refusal: Option<Refusal>,
    pub clock: Option<ClockSample>,
    pub resync: bool,
}

impl ReportUpdate {
    /// The first alarm that is not about `sender`, with its index: a node
    /// reports only its own alarms, except those its peers raise about it
    /// ([`AlarmKind::raised_by_peers`]), so any other naming another node is
    /// forged (or a bug), and the update is refused
    /// ([`RejectReason::ForeignAlarm`]).
    pub fn foreign_alarm(&self, sender: &NodeId) -> Option<(usize, &Alarm)> {
        self.alarms
            .iter()
            .flatten()
            .enumerate()
            .find(|(_, alarm)| alarm.node != *sender && !alarm.kind.raised_by_peers())
    }

    /// Whether this carries any change beyond what every update carries
    /// (sequence, send time, load, lateness): a heartbeat does not.
    pub fn carries_changes(&self) -> bool {
        !self.links.is_empty() || self.carries_changes_besides_links()
    }

    /// Whether this carries any change other than link observations.
    pub fn carries_changes_besides_links(&self) -> bool {
        !self.removed_links.is_empty()
            || self.alarms.is_some()
            || self.hears.is_some()
            || self.heard_on_management.is_some()
            || self.has_quorum.is_some()
            || self.leader.is_some()
            || self.clock_offsets.is_some()
            || self.facts.is_some()
            || self.jobs.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    UnknownNode,
    Replayed,
    OldIncarnation,
    Malformed,
    NotAuthenticated,
    OverLimit,
    IncarnationAhead,
    ForeignAlarm,
    /// The sender's peer protocol and this node's do not overlap.
    Protocol,
}
named_enum!(RejectReason {
    UnknownNode => "unknown_node",
    Replayed => "replayed",
    OldIncarnation => "old_incarnation",
    Malformed => "malformed",
    NotAuthenticated => "not_authenticated",
    OverLimit => "over_limit",
    IncarnationAhead => "incarnation_ahead",
    ForeignAlarm => "foreign_alarm",
    Protocol => "protocol",
});
