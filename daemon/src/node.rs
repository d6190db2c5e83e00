//! One running meshd: binds its listeners, starts the aggregator, the gRPC
//! server and the HTTP server, and stops them all on one signal. Used by
//! `meshd run`, and by tests that need real nodes in one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use meshd_proto::domain::{Incarnation, NodeIdentity};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::aggregator::{self, Aggregator, Feeds, MeshState};
use crate::alert::AlertPusher;
use crate::config::reload::{ConfigReload, Hangups};
use crate::config::{Config, settings};
use crate::grpc::{self, MeshService, PeerService, Services, TopologyService};
use crate::metrics::Metrics;
use crate::probe::ProbeManager;
use crate::reporter::Reporter;
use crate::watch::{boot, bridge, cpu, facts, jobs, load, memory};

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
    #[error("cannot set up gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("cannot set up alerting: {0}")]
    Alerting(#[from] crate::alert::TargetError),
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("gRPC server failed: {0}")]
    Grpc(#[from] tonic::transport::Error),
    #[error("HTTP server failed: {0}")]
    Http(std::io::Error),
    #[error("a node task panicked: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A started node. Dropping it does not stop it; call [`RunningNode::shutdown`]
/// then [`RunningNode::wait`].
#[derive(Debug)]
pub struct RunningNode {
    pub identity: NodeIdentity,
    pub grpc_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub state: MeshState,
    /// The config in force; every component follows it.
    configs: watch::Sender<Arc<Config>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    tasks: JoinSet<Result<(), ServeError>>,
}

/// This run's identity: the incarnation is the start time, so a restart
/// always carries a larger one than the run before it.
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

/// A node whose ports are taken but which does not run yet: peers that
/// connect meanwhile wait in the listen queue instead of being refused.
/// The demo binds every node before starting any, so that no node's first
/// reports fail (and warn) for want of a peer that is still starting.
#[derive(Debug)]
pub struct BoundNode {
    grpc_listener: TcpListener,
    http_listener: TcpListener,
    grpc_addr: SocketAddr,
    metrics_addr: SocketAddr,
}

impl BoundNode {
    /// Binds both listeners before anything runs, so a taken port fails the
    /// start with a clear error instead of a half-started node.
    pub async fn bind(config: &Config) -> Result<Self, StartError> {
        let grpc_listener = bind("gRPC", config.listen.grpc).await?;
        let http_listener = bind("metrics", config.listen.metrics).await?;
        Ok(Self {
            grpc_addr: local_addr("gRPC", config.listen.grpc, &grpc_listener)?,
            metrics_addr: local_addr("metrics", config.listen.metrics, &http_listener)?,
            grpc_listener,
            http_listener,
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
        let BoundNode {
            grpc_listener,
            http_listener,
            grpc_addr,
            metrics_addr,
        } = bound;

        let identity = identity(config, hostname, SystemTime::now());
        let metrics = Arc::new(Metrics::new(&identity));
        let shutdown = CancellationToken::new();
        // The config in force: every component follows it (live reload).
        let (configs, _) = watch::channel(Arc::new(config.clone()));
        let book = aggregator::report_book(config);
        let probes = ProbeManager::new(
            &settings::probed_links(config, &identity.id),
            settings::prober(&config.probe),
            metrics.clone(),
            shutdown.clone(),
        );
        let facts_watch = facts::spawn(
            identity.id.clone(),
            configs.subscribe(),
            metrics.clone(),
            shutdown.clone(),
        );
        let bridge_alarms = bridge::spawn(
            configs.subscribe(),
            facts_watch.facts.clone(),
            identity.id.clone(),
            metrics.clone(),
            shutdown.clone(),
        );
        // Storm alarms explain CPU spikes.
        let cpu_watch = cpu::spawn(
            identity.id.clone(),
            configs.subscribe(),
            vec![bridge_alarms.clone()],
            metrics.clone(),
            shutdown.clone(),
        );
        // The job and boot watchers need the mesh status and state, which
        // exist only once the aggregator does, and the aggregator needs
        // their alarms (and the boots).
        let (job_alarms, job_alarms_rx) = watch::channel(Vec::new());
        let (boot_alarms, boot_alarms_rx) = watch::channel(Vec::new());
        let (boot_view, boot_view_rx) = watch::channel(Arc::default());
        let memory_alarms = memory::spawn(
            identity.id.clone(),
            configs.subscribe(),
            cpu_watch.samples.clone(),
            metrics.clone(),
            shutdown.clone(),
        );
        let feeds = Feeds {
            book: book.clone(),
            probes,
            load: load::spawn(config.thresholds.cpu_saturated, shutdown.clone()),
            local_alarms: vec![
                bridge_alarms,
                cpu_watch.alarms.clone(),
                job_alarms_rx,
                facts_watch.alarms,
                memory_alarms,
                boot_alarms_rx,
            ],
            facts: facts_watch.facts.clone(),
            port_counters: facts_watch.counters,
            boots: boot_view_rx,
        };
        let (aggregator, state, outgoing) = Aggregator::new(config, identity.clone(), feeds);
        jobs::spawn(
            identity.id.clone(),
            configs.subscribe(),
            jobs::JobFeeds {
                samples: cpu_watch.samples,
                status: state.status.clone(),
                facts: facts_watch.facts.clone(),
            },
            job_alarms,
            metrics.clone(),
            shutdown.clone(),
        );
        boot::spawn(
            configs.subscribe(),
            boot::BootInputs {
                identity: identity.clone(),
                book: book.clone(),
                local_facts: facts_watch.facts,
                state: state.clone(),
            },
            boot::BootOutputs {
                alarms: boot_alarms,
                view: boot_view,
            },
            shutdown.clone(),
        );
        let reporter = Reporter::start(
            identity.clone(),
            config,
            outgoing,
            metrics.clone(),
            &shutdown,
        );
        // Before any task starts: an unreadable credential stops the start.
        let pusher = AlertPusher::new(
            identity.id.clone(),
            &config.alerting.alertmanagers,
            config.alerting.resend_interval,
            metrics.clone(),
        )?;
        let mut tasks = JoinSet::new();

        tasks.spawn({
            let (configs, shutdown) = (configs.subscribe(), shutdown.clone());
            async move {
                aggregator.run(configs, shutdown).await;
                Ok(())
            }
        });
        tasks.spawn({
            let (configs, shutdown) = (configs.subscribe(), shutdown.clone());
            async move {
                reporter.run(configs, shutdown).await;
                Ok(())
            }
        });
        tasks.spawn({
            let (status, shutdown) = (state.status.clone(), shutdown.clone());
            async move {
                pusher.run(status, shutdown).await;
                Ok(())
            }
        });
        let services = Services {
            mesh: MeshService::new(state.clone(), shutdown.clone()),
            peer: PeerService::new(identity.clone(), book),
            topology: TopologyService::new(state.clone(), configs.subscribe()),
        };
        tasks.spawn(grpc::serve(grpc_listener, services, shutdown.clone())?);
        tasks.spawn({
            let router =
                crate::http::router(metrics.clone(), state.clone(), shutdown.clone(), grpc_addr);
            let shutdown = shutdown.clone();
            async move {
                axum::serve(http_listener, router)
                    .with_graceful_shutdown(shutdown.cancelled_owned())
                    .await
                    .map_err(ServeError::Http)
            }
        });

        tracing::info!(
            node = %identity.id,
            incarnation = identity.incarnation.0,
            grpc = %grpc_addr,
            metrics = %metrics_addr,
            members = config.members().len(),
            "meshd started"
        );
        Ok(Self {
            identity,
            grpc_addr,
            metrics_addr,
            state,
            configs,
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
            state: self.state.clone(),
            node: self.identity.id.clone(),
            hangups,
            metrics: self.metrics.clone(),
        };
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            reload.run(shutdown).await;
            Ok(())
        });
    }

    /// Asks every task to finish: servers stop accepting, in-flight requests
    /// complete, event streams end.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Waits until every task has finished; the first failure stops the rest.
    pub async fn wait(mut self) -> Result<(), ServeError> {
        let mut outcome = Ok(());
        while let Some(joined) = self.tasks.join_next().await {
            let result = joined.map_err(ServeError::from).and_then(|r| r);
            if let Err(err) = result {
                self.shutdown.cancel();
                if outcome.is_ok() {
                    outcome = Err(err);
                }
            }
        }
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
