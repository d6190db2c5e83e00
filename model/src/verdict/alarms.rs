//! The alarms only the merged view can raise (no quorum, a node heard on its
//! cables but not on the management network, clock skew, duplicate ids, a
//! mesh running late), and since when each of them holds.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{
    Alarm, AlarmKind, ClockOffset, NodeId, NodeState, NodeVerdict, Quorum, Severity,
};

use super::{Engine, Life, MeshInputs, name_some};
use crate::link::fmt_duration;
use crate::peers::{Path, PeerView};
use crate::time::Moment;

impl Engine {
    /// `alarm` with since when it holds (kept across evaluations) and now.
    fn stamp(&mut self, alarm: Alarm, moment: Moment) -> Alarm {
        let since = *self
            .alarm_since
            .entry((alarm.kind, alarm.node.clone()))
            .or_insert(moment.now);
        Alarm {
            since: moment.wall_of(since),
            updated: moment.wall,
            ..alarm
        }
    }

    /// The alarms only the merged view can raise: no quorum, a node heard
    /// on its cables but not on the management network, a clock off the
    /// mesh's, two daemons with one id, most of the mesh running late. Each
    /// is stamped with since when it holds, and held back while it settles
    /// (see [`Engine::settled_at`]).
    pub(super) fn engine_alarms(
        &mut self,
        inputs: &MeshInputs,
        quorum: &Quorum,
        lives: &BTreeMap<&NodeId, Life<'_>>,
        nodes: &[NodeVerdict],
        saturated: &[&NodeId],
        moment: Moment,
    ) -> Vec<Alarm> {
        let mut drafts = Vec::new();
        drafts.extend(no_quorum_alarm(quorum, &inputs.local.id, lives));
        let split = management_split(inputs, quorum, lives);
        drafts.extend(
            split
                .as_deref()
                .map(|groups| management_split_alarm(&inputs.local.id, groups)),
        );
        // A split names every group once: a node cut off with others that
        // still hear it is not one node's port.
        let in_split = |node: &NodeId| {
            split
                .as_deref()
                .is_some_and(|groups| groups.iter().skip(1).any(|g| g.contains(&node)))
        };
        drafts.extend(
            self.management_unreachable_alarms(inputs, quorum, lives, nodes, moment.now)
                .into_iter()
                .filter(|alarm| {
                    !certificate_refused(&alarm.node, inputs) && !in_split(&alarm.node)
                }),
        );
        drafts.extend(clock_skew_alarm(inputs, self.settings.clock_skew_bound));
        drafts.extend(duplicate_node_id_alarms(&inputs.peers));
        drafts.extend(mesh_saturated_alarm(inputs, quorum, saturated));
        drafts.extend(version_skew_alarm(inputs, nodes));
        drafts.extend(self.rdma_host_alarms(inputs));
        let mut alarms: Vec<Alarm> = drafts.into_iter().map(|a| self.stamp(a, moment)).collect();
        let raised: BTreeSet<(AlarmKind, NodeId)> =
            alarms.iter().map(|a| (a.kind, a.node.clone())).collect();
        self.alarm_since.retain(|key, _| raised.contains(key));
        alarms.retain(|a| {
            self.settled_at(a.kind, &a.node)
                .is_none_or(|at| at <= moment.now)
        });
        alarms
    }

