//! The verdict engine: from this node's own link observations and what it
//! holds of every peer (their reports, and when each of their paths last
//! spoke) to verdicts on every node and link, with the evidence behind each
//! and the time it started. Every node runs the same engine over (nearly)
//! the same inputs, so they agree without a leader.
//!
//! The rules are written down in docs/ARCHITECTURE.md, "Verdicts". The
//! three that shape this file: a node is down only when every path to it is
//! silent; a link is blamed only when both its ends were heard since its
//! fault began; evidence gathered by a late end is no evidence.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{
    Alarm, AlarmKind, ClockOffset, Lateness, LinkEnd, LinkMeasurement, LinkObservation, LinkState,
    MeshStatus, NodeId, NodeIdentity, NodeLoad, NodeState, Quorum,
};

use crate::lateness::{LATE, LATENESS_MEMORY};
use crate::link::{EndView, LinkTracker};
use crate::link_rules::LinkRules;
use crate::peers::{Path, PathLiveness, PathState, PeerView, RefusedRelease};
use crate::quorum;
use crate::time::Moment;

mod alarms;
mod deadline;
mod links;
mod nodes;

pub use nodes::RESTART_GRACE;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineSettings {
    /// Every peer sends at least this often, a heartbeat when nothing
    /// changed.
    pub heartbeat: Duration,
    /// No message from a peer on any path for this long makes it suspect,
    /// unless something else says it lives: two heartbeats missed.
    pub suspect_after: Duration,
    /// ...and for this long, down. Also how long a member's report counts
    /// towards the quorum.
    pub stale_after: Duration,
    /// A clock this far off the mesh's raises `clock_skew`.
    pub clock_skew_bound: Duration,
    pub link: LinkRules,
}

impl EngineSettings {
    pub fn new(
        heartbeat: Duration,
        stale_after: Duration,
        clock_skew_bound: Duration,
        link: LinkRules,
    ) -> Self {
        Self {
            heartbeat,
            suspect_after: heartbeat.saturating_mul(2).min(stale_after),
            stale_after,
            clock_skew_bound,
            link,
        }
    }
}

/// One of this node's own link observations and when it was made.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalObservation {
    pub observation: LinkObservation,
    pub at: Instant,
}

/// A cable this node is configured to have, so it is judged even before
/// (or without) any observation of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedLink {
    pub local: LinkEnd,
    pub remote: LinkEnd,
    /// What the cable should negotiate, when the config says.
    pub expected_speed_bps: Option<u64>,
}

/// Everything the engine looks at in one evaluation.
#[derive(Debug, Clone)]
pub struct MeshInputs {
    pub local: NodeIdentity,
    /// This node and its configured peers.
    pub configured: BTreeSet<NodeId>,
    pub local_load: NodeLoad,
    /// How late this node's own timers ran lately: a late node reads its
    /// peers' messages late too, so silence it sees then proves nothing.
    pub local_lateness: Lateness,
    pub local_links: Vec<LocalObservation>,
    pub expected_links: Vec<ExpectedLink>,
    /// What this node holds of each peer it has heard.
    pub peers: BTreeMap<NodeId, PeerView>,
    pub local_alarms: Vec<Alarm>,
    /// Each peer's clock against this node's, as this node measured it.
    pub clock_offsets: Vec<ClockOffset>,
    /// Members this node refuses for their peer protocol.
    pub refused_releases: Vec<RefusedRelease>,
}

impl MeshInputs {
    /// How much of a peer's silence this node's own lateness may explain:
    /// its lateness once it runs late ([`LATE`]), else nothing.
    pub fn lateness_allowance(&self) -> Duration {
        if self.local_lateness.worst >= LATE {
            self.local_lateness.worst
        } else {
            Duration::ZERO
        }
    }

    /// Links that at least one end currently probes, by this node's own
    /// observations and the peers' reports.
    pub fn links_observed(&self) -> usize {
        let observed: BTreeSet<(&NodeId, &NodeId)> = self
            .local_links
            .iter()
            .map(|l| &l.observation)
            .chain(self.peers.values().flat_map(|p| p.report.links.iter()))
            .filter(|o| o.probes_sent_total > 0)
            .map(|o| {
                let (x, y) = (&o.local.node, &o.remote.node);
                if x <= y { (x, y) } else { (y, x) }
            })
            .collect();
        observed.len()
    }

    /// Each end's latest figures: this node's own probes, then every peer
    /// report held, each with when this node got it.
    pub fn measurements(&self, moment: Moment) -> Vec<LinkMeasurement> {
        link_measurements(
            self.local_links
                .iter()
                .map(|l| (&l.observation, moment.wall_of(l.at))),
            &self.peers,
            moment,
        )
    }
}

/// Each end's latest figures: this node's own observations (with when they
/// were made), then every peer's (with when they arrived).
pub fn link_measurements<'a>(
    own: impl Iterator<Item = (&'a LinkObservation, SystemTime)>,
    peers: &BTreeMap<NodeId, PeerView>,
    moment: Moment,
) -> Vec<LinkMeasurement> {
    let own = own.map(|(o, at)| LinkMeasurement::of(o, at));
    let theirs = peers.values().flat_map(|p| {
        p.report.links.iter().map(|o| {
            let at = p
                .links_received
                .get(&o.remote.node)
                .copied()
                .unwrap_or(p.received_at);
            LinkMeasurement::of(o, moment.wall_of(at))
        })
    });
    own.chain(theirs).collect()
}

/// What one evaluation concluded, for this node's status and its report.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub status: MeshStatus,
    /// The members this node has evidence of life for.
    pub hears: Vec<NodeId>,
    /// The members whose management path this node hears.
    pub heard_on_management: Vec<NodeId>,
    /// When the verdicts could change with no new input: evaluate again
    /// then at the latest.
    pub next_deadline: Instant,
}

/// A member's position in the sorted configured set. Links and node states
/// are looked up by these small numbers rather than by comparing names:
/// at 256 nodes an evaluation touches 65 000 observations.
type Member = u16;

/// Links are one cable per pair of nodes (a full mesh or a ring), keyed by
/// the pair of member positions, lower first.
type LinkKey = (Member, Member);

fn link_key(x: Member, y: Member) -> LinkKey {
    (x.min(y), x.max(y))
}

/// Evidence names at most this many nodes ("heard by a, b, c and 250 more").
const MAX_NAMED: usize = 5;

/// Without new input the engine still looks again this often.
pub const MAX_IDLE: Duration = Duration::from_secs(1);

fn name_some<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    match names.get(..MAX_NAMED) {
        Some(first) if names.len() > MAX_NAMED => {
            format!("{} and {} more", first.join(", "), names.len() - MAX_NAMED)
        }
        _ => names.join(", "),
    }
}

#[derive(Debug)]
struct KnownLink {
    a: LinkEnd,
    b: LinkEnd,
    tracker: LinkTracker,
    /// Set while the link is held down because an end node is down.
    node_blamed: Option<NodeId>,
    /// Set while an end is heard on no path (suspect) and the link was not
    /// down on its cable before: what its ends measure then is that node's
    /// silence, so its return starts the link afresh, as a dead node's does.
    unheard_end: Option<NodeId>,
    /// When each end's incarnation was first heard: a new one is a restart,
    /// after which the link starts afresh.
    ends_since: [Option<Instant>; 2],
    /// When each end was last heard in a new incarnation (a restart, not
    /// the first hearing): its peer's silence before then is no evidence
    /// against the cable.
    restarted_at: [Option<Instant>; 2],
    /// Each end's recent lateness, excused from the other's loss and RTT.
    late: [crate::excuse::LateMemory; 2],
    /// Since when `late` was kept: this node's start, or when it first
    /// heard of the link. Lateness before it is not known here.
    remembered_since: Instant,
    /// While the ends' views read degraded: the newest of them when that
    /// was first seen. Each end must speak after it before the link is
    /// blamed (see `Judge::unspoken_end`).
    degraded_seen: Option<Instant>,
    /// When the verdict may change with no new input: an end's silence
    /// reaching what counts for it.
    recheck_at: Option<Instant>,
}

impl KnownLink {
    /// Down, and blamed on the cable, not on a node.
    fn down_on_the_cable(&self) -> bool {
        self.tracker.state() == LinkState::Down && self.node_blamed.is_none()
    }
}

