//! Keeps each link's prober running: a cable whose address is not there yet
//! (port unconfigured, interface down at boot) is retried instead of
//! stopping the daemon, and its link is judged from the other end meanwhile.

use std::sync::Arc;
use std::time::Duration;

use meshd_proto::domain::LinkEnd;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{LinkPorts, ProbeSet, ProberSettings};
use crate::metrics::Metrics;
use meshd_model::verdict::LocalObservation;

/// How long to wait before trying to bind a link's sockets again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Starts probing one link and returns its observations; `None` until the
/// prober is running. Ends with `shutdown`.
pub fn supervise_link(
    local: LinkEnd,
    remote: LinkEnd,
    ports: LinkPorts,
    expected_speed_bps: Option<u64>,
    settings: ProberSettings,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> watch::Receiver<Option<LocalObservation>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let link = format!("{local} -> {remote}");
        let set = loop {
            let started = ProbeSet::start(
                [(local.clone(), remote.clone(), ports)],
                settings,
                Some(metrics.clone()),
                &shutdown,
            )
            .await;
            match started {
                Ok(set) => break set,
                Err(error) => {
                    tracing::warn!(%link, %error, "cannot probe this link yet; retrying in {RETRY_AFTER:?}");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RETRY_AFTER) => {}
            }
        };
        tracing::info!(%link, "probing");
        let Some(mut observations) = set.observations().values().next().cloned() else {
            return;
        };
        loop {
            let mut latest = observations.borrow_and_update().clone();
            // The prober measures; what the cable should do comes from the config.
            if let Some(local) = &mut latest {
                local.observation.expected_speed_bps = expected_speed_bps;
            }
            tx.send_replace(latest);
            tokio::select! {
                () = shutdown.cancelled() => break,
                changed = observations.changed() => if changed.is_err() { break },
            }
        }
        set.shutdown().await;
    });
    rx
}
