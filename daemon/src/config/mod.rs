//! meshd's configuration: one TOML file, every section optional.
//!
//! Every default lives in this file, as a named constant used by the
//! section's `Default` impl, so the example config, the docs and the code
//! cannot disagree. Reading the file is the only I/O here; the host name
//! (for the default node id) is passed in by the caller, which keeps parsing
//! and validation pure and testable.
//!
//! Errors name the file, the line and the dotted key (`meshd.toml:12:
//! peers[1].id: …`), because an operator fixing a mesh at 3 a.m. should not
//! have to hunt for the offending entry.

mod address;
mod alertmanager;
mod diagnostic;
mod error;
mod locate;
pub mod reload;
pub mod settings;
mod types;
mod validate;
mod watch;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshd_domain::NodeId;
use serde::Deserialize;

pub use address::{AddressError, Host, PeerAddress};
pub use alertmanager::{AlertmanagerConfig, AlertmanagerUrl, BasicAuth, parse_url};
pub use error::{ConfigError, Diagnostic, Problem};
pub use watch::{
    BootWatchConfig, BridgeWatchConfig, CpuWatchConfig, JobWatchConfig, MemoryWatchConfig,
    WatchConfig,
};

use diagnostic::{one_line, problem_diagnostic, serde_diagnostic};
use locate::{Locator, line_of_offset};

/// The largest config file read: a 256-node mesh with every link spelled
/// out is about 100 KiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// gRPC port for peers and meshctl.
pub const DEFAULT_GRPC_PORT: u16 = 7420;
/// HTTP port for `/metrics` and `/healthz`; 9xxx like other Prometheus exporters.
pub const DEFAULT_METRICS_PORT: u16 = 9420;
/// UDP port of the probe responder on every link address, unless a link
/// names its own (`local_port`, `peer_port`).
pub const DEFAULT_PROBE_PORT: u16 = 7421;
/// meshctl on the node itself: loopback only, read-only services, no
/// certificate needed. Peers and remote tools use `listen.mesh`.
pub const DEFAULT_LISTEN_GRPC: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, DEFAULT_GRPC_PORT));
/// Loopback unless a config says where Prometheus scrapes from.
pub const DEFAULT_LISTEN_METRICS: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, DEFAULT_METRICS_PORT));

/// 10 probes a second: enough samples for a 1 s loss window, negligible on
/// an 80 Gb/s link.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(100);
pub const DEFAULT_PROBE_PAYLOAD_BYTES: u32 = 64;
/// Size-dependent loss (bad cable, MTU mismatch) shows only with full-size
/// packets, which are sent more rarely.
pub const DEFAULT_MTU_INTERVAL: Duration = Duration::from_secs(1);
/// Fills a 1500-byte IP MTU: 1500 − 20 (IPv4) − 8 (UDP).
pub const DEFAULT_MTU_PAYLOAD_BYTES: u32 = 1472;
/// Far above any healthy Thunderbolt RTT (tens of µs), so only real loss
/// counts as loss.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// A heartbeat a second on every stream: changes go out at once, so this
/// only bounds how long a frozen node takes to be called down.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Three missed heartbeats on every path before a peer is stale.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(3);
/// A clock off the mesh's by more than this raises `clock_skew`.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(1);

/// Six missed small probes: long enough that one delayed reply is not a cut
/// cable, short enough for a verdict on every node within the 1 s target.
pub const DEFAULT_DOWN_AFTER: Duration = Duration::from_millis(600);
pub const DEFAULT_LOSS_DEGRADED: f64 = 0.02;
pub const DEFAULT_LOSS_DOWN: f64 = 0.5;
pub const DEFAULT_RTT_P99_FACTOR: f64 = 3.0;
pub const DEFAULT_RTT_MIN_INCREASE: Duration = Duration::from_millis(1);
pub const DEFAULT_FLAP_WINDOW: Duration = Duration::from_secs(60);
pub const DEFAULT_FLAP_CHANGES: u32 = 4;
pub const DEFAULT_CPU_SATURATED: f64 = 0.9;

