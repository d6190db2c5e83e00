//! A whole mesh of node cores on simulated time and a simulated network,
//! driven the way the daemon drives one core: a probe task ticking every
//! probe interval (`daemon/src/probe/engine.rs`), report streams per peer
//! and path that open with everything sent so far and then carry every
//! update (`daemon/src/transport/streams.rs`), an intake that hands stream
//! opens, updates and closes to the peer book (`daemon/src/grpc/peer.rs`),
//! an aggregator that looks when an input changed or the core's deadline
//! fell due (`daemon/src/aggregator.rs`) and an alert pusher stepping the
//! alert state after every look (`daemon/src/alert.rs`).
//!
//! Everything is deterministic: events run in time order (ties in the order
//! they were queued) and the only randomness is the seed's.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::facts::{BootIdentity, NodeFacts};
use meshd_domain::fixtures::{numbered_id, wall};
use meshd_domain::{
    Event, Incarnation, LinkEnd, MeshStatus, NodeId, NodeIdentity, PeerReply, Refusal,
    ReportUpdate, StreamOpen,
};
use meshd_model::alerts::{self, AlertState, Labels};

#[path = "alertmanager.rs"]
pub mod alertmanager;
use alertmanager::Alertmanager;
use meshd_domain::jobs::{JobBackend, ProcessState, RankIdentity};
use meshd_model::cpu::{CpuSample, ProcessSample};
use meshd_model::fixtures;
use meshd_model::job_watch::Sampled;
use meshd_model::lateness::LatenessLog;
use meshd_model::linkstats::{
    LinkStats, LinkStatsConfig, ProbeClass, ProbeNews, ProbeStats, RTT_BOUNDS,
};
use meshd_model::node::{Decision, Look, NodeCore, NodeSettings, ReplyAction};
use meshd_model::peers::{Path, PeerBook, StreamId};
use meshd_model::time::Moment;
use meshd_model::verdict::ExpectedLink;

/// The daemon's timing with a config that sets nothing.
pub mod timing {
    use std::time::Duration;

    pub const PROBE_INTERVAL: Duration = Duration::from_millis(100);
    pub const MTU_INTERVAL: Duration = Duration::from_secs(1);
    pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
    pub const DOWN_AFTER: Duration = Duration::from_millis(600);
    /// `cadence::longest_gap(PROBE_INTERVAL)`.
    pub const TICK_GAP: Duration = Duration::from_millis(128);
    /// `aggregator::MIN_LOOK_GAP`.
    pub const MIN_LOOK_GAP: Duration = Duration::from_millis(5);
    /// `transport::streams`: connect timeout and reconnect backoff.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
    pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
    pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
    /// HTTP/2 keepalive on both ends: a ping every 10 s, answered within
    /// 10 s, so a connection that carries nothing for 20 s is closed.
    pub const KEEPALIVE_DEAD: Duration = Duration::from_secs(20);
    /// `alerting.resend_interval`.
    pub const RESEND: Duration = Duration::from_secs(30);
    /// One-way latency of the management network and of a cable.
    pub const MANAGEMENT_LATENCY: Duration = Duration::from_micros(300);
    pub const CABLE_LATENCY: Duration = Duration::from_micros(25);
}

use timing::*;

/// A small deterministic generator for phases and jitter.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A draw of its own for one thing, from `key` and what names it: it
    /// does not move when other things draw more or less (a probe's fate
    /// stays its own whatever probes are added around it).
    pub fn draw_for(key: u64, names: [u64; 3]) -> u64 {
        let mixed = names.iter().fold(key, |acc, name| {
            // splitmix64's finaliser over each part.
            let mut z = acc ^ name.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        });
        Self::new(mixed).next()
    }
}

/// Which of the two paths between a pair of nodes a stream takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathKind {
    Management,
    Cable,
}

/// A cable, by its ends' indices, lower first.
pub type Cable = (usize, usize);

pub fn cable(a: usize, b: usize) -> Cable {
    (a.min(b), a.max(b))
}

/// How a cable is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CableCut {
    /// Pulled: the interface loses carrier, probes cannot even leave.
    Pulled,
    /// Dark: frames vanish, the interfaces stay up.
    Dark,
}

/// The network's state, changed by faults.
#[derive(Debug, Default, Clone)]
pub struct Network {
    pub cut_cables: BTreeMap<Cable, CableCut>,
    /// Cables that drop this many per mille of the probes crossing them
    /// (a bad cable or port: frames lost, the link stays up).
    pub lossy_cables: BTreeMap<Cable, u64>,
    /// Nodes cut from the management network both ways.
    pub management_cut: BTreeSet<usize>,
    /// Nodes whose inbound management connections are blocked (a
    /// firewall, a stale address at the peers); what they open works.
    pub management_inbound_blocked: BTreeSet<usize>,
    /// The management network split in two: the nodes of this side reach
    /// only each other on it, the rest only each other.
    pub management_split: Option<BTreeSet<usize>>,
    /// Pairs of nodes whose management traffic to each other is dropped
    /// (a firewall rule, a stale route) while both reach everyone else.
    pub management_pairs_cut: BTreeSet<Cable>,
}

impl Network {
    /// Whether a connection opened by `from` to `to` on `kind` carries
    /// traffic now.
    fn conn_usable(&self, from: usize, to: usize, kind: PathKind) -> bool {
        match kind {
            PathKind::Management => {
                !self.management_cut.contains(&from)
                    && !self.management_cut.contains(&to)
                    && !self.management_inbound_blocked.contains(&to)
                    && self
                        .management_split
                        .as_ref()
                        .is_none_or(|side| side.contains(&from) == side.contains(&to))
                    && !self.management_pairs_cut.contains(&cable(from, to))
            }
            PathKind::Cable => !self.cut_cables.contains_key(&cable(from, to)),
        }
    }

    fn latency(kind: PathKind) -> Duration {
        match kind {
            PathKind::Management => MANAGEMENT_LATENCY,
            PathKind::Cable => CABLE_LATENCY,
        }
    }
}

/// What travels on a connection.
#[derive(Debug, Clone)]
enum Wire {
    Open(StreamOpen),
    Update(ReportUpdate),
    /// The sender's side ended (FIN or RST).
    Close,
    Reply(PeerReply),
    /// The receiver's side ended.
    Reset,
}

impl Wire {
    fn to_receiver(&self) -> bool {
        matches!(self, Wire::Open(_) | Wire::Update(_) | Wire::Close)
    }
}

type ConnId = u64;

#[derive(Debug)]
struct Conn {
    from: usize,
    to: usize,
    kind: PathKind,
    sender_run: u64,
    receiver_run: u64,
    /// The receiver's book's id, once the open was taken.
    stream: Option<StreamId>,
    sender_open: bool,
    receiver_open: bool,
    /// The last sequence sent on it.
    sent: u64,
    /// Wire waiting for the path to work again, in order.
    held: VecDeque<Wire>,
    last_arrival: Instant,
    /// Since when nothing could cross (path cut, an end frozen): HTTP/2
    /// keepalive ends it after [`KEEPALIVE_DEAD`].
    blocked_since: Option<Instant>,
    opened_at: Instant,
}

