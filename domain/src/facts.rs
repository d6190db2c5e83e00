//! What a node knows about its own hardware and OS (its *facts*), the cable
//! map built from every node's facts, and the platform checks run on them.
//!
//! These are the domain forms of `meshd/v1/facts.proto`; the platform layer
//! fills them, reports carry them, and `meshctl doctor` prints them.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{NodeId, RdmaPortState};

/// Which platform layer gathered the facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OsKind {
    Macos,
    Linux,
    #[default]
    Other,
}

impl OsKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OsKind::Macos => "macos",
            OsKind::Linux => "linux",
            OsKind::Other => "other",
        }
    }

    /// Unknown names read as `Other`: a newer peer may know more systems.
    pub fn from_name(name: &str) -> Self {
        match name {
            "macos" => OsKind::Macos,
            "linux" => OsKind::Linux,
            _ => OsKind::Other,
        }
    }
}

impl fmt::Display for OsKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node's facts about itself. A fact that could not be seen is unknown
/// (`None`, an empty string where noted, or a `*_read`/`*_complete` flag
/// unset), never a default that reads as healthy; `blind_spots` says why.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeFacts {
    pub os: OsKind,
    /// `sw_vers -productVersion` ("26.2"), or the kernel release on Linux;
    /// empty when unknown.
    pub os_version: String,
    /// `sw_vers -buildVersion` ("25F71"), which tells a beta from a release
    /// of the same version; empty when unknown (and on Linux).
    #[serde(default)]
    pub os_build: String,
    /// Hardware model identifier ("Mac16,9"); empty when unknown.
    pub model: String,
    /// `rdma_ctl status` on macOS; on Linux, whether any RDMA device exists.
    /// `None` when it could not be found out.
    pub rdma_enabled: Option<bool>,
    /// The RDMA device list was read (verbs, `ibv_devices`, `ibv_devinfo`,
    /// sysfs), so a port without `rdma_device` has none; when false, an
    /// empty `rdma_device` is unknown.
    #[serde(default)]
    pub rdma_devices_read: bool,
    pub ports: Vec<PortFact>,
    /// `ports` lists every Thunderbolt port (macOS: the Thunderbolt report
    /// or the hardware ports were read) or every RDMA port (Linux); when
    /// false, only the ports some other output happened to name are known.
    #[serde(default)]
    pub ports_complete: bool,
    /// Every bridge interface (Thunderbolt Bridge is `bridge0` on macOS);
    /// `None` when the bridges could not be listed.
    pub bridges: Option<Vec<BridgeFact>>,
    /// The checks this node ran on its own facts.
    pub checks: Vec<CheckResult>,
    /// What could not be seen here and why, so that a missing fact is never
    /// read as a healthy one ("system_profiler: timed out after 5s").
    pub blind_spots: Vec<String>,
    /// "live", or "replay:<dir>" when read from a bundle.
    pub source: String,
    /// Which boot of its host the node is in; both parts unknown when
    /// neither could be read.
    #[serde(default)]
    pub boot: BootIdentity,
    /// Memory as last read; `None` when nothing about it could be read.
    #[serde(default)]
    pub memory: Option<MemoryFacts>,
    /// Power settings (macOS `pmset -g`); `None` when unknown (and on
    /// Linux, which has no such settings).
    #[serde(default)]
    pub power: Option<PowerSettings>,
    /// The kernel panic reports the node keeps (macOS
    /// `/Library/Logs/DiagnosticReports`, Linux pstore); `None` when they
    /// could not be looked at.
    #[serde(default)]
    pub panics: Option<PanicFacts>,
    /// The macOS Application Firewall; `None` when it was not read (or
    /// the node is not a Mac).
    #[serde(default)]
    pub firewall: Option<FirewallFact>,
    /// Who configures this Mac's network services (macOS); `None` when not
    /// read (or the node is not a Mac).
    #[serde(default)]
    pub network_setup: Option<NetworkSetupFact>,
}

/// Boot times of one boot read twice may differ by this much: Linux
/// derives `btime` from the clock and the uptime, so a clock adjustment
/// moves it by a second or more.
pub const BOOT_TIME_TOLERANCE_SECS: u64 = 60;

