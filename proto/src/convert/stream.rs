//! The peer stream's messages (report.proto): opens, updates, replies.
//!
//! A link observation's RTT histogram travels without its bucket bounds,
//! which the stream's open carries once; the receiver puts them back.

use std::time::Duration;

use super::{
    Result, WireError, at_most, each, nanos, node_id, node_ids, reject_reason, reject_reason_wire,
    required, time, timestamp,
};
use crate::limits;
use crate::wire;
use meshd_domain::facts::NodeFacts;
use meshd_domain::{
    Alarm, ClockOffset, ClockSample, Incarnation, Lateness, LinkEnd, LinkObservation, NodeIdentity,
    NodeLoad, PeerMessage, PeerReply, Protocols, Refusal, ReportUpdate, RttHistogram, StreamOpen,
};

impl From<NodeLoad> for wire::NodeLoad {
    fn from(l: NodeLoad) -> Self {
        Self {
            cpu_busy_ratio: l.cpu_busy_ratio,
            cpu_saturated: l.cpu_saturated,
        }
    }
}

impl TryFrom<wire::NodeLoad> for NodeLoad {
    type Error = WireError;
    fn try_from(l: wire::NodeLoad) -> Result<Self> {
        if !(0.0..=1.0).contains(&l.cpu_busy_ratio) {
            return Err(WireError::new(
                "cpu_busy_ratio",
                format!("{} is outside 0-1", l.cpu_busy_ratio),
            ));
        }
        Ok(Self {
            cpu_busy_ratio: l.cpu_busy_ratio,
            cpu_saturated: l.cpu_saturated,
        })
    }
}

impl From<ClockOffset> for wire::ClockOffset {
    fn from(o: ClockOffset) -> Self {
        Self {
            peer: o.peer.to_string(),
            offset_ns: o.offset_ns,
            rtt_ns: nanos(o.rtt),
        }
    }
}

impl TryFrom<wire::ClockOffset> for ClockOffset {
    type Error = WireError;
    fn try_from(o: wire::ClockOffset) -> Result<Self> {
        Ok(Self {
            peer: node_id("peer", o.peer)?,
            offset_ns: o.offset_ns,
            rtt: Duration::from_nanos(o.rtt_ns),
        })
    }
}

impl From<StreamOpen> for wire::StreamOpen {
    fn from(o: StreamOpen) -> Self {
        Self {
            sender: Some(o.sender.into()),
            instance: o.instance,
            rtt_bounds_ns: o.rtt_bounds.into_iter().map(nanos).collect(),
            protocol: o.protocols.spoken,
            oldest_protocol: o.protocols.oldest,
        }
    }
}

impl TryFrom<wire::StreamOpen> for StreamOpen {
    type Error = WireError;
    fn try_from(o: wire::StreamOpen) -> Result<Self> {
        if o.rtt_bounds_ns.windows(2).any(|w| w[0] >= w[1]) {
            return Err(WireError::new("rtt_bounds_ns", "not strictly ascending"));
        }
        Ok(Self {
            sender: NodeIdentity::try_from(required("sender", o.sender)?)
                .map_err(|e| e.within("sender"))?,
            instance: o.instance,
            rtt_bounds: o
                .rtt_bounds_ns
                .into_iter()
                .map(Duration::from_nanos)
                .collect(),
            protocols: Protocols {
                spoken: o.protocol,
                oldest: o.oldest_protocol,
            },
        })
    }
}

/// An observation for the stream: its histogram's bounds are the stream's.
fn observation_to_stream(o: LinkObservation) -> wire::LinkObservation {
    let mut wire = wire::LinkObservation::from(o);
    if let Some(histogram) = wire.rtt_histogram.as_mut() {
        histogram.bounds_ns.clear();
    }
    wire
}

