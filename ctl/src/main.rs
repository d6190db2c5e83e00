//! `meshctl`: ask a meshd node what is broken in the mesh.
//!
//! Exit codes are a contract for scripts: 0 when what was asked about is
//! healthy, 1 when something is degraded or down, 2 when the daemon could
//! not be reached or gave an answer that makes no sense.

mod bundle;
mod checklist;
mod client;
mod doctor;
mod hostfile;
mod plan;
mod status;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use meshd_proto::domain::NodeId;

use crate::client::{Target, Unreachable};

#[derive(Debug, Parser)]
#[command(
    name = "meshctl",
    version,
    about = "Ask a meshd node what is broken in the mesh"
)]
struct Cli {
    /// meshd gRPC address, HOST:PORT or http://HOST:PORT.
    #[arg(long, global = true, env = "MESHCTL_ADDR", default_value = client::DEFAULT_ADDR)]
    addr: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The mesh as the answering node sees it: quorum, nodes, a matrix of
    /// link states, active alarms.
    Status {
        /// Print the stable JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Stream verdict changes (links down, degraded, flapping, recovered;
    /// nodes down and up; quorum lost and regained; alarms) until Ctrl-C.
    Watch {
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Platform checks with evidence and fixes: RDMA enabled, every cable of
    /// the full mesh present at 80 Gb/s, one subnet per cable, GIDs,
    /// Thunderbolt Bridge off, same macOS everywhere. This node by default
    /// (read here, no daemon needed). Exits 1 when a check fails.
    Doctor {
        /// Read a bundle (directory or .tar.gz from `meshctl bundle`), or a
        /// directory of bundles (one per node: mesh-wide checks too),
        /// instead of this host.
        #[arg(long, value_name = "PATH", conflicts_with = "mesh")]
        from: Option<PathBuf>,
        /// Every node's checks and the mesh-wide ones, from the daemon.
        #[arg(long)]
        mesh: bool,
        /// The node id to report this host (or a bundle without a manifest)
        /// as. Default: the first label of the host name.
        #[arg(long)]
        node: Option<String>,
        /// JSON instead of a checklist.
        #[arg(long)]
        json: bool,
    },
    /// An MLX hostfile (`mlx.launch --hostfile`) from the live cable map.
    Hostfile {
        #[arg(long, value_enum, default_value_t = BackendArg::Jaccl)]
        backend: BackendArg,
        /// ssh destination of a node, NAME=HOST; repeatable. Default: the node id.
        #[arg(long = "ssh", value_name = "NAME=HOST")]
        ssh: Vec<String>,
        /// Node ids in rank order, comma-separated. Default: every member by id.
        #[arg(long, value_delimiter = ',')]
        ranks: Vec<String>,
        /// An address of rank 0 that every rank reaches. Default: rank 0's
        /// management address from the daemon's config.
        #[arg(long)]
        rank0_ip: Option<String>,
        /// Write the hostfile here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// A cabling plan for a new cluster: which port of which Mac to cable to
    /// which, a /30 per cable, and the commands to configure each node.
    /// Refuses (exit 1) when the ports cannot make the mesh.
    Plan {
        /// Number of Macs.
        #[arg(long)]
        nodes: usize,
        /// Model id (see `--list-models`): once for all nodes, or once per
        /// node in order for a mixed cluster.
        #[arg(
            long = "model",
            value_name = "MODEL",
            required_unless_present = "list_models"
        )]
        models: Vec<String>,
        #[arg(long, value_enum, default_value_t = BackendArg::Jaccl)]
        backend: BackendArg,
        /// JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// List the known models and their Thunderbolt 5 ports.
        #[arg(long, exclusive = true)]
        list_models: bool,
        /// A node's `networksetup -listallhardwareports` output, as
        /// NODE=FILE (FILE `-` is standard input; repeat per node): its
        /// `[[links]]` then get `local_iface` written, not left as a
        /// comment. The enX of each port differs from Mac to Mac.
        #[arg(long = "hardware-ports", value_name = "NODE=FILE")]
        hardware_ports: Vec<String>,
    },
    /// Collect every platform command's raw output, this node's facts and
    /// checks, and the daemon's status into one .tar.gz for diagnosis
    /// elsewhere (`meshctl doctor --from FILE`).
    Bundle {
        /// Where to write it. Default: ./meshd-bundle-<node>-<time>.tar.gz.
        #[arg(long)]
        out: Option<PathBuf>,
        /// The node id to record. Default: the first label of the host name.
        #[arg(long)]
        node: Option<String>,
    },
}

/// JACCL wants a cable between every pair of ranks; the ring only between
/// neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    Jaccl,
    JacclRing,
}

impl From<BackendArg> for meshd_platform::mesh::Backend {
    fn from(backend: BackendArg) -> Self {
        match backend {
            BackendArg::Jaccl => Self::Jaccl,
            BackendArg::JacclRing => Self::JacclRing,
        }
    }
}

/// The node id for this host: as given, else from the host name.
fn local_node(given: Option<String>) -> Result<NodeId, Unreachable> {
    match given {
        Some(name) => NodeId::new(name).map_err(|e| Unreachable(format!("--node: {e}"))),
        None => Ok(NodeId::from_hostname(
            &gethostname::gethostname().to_string_lossy(),
        )),
    }
}

/// The answer was obtained and says the mesh is not healthy.
const EXIT_UNHEALTHY: u8 = 1;
/// The daemon could not be reached or its answer was unusable.
const EXIT_UNREACHABLE: u8 = 2;

#[allow(clippy::print_stderr)]
fn main() -> ExitCode {
    let cli = Cli::parse();
    let target = match Target::parse(&cli.addr) {
        Ok(target) => target,
        Err(err) => {
            eprintln!("meshctl: {err}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("meshctl: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Status { json } => status::run(&target, json).await,
            Command::Watch { json } => watch::run(&target, json).await.map(|()| true),
            Command::Doctor {
                from,
                mesh,
                node,
                json,
            } => {
                let scope = match (from, mesh) {
                    (_, true) => doctor::Scope::Mesh,
                    (Some(path), false) => doctor::Scope::Replay {
                        path,
                        node: node.map(|n| local_node(Some(n))).transpose()?,
                    },
                    (None, false) => doctor::Scope::Local {
                        node: local_node(node)?,
                    },
                };
                doctor::run(&target, scope, json).await
            }
            Command::Hostfile {
                backend,
                ssh,
                ranks,
                rank0_ip,
                out,
            } => hostfile::run(
                &target,
                hostfile::Request {
                    backend,
                    ssh,
                    ranks,
                    rank0_ip,
                },
                out,
            )
            .await
            .map(|()| true),
            Command::Plan {
                nodes,
                models,
                backend,
                json,
                list_models,
                hardware_ports,
            } => Ok(if list_models {
                plan::list_models();
                true
            } else {
                plan::run(nodes, &models, backend, &hardware_ports, json)
            }),
            Command::Bundle { out, node } => bundle::run(&target, local_node(node)?, out)
                .await
                .map(|()| true),
        }
    });
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_UNHEALTHY),
        Err(Unreachable(message)) => {
            eprintln!("meshctl: {message}");
            ExitCode::from(EXIT_UNREACHABLE)
        }
    }
}
