//! Where the platform layer's raw text comes from: this host (commands under
//! timeouts, files), a bundle directory replayed on any machine, or either
//! of those recorded for a new bundle. Parsers never see the difference.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use meshd_domain::facts::{OsKind, SOCKETFILTERFW};

use crate::command::{RunError, run_with_timeout, stderr_suffix};
use crate::file::{FileError, FileProblem, list_beneath, read_beneath};
use crate::ibv::RdmaDevice;
use crate::verbs;

/// Every command the platform layer runs. All are read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostCommand {
    /// `sw_vers`: ProductName / ProductVersion / BuildVersion.
    SwVers,
    /// `sysctl -n hw.model`: "Mac16,9".
    HwModel,
    /// `system_profiler SPThunderboltDataType -json`.
    Thunderbolt,
    /// `networksetup -listallhardwareports`: "Thunderbolt N" ↔ enX.
    HardwarePorts,
    /// `networksetup -listnetworkserviceorder`: service ↔ device.
    ServiceOrder,
    /// `networksetup -listallnetworkservices`: enabled or `*`disabled.
    AllServices,
    /// `networksetup -getcurrentlocation`: the active network location
    /// ("Automatic", exo's "exo").
    CurrentLocation,
    /// `ifconfig -a`: addresses, status, bridge members.
    Ifconfig,
    /// `rdma_ctl status`: "enabled" / "disabled".
    RdmaCtl,
    /// `ibv_devices`: the RDMA devices and their GUIDs.
    IbvDevices,
    /// `ibv_devinfo -v`: ports, state, width, speed, GID table.
    IbvDevinfo,
    /// `socketfilterfw --getglobalstate`: whether the Application Firewall
    /// is on, and blocking everything.
    FirewallState,
    /// `socketfilterfw --listapps`: its per-application rules.
    FirewallRules,
    /// `ip -j -4 addr show`: IPv4 addresses per interface (Linux; sysfs has
    /// none).
    IpAddr,
    /// `netstat -i -b -n`: every interface's packet counters (macOS), which
    /// the bridge storm watcher samples; numeric, so no name lookup can
    /// stall it.
    InterfaceCounters,
    /// `sysctl hw.memsize vm.swapusage kern.memorystatus_vm_pressure_level
    /// kern.bootsessionuuid kern.boottime`: memory size, swap, the kernel's
    /// pressure level and which boot this is. All five exist on every
    /// macOS meshd runs on; one unknown name would fail the whole command.
    Sysctl,
    /// `vm_stat`: page counts, wired memory among them.
    VmStat,
    /// `sysctl iogpu.wired_limit_mb`: how much the GPU may wire. Apple
    /// silicon only, so on its own: it fails ("unknown oid") elsewhere.
    GpuWiredLimit,
    /// `pmset -g`: sleep, disk sleep, restart after power failure.
    Pmset,
    /// `networksetup -getinfo SERVICE`: how a network service gets its
    /// address. Takes the service as its operand ([`Source::capture_for`]);
    /// one read-only call per Thunderbolt port's service.
    ServiceInfo,
    /// `route -n get ADDRESS`: the kernel's own answer to which route,
    /// interface and gateway carry packets to one IPv4 address (macOS).
    /// Takes the address as its operand.
    RouteGet,
    /// `netstat -r -n -f inet`: the whole IPv4 routing table (macOS), so
    /// one call answers for many addresses.
    RoutingTable,
    /// `ip -j route get ADDRESS`: the kernel's route lookup for one
    /// address, policy rules included (Linux). Takes the address as its
    /// operand.
    IpRouteGet,
}

