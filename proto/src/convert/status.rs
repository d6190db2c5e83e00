//! The mesh's status: node identities and link ends, alarms with their
//! evidence, node and link verdicts, the quorum, the whole mesh status, and
//! events.

use std::net::IpAddr;

use super::facts::{boot_identity, boot_wire};
use super::{
    Result, WireError, at_most, blame, blame_wire, each, event_kind, event_kind_wire, link_state,
    link_state_wire, node_id, node_ids, node_state, node_state_wire, non_empty, optional_node_id,
    optional_time, required, severity, severity_wire, text_at_most, time, timestamp,
};
use crate::{limits, wire};
use meshd_domain::facts::{Cable, CheckResult};
use meshd_domain::jobs::JobView;
use meshd_domain::{
    Alarm, Event, EventDetail, Incarnation, LinkEnd, LinkMeasurement, LinkVerdict, MeshStatus,
    NodeIdentity, NodeVerdict, Quorum, UnknownName,
};

impl From<NodeIdentity> for wire::NodeIdentity {
    fn from(n: NodeIdentity) -> Self {
        Self {
            id: n.id.to_string(),
            incarnation: n.incarnation.0,
            version: n.version,
            hostname: n.hostname,
        }
    }
}

impl TryFrom<wire::NodeIdentity> for NodeIdentity {
    type Error = WireError;
    fn try_from(n: wire::NodeIdentity) -> Result<Self> {
        if n.incarnation == 0 {
            return Err(WireError::new("incarnation", "missing"));
        }
        Ok(Self {
            id: node_id("id", n.id)?,
            incarnation: Incarnation(n.incarnation),
            version: n.version,
            hostname: n.hostname,
        })
    }
}

impl From<LinkEnd> for wire::LinkEnd {
    fn from(e: LinkEnd) -> Self {
        Self {
            node: e.node.to_string(),
            iface: e.iface.unwrap_or_default(),
            address: e.address.map(|a| a.to_string()).unwrap_or_default(),
            rdma_device: e.rdma_device.unwrap_or_default(),
            rdma_port: e.rdma_port.unwrap_or_default(),
        }
    }
}

impl TryFrom<wire::LinkEnd> for LinkEnd {
    type Error = WireError;
    fn try_from(e: wire::LinkEnd) -> Result<Self> {
        let address = match e.address.as_str() {
            "" => None,
            text => Some(text.parse::<IpAddr>().map_err(|_| {
                WireError::new("address", format!("{text:?} is not an IP address"))
            })?),
        };
        Ok(Self {
            node: node_id("node", e.node)?,
            iface: non_empty(e.iface),
            address,
            rdma_device: non_empty(e.rdma_device),
            rdma_port: (e.rdma_port != 0).then_some(e.rdma_port),
        })
    }
}

impl From<Alarm> for wire::Alarm {
    /// Texts and evidence clipped to the caps of [`limits`].
    fn from(a: Alarm) -> Self {
        Self {
            kind: a.kind.as_str().to_owned(),
            severity: severity_wire(a.severity),
            node: a.node.to_string(),
            subject: limits::clip(a.subject, limits::MAX_SUBJECT_BYTES),
            summary: limits::clip(a.summary, limits::MAX_SUMMARY_BYTES),
            evidence: limits::clip_evidence(a.evidence),
            fix: limits::clip(a.fix.unwrap_or_default(), limits::MAX_FIX_BYTES),
            since: timestamp(a.since),
            updated: timestamp(a.updated),
        }
    }
}

impl TryFrom<wire::Alarm> for Alarm {
    type Error = WireError;
    fn try_from(a: wire::Alarm) -> Result<Self> {
        Ok(Self {
            kind: a
                .kind
                .parse()
                .map_err(|e: UnknownName| WireError::new("kind", e.to_string()))?,
            severity: severity("severity", a.severity)?,
            node: node_id("node", a.node)?,
            subject: text_at_most("subject", a.subject, limits::MAX_SUBJECT_BYTES)?,
            summary: text_at_most("summary", a.summary, limits::MAX_SUMMARY_BYTES)?,
            evidence: evidence(a.evidence)?,
            fix: non_empty(text_at_most("fix", a.fix, limits::MAX_FIX_BYTES)?),
            since: time("since", a.since)?,
            updated: time("updated", a.updated)?,
        })
    }
}