/// An observation from the stream, its histogram given the stream's bounds.
fn observation_from_stream(
    mut o: wire::LinkObservation,
    bounds: &[Duration],
) -> Result<LinkObservation> {
    let histogram = o.rtt_histogram.take();
    let mut observation = LinkObservation::try_from(o)?;
    if let Some(h) = histogram
        && !(h.counts.is_empty() && h.sum_ns == 0)
    {
        if h.counts.len() != bounds.len() + 1 {
            return Err(WireError::new(
                "rtt_histogram.counts",
                format!(
                    "{} counts for the stream's {} bounds; want bounds + 1",
                    h.counts.len(),
                    bounds.len()
                ),
            ));
        }
        observation.rtt_histogram = RttHistogram {
            bounds: bounds.to_vec(),
            counts: h.counts,
            sum: Duration::from_nanos(h.sum_ns),
        };
    }
    Ok(observation)
}

impl From<ReportUpdate> for wire::ReportUpdate {
    /// Trimmed to the caps of [`limits`], the most severe alarms first, so
    /// that no peer refuses it.
    fn from(u: ReportUpdate) -> Self {
        let list = |ids: Vec<meshd_domain::NodeId>| wire::NodeList {
            ids: ids
                .iter()
                .take(limits::MAX_HEARS_PER_REPORT)
                .map(ToString::to_string)
                .collect(),
        };
        Self {
            sequence: u.sequence,
            sent_at: timestamp(u.sent_at),
            lateness_ns: nanos(u.lateness.worst),
            held_up_total_ns: nanos(u.lateness.held_up_total),
            full: u.full,
            links: u
                .links
                .into_iter()
                .take(limits::MAX_LINKS_PER_REPORT)
                .map(observation_to_stream)
                .collect(),
            removed_links: u
                .removed_links
                .into_iter()
                .take(limits::MAX_LINKS_PER_REPORT)
                .map(Into::into)
                .collect(),
            alarms: u.alarms.map(|mut alarms| {
                if alarms.len() > limits::MAX_ALARMS_PER_REPORT {
                    alarms.sort_by_key(|a| std::cmp::Reverse(a.severity));
                }
                wire::AlarmList {
                    alarms: alarms
                        .into_iter()
                        .take(limits::MAX_ALARMS_PER_REPORT)
                        .map(Into::into)
                        .collect(),
                }
            }),
            hears: u.hears.map(list),
            heard_on_management: u.heard_on_management.map(list),
            load: Some(u.load.into()),
            facts: u.facts.map(Into::into),
            has_quorum: u.has_quorum,
            leader: u
                .leader
                .map(|leader| leader.map(|id| id.to_string()).unwrap_or_default()),
            clock_offsets: u.clock_offsets.map(|offsets| wire::ClockOffsets {
                offsets: offsets.into_iter().map(Into::into).collect(),
            }),
            jobs: u.jobs.map(super::jobs::ranks_to_wire),
        }
    }
}

