//! The incident history every node keeps of what it saw: each verdict
//! change, alarm, page, restart and config reload as an [`Entry`], and the
//! entries grouped into [`Incident`]s (from the first thing that went
//! wrong until everything that went wrong is well again). Grouping is
//! `meshd_model::history`'s; storing it is the daemon's.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use crate::{EventKind, NodeId, UnknownName};

/// What an entry of the history records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKind {
    /// A verdict change, alarm, reboot or restart of a peer, or a config
    /// notice, as the event stream carries it (never a snapshot).
    Event(EventKind),
    /// An alert was posted firing to Alertmanager for the first time.
    PageSent,
    /// It was posted resolved.
    PageResolved,
    /// This node's meshd started.
    MeshdStarted,
    /// The history fell behind the event stream and lost events: the
    /// timeline has a hole here, and the incident's end may be late.
    EventsMissed,
    /// A problem carried over from before this node's meshd restarted (or
    /// from before missed events) found well in the status: its recovery
    /// happened unseen, at this time at the latest.
    SeenWell,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Event(kind) => kind.as_str(),
            EntryKind::PageSent => "page_sent",
            EntryKind::PageResolved => "page_resolved",
            EntryKind::MeshdStarted => "meshd_started",
            EntryKind::EventsMissed => "events_missed",
            EntryKind::SeenWell => "seen_well",
        }
    }
}

impl fmt::Display for EntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EntryKind {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "page_sent" => Ok(EntryKind::PageSent),
            "page_resolved" => Ok(EntryKind::PageResolved),
            "meshd_started" => Ok(EntryKind::MeshdStarted),
            "events_missed" => Ok(EntryKind::EventsMissed),
            "seen_well" => Ok(EntryKind::SeenWell),
            // A snapshot is the whole status, never an entry.
            "snapshot" => Err(UnknownName {
                what: "EntryKind",
                name: s.to_owned(),
            }),
            other => EventKind::from_str(other)
                .map(EntryKind::Event)
                .map_err(|_| UnknownName {
                    what: "EntryKind",
                    name: s.to_owned(),
                }),
        }
    }
}

/// One thing that happened, as the observing node saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub at: SystemTime,
    pub kind: EntryKind,
    /// What it is about: a node id, a link "a/en2 <-> b/en3", an alarm's
    /// subject, an alert's name.
    pub subject: String,
    /// One line with the evidence ("link a <-> b is down: no reply for
    /// 600ms").
    pub summary: String,
    /// The nodes it concerns (a link's two ends, an alarm's node), for
    /// `meshctl history --node`.
    pub nodes: Vec<NodeId>,
}

/// Entries one incident keeps: a cable flapping all night gives thousands
/// of changes, and the first ones with the last ones tell the story.
pub const MAX_ENTRIES_PER_INCIDENT: usize = 256;

/// A stretch of time during which something was wrong, as one node saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incident {
    /// Increasing with `started_at` on one node; never reused.
    pub id: u64,
    /// The node whose view this is.
    pub observer: NodeId,
    pub started_at: SystemTime,
    /// `None` while something is still wrong.
    pub ended_at: Option<SystemTime>,
    /// In time order, at most [`MAX_ENTRIES_PER_INCIDENT`]: the first half
    /// and the latest half when there were more.
    pub entries: Vec<Entry>,
    /// Entries dropped from the middle of the timeline to stay in the cap.
    pub entries_left_out: u64,
    /// What is still wrong (keys such as "link:a <-> b", "quorum"); empty
    /// once the incident ended.
    pub open_problems: Vec<String>,
}

impl Incident {
    /// How long it lasted, or has lasted by `now` while still open.
    pub fn duration(&self, now: SystemTime) -> Duration {
        self.ended_at
            .unwrap_or(now)
            .duration_since(self.started_at)
            .unwrap_or_default()
    }

    /// The end, or `now` while open: what `--since` compares with.
    pub fn last_moment(&self, now: SystemTime) -> SystemTime {
        self.ended_at.unwrap_or(now).max(self.started_at)
    }

    /// Whether any entry concerns `node`.
    pub fn concerns_node(&self, node: &NodeId) -> bool {
        self.entries
            .iter()
            .any(|e| e.nodes.contains(node) || e.subject == node.as_str())
    }

    /// Whether any entry is about the link between `a` and `b` (either
    /// way round, any interfaces).
    pub fn concerns_link(&self, a: &NodeId, b: &NodeId) -> bool {
        self.entries.iter().any(|e| {
            link_ends(&e.subject).is_some_and(|(x, y)| {
                (x == a.as_str() && y == b.as_str()) || (x == b.as_str() && y == a.as_str())
            })
        })
    }

    /// Every time moved by `offset_ns` (a peer's clock minus ours, so
    /// subtracted): the incident on the asking node's clock.
    pub fn shifted(mut self, offset_ns: i64) -> Self {
        let shift = |t: SystemTime| shift_time(t, offset_ns);
        self.started_at = shift(self.started_at);
        self.ended_at = self.ended_at.map(shift);
        for entry in &mut self.entries {
            entry.at = shift(entry.at);
        }
        self
    }
}

