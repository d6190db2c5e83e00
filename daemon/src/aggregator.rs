//! The background task that owns the mesh state: it runs the verdict engine
//! on a fixed cadence over this node's own link observations and the
//! freshest peer reports, and publishes what it concluded (`watch`
//! channels, so readers never wait on it): the status, the events, the next
//! outgoing report, and for the exporter what the evaluation rested on. The
//! gRPC and HTTP handlers and the metrics only read what it publishes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use meshd_platform::mesh::models::ModelTable;
use meshd_proto::domain::{
    Alarm, Event, EventKind, LinkObservation, MeshStatus, NodeId, NodeIdentity, NodeLoad,
    RejectReason,
};
use meshd_proto::facts::NodeFacts;
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, settings};
use crate::probe::ProbeManager;
use crate::watch::facts::{FactsFeed, PortCounters};
use meshd_model::boot::{self, BootView};
use meshd_model::events;
use meshd_model::histogram::DurationHistogram;
use meshd_model::intake::{Received, ReportBook};
use meshd_model::link_facts::add_port_facts;
use meshd_model::topology::{self, Declared, MeshTopology};
use meshd_model::verdict::{Engine, ExpectedLink, MeshInputs, link_measurements};

/// How often verdicts are re-evaluated. A tenth of the 1 s detection target.
pub const EVALUATION_INTERVAL: Duration = Duration::from_millis(100);

/// Events kept for slow `WatchEvents` clients before they are told they
/// fell behind.
const EVENT_BUFFER: usize = 1024;

/// The cable map and checks are redone at once when any node's facts
/// change, and this often besides (for cables declared in reloaded
/// configs): they change with cables and settings, not with verdicts.
const TOPOLOGY_INTERVAL: Duration = Duration::from_secs(1);

/// The peer reports accepted so far, shared by the intake handler (which
/// only checks and stores, never waits) and the aggregator.
pub type SharedBook = Arc<Mutex<ReportBook>>;

/// What this node tells its peers; the reporter adds identity, sequence
/// and send time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportBody {
    pub links: Vec<LinkObservation>,
    pub alarms: Vec<Alarm>,
    pub hears: Vec<NodeId>,
    pub load: NodeLoad,
    /// This node's latest platform facts; the reporter decides which
    /// reports carry them.
    pub facts: Option<Arc<NodeFacts>>,
}

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

/// What one evaluation concluded and what it rested on, for the exporter,
/// which reads this and never the engine's inputs.
#[derive(Debug, Clone)]
pub struct Published {
    pub status: Arc<MeshStatus>,
    /// This node's own link observations, alarms and load, as reported.
    pub report: Arc<ReportBody>,
    /// Each peer's latest accepted report, with when it arrived.
    pub peer_reports: BTreeMap<NodeId, Arc<Received>>,
    /// Refused peer reports since start, by reason.
    pub rejected: BTreeMap<RejectReason, u64>,
    /// Links at least one end probes, from this node's probes and fresh reports.
    pub links_observed: usize,
    /// Events produced since start, by kind.
    pub events: BTreeMap<EventKind, u64>,
    /// How long the evaluations took, since start.
    pub evaluation_times: DurationHistogram,
}

