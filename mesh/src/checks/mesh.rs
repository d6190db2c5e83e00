//! The checks of the whole mesh: cabling, subnets, versions, size, the
//! port budget, and whether the two ends of each cable agree on what they
//! see of each other.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;

use meshd_domain::NodeId;
use meshd_domain::facts::{
    Cable, CableEnd, CheckResult, Ipv4Cidr, NodeFacts, OsKind, PortFact, PortSetup,
};

use super::{Check, model_with_views, peer_label, port_label, unknown_cabling};
use crate::JACCL_MAX_RANKS;
use crate::cables::{cable_label, end_label};
use crate::gbps;
use crate::models::ModelTable;
use crate::views::{PeerView, PeerViews};

pub(super) struct Mesh<'a> {
    pub(super) members: &'a [&'a NodeId],
    pub(super) facts: &'a BTreeMap<NodeId, NodeFacts>,
    pub(super) cables: &'a [Cable],
    pub(super) models: &'a ModelTable,
    pub(super) views: &'a PeerViews,
}

const RECAPTURE_FIX: &str = "capture both nodes again (`meshctl bundle` on each): one capture is \
     stale or partial, or a Mac changed (RDMA enabled or disabled, a cable moved) since";

/// A cable end as its node reports it: the node's facts, the port and
/// the address the cable map gave the end.
struct EndFacts<'f> {
    facts: &'f NodeFacts,
    port: &'f PortFact,
    cidr: Ipv4Cidr,
}

impl EndFacts<'_> {
    /// Self-assigned by exo's setup, which JACCL works on.
    fn exo_self_assigned(&self) -> bool {
        super::links::is_link_local(&self.cidr)
            && matches!(self.facts.port_setup(self.port), PortSetup::Exo { .. })
    }
}