/// Which boot of its host a node is in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BootIdentity {
    /// macOS `kern.bootsessionuuid`, Linux `/proc/sys/kernel/random/boot_id`:
    /// new on every boot. `None` when unknown.
    #[serde(default)]
    pub id: Option<String>,
    /// When the host booted, in seconds since the Unix epoch (macOS
    /// `kern.boottime`, Linux `btime` in `/proc/stat`). `None` when unknown.
    #[serde(default)]
    pub booted_at_unix: Option<u64>,
}

impl BootIdentity {
    pub fn is_known(&self) -> bool {
        self.id.is_some() || self.booted_at_unix.is_some()
    }

    /// Whether `other` is a reading of the same boot: by the boot ids when
    /// both have one, else by the boot times (within
    /// [`BOOT_TIME_TOLERANCE_SECS`]); `None` when they cannot tell.
    pub fn same_boot_as(&self, other: &BootIdentity) -> Option<bool> {
        if let (Some(a), Some(b)) = (&self.id, &other.id) {
            return Some(a.eq_ignore_ascii_case(b));
        }
        let (a, b) = (self.booted_at_unix?, other.booted_at_unix?);
        Some(a.abs_diff(b) <= BOOT_TIME_TOLERANCE_SECS)
    }
}

/// The kernel's view of how short memory is (macOS
/// `kern.memorystatus_vm_pressure_level`: 1, 2, 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryPressure {
    Normal,
    Warning,
    Critical,
}

impl MemoryPressure {
    pub const ALL: [MemoryPressure; 3] = [
        MemoryPressure::Normal,
        MemoryPressure::Warning,
        MemoryPressure::Critical,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MemoryPressure::Normal => "normal",
            MemoryPressure::Warning => "warning",
            MemoryPressure::Critical => "critical",
        }
    }
}

impl fmt::Display for MemoryPressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reading of the node's memory. Every figure is `None` when it could
/// not be read; none is ever a guess.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemoryFacts {
    /// Physical memory (macOS `hw.memsize`, Linux `MemTotal`).
    pub total_bytes: Option<u64>,
    /// Memory the kernel will not page out: macOS "Pages wired down"
    /// (`vm_stat`), Linux `Unevictable` (which includes `Mlocked`).
    pub wired_bytes: Option<u64>,
    /// Linux `Mlocked`: locked by processes with mlock(2).
    pub locked_bytes: Option<u64>,
    pub swap_total_bytes: Option<u64>,
    pub swap_used_bytes: Option<u64>,
    /// macOS only: the kernel's pressure level.
    pub pressure: Option<MemoryPressure>,
    /// Linux pressure stall information (`/proc/pressure/memory`): the
    /// share of the last 10 s in which some (`some avg10`) or all (`full
    /// avg10`) runnable tasks waited for memory, in basis points (1/100
    /// of a percent).
    pub stall_some_bp: Option<u32>,
    pub stall_full_bp: Option<u32>,
    /// macOS `iogpu.wired_limit_mb` in bytes: how much the GPU may wire;
    /// `Some(0)` is macOS's own default.
    pub gpu_wired_limit_bytes: Option<u64>,
}

/// macOS power settings as `pmset -g` shows the ones in use. Each is
/// `None` when its line is missing (a MacBook has no `autorestart`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PowerSettings {
    /// `sleep`: minutes idle before the system sleeps; 0 is never.
    pub sleep_minutes: Option<u32>,
    /// `disksleep`: minutes idle before disks spin down; 0 is never.
    pub disk_sleep_minutes: Option<u32>,
    /// `autorestart`: start again by itself after a power failure.
    pub auto_restart: Option<bool>,
    /// `SleepDisabled` (`pmset disablesleep 1`): the system never sleeps,
    /// whatever `sleep` says.
    pub sleep_disabled: Option<bool>,
    /// The processes whose assertions hold sleep off right now ("sleep
    /// prevented by sharingd, coreaudiod"): held only while they run.
    #[serde(default)]
    pub sleep_prevented_by: Vec<String>,
}

/// The kernel panic reports a node keeps, as far as they were read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PanicFacts {
    /// The newest report; `None` when there is none.
    pub latest: Option<PanicReport>,
}

