//! Node verdicts: whether each member is up, suspect or down from every path
//! that speaks for it, which members run late, and how long a late node
//! waits before it reads a peer's silence as the peer's.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use meshd_domain::{AlarmKind, NodeId, NodeState, NodeVerdict};

use super::{Engine, HEARSAY_DELAY, Life, MeshInputs, name_some};
use crate::lateness::LATE;
use crate::link::fmt_duration;
use crate::peers::Path;
use crate::time::Moment;

impl Engine {
    /// The verdict on every configured member, in roster order.
    pub(super) fn node_verdicts(
        &mut self,
        inputs: &MeshInputs,
        lives: &BTreeMap<&NodeId, Life<'_>>,
        moment: Moment,
    ) -> Vec<NodeVerdict> {
        let roster = std::mem::take(&mut self.roster);
        let nodes = roster
            .iter()
            .map(|id| self.node_verdict(id, lives.get(id), inputs, moment))
            .collect();
        self.roster = roster;
        nodes
    }

    /// Up when anything shows it alive (a recent message on any path, this
    /// node's probes answered, a fresh member hearing it); down when every
    /// path is silent (streams closed or quiet past `stale_after`) and
    /// nothing else speaks for it; suspect in between, which lasts at most
    /// until `stale_after`.
    fn node_verdict(
        &mut self,
        id: &NodeId,
        life: Option<&Life<'_>>,
        inputs: &MeshInputs,
        moment: Moment,
    ) -> NodeVerdict {
        let now = moment.now;
        let is_local = *id == inputs.local.id;
        let (state, evidence) = if is_local {
            (NodeState::Up, vec!["this node".to_owned()])
        } else {
            self.peer_state(id, &life.cloned().unwrap_or_default(), inputs, now)
        };
        let since = self.state_since(id, state, now);
        let view = inputs.peers.get(id);
        NodeVerdict {
            id: id.clone(),
            state,
            since: moment.wall_of(since),
            evidence,
            identity: if is_local {
                Some(inputs.local.clone())
            } else {
                view.map(|v| v.report.sender.clone())
            },
            last_report_at: view.map(|v| moment.wall_of(v.received_at)),
            cpu_saturated: if is_local {
                inputs.local_load.cpu_saturated
            } else {
                view.is_some_and(|v| v.report.load.cpu_saturated)
            },
            // From the facts, which the engine does not see:
            // `crate::boot::annotate` fills it in.
            boot: Default::default(),
            fix: None,
        }
    }

    /// A peer's state and the evidence for it: what speaks for it, judged
    /// as if this node ran on time, then held back by what this node's own
    /// lateness may explain.
    fn peer_state(
        &self,
        id: &NodeId,
        life: &Life<'_>,
        inputs: &MeshInputs,
        now: Instant,
    ) -> (NodeState, Vec<String>) {
        let mut evidence = life_evidence(id, life, now);
        let state = self.taken_back_by_hearsay(id, life, now);
        let allowance = inputs.lateness_allowance();
        let kept = self.held_back_by_lateness(id, life, state, allowance, now);
        if kept != state {
            evidence.push(format!(
                "{kept}, not {state}, until the silence outlasts this node's own lateness: its \
                 timers run {} late",
                fmt_duration(allowance)
            ));
        }
        // A daemon this node refuses (its certificate, its id) is not up
        // whatever answers on its cables: nothing it says is believed.
        // Only this node's own refusals count, which no peer can forge.
        let refused = inputs
            .local_alarms
            .iter()
            .find(|a| a.kind == AlarmKind::CertificateRefused && a.node == *id);
        if let Some(refusal) = refused
            && kept == NodeState::Up
        {
            evidence.push(format!("its daemon is refused here: {}", refusal.summary));
            return (NodeState::Suspect, evidence);
        }
        (kept, evidence)
    }

    /// Peer `id`'s state judged as if this node ran on time. A minority's
    /// word that it hears the node holds its death back, for a while; it
    /// does not take one back: a node already down stays down while only
    /// such hearsay speaks for it (an insider saying it hears a dead node
    /// would otherwise resolve its page and fire it again).
    fn taken_back_by_hearsay(&self, id: &NodeId, life: &Life<'_>, now: Instant) -> NodeState {
        let state = self.node_state(life, Duration::ZERO, now);
        let was_down = self
            .node_since
            .get(id)
            .is_some_and(|(previous, _)| *previous == NodeState::Down);
        if state != NodeState::Suspect || !was_down || life.hearers.is_empty() {
            return state;
        }
        let unheard = Life {
            hearers: Vec::new(),
            heard_by_majority: false,
            ..life.clone()
        };
        match self.node_state(&unheard, Duration::ZERO, now) {
            NodeState::Down => NodeState::Down,
            _ => state,
        }
    }

    /// `state`, peer `id`'s state judged as if this node ran on time, held
    /// back while `allowance` (this node's own lateness) may explain the
    /// silence. A node whose own timers run late reads its peers late: a
    /// message may wait that long before it is read, and a stream may read
    /// closed only because this node stalled. Their silence counts from
    /// that much after their last message, and only its length, not a
    /// closed stream, makes them down meanwhile. What was already decided
    /// stays: the lateness holds a verdict back, it does not take one back.
    fn held_back_by_lateness(
        &self,
        id: &NodeId,
        life: &Life<'_>,
        state: NodeState,
        allowance: Duration,
        now: Instant,
    ) -> NodeState {
        if allowance.is_zero() {
            return state;
        }
        let allowed = self.node_state(life, allowance, now);
        if severity(state) <= severity(allowed) {
            return state;
        }
        let floor = self.node_since.get(id).map_or(allowed, |(previous, _)| {
            std::cmp::max_by_key(allowed, *previous, |s| severity(*s))
        });
        std::cmp::min_by_key(state, floor, |s| severity(*s))
    }

