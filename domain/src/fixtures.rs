//! The vocabulary tests are written in: node ids, identities, link ends and
//! wall-clock times, shared by the tests of every crate built on the domain
//! (through the `fixtures` feature) instead of a copy in each.

use std::time::{Duration, SystemTime};

use crate::{
    Blame, Incarnation, LinkEnd, LinkState, LinkVerdict, MeshStatus, NodeId, NodeIdentity,
    NodeState, NodeVerdict,
};

/// Seconds from the Unix epoch to the instant [`wall`] counts from,
/// 2027-01-15T08:00:00Z: a round date, so that tests can check the times
/// they render by eye.
const WALL_ORIGIN_UNIX_SECS: u64 = 1_800_000_000;

/// The node id `name`, which the test knows to be valid.
pub fn id(name: &str) -> NodeId {
    NodeId::new(name).expect("a valid node id")
}

/// Node `i` of a cluster whose nodes are numbered, counting from zero:
/// "n1", "n2", …
pub fn numbered_id(i: usize) -> NodeId {
    id(&format!("n{}", i + 1))
}

/// Node `name` in its run `incarnation`, on a host of the same name.
pub fn identity(name: &str, incarnation: u64) -> NodeIdentity {
    NodeIdentity {
        id: id(name),
        incarnation: Incarnation(incarnation),
        version: "test".into(),
        hostname: name.into(),
    }
}

/// `node`'s end of a cable on interface `iface`, nothing else known.
pub fn end(node: &str, iface: &str) -> LinkEnd {
    LinkEnd {
        iface: Some(iface.to_owned()),
        ..LinkEnd::node_only(id(node))
    }
}

/// The status `name` (incarnation 1) holds at `evaluated_at` of a mesh
/// it knows nothing of yet: tests fill in what they are about.
pub fn empty_status(name: &str, evaluated_at: SystemTime) -> MeshStatus {
    MeshStatus {
        node: identity(name, 1),
        evaluated_at,
        quorum: Default::default(),
        nodes: Vec::new(),
        links: Vec::new(),
        alarms: Vec::new(),
        cables: Vec::new(),
        checks: Vec::new(),
        measurements: Vec::new(),
        jobs: Vec::new(),
    }
}

/// The mesh's verdict `state` on `node` since `since`, nothing else known.
pub fn node_verdict(node: NodeId, state: NodeState, since: SystemTime) -> NodeVerdict {
    NodeVerdict {
        id: node,
        state,
        since,
        evidence: Vec::new(),
        identity: None,
        last_report_at: None,
        cpu_saturated: false,
        boot: Default::default(),
        fix: None,
    }
}

/// The mesh's verdict `state` on the link between `a` and `b`, since the
/// epoch, with no evidence or blame; a link that is not up has a fix.
pub fn link_verdict(a: LinkEnd, b: LinkEnd, state: LinkState) -> LinkVerdict {
    LinkVerdict {
        a,
        b,
        state,
        since: SystemTime::UNIX_EPOCH,
        evidence: Vec::new(),
        blame: Blame::None,
        blamed_node: None,
        recent_changes: 0,
        flapping: false,
        fix: (state != LinkState::Up).then(|| "reseat the cable".to_owned()),
    }
}

/// The wall-clock time `secs` seconds after 2027-01-15T08:00:00Z.
pub fn wall(secs: u64) -> SystemTime {
    wall_ms(secs * 1_000)
}

/// The wall-clock time `ms` milliseconds after 2027-01-15T08:00:00Z.
pub fn wall_ms(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(WALL_ORIGIN_UNIX_SECS) + Duration::from_millis(ms)
}
