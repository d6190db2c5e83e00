//! Live reload: the config file is watched (its directory, since editors
//! save by writing a new file and renaming it over the old one) and SIGHUP
//! reloads too. A new config is loaded and validated first; a bad one is
//! refused with every problem logged and announced, and the running config
//! stays in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd_domain::{Event, EventKind, NodeId};
use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, TlsConfig};
use crate::metrics::Metrics;
use crate::state::Notices;

/// Editors write a file in several steps; wait for them to finish.
const SETTLE: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub struct ConfigReload {
    pub path: PathBuf,
    pub hostname: String,
    pub configs: watch::Sender<Arc<Config>>,
    /// Where a refusal goes, for the event stream.
    pub notices: Notices,
    pub node: NodeId,
    pub hangups: Hangups,
    /// Whether the last read succeeded, and when the config in force was read.
    pub metrics: Arc<Metrics>,
}

/// Why a reload was asked for, for the log.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    FileChanged,
    Hangup,
}

impl ConfigReload {
    pub async fn run(mut self, shutdown: CancellationToken) {
        let (tx, mut triggers) = mpsc::channel(16);
        // Kept alive for the whole loop: dropping it stops the watching.
        let _watcher = match watch_file(&self.path, tx.clone()) {
            Ok(watcher) => Some(watcher),
            Err(err) => {
                tracing::warn!(path = %self.path.display(), "cannot watch the config file, SIGHUP still reloads: {err}");
                None
            }
        };
        loop {
            let trigger = tokio::select! {
                () = shutdown.cancelled() => return,
                Some(trigger) = triggers.recv() => trigger,
                () = self.hangups.next() => Trigger::Hangup,
            };
            // Collapse the burst of events one save makes into one reload.
            tokio::time::sleep(SETTLE).await;
            while triggers.try_recv().is_ok() {}
            self.reload(trigger);
        }
    }

    fn reload(&self, trigger: Trigger) {
        let now = SystemTime::now();
        let refuse = |problems: String| {
            self.metrics.config.refused();
            tracing::error!(path = %self.path.display(), ?trigger, "config refused, the running config stays in force:\n{problems}");
            // A full queue (a burst of refusals) loses the event, not the log line.
            let _ = self.notices.try_send(Event {
                at: now,
                observer: self.node.clone(),
                kind: EventKind::ConfigRejected,
                subject: "config".to_owned(),
                summary: format!(
                    "config refused ({}); the running config stays in force",
                    problems.lines().next().unwrap_or_default()
                ),
                detail: None,
            });
        };
        match Config::load(&self.path, &self.hostname) {
            Err(err) => refuse(err.to_string()),
            Ok(mut config) => {
                self.metrics.config.reloaded(now);
                let current = self.configs.borrow().clone();
                if config != *current {
                    for warning in config.warnings() {
                        tracing::warn!(path = %self.path.display(), "config: {warning}");
                    }
                }
                for (what, restart) in restart_only(&current, &mut config) {
                    tracing::warn!(
                        ?trigger,
                        "{what} changes only on restart; keeping {restart}"
                    );
                }
                // What runs must hold every rule too: peers added to a node
                // started alone need the certificates only a restart loads.
                let problems = config.validate();
                if !problems.is_empty() {
                    let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
                    refuse(format!(
                        "with the settings that change only on restart kept: {}",
                        problems.join("; ")
                    ));
                    return;
                }
                if config == *current {
                    // Whoever sent SIGHUP wants to hear that it was read.
                    match trigger {
                        Trigger::Hangup => {
                            tracing::info!(path = %self.path.display(), "config read on SIGHUP: unchanged")
                        }
                        Trigger::FileChanged => {
                            tracing::debug!("config file touched, content unchanged")
                        }
                    }
                } else {
                    self.configs.send_replace(Arc::new(config));
                }
            }
        }
    }
}

