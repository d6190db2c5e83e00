//! The incident history (history.proto). The same messages are what the
//! daemon stores on disk, so a file written by anyone else is read through
//! the same checks as a reply from the network.

use prost::Message;

use super::{
    Result, WireError, at_most, each, node_id, optional_time, text_at_most, time, timestamp,
};
use crate::limits::{
    self, MAX_HISTORY_ANSWERS, MAX_HISTORY_LINK_BYTES, MAX_HISTORY_NAMES, MAX_HISTORY_REPLY_BYTES,
    MAX_INCIDENTS_PER_REPLY, MAX_SUBJECT_BYTES, MAX_SUMMARY_BYTES, clip,
};
use crate::wire;
use meshd_domain::history::{Entry, EntryKind, HistoryQuery, Incident, MAX_ENTRIES_PER_INCIDENT};
use meshd_domain::{NODE_ID_MAX_LEN, NodeId};

impl From<Entry> for wire::HistoryEntry {
    fn from(e: Entry) -> Self {
        Self {
            at: timestamp(e.at),
            kind: e.kind.as_str().to_owned(),
            subject: clip(e.subject, MAX_SUBJECT_BYTES),
            summary: clip(e.summary, MAX_SUMMARY_BYTES),
            nodes: e
                .nodes
                .into_iter()
                .take(MAX_HISTORY_NAMES)
                .map(|n| n.to_string())
                .collect(),
        }
    }
}

impl TryFrom<wire::HistoryEntry> for Entry {
    type Error = WireError;
    fn try_from(e: wire::HistoryEntry) -> Result<Self> {
        at_most("nodes", &e.nodes, MAX_HISTORY_NAMES)?;
        Ok(Self {
            at: time("at", e.at)?,
            kind: e
                .kind
                .parse::<EntryKind>()
                .map_err(|err| WireError::new("kind", err.to_string()))?,
            subject: text_at_most("subject", e.subject, MAX_SUBJECT_BYTES)?,
            summary: text_at_most("summary", e.summary, MAX_SUMMARY_BYTES)?,
            nodes: each("nodes", e.nodes, |n| node_id("node", n))?,
        })
    }
}

impl From<Incident> for wire::Incident {
    fn from(i: Incident) -> Self {
        let kept = i.entries.len().min(MAX_ENTRIES_PER_INCIDENT);
        let dropped = (i.entries.len() - kept) as u64;
        Self {
            id: i.id,
            observer: i.observer.to_string(),
            started_at: timestamp(i.started_at),
            ended_at: i.ended_at.and_then(timestamp),
            entries: i.entries.into_iter().take(kept).map(Into::into).collect(),
            entries_left_out: i.entries_left_out.saturating_add(dropped),
            open_problems: i
                .open_problems
                .into_iter()
                .take(MAX_HISTORY_NAMES)
                .map(|p| clip(p, MAX_SUBJECT_BYTES))
                .collect(),
        }
    }
}

impl TryFrom<wire::Incident> for Incident {
    type Error = WireError;
    fn try_from(i: wire::Incident) -> Result<Self> {
        at_most("entries", &i.entries, MAX_ENTRIES_PER_INCIDENT)?;
        at_most("open_problems", &i.open_problems, MAX_HISTORY_NAMES)?;
        let started_at = time("started_at", i.started_at)?;
        let ended_at = optional_time("ended_at", i.ended_at)?;
        if ended_at.is_some_and(|end| end < started_at) {
            return Err(WireError::new("ended_at", "before started_at"));
        }
        Ok(Self {
            id: i.id,
            observer: node_id("observer", i.observer)?,
            started_at,
            ended_at,
            entries: each("entries", i.entries, Entry::try_from)?,
            entries_left_out: i.entries_left_out,
            open_problems: each("open_problems", i.open_problems, |p| {
                text_at_most("problem", p, MAX_SUBJECT_BYTES)
            })?,
        })
    }
}

/// The stored form of one incident.
pub fn encode_incident(incident: Incident) -> Vec<u8> {
    wire::Incident::from(incident).encode_to_vec()
}

/// An incident read back from its stored form, checked like one from
/// the network.
pub fn decode_incident(bytes: &[u8]) -> Result<Incident> {
    let message = wire::Incident::decode(bytes)
        .map_err(|e| WireError::new("incident", format!("not an incident: {e}")))?;
    Incident::try_from(message)
}

impl From<HistoryQuery> for wire::GetHistoryRequest {
    fn from(q: HistoryQuery) -> Self {
        Self {
            since: q.since.and_then(timestamp),
            node: q.node.map(|n| n.to_string()).unwrap_or_default(),
            link: q.link.unwrap_or_default(),
            mesh: q.mesh,
            limit: u32::try_from(q.limit).unwrap_or(u32::MAX),
        }
    }
}

impl TryFrom<wire::GetHistoryRequest> for HistoryQuery {
    type Error = WireError;
    fn try_from(r: wire::GetHistoryRequest) -> Result<Self> {
        let node = match r.node.as_str() {
            "" => None,
            _ => Some(node_id(
                "node",
                text_at_most("node", r.node, NODE_ID_MAX_LEN)?,
            )?),
        };
        let link = match r.link.as_str() {
            "" => None,
            _ => {
                let link = text_at_most("link", r.link, MAX_HISTORY_LINK_BYTES)?;
                if meshd_domain::history::link_pairs(&link).is_empty() {
                    return Err(WireError::new(
                        "link",
                        format!("{link:?} is not two node ids, as a-b"),
                    ));
                }
                Some(link)
            }
        };
        Ok(Self {
            since: optional_time("since", r.since)?,
            node,
            link,
            mesh: r.mesh,
            limit: usize::try_from(r.limit)
                .unwrap_or(usize::MAX)
                .min(MAX_INCIDENTS_PER_REPLY),
        })
    }
}

