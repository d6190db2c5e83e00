//! The background task that drives the node core (`meshd_model::node`):
//! it gathers the core's inputs whenever one changed in a way a verdict
//! rests on (a link went silent, a peer's update arrived, an alarm, new
//! facts, a new config) or the core asked to look again by then, and
//! publishes what the core decided through `watch` and `broadcast`
//! channels, so readers never wait on it: the status and events (gRPC, the
//! mesh page, the alert push), what the look rested on (the metrics), and
//! the update for the peers (the transport, encoded once for every stream).
//! Every decision is the core's; this task only moves data.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{
    Alarm, Event, EventKind, Lateness, MeshStatus, NodeId, NodeIdentity, RejectReason,
};
use meshd_model::histogram::DurationHistogram;
use meshd_model::job_watch::Sampled;
use meshd_model::node::{Decision, Look, NodeCore, ReplyAction};
use meshd_model::time::Moment;
use tokio::sync::{Notify, broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, settings};
use crate::probe::rdma::{RdmaEnds, RdmaProbes};
use crate::probe::{ProbeBoard, Probes};
use crate::state::{
    EVALUATION_BOUNDS, Encoded, MeshState, Numbered, Outgoing, Published, ReplyIn, SharedBook,
    placeholder_status,
};
use crate::watch::carrier::CarrierMap;
use crate::watch::facts::{FactsFeed, PortCounters};

/// Events kept for slow `WatchEvents` clients before they are told they
/// fell behind.
const EVENT_BUFFER: usize = 1024;

/// Updates kept for a stream that is slow to send them; one that falls
/// further behind starts over with everything.
const UPDATE_BUFFER: usize = 64;

/// Never look again sooner than this after a look, whatever woke the task:
/// a flood of updates cannot make it evaluate in a loop.
const MIN_LOOK_GAP: Duration = Duration::from_millis(5);

/// Notices (a config refused) waiting for the aggregator.
const NOTICE_BUFFER: usize = 16;

/// Where the aggregator's inputs come from.
#[derive(Debug)]
pub struct Feeds {
    pub book: SharedBook,
    /// Pinged by the intake when the book changed in a way the engine judges.
    pub book_changed: Arc<Notify>,
    pub probes: Probes,
    /// The opt-in active RDMA probe of each cable.
    pub rdma: RdmaProbes,
    /// One per local watcher: the alarms it currently holds active.
    pub local_alarms: Vec<watch::Receiver<Vec<Alarm>>>,
    /// This node's platform facts and its own checks.
    pub facts: FactsFeed,
    /// This node's ports' error counters.
    pub port_counters: watch::Receiver<PortCounters>,
    /// The latest sample of this node's CPU, processes and RDMA data
    /// counters: read at the next look, which comes within a second.
    pub samples: watch::Receiver<Option<Arc<Sampled>>>,
    /// The carrier of each cable's interface, from the kernel's events: a
    /// change is looked at once (a pulled cable).
    pub carriers: watch::Receiver<CarrierMap>,
}

/// What the aggregator hands the rest of the node.
#[derive(Debug)]
pub struct Handles {
    pub state: MeshState,
    pub outgoing: Outgoing,
    /// Where other parts send notices for the event stream.
    pub notices: mpsc::Sender<Event>,
}

/// The senders of everything the aggregator publishes.
#[derive(Debug)]
struct Outputs {
    status: watch::Sender<Arc<MeshStatus>>,
    events: broadcast::Sender<Numbered>,
    published: watch::Sender<Arc<Published>>,
    identity: watch::Sender<NodeIdentity>,
    full: watch::Sender<Option<Arc<Encoded>>>,
    updates: broadcast::Sender<Arc<Encoded>>,
}

/// The receivers of everything that wakes the aggregator.
#[derive(Debug)]
struct Wakers {
    probe_board: watch::Receiver<ProbeBoard>,
    rdma_ends: watch::Receiver<RdmaEnds>,
    replies: mpsc::Receiver<ReplyIn>,
    notices: mpsc::Receiver<Event>,
}

#[derive(Debug)]
pub struct Aggregator {
    core: NodeCore,
    feeds: Feeds,
    wakers: Wakers,
    outputs: Outputs,
    event_counts: BTreeMap<EventKind, u64>,
    /// The sequence of the last event streamed.
    events_sent: u64,
    evaluation_times: DurationHistogram,
    next_look: Instant,
}

/// What woke the aggregator.
enum Wake {
    /// An input changed: look after the minimum gap.
    Input,
    /// The core's deadline: look now.
    Deadline,
    Reply(ReplyIn),
    Notice(Event),
    Reconfigured(Arc<Config>),
    Stop,
}

