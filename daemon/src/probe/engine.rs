//! The probe task: one loop for every cable of this node. It wakes on its
//! tick (read every socket: count replies, take requests; send this tick's
//! probes with the taken requests' echoes in them, reply to the rest,
//! expire the unanswered, publish) and on a new config.
//! Datagrams wait in their sockets until the tick, so the task wakes ten
//! times a second (at the default interval) however many cables and
//! datagrams there are, not once per datagram (the sockets are not even
//! registered with the runtime: see [`ProbeSocket`]). Nothing is measured
//! wrong for it: datagrams carry the kernel's receive time, and a reply
//! carries how long the request waited here, which the prober takes out
//! of the round trip (`host_delay`). Only when the ticks are further apart
//! than [`MAX_REPLY_HOLD`] does a readable socket wake the task, so no
//! request waits longer than that for its reply.
//!
//! Both ends of a cable probe at the same rate, so between two ticks a
//! socket usually holds one request of the peer's: its answer rides in this
//! tick's probe of the same class as an echo (see [`packet`]), one datagram
//! each way and tick instead of two. A request read between ticks, or one
//! without a probe of its class to ride in, gets a plain reply.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use meshd_model::linkstats::{LinkStats, LinkStatsConfig, ProbeClass, ProbeNews};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::packet::{self, Echo, HEADER_LEN, Header, Kind, MAX_DATAGRAM_LEN, MAX_ECHOES};
use super::responder::{self, Answer, REPLY_BURST, REPLY_RATE_PER_SEC, TokenBucket};
use super::socket::{Drain, ProbeSocket, Step};
use super::{ProbeBoard, ProbeError, ProbedLink, ProberSettings, SharedStats, Ticks, lock, stamp};
use crate::metrics::{Metrics, ResponderCounters};

/// Shortest probe period whatever the settings say: at most one probe per
/// tick, so this bounds the probe rate of a link (and makes a storm
/// impossible even with a broken config).
const MIN_TICK: Duration = Duration::from_millis(10);

/// The longest a request waits for its reply here: the longest gap between
/// two ticks at the default 100 ms interval (two steps of the timer grid).
/// Up to this gap the tick alone reads the sockets; a peer's probe timeout
/// (500 ms by default) must leave room for it.
pub const MAX_REPLY_HOLD: Duration = Duration::from_millis(128);

/// Shortest timeout whatever the settings say; below this every probe on a
/// busy host would be "lost".
const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// How long to wait before trying to bind a cable's socket again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Repeated drops and errors are logged at most this often per link.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Requests of one link waiting for this tick's probes at most; any more
/// (a peer's burst) are replied to at once.
const MAX_TAKEN: usize = 2 * MAX_ECHOES;

/// The settings actually used: config validation rejects values outside
/// these limits already; clamping again keeps the probe rate and sizes safe
/// even for a caller that skipped validation.
fn clamped(s: ProberSettings) -> ProberSettings {
    let size = |bytes: u32| {
        u32::try_from(
            usize::try_from(bytes)
                .unwrap_or(MAX_DATAGRAM_LEN)
                .clamp(HEADER_LEN, MAX_DATAGRAM_LEN),
        )
        .unwrap_or(u32::MAX)
    };
    ProberSettings {
        interval: s.interval.max(MIN_TICK),
        payload_bytes: size(s.payload_bytes),
        mtu_interval: s.mtu_interval.max(MIN_TICK),
        mtu_payload_bytes: size(s.mtu_payload_bytes),
        timeout: s.timeout.max(MIN_TIMEOUT),
        outage_gap: s.outage_gap,
    }
}

fn len_of(settings: &ProberSettings, class: ProbeClass) -> usize {
    let bytes = match class {
        ProbeClass::Small => settings.payload_bytes,
        ProbeClass::Mtu => settings.mtu_payload_bytes,
    };
    usize::try_from(bytes).unwrap_or(MAX_DATAGRAM_LEN)
}

/// Logs a kind of trouble at most once per [`LOG_EVERY`].
#[derive(Debug, Default)]
struct Throttle(Option<Instant>);

impl Throttle {
    fn due(&mut self, now: Instant) -> bool {
        let due = self
            .0
            .is_none_or(|last| now.saturating_duration_since(last) >= LOG_EVERY);
        if due {
            self.0 = Some(now);
        }
        due
    }
}

