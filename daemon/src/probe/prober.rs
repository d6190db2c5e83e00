//! The link prober: probes the peer's address on one cable and publishes
//! that link's statistics on a watch channel.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use meshd_proto::domain::LinkEnd;
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::ProbeError;
use super::packet::{self, HEADER_LEN, Header, Kind, MAX_DATAGRAM_LEN};
use super::stamp;
use meshd_model::linkstats::{LinkStats, LinkStatsConfig, OUTAGE_RUN, ProbeClass};
use meshd_model::verdict::LocalObservation;

/// Shortest probe period whatever the settings say: at most one probe per
/// tick, so this bounds the probe rate of a link (and makes a storm
/// impossible even with a broken config).
pub const MIN_TICK: Duration = Duration::from_millis(10);

/// Shortest timeout whatever the settings say; below this every probe on a
/// busy host would be "lost".
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// Invalid datagrams are logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Probe settings; the fields mirror the `[probe]` keys of the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProberSettings {
    /// Small-probe period.
    pub interval: Duration,
    /// Small-probe UDP payload size, header included.
    pub payload_bytes: u32,
    /// MTU-sized probe period.
    pub mtu_interval: Duration,
    /// MTU-sized probe UDP payload size (1472 fills a 1500-byte IP MTU).
    pub mtu_payload_bytes: u32,
    /// A probe unanswered this long is lost.
    pub timeout: Duration,
}

impl ProberSettings {
    /// The settings actually used: config validation rejects values outside
    /// these limits already; clamping again here keeps the probe rate and
    /// sizes safe even for a caller that skipped validation.
    pub fn clamped(self) -> Self {
        let size = |bytes: u32| {
            usize::try_from(bytes)
                .unwrap_or(MAX_DATAGRAM_LEN)
                .clamp(HEADER_LEN, MAX_DATAGRAM_LEN)
        };
        let as_u32 = |bytes: usize| u32::try_from(bytes).unwrap_or(u32::MAX);
        Self {
            interval: self.interval.max(MIN_TICK),
            payload_bytes: as_u32(size(self.payload_bytes)),
            mtu_interval: self.mtu_interval.max(MIN_TICK),
            mtu_payload_bytes: as_u32(size(self.mtu_payload_bytes)),
            timeout: self.timeout.max(MIN_TIMEOUT),
        }
    }

    fn len_of(&self, class: ProbeClass) -> usize {
        let bytes = match class {
            ProbeClass::Small => self.payload_bytes,
            ProbeClass::Mtu => self.mtu_payload_bytes,
        };
        usize::try_from(bytes).unwrap_or(MAX_DATAGRAM_LEN)
    }
}

/// Whether sends currently fail, so a dead cable is logged once when it
/// goes down and once when it comes back, never per probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendState {
    Ok,
    Failing(io::ErrorKind),
}

#[derive(Debug)]
pub struct Prober {
    socket: UdpSocket,
    state: ProbeState,
}

/// Everything of a prober but its socket, so the socket can be borrowed by a
/// pending receive while a tick updates the state.
#[derive(Debug)]
struct ProbeState {
    local: LinkEnd,
    remote: LinkEnd,
    local_addr: SocketAddr,
    peer_addr: SocketAddr,
    settings: ProberSettings,
    stats: LinkStats,
    tx: watch::Sender<Option<LocalObservation>>,
    next_seq: u64,
    send_state: SendState,
    recv_failing: bool,
    invalid_replies: u64,
    last_invalid_log: Option<Instant>,
}

/// What woke the prober.
#[derive(Debug)]
enum Event {
    Tick(ProbeClass),
    Received(io::Result<stamp::Received>),
}

