//! Link probing over UDP: a responder on every local link address and port,
//! and a prober per link, each publishing that link's observation on a watch
//! channel.

mod manager;
pub mod packet;
pub mod pin;
pub mod prober;
pub mod responder;
mod stamp;
mod supervise;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use meshd_proto::domain::LinkEnd;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use meshd_model::verdict::{ExpectedLink, LocalObservation};

pub use manager::ProbeManager;
pub use packet::{Header, Kind, PacketError};
pub use prober::{Prober, ProberSettings};
pub use responder::{Responder, ResponderCounters, ResponderStats};
pub use supervise::supervise_link;

pub use meshd_model::linkstats::ProbeClass;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot bind probe socket to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot connect probe socket {local} to {peer}: {source}")]
    Connect {
        local: SocketAddr,
        peer: SocketAddr,
        source: std::io::Error,
    },
    #[error("link {link}: the {end} end has no IP address to probe")]
    MissingAddress { link: String, end: &'static str },
    #[error(
        "link {link}: local address {local} and remote address {remote} are of different IP families"
    )]
    AddressFamilyMismatch {
        link: String,
        local: IpAddr,
        remote: IpAddr,
    },
    #[error("link {link} is listed twice")]
    DuplicateLink { link: String },
}

/// One probed link, seen from this node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkKey {
    pub local: LinkEnd,
    pub remote: LinkEnd,
}

impl fmt::Display for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.local, self.remote)
    }
}

impl From<(LinkEnd, LinkEnd)> for LinkKey {
    fn from((local, remote): (LinkEnd, LinkEnd)) -> Self {
        Self { local, remote }
    }
}

/// The UDP ports of a link's two ends; the addresses are the ends' own.
/// Distinct ports let two cables share an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkPorts {
    /// Where this end's responder listens.
    pub local: u16,
    /// Where the peer's responder listens: where probes go.
    pub peer: u16,
}

/// A configured cable and the ports its probes use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbedLink {
    pub link: ExpectedLink,
    pub ports: LinkPorts,
}

/// The running responders and probers of this node.
///
/// Dropping the set stops its tasks; [`ProbeSet::shutdown`] also waits for
/// them.
#[derive(Debug)]
pub struct ProbeSet {
    observations: BTreeMap<LinkKey, watch::Receiver<Option<LocalObservation>>>,
    responders: Vec<(SocketAddr, Arc<ResponderCounters>)>,
    /// Where the responders' counters are exported while they run.
    metrics: Option<Arc<Metrics>>,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl ProbeSet {
    /// Starts one responder per distinct local address and port, and one
    /// prober per link. Every socket is bound before any task starts, so on
    /// error nothing is left running. The tasks stop when `cancel` fires or
    /// the set is dropped.
    pub async fn start(
        links: impl IntoIterator<Item = (LinkEnd, LinkEnd, LinkPorts)>,
        settings: ProberSettings,
        metrics: Option<Arc<Metrics>>,
        cancel: &CancellationToken,
    ) -> Result<Self, ProbeError> {
        let mut probers = Vec::new();
        let mut seen = BTreeSet::new();
        let mut responder_addrs = BTreeSet::new();
        for (local, remote, ports) in links {
            let link = LinkKey::from((local, remote));
            let (local_ip, _) = prober::link_addresses(&link.local, &link.remote)?;
            if !seen.insert(link.clone()) {
                return Err(ProbeError::DuplicateLink {
                    link: link.to_string(),
                });
            }
            responder_addrs.insert(SocketAddr::new(local_ip, ports.local));
            let prober = Prober::bind(
                link.local.clone(),
                link.remote.clone(),
                ports.peer,
                settings,
            )
            .await?;
            probers.push((link, prober));
        }
        let mut responders = Vec::new();
        for addr in responder_addrs {
            responders.push(Responder::bind(addr).await?);
        }

        let cancel = cancel.child_token();
        let mut tasks = Vec::with_capacity(probers.len() + responders.len());
        let mut responder_counters = Vec::with_capacity(responders.len());
        for responder in responders {
            if let Some(metrics) = &metrics {
                metrics
                    .probes
                    .responder_started(responder.local_addr(), responder.counters());
            }
            responder_counters.push((responder.local_addr(), responder.counters()));
            tasks.push(tokio::spawn(responder.run(cancel.clone())));
        }
        let mut observations = BTreeMap::new();
        for (link, prober) in probers {
            observations.insert(link, prober.subscribe());
            tasks.push(tokio::spawn(prober.run(cancel.clone())));
        }
        Ok(Self {
            observations,
            responders: responder_counters,
            metrics,
            cancel,
            tasks,
        })
    }

    /// Every link's observation receiver.
    pub fn observations(&self) -> &BTreeMap<LinkKey, watch::Receiver<Option<LocalObservation>>> {
        &self.observations
    }

    pub fn observation(&self, link: &LinkKey) -> Option<watch::Receiver<Option<LocalObservation>>> {
        self.observations.get(link).cloned()
    }

    /// Counters of each responder, by bound address.
    pub fn responder_stats(&self) -> Vec<(SocketAddr, ResponderStats)> {
        self.responders
            .iter()
            .map(|(addr, counters)| (*addr, counters.snapshot()))
            .collect()
    }

    /// Stops every task and waits for them to finish.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        for task in std::mem::take(&mut self.tasks) {
            if let Err(error) = task.await {
                tracing::warn!(%error, "probe task ended abnormally");
            }
        }
    }
}

impl Drop for ProbeSet {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(metrics) = &self.metrics {
            for (address, _) in &self.responders {
                metrics.probes.responder_stopped(*address);
            }
        }
    }
}