/// One cable's socket and what it measured.
#[derive(Debug)]
struct Link {
    spec: ProbedLink,
    socket: ProbeSocket,
    local: SocketAddr,
    peer: SocketAddr,
    stats: SharedStats,
    next_seq: u64,
    bucket: TokenBucket,
    counters: Arc<ResponderCounters>,
    /// Only differences of these times are used, so any instant before the
    /// first datagram will do.
    epoch: Instant,
    send_failing: bool,
    logs: [Throttle; 2],
    /// What the aggregator was last told about this link.
    told: ProbeNews,
    /// The peer's last datagram said it reads echoes.
    peer_reads_echoes: bool,
    /// Requests read on this tick, answered by its probes.
    taken: Vec<Taken>,
}

/// A request whose answer waits for this tick's probe of its class.
#[derive(Debug, Clone, Copy)]
struct Taken {
    class: ProbeClass,
    seq: u64,
    /// When the kernel received it.
    at: Instant,
    /// Its size: the datagram that answers it is no smaller.
    len: usize,
}

/// Whether the requests a drain reads may wait for this tick's probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// A tick's drain: its probes go out next.
    ForProbes,
    /// Between ticks: answer now.
    No,
}

/// A cable whose socket could not be bound yet.
#[derive(Debug)]
struct Waiting {
    spec: ProbedLink,
    retry_at: Instant,
    error: String,
}

struct Engine {
    settings: ProberSettings,
    links: Vec<Link>,
    waiting: Vec<Waiting>,
    metrics: Arc<Metrics>,
    ticks: Arc<Mutex<Ticks>>,
    /// Links were bound or closed since the board was last replaced.
    links_changed: bool,
    next_mtu: Instant,
    /// Where probes and replies are built.
    buf: Vec<u8>,
    inbox: stamp::Inbox,
}

fn initial_seq() -> u64 {
    // Different after every restart, so a reply to a probe of the previous
    // run is not taken for one of this run.
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX) << 8)
        .unwrap_or(1)
}

/// Binds and connects a cable's socket; `registered` as [`ProbeSocket::new`].
pub(super) async fn bind(
    spec: &ProbedLink,
    registered: bool,
) -> Result<(ProbeSocket, SocketAddr, SocketAddr), ProbeError> {
    let (local, peer_addr) = spec.addresses()?;
    let bind_error = |source| ProbeError::Bind {
        peer: spec.link.remote.node.clone(),
        addr: local,
        source,
    };
    let socket = std::net::UdpSocket::bind(local).map_err(bind_error)?;
    socket.set_nonblocking(true).map_err(bind_error)?;
    // Before connect, so the route connect picks is the cable's (see `pin`).
    super::pin::pin_to_cable(
        &socket,
        spec.link.local.iface.as_deref(),
        local.ip(),
        "probe socket",
    );
    socket
        .connect(peer_addr)
        .map_err(|source| ProbeError::Connect {
            local,
            peer_addr,
            source,
        })?;
    if let Err(error) = stamp::enable(&socket) {
        tracing::debug!(%local, %error, "no kernel receive timestamps; probe times include this node's wake-up latency");
    }
    let socket = ProbeSocket::new(socket, registered).map_err(bind_error)?;
    let local = socket.local_addr().unwrap_or(local);
    Ok((socket, local, peer_addr))
}

pub async fn run(
    mut control: watch::Receiver<(Vec<ProbedLink>, ProberSettings)>,
    board: watch::Sender<ProbeBoard>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let (links, settings) = control.borrow_and_update().clone();
    let mut engine = Engine {
        settings: clamped(settings),
        links: Vec::new(),
        waiting: Vec::new(),
        metrics,
        ticks: Arc::default(),
        links_changed: true,
        next_mtu: Instant::now(),
        buf: vec![0; MAX_DATAGRAM_LEN],
        inbox: stamp::Inbox::new(),
    };
    engine.follow(links).await;
    let mut tick = crate::cadence::every(engine.settings.interval);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = control.changed() => {
                if changed.is_err() {
                    break;
                }
                let (links, settings) = control.borrow_and_update().clone();
                let settings = clamped(settings);
                if settings != engine.settings {
                    // A new probe is a new measurement: start every link over.
                    engine.settings = settings;
                    engine.follow(Vec::new()).await;
                    tick = crate::cadence::every(settings.interval);
                }
                engine.follow(links).await;
                engine.publish(&board, true, Instant::now());
            }
            scheduled = tick.tick() => {
                let now = Instant::now();
                let late = now.saturating_duration_since(scheduled.into_std());
                engine.on_tick(now, late).await;
                engine.publish(&board, false, now);
            }
            ready = poll_fn(|cx| {
                let ready: Vec<usize> = engine
                    .links
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| l.socket.poll_recv_ready(cx).is_ready())
                    .map(|(i, _)| i)
                    .collect();
                if ready.is_empty() { Poll::Pending } else { Poll::Ready(ready) }
            }) => {
                for i in ready {
                    engine.drain(i, Hold::No);
                }
            }
        }
    }
    for link in &engine.links {
        engine.metrics.probes.responder_stopped(link.local);
    }
    tracing::debug!("probing stopped");
}

