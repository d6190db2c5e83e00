//! The probe responder: echoes each valid request on one link address as a
//! reply of the same size, with its own receive and send times.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::ProbeError;
use super::packet::{self, Header, Kind, MAX_DATAGRAM_LEN};
use super::stamp;

/// Replies per second, sustained. A peer probes one link at most every 10 ms
/// (small) plus every 100 ms (MTU), 110/s; 1000/s leaves room for a restarted
/// or misconfigured peer yet caps what a spoofed flood can make us send.
pub const REPLY_RATE_PER_SEC: u32 = 1000;

/// Replies allowed back to back: absorbs a burst of probes queued behind a
/// scheduling hiccup on either node without dropping them as "loss".
pub const REPLY_BURST: u32 = 100;

/// Drops (invalid or rate-limited) are summarised in the log at most this
/// often, so garbage on the port cannot flood the log either.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// After a receive error, wait this long so a persistent error cannot spin
/// the task at 100% CPU.
const RECV_ERROR_BACKOFF: Duration = Duration::from_millis(10);

/// Token bucket with time passed in, so it is testable without a clock.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_per_sec: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// Starts full, so the first burst after start is answered.
    pub fn new(rate_per_sec: u32, burst: u32, now: Instant) -> Self {
        Self {
            rate_per_sec: f64::from(rate_per_sec),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            last: now,
        }
    }

    pub fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.rate_per_sec).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Live counters of one responder, shared with whoever exports metrics.
#[derive(Debug, Default)]
pub struct ResponderCounters {
    replies: AtomicU64,
    invalid: AtomicU64,
    rate_limited: AtomicU64,
    send_errors: AtomicU64,
    recv_errors: AtomicU64,
}

/// A snapshot of [`ResponderCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponderStats {
    pub replies: u64,
    /// Datagrams that were not a valid probe request (dropped unanswered).
    pub invalid: u64,
    pub rate_limited: u64,
    pub send_errors: u64,
    pub recv_errors: u64,
}

impl ResponderCounters {
    pub fn snapshot(&self) -> ResponderStats {
        ResponderStats {
            replies: self.replies.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
            send_errors: self.send_errors.load(Ordering::Relaxed),
            recv_errors: self.recv_errors.load(Ordering::Relaxed),
        }
    }
}

fn bump(counter: &AtomicU64) -> u64 {
    counter.fetch_add(1, Ordering::Relaxed) + 1
}

/// Logs a kind of drop at most once per [`LOG_EVERY`], with the total.
#[derive(Debug)]
struct DropLog {
    last: Option<Instant>,
}

impl DropLog {
    fn due(&mut self, now: Instant) -> bool {
        let due = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= LOG_EVERY);
        if due {
            self.last = Some(now);
        }
        due
    }
}

#[derive(Debug)]
pub struct Responder {
    socket: UdpSocket,
    local: SocketAddr,
    /// Taken before the bind, so no datagram's kernel stamp is before it.
    epoch: Instant,
    counters: Arc<ResponderCounters>,
}

impl Responder {
    /// Binds the probe port on one link address. Binding the link's own
    /// address (not 0.0.0.0) keeps probes of one cable from being answered
    /// by another.
    pub async fn bind(addr: SocketAddr) -> Result<Self, ProbeError> {
        let epoch = Instant::now();
        let socket = UdpSocket::bind(addr)
            .await
            .map_err(|source| ProbeError::Bind { addr, source })?;
        // Replies leave by the cable the address is on (see `pin`).
        super::pin::pin_probe_socket(&socket, None, addr.ip());
        let local = socket
            .local_addr()
            .map_err(|source| ProbeError::Bind { addr, source })?;
        if let Err(error) = stamp::enable(&socket) {
            tracing::debug!(%local, %error, "no kernel receive timestamps; replies count this node's wake-up latency as wire time");
        }
        Ok(Self {
            socket,
            local,
            epoch,
            counters: Arc::default(),
        })
    }

