//! This node's report streams: one long-lived `meshd.v1.Peer/Stream` to
//! every peer on every path it has to it (the management network, each
//! cable between them). Each stream opens with this node's identity and
//! everything sent so far, then carries every update in order, encoded once
//! by the aggregator for all streams. A stream that breaks is opened again
//! with backoff; one that falls behind starts over with everything. On a
//! mesh with TLS a stream is opened again after `tls.max_connection_age`,
//! so each connection's certificates are checked again (expiry,
//! revocation, a rotated certificate) without a restart.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{NodeId, NodeIdentity, PeerMessage, PeerReply, Protocols, StreamOpen};
use meshd_model::linkstats::RTT_BOUNDS;
use meshd_proto::wire;
use prost::Message;
use prost::bytes::{BufMut, Bytes};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::client::Grpc;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Status, Streaming};
use tonic_prost::ProstDecoder;

use super::tls::MeshTls;
use crate::metrics::{Metrics, ReportOutcome};
use crate::state::{Encoded, Outgoing, ReplyIn};

/// `meshd.v1.Peer/Stream`, as the generated client calls it.
const STREAM_PATH: &str = "/meshd.v1.Peer/Stream";

/// Connecting (TCP, TLS, HTTP/2) may take this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Backoff between attempts doubles from the first to the last. The last
/// stays well below `report.stale_after` (3 s by default): a peer that
/// restarts hears this node only through these streams, and must hear it
/// again before its missing quorum settles into an alarm.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Messages waiting to be written on one stream; a slower stream starts
/// over with everything rather than queue more.
const STREAM_QUEUE: usize = 16;
/// HTTP/2 pings keep a quiet connection known alive (or known dead).
const KEEPALIVE: Duration = Duration::from_secs(10);

/// Which way a stream goes to its peer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    pub peer: NodeId,
    /// "management", or the cable's this-end address.
    pub path: String,
    /// Where the peer listens on that path: `host:port`.
    pub address: String,
}

/// The streams of this node, following the config.
#[derive(Debug)]
pub struct Streams {
    outgoing: Outgoing,
    tls: Option<MeshTls>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    running: BTreeMap<Route, CancellationToken>,
}

impl Streams {
    pub fn new(
        outgoing: Outgoing,
        tls: Option<MeshTls>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            outgoing,
            tls,
            metrics,
            shutdown,
            running: BTreeMap::new(),
        }
    }

    /// Runs a stream on each of `routes`: routes that did not change keep
    /// their stream, removed ones stop, new ones start.
    pub fn follow(&mut self, routes: Vec<Route>) {
        self.running.retain(|route, stop| {
            let keep = routes.contains(route);
            if !keep {
                stop.cancel();
            }
            keep
        });
        for route in routes {
            if self.running.contains_key(&route) {
                continue;
            }
            let stop = self.shutdown.child_token();
            tokio::spawn(run(
                route.clone(),
                self.outgoing.clone(),
                self.tls.clone(),
                self.metrics.clone(),
                stop.clone(),
            ));
            self.running.insert(route, stop);
        }
    }
}

/// Why a stream ended.
#[derive(Debug)]
enum Ended {
    Shutdown,
    /// A new incarnation: open again at once.
    Reincarnated,
    /// The connection reached `tls.max_connection_age`: open again at once,
    /// with a new handshake.
    Aged,
    Failed(String),
}