/// What `GetHistory` is asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistoryQuery {
    /// Incidents that ended at or after this (or are still open); `None`:
    /// the default window, [`DEFAULT_HISTORY_WINDOW`].
    pub since: Option<SystemTime>,
    pub node: Option<NodeId>,
    /// A link as "a-b" (node ids may hold dashes: every split into two
    /// valid ids is tried), "a<->b" or "a,b".
    pub link: Option<String>,
    /// Every member's history, merged.
    pub mesh: bool,
    /// At most this many incidents, newest first; 0: as many as a reply
    /// holds.
    pub limit: usize,
}

/// What `meshctl history` shows without `--since`.
pub const DEFAULT_HISTORY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

impl HistoryQuery {
    /// Whether `incident` is asked for, at `now`.
    pub fn admits(&self, incident: &Incident, now: SystemTime) -> bool {
        let since = self.since.unwrap_or_else(|| {
            now.checked_sub(DEFAULT_HISTORY_WINDOW)
                .unwrap_or(SystemTime::UNIX_EPOCH)
        });
        incident.last_moment(now) >= since
            && self.node.as_ref().is_none_or(|n| incident.concerns_node(n))
            && self.link.as_deref().is_none_or(|link| {
                link_pairs(link)
                    .iter()
                    .any(|(a, b)| incident.concerns_link(a, b))
            })
    }
}

/// Every way `text` names a link between two nodes: "a<->b", "a,b", or
/// "a-b" split at each dash where both halves are valid node ids.
pub fn link_pairs(text: &str) -> Vec<(NodeId, NodeId)> {
    let text = text.trim();
    let pair = |a: &str, b: &str| Some((NodeId::new(a.trim()).ok()?, NodeId::new(b.trim()).ok()?));
    for separator in ["<->", ","] {
        if let Some((a, b)) = text.split_once(separator) {
            return pair(a, b).into_iter().collect();
        }
    }
    text.match_indices('-')
        .filter_map(|(i, _)| pair(&text[..i], &text[i + 1..]))
        .collect()
}

/// `t` minus `offset_ns`, saturating at the epoch and at 9999.
fn shift_time(t: SystemTime, offset_ns: i64) -> SystemTime {
    let magnitude = Duration::from_nanos(offset_ns.unsigned_abs());
    let shifted = if offset_ns >= 0 {
        t.checked_sub(magnitude)
    } else {
        t.checked_add(magnitude)
    };
    shifted
        .unwrap_or(SystemTime::UNIX_EPOCH)
        .clamp(SystemTime::UNIX_EPOCH, crate::time::latest())
}

/// The node ids of a link subject "a/en2 <-> b/en3" (or "a <-> b").
pub fn link_ends(subject: &str) -> Option<(&str, &str)> {
    let (a, b) = subject.split_once(" <-> ")?;
    Some((end_node(a), end_node(b)))
}

/// The node of a link end "a/en2".
fn end_node(end: &str) -> &str {
    end.split('/').next().unwrap_or(end).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_kinds_round_trip_by_name_and_a_snapshot_is_none() {
        let kinds = EventKind::ALL
            .iter()
            .filter(|k| **k != EventKind::Snapshot)
            .map(|k| EntryKind::Event(*k))
            .chain([
                EntryKind::PageSent,
                EntryKind::PageResolved,
                EntryKind::MeshdStarted,
                EntryKind::EventsMissed,
                EntryKind::SeenWell,
            ]);
        for kind in kinds {
            assert_eq!(kind.as_str().parse::<EntryKind>(), Ok(kind));
        }
        assert!("snapshot".parse::<EntryKind>().is_err());
        assert!("nonsense".parse::<EntryKind>().is_err());
    }

    #[test]
    fn link_ends_drop_the_interfaces() {
        assert_eq!(link_ends("a/en2 <-> b/en3"), Some(("a", "b")));
        assert_eq!(link_ends("a <-> b"), Some(("a", "b")));
        assert_eq!(link_ends("quorum"), None);
    }

    #[test]
    fn a_link_with_dashed_node_ids_is_tried_at_every_dash() {
        let ids = |pairs: Vec<(NodeId, NodeId)>| -> Vec<(String, String)> {
            pairs
                .into_iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(ids(link_pairs("a-b")), [("a".into(), "b".into())]);
        assert_eq!(
            ids(link_pairs("studio-1-studio-2")),
            [
                ("studio".into(), "1-studio-2".into()),
                ("studio-1".into(), "studio-2".into()),
                ("studio-1-studio".into(), "2".into())
            ]
        );
        assert_eq!(ids(link_pairs("a <-> b")), [("a".into(), "b".into())]);
        assert!(link_pairs("-").is_empty());
        assert!(link_pairs("").is_empty());
    }

    #[test]
    fn shifting_saturates_instead_of_panicking() {
        let early = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
        assert_eq!(shift_time(early, i64::MAX), SystemTime::UNIX_EPOCH);
        assert_eq!(
            shift_time(early, -1_000_000_000),
            early + Duration::from_secs(1)
        );
        assert!(shift_time(crate::time::latest(), i64::MIN) <= crate::time::latest());
    }
}
