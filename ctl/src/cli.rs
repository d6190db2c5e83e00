//! meshctl's command line: what the binary parses, and what `meshd install`
//! renders into shell completions and man pages.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Where meshctl asks unless told otherwise: the local node's gRPC port.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7420";

/// Exit codes, one table for every command (docs/CLI.md):
/// what was asked about is healthy, or the command did its job.
pub const EXIT_OK: u8 = 0;
/// The answer says something is wrong (unhealthy mesh, failing check), or
/// the request was understood and refused (no plan fits, a rank that is not
/// a member, an unusable bundle).
pub const EXIT_UNHEALTHY: u8 = 1;
/// meshd could not be reached, did not answer in time, or answered
/// something unusable.
pub const EXIT_UNREACHABLE: u8 = 2;
/// The command line is wrong (sysexits' EX_USAGE): an unknown flag, a bad
/// value, a path that is not there.
pub const EXIT_USAGE: u8 = 64;

/// Days a mesh CA is valid unless told otherwise (`meshctl certs init`,
/// `meshctl plan --certs`).
pub const DEFAULT_CA_DAYS: u32 = 3650;
/// Days a node certificate is valid unless told otherwise: 825, the most
/// Apple's platforms accept for a TLS server certificate.
pub const DEFAULT_CERT_DAYS: u32 = 825;
/// The CA's name unless told otherwise.
pub const DEFAULT_CA_NAME: &str = "meshd mesh CA";

const EXIT_CODES: &str = "\
Exit codes:
  0   healthy, or done
  1   unhealthy, a check failed or none could be judged, or the request was refused
  2   meshd could not be reached or gave an unusable answer
  64  wrong usage (unknown flag, bad value, missing file)";

