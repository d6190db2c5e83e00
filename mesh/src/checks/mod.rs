//! The platform checks: each a name, a status, the facts behind it and the
//! step that fixes it.
//!
//! A fact that could not be seen never decides a check: a finding that
//! needs it is Skipped with the blind spot as evidence, never a pass or a
//! fail. So replaying a bundle with a capture removed can only leave a
//! check as it was or make it Skipped (`tests/capture_removal.rs` holds
//! every scenario to that).

mod bridge;
mod firewall;
mod links;
mod mesh;
mod power;
mod rdma;

use std::collections::BTreeMap;

use meshd_domain::NodeId;
use meshd_domain::facts::{Cable, CheckResult, CheckStatus, NodeFacts, OsKind, PeerFact, PortFact};

use super::models::{Model, ModelTable};
use super::views::{PeerView, PeerViews, agreed_model, peer_views};

/// Every check of one node, in a fixed order, from its own facts alone (the
/// daemon runs these on itself).
pub fn node_checks(node: &NodeId, facts: &NodeFacts, models: &ModelTable) -> Vec<CheckResult> {
    node_checks_seen_by_peers(node, facts, &[], models)
}

/// Every check of one node, with what the far ends of its cables see of it
/// filling in its own unknowns (its model, its RDMA state); never
/// overriding what it captured itself.
pub fn node_checks_seen_by_peers(
    node: &NodeId,
    facts: &NodeFacts,
    views: &[PeerView],
    models: &ModelTable,
) -> Vec<CheckResult> {
    let node_facts = NodeView {
        facts,
        views,
        models,
    };
    let on_node = |name| Check::new(name, Some(node.clone()));
    let mut results = vec![
        rdma::rdma_enabled(on_node("rdma_enabled"), &node_facts),
        rdma::rdma_port_active(on_node("rdma_port_active"), &node_facts),
        links::link_addressed(on_node("link_addressed"), facts),
        rdma::gid_matches_address(on_node("gid_matches_address"), facts),
    ];
    let thunderbolt_only: [(&str, ThunderboltCheck); 3] = [
        ("link_speed", links::link_speed),
        (
            "thunderbolt_bridge_inactive",
            bridge::thunderbolt_bridge_inactive,
        ),
        ("port_usable", links::port_usable),
    ];
    for (name, check) in thunderbolt_only {
        results.push(if facts.os == OsKind::Macos {
            check(on_node(name), &node_facts)
        } else {
            let reason = format!(
                "{} node: no Thunderbolt ports; this check applies to macOS",
                facts.os
            );
            on_node(name).skipped(reason, facts)
        });
    }
    let name = "firewall_allows_meshd";
    results.push(if facts.os == OsKind::Macos {
        firewall::firewall_allows_meshd(on_node(name), facts)
    } else {
        let reason = format!(
            "{} node: the Application Firewall is macOS's; this check applies to macOS",
            facts.os
        );
        on_node(name).skipped(reason, facts)
    });
    // Settings that drift: re-read with every facts read.
    let macos_settings: [(&str, ThunderboltCheck, &str); 3] = [
        (
            "power_settings",
            power::power_settings,
            "no pmset power settings",
        ),
        (
            "link_address_static",
            |check, node| links::link_address_static(check, node.facts),
            "cable addresses are not read from network services",
        ),
        (
            "thunderbolt_bridge_service_off",
            bridge::thunderbolt_bridge_service_off,
            "no Thunderbolt Bridge service",
        ),
    ];
    for (name, check, absent) in macos_settings {
        results.push(if facts.os == OsKind::Macos {
            check(on_node(name), &node_facts)
        } else {
            let reason = format!("{} node: {absent}; this check applies to macOS", facts.os);
            on_node(name).skipped(reason, facts)
        });
    }
    results
}

/// The cable map and every check of nodes read together without a daemon
/// (`meshctl doctor` on this host or on bundles): each node's own checks,
/// with what its peers see of it, and the mesh-wide ones when there is
/// more than one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    pub cables: Vec<Cable>,
    pub node_checks: BTreeMap<NodeId, Vec<CheckResult>>,
    pub mesh_checks: Vec<CheckResult>,
}

impl Diagnosis {
    /// Every check: each node's in node order, then the mesh's.
    pub fn all_checks(&self) -> impl Iterator<Item = &CheckResult> {
        self.node_checks.values().flatten().chain(&self.mesh_checks)
    }
}

