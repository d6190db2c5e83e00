//! Bounds on the ports meshd serves without TLS: the HTTP port (metrics,
//! health, the mesh page) and the local gRPC listener (meshctl). Each holds
//! at most its cap of connections, refuses one more at once (closing it,
//! so the client learns at once instead of waiting in the kernel's queue),
//! refuses while the process's file descriptors are within the reserve of
//! their limit, and closes connections that went quiet. Every limit is
//! here; the mesh and cable listeners (mutual TLS) have their own in
//! `transport::tls`.

pub mod descriptors;

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

pub use descriptors::{Descriptors, Room};

use crate::metrics::{Listener, Metrics, Refusal};

/// Connections the HTTP port holds at once: Prometheus, a few browsers
/// with the live page, health checks.
pub const HTTP_MAX_CONNECTIONS: usize = 256;

/// A request's headers must arrive within this from the connection's
/// start or the previous response; a keep-alive connection that sends
/// nothing for this long is closed too.
pub const HTTP_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// An HTTP connection on which no byte moved either way for this long is
/// closed (a client that stopped reading its response); the live page
/// gets a view every 2 s, so it never goes quiet this long.
pub const HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Connections the local gRPC listener holds at once: each meshctl call is
/// one, short-lived.
pub const LOCAL_GRPC_MAX_CONNECTIONS: usize = 512;

/// Descriptors the HTTP port leaves free beyond the watchers' reserve, so
/// that a flood of the HTTP port under a low limit still leaves meshctl
/// room to connect: the watchers give way to nothing, meshctl to the
/// watchers, HTTP to both.
pub const LOCAL_GRPC_DESCRIPTOR_SHARE: u64 = 64;

/// A local gRPC connection must send its first bytes within this (meshctl
/// speaks at once).
pub const LOCAL_GRPC_FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(1);

/// A local gRPC connection with no event stream open on which no byte
/// moved for this long is closed.
pub const LOCAL_GRPC_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// After this a local gRPC connection takes no new calls (HTTP/2 GOAWAY);
/// what is open on it may finish.
pub const LOCAL_GRPC_MAX_CONNECTION_AGE: Duration = Duration::from_secs(3600);

/// Event streams (WatchEvents) one local connection may hold: one client
/// cannot take every slot of [`crate::grpc::MAX_EVENT_STREAMS`] through a
/// single connection.
pub const EVENT_STREAMS_PER_CONNECTION: usize = 4;

/// After accepting failed (out of descriptors, a connection reset before
/// it was taken), accepting pauses this long rather than spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(200);

/// Refusals are logged at most this often per listener, with their count.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// How long a newcomer waits for the place of the silent connection closed
/// for it: that connection's task lets go of it at once.
const EVICTION_WAIT: Duration = Duration::from_millis(100);

/// One plain listener's admission: its cap and the descriptor reserve.
#[derive(Debug)]
pub struct Gate {
    listener: TcpListener,
    which: Listener,
    permits: Arc<Semaphore>,
    cap: usize,
    room: Room,
    metrics: Arc<Metrics>,
    /// Refusals since the last log line, and when that was.
    unlogged: u64,
    logged_at: Option<Instant>,
    /// Where silent connections give way ([`Gate::evicting_silent`]): the
    /// admitted connections still waiting for their first bytes, oldest
    /// first, each by its `pending` token.
    silent: Option<VecDeque<CancellationToken>>,
}

/// An admitted connection: it holds its place under the cap until dropped.
#[derive(Debug)]
pub struct Admitted {
    pub tcp: TcpStream,
    pub remote: SocketAddr,
    permit: OwnedSemaphorePermit,
    /// Cancelled once the connection no longer waits for its first bytes:
    /// it spoke, stayed silent too long, or was closed for a newcomer.
    pending: CancellationToken,
}