impl Aggregator {
    /// Looks once right away, so the first status a client reads is a real
    /// verdict, never an empty placeholder.
    pub fn new(config: &Config, identity: NodeIdentity, feeds: Feeds) -> (Self, Handles) {
        let core = NodeCore::new(
            identity.clone(),
            config.members().into_iter().collect(),
            settings::expected_links(config, &identity.id),
            settings::node(config),
        );
        let (status, status_rx) = watch::channel(Arc::new(placeholder_status(&identity)));
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let (published, published_rx) = watch::channel(Arc::new(Published::placeholder(&identity)));
        let (identity_tx, identity_rx) = watch::channel(identity);
        let (full, full_rx) = watch::channel(None);
        let (updates, _) = broadcast::channel(UPDATE_BUFFER);
        let (replies_tx, replies) = mpsc::channel(UPDATE_BUFFER);
        let (notices_tx, notices) = mpsc::channel(NOTICE_BUFFER);
        let wakers = Wakers {
            probe_board: feeds.probes.subscribe(),
            rdma_ends: feeds.rdma.subscribe(),
            replies,
            notices,
        };
        let handles = Handles {
            state: MeshState::new(status_rx, published_rx, events.clone()),
            outgoing: Outgoing {
                identity: identity_rx,
                full: full_rx,
                updates: updates.clone(),
                replies: replies_tx,
            },
            notices: notices_tx,
        };
        let mut aggregator = Self {
            core,
            feeds,
            wakers,
            outputs: Outputs {
                status,
                events,
                published,
                identity: identity_tx,
                full,
                updates,
            },
            event_counts: BTreeMap::new(),
            events_sent: 0,
            evaluation_times: DurationHistogram::new(&EVALUATION_BOUNDS),
            next_look: Instant::now(),
        };
        aggregator.look(false);
        (aggregator, handles)
    }

    /// Looks whenever an input changed or the core's deadline falls due,
    /// until `shutdown`; applies every new config published on `configs`.
    pub async fn run(
        mut self,
        mut configs: watch::Receiver<Arc<Config>>,
        shutdown: CancellationToken,
    ) {
        loop {
            match self.next_wake(&mut configs, &shutdown).await {
                Wake::Stop => break,
                Wake::Reply(reply) => self.on_reply(reply),
                Wake::Notice(event) => self.tell(vec![event]),
                Wake::Reconfigured(config) => {
                    self.reconfigure(&config);
                    self.look(false);
                }
                Wake::Input => {
                    // A burst of changed inputs (many updates at once) is one look.
                    tokio::time::sleep(MIN_LOOK_GAP).await;
                    self.look(false);
                }
                Wake::Deadline => self.look(false),
            }
        }
        // However the loop ended, the node stops with it (as when any of its
        // tasks ends); the probe task's sockets close before this returns.
        shutdown.cancel();
        self.feeds.probes.stopped().await;
        self.feeds.rdma.stopped().await;
        tracing::debug!("aggregator stopped");
    }

