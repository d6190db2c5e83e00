//! `meshd.v1.Peer/Stream`: a peer's report stream on one path. The handler
//! checks who is on the other end (the stream's certificate), decodes each
//! message, applies it to the peer book under a short lock and answers only
//! when it has something to say; the aggregator is pinged when the book
//! changed in a way the engine judges. A flood of messages can never stall
//! the verdicts: each stream is bounded in message size and rate.

use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{
    NodeId, NodeIdentity, PeerReply, Refusal, RejectReason, ReportUpdate, StreamOpen,
};
use meshd_model::peers::{Answer, Path, StreamId};
use meshd_proto::convert::update_from_wire;
use meshd_proto::wire;
use meshd_proto::wire::peer_server::Peer;
use tokio::sync::{Notify, mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use crate::state::SharedBook;
use crate::transport::tls::PeerInfo;

/// The largest message a peer may send: a full report of 8 nodes with
/// facts is a few tens of kilobytes.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// Updates one stream may send a second, sustained; a peer sends about one
/// a second and a burst when verdicts change.
const UPDATES_PER_SECOND: u32 = 50;

/// A stream that sends nothing for this long (no heartbeat) is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Replies waiting to be written; a peer that does not read them loses
/// its stream.
const REPLY_QUEUE: usize = 8;

#[derive(Debug, Clone)]
pub struct PeerService {
    identity: watch::Receiver<NodeIdentity>,
    book: SharedBook,
    changed: Arc<Notify>,
    path: Path,
    /// Whether the mesh runs without TLS (then a stream's claimed id is
    /// taken at its word).
    insecure: bool,
    /// Ends every open stream: the servers' graceful shutdown waits for
    /// them, and a peer's stream never ends by itself.
    shutdown: CancellationToken,
}

impl PeerService {
    pub fn new(
        identity: watch::Receiver<NodeIdentity>,
        book: SharedBook,
        changed: Arc<Notify>,
        path: Path,
        insecure: bool,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            identity,
            book,
            changed,
            path,
            insecure,
            shutdown,
        }
    }

    /// The same service for streams that arrive on `path`.
    pub fn on(&self, path: Path) -> Self {
        Self {
            path,
            ..self.clone()
        }
    }

    fn reply(&self, sequence: u64, answer: Answer) -> wire::PeerReply {
        PeerReply {
            receiver: self.identity.borrow().clone(),
            sequence,
            refusal: answer.refusal,
            clock: answer.clock,
            resync: answer.resync,
        }
        .into()
    }

    /// Counts a malformed message and tells the peer why it is refused.
    async fn refuse_malformed(
        &self,
        replies: &mpsc::Sender<Result<wire::PeerReply, Status>>,
        detail: String,
    ) {
        self.book().count_malformed();
        let _ = replies
            .send(Ok(self.refused(RejectReason::Malformed, detail)))
            .await;
    }

    /// Counts a message over a limit (size, rate) and tells the peer which.
    async fn refuse_over_limit(
        &self,
        replies: &mpsc::Sender<Result<wire::PeerReply, Status>>,
        detail: String,
    ) {
        self.book().count_refused(RejectReason::OverLimit);
        let _ = replies
            .send(Ok(self.refused(RejectReason::OverLimit, detail)))
            .await;
    }

    fn refused(&self, reason: RejectReason, detail: String) -> wire::PeerReply {
        self.reply(
            0,
            Answer {
                refusal: Some(Refusal {
                    reason,
                    detail,
                    known_incarnation: None,
                }),
                clock: None,
                resync: false,
                dropped: Vec::new(),
            },
        )
    }

    /// Runs one stream until the peer ends it, breaks a rule, or goes idle.
    async fn serve(
        self,
        info: Option<PeerInfo>,
        mut inbound: Streaming<wire::PeerMessage>,
        replies: mpsc::Sender<Result<wire::PeerReply, Status>>,
    ) {
        let remote = info
            .as_ref()
            .and_then(|i| i.remote)
            .map_or_else(|| "unknown".to_owned(), |r| r.to_string());
        let authenticated = info.and_then(|i| i.node);
        if authenticated.is_none() && !self.insecure {
            let _ = replies
                .send(Ok(self.refused(
                    RejectReason::NotAuthenticated,
                    "no client certificate".to_owned(),
                )))
                .await;
            return;
        }
        let Some(open) = self.receive_open(&mut inbound, &replies).await else {
            return;
        };
        let Some(id) = self
            .admit(authenticated.as_ref(), &open, remote, &replies)
            .await
        else {
            return;
        };
        self.receive_updates(id, &open.rtt_bounds, &mut inbound, &replies)
            .await;
        self.close(id);
    }

    /// Waits for the peer's next message, at most [`IDLE_TIMEOUT`].
    async fn receive(&self, inbound: &mut Streaming<wire::PeerMessage>) -> Received {
        let next = tokio::select! {
            () = self.shutdown.cancelled() => return Received::Shutdown,
            next = tokio::time::timeout(IDLE_TIMEOUT, inbound.message()) => next,
        };
        match next {
            Ok(Ok(Some(message))) => Received::Message(message),
            Ok(Err(status)) if too_large(&status) => {
                Received::TooLarge(status.message().to_owned())
            }
            Ok(Ok(None) | Err(_)) | Err(_) => Received::Ended,
        }
    }

    /// The stream's first message, which must open it; `None` when the
    /// peer was refused or the node shuts down.
    async fn receive_open(
        &self,
        inbound: &mut Streaming<wire::PeerMessage>,
        replies: &mpsc::Sender<Result<wire::PeerReply, Status>>,
    ) -> Option<StreamOpen> {
        let open = match self.receive(inbound).await {
            Received::Message(wire::PeerMessage {
                body: Some(wire::peer_message::Body::Open(open)),
            }) => StreamOpen::try_from(open),
            Received::Shutdown => return None,
            Received::TooLarge(detail) => {
                self.refuse_over_limit(replies, detail).await;
                return None;
            }
            Received::Message(_) | Received::Ended => {
                self.refuse_malformed(replies, "a stream must open with StreamOpen".to_owned())
                    .await;
                return None;
            }
        };
        match open {
            Ok(open) => Some(open),
            Err(error) => {
                self.refuse_malformed(replies, error.to_string()).await;
                None
            }
        }
    }

    /// Opens the stream in the peer book, or tells the peer why not.
    async fn admit(
        &self,
        authenticated: Option<&NodeId>,
        open: &StreamOpen,
        remote: String,
        replies: &mpsc::Sender<Result<wire::PeerReply, Status>>,
    ) -> Option<StreamId> {
        let opened = self.book().open(
            authenticated,
            open,
            self.path.clone(),
            remote.clone(),
            Instant::now(),
            SystemTime::now(),
        );
        match opened {
            Ok(id) => {
                self.changed.notify_one();
                Some(id)
            }
            Err(refusal) => {
                tracing::debug!(%remote, sender = %open.sender.id, reason = %refusal.reason, "peer stream refused: {}", refusal.detail);
                let reply = self.reply(
                    0,
                    Answer {
                        refusal: Some(refusal),
                        clock: None,
                        resync: false,
                        dropped: Vec::new(),
                    },
                );
                let _ = replies.send(Ok(reply)).await;
                None
            }
        }
    }

    /// Applies the peer's updates in turn until the stream ends.
    async fn receive_updates(
        &self,
        id: StreamId,
        bounds: &[Duration],
        inbound: &mut Streaming<wire::PeerMessage>,
        replies: &mpsc::Sender<Result<wire::PeerReply, Status>>,
    ) {
        let mut budget = RateBudget::new(UPDATES_PER_SECOND);
        while let Some((update, now)) = self
            .next_update(&mut budget, bounds, inbound, replies)
            .await
        {
            if !self.apply(id, update, now, replies) {
                break;
            }
        }
    }

    /// The next update and when it came, within the rate budget; `None`
    /// when the stream ends (a peer that broke a rule is told which).
    async fn next_update(
        &self,
        budget: &mut RateBudget,
        bounds: &[Duration],
        inbound: &mut Streaming<wire::PeerMessage>,
        replies: &mpsc::Sender<Result<wire::PeerReply, Status>>,
    ) -> Option<(ReportUpdate, Instant)> {
        let message = match self.receive(inbound).await {
            Received::Message(message) => message,
            Received::TooLarge(detail) => {
                self.refuse_over_limit(replies, detail).await;
                return None;
            }
            Received::Ended | Received::Shutdown => return None,
        };
        let now = Instant::now();
        if !budget.take(now) {
            self.refuse_over_limit(
                replies,
                format!("more than {UPDATES_PER_SECOND} updates a second"),
            )
            .await;
            return None;
        }
        let update = match message.body {
            Some(wire::peer_message::Body::Update(update)) => update_from_wire(update, bounds),
            _ => {
                self.book().count_malformed();
                return None;
            }
        };
        match update {
            Ok(update) => Some((update, now)),
            Err(error) => {
                self.refuse_malformed(replies, error.to_string()).await;
                None
            }
        }
    }

    /// Applies one update to the book and answers when there is something
    /// to say. False when the stream ends: the update was refused, or the
    /// peer does not read its replies.
    fn apply(
        &self,
        id: StreamId,
        update: ReportUpdate,
        now: Instant,
        replies: &mpsc::Sender<Result<wire::PeerReply, Status>>,
    ) -> bool {
        let sequence = update.sequence;
        let (answer, generation) = {
            let mut book = self.book();
            let before = book.generation();
            let answer = book.update(id, update, now, SystemTime::now());
            (answer, book.generation() != before)
        };
        if generation {
            self.changed.notify_one();
        }
        for detail in &answer.dropped {
            tracing::warn!(sequence, "peer alarm dropped: {detail}");
        }
        let refused = answer.refusal.is_some();
        if refused || answer.clock.is_some() || answer.resync {
            let reply = self.reply(sequence, answer);
            if replies.try_send(Ok(reply)).is_err() {
                return false;
            }
        }
        !refused
    }

    fn close(&self, id: StreamId) {
        self.book().close(id, Instant::now());
        self.changed.notify_one();
    }

    fn book(&self) -> std::sync::MutexGuard<'_, meshd_model::peers::PeerBook> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether `status` is tonic's refusal of a message over
/// [`MAX_MESSAGE_BYTES`] (decided from its length prefix, before the body
/// is read): the peer is told `over_limit` with tonic's words, which name
/// the size and the cap.
fn too_large(status: &Status) -> bool {
    status.code() == tonic::Code::OutOfRange
}

/// What waiting for a peer's next message brought.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "each lives only until its message is taken out; boxing would allocate for every message"
)]
enum Received {
    Message(wire::PeerMessage),
    /// A message over [`MAX_MESSAGE_BYTES`], in tonic's words.
    TooLarge(String),
    /// The peer ended the stream, it broke, or it went idle.
    Ended,
    Shutdown,
}