impl Prober {
    /// Binds a socket to the local end's address and pins it to the cable's
    /// interface (so probes leave by that cable, not by whatever the routing
    /// table prefers: see `pin`), and connects it to the remote end's address
    /// and `peer_port`, its responder (so the kernel drops datagrams from
    /// anyone else).
    pub async fn bind(
        local: LinkEnd,
        remote: LinkEnd,
        peer_port: u16,
        settings: ProberSettings,
    ) -> Result<Self, ProbeError> {
        let settings = settings.clamped();
        let (local_ip, peer_ip) = link_addresses(&local, &remote)?;
        let bind_addr = SocketAddr::new(local_ip, 0);
        let peer_addr = SocketAddr::new(peer_ip, peer_port);
        let socket = UdpSocket::bind(bind_addr)
            .await
            .map_err(|source| ProbeError::Bind {
                addr: bind_addr,
                source,
            })?;
        // Before connect, so the route connect picks is the cable's.
        super::pin::pin_probe_socket(&socket, local.iface.as_deref(), local_ip);
        socket
            .connect(peer_addr)
            .await
            .map_err(|source| ProbeError::Connect {
                local: bind_addr,
                peer: peer_addr,
                source,
            })?;
        let local_addr = socket.local_addr().map_err(|source| ProbeError::Bind {
            addr: bind_addr,
            source,
        })?;
        if let Err(error) = stamp::enable(&socket) {
            tracing::debug!(%local_addr, %error, "no kernel receive timestamps; RTTs include this node's wake-up latency");
        }
        let mut stats = LinkStats::new(LinkStatsConfig {
            timeout: settings.timeout,
            outage_gap: settings.interval.saturating_mul(OUTAGE_RUN),
        });
        let wall_now = SystemTime::now();
        let first = stats.observation(local.clone(), remote.clone(), Instant::now(), wall_now);
        let (tx, _) = watch::channel(Some(LocalObservation {
            observation: first,
            at: wall_now,
        }));
        Ok(Self {
            socket,
            state: ProbeState {
                local,
                remote,
                local_addr,
                peer_addr,
                settings,
                stats,
                tx,
                next_seq: initial_seq(),
                send_state: SendState::Ok,
                recv_failing: false,
                invalid_replies: 0,
                last_invalid_log: None,
            },
        })
    }

    /// A receiver of this link's observations; any number may be taken.
    pub fn subscribe(&self) -> watch::Receiver<Option<LocalObservation>> {
        self.state.tx.subscribe()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.state.local_addr
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.state.peer_addr
    }

    /// The settings in use, after [`ProberSettings::clamped`].
    pub fn settings(&self) -> ProberSettings {
        self.state.settings
    }

    /// Probes until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let Self { socket, mut state } = self;
        let mut small = tokio::time::interval(state.settings.interval);
        small.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut mtu = tokio::time::interval(state.settings.mtu_interval);
        mtu.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let largest = state
            .settings
            .len_of(ProbeClass::Small)
            .max(state.settings.len_of(ProbeClass::Mtu));
        let mut send_buf = vec![0u8; largest];
        // One byte more than the largest probe, so an oversized reply is seen
        // as such instead of being truncated into a valid-looking one.
        let mut recv_buf = vec![0u8; largest + 1];
        tracing::debug!(
            link = %state.link_name(), local = %state.local_addr, peer = %state.peer_addr,
            "prober started"
        );

        let mut reply_published_since_tick = false;
        loop {
            // Ticks before the socket: each is ready at most once per period,
            // so they cannot starve replies, while a flood of datagrams can
            // never starve the probing.
            let event = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                _ = small.tick() => Event::Tick(ProbeClass::Small),
                _ = mtu.tick() => Event::Tick(ProbeClass::Mtu),
                received = stamp::recv_from(&socket, &mut recv_buf) => Event::Received(received),
            };
            // A reply publishes at once (it is the freshest news); a tick
            // publishes only when nothing did since the last one, which
            // keeps a silent link's silence current without building every
            // observation twice per probe on a healthy one.
            let publish = match event {
                Event::Tick(class) => {
                    state.send_probe(&socket, class, &mut send_buf);
                    !std::mem::replace(&mut reply_published_since_tick, false)
                }
                Event::Received(received) => {
                    let changed = state.on_received(received, &recv_buf);
                    reply_published_since_tick |= changed;
                    changed
                }
            };
            if publish {
                state.publish();
            }
        }
        tracing::debug!(link = %state.link_name(), "prober stopped");
    }
}