/// Counters move slowly enough that once a second catches a storm within
/// its window.
pub const DEFAULT_BRIDGE_INTERVAL: Duration = Duration::from_secs(1);
/// A quiet Mac sends a few broadcast/multicast packets a second; a bridge
/// loop in a Thunderbolt mesh sends tens of thousands.
pub const DEFAULT_STORM_PACKETS_PER_SECOND: u64 = 5_000;
pub const DEFAULT_STORM_WINDOW: Duration = Duration::from_secs(5);
pub const DEFAULT_CPU_INTERVAL: Duration = Duration::from_secs(1);
pub const DEFAULT_SPIKE_RATIO: f64 = 0.9;
pub const DEFAULT_SPIKE_WINDOW: Duration = Duration::from_secs(10);
pub const DEFAULT_TOP_PROCESSES: usize = 5;
/// Continuity and screen-sharing agents reported to load Mac clusters;
/// `coreaudiod` and `avconferenced` are what High Performance Screen
/// Sharing (macOS 26) burns.
pub const DEFAULT_OFFENDERS: &[&str] = &[
    "UniversalControl",
    "screensharingd",
    "ScreensharingAgent",
    "SSMenuAgent",
    "SSInvitationAgent",
    "sharingd",
    "rapportd",
    "ContinuityCaptureAgent",
    "AirPlayXPCHelper",
    // Since macOS 12 the AirPlay receiver runs inside ControlCenter, so a
    // Mac receiving AirPlay shows ControlCenter busy, not AirPlayXPCHelper.
    "ControlCenter",
    "identityservicesd",
    "coreaudiod",
    "avconferenced",
];
/// MLX (and oMLX) and exo ranks, and llama.cpp's RPC workers.
pub const DEFAULT_JOB_PATTERNS: &[&str] = &["mlx", "exo", "rpc-server", "ggml-rpc"];
pub const DEFAULT_JOB_BUSY_CORES: f64 = 0.9;
pub const DEFAULT_JOB_WINDOW: Duration = Duration::from_secs(10);
/// A launcher that stops its ranks takes a moment; a rank still under
/// launchd/init after this is orphaned.
pub const DEFAULT_ORPHAN_GRACE: Duration = Duration::from_secs(30);
/// A rank at most this busy is blocked rather than working.
pub const DEFAULT_JOB_IDLE_CORES: f64 = 0.05;
/// RDMA data still for this long under a spinning or blocked rank is a
/// stall: long enough for a collective that waits on a slow rank.
pub const DEFAULT_STALL_WINDOW: Duration = Duration::from_secs(60);
/// A peer rank stopped, gone or replaced while a rank of its job spins this
/// long hangs the job: a JACCL rank waiting on a live peer spins for
/// microseconds, and a sample or two of CPU confirm the spin.
pub const DEFAULT_SILENT_RANK_WINDOW: Duration = Duration::from_secs(2);
/// ...and while the others wait without spinning (a TCP ring blocks): the
/// ranks of a job that ends exit seconds apart.
pub const DEFAULT_SILENT_RANK_BLOCKED_WINDOW: Duration = Duration::from_secs(30);

/// Memory changes slowly next to links; `vm_stat` and `sysctl` every few
/// seconds cost nothing measurable.
pub const DEFAULT_MEMORY_INTERVAL: Duration = Duration::from_secs(5);
/// A quarter of physical memory wired with no job running is far above
/// what an idle Mac wires (a few GiB: the kernel and the GPU's own).
pub const DEFAULT_WIRED_LEAK_RATIO: f64 = 0.25;
/// A job that just exited may still be unwinding its wired buffers.
pub const DEFAULT_LEAK_WINDOW: Duration = Duration::from_secs(120);
/// Critical pressure held this long is more than a burst at model load.
pub const DEFAULT_PRESSURE_WINDOW: Duration = Duration::from_secs(30);
/// Linux: every task stalled on memory 10 % of the time is thrashing.
pub const DEFAULT_STALL_CRITICAL_RATIO: f64 = 0.1;

