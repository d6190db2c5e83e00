//! Pushes this node's report to every peer several times a second, and at
//! once when a verdict changed. One task per peer, each sending only the
//! newest report: a slow or dead peer never queues reports, never delays the
//! others, and never blocks the aggregator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd_proto::convert::reject_reason_from_wire;
use meshd_proto::domain::{NodeId, NodeIdentity, PeerReport};
use meshd_proto::facts::NodeFacts;
use meshd_proto::wire;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::client::Grpc;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::codegen::Bytes;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};
use tonic_prost::ProstDecoder;
use tonic_prost::prost::Message;
use tonic_prost::prost::bytes::BufMut;

use crate::aggregator::{Outgoing, ReportBody};
use crate::config::Config;
use crate::metrics::{Metrics, ReportOutcome};

/// Connecting to and answering one report may take this long; longer and
/// the report is stale anyway.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Facts (a few kilobytes) ride along when they change and this often
/// besides, so a restarted peer has them again within seconds without every
/// report carrying them.
const FACTS_RESEND: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Reporter {
    identity: NodeIdentity,
    interval: Duration,
    outgoing: Outgoing,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    /// One sender task per peer, keyed by id and address: a peer whose
    /// address did not change keeps its connection across reloads.
    peers: BTreeMap<(NodeId, String), PeerSender>,
    sequence: u64,
    facts: FactsSchedule,
}

/// When the next report carries this node's facts.
#[derive(Debug, Default)]
struct FactsSchedule {
    last: Option<(Arc<NodeFacts>, SystemTime)>,
}

impl FactsSchedule {
    /// The facts to put in a report sent at `now`: new facts at once, the
    /// same ones again after [`FACTS_RESEND`].
    fn take(&mut self, current: Option<&Arc<NodeFacts>>, now: SystemTime) -> Option<NodeFacts> {
        let current = current?;
        let due = match &self.last {
            None => true,
            Some((sent, at)) => {
                !Arc::ptr_eq(sent, current)
                    || now.duration_since(*at).unwrap_or(Duration::ZERO) >= FACTS_RESEND
            }
        };
        due.then(|| {
            self.last = Some((current.clone(), now));
            (**current).clone()
        })
    }
}

/// `meshd.v1.Peer/Report`, as the generated client calls it.
const REPORT_PATH: &str = "/meshd.v1.Peer/Report";

#[derive(Debug)]
struct PeerSender {
    /// The newest report, encoded once for all peers.
    reports: watch::Sender<Option<Bytes>>,
    stop: CancellationToken,
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
        config: &Config,
        outgoing: Outgoing,
        metrics: Arc<Metrics>,
        shutdown: &CancellationToken,
    ) -> Self {
        let mut reporter = Self {
            identity,
            interval: config.report.interval,
            outgoing,
            metrics,
            shutdown: shutdown.clone(),
            peers: BTreeMap::new(),
            sequence: 0,
            facts: FactsSchedule::default(),
        };
        reporter.apply(config);
        reporter
    }

    /// Follows the config's peers: stops senders of peers that left or
    /// moved, starts senders for new ones.
    fn apply(&mut self, config: &Config) {
        self.interval = config.report.interval;
        let wanted: BTreeSet<(NodeId, String)> = config
            .peers
            .iter()
            .map(|p| (p.id.clone(), p.address.clone()))
            .collect();
        self.peers.retain(|key, sender| {
            let keep = wanted.contains(key);
            if !keep {
                sender.stop.cancel();
            }
            keep
        });
        for (id, address) in wanted {
            if self.peers.contains_key(&(id.clone(), address.clone())) {
                continue;
            }
            let (reports, rx) = watch::channel(None);
            let stop = self.shutdown.child_token();
            tokio::spawn(send_to_peer(
                id.clone(),
                address.clone(),
                rx,
                self.metrics.clone(),
                stop.clone(),
            ));
            self.peers
                .insert((id, address), PeerSender { reports, stop });
        }
    }

    /// Reports on the cadence (and at once when urgent) until `shutdown`,
    /// following every config published on `configs`.
    pub async fn run(
        mut self,
        mut configs: watch::Receiver<Arc<Config>>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
                () = self.outgoing.urgent.notified() => tick.reset(),
                changed = configs.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let config = configs.borrow_and_update().clone();
                    self.apply(&config);
                    tick = tokio::time::interval(self.interval);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    continue;
                }
            }
            if self.peers.is_empty() {
                continue;
            }
            let body = self.outgoing.body.borrow().clone();
            let report = self.next_report(&body, SystemTime::now());
            // Encoded once: every peer gets the same bytes.
            let encoded = Bytes::from(wire::PeerReport::from(report).encode_to_vec());
            for peer in self.peers.values() {
                peer.reports.send_replace(Some(encoded.clone()));
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
            facts: self.facts.take(body.facts.as_ref(), now),
        }
    }
}

async fn send_to_peer(
    peer: NodeId,
    address: String,
    mut reports: watch::Receiver<Option<Bytes>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let client = match Endpoint::from_shared(format!("http://{address}")) {
        Ok(endpoint) => Grpc::new(
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
            outcome = deliver(client.clone(), report) => outcome,
        };
        metrics
            .delivery
            .count_report_sent(&peer, report_outcome(&outcome));
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

async fn deliver(mut client: Grpc<Channel>, report: Bytes) -> Delivery {
    if let Err(err) = client.ready().await {
        return Delivery::Failed(format!("service was not ready: {err}"));
    }
    let path = PathAndQuery::from_static(REPORT_PATH);
    match client
        .unary(Request::new(report), path, EncodedReportCodec)
        .await
    {
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

/// Sends a `PeerReport` already encoded (see [`Reporter::run`]) and decodes
/// the `ReportAck` as the generated client would.
#[derive(Debug, Clone, Copy, Default)]
struct EncodedReportCodec;

#[derive(Debug, Clone, Copy, Default)]
struct EncodedReportEncoder;

impl Encoder for EncodedReportEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Codec for EncodedReportCodec {
    type Encode = Bytes;
    type Decode = wire::ReportAck;
    type Encoder = EncodedReportEncoder;
    type Decoder = ProstDecoder<wire::ReportAck>;

    fn encoder(&mut self) -> Self::Encoder {
        EncodedReportEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

fn report_outcome(delivery: &Delivery) -> ReportOutcome {
    match delivery {
        Delivery::Accepted => ReportOutcome::Accepted,
        Delivery::Rejected(_) => ReportOutcome::Rejected,
        Delivery::Failed(_) | Delivery::Unknown => ReportOutcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn facts_go_out_when_new_and_again_every_few_seconds() {
        let mut schedule = FactsSchedule::default();
        assert_eq!(schedule.take(None, at(0)), None, "nothing read yet");
        let first = Arc::new(NodeFacts {
            os_version: "26.2".into(),
            ..NodeFacts::default()
        });
        assert!(schedule.take(Some(&first), at(0)).is_some());
        assert!(schedule.take(Some(&first), at(200)).is_none());
        assert!(schedule.take(Some(&first), at(4_900)).is_none());
        assert!(schedule.take(Some(&first), at(5_000)).is_some(), "resent");
        let second = Arc::new(NodeFacts {
            os_version: "26.3".into(),
            ..NodeFacts::default()
        });
        assert_eq!(
            schedule
                .take(Some(&second), at(5_100))
                .map(|f| f.os_version),
            Some("26.3".to_owned()),
            "a new read goes out at once"
        );
    }
}
