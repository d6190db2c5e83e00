//! The background task that owns the mesh state and drives the node core
//! (`meshd_model::node`): it looks whenever something it reads changed (a
//! link went silent, a peer's update arrived, an alarm, new facts, a new
//! config) or the core asked to look again by then, and publishes what the
//! core decided through `watch` and `broadcast` channels, so readers never
//! wait on it: the status and events (gRPC, the mesh page, the alert push),
//! what the evaluation rested on (the metrics), and the update for the
//! peers (the transport, encoded once for every stream).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::facts::{Cable, NodeFacts};
use meshd_domain::{
    Alarm, ClockOffset, Event, EventKind, LinkObservation, MeshStatus, NodeId, NodeIdentity,
    NodeLoad, PeerMessage, PeerReply, RejectReason, ReportUpdate,
};
use meshd_mesh::models::ModelTable;
use meshd_model::histogram::DurationHistogram;
use meshd_model::node::{Look, NodeCore, ReplyAction};
use meshd_model::peers::{PeerBook, PeerView};
use meshd_model::time::Moment;
use meshd_model::topology::{self, Declared, MeshTopology};
use meshd_model::verdict::link_measurements;
use meshd_proto::wire;
use prost::Message;
use tokio::sync::{Notify, broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, settings};
use crate::probe::rdma::{RdmaEnds, RdmaProbes};
use crate::probe::{ProbeBoard, Probes};
use crate::watch::facts::{FactsFeed, PortCounters};
use meshd_model::boot::{self, BootView};

/// Events kept for slow `WatchEvents` clients before they are told they
/// fell behind.
const EVENT_BUFFER: usize = 1024;

/// Updates kept for a stream that is slow to send them; one that falls
/// further behind starts over with everything.
const UPDATE_BUFFER: usize = 64;

/// The aggregator looks at least this often, with or without new input.
pub const MAX_LOOK_INTERVAL: Duration = meshd_model::verdict::MAX_IDLE;

/// Never look again sooner than this after a look, whatever woke the task:
/// a flood of updates cannot make it evaluate in a loop.
const MIN_LOOK_GAP: Duration = Duration::from_millis(5);

/// Evaluations take microseconds at 7 nodes and milliseconds at 256;
/// buckets cover both with room for a slow machine.
pub const EVALUATION_BOUNDS: [Duration; 13] = [
    Duration::from_micros(10),
    Duration::from_micros(25),
    Duration::from_micros(50),
    Duration::from_micros(100),
    Duration::from_micros(250),
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_micros(2_500),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
];

/// What this node holds of its peers, shared by the stream intake (which
/// only checks and stores, never waits) and the aggregator.
pub type SharedBook = Arc<Mutex<PeerBook>>;

/// A peer book for this config's membership.
pub fn peer_book(config: &Config) -> SharedBook {
    Arc::new(Mutex::new(PeerBook::new(
        config.node.id.clone(),
        config.members().into_iter().collect(),
        settings::book(config),
    )))
}

/// What one evaluation concluded and what it rested on, for the exporter
/// and the outside readers of the status.
#[derive(Debug, Clone)]
pub struct Published {
    pub status: Arc<MeshStatus>,
    /// This node's own link observations.
    pub links: Vec<LinkObservation>,
    pub load: NodeLoad,
    /// What this node holds of each peer.
    pub peers: BTreeMap<NodeId, PeerView>,
    /// Refused peer streams and updates since start, by reason.
    pub rejected: BTreeMap<RejectReason, u64>,
    /// Links at least one end probes, from this node's probes and the peers.
    pub links_observed: usize,
    /// Each peer's clock against this node's.
    pub clock_offsets: Vec<ClockOffset>,
    /// Each peer's paths and whether they are up (open and fresh).
    pub paths: Vec<(NodeId, String, bool)>,
    /// Events produced since start, by kind.
    pub events: BTreeMap<EventKind, u64>,
    /// How long the evaluations took, since start.
    pub evaluation_times: DurationHistogram,
    /// When this was evaluated, on the monotonic clock.
    pub at: Instant,
}