#[derive(Debug, Clone)]
struct OutStream {
    conn: Option<ConnId>,
    backoff: Duration,
}

/// One running daemon: its core, book, probes and streams.
#[derive(Debug)]
struct Daemon {
    run: u64,
    core: NodeCore,
    book: PeerBook,
    probes: BTreeMap<usize, LinkStats>,
    /// Probe requests queued in the sockets, answered on the next probe
    /// tick (`probe/engine.rs` reads its sockets on the tick only).
    requests: Vec<Request>,
    next_seq: u64,
    /// What the probe task last published.
    snapshot: BTreeMap<NodeId, ProbeStats>,
    /// When the probe task last published (its board reads as of then).
    snapshot_at: Instant,
    /// When the next probe tick is due (`probe::Ticks::due_by`).
    tick_due: Option<Instant>,
    told: BTreeMap<usize, ProbeNews>,
    lateness: LatenessLog,
    next_mtu: Instant,
    /// Everything sent so far, for a stream that opens.
    full: Option<ReportUpdate>,
    out: BTreeMap<(usize, PathKind), OutStream>,
    /// The look queued, if any.
    look_at: Option<Instant>,
    /// The core's deadline.
    deadline: Instant,
    alerts: AlertState,
    status: Option<MeshStatus>,
    /// What a reader of this daemon's events holds: its first status (the
    /// snapshot a stream opens with), then every event applied.
    folded: Option<MeshStatus>,
    /// This host's facts as the daemon read them at start.
    facts: Arc<NodeFacts>,
}

/// A peer's probe request waiting in this node's socket.
#[derive(Debug, Clone, Copy)]
struct Request {
    prober: usize,
    run: u64,
    seq: u64,
    class: ProbeClass,
    arrived: Instant,
}

#[derive(Debug)]
pub struct SimNode {
    pub id: NodeId,
    daemon: Option<Daemon>,
    frozen: bool,
    /// Events that arrived while frozen, handled on resume.
    deferred: Vec<(Instant, Ev)>,
    pub clock_offset_ms: i64,
    /// How late every timer of the node fires.
    pub late_by: Duration,
    /// Its reports say it hears every member, whatever it hears.
    lies: bool,
    /// The probe timer's phase.
    phase: Duration,
    last_incarnation: u64,
    /// How often the host booted since the simulation began: its boot id.
    boots: u32,
}

#[derive(Debug, Clone)]
enum Ev {
    ProbeTick {
        node: usize,
        run: u64,
        scheduled: Instant,
    },
    ProbeArrive {
        responder: usize,
        prober: usize,
        run: u64,
        seq: u64,
        class: ProbeClass,
    },
    ProbeReply {
        prober: usize,
        run: u64,
        peer: usize,
        seq: u64,
        class: ProbeClass,
        /// How long the request waited for the responder's tick.
        host_delay: Duration,
        at: Instant,
    },
    Look {
        node: usize,
        run: u64,
    },
    Connect {
        node: usize,
        run: u64,
        peer: usize,
        kind: PathKind,
    },
    ConnectFailed {
        node: usize,
        run: u64,
        peer: usize,
        kind: PathKind,
    },
    Arrive {
        conn: ConnId,
        wire: Wire,
    },
    Keepalive,
    Action(usize),
}

struct Queued {
    at: Instant,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// What a test schedules.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Cut(Cable, CableCut),
    Heal(Cable),
    /// Per mille of probes the cable drops; 0 heals it.
    SetLoss(Cable, u64),
    CutManagement(usize),
    HealManagement(usize),
    BlockManagementInbound(usize),
    UnblockManagementInbound(usize),
    /// The management network splits: this side reaches only itself.
    SplitManagement(BTreeSet<usize>),
    HealManagementSplit,
    /// Management traffic between the pair is dropped both ways.
    CutManagementPair(Cable),
    HealManagementPair(Cable),
    Kill(usize),
    Start(usize),
    /// The host reboots: its daemon dies, and starts (with `Start`) on a
    /// new boot of the host.
    Reboot(usize),
    Freeze(usize),
    Thaw(usize),
    SetClockOffset(usize, i64),
    SetLate(usize, Duration),
    /// The node says (or stops saying) that it hears every member: an
    /// insider with a node's key.
    Lie(usize, bool),
    /// A distributed job starts: one rank on every node, rank i on node i.
    StartJob,
    /// The rank on the node is stopped by a signal (SIGSTOP)...
    StopRank(usize),
    /// ...and continued (SIGCONT).
    ContRank(usize),
    /// The rank on the node is killed: it is gone for good.
    KillRank(usize),
    /// Every rank of the job exits.
    EndJob,
}

/// A job's rank as the host runs it, whatever meshd sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankIs {
    Running,
    Stopped,
    Gone,
}

/// The simulated job: rank i runs on node i. A running rank spins at a
/// full core while any other rank is not running or the cable to it is
/// cut (JACCL's busy wait); otherwise it works at a few hundredths.
#[derive(Debug, Clone)]
pub struct SimJob {
    pub ranks: Vec<(u32, RankIs)>,
}

/// The job's id, as every rank's environment gives it.
pub const SIM_JOB: &str = "10.0.0.1:7430";

/// An alert as Alertmanager saw it posted (by any node).
#[derive(Debug, Clone)]
pub struct Posted {
    pub labels: Labels,
    pub firing: bool,
}

/// One look of one node, as a check sees it.
pub struct Observed<'a> {
    pub at: Instant,
    pub node: usize,
    pub status: &'a MeshStatus,
    /// The node's events since its daemon started, folded onto its first
    /// status.
    pub folded: &'a MeshStatus,
}

pub struct Sim {
    pub epoch: Instant,
    pub now: Instant,
    pub nodes: Vec<SimNode>,
    pub net: Network,
    queue: BinaryHeap<Queued>,
    seq: u64,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: ConnId,
    next_run: u64,
    actions: Vec<Action>,
    rng: Rng,
    /// Keys each probe's fate on a lossy cable ([`Rng::draw_for`]).
    loss_key: u64,
    /// Every post any node made, in order.
    pub posts: Vec<Posted>,
    /// The one Alertmanager every node posts to.
    pub am: Alertmanager,
    /// Every event any node's looks produced, with when and whose.
    pub events: Vec<(Instant, usize, Event)>,
    /// The job the nodes run, if one was started.
    pub job: Option<SimJob>,
    next_pid: u32,
}

/// Whether node `x` reads its ports' carrier (Linux netlink, macOS kernel
/// events): the even nodes do, the odd ones judge by probes alone, as a
/// host whose events cannot be read does. Every mesh of three or more then
/// has cables with a carrier at both ends, at one (confirmed by the other's
/// silence), and at neither.
pub fn reads_carrier(x: usize) -> bool {
    x.is_multiple_of(2)
}

