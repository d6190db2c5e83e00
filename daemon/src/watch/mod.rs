//! Local watchers: what this node notices about itself. Each reads the OS
//! on its own tick and publishes what changed; judgements that need the
//! mesh (hung jobs, the members' boots, saturation) are the node core's,
//! from what these publish.

pub mod bridge;
pub mod carrier;
pub mod cpu;
pub mod facts;
pub mod memory;
pub mod network;
pub mod processes;
pub mod routes;

use std::sync::Arc;

use crate::cadence::Ticker;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// What woke a watcher that works on a tick and follows the config.
#[derive(Debug)]
pub enum Wake {
    Tick,
    Reconfigured(Arc<Config>),
}

/// The next tick or config change; `None` at shutdown, or when the config
/// is gone (the node is stopping).
pub async fn next_wake(
    tick: &mut Ticker,
    configs: &mut watch::Receiver<Arc<Config>>,
    shutdown: &CancellationToken,
) -> Option<Wake> {
    tokio::select! {
        () = shutdown.cancelled() => None,
        _ = tick.tick() => Some(Wake::Tick),
        changed = configs.changed() => {
            changed.ok().map(|()| Wake::Reconfigured(configs.borrow_and_update().clone()))
        }
    }
}

/// Publishes `value` only when it differs from what `tx` holds, so
/// receivers wake only for a change.
pub fn publish<T: PartialEq>(tx: &watch::Sender<T>, value: T) {
    tx.send_if_modified(|current| {
        let changed = *current != value;
        if changed {
            *current = value;
        }
        changed
    });
}