impl Published {
    /// Stands in only until the first evaluation, which `Aggregator::new`
    /// runs before anyone can read it.
    pub fn placeholder(identity: &NodeIdentity) -> Self {
        Self {
            status: Arc::new(placeholder(identity)),
            links: Vec::new(),
            load: NodeLoad::default(),
            peers: BTreeMap::new(),
            rejected: BTreeMap::new(),
            links_observed: 0,
            clock_offsets: Vec::new(),
            paths: Vec::new(),
            events: BTreeMap::new(),
            evaluation_times: DurationHistogram::new(&EVALUATION_BOUNDS),
            at: Instant::now(),
        }
    }

    /// Each end's latest figures, for readers outside the daemon.
    pub fn measurements(&self) -> Vec<meshd_domain::LinkMeasurement> {
        let moment = Moment {
            now: self.at,
            wall: self.status.evaluated_at,
        };
        link_measurements(
            self.links.iter().map(|o| (o, moment.wall)),
            &self.peers,
            moment,
        )
    }
}

/// Read side of the aggregator, cheap to clone into every handler.
#[derive(Debug, Clone)]
pub struct MeshState {
    pub status: watch::Receiver<Arc<MeshStatus>>,
    pub published: watch::Receiver<Arc<Published>>,
    events: broadcast::Sender<Event>,
}

impl MeshState {
    /// The current status with each end's latest figures filled in, for
    /// readers outside the daemon (`GetStatus`, the mesh page). The status
    /// the daemon passes around leaves them out: only these readers need
    /// them, on request.
    pub fn current_with_measurements(&self) -> MeshStatus {
        let published = self.published.borrow().clone();
        let mut status = (*published.status).clone();
        status.measurements = published.measurements();
        status
    }

    pub fn subscribe_events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    pub fn current(&self) -> Arc<MeshStatus> {
        self.status.borrow().clone()
    }

    /// Publishes an event that is not a verdict change (a config reload or
    /// rejection) to the same stream.
    pub fn announce(&self, event: Event) {
        tracing::info!(kind = %event.kind, subject = %event.subject, "{}", event.summary);
        // No subscriber is fine: nobody is watching right now.
        let _ = self.events.send(event);
    }
}

/// One update, encoded once for every stream.
#[derive(Debug)]
pub struct Encoded {
    pub sequence: u64,
    /// A `meshd.v1.PeerMessage` holding the update.
    pub bytes: prost::bytes::Bytes,
}

impl Encoded {
    fn update(update: ReportUpdate) -> Self {
        Self {
            sequence: update.sequence,
            bytes: wire::PeerMessage::from(PeerMessage::Update(Box::new(update)))
                .encode_to_vec()
                .into(),
        }
    }
}

/// A reply a stream received, for the node core.
#[derive(Debug)]
pub struct ReplyIn {
    pub peer: NodeId,
    pub reply: PeerReply,
    pub arrived: SystemTime,
    pub at: Instant,
}

/// What the aggregator publishes for the streams to the peers.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// This node's identity: a new incarnation reopens every stream.
    pub identity: watch::Receiver<NodeIdentity>,
    /// Everything sent so far, for a stream that opens.
    pub full: watch::Receiver<Option<Arc<Encoded>>>,
    /// Every update, in order.
    pub updates: broadcast::Sender<Arc<Encoded>>,
    /// Where streams hand the replies they receive.
    pub replies: mpsc::Sender<ReplyIn>,
}

/// Where the aggregator's inputs come from.
#[derive(Debug)]
pub struct Feeds {
    pub book: SharedBook,
    /// Pinged by the intake when the book changed in a way the engine judges.
    pub book_changed: Arc<Notify>,
    pub probes: Probes,
    /// The opt-in active RDMA probe of each cable.
    pub rdma: RdmaProbes,
    pub load: watch::Receiver<NodeLoad>,
    /// One per local watcher: the alarms it currently holds active.
    pub local_alarms: Vec<watch::Receiver<Vec<Alarm>>>,
    /// This node's platform facts and its own checks.
    pub facts: FactsFeed,
    /// This node's ports' error counters.
    pub port_counters: watch::Receiver<PortCounters>,
    /// Every member's boot, and what happened to those that rebooted.
    pub boots: watch::Receiver<Arc<BootView>>,
}