impl ProbeState {
    fn link_name(&self) -> String {
        format!("{} -> {}", self.local, self.remote)
    }

    fn publish(&mut self) {
        let at = SystemTime::now();
        let observation =
            self.stats
                .observation(self.local.clone(), self.remote.clone(), Instant::now(), at);
        self.tx
            .send_replace(Some(LocalObservation { observation, at }));
    }

    fn send_probe(&mut self, socket: &UdpSocket, class: ProbeClass, buf: &mut [u8]) {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let len = self.settings.len_of(class);
        let Ok(datagram) = packet::encode(&Header::request(class, seq), len, buf) else {
            return;
        };
        let at = Instant::now();
        // try_send: a full socket buffer means the link cannot take the
        // probe, which is loss; queueing it would only distort the RTT.
        let result = match socket.try_send(datagram) {
            Ok(n) if n == datagram.len() => Ok(()),
            Ok(_) => Err(io::Error::other("short send")),
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                self.stats.on_sent(seq, class, at);
                if let SendState::Failing(_) = self.send_state {
                    self.send_state = SendState::Ok;
                    tracing::info!(link = %self.link_name(), peer = %self.peer_addr, "probes are being sent again");
                }
            }
            Err(error) => {
                self.stats.on_send_failed(class, at);
                let state = SendState::Failing(error.kind());
                if self.send_state != state {
                    self.send_state = state;
                    tracing::warn!(
                        link = %self.link_name(), peer = %self.peer_addr, %error,
                        "cannot send probes; counting them as lost until sends work again"
                    );
                }
            }
        }
    }

    /// Returns whether the statistics changed.
    fn on_received(&mut self, received: io::Result<stamp::Received>, buf: &[u8]) -> bool {
        let (len, at) = match received {
            Ok(r) => (r.len, r.at),
            Err(error) => {
                // Typically ECONNREFUSED: the peer host is up but nothing
                // answers on the probe port. The probe itself times out.
                if !self.recv_failing {
                    self.recv_failing = true;
                    tracing::warn!(link = %self.link_name(), peer = %self.peer_addr, %error, "probe socket error");
                }
                return false;
            }
        };
        let header = buf.get(..len).map(packet::decode);
        match header {
            Some(Ok(h)) if h.kind == Kind::Reply && len == self.settings.len_of(h.class) => {
                if self.recv_failing {
                    self.recv_failing = false;
                    tracing::info!(link = %self.link_name(), peer = %self.peer_addr, "probe replies are arriving again");
                }
                self.stats
                    .on_reply(h.seq, h.class, h.host_delay(), at)
                    .is_some()
            }
            _ => {
                self.invalid_replies += 1;
                let due = self
                    .last_invalid_log
                    .is_none_or(|last| at.saturating_duration_since(last) >= LOG_EVERY);
                if due {
                    self.last_invalid_log = Some(at);
                    tracing::debug!(
                        link = %self.link_name(), peer = %self.peer_addr, len,
                        total = self.invalid_replies, "ignored invalid probe replies"
                    );
                }
                false
            }
        }
    }
}

/// The IP addresses of a link's two ends, which must exist and be of one
/// family.
pub(crate) fn link_addresses(
    local: &LinkEnd,
    remote: &LinkEnd,
) -> Result<(IpAddr, IpAddr), ProbeError> {
    let link = || format!("{local} -> {remote}");
    let local_ip = local.address.ok_or_else(|| ProbeError::MissingAddress {
        link: link(),
        end: "local",
    })?;
    let peer_ip = remote.address.ok_or_else(|| ProbeError::MissingAddress {
        link: link(),
        end: "remote",
    })?;
    if local_ip.is_ipv4() != peer_ip.is_ipv4() {
        return Err(ProbeError::AddressFamilyMismatch {
            link: link(),
            local: local_ip,
            remote: peer_ip,
        });
    }
    Ok((local_ip, peer_ip))
}

/// A start that differs between runs, so a late reply to a previous run that
/// happened to use the same source port cannot match a probe of this one.
fn initial_seq() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
