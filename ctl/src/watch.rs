//! `meshctl watch`: the status as it stands, then its changes as they
//! happen, one line each, until Ctrl-C (exit 0) or until meshd goes away
//! (exit 2).

use std::io::Write;

use meshd_domain::{Event, EventDetail};
use serde::Serialize;

use crate::client::{self, Target};
use crate::outcome::{Failure, note};
use crate::status::{AlarmJson, LinkJson, NodeJson, QuorumJson, StatusJson};

/// One line of `meshctl watch --json`. The first line is a `snapshot`
/// carrying the whole status (as `meshctl status --json`); every later
/// line carries the verdict it leads to, so applying them in order to the
/// snapshot gives the status. Fields are only ever added.
#[derive(Debug, Serialize)]
struct EventJson<'a> {
    at: String,
    observer: &'a str,
    kind: &'static str,
    subject: &'a str,
    summary: &'a str,
    /// The node's count of events; a snapshot's is that of the last event
    /// it includes.
    sequence: u64,
    /// Whom a link verdict blames (`link`, `node`, `none`); absent on other
    /// events.
    #[serde(skip_serializing_if = "Option::is_none")]
    blame: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<LinkJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<NodeJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quorum: Option<QuorumJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alarm: Option<AlarmJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusJson<'a>>,
}

pub fn line(event: &Event, sequence: u64, json: bool) -> String {
    let at = meshd_domain::time::rfc3339_millis(event.at)
        .unwrap_or_else(|| meshd_domain::time::OUT_OF_RANGE.to_owned());
    if json {
        let mut doc = EventJson {
            at,
            observer: event.observer.as_str(),
            kind: event.kind.as_str(),
            subject: &event.subject,
            summary: &event.summary,
            sequence,
            blame: None,
            link: None,
            node: None,
            quorum: None,
            alarm: None,
            status: None,
        };
        match &event.detail {
            Some(EventDetail::Link(link)) => {
                doc.blame = Some(link.blame.as_str());
                doc.link = Some(link.into());
            }
            Some(EventDetail::Node(node)) => doc.node = Some(node.into()),
            Some(EventDetail::Quorum(quorum)) => doc.quorum = Some(quorum.into()),
            Some(EventDetail::Alarm(alarm)) => doc.alarm = Some(alarm.into()),
            Some(EventDetail::Snapshot(status)) => doc.status = Some((&**status).into()),
            None => {}
        }
        serde_json::to_string(&doc).unwrap_or_default()
    } else {
        format!(
            "{at}  {:<8} {:<16} {}",
            event.observer.as_str(),
            event.kind.as_str(),
            event.summary
        )
    }
}

/// Streams until interrupted; returns Ok only for a clean Ctrl-C.
pub async fn run(target: &Target, json: bool) -> Result<(), Failure> {
    let mut stream = client::events(target).await?;
    if !json {
        note(&format!("watching meshd at {target}; Ctrl-C to stop"));
    }
    loop {
        let next = tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            next = stream.message() => next,
        };
        let event = match next {
            Ok(Some(event)) => event,
            Ok(None) => {
                return Err(Failure::Unreachable(format!(
                    "meshd at {target} ended the event stream (stopped?)"
                )));
            }
            Err(status) => {
                return Err(Failure::Unreachable(format!(
                    "event stream from {target} broke: {}",
                    status.message()
                )));
            }
        };
        let sequence = event.sequence;
        let text = match Event::try_from(event) {
            Ok(event) => line(&event, sequence, json),
            Err(err) => {
                note(&format!("skipping a malformed event from {target}: {err}"));
                continue;
            }
        };
        let mut stdout = std::io::stdout().lock();
        // A closed pipe (`meshctl watch | head`) ends the watch quietly.
        if writeln!(stdout, "{text}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use meshd_domain::fixtures::{id, wall_ms};
    use meshd_domain::{Blame, EventKind, LinkEnd, LinkState, LinkVerdict};

    use super::*;

    fn event() -> Event {
        Event {
            at: wall_ms(123),
            observer: id("a"),
            kind: EventKind::LinkDown,
            subject: "b <-> c".into(),
            summary: "link b <-> c is down: b: no reply for 700ms".into(),
            detail: None,
        }
    }

    #[test]
    fn human_lines_carry_time_observer_kind_and_summary() {
        assert_eq!(
            line(&event(), 7, false),
            "2027-01-15T08:00:00.123Z  a        link_down        link b <-> c is down: b: no reply for 700ms"
        );
    }

    #[test]
    fn an_event_time_outside_1970_to_9999_does_not_panic() {
        let mut early = event();
        early.at = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
        assert!(line(&early, 7, false).starts_with("out of range"));
        let doc: serde_json::Value = serde_json::from_str(&line(&early, 7, true)).expect("json");
        assert_eq!(doc["at"], "out of range");
    }

    #[test]
    fn json_lines_are_one_object_each() {
        let doc: serde_json::Value = serde_json::from_str(&line(&event(), 7, true)).expect("json");
        assert_eq!(doc["kind"], "link_down");
        assert_eq!(doc["observer"], "a");
        assert_eq!(doc["subject"], "b <-> c");
        assert_eq!(doc["at"], "2027-01-15T08:00:00.123Z");
        assert_eq!(doc["sequence"], 7);
        assert!(
            doc.get("blame").is_none(),
            "no blame without a link verdict"
        );
    }

    #[test]
    fn json_link_events_say_whom_they_blame() {
        let mut blamed = event();
        blamed.detail = Some(EventDetail::Link(LinkVerdict {
            a: LinkEnd::node_only(id("b")),
            b: LinkEnd::node_only(id("c")),
            state: LinkState::Down,
            since: blamed.at,
            evidence: Vec::new(),
            blame: Blame::Node,
            blamed_node: Some(id("c")),
            recent_changes: 0,
            flapping: false,
            fix: None,
        }));
        let doc: serde_json::Value = serde_json::from_str(&line(&blamed, 7, true)).expect("json");
        assert_eq!(doc["blame"], "node");
        assert_eq!(doc["link"]["state"], "down");
        assert_eq!(doc["link"]["blamed_node"], "c");
    }

    #[test]
    fn a_json_snapshot_carries_the_whole_status() {
        let mut status = meshd_domain::fixtures::empty_status("a", wall_ms(123));
        status.quorum.has_quorum = true;
        let mut snapshot = event();
        snapshot.kind = meshd_domain::EventKind::Snapshot;
        snapshot.detail = Some(EventDetail::Snapshot(Box::new(status)));
        let doc: serde_json::Value = serde_json::from_str(&line(&snapshot, 7, true)).expect("json");
        assert_eq!(doc["kind"], "snapshot");
        assert_eq!(doc["status"]["node"], "a");
        assert_eq!(doc["status"]["quorum"]["has_quorum"], true);
        assert!(doc.get("link").is_none());
    }
}