impl HostCommand {
    /// Every command: the macOS collector's in the order they are run,
    /// then the one it runs per network service, then Linux's `ip`, then
    /// the bridge watcher's, then the path-fallback readers'.
    pub const ALL: &'static [HostCommand] = &[
        HostCommand::SwVers,
        HostCommand::HwModel,
        HostCommand::Thunderbolt,
        HostCommand::HardwarePorts,
        HostCommand::ServiceOrder,
        HostCommand::AllServices,
        HostCommand::CurrentLocation,
        HostCommand::Ifconfig,
        HostCommand::RdmaCtl,
        HostCommand::IbvDevices,
        HostCommand::IbvDevinfo,
        HostCommand::FirewallState,
        HostCommand::FirewallRules,
        HostCommand::Sysctl,
        HostCommand::VmStat,
        HostCommand::GpuWiredLimit,
        HostCommand::Pmset,
        HostCommand::ServiceInfo,
        HostCommand::IpAddr,
        HostCommand::InterfaceCounters,
        HostCommand::RouteGet,
        HostCommand::RoutingTable,
        HostCommand::IpRouteGet,
    ];

    /// The commands of the macOS platform that run once per read, in the
    /// order they are run: the first seventeen of [`HostCommand::ALL`].
    pub const MACOS: &'static [HostCommand] = Self::ALL.split_at(17).0;

    /// What the memory watcher runs on macOS, every `watch.memory.interval`.
    pub const MACOS_MEMORY: &'static [HostCommand] = &[
        HostCommand::Sysctl,
        HostCommand::VmStat,
        HostCommand::GpuWiredLimit,
    ];

    /// The commands of the Linux platform (sysfs does the rest); `ibv_*`
    /// are the fallback where the verbs library cannot be loaded.
    pub const LINUX: &'static [HostCommand] = &[
        HostCommand::IpAddr,
        HostCommand::IbvDevices,
        HostCommand::IbvDevinfo,
    ];

    /// Run on macOS only: a bundle holding the output of any of these was
    /// captured on a Mac. (The rdma-core tools run on both systems.)
    pub fn macos_only(self) -> bool {
        !matches!(
            self,
            HostCommand::IbvDevices
                | HostCommand::IbvDevinfo
                | HostCommand::IpAddr
                | HostCommand::IpRouteGet
        )
    }

    pub fn program(self) -> &'static str {
        match self {
            HostCommand::SwVers => "sw_vers",
            HostCommand::HwModel => "sysctl",
            HostCommand::Thunderbolt => "system_profiler",
            HostCommand::HardwarePorts
            | HostCommand::ServiceOrder
            | HostCommand::AllServices
            | HostCommand::CurrentLocation => "networksetup",
            HostCommand::Ifconfig => "ifconfig",
            HostCommand::RdmaCtl => "rdma_ctl",
            HostCommand::IbvDevices => "ibv_devices",
            HostCommand::IbvDevinfo => "ibv_devinfo",
            HostCommand::IpAddr | HostCommand::IpRouteGet => "ip",
            HostCommand::InterfaceCounters | HostCommand::RoutingTable => "netstat",
            HostCommand::RouteGet => "route",
            // Not on any PATH.
            HostCommand::FirewallState | HostCommand::FirewallRules => SOCKETFILTERFW,
            HostCommand::Sysctl | HostCommand::GpuWiredLimit => "sysctl",
            HostCommand::VmStat => "vm_stat",
            HostCommand::Pmset => "pmset",
            HostCommand::ServiceInfo => "networksetup",
        }
    }

    /// The arguments, before the operand of a command that takes one.
    pub fn args(self) -> &'static [&'static str] {
        match self {
            HostCommand::SwVers | HostCommand::IbvDevices | HostCommand::VmStat => &[],
            HostCommand::HwModel => &["-n", "hw.model"],
            HostCommand::Thunderbolt => &["SPThunderboltDataType", "-json"],
            HostCommand::HardwarePorts => &["-listallhardwareports"],
            HostCommand::ServiceOrder => &["-listnetworkserviceorder"],
            HostCommand::AllServices => &["-listallnetworkservices"],
            HostCommand::CurrentLocation => &["-getcurrentlocation"],
            HostCommand::Ifconfig => &["-a"],
            HostCommand::RdmaCtl => &["status"],
            HostCommand::IbvDevinfo => &["-v"],
            HostCommand::IpAddr => &["-j", "-4", "addr", "show"],
            HostCommand::InterfaceCounters => &["-i", "-b", "-n"],
            HostCommand::FirewallState => &["--getglobalstate"],
            HostCommand::FirewallRules => &["--listapps"],
            HostCommand::Sysctl => &[
                "hw.memsize",
                "vm.swapusage",
                "kern.memorystatus_vm_pressure_level",
                "kern.bootsessionuuid",
                "kern.boottime",
            ],
            HostCommand::GpuWiredLimit => &["iogpu.wired_limit_mb"],
            HostCommand::Pmset => &["-g"],
            HostCommand::ServiceInfo => &["-getinfo"],
            HostCommand::RouteGet => &["-n", "get"],
            HostCommand::RoutingTable => &["-r", "-n", "-f", "inet"],
            HostCommand::IpRouteGet => &["-j", "route", "get"],
        }
    }

    /// Whether it is run with an operand ([`Source::capture_for`]).
    pub fn takes_operand(self) -> bool {
        matches!(
            self,
            HostCommand::ServiceInfo | HostCommand::RouteGet | HostCommand::IpRouteGet
        )
    }

    /// `system_profiler` takes about a second when healthy; `ibv_devinfo`
    /// hangs when RDMA is wedged (ARCHITECTURE.md, Field facts), so nothing waits for long.
    pub fn timeout(self) -> Duration {
        match self {
            HostCommand::Thunderbolt => Duration::from_secs(10),
            _ => Duration::from_secs(5),
        }
    }

    /// The file that holds its output in a bundle directory.
    pub fn file_name(self) -> &'static str {
        match self {
            HostCommand::SwVers => "sw_vers.txt",
            HostCommand::HwModel => "sysctl_hw.model.txt",
            HostCommand::Thunderbolt => "system_profiler_SPThunderboltDataType.json",
            HostCommand::HardwarePorts => "networksetup_listallhardwareports.txt",
            HostCommand::ServiceOrder => "networksetup_listnetworkserviceorder.txt",
            HostCommand::AllServices => "networksetup_listallnetworkservices.txt",
            HostCommand::CurrentLocation => "networksetup_getcurrentlocation.txt",
            HostCommand::Ifconfig => "ifconfig_a.txt",
            HostCommand::RdmaCtl => "rdma_ctl_status.txt",
            HostCommand::IbvDevices => "ibv_devices.txt",
            HostCommand::IbvDevinfo => "ibv_devinfo_v.txt",
            HostCommand::IpAddr => "ip_j_4_addr_show.json",
            HostCommand::InterfaceCounters => "netstat_ibn.txt",
            HostCommand::FirewallState => "socketfilterfw_getglobalstate.txt",
            HostCommand::FirewallRules => "socketfilterfw_listapps.txt",
            HostCommand::Sysctl => "sysctl_memory_boot.txt",
            HostCommand::VmStat => "vm_stat.txt",
            HostCommand::GpuWiredLimit => "sysctl_iogpu.wired_limit_mb.txt",
            HostCommand::Pmset => "pmset_g.txt",
            HostCommand::ServiceInfo => "networksetup_getinfo.txt",
            HostCommand::RouteGet => "route_n_get.txt",
            HostCommand::RoutingTable => "netstat_rn_f_inet.txt",
            HostCommand::IpRouteGet => "ip_j_route_get.json",
        }
    }

    /// The bundle file of its output for `operand`
    /// (`networksetup_getinfo_Thunderbolt_1.txt`,
    /// `ip_j_route_get_10.0.12.2.json`): the operand with every character
    /// but letters, digits, `.`, `-` made `_`, so no operand can name
    /// another file, between the file's stem and its extension.
    pub fn file_name_for(self, operand: Option<&str>) -> String {
        let Some(operand) = operand else {
            return self.file_name().to_owned();
        };
        let safe: String = operand
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let (stem, extension) = self
            .file_name()
            .rsplit_once('.')
            .unwrap_or((self.file_name(), "txt"));
        format!("{stem}_{safe}.{extension}")
    }

    /// The command line, for messages and bundle manifests.
    pub fn line(self) -> String {
        std::iter::once(self.program())
            .chain(self.args().iter().copied())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The command line with its operand, quoted when it has spaces.
    pub fn line_for(self, operand: Option<&str>) -> String {
        let args: Vec<String> = self
            .args()
            .iter()
            .map(|a| (*a).to_owned())
            .chain(operand.map(str::to_owned))
            .collect();
        crate::command::command_line(self.program(), &args)
    }
}