impl Mesh<'_> {
    fn pairs(&self) -> impl Iterator<Item = (&NodeId, &NodeId)> {
        self.members.iter().enumerate().flat_map(move |(i, a)| {
            self.members[i + 1..]
                .iter()
                .map(move |b| if a <= b { (*a, *b) } else { (*b, *a) })
        })
    }

    fn cable_between(&self, a: &NodeId, b: &NodeId) -> Option<&Cable> {
        self.cables
            .iter()
            .find(|c| c.end_at(a).is_some() && c.end_at(b).is_some())
    }

    fn views_of(&self, node: &NodeId) -> &[PeerView] {
        self.views.get(node).map_or(&[][..], Vec::as_slice)
    }

    /// Why which of `node`'s ports are cabled is not fully known; `None`
    /// when it is, or for a Linux node, whose cables come from config.
    fn cabling_unknown(&self, node: &NodeId) -> Option<String> {
        let facts = self.facts.get(node)?;
        match facts.os {
            OsKind::Macos => unknown_cabling(facts),
            OsKind::Linux => None,
            OsKind::Other => Some("its OS and ports are unknown".to_owned()),
        }
    }

    /// Ports known to have nothing on them, the ones the model prefers
    /// first.
    fn free_ports(&self, node: &NodeId) -> VecDeque<String> {
        let Some(facts) = self.facts.get(node) else {
            return VecDeque::new();
        };
        let preference: Vec<String> = model_with_views(facts, self.views_of(node), self.models)
            .map(|(m, _)| {
                m.ports_by_preference()
                    .into_iter()
                    .map(|p| p.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        let rank = |name: &str| {
            preference
                .iter()
                .position(|p| p == name)
                .unwrap_or(preference.len())
        };
        let mut free: Vec<&PortFact> = facts
            .ports
            .iter()
            .filter(|p| p.linked == Some(false) && !p.name.is_empty())
            .collect();
        free.sort_by_key(|p| rank(&p.name));
        free.into_iter().map(|p| p.name.clone()).collect()
    }

    /// `node`'s ports cabled to a Mac that no cable accounts for.
    fn unmatched_peers(&self, node: &NodeId) -> Vec<&PortFact> {
        let Some(facts) = self.facts.get(node) else {
            return Vec::new();
        };
        facts
            .ports
            .iter()
            .filter(|p| p.peer.is_some())
            .filter(|p| {
                !self.cables.iter().any(|c| {
                    c.end_at(node)
                        .is_some_and(|end| !end.port.is_empty() && end.port == p.name)
                })
            })
            .collect()
    }

    /// `node`'s ports cabled to a Mac that no cable explains and whose Mac
    /// cannot be identified (its domain UUID was not read): any member
    /// with a port no cable explains may be on the other end.
    fn unidentified_peers(&self, node: &NodeId) -> Vec<&PortFact> {
        self.unmatched_peers(node)
            .into_iter()
            .filter(|p| {
                p.peer
                    .as_ref()
                    .is_some_and(|peer| peer.domain_uuid.is_empty())
            })
            .collect()
    }

    pub(super) fn full_mesh_cabled(&self) -> CheckResult {
        let mut check = Check::new("full_mesh_cabled", None);
        let mut free: BTreeMap<&NodeId, VecDeque<String>> = self
            .members
            .iter()
            .map(|m| (*m, self.free_ports(m)))
            .collect();
        for (a, b) in self.pairs() {
            if let Some(cable) = self.cable_between(a, b) {
                check.pass(cable_label(cable));
                continue;
            }
            let unknown: Vec<&str> = [a, b]
                .into_iter()
                .filter(|n| !self.facts.contains_key(*n))
                .map(NodeId::as_str)
                .collect();
            if !unknown.is_empty() {
                check.blind(format!(
                    "{a} ↔ {b}: no cable known, and the facts of {} are unknown",
                    unknown.join(", ")
                ));
                continue;
            }
            let incomplete: Vec<(&NodeId, String)> = [a, b]
                .into_iter()
                .filter_map(|n| Some((n, self.cabling_unknown(n)?)))
                .collect();
            if !incomplete.is_empty() {
                let (blind_node, why) = &incomplete[0];
                let other = if *blind_node == a { b } else { a };
                let leads: Vec<String> = self
                    .unmatched_peers(other)
                    .into_iter()
                    .map(|p| {
                        format!(
                            "{other}/{} leads to {} that matches no known port",
                            port_label(p),
                            p.peer.as_ref().map(peer_label).unwrap_or_default()
                        )
                    })
                    .collect();
                let hint = if leads.is_empty() {
                    String::new()
                } else {
                    format!("; {}: possibly {blind_node}", leads.join("; "))
                };
                check.blind(format!(
                    "{a} ↔ {b}: no cable known, and on {blind_node} {why}{hint}"
                ));
                continue;
            }
            // A cable whose far Mac is not identified may be this one, if
            // the other end also has a Mac no cable explains: unknown.
            let unidentified: Vec<String> = [a, b]
                .into_iter()
                .flat_map(|n| {
                    self.unidentified_peers(n).into_iter().map(move |p| {
                        format!(
                            "{n}/{} leads to {} that cannot be identified (its domain UUID was \
                             not read)",
                            port_label(p),
                            p.peer.as_ref().map(peer_label).unwrap_or_default()
                        )
                    })
                })
                .collect();
            let both_unexplained =
                !self.unmatched_peers(a).is_empty() && !self.unmatched_peers(b).is_empty();
            if both_unexplained && !unidentified.is_empty() {
                check.blind(format!(
                    "{a} ↔ {b}: no cable known, but {}: possibly this one",
                    unidentified.join("; ")
                ));
                continue;
            }
            let mut side = |node: &NodeId| {
                free.get_mut(node)
                    .and_then(VecDeque::pop_front)
                    .map_or_else(|| node.to_string(), |port| format!("{node}/{port}"))
            };
            let missing = format!("{} ↔ {}", side(a), side(b));
            check.fail(
                format!("{missing}: no cable"),
                format!("connect a Thunderbolt 5 cable {missing} (`meshctl plan` prints a full cabling table)"),
            );
        }
        if self.members.len() < 2 {
            check.pass(format!(
                "{} member(s): no pair to cable",
                self.members.len()
            ));
        }
        check.finish()
    }

    pub(super) fn cable_peers_known(&self) -> CheckResult {
        let mut check = Check::new("cable_peers_known", None);
        let member_uuids: BTreeSet<&str> = self
            .members
            .iter()
            .filter_map(|m| self.facts.get(*m))
            .flat_map(|f| f.ports.iter().map(|p| p.domain_uuid.as_str()))
            .filter(|u| !u.is_empty())
            .collect();
        // Members one of whose ports could be the far end of a cable that
        // matches nothing.
        let not_all_seen: Vec<&str> = self
            .members
            .iter()
            .filter(|m| !self.facts.contains_key(**m) || self.cabling_unknown(m).is_some())
            .map(|m| m.as_str())
            .collect();
        for member in self.members {
            if !self.facts.contains_key(*member) {
                check.blind(format!("{member}: facts unknown"));
                continue;
            }
            if let Some(why) = self.cabling_unknown(member) {
                check.blind(format!("{member}: {why}"));
            }
            for port in self.unmatched_peers(member) {
                let Some(peer) = &port.peer else { continue };
                if member_uuids.contains(peer.domain_uuid.as_str()) {
                    continue;
                }
                let label = format!("{member}/{}", port_label(port));
                if peer.domain_uuid.is_empty() {
                    check.blind(format!(
                        "{label} is cabled to {} whose report shows no domain UUID, so which \
                         Mac it is is unknown",
                        peer_label(peer)
                    ));
                    continue;
                }
                let others: Vec<&str> = not_all_seen
                    .iter()
                    .copied()
                    .filter(|m| *m != member.as_str())
                    .collect();
                if !others.is_empty() {
                    check.blind(format!(
                        "{label} is cabled to {} (domain {}), which matches no known port; it \
                         may be {} (not all of whose ports are known)",
                        peer_label(peer),
                        peer.domain_uuid,
                        others.join(", ")
                    ));
                    continue;
                }
                check.warn(
                    format!(
                        "{label} is cabled to a Mac that is not a member: {} (domain {})",
                        peer_label(peer),
                        peer.domain_uuid
                    ),
                    "add that Mac to meshd's members, or unplug the cable",
                );
            }
        }
        if check.findings.is_empty() {
            check.pass("every cabled port leads to a member");
        }
        check.finish()
    }

    /// The port and address (with its prefix) of a cable end, from its
    /// node's facts.
    fn end_facts(&self, end: &CableEnd) -> Result<EndFacts<'_>, String> {
        let address = end
            .address
            .ok_or_else(|| format!("{} has no address", end_label(end)))?;
        self.facts
            .get(&end.node)
            .and_then(|facts| {
                facts
                    .ports
                    .iter()
                    .filter(|p| {
                        p.name == end.port || (!end.iface.is_empty() && p.iface == end.iface)
                    })
                    .find_map(|port| {
                        let cidr = port.addresses().iter().find(|c| c.address == address)?;
                        Some(EndFacts {
                            facts,
                            port,
                            cidr: *cidr,
                        })
                    })
            })
            .ok_or_else(|| format!("the netmask of {address} on {} is unknown", end_label(end)))
    }

    pub(super) fn link_subnets_isolated(&self) -> CheckResult {
        let mut check = Check::new("link_subnets_isolated", None);
        let link_local = Ipv4Cidr {
            address: Ipv4Addr::new(169, 254, 0, 0),
            prefix: 16,
        };
        let fix = "give each cable its own /30 on both ends: `sudo networksetup -setmanual \
                   \"<Thunderbolt port>\" <address> 255.255.255.252` (`meshctl plan` assigns them)";
        let mut per_node: BTreeMap<&NodeId, Vec<(String, EndFacts<'_>)>> = BTreeMap::new();
        for cable in self.cables {
            let label = cable_label(cable);
            let (a_end, b_end) = match (self.end_facts(&cable.a), self.end_facts(&cable.b)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(why), _) | (_, Err(why)) => {
                    check.blind(format!("{label}: {why}"));
                    continue;
                }
            };
            let (a, b) = (a_end.cidr, b_end.cidr);
            let local = link_local.contains(a.address) && link_local.contains(b.address);
            if !a.contains(b.address) || !b.contains(a.address) {
                check.fail(format!("{label}: {a} and {b} are not in one subnet"), fix);
            } else if !local && a.prefix.min(b.prefix) < 30 {
                check.fail(
                    format!(
                        "{label}: {a} / {b} is wider than /30 and can take in other cables' addresses"
                    ),
                    fix,
                );
            } else {
                check.pass(format!("{label}: {}/{}", a.network(), a.prefix));
            }
            per_node
                .entry(&cable.a.node)
                .or_default()
                .push((label.clone(), a_end));
            per_node
                .entry(&cable.b.node)
                .or_default()
                .push((label, b_end));
        }
        for (node, links) in &per_node {
            for (i, (first, x_end)) in links.iter().enumerate() {
                for (second, y_end) in &links[i + 1..] {
                    let (x, y) = (x_end.cidr, y_end.cidr);
                    if !x.overlaps(y) {
                        continue;
                    }
                    if x_end.exo_self_assigned() && y_end.exo_self_assigned() {
                        // The same fact link_address_static passes.
                        check.pass(format!(
                            "{node}: {first} and {second} are both self-assigned (169.254/16) by \
                             exo's setup: JACCL reaches each peer by its port's RDMA GID; IP to \
                             them is not pinned to one cable"
                        ));
                    } else if link_local.contains(x.address) && link_local.contains(y.address) {
                        check.warn(
                            format!(
                                "{node}: {first} and {second} are both link-local (169.254/16): \
                                 JACCL works (it reaches each peer by its port's RDMA GID), but \
                                 IP traffic to either peer may leave through the wrong port"
                            ),
                            [x_end, y_end]
                                .iter()
                                .map(|end| {
                                    super::links::address_fix(end.facts, end.port, "<address>", 30)
                                })
                                .collect::<Vec<_>>()
                                .join("\n"),
                        );
                    } else {
                        check.fail(
                            format!(
                                "{node}: {first} ({x}) and {second} ({y}) overlap: one peer is \
                                 routed through the other cable's interface"
                            ),
                            fix,
                        );
                    }
                }
            }
        }
        if check.findings.is_empty() {
            check.blind("no cable known");
        }
        check.finish()
    }

    pub(super) fn same_os_version(&self) -> CheckResult {
        let mut check = Check::new("same_os_version", None);
        // version -> build -> nodes; an unknown build is "".
        let mut versions: BTreeMap<String, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
        for member in self.members {
            match self.facts.get(*member) {
                Some(f) if !f.os_version.is_empty() => {
                    if f.os == OsKind::Macos && f.os_build.is_empty() {
                        check.blind(format!(
                            "{member}: macOS build unknown, so a beta cannot be told from a release"
                        ));
                    }
                    versions
                        .entry(format!("{} {}", f.os, f.os_version))
                        .or_default()
                        .entry(f.os_build.as_str())
                        .or_default()
                        .push(member.as_str());
                }
                Some(_) => check.blind(format!("{member}: OS version unknown")),
                None => check.blind(format!("{member}: facts unknown")),
            }
        }
        let listed: Vec<String> = versions
            .iter()
            .flat_map(|(version, builds)| {
                builds.iter().map(move |(build, nodes)| {
                    let build = if build.is_empty() {
                        String::new()
                    } else {
                        format!(" ({build})")
                    };
                    format!("{version}{build}: {}", nodes.join(", "))
                })
            })
            .collect();
        let fix = "update every node to the same macOS version and build (System Settings > \
                   General > Software Update; leave the beta program on every node or on none); \
                   JACCL and exo expect matching versions";
        let known_builds =
            |builds: &BTreeMap<&str, Vec<&str>>| builds.keys().filter(|b| !b.is_empty()).count();
        if versions.len() > 1 {
            check.fail(format!("different versions: {}", listed.join("; ")), fix);
        } else if versions.values().any(|builds| known_builds(builds) > 1) {
            check.fail(
                format!(
                    "the same version in different builds (a beta and a release, or two \
                     betas): {}",
                    listed.join("; ")
                ),
                fix,
            );
        } else if !listed.is_empty() {
            check.pass(listed.join("; "));
        }
        check.finish()
    }

    pub(super) fn mesh_size(&self) -> CheckResult {
        let mut check = Check::new("mesh_size", None);
        let n = self.members.len();
        if n > JACCL_MAX_RANKS {
            check.fail(
                format!("{n} members; a JACCL mesh has at most {JACCL_MAX_RANKS} ranks"),
                format!(
                    "run JACCL jobs on at most {JACCL_MAX_RANKS} of these nodes \
                     (`meshctl hostfile` with {JACCL_MAX_RANKS} ranks or fewer)"
                ),
            );
        } else {
            check.pass(format!(
                "{n} members (a JACCL mesh has at most {JACCL_MAX_RANKS})"
            ));
        }
        check.finish()
    }

    pub(super) fn port_budget(&self) -> CheckResult {
        let mut check = Check::new("port_budget", None);
        let n = self.members.len();
        let needed = n.saturating_sub(1);
        for member in self.members {
            let Some(facts) = self.facts.get(*member) else {
                check.blind(format!("{member}: facts unknown"));
                continue;
            };
            if facts.os != OsKind::Macos {
                check.blind(format!(
                    "{member}: a {} node; the port budget is about Thunderbolt ports",
                    facts.os
                ));
                continue;
            }
            let (model, source) = match model_with_views(facts, self.views_of(member), self.models)
            {
                Ok(found) => found,
                Err(reason) => {
                    check.blind(format!("{member}: {reason}"));
                    continue;
                }
            };
            let identifier = match source {
                Some(source) => format!("{}, {source}", model.identifiers.join("/")),
                None => facts.model.clone(),
            };
            let total = model.ports.len();
            let usable = model.usable_port_count();
            let counts = format!(
                "{member} ({}, {identifier}): {total} Thunderbolt 5 ports, {usable} usable for \
                 RDMA; a full mesh of {n} nodes needs {needed}",
                model.id
            );
            if usable >= needed {
                check.pass(counts);
            } else if total >= needed {
                let unreliable: Vec<&str> = model
                    .ports
                    .iter()
                    .filter(|p| !p.is_usable())
                    .map(|p| p.name.as_str())
                    .collect();
                check.warn(
                    format!("{counts}, so it must also use {}", unreliable.join(", ")),
                    "expect RDMA trouble on the unreliable ports; watch rdma_port_active there",
                );
            } else {
                check.fail(
                    counts,
                    format!(
                        "use at most {} nodes in a full mesh with this model, \
                         or the ring backend (`--backend jaccl-ring`, 2 ports per node)",
                        total + 1
                    ),
                );
            }
        }
        check.finish()
    }

    /// Each cable's far end against the near end's own capture: the model,
    /// the RDMA service against `rdma_ctl`, the negotiated speeds. Agreement
    /// passes, a contradiction warns (one capture is stale or wrong), and
    /// a side that was not captured leaves its comparison unknown, also
    /// where a view filled the gap for the node's own checks.
    pub(super) fn peer_views_agree(&self) -> CheckResult {
        let mut check = Check::new("peer_views_agree", None);
        for member in self.members {
            let Some(facts) = self.facts.get(*member) else {
                check.blind(format!("{member}: facts unknown"));
                continue;
            };
            if let Some(why) = self.cabling_unknown(member) {
                check.blind(format!(
                    "{member}: {why}, so what it sees of its peers is not all known"
                ));
            }
            for view in self.views_of(member) {
                let seen = Seen {
                    viewer: view.viewer(),
                    node: member,
                };
                seen.compare(
                    &mut check,
                    "model",
                    (!view.model.is_empty()).then(|| view.model.clone()),
                    (!facts.model.is_empty()).then(|| facts.model.clone()),
                    "its own hw.model",
                );
                let state = |enabled: bool| if enabled { "enabled" } else { "disabled" }.to_owned();
                seen.compare(
                    &mut check,
                    "RDMA state (by the RDMA service it offers)",
                    view.rdma_service.map(state),
                    facts.rdma_enabled.map(state),
                    "its own rdma_ctl",
                );
                let near = facts
                    .ports
                    .iter()
                    .find(|p| p.name == view.port)
                    .map(|p| p.negotiated_speed_bps)
                    .filter(|s| *s != 0)
                    .map(gbps);
                seen.compare(
                    &mut check,
                    &format!("link speed on {}", view.port),
                    (view.speed_bps != 0).then(|| gbps(view.speed_bps)),
                    near,
                    "its own Thunderbolt report",
                );
            }
        }
        if check.findings.is_empty() {
            check.blind("no cable is seen from both ends");
        }
        check.finish()
    }
}

/// What the far end of a cable sees of a node.
struct Seen<'a> {
    viewer: String,
    node: &'a NodeId,
}

impl Seen<'_> {
    /// One fact as the far end sees it against the node's own capture.
    fn compare(
        &self,
        check: &mut Check,
        what: &str,
        far: Option<String>,
        near: Option<String>,
        own: &str,
    ) {
        let Seen { viewer, node } = self;
        match (far, near) {
            (Some(far), Some(near)) if far == near => {
                check.pass(format!(
                    "{viewer} sees {node}'s {what} as {far}, as {own} says"
                ));
            }
            (Some(far), Some(near)) => check.warn(
                format!("{viewer} sees {node}'s {what} as {far}, but {own} says {near}"),
                RECAPTURE_FIX,
            ),
            (Some(far), None) => check.blind(format!(
                "{viewer} sees {node}'s {what} as {far}; {own} was not captured, so they cannot \
                 be compared (the view fills it in for {node}'s own checks)"
            )),
            (None, _) => check.blind(format!(
                "{viewer}'s report does not show {node}'s {what}, so it cannot be compared with \
                 {own}"
            )),
        }
    }
}