    async fn next_wake(
        &mut self,
        configs: &mut watch::Receiver<Arc<Config>>,
        shutdown: &CancellationToken,
    ) -> Wake {
        // No deadline needs its exact instant: on the timer grid, the look
        // shares a wake-up that is coming anyway.
        let deadline = crate::cadence::align(
            tokio::time::Instant::from_std(self.next_look),
            crate::cadence::GRID,
        );
        let book_changed = self.feeds.book_changed.clone();
        let mut alarms = self.feeds.local_alarms.clone();
        let alarm_changed = async {
            if alarms.is_empty() {
                std::future::pending::<()>().await;
            }
            let waits = alarms.iter_mut().map(|rx| Box::pin(rx.changed()));
            let _ = futures_select_all(waits).await;
        };
        let wakers = &mut self.wakers;
        let carriers = &mut self.feeds.carriers;
        // Where the events cannot be read the watcher ends at once: its
        // silence then wakes nothing (it does not stop the node).
        let carrier_changed = async {
            if carriers.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let input = |changed: Result<(), watch::error::RecvError>| match changed {
            Ok(()) => Wake::Input,
            Err(_) => Wake::Stop,
        };
        tokio::select! {
            () = shutdown.cancelled() => Wake::Stop,
            () = tokio::time::sleep_until(deadline) => Wake::Deadline,
            changed = wakers.probe_board.changed() => input(changed),
            changed = wakers.rdma_ends.changed() => input(changed),
            changed = self.feeds.facts.changed() => input(changed),
            () = carrier_changed => Wake::Input,
            () = book_changed.notified() => Wake::Input,
            () = alarm_changed => Wake::Input,
            Some(reply) = wakers.replies.recv() => Wake::Reply(reply),
            Some(notice) = wakers.notices.recv() => Wake::Notice(notice),
            changed = configs.changed() => match changed {
                Ok(()) => Wake::Reconfigured(configs.borrow_and_update().clone()),
                Err(_) => Wake::Stop,
            },
        }
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
                self.outputs.identity.send_replace(identity);
                self.outputs.full.send_replace(None);
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
        let local = self.core.identity().id.clone();
        let members: BTreeSet<NodeId> = config.members().into_iter().collect();
        self.core.reconfigure(
            members.clone(),
            settings::expected_links(config, &local),
            settings::node(config),
        );
        self.feeds.probes.apply(
            crate::probe::probed_links(config, &local),
            crate::probe::settings(config),
        );
        self.feeds.rdma.apply(
            settings::expected_links(config, &local),
            crate::probe::rdma::settings(config),
        );
        self.feeds
            .book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set_members(members.clone(), settings::book(config));
        self.tell(vec![Event {
            at: SystemTime::now(),
            observer: local,
            kind: EventKind::ConfigReloaded,
            subject: "config".to_owned(),
            summary: format!(
                "config reloaded: {} members, {} links",
                members.len(),
                config.links.len()
            ),
            detail: None,
        }]);
    }

    fn look(&mut self, urgent: bool) {
        let started = Instant::now();
        let moment = Moment {
            now: started,
            wall: SystemTime::now(),
        };
        let book = self
            .feeds
            .book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .snapshot(moment.now);
        let rejected = book.rejected.clone();
        let probes = self.wakers.probe_board.borrow_and_update().read(moment.now);
        let rdma = self.wakers.rdma_ends.borrow_and_update().clone();
        let facts = self.feeds.facts.borrow().clone();
        let counters = self.feeds.port_counters.borrow().clone();
        let carriers: BTreeMap<String, bool> = self
            .feeds
            .carriers
            .borrow_and_update()
            .iter()
            .map(|(iface, state)| (iface.clone(), state.carrier))
            .collect();
        let sampled = self.feeds.samples.borrow().clone();
        let local_alarms: Vec<Alarm> = self
            .feeds
            .local_alarms
            .iter_mut()
            .flat_map(|feed| feed.borrow_and_update().clone())
            .collect();
        let decision = self.core.look(Look {
            moment,
            probes: &probes.links,
            rdma: &rdma,
            book,
            facts: facts.as_ref(),
            counters: &counters,
            carriers: &carriers,
            local_alarms,
            sampled: sampled.as_deref(),
            lateness: probes.lateness,
            urgent,
        });
        self.evaluation_times.observe(started.elapsed());
        self.next_look = decision.next_look.max(started + MIN_LOOK_GAP);
        self.publish(decision, probes.lateness, rejected, moment);
    }

    /// Sends what a look decided: the update to the streams, the status
    /// and what it rested on to its readers, the events to the stream.
    fn publish(
        &mut self,
        decision: Decision,
        lateness: Lateness,
        rejected: BTreeMap<RejectReason, u64>,
        moment: Moment,
    ) {
        if let Some(update) = decision.update {
            let sequence = update.sequence;
            // No stream is fine: no peer is connected right now.
            let _ = self.outputs.updates.send(Arc::new(Encoded::update(update)));
            let full = self
                .core
                .full_update(moment)
                .map(|f| Arc::new(Encoded::update(f)));
            debug_assert!(full.as_ref().is_none_or(|f| f.sequence == sequence));
            self.outputs.full.send_replace(full);
        }
        // Numbered before the status goes out with the count it includes,
        // so a stream opening in between skips exactly these.
        let events = self.number(decision.events);
        let status = Arc::new(decision.status);
        self.outputs.published.send_replace(Arc::new(Published {
            status: status.clone(),
            links: decision.links,
            load: decision.load,
            lateness,
            peers: decision.peers,
            rejected,
            links_observed: decision.links_observed,
            clock_offsets: decision.clock_offsets,
            paths: decision.paths,
            jobs: decision.jobs,
            events: self.event_counts.clone(),
            events_through: self.events_sent,
            evaluation_times: self.evaluation_times.clone(),
            at: moment.now,
        }));
        self.outputs.status.send_replace(status);
        self.stream(events);
    }

    /// Counts and streams events that are no look's (a config reloaded or
    /// refused); the counts reach the metrics with the next look.
    fn tell(&mut self, events: Vec<Event>) {
        let events = self.number(events);
        self.stream(events);
    }

    /// Counts the events and gives each its place in the stream.
    fn number(&mut self, events: Vec<Event>) -> Vec<Numbered> {
        events
            .into_iter()
            .map(|event| {
                if event.kind.is_verdict_change() {
                    *self.event_counts.entry(event.kind).or_default() += 1;
                }
                self.events_sent += 1;
                Numbered {
                    sequence: self.events_sent,
                    event,
                }
            })
            .collect()
    }

    /// Logs each event and sends it to the `WatchEvents` streams.
    fn stream(&self, events: Vec<Numbered>) {
        for numbered in events {
            let event = &numbered.event;
            tracing::info!(kind = %event.kind, subject = %event.subject, sequence = numbered.sequence, "{}", event.summary);
            // No subscriber is fine: nobody is watching right now.
            let _ = self.outputs.events.send(numbered);
        }
    }
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