/// One kernel panic report, from the first part of its file only.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PanicReport {
    /// Its file name ("panic-full-2026-03-11-114515.0002.panic",
    /// "dmesg-ramoops-0"): a report is known again by it.
    pub file: String,
    /// When the report says the panic was recorded, in seconds since the
    /// Unix epoch; `None` when it does not say.
    pub at_unix: Option<u64>,
    /// The first line of the panic message
    /// (`panic(cpu 6 caller 0x…): "completeMemory() prepare count underflow" @IOGPUMemory.cpp:550`).
    pub first_line: String,
    /// The boot the panic ended (macOS "Boot session UUID"); `None` when
    /// the part read does not name it.
    pub boot_id: Option<String>,
}

/// How a port's IPv4 address is configured (macOS `networksetup -getinfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ipv4Method {
    /// A static address: what a mesh cable needs.
    Manual,
    Dhcp,
    Bootp,
    /// A static address with the router from DHCP.
    ManualWithDhcpRouter,
}

impl Ipv4Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Ipv4Method::Manual => "manual",
            Ipv4Method::Dhcp => "dhcp",
            Ipv4Method::Bootp => "bootp",
            Ipv4Method::ManualWithDhcpRouter => "manual_with_dhcp_router",
        }
    }
}

impl fmt::Display for Ipv4Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One block of `networksetup -listallhardwareports`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HardwarePort {
    /// "Thunderbolt 2", "Thunderbolt Bridge", "Wi-Fi".
    pub name: String,
    /// "en6"; empty when the block has no `Device:` line.
    pub device: String,
    pub ethernet_address: String,
}

impl HardwarePort {
    /// N of "Thunderbolt N", the receptacle whose interface this is.
    pub fn thunderbolt_number(&self) -> Option<u32> {
        let number = self.name.strip_prefix("Thunderbolt ")?;
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        number.parse().ok()
    }
}

/// The Application Firewall's command-line tool (macOS), which the firewall
/// facts are read with and the firewall fixes name.
pub const SOCKETFILTERFW: &str = "/usr/libexec/ApplicationFirewall/socketfilterfw";

/// The macOS Application Firewall as `socketfilterfw` shows it. Only the
/// rules for meshd are kept: they are what the checks judge, and they keep
/// a node's report small whatever else the Mac allows.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FirewallFact {
    /// On (`--getglobalstate` state 1 or 2); `None` when unknown.
    pub enabled: Option<bool>,
    /// State 2: every incoming connection is blocked whatever the rules
    /// say; `None` when unknown.
    pub block_all: Option<bool>,
    /// The `--listapps` rules for binaries named `meshd`; `None` when the
    /// list could not be read.
    pub meshd_rules: Option<Vec<FirewallRule>>,
}

/// exo's network LaunchDaemon: at load and about every half hour it
/// switches the Mac to its network location "exo" and puts every
/// Thunderbolt port's service ("EXO Thunderbolt N") on DHCP, undoing any
/// other setting.
pub const EXO_NETWORK_DAEMON: &str = "io.exo.networksetup";
/// The network location exo's setup creates and switches to.
pub const EXO_LOCATION: &str = "exo";
/// The prefix of the per-port services exo's setup creates.
pub const EXO_SERVICE_PREFIX: &str = "EXO ";

/// What configures a Mac's network services besides its owner: the
/// active network location and the tools known to re-apply their own
/// setup (exo's LaunchDaemon).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NetworkSetupFact {
    /// The active network location (`networksetup -getcurrentlocation`:
    /// "Automatic", "exo"); `None` when unknown.
    pub location: Option<String>,
    /// exo's LaunchDaemon ([`EXO_NETWORK_DAEMON`]) is installed; `None`
    /// when /Library/LaunchDaemons could not be listed.
    pub exo_daemon: Option<bool>,
}

/// Which setup gave a port its network configuration, as far as the facts
/// show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSetup {
    /// exo's: a service named "EXO …", the location "exo", or exo's
    /// daemon. `reapplied` when exo's daemon is installed, which undoes a
    /// manual change within half an hour.
    Exo { evidence: String, reapplied: bool },
    /// Nothing known configures it but its owner.
    Owner,
}