/// Keeps what only a restart may change at its running value, and says
/// what was kept.
fn restart_only(current: &Config, new: &mut Config) -> Vec<(&'static str, String)> {
    let mut kept = Vec::new();
    if new.node.id != current.node.id {
        kept.push(("node.id", current.node.id.to_string()));
        new.node.id = current.node.id.clone();
    }
    if new.listen != current.listen {
        let mesh = current
            .listen
            .mesh
            .map_or_else(|| "none".to_owned(), |m| m.to_string());
        kept.push((
            "listen",
            format!(
                "gRPC {}, metrics {} and mesh {mesh}",
                current.listen.grpc, current.listen.metrics
            ),
        ));
        new.listen = current.listen.clone();
    }
    // Certificates are loaded once, at start; the serials revoked apply at
    // once (a stolen key must not wait for a restart).
    let live = TlsConfig {
        revoked_serials: new.tls.revoked_serials.clone(),
        ..current.tls.clone()
    };
    if new.tls != live {
        kept.push(("tls", "the certificates loaded at start".to_owned()));
        new.tls = live;
    }
    // The history's file is opened once, at start; `meshd run` filled in
    // its default path, which the file as read does not name.
    let state_directory = std::env::var("STATE_DIRECTORY").ok();
    let as_started = new
        .clone()
        .with_default_history_path(state_directory.as_deref())
        .history;
    if as_started != current.history && new.history != current.history {
        let path = current
            .history
            .path
            .as_ref()
            .filter(|_| current.history.enabled)
            .map_or_else(|| "none".to_owned(), |p| p.display().to_string());
        kept.push(("history", format!("the history opened at start ({path})")));
    }
    new.history = current.history.clone();
    kept
}

fn watch_file(
    path: &Path,
    triggers: mpsc::Sender<Trigger>,
) -> notify::Result<notify::RecommendedWatcher> {
    let name = path.file_name().map(ToOwned::to_owned);
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        let ours = event
            .paths
            .iter()
            .any(|p| p.file_name().map(ToOwned::to_owned) == name);
        if ours && !event.kind.is_access() {
            // Full means a reload is already pending: this one adds nothing.
            let _ = triggers.try_send(Trigger::FileChanged);
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// SIGHUP, watched from before the node starts so that a reload request
/// sent during start-up is not lost (or, without a handler, fatal).
#[derive(Debug)]
pub struct Hangups {
    #[cfg(unix)]
    signals: Option<tokio::signal::unix::Signal>,
}

impl Hangups {
    /// Must run inside the runtime.
    pub fn install() -> Self {
        #[cfg(unix)]
        {
            let signals =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                    Ok(signal) => Some(signal),
                    Err(err) => {
                        tracing::warn!(
                            "cannot watch SIGHUP, reloads follow file changes only: {err}"
                        );
                        None
                    }
                };
            Self { signals }
        }
        #[cfg(not(unix))]
        Self {}
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        if let Some(signals) = &mut self.signals
            && signals.recv().await.is_some()
        {
            return;
        }
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_id_listen_addresses_and_certificates_wait_for_a_restart() {
        let current = Config::embedded_default("a");
        let mut new = Config::embedded_default("b");
        new.listen.grpc = "127.0.0.1:1".parse().expect("addr");
        new.tls.insecure = true;
        new.tls.revoked_serials = vec!["01ab".to_owned()];
        new.report.interval = Duration::from_millis(500);
        let kept = restart_only(&current, &mut new);
        assert_eq!(
            kept.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            ["node.id", "listen", "tls"]
        );
        assert_eq!(new.tls.insecure, current.tls.insecure);
        assert_eq!(
            new.tls.revoked_serials,
            ["01ab"],
            "revocations apply at once"
        );
        assert_eq!(new.node.id, current.node.id);
        assert_eq!(new.listen, current.listen);
        assert_eq!(
            new.report.interval,
            Duration::from_millis(500),
            "the rest applies"
        );
    }
}