    /// Since when node `id` is in `state`: now, if it just changed.
    fn state_since(&mut self, id: &NodeId, state: NodeState, now: Instant) -> Instant {
        match self.node_since.get_mut(id) {
            Some(entry) => {
                if entry.0 != state {
                    *entry = (state, now);
                }
                entry.1
            }
            None => {
                self.node_since.insert(id.clone(), (state, now));
                now
            }
        }
    }

    /// A peer's state from what speaks for it, its silence less
    /// `allowance`, the part of it this node's own lateness may explain
    /// (zero when it runs on time; then a closed stream also counts as
    /// silence at once).
    fn node_state(&self, life: &Life<'_>, allowance: Duration, now: Instant) -> NodeState {
        let since = |at: Instant| now.saturating_duration_since(at).saturating_sub(allowance);
        let age = life.last_message.map(since);
        // The grace of a restart runs from the stop, not from the last
        // message: a heartbeat may have gone out most of an interval before.
        let since_stop = life.last_message.max(life.closed_at).map(since);
        let open = life.any_open || !allowance.is_zero();
        let alive = life.alive(now, self.settings.suspect_after, allowance);
        // A minority of members hearing it holds the verdict back, for a
        // bounded time: the silence must outlast `HEARSAY_DELAY` more.
        let stale_after = if life.hearers.is_empty() {
            self.settings.stale_after
        } else {
            self.settings.stale_after.saturating_add(HEARSAY_DELAY)
        };
        let silent_everywhere = match (age, since_stop) {
            (Some(age), Some(since_stop)) => {
                (!open && life.hearers.is_empty() && since_stop >= RESTART_GRACE)
                    || age >= stale_after
            }
            _ => self.started.is_none_or(|s| {
                now.saturating_duration_since(s).saturating_sub(allowance) >= stale_after
            }),
        };
        if alive {
            NodeState::Up
        } else if silent_everywhere {
            NodeState::Down
        } else {
            NodeState::Suspect
        }
    }

    /// Fresh members whose timers run late: this node, and peers whose
    /// reports say so.
    pub(super) fn saturated_members<'a>(
        &self,
        inputs: &'a MeshInputs,
        lives: &BTreeMap<&NodeId, Life<'_>>,
        now: Instant,
    ) -> Vec<&'a NodeId> {
        let mut late: Vec<&NodeId> = inputs
            .peers
            .iter()
            .filter(|(id, view)| {
                lives.get(id).is_some_and(|l| !l.fresh_paths.is_empty())
                    && self.fresh(view.received_at, now)
                    && (view.report.lateness.worst >= LATE || view.report.load.cpu_saturated)
            })
            .map(|(id, _)| id)
            .collect();
        if inputs.local_lateness.worst >= LATE || inputs.local_load.cpu_saturated {
            late.push(&inputs.local.id);
        }
        late
    }
}

/// How long after its streams closed (or its last message, if later) a peer
/// whose every stream closed stays `suspect` before it is `down`: a daemon
/// restarting (launchd, systemd, an upgrade) closes its streams and opens
/// new ones within it, and is no dead node. A death (its kernel closes the
/// streams) still reads down this soon after it, never later than
/// `stale_after` after the last message; a node silent on open streams
/// (frozen) waits `stale_after`.
pub const RESTART_GRACE: Duration = Duration::from_secs(2);

/// A stream closed at least this long after the peer's last message is
/// named apart from it in the evidence.
const NAMED_GAP: Duration = Duration::from_millis(100);

/// What speaks for a peer and what against it: its last message and the
/// paths that carried it, its probe responder, the members hearing it.
fn life_evidence(id: &NodeId, life: &Life<'_>, now: Instant) -> Vec<String> {
    let age = life
        .last_message
        .map(|at| now.saturating_duration_since(at));
    let mut evidence = vec![match (age, life.fresh_paths.is_empty()) {
        (None, _) => format!("nothing heard from {id} since this node started"),
        (Some(age), false) => format!(
            "last message {} ago ({})",
            fmt_duration(age),
            name_some(life.fresh_paths.iter().map(|p| match p {
                Path::Management => "management",
                Path::Cable(end) => end.as_str(),
            }))
        ),
        (Some(age), true) if !life.any_open => match life.closed_at {
            Some(closed)
                if life
                    .last_message
                    .is_some_and(|last| closed.saturating_duration_since(last) >= NAMED_GAP) =>
            {
                format!(
                    "every stream closed {} ago; last message {} ago",
                    fmt_duration(now.saturating_duration_since(closed)),
                    fmt_duration(age)
                )
            }
            _ => format!(
                "every stream closed; last message {} ago",
                fmt_duration(age)
            ),
        },
        (Some(age), true) => format!("last message {} ago", fmt_duration(age)),
    }];
    if life.probes_answer {
        evidence.push("its probe responder answers on the cable".to_owned());
    }
    if !life.hearers.is_empty() {
        let heard_by = name_some(life.hearers.iter().map(|n| n.as_str()));
        evidence.push(if life.heard_by_majority {
            format!("heard by {heard_by}")
        } else {
            format!(
                "heard by {heard_by} only: fewer than most members, whose word delays a \
                 verdict but cannot keep {id} up"
            )
        });
    }
    evidence
}

/// How bad a node verdict is: up, suspect, down.
fn severity(state: NodeState) -> u8 {
    match state {
        NodeState::Up => 0,
        NodeState::Suspect => 1,
        NodeState::Down => 2,
    }
}