impl NodeFacts {
    /// The setup behind `port`'s network service. exo's daemon re-applies
    /// its setup to every Thunderbolt port whatever the service is called,
    /// so it alone is enough; without it, an "EXO …" service or the
    /// location "exo" is exo's setup left in place.
    pub fn port_setup(&self, port: &PortFact) -> PortSetup {
        let setup = self.network_setup.as_ref();
        let location = setup.and_then(|s| s.location.as_deref());
        let reapplied = setup.and_then(|s| s.exo_daemon) == Some(true);
        let mut seen = Vec::new();
        if port.service.starts_with(EXO_SERVICE_PREFIX) {
            seen.push(format!("its service \"{}\" is exo's", port.service));
        }
        if location == Some(EXO_LOCATION) {
            seen.push(format!("the network location is exo's \"{EXO_LOCATION}\""));
        }
        if reapplied {
            seen.push(format!(
                "exo's {EXO_NETWORK_DAEMON} re-applies it at load and every half hour"
            ));
        }
        if seen.is_empty() {
            PortSetup::Owner
        } else {
            PortSetup::Exo {
                evidence: seen.join("; "),
                reapplied,
            }
        }
    }
}

/// One application rule of the Application Firewall.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FirewallRule {
    /// The binary (or, since macOS 15, a bundle identifier).
    pub path: String,
    /// Incoming connections allowed (`true`) or blocked (`false`); `None`
    /// for any other state the tool printed.
    pub allowed: Option<bool>,
}

/// One Thunderbolt receptacle (macOS) or RDMA-capable NIC port (Linux).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PortFact {
    /// "Thunderbolt 2" (the hardware port name), or the NIC name on Linux;
    /// empty when only an RDMA device names the port.
    pub name: String,
    /// Receptacle number on macOS; 0 elsewhere and when unknown.
    pub receptacle: u32,
    /// This port's own Thunderbolt domain UUID; empty when unknown.
    pub domain_uuid: String,
    /// The paired IP interface ("en2"); empty when unknown.
    pub iface: String,
    /// The paired RDMA device ("rdma_en2"); empty when there is none, or
    /// when the node's `rdma_devices_read` is false, unknown.
    pub rdma_device: String,
    /// Node GUID of `rdma_device` ("e0c5797d9c8fac05"); empty when unknown.
    #[serde(default)]
    pub rdma_node_guid: String,
    /// Something is linked on the port (a Mac, a dock, a drive), from the
    /// Thunderbolt report; `None` when this port's Thunderbolt facts are
    /// unknown (then `peer` and `other_device` being empty says nothing).
    #[serde(default)]
    pub linked: Option<bool>,
    /// Negotiated link speed; 0 when nothing is linked or it is unknown.
    pub negotiated_speed_bps: u64,
    /// What the port can do ("Up to 120 Gb/s" when idle); 0 when unknown.
    pub max_speed_bps: u64,
    /// The Mac on the other end of the cable.
    pub peer: Option<PeerFact>,
    /// A dock, drive or hub on this port (not a mesh peer).
    pub other_device: Option<String>,
    /// Some ports are reported as not usable for RDMA (data, not code).
    pub usable_for_rdma: bool,
    /// IPv4 addresses of `iface`; `None` when they could not be read.
    pub ipv4: Option<Vec<Ipv4Cidr>>,
    /// Interface up (`status: active` / operstate up); `None` when unknown.
    pub iface_up: Option<bool>,
    /// The RDMA port of `rdma_device`, when there is one.
    pub rdma: Option<RdmaPortFact>,
    /// How the IPv4 address of `iface` is configured (macOS, from its
    /// network service); `None` when unknown.
    #[serde(default)]
    pub ipv4_method: Option<Ipv4Method>,
    /// The network service of `iface` ("Thunderbolt 2", "EXO Thunderbolt
    /// 2": users and tools rename them), which `networksetup` commands
    /// take; empty when unknown or none.
    #[serde(default)]
    pub service: String,
}

impl PortFact {
    /// The port's IPv4 addresses, none when unknown.
    pub fn addresses(&self) -> &[Ipv4Cidr] {
        self.ipv4.as_deref().unwrap_or_default()
    }

