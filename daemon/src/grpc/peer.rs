//! `meshd.v1.Peer/Stream`: a peer's report stream on one path. The handler
//! checks who is on the other end (the stream's certificate), decodes each
//! message, applies it to the peer book under a short lock and answers only
//! when it has something to say; the aggregator is pinged when the book
//! changed in a way the engine judges. A flood of messages can never stall
//! the verdicts: each stream is bounded in message size and rate.

use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{NodeIdentity, PeerReply, Refusal, RejectReason, StreamOpen};
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
        let first = tokio::select! {
            () = self.shutdown.cancelled() => return,
            first = tokio::time::timeout(IDLE_TIMEOUT, inbound.message()) => first,
        };
        let open = match first {
            Ok(Ok(Some(wire::PeerMessage {
                body: Some(wire::peer_message::Body::Open(open)),
            }))) => StreamOpen::try_from(open),
            Ok(Err(status)) if too_large(&status) => {
                self.refuse_over_limit(&replies, status.message().to_owned())
                    .await;
                return;
            }
            _ => {
                self.refuse_malformed(&replies, "a stream must open with StreamOpen".to_owned())
                    .await;
                return;
            }
        };
        let open = match open {
            Ok(open) => open,
            Err(error) => {
                self.refuse_malformed(&replies, error.to_string()).await;
                return;
            }
        };
        let opened = self.book().open(
            authenticated.as_ref(),
            &open,
            self.path.clone(),
            remote.clone(),
            Instant::now(),
            SystemTime::now(),
        );
        let id = match opened {
            Ok(id) => id,
            Err(refusal) => {
                tracing::debug!(%remote, sender = %open.sender.id, reason = %refusal.reason, "peer stream refused: {}", refusal.detail);
                let reply = self.reply(
                    0,
                    Answer {
                        refusal: Some(refusal),
                        clock: None,
                        resync: false,
                    },
                );
                let _ = replies.send(Ok(reply)).await;
                return;
            }
        };
        self.changed.notify_one();
        let bounds = open.rtt_bounds;
        let mut budget = RateBudget::new(UPDATES_PER_SECOND);
        loop {
            let next = tokio::select! {
                () = self.shutdown.cancelled() => break,
                next = tokio::time::timeout(IDLE_TIMEOUT, inbound.message()) => next,
            };
            let message = match next {
                Ok(Ok(Some(message))) => message,
                Ok(Err(status)) if too_large(&status) => {
                    self.refuse_over_limit(&replies, status.message().to_owned())
                        .await;
                    break;
                }
                Ok(Ok(None)) | Ok(Err(_)) | Err(_) => break,
            };
            let now = Instant::now();
            if !budget.take(now) {
                self.refuse_over_limit(
                    &replies,
                    format!("more than {UPDATES_PER_SECOND} updates a second"),
                )
                .await;
                break;
            }
            let update = match message.body {
                Some(wire::peer_message::Body::Update(update)) => update_from_wire(update, &bounds),
                _ => {
                    self.book().count_malformed();
                    break;
                }
            };
            let update = match update {
                Ok(update) => update,
                Err(error) => {
                    self.refuse_malformed(&replies, error.to_string()).await;
                    break;
                }
            };
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
            let refused = answer.refusal.is_some();
            if refused || answer.clock.is_some() || answer.resync {
                let reply = self.reply(sequence, answer);
                if replies.try_send(Ok(reply)).is_err() {
                    break;
                }
            }
            if refused {
                break;
            }
        }
        self.close(id);
    }

    fn close(&self, id: StreamId) {
        self.book().close(id);
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