impl fmt::Display for HostCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line())
    }
}

/// Why a command's output is not available. The text is what `doctor`
/// shows as a blind spot, so it names the command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// Could not start, or did not finish in time.
    #[error("{0}")]
    Run(String),
    /// Ran and exited non-zero.
    #[error("{command} failed ({status}){}", stderr_suffix(.stderr))]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    /// A replayed bundle has no output of this command.
    #[error("{command}: not in the bundle (no {file})")]
    NotCaptured { command: String, file: String },
}

/// Raw platform text: command outputs and files under a root.
pub trait Source: Send + Sync {
    /// The standard output of `command`.
    fn capture(&self, command: HostCommand) -> Result<String, CaptureError>;

    /// The standard output of `command` run with `operand` as its last
    /// argument (`networksetup -getinfo "Thunderbolt 1"`).
    fn capture_for(&self, command: HostCommand, operand: &str) -> Result<String, CaptureError>;

    /// A file's text by its absolute path on the host ("/sys/class/net/eth0/operstate").
    fn read_file(&self, path: &str) -> std::io::Result<String>;

    /// At most the first `max_bytes` of a file (invalid UTF-8 replaced),
    /// for files that can be large (panic reports run to megabytes).
    fn read_file_head(&self, path: &str, max_bytes: usize) -> std::io::Result<String>;