/// Keeps what must outlive one evaluation: the links seen so far (a dead
/// node's links stay judged), their hysteresis, and since when each node
/// verdict and each of the engine's own alarms holds.
#[derive(Debug)]
pub struct Engine {
    settings: EngineSettings,
    /// The configured members, sorted: `links` is keyed by positions in it.
    roster: Vec<NodeId>,
    node_since: BTreeMap<NodeId, (NodeState, Instant)>,
    links: BTreeMap<LinkKey, KnownLink>,
    alarm_since: BTreeMap<(AlarmKind, NodeId), Instant>,
    /// The first evaluation: a peer not heard yet is only down once it had
    /// `stale_after` to connect (it may be starting too).
    started: Option<Instant>,
    /// The last evaluation, and since when evaluations came close enough
    /// together that no end's report of its lateness went unseen (each
    /// message says the worst of the last `LATENESS_MEMORY`).
    looked_at: Option<Instant>,
    watching_since: Option<Instant>,
    /// Members failing RDMA on most of their links, as the last evaluation
    /// found them: one `rdma_disabled` each, no link fault.
    rdma_hosts: BTreeSet<NodeId>,
}

/// FNV-1a: node ids are a few bytes, where SipHash's setup costs more than
/// the hashing; and the ids are configured, not attacker-chosen.
#[derive(Debug, Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        const PRIME: u64 = 0x0100_0000_01b3;
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for byte in bytes {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(PRIME);
        }
        self.0 = hash;
    }
}

type FnvBuild = std::hash::BuildHasherDefault<Fnv>;

/// Positions of the members, for one evaluation.
struct Positions<'a>(HashMap<&'a NodeId, Member, FnvBuild>);

impl<'a> Positions<'a> {
    fn new(roster: &'a [NodeId]) -> Self {
        Self(
            roster
                .iter()
                .zip(0..)
                .map(|(id, i): (&NodeId, Member)| (id, i))
                .collect(),
        )
    }

    fn of(&self, id: &NodeId) -> Option<Member> {
        self.0.get(id).copied()
    }
}

/// One end's view of a link and what the engine needs about the end.
#[derive(Debug, Clone, Copy)]
struct End<'a> {
    view: EndView<'a>,
    /// When this end's observation was made, on this node's clock.
    observed_at: Instant,
}

/// Both ends' views of one link: slot 0 for the lower member.
type LinkViews<'a> = [Option<End<'a>>; 2];

/// What this node knows of one member's life, for one evaluation.
#[derive(Debug, Clone, Default)]
struct Life<'a> {
    /// The last message on any path.
    last_message: Option<Instant>,
    /// How late the node said its timers ran, in that message: every
    /// message says it, while a link's figures go out only now and then.
    lateness: Lateness,
    /// Paths with an open stream that spoke within `stale_after`.
    fresh_paths: Vec<&'a Path>,
    /// Whether any stream path is still open (closed ones are silent at once).
    any_open: bool,
    /// When its last open stream closed, once none is open.
    closed_at: Option<Instant>,
    /// This node's probes to it get replies.
    probes_answer: bool,
    /// The latest evidence of life this node has: a message, a probe reply,
    /// or a fresh member saying it hears it.
    latest_evidence: Option<Instant>,
    /// Fresh members whose reports say they hear it.
    hearers: Vec<&'a NodeId>,
    /// Whether the hearers are most of the fresh members besides it: only
    /// then does their word keep it up (see [`Life::alive`]).
    heard_by_majority: bool,
}

impl Life<'_> {
    /// Something shows it alive now: direct evidence (a message on an open
    /// stream within `suspect_after` of `now`, less `allowance`, what this
    /// node's own lateness may explain, during which a closed stream does
    /// not count; its probe responder answering), or most of the fresh
    /// members hearing it. Hearsay from fewer is one member's word against
    /// this node's silence: it delays a verdict ([`HEARSAY_DELAY`]), never
    /// keeps a node up, so one stolen key cannot hide a death.
    fn alive(&self, now: Instant, suspect_after: Duration, allowance: Duration) -> bool {
        let open = self.any_open || !allowance.is_zero();
        let heard = self.last_message.is_some_and(|at| {
            now.saturating_duration_since(at).saturating_sub(allowance) < suspect_after
        });
        (heard && open) || self.probes_answer || self.heard_by_majority
    }
}

/// How much longer than `stale_after` a node silent to this one stays
/// suspect, not down, while a minority of the members say they hear it:
/// long enough for their reports to turn, short enough that a lying member
/// delays a page by seconds.
pub const HEARSAY_DELAY: Duration = Duration::from_secs(3);

impl Engine {
    pub fn new(settings: EngineSettings) -> Self {
        Self {
            settings,
            roster: Vec::new(),
            node_since: BTreeMap::new(),
            links: BTreeMap::new(),
            alarm_since: BTreeMap::new(),
            started: None,
            looked_at: None,
            watching_since: None,
            rdma_hosts: BTreeSet::new(),
        }
    }

    pub fn set_settings(&mut self, settings: EngineSettings) {
        self.settings = settings;
    }

    /// Follows a change of membership: links keep their history under their
    /// members' new positions; links of departed members are forgotten.
    fn sync_roster(&mut self, configured: &BTreeSet<NodeId>) {
        if self.roster.len() == configured.len() && self.roster.iter().eq(configured.iter()) {
            return;
        }
        let roster: Vec<NodeId> = configured.iter().cloned().collect();
        let positions = Positions::new(&roster);
        let old = std::mem::take(&mut self.links);
        for ((x, y), link) in old {
            let moved = (
                self.roster
                    .get(usize::from(x))
                    .and_then(|id| positions.of(id)),
                self.roster
                    .get(usize::from(y))
                    .and_then(|id| positions.of(id)),
            );
            if let (Some(x), Some(y)) = moved {
                self.links.insert(link_key(x, y), link);
            }
        }
        self.node_since.retain(|id, _| configured.contains(id));
        self.roster = roster;
    }

    fn fresh(&self, at: Instant, now: Instant) -> bool {
        now.saturating_duration_since(at) < self.settings.stale_after
    }

    /// Each path to each peer, up when its stream is open and fresh: the
    /// paths a peer's life is judged on.
    pub fn path_liveness(
        &self,
        peers: &BTreeMap<NodeId, PeerView>,
        now: Instant,
    ) -> Vec<PathLiveness> {
        peers
            .iter()
            .flat_map(|(peer, view)| {
                view.paths.iter().map(move |(path, state)| PathLiveness {
                    peer: peer.clone(),
                    path: path.clone(),
                    up: self.path_fresh(state, now),
                })
            })
            .collect()
    }

    fn path_fresh(&self, state: &PathState, now: Instant) -> bool {
        state.is_open() && self.fresh(state.last_message, now)
    }

