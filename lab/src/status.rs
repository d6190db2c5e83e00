//! The parts of `meshctl status --json` (the stable contract in docs/CLI.md)
//! the lab reads. Unknown fields are ignored: the contract only adds fields.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    /// The answering node.
    pub node: String,
    pub healthy: bool,
    pub incarnation: String,
    /// This node's meshd release.
    #[serde(default)]
    pub version: String,
    pub quorum: Quorum,
    pub nodes: Vec<NodeView>,
    pub links: Vec<LinkView>,
    pub alarms: Vec<AlarmView>,
    /// The distributed jobs the node sees (absent before meshd knew jobs).
    #[serde(default)]
    pub jobs: Vec<JobView>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct JobView {
    pub job: String,
    pub hung: Option<String>,
    pub ranks: Vec<RankView>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RankView {
    pub rank: u32,
    pub node: String,
    pub pid: u32,
    pub condition: String,
    pub busy: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Quorum {
    pub has_quorum: bool,
    pub members: Vec<String>,
    pub leader: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NodeView {
    pub id: String,
    pub state: String,
    #[serde(default)]
    pub evidence: Vec<String>,
    /// Which boot of its host the node is in; `None` when unknown.
    #[serde(default)]
    pub boot: Option<BootView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BootView {
    pub id: Option<String>,
    pub booted_at: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LinkView {
    pub a: String,
    pub b: String,
    pub state: String,
    pub blame: String,
    pub blamed_node: Option<String>,
    #[serde(default)]
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AlarmView {
    pub kind: String,
    pub node: String,
    pub severity: String,
    pub subject: String,
    pub summary: String,
    #[serde(default)]
    pub evidence: Vec<String>,
}

impl Status {
    pub fn parse(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// The link between `x` and `y`, whichever way round it is listed.
    pub fn link(&self, x: &str, y: &str) -> Option<&LinkView> {
        self.links
            .iter()
            .find(|l| (l.a == x && l.b == y) || (l.a == y && l.b == x))
    }

    pub fn node_state(&self, id: &str) -> Option<&str> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| n.state.as_str())
    }

    /// Quorum, every node up and every link up (alarms aside).
    pub fn all_up(&self) -> bool {
        self.quorum.has_quorum
            && self.nodes.iter().all(|n| n.state == "up")
            && self.links.iter().all(|l| l.state == "up")
    }

    /// The boot this view holds for node `id`.
    pub fn boot_of(&self, id: &str) -> Option<&BootView> {
        self.nodes.iter().find(|n| n.id == id)?.boot.as_ref()
    }

    pub fn has_alarm(&self, kind: &str, node: &str) -> bool {
        self.alarms.iter().any(|a| a.kind == kind && a.node == node)
    }

    /// Links not up, as `a-b state blame`, for messages.
    pub fn summary(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}={}", n.id, n.state))
            .collect();
        let links: Vec<String> = self
            .links
            .iter()
            .filter(|l| l.state != "up")
            .map(|l| {
                format!(
                    "{}-{} {} ({}{})",
                    l.a,
                    l.b,
                    l.state,
                    l.blame,
                    l.blamed_node
                        .as_deref()
                        .map(|n| format!(" {n}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        let alarms: Vec<String> = self
            .alarms
            .iter()
            .map(|a| format!("{}@{}", a.kind, a.node))
            .collect();
        format!(
            "[{}] quorum={} nodes {} links not up [{}] alarms [{}]",
            self.node,
            self.quorum.has_quorum,
            nodes.join(" "),
            links.join(", "),
            alarms.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example document of docs/CLI.md, with one extra field a later
    /// version might add.
    const README_EXAMPLE: &str = r#"{
      "node": "studio-1", "healthy": false, "evaluated_at": "2026-11-29T17:00:00.000Z",
      "incarnation": "1795971600000000000", "version": "0.1.0", "added_later": 1,
      "quorum": { "has_quorum": true, "members": ["studio-1"], "configured": ["studio-1"], "leader": "studio-1" },
      "nodes": [ { "id": "studio-1", "state": "up", "since": "x", "evidence": ["this node"],
                   "last_report_at": null, "cpu_saturated": false,
                   "boot": { "id": "40962879-B7EE-4F13-AF6E-E7266EF5E732", "booted_at": "x" } } ],
      "links": [ { "a": "studio-1", "b": "studio-2", "a_iface": "en2", "b_iface": null,
                   "state": "down", "blame": "link", "blamed_node": null, "since": "x", "evidence": ["e"] } ],
      "alarms": [ { "kind": "no_quorum", "node": "studio-1", "severity": "warning", "subject": "quorum",
                    "summary": "s", "evidence": ["e"], "fix": "f", "since": "x" } ]
    }"#;

    #[test]
    fn reads_the_documented_contract() {
        let status = Status::parse(README_EXAMPLE).unwrap();
        assert_eq!(status.node, "studio-1");
        assert_eq!(status.link("studio-2", "studio-1").unwrap().state, "down");
        assert_eq!(status.node_state("studio-1"), Some("up"));
        assert!(!status.all_up());
        assert!(status.has_alarm("no_quorum", "studio-1"));
        assert_eq!(
            status.summary(),
            "[studio-1] quorum=true nodes studio-1=up links not up [studio-1-studio-2 down (link)] alarms [no_quorum@studio-1]"
        );
    }
}
