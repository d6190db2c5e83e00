//! `meshd demo`: a whole mesh of real meshd nodes in one process, on
//! loopback, with faults injected by proxies the demo owns (see
//! [`plan`] for the addressing scheme). meshd's own code paths are the
//! production ones; only what reaches them is tampered with.
//!
//! The user-facing lines (banner, answers to commands) go to stdout: they
//! are this command's interface. Logs go through `tracing` to stderr.

pub mod command;
pub mod faults;
pub mod plan;
pub mod proxy;

use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use meshd_domain::NodeId;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::node::{BoundNode, RunningNode, StartError};
use command::{Command, USAGE};
use faults::Faults;
use plan::{Plan, PlanError, Transport};
use proxy::{CableProxy, TcpProxy};

/// A node that does not stop within this is reported and left behind.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines typed ahead while a slow command (kill) runs.
const STDIN_QUEUE: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(
        "{addr}/{transport} ({what}) is taken: {error}. Is another demo running? \
         The demo uses ports {first} to {last} on 127.0.0.1; start it on others with \
         --base-port, e.g. --base-port {suggested}",
        first = u32::from(*base) + 1,
        last = u32::from(*base) + u32::from(plan::MAX_PORT_OFFSET),
        suggested = plan::suggested_base(*base),
    )]
    PortTaken {
        transport: Transport,
        addr: std::net::SocketAddr,
        what: String,
        base: u16,
        /// Not a `source`: the message says it already, and the demo prints
        /// the whole chain.
        error: std::io::Error,
    },
    #[error("cannot start the {what} proxy on {addr}: {source}")]
    Proxy {
        what: &'static str,
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start node {node}: {source}")]
    Start { node: String, source: StartError },
    #[error("cannot write the demo mesh's certificates: {0}")]
    Certificates(#[from] meshd_pki::store::StoreError),
    #[error("cannot read standard input: {0}")]
    Stdin(std::io::Error),
}

/// A running demo mesh: its nodes (`None` while killed) and its proxies.
#[derive(Debug)]
pub struct Demo {
    plan: Plan,
    hostname: String,
    faults: Arc<Faults>,
    nodes: Vec<Option<RunningNode>>,
    proxy_shutdown: CancellationToken,
    proxies: JoinSet<()>,
    /// The certificate files this demo wrote, removed when it stops.
    certificates: Vec<std::path::PathBuf>,
}

/// The answer to one input line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `None` for a blank line or a comment.
    pub reply: Option<String>,
    pub quit: bool,
}

impl Demo {
    /// Starts the proxies first, so every node finds its cables and peers
    /// in place, then the nodes. Anything that fails to start stops what
    /// already runs.
    pub async fn start(plan: Plan, hostname: &str) -> Result<Demo, DemoError> {
        check_ports(&plan)?;
        let mut demo = Demo {
            nodes: Vec::with_capacity(plan.nodes.len()),
            hostname: hostname.to_owned(),
            faults: Arc::new(Faults::from_clock()),
            proxy_shutdown: CancellationToken::new(),
            proxies: JoinSet::new(),
            certificates: Vec::new(),
            plan,
        };
        if let Err(err) = demo.start_all().await {
            demo.stop().await;
            return Err(err);
        }
        Ok(demo)
    }

    async fn start_all(&mut self) -> Result<(), DemoError> {
        self.certificates = write_certificates(&self.plan)?;
        for p in self.plan.cable_proxies() {
            let proxy = CableProxy::bind(p)
                .await
                .map_err(|source| DemoError::Proxy {
                    what: "cable",
                    addr: p.a.listen,
                    source,
                })?;
            self.proxies
                .spawn(proxy.run(self.faults.clone(), self.proxy_shutdown.clone()));
        }
        for p in self.plan.tcp_proxies() {
            let proxy = TcpProxy::bind(p).await.map_err(|source| DemoError::Proxy {
                what: "TCP",
                addr: p.listen,
                source,
            })?;
            self.proxies
                .spawn(proxy.run(self.faults.clone(), self.proxy_shutdown.clone()));
        }
        // Every node's ports first, so that no node's first reports are
        // refused (and warned about) by a peer that has not started yet.
        let failed = |id: &NodeId| {
            let node = id.to_string();
            move |source| DemoError::Start { node, source }
        };
        let mut bound = Vec::with_capacity(self.plan.nodes.len());
        for node in &self.plan.nodes {
            bound.push(
                BoundNode::bind(&node.config)
                    .await
                    .map_err(failed(&node.id))?,
            );
        }
        for (node, ports) in self.plan.nodes.iter().zip(bound) {
            let running = RunningNode::start_bound(ports, &node.config, &self.hostname)
                .await
                .map_err(failed(&node.id))?;
            self.nodes.push(Some(running));
        }
        Ok(())
    }