    /// What this node knows of each peer's life.
    fn lives<'a>(&self, inputs: &'a MeshInputs, now: Instant) -> BTreeMap<&'a NodeId, Life<'a>> {
        let down_after = self.settings.link.down_after;
        let mut lives: BTreeMap<&NodeId, Life<'_>> = BTreeMap::new();
        for (id, view) in &inputs.peers {
            let life = lives.entry(id).or_default();
            life.last_message = Some(view.received_at);
            life.lateness = view.report.lateness;
            life.any_open = view.paths.values().any(PathState::is_open);
            life.closed_at = view.closed_at();
            life.fresh_paths = view
                .paths
                .iter()
                .filter(|(_, p)| self.path_fresh(p, now))
                .map(|(path, _)| path)
                .collect();
            if life.any_open {
                life.latest_evidence = Some(view.received_at);
            }
        }
        for local in &inputs.local_links {
            let o = &local.observation;
            if o.last_reply_at.is_some() && o.figures.silence < down_after {
                let life = lives.entry(&o.remote.node).or_default();
                life.probes_answer = true;
                let replied = local.at.checked_sub(o.figures.silence).unwrap_or(local.at);
                life.latest_evidence = life.latest_evidence.max(Some(replied));
            }
        }
        // Hearsay counts only from members that are themselves fresh.
        let fresh_peers: Vec<(&NodeId, &PeerView)> = inputs
            .peers
            .iter()
            .filter(|(id, _)| lives.get(id).is_some_and(|l| !l.fresh_paths.is_empty()))
            .collect();
        // Those who could vouch for a node: this node and its fresh peers,
        // but not the node itself.
        let voters = |id: &NodeId| {
            1 + fresh_peers.len() - usize::from(fresh_peers.iter().any(|(p, _)| *p == id))
        };
        for &(hearer, view) in &fresh_peers {
            for heard in view.report.hears.iter() {
                if heard != hearer && *heard != inputs.local.id {
                    let life = lives.entry(heard).or_default();
                    life.hearers.push(hearer);
                    // A member hears a node while its last message is fresh,
                    // so the report proves life only as of `stale_after`
                    // before it arrived: a node frozen a moment ago is still
                    // "heard" by everyone for that long.
                    let heard_by = view
                        .received_at
                        .checked_sub(self.settings.stale_after.max(down_after));
                    life.latest_evidence = life.latest_evidence.max(heard_by);
                }
            }
        }
        for (id, life) in &mut lives {
            life.heard_by_majority = life.hearers.len() * 2 > voters(id);
        }
        lives
    }

    pub fn evaluate(&mut self, inputs: &MeshInputs, moment: Moment) -> Evaluation {
        let now = moment.now;
        self.note_look(now);
        self.sync_roster(&inputs.configured);
        let lives = self.lives(inputs, now);
        let fresh = fresh_members(inputs, &lives);
        let mut quorum = quorum::evaluate(&inputs.configured, &fresh);
        quorum.leader = self.leader(inputs, &quorum, &lives);

        let nodes = self.node_verdicts(inputs, &lives, moment);
        let saturated = self.saturated_members(inputs, &lives, now);
        let links = self.link_verdicts(inputs, &lives, &quorum, &nodes, moment);

        let mut alarms = reported_alarms(inputs, &fresh);
        alarms.extend(self.engine_alarms(inputs, &quorum, &lives, &nodes, &saturated, moment));

        Evaluation {
            status: MeshStatus {
                node: inputs.local.clone(),
                evaluated_at: moment.wall,
                quorum,
                nodes,
                links,
                alarms,
                cables: Vec::new(),
                checks: Vec::new(),
                measurements: Vec::new(),
                jobs: Vec::new(),
            },
            hears: hears(&lives),
            heard_on_management: heard_on_management(&lives),
            next_deadline: self.next_deadline(inputs, now),
        }
    }

    /// Notes an evaluation at `now`: the first, and since when evaluations
    /// came close enough together to see every end's lateness.
    fn note_look(&mut self, now: Instant) {
        self.started.get_or_insert(now);
        // A node that did not look for longer than lateness is remembered
        // (it stalled) may have missed how late its peers ran meanwhile.
        if self
            .looked_at
            .is_none_or(|at| now.saturating_duration_since(at) > LATENESS_MEMORY)
        {
            self.watching_since = Some(now);
        }
        self.looked_at = Some(now);
    }

    /// The lowest id among the members of this node's quorum that hold
    /// quorum themselves (as their reports say): a deaf lowest-id node is
    /// skipped instead of silencing every alert. Leadership is claimed, not
    /// just computed: when that would be this node, it defers to a lower
    /// member that a fresh peer's report says it follows, one this node
    /// does not hear (in a one-sided partition two nodes would otherwise
    /// both lead, and each resolve the other's pages).
    fn leader(
        &self,
        inputs: &MeshInputs,
        quorum: &Quorum,
        lives: &BTreeMap<&NodeId, Life<'_>>,
    ) -> Option<NodeId> {
        if !quorum.has_quorum {
            return None;
        }
        let me = &inputs.local.id;
        let lowest = quorum
            .members
            .iter()
            .find(|m| *m == me || inputs.peers.get(*m).is_some_and(|p| p.report.has_quorum))?;
        if lowest != me {
            return Some(lowest.clone());
        }
        let followed_lower = inputs
            .peers
            .iter()
            .filter(|(id, _)| lives.get(id).is_some_and(|l| !l.fresh_paths.is_empty()))
            .filter_map(|(_, view)| view.report.leader.as_ref())
            .filter(|leader| *leader < me && inputs.configured.contains(*leader))
            .min();
        Some(followed_lower.unwrap_or(me).clone())
    }
}

/// The members with a fresh path, and this node: it is evaluating, so it
/// is alive by construction.
fn fresh_members(inputs: &MeshInputs, lives: &BTreeMap<&NodeId, Life<'_>>) -> BTreeSet<NodeId> {
    let mut fresh: BTreeSet<NodeId> = lives
        .iter()
        .filter(|(_, l)| !l.fresh_paths.is_empty())
        .map(|(id, _)| (*id).clone())
        .collect();
    fresh.insert(inputs.local.id.clone());
    fresh
}

/// The alarms this node and its fresh peers raise themselves, a peer's in
/// its words, quoted, with this node's fix. Bridges on
/// two nodes make a cycle in the mesh: only the merged view of every
/// node's alarms can tell.
fn reported_alarms(inputs: &MeshInputs, fresh: &BTreeSet<NodeId>) -> Vec<Alarm> {
    let mut alarms = inputs.local_alarms.clone();
    for (id, view) in &inputs.peers {
        if fresh.contains(id) {
            alarms.extend(
                view.report
                    .alarms
                    .iter()
                    .map(|a| crate::peer_alarms::as_reported_by(id, a.clone())),
            );
        }
    }
    crate::bridge::escalate_bridge_loops(alarms)
}

/// The members this node has evidence of life for: a fresh path, or its
/// probes answered.
fn hears(lives: &BTreeMap<&NodeId, Life<'_>>) -> Vec<NodeId> {
    lives
        .iter()
        .filter(|(_, l)| !l.fresh_paths.is_empty() || l.probes_answer)
        .map(|(id, _)| (*id).clone())
        .collect()
}

