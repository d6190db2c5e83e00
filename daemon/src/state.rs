//! What the parts of a running node share: the peer book the intake fills
//! and the core reads, what each look publishes (the status, its events,
//! the figures behind the metrics), the encoded updates for the streams to
//! the peers and their replies, and the notices other parts send the
//! aggregator. Plain types and channels: every module may use them, and
//! none of them depends on who produces or reads them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{
    ClockOffset, Event, EventKind, Lateness, LinkMeasurement, LinkObservation, MeshStatus, NodeId,
    NodeIdentity, NodeLoad, PeerMessage, PeerReply, RejectReason, ReportUpdate,
};
use meshd_model::histogram::DurationHistogram;
use meshd_model::job_watch::JobFigures;
use meshd_model::peers::{PathLiveness, PeerBook, PeerView};
use meshd_model::time::Moment;
use meshd_model::verdict::link_measurements;
use meshd_proto::wire;
use prost::Message;
use tokio::sync::{broadcast, mpsc, watch};

/// What this node holds of its peers, shared by the stream intake (which
/// only checks and stores, never waits) and the aggregator.
pub type SharedBook = Arc<Mutex<PeerBook>>;

/// The aggregator looks at least this often, with or without new input.
pub const MAX_LOOK_INTERVAL: Duration = meshd_model::verdict::MAX_IDLE;

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

/// What one look concluded and what it rested on, for the exporter and
/// the outside readers of the status.
#[derive(Debug, Clone)]
pub struct Published {
    pub status: Arc<MeshStatus>,
    /// This node's own link observations.
    pub links: Vec<LinkObservation>,
    pub load: NodeLoad,
    /// How late this node's probe timer ran, as of the look.
    pub lateness: Lateness,
    /// What this node holds of each peer.
    pub peers: BTreeMap<NodeId, PeerView>,
    /// Refused peer streams and updates since start, by reason.
    pub rejected: BTreeMap<RejectReason, u64>,
    /// Links at least one end probes, from this node's probes and the peers.
    pub links_observed: usize,
    /// Each peer's clock against this node's.
    pub clock_offsets: Vec<ClockOffset>,
    /// Each peer's paths and whether they are up (open and fresh).
    pub paths: Vec<PathLiveness>,
    /// The job processes as of the latest process sample; `None` before
    /// the first.
    pub jobs: Option<JobFigures>,
    /// Events produced since start, by kind.
    pub events: BTreeMap<EventKind, u64>,
    /// The sequence of the last event this status includes: a reader that
    /// opens with this status folds only the events after it.
    pub events_through: u64,
    /// How long the evaluations took, since start.
    pub evaluation_times: DurationHistogram,
    /// When this was evaluated, on the monotonic clock.
    pub at: Instant,
}

impl Published {
    /// Stands in only until the first look, which the aggregator runs
    /// before anyone can read it.
    pub fn placeholder(identity: &NodeIdentity) -> Self {
        Self {
            status: Arc::new(placeholder_status(identity)),
            links: Vec::new(),
            load: NodeLoad::default(),
            lateness: Lateness::default(),
            peers: BTreeMap::new(),
            rejected: BTreeMap::new(),
            links_observed: 0,
            clock_offsets: Vec::new(),
            paths: Vec::new(),
            jobs: None,
            events: BTreeMap::new(),
            events_through: 0,
            evaluation_times: DurationHistogram::new(&EVALUATION_BOUNDS),
            at: Instant::now(),
        }
    }

    /// Each end's latest figures, for readers outside the daemon.
    pub fn measurements(&self) -> Vec<LinkMeasurement> {
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

fn with_measurements(published: &Published) -> MeshStatus {
    let mut status = (*published.status).clone();
    status.measurements = published.measurements();
    status
}

/// The status before the first look.
pub fn placeholder_status(identity: &NodeIdentity) -> MeshStatus {
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
        jobs: Vec::new(),
    }
}

/// An event with its place in this node's stream: one more than the one
/// before, from 1 at start.
#[derive(Debug, Clone)]
pub struct Numbered {
    pub sequence: u64,
    pub event: Event,
}

impl From<Numbered> for wire::Event {
    fn from(numbered: Numbered) -> Self {
        Self {
            sequence: numbered.sequence,
            ..numbered.event.into()
        }
    }
}

/// Read side of the aggregator, cheap to clone into every handler.
#[derive(Debug, Clone)]
pub struct MeshState {
    pub status: watch::Receiver<Arc<MeshStatus>>,
    pub published: watch::Receiver<Arc<Published>>,
    events: broadcast::Sender<Numbered>,
}

impl MeshState {
    pub fn new(
        status: watch::Receiver<Arc<MeshStatus>>,
        published: watch::Receiver<Arc<Published>>,
        events: broadcast::Sender<Numbered>,
    ) -> Self {
        Self {
            status,
            published,
            events,
        }
    }

    /// The current status with each end's latest figures filled in, for
    /// readers outside the daemon (`GetStatus`, the mesh page). The status
    /// the daemon passes around leaves them out: only these readers need
    /// them, on request.
    pub fn current_with_measurements(&self) -> MeshStatus {
        with_measurements(&self.published.borrow().clone())
    }

    /// The current status as the event that opens a stream, numbered with
    /// the last event it includes.
    pub fn snapshot(&self) -> Numbered {
        let published = self.published.borrow().clone();
        Numbered {
            sequence: published.events_through,
            event: meshd_model::events::snapshot(&with_measurements(&published)),
        }
    }

    pub fn subscribe_events(&self) -> broadcast::Receiver<Numbered> {
        self.events.subscribe()
    }

    pub fn current(&self) -> Arc<MeshStatus> {
        self.status.borrow().clone()
    }
}

/// Events that are no verdict change (a config refused), sent to the
/// aggregator, which counts them and tells the event stream like every
/// other.
pub type Notices = mpsc::Sender<Event>;

/// One update, encoded once for every stream.
#[derive(Debug)]
pub struct Encoded {
    pub sequence: u64,
    /// A `meshd.v1.PeerMessage` holding the update.
    pub bytes: prost::bytes::Bytes,
}

impl Encoded {
    pub fn update(update: ReportUpdate) -> Self {
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