pub fn diagnose(facts: &BTreeMap<NodeId, NodeFacts>, models: &ModelTable) -> Diagnosis {
    let several = facts.len() > 1;
    let cables = if several {
        super::cables::cable_map(facts, &[])
    } else {
        Vec::new()
    };
    let views = peer_views(facts, &cables);
    let node_checks = facts
        .iter()
        .map(|(node, node_facts)| {
            let seen = views.get(node).map_or(&[][..], Vec::as_slice);
            (
                node.clone(),
                node_checks_seen_by_peers(node, node_facts, seen, models),
            )
        })
        .collect();
    let mesh_checks = if several {
        let members: Vec<NodeId> = facts.keys().cloned().collect();
        mesh_checks(&members, facts, &cables, models)
    } else {
        Vec::new()
    };
    Diagnosis {
        cables,
        node_checks,
        mesh_checks,
    }
}

/// Every check of the whole mesh (`node` = None), in a fixed order.
pub fn mesh_checks(
    members: &[NodeId],
    facts: &BTreeMap<NodeId, NodeFacts>,
    cables: &[Cable],
    models: &ModelTable,
) -> Vec<CheckResult> {
    let members: Vec<&NodeId> = {
        let mut seen = std::collections::BTreeSet::new();
        members.iter().filter(|m| seen.insert(*m)).collect()
    };
    let views: PeerViews = peer_views(facts, cables);
    let mesh = mesh::Mesh {
        members: &members,
        facts,
        cables,
        models,
        views: &views,
    };
    vec![
        mesh.full_mesh_cabled(),
        mesh.cable_peers_known(),
        mesh.link_subnets_isolated(),
        mesh.same_os_version(),
        mesh.mesh_size(),
        mesh.port_budget(),
        mesh.peer_views_agree(),
    ]
}

type ThunderboltCheck = fn(Check, &NodeView) -> CheckResult;

/// A node's facts with what its peers see of it.
struct NodeView<'a> {
    facts: &'a NodeFacts,
    views: &'a [PeerView],
    models: &'a ModelTable,
}

impl NodeView<'_> {
    /// Its model from the table: by its own `hw.model`, else by the model
    /// its peers agree on (named as theirs in the result).
    fn model(&self) -> Result<(&Model, Option<String>), String> {
        model_with_views(self.facts, self.views, self.models)
    }
}

/// A node's model from the table, its own identifier first, else the one
/// every peer's view agrees on, with that source named.
fn model_with_views<'m>(
    facts: &NodeFacts,
    views: &[PeerView],
    models: &'m ModelTable,
) -> Result<(&'m Model, Option<String>), String> {
    let (identifier, source) = if facts.model.is_empty() {
        match agreed_model(views) {
            Some((model, view)) => (model, Some(format!("as {} sees it", view.viewer()))),
            None => return Err("hardware model unknown".to_owned()),
        }
    } else {
        (facts.model.as_str(), None)
    };
    models
        .by_identifier(identifier)
        .map(|model| (model, source))
        .ok_or_else(|| {
            format!(
                "model {identifier} is not in the model table (known: {})",
                models.ids().join(", ")
            )
        })
}

/// Findings of one check: the worst status wins, Fail over Warn over
/// Skipped over Pass, so a check passes only when every finding passes.
struct Check {
    name: &'static str,
    node: Option<NodeId>,
    findings: Vec<(CheckStatus, String)>,
    fixes: Vec<String>,
}

impl Check {
    fn new(name: &'static str, node: Option<NodeId>) -> Self {
        Self {
            name,
            node,
            findings: Vec::new(),
            fixes: Vec::new(),
        }
    }

    fn pass(&mut self, evidence: impl Into<String>) {
        self.findings.push((CheckStatus::Pass, evidence.into()));
    }

    fn blind(&mut self, evidence: impl Into<String>) {
        self.findings.push((CheckStatus::Skipped, evidence.into()));
    }

    fn warn(&mut self, evidence: impl Into<String>, fix: impl Into<String>) {
        self.flag(CheckStatus::Warn, evidence.into(), fix.into());
    }

    fn fail(&mut self, evidence: impl Into<String>, fix: impl Into<String>) {
        self.flag(CheckStatus::Fail, evidence.into(), fix.into());
    }

    fn flag(&mut self, status: CheckStatus, evidence: String, fix: String) {
        self.findings.push((status, evidence));
        if !fix.is_empty() && !self.fixes.contains(&fix) {
            self.fixes.push(fix);
        }
    }

