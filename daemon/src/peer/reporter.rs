//! Pushes this node's report to every peer several times a second, and at
//! once when a verdict changed. One task per peer, each sending only the
//! newest report: a slow or dead peer never queues reports, never delays the
//! others, and never blocks the aggregator.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd_proto::convert::reject_reason_from_wire;
use meshd_proto::domain::{NodeId, NodeIdentity, PeerReport};
use meshd_proto::wire;
use meshd_proto::wire::peer_client::PeerClient;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

use crate::aggregator::{Outgoing, ReportBody};
use crate::config::PeerConfig;
use crate::metrics::Metrics;

/// Connecting to and answering one report may take this long; longer and
/// the report is stale anyway.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct Reporter {
    identity: NodeIdentity,
    interval: Duration,
    outgoing: Outgoing,
    peers: Vec<(NodeId, watch::Sender<Option<Arc<PeerReport>>>)>,
    sequence: u64,
}

/// Whether the last send to a peer worked, so only changes are logged.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Delivery {
    Unknown,
    Accepted,
    Rejected(String),
    Failed(String),
}

impl Reporter {
    /// Starts one sender task per peer; `run` then feeds them.
    pub fn start(
        identity: NodeIdentity,
        peers: &[PeerConfig],
        interval: Duration,
        outgoing: Outgoing,
        metrics: Arc<Metrics>,
        shutdown: &CancellationToken,
    ) -> Self {
        let peers = peers
            .iter()
            .map(|peer| {
                let (tx, rx) = watch::channel(None);
                tokio::spawn(send_to_peer(
                    peer.id.clone(),
                    peer.address.clone(),
                    rx,
                    metrics.clone(),
                    shutdown.clone(),
                ));
                (peer.id.clone(), tx)
            })
            .collect();
        Self {
            identity,
            interval,
            outgoing,
            peers,
            sequence: 0,
        }
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        if self.peers.is_empty() {
            return;
        }
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
                () = self.outgoing.urgent.notified() => tick.reset(),
            }
            let body = self.outgoing.body.borrow().clone();
            let report = Arc::new(self.next_report(&body, SystemTime::now()));
            for (_, peer) in &self.peers {
                peer.send_replace(Some(report.clone()));
            }
        }
    }

    fn next_report(&mut self, body: &ReportBody, now: SystemTime) -> PeerReport {
        self.sequence += 1;
        PeerReport {
            sender: self.identity.clone(),
            sequence: self.sequence,
            sent_at: now,
            links: body.links.clone(),
            alarms: body.alarms.clone(),
            hears: body.hears.clone(),
            load: body.load,
        }
    }
}

async fn send_to_peer(
    peer: NodeId,
    address: String,
    mut reports: watch::Receiver<Option<Arc<PeerReport>>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let client = match Endpoint::from_shared(format!("http://{address}")) {
        Ok(endpoint) => PeerClient::new(
            endpoint
                .connect_timeout(SEND_TIMEOUT)
                .timeout(SEND_TIMEOUT)
                .connect_lazy(),
        ),
        Err(err) => {
            tracing::error!(%peer, %address, "cannot use the peer address: {err}");
            return;
        }
    };
    let mut delivery = Delivery::Unknown;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = reports.changed() => if changed.is_err() { return },
        }
        let Some(report) = reports.borrow_and_update().clone() else {
            continue;
        };
        let outcome = tokio::select! {
            () = shutdown.cancelled() => return,
            outcome = deliver(client.clone(), &report) => outcome,
        };
        metrics.count_report_sent(&peer, outcome_label(&outcome));
        // Log changes of kind only: transport errors vary in wording from
        // one attempt to the next while a peer stays unreachable.
        if std::mem::discriminant(&outcome) != std::mem::discriminant(&delivery) {
            match &outcome {
                Delivery::Accepted => tracing::info!(%peer, %address, "reports reach the peer"),
                Delivery::Rejected(why) => {
                    tracing::warn!(%peer, %address, "the peer refuses our reports: {why}");
                }
                Delivery::Failed(why) => {
                    tracing::warn!(%peer, %address, "cannot deliver reports: {why}");
                }
                Delivery::Unknown => {}
            }
            delivery = outcome;
        }
    }
}

async fn deliver(mut client: PeerClient<Channel>, report: &PeerReport) -> Delivery {
    let request = wire::PeerReport::from(report.clone());
    match client.report(request).await {
        Ok(ack) => {
            let ack = ack.into_inner();
            if ack.accepted {
                Delivery::Accepted
            } else {
                let reason = reject_reason_from_wire(ack.reject_reason)
                    .map_or_else(|e| e.to_string(), |r| r.to_string());
                Delivery::Rejected(format!("{reason}: {}", ack.detail))
            }
        }
        Err(status) => Delivery::Failed(status.message().to_owned()),
    }
}

fn outcome_label(delivery: &Delivery) -> &'static str {
    match delivery {
        Delivery::Accepted => "accepted",
        Delivery::Rejected(_) => "rejected",
        Delivery::Failed(_) | Delivery::Unknown => "failed",
    }
}