    async fn start_node(&self, index: usize) -> Result<RunningNode, DemoError> {
        let node = &self.plan.nodes[index];
        RunningNode::start(&node.config, &self.hostname)
            .await
            .map_err(|source| DemoError::Start {
                node: node.id.to_string(),
                source,
            })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The running node at `index`, `None` while it is killed.
    pub fn node(&self, index: usize) -> Option<&RunningNode> {
        self.nodes.get(index).and_then(Option::as_ref)
    }

    /// Parses and applies one input line.
    pub async fn execute(&mut self, line: &str) -> Outcome {
        let ids = self.plan.ids();
        let parsed = command::parse(line, &ids);
        match parsed {
            Ok(None) => Outcome {
                reply: None,
                quit: false,
            },
            Ok(Some(command)) => {
                let quit = command == Command::Quit;
                let reply = match self.apply(command).await {
                    Ok(reply) => reply,
                    Err(err) => format!("error: {err}"),
                };
                Outcome {
                    reply: Some(reply),
                    quit,
                }
            }
            Err(err) => Outcome {
                reply: Some(format!("error: {err}")),
                quit: false,
            },
        }
    }

    /// Applies one command; `Ok` is the answer line.
    pub async fn apply(&mut self, command: Command) -> Result<String, String> {
        match command {
            Command::Cut(a, b) => {
                self.faults.update_link(a, b, |f| f.cut = true);
                Ok(format!("ok: cable {} cut", self.cable(a, b)))
            }
            Command::HealLink(a, b) => {
                self.faults.update_link(a, b, |f| *f = Default::default());
                Ok(format!("ok: cable {} healed", self.cable(a, b)))
            }
            Command::Slow(a, b, delay) => {
                self.faults.update_link(a, b, |f| f.delay = delay);
                Ok(format!(
                    "ok: cable {} adds {} ms per round trip",
                    self.cable(a, b),
                    delay.as_millis()
                ))
            }
            Command::Lossy(a, b, percent) => {
                self.faults.update_link(a, b, |f| f.loss_percent = percent);
                Ok(format!(
                    "ok: cable {} loses {percent} % of probes",
                    self.cable(a, b)
                ))
            }
            Command::Kill(i) => self
                .kill(i)
                .await
                .map(|()| format!("ok: {} killed", self.id(i))),
            Command::Revive(i) => self.revive(i).await.map(|incarnation| {
                format!("ok: {} revived (incarnation {incarnation})", self.id(i))
            }),
            Command::Partition(groups) => {
                self.faults.partition(&groups);
                let named: Vec<String> = groups
                    .iter()
                    .map(|g| g.iter().map(|&i| self.id(i)).collect::<Vec<_>>().join(","))
                    .collect();
                Ok(format!(
                    "ok: management network split into {}",
                    named.join(" | ")
                ))
            }
            Command::HealAll => {
                self.faults.heal_all();
                let mut failed = Vec::new();
                for i in 0..self.nodes.len() {
                    if self.node(i).is_none()
                        && let Err(err) = self.revive(i).await
                    {
                        failed.push(err);
                    }
                }
                if failed.is_empty() {
                    Ok("ok: every cable, the network and every node healed".to_owned())
                } else {
                    Err(failed.join("; "))
                }
            }
            Command::Help => Ok(command::help_line()),
            Command::Quit => Ok("ok: stopping".to_owned()),
        }
    }

    /// Stops node `index` the way SIGTERM stops `meshd run`.
    pub async fn kill(&mut self, index: usize) -> Result<(), String> {
        let id = self.id(index);
        let node = self
            .nodes
            .get_mut(index)
            .and_then(Option::take)
            .ok_or_else(|| format!("node {id} is not running; revive it first"))?;
        stop_node(node)
            .await
            .map_err(|err| format!("node {id} stopped badly: {err}"))
    }

    /// Starts node `index` again with the same config: a new incarnation.
    /// Returns that incarnation.
    pub async fn revive(&mut self, index: usize) -> Result<u64, String> {
        let id = self.id(index);
        if self.node(index).is_some() {
            return Err(format!("node {id} is already running; kill it first"));
        }
        let node = self.start_node(index).await.map_err(|e| e.to_string())?;
        let incarnation = node.identity.incarnation.0;
        if let Some(slot) = self.nodes.get_mut(index) {
            *slot = Some(node);
        }
        Ok(incarnation)
    }

    /// Stops every node, then every proxy.
    pub async fn stop(mut self) {
        for (index, slot) in self.nodes.iter_mut().enumerate() {
            if let Some(node) = slot.take()
                && let Err(err) = stop_node(node).await
            {
                tracing::warn!(node = index, "{err}");
            }
        }
        self.proxy_shutdown.cancel();
        let proxies = async { while self.proxies.join_next().await.is_some() {} };
        if tokio::time::timeout(STOP_TIMEOUT, proxies).await.is_err() {
            tracing::warn!("proxies did not stop within {STOP_TIMEOUT:?}; aborting them");
            self.proxies.abort_all();
        }
    }

    /// Where to look and what to type, printed once at start.
    pub fn banner(&self) -> Vec<String> {
        let base = self.plan.base_port;
        let mut lines = vec![format!(
            "meshd demo: {} nodes on 127.0.0.1 (base port {base}, ports up to {})",
            self.plan.nodes.len(),
            u32::from(base) + u32::from(plan::MAX_PORT_OFFSET),
        )];
        for node in &self.plan.nodes {
            lines.push(format!(
                "  node {}: page http://{}/    meshctl --addr {} status    metrics: http://{}/metrics",
                node.id,
                node.metrics(),
                node.grpc(),
                node.metrics()
            ));
        }
        lines.push(format!(
            "cables: node i's end of the cable to node j is udp+tcp 127.0.0.1:{}+10i+j; the cable \
             itself is a proxy whose side for node i is udp+tcp 127.0.0.1:{}+10i+j (a=1, b=2, ...)",
            base + plan::CABLE_OFFSET,
            base + plan::CABLE_PROXY_OFFSET,
        ));
        lines.push(format!(
            "management: node i reaches node j's mesh listener (tcp 127.0.0.1:{}+j, mutual TLS) \
             through the proxy on tcp 127.0.0.1:{}+10i+j; certificates in {}",
            base + plan::MESH_OFFSET,
            base + plan::MANAGEMENT_OFFSET,
            self.plan.certs.display(),
        ));
        lines.push("commands, one per line on stdin:".to_owned());
        let width = USAGE.iter().map(|(u, _)| u.len()).max().unwrap_or(0);
        lines.extend(
            USAGE
                .iter()
                .map(|(usage, what)| format!("  {usage:width$}  {what}")),
        );
        lines
    }

    fn id(&self, index: usize) -> String {
        self.plan
            .nodes
            .get(index)
            .map(|n| n.id.to_string())
            .unwrap_or_else(|| format!("#{index}"))
    }

    fn cable(&self, a: usize, b: usize) -> String {
        format!("{}-{}", self.id(a), self.id(b))
    }
}

/// How long the demo's certificates are good for: longer than any demo
/// runs, and far from the 30 days under which meshd warns of expiry
/// (`certificate_expiring`), which would otherwise be the demo's first alarm.
const CERTIFICATE_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// The mesh's CA and every node's certificate, as `meshctl certs` would
/// write them, in the plan's directory (which must not hold any yet).
/// Returns the files written.
fn write_certificates(plan: &Plan) -> Result<Vec<std::path::PathBuf>, DemoError> {
    let dir = meshd_pki::store::CertDir::new(&plan.certs);
    let now = std::time::SystemTime::now();
    let mut written = Vec::new();
    let ca = dir.init("meshd demo CA", now, CERTIFICATE_LIFETIME)?;
    let pair = dir.ca();
    written.extend([pair.cert, pair.key]);
    for node in &plan.nodes {
        let pair = dir.issue(&ca, node.id.as_str(), &[], now, CERTIFICATE_LIFETIME)?;
        written.extend([pair.cert, pair.key]);
    }
    Ok(written)
}

/// Removes the files the demo wrote, and their directory once empty:
/// never anything else.
fn remove_certificates(plan: &Plan, written: &[std::path::PathBuf]) {
    for file in written {
        if let Err(error) = std::fs::remove_file(file) {
            tracing::debug!(file = %file.display(), %error, "cannot remove a demo certificate");
        }
    }
    let _ = std::fs::remove_dir(&plan.certs);
}

impl Drop for Demo {
    /// Also when a test panics with its demo running.
    fn drop(&mut self) {
        remove_certificates(&self.plan, &std::mem::take(&mut self.certificates));
    }
}

async fn stop_node(node: RunningNode) -> Result<(), String> {
    node.shutdown();
    match tokio::time::timeout(STOP_TIMEOUT, node.wait()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("did not stop within {STOP_TIMEOUT:?}")),
    }
}