/// A token bucket over one second, with time passed in.
#[derive(Debug)]
struct RateBudget {
    per_second: u32,
    window_start: Option<Instant>,
    used: u32,
}

impl RateBudget {
    fn new(per_second: u32) -> Self {
        Self {
            per_second,
            window_start: None,
            used: 0,
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        let fresh = self
            .window_start
            .is_none_or(|start| now.saturating_duration_since(start) >= Duration::from_secs(1));
        if fresh {
            self.window_start = Some(now);
            self.used = 0;
        }
        self.used += 1;
        self.used <= self.per_second
    }
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<wire::PeerReply, Status>> + Send>>;

#[tonic::async_trait]
impl Peer for PeerService {
    type StreamStream = ReplyStream;

    async fn stream(
        &self,
        request: Request<Streaming<wire::PeerMessage>>,
    ) -> Result<Response<ReplyStream>, Status> {
        let info = request
            .extensions()
            .get::<tonic::transport::server::TcpConnectInfo>()
            .map(|tcp| PeerInfo {
                remote: tcp.remote_addr(),
                node: None,
            })
            .or_else(|| request.extensions().get::<PeerInfo>().cloned());
        let (tx, rx) = mpsc::channel(REPLY_QUEUE);
        let inbound = request.into_inner();
        tokio::spawn(self.clone().serve(info, inbound, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_update_budget_allows_its_rate_per_second() {
        let t0 = Instant::now();
        let mut budget = RateBudget::new(3);
        assert!((0..3).all(|_| budget.take(t0)));
        assert!(!budget.take(t0 + Duration::from_millis(500)));
        assert!(budget.take(t0 + Duration::from_secs(1)));
    }
}