#[derive(Debug, Parser)]
#[command(
    name = "meshctl",
    version,
    about = "Ask a meshd node what is broken in the mesh",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// meshd gRPC address, HOST:PORT or http://HOST:PORT.
    #[arg(long, global = true, env = "MESHCTL_ADDR", default_value = DEFAULT_ADDR)]
    pub addr: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The mesh as the answering node sees it: quorum, nodes, a matrix of
    /// link states, every link and node not up with its evidence and fix,
    /// active alarms, checks that need attention. Exits 1 when unhealthy.
    Status {
        /// Print the stable JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Every distributed job the mesh's nodes run (MLX ranks, found by the
    /// variables mlx.launch sets), rank by rank: node, pid, whether it is
    /// live, stopped, gone or replaced, and spinning; and why a job hangs.
    /// Exits 1 when a job is hung.
    Jobs {
        /// One JSON document instead of tables.
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
    /// What happened: the incidents this node recorded on its disk (which
    /// cable went down, which node rebooted or panicked, when quorum was
    /// lost, what was paged), newest first, each with its timeline. Kept
    /// across restarts and reboots, no Prometheus needed.
    History {
        /// Incidents that ended within this long (or are still open), such
        /// as 12h, 3d, 90m.
        #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = humantime::parse_duration)]
        since: std::time::Duration,
        /// Only incidents that concern this node.
        #[arg(long)]
        node: Option<String>,
        /// Only incidents about the link between two nodes, as a-b.
        #[arg(long, value_name = "A-B")]
        link: Option<String>,
        /// Every node's history, merged on the answering node's clock (it
        /// asks its peers over the mesh listener).
        #[arg(long)]
        mesh: bool,
        /// At most this many incidents, newest first (at most 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Platform checks with evidence and fixes: RDMA enabled, every cable of
    /// the full mesh present at 80 Gb/s, one subnet per cable, GIDs,
    /// Thunderbolt Bridge off, same macOS everywhere. This node by default
    /// (read here, no daemon needed). Exits 1 when a check fails, when no
    /// check could be judged (all skipped), or (with --mesh) a cable's link
    /// is down or flapping.
    Doctor {
        /// Read a bundle (directory or .tar.gz from `meshctl bundle`), or a
        /// directory of bundles and bundle archives (one per node: mesh-wide
        /// checks too), instead of this host.
        #[arg(long, value_name = "PATH", conflicts_with = "mesh")]
        from: Option<PathBuf>,
        /// Every node's checks and the mesh-wide ones, from the daemon, with
        /// the state of each cable's link.
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
    /// Exits 1 when meshd refuses (a missing cable, a pair of ranks over a
    /// link that is not up, a rank that is not a member).
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
        /// Build it even when a pair of ranks is joined over a link that is
        /// not up (down, degraded, flapping, not judged yet); those pairs
        /// are named on standard error and listed under `meshd.links_not_up`
        /// in the file, which mlx.launch ignores. Without it such a hostfile
        /// is refused (exit 1): a job launched over a dead cable hangs.
        #[arg(long)]
        allow_degraded: bool,
        /// Write the hostfile here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// A cabling plan for a new cluster of Macs: which port of which Mac to
    /// cable to which, a /30 per cable from 10.254.0.0/24 (or --link-range),
    /// and the commands and meshd config of each node; with --write, each
    /// node's complete meshd.toml (and with --certs its certificates).
    /// Refuses (exit 1) when the ports cannot make the mesh, or files in
    /// --write's directory would be replaced without --force.
    Plan {
        /// Number of Macs (default: as many as --names).
        #[arg(long, required_unless_present_any = ["list_models", "names"])]
        nodes: Option<usize>,
        /// The Macs' node ids (host names), comma-separated, in plan order.
        /// Default: node1, node2, ...
        #[arg(long, value_delimiter = ',', value_name = "ID,ID,...")]
        names: Vec<String>,
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
        /// List the known models and their Thunderbolt 5 ports, and exit.
        #[arg(long, conflicts_with_all = ["nodes", "names", "models", "json", "hardware_ports", "write", "link_range"])]
        list_models: bool,
        /// A node's `networksetup -listallhardwareports` output, as
        /// NODE=FILE (FILE `-` is standard input; repeat per node): its
        /// `[[links]]` then get `local_iface` written, not left as a
        /// comment. The enX of each port differs from Mac to Mac.
        #[arg(long = "hardware-ports", value_name = "NODE=FILE")]
        hardware_ports: Vec<String>,
        /// Where the cables' /30s come from, an IPv4 network such as
        /// 10.77.0.0/24: one that no network of the site uses (the cable
        /// addresses must not shadow the management network). Default:
        /// 10.254.0.0/24.
        #[arg(long, value_name = "CIDR")]
        link_range: Option<String>,
        /// Write each node's complete meshd config to DIR/<node>/meshd.toml
        /// ([node], [listen], [tls], every [[peers]], [[links]], and
        /// [alerting] with --alertmanager). Needs --management for every
        /// node.
        #[arg(long, value_name = "DIR")]
        write: Option<PathBuf>,
        /// Replace files --write (and --certs) would write that exist
        /// already. With --certs that is a new CA: every node needs its new
        /// files.
        #[arg(long, requires = "write")]
        force: bool,
        /// Also create the mesh's CA in DIR/ca (ca-key.pem stays there, off
        /// the nodes) and each node's certificate and key in DIR/<node>/tls,
        /// where its meshd.toml's [tls] points.
        #[arg(long, requires = "write")]
        certs: bool,
        /// A node's address on the management network, as NODE=HOST[:PORT]
        /// (repeat per node; port default 7420): its peers' [[peers]]
        /// address, and its listen.mesh (HOST an IP; for a DNS name meshd
        /// listens on every interface, which needs a port other than
        /// listen.grpc's).
        #[arg(long, value_name = "NODE=HOST[:PORT]", requires = "write")]
        management: Vec<String>,
        /// A node's listen.grpc (meshctl on the node), as NODE=IP:PORT.
        /// Default: 127.0.0.1:7420.
        #[arg(long, value_name = "NODE=IP:PORT", requires = "write")]
        grpc: Vec<String>,
        /// A node's listen.metrics (the page, /metrics, /healthz), as
        /// NODE=IP:PORT: the management IP for a Prometheus on another
        /// host. Default: 127.0.0.1:9420.
        #[arg(long, value_name = "NODE=IP:PORT", requires = "write")]
        metrics: Vec<String>,
        /// An Alertmanager base URL (http:// or https://) for every node's
        /// [alerting]; repeatable.
        #[arg(long, value_name = "URL", requires = "write")]
        alertmanager: Vec<String>,
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
    /// The mesh's certificates: a CA, then one certificate per node, for
    /// the mutual TLS between nodes. Run on an admin machine; copy ca.pem and
    /// each node's pair to that node (the config's tls.ca, tls.cert, tls.key).
    /// Exits 1 when it refuses (an existing file, no CA, a bad node id).
    Certs {
        /// The directory of the CA and the certificates.
        #[arg(long, default_value = "tls")]
        dir: PathBuf,
        #[command(subcommand)]
        action: CertsCommand,
    },
}

/// `meshctl certs` subcommands.
#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Create the mesh's CA (ca.pem, and ca-key.pem which stays here).
    /// Refuses to replace an existing one.
    Init {
        /// The CA's name, shown in its certificate.
        #[arg(long, default_value = DEFAULT_CA_NAME)]
        name: String,
        /// Days the CA is valid.
        #[arg(long, default_value_t = DEFAULT_CA_DAYS)]
        days: u32,
    },
    /// Issue a certificate for each node id (NODE.pem, NODE-key.pem).
    /// Refuses to replace an existing one.
    Issue {
        /// Node ids, as in each node's `node.id`.
        #[arg(required = true)]
        nodes: Vec<String>,
        /// Days the certificates are valid.
        #[arg(long, default_value_t = DEFAULT_CERT_DAYS)]
        days: u32,
    },
}

/// JACCL wants a cable between every pair of ranks; the ring only between
/// neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Jaccl,
    JacclRing,
}

impl From<BackendArg> for meshd_mesh::Backend {
    fn from(backend: BackendArg) -> Self {
        match backend {
            BackendArg::Jaccl => Self::Jaccl,
            BackendArg::JacclRing => Self::JacclRing,
        }
    }
}

/// The command line as clap describes it, for completions and man pages.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        super::command().debug_assert();
    }
}