#[derive(Debug)]
pub struct Aggregator {
    core: NodeCore,
    configured: BTreeSet<NodeId>,
    feeds: Feeds,
    probe_board: watch::Receiver<ProbeBoard>,
    rdma_ends: watch::Receiver<RdmaEnds>,
    replies: mpsc::Receiver<ReplyIn>,
    status: watch::Sender<Arc<MeshStatus>>,
    events: broadcast::Sender<Event>,
    published: watch::Sender<Arc<Published>>,
    identity: watch::Sender<NodeIdentity>,
    full: watch::Sender<Option<Arc<Encoded>>>,
    updates: broadcast::Sender<Arc<Encoded>>,
    event_counts: BTreeMap<EventKind, u64>,
    evaluation_times: DurationHistogram,
    next_look: Instant,
    models: ModelTable,
    topology: MeshTopology,
    /// What `topology` was built from: this node's facts, the book's facts
    /// version, and when.
    topology_basis: Option<TopologyBasis>,
}

impl Aggregator {
    /// Looks once right away, so the first status a client reads is a real
    /// verdict, never an empty placeholder.
    pub fn new(
        config: &Config,
        identity: NodeIdentity,
        feeds: Feeds,
    ) -> (Self, MeshState, Outgoing) {
        let core = NodeCore::new(
            identity.clone(),
            config.members().into_iter().collect(),
            settings::expected_links(config, &identity.id),
            settings::node(config),
        );
        let (status, status_rx) = watch::channel(Arc::new(placeholder(&identity)));
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let (published, published_rx) = watch::channel(Arc::new(Published::placeholder(&identity)));
        let (identity_tx, identity_rx) = watch::channel(identity.clone());
        let (full, full_rx) = watch::channel(None);
        let (updates, _) = broadcast::channel(UPDATE_BUFFER);
        let (replies_tx, replies) = mpsc::channel(UPDATE_BUFFER);
        let probe_board = feeds.probes.subscribe();
        let rdma_ends = feeds.rdma.subscribe();
        let mut aggregator = Self {
            core,
            configured: config.members().into_iter().collect(),
            feeds,
            probe_board,
            rdma_ends,
            replies,
            status,
            events,
            published,
            identity: identity_tx,
            full,
            updates: updates.clone(),
            event_counts: BTreeMap::new(),
            evaluation_times: DurationHistogram::new(&EVALUATION_BOUNDS),
            next_look: Instant::now(),
            models: ModelTable::builtin(),
            topology: MeshTopology::default(),
            topology_basis: None,
        };
        aggregator.look(false);
        let state = MeshState {
            status: status_rx,
            published: published_rx,
            events: aggregator.events.clone(),
        };
        let outgoing = Outgoing {
            identity: identity_rx,
            full: full_rx,
            updates,
            replies: replies_tx,
        };
        (aggregator, state, outgoing)
    }