/// Node `i`'s end of its cable to `j`: the interface is named after the
/// peer, the addresses after the pair.
fn cable_end(i: usize, j: usize) -> LinkEnd {
    let (lo, hi) = (i.min(j), i.max(j));
    let host = if i == lo { 1 } else { 2 };
    LinkEnd {
        node: numbered_id(i),
        iface: Some(format!("tb{}", j + 1)),
        address: Some(std::net::IpAddr::from([
            10,
            u8::try_from(lo).unwrap_or(0),
            u8::try_from(hi).unwrap_or(0),
            host,
        ])),
        rdma_device: None,
        rdma_port: None,
    }
}

fn expected_links(i: usize, n: usize) -> Vec<ExpectedLink> {
    (0..n)
        .filter(|j| *j != i)
        .map(|j| ExpectedLink {
            local: cable_end(i, j),
            remote: LinkEnd {
                address: cable_end(j, i).address,
                ..LinkEnd::node_only(numbered_id(j))
            },
            expected_speed_bps: None,
        })
        .collect()
}

/// The daemon's settings with a config that sets nothing.
pub fn settings() -> NodeSettings {
    fixtures::default_node_settings()
}

fn probe_config() -> LinkStatsConfig {
    LinkStatsConfig {
        timeout: PROBE_TIMEOUT,
        outage_gap: DOWN_AFTER,
        interval: PROBE_INTERVAL,
        tick_gap: TICK_GAP,
    }
}

