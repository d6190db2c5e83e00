//! The incident history of this node (`meshctl history`, `GetHistory`).
//!
//! Two parts, neither on the probe or verdict path:
//! - the writer, an async task subscribed to the event stream (like a
//!   `WatchEvents` client) and to the pages the alert pusher sent: it
//!   groups them into incidents (`meshd_model::history`) in memory and
//!   hands what changed to the store every [`FLUSH_EVERY`];
//! - the store's own thread, which owns the redb file ([`store`]) and does
//!   every blocking read and write: batches, the caps, and the queries of
//!   `GetHistory`.
//!
//! A history that cannot be opened (another process still holds the file,
//! a directory it may not create) is logged and opened again with a
//! backoff; meshd runs on, and queries meanwhile say why there is none.

pub mod store;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::history::{HistoryQuery, Incident};
use meshd_domain::{MeshStatus, NodeId};
use meshd_model::history::{self as grouping, Grouper, Happening};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::config::HistoryConfig;
use crate::logging::{REPEAT_INTERVAL, Throttle};
use crate::metrics::Metrics;
use crate::state::Numbered;
use store::{Caps, Found, Store, StoreError};

/// How often what changed is written: at most this much of the newest
/// history is lost to a kill, and a steady mesh writes nothing at all.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Commands waiting for the store's thread; a writer that finds it full
/// keeps its changes for the next flush.
const COMMAND_QUEUE: usize = 16;

/// Incidents the store's thread keeps for a later batch while the disk
/// refuses writes; beyond this the oldest changes are dropped (and
/// counted as write errors).
const MAX_PENDING: usize = 4096;

/// How long a `GetHistory` waits for the store.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Pages waiting for the writer (the alert pusher never waits).
pub const PAGE_BUFFER: usize = 256;

/// The first wait before opening a history that could not be opened again,
/// doubled after each failure up to [`OPEN_RETRY_MAX`].
const OPEN_RETRY_FIRST: Duration = Duration::from_millis(250);
const OPEN_RETRY_MAX: Duration = Duration::from_secs(30);

/// How long the last batch and the clean-stop mark get at shutdown, within
/// the node's shutdown budget.
const CLOSE_TIMEOUT: Duration = Duration::from_millis(600);

/// Why a query got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("this node keeps no incident history (history.enabled, history.path)")]
    Off,
    #[error("the incident history is busy; try again")]
    Busy,
    #[error("the incident history cannot be read: {0}")]
    Store(String),
}

enum Command {
    Write {
        incidents: Vec<Incident>,
        next_id: u64,
    },
    Query {
        query: HistoryQuery,
        reply: oneshot::Sender<Result<Vec<Incident>, String>>,
    },
    Close {
        done: oneshot::Sender<()>,
    },
}

/// Asks this node's history; `None` inside when the node keeps none.
#[derive(Debug, Clone, Default)]
pub struct HistoryHandle {
    commands: Option<std_mpsc::SyncSender<Command>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Write { incidents, .. } => write!(f, "Write({})", incidents.len()),
            Command::Query { .. } => f.write_str("Query"),
            Command::Close { .. } => f.write_str("Close"),
        }
    }
}

impl HistoryHandle {
    /// A node that keeps no history.
    pub fn off() -> Self {
        Self { commands: None }
    }

    /// The incidents `query` admits, newest first.
    pub async fn query(&self, query: HistoryQuery) -> Result<Vec<Incident>, QueryError> {
        let commands = self.commands.as_ref().ok_or(QueryError::Off)?;
        let (reply, answer) = oneshot::channel();
        commands
            .try_send(Command::Query { query, reply })
            .map_err(|error| match error {
                std_mpsc::TrySendError::Full(_) => QueryError::Busy,
                std_mpsc::TrySendError::Disconnected(_) => QueryError::Off,
            })?;
        match tokio::time::timeout(QUERY_TIMEOUT, answer).await {
            Ok(Ok(result)) => result.map_err(QueryError::Store),
            Ok(Err(_)) => Err(QueryError::Off),
            Err(_) => Err(QueryError::Busy),
        }
    }
}

/// What the node gives the history.
#[derive(Debug)]
pub struct Inputs {
    pub node: NodeId,
    /// Subscribed before the aggregator runs, so no event is missed.
    pub events: broadcast::Receiver<Numbered>,
    pub pages: mpsc::Receiver<Happening>,
    pub status: watch::Receiver<Arc<MeshStatus>>,
    pub metrics: Arc<Metrics>,
}

