//! One running meshd: binds its listeners, starts the aggregator, the gRPC
//! server and the HTTP server, and stops them all on one signal. Used by
//! `meshd run`, and by tests that need real nodes in one process.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd_domain::{Incarnation, NodeIdentity};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use meshd_model::peers::{Path, PeerBook};
use tokio::sync::Notify;

use crate::aggregator::{Aggregator, Feeds, Handles};
use crate::alert::AlertPusher;
use crate::certificates::Certificates;
use crate::config::reload::{ConfigReload, Hangups};
use crate::config::{Config, settings};
use crate::grpc::cables::{CableEnd, CableListeners};
use crate::grpc::{self, GrpcError, MeshService, PeerService, ReadOnly, TopologyService};
use crate::metrics::{Listener, Metrics};
use crate::ports::{self, Descriptors, Gate};
use crate::probe::Probes;
use crate::probe::rdma::RdmaProbes;
use crate::state::{MeshState, Notices, SharedBook};
use crate::transport::path_label;
use crate::transport::streams::{Route, Streams};
use crate::transport::tls::{self, MeshTls, TlsError};
use crate::watch::{bridge, carrier, cpu, facts, memory};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The io error is part of the message, not a `source`, so that an
    /// error chain prints it once.
    #[error(
        "cannot listen for {what} on {addr}: {error}{}",
        listen_hint(what, error)
    )]
    Listen {
        what: &'static str,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error(transparent)]
    Grpc(#[from] GrpcError),
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("cannot set up alerting: {0}")]
    Alerting(#[from] crate::alert::TargetError),
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Grpc(#[from] GrpcError),
    #[error("a node task panicked: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A started node. Dropping it does not stop it; call [`RunningNode::shutdown`]
/// then [`RunningNode::wait`].
#[derive(Debug)]
pub struct RunningNode {
    pub identity: NodeIdentity,
    /// The read-only listener (meshctl on this node).
    pub grpc_addr: SocketAddr,
    /// The mesh listener (peers, remote tools), when configured.
    pub mesh_addr: Option<SocketAddr>,
    pub metrics_addr: SocketAddr,
    pub state: MeshState,
    /// The config in force; every component follows it.
    configs: watch::Sender<Arc<Config>>,
    /// Where notices for the event stream go (a config refused); counted
    /// and streamed like the looks' events.
    pub notices: Notices,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    tasks: NodeTasks,
}

/// How long the node's tasks get to finish once it is asked to stop (or
/// once one of them failed). Past it, the ones still running are aborted
/// and named in the log: a graceful end that waits on a peer which cannot
/// answer (a pulled cable: an HTTP/2 shutdown waiting for its keepalive to
/// time out, a send the kernel retransmits) must not hold a restart up.
/// A second, so that a stop and a start fit in the peers' 2-s restart
/// grace (`meshd_model::verdict::RESTART_GRACE`): a restart during a cut
/// is then no dead node.
pub const SHUTDOWN_BUDGET: Duration = Duration::from_secs(1);

/// The node's tasks, each with a name for the log.
#[derive(Debug, Default)]
struct NodeTasks {
    set: JoinSet<Result<(), ServeError>>,
    names: HashMap<Id, &'static str>,
}

impl NodeTasks {
    fn spawn(
        &mut self,
        name: &'static str,
        task: impl Future<Output = Result<(), ServeError>> + Send + 'static,
    ) {
        let handle = self.set.spawn(task);
        self.names.insert(handle.id(), name);
    }

    /// The next task to end, with its name and outcome; `None` once all
    /// have ended.
    async fn join_next(&mut self) -> Option<(&'static str, Result<(), ServeError>)> {
        let joined = self.set.join_next_with_id().await?;
        let (id, result) = match joined {
            Ok((id, result)) => (id, result),
            Err(error) => (error.id(), Err(ServeError::from(error))),
        };
        Some((self.names.remove(&id).unwrap_or("unnamed"), result))
    }

    /// Waits until every task has ended; the first failure cancels
    /// `shutdown` and is the outcome. Once `shutdown` is cancelled, the
    /// tasks get `budget`; those still running then are aborted and logged
    /// by name (and returned).
    async fn wait(
        &mut self,
        shutdown: &CancellationToken,
        budget: Duration,
    ) -> (Result<(), ServeError>, Vec<&'static str>) {
        let mut outcome = Ok(());
        let mut abandoned = Vec::new();
        let budget_spent = async {
            shutdown.cancelled().await;
            tokio::time::sleep(budget).await;
        };
        tokio::pin!(budget_spent);
        loop {
            tokio::select! {
                joined = self.join_next() => {
                    let Some((task, result)) = joined else { break };
                    tracing::debug!(task, "node task ended");
                    if let Err(err) = result {
                        shutdown.cancel();
                        if outcome.is_ok() {
                            outcome = Err(err);
                        }
                    }
                }
                () = &mut budget_spent => {
                    abandoned = self.abort_rest().await;
                    tracing::warn!(
                        ?abandoned,
                        ?budget,
                        "tasks still finishing when the shutdown budget ran out were aborted"
                    );
                    break;
                }
            }
        }
        (outcome, abandoned)
    }

    /// Aborts every task still running, waits until they are dropped (their
    /// sockets closed), and returns their names.
    async fn abort_rest(&mut self) -> Vec<&'static str> {
        let mut abandoned: Vec<&'static str> = self.names.drain().map(|(_, name)| name).collect();
        abandoned.sort_unstable();
        self.set.shutdown().await;
        abandoned
    }
}

/// This run's identity. The incarnation starts at the start time, so a
/// restart normally carries a larger one than the run before; after the
/// clock stepped back, the first peer that remembers a larger one makes
/// the node take one larger still (`NodeCore::reincarnate`), so a clock
/// never locks a node out.
pub fn identity(config: &Config, hostname: &str, started: SystemTime) -> NodeIdentity {
    let nanos = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(1)
        .max(1);
    NodeIdentity {
        id: config.node.id.clone(),
        incarnation: Incarnation(nanos),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        hostname: hostname.to_owned(),
    }
}

/// A node whose ports are taken and whose certificates are loaded but
/// which does not run yet: peers that connect meanwhile wait in the listen
/// queue instead of being refused. The demo binds every node before
/// starting any, so that no node's first streams fail (and warn) for want
/// of a peer that is still starting.
#[derive(Debug)]
pub struct BoundNode {
    tls: Option<MeshTls>,
    grpc_listener: TcpListener,
    http_listener: TcpListener,
    mesh_listener: Option<TcpListener>,
    grpc_addr: SocketAddr,
    metrics_addr: SocketAddr,
    mesh_addr: Option<SocketAddr>,
}

impl BoundNode {
    /// Loads the certificates and binds every listener before anything
    /// runs, so a taken port or a bad certificate fails the start with a
    /// clear error instead of a half-started node.
    pub async fn bind(config: &Config) -> Result<Self, StartError> {
        let tls = MeshTls::for_config(config)?;
        for warning in tls.iter().flat_map(MeshTls::warnings) {
            tracing::warn!("{warning}");
        }
        let grpc_listener = bind("gRPC", config.listen.grpc).await?;
        let http_listener = bind("metrics", config.listen.metrics).await?;
        let (mesh_listener, mesh_addr) = match config.listen.mesh {
            Some(addr) => {
                let listener = bind("the mesh", addr).await?;
                let local = local_addr("the mesh", addr, &listener)?;
                (Some(listener), Some(local))
            }
            None => (None, None),
        };
        Ok(Self {
            tls,
            grpc_addr: local_addr("gRPC", config.listen.grpc, &grpc_listener)?,
            metrics_addr: local_addr("metrics", config.listen.metrics, &http_listener)?,
            grpc_listener,
            http_listener,
            mesh_listener,
            mesh_addr,
        })
    }
}

impl RunningNode {
    /// Binds the node's ports, then starts it.
    pub async fn start(config: &Config, hostname: &str) -> Result<Self, StartError> {
        Self::start_bound(BoundNode::bind(config).await?, config, hostname).await
    }

    /// Starts a node on the ports it has bound (`config.listen` was used
    /// for that).
    pub async fn start_bound(
        bound: BoundNode,
        config: &Config,
        hostname: &str,
    ) -> Result<Self, StartError> {
        warn_if_insecure(config);
        // Before anything opens many descriptors; the listeners keep the
        // reserve free for the watchers.
        let descriptors = Descriptors::raise();
        let identity = identity(config, hostname, SystemTime::now());
        let metrics = Arc::new(Metrics::new(&identity));
        metrics.set_insecure(config.tls.insecure);
        let shutdown = CancellationToken::new();
        // The config in force: every component follows it (live reload).
        let (configs, _) = watch::channel(Arc::new(config.clone()));
        let book = peer_book(config);
        let book_changed = Arc::new(Notify::new());
        let (certificate_alarms, certificate_alarms_rx) = watch::channel(Vec::new());
        let (route_alarms, route_alarms_rx) = watch::channel(Vec::new());
        let mut feeds = feeds(
            &configs,
            &identity,
            &book,
            &book_changed,
            &metrics,
            &shutdown,
        );
        feeds.local_alarms.push(certificate_alarms_rx);
        feeds.local_alarms.push(route_alarms_rx);
        let (aggregator, handles) = Aggregator::new(config, identity.clone(), feeds);
        let Handles {
            state,
            outgoing,
            notices,
        } = handles;
        // Subscribed before the aggregator runs, so the history misses
        // nothing; pages reach it from the alert pusher, which never waits.
        let (pages, pages_rx) = tokio::sync::mpsc::channel(crate::history::PAGE_BUFFER);
        let (history, history_writer) = crate::history::start(
            &config.history,
            crate::history::Inputs {
                node: identity.id.clone(),
                events: state.subscribe_events(),
                pages: pages_rx,
                status: state.status.clone(),
                metrics: metrics.clone(),
            },
            shutdown.clone(),
        );
        // Its jobs are the status's: it starts once the status exists.
        crate::watch::routes::spawn(
            identity.id.clone(),
            configs.subscribe(),
            state.status.clone(),
            route_alarms,
            shutdown.clone(),
        );
        let peer = PeerService::new(
            outgoing.identity.clone(),
            book,
            book_changed,
            Path::Management,
            config.tls.insecure,
            shutdown.clone(),
        );
        // Before any task starts: an unreadable credential stops the start.
        let pusher = AlertPusher::new(
            identity.id.clone(),
            &config.alerting.alertmanagers,
            config.alerting.resend_interval,
            metrics.clone(),
        )?
        .with_pages(pages);
        let mut tasks = NodeTasks::default();
        tasks.spawn("incident history", run_to_end(history_writer));
        if let Some(tls) = &bound.tls {
            let certificates = tls.certificates().clone();
            metrics.watch_certificates(certificates.clone());
            tasks.spawn(
                "certificates",
                run_to_end(follow_certificates(
                    certificates,
                    certificate_alarms,
                    configs.subscribe(),
                    shutdown.clone(),
                )),
            );
        }
        tasks.spawn(
            "aggregator",
            run_to_end(aggregator.run(configs.subscribe(), shutdown.clone())),
        );
        tasks.spawn(
            "report streams and cable listeners",
            follow_paths(
                configs.subscribe(),
                Streams::new(
                    outgoing,
                    bound.tls.clone(),
                    metrics.clone(),
                    shutdown.clone(),
                ),
                CableListeners::new(bound.tls.clone(), peer.clone(), shutdown.clone()),
                shutdown.clone(),
            ),
        );
        tasks.spawn(
            "alert pusher",
            run_to_end(pusher.run(state.status.clone(), shutdown.clone())),
        );
        let served = Served {
            state: &state,
            configs: &configs,
            metrics: &metrics,
            peer,
            shutdown: &shutdown,
            descriptors,
            history,
        };
        let (grpc_addr, mesh_addr, metrics_addr) = served.spawn(bound, &mut tasks)?;
        tracing::info!(
            node = %identity.id,
            incarnation = identity.incarnation.0,
            grpc = %grpc_addr,
            mesh = ?mesh_addr,
            metrics = %metrics_addr,
            page = %crate::http::page_url(metrics_addr),
            members = config.members().len(),
            "meshd started"
        );
        Ok(Self {
            identity,
            grpc_addr,
            mesh_addr,
            metrics_addr,
            state,
            configs,
            notices,
            metrics,
            shutdown,
            tasks,
        })
    }

    /// Reloads `path` when it changes on disk (editors replace files by
    /// rename, so the directory is watched) and on SIGHUP. A config that
    /// does not load is refused with the reasons, and the running one stays.
    pub fn watch_config(&mut self, path: PathBuf, hostname: String, hangups: Hangups) {
        let reload = ConfigReload {
            path,
            hostname,
            configs: self.configs.clone(),
            notices: self.notices.clone(),
            node: self.identity.id.clone(),
            hangups,
            metrics: self.metrics.clone(),
        };
        let shutdown = self.shutdown.clone();
        self.tasks.spawn("config reload", async move {
            reload.run(shutdown).await;
            Ok(())
        });
    }

    /// Asks every task to finish: servers stop accepting, in-flight requests
    /// complete, event streams end, all within [`SHUTDOWN_BUDGET`].
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Waits until every task has finished; the first failure stops the
    /// rest. Once the node is stopping (asked to, or a task failed), its
    /// tasks get [`SHUTDOWN_BUDGET`]; those still running then are aborted
    /// and logged by name.
    pub async fn wait(mut self) -> Result<(), ServeError> {
        let (outcome, _abandoned) = self.tasks.wait(&self.shutdown, SHUTDOWN_BUDGET).await;
        outcome
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Listen { what, addr, error })
}

/// What to do when a port is taken: the usual culprit is a meshd already
/// running, as a service or by hand.
fn listen_hint(what: &str, error: &std::io::Error) -> String {
    if error.kind() != std::io::ErrorKind::AddrInUse {
        return String::new();
    }
    let key = if what == "gRPC" { "grpc" } else { "metrics" };
    format!(
        "; another meshd (or another program) holds the port: stop it (`sudo systemctl stop \
         meshd`, or `sudo launchctl bootout system/io.meshd.agent`), or give this one another \
         port with listen.{key} in its config"
    )
}

fn local_addr(
    what: &'static str,
    addr: SocketAddr,
    listener: &TcpListener,
) -> Result<SocketAddr, StartError> {
    listener
        .local_addr()
        .map_err(|error| StartError::Listen { what, addr, error })
}

/// A task of the node that ends without an error of its own.
async fn run_to_end(task: impl Future<Output = ()>) -> Result<(), ServeError> {
    task.await;
    Ok(())
}

fn warn_if_insecure(config: &Config) {
    if config.tls.insecure && !config.peers.is_empty() {
        tracing::warn!(
            "tls.insecure: reports between nodes are neither encrypted nor authenticated; anyone on the management network can forge them"
        );
    }
}

/// Publishes the certificate alarms, and revokes what each config in force
/// revokes (`tls.revoked_serials` applies on reload: open connections of a
/// revoked certificate end on their next read or write) and forgets the
/// members it removed.
async fn follow_certificates(
    certificates: Arc<Certificates>,
    alarms: watch::Sender<Vec<meshd_domain::Alarm>>,
    mut configs: watch::Receiver<Arc<Config>>,
    shutdown: CancellationToken,
) {
    let revocations = async {
        while configs.changed().await.is_ok() {
            let config = configs.borrow_and_update().clone();
            let serials = &config.tls.revoked_serials;
            tracing::info!(revoked = serials.len(), "certificate revocations in force");
            certificates.revoke(serials);
            certificates.keep_only(&config.members());
        }
    };
    tokio::select! {
        () = certificates.publish(alarms, shutdown.clone()) => {}
        () = revocations => {}
        () = shutdown.cancelled() => {}
    }
}

/// A peer book for this config's membership.
fn peer_book(config: &Config) -> SharedBook {
    Arc::new(std::sync::Mutex::new(PeerBook::new(
        config.node.id.clone(),
        config.members().into_iter().collect(),
        settings::book(config),
    )))
}

/// Starts the probes and the local watchers: everything the aggregator
/// reads besides the peer book.
fn feeds(
    configs: &watch::Sender<Arc<Config>>,
    identity: &NodeIdentity,
    book: &SharedBook,
    book_changed: &Arc<Notify>,
    metrics: &Arc<Metrics>,
    shutdown: &CancellationToken,
) -> Feeds {
    let config = configs.borrow().clone();
    let node = &identity.id;
    let probes = Probes::start(
        crate::probe::probed_links(&config, node),
        crate::probe::settings(&config),
        metrics.clone(),
        shutdown.clone(),
    );
    let rdma = RdmaProbes::start(
        settings::expected_links(&config, node),
        crate::probe::rdma::settings(&config),
        book.clone(),
        shutdown.clone(),
    );
    let facts = facts::spawn(
        node.clone(),
        configs.subscribe(),
        rdma.unsupported(),
        metrics.clone(),
        shutdown.clone(),
    );
    let bridge_alarms = bridge::spawn(
        configs.subscribe(),
        facts.facts.clone(),
        node.clone(),
        metrics.clone(),
        shutdown.clone(),
    );
    // Storm alarms explain CPU spikes.
    let cpu = cpu::spawn(
        node.clone(),
        configs.subscribe(),
        vec![bridge_alarms.clone()],
        facts.facts.clone(),
        metrics.clone(),
        shutdown.clone(),
    );
    // Its thread ends at shutdown; nothing waits for it (it reads with a
    // timeout, so it never holds the node's stop).
    let (carriers, _reader) = carrier::spawn(node.clone(), configs.subscribe(), shutdown.clone());
    let memory_alarms = memory::spawn(
        node.clone(),
        configs.subscribe(),
        cpu.samples.clone(),
        metrics.clone(),
        shutdown.clone(),
    );
    Feeds {
        book: book.clone(),
        book_changed: book_changed.clone(),
        probes,
        rdma,
        local_alarms: vec![bridge_alarms, cpu.alarms, facts.alarms, memory_alarms],
        facts: facts.facts,
        port_counters: facts.counters,
        samples: cpu.samples,
        carriers,
    }
}

/// What the node serves: gRPC on the local and mesh listeners, metrics and
/// the page over HTTP.
struct Served<'a> {
    state: &'a MeshState,
    configs: &'a watch::Sender<Arc<Config>>,
    metrics: &'a Arc<Metrics>,
    peer: PeerService,
    shutdown: &'a CancellationToken,
    descriptors: Descriptors,
    history: crate::history::HistoryHandle,
}

impl Served<'_> {
    /// Serves on the bound listeners; returns the local gRPC, mesh and
    /// metrics addresses.
    fn spawn(
        self,
        bound: BoundNode,
        tasks: &mut NodeTasks,
    ) -> Result<(SocketAddr, Option<SocketAddr>, SocketAddr), StartError> {
        let shutdown = self.shutdown;
        let read_only = ReadOnly {
            mesh: MeshService::new(
                self.state.clone(),
                shutdown.clone(),
                self.history.clone(),
                bound
                    .mesh_listener
                    .as_ref()
                    .map(|_| grpc::history::MeshReach {
                        configs: self.configs.subscribe(),
                        tls: bound.tls.clone(),
                    }),
            ),
            topology: TopologyService::new(self.state.clone(), self.configs.subscribe()),
        };
        let gate = |listener, which, cap, descriptors| {
            Gate::new(listener, which, cap, descriptors, self.metrics.clone())
        };
        let local = grpc::serve_local(
            gate(
                bound.grpc_listener,
                Listener::LocalGrpc,
                ports::LOCAL_GRPC_MAX_CONNECTIONS,
                self.descriptors,
            )
            .evicting_silent(),
            read_only.clone(),
            shutdown.clone(),
        )?;
        tasks.spawn("local gRPC server", async move { Ok(local.await?) });
        if let Some(listener) = bound.mesh_listener {
            let incoming = tls::incoming(listener, bound.tls.clone(), shutdown.clone());
            let mesh = grpc::serve_mesh(incoming, read_only, self.peer, shutdown.clone())?;
            tasks.spawn("mesh gRPC server", async move { Ok(mesh.await?) });
        }
        let router = crate::http::router(
            self.metrics.clone(),
            self.state.clone(),
            shutdown.clone(),
            bound.grpc_addr,
            self.history,
        );
        let http = gate(
            bound.http_listener,
            Listener::Http,
            ports::HTTP_MAX_CONNECTIONS,
            self.descriptors.keeping(ports::LOCAL_GRPC_DESCRIPTOR_SHARE),
        );
        tasks.spawn(
            "HTTP server",
            run_to_end(crate::http::serve(http, router, shutdown.clone())),
        );
        Ok((bound.grpc_addr, bound.mesh_addr, bound.metrics_addr))
    }
}