impl Gate {
    pub fn new(
        listener: TcpListener,
        which: Listener,
        cap: usize,
        descriptors: Descriptors,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            listener,
            which,
            permits: Arc::new(Semaphore::new(cap)),
            cap,
            room: Room::new(descriptors),
            metrics,
            unlogged: 0,
            logged_at: None,
            silent: None,
        }
    }

    /// For a listener whose clients speak at once (meshctl): at the cap,
    /// the connection admitted longest ago that has not spoken yet
    /// ([`Admitted::spoke_within`]) is closed to make room instead of the
    /// newcomer being refused, so that a flood of silent connections
    /// cannot keep a client that speaks out.
    pub fn evicting_silent(mut self) -> Self {
        self.silent = Some(VecDeque::new());
        self
    }

    /// A place freed by closing the oldest connection still silent; `None`
    /// where silent connections do not give way, or none is silent.
    async fn evict_silent(&mut self) -> Option<OwnedSemaphorePermit> {
        let silent = self.silent.as_mut()?;
        let oldest = loop {
            let front = silent.pop_front()?;
            if !front.is_cancelled() {
                break front;
            }
        };
        oldest.cancel();
        tokio::time::timeout(EVICTION_WAIT, self.permits.clone().acquire_owned())
            .await
            .ok()?
            .ok()
    }

    /// The next connection within the bounds; `None` once `shutdown`
    /// fires. Connections over the cap or into the reserve are closed as
    /// soon as they are accepted.
    pub async fn next(&mut self, shutdown: &CancellationToken) -> Option<Admitted> {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return None,
                accepted = self.listener.accept() => accepted,
            };
            let (tcp, remote) = match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::debug!(listener = self.which.as_str(), %error, "accept failed; pausing");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let permit = match self.permits.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => self.evict_silent().await,
            };
            let refusal = match permit {
                None => Refusal::Cap,
                Some(_) if !self.room.take_one() => Refusal::Descriptors,
                Some(permit) => {
                    let _ = tcp.set_nodelay(true);
                    let pending = CancellationToken::new();
                    if let Some(silent) = &mut self.silent {
                        // Those that spoke or gave up leave from the front.
                        while silent.front().is_some_and(CancellationToken::is_cancelled) {
                            silent.pop_front();
                        }
                        silent.push_back(pending.clone());
                    }
                    return Some(Admitted {
                        tcp,
                        remote,
                        permit,
                        pending,
                    });
                }
            };
            drop(tcp);
            self.refused(refusal, remote);
        }
    }

    fn refused(&mut self, refusal: Refusal, remote: SocketAddr) {
        self.metrics.listeners.refused(self.which, refusal);
        self.unlogged += 1;
        let now = Instant::now();
        if self
            .logged_at
            .is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_INTERVAL)
        {
            tracing::debug!(listener = self.which.as_str(), reason = refusal.as_str(), %remote, "connection refused");
            return;
        }
        tracing::warn!(
            listener = self.which.as_str(),
            reason = refusal.as_str(),
            %remote,
            refused = self.unlogged,
            cap = self.cap,
            descriptor_limit = self.room.descriptors().limit(),
            descriptor_reserve = self.room.descriptors().reserve(),
            "refusing connections (logged at most once a minute; meshd_connections_refused_total counts them all)"
        );
        self.unlogged = 0;
        self.logged_at = Some(now);
    }
}

impl Admitted {
    /// Whether the client sent its first bytes within `within` (looked at,
    /// not read); false when it did not, or when its place went to a
    /// newcomer meanwhile ([`Gate::evicting_silent`]).
    pub async fn spoke_within(&self, within: Duration) -> bool {
        let mut first = [0u8; 1];
        let spoke = tokio::select! {
            () = self.pending.cancelled() => false,
            peeked = tokio::time::timeout(within, self.tcp.peek(&mut first)) => {
                matches!(peeked, Ok(Ok(1..)))
            }
        };
        self.pending.cancel();
        spoke
    }

    /// The connection, closed once no byte moved either way for `idle`,
    /// unless `streams` has one open.
    pub fn quiet_after(self, idle: Duration, streams: Option<OpenStreams>) -> Quiet {
        Quiet {
            tcp: self.tcp,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
            streams,
            _permit: self.permit,
        }
    }
}

/// A connection that closes itself when it goes quiet: no byte read or
/// written within its deadline, and no long-lived stream open on it.
#[derive(Debug)]
pub struct Quiet {
    tcp: TcpStream,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    streams: Option<OpenStreams>,
    _permit: OwnedSemaphorePermit,
}

impl Quiet {
    fn moved(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// Whether the connection has gone quiet; registers for the next
    /// deadline otherwise.
    fn gone_quiet(&mut self, cx: &mut Context<'_>) -> bool {
        if self.deadline.as_mut().poll(cx).is_pending() {
            return false;
        }
        if self.streams.as_ref().is_some_and(|s| s.open() > 0) {
            self.moved();
            let _ = self.deadline.as_mut().poll(cx);
            return false;
        }
        true
    }
}

fn quiet_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "connection closed after going quiet",
    )
}

impl AsyncRead for Quiet {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Checked before reading: a client that trickles bytes without a
        // request (pings) still meets its deadline on a connection whose
        // server keeps no stream open.
        if this.gone_quiet(cx) {
            return Poll::Ready(Err(quiet_error()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.moved();
        }
        read
    }
}

impl AsyncWrite for Quiet {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.tcp).poll_write(cx, buf);
        match written {
            Poll::Ready(Ok(n)) if n > 0 => this.moved(),
            Poll::Pending if this.gone_quiet(cx) => return Poll::Ready(Err(quiet_error())),
            _ => {}
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// The long-lived streams open on one connection, so that it is not closed
/// as quiet and one connection cannot hold more than its share.
#[derive(Debug, Clone, Default)]
pub struct OpenStreams(Arc<AtomicUsize>);

/// One open stream's place; given back when dropped.
#[derive(Debug)]
pub struct StreamPlace(Arc<AtomicUsize>);

impl OpenStreams {
    pub fn open(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// A place for one more stream, unless `cap` are open.
    pub fn try_open(&self, cap: usize) -> Option<StreamPlace> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < cap).then_some(open + 1)
            })
            .ok()
            .map(|_| StreamPlace(self.0.clone()))
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn a_connection_holds_at_most_its_share_of_streams() {
        let streams = OpenStreams::default();
        let first = streams.try_open(2).expect("first");
        let second = streams.try_open(2).expect("second");
        assert!(streams.try_open(2).is_none(), "third over a cap of 2");
        drop(first);
        assert_eq!(streams.open(), 1);
        assert!(
            streams.try_open(2).is_some(),
            "a closed one frees its place"
        );
        drop(second);
    }