    /// Looks whenever an input changed or the core's deadline falls due,
    /// until `shutdown`; applies every new config published on `configs`.
    pub async fn run(
        mut self,
        mut configs: watch::Receiver<Arc<Config>>,
        shutdown: CancellationToken,
    ) {
        let book_changed = self.feeds.book_changed.clone();
        loop {
            // No deadline needs its exact instant: on the timer grid, the
            // look shares a wake-up that is coming anyway.
            let deadline = crate::cadence::align(
                tokio::time::Instant::from_std(self.next_look),
                crate::cadence::GRID,
            );
            let mut input_changed = true;
            let mut alarms = self.feeds.local_alarms.clone();
            let alarm_changed = async {
                if alarms.is_empty() {
                    std::future::pending::<()>().await;
                }
                let waits = alarms.iter_mut().map(|rx| Box::pin(rx.changed()));
                let _ = futures_select_all(waits).await;
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(deadline) => input_changed = false,
                changed = self.probe_board.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                changed = self.rdma_ends.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                () = book_changed.notified() => {}
                () = alarm_changed => {}
                changed = self.feeds.facts.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                Some(reply) = self.replies.recv() => {
                    self.on_reply(reply);
                    continue;
                }
                changed = configs.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let config = configs.borrow_and_update().clone();
                    self.reconfigure(&config);
                }
            }
            // A burst of changed inputs (many updates at once) is one look.
            if input_changed {
                tokio::time::sleep(MIN_LOOK_GAP).await;
            }
            self.look(false);
        }
        // However the loop ended, the node stops with it (as when any of its
        // tasks ends); the probe task's sockets close before this returns.
        shutdown.cancel();
        self.feeds.probes.stopped().await;
        self.feeds.rdma.stopped().await;
        tracing::debug!("aggregator stopped");
    }

    fn on_reply(&mut self, reply: ReplyIn) {
        match self
            .core
            .on_reply(&reply.peer, &reply.reply, reply.arrived, reply.at)
        {
            ReplyAction::Nothing | ReplyAction::Resync => {}
            ReplyAction::Reincarnate(known) => {
                self.core.reincarnate(known);
                let identity = self.core.identity().clone();
                tracing::warn!(
                    peer = %reply.peer,
                    incarnation = identity.incarnation.0,
                    "a peer remembers a newer run of this node (its clock stepped back?); taking a larger incarnation"
                );
                self.identity.send_replace(identity);
                self.full.send_replace(None);
                self.look(true);
            }
            ReplyAction::Refused(reason, detail) => {
                tracing::debug!(peer = %reply.peer, %reason, "the peer refused an update: {detail}");
            }
        }
    }

    /// Takes a new config without a restart: membership, links, thresholds
    /// and probe settings. Links that did not change keep their probers and
    /// their verdict history.
    fn reconfigure(&mut self, config: &Config) {
        let identity = self.core.identity().id.clone();
        self.configured = config.members().into_iter().collect();
        self.topology_basis = None;
        self.core.reconfigure(
            self.configured.clone(),
            settings::expected_links(config, &identity),
            settings::node(config),
        );
        self.feeds.probes.apply(
            settings::probed_links(config, &identity),
            settings::prober(config),
        );
        self.feeds.rdma.apply(
            settings::expected_links(config, &identity),
            settings::rdma_prober(config),
        );
        self.feeds
            .book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set_members(self.configured.clone(), settings::book(config));
        let event = Event {
            at: SystemTime::now(),
            observer: identity,
            kind: EventKind::ConfigReloaded,
            subject: "config".to_owned(),
            summary: format!(
                "config reloaded: {} members, {} links",
                self.configured.len(),
                config.links.len()
            ),
            detail: None,
        };
        *self.event_counts.entry(event.kind).or_default() += 1;
        tracing::info!(kind = %event.kind, "{}", event.summary);
        let _ = self.events.send(event);
    }

    fn look(&mut self, urgent: bool) {
        let started = Instant::now();
        let moment = Moment {
            now: started,
            wall: SystemTime::now(),
        };
        let (peers, rejected) = {
            let book = self
                .feeds
                .book
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (book.views(moment.now), book.rejected().clone())
        };
        let probes = self.probe_board.borrow_and_update().read(moment.now);
        let rdma = self.rdma_ends.borrow_and_update().clone();
        let facts = self.feeds.facts.borrow().clone();
        let counters = self.feeds.port_counters.borrow().clone();
        let load = *self.feeds.load.borrow();
        let local_alarms: Vec<Alarm> = self
            .feeds
            .local_alarms
            .iter_mut()
            .flat_map(|feed| feed.borrow_and_update().clone())
            .collect();
        let load = NodeLoad {
            cpu_saturated: load.cpu_saturated || probes.lateness >= meshd_model::linkstats::LATE,
            ..load
        };
        let decision = self.core.look(Look {
            moment,
            probes: &probes.links,
            rdma: &rdma,
            peers: peers.clone(),
            facts: facts.as_ref(),
            counters: &counters,
            local_alarms,
            load,
            lateness: probes.lateness,
            urgent,
        });
        self.evaluation_times.observe(started.elapsed());
        self.next_look = decision.next_look.max(started + MIN_LOOK_GAP);

        let mut status = decision.status;
        boot::annotate(&mut status, &self.feeds.boots.borrow());
        self.refresh_topology(&peers, facts.clone());
        status.cables.clone_from(&self.topology.cables);
        status.checks.clone_from(&self.topology.checks);

        if let Some(update) = decision.update {
            let sequence = update.sequence;
            // No stream is fine: no peer is connected right now.
            let _ = self.updates.send(Arc::new(Encoded::update(update)));
            let full = self
                .core
                .full_update(moment)
                .map(|f| Arc::new(Encoded::update(f)));
            debug_assert!(full.as_ref().is_none_or(|f| f.sequence == sequence));
            self.full.send_replace(full);
        }

        for event in &decision.events {
            tracing::info!(kind = %event.kind, subject = %event.subject, "{}", event.summary);
            *self.event_counts.entry(event.kind).or_default() += 1;
        }
        let links_observed = {
            let mut seen: BTreeSet<(&NodeId, &NodeId)> = BTreeSet::new();
            for o in decision
                .links
                .iter()
                .chain(peers.values().flat_map(|p| p.report.links.iter()))
                .filter(|o| o.probes_sent_total > 0)
            {
                let (x, y) = (&o.local.node, &o.remote.node);
                seen.insert(if x <= y { (x, y) } else { (y, x) });
            }
            seen.len()
        };
        let stale_after = self.core.settings().engine.stale_after;
        let paths = peers
            .iter()
            .flat_map(|(peer, view)| {
                view.paths.iter().map(move |(path, state)| {
                    let up = state.open
                        && moment.now.saturating_duration_since(state.last_message) < stale_after;
                    (peer.clone(), path.to_string(), up)
                })
            })
            .collect();
        let status = Arc::new(status);
        self.published.send_replace(Arc::new(Published {
            status: status.clone(),
            links: decision.links,
            load,
            peers,
            rejected,
            links_observed,
            clock_offsets: decision.clock_offsets,
            paths,
            events: self.event_counts.clone(),
            evaluation_times: self.evaluation_times.clone(),
            at: moment.now,
        }));
        self.status.send_replace(status);
        for event in decision.events {
            // No subscriber is fine: nobody is watching right now.
            let _ = self.events.send(event);
        }
    }

    /// Redoes the cable map and checks when what they are made of changed:
    /// a node's facts, the declared cables (this node's config, its peers'
    /// reports) or the membership. They change with cables and settings,
    /// not with verdicts, so most looks reuse them.
    fn refresh_topology(
        &mut self,
        peers: &BTreeMap<NodeId, PeerView>,
        local_facts: Option<Arc<NodeFacts>>,
    ) {
        let declared = topology::declared_cables(
            self.core
                .expected_links()
                .iter()
                .map(|l| Declared {
                    local: &l.local,
                    remote: &l.remote,
                })
                .chain(peers.values().flat_map(|p| {
                    p.report.links.iter().map(|o| Declared {
                        local: &o.local,
                        remote: &o.remote,
                    })
                })),
        );
        let (peer_facts, facts_version) = {
            let book = self
                .feeds
                .book
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let (facts, version) = book.facts();
            let unchanged = self.topology_basis.as_ref().is_some_and(|basis| {
                basis.facts_version == version
                    && same_facts(basis.local_facts.as_ref(), local_facts.as_ref())
                    && basis.declared == declared
            });
            if unchanged {
                return;
            }
            (facts.clone(), version)
        };
        let mut facts: BTreeMap<NodeId, NodeFacts> = peer_facts
            .into_iter()
            .map(|(id, f)| (id, (*f).clone()))
            .collect();
        if let Some(own) = &local_facts {
            facts.insert(self.core.identity().id.clone(), (**own).clone());
        }
        self.topology = topology::mesh_topology(&self.configured, &facts, &declared, &self.models);
        self.topology_basis = Some(TopologyBasis {
            local_facts,
            facts_version,
            declared,
        });
    }
}

/// What the cable map and checks were last made from; membership is not in
/// it because a reload clears the basis.
#[derive(Debug)]
struct TopologyBasis {
    local_facts: Option<Arc<NodeFacts>>,
    facts_version: u64,
    declared: Vec<Cable>,
}

/// Waits for the first of several futures.
async fn futures_select_all<F: Future + Unpin>(futures: impl Iterator<Item = F>) -> F::Output {
    let mut futures: Vec<F> = futures.collect();
    std::future::poll_fn(|cx| {
        for f in &mut futures {
            if let std::task::Poll::Ready(out) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(out);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn same_facts(a: Option<&Arc<NodeFacts>>, b: Option<&Arc<NodeFacts>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

/// Stands in for the status only until the first evaluation, which
/// `Aggregator::new` runs before anyone can read it.
fn placeholder(identity: &NodeIdentity) -> MeshStatus {
    MeshStatus {
        node: identity.clone(),
        evaluated_at: SystemTime::UNIX_EPOCH,
        quorum: Default::default(),
        nodes: Vec::new(),
        links: Vec::new(),
        alarms: Vec::new(),
        cables: Vec::new(),
        checks: Vec::new(),
        measurements: Vec::new(),
    }
}
