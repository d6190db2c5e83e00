//! Distributed jobs across the mesh: the ranks each node finds among its
//! processes (by what MLX's launcher puts in their environment), as they
//! travel in the reports, and the mesh's view of each job.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use crate::{NodeId, UnknownName};

/// The longest job id, process name or device name a rank carries.
pub const MAX_JOB_TEXT: usize = 128;
/// The most ranks one node reports, and the largest world a job may have:
/// far above JACCL's 8 nodes, and a bound on what a peer can make this
/// node hold.
pub const MAX_RANKS: usize = 64;

/// How a job's ranks talk to each other, as their environment says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobBackend {
    /// MLX JACCL over RDMA (`MLX_JACCL_COORDINATOR`, `MLX_IBV_DEVICES`).
    Jaccl,
    /// MLX's TCP ring (`MLX_HOSTFILE`).
    Ring,
}
named_enum!(JobBackend { Jaccl => "jaccl", Ring => "ring" });

/// What the OS says a process is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ProcessState {
    /// Not read (or an OS state this build does not know).
    #[default]
    Unknown,
    Running,
    Sleeping,
    /// Stopped by a signal (SIGSTOP, a debugger): it answers nobody.
    Stopped,
}
named_enum!(ProcessState {
    Unknown => "unknown",
    Running => "running",
    Sleeping => "sleeping",
    Stopped => "stopped",
});

/// A process's place in a job, as its environment says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankIdentity {
    pub job: String,
    pub backend: JobBackend,
    pub rank: u32,
    /// `None` where neither its device file nor `MLX_WORLD_SIZE` says.
    pub world: Option<u32>,
    /// Its RDMA device towards each rank (JACCL), by rank.
    pub devices: Vec<Option<String>>,
}

/// One rank of a job, as the node it runs on reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRank {
    /// The job's id, the same on every node: the JACCL coordinator's
    /// address, or the ring's rank-0 address.
    pub job: String,
    pub backend: JobBackend,
    pub rank: u32,
    /// How many ranks the job has; `None` where the rank's environment
    /// does not say (its device file gone).
    pub world: Option<u32>,
    pub pid: u32,
    /// When the process started, in the OS's own unit: with the pid it
    /// names the process, so a rank restarted under the same number is
    /// told from the one seen before.
    pub started: u64,
    /// The process's name (`python3.12`).
    pub name: String,
    pub state: ProcessState,
    /// Burning at least the busy threshold: a JACCL rank that waits on a
    /// silent peer spins at a full core.
    pub busy: bool,
    /// The RDMA device this rank uses towards each rank (`None` on the
    /// diagonal and where unknown), from JACCL's device matrix.
    pub devices: Vec<Option<String>>,
}

impl JobRank {
    /// Whether this and `other` are the same process.
    pub fn same_process(&self, other: &JobRank) -> bool {
        self.pid == other.pid && self.started == other.started
    }
}

/// What the mesh knows of one rank of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankView {
    pub rank: u32,
    /// The node it runs (or last ran) on.
    pub node: NodeId,
    pub pid: u32,
    pub name: String,
    pub condition: RankCondition,
    pub busy: bool,
}

/// A rank's condition as the mesh judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RankCondition {
    /// Reported by its node, running or waiting.
    Live,
    /// Reported stopped by a signal.
    Stopped,
    /// Its node no longer reports it: it exited or was killed.
    Gone,
    /// Another process took its rank number: the job cannot take it back.
    Restarted,
    /// Its node is not heard: nothing is known of it now.
    Unheard,
}
named_enum!(RankCondition {
    Live => "live",
    Stopped => "stopped",
    Gone => "gone",
    Restarted => "restarted",
    Unheard => "unheard",
});

/// One job as the mesh sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    pub job: String,
    pub backend: JobBackend,
    pub world: Option<u32>,
    /// The ranks seen, by rank number; a rank never seen is absent.
    pub ranks: Vec<RankView>,
    /// Why the job is hung, when it is: the `job_hung` alarm's summary.
    pub hung: Option<String>,
    /// When its ranks were first seen.
    pub since: SystemTime,
}