/// Where this node's report streams go, for `config`: each peer's
/// management address, and the peer's end of every cable to it.
pub fn routes(config: &Config) -> Vec<Route> {
    let management = config.peers.iter().map(|p| Route {
        peer: p.id.clone(),
        path: "management".to_owned(),
        address: p.address.clone(),
    });
    let cables = config.links.iter().map(|link| Route {
        peer: link.peer.clone(),
        path: path_label(link.local_iface.as_deref(), link.local_address),
        address: link.peer_probe_addr(&config.probe).to_string(),
    });
    management.chain(cables).collect()
}

/// Keeps the report streams and the cable listeners in line with the
/// config in force.
async fn follow_paths(
    mut configs: watch::Receiver<Arc<Config>>,
    mut streams: Streams,
    mut cables: CableListeners,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    loop {
        let config = configs.borrow_and_update().clone();
        streams.follow(routes(&config));
        cables.follow(CableEnd::all(&config));
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = configs.changed() => if changed.is_err() { break },
        }
    }
    cables.stopped().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// Sets its flag when dropped: the task holding it was dropped.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A task that ends when asked and one that never does (a graceful
    /// end waiting on a peer behind a pulled cable): the wait ends when the
    /// budget is spent, the stubborn task is dropped, and it is the one
    /// named as abandoned.
    #[tokio::test(start_paused = true)]
    async fn a_task_that_outlasts_the_budget_is_aborted_and_named() {
        let shutdown = CancellationToken::new();
        let mut tasks = NodeTasks::default();
        let prompt = shutdown.clone();
        tasks.spawn("prompt", async move {
            prompt.cancelled().await;
            Ok(())
        });
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        tasks.spawn("stubborn", async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok(())
        });
        shutdown.cancel();
        let started = tokio::time::Instant::now();
        let budget = Duration::from_secs(2);
        let (outcome, abandoned) = tasks.wait(&shutdown, budget).await;
        outcome.expect("no task failed");
        assert_eq!(started.elapsed(), budget);
        assert_eq!(abandoned, ["stubborn"]);
        assert!(dropped.load(Ordering::SeqCst), "the stubborn task runs on");
        assert!(tasks.names.is_empty() && tasks.set.is_empty());
    }

    /// Without a stop, a failing task stops the rest and is the outcome;
    /// the others end within the budget without being aborted.
    #[tokio::test(start_paused = true)]
    async fn a_failing_task_stops_the_rest() {
        let shutdown = CancellationToken::new();
        let mut tasks = NodeTasks::default();
        let prompt = shutdown.clone();
        tasks.spawn("prompt", async move {
            prompt.cancelled().await;
            Ok(())
        });
        tasks.spawn("failing", async { panic!("this task fails") });
        let started = tokio::time::Instant::now();
        let (outcome, abandoned) = tasks.wait(&shutdown, Duration::from_secs(2)).await;
        assert!(abandoned.is_empty(), "{abandoned:?}");
        assert!(matches!(outcome, Err(ServeError::Task(_))), "{outcome:?}");
        assert!(shutdown.is_cancelled());
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