/// Connections between nodes are handshaken again at least this often: an
/// expired or revoked certificate loses its connections within the hour
/// at the latest (sooner: a connection also closes when the certificate
/// on its other end expires, and on a reload that revokes it).
pub const DEFAULT_MAX_CONNECTION_AGE: Duration = Duration::from_secs(60 * 60);

/// A reboot stays an alarm this long: long enough to be seen and paged,
/// short enough not to linger.
pub const DEFAULT_REBOOT_ALARM_FOR: Duration = Duration::from_secs(15 * 60);

/// Alertmanager's own default repeat is much longer; 30 s keeps an alert
/// alive well within its `resolve_timeout`.
pub const DEFAULT_RESEND_INTERVAL: Duration = Duration::from_secs(30);

/// Platform facts (ports, peers, speeds, RDMA, addresses) change when a
/// cable or setting does, not with the traffic. On macOS a read runs
/// `system_profiler`, about a second of work, so once a minute keeps the
/// daemon well inside its CPU budget while a 40 Gb/s renegotiation is
/// still named within a minute (link probing catches a dead cable in
/// under one second regardless).
pub const DEFAULT_FACTS_INTERVAL: Duration = Duration::from_secs(60);

/// The incident history keeps at most this much on disk: about 45,000
/// short incidents (three days of a mesh in trouble 10 times a minute,
/// years of a healthy one; BENCHMARKS.md, "History").
pub const DEFAULT_HISTORY_MAX_BYTES: u64 = 64 << 20;
/// ...and nothing older: a month covers "what happened last week" and
/// leaves a quiet mesh's file small.
pub const DEFAULT_HISTORY_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// The history's file under the state directory (`meshd run`'s default).
pub const HISTORY_FILE_NAME: &str = "history.redb";

/// A loaded, validated configuration. Built only by [`Config::parse`],
/// [`Config::load`] and [`Config::embedded_default`], so holding one means
/// the node id is resolved and every rule holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub node: NodeConfig,
    pub listen: ListenConfig,
    pub peers: Vec<PeerConfig>,
    pub links: Vec<LinkConfig>,
    pub probe: ProbeConfig,
    pub report: ReportConfig,
    pub thresholds: Thresholds,
    pub alerting: AlertingConfig,
    pub watch: WatchConfig,
    pub platform: PlatformConfig,
    pub tls: TlsConfig,
    pub history: HistoryConfig,
}

/// A valid config and the advice it drew, each with its line.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub config: Config,
    /// What works but is likely wrong; empty when nothing is.
    pub warnings: Vec<Diagnostic>,
}

/// This node's identity, always resolved: from `[node] id` when given,
/// otherwise from the host name the caller passed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    pub id: NodeId,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    /// The read-only services (status, events, hostfiles, health,
    /// reflection) without a certificate: meant for loopback.
    pub grpc: SocketAddr,
    pub metrics: SocketAddr,
    /// This node on the management network: peers' report streams and remote
    /// tools, with mutual TLS. Required in a mesh; usually the management
    /// address (every interface works too: a connection without a mesh
    /// certificate gets nothing).
    pub mesh: Option<SocketAddr>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            grpc: DEFAULT_LISTEN_GRPC,
            metrics: DEFAULT_LISTEN_METRICS,
            mesh: None,
        }
    }
}

/// The mesh's certificates (`meshctl certs`): every stream between nodes is
/// mutual TLS, and a node is who its certificate says.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// The mesh's CA certificate(s), PEM; more than one while rotating.
    /// Relative paths are from the config file's directory.
    pub ca: Option<PathBuf>,
    /// This node's certificate, PEM, issued by the mesh's CA for `node.id`.
    pub cert: Option<PathBuf>,
    /// Its private key, PEM.
    pub key: Option<PathBuf>,
    /// Plain TCP between nodes: anyone on the network can forge reports.
    /// Warned about at start and exported as `meshd_insecure`.
    pub insecure: bool,
    /// Serial numbers of certificates refused although the CA signed them
    /// (a stolen node key), hex as `openssl x509 -serial` prints them.
    /// Applied on reload: open connections of a revoked certificate close.
    pub revoked_serials: Vec<String>,
    /// A connection between nodes is opened again (a new handshake, so
    /// checked again against expiry and `revoked_serials`) after this long.
    #[serde(with = "humantime_serde")]
    pub max_connection_age: Duration,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca: None,
            cert: None,
            key: None,
            insecure: false,
            revoked_serials: Vec::new(),
            max_connection_age: DEFAULT_MAX_CONNECTION_AGE,
        }
    }
}