    /// `rdma_disabled` about each member failing RDMA on most of its links
    /// (its links are not blamed for it), unless it raised one itself.
    fn rdma_host_alarms<'a>(&'a self, inputs: &'a MeshInputs) -> impl Iterator<Item = Alarm> + 'a {
        let raised = |node: &NodeId| {
            inputs
                .local_alarms
                .iter()
                .chain(inputs.peers.values().flat_map(|v| v.report.alarms.iter()))
                .any(|a| a.kind == AlarmKind::RdmaDisabled && a.node == *node)
        };
        self.rdma_hosts
            .iter()
            .filter(move |n| !raised(n))
            .map(|node| {
                draft(
                    AlarmKind::RdmaDisabled,
                    Severity::Critical,
                    node,
                    "rdma",
                    format!("RDMA fails on most of {node}'s links while IP works"),
                    vec![format!(
                        "{node}'s RDMA ports are not active, or its RDMA probes fail, on more than \
                     half of its links: its host's RDMA, not each cable"
                    )],
                    "check RDMA on the node: `rdma_ctl status` (macOS, enabled in Recovery with \
                 `rdma_ctl enable`), `ibv_devinfo` and the RDMA driver (Linux); `meshctl doctor` \
                 on it runs the RDMA checks",
                )
            })
    }

    /// `management_unreachable` for every node shown alive that fewer than
    /// half of the members who could say hear on the management network.
    /// Only with quorum.
    fn management_unreachable_alarms(
        &self,
        inputs: &MeshInputs,
        quorum: &Quorum,
        lives: &BTreeMap<&NodeId, Life<'_>>,
        nodes: &[NodeVerdict],
        now: Instant,
    ) -> Vec<Alarm> {
        if !quorum.has_quorum {
            return Vec::new();
        }
        let local = &inputs.local.id;
        // Shown alive, not merely held up while this node runs late: a dead
        // node's silence is no management fault.
        let suspect_after = self.settings.suspect_after;
        let alive = nodes.iter().filter(|n| {
            n.state == NodeState::Up
                && (n.id == *local
                    || lives
                        .get(&n.id)
                        .is_some_and(|l| l.alive(now, suspect_after, Duration::ZERO)))
        });
        alive
            .filter_map(|node| {
                let witnesses = management_witnesses(&node.id, inputs, lives);
                let on_management = witnesses.iter().filter(|heard| **heard).count();
                let could = witnesses.len();
                (on_management * 2 < could)
                    .then(|| management_unreachable_alarm(&node.id, on_management, could))
            })
            .collect()
    }

    /// When an alarm whose condition holds may be raised: conditions that a
    /// start, a restart or a reconnecting stream shows for a moment must
    /// hold for `stale_after` first (a path is stale no sooner). `None`:
    /// raised at once.
    pub(super) fn settled_at(&self, kind: AlarmKind, node: &NodeId) -> Option<Instant> {
        let settling = matches!(
            kind,
            AlarmKind::NoQuorum
                | AlarmKind::ManagementUnreachable
                | AlarmKind::ManagementSplit
                | AlarmKind::MeshSaturated
        );
        if !settling {
            return None;
        }
        self.alarm_since
            .get(&(kind, node.clone()))
            .and_then(|since| since.checked_add(self.settings.stale_after))
    }
}

/// An alarm of the engine's, its times still to be stamped.
fn draft(
    kind: AlarmKind,
    severity: Severity,
    node: &NodeId,
    subject: &str,
    summary: String,
    evidence: Vec<String>,
    fix: &str,
) -> Alarm {
    Alarm {
        kind,
        severity,
        node: node.clone(),
        subject: subject.to_owned(),
        summary,
        evidence,
        fix: Some(fix.to_owned()),
        since: SystemTime::UNIX_EPOCH,
        updated: SystemTime::UNIX_EPOCH,
    }
}