    /// The bound address (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn counters(&self) -> Arc<ResponderCounters> {
        Arc::clone(&self.counters)
    }

    /// Answers requests until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let Self {
            socket,
            local,
            epoch,
            counters,
        } = self;
        // Only differences of these times are used, so any epoch before the
        // first datagram will do.
        let ns_since_epoch =
            |t: Instant| u64::try_from(t.duration_since(epoch).as_nanos()).unwrap_or(u64::MAX);
        let mut bucket = TokenBucket::new(REPLY_RATE_PER_SEC, REPLY_BURST, epoch);
        // One byte more than any UDP payload, so nothing is ever truncated.
        let mut buf = vec![0u8; MAX_DATAGRAM_LEN + 1];
        let mut invalid_log = DropLog { last: None };
        let mut limit_log = DropLog { last: None };
        let mut recv_log = DropLog { last: None };
        let mut send_failing = false;
        tracing::debug!(%local, "probe responder started");

        loop {
            let received = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                r = stamp::recv_from(&socket, &mut buf) => r,
            };
            // The kernel's stamp, so our wake-up and processing count as host
            // delay (taken out of the RTT) and not as wire time.
            let (len, from, recv_at) = match received {
                Ok(stamp::Received {
                    len,
                    from: Some(from),
                    at,
                }) => (len, from, at),
                Ok(stamp::Received { from: None, .. }) => {
                    // Nowhere to reply to; not seen on UDP, counted in case.
                    bump(&counters.invalid);
                    continue;
                }
                Err(error) => {
                    let recv_at = Instant::now();
                    let total = bump(&counters.recv_errors);
                    if recv_log.due(recv_at) {
                        tracing::warn!(%local, %error, total, "probe responder receive error");
                    }
                    tokio::select! {
                        () = cancel.cancelled() => break,
                        () = tokio::time::sleep(RECV_ERROR_BACKOFF) => continue,
                    }
                }
            };
            let Some(datagram) = buf.get(..len) else {
                continue;
            };
            let request = match packet::decode(datagram) {
                Ok(h) if h.kind == Kind::Request => h,
                other => {
                    let total = bump(&counters.invalid);
                    if invalid_log.due(recv_at) {
                        let reason = match other {
                            Err(e) => e.to_string(),
                            Ok(_) => "not a request".to_owned(),
                        };
                        tracing::debug!(%local, %from, %reason, total, "dropped invalid probe datagrams");
                    }
                    continue;
                }
            };
            if !bucket.try_take(recv_at) {
                let total = bump(&counters.rate_limited);
                if limit_log.due(recv_at) {
                    tracing::warn!(
                        %local, %from, total,
                        "probe replies rate-limited to {REPLY_RATE_PER_SEC}/s; is a peer misconfigured or flooding?"
                    );
                }
                continue;
            }
            let reply = Header {
                kind: Kind::Reply,
                class: request.class,
                seq: request.seq,
                recv_ns: ns_since_epoch(recv_at),
                send_ns: 0,
            };
            // Same length as the request: a reply is never larger, so the
            // responder cannot amplify anything.
            let Ok(out) = packet::encode(&reply, len, &mut buf) else {
                continue;
            };
            let out_len = out.len();
            let Some(out) = buf.get_mut(..out_len) else {
                continue;
            };
            packet::stamp_send_time(out, ns_since_epoch(Instant::now()));
            // try_send_to: with the send buffer full the reply is dropped
            // rather than queued; the prober sees loss, which is the truth.
            match socket.try_send_to(out, from) {
                Ok(_) => {
                    bump(&counters.replies);
                    if send_failing {
                        send_failing = false;
                        tracing::info!(%local, "probe replies are being sent again");
                    }
                }
                Err(error) => {
                    bump(&counters.send_errors);
                    if !send_failing {
                        send_failing = true;
                        tracing::warn!(%local, %from, %error, "cannot send probe replies");
                    }
                }
            }
        }
        tracing::debug!(%local, "probe responder stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bucket_allows_burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 100, t0);
        assert_eq!((0..150).filter(|_| b.try_take(t0)).count(), 100);
        // 10 ms at 1000/s refills 10 tokens.
        let t1 = t0 + Duration::from_millis(10);
        assert_eq!((0..50).filter(|_| b.try_take(t1)).count(), 10);
        // A long pause refills only up to the burst.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..500).filter(|_| b.try_take(t2)).count(), 100);
        // Time stepping back neither refills nor panics.
        assert!(!b.try_take(t0));
    }

    #[test]
    fn token_bucket_sustains_its_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 100, t0);
        // 10 000 requests/s for 1 s.
        let granted = (0..10_000u64)
            .filter(|i| b.try_take(t0 + Duration::from_micros(i * 100)))
            .count();
        assert!((1_090..=1_110).contains(&granted), "granted {granted}");
    }
}