/// Another member of the mesh. Both keys are required: a peer without an id
/// or an address cannot take part in quorum.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub id: NodeId,
    /// `host:port` on the management network. Kept as written so DNS names
    /// are resolved at connect time; [`Config::validate`] has checked it.
    pub address: String,
}

impl PeerConfig {
    /// The parsed address. Cannot fail on a validated [`Config`], but stays
    /// fallible so a hand-built config cannot cause a panic.
    pub fn endpoint(&self) -> Result<PeerAddress, AddressError> {
        self.address.parse()
    }
}

/// A cable declared by hand, for hosts where discovery (Thunderbolt domain
/// UUIDs on macOS) is not available.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    pub peer: NodeId,
    #[serde(default)]
    pub local_iface: Option<String>,
    pub local_address: IpAddr,
    pub peer_address: IpAddr,
    /// UDP port of this end's probe responder; default `probe.port`. Lets
    /// two cables share an address (or a test mesh share one host).
    #[serde(default)]
    pub local_port: Option<u16>,
    /// UDP port of the peer's responder on this cable; default `probe.port`.
    #[serde(default)]
    pub peer_port: Option<u16>,
    /// Lets meshd flag a TB5 cable that negotiated 40 Gb/s instead of 80.
    #[serde(default)]
    pub expected_speed_gbps: Option<u32>,
    /// The RDMA device on this end, for JACCL hostfiles. Default on macOS:
    /// `rdma_<local_iface>`.
    #[serde(default)]
    pub rdma_device: Option<String>,
}

impl LinkConfig {
    /// Where this end's probe responder listens.
    pub fn local_probe_addr(&self, probe: &ProbeConfig) -> SocketAddr {
        SocketAddr::new(self.local_address, self.local_port.unwrap_or(probe.port))
    }

    /// Where this end sends its probes: the peer's responder.
    pub fn peer_probe_addr(&self, probe: &ProbeConfig) -> SocketAddr {
        SocketAddr::new(self.peer_address, self.peer_port.unwrap_or(probe.port))
    }

    /// The configured device, else on macOS the one paired with the
    /// interface (`en2` → `rdma_en2`, ARCHITECTURE.md, Field facts).
    pub fn rdma_device_on(&self, os: meshd_domain::facts::OsKind) -> Option<String> {
        self.rdma_device.clone().or_else(|| match os {
            meshd_domain::facts::OsKind::Macos => self
                .local_iface
                .as_ref()
                .map(|iface| format!("rdma_{iface}")),
            _ => None,
        })
    }
}

/// The incident history kept on this node's disk (`meshctl history`).
/// Read at start; a reload that changes it applies at the next start.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Keep no history at all.
    pub enabled: bool,
    /// The store's file. Default (`meshd run`): `history.redb` in the state
    /// directory: systemd's `$STATE_DIRECTORY` (`/var/lib/meshd`), else
    /// `/var/lib/meshd` on Linux and `/Library/Application Support/meshd`
    /// on macOS. A node started some other way (tests, the demo) keeps none
    /// unless this is set. Relative paths are from the config file's
    /// directory.
    pub path: Option<PathBuf>,
    /// The file's size cap: the oldest incidents are dropped first to stay
    /// under it.
    pub max_bytes: u64,
    /// Incidents that ended longer ago than this are dropped.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
}

/// `history.redb` in the state directory: systemd's `$STATE_DIRECTORY`
/// (its first entry), else the platform's.
pub fn default_history_path(state_directory: Option<&str>) -> PathBuf {
    let dir = state_directory
        .and_then(|dirs| dirs.split(':').next())
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            if cfg!(target_os = "macos") {
                PathBuf::from("/Library/Application Support/meshd")
            } else {
                PathBuf::from("/var/lib/meshd")
            }
        });
    dir.join(HISTORY_FILE_NAME)
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            path: None,
            max_bytes: DEFAULT_HISTORY_MAX_BYTES,
            max_age: DEFAULT_HISTORY_MAX_AGE,
        }
    }
}