pub(super) fn evidence(lines: Vec<String>) -> Result<Vec<String>> {
    at_most("evidence", &lines, limits::MAX_EVIDENCE_LINES)?;
    lines
        .into_iter()
        .enumerate()
        .map(|(i, line)| {
            text_at_most(
                &format!("evidence[{i}]"),
                line,
                limits::MAX_EVIDENCE_LINE_BYTES,
            )
        })
        .collect()
}

impl From<NodeVerdict> for wire::NodeVerdict {
    fn from(n: NodeVerdict) -> Self {
        Self {
            id: n.id.to_string(),
            state: node_state_wire(n.state),
            since: timestamp(n.since),
            evidence: n.evidence,
            identity: n.identity.map(Into::into),
            last_report_at: n.last_report_at.map(Into::into),
            cpu_saturated: n.cpu_saturated,
            boot: boot_wire(n.boot),
            fix: n.fix.unwrap_or_default(),
        }
    }
}

impl TryFrom<wire::NodeVerdict> for NodeVerdict {
    type Error = WireError;
    fn try_from(n: wire::NodeVerdict) -> Result<Self> {
        Ok(Self {
            id: node_id("id", n.id)?,
            state: node_state("state", n.state)?,
            since: time("since", n.since)?,
            evidence: n.evidence,
            identity: n
                .identity
                .map(NodeIdentity::try_from)
                .transpose()
                .map_err(|e| e.within("identity"))?,
            last_report_at: optional_time("last_report_at", n.last_report_at)?,
            cpu_saturated: n.cpu_saturated,
            boot: boot_identity(n.boot).map_err(|e| e.within("boot"))?,
            fix: non_empty(n.fix),
        })
    }
}

impl From<LinkVerdict> for wire::LinkVerdict {
    fn from(l: LinkVerdict) -> Self {
        Self {
            a: Some(l.a.into()),
            b: Some(l.b.into()),
            state: link_state_wire(l.state),
            since: timestamp(l.since),
            evidence: l.evidence,
            blame: blame_wire(l.blame),
            blamed_node: l.blamed_node.map(|n| n.to_string()).unwrap_or_default(),
            recent_changes: l.recent_changes,
            flapping: l.flapping,
            fix: l.fix.unwrap_or_default(),
        }
    }
}

impl TryFrom<wire::LinkVerdict> for LinkVerdict {
    type Error = WireError;
    fn try_from(l: wire::LinkVerdict) -> Result<Self> {
        let a = LinkEnd::try_from(required("a", l.a)?).map_err(|e| e.within("a"))?;
        let b = LinkEnd::try_from(required("b", l.b)?).map_err(|e| e.within("b"))?;
        Ok(Self {
            a,
            b,
            state: link_state("state", l.state)?,
            since: time("since", l.since)?,
            evidence: l.evidence,
            blame: blame("blame", l.blame)?,
            blamed_node: optional_node_id("blamed_node", l.blamed_node)?,
            recent_changes: l.recent_changes,
            flapping: l.flapping,
            fix: non_empty(l.fix),
        })
    }
}

impl From<Quorum> for wire::Quorum {
    fn from(q: Quorum) -> Self {
        Self {
            configured: q.configured.iter().map(ToString::to_string).collect(),
            members: q.members.iter().map(ToString::to_string).collect(),
            has_quorum: q.has_quorum,
            leader: q.leader.map(|l| l.to_string()).unwrap_or_default(),
        }
    }
}

impl TryFrom<wire::Quorum> for Quorum {
    type Error = WireError;
    fn try_from(q: wire::Quorum) -> Result<Self> {
        Ok(Self {
            configured: node_ids("configured", q.configured)?,
            members: node_ids("members", q.members)?,
            has_quorum: q.has_quorum,
            leader: optional_node_id("leader", q.leader)?,
        })
    }
}