    async fn pair() -> (Gate, TcpStream, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let metrics = Arc::new(Metrics::new(&meshd_domain::fixtures::identity("a", 1)));
        let gate = Gate::new(
            listener,
            Listener::Http,
            1,
            Descriptors::new(u64::MAX, 0),
            metrics,
        );
        let client = TcpStream::connect(addr).await.expect("connect");
        (gate, client, CancellationToken::new())
    }

    #[tokio::test]
    async fn one_connection_over_the_cap_is_closed_at_once() {
        let (mut gate, _first, shutdown) = pair().await;
        let admitted = gate.next(&shutdown).await.expect("first admitted");
        let addr = gate.listener.local_addr().expect("addr");
        let mut second = TcpStream::connect(addr).await.expect("connect");
        let next = tokio::time::timeout(Duration::from_millis(300), gate.next(&shutdown)).await;
        assert!(next.is_err(), "nothing admitted over the cap");
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), second.read(&mut byte))
            .await
            .expect("closed, not left waiting");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        drop(admitted);
        let mut third = TcpStream::connect(addr).await.expect("connect");
        let admitted = gate.next(&shutdown).await.expect("a freed place is taken");
        third.write_all(b"x").await.expect("write");
        drop(admitted);
    }

    #[tokio::test]
    async fn at_the_cap_a_silent_connection_gives_way_to_a_newcomer() {
        let (gate, _silent, shutdown) = pair().await;
        let mut gate = gate.evicting_silent();
        let silent = gate.next(&shutdown).await.expect("first admitted");
        let addr = gate.listener.local_addr().expect("addr");
        let waiting =
            tokio::spawn(async move { silent.spoke_within(Duration::from_secs(30)).await });
        let mut speaker = TcpStream::connect(addr).await.expect("connect");
        speaker.write_all(b"x").await.expect("write");
        let admitted = tokio::time::timeout(Duration::from_secs(5), gate.next(&shutdown))
            .await
            .expect("the newcomer is admitted at once")
            .expect("admitted");
        let evicted = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the silent one is let go at once")
            .expect("task");
        assert!(!evicted, "the silent one did not speak");
        assert!(admitted.spoke_within(Duration::from_secs(5)).await);
        // One that spoke does not give way: the next newcomer is refused.
        let mut refused = TcpStream::connect(addr).await.expect("connect");
        let next = tokio::time::timeout(Duration::from_millis(500), gate.next(&shutdown)).await;
        assert!(next.is_err(), "nothing admitted over the cap");
        let mut byte = [0u8; 1];
        let read = refused.read(&mut byte).await;
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }

    #[tokio::test]
    async fn a_connection_into_the_descriptor_reserve_is_refused() {
        let (mut gate, mut client, shutdown) = pair().await;
        gate.room = Room::new(Descriptors::new(0, 0));
        let next = tokio::time::timeout(Duration::from_millis(300), gate.next(&shutdown)).await;
        assert!(next.is_err(), "nothing admitted without room");
        let mut byte = [0u8; 1];
        let read = client.read(&mut byte).await;
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(
            gate.metrics
                .render(&crate::state::Published::placeholder(
                    &meshd_domain::fixtures::identity("a", 1)
                ))
                .contains(
                    "meshd_connections_refused_total{listener=\"http\",reason=\"descriptors\"} 1"
                )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_closes_unless_a_stream_is_open() {
        let (mut gate, mut client, shutdown) = pair().await;
        let streams = OpenStreams::default();
        let admitted = gate.next(&shutdown).await.expect("admitted");
        let mut quiet = admitted.quiet_after(Duration::from_secs(30), Some(streams.clone()));
        client.write_all(b"hello").await.expect("write");
        let mut buf = [0u8; 5];
        quiet.read_exact(&mut buf).await.expect("read");
        let place = streams.try_open(1).expect("a stream");
        let mut byte = [0u8; 1];
        let held = tokio::time::timeout(Duration::from_secs(120), quiet.read(&mut byte)).await;
        assert!(held.is_err(), "an open stream keeps it: {held:?}");
        drop(place);
        let closed = tokio::time::timeout(Duration::from_secs(60), quiet.read(&mut byte))
            .await
            .expect("closed once quiet");
        assert_eq!(closed.expect_err("closed").kind(), io::ErrorKind::TimedOut);
    }
}