/// Starts the store's thread on `config`'s file and returns the handle and
/// the writer to run until `shutdown`. With no file configured (or history
/// off) the writer only drains its inputs.
pub fn start(
    config: &HistoryConfig,
    inputs: Inputs,
    shutdown: CancellationToken,
) -> (HistoryHandle, impl Future<Output = ()> + Send + 'static) {
    let path = config.path.clone().filter(|_| config.enabled);
    let caps = Caps {
        max_bytes: config.max_bytes,
        max_age: config.max_age,
    };
    let Some(path) = path else {
        return (
            HistoryHandle::off(),
            Writer::default().run(inputs, shutdown),
        );
    };
    let (commands, received) = std_mpsc::sync_channel(COMMAND_QUEUE);
    let (opened_tx, opened) = oneshot::channel();
    let metrics = inputs.metrics.clone();
    let thread_path = path.clone();
    let spawned = std::thread::Builder::new()
        .name("meshd-history".to_owned())
        .spawn(move || store_thread(&thread_path, caps, metrics, opened_tx, received));
    if let Err(error) = spawned {
        tracing::warn!(path = %path.display(), "incident history off: cannot start its thread: {error}");
        return (
            HistoryHandle::off(),
            Writer::default().run(inputs, shutdown),
        );
    }
    let handle = HistoryHandle {
        commands: Some(commands.clone()),
    };
    let writer = Writer {
        store: Some(StoreLink {
            commands,
            opened,
            path,
        }),
    };
    (handle, writer.run(inputs, shutdown))
}

/// What the store's thread tells the writer once it opened the file.
struct Opened {
    next_id: u64,
    latest: Vec<Incident>,
    found: Found,
}

/// The writer's way to its store: the commands, the answer of the open,
/// and the file (for the log).
struct StoreLink {
    commands: std_mpsc::SyncSender<Command>,
    opened: oneshot::Receiver<Opened>,
    path: PathBuf,
}

#[derive(Default)]
struct Writer {
    store: Option<StoreLink>,
}

impl Writer {
    async fn run(self, inputs: Inputs, shutdown: CancellationToken) {
        let Inputs {
            node,
            mut events,
            mut pages,
            status,
            metrics: _,
        } = inputs;
        let Some(StoreLink {
            commands,
            opened,
            path,
        }) = self.store
        else {
            // No history: nothing to keep; the receivers go with the task.
            shutdown.cancelled().await;
            return;
        };
        let opened = tokio::select! {
            () = shutdown.cancelled() => return,
            opened = opened => opened,
        };
        let Ok(Opened {
            next_id,
            latest,
            found,
        }) = opened
        else {
            return;
        };
        let previous_run = match &found {
            Found::New => "a new history".to_owned(),
            Found::Existing { clean_stop: true } => "its previous run stopped cleanly".to_owned(),
            Found::Existing { clean_stop: false } => {
                "its previous run ended without stopping (killed, crashed, or the host lost \
                 power or rebooted)"
                    .to_owned()
            }
            Found::MovedAside { to, .. } => format!(
                "the history before was unreadable and was moved to {}",
                to.display()
            ),
        };
        tracing::info!(path = %path.display(), "incident history: {previous_run}");
        let mut grouper = Grouper::resume(node.clone(), next_id, latest);
        grouper.record(grouping::meshd_started(
            SystemTime::now(),
            &node,
            &previous_run,
        ));
        let mut pending: BTreeMap<u64, Incident> = BTreeMap::new();
        let mut flush = crate::cadence::every(FLUSH_EVERY);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                received = events.recv() => match received {
                    Ok(numbered) => {
                        if let Some(happening) = grouping::from_event(&numbered.event) {
                            grouper.record(happening);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        grouper.missed(grouping::events_missed(SystemTime::now(), &node, missed));
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                Some(page) = pages.recv() => grouper.record(page),
                _ = flush.tick() => {
                    if grouper.has_unsure() {
                        let current = status.borrow().clone();
                        if current.evaluated_at > SystemTime::UNIX_EPOCH {
                            grouper.reconcile(&current);
                        }
                    }
                    pending.extend(grouper.take_changed().into_iter().map(|i| (i.id, i)));
                    if !pending.is_empty() {
                        let incidents: Vec<Incident> = std::mem::take(&mut pending).into_values().collect();
                        match commands.try_send(Command::Write { incidents, next_id: grouper.next_id() }) {
                            Ok(()) => {}
                            Err(std_mpsc::TrySendError::Full(Command::Write { incidents, .. })) => {
                                // The store is behind: these go with the next batch.
                                pending.extend(incidents.into_iter().map(|i| (i.id, i)));
                            }
                            Err(_) => return,
                        }
                    }
                }
            }
        }
        // The last changes, then the clean-stop mark, within the budget.
        pending.extend(grouper.take_changed().into_iter().map(|i| (i.id, i)));
        let (done, closed) = oneshot::channel();
        let last = Command::Write {
            incidents: pending.into_values().collect(),
            next_id: grouper.next_id(),
        };
        let sent = tokio::task::spawn_blocking(move || {
            commands.send(last).is_ok() && commands.send(Command::Close { done }).is_ok()
        });
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
            if matches!(sent.await, Ok(true)) {
                let _ = closed.await;
            }
        })
        .await;
    }
}