impl Sim {
    /// `n` nodes whose daemons start within the first second.
    pub fn new(n: usize, seed: u64) -> Self {
        let epoch = fixtures::epoch();
        let mut rng = Rng::new(seed);
        let nodes = (0..n)
            .map(|i| SimNode {
                id: numbered_id(i),
                daemon: None,
                frozen: false,
                deferred: Vec::new(),
                clock_offset_ms: 0,
                late_by: Duration::ZERO,
                lies: false,
                phase: Duration::from_millis(rng.below(100)),
                last_incarnation: 0,
                boots: 0,
            })
            .collect();
        let mut sim = Self {
            epoch,
            now: epoch,
            nodes,
            net: Network::default(),
            queue: BinaryHeap::new(),
            seq: 0,
            conns: BTreeMap::new(),
            next_conn: 1,
            next_run: 1,
            actions: Vec::new(),
            rng,
            loss_key: seed,
            posts: Vec::new(),
            events: Vec::new(),
            am: Alertmanager::default(),
            job: None,
            next_pid: 1000,
        };
        // Alertmanager runs on a clock of its own, up to three minutes off.
        sim.am.offset = Duration::from_millis(sim.rng.below(180_000));
        sim.am.behind = sim.rng.below(2) == 0;
        for i in 0..n {
            let start = Duration::from_millis(sim.rng.below(1000));
            sim.schedule(start, Action::Start(i));
        }
        sim.push(epoch + Duration::from_millis(500), Ev::Keepalive);
        sim
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Schedules `action` at `at` after the epoch.
    pub fn schedule(&mut self, at: Duration, action: Action) {
        self.actions.push(action);
        let index = self.actions.len() - 1;
        self.push(self.epoch + at, Ev::Action(index));
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    pub fn elapsed(&self) -> Duration {
        self.now.saturating_duration_since(self.epoch)
    }

    pub fn wall_of(&self, node: usize, at: Instant) -> SystemTime {
        let base = wall(0) + at.saturating_duration_since(self.epoch);
        let offset = self.nodes[node].clock_offset_ms;
        let magnitude = Duration::from_millis(offset.unsigned_abs());
        if offset >= 0 {
            base + magnitude
        } else {
            base - magnitude
        }
    }

    fn moment(&self, node: usize) -> Moment {
        Moment {
            now: self.now,
            wall: self.wall_of(node, self.now),
        }
    }

    pub fn running(&self, node: usize) -> bool {
        self.nodes[node].daemon.is_some()
    }

    pub fn frozen(&self, node: usize) -> bool {
        self.nodes[node].frozen
    }

    /// The status the node last published, if its daemon runs.
    pub fn status(&self, node: usize) -> Option<&MeshStatus> {
        self.nodes[node].daemon.as_ref()?.status.as_ref()
    }

    /// What a reader of the node's events holds, if its daemon runs.
    pub fn folded(&self, node: usize) -> Option<&MeshStatus> {
        self.nodes[node].daemon.as_ref()?.folded.as_ref()
    }

    /// Runs until `until` after the epoch, calling `check` after every
    /// look of every node.
    pub fn run_until(&mut self, until: Duration, check: &mut dyn FnMut(&Sim, Observed<'_>)) {
        let end = self.epoch + until;
        while let Some(top) = self.queue.peek() {
            if top.at > end {
                break;
            }
            let Some(Queued { at, ev, .. }) = self.queue.pop() else {
                break;
            };
            self.now = self.now.max(at);
            if let Some(node) = self.looked(ev)
                && let Some(status) = self.status(node)
                && let Some(folded) = self.folded(node)
            {
                check(
                    self,
                    Observed {
                        at: self.now,
                        node,
                        status,
                        folded,
                    },
                );
            }
        }
        self.now = self.now.max(end);
    }

    /// The node an event targets when it must wait for the node to thaw.
    fn target(ev: &Ev) -> Option<usize> {
        match ev {
            Ev::ProbeTick { node, .. }
            | Ev::Look { node, .. }
            | Ev::Connect { node, .. }
            | Ev::ConnectFailed { node, .. } => Some(*node),
            Ev::ProbeArrive { responder, .. } => Some(*responder),
            Ev::ProbeReply { prober, .. } => Some(*prober),
            Ev::Arrive { .. } | Ev::Keepalive | Ev::Action(_) => None,
        }
    }

    fn defer_if_frozen(&mut self, node: usize, ev: Ev) -> Option<Ev> {
        if self.nodes[node].frozen {
            self.nodes[node].deferred.push((self.now, ev));
            None
        } else {
            Some(ev)
        }
    }

    /// Handles one event; returns the node that looked, if one did.
    fn looked(&mut self, ev: Ev) -> Option<usize> {
        let ev = match Self::target(&ev) {
            Some(node) => self.defer_if_frozen(node, ev)?,
            None => ev,
        };
        match ev {
            Ev::Action(index) => {
                let action = self.actions[index].clone();
                self.act(action);
                None
            }
            Ev::Keepalive => {
                self.keepalive();
                let am_now = self.am.clock(self.true_wall());
                self.am.notify(self.now, am_now);
                self.push(self.now + Duration::from_millis(500), Ev::Keepalive);
                None
            }
            Ev::ProbeTick {
                node,
                run,
                scheduled,
            } => {
                if self.run_of(node) == Some(run) {
                    self.probe_tick(node, scheduled);
                }
                None
            }
            Ev::ProbeArrive {
                responder,
                prober,
                run,
                seq,
                class,
            } => {
                // A daemon that is not running answers nothing (the port is
                // closed); across a cut cable nothing arrives, across a
                // lossy one not every probe. The request waits in the
                // socket for the responder's probe tick.
                let now = self.now;
                let c = cable(responder, prober);
                let fate = Rng::draw_for(self.loss_key, [prober as u64, run, seq]);
                let dropped = self
                    .net
                    .lossy_cables
                    .get(&c)
                    .is_some_and(|per_mille| fate % 1_000 < *per_mille);
                if !dropped
                    && !self.net.cut_cables.contains_key(&c)
                    && let Some(d) = self.daemon_mut(responder)
                {
                    d.requests.push(Request {
                        prober,
                        run,
                        seq,
                        class,
                        arrived: now,
                    });
                }
                None
            }
            Ev::ProbeReply {
                prober,
                run,
                peer,
                seq,
                class,
                host_delay,
                at,
            } => {
                if self.run_of(prober) == Some(run)
                    && let Some(stats) = self
                        .daemon_mut(prober)
                        .and_then(|d| d.probes.get_mut(&peer))
                {
                    // The kernel stamped it when it arrived.
                    stats.on_reply(seq, class, host_delay, at);
                }
                None
            }
            Ev::Look { node, run } => {
                let due = self.nodes[node]
                    .daemon
                    .as_ref()
                    .is_some_and(|d| d.run == run && d.look_at.is_some_and(|at| at <= self.now));
                if due {
                    self.look(node, false);
                    Some(node)
                } else {
                    None
                }
            }
            Ev::Connect {
                node,
                run,
                peer,
                kind,
            } => {
                if self.run_of(node) == Some(run) {
                    self.connect(node, peer, kind);
                }
                None
            }
            Ev::ConnectFailed {
                node,
                run,
                peer,
                kind,
            } => {
                if self.run_of(node) == Some(run) {
                    self.retry_later(node, peer, kind);
                }
                None
            }
            Ev::Arrive { conn, wire } => self.arrive(conn, wire),
        }
    }

    fn run_of(&self, node: usize) -> Option<u64> {
        self.nodes[node].daemon.as_ref().map(|d| d.run)
    }

    fn daemon_mut(&mut self, node: usize) -> Option<&mut Daemon> {
        self.nodes[node].daemon.as_mut()
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Cut(c, how) => {
                self.net.cut_cables.insert(c, how);
                if how == CableCut::Pulled {
                    self.carrier_changed(c);
                }
            }
            Action::Heal(c) => {
                if self.net.cut_cables.remove(&c) == Some(CableCut::Pulled) {
                    self.carrier_changed(c);
                }
                self.flush_held();
            }
            Action::SetLoss(c, 0) => {
                self.net.lossy_cables.remove(&c);
            }
            Action::SetLoss(c, per_mille) => {
                self.net.lossy_cables.insert(c, per_mille);
            }
            Action::CutManagement(x) => {
                self.net.management_cut.insert(x);
            }
            Action::HealManagement(x) => {
                self.net.management_cut.remove(&x);
                self.flush_held();
            }
            Action::BlockManagementInbound(x) => {
                self.net.management_inbound_blocked.insert(x);
            }
            Action::UnblockManagementInbound(x) => {
                self.net.management_inbound_blocked.remove(&x);
                self.flush_held();
            }
            Action::SplitManagement(side) => self.net.management_split = Some(side),
            Action::HealManagementSplit => {
                self.net.management_split = None;
                self.flush_held();
            }
            Action::CutManagementPair(c) => {
                self.net.management_pairs_cut.insert(c);
            }
            Action::HealManagementPair(c) => {
                self.net.management_pairs_cut.remove(&c);
                self.flush_held();
            }
            Action::Kill(x) => self.kill(x),
            Action::Reboot(x) => {
                self.kill(x);
                self.nodes[x].boots += 1;
                self.set_rank(x, RankIs::Gone);
            }
            Action::Start(x) => self.start(x),
            Action::Freeze(x) => {
                if self.running(x) {
                    self.nodes[x].frozen = true;
                }
            }
            Action::Thaw(x) => self.thaw(x),
            Action::SetClockOffset(x, ms) => self.nodes[x].clock_offset_ms = ms,
            Action::SetLate(x, by) => self.nodes[x].late_by = by,
            Action::Lie(x, lies) => self.nodes[x].lies = lies,
            Action::StartJob => {
                let n = self.nodes.len();
                let first = self.next_pid;
                self.next_pid += u32::try_from(n).unwrap_or(u32::MAX);
                self.job = Some(SimJob {
                    ranks: (0..n)
                        .map(|i| (first + u32::try_from(i).unwrap_or(0), RankIs::Running))
                        .collect(),
                });
            }
            Action::StopRank(x) => self.set_rank(x, RankIs::Stopped),
            Action::ContRank(x) => self.set_rank(x, RankIs::Running),
            Action::KillRank(x) => self.set_rank(x, RankIs::Gone),
            Action::EndJob => self.job = None,
        }
    }

    /// Moves the rank on `x` to `is`; a gone rank stays gone.
    fn set_rank(&mut self, x: usize, is: RankIs) {
        if let Some((_, rank)) = self.job.as_mut().and_then(|j| j.ranks.get_mut(x))
            && *rank != RankIs::Gone
        {
            *rank = is;
        }
    }

    /// What node `x`'s process sample shows of its rank now: a process with
    /// MLX's launch variables, stopped or running, spinning or not; none
    /// once it is gone or when no job runs.
    fn rank_sample(&self, x: usize, moment: Moment) -> Sampled {
        let rank = self.job.as_ref().and_then(|job| {
            let (pid, is) = *job.ranks.get(x)?;
            let n = job.ranks.len();
            let spinning = is == RankIs::Running
                && (0..n).filter(|j| *j != x).any(|j| {
                    job.ranks[j].1 != RankIs::Running
                        || self.net.cut_cables.contains_key(&cable(x, j))
                });
            (is != RankIs::Gone).then(|| ProcessSample {
                name: "python3".to_owned(),
                pid,
                cores: if spinning { 1.0 } else { 0.03 },
                state: if is == RankIs::Stopped {
                    ProcessState::Stopped
                } else {
                    ProcessState::Running
                },
                started: u64::from(pid),
                rank: Some(Arc::new(RankIdentity {
                    job: SIM_JOB.to_owned(),
                    backend: JobBackend::Jaccl,
                    rank: u32::try_from(x).unwrap_or(u32::MAX),
                    world: u32::try_from(n).ok(),
                    devices: Vec::new(),
                })),
                ..ProcessSample::default()
            })
        });
        let processes = rank.into_iter().collect();
        Sampled {
            at: moment,
            sample: CpuSample {
                busy_ratio: 0.1,
                processes,
            },
            data_counters: None,
        }
    }

    fn start(&mut self, x: usize) {
        if self.running(x) {
            return;
        }
        let n = self.nodes.len();
        let run = self.next_run;
        self.next_run += 1;
        let wall = self.wall_of(x, self.now);
        // The start time in unix nanoseconds, as the daemon takes it.
        let incarnation = u64::try_from(
            wall.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        )
        .unwrap_or(u64::MAX);
        self.nodes[x].last_incarnation = incarnation;
        let id = self.nodes[x].id.clone();
        let members: BTreeSet<NodeId> = (0..n).map(numbered_id).collect();
        let identity = NodeIdentity {
            id: id.clone(),
            incarnation: Incarnation(incarnation),
            version: "sim".to_owned(),
            hostname: id.to_string(),
        };
        let core = NodeCore::new(identity, members.clone(), expected_links(x, n), settings());
        // What the host's facts say of its boot: the daemon reads them at
        // start; a restart reads the same boot again, a reboot a new one.
        let facts = Arc::new(NodeFacts {
            boot: BootIdentity {
                id: Some(format!("{id}-boot-{}", self.nodes[x].boots)),
                booted_at_unix: None,
            },
            ..NodeFacts::default()
        });
        let probes = (0..n)
            .filter(|j| *j != x)
            .map(|j| (j, LinkStats::new(probe_config())))
            .collect();
        let out = (0..n)
            .filter(|j| *j != x)
            .flat_map(|j| [(j, PathKind::Management), (j, PathKind::Cable)])
            .map(|key| {
                (
                    key,
                    OutStream {
                        conn: None,
                        backoff: FIRST_BACKOFF,
                    },
                )
            })
            .collect::<BTreeMap<_, _>>();
        self.nodes[x].daemon = Some(Daemon {
            run,
            core,
            book: PeerBook::new(id, members, fixtures::default_book_settings()),
            probes,
            requests: Vec::new(),
            next_seq: run << 32,
            snapshot: BTreeMap::new(),
            snapshot_at: self.now,
            tick_due: None,
            told: BTreeMap::new(),
            lateness: LatenessLog::default(),
            next_mtu: self.now,
            full: None,
            out: BTreeMap::new(),
            look_at: None,
            deadline: self.now,
            alerts: AlertState::default(),
            status: None,
            folded: None,
            facts,
        });
        // The probe task publishes once as it starts: every link, nothing
        // measured yet.
        self.publish(x, true);
        // `Aggregator::new` looks once before anything can read it.
        self.look(x, false);
        let first_tick = self.now + PROBE_INTERVAL + self.nodes[x].phase;
        self.push(
            first_tick + self.nodes[x].late_by,
            Ev::ProbeTick {
                node: x,
                run,
                scheduled: first_tick,
            },
        );
        let keys: Vec<(usize, PathKind)> = out.keys().copied().collect();
        if let Some(d) = self.daemon_mut(x) {
            d.out = out;
        }
        for (peer, kind) in keys {
            self.push(
                self.now,
                Ev::Connect {
                    node: x,
                    run,
                    peer,
                    kind,
                },
            );
        }
    }

    /// The process dies; the kernel closes its connections.
    fn kill(&mut self, x: usize) {
        if self.nodes[x].daemon.take().is_none() {
            return;
        }
        self.nodes[x].frozen = false;
        self.nodes[x].deferred.clear();
        let ids: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.from == x || c.to == x)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            if conn.from == x {
                conn.sender_open = false;
                self.send(id, Wire::Close);
            } else {
                conn.receiver_open = false;
                self.send(id, Wire::Reset);
            }
        }
    }