/// The members whose management path this node hears.
fn heard_on_management(lives: &BTreeMap<&NodeId, Life<'_>>) -> Vec<NodeId> {
    lives
        .iter()
        .filter(|(_, l)| l.fresh_paths.contains(&&Path::Management))
        .map(|(id, _)| (*id).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, identity};
    use meshd_domain::{Blame, LinkFigures, LinkVerdict, PeerReport, Severity};

    use super::*;
    use crate::fixtures::{default_engine_settings, epoch, moment_ms, stalled_once};
    use crate::peers::PathState;

    /// `from` observing its cable to `to`, silent for `silence_ms`.
    fn obs(from: &str, to: &str, silence_ms: u64) -> LinkObservation {
        LinkObservation {
            figures: LinkFigures {
                silence: Duration::from_millis(silence_ms),
                ..crate::fixtures::healthy_observation(from, to).figures
            },
            ..crate::fixtures::healthy_observation(from, to)
        }
    }

    /// A full mesh seen from its first node. Every peer speaks on the
    /// management path and one cable path, every link is quiet except as
    /// `silences` says, and every end observed it `received` ago.
    struct Mesh {
        nodes: Vec<&'static str>,
        silences: BTreeMap<(&'static str, &'static str), u64>,
        /// How long ago each peer's last message arrived (default 100 ms).
        last_heard_ms: BTreeMap<&'static str, u64>,
        /// Peers whose every stream is closed, and how many ms ago.
        closed: BTreeMap<&'static str, u64>,
        /// Peers silent on the management path only.
        management_cut: BTreeSet<&'static str>,
        /// One side of a management split (empty: none): its members hear
        /// only each other on the management network, the rest likewise.
        management_side: BTreeSet<&'static str>,
        hears: BTreeMap<&'static str, Vec<&'static str>>,
        no_quorum: BTreeSet<&'static str>,
        incarnation: BTreeMap<&'static str, u64>,
        lateness: Lateness,
        /// Links (as seen from the first end) whose RTT p99 is 5 ms.
        slow: BTreeSet<(&'static str, &'static str)>,
    }

    impl Mesh {
        fn new(nodes: &[&'static str]) -> Self {
            Self {
                nodes: nodes.to_vec(),
                silences: BTreeMap::new(),
                last_heard_ms: BTreeMap::new(),
                closed: BTreeMap::new(),
                management_cut: BTreeSet::new(),
                management_side: BTreeSet::new(),
                hears: BTreeMap::new(),
                no_quorum: BTreeSet::new(),
                incarnation: BTreeMap::new(),
                lateness: Lateness::default(),
                slow: BTreeSet::new(),
            }
        }

        /// `ms` into the mesh's life, which starts 100 s after the epoch so
        /// that its peers can have been heard from before.
        fn at(&self, ms: u64) -> Moment {
            moment_ms(100_000 + ms)
        }

        fn silence(&mut self, x: &'static str, y: &'static str, ms: u64) -> &mut Self {
            self.silences.insert((x, y), ms);
            self.silences.insert((y, x), ms);
            self
        }

        /// `node` died `ms` ago: its streams closed, its links silent since.
        fn kill(&mut self, node: &'static str, ms: u64) -> &mut Self {
            self.closed.insert(node, ms);
            self.last_heard_ms.insert(node, ms);
            for other in self.nodes.clone() {
                if other != node {
                    self.silences.insert((other, node), ms);
                    let hears: Vec<&str> = self
                        .nodes
                        .iter()
                        .copied()
                        .filter(|n| *n != other && !self.closed.contains_key(n))
                        .collect();
                    self.hears.insert(other, hears);
                }
            }
            self
        }

        fn observations(&self, node: &str) -> Vec<LinkObservation> {
            self.nodes
                .iter()
                .filter(|o| **o != node)
                .map(|o| {
                    let mut seen = obs(node, o, *self.silences.get(&(node, *o)).unwrap_or(&50));
                    if self.slow.contains(&(node, *o)) || self.slow.contains(&(*o, node)) {
                        seen.figures.rtt.p90 = Duration::from_millis(4);
                        seen.figures.rtt.p99 = Duration::from_millis(5);
                    }
                    seen
                })
                .collect()
        }

        fn same_side(&self, x: &str, y: &str) -> bool {
            self.management_side.contains(x) == self.management_side.contains(y)
        }

        fn inputs(&self, moment: Moment) -> MeshInputs {
            let now = moment.now;
            let local = self.nodes[0];
            let peers = self.nodes[1..]
                .iter()
                .filter(|n| self.last_heard_ms.get(*n) != Some(&u64::MAX))
                .map(|n| {
                    let ago = Duration::from_millis(*self.last_heard_ms.get(n).unwrap_or(&100));
                    let heard = now - ago;
                    let hears =
                        self.hears.get(n).cloned().unwrap_or_else(|| {
                            self.nodes.iter().copied().filter(|m| m != n).collect()
                        });
                    let report = PeerReport {
                        sender: identity(n, *self.incarnation.get(n).unwrap_or(&1)),
                        sequence: 1,
                        links: self.observations(n).into(),
                        hears: hears.iter().map(|h| id(h)).collect(),
                        heard_on_management: self
                            .nodes
                            .iter()
                            .filter(|m| {
                                *m != n && !self.management_cut.contains(*m) && self.same_side(n, m)
                            })
                            .map(|m| id(m))
                            .collect(),
                        has_quorum: !self.no_quorum.contains(n),
                        ..PeerReport::empty(identity(n, 1))
                    };
                    let closed_at = self
                        .closed
                        .get(n)
                        .map(|ms| now - Duration::from_millis(*ms));
                    let mut paths = BTreeMap::new();
                    let management = if self.management_cut.contains(n) || !self.same_side(local, n)
                    {
                        now - Duration::from_secs(60)
                    } else {
                        heard
                    };
                    paths.insert(
                        Path::Management,
                        PathState {
                            last_message: management,
                            closed_at,
                        },
                    );
                    paths.insert(
                        Path::Cable(format!("to-{n}")),
                        PathState {
                            last_message: heard,
                            closed_at,
                        },
                    );
                    let links_received = report
                        .links
                        .iter()
                        .map(|l| (l.remote.node.clone(), heard))
                        .collect();
                    (
                        id(n),
                        PeerView {
                            report: std::sync::Arc::new(report),
                            received_at: heard,
                            since: epoch(),
                            paths,
                            links_received,
                            duplicate: None,
                        },
                    )
                })
                .collect();
            MeshInputs {
                local: identity(local, 1),
                configured: self.nodes.iter().map(|n| id(n)).collect(),
                local_load: NodeLoad::default(),
                local_lateness: self.lateness,
                local_links: self
                    .observations(local)
                    .into_iter()
                    .map(|observation| LocalObservation {
                        observation,
                        at: now,
                    })
                    .collect(),
                expected_links: vec![],
                peers,
                local_alarms: vec![],
                clock_offsets: vec![],
                refused_releases: vec![],
            }
        }

        /// The engine's status, advised as a node advises it.
        fn evaluate(&self, engine: &mut Engine, ms: u64) -> MeshStatus {
            let moment = self.at(ms);
            crate::advice::advised(engine.evaluate(&self.inputs(moment), moment).status)
        }

        /// Evaluates every second from the start through `until_ms`, as a
        /// daemon looks at least that often.
        fn watch(&self, engine: &mut Engine, until_ms: u64) {
            for ms in (0..=until_ms).step_by(1_000) {
                self.evaluate(engine, ms);
            }
        }

        /// Evaluates at `ms`, when settling alarms are not raised yet, and
        /// again once they settled: the second status.
        fn evaluate_settled(&self, engine: &mut Engine, ms: u64) -> MeshStatus {
            let first = self.evaluate(engine, ms);
            assert!(
                first.alarms.iter().all(|a| !matches!(
                    a.kind,
                    AlarmKind::NoQuorum
                        | AlarmKind::ManagementUnreachable
                        | AlarmKind::MeshSaturated
                )),
                "raised before it settled: {:?}",
                first.alarms
            );
            let settle =
                u64::try_from(default_engine_settings().stale_after.as_millis()).expect("ms");
            self.evaluate(engine, ms + settle)
        }
    }

    fn link<'s>(status: &'s MeshStatus, x: &str, y: &str) -> &'s LinkVerdict {
        status
            .links
            .iter()
            .find(|l| {
                (l.a.node.as_str(), l.b.node.as_str()) == (x, y)
                    || (l.a.node.as_str(), l.b.node.as_str()) == (y, x)
            })
            .expect("link in status")
    }

    fn node<'s>(status: &'s MeshStatus, n: &str) -> &'s meshd_domain::NodeVerdict {
        status
            .nodes
            .iter()
            .find(|v| v.id.as_str() == n)
            .expect("node in status")
    }

    fn node_state(status: &MeshStatus, n: &str) -> NodeState {
        node(status, n).state
    }

    fn kinds(status: &MeshStatus) -> Vec<AlarmKind> {
        status.alarms.iter().map(|a| a.kind).collect()
    }

    #[test]
    fn a_healthy_mesh_is_all_up() {
        let mesh = Mesh::new(&["a", "b", "c", "d"]);
        let status = mesh.evaluate(&mut Engine::new(default_engine_settings()), 0);
        assert!(status.quorum.has_quorum);
        assert_eq!(status.links.len(), 6);
        assert!(
            status.links.iter().all(|l| l.state == LinkState::Up),
            "{status:#?}"
        );
        assert!(status.is_healthy(), "{status:#?}");
        assert_eq!(status.quorum.leader, Some(id("a")));
    }

    #[test]
    fn a_cut_cable_is_that_link_down_blamed_on_the_link_and_nothing_else() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        // Both ends went silent 700 ms ago and have been heard since.
        mesh.silence("b", "c", 700);
        let status = mesh.evaluate(&mut engine, 100);
        let cut = link(&status, "b", "c");
        assert_eq!(
            (cut.state, cut.blame),
            (LinkState::Down, Blame::Link),
            "{cut:?}"
        );
        assert_eq!(cut.evidence.len(), 2, "both ends speak: {cut:?}");
        assert_eq!(
            status
                .links
                .iter()
                .filter(|l| l.state != LinkState::Up)
                .count(),
            1
        );
        assert!(status.nodes.iter().all(|n| n.state == NodeState::Up));
    }

    /// Well past a loss or RTT window of evaluations, even for views
    /// seconds old: degradations before it are held
    /// (`Judge::unremembered_lateness`).
    const KNOWN: u64 = 15_000;

    #[test]
    fn one_slow_cable_is_degraded_but_a_host_slow_on_every_cable_blames_none() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.watch(&mut engine, KNOWN);
        mesh.slow.insert(("b", "c"));
        // Both ends' views arrive at one instant: both must speak again
        // before the link is blamed (`Judge::unspoken_end`).
        mesh.evaluate(&mut engine, KNOWN + 100);
        mesh.evaluate(&mut engine, KNOWN + 1_000);
        let status = mesh.evaluate(&mut engine, KNOWN + 2_000);
        let slow = link(&status, "b", "c");
        assert_eq!(
            (slow.state, slow.blame),
            (LinkState::Degraded, Blame::Link),
            "{slow:?}"
        );
        assert!(
            slow.evidence.iter().any(|e| e.contains("RTT p90 4.0ms")),
            "{slow:?}"
        );

        // b answers late on all three of its cables: its host, not a cable.
        let mut engine = Engine::new(default_engine_settings());
        mesh.slow.clear();
        mesh.watch(&mut engine, KNOWN);
        mesh.slow.extend([("b", "c"), ("b", "a"), ("b", "d")]);
        mesh.evaluate(&mut engine, KNOWN + 100);
        let status = mesh.evaluate(&mut engine, KNOWN + 1_000);
        assert!(
            status.links.iter().all(|l| l.state == LinkState::Up),
            "{:?}",
            status
                .links
                .iter()
                .map(|l| (&l.a.node, &l.b.node, l.state))
                .collect::<Vec<_>>()
        );
    }

    /// A node whose timers run late reports that late too: the loss its
    /// peers see reaches this node before the report of the lateness that
    /// explains it. A degradation waits for both ends to speak after the
    /// views it was first seen in, or for the silent end to go stale.
    #[test]
    fn a_degradation_waits_for_both_ends_to_speak_after_it() {
        let degraded = |status: &MeshStatus| {
            let l = link(status, "b", "c");
            (l.state, l.evidence.clone())
        };
        for c_speaks_again in [true, false] {
            let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
            let mut engine = Engine::new(default_engine_settings());
            mesh.watch(&mut engine, KNOWN);
            mesh.slow.insert(("b", "c"));
            mesh.last_heard_ms.insert("c", 900);
            let (state, evidence) = degraded(&mesh.evaluate(&mut engine, KNOWN + 100));
            assert_eq!(state, LinkState::Up, "{evidence:?}");
            assert!(
                evidence[0].starts_with("held: c has not spoken since the degradation"),
                "{evidence:?}"
            );
            let (from, to) = if c_speaks_again {
                mesh.last_heard_ms.insert("c", 50);
                (KNOWN + 1_000, KNOWN + 1_600)
            } else {
                // Stale 3 s after the views came; its cable still answers.
                mesh.last_heard_ms.insert("c", 3_900);
                (KNOWN + 3_100, KNOWN + 3_700)
            };
            // Looks at least every second meanwhile, as a daemon does.
            for ms in (KNOWN + 1_100..from).step_by(1_000) {
                mesh.evaluate(&mut engine, ms);
            }
            mesh.evaluate(&mut engine, from);
            if !c_speaks_again {
                mesh.last_heard_ms.insert("c", 4_500);
            }
            let (state, evidence) = degraded(&mesh.evaluate(&mut engine, to));
            assert_eq!(
                state,
                LinkState::Degraded,
                "c speaks again: {c_speaks_again}: {evidence:?}"
            );
        }
    }

    #[test]
    fn a_dead_node_is_one_node_fault_and_never_a_link_fault() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        // c's streams closed 700 ms ago and every link to it is silent
        // since; the others have been heard since. A restart would have
        // opened new streams by now: c is suspect, its links held.
        mesh.kill("c", 700);
        let status = mesh.evaluate(&mut engine, 100);
        assert_eq!(node_state(&status, "c"), NodeState::Suspect, "{status:#?}");
        for n in ["a", "b", "d"] {
            assert_ne!(link(&status, n, "c").blame, Blame::Link);
        }
        // Still gone past the restart grace: dead.
        let grace = u64::try_from(nodes::RESTART_GRACE.as_millis()).expect("ms");
        mesh.kill("c", grace + 100);
        let status = mesh.evaluate(&mut engine, 100 + grace);
        assert_eq!(node_state(&status, "c"), NodeState::Down, "{status:#?}");
        for n in ["a", "b", "d"] {
            let l = link(&status, n, "c");
            assert_eq!((l.state, l.blame), (LinkState::Down, Blame::Node), "{l:?}");
            assert_eq!(l.blamed_node, Some(id("c")));
        }
        // c comes back: its links are up, and that is not a flap.
        let mesh = Mesh::new(&["a", "b", "c", "d"]);
        let status = mesh.evaluate(&mut engine, 200);
        assert_eq!(node_state(&status, "c"), NodeState::Up);
        assert!(
            status.links.iter().all(|l| l.state == LinkState::Up),
            "{status:#?}"
        );
        assert!(status.links.iter().all(|l| l.recent_changes == 0));
    }

    /// A daemon stopped for a restart sent its last heartbeat up to an
    /// interval before its streams closed: the grace runs from the close,
    /// so the new run gets all of it, and a death past it is still down.
    #[test]
    fn the_restart_grace_runs_from_the_streams_closing_not_the_last_heartbeat() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        let grace = u64::try_from(nodes::RESTART_GRACE.as_millis()).expect("ms");
        // c spoke 2.5 s ago, 900 ms before its streams closed.
        mesh.kill("c", grace + 500);
        mesh.closed.insert("c", grace - 400);
        let status = mesh.evaluate(&mut engine, 100);
        assert_eq!(node_state(&status, "c"), NodeState::Suspect, "{status:#?}");
        let c = status.nodes.iter().find(|n| n.id == id("c")).expect("c");
        assert!(
            c.evidence[0].starts_with("every stream closed 1.6s ago; last message 2.5s ago"),
            "{c:?}"
        );
        // The grace after the close is over: down.
        mesh.kill("c", grace + 1_000);
        mesh.closed.insert("c", grace + 100);
        let status = mesh.evaluate(&mut engine, 200);
        assert_eq!(node_state(&status, "c"), NodeState::Down, "{status:#?}");
        // Closed late after a long silence: `stale_after` from the last
        // message still bounds it.
        let stale = u64::try_from(default_engine_settings().stale_after.as_millis()).expect("ms");
        mesh.kill("c", stale + 100);
        mesh.closed.insert("c", 100);
        let status = mesh.evaluate(&mut engine, 300);
        assert_eq!(node_state(&status, "c"), NodeState::Down, "{status:#?}");
    }

    /// A frozen node (its streams open but quiet) goes suspect, then down
    /// after `stale_after`; in between its silent links are held, never
    /// blamed on the link.
    #[test]
    fn a_frozen_nodes_links_are_held_until_it_is_down() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        for (heard_ms, expected) in [(2_100, NodeState::Suspect), (3_100, NodeState::Down)] {
            mesh.last_heard_ms.insert("c", heard_ms);
            for n in ["a", "b", "d"] {
                mesh.silences.insert((n, "c"), heard_ms);
                mesh.hears.insert(n, vec!["a", "b", "d"]);
            }
            let status = mesh.evaluate(&mut engine, heard_ms);
            assert_eq!(node_state(&status, "c"), expected, "{status:#?}");
            for n in ["a", "b", "d"] {
                let l = link(&status, n, "c");
                assert_ne!(l.blame, Blame::Link, "{l:?}");
            }
        }
    }

    /// One member saying it hears a node this node cannot hear (a stolen
    /// key, or a one-sided partition) delays the verdict by
    /// `HEARSAY_DELAY`, and no longer; most members hearing it keep it up.
    #[test]
    fn one_members_word_delays_a_death_but_most_members_keep_a_node_up() {
        let stale_after = default_engine_settings().stale_after;
        let ms = |d: Duration| u64::try_from(d.as_millis()).expect("ms");
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        // Without b's word c would be down by now.
        let silent = ms(stale_after) + 100;
        mesh.kill("c", silent);
        // b lies: it hears c. d tells the truth.
        mesh.hears.insert("b", vec!["a", "c", "d"]);
        let status = mesh.evaluate(&mut engine, silent);
        let c = node(&status, "c");
        assert_eq!(c.state, NodeState::Suspect, "{c:?}");
        assert!(
            c.evidence.iter().any(|e| e.contains("heard by b only")),
            "{c:?}"
        );
        let dead_for = stale_after + HEARSAY_DELAY;
        mesh.kill("c", ms(dead_for));
        mesh.hears.insert("b", vec!["a", "c", "d"]);
        let status = mesh.evaluate(&mut engine, ms(dead_for));
        assert_eq!(node_state(&status, "c"), NodeState::Down, "{status:#?}");

        // Silent to a alone, heard by b and d: a one-sided partition.
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.kill("c", ms(dead_for) * 2);
        mesh.hears.insert("b", vec!["a", "c", "d"]);
        mesh.hears.insert("d", vec!["a", "b", "c"]);
        let status = mesh.evaluate(&mut engine, ms(dead_for) * 2);
        assert_eq!(node_state(&status, "c"), NodeState::Up, "{status:#?}");
    }

    /// a's RDMA ports are down on all three of its cables while IP works:
    /// a's host, raised once as its `rdma_disabled`, not three link faults.
    /// One cable's RDMA port down stays that cable's.
    #[test]
    fn a_hosts_own_rdma_failure_is_one_alarm_not_a_fault_per_cable() {
        let mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(default_engine_settings());
        let rdma_down_on = |inputs: &mut MeshInputs, far: &[&str]| {
            for l in &mut inputs.local_links {
                if far.contains(&l.observation.remote.node.as_str()) {
                    l.observation.figures.rdma_port_state = meshd_domain::RdmaPortState::Down;
                }
            }
        };
        let mut status = None;
        for ms in (0..=12_000).step_by(500) {
            let moment = mesh.at(ms);
            let mut inputs = mesh.inputs(moment);
            rdma_down_on(&mut inputs, &["b", "c", "d"]);
            status = Some(engine.evaluate(&inputs, moment).status);
        }
        let status = status.expect("evaluated");
        for far in ["b", "c", "d"] {
            let l = link(&status, "a", far);
            assert_eq!(l.state, LinkState::Up, "{l:?}");
        }
        let rdma: Vec<&Alarm> = status
            .alarms
            .iter()
            .filter(|a| a.kind == AlarmKind::RdmaDisabled)
            .collect();
        assert_eq!(rdma.len(), 1, "{:?}", status.alarms);
        assert_eq!(rdma[0].node, id("a"));

        let mut engine = Engine::new(default_engine_settings());
        let mut status = None;
        for ms in (0..=12_000).step_by(500) {
            let moment = mesh.at(ms);
            let mut inputs = mesh.inputs(moment);
            rdma_down_on(&mut inputs, &["b"]);
            status = Some(engine.evaluate(&inputs, moment).status);
        }
        let status = status.expect("evaluated");
        let l = link(&status, "a", "b");
        assert_eq!(l.state, LinkState::Degraded, "{l:?}");
        assert!(
            status
                .alarms
                .iter()
                .all(|a| a.kind != AlarmKind::RdmaDisabled)
        );
    }

    #[test]
    fn a_management_cut_is_a_warning_about_the_node_not_a_node_down() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        mesh.management_cut.insert("c");
        let mut engine = Engine::new(default_engine_settings());
        let status = mesh.evaluate_settled(&mut engine, 0);
        assert_eq!(node_state(&status, "c"), NodeState::Up);
        assert!(
            status.links.iter().all(|l| l.state == LinkState::Up),
            "{status:#?}"
        );
        let alarm = status
            .alarms
            .iter()
            .find(|a| a.kind == AlarmKind::ManagementUnreachable)
            .expect("management_unreachable");
        assert_eq!(alarm.node, id("c"));
        assert_eq!(alarm.severity, Severity::Warning);
        assert_eq!(kinds(&status), vec![AlarmKind::ManagementUnreachable]);
    }

    #[test]
    fn a_management_split_into_halves_is_named_once_with_its_groups() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        mesh.management_side.extend(["c", "d"]);
        let status = mesh.evaluate_settled(&mut Engine::new(default_engine_settings()), 0);
        assert!(status.quorum.has_quorum, "the cables join everyone");
        assert!(status.nodes.iter().all(|n| n.state == NodeState::Up));
        assert_eq!(kinds(&status), vec![AlarmKind::ManagementSplit]);
        assert_eq!(
            status.alarms[0].summary,
            "the management network is split: a, b | c, d"
        );
    }

    #[test]
    fn two_nodes_cut_off_together_are_a_split_not_two_ports() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d", "e"]);
        mesh.management_side.extend(["d", "e"]);
        let status = mesh.evaluate_settled(&mut Engine::new(default_engine_settings()), 0);
        assert_eq!(kinds(&status), vec![AlarmKind::ManagementSplit]);
        assert_eq!(
            status.alarms[0].summary,
            "the management network is split: a, b, c | d, e"
        );
        // Seen from the far side, the same groups.
        let mut far = Mesh::new(&["d", "a", "b", "c", "e"]);
        far.management_side.extend(["d", "e"]);
        let status = far.evaluate_settled(&mut Engine::new(default_engine_settings()), 0);
        assert_eq!(
            status.alarms[0].summary,
            "the management network is split: a, b, c | d, e"
        );
    }

    #[test]
    fn a_member_refused_for_its_certificate_is_that_refusal_not_management_unreachable() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        mesh.management_cut.insert("c");
        let mut engine = Engine::new(default_engine_settings());
        let refused = meshd_domain::Alarm {
            kind: AlarmKind::CertificateRefused,
            severity: Severity::Critical,
            node: id("c"),
            subject: "certificate".to_owned(),
            summary: "the daemon of c is refused by a: its certificate expired".to_owned(),
            evidence: Vec::new(),
            fix: None,
            since: std::time::SystemTime::UNIX_EPOCH,
            updated: std::time::SystemTime::UNIX_EPOCH,
        };
        let settle = u64::try_from(default_engine_settings().stale_after.as_millis()).expect("ms");
        for ms in [0, settle] {
            let moment = mesh.at(ms);
            let mut inputs = mesh.inputs(moment);
            inputs.local_alarms.push(refused.clone());
            let status = engine.evaluate(&inputs, moment).status;
            assert_eq!(
                kinds(&status),
                vec![AlarmKind::CertificateRefused],
                "{:?}",
                status.alarms
            );
            // Its cables answer, but a refused daemon is never up.
            let c = node(&status, "c");
            assert_eq!(c.state, NodeState::Suspect, "{c:?}");
            assert!(
                c.evidence.iter().any(|e| e.contains("refused here")),
                "{c:?}"
            );
        }
    }

    #[test]
    fn a_peer_not_heard_since_the_start_is_down_only_once_it_had_time_to_connect() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        mesh.kill("c", 5_000);
        mesh.last_heard_ms.insert("c", u64::MAX);
        let mut engine = Engine::new(default_engine_settings());
        let status = mesh.evaluate(&mut engine, 0);
        assert_eq!(node_state(&status, "c"), NodeState::Suspect, "{status:#?}");
        assert!(
            status.links.iter().all(|l| l.state != LinkState::Down),
            "no link is down on a start: {status:#?}"
        );
        let settle = u64::try_from(default_engine_settings().stale_after.as_millis()).expect("ms");
        let status = mesh.evaluate(&mut engine, settle);
        assert_eq!(node_state(&status, "c"), NodeState::Down, "{status:#?}");
        let c = status.nodes.iter().find(|n| n.id == id("c")).expect("c");
        assert!(
            c.evidence
                .iter()
                .any(|e| e.contains("since this node started")),
            "{c:?}"
        );
    }

    #[test]
    fn a_two_node_mesh_sees_its_dead_peer_down_without_quorum() {
        let mut mesh = Mesh::new(&["a", "b"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        mesh.kill("b", 2_100);
        let status = mesh.evaluate_settled(&mut engine, 100);
        assert!(!status.quorum.has_quorum);
        assert_eq!(node_state(&status, "b"), NodeState::Down);
        assert_eq!(kinds(&status), vec![AlarmKind::NoQuorum]);
    }

    #[test]
    fn a_restart_does_not_plug_a_down_link_back() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        mesh.silence("b", "c", 700);
        let status = mesh.evaluate(&mut engine, 100);
        assert_eq!(link(&status, "b", "c").state, LinkState::Down);
        // c restarts: a new incarnation, first heard at 200 ms. Its new run
        // has not answered yet: the link stays down, its page with it.
        let mut back = Mesh::new(&["a", "b", "c"]);
        back.incarnation.insert("c", 2);
        let restarted = back.at(200);
        let evaluate = |engine: &mut Engine, ms: u64| {
            let moment = back.at(ms);
            let mut inputs = back.inputs(moment);
            if let Some(c) = inputs.peers.get_mut(&id("c")) {
                c.since = restarted.now;
            }
            engine.evaluate(&inputs, moment).status
        };
        let l = link(&evaluate(&mut engine, 200), "b", "c").clone();
        assert_eq!((l.state, l.blame), (LinkState::Down, Blame::Link), "{l:?}");
        // Both ends answer once the new run could: the cable was back.
        for ms in (300..=6_000).step_by(100) {
            evaluate(&mut engine, ms);
        }
        let l = link(&evaluate(&mut engine, 6_100), "b", "c").clone();
        assert_eq!(l.state, LinkState::Up, "{l:?}");
        assert_eq!(l.recent_changes, 1, "one outage, no flap: {l:?}");
    }

    #[test]
    fn a_silence_from_before_a_peer_started_is_not_the_cables() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        // b starts now: a probed it before its daemon was there.
        mesh.incarnation.insert("b", 2);
        mesh.silence("a", "b", 900);
        let started = mesh.at(1_000);
        let with_b_since = |mesh: &Mesh, moment: Moment| {
            let mut inputs = mesh.inputs(moment);
            if let Some(b) = inputs.peers.get_mut(&id("b")) {
                b.since = started.now;
            }
            inputs
        };
        let status = engine
            .evaluate(&with_b_since(&mesh, started), started)
            .status;
        let l = link(&status, "a", "b");
        assert_ne!(l.state, LinkState::Down, "{l:?}");
        assert!(l.evidence.iter().any(|e| e.starts_with("held: b")), "{l:?}");
        // Still silent once b had down_after to answer, and was heard long
        // enough to know how late it runs: the cable.
        let settled = default_engine_settings()
            .link
            .down_after
            .max(crate::lateness::LATENESS_MEMORY);
        let settled = u64::try_from(settled.as_millis()).expect("ms");
        mesh.silence("a", "b", 900 + settled + 100);
        let later = mesh.at(1_000 + settled + 100);
        let status = engine.evaluate(&with_b_since(&mesh, later), later).status;
        let l = link(&status, "a", "b");
        assert_eq!((l.state, l.blame), (LinkState::Down, Blame::Link), "{l:?}");
    }

    #[test]
    fn an_advised_status_carries_a_fix_for_every_node_and_link_not_up() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        mesh.kill("c", 5_000);
        let status = mesh.evaluate(&mut engine, 100);
        let c = status.nodes.iter().find(|n| n.id == id("c")).expect("c");
        assert_eq!(c.state, NodeState::Down, "{status:#?}");
        assert!(
            c.fix
                .as_deref()
                .is_some_and(|f| f.starts_with("bring c back")),
            "{c:?}"
        );
        for node in status.nodes.iter().filter(|n| n.state == NodeState::Up) {
            assert_eq!(node.fix, None, "{node:?}");
        }
        for l in &status.links {
            let fix = l.fix.as_deref().unwrap_or_default();
            if l.a.node == id("c") || l.b.node == id("c") {
                assert_eq!(l.blame, Blame::Node, "{l:?}");
                assert!(fix.starts_with("bring c back"), "{fix}");
            } else {
                assert_eq!(l.state, LinkState::Up, "{l:?}");
                assert!(l.fix.is_none());
            }
        }
    }

    #[test]
    fn without_quorum_the_fix_is_the_management_network() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        mesh.kill("b", 5_000).kill("c", 5_000);
        let status = mesh.evaluate(&mut Engine::new(default_engine_settings()), 0);
        assert!(!status.quorum.has_quorum);
        for l in &status.links {
            assert!(
                l.fix
                    .as_deref()
                    .is_some_and(|f| f.starts_with("this node has no quorum")),
                "{l:?}"
            );
            assert!(!l.evidence.is_empty());
        }
    }

    #[test]
    fn a_late_evaluator_holds_its_node_verdicts() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        // a's own timers ran 1.5 s late: it read nothing from c meanwhile.
        mesh.lateness = stalled_once(Duration::from_millis(3_000));
        mesh.last_heard_ms.insert("c", 3_200);
        mesh.silence("a", "c", 3_200);
        for n in ["b", "d"] {
            mesh.hears.insert(n, vec!["a", "b", "d"]);
        }
        let status = mesh.evaluate(&mut engine, 3_200);
        let c = status.nodes.iter().find(|n| n.id == id("c")).expect("c");
        assert_eq!(c.state, NodeState::Up, "{c:?}");
        assert!(c.evidence.iter().any(|e| e.contains("late")), "{c:?}");
    }

    #[test]
    fn a_mesh_that_runs_late_holds_its_link_verdicts_and_says_so() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        mesh.lateness = stalled_once(Duration::from_millis(200));
        // b hears nothing from c, c hears b: one end silent, held.
        mesh.silences.insert(("b", "c"), 900);
        let moment = mesh.at(100);
        let mut inputs = mesh.inputs(moment);
        for view in inputs.peers.values_mut() {
            std::sync::Arc::make_mut(&mut view.report).lateness =
                stalled_once(Duration::from_millis(300));
        }
        let status = engine.evaluate(&inputs, moment).status;
        let held = link(&status, "b", "c");
        assert_eq!(held.state, LinkState::Up, "{held:?}");
        assert!(held.evidence[0].starts_with("held: "), "{held:?}");
        assert!(
            !kinds(&status).contains(&AlarmKind::MeshSaturated),
            "a moment late is not yet an alarm"
        );
        let later =
            mesh.at(
                100 + u64::try_from(default_engine_settings().stale_after.as_millis()).expect("ms")
            );
        let mut inputs = mesh.inputs(later);
        for view in inputs.peers.values_mut() {
            std::sync::Arc::make_mut(&mut view.report).lateness =
                stalled_once(Duration::from_millis(300));
        }
        let status = engine.evaluate(&inputs, later).status;
        assert!(kinds(&status).contains(&AlarmKind::MeshSaturated));
    }

    fn version_skew(status: &MeshStatus) -> &Alarm {
        status
            .alarms
            .iter()
            .find(|a| a.kind == AlarmKind::VersionSkew)
            .unwrap_or_else(|| panic!("no version_skew: {status:#?}"))
    }

    #[test]
    fn members_on_different_releases_are_a_notice_never_a_page() {
        let mesh = Mesh::new(&["a", "b", "c"]);
        let mut engine = Engine::new(default_engine_settings());
        let same = mesh.evaluate(&mut engine, 0);
        assert!(!kinds(&same).contains(&AlarmKind::VersionSkew), "{same:#?}");

        let moment = mesh.at(100);
        let mut inputs = mesh.inputs(moment);
        if let Some(c) = inputs.peers.get_mut(&id("c")) {
            std::sync::Arc::make_mut(&mut c.report).sender.version = "0.2.0".into();
        }
        let status = engine.evaluate(&inputs, moment).status;
        let skew = version_skew(&status);
        assert_eq!(skew.severity, Severity::Info);
        assert_eq!(skew.node, id("a"));
        assert_eq!(skew.summary, "members run 2 meshd releases");
        assert_eq!(
            skew.evidence,
            ["meshd 0.2.0 on c", "meshd test on a, b"],
            "{skew:?}"
        );
        let posted = crate::alerts::alerts(&status, crate::alerts::Role::Leader);
        assert!(
            posted
                .iter()
                .all(|alert| !alert.labels.values().any(|v| v.contains("Version"))),
            "a notice posts no alert: {posted:?}"
        );
    }

    #[test]
    fn a_member_refused_for_its_protocol_is_named_with_the_side_to_upgrade() {
        let mesh = Mesh::new(&["a", "b", "c"]);
        let mut engine = Engine::new(default_engine_settings());
        let moment = mesh.at(100);
        let mut inputs = mesh.inputs(moment);
        inputs.peers.remove(&id("c"));
        inputs.refused_releases = vec![RefusedRelease {
            node: id("c"),
            version: "0.1.0".into(),
            why: "it speaks peer protocol 0, and this node understands 1 or newer: upgrade it"
                .into(),
            older: true,
        }];
        let status = engine.evaluate(&inputs, moment).status;
        let skew = version_skew(&status);
        assert_eq!(skew.severity, Severity::Warning, "{skew:?}");
        assert_eq!(
            skew.summary,
            "members run 2 meshd releases, and this node refuses c's"
        );
        assert_eq!(
            skew.evidence,
            [
                "meshd 0.1.0 on c",
                "meshd test on a, b",
                "c (meshd 0.1.0) is refused here: it speaks peer protocol 0, and this node \
                 understands 1 or newer: upgrade it"
            ],
            "{skew:?}"
        );
        assert!(
            skew.fix
                .as_deref()
                .is_some_and(|f| f.starts_with("upgrade c")),
            "{skew:?}"
        );
    }

    #[test]
    fn a_late_node_that_hears_nobody_is_not_a_late_mesh() {
        let settle = u64::try_from(default_engine_settings().stale_after.as_millis()).expect("ms");
        let mut alone = Mesh::new(&["a", "b", "c"]);
        alone.last_heard_ms.insert("b", u64::MAX);
        alone.last_heard_ms.insert("c", u64::MAX);
        alone.lateness = stalled_once(Duration::from_millis(300));
        let mut engine = Engine::new(default_engine_settings());
        alone.evaluate(&mut engine, 0);
        let status = alone.evaluate(&mut engine, settle + 100);
        assert!(kinds(&status).contains(&AlarmKind::NoQuorum), "{status:#?}");
        assert!(
            !kinds(&status).contains(&AlarmKind::MeshSaturated),
            "one late node of three is not most of the mesh: {status:#?}"
        );

        // Two of three late, the third dead: most of the mesh is late.
        let mut two_late = Mesh::new(&["a", "b", "c"]);
        two_late.kill("c", settle * 2);
        two_late.lateness = stalled_once(Duration::from_millis(300));
        let mut engine = Engine::new(default_engine_settings());
        let mut status = two_late.evaluate(&mut engine, 0);
        for ms in [100, settle + 100] {
            let moment = two_late.at(ms);
            let mut inputs = two_late.inputs(moment);
            if let Some(b) = inputs.peers.get_mut(&id("b")) {
                std::sync::Arc::make_mut(&mut b.report).lateness =
                    stalled_once(Duration::from_millis(300));
            }
            status = engine.evaluate(&inputs, moment).status;
        }
        assert!(
            kinds(&status).contains(&AlarmKind::MeshSaturated),
            "{status:#?}"
        );
    }

    #[test]
    fn a_clock_off_the_meshs_is_an_alarm_never_a_verdict() {
        let mesh = Mesh::new(&["a", "b", "c"]);
        let moment = mesh.at(0);
        let mut inputs = mesh.inputs(moment);
        inputs.clock_offsets = ["b", "c"]
            .map(|p| ClockOffset {
                peer: id(p),
                offset_ns: 15_000_000_000,
                rtt: Duration::from_micros(400),
            })
            .to_vec();
        let status = Engine::new(default_engine_settings())
            .evaluate(&inputs, moment)
            .status;
        assert!(status.nodes.iter().all(|n| n.state == NodeState::Up));
        let skew = status
            .alarms
            .iter()
            .find(|a| a.kind == AlarmKind::ClockSkew)
            .expect("clock_skew");
        assert_eq!(skew.node, id("a"));
        assert!(skew.summary.contains("behind"), "{}", skew.summary);
    }

    #[test]
    fn the_leader_is_the_lowest_member_that_holds_quorum_itself() {
        let mut mesh = Mesh::new(&["c", "a", "b", "d"]);
        // a is the lowest id, but hears nobody: it reports no quorum.
        mesh.no_quorum.insert("a");
        let status = mesh.evaluate(&mut Engine::new(default_engine_settings()), 0);
        assert_eq!(status.quorum.leader, Some(id("b")));
    }

    #[test]
    fn a_peer_heard_by_others_is_up_even_if_not_heard_here() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d", "e"]);
        mesh.last_heard_ms.insert("e", 5_000);
        mesh.silence("a", "e", 5_000);
        let status = mesh.evaluate(&mut Engine::new(default_engine_settings()), 0);
        let e = status.nodes.iter().find(|n| n.id == id("e")).expect("e");
        assert_eq!(e.state, NodeState::Up);
        assert!(e.evidence.iter().any(|l| l == "heard by b, c, d"), "{e:?}");
    }

    #[test]
    fn a_minority_partition_raises_nothing_but_no_quorum() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        mesh.last_heard_ms.insert("c", u64::MAX);
        mesh.last_heard_ms.insert("d", u64::MAX);
        mesh.silence("a", "c", 5_000);
        let status = mesh.evaluate_settled(&mut Engine::new(default_engine_settings()), 0);
        assert!(!status.quorum.has_quorum);
        assert!(status.links.iter().all(|l| l.state == LinkState::Unknown));
        assert_eq!(kinds(&status), vec![AlarmKind::NoQuorum]);
        // b's reports say it still hears c and d: the fault is a's.
        assert_eq!(
            status.alarms[0].evidence,
            vec![
                "not heard: c, d".to_owned(),
                "c is heard by b but not here".to_owned(),
                "d is heard by b but not here".to_owned(),
            ]
        );
        let fix = status.alarms[0].fix.as_deref().unwrap_or_default();
        assert!(fix.starts_with("a's own paths fail"), "{fix}");
    }

    #[test]
    fn no_quorum_with_two_of_four_dead_says_which_to_bring_back() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        mesh.kill("b", 5_000).kill("c", 5_000);
        let status = mesh.evaluate_settled(&mut Engine::new(default_engine_settings()), 0);
        assert!(!status.quorum.has_quorum);
        let alarm = &status.alarms[0];
        assert_eq!(
            alarm.evidence,
            vec![
                "not heard: b, c".to_owned(),
                "they are heard by none of a, d on any path (management or cable)".to_owned(),
            ]
        );
        assert_eq!(
            alarm.fix.as_deref(),
            Some(
                "b, c look down: bring back 1 of them for quorum (3 of 4 members), then check \
                 that meshd runs there"
            )
        );
    }

    #[test]
    fn no_quorum_hearing_nobody_names_both_explanations() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        mesh.kill("b", 5_000).kill("c", 5_000);
        let status = mesh.evaluate_settled(&mut Engine::new(default_engine_settings()), 0);
        let fix = status.alarms[0].fix.as_deref().unwrap_or_default();
        assert!(
            fix.starts_with("either a is cut off") && fix.contains("bring back 1 of b, c"),
            "{fix}"
        );
    }

    #[test]
    fn ends_speak_only_for_themselves() {
        let mesh = Mesh::new(&["a", "b", "c"]);
        let moment = mesh.at(0);
        let mut inputs = mesh.inputs(moment);
        let b = inputs.peers.get_mut(&id("b")).expect("b");
        let liar = std::sync::Arc::make_mut(&mut b.report);
        // b claims to be c's end of c–a, and reports a link to a stranger.
        let mut links = liar.links.to_vec();
        links.push(obs("c", "a", 9_000));
        links.push(obs("b", "zz", 9_000));
        liar.links = links.into();
        let status = Engine::new(default_engine_settings())
            .evaluate(&inputs, moment)
            .status;
        assert_eq!(link(&status, "a", "c").state, LinkState::Up);
        assert_eq!(status.links.len(), 3);
    }

    #[test]
    fn expected_links_appear_before_any_observation() {
        let mesh = Mesh::new(&["a", "b"]);
        let moment = mesh.at(0);
        let mut inputs = mesh.inputs(moment);
        inputs.local_links.clear();
        for view in inputs.peers.values_mut() {
            std::sync::Arc::make_mut(&mut view.report).links = std::sync::Arc::new([]);
        }
        inputs.expected_links.push(ExpectedLink {
            local: LinkEnd {
                iface: Some("en2".into()),
                ..LinkEnd::node_only(id("a"))
            },
            remote: LinkEnd::node_only(id("b")),
            expected_speed_bps: None,
        });
        let status = Engine::new(default_engine_settings())
            .evaluate(&inputs, moment)
            .status;
        assert_eq!(status.links.len(), 1);
        assert_eq!(status.links[0].state, LinkState::Unknown);
        assert_eq!(status.links[0].a.iface.as_deref(), Some("en2"));
    }

    #[test]
    fn a_membership_change_keeps_the_history_of_remaining_links() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        let mut engine = Engine::new(default_engine_settings());
        mesh.evaluate(&mut engine, 0);
        mesh.silence("b", "c", 700);
        let before = mesh.evaluate(&mut engine, 100);
        assert_eq!(link(&before, "b", "c").state, LinkState::Down);
        // "ab" sorts between a and b: every later member moves up one place.
        let mut grown = Mesh::new(&["a", "ab", "b", "c"]);
        grown.silence("b", "c", 800);
        let after = grown.evaluate(&mut engine, 200);
        let bc = link(&after, "b", "c");
        assert_eq!(
            (bc.state, bc.since),
            (LinkState::Down, before.evaluated_at),
            "history kept"
        );
        assert_eq!(after.links.len(), 6);
        let shrunk = Mesh::new(&["a", "b"]);
        assert_eq!(shrunk.evaluate(&mut engine, 300).links.len(), 1);
    }

    #[test]
    fn the_next_deadline_is_when_a_quiet_peer_turns_suspect() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        mesh.last_heard_ms.insert("b", 1_500);
        let moment = mesh.at(0);
        let evaluation =
            Engine::new(default_engine_settings()).evaluate(&mesh.inputs(moment), moment);
        assert_eq!(
            evaluation.next_deadline,
            moment.now - Duration::from_millis(1_500) + default_engine_settings().suspect_after
        );
    }
}
