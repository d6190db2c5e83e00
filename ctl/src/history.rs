//! `meshctl history`: the incidents a node recorded, newest first, each
//! with its timeline; with `--mesh`, every node's, on the answering node's
//! clock.

use std::time::{Duration, SystemTime};

use meshd_domain::NodeId;
use meshd_domain::history::{HistoryQuery, Incident};
use meshd_domain::time::{OUT_OF_RANGE, rfc3339_millis};
use meshd_proto::convert::{History, HistoryAnswer};
use meshd_proto::wire;
use serde::Serialize;

use crate::client::{self, Target};
use crate::outcome::{Failure, note};

/// What was asked on the command line.
#[derive(Debug, Clone)]
pub struct Request {
    pub since: Duration,
    pub node: Option<String>,
    pub link: Option<String>,
    pub mesh: bool,
    pub limit: u32,
}

impl Request {
    fn query(&self, now: SystemTime) -> Result<HistoryQuery, Failure> {
        let node = self
            .node
            .as_ref()
            .map(|n| NodeId::new(n.as_str()).map_err(|e| Failure::Usage(format!("--node: {e}"))))
            .transpose()?;
        if let Some(link) = &self.link
            && meshd_domain::history::link_pairs(link).is_empty()
        {
            return Err(Failure::Usage(format!(
                "--link {link:?}: give two node ids, as a-b"
            )));
        }
        let since = now
            .checked_sub(self.since)
            .unwrap_or(SystemTime::UNIX_EPOCH)
            .max(SystemTime::UNIX_EPOCH);
        Ok(HistoryQuery {
            since: Some(since),
            node,
            link: self.link.clone(),
            mesh: self.mesh,
            limit: usize::try_from(self.limit).unwrap_or(usize::MAX),
        })
    }
}

pub async fn run(target: &Target, request: Request, json: bool) -> Result<(), Failure> {
    let now = SystemTime::now();
    let query = request.query(now)?;
    let history = client::history(target, wire::GetHistoryRequest::from(query)).await?;
    for answer in &history.answers {
        if let Some(error) = &answer.error {
            note(&format!("node {} did not answer: {error}", answer.node));
        }
    }
    if json {
        let doc = HistoryJson::new(&history, now);
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        print!("{}", text(&history, now, request.since));
    }
    Ok(())
}

fn time(t: SystemTime) -> String {
    rfc3339_millis(t).unwrap_or_else(|| OUT_OF_RANGE.to_owned())
}

/// The text form: one block per incident, its entries indented with
/// their offset from its start.
fn text(history: &History, now: SystemTime, since: Duration) -> String {
    let mut out = String::new();
    if history.incidents.is_empty() {
        out.push_str(&format!(
            "no incidents in the last {}\n",
            humantime::format_duration(since)
        ));
    }
    for incident in &history.incidents {
        let (end, state) = match incident.ended_at {
            Some(end) => (time(end), "ended"),
            None => ("now".to_owned(), "OPEN"),
        };
        out.push_str(&format!(
            "incident {}#{}  {} -> {}  {} ({})\n",
            incident.observer,
            incident.id,
            time(incident.started_at),
            end,
            meshd_domain::human::duration(incident.duration(now)),
            state,
        ));
        for entry in &incident.entries {
            let offset = entry
                .at
                .duration_since(incident.started_at)
                .unwrap_or_default();
            out.push_str(&format!(
                "  +{:<9} {:<16} {}\n",
                format!("{:.3}s", offset.as_secs_f64()),
                entry.kind.as_str(),
                entry.summary
            ));
        }
        if incident.entries_left_out > 0 {
            out.push_str(&format!(
                "  ({} entries in the middle left out)\n",
                incident.entries_left_out
            ));
        }
        if !incident.open_problems.is_empty() {
            out.push_str(&format!(
                "  still wrong: {}\n",
                incident.open_problems.join(", ")
            ));
        }
    }
    out
}

/// `meshctl history --json`. Fields are only ever added.
#[derive(Debug, Serialize)]
struct HistoryJson<'a> {
    incidents: Vec<IncidentJson<'a>>,
    /// With `--mesh`: how each node answered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    nodes: Vec<AnswerJson<'a>>,
}

#[derive(Debug, Serialize)]
struct IncidentJson<'a> {
    observer: &'a str,
    id: u64,
    started_at: String,
    /// Absent while open.
    #[serde(skip_serializing_if = "Option::is_none")]
    ended_at: Option<String>,
    duration_seconds: f64,
    open: bool,
    entries: Vec<EntryJson<'a>>,
    entries_left_out: u64,
    open_problems: &'a [String],
}

#[derive(Debug, Serialize)]
struct EntryJson<'a> {
    at: String,
    kind: &'static str,
    subject: &'a str,
    summary: &'a str,
    nodes: Vec<&'a str>,
}