    /// The entry names of a directory by its absolute path on the host,
    /// sorted.
    fn list_dir(&self, path: &str) -> std::io::Result<Vec<String>>;

    /// "live", or "replay:<dir>".
    fn describe(&self) -> String;

    /// The RDMA devices as the read-only verbs library of `os` lists them;
    /// `None` where this source has no library to ask (a replay, a host
    /// without the library), and the `ibv_*` outputs are used instead.
    fn rdma_devices(&self, os: OsKind) -> Option<Result<VerbsDevices, String>> {
        let _ = os;
        None
    }
}

/// The RDMA devices a verbs library listed, and what it could not tell
/// (optional calls it lacks), for the blind spots.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerbsDevices {
    pub devices: Vec<RdmaDevice>,
    pub unknown: Vec<String>,
}

/// This host.
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveSource;

impl LiveSource {
    fn run(command: HostCommand, operand: Option<&str>) -> Result<String, CaptureError> {
        let args: Vec<String> = command
            .args()
            .iter()
            .map(|a| (*a).to_owned())
            .chain(operand.map(str::to_owned))
            .collect();
        match run_with_timeout(command.program(), &args, command.timeout()) {
            Ok(out) if out.success => Ok(out.stdout),
            Ok(out) => Err(CaptureError::Failed {
                command: command.line_for(operand),
                status: out.status,
                stderr: out.stderr,
            }),
            Err(err @ (RunError::Spawn { .. } | RunError::TimedOut { .. })) => {
                Err(CaptureError::Run(err.to_string()))
            }
        }
    }
}