async fn run(
    route: Route,
    outgoing: Outgoing,
    tls: Option<MeshTls>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut backoff = FIRST_BACKOFF;
    let mut last_error = String::new();
    loop {
        let started = Instant::now();
        let ended = tokio::select! {
            () = stop.cancelled() => return,
            ended = stream_once(&route, &outgoing, tls.as_ref(), &metrics, &stop) => ended,
        };
        match ended {
            Ended::Shutdown => return,
            Ended::Reincarnated | Ended::Aged => continue,
            Ended::Failed(error) => {
                metrics
                    .delivery
                    .count_report_sent(&route.peer, ReportOutcome::Failed);
                if error != last_error {
                    tracing::info!(peer = %route.peer, path = %route.path, address = %route.address, "report stream down, reconnecting: {error}");
                    last_error = error;
                }
            }
        }
        // A stream that lived a while starts the backoff over.
        if started.elapsed() > MAX_BACKOFF {
            backoff = FIRST_BACKOFF;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn resolve(address: &str) -> Result<SocketAddr, String> {
    let mut found = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host(address))
        .await
        .map_err(|_| format!("resolving {address} timed out"))?
        .map_err(|e| format!("cannot resolve {address}: {e}"))?;
    found
        .next()
        .ok_or_else(|| format!("{address} resolves to nothing"))
}

/// A connection to `route`'s peer: mutual TLS checking that the server is
/// that peer, or plain on an insecure mesh. Public for tools that speak to
/// a peer as a node would (the red-team tests).
pub async fn channel(route: &Route, tls: Option<&MeshTls>) -> Result<Channel, String> {
    let addr = resolve(&route.address).await?;
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    let connect = async {
        match tls {
            None => endpoint.connect().await.map_err(|e| with_causes(&e)),
            Some(tls) => {
                let tls = tls.clone();
                let peer = route.peer.clone();
                endpoint
                    .connect_with_connector(tower_service(move |_: Uri| {
                        let (tls, peer) = (tls.clone(), peer.clone());
                        async move {
                            tls.connect(&peer, addr)
                                .await
                                .map(hyper_util::rt::TokioIo::new)
                        }
                    }))
                    .await
                    .map_err(|e| with_causes(&e))
            }
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| format!("connecting to {addr} timed out"))?
}

/// An error with what caused it: tonic's own says only "transport error",
/// the reason (a certificate refused, a connection refused) is its source.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        let more = error.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = error.source();
    }
    text
}

/// A connector from a closure.
fn tower_service<F, Fut, T>(f: F) -> TowerFn<F>
where
    F: FnMut(Uri) -> Fut,
    Fut: Future<Output = std::io::Result<T>>,
{
    TowerFn(f)
}

#[derive(Clone)]
struct TowerFn<F>(F);

impl<F, Fut, T> tower_service::Service<Uri> for TowerFn<F>
where
    F: FnMut(Uri) -> Fut,
    Fut: Future<Output = std::io::Result<T>>,
{
    type Response = T;
    type Error = std::io::Error;
    type Future = Fut;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Fut {
        (self.0)(uri)
    }
}

/// A gRPC status's message with its causes (a refused certificate hides
/// behind "transport error").
fn status_text(status: &Status) -> String {
    let mut text = status.message().to_owned();
    if let Some(source) = std::error::Error::source(status) {
        let causes = with_causes(source);
        if !text.contains(&causes) {
            text = format!("{text}: {causes}");
        }
    }
    text
}

fn open_message(identity: &NodeIdentity, instance: u64) -> Bytes {
    wire::PeerMessage::from(PeerMessage::Open(StreamOpen {
        sender: identity.clone(),
        instance,
        rtt_bounds: RTT_BOUNDS.to_vec(),
        protocols: Protocols::THIS_RELEASE,
    }))
    .encode_to_vec()
    .into()
}

/// One stream's life: connect, open, send everything, then every update,
/// until it breaks, this node takes a new incarnation, or `stop`.
async fn stream_once(
    route: &Route,
    outgoing: &Outgoing,
    tls: Option<&MeshTls>,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> Ended {
    let mut identity_rx = outgoing.identity.clone();
    let identity = identity_rx.borrow_and_update().clone();
    let mut full_rx = outgoing.full.clone();
    // Subscribed before the full state is read, so no update falls between.
    let updates = outgoing.updates.subscribe();
    let Some(full) = full_rx.borrow_and_update().clone() else {
        // Nothing to say before the first update: wait for it.
        return tokio::select! {
            () = stop.cancelled() => Ended::Shutdown,
            _ = full_rx.changed() => Ended::Failed("waiting for the first update".to_owned()),
        };
    };
    let (tx, replies) = match open_stream(route, tls, &identity, &full).await {
        Ok(opened) => opened,
        Err(error) => return Ended::Failed(error),
    };
    if let Some(tls) = tls {
        tls.certificates().accepted(&route.peer);
    }
    metrics
        .delivery
        .count_report_sent(&route.peer, ReportOutcome::Accepted);
    tracing::debug!(peer = %route.peer, path = %route.path, "report stream open");
    let live = Live {
        route,
        outgoing,
        metrics,
        tx,
        sent: full.sequence,
        full: full_rx,
    };
    let renew = tls.map(MeshTls::max_connection_age);
    live.carry(identity_rx, updates, replies, renew, stop).await
}

/// Connects to `route`'s peer and opens the stream with this node's
/// identity and everything sent so far: the queue the stream sends from,
/// and the peer's replies.
async fn open_stream(
    route: &Route,
    tls: Option<&MeshTls>,
    identity: &NodeIdentity,
    full: &Encoded,
) -> Result<(mpsc::Sender<Bytes>, Streaming<wire::PeerReply>), String> {
    let channel = channel(route, tls).await?;
    let (tx, rx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
    let instance = super::instance();
    // The queue is empty: these two cannot fail.
    let _ = tx.try_send(open_message(identity, instance));
    let _ = tx.try_send(full.bytes.clone());
    let mut grpc = Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|error| format!("not ready: {}", with_causes(&error)))?;
    let replies = grpc
        .streaming(
            Request::new(ReceiverStream::new(rx)),
            PathAndQuery::from_static(STREAM_PATH),
            EncodedCodec,
        )
        .await
        .map_err(|status| status_text(&status))?;
    Ok((tx, replies.into_inner()))
}

/// A stream once open: what it has queued, and where its replies go.
struct Live<'a> {
    route: &'a Route,
    outgoing: &'a Outgoing,
    metrics: &'a Metrics,
    tx: mpsc::Sender<Bytes>,
    /// The sequence of the last update queued.
    sent: u64,
    full: watch::Receiver<Option<Arc<Encoded>>>,
}

impl Live<'_> {
    /// Sends every update and takes every reply until the stream ends, or
    /// `renew_after` (on a mesh with TLS) has passed.
    async fn carry(
        mut self,
        mut identity_rx: watch::Receiver<NodeIdentity>,
        mut updates: broadcast::Receiver<Arc<Encoded>>,
        mut replies: Streaming<wire::PeerReply>,
        renew_after: Option<Duration>,
        stop: &CancellationToken,
    ) -> Ended {
        let renew = async {
            match renew_after {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(renew);
        loop {
            let went_on = tokio::select! {
                () = stop.cancelled() => return Ended::Shutdown,
                () = &mut renew => return Ended::Aged,
                changed = identity_rx.changed() => {
                    return if changed.is_err() { Ended::Shutdown } else { Ended::Reincarnated };
                }
                update = updates.recv() => self.forward(update),
                reply = replies.message() => self.take_reply(reply).await,
            };
            if let Err(ended) = went_on {
                return ended;
            }
        }
    }

    /// Queues an update not sent yet; a stream that fell behind the
    /// updates sends everything instead.
    fn forward(&mut self, update: Result<Arc<Encoded>, RecvError>) -> Result<(), Ended> {
        let next = match update {
            Ok(update) if update.sequence <= self.sent => return Ok(()),
            Ok(update) => update,
            Err(RecvError::Lagged(_)) => match self.full.borrow_and_update().clone() {
                Some(full) => full,
                None => return Ok(()),
            },
            Err(RecvError::Closed) => return Err(Ended::Shutdown),
        };
        self.send(&next)
    }

    /// Counts a refusal, sends everything again when the peer asks, and
    /// hands the reply to the aggregator. A refusal ends the stream.
    async fn take_reply(
        &mut self,
        reply: Result<Option<wire::PeerReply>, Status>,
    ) -> Result<(), Ended> {
        let reply = match reply {
            Ok(Some(reply)) => reply,
            Ok(None) => return Err(Ended::Failed("the peer closed the stream".to_owned())),
            Err(status) => return Err(Ended::Failed(status_text(&status))),
        };
        let arrived = SystemTime::now();
        let reply = PeerReply::try_from(reply)
            .map_err(|error| Ended::Failed(format!("a malformed reply: {error}")))?;
        if reply.refusal.is_some() {
            self.metrics
                .delivery
                .count_report_sent(&self.route.peer, ReportOutcome::Rejected);
        }
        if reply.resync {
            self.resend_everything()?;
        }
        let refused = reply.refusal.clone();
        let _ = self
            .outgoing
            .replies
            .send(ReplyIn {
                peer: self.route.peer.clone(),
                reply,
                arrived,
                at: Instant::now(),
            })
            .await;
        match refused {
            Some(refusal) => Err(Ended::Failed(format!(
                "refused: {}: {}",
                refusal.reason, refusal.detail
            ))),
            None => Ok(()),
        }
    }

    fn resend_everything(&mut self) -> Result<(), Ended> {
        let full = self.full.borrow().clone();
        match full {
            Some(full) => {
                self.sent = 0;
                self.send(&full)
            }
            None => Ok(()),
        }
    }

    fn send(&mut self, update: &Arc<Encoded>) -> Result<(), Ended> {
        match self.tx.try_send(update.bytes.clone()) {
            Ok(()) => {
                self.sent = update.sequence;
                Ok(())
            }
            Err(_) => Err(Ended::Failed(
                "the stream stopped taking updates".to_owned(),
            )),
        }
    }
}

/// Sends messages already encoded (by the aggregator, once for every
/// stream) and decodes replies as the generated client would.
#[derive(Debug, Clone, Copy, Default)]
struct EncodedCodec;

#[derive(Debug, Clone, Copy, Default)]
struct EncodedEncoder;

impl Encoder for EncodedEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Codec for EncodedCodec {
    type Encode = Bytes;
    type Decode = wire::PeerReply;
    type Encoder = EncodedEncoder;
    type Decoder = ProstDecoder<wire::PeerReply>;

    fn encoder(&mut self) -> Self::Encoder {
        EncodedEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}
