//! The background task that owns the mesh state: it runs the verdict engine
//! on a fixed cadence, publishes the status (a `watch` channel, so readers
//! never wait on it) and the events, and keeps the metrics current. The gRPC
//! and HTTP handlers only read what it publishes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_proto::domain::{Event, LinkEnd, MeshStatus, NodeIdentity};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::model::events;
use crate::model::verdict::{Engine, ExpectedLink, Freshness, MeshInputs};

/// How often verdicts are re-evaluated. A tenth of the 1 s detection target.
pub const EVALUATION_INTERVAL: Duration = Duration::from_millis(100);

/// Events kept for slow `WatchEvents` clients before they are told they
/// fell behind.
const EVENT_BUFFER: usize = 1024;

/// Read side of the aggregator, cheap to clone into every handler.
#[derive(Debug, Clone)]
pub struct MeshState {
    pub status: watch::Receiver<Arc<MeshStatus>>,
    events: broadcast::Sender<Event>,
}

impl MeshState {
    pub fn subscribe_events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    pub fn current(&self) -> Arc<MeshStatus> {
        self.status.borrow().clone()
    }
}

#[derive(Debug)]
pub struct Aggregator {
    engine: Engine,
    inputs: MeshInputs,
    status: watch::Sender<Arc<MeshStatus>>,
    events: broadcast::Sender<Event>,
    metrics: Arc<Metrics>,
}

impl Aggregator {
    /// Evaluates once right away, so the first status a client reads is a
    /// real verdict, never an empty placeholder.
    pub fn new(
        config: &Config,
        identity: NodeIdentity,
        metrics: Arc<Metrics>,
    ) -> (Self, MeshState) {
        let mut engine = Engine::new(Freshness::from_stale_after(config.report.stale_after));
        let inputs = inputs_from_config(config, identity);
        let first = engine.evaluate(&inputs, SystemTime::now());
        metrics.record_status(&first);
        let (status, status_rx) = watch::channel(Arc::new(first));
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let state = MeshState {
            status: status_rx,
            events: events.clone(),
        };
        let aggregator = Self {
            engine,
            inputs,
            status,
            events,
            metrics,
        };
        (aggregator, state)
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(EVALUATION_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => self.evaluate(SystemTime::now()),
            }
        }
        tracing::debug!("aggregator stopped");
    }

    fn evaluate(&mut self, now: SystemTime) {
        let started = Instant::now();
        let status = self.engine.evaluate(&self.inputs, now);
        self.metrics.observe_evaluation(started.elapsed());
        let previous = self.status.borrow().clone();
        for event in events::diff(Some(&previous), &status) {
            tracing::info!(kind = %event.kind, subject = %event.subject, "{}", event.summary);
            self.metrics.count_event(event.kind);
            // No subscriber is fine: nobody is watching right now.
            let _ = self.events.send(event);
        }
        self.metrics.record_status(&status);
        self.status.send_replace(Arc::new(status));
    }
}

fn inputs_from_config(config: &Config, identity: NodeIdentity) -> MeshInputs {
    let links = config
        .links
        .iter()
        .map(|link| ExpectedLink {
            local: LinkEnd {
                node: identity.id.clone(),
                iface: link.local_iface.clone(),
                address: Some(link.local_address),
                rdma_device: None,
                rdma_port: None,
            },
            remote: LinkEnd {
                address: Some(link.peer_address),
                ..LinkEnd::node_only(link.peer.clone())
            },
        })
        .collect();
    MeshInputs {
        configured: config.members().into_iter().collect::<BTreeSet<_>>(),
        local: identity,
        heard: Default::default(),
        links,
        local_alarms: Vec::new(),
    }
}