    /// The ports to check (see [`linked_ports`]); none, or ports whose
    /// cabling is unknown, are findings of their own.
    fn linked_ports<'f>(&mut self, facts: &'f NodeFacts) -> Vec<&'f PortFact> {
        let linked = linked_ports(facts);
        match (facts.os, unknown_cabling(facts)) {
            (OsKind::Macos, Some(unknown)) => self.blind(unknown),
            _ if linked.is_empty() => self.blind(no_linked_port(facts)),
            _ => {}
        }
        linked
    }

    /// The whole node check could not be evaluated.
    fn skipped(mut self, reason: impl Into<String>, facts: &NodeFacts) -> CheckResult {
        self.findings = vec![(CheckStatus::Skipped, reason.into())];
        self.fixes.clear();
        self.finish_on(facts)
    }

    fn finish(self) -> CheckResult {
        let severity = |s: CheckStatus| match s {
            CheckStatus::Pass => 0,
            CheckStatus::Skipped => 1,
            CheckStatus::Warn => 2,
            CheckStatus::Fail => 3,
        };
        let status = self
            .findings
            .iter()
            .map(|(s, _)| *s)
            .max_by_key(|s| severity(*s))
            .unwrap_or(CheckStatus::Skipped);
        let fix = match status {
            CheckStatus::Warn | CheckStatus::Fail => self.fixes.join("\n"),
            CheckStatus::Pass | CheckStatus::Skipped => String::new(),
        };
        CheckResult {
            name: self.name.to_owned(),
            node: self.node,
            status,
            evidence: self.findings.into_iter().map(|(_, e)| e).collect(),
            fix,
        }
    }

    /// Finishes a node check; a Skipped one carries the node's blind spots.
    fn finish_on(self, facts: &NodeFacts) -> CheckResult {
        let mut result = self.finish();
        if result.status == CheckStatus::Skipped {
            result.evidence.extend(
                facts
                    .blind_spots
                    .iter()
                    .map(|spot| format!("blind spot: {spot}")),
            );
        }
        result
    }
}

/// "Thunderbolt 2 (en6)", "rdma_en3" for a port only an RDMA device names.
fn port_label(port: &PortFact) -> String {
    match (port.name.as_str(), port.iface.as_str()) {
        ("", "") => port.rdma_device.clone(),
        ("", iface) => iface.to_owned(),
        (name, "") => name.to_owned(),
        (name, iface) => format!("{name} ({iface})"),
    }
}

/// "MacBook Pro (Mac17,6)", falling back to the domain UUID.
fn peer_label(peer: &PeerFact) -> String {
    match (peer.name.as_str(), peer.model.as_str()) {
        ("", "") if peer.domain_uuid.is_empty() => "a Mac".to_owned(),
        ("", "") => format!("Mac with domain {}", peer.domain_uuid),
        (name, "") => name.to_owned(),
        ("", model) => model.to_owned(),
        (name, model) => format!("{name} ({model})"),
    }
}

/// The ports whose links the checks look at: on macOS the Thunderbolt
/// ports cabled to a Mac, elsewhere the ports of RDMA devices.
fn linked_ports(facts: &NodeFacts) -> Vec<&PortFact> {
    facts
        .ports
        .iter()
        .filter(|p| match facts.os {
            OsKind::Macos => p.cabled_to_mac() == Some(true),
            OsKind::Linux | OsKind::Other => !p.rdma_device.is_empty() || p.rdma.is_some(),
        })
        .collect()
}

/// On macOS, what keeps the list of cabled ports from being complete:
/// ports the Thunderbolt report does not describe, or no report at all.
/// With every port known, a port that only an RDMA device names is one of
/// them seen again (its receptacle unknown), and adds no doubt.
fn unknown_cabling(facts: &NodeFacts) -> Option<String> {
    let unknown: Vec<String> = facts
        .ports
        .iter()
        .filter(|p| !(facts.ports_complete && p.receptacle == 0 && p.name.is_empty()))
        .filter(|p| p.cabled_to_mac().is_none())
        .map(port_label)
        .collect();
    if !unknown.is_empty() {
        Some(format!(
            "whether {} {} cabled to a Mac is unknown (not in a Thunderbolt report)",
            unknown.join(", "),
            if unknown.len() == 1 { "is" } else { "are" }
        ))
    } else if !facts.ports_complete {
        Some(
            "not every Thunderbolt port is known (no complete Thunderbolt report or hardware-port \
             list)"
                .to_owned(),
        )
    } else {
        None
    }
}

fn no_linked_port(facts: &NodeFacts) -> &'static str {
    match facts.os {
        OsKind::Macos => "no Thunderbolt port is cabled to a Mac",
        OsKind::Linux | OsKind::Other => "no RDMA port is known",
    }
}