    fn thaw(&mut self, x: usize) {
        if !self.nodes[x].frozen {
            return;
        }
        self.nodes[x].frozen = false;
        // Connections keepalive ended meanwhile: this end learns on waking.
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            self.settle_ended(id);
        }
        // What the kernel queued is read first, then the timers fire: the
        // probe tick late by the whole pause, then the looks.
        let mut deferred = std::mem::take(&mut self.nodes[x].deferred);
        deferred.sort_by_key(|(at, ev)| {
            let rank = match ev {
                Ev::ProbeReply { .. } | Ev::ProbeArrive { .. } | Ev::Arrive { .. } => 0,
                Ev::ProbeTick { .. } => 1,
                _ => 2,
            };
            (rank, *at)
        });
        for (_, ev) in deferred {
            self.push(self.now, ev);
        }
        self.flush_held();
    }

    /// Applies the end of a connection to whichever end did not learn yet.
    fn settle_ended(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        let (from, to, kind, stream) = (conn.from, conn.to, conn.kind, conn.stream);
        let (sender_open, receiver_open) = (conn.sender_open, conn.receiver_open);
        let sender_live = self.run_of(from) == Some(conn.sender_run) && !self.frozen(from);
        let receiver_live = self.run_of(to) == Some(conn.receiver_run) && !self.frozen(to);
        if !receiver_open && sender_open && sender_live {
            if let Some(c) = self.conns.get_mut(&id) {
                c.sender_open = false;
            }
            self.stream_failed(from, to, kind, id);
        }
        if !sender_open && receiver_open && receiver_live {
            if let Some(c) = self.conns.get_mut(&id) {
                c.receiver_open = false;
            }
            if let Some(stream) = stream {
                self.close_in_book(to, stream);
            }
        }
        if let Some(c) = self.conns.get(&id)
            && !c.sender_open
            && !c.receiver_open
        {
            self.conns.remove(&id);
        }
    }

    fn close_in_book(&mut self, node: usize, stream: StreamId) {
        let now = self.now;
        if let Some(d) = self.daemon_mut(node) {
            d.book.close(stream, now);
        }
        self.wake(node);
    }

    /// A stream of `node` to `peer` ended: reopen after the backoff.
    fn stream_failed(&mut self, node: usize, peer: usize, kind: PathKind, conn: ConnId) {
        let now = self.now;
        let lived = self
            .conns
            .get(&conn)
            .map(|c| now.saturating_duration_since(c.opened_at));
        let Some(d) = self.daemon_mut(node) else {
            return;
        };
        let Some(out) = d.out.get_mut(&(peer, kind)) else {
            return;
        };
        if out.conn != Some(conn) {
            return;
        }
        out.conn = None;
        if lived.is_some_and(|l| l > MAX_BACKOFF) {
            out.backoff = FIRST_BACKOFF;
        }
        self.retry_later(node, peer, kind);
    }

    fn retry_later(&mut self, node: usize, peer: usize, kind: PathKind) {
        let Some(d) = self.daemon_mut(node) else {
            return;
        };
        let run = d.run;
        let Some(out) = d.out.get_mut(&(peer, kind)) else {
            return;
        };
        let wait = out.backoff;
        out.backoff = (out.backoff * 2).min(MAX_BACKOFF);
        let at = self.now + wait;
        self.push(
            at,
            Ev::Connect {
                node,
                run,
                peer,
                kind,
            },
        );
    }

    fn connect(&mut self, node: usize, peer: usize, kind: PathKind) {
        let Some(d) = self.nodes[node].daemon.as_ref() else {
            return;
        };
        let run = d.run;
        let Some(full) = d.full.clone() else {
            // Nothing to say before the first update.
            self.retry_later(node, peer, kind);
            return;
        };
        if d.out.get(&(peer, kind)).is_none_or(|o| o.conn.is_some()) {
            return;
        }
        let latency = Network::latency(kind);
        let usable = self.net.conn_usable(node, peer, kind);
        let failed_at = if !usable || self.frozen(peer) {
            // SYNs or the handshake go unanswered.
            Some(self.now + CONNECT_TIMEOUT)
        } else if !self.running(peer) {
            // Refused at once: nothing listens.
            Some(self.now + latency * 2)
        } else {
            None
        };
        if let Some(at) = failed_at {
            self.push(
                at,
                Ev::ConnectFailed {
                    node,
                    run,
                    peer,
                    kind,
                },
            );
            return;
        }
        let id = self.next_conn;
        self.next_conn += 1;
        let receiver_run = self.run_of(peer).unwrap_or(0);
        let instance = run;
        let identity = d.core.identity().clone();
        self.conns.insert(
            id,
            Conn {
                from: node,
                to: peer,
                kind,
                sender_run: run,
                receiver_run,
                stream: None,
                sender_open: true,
                receiver_open: true,
                sent: full.sequence,
                held: VecDeque::new(),
                // TCP and TLS handshakes.
                last_arrival: self.now + latency * 3,
                blocked_since: None,
                opened_at: self.now,
            },
        );
        if let Some(out) = self
            .daemon_mut(node)
            .and_then(|d| d.out.get_mut(&(peer, kind)))
        {
            out.conn = Some(id);
        }
        self.send(
            id,
            Wire::Open(StreamOpen {
                sender: identity,
                instance,
                rtt_bounds: RTT_BOUNDS.to_vec(),
                protocols: meshd_domain::Protocols::THIS_RELEASE,
            }),
        );
        self.send(id, Wire::Update(full));
    }

    /// Puts `wire` on connection `id`, in order behind what is on it.
    fn send(&mut self, id: ConnId, wire: Wire) {
        let now = self.now;
        let (usable, wire) = {
            let Some(c) = self.conns.get(&id) else {
                return;
            };
            (
                self.net.conn_usable(c.from, c.to, c.kind),
                self.as_told(c.from, wire),
            )
        };
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if !usable || !conn.held.is_empty() {
            conn.held.push_back(wire);
            return;
        }
        let at = (now + Network::latency(conn.kind)).max(conn.last_arrival);
        conn.last_arrival = at;
        self.push(at, Ev::Arrive { conn: id, wire });
    }

    /// What node `from` sends: a liar's updates say it hears every member.
    fn as_told(&self, from: usize, wire: Wire) -> Wire {
        match wire {
            Wire::Update(mut update) if self.nodes[from].lies => {
                let everyone = (0..self.nodes.len()).filter(|i| *i != from);
                update.hears = Some(everyone.map(numbered_id).collect());
                Wire::Update(update)
            }
            other => other,
        }
    }

    /// Sends what waited on connections whose path works again.
    fn flush_held(&mut self) {
        let ids: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.held.is_empty() && self.net.conn_usable(c.from, c.to, c.kind))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let held = self
                .conns
                .get_mut(&id)
                .map(|c| std::mem::take(&mut c.held))
                .unwrap_or_default();
            for wire in held {
                self.send(id, wire);
            }
        }
    }

    /// HTTP/2 keepalive: a connection nothing could cross for
    /// [`KEEPALIVE_DEAD`] ends on both sides.
    fn keepalive(&mut self) {
        let now = self.now;
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            let blocked = {
                let Some(c) = self.conns.get(&id) else {
                    continue;
                };
                !self.net.conn_usable(c.from, c.to, c.kind)
                    || self.frozen(c.from)
                    || self.frozen(c.to)
            };
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            if !blocked {
                conn.blocked_since = None;
                continue;
            }
            let since = *conn.blocked_since.get_or_insert(now);
            if now.saturating_duration_since(since) < KEEPALIVE_DEAD {
                continue;
            }
            conn.held.clear();
            let (from, to, kind, stream) = (conn.from, conn.to, conn.kind, conn.stream);
            let (sender_run, receiver_run) = (conn.sender_run, conn.receiver_run);
            // A frozen end keeps its side open and learns when it wakes
            // (`thaw`); a live end learns now.
            let sender_live = self.run_of(from) == Some(sender_run) && !self.frozen(from);
            let receiver_live = self.run_of(to) == Some(receiver_run) && !self.frozen(to);
            let (sender_frozen, receiver_frozen) = (self.frozen(from), self.frozen(to));
            if let Some(c) = self.conns.get_mut(&id) {
                c.sender_open &= sender_frozen;
                c.receiver_open &= receiver_frozen;
            }
            if sender_live {
                self.stream_failed(from, to, kind, id);
            }
            if receiver_live && let Some(stream) = stream {
                self.close_in_book(to, stream);
            }
            self.drop_if_done(id);
        }
    }

    fn arrive(&mut self, id: ConnId, wire: Wire) -> Option<usize> {
        let (from, to, kind, sender_run, receiver_run) = {
            let c = self.conns.get(&id)?;
            (c.from, c.to, c.kind, c.sender_run, c.receiver_run)
        };
        let at_node = if wire.to_receiver() { to } else { from };
        if self.frozen(at_node) {
            self.nodes[at_node]
                .deferred
                .push((self.now, Ev::Arrive { conn: id, wire }));
            return None;
        }
        if wire.to_receiver() {
            if self.run_of(to) != Some(receiver_run) {
                return None;
            }
            let conn = self.conns.get(&id)?;
            if !conn.receiver_open {
                return None;
            }
            match wire {
                Wire::Open(open) => self.on_open(id, to, from, kind, open),
                Wire::Update(update) => self.on_update(id, to, update),
                Wire::Close => {
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.receiver_open = false;
                    }
                    if let Some(stream) = self.conns.get(&id).and_then(|c| c.stream) {
                        self.close_in_book(to, stream);
                    }
                    self.drop_if_done(id);
                }
                Wire::Reply(_) | Wire::Reset => {}
            }
        } else {
            if self.run_of(from) != Some(sender_run) {
                return None;
            }
            if !self.conns.get(&id)?.sender_open {
                return None;
            }
            match wire {
                Wire::Reply(reply) => return self.on_reply(id, from, to, kind, reply),
                Wire::Reset => {
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.sender_open = false;
                    }
                    self.stream_failed(from, to, kind, id);
                    self.drop_if_done(id);
                }
                _ => {}
            }
        }
        None
    }

    fn drop_if_done(&mut self, id: ConnId) {
        if self
            .conns
            .get(&id)
            .is_some_and(|c| !c.sender_open && !c.receiver_open)
        {
            self.conns.remove(&id);
        }
    }

    /// `grpc/peer.rs`: a stream opens on the receiver's end of the path.
    fn on_open(&mut self, id: ConnId, to: usize, from: usize, kind: PathKind, open: StreamOpen) {
        let path = match kind {
            PathKind::Management => Path::Management,
            PathKind::Cable => Path::Cable(format!("tb{}", from + 1)),
        };
        let remote = format!("{}:{kind:?}", self.nodes[from].id);
        let (now, wall) = (self.now, self.wall_of(to, self.now));
        let sender = self.nodes[from].id.clone();
        let Some(d) = self.daemon_mut(to) else {
            return;
        };
        match d.book.open(Some(&sender), &open, path, remote, now, wall) {
            Ok(stream) => {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.stream = Some(stream);
                }
                self.wake(to);
            }
            Err(refusal) => self.refuse(id, to, refusal, 0),
        }
    }

    fn refuse(&mut self, id: ConnId, to: usize, refusal: Refusal, sequence: u64) {
        let Some(receiver) = self.nodes[to]
            .daemon
            .as_ref()
            .map(|d| d.core.identity().clone())
        else {
            return;
        };
        self.send(
            id,
            Wire::Reply(PeerReply {
                receiver,
                sequence,
                refusal: Some(refusal),
                clock: None,
                resync: false,
            }),
        );
        if let Some(c) = self.conns.get_mut(&id) {
            c.receiver_open = false;
        }
        if let Some(stream) = self.conns.get(&id).and_then(|c| c.stream) {
            self.close_in_book(to, stream);
        }
    }

    fn on_update(&mut self, id: ConnId, to: usize, update: ReportUpdate) {
        let Some(stream) = self.conns.get(&id).and_then(|c| c.stream) else {
            return;
        };
        let (now, wall) = (self.now, self.wall_of(to, self.now));
        let sequence = update.sequence;
        let Some(d) = self.daemon_mut(to) else {
            return;
        };
        let before = d.book.generation();
        let answer = d.book.update(stream, update, now, wall);
        let changed = d.book.generation() != before;
        let receiver = d.core.identity().clone();
        if changed {
            self.wake(to);
        }
        if let Some(refusal) = answer.refusal {
            self.refuse(id, to, refusal, sequence);
            return;
        }
        if answer.clock.is_some() || answer.resync {
            self.send(
                id,
                Wire::Reply(PeerReply {
                    receiver,
                    sequence,
                    refusal: None,
                    clock: answer.clock,
                    resync: answer.resync,
                }),
            );
        }
    }

    /// `transport/streams.rs`: a reply on one of this node's streams.
    fn on_reply(
        &mut self,
        id: ConnId,
        node: usize,
        peer: usize,
        kind: PathKind,
        reply: PeerReply,
    ) -> Option<usize> {
        let (now, wall) = (self.now, self.wall_of(node, self.now));
        let peer_id = self.nodes[peer].id.clone();
        if reply.resync
            && let Some(full) = self.nodes[node]
                .daemon
                .as_ref()
                .and_then(|d| d.full.clone())
        {
            if let Some(c) = self.conns.get_mut(&id) {
                c.sent = full.sequence;
            }
            self.send(id, Wire::Update(full));
        }
        let refused = reply.refusal.is_some();
        let d = self.daemon_mut(node)?;
        let action = d.core.on_reply(&peer_id, &reply, wall, now);
        if let ReplyAction::Reincarnate(known) = action {
            d.core.reincarnate(known);
            d.full = None;
            // Every stream opens again at once with the new identity.
            let ids: Vec<ConnId> = d.out.values().filter_map(|o| o.conn).collect();
            for o in d.out.values_mut() {
                o.conn = None;
            }
            let run = d.run;
            let keys: Vec<(usize, PathKind)> = d.out.keys().copied().collect();
            for conn in ids {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.sender_open = false;
                }
                self.send(conn, Wire::Close);
            }
            self.look(node, true);
            for (peer, kind) in keys {
                self.push(
                    self.now,
                    Ev::Connect {
                        node,
                        run,
                        peer,
                        kind,
                    },
                );
            }
            return Some(node);
        }
        if refused {
            if let Some(c) = self.conns.get_mut(&id) {
                c.sender_open = false;
            }
            self.stream_failed(node, peer, kind, id);
            self.drop_if_done(id);
        }
        None
    }

    /// A pulled or plugged cable: the kernel tells both ends at once, and
    /// the carrier watcher wakes the aggregator of each that reads it.
    fn carrier_changed(&mut self, (a, b): Cable) {
        for end in [a, b] {
            if reads_carrier(end) {
                self.wake(end);
            }
        }
    }

    /// What node `x`'s carrier watcher says of each of its cables' ports.
    fn carriers(&self, x: usize) -> BTreeMap<String, bool> {
        if !reads_carrier(x) {
            return BTreeMap::new();
        }
        (0..self.nodes.len())
            .filter(|j| *j != x)
            .map(|j| {
                let pulled = self.net.cut_cables.get(&cable(x, j)) == Some(&CableCut::Pulled);
                (cable_end(x, j).iface.unwrap_or_default(), !pulled)
            })
            .collect()
    }

    /// Something the aggregator reads changed: it looks after the minimum
    /// gap, unless a look is queued already.
    fn wake(&mut self, node: usize) {
        let at = self.now + MIN_LOOK_GAP + self.nodes[node].late_by;
        self.queue_look(node, at);
    }

    fn queue_look(&mut self, node: usize, at: Instant) {
        let Some(d) = self.daemon_mut(node) else {
            return;
        };
        if d.look_at.is_some_and(|queued| queued <= at) {
            return;
        }
        d.look_at = Some(at);
        let run = d.run;
        self.push(at, Ev::Look { node, run });
    }

    /// `probe/engine.rs` `on_tick` and `publish`.
    fn probe_tick(&mut self, x: usize, scheduled: Instant) {
        let now = self.now;
        let late = now.saturating_duration_since(scheduled);
        let cut = self.net.cut_cables.clone();
        let late_by = self.nodes[x].late_by;
        let Some(d) = self.daemon_mut(x) else {
            return;
        };
        let run = d.run;
        d.lateness.note(late, now);
        let requests = std::mem::take(&mut d.requests);
        let mtu_due = now >= d.next_mtu;
        if mtu_due {
            d.next_mtu = now + MTU_INTERVAL;
        }
        let mut sent = Vec::new();
        for (peer, stats) in &mut d.probes {
            stats.note_lateness(late, now);
            let classes: &[ProbeClass] = if mtu_due {
                &[ProbeClass::Small, ProbeClass::Mtu]
            } else {
                &[ProbeClass::Small]
            };
            stats.expire(now);
            for _ in 0..stats.burst_due(now) {
                let seq = d.next_seq;
                d.next_seq += 1;
                match cut.get(&cable(x, *peer)) {
                    Some(CableCut::Pulled) => {}
                    Some(CableCut::Dark) => stats.on_burst_sent(seq, now),
                    None => {
                        stats.on_burst_sent(seq, now);
                        sent.push((*peer, seq, ProbeClass::Small));
                    }
                }
            }
            for class in classes {
                let seq = d.next_seq;
                d.next_seq += 1;
                match cut.get(&cable(x, *peer)) {
                    Some(CableCut::Pulled) => stats.on_send_failed(*class, now),
                    Some(CableCut::Dark) => stats.on_sent(seq, *class, now),
                    None => {
                        stats.on_sent(seq, *class, now);
                        sent.push((*peer, seq, *class));
                    }
                }
            }
        }
        for r in requests {
            if !cut.contains_key(&cable(x, r.prober)) {
                self.push(
                    now + CABLE_LATENCY,
                    Ev::ProbeReply {
                        prober: r.prober,
                        run: r.run,
                        peer: x,
                        seq: r.seq,
                        class: r.class,
                        host_delay: now.saturating_duration_since(r.arrived),
                        at: now + CABLE_LATENCY,
                    },
                );
            }
        }
        for (peer, seq, class) in sent {
            self.push(
                now + CABLE_LATENCY,
                Ev::ProbeArrive {
                    responder: peer,
                    prober: x,
                    run,
                    seq,
                    class,
                },
            );
        }
        self.publish(x, false);
        // The next tick is a period after this one fired (the daemon's
        // ticker skips the ticks a late one missed).
        let next = now + PROBE_INTERVAL;
        if let Some(d) = self.daemon_mut(x) {
            d.tick_due = Some(next);
        }
        self.push(
            next + late_by,
            Ev::ProbeTick {
                node: x,
                run,
                scheduled: next,
            },
        );
    }

    fn publish(&mut self, x: usize, force: bool) {
        let Some(links) = self.probe_stats(x) else {
            return;
        };
        let now = self.now;
        let Some(d) = self.daemon_mut(x) else {
            return;
        };
        let mut significant = force;
        for (peer, stats) in &d.probes {
            let news = stats.news(now, DOWN_AFTER);
            if d.told.insert(*peer, news) != Some(news) {
                significant = true;
            }
        }
        d.snapshot = links;
        d.snapshot_at = now;
        if significant {
            self.wake(x);
        }
    }

    /// `Aggregator::look`, then the alert pusher's step.
    fn look(&mut self, x: usize, urgent: bool) {
        if let Some((moment, decision)) = self.core_look(x, urgent) {
            self.apply_decision(x, moment, decision);
        }
    }

    /// Node `x`'s probe statistics as of now: what its probe task
    /// publishes on every tick here, and what the daemon's aggregator
    /// computes on every look (`ProbeBoard::read`), so the benchmark
    /// (`benches/look.rs`) times it apart. `None` when the node's daemon is
    /// not running.
    pub fn probe_stats(&mut self, x: usize) -> Option<BTreeMap<NodeId, ProbeStats>> {
        let now = self.now;
        let d = self.daemon_mut(x)?;
        Some(
            d.probes
                .iter_mut()
                .map(|(peer, stats)| (numbered_id(*peer), stats.stats(now)))
                .collect(),
        )
    }

    /// The core's part of node `x`'s look now, as the aggregator hands it
    /// over: the probe task's last snapshot and the book's views. `None`
    /// when the node's daemon is not running. Public for the benchmark
    /// (`benches/look.rs`), which times this part alone and then lets the
    /// node act on the decision with [`Sim::apply_decision`].
    pub fn core_look(&mut self, x: usize, urgent: bool) -> Option<(Moment, Decision)> {
        let moment = self.moment(x);
        let sampled = self.rank_sample(x, moment);
        let carriers = self.carriers(x);
        let d = self.daemon_mut(x)?;
        d.look_at = None;
        // `ProbeBoard::read`: an overdue probe tick is late already.
        let lateness = d.lateness.seen_at(d.snapshot_at, d.tick_due, moment.now);
        let counters = BTreeMap::new();
        let decision = d.core.look(Look {
            moment,
            probes: &d.snapshot,
            rdma: &BTreeMap::new(),
            book: d.book.snapshot(moment.now),
            facts: Some(&d.facts),
            counters: &counters,
            carriers: &carriers,
            local_alarms: Vec::new(),
            sampled: Some(&sampled),
            lateness,
            urgent,
        });
        Some((moment, decision))
    }

    /// The simulation's wall clock, without any node's offset.
    pub fn true_wall(&self) -> SystemTime {
        wall(0) + self.now.saturating_duration_since(self.epoch)
    }

    /// The label sets Alertmanager holds firing now.
    pub fn am_firing(&self) -> Vec<Labels> {
        self.am
            .firing_now(self.now, self.am.clock(self.true_wall()))
    }

    /// Node `x`'s alert pusher after a look: `AlertState::after_look`, and
    /// every `CHECK_EVERY` `AlertState::check` with what Alertmanager holds;
    /// each post's times put on Alertmanager's clock as the pusher does,
    /// with the offset its `Date` header gives (whole seconds).
    fn push_alerts(&mut self, x: usize, status: &MeshStatus, moment: Moment) {
        let am_now = self.am.clock(self.true_wall());
        // What a GET returns, its times back on this node's clock.
        let found: Vec<alerts::Held> = self
            .am
            .held(self.now, am_now)
            .into_iter()
            .map(|mut held| {
                held.alert.starts_at = alerts::on_clock(held.alert.starts_at, am_now, moment.wall);
                held
            })
            .collect();
        let Some(d) = self.daemon_mut(x) else {
            return;
        };
        let mut posts = d.alerts.after_look(status, moment.now, moment.wall, RESEND);
        if d.alerts.check_due(moment.now) {
            posts.extend(
                d.alerts
                    .check(status, &found, moment.now, moment.wall, RESEND),
            );
        }
        for post in posts {
            let (starts_at, ends_at) =
                alerts::on_alertmanager_clock(&post, moment.wall, Some(am_now));
            self.posts.push(Posted {
                labels: post.alert.labels.clone(),
                firing: post.resolved_at.is_none(),
            });
            let alert = alerts::Alert {
                starts_at,
                ..post.alert
            };
            self.am.post(self.now, am_now, alert, ends_at);
        }
    }

    /// What node `x` does with a look's decision: steps its alerts, keeps
    /// the status, sends the update on its open streams and queues the
    /// next look.
    pub fn apply_decision(&mut self, x: usize, moment: Moment, decision: Decision) {
        let late_by = self.nodes[x].late_by;
        let Some(d) = self.daemon_mut(x) else {
            return;
        };
        d.deadline = decision.next_look.max(moment.now + MIN_LOOK_GAP);
        let deadline = d.deadline;
        let update = decision.update;
        if let Some(update) = &update {
            d.full = d.core.full_update(moment);
            debug_assert_eq!(d.full.as_ref().map(|f| f.sequence), Some(update.sequence));
        }
        let status = decision.status;
        match &mut d.folded {
            Some(folded) => decision.events.iter().for_each(|e| folded.apply(e)),
            None => d.folded = Some(status.clone()),
        }
        self.events
            .extend(decision.events.into_iter().map(|e| (moment.now, x, e)));
        self.push_alerts(x, &status, moment);
        let Some(d) = self.daemon_mut(x) else {
            return;
        };
        d.status = Some(status);
        let open: Vec<ConnId> = d.out.values().filter_map(|o| o.conn).collect();
        if let Some(update) = update {
            for id in open {
                let due = self
                    .conns
                    .get(&id)
                    .is_some_and(|c| c.sender_open && c.sent < update.sequence);
                if due {
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.sent = update.sequence;
                    }
                    self.send(id, Wire::Update(update.clone()));
                }
            }
        }
        // The deadline look runs after the minimum gap, like a wake-up.
        self.queue_look(x, deadline + MIN_LOOK_GAP + late_by);
    }
}