/// Opens the store, tells the writer, then serves commands until every
/// sender is gone or a close.
fn store_thread(
    path: &Path,
    caps: Caps,
    metrics: Arc<Metrics>,
    opened: oneshot::Sender<Opened>,
    commands: std_mpsc::Receiver<Command>,
) {
    let mut warnings = Throttle::new(REPEAT_INTERVAL);
    let Some((mut store, found)) = open_store(path, caps, &commands, &mut warnings) else {
        return;
    };
    if let Found::MovedAside { to, why } = &found {
        tracing::warn!(
            path = %path.display(),
            moved_to = %to.display(),
            reason = %why,
            "the incident history file was unreadable or not meshd's: moved aside, a new history started"
        );
    }
    metrics.history.opened(store.file_bytes());
    let latest = store.latest().unwrap_or_default();
    let told = opened.send(Opened {
        next_id: store.next_id(),
        latest,
        found,
    });
    if told.is_err() {
        return;
    }
    let mut failed: BTreeMap<u64, Incident> = BTreeMap::new();
    while let Ok(command) = commands.recv() {
        match command {
            Command::Write { incidents, next_id } => {
                failed.extend(incidents.into_iter().map(|i| (i.id, i)));
                let batch: Vec<Incident> = std::mem::take(&mut failed).into_values().collect();
                match store.write(batch.clone(), next_id, SystemTime::now()) {
                    Ok(written) => {
                        metrics.history.set_store_bytes(written.file_bytes);
                        metrics
                            .history
                            .count_incidents_recorded(written.new_incidents);
                    }
                    Err(error) => {
                        metrics.history.count_write_error();
                        if let Some(suppressed) = warnings.admit((), Instant::now()) {
                            tracing::warn!(
                                path = %path.display(),
                                suppressed,
                                "cannot write the incident history (kept for the next batch): {error}"
                            );
                        }
                        failed.extend(batch.into_iter().map(|i| (i.id, i)));
                        while failed.len() > MAX_PENDING {
                            failed.pop_first();
                            metrics.history.count_write_error();
                        }
                    }
                }
            }
            Command::Query { query, reply } => {
                let answer = store
                    .query(&query, SystemTime::now())
                    .map_err(|e| e.to_string());
                let _ = reply.send(answer);
            }
            Command::Close { done } => {
                if let Err(error) = store.close() {
                    tracing::warn!(path = %path.display(), "cannot mark the incident history stopped cleanly: {error}");
                }
                let _ = done.send(());
                return;
            }
        }
    }
}

/// Opens the store, again and again with a backoff while it cannot be
/// opened (a killed run's file lock outlived it for a moment, a directory
/// that may not be made yet), answering queries meanwhile with why.
/// `None` once the node stops asking (a close, or every sender gone).
fn open_store(
    path: &Path,
    caps: Caps,
    commands: &std_mpsc::Receiver<Command>,
    warnings: &mut Throttle<()>,
) -> Option<(Store, Found)> {
    let mut wait = OPEN_RETRY_FIRST;
    loop {
        let error: StoreError = match Store::open(path, caps, SystemTime::now()) {
            Ok(opened) => return Some(opened),
            Err(error) => error,
        };
        if let Some(suppressed) = warnings.admit((), Instant::now()) {
            tracing::warn!(
                path = %path.display(),
                suppressed,
                retry_in = ?wait,
                "cannot open the incident history (trying again): {error}"
            );
        }
        let until = Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match commands.recv_timeout(left) {
                Ok(Command::Query { reply, .. }) => {
                    let _ = reply.send(Err(format!("it is not open ({error}); meshd tries again")));
                }
                Ok(Command::Close { done }) => {
                    let _ = done.send(());
                    return None;
                }
                // The writer sends nothing before the store opened.
                Ok(Command::Write { .. }) => {}
                Err(std_mpsc::RecvTimeoutError::Timeout) => break,
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
        wait = wait.saturating_mul(2).min(OPEN_RETRY_MAX);
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::identity;

    use super::*;

    #[tokio::test]
    async fn a_history_another_run_still_holds_is_opened_once_it_is_let_go() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("history.redb");
        let config = HistoryConfig {
            enabled: true,
            path: Some(path.clone()),
            ..HistoryConfig::default()
        };
        let caps = Caps {
            max_bytes: config.max_bytes,
            max_age: config.max_age,
        };
        let (held, _) = Store::open(&path, caps, SystemTime::now()).expect("open");
        let (_events_tx, events) = broadcast::channel(16);
        let (_pages_tx, pages) = mpsc::channel(16);
        let me = identity("a", 1);
        let (_status_tx, status) = watch::channel(Arc::new(crate::state::placeholder_status(&me)));
        let inputs = Inputs {
            node: me.id.clone(),
            events,
            pages,
            status,
            metrics: Arc::new(Metrics::new(&me)),
        };
        let shutdown = CancellationToken::new();
        let (handle, writer) = start(&config, inputs, shutdown.clone());
        let writer = tokio::spawn(writer);
        let refused = handle.query(HistoryQuery::default()).await;
        assert!(
            matches!(refused, Err(QueryError::Store(ref why)) if why.contains("not open")),
            "{refused:?}"
        );
        drop(held);
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(error) = handle.query(HistoryQuery::default()).await {
            assert!(Instant::now() < deadline, "still not open: {error}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        shutdown.cancel();
        writer.await.expect("the writer ends");
    }
}