    /// Cabled to a Mac: `Some(true)` with a peer, `Some(false)` when the
    /// Thunderbolt report shows nothing or only other devices on it, `None`
    /// when unknown (also when something is linked that the report does
    /// not describe).
    pub fn cabled_to_mac(&self) -> Option<bool> {
        match (&self.peer, self.linked, &self.other_device) {
            (Some(_), _, _) => Some(true),
            (None, Some(false), _) | (None, Some(true), Some(_)) => Some(false),
            (None, Some(true), None) | (None, None, _) => None,
        }
    }
}

/// A bridge interface: its state and members, as the OS shows them. Whether
/// it forwards follows from the state ([`BridgeFact::forwarding`]); the
/// network service is context, never proof.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BridgeFact {
    pub name: String,
    /// The flags say UP and RUNNING (macOS `ifconfig`; Linux IFF_UP); a
    /// bridge forwards nothing otherwise. `None` when unknown.
    pub up: Option<bool>,
    /// A member has link: macOS `status: active`, Linux operstate up.
    /// `None` when no status was shown.
    pub member_link: Option<bool>,
    pub members: Vec<String>,
    /// The network service whose device it is (macOS), found by device.
    pub service: Option<String>,
    /// The service is enabled in the network preferences (macOS); `None`
    /// when unknown.
    pub service_enabled: Option<bool>,
}

impl BridgeFact {
    /// Frames pass between its members: it is UP and RUNNING and its status
    /// does not say that no member has link (XNU's bridge reports `status:
    /// active` whenever a member has link, even while the bridge itself is
    /// down, so the status alone proves nothing). `None` when the flags
    /// are unknown.
    pub fn forwarding(&self) -> Option<bool> {
        match (self.up, self.member_link) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), _) => Some(true),
            (None, _) => None,
        }
    }
}

/// The Mac at the other end of a Thunderbolt cable, as this port sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PeerFact {
    /// The peer's own domain UUID on its end of the cable.
    pub domain_uuid: String,
    /// Model identifier ("Mac17,7") where the peer reports one.
    pub model: String,
    /// "MacBook Pro".
    pub name: String,
    /// The peer advertises the RDMA service (Thunderbolt protocol 64087),
    /// which it does only with RDMA enabled; `None` when its services were
    /// not listed.
    pub rdma_service: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaPortFact {
    /// Port number on the device (1-based, as verbs counts).
    pub port: u32,
    #[serde(with = "rdma_port_state_name")]
    pub state: RdmaPortState,
    /// Active width × lane speed; 0 when unknown.
    pub active_speed_bps: u64,
    pub gids: Vec<Gid>,
    /// "Thunderbolt", "Ethernet", "InfiniBand"; empty when unknown.
    #[serde(default)]
    pub link_layer: String,
    /// In bytes; `None` when unknown.
    #[serde(default)]
    pub active_mtu: Option<u32>,
    #[serde(default)]
    pub max_mtu: Option<u32>,
    /// What read the port; `None` when the sender did not say (an older
    /// peer or bundle).
    #[serde(default)]
    pub reader: Option<RdmaReader>,
}

/// Where an RDMA port's facts came from (`doctor --json`: `"reader":
/// "verbs"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RdmaReader {
    /// The verbs library, queried in-process.
    Verbs,
    /// Linux sysfs (`/sys/class/infiniband`).
    Sysfs,
    /// `ibv_devices` and `ibv_devinfo -v` output.
    IbvDevinfo,
}

impl RdmaReader {
    pub fn as_str(self) -> &'static str {
        match self {
            RdmaReader::Verbs => "verbs",
            RdmaReader::Sysfs => "sysfs",
            RdmaReader::IbvDevinfo => "ibv_devinfo",
        }
    }
}