/// How one node answered a mesh-wide history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryAnswer {
    pub node: NodeId,
    /// Why it did not answer; `None` when it did.
    pub error: Option<String>,
    /// Its clock minus the asking node's.
    pub clock_offset_ns: i64,
    pub incidents: usize,
}

/// A checked `GetHistory` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// Newest first.
    pub incidents: Vec<Incident>,
    pub answers: Vec<HistoryAnswer>,
}

impl From<History> for wire::History {
    fn from(h: History) -> Self {
        let mut incidents = Vec::new();
        let mut bytes = 0usize;
        // Newest first: what does not fit is the oldest.
        for incident in h.incidents.into_iter().take(MAX_INCIDENTS_PER_REPLY) {
            let incident = wire::Incident::from(incident);
            bytes = bytes.saturating_add(incident.encoded_len() + 4);
            if bytes > MAX_HISTORY_REPLY_BYTES {
                break;
            }
            incidents.push(incident);
        }
        Self {
            incidents,
            answers: h
                .answers
                .into_iter()
                .take(MAX_HISTORY_ANSWERS)
                .map(|a| wire::HistoryAnswer {
                    node: a.node.to_string(),
                    error: a
                        .error
                        .map(|e| clip(e, limits::MAX_SUMMARY_BYTES))
                        .unwrap_or_default(),
                    clock_offset_ns: a.clock_offset_ns,
                    incidents: u32::try_from(a.incidents).unwrap_or(u32::MAX),
                })
                .collect(),
        }
    }
}

impl TryFrom<wire::History> for History {
    type Error = WireError;
    fn try_from(h: wire::History) -> Result<Self> {
        at_most("incidents", &h.incidents, MAX_INCIDENTS_PER_REPLY)?;
        at_most("answers", &h.answers, MAX_HISTORY_ANSWERS)?;
        Ok(Self {
            incidents: each("incidents", h.incidents, Incident::try_from)?,
            answers: each("answers", h.answers, |a| {
                Ok(HistoryAnswer {
                    node: node_id("node", a.node)?,
                    error: match a.error.as_str() {
                        "" => None,
                        _ => Some(text_at_most("error", a.error, MAX_SUMMARY_BYTES)?),
                    },
                    clock_offset_ns: a.clock_offset_ns,
                    incidents: usize::try_from(a.incidents).unwrap_or(usize::MAX),
                })
            })?,
        })
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::EventKind;
    use meshd_domain::fixtures::{id, wall};

    use super::*;

    fn incident() -> Incident {
        Incident {
            id: 7,
            observer: id("a"),
            started_at: wall(10),
            ended_at: Some(wall(12)),
            entries: vec![Entry {
                at: wall(10),
                kind: EntryKind::Event(EventKind::LinkDown),
                subject: "a/en2 <-> b/en3".into(),
                summary: "link a/en2 <-> b/en3 is down".into(),
                nodes: vec![id("a"), id("b")],
            }],
            entries_left_out: 0,
            open_problems: vec![],
        }
    }

    #[test]
    fn an_incident_round_trips_through_its_stored_form() {
        let bytes = encode_incident(incident());
        assert_eq!(decode_incident(&bytes), Ok(incident()));
    }

    #[test]
    fn garbage_and_hostile_incidents_are_refused_by_field_not_a_panic() {
        assert!(decode_incident(b"\xff\xff\xff\xff garbage").is_err());
        let mut message = wire::Incident::from(incident());
        message.entries[0].kind = "snapshot".into();
        let err = Incident::try_from(message).expect_err("a snapshot is no entry");
        assert_eq!(err.field, "entries[0].kind");
        let mut message = wire::Incident::from(incident());
        message.entries = vec![message.entries[0].clone(); MAX_ENTRIES_PER_INCIDENT + 1];
        assert!(Incident::try_from(message).is_err());
        let mut message = wire::Incident::from(incident());
        message.ended_at = timestamp(wall(5));
        assert_eq!(
            Incident::try_from(message).map_err(|e| e.field),
            Err("ended_at".to_owned())
        );
    }

    #[test]
    fn a_request_is_bounded_and_its_link_must_name_two_nodes() {
        let request = |link: &str| wire::GetHistoryRequest {
            link: link.to_owned(),
            limit: u32::MAX,
            ..Default::default()
        };
        let query = HistoryQuery::try_from(request("a-b")).expect("fine");
        assert_eq!(query.limit, MAX_INCIDENTS_PER_REPLY);
        assert!(HistoryQuery::try_from(request("nodash")).is_err());
        assert!(HistoryQuery::try_from(request(&"a-".repeat(100))).is_err());
    }

    #[test]
    fn a_reply_is_trimmed_to_its_byte_budget_dropping_the_oldest() {
        let mut big = incident();
        big.entries = (0..MAX_ENTRIES_PER_INCIDENT as u64)
            .map(|i| Entry {
                at: wall(i),
                summary: "x".repeat(MAX_SUMMARY_BYTES),
                ..incident().entries[0].clone()
            })
            .collect();
        let history = History {
            incidents: (0..MAX_INCIDENTS_PER_REPLY as u64)
                .map(|id| Incident { id, ..big.clone() })
                .collect(),
            answers: vec![],
        };
        let message = wire::History::from(history);
        assert!(message.encoded_len() <= MAX_HISTORY_REPLY_BYTES);
        assert!(!message.incidents.is_empty());
        assert_eq!(message.incidents[0].id, 0, "the newest is kept");
    }
}
