//! The served ports' refusals: connections the HTTP port and the local
//! gRPC listener closed at once, over their cap or to keep the file
//! descriptors' reserve (see `crate::ports`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::catalogue as c;
use super::exposition::{Exposition, as_f64};

/// A listener bounded by `crate::ports`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// Metrics, health and the mesh page.
    Http,
    /// meshctl's gRPC listener.
    LocalGrpc,
}

impl Listener {
    const ALL: [Listener; 2] = [Listener::Http, Listener::LocalGrpc];

    pub fn as_str(self) -> &'static str {
        match self {
            Listener::Http => "http",
            Listener::LocalGrpc => "grpc_local",
        }
    }
}

/// Why a connection was closed as soon as it was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The listener held its cap of connections.
    Cap,
    /// The process's open descriptors were within the reserve of the limit.
    Descriptors,
}

impl Refusal {
    const ALL: [Refusal; 2] = [Refusal::Cap, Refusal::Descriptors];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Cap => "cap",
            Refusal::Descriptors => "descriptors",
        }
    }
}

#[derive(Debug, Default)]
pub struct ListenerSeries {
    /// By listener, then refusal, in the order of their `ALL`.
    refused: [[AtomicU64; 2]; 2],
}

impl ListenerSeries {
    pub fn refused(&self, listener: Listener, refusal: Refusal) {
        self.refused[listener as usize][refusal as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn write(&self, out: &mut Exposition) {
        let mut family = out.family(&c::CONNECTIONS_REFUSED_TOTAL);
        for listener in Listener::ALL {
            for refusal in Refusal::ALL {
                let n = self.refused[listener as usize][refusal as usize].load(Ordering::Relaxed);
                family.sample(&[listener.as_str(), refusal.as_str()], as_f64(n));
            }
        }
    }
}