impl Engine {
    /// Brings the sockets in line with `wanted`: unchanged links keep
    /// theirs, removed ones close, new ones bind (or wait to be retried).
    async fn follow(&mut self, wanted: Vec<ProbedLink>) {
        let kept = |spec: &ProbedLink| wanted.contains(spec);
        for link in self.links.iter().filter(|l| !kept(&l.spec)) {
            self.metrics.probes.responder_stopped(link.local);
        }
        let before = self.links.len();
        self.links.retain(|l| kept(&l.spec));
        self.links_changed |= self.links.len() != before;
        self.waiting.retain(|w| kept(&w.spec));
        let now = Instant::now();
        for spec in wanted {
            let known = self.links.iter().any(|l| l.spec == spec)
                || self.waiting.iter().any(|w| w.spec == spec);
            if !known {
                self.waiting.push(Waiting {
                    spec,
                    retry_at: now,
                    error: String::new(),
                });
            }
        }
        self.bind_waiting(now).await;
    }

    async fn bind_waiting(&mut self, now: Instant) {
        let due: Vec<Waiting> = {
            let (due, later) = std::mem::take(&mut self.waiting)
                .into_iter()
                .partition(|w| w.retry_at <= now);
            self.waiting = later;
            due
        };
        for mut waiting in due {
            let registered = crate::cadence::longest_gap(self.settings.interval) > MAX_REPLY_HOLD;
            match bind(&waiting.spec, registered).await {
                Ok((socket, local, peer)) => {
                    tracing::info!(peer = %waiting.spec.link.remote.node, %local, %peer, "probing the cable");
                    let counters = Arc::new(ResponderCounters::default());
                    self.metrics
                        .probes
                        .responder_started(local, counters.clone());
                    self.links_changed = true;
                    self.links.push(Link {
                        stats: Arc::new(Mutex::new(LinkStats::new(LinkStatsConfig {
                            timeout: self.settings.timeout,
                            outage_gap: self.settings.outage_gap,
                            interval: self.settings.interval,
                            tick_gap: crate::cadence::longest_gap(self.settings.interval),
                        }))),
                        spec: waiting.spec,
                        socket,
                        local,
                        peer,
                        next_seq: initial_seq(),
                        bucket: TokenBucket::new(REPLY_RATE_PER_SEC, REPLY_BURST, now),
                        counters,
                        epoch: now,
                        send_failing: false,
                        logs: Default::default(),
                        told: ProbeNews::default(),
                        peer_reads_echoes: false,
                        taken: Vec::with_capacity(MAX_TAKEN),
                    });
                }
                Err(error) => {
                    let error = error.to_string();
                    if error != waiting.error {
                        tracing::warn!(peer = %waiting.spec.link.remote.node, %error, "cannot probe this cable yet; retrying every {RETRY_AFTER:?}");
                    }
                    waiting.error = error;
                    waiting.retry_at = now + RETRY_AFTER;
                    self.waiting.push(waiting);
                }
            }
        }
    }

    async fn on_tick(&mut self, now: Instant, late: Duration) {
        // Replies already queued count before anything expires: a task that
        // woke late must not call a probe lost whose reply is waiting.
        for i in 0..self.links.len() {
            self.drain(i, Hold::ForProbes);
        }
        {
            let mut ticks = lock(&self.ticks);
            ticks.drained_at = Some(now);
            ticks.due_by = now.checked_add(crate::cadence::longest_gap(self.settings.interval));
            ticks.lateness.note(late, now);
        }
        let mtu_due = now >= self.next_mtu;
        if mtu_due {
            self.next_mtu = now + self.settings.mtu_interval;
        }
        let settings = self.settings;
        for link in &mut self.links {
            lock(&link.stats).note_lateness(late, now);
            link.probe(ProbeClass::Small, &settings, &mut self.buf, now);
            link.burst(&settings, &mut self.buf, now);
            if mtu_due {
                link.probe(ProbeClass::Mtu, &settings, &mut self.buf, now);
            }
            link.reply_to_taken(&mut self.buf);
        }
        if !self.waiting.is_empty() {
            self.bind_waiting(now).await;
        }
    }