/// `no_quorum`, on this node, when it does not hear a majority of the
/// configured members; its fix says what the whole picture points to:
/// members heard by others but not here (this node's own paths), members
/// nobody heard here hears (down: which to bring back), or nobody heard at
/// all (this node cut off, or the rest down).
fn no_quorum_alarm(
    quorum: &Quorum,
    local: &NodeId,
    lives: &BTreeMap<&NodeId, Life<'_>>,
) -> Option<Alarm> {
    if quorum.has_quorum {
        return None;
    }
    let unheard: Vec<&NodeId> = quorum
        .configured
        .iter()
        .filter(|id| !quorum.members.contains(id))
        .collect();
    let hearers_of = |id: &NodeId| -> Vec<&str> {
        lives
            .get(id)
            .map(|l| l.hearers.iter().map(|h| h.as_str()).collect())
            .unwrap_or_default()
    };
    let vouched: Vec<(&NodeId, Vec<&str>)> = unheard
        .iter()
        .map(|id| (*id, hearers_of(id)))
        .filter(|(_, hearers)| !hearers.is_empty())
        .collect();
    let majority = quorum.configured.len() / 2 + 1;
    let needed = majority.saturating_sub(quorum.members.len());
    let names = |ids: &[&NodeId]| {
        ids.iter()
            .map(|id| id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let others: Vec<&NodeId> = quorum.members.iter().filter(|id| *id != local).collect();
    let mut evidence = vec![format!("not heard: {}", names(&unheard))];
    let fix =
        if !vouched.is_empty() {
            evidence.extend(vouched.iter().map(|(id, hearers)| {
                format!("{id} is heard by {} but not here", hearers.join(", "))
            }));
            format!(
                "{local}'s own paths fail: members others hear are not heard here; check {local}'s \
             management network and cables (`meshctl doctor` on {local})"
            )
        } else if others.is_empty() {
            evidence.push(format!("{local} hears no member on any path"));
            format!(
                "either {local} is cut off (check its management network and cables; \
             `meshctl --addr NODE:7420 status` on another node tells) or the others are down: \
             bring back {needed} of {} for quorum ({} of {} members)",
                names(&unheard),
                majority,
                quorum.configured.len()
            )
        } else {
            evidence.push(format!(
                "{} heard by none of {} on any path (management or cable)",
                if unheard.len() == 1 {
                    "it is"
                } else {
                    "they are"
                },
                quorum
                    .members
                    .iter()
                    .map(NodeId::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            format!(
                "{} look{} down: bring back {needed} of them for quorum ({} of {} members), \
             then check that meshd runs there",
                names(&unheard),
                if unheard.len() == 1 { "s" } else { "" },
                majority,
                quorum.configured.len()
            )
        };
    Some(draft(
        AlarmKind::NoQuorum,
        Severity::Warning,
        local,
        "quorum",
        format!(
            "no quorum: hears {} of {} members; link verdicts are held back",
            quorum.members.len(),
            quorum.configured.len()
        ),
        evidence,
        &fix,
    ))
}

/// Whether each member that can say hears `node` on the management
/// network: this node (about a peer), and every peer whose report is
/// fresh. A node judges itself too, from its peers' reports over the
/// cables: when it is the alert leader, nobody else would post the alarm.
fn management_witnesses(
    node: &NodeId,
    inputs: &MeshInputs,
    lives: &BTreeMap<&NodeId, Life<'_>>,
) -> Vec<bool> {
    let configured = inputs.configured.len();
    // Only a member that itself reaches most of the mesh on the management
    // network can say another is cut off from it: in a split into halves
    // nobody does, and no single node is to blame. Two members cannot tell
    // which of them is cut off, and each says what it sees.
    let reaches_majority = |heard: usize| configured <= 2 || (heard + 1) * 2 > configured;
    let heard_here = lives
        .values()
        .filter(|l| l.fresh_paths.contains(&&Path::Management))
        .count();
    let this_node = (*node != inputs.local.id && reaches_majority(heard_here)).then(|| {
        lives
            .get(node)
            .is_some_and(|l| l.fresh_paths.contains(&&Path::Management))
    });
    let fresh_peers = inputs
        .peers
        .iter()
        .filter(|(id, _)| *id != node && lives.get(id).is_some_and(|l| !l.fresh_paths.is_empty()))
        .filter(|(_, v)| reaches_majority(v.report.heard_on_management.len()))
        .map(|(_, v)| v.report.heard_on_management.contains(node));
    this_node.into_iter().chain(fresh_peers).collect()
}

/// The groups the management network splits the live members into, the
/// largest first: members are joined when either hears the other on it
/// (this node's own paths, and every fresh member's report). `None`
/// without quorum, in a mesh of two (neither can tell which side is cut
/// off), when the management network joins everyone, and when the only
/// members apart are single nodes beside a majority: each of those is its
/// own port's fault, `management_unreachable`'s to name.
fn management_split<'a>(
    inputs: &'a MeshInputs,
    quorum: &Quorum,
    lives: &BTreeMap<&NodeId, Life<'_>>,
) -> Option<Vec<Vec<&'a NodeId>>> {
    if !quorum.has_quorum || inputs.configured.len() <= 2 {
        return None;
    }
    let local = &inputs.local.id;
    let live: Vec<&NodeId> = std::iter::once(local)
        .chain(
            inputs
                .peers
                .keys()
                .filter(|id| lives.get(id).is_some_and(|l| !l.fresh_paths.is_empty())),
        )
        .collect();
    let mut edges: Vec<(&NodeId, &NodeId)> = lives
        .iter()
        .filter(|(_, l)| l.fresh_paths.contains(&&Path::Management))
        .map(|(id, _)| (local, *id))
        .collect();
    for (id, view) in inputs.peers.iter().filter(|(id, _)| live.contains(id)) {
        edges.extend(
            view.report
                .heard_on_management
                .iter()
                .map(|heard| (id, heard)),
        );
    }
    let mut group: BTreeMap<&NodeId, usize> =
        live.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    // Joins until nothing changes: a handful of nodes, a few passes.
    let mut changed = true;
    while changed {
        changed = false;
        for (x, y) in &edges {
            let (Some(&gx), Some(&gy)) = (group.get(x), group.get(y)) else {
                continue;
            };
            if gx != gy {
                let (keep, gone) = (gx.min(gy), gx.max(gy));
                group
                    .values_mut()
                    .filter(|g| **g == gone)
                    .for_each(|g| *g = keep);
                changed = true;
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<&NodeId>> = BTreeMap::new();
    for (id, g) in group {
        groups.entry(g).or_default().push(id);
    }
    let mut groups: Vec<Vec<&NodeId>> = groups.into_values().collect();
    groups.sort_by(|x, y| y.len().cmp(&x.len()).then_with(|| x.cmp(y)));
    let majority = groups.first().is_some_and(|g| g.len() * 2 > live.len());
    let apart_alone = groups.iter().skip(1).all(|g| g.len() == 1);
    (groups.len() >= 2 && !(majority && apart_alone)).then_some(groups)
}

fn management_split_alarm(local: &NodeId, groups: &[Vec<&NodeId>]) -> Alarm {
    let named = groups
        .iter()
        .map(|g| {
            g.iter()
                .map(|id| id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect::<Vec<_>>()
        .join(" | ");
    draft(
        AlarmKind::ManagementSplit,
        Severity::Warning,
        local,
        "management",
        format!("the management network is split: {named}"),
        vec![
            format!("each group hears only itself on the management network: {named}"),
            "every node still answers on its cables: nothing is down, links are judged on their \
             own evidence"
                .to_owned(),
        ],
        "check what joins these groups on the management network (a switch or its uplink, a \
         VLAN, a Wi-Fi access point): each group's own ports work",
    )
}

/// Whether this node or a peer refuses `node`'s daemon for a certificate
/// reason: then its silence on the management network is that refusal
/// (raised as `certificate_refused`, naming the reason), not the network's.
fn certificate_refused(node: &NodeId, inputs: &MeshInputs) -> bool {
    inputs
        .local_alarms
        .iter()
        .chain(inputs.peers.values().flat_map(|v| v.report.alarms.iter()))
        .any(|a| a.kind == AlarmKind::CertificateRefused && a.node == *node)
}

/// `management_unreachable` on `node`, heard on the management network by
/// `on_management` of the `could` members that could say.
fn management_unreachable_alarm(node: &NodeId, on_management: usize, could: usize) -> Alarm {
    draft(
        AlarmKind::ManagementUnreachable,
        Severity::Warning,
        node,
        "management",
        format!("{node} is unreachable on the management network but answers on its cables"),
        vec![format!(
            "heard on the management network by {on_management} of the {could} members that \
             could"
        )],
        "check the management network (Wi-Fi, switch port, cable) of this node; its links are \
         judged on their own evidence meanwhile",
    )
}

/// `clock_skew`, on this node, when the median of its peers' clocks is
/// more than `bound` off its own.
fn clock_skew_alarm(inputs: &MeshInputs, bound: Duration) -> Option<Alarm> {
    let skew = clock_skew(&inputs.clock_offsets)
        .filter(|skew| u128::from(skew.unsigned_abs()) > bound.as_nanos())?;
    let direction = if skew > 0 { "behind" } else { "ahead of" };
    let by = Duration::from_nanos(skew.unsigned_abs());
    let local = &inputs.local.id;
    Some(draft(
        AlarmKind::ClockSkew,
        Severity::Warning,
        local,
        "clock",
        format!(
            "the clock of {local} is {} {direction} the mesh's",
            fmt_duration(by)
        ),
        inputs
            .clock_offsets
            .iter()
            .map(|o| {
                format!(
                    "{}: {:+.3}s (±{})",
                    o.peer,
                    o.offset_ns as f64 / 1e9,
                    fmt_duration(o.rtt / 2)
                )
            })
            .collect(),
        "check time synchronisation on this node (System Settings > General > Date & Time; \
         `sntp -sS time.apple.com`, or chrony/timedatectl on Linux)",
    ))
}

/// `duplicate_node_id` on every peer whose id two live daemons claim.
fn duplicate_node_id_alarms(peers: &BTreeMap<NodeId, PeerView>) -> Vec<Alarm> {
    peers
        .iter()
        .filter_map(|(id, view)| {
            let duplicate = view.duplicate.as_ref()?;
            Some(draft(
                AlarmKind::DuplicateNodeId,
                Severity::Critical,
                id,
                "node id",
                format!("two live daemons claim to be {id}"),
                vec![format!("streams from {}", duplicate.remotes.join(" and "))],
                "give each node its own `node.id` (a cloned disk or a copied config keeps the old \
                 one) and restart the duplicate",
            ))
        })
        .collect()
}

/// `mesh_saturated`, on this node, when most of the configured mesh runs
/// its timers late. Counted against the configured members, not the live
/// ones: a node that hears nobody is one late host, not a late mesh (its
/// own lateness excuses its own evidence all the same).
fn mesh_saturated_alarm(
    inputs: &MeshInputs,
    quorum: &Quorum,
    saturated: &[&NodeId],
) -> Option<Alarm> {
    let mesh = quorum.configured.len().max(quorum.members.len()).max(1);
    (saturated.len() * 2 > mesh).then(|| {
        draft(
            AlarmKind::MeshSaturated,
            Severity::Warning,
            &inputs.local.id,
            "mesh",
            format!(
                "most of the mesh runs its timers late: links are judged with their lateness excused (late: {})",
                name_some(saturated.iter().map(|n| n.as_str()))
            ),
            likely_causes(&inputs.local_alarms, inputs.peers.values()),
            "find what starves the nodes (a broadcast storm, a CPU hog named by cpu_spike) and \
             stop it",
        )
    })
}

/// `version_skew`, on this node, when the members it hears up run more
/// than one meshd release: a rolling upgrade under way, or a node left
/// behind. Every release talks to the previous one, so it is a notice; a
/// warning when this node refuses a member for its peer protocol (two
/// releases apart), naming which node to upgrade.
fn version_skew_alarm(inputs: &MeshInputs, nodes: &[NodeVerdict]) -> Option<Alarm> {
    let mut releases: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    releases
        .entry(inputs.local.version.as_str())
        .or_default()
        .push(inputs.local.id.as_str());
    let heard_up = nodes
        .iter()
        .filter(|n| n.state == NodeState::Up)
        .filter_map(|n| n.identity.as_ref())
        .filter(|i| i.id != inputs.local.id)
        .map(|i| (i.id.as_str(), i.version.as_str()));
    let refused = inputs
        .refused_releases
        .iter()
        .map(|r| (r.node.as_str(), r.version.as_str()));
    for (node, version) in heard_up.chain(refused) {
        let members = releases.entry(version).or_default();
        if !members.contains(&node) {
            members.push(node);
        }
    }
    releases.remove("");
    let refusals = &inputs.refused_releases;
    if releases.len() < 2 && refusals.is_empty() {
        return None;
    }
    // Members in name order, so every node words the notice alike.
    let mut evidence: Vec<String> = releases
        .iter_mut()
        .map(|(version, members)| {
            members.sort_unstable();
            format!("meshd {version} on {}", members.join(", "))
        })
        .collect();
    evidence.extend(refusals.iter().map(|r| {
        format!(
            "{} (meshd {}) is refused here: {}",
            r.node, r.version, r.why
        )
    }));
    let summary = format!("members run {} meshd releases", releases.len());
    let notice = "nothing urgent: each release talks to the one before it; finish the upgrade \
                  one node at a time (the evidence names each node's release)";
    let (severity, summary, fix) = if refusals.is_empty() {
        (Severity::Info, summary, notice.to_owned())
    } else {
        let names = |older: bool| {
            let names: Vec<&str> = refusals
                .iter()
                .filter(|r| r.older == older)
                .map(|r| r.node.as_str())
                .collect();
            names.join(", ")
        };
        let (behind, ahead) = (names(true), names(false));
        let fix = if ahead.is_empty() {
            format!("upgrade {behind}")
        } else if behind.is_empty() {
            format!(
                "upgrade this node ({}) to the release {ahead} runs",
                inputs.local.id
            )
        } else {
            format!(
                "upgrade {behind}, and this node ({}) to the release {ahead} runs",
                inputs.local.id
            )
        };
        let all: Vec<&str> = refusals.iter().map(|r| r.node.as_str()).collect();
        (
            Severity::Warning,
            format!("{summary}, and this node refuses {}'s", all.join(", ")),
            format!(
                "{fix}: releases more than one apart cannot talk, so a node more than one \
                 release behind is upgraded through each release between, one node at a time"
            ),
        )
    };
    Some(draft(
        AlarmKind::VersionSkew,
        severity,
        &inputs.local.id,
        "mesh",
        summary,
        evidence,
        &fix,
    ))
}

/// The median of the peers' clocks against this node's: positive when this
/// node's clock is behind the mesh's.
fn clock_skew(offsets: &[ClockOffset]) -> Option<i64> {
    let mut values: Vec<i64> = offsets.iter().map(|o| o.offset_ns).collect();
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

/// Alarms that explain a mesh running late: storms and CPU spikes.
fn likely_causes<'a>(local: &'a [Alarm], peers: impl Iterator<Item = &'a PeerView>) -> Vec<String> {
    let causes: Vec<String> = local
        .iter()
        .chain(peers.flat_map(|p| p.report.alarms.iter()))
        .filter(|a| {
            matches!(
                a.kind,
                AlarmKind::BroadcastStorm | AlarmKind::BridgeLoop | AlarmKind::CpuSpike
            )
        })
        .map(|a| format!("likely cause: {} on {}: {}", a.kind, a.node, a.summary))
        .collect();
    if causes.is_empty() {
        vec![
            "no storm or CPU spike is raised; look at the busiest processes of the late nodes"
                .to_owned(),
        ]
    } else {
        causes
    }
}