/// Where this node's platform facts come from and how often.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlatformConfig {
    /// How often ports, peers, speeds, RDMA state and addresses are read.
    #[serde(with = "humantime_serde")]
    pub facts_interval: Duration,
    /// Read the facts from this bundle directory (`meshctl bundle`) instead
    /// of this host: diagnosing another node's capture, and tests.
    pub replay_dir: Option<std::path::PathBuf>,
}

impl Default for PlatformConfig {
    fn default() -> Self {
        Self {
            facts_interval: DEFAULT_FACTS_INTERVAL,
            replay_dir: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    pub payload_bytes: u32,
    #[serde(with = "humantime_serde")]
    pub mtu_interval: Duration,
    pub mtu_payload_bytes: u32,
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    pub port: u16,
    /// The opt-in active RDMA probe: one queue pair per cable exchanging a
    /// small message with the peer's once a second.
    pub rdma: RdmaProbeMode,
}

/// When the active RDMA probe runs (`probe.rdma`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RdmaProbeMode {
    /// Never: meshd only reads RDMA state (the default).
    #[default]
    Off,
    /// Only while no other program holds queue pairs on the device (Linux,
    /// from the kernel's RDMA resource tracking).
    Idle,
    /// Always, beside running jobs.
    Always,
}

impl RdmaProbeMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Idle => "idle",
            Self::Always => "always",
        }
    }
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            interval: DEFAULT_PROBE_INTERVAL,
            payload_bytes: DEFAULT_PROBE_PAYLOAD_BYTES,
            mtu_interval: DEFAULT_MTU_INTERVAL,
            mtu_payload_bytes: DEFAULT_MTU_PAYLOAD_BYTES,
            timeout: DEFAULT_PROBE_TIMEOUT,
            port: DEFAULT_PROBE_PORT,
            rdma: RdmaProbeMode::Off,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportConfig {
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    #[serde(with = "humantime_serde")]
    pub stale_after: Duration,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            interval: DEFAULT_REPORT_INTERVAL,
            stale_after: DEFAULT_STALE_AFTER,
        }
    }
}

/// Where the verdict engine draws the lines between up, degraded, down and
/// flapping. Ratios are 0–1, like the exported metrics.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// No probe reply on both ends of a link for this long: the link is down.
    #[serde(with = "humantime_serde")]
    pub down_after: Duration,
    pub loss_degraded: f64,
    pub loss_down: f64,
    pub rtt_p99_factor: f64,
    /// An RTT rise smaller than this is never degradation, whatever the
    /// factor says: microsecond baselines jitter by more than 3x on a busy host.
    #[serde(with = "humantime_serde")]
    pub rtt_min_increase: Duration,
    #[serde(with = "humantime_serde")]
    pub flap_window: Duration,
    pub flap_changes: u32,
    pub cpu_saturated: f64,
    /// This node's clock off the mesh's by more than this raises `clock_skew`.
    #[serde(with = "humantime_serde")]
    pub clock_skew: Duration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            down_after: DEFAULT_DOWN_AFTER,
            loss_degraded: DEFAULT_LOSS_DEGRADED,
            loss_down: DEFAULT_LOSS_DOWN,
            rtt_p99_factor: DEFAULT_RTT_P99_FACTOR,
            rtt_min_increase: DEFAULT_RTT_MIN_INCREASE,
            flap_window: DEFAULT_FLAP_WINDOW,
            flap_changes: DEFAULT_FLAP_CHANGES,
            cpu_saturated: DEFAULT_CPU_SATURATED,
            clock_skew: DEFAULT_CLOCK_SKEW,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertingConfig {
    /// Where alerts go; empty means metrics only, no pushed alerts.
    pub alertmanagers: Vec<AlertmanagerConfig>,
    #[serde(with = "humantime_serde")]
    pub resend_interval: Duration,
}

