//! Every node's verdict changes as they happen: one `meshctl watch --json`
//! per node, in its namespace. Events carry the daemon's own timestamp
//! (milliseconds), and all nodes share the host clock, so the benchmarks
//! time verdicts from them instead of from how often they poll.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use crate::command::CommandError;
use crate::lab::{Lab, LabError};

/// One line of `meshctl watch --json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    #[serde(deserialize_with = "rfc3339")]
    pub at: SystemTime,
    pub observer: String,
    pub kind: String,
    pub subject: String,
    pub summary: String,
    /// Whom a link verdict blames (`link`, `node`); `None` on other events.
    #[serde(default)]
    pub blame: Option<String>,
}

fn rfc3339<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_rfc3339(&text).map_err(serde::de::Error::custom)
}

impl Event {
    /// A verdict that says a link or a node is not healthy.
    pub fn is_link_or_node_verdict(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "link_down" | "link_degraded" | "link_flapping" | "node_down" | "node_suspect"
        )
    }

    /// A node verdict (suspect or down) about node `id`, or a link verdict
    /// that blames a node, not the link.
    pub fn blames_a_node(&self, id: &str) -> bool {
        match self.kind.as_str() {
            "node_down" | "node_suspect" => self.subject == id,
            _ => self.blame.as_deref() == Some("node") && self.involves(id),
        }
    }

    /// Whether the event is about the link between `x` and `y` (subjects
    /// read `x/IFACE <-> y/IFACE`).
    pub fn is_about_link(&self, x: &str, y: &str) -> bool {
        let ends: Vec<&str> = self
            .subject
            .split(" <-> ")
            .filter_map(|end| end.split('/').next())
            .collect();
        ends.len() == 2 && ends.contains(&x) && ends.contains(&y)
    }

    /// Whether the event names node `id` as a link end or as the node.
    pub fn involves(&self, id: &str) -> bool {
        self.subject == id
            || self
                .subject
                .split(" <-> ")
                .any(|end| end.split('/').next() == Some(id))
    }
}

/// The watchers of some nodes; killed when dropped.
#[derive(Debug)]
pub struct Events {
    children: Vec<Child>,
    sender: Sender<Event>,
    pub receiver: Receiver<Event>,
}

impl Events {
    pub fn new() -> Self {
        let (sender, receiver) = channel();
        Self {
            children: Vec::new(),
            sender,
            receiver,
        }
    }

    /// Starts watching node `id` (again, after its daemon restarted).
    pub fn watch(&mut self, lab: &Lab, id: &str) -> Result<(), LabError> {
        let ns = lab.namespace(id)?;
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(&lab.binaries.meshctl)
            .args(["watch", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| CommandError::Spawn {
                command: format!("ip netns exec {ns} meshctl watch --json"),
                source,
            })?;
        let stdout = child.stdout.take();
        let sender = self.sender.clone();
        std::thread::spawn(move || {
            let Some(stdout) = stdout else { return };
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<Event>(&line)
                    && sender.send(event).is_err()
                {
                    return;
                }
            }
        });
        self.children.push(child);
        Ok(())
    }

    /// Waits at most `limit` for the next event.
    pub fn next(&self, limit: Duration) -> Option<Event> {
        self.receiver.recv_timeout(limit).ok()
    }

    /// Every event already received.
    pub fn drain(&self) -> Vec<Event> {
        self.receiver.try_iter().collect()
    }
}

impl Default for Events {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_meshctl_watch_lines() {
        let line = r#"{"at":"2026-11-29T17:02:11.482Z","observer":"d","kind":"link_down","subject":"a/mesh-b <-> b/mesh-a","summary":"s"}"#;
        let event: Event = serde_json::from_str(line).unwrap();
        assert!(event.is_link_or_node_verdict());
        assert!(event.is_about_link("b", "a"));
        assert!(!event.is_about_link("a", "c"));
        assert!(event.involves("a") && !event.involves("d"));
        let at = event.at.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(at.subsec_millis(), 482);
    }
}
