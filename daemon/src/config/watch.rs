//! The `[watch]` section: the local watchers' settings, each subsection
//! defaulting to the constants of the config module.

use std::time::Duration;

use serde::Deserialize;

use super::{
    DEFAULT_BRIDGE_INTERVAL, DEFAULT_CPU_INTERVAL, DEFAULT_JOB_BUSY_CORES, DEFAULT_JOB_IDLE_CORES,
    DEFAULT_JOB_PATTERNS, DEFAULT_JOB_WINDOW, DEFAULT_LEAK_WINDOW, DEFAULT_MEMORY_INTERVAL,
    DEFAULT_OFFENDERS, DEFAULT_ORPHAN_GRACE, DEFAULT_PRESSURE_WINDOW, DEFAULT_REBOOT_ALARM_FOR,
    DEFAULT_SILENT_RANK_BLOCKED_WINDOW, DEFAULT_SILENT_RANK_WINDOW, DEFAULT_SPIKE_RATIO,
    DEFAULT_SPIKE_WINDOW, DEFAULT_STALL_CRITICAL_RATIO, DEFAULT_STALL_WINDOW,
    DEFAULT_STORM_PACKETS_PER_SECOND, DEFAULT_STORM_WINDOW, DEFAULT_TOP_PROCESSES,
    DEFAULT_WIRED_LEAK_RATIO,
};

/// Local watchers: bridge loops and broadcast storms, CPU spikes and the
/// processes behind them, hung, orphaned and stalled jobs, memory, and the
/// peers' reboots.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchConfig {
    pub bridge: BridgeWatchConfig,
    pub cpu: CpuWatchConfig,
    pub jobs: JobWatchConfig,
    pub memory: MemoryWatchConfig,
    pub boot: BootWatchConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BridgeWatchConfig {
    /// How often bridges and their members' packet counters are read.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Broadcast plus multicast packets per second on a bridge or one of its
    /// members above which traffic is a storm.
    pub storm_packets_per_second: u64,
    /// The rate must stay above the threshold this long.
    #[serde(with = "humantime_serde")]
    pub storm_window: Duration,
    /// Interfaces that are mesh ports besides the `local_iface` of the
    /// `[[links]]` (on macOS the Thunderbolt ports are added by discovery).
    pub mesh_ifaces: Vec<String>,
}

impl Default for BridgeWatchConfig {
    fn default() -> Self {
        Self {
            interval: DEFAULT_BRIDGE_INTERVAL,
            storm_packets_per_second: DEFAULT_STORM_PACKETS_PER_SECOND,
            storm_window: DEFAULT_STORM_WINDOW,
            mesh_ifaces: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CpuWatchConfig {
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Busy share of all cores (0-1) that counts as a spike...
    pub spike_ratio: f64,
    /// ...when it holds this long.
    #[serde(with = "humantime_serde")]
    pub spike_window: Duration,
    /// How many of the busiest processes an alarm and the metrics name; the
    /// rest are summed as `other`.
    pub top: usize,
    /// Process names known to add CPU and network noise on a Mac cluster.
    pub offenders: Vec<String>,
}

impl Default for CpuWatchConfig {
    fn default() -> Self {
        Self {
            interval: DEFAULT_CPU_INTERVAL,
            spike_ratio: DEFAULT_SPIKE_RATIO,
            spike_window: DEFAULT_SPIKE_WINDOW,
            top: DEFAULT_TOP_PROCESSES,
            offenders: DEFAULT_OFFENDERS.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobWatchConfig {
    /// Case-insensitive substrings of a process's name or command line that
    /// mark it as a job rank (MLX, exo).
    pub patterns: Vec<String>,
    /// CPU a job process must burn, in cores (1.0 = one full core)...
    pub busy_cores: f64,
    /// ...for this long while a peer or link of the mesh is down.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// A job process re-parented to launchd/init for this long is orphaned.
    #[serde(with = "humantime_serde")]
    pub orphan_grace: Duration,
    /// A job process at most this busy (in cores) is blocked.
    pub idle_cores: f64,
    /// A spinning or blocked job over RDMA ports whose data counters stay
    /// still this long, with the mesh up, is stalled (Linux).
    #[serde(with = "humantime_serde")]
    pub stall_window: Duration,
    /// A job whose rank on one node is stopped, gone or replaced while a
    /// rank on another spins this long is hung...
    #[serde(with = "humantime_serde")]
    pub silent_rank_window: Duration,
    /// ...or while the other ranks wait without spinning, this long.
    #[serde(with = "humantime_serde")]
    pub silent_rank_blocked_window: Duration,
    /// Linux: only ranks in meshd's own network namespace are this node's
    /// (nodes that share one host's processes, as the lab's do).
    pub own_network_namespace_only: bool,
}

impl Default for JobWatchConfig {
    fn default() -> Self {
        Self {
            patterns: DEFAULT_JOB_PATTERNS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            busy_cores: DEFAULT_JOB_BUSY_CORES,
            window: DEFAULT_JOB_WINDOW,
            orphan_grace: DEFAULT_ORPHAN_GRACE,
            idle_cores: DEFAULT_JOB_IDLE_CORES,
            stall_window: DEFAULT_STALL_WINDOW,
            silent_rank_window: DEFAULT_SILENT_RANK_WINDOW,
            silent_rank_blocked_window: DEFAULT_SILENT_RANK_BLOCKED_WINDOW,
            own_network_namespace_only: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryWatchConfig {
    /// How often memory is read (macOS `vm_stat` and `sysctl`, Linux
    /// `/proc/meminfo` and `/proc/pressure/memory`).
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Share of physical memory (0-1) wired while no job process runs that
    /// is a leak...
    pub wired_leak_ratio: f64,
    /// ...when it lasts this long.
    #[serde(with = "humantime_serde")]
    pub leak_window: Duration,
    /// Critical memory pressure held this long raises `memory_pressure`.
    #[serde(with = "humantime_serde")]
    pub pressure_window: Duration,
    /// Linux: the share (0-1) of the last 10 s in which every task stalled
    /// on memory (PSI `full avg10`) that is critical pressure.
    pub stall_critical_ratio: f64,
}

impl Default for MemoryWatchConfig {
    fn default() -> Self {
        Self {
            interval: DEFAULT_MEMORY_INTERVAL,
            wired_leak_ratio: DEFAULT_WIRED_LEAK_RATIO,
            leak_window: DEFAULT_LEAK_WINDOW,
            pressure_window: DEFAULT_PRESSURE_WINDOW,
            stall_critical_ratio: DEFAULT_STALL_CRITICAL_RATIO,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BootWatchConfig {
    /// How long `node_rebooted` and `kernel_panic` stay raised after a
    /// peer's host booted again.
    #[serde(with = "humantime_serde")]
    pub alarm_for: Duration,
}

impl Default for BootWatchConfig {
    fn default() -> Self {
        Self {
            alarm_for: DEFAULT_REBOOT_ALARM_FOR,
        }
    }
}