impl Default for AlertingConfig {
    fn default() -> Self {
        AlertingConfig {
            alertmanagers: Vec::new(),
            resend_interval: DEFAULT_RESEND_INTERVAL,
        }
    }
}

/// The file as written. Differs from [`Config`] only in `node.id` being
/// optional, which is resolved against the host name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ConfigFile {
    node: NodeSection,
    listen: ListenConfig,
    peers: Vec<PeerConfig>,
    links: Vec<LinkConfig>,
    probe: ProbeConfig,
    report: ReportConfig,
    thresholds: Thresholds,
    alerting: AlertingConfig,
    watch: WatchConfig,
    platform: PlatformConfig,
    tls: TlsConfig,
    history: HistoryConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NodeSection {
    id: Option<NodeId>,
}

/// A relative path in a config file is relative to the file's directory,
/// whatever the daemon's working directory (launchd starts it in `/`).
fn beside(base: &Path, path: Option<PathBuf>) -> Option<PathBuf> {
    path.map(|p| if p.is_relative() { base.join(p) } else { p })
}

impl ConfigFile {
    fn resolve(self, hostname: &str, base: &Path) -> Config {
        let tls = TlsConfig {
            ca: beside(base, self.tls.ca),
            cert: beside(base, self.tls.cert),
            key: beside(base, self.tls.key),
            ..self.tls
        };
        let platform = PlatformConfig {
            replay_dir: beside(base, self.platform.replay_dir),
            ..self.platform
        };
        let history = HistoryConfig {
            path: beside(base, self.history.path),
            ..self.history
        };
        Config {
            node: NodeConfig {
                id: self
                    .node
                    .id
                    .unwrap_or_else(|| NodeId::from_hostname(hostname)),
            },
            listen: self.listen,
            peers: self.peers,
            links: self.links,
            probe: self.probe,
            report: self.report,
            thresholds: self.thresholds,
            alerting: self.alerting,
            watch: self.watch,
            platform,
            tls,
            history,
        }
    }
}

impl Config {
    /// What `meshd run` uses without a config file: a one-node mesh with
    /// every default, so a single Mac can be monitored with zero setup.
    pub fn embedded_default(hostname: &str) -> Config {
        ConfigFile::default().resolve(hostname, Path::new(""))
    }

    /// Parses and validates `source`. `origin` is only used in messages.
    /// A syntax error is one diagnostic (parsing stops there); values of the
    /// wrong type or shape are all listed, and once every value reads, every
    /// rule violation is; each sorted by line.
    pub fn parse(source: &str, origin: &str, hostname: &str) -> Result<Config, ConfigError> {
        Config::parse_with_advice(source, origin, hostname, &BTreeMap::new())
            .map(|checked| checked.config)
    }

    /// [`Config::parse`], and the advice on what works but is likely
    /// wrong, with lines: [`Config::warnings`], and what does not fit this
    /// host's interfaces given their MTUs (`interface_mtus`, by name; see
    /// `meshd_platform::interface_mtus`).
    pub fn parse_with_advice(
        source: &str,
        origin: &str,
        hostname: &str,
        interface_mtus: &BTreeMap<String, u32>,
    ) -> Result<Checked, ConfigError> {
        Self::parse_in(source, origin, hostname, interface_mtus, Path::new(""))
    }