impl Published {
    /// Stands in only until the first evaluation, which `Aggregator::new`
    /// runs before anyone can read it.
    pub fn placeholder(identity: &NodeIdentity) -> Self {
        Self {
            status: Arc::new(placeholder(identity)),
            report: Arc::new(ReportBody::default()),
            peer_reports: BTreeMap::new(),
            rejected: BTreeMap::new(),
            links_observed: 0,
            events: BTreeMap::new(),
            evaluation_times: DurationHistogram::new(&EVALUATION_BOUNDS),
        }
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
    /// published ten times a second leaves them out: gathering them costs
    /// as much as a whole evaluation at 256 nodes, and only these readers
    /// need them, on request.
    pub fn current_with_measurements(&self) -> MeshStatus {
        let published = self.published.borrow().clone();
        let mut status = (*published.status).clone();
        status.measurements = link_measurements(
            published
                .report
                .links
                .iter()
                .map(|o| (o, published.status.evaluated_at)),
            &published.peer_reports,
        );
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

/// Where the aggregator's inputs come from.
#[derive(Debug)]
pub struct Feeds {
    pub book: SharedBook,
    /// This node's probers, one per configured link.
    pub probes: ProbeManager,
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

/// What the aggregator publishes for the reporter.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub body: watch::Receiver<Arc<ReportBody>>,
    /// Fired when a verdict changed, so peers hear of it without waiting
    /// for the next report tick.
    pub urgent: Arc<Notify>,
}

#[derive(Debug)]
pub struct Aggregator {
    engine: Engine,
    identity: NodeIdentity,
    configured: BTreeSet<NodeId>,
    expected_links: Vec<ExpectedLink>,
    feeds: Feeds,
    status: watch::Sender<Arc<MeshStatus>>,
    events: broadcast::Sender<Event>,
    body: watch::Sender<Arc<ReportBody>>,
    published: watch::Sender<Arc<Published>>,
    urgent: Arc<Notify>,
    event_counts: BTreeMap<EventKind, u64>,
    evaluation_times: DurationHistogram,
    /// Peers whose cable this node currently hears nothing on, so that
    /// crossing `down_after` either way is pushed to the peers at once.
    silent_links: BTreeSet<NodeId>,
    down_after: Duration,
    models: ModelTable,
    topology: MeshTopology,
    /// What `topology` was built from: this node's facts, the book's facts
    /// version, and when.
    topology_basis: Option<(Option<Arc<NodeFacts>>, u64, SystemTime)>,
}

/// A report book for this config's membership.
pub fn report_book(config: &Config) -> SharedBook {
    Arc::new(Mutex::new(ReportBook::new(
        config.node.id.clone(),
        config.members().into_iter().collect(),
        settings::max_report_delay(config),
    )))
}

impl Aggregator {
    /// Evaluates once right away, so the first status a client reads is a
    /// real verdict, never an empty placeholder.
    pub fn new(
        config: &Config,
        identity: NodeIdentity,
        feeds: Feeds,
    ) -> (Self, MeshState, Outgoing) {
        let engine = Engine::new(settings::engine(config));
        let (status, status_rx) = watch::channel(Arc::new(placeholder(&identity)));
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let (body, body_rx) = watch::channel(Arc::new(ReportBody::default()));
        let (published, published_rx) = watch::channel(Arc::new(Published::placeholder(&identity)));
        let urgent = Arc::new(Notify::new());
        let mut aggregator = Self {
            engine,
            expected_links: settings::expected_links(config, &identity.id),
            configured: config.members().into_iter().collect(),
            identity,
            feeds,
            status,
            events,
            body,
            published,
            urgent: urgent.clone(),
            event_counts: BTreeMap::new(),
            evaluation_times: DurationHistogram::new(&EVALUATION_BOUNDS),
            silent_links: BTreeSet::new(),
            down_after: config.thresholds.down_after,
            models: ModelTable::builtin(),
            topology: MeshTopology::default(),
            topology_basis: None,
        };
        aggregator.evaluate(SystemTime::now(), true);
        let state = MeshState {
            status: status_rx,
            published: published_rx,
            events: aggregator.events.clone(),
        };
        let outgoing = Outgoing {
            body: body_rx,
            urgent,
        };
        (aggregator, state, outgoing)
    }

    /// Evaluates on its cadence until `shutdown`, and applies every new
    /// config published on `configs` between two evaluations.
    pub async fn run(
        mut self,
        mut configs: watch::Receiver<Arc<Config>>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(EVALUATION_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => self.evaluate(SystemTime::now(), false),
                changed = configs.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let config = configs.borrow_and_update().clone();
                    self.reconfigure(&config, SystemTime::now());
                }
            }
        }
        tracing::debug!("aggregator stopped");
    }

    /// Takes a new config without a restart: membership, links, thresholds
    /// and probe settings. Links that did not change keep their probers and
    /// their verdict history.
    fn reconfigure(&mut self, config: &Config, now: SystemTime) {
        self.engine.set_settings(settings::engine(config));
        self.configured = config.members().into_iter().collect();
        self.expected_links = settings::expected_links(config, &self.identity.id);
        self.down_after = config.thresholds.down_after;
        self.feeds.probes.apply(
            &settings::probed_links(config, &self.identity.id),
            settings::prober(&config.probe),
        );
        self.feeds
            .book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set_members(self.configured.clone(), settings::max_report_delay(config));
        let event = Event {
            at: now,
            observer: self.identity.id.clone(),
            kind: EventKind::ConfigReloaded,
            subject: "config".to_owned(),
            summary: format!(
                "config reloaded: {} members, {} links",
                self.configured.len(),
                self.expected_links.len()
            ),
            detail: None,
        };
        *self.event_counts.entry(event.kind).or_default() += 1;
        tracing::info!(kind = %event.kind, "{}", event.summary);
        let _ = self.events.send(event);
    }

    fn evaluate(&mut self, now: SystemTime, first: bool) {
        let started = Instant::now();
        let (reports, rejected) = {
            let book = self
                .feeds
                .book
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (book.latest().clone(), book.rejected().clone())
        };
        let mut local_links = self.feeds.probes.observations();
        let load = *self.feeds.load.borrow();
        let local_facts = self.feeds.facts.borrow().clone();
        if let Some(facts) = &local_facts {
            let counters = self.feeds.port_counters.borrow().clone();
            for link in &mut local_links {
                add_port_facts(&mut link.observation, facts, &counters);
            }
        }
        let inputs = MeshInputs {
            local: self.identity.clone(),
            configured: self.configured.clone(),
            local_load: load,
            local_links,
            expected_links: self.expected_links.clone(),
            reports,
            local_alarms: self
                .feeds
                .local_alarms
                .iter()
                .flat_map(|feed| feed.borrow().clone())
                .collect(),
        };
        let mut status = self.engine.evaluate(&inputs, now);
        boot::annotate(&mut status, &self.feeds.boots.borrow());
        self.evaluation_times.observe(started.elapsed());
        self.refresh_topology(&inputs, local_facts.clone(), now);
        status.cables.clone_from(&self.topology.cables);
        status.checks.clone_from(&self.topology.checks);

        let report = Arc::new(ReportBody {
            links: inputs
                .local_links
                .iter()
                .map(|l| l.observation.clone())
                .collect(),
            alarms: inputs.local_alarms.clone(),
            hears: self.engine.hears(&inputs, now),
            load,
            facts: local_facts,
        });
        self.body.send_replace(report.clone());

        let events = if first {
            Vec::new()
        } else {
            events::diff(Some(&self.status.borrow()), &status)
        };
        for event in &events {
            tracing::info!(kind = %event.kind, subject = %event.subject, "{}", event.summary);
            *self.event_counts.entry(event.kind).or_default() += 1;
        }
        let silent_links: BTreeSet<NodeId> = inputs
            .local_links
            .iter()
            .filter(|l| l.observation.silence >= self.down_after)
            .map(|l| l.observation.remote.node.clone())
            .collect();
        if !events.is_empty() || silent_links != self.silent_links {
            self.urgent.notify_one();
            self.silent_links = silent_links;
        }
        let status = Arc::new(status);
        self.published.send_replace(Arc::new(Published {
            status: status.clone(),
            report,
            peer_reports: inputs.reports.clone(),
            rejected,
            links_observed: inputs.links_observed(),
            events: self.event_counts.clone(),
            evaluation_times: self.evaluation_times.clone(),
        }));
        self.status.send_replace(status);
        for event in events {
            // No subscriber is fine: nobody is watching right now.
            let _ = self.events.send(event);
        }
    }
}

impl Aggregator {
    /// Redoes the cable map and checks when a node's facts changed, or
    /// [`TOPOLOGY_INTERVAL`] after the last time.
    fn refresh_topology(
        &mut self,
        inputs: &MeshInputs,
        local_facts: Option<Arc<NodeFacts>>,
        now: SystemTime,
    ) {
        let (peer_facts, version) = {
            let book = self
                .feeds
                .book
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let (facts, version) = book.facts();
            let unchanged = self.topology_basis.as_ref().is_some_and(|(local, v, at)| {
                *v == version
                    && same_facts(local.as_ref(), local_facts.as_ref())
                    && now.duration_since(*at).unwrap_or(Duration::ZERO) < TOPOLOGY_INTERVAL
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
            facts.insert(self.identity.id.clone(), (**own).clone());
        }
        let declared = topology::declared_cables(
            inputs
                .expected_links
                .iter()
                .map(|l| Declared {
                    local: &l.local,
                    remote: &l.remote,
                })
                .chain(inputs.reports.values().flat_map(|r| {
                    r.report.links.iter().map(|o| Declared {
                        local: &o.local,
                        remote: &o.remote,
                    })
                })),
        );
        self.topology = topology::mesh_topology(&self.configured, &facts, &declared, &self.models);
        self.topology_basis = Some((local_facts, version, now));
    }
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
