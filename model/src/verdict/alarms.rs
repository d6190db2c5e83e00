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
    /// mesh's, two daemons with one id, most of the mesh running late.
    pub(super) fn engine_alarms(
        &mut self,
        inputs: &MeshInputs,
        quorum: &Quorum,
        lives: &BTreeMap<&NodeId, Life<'_>>,
        nodes: &[NodeVerdict],
        saturated: &[&NodeId],
        moment: Moment,
    ) -> Vec<Alarm> {
        let local = &inputs.local.id;
        let mut alarms = Vec::new();
        if !quorum.has_quorum {
            let unheard: Vec<&str> = quorum
                .configured
                .iter()
                .filter(|id| !quorum.members.contains(id))
                .map(NodeId::as_str)
                .collect();
            alarms.push(self.stamp(
                draft(
                    AlarmKind::NoQuorum,
                    Severity::Warning,
                    local,
                    "quorum",
                    format!(
                        "no quorum: hears {} of {} members; link alarms are held back",
                        quorum.members.len(),
                        quorum.configured.len()
                    ),
                    vec![format!("not heard: {}", unheard.join(", "))],
                    "check the management network and that meshd runs on the unheard nodes",
                ),
                moment,
            ));
        }
        // Shown alive, not merely held up while this node runs late: a dead
        // node's silence is no management fault.
        let suspect_after = self.settings.suspect_after;
        let alive = nodes.iter().filter(|n| {
            quorum.has_quorum
                && n.state == NodeState::Up
                && (n.id == *local
                    || lives
                        .get(&n.id)
                        .is_some_and(|l| l.alive(moment.now, suspect_after, Duration::ZERO)))
        });
        for node in alive {
            // Who can say whether they hear it there: this node (about a
            // peer), and every peer whose report is fresh. A node judges
            // itself too, from its peers' reports over the cables: when it
            // is the alert leader, nobody else would post the alarm.
            let witnesses: Vec<bool> = (node.id != *local)
                .then(|| {
                    lives
                        .get(&node.id)
                        .is_some_and(|l| l.fresh_paths.contains(&&Path::Management))
                })
                .into_iter()
                .chain(
                    inputs
                        .peers
                        .iter()
                        .filter(|(id, _)| {
                            **id != node.id
                                && lives.get(id).is_some_and(|l| !l.fresh_paths.is_empty())
                        })
                        .map(|(_, v)| v.report.heard_on_management.contains(&node.id)),
                )
                .collect();
            let on_management = witnesses.iter().filter(|heard| **heard).count();
            let could = witnesses.len();
            if on_management * 2 < could {
                alarms.push(self.stamp(
    draft(
                    AlarmKind::ManagementUnreachable,
                    Severity::Warning,
                    &node.id,
                    "management",
                    format!(
                        "{} is unreachable on the management network but answers on its cables",
                        node.id
                    ),
                    vec![format!(
                        "heard on the management network by {on_management} of the {could} members that could"
                    )],
                    "check the management network (Wi-Fi, switch port, cable) of this node; its links are judged on their own evidence meanwhile"),
    moment,
));
            }
        }
        if let Some(skew) = clock_skew(&inputs.clock_offsets)
            && u128::from(skew.unsigned_abs()) > self.settings.clock_skew_bound.as_nanos()
        {
            let (direction, by) = if skew > 0 {
                ("behind", skew.unsigned_abs())
            } else {
                ("ahead of", skew.unsigned_abs())
            };
            let by = Duration::from_nanos(by);
            alarms.push(self.stamp(
    draft(
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
                "check time synchronisation on this node (System Settings > General > Date & Time; `sntp -sS time.apple.com`, or chrony/timedatectl on Linux)"),
    moment,
));
        }
        for (id, view) in &inputs.peers {
            if let Some(duplicate) = &view.duplicate {
                alarms.push(self.stamp(
    draft(
                    AlarmKind::DuplicateNodeId,
                    Severity::Critical,
                    id,
                    "node id",
                    format!("two live daemons claim to be {id}"),
                    vec![format!("streams from {}", duplicate.remotes.join(" and "))],
                    "give each node its own `node.id` (a cloned disk or a copied config keeps the old one) and restart the duplicate"),
    moment,
));
            }
        }
        if saturated.len() * 2 > quorum.members.len().max(1) {
            alarms.push(self.stamp(
    draft(
                AlarmKind::MeshSaturated,
                Severity::Warning,
                local,
                "mesh",
                format!(
                    "most of the mesh runs its timers late: link verdicts are held (late: {})",
                    name_some(saturated.iter().map(|n| n.as_str()))
                ),
                likely_causes(&inputs.local_alarms, inputs.peers.values()),
                "find what starves the nodes (a broadcast storm, a CPU hog named by cpu_spike) and stop it"),
    moment,
));
        }
        let raised: BTreeSet<(AlarmKind, NodeId)> =
            alarms.iter().map(|a| (a.kind, a.node.clone())).collect();
        self.alarm_since.retain(|key, _| raised.contains(key));
        alarms.retain(|a| {
            self.settled_at(a.kind, &a.node)
                .is_none_or(|at| at <= moment.now)
        });
        alarms
    }

    /// When an alarm whose condition holds may be raised: conditions that a
    /// start, a restart or a reconnecting stream shows for a moment must
    /// hold for `stale_after` first (a path is stale no sooner). `None`:
    /// raised at once.
    pub(super) fn settled_at(&self, kind: AlarmKind, node: &NodeId) -> Option<Instant> {
        let settling = matches!(
            kind,
            AlarmKind::NoQuorum | AlarmKind::ManagementUnreachable | AlarmKind::MeshSaturated
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
