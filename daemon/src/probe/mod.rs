//! Link probing over UDP: one task for all of this node's cables. Each cable
//! has one socket, bound to this end's address and port and connected to
//! the peer's: it sends this node's probes, answers the peer's, and the
//! kernel drops datagrams from anyone else. The task shares every link's
//! probe statistics with the aggregator (see [`Probes::subscribe`]).

mod engine;
pub mod packet;
pub mod pin;
pub mod rdma;
pub mod responder;
mod socket;
mod stamp;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use meshd_domain::{Lateness, NodeId};
use meshd_model::lateness::LatenessLog;
use meshd_model::linkstats::{LinkStats, ProbeStats};
use meshd_model::verdict::ExpectedLink;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, settings};
use crate::metrics::Metrics;

pub use meshd_model::linkstats::ProbeClass;
pub use packet::{Header, Kind, PacketError};

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot bind the probe socket of the cable to {peer} on {addr}: {source}")]
    Bind {
        peer: NodeId,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot connect the probe socket {local} to {peer_addr}: {source}")]
    Connect {
        local: SocketAddr,
        peer_addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the cable to {peer}: the {end} end has no IP address to probe")]
    MissingAddress { peer: NodeId, end: &'static str },
}

/// The ports a cable's probes use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LinkPorts {
    /// Where this end's socket is bound.
    pub local: u16,
    /// Where the peer's socket is bound: where probes go.
    pub peer: u16,
}

/// A configured cable and the ports its probes use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbedLink {
    pub link: ExpectedLink,
    pub ports: LinkPorts,
}

impl ProbedLink {
    /// Both ends' socket addresses, when both ends have an address.
    pub fn addresses(&self) -> Result<(SocketAddr, SocketAddr), ProbeError> {
        let missing = |end| ProbeError::MissingAddress {
            peer: self.link.remote.node.clone(),
            end,
        };
        let local = self.link.local.address.ok_or_else(|| missing("local"))?;
        let peer = self.link.remote.address.ok_or_else(|| missing("peer"))?;
        Ok((
            SocketAddr::new(local, self.ports.local),
            SocketAddr::new(peer, self.ports.peer),
        ))
    }
}

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
    /// A gap in replies this long is an outage, judged by its silence, not
    /// loss (`thresholds.down_after`).
    pub outage_gap: Duration,
}

/// The cables `local` probes by `config`, with the ports of their
/// responders.
pub fn probed_links(config: &Config, local: &NodeId) -> Vec<ProbedLink> {
    config
        .links
        .iter()
        .map(|link| ProbedLink {
            link: settings::expected_link(link, local),
            ports: LinkPorts {
                local: link.local_probe_addr(&config.probe).port(),
                peer: link.peer_probe_addr(&config.probe).port(),
            },
        })
        .collect()
}

/// The probe settings every link shares by `config`; each link's ports come
/// with it ([`probed_links`]).
pub fn settings(config: &Config) -> ProberSettings {
    let c = &config.probe;
    ProberSettings {
        interval: c.interval,
        payload_bytes: c.payload_bytes,
        mtu_interval: c.mtu_interval,
        mtu_payload_bytes: c.mtu_payload_bytes,
        timeout: c.timeout,
        outage_gap: config.thresholds.down_after,
    }
}

/// What every link's probes measured, as of the probe task's last tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeSnapshot {
    /// By the far end's node; a cable whose socket is not bound yet has none.
    pub links: BTreeMap<NodeId, ProbeStats>,
    /// How late the probe task's timers ran lately: how late this node
    /// runs.
    pub lateness: Lateness,
}

/// The probe task's measurements, shared with whoever reads them. The
/// statistics (percentiles, loss windows) are computed when read: the
/// aggregator reads about once a second, the task ticks ten times. They are
/// computed as of the task's last tick, as if published then: a reply that
/// arrived since waits in its socket for the next tick, and the time it
/// waits must not read as the link's silence.
#[derive(Debug, Clone, Default)]
pub struct ProbeBoard {
    links: BTreeMap<NodeId, SharedStats>,
    ticks: Arc<Mutex<Ticks>>,
}

/// One link's statistics, written by the probe task, read by the board's
/// readers. Every hold of the lock is short and never across an `.await`.
pub(crate) type SharedStats = Arc<Mutex<LinkStats>>;

/// What the probe task shares besides the links' statistics.
#[derive(Debug, Default)]
pub(crate) struct Ticks {
    /// When the task last read every socket and sent its probes.
    pub(crate) drained_at: Option<Instant>,
    /// When its next tick is due at the latest.
    pub(crate) due_by: Option<Instant>,
    /// How late the task's timer fired lately.
    pub(crate) lateness: LatenessLog,
}

pub(crate) fn lock<T>(shared: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves statistics, not invariants.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ProbeBoard {
    pub(crate) fn new(links: BTreeMap<NodeId, SharedStats>, ticks: Arc<Mutex<Ticks>>) -> Self {
        Self { links, ticks }
    }

    /// Every link's statistics and the task's lateness as of its last tick
    /// (as of `now` before the first one). A tick overdue now is as late
    /// as it is overdue: it notes its lateness only once it runs, and
    /// meanwhile the peers' probes wait unanswered.
    pub fn read(&self, now: Instant) -> ProbeSnapshot {
        let (as_of, lateness) = {
            let ticks = lock(&self.ticks);
            let as_of = ticks.drained_at.map_or(now, |at| at.min(now));
            (as_of, ticks.lateness.seen_at(as_of, ticks.due_by, now))
        };
        ProbeSnapshot {
            links: self
                .links
                .iter()
                .map(|(peer, stats)| (peer.clone(), lock(stats).stats(as_of)))
                .collect(),
            lateness,
        }
    }
}

/// The probe task of this node.
#[derive(Debug)]
pub struct Probes {
    control: watch::Sender<(Vec<ProbedLink>, ProberSettings)>,
    board: watch::Receiver<ProbeBoard>,
    engine: tokio::task::JoinHandle<()>,
}

impl Probes {
    /// Starts probing `links`; stops with `shutdown`. A cable whose address
    /// is not there yet (interface down at boot) is retried, and judged from
    /// the other end meanwhile. The task ticks with no cable too, and notes
    /// how late each tick is: how late this node runs.
    pub fn start(
        links: Vec<ProbedLink>,
        settings: ProberSettings,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Self {
        let (control, control_rx) = watch::channel((links, settings));
        let (board_tx, board) = watch::channel(ProbeBoard::default());
        let engine = tokio::spawn(engine::run(control_rx, board_tx, metrics, shutdown));
        Self {
            control,
            board,
            engine,
        }
    }

    /// Waits until the probe task has stopped (after its `shutdown`) and
    /// its sockets are closed: a node started again at once finds its
    /// cable ports free.
    pub async fn stopped(self) {
        if let Err(error) = self.engine.await {
            tracing::warn!(%error, "the probe task ended abnormally");
        }
    }

    /// Follows a new config: links that did not change keep their socket and
    /// statistics; new probe settings restart every link, since they change
    /// what a probe is.
    pub fn apply(&self, links: Vec<ProbedLink>, settings: ProberSettings) {
        self.control.send_if_modified(|current| {
            let changed = current.0 != links || current.1 != settings;
            if changed {
                *current = (links, settings);
            }
            changed
        });
    }

    /// The board, replaced when the set of links changes; the receiver is
    /// woken only when a link changed in a way verdicts rest on (it went
    /// silent or came back, started or stopped losing probes in a row) or
    /// the set of links did.
    pub fn subscribe(&self) -> watch::Receiver<ProbeBoard> {
        self.board.clone()
    }
}