#[derive(Debug, Serialize)]
struct AnswerJson<'a> {
    node: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    clock_offset_seconds: f64,
    incidents: usize,
}

impl<'a> HistoryJson<'a> {
    fn new(history: &'a History, now: SystemTime) -> Self {
        Self {
            incidents: history
                .incidents
                .iter()
                .map(|i| IncidentJson::new(i, now))
                .collect(),
            nodes: history.answers.iter().map(AnswerJson::new).collect(),
        }
    }
}

impl<'a> IncidentJson<'a> {
    fn new(incident: &'a Incident, now: SystemTime) -> Self {
        Self {
            observer: incident.observer.as_str(),
            id: incident.id,
            started_at: time(incident.started_at),
            ended_at: incident.ended_at.map(time),
            duration_seconds: incident.duration(now).as_secs_f64(),
            open: incident.ended_at.is_none(),
            entries: incident
                .entries
                .iter()
                .map(|e| EntryJson {
                    at: time(e.at),
                    kind: e.kind.as_str(),
                    subject: &e.subject,
                    summary: &e.summary,
                    nodes: e.nodes.iter().map(NodeId::as_str).collect(),
                })
                .collect(),
            entries_left_out: incident.entries_left_out,
            open_problems: &incident.open_problems,
        }
    }
}

impl<'a> AnswerJson<'a> {
    fn new(answer: &'a HistoryAnswer) -> Self {
        Self {
            node: answer.node.as_str(),
            error: answer.error.as_deref(),
            clock_offset_seconds: answer.clock_offset_ns as f64 / 1e9,
            incidents: answer.incidents,
        }
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::EventKind;
    use meshd_domain::fixtures::{id, wall};
    use meshd_domain::history::{Entry, EntryKind};

    use super::*;

    fn history() -> History {
        History {
            incidents: vec![Incident {
                id: 4,
                observer: id("a"),
                started_at: wall(10),
                ended_at: Some(wall(16)),
                entries: vec![
                    Entry {
                        at: wall(10),
                        kind: EntryKind::Event(EventKind::LinkDown),
                        subject: "a/en2 <-> b/en3".into(),
                        summary: "link a/en2 <-> b/en3 is down: no reply for 600ms".into(),
                        nodes: vec![id("a"), id("b")],
                    },
                    Entry {
                        at: wall(16),
                        kind: EntryKind::Event(EventKind::LinkRecovered),
                        subject: "a/en2 <-> b/en3".into(),
                        summary: "link a/en2 <-> b/en3 is up".into(),
                        nodes: vec![id("a"), id("b")],
                    },
                ],
                entries_left_out: 0,
                open_problems: vec![],
            }],
            answers: vec![],
        }
    }

    #[test]
    fn the_text_shows_each_incident_with_its_timeline() {
        assert_eq!(
            text(&history(), wall(100), Duration::from_secs(3600)),
            "incident a#4  2027-01-15T08:00:10.000Z -> 2027-01-15T08:00:16.000Z  6.0s (ended)\n  \
             +0.000s    link_down        link a/en2 <-> b/en3 is down: no reply for 600ms\n  \
             +6.000s    link_recovered   link a/en2 <-> b/en3 is up\n"
        );
        let empty = History {
            incidents: vec![],
            answers: vec![],
        };
        assert_eq!(
            text(&empty, wall(100), Duration::from_secs(12 * 3600)),
            "no incidents in the last 12h\n"
        );
    }

    #[test]
    fn the_json_names_start_end_duration_and_entries() {
        let history = history();
        let doc = serde_json::to_value(HistoryJson::new(&history, wall(100))).expect("json");
        let incident = &doc["incidents"][0];
        assert_eq!(incident["started_at"], "2027-01-15T08:00:10.000Z");
        assert_eq!(incident["ended_at"], "2027-01-15T08:00:16.000Z");
        assert_eq!(incident["duration_seconds"], 6.0);
        assert_eq!(incident["open"], false);
        assert_eq!(incident["entries"][1]["kind"], "link_recovered");
        assert_eq!(incident["entries"][0]["nodes"][1], "b");
        assert!(doc.get("nodes").is_none());
    }

    #[test]
    fn a_bad_link_or_node_is_a_usage_error() {
        let request = |node: Option<&str>, link: Option<&str>| Request {
            since: Duration::from_secs(60),
            node: node.map(str::to_owned),
            link: link.map(str::to_owned),
            mesh: false,
            limit: 10,
        };
        assert!(matches!(
            request(None, Some("ab")).query(wall(0)),
            Err(Failure::Usage(_))
        ));
        assert!(matches!(
            request(Some("no spaces"), None).query(wall(0)),
            Err(Failure::Usage(_))
        ));
        let query = request(Some("b"), Some("a-b"))
            .query(wall(100))
            .expect("fine");
        assert_eq!(query.since, Some(wall(40)));
    }
}