    /// [`Config::parse_with_advice`], relative paths taken from `base`.
    fn parse_in(
        source: &str,
        origin: &str,
        hostname: &str,
        interface_mtus: &BTreeMap<String, u32>,
        base: &Path,
    ) -> Result<Checked, ConfigError> {
        let doc = toml_edit::Document::parse(source).map_err(|e| {
            ConfigError::Toml(Diagnostic {
                origin: origin.to_owned(),
                line: e.span().map(|s| line_of_offset(source, s.start)),
                key: None,
                message: one_line(e.message()),
            })
        })?;
        let locator = Locator::new(source, &doc);
        let file: ConfigFile = toml::from_str(source).map_err(|first| {
            // serde stops at the first wrong value; name every one.
            let mut all: Vec<Diagnostic> = std::iter::once(&first)
                .chain(&types::errors(source))
                .map(|e| serde_diagnostic(e, origin, &locator))
                .collect();
            all.sort_by_key(|d| d.line.unwrap_or(usize::MAX));
            all.dedup();
            match <[Diagnostic; 1]>::try_from(all) {
                Ok([one]) => ConfigError::Toml(one),
                Err(many) => ConfigError::Invalid(many),
            }
        })?;
        let config = file.resolve(hostname, base);
        let diagnostics = |problems: Vec<Problem>| {
            let mut diagnostics: Vec<Diagnostic> = problems
                .into_iter()
                .map(|p| problem_diagnostic(p, origin, &locator))
                .collect();
            diagnostics.sort_by_key(|d| d.line.unwrap_or(usize::MAX));
            diagnostics
        };
        let problems = config.validate();
        if !problems.is_empty() {
            return Err(ConfigError::Invalid(diagnostics(problems)));
        }
        let mut advice = config.warnings();
        advice.extend(validate::interface_advice(&config, interface_mtus));
        Ok(Checked {
            warnings: diagnostics(advice),
            config,
        })
    }

    /// Reads `path` and parses it; the path as given names the file in
    /// messages.
    ///
    /// The file must be a regular file of at most [`MAX_CONFIG_BYTES`]. A
    /// symbolic link to one is followed (configs are often links into a
    /// managed release directory); a FIFO, a device (a link to
    /// `/dev/zero`), a socket or a directory is refused at once by name,
    /// never read, so a reload can neither hang nor fill memory.
    pub fn load(path: &Path, hostname: &str) -> Result<Config, ConfigError> {
        Config::load_with_advice(path, hostname, &BTreeMap::new()).map(|checked| checked.config)
    }

    /// [`Config::load`] with [`Config::parse_with_advice`]'s advice.
    pub fn load_with_advice(
        path: &Path,
        hostname: &str,
        interface_mtus: &BTreeMap<String, u32>,
    ) -> Result<Checked, ConfigError> {
        let source =
            meshd_platform::file::read_regular_text(path, MAX_CONFIG_BYTES).map_err(|error| {
                ConfigError::Unreadable {
                    path: path.to_owned(),
                    problem: error.problem,
                }
            })?;
        Config::parse_in(
            &source,
            &path.display().to_string(),
            hostname,
            interface_mtus,
            path.parent().unwrap_or(Path::new("")),
        )
    }

    /// Every rule the config breaks on this node, in no particular order.
    /// Pure, so a reload can be checked before anything is torn down.
    ///
    /// The limits that depend on the OS (the largest probe) are this
    /// binary's OS's: a node's config is checked and run on that node.
    pub fn validate(&self) -> Vec<Problem> {
        self.validate_for(meshd_platform::this_os())
    }

    /// Every rule the config breaks on a node running `os`.
    pub fn validate_for(&self, os: meshd_domain::facts::OsKind) -> Vec<Problem> {
        validate::validate(self, os)
    }

    /// What works but is likely wrong (cable addresses in 169.254/16);
    /// never a reason to refuse the config.
    pub fn warnings(&self) -> Vec<Problem> {
        validate::advise(self)
    }

    /// This config with the history's default path filled in when none is
    /// set, from `state_directory` (`$STATE_DIRECTORY`): what `meshd run`
    /// does. A node started otherwise keeps no history unless its config
    /// names a file.
    pub fn with_default_history_path(mut self, state_directory: Option<&str>) -> Config {
        if self.history.enabled && self.history.path.is_none() {
            self.history.path = Some(default_history_path(state_directory));
        }
        self
    }

    /// The configured members of the mesh (this node and its peers), sorted,
    /// which is what quorum counts and what picks the alert leader.
    pub fn members(&self) -> Vec<NodeId> {
        let mut members: Vec<NodeId> = std::iter::once(self.node.id.clone())
            .chain(self.peers.iter().map(|p| p.id.clone()))
            .collect();
        members.sort();
        members.dedup();
        members
    }
}