    /// Reads everything queued on link `i`'s socket (see [`Drain`]).
    fn drain(&mut self, i: usize, hold: Hold) {
        let settings = self.settings;
        let Some(link) = self.links.get_mut(i) else {
            return;
        };
        let mut drain = Drain::default();
        loop {
            match drain.step(&link.socket, &mut self.inbox) {
                Step::Batch => {
                    for (received, datagram) in self.inbox.datagrams() {
                        link.on_datagram(received, datagram, &settings, &mut self.buf, hold);
                    }
                }
                Step::Error(error) => {
                    // ECONNREFUSED: nothing listens on the peer's port (its
                    // daemon is down); the probes go unanswered and say so.
                    let total = link.counters.count_recv_error();
                    if link.logs[1].due(Instant::now()) {
                        tracing::debug!(peer = %link.peer, %error, total, "probe socket receive error");
                    }
                }
                Step::Done => return,
            }
        }
    }

    /// Replaces the board when links came or went; wakes the aggregator
    /// only when a link went silent or came back, started or stopped losing
    /// in a row, or `force`. Nothing is computed for the board here: its
    /// reader computes the statistics it reads. `now` is the instant the
    /// board reads as of (the tick's): what wakes the aggregator is then
    /// what it reads, not a silence a few microseconds short of it.
    fn publish(&mut self, board: &watch::Sender<ProbeBoard>, force: bool, now: Instant) {
        let outage = self.settings.outage_gap;
        let mut significant = force;
        for link in &mut self.links {
            let told = lock(&link.stats).news(now, outage);
            if told != link.told {
                link.told = told;
                significant = true;
            }
        }
        if !significant && !self.links_changed {
            return;
        }
        let links_changed = std::mem::take(&mut self.links_changed);
        board.send_if_modified(|current| {
            if links_changed {
                *current = ProbeBoard::new(
                    self.links
                        .iter()
                        .map(|l| (l.spec.link.remote.node.clone(), l.stats.clone()))
                        .collect(),
                    self.ticks.clone(),
                );
            }
            significant
        });
    }
}

impl Link {
    /// Sends this tick's probe of `class`, carrying the echoes of the taken
    /// requests of that class.
    fn probe(
        &mut self,
        class: ProbeClass,
        settings: &ProberSettings,
        buf: &mut [u8],
        now: Instant,
    ) {
        lock(&self.stats).expire(now);
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let own_len = len_of(settings, class);
        // Not the tick's `now`: the other links' sockets were read since.
        let sending_at = Instant::now();
        // A request larger than this node's probe of its class (the peer's
        // config differs) gets a plain reply: carrying its echo would make
        // this probe as large, and lost where only the larger size fails.
        let riding = self
            .taken
            .extract_if(.., |taken| taken.class == class && taken.len <= own_len);
        let mut echoes = [Echo {
            class,
            seq: 0,
            held: Duration::ZERO,
        }; MAX_ECHOES];
        let mut count = 0;
        // The slots first: once they are full, the rest stay taken.
        for (echo, taken) in echoes.iter_mut().zip(riding) {
            echo.seq = taken.seq;
            echo.held = sending_at.saturating_duration_since(taken.at);
            count += 1;
        }
        let echoes = echoes.get(..count).unwrap_or_default();
        let len = own_len.max(packet::min_len(count));
        let Ok(datagram) = packet::encode(&Header::request(class, seq), echoes, len, buf) else {
            return;
        };
        match self.socket.try_send(datagram) {
            Ok(_) => {
                lock(&self.stats).on_sent(seq, class, now);
                self.counters.count_replies(echoes.len());
                if self.send_failing {
                    self.send_failing = false;
                    tracing::info!(peer = %self.peer, "probes leave again");
                }
            }
            Err(error) => {
                // The cable's interface is down or gone: every probe that
                // cannot leave is a lost one.
                lock(&self.stats).on_send_failed(class, now);
                self.counters.count_send_errors(echoes.len());
                if !self.send_failing {
                    self.send_failing = true;
                    tracing::info!(peer = %self.peer, %error, "cannot send probes");
                }
            }
        }
    }