impl From<MeshStatus> for wire::MeshStatus {
    fn from(s: MeshStatus) -> Self {
        Self {
            node: Some(s.node.into()),
            evaluated_at: timestamp(s.evaluated_at),
            quorum: Some(s.quorum.into()),
            nodes: s.nodes.into_iter().map(Into::into).collect(),
            links: s.links.into_iter().map(Into::into).collect(),
            alarms: s.alarms.into_iter().map(Into::into).collect(),
            cables: s.cables.into_iter().map(Into::into).collect(),
            checks: s.checks.into_iter().map(Into::into).collect(),
            measurements: s.measurements.into_iter().map(Into::into).collect(),
            jobs: s.jobs.into_iter().map(Into::into).collect(),
        }
    }
}

impl TryFrom<wire::MeshStatus> for MeshStatus {
    type Error = WireError;
    fn try_from(s: wire::MeshStatus) -> Result<Self> {
        Ok(Self {
            node: NodeIdentity::try_from(required("node", s.node)?)
                .map_err(|e| e.within("node"))?,
            evaluated_at: time("evaluated_at", s.evaluated_at)?,
            quorum: Quorum::try_from(required("quorum", s.quorum)?)
                .map_err(|e| e.within("quorum"))?,
            nodes: each("nodes", s.nodes, NodeVerdict::try_from)?,
            links: each("links", s.links, LinkVerdict::try_from)?,
            alarms: each("alarms", s.alarms, Alarm::try_from)?,
            cables: each("cables", s.cables, Cable::try_from)?,
            checks: each("checks", s.checks, CheckResult::try_from)?,
            measurements: each("measurements", s.measurements, LinkMeasurement::try_from)?,
            jobs: each("jobs", s.jobs, JobView::try_from)?,
        })
    }
}

impl From<Event> for wire::Event {
    fn from(e: Event) -> Self {
        use wire::event::Detail;
        Self {
            at: timestamp(e.at),
            observer: e.observer.to_string(),
            kind: event_kind_wire(e.kind),
            subject: e.subject,
            summary: e.summary,
            sequence: 0,
            detail: e.detail.map(|d| match d {
                EventDetail::Link(l) => Detail::Link(l.into()),
                EventDetail::Node(n) => Detail::Node(n.into()),
                EventDetail::Quorum(q) => Detail::Quorum(q.into()),
                EventDetail::Alarm(a) => Detail::Alarm(a.into()),
                EventDetail::Snapshot(s) => Detail::Snapshot((*s).into()),
            }),
        }
    }
}

impl TryFrom<wire::Event> for Event {
    type Error = WireError;
    fn try_from(e: wire::Event) -> Result<Self> {
        use wire::event::Detail;
        let detail = match e.detail {
            None => None,
            Some(Detail::Link(l)) => Some(EventDetail::Link(
                LinkVerdict::try_from(l).map_err(|e| e.within("link"))?,
            )),
            Some(Detail::Node(n)) => Some(EventDetail::Node(
                NodeVerdict::try_from(n).map_err(|e| e.within("node"))?,
            )),
            Some(Detail::Quorum(q)) => Some(EventDetail::Quorum(
                Quorum::try_from(q).map_err(|e| e.within("quorum"))?,
            )),
            Some(Detail::Alarm(a)) => Some(EventDetail::Alarm(
                Alarm::try_from(a).map_err(|e| e.within("alarm"))?,
            )),
            Some(Detail::Snapshot(s)) => Some(EventDetail::Snapshot(Box::new(
                MeshStatus::try_from(s).map_err(|e| e.within("snapshot"))?,
            ))),
        };
        Ok(Self {
            at: time("at", e.at)?,
            observer: node_id("observer", e.observer)?,
            kind: event_kind("kind", e.kind)?,
            subject: e.subject,
            summary: e.summary,
            detail,
        })
    }
}