impl fmt::Display for RdmaReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RdmaPortFact {
    pub fn gid(&self, index: u32) -> Option<Ipv6Addr> {
        self.gids
            .iter()
            .find(|g| g.index == index)
            .map(|g| g.address)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gid {
    pub index: u32,
    pub address: Ipv6Addr,
}

/// An IPv4 address with its prefix length ("169.254.12.1/30"); serialized
/// in that notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Ipv4Cidr {
    pub address: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Cidr {
    /// `None` when `prefix` is over 32.
    pub fn new(address: Ipv4Addr, prefix: u8) -> Option<Self> {
        (prefix <= 32).then_some(Self { address, prefix })
    }

    pub fn mask(self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        }
    }

    pub fn network(self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.address) & self.mask())
    }

    pub fn contains(self, address: Ipv4Addr) -> bool {
        u32::from(address) & self.mask() == u32::from(self.network())
    }

    /// The two networks share at least one address.
    pub fn overlaps(self, other: Ipv4Cidr) -> bool {
        let mask = self.mask() & other.mask();
        u32::from(self.address) & mask == u32::from(other.address) & mask
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

impl From<Ipv4Cidr> for String {
    fn from(cidr: Ipv4Cidr) -> String {
        cidr.to_string()
    }
}

impl TryFrom<String> for Ipv4Cidr {
    type Error = CidrError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// RDMA port states by their names ("active"), as everywhere else.
mod rdma_port_state_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::RdmaPortState;

    pub fn serialize<S: Serializer>(state: &RdmaPortState, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(state.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<RdmaPortState, D::Error> {
        let name = String::deserialize(d)?;
        name.parse()
            .map_err(|_| serde::de::Error::custom(format!("unknown RDMA port state {name:?}")))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IPv4 address with a prefix (a.b.c.d/0-32)")]
pub struct CidrError(pub String);

impl FromStr for Ipv4Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || CidrError(s.to_owned());
        let (address, prefix) = s.split_once('/').ok_or_else(bad)?;
        let address: Ipv4Addr = address.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        Ipv4Cidr::new(address, prefix).ok_or_else(bad)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Pass,
    Warn,
    Fail,
    /// Could not be evaluated here (no RDMA library on this OS, no facts).
    Skipped,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Skipped => "skipped",
        }
    }
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One platform check: its name, outcome, the facts behind it and the
/// command that fixes a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// e.g. "rdma_enabled", "full_mesh_cabled", "link_speed".
    pub name: String,
    /// The node it is about; `None` for a check of the whole mesh.
    pub node: Option<NodeId>,
    pub status: CheckStatus,
    pub evidence: Vec<String>,
    /// Empty when nothing needs fixing.
    pub fix: String,
}

/// One cable of the mesh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cable {
    /// The end with the lower node id.
    pub a: CableEnd,
    pub b: CableEnd,
    /// Negotiated speed (the lower of the two views); 0 when unknown.
    pub speed_bps: u64,
    /// Matched from Thunderbolt domain UUIDs (true) or taken from config.
    pub discovered: bool,
}

impl Cable {
    /// The end on `node`, if the cable has one there.
    pub fn end_at(&self, node: &NodeId) -> Option<&CableEnd> {
        [&self.a, &self.b].into_iter().find(|end| &end.node == node)
    }

    /// The end opposite `node`.
    pub fn far_end(&self, node: &NodeId) -> Option<&CableEnd> {
        if &self.a.node == node {
            Some(&self.b)
        } else if &self.b.node == node {
            Some(&self.a)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CableEnd {
    pub node: NodeId,
    /// "Thunderbolt 2"; empty when only the config knows the cable.
    pub port: String,
    pub iface: String,
    pub rdma_device: String,
    pub address: Option<Ipv4Addr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Ipv4Cidr {
        s.parse().expect("valid cidr")
    }

    #[test]
    fn cidr_parses_prints_and_rejects() {
        assert_eq!(cidr("169.254.12.1/30").to_string(), "169.254.12.1/30");
        for bad in ["169.254.12.1", "169.254.12.1/33", "x/30", "1.2.3.4/-1", ""] {
            assert!(bad.parse::<Ipv4Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn facts_serialize_to_json_and_back() {
        let facts = NodeFacts {
            os: OsKind::Macos,
            ports: vec![PortFact {
                name: "Thunderbolt 2".into(),
                ipv4: Some(vec![cidr("169.254.0.1/30")]),
                rdma: Some(RdmaPortFact {
                    port: 1,
                    state: RdmaPortState::Active,
                    active_speed_bps: 0,
                    gids: vec![],
                    link_layer: "Thunderbolt".into(),
                    active_mtu: Some(4096),
                    max_mtu: None,
                    reader: Some(RdmaReader::Verbs),
                }),
                ..PortFact::default()
            }],
            ..NodeFacts::default()
        };
        let json = serde_json::to_value(&facts).expect("serializes");
        assert_eq!(json["os"], "macos");
        assert_eq!(json["ports"][0]["ipv4"][0], "169.254.0.1/30");
        assert_eq!(json["ports"][0]["rdma"]["state"], "active");
        assert_eq!(json["ports"][0]["rdma"]["reader"], "verbs");
        let back: NodeFacts = serde_json::from_value(json).expect("deserializes");
        assert_eq!(back, facts);
    }

    #[test]
    fn a_bridge_forwards_only_when_up_and_its_status_allows() {
        let bridge = |up, member_link| BridgeFact {
            up,
            member_link,
            ..BridgeFact::default()
        };
        // XNU says `status: active` for a down bridge whose member has link.
        assert_eq!(bridge(Some(false), Some(true)).forwarding(), Some(false));
        assert_eq!(bridge(Some(true), Some(true)).forwarding(), Some(true));
        assert_eq!(bridge(Some(true), Some(false)).forwarding(), Some(false));
        assert_eq!(bridge(Some(true), None).forwarding(), Some(true));
        assert_eq!(bridge(None, Some(false)).forwarding(), Some(false));
        assert_eq!(bridge(None, Some(true)).forwarding(), None);
        assert_eq!(bridge(None, None).forwarding(), None);
    }

    #[test]
    fn a_port_is_cabled_to_a_mac_only_when_the_thunderbolt_report_says() {
        let unknown = PortFact::default();
        assert_eq!(unknown.cabled_to_mac(), None);
        let idle = PortFact {
            linked: Some(false),
            ..PortFact::default()
        };
        assert_eq!(idle.cabled_to_mac(), Some(false));
        let dock = PortFact {
            linked: Some(true),
            other_device: Some("Dock".into()),
            ..PortFact::default()
        };
        assert_eq!(dock.cabled_to_mac(), Some(false));
        let mac = PortFact {
            peer: Some(PeerFact::default()),
            ..PortFact::default()
        };
        assert_eq!(mac.cabled_to_mac(), Some(true));
        assert!(mac.addresses().is_empty());
        let undescribed = PortFact {
            linked: Some(true),
            ..PortFact::default()
        };
        assert_eq!(undescribed.cabled_to_mac(), None);
    }

    #[test]
    fn boots_are_told_apart_by_id_else_by_time_else_not_at_all() {
        let boot = |id: Option<&str>, at: Option<u64>| BootIdentity {
            id: id.map(str::to_owned),
            booted_at_unix: at,
        };
        let a = boot(Some("40962879-B7EE-4F13-AF6E-E7266EF5E732"), Some(1_000));
        assert_eq!(
            a.same_boot_as(&boot(
                Some("40962879-b7ee-4f13-af6e-e7266ef5e732"),
                Some(5_000)
            )),
            Some(true),
            "the id decides, in either case"
        );
        assert_eq!(
            a.same_boot_as(&boot(Some("other"), Some(1_000))),
            Some(false)
        );
        assert_eq!(
            a.same_boot_as(&boot(None, Some(1_030))),
            Some(true),
            "btime jitter"
        );
        assert_eq!(a.same_boot_as(&boot(None, Some(1_061))), Some(false));
        assert_eq!(a.same_boot_as(&boot(None, None)), None);
        assert_eq!(
            boot(Some("x"), None).same_boot_as(&boot(None, Some(1))),
            None
        );
        assert!(!BootIdentity::default().is_known());
    }

    #[test]
    fn cidr_network_contains_and_overlaps() {
        let a = cidr("10.0.0.1/30");
        assert_eq!(a.network(), Ipv4Addr::new(10, 0, 0, 0));
        assert!(a.contains(Ipv4Addr::new(10, 0, 0, 2)));
        assert!(!a.contains(Ipv4Addr::new(10, 0, 0, 5)));
        assert!(!a.overlaps(cidr("10.0.0.5/30")));
        assert!(a.overlaps(cidr("10.0.0.2/30")));
        assert!(a.overlaps(cidr("10.0.0.9/24")));
        assert!(cidr("169.254.1.1/16").overlaps(cidr("169.254.200.3/16")));
        assert_eq!(cidr("0.0.0.0/0").mask(), 0);
    }
}