/// The first `max_bytes` of the file at `path`.
fn read_head(path: &Path, max_bytes: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(u64::try_from(max_bytes).unwrap_or(u64::MAX))
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl Source for LiveSource {
    fn capture(&self, command: HostCommand) -> Result<String, CaptureError> {
        Self::run(command, None)
    }

    fn capture_for(&self, command: HostCommand, operand: &str) -> Result<String, CaptureError> {
        Self::run(command, Some(operand))
    }

    fn read_file(&self, path: &str) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn read_file_head(&self, path: &str, max_bytes: usize) -> std::io::Result<String> {
        read_head(Path::new(path), max_bytes)
    }

    fn list_dir(&self, path: &str) -> std::io::Result<Vec<String>> {
        list(Path::new(path))
    }

    fn describe(&self) -> String {
        "live".to_owned()
    }

    fn rdma_devices(&self, os: OsKind) -> Option<Result<VerbsDevices, String>> {
        let library = verbs::library_for(os)?;
        match verbs::read_devices(library, verbs::DEFAULT_TIMEOUT) {
            Ok(reading) if reading.problems.is_empty() => Some(Ok(VerbsDevices {
                devices: reading.devices,
                unknown: reading.unknown,
            })),
            // A device that could not be queried: the command-line tools
            // may still describe it.
            Ok(reading) => Some(Err(reading
                .problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "))),
            // No library here (macOS before 26.2, Linux without rdma-core):
            // the ibv_* tools are the only way, and not a finding.
            Err(verbs::VerbsError::Load { .. }) => None,
            Err(err) => Some(Err(err.to_string())),
        }
    }
}

/// A bundle directory: command outputs under their [`HostCommand::file_name`]
/// (or `<file>.error` holding why the command failed when recorded), and
/// host files under their own path below the directory (`sys/class/net/…`).
/// Read as untrusted ([`crate::file::read_beneath`]): no symbolic link is
/// followed, only regular files are read, each up to
/// [`crate::bundle::MAX_FILE_BYTES`].
#[derive(Debug, Clone)]
pub struct ReplaySource {
    dir: PathBuf,
}

impl ReplaySource {
    /// Fails when `dir` is not a readable directory.
    pub fn open(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::read_dir(&dir)?;
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn read(&self, relative: &Path) -> Result<Vec<u8>, FileError> {
        read_beneath(&self.dir, relative, crate::bundle::MAX_FILE_BYTES)
    }
}

/// A host path (`/sys/class/net`) as a path inside a bundle.
fn host_path(path: &str) -> &Path {
    Path::new(path.trim_start_matches('/'))
}

/// A bundle file's error for a [`Source`] caller, which tells a missing
/// file (normal: not captured) from every other failure. An I/O error is
/// passed on as the live source would give it, without the bundle's own
/// path (callers name the host path they asked for); a refusal keeps it.
fn as_io(err: FileError) -> std::io::Error {
    match err.problem {
        FileProblem::Io(source) => source,
        problem => std::io::Error::other(FileError {
            path: err.path,
            problem,
        }),
    }
}

impl ReplaySource {
    fn replay(&self, command: HostCommand, operand: Option<&str>) -> Result<String, CaptureError> {
        let file = command.file_name_for(operand);
        match self.read(Path::new(&file)) {
            Ok(bytes) => return Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Err(err) if !err.is_not_found() => {
                return Err(CaptureError::Run(format!("cannot read {err}")));
            }
            Err(_) => {}
        }
        match self.read(Path::new(&format!("{file}.error"))) {
            Ok(recorded) => Err(CaptureError::Run(
                String::from_utf8_lossy(&recorded).trim().to_owned(),
            )),
            Err(_) => Err(CaptureError::NotCaptured {
                command: command.line_for(operand),
                file,
            }),
        }
    }
}

impl Source for ReplaySource {
    fn capture(&self, command: HostCommand) -> Result<String, CaptureError> {
        self.replay(command, None)
    }

    fn capture_for(&self, command: HostCommand, operand: &str) -> Result<String, CaptureError> {
        self.replay(command, Some(operand))
    }

    fn read_file(&self, path: &str) -> std::io::Result<String> {
        let bytes = self.read(host_path(path)).map_err(as_io)?;
        String::from_utf8(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    fn read_file_head(&self, path: &str, max_bytes: usize) -> std::io::Result<String> {
        // A bundle's file is read whole within the bundle's cap: a recorded
        // head is no longer than the head asked for.
        let bytes = self.read(host_path(path)).map_err(as_io)?;
        let head = &bytes[..bytes.len().min(max_bytes)];
        Ok(String::from_utf8_lossy(head).into_owned())
    }

    fn list_dir(&self, path: &str) -> std::io::Result<Vec<String>> {
        list_beneath(&self.dir, host_path(path), crate::bundle::MAX_ENTRIES).map_err(as_io)
    }

    fn describe(&self) -> String {
        format!("replay:{}", self.dir.display())
    }
}

fn list(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// Something a [`Recorder`] saw, to be written into a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    Command {
        command: HostCommand,
        /// The operand of a command run with one.
        operand: Option<String>,
        output: Result<String, String>,
    },
    File {
        path: String,
        text: String,
    },
    Dir {
        path: String,
    },
}

/// Passes everything through to another source and keeps a copy of what
/// was read, so a bundle holds exactly what the facts were built from. It
/// asks no verbs library: a bundle holds the `ibv_*` outputs instead, so
/// its replay sees what the capture saw.
#[derive(Debug)]
pub struct Recorder<S> {
    inner: S,
    seen: Mutex<Vec<Recorded>>,
}

impl<S: Source> Recorder<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            seen: Mutex::new(Vec::new()),
        }
    }

    /// What was read, in order.
    pub fn into_recorded(self) -> Vec<Recorded> {
        self.seen.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    fn keep(&self, item: Recorded) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(item);
    }
}

impl<S: Source> Source for Recorder<S> {
    fn capture(&self, command: HostCommand) -> Result<String, CaptureError> {
        let result = self.inner.capture(command);
        self.keep(Recorded::Command {
            command,
            operand: None,
            output: result.clone().map_err(|e| e.to_string()),
        });
        result
    }

    fn capture_for(&self, command: HostCommand, operand: &str) -> Result<String, CaptureError> {
        let result = self.inner.capture_for(command, operand);
        self.keep(Recorded::Command {
            command,
            operand: Some(operand.to_owned()),
            output: result.clone().map_err(|e| e.to_string()),
        });
        result
    }

    fn read_file_head(&self, path: &str, max_bytes: usize) -> std::io::Result<String> {
        let result = self.inner.read_file_head(path, max_bytes);
        if let Ok(text) = &result {
            self.keep(Recorded::File {
                path: path.to_owned(),
                text: text.clone(),
            });
        }
        result
    }

    fn read_file(&self, path: &str) -> std::io::Result<String> {
        let result = self.inner.read_file(path);
        if let Ok(text) = &result {
            self.keep(Recorded::File {
                path: path.to_owned(),
                text: text.clone(),
            });
        }
        result
    }

    fn list_dir(&self, path: &str) -> std::io::Result<Vec<String>> {
        let result = self.inner.list_dir(path);
        if result.is_ok() {
            self.keep(Recorded::Dir {
                path: path.to_owned(),
            });
        }
        result
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_its_own_bundle_file() {
        let mut commands: Vec<HostCommand> = HostCommand::ALL.to_vec();
        commands.sort_unstable();
        commands.dedup();
        assert_eq!(commands.len(), HostCommand::ALL.len());
        for listed in HostCommand::MACOS.iter().chain(HostCommand::LINUX) {
            assert!(HostCommand::ALL.contains(listed), "{listed}");
        }
        assert_eq!(
            HostCommand::MACOS.last(),
            Some(&HostCommand::Pmset),
            "MACOS is the macOS collector's commands"
        );
        for command in HostCommand::MACOS_MEMORY {
            assert!(HostCommand::MACOS.contains(command), "{command}");
        }
        assert!(
            HostCommand::ALL
                .iter()
                .filter(|c| c.takes_operand())
                .all(|c| !HostCommand::MACOS.contains(c)),
            "the collector runs commands with an operand on their own"
        );
        let mut files: Vec<&str> = commands.iter().map(|c| c.file_name()).collect();
        files.sort_unstable();
        files.dedup();
        assert_eq!(files.len(), commands.len());
        assert!(
            commands
                .iter()
                .all(|c| c.timeout() <= Duration::from_secs(10))
        );
    }

    /// meshd must stay a safe neighbour of the jobs it watches: a
    /// GPU-counter poller bundled with one cluster tool is blamed for MLX
    /// crashes, and failed RDMA connection attempts have wedged ports. No
    /// command polls GPU or power counters, touches the RDMA device beyond
    /// listing and querying it, or changes a setting.
    #[test]
    fn the_catalogue_is_read_only_and_polls_no_gpu_or_power_counters() {
        const NEVER: &[&str] = &[
            // GPU and power counters (IOReport underneath).
            "powermetrics",
            "ioreg",
            // RDMA traffic, resets and configuration.
            "ibv_rc_pingpong",
            "ibv_ud_pingpong",
            "ib_write_bw",
            "ib_send_bw",
            "perfquery",
            "rdma",
            "ibstat",
            // Anything that acts as another user.
            "sudo",
        ];
        for &command in HostCommand::ALL {
            let program = command.program();
            assert!(!NEVER.contains(&program), "{command} must not run");
            let args = command.args();
            let allowed = match program {
                "sysctl" => {
                    args.iter().all(|a| !a.contains('=') && !a.starts_with('-'))
                        || args == ["-n", "hw.model"]
                }
                "pmset" => args == ["-g"],
                "rdma_ctl" => args == ["status"],
                "networksetup" => args
                    .iter()
                    .all(|a| a.starts_with("-list") || a.starts_with("-get")),
                // `route get` asks the kernel's lookup (RTM_GETROUTE); it
                // changes nothing, unlike `add`, `del` or `flush`.
                "ip" => args.last() == Some(&"show") || args == ["-j", "route", "get"],
                // RTM_GET on the routing socket: a lookup; `route` refuses
                // nothing else without root, and meshd asks nothing else.
                "route" => args == ["-n", "get"],
                // The Application Firewall's two queries; `--add` and
                // `--unblockapp` are run by `meshd install` alone.
                SOCKETFILTERFW => args == ["--getglobalstate"] || args == ["--listapps"],
                "ibv_devices" | "ibv_devinfo" | "sw_vers" | "vm_stat" | "ifconfig" | "netstat"
                | "system_profiler" => args.iter().all(|a| {
                    !a.contains('=')
                        && !["up", "down", "-R", "--reset", "create", "destroy"].contains(a)
                }),
                other => panic!("{other}: a new program; say here why it is read-only"),
            };
            assert!(allowed, "{command} could change something");
        }
    }

    #[test]
    fn replay_reads_outputs_errors_and_files_and_names_what_is_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("rdma_ctl_status.txt"), "enabled\n").expect("write");
        std::fs::write(
            dir.path().join("ibv_devinfo_v.txt.error"),
            "ibv_devinfo -v did not finish within 5s; killed\n",
        )
        .expect("write");
        std::fs::create_dir_all(dir.path().join("sys/class/net/en2")).expect("mkdir");
        std::fs::write(dir.path().join("sys/class/net/en2/operstate"), "up\n").expect("write");

        let replay = ReplaySource::open(dir.path()).expect("open");
        assert_eq!(
            replay.capture(HostCommand::RdmaCtl).as_deref(),
            Ok("enabled\n")
        );
        assert_eq!(
            replay.capture(HostCommand::IbvDevinfo),
            Err(CaptureError::Run(
                "ibv_devinfo -v did not finish within 5s; killed".into()
            ))
        );
        let missing = replay
            .capture(HostCommand::Thunderbolt)
            .expect_err("missing");
        assert_eq!(
            missing.to_string(),
            "system_profiler SPThunderboltDataType -json: not in the bundle \
             (no system_profiler_SPThunderboltDataType.json)"
        );
        assert_eq!(
            replay
                .read_file("/sys/class/net/en2/operstate")
                .expect("file"),
            "up\n"
        );
        assert_eq!(replay.list_dir("/sys/class/net").expect("dir"), vec!["en2"]);
        assert!(ReplaySource::open(dir.path().join("nope")).is_err());
    }

    #[test]
    fn operands_name_their_own_bundle_files_and_heads_are_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = HostCommand::ServiceInfo.file_name_for(Some("Thunderbolt 1/../x"));
        assert_eq!(file, "networksetup_getinfo_Thunderbolt_1_.._x.txt");
        std::fs::write(dir.path().join(&file), "Manual Configuration\n").expect("write");
        std::fs::create_dir_all(dir.path().join("var/log")).expect("mkdir");
        std::fs::write(dir.path().join("var/log/big"), "x".repeat(10_000)).expect("write");
        let recorder = Recorder::new(ReplaySource::open(dir.path()).expect("open"));
        assert_eq!(
            recorder
                .capture_for(HostCommand::ServiceInfo, "Thunderbolt 1/../x")
                .as_deref(),
            Ok("Manual Configuration\n")
        );
        let missing = recorder
            .capture_for(HostCommand::ServiceInfo, "Thunderbolt 2")
            .expect_err("not captured");
        assert_eq!(
            missing.to_string(),
            "networksetup -getinfo 'Thunderbolt 2': not in the bundle \
             (no networksetup_getinfo_Thunderbolt_2.txt)"
        );
        assert_eq!(
            recorder
                .read_file_head("/var/log/big", 100)
                .expect("head")
                .len(),
            100
        );
        let seen = recorder.into_recorded();
        assert!(matches!(
            &seen[0],
            Recorded::Command { operand: Some(o), .. } if o == "Thunderbolt 1/../x"
        ));
        assert!(matches!(&seen[2], Recorded::File { text, .. } if text.len() == 100));
    }

    #[test]
    fn route_lookups_keep_their_address_in_the_file_name_and_their_extension() {
        assert_eq!(
            HostCommand::RouteGet.file_name_for(Some("169.254.87.238")),
            "route_n_get_169.254.87.238.txt"
        );
        assert_eq!(
            HostCommand::IpRouteGet.file_name_for(Some("fe80::1")),
            "ip_j_route_get_fe80__1.json"
        );
        assert_eq!(
            HostCommand::IpRouteGet.line_for(Some("10.0.12.2")),
            "ip -j route get 10.0.12.2"
        );
        assert_eq!(HostCommand::RoutingTable.line(), "netstat -r -n -f inet");
        assert!(HostCommand::RouteGet.macos_only() && !HostCommand::IpRouteGet.macos_only());
    }

    #[test]
    fn a_recorder_keeps_what_passed_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("sw_vers.txt"), "ProductVersion: 26.2\n").expect("write");
        let recorder = Recorder::new(ReplaySource::open(dir.path()).expect("open"));
        let _ = recorder.capture(HostCommand::SwVers);
        let _ = recorder.capture(HostCommand::RdmaCtl);
        let _ = recorder.read_file("/etc/missing");
        let seen = recorder.into_recorded();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(
            seen[0],
            Recorded::Command {
                command: HostCommand::SwVers,
                operand: None,
                output: Ok("ProductVersion: 26.2\n".into())
            }
        );
        assert!(
            matches!(&seen[1], Recorded::Command { output: Err(e), .. } if e.contains("not in the bundle"))
        );
    }
}