/// The alarms of a report whose kinds this release knows. An alarm of a
/// kind it does not know, named as kinds are (`snake_case`, at most 64
/// bytes), is a newer release's and left out: the rest of the report
/// stands, so a release added alarm kinds without its peers of the
/// release before refusing its reports. Anything else malformed refuses
/// the update, as before.
fn known_alarms(alarms: Vec<wire::Alarm>) -> Result<Vec<Alarm>> {
    let newer_kind = |kind: &str| {
        kind.parse::<meshd_domain::AlarmKind>().is_err()
            && !kind.is_empty()
            && kind.len() <= 64
            && kind
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    let known: Vec<wire::Alarm> = alarms
        .into_iter()
        .filter(|a| !newer_kind(&a.kind))
        .collect();
    each("alarms.alarms", known, Alarm::try_from)
}

/// An update from the stream whose open gave `bounds`.
pub fn update_from_wire(u: wire::ReportUpdate, bounds: &[Duration]) -> Result<ReportUpdate> {
    if u.sequence == 0 {
        return Err(WireError::new("sequence", "missing"));
    }
    at_most("links", &u.links, limits::MAX_LINKS_PER_REPORT)?;
    at_most(
        "removed_links",
        &u.removed_links,
        limits::MAX_LINKS_PER_REPORT,
    )?;
    if let Some(list) = &u.alarms {
        at_most("alarms.alarms", &list.alarms, limits::MAX_ALARMS_PER_REPORT)?;
    }
    for (field, list) in [
        ("hears.ids", &u.hears),
        ("heard_on_management.ids", &u.heard_on_management),
    ] {
        if let Some(list) = list {
            at_most(field, &list.ids, limits::MAX_HEARS_PER_REPORT)?;
        }
    }
    Ok(ReportUpdate {
        sequence: u.sequence,
        sent_at: time("sent_at", u.sent_at)?,
        lateness: Lateness {
            worst: Duration::from_nanos(u.lateness_ns),
            held_up_total: Duration::from_nanos(u.held_up_total_ns),
        },
        full: u.full,
        links: each("links", u.links, |o| observation_from_stream(o, bounds))?,
        removed_links: each("removed_links", u.removed_links, LinkEnd::try_from)?,
        alarms: u.alarms.map(|list| known_alarms(list.alarms)).transpose()?,
        hears: u
            .hears
            .map(|list| node_ids("hears.ids", list.ids))
            .transpose()?,
        heard_on_management: u
            .heard_on_management
            .map(|list| node_ids("heard_on_management.ids", list.ids))
            .transpose()?,
        load: NodeLoad::try_from(u.load.unwrap_or_default()).map_err(|e| e.within("load"))?,
        facts: u
            .facts
            .map(NodeFacts::try_from)
            .transpose()
            .map_err(|e| e.within("facts"))?,
        has_quorum: u.has_quorum,
        leader: u
            .leader
            .map(|leader| {
                (!leader.is_empty())
                    .then(|| node_id("leader", leader))
                    .transpose()
            })
            .transpose()?,
        clock_offsets: u
            .clock_offsets
            .map(|list| each("clock_offsets.offsets", list.offsets, ClockOffset::try_from))
            .transpose()?,
        jobs: u.jobs.map(super::jobs::ranks_from_wire).transpose()?,
    })
}

impl From<PeerMessage> for wire::PeerMessage {
    fn from(m: PeerMessage) -> Self {
        use wire::peer_message::Body;
        Self {
            body: Some(match m {
                PeerMessage::Open(open) => Body::Open(open.into()),
                PeerMessage::Update(update) => Body::Update((*update).into()),
            }),
        }
    }
}

impl From<ClockSample> for wire::ClockSample {
    fn from(c: ClockSample) -> Self {
        Self {
            echoed: timestamp(c.echoed),
            received: timestamp(c.received),
            replied: timestamp(c.replied),
        }
    }
}

impl TryFrom<wire::ClockSample> for ClockSample {
    type Error = WireError;
    fn try_from(c: wire::ClockSample) -> Result<Self> {
        Ok(Self {
            echoed: time("echoed", c.echoed)?,
            received: time("received", c.received)?,
            replied: time("replied", c.replied)?,
        })
    }
}

impl From<PeerReply> for wire::PeerReply {
    fn from(r: PeerReply) -> Self {
        let (reason, detail, known) = match r.refusal {
            Some(refusal) => (
                reject_reason_wire(refusal.reason),
                refusal.detail,
                refusal.known_incarnation.map_or(0, |i| i.0),
            ),
            None => (wire::RejectReason::Unspecified as i32, String::new(), 0),
        };
        Self {
            receiver: Some(r.receiver.into()),
            sequence: r.sequence,
            accepted: reason == wire::RejectReason::Unspecified as i32,
            reject_reason: reason,
            detail,
            known_incarnation: known,
            clock: r.clock.map(Into::into),
            resync: r.resync,
        }
    }
}

impl TryFrom<wire::PeerReply> for PeerReply {
    type Error = WireError;
    fn try_from(r: wire::PeerReply) -> Result<Self> {
        let refusal = if r.accepted {
            None
        } else {
            Some(Refusal {
                reason: reject_reason("reject_reason", r.reject_reason)?,
                detail: r.detail,
                known_incarnation: (r.known_incarnation != 0)
                    .then_some(Incarnation(r.known_incarnation)),
            })
        };
        Ok(Self {
            receiver: NodeIdentity::try_from(required("receiver", r.receiver)?)
                .map_err(|e| e.within("receiver"))?,
            sequence: r.sequence,
            refusal,
            clock: r
                .clock
                .map(ClockSample::try_from)
                .transpose()
                .map_err(|e| e.within("clock"))?,
            resync: r.resync,
        })
    }
}