    /// Sends the burst of small probes a silence that just became overdue
    /// asks for (`LinkStats::burst_due`), plain requests carrying no
    /// echo. One that cannot leave is no news: this tick's own probe
    /// already counted the cable's failure.
    fn burst(&mut self, settings: &ProberSettings, buf: &mut [u8], now: Instant) {
        let due = lock(&self.stats).burst_due(now);
        let len = len_of(settings, ProbeClass::Small).max(packet::min_len(0));
        for _ in 0..due {
            let seq = self.next_seq;
            self.next_seq = self.next_seq.wrapping_add(1);
            let header = Header::request(ProbeClass::Small, seq);
            let Ok(datagram) = packet::encode(&header, &[], len, buf) else {
                return;
            };
            if self.socket.try_send(datagram).is_ok() {
                lock(&self.stats).on_burst_sent(seq, now);
            }
        }
    }

    /// Replies to the requests no probe of this tick carried.
    fn reply_to_taken(&mut self, buf: &mut [u8]) {
        for taken in std::mem::take(&mut self.taken) {
            self.reply(taken, buf);
        }
    }

    /// Takes in `datagram`: counts what it answers, and answers it if it is
    /// a request (its answer built in `buf`, or taken for this tick's
    /// probes when `hold` allows and the peer reads echoes).
    fn on_datagram(
        &mut self,
        received: stamp::Received,
        datagram: &[u8],
        settings: &ProberSettings,
        buf: &mut [u8],
        hold: Hold,
    ) {
        let (len, at) = (received.len, received.at);
        let datagram = match packet::decode(datagram) {
            Ok(datagram) => datagram,
            Err(error) => return self.dropped_invalid(at, &error.to_string()),
        };
        self.peer_reads_echoes = datagram.reads_echoes;
        for answer in datagram.answers() {
            // The answer came back at least as large as the probe left: a
            // path that cuts MTU-sized datagrams loses MTU-sized probes.
            if len >= len_of(settings, answer.class) {
                lock(&self.stats).on_reply(answer.seq, answer.class, answer.held, at);
            } else {
                self.dropped_invalid(at, "an answer smaller than its probe");
            }
        }
        let request = datagram.header;
        if request.kind != Kind::Request {
            return;
        }
        let max = len_of(settings, ProbeClass::Mtu)
            .max(len_of(settings, ProbeClass::Small))
            .max(packet::min_len(MAX_ECHOES));
        match responder::answer(&mut self.bucket, len, max, at) {
            Answer::Reply => {}
            Answer::TooLarge => return self.dropped_invalid(at, "larger than any probe"),
            Answer::RateLimited => {
                let total = self.counters.count_rate_limited();
                if self.logs[0].due(at) {
                    tracing::warn!(peer = %self.peer, total, "probe replies rate-limited to {REPLY_RATE_PER_SEC}/s; is the peer misconfigured?");
                }
                return;
            }
        }
        let taken = Taken {
            class: request.class,
            seq: request.seq,
            at,
            len,
        };
        if hold == Hold::ForProbes && self.peer_reads_echoes && self.taken.len() < MAX_TAKEN {
            self.taken.push(taken);
        } else {
            self.reply(taken, buf);
        }
    }

    fn dropped_invalid(&mut self, at: Instant, why: &str) {
        let total = self.counters.count_invalid();
        if self.logs[0].due(at) {
            tracing::debug!(peer = %self.peer, why, total, "dropped invalid probe datagrams");
        }
    }

    /// Replies to a request in a datagram of its own, as large as the
    /// request (so nothing is ever amplified), stamped with this node's
    /// receive and send times (the kernel's receive stamp, so this node's
    /// wake-up counts as its own delay, taken out of the RTT).
    fn reply(&mut self, request: Taken, buf: &mut [u8]) {
        let ns = |t: Instant| {
            u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
        };
        let reply = Header {
            kind: Kind::Reply,
            class: request.class,
            seq: request.seq,
            recv_ns: ns(request.at),
            send_ns: ns(Instant::now()),
        };
        let Ok(out) = packet::encode(&reply, &[], request.len, buf) else {
            return;
        };
        // With the send buffer full the reply is dropped rather than
        // queued; the prober sees loss, which is the truth.
        match self.socket.try_send(out) {
            Ok(_) => self.counters.count_reply(),
            Err(error) => {
                let total = self.counters.count_send_error();
                if self.logs[1].due(request.at) {
                    tracing::debug!(peer = %self.peer, %error, total, "cannot send probe replies");
                }
            }
        }
    }
}