/// Every port the plan binds must be free before anything starts, so a
/// taken one gets one clear message instead of a half-started mesh. Each
/// port is held until the last is checked, then all are released.
fn check_ports(plan: &Plan) -> Result<(), DemoError> {
    let (mut tcp, mut udp) = (Vec::new(), Vec::new());
    for port in plan.ports() {
        let bound = match port.transport {
            Transport::Tcp => std::net::TcpListener::bind(port.addr).map(|s| tcp.push(s)),
            Transport::Udp => std::net::UdpSocket::bind(port.addr).map(|s| udp.push(s)),
        };
        if let Err(error) = bound {
            return Err(DemoError::PortTaken {
                transport: port.transport,
                addr: port.addr,
                what: port.what,
                base: plan.base_port,
                error,
            });
        }
    }
    Ok(())
}

/// Runs the demo until `quit`, or until `stop` resolves (SIGINT/SIGTERM in
/// `meshd demo`). End of input alone does not stop it, so `meshd demo &`
/// keeps running.
pub async fn run(
    plan: Plan,
    hostname: &str,
    stop: impl Future<Output = anyhow::Result<&'static str>>,
) -> anyhow::Result<()> {
    let mut demo = Demo::start(plan, hostname).await?;
    for line in demo.banner() {
        say(&line);
    }
    let mut lines = read_stdin().map_err(DemoError::Stdin)?;
    tokio::pin!(stop);
    let mut input_open = true;
    let outcome = loop {
        tokio::select! {
            signal = &mut stop => {
                if let Ok(signal) = &signal {
                    say(&format!("{signal}: stopping"));
                }
                break signal.map(|_| ());
            }
            line = lines.recv(), if input_open => match line {
                Some(line) => {
                    let outcome = demo.execute(&line).await;
                    if let Some(reply) = &outcome.reply {
                        say(reply);
                    }
                    if outcome.quit {
                        break Ok(());
                    }
                }
                None => {
                    input_open = false;
                    tracing::info!("standard input closed; running until SIGINT or SIGTERM");
                }
            },
        }
    };
    demo.stop().await;
    outcome
}

/// Lines of standard input. Read on a plain thread: a blocked read must not
/// hold up the runtime's shutdown, and the thread dies with the process.
fn read_stdin() -> std::io::Result<mpsc::Receiver<String>> {
    let (tx, rx) = mpsc::channel(STDIN_QUEUE);
    std::thread::Builder::new()
        .name("demo-stdin".to_owned())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.blocking_send(line).is_err() {
                    break;
                }
            }
        })?;
    Ok(rx)
}

#[allow(clippy::print_stdout)]
fn say(line: &str) {
    println!("{line}");
}
