//! A job in the lab (issue #33): one emulated JACCL rank (`rank.rs`) per
//! chosen node, each inside its node's namespace with the environment
//! `mlx.launch --backend jaccl` gives a real rank, and the faults a job
//! meets: a rank stopped, continued or killed, and the traffic between two
//! ranks sent over the management network while their cable stays up.
//!
//! ```text
//! /run/meshlab/NAME/job-ID/
//!   devices.json     MLX_IBV_DEVICES: row i = rank i, cell j = its port towards rank j
//!   ranks.json       the job: each rank's node, pid and start time (what `stop` ends)
//!   rank-R.json      what rank R did (rank.rs, every 250 ms)
//!   rank-R.log       its stderr: every change between paced and spinning
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::command::CommandError;
use crate::lab::{Lab, LabError};
use crate::plan::{self, MGMT_IFACE, Plan, mesh_iface};
use crate::rank::{self, Mode, Peer, RankConfig, RankError, RankReport};

/// The job `lab job …` means without `--job`.
pub const DEFAULT_JOB: &str = "job";
/// The port of `MLX_JACCL_COORDINATOR` on rank 0's management address.
/// Nothing listens there: the emulated ranks send only on their cables.
pub const COORDINATOR_PORT: u16 = 7430;
/// A rank asking for at least this much of a core is spinning.
pub const SPINNING_CORES: f64 = 0.8;
/// A rank told to stop (SIGTERM) gets this long before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
const RECORD: &str = "ranks.json";
const DEVICES: &str = "devices.json";
/// The variables a JACCL rank reads.
pub const ENV_RANK: &str = "MLX_RANK";
pub const ENV_DEVICES: &str = "MLX_IBV_DEVICES";
pub const ENV_COORDINATOR: &str = "MLX_JACCL_COORDINATOR";

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("job name {0:?}: 1 to 16 lowercase letters and digits")]
    Name(String),
    #[error("a job runs on 2 or more distinct nodes of the lab, not {0:?}")]
    Nodes(Vec<String>),
    #[error("job {0} is running in this lab already (`lab job stop --job {0}` ends it)")]
    Running(String),
    #[error("job {other} runs on port {port} already: give this one another (--port)")]
    PortTaken { other: String, port: u16 },
    #[error("no job {0} in this lab")]
    NoJob(String),
    #[error("job {job} has no rank on node {node}")]
    NoRank { job: String, node: String },
    #[error("job {job}: the rank on node {node} (pid {pid}) is gone")]
    RankGone { job: String, node: String, pid: u32 },
    #[error("job {job}: the rank on node {node} (pid {pid}) did not start; its log ends:\n{log}")]
    NotStarted {
        job: String,
        node: String,
        pid: u32,
        log: String,
    },
    #[error("{path}: not a job record: {detail}")]
    BadRecord { path: PathBuf, detail: String },
    #[error("cannot send {signal} to pid {pid}: {source}")]
    Signal {
        pid: u32,
        signal: Signal,
        source: nix::Error,
    },
    #[error("cannot read the scheduler's times of pid {pid}: {detail}")]
    Cpu { pid: u32, detail: String },
    #[error(transparent)]
    Rank(#[from] RankError),
}

/// What `Lab::start_job` starts.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub id: String,
    /// The nodes in rank order; empty: every node of the lab.
    pub nodes: Vec<String>,
    /// Datagrams a second from each rank to each peer.
    pub rate: u32,
    pub port: u16,
    /// The `lab` executable (which runs a rank as `lab rank …`).
    pub program: PathBuf,
}

impl JobSpec {
    /// Job [`DEFAULT_JOB`] on every node at the emulator's defaults.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            id: DEFAULT_JOB.to_owned(),
            nodes: Vec::new(),
            rate: rank::DEFAULT_RATE,
            port: rank::DEFAULT_PORT,
            program: program.into(),
        }
    }
}

/// A job as `ranks.json` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    pub port: u16,
    pub rate: u32,
    /// `MLX_JACCL_COORDINATOR`.
    pub coordinator: String,
    /// `MLX_IBV_DEVICES`.
    pub devices: PathBuf,
    pub ranks: Vec<RankRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankRecord {
    pub rank: usize,
    pub node: String,
    pub pid: u32,
    /// When the process started (clock ticks after boot): with the pid it
    /// names this process for good, so a reused pid is never signalled.
    pub start_ticks: u64,
    pub status: PathBuf,
    pub log: PathBuf,
}

impl JobRecord {
    pub fn rank_on(&self, node: &str) -> Result<&RankRecord, JobError> {
        self.ranks
            .iter()
            .find(|r| r.node == node)
            .ok_or_else(|| JobError::NoRank {
                job: self.id.clone(),
                node: node.to_owned(),
            })
    }
}

impl RankRecord {
    /// Whether the process is still this rank (not exited, not a zombie,
    /// not a reused pid).
    pub fn alive(&self) -> bool {
        proc_stat(self.pid).is_some_and(|s| s.start_ticks == self.start_ticks && s.state != 'Z')
    }

    /// Its state letter (`S` asleep, `R` running, `T` stopped), if alive.
    pub fn state(&self) -> Option<char> {
        proc_stat(self.pid)
            .filter(|s| s.start_ticks == self.start_ticks && s.state != 'Z')
            .map(|s| s.state)
    }

    /// Its last status file, if this process wrote one (not a rank of an
    /// earlier job of the same name).
    pub fn report(&self) -> Option<RankReport> {
        let text = fs::read_to_string(&self.status).ok()?;
        serde_json::from_str::<RankReport>(&text)
            .ok()
            .filter(|r| r.pid == self.pid)
    }

    /// The last lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

fn proc_stat(pid: u32) -> Option<meshd_platform::linux::procs::ProcStat> {
    let bytes = fs::read(format!("/proc/{pid}/stat")).ok()?;
    meshd_platform::linux::procs::parse_stat(&bytes).ok()
}

/// Job names follow lab names: 1 to 16 lowercase letters and digits.
pub fn validate_id(id: &str) -> Result<(), JobError> {
    plan::validate_name(id).map_err(|_| JobError::Name(id.to_owned()))
}

/// The `MLX_IBV_DEVICES` matrix of a job on `nodes` (rank order): row i
/// is rank i, cell j the device rank i uses towards rank j, `None` (JSON
/// `null`) on the diagonal. The lab has no RDMA: the device is the node's
/// cable port towards the other, `mesh-<peer>`.
pub fn device_matrix(nodes: &[&str]) -> Vec<Vec<Option<String>>> {
    nodes
        .iter()
        .map(|me| {
            nodes
                .iter()
                .map(|peer| (peer != me).then(|| mesh_iface(peer)))
                .collect()
        })
        .collect()
}

/// `MLX_JACCL_COORDINATOR`: rank 0's management address and
/// [`COORDINATOR_PORT`].
pub fn coordinator(plan: &Plan, nodes: &[&str]) -> Result<String, LabError> {
    let first = nodes.first().ok_or_else(|| JobError::Nodes(Vec::new()))?;
    let node = plan.node(first)?;
    Ok(format!("{}:{COORDINATOR_PORT}", node.mgmt_address))
}

/// The environment `mlx.launch --backend jaccl` gives rank `rank`.
pub fn rank_environment(rank: usize, devices: &Path, coordinator: &str) -> Vec<(String, String)> {
    vec![
        (ENV_RANK.to_owned(), rank.to_string()),
        (
            ENV_DEVICES.to_owned(),
            devices.to_string_lossy().into_owned(),
        ),
        (ENV_COORDINATOR.to_owned(), coordinator.to_owned()),
    ]
}

/// Each rank's configuration: rank i on `nodes[i]`, talking to rank j on
/// the cable between their nodes.
pub fn rank_configs(
    plan: &Plan,
    nodes: &[&str],
    port: u16,
    rate: u32,
    dir: &Path,
) -> Result<Vec<RankConfig>, LabError> {
    let mut configs = Vec::new();
    for (rank, &me) in nodes.iter().enumerate() {
        let mut peers = Vec::new();
        for (other, &node) in nodes.iter().enumerate().filter(|&(r, _)| r != rank) {
            let cable = plan.cable(me, node)?;
            let (mine, far) = cable
                .ends_from(me)
                .ok_or_else(|| plan::PlanError::NoCable(me.to_owned(), node.to_owned()))?;
            peers.push(Peer {
                rank: other,
                local: mine.address,
                remote: far.address,
            });
        }
        let args = rank::RankArgs {
            rank,
            world: nodes.len(),
            peers,
            port,
            rate,
            silence_ms: rank::DEFAULT_SILENCE_MS,
            status: Some(dir.join(format!("rank-{rank}.json"))),
        };
        configs.push(RankConfig::from_args(&args).map_err(JobError::from)?);
    }
    Ok(configs)
}

/// How much of a core a process used, and asked for, over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// Time on a CPU, in cores.
    pub used: f64,
    /// Time on a CPU or waiting in a run queue for one, in cores: what the
    /// process asked for, whatever else the host's cores were doing. A
    /// busy-spinning process asks for a whole core even on a host whose
    /// cores are shared with a build; a sleeping one asks for little.
    pub demand: f64,
}

impl Load {
    pub fn spinning(&self) -> bool {
        self.demand >= SPINNING_CORES
    }
}

/// Nanoseconds on a CPU and waiting for one (`/proc/PID/schedstat`).
fn sched_times(pid: u32) -> Result<(u64, u64), JobError> {
    let bad = |detail: String| JobError::Cpu { pid, detail };
    let text =
        fs::read_to_string(format!("/proc/{pid}/schedstat")).map_err(|e| bad(e.to_string()))?;
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next()) {
        (Some(Ok(run)), Some(Ok(wait))) => Ok((run, wait)),
        _ => Err(bad(format!("unexpected {text:?}"))),
    }
}

/// The load of each of `pids` over `window` (measured together): `None`
/// for a process gone before or during it.
pub fn loads(pids: &[u32], window: Duration) -> Vec<Option<Load>> {
    let before: Vec<Option<(u64, u64)>> = pids.iter().map(|&p| sched_times(p).ok()).collect();
    let started = Instant::now();
    std::thread::sleep(window);
    let after: Vec<Option<(u64, u64)>> = pids.iter().map(|&p| sched_times(p).ok()).collect();
    let elapsed = started.elapsed().as_secs_f64().max(1e-3);
    before
        .into_iter()
        .zip(after)
        .map(|(b, a)| {
            let ((run0, wait0), (run1, wait1)) = (b?, a?);
            let used = run1.saturating_sub(run0) as f64 / 1e9 / elapsed;
            let waited = wait1.saturating_sub(wait0) as f64 / 1e9 / elapsed;
            Some(Load {
                used,
                demand: used + waited,
            })
        })
        .collect()
}

/// An interface's counters (`ip -s link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

fn job_dir(lab: &Lab, id: &str) -> PathBuf {
    lab.state_dir().join(format!("job-{id}"))
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> LabError + '_ {
    move |source| LabError::File {
        path: path.to_path_buf(),
        source,
    }
}

fn send(pid: u32, signal: Signal) -> Result<(), JobError> {
    let raw = i32::try_from(pid).unwrap_or(i32::MAX);
    kill(Pid::from_raw(raw), signal).map_err(|source| JobError::Signal {
        pid,
        signal,
        source,
    })
}

impl Lab {
    /// Starts job `spec`: rank i on node `spec.nodes[i]` (every node when
    /// empty), each through `ip netns exec` inside its node's namespace
    /// with `MLX_RANK`, `MLX_IBV_DEVICES` and `MLX_JACCL_COORDINATOR` in
    /// its initial environment (any other `MLX_` variable of this process
    /// removed), logging to `rank-R.log`. Records the ranks in
    /// `job-ID/ranks.json`. A job of that name still running is an error.
    pub fn start_job(&mut self, spec: &JobSpec) -> Result<JobRecord, LabError> {
        validate_id(&spec.id)?;
        let nodes: Vec<&str> = if spec.nodes.is_empty() {
            self.ids()
        } else {
            spec.nodes.iter().map(String::as_str).collect()
        };
        let mut distinct = nodes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if nodes.len() < 2 || distinct.len() != nodes.len() {
            return Err(JobError::Nodes(spec.nodes.clone()).into());
        }
        let nodes: Vec<&'static str> = nodes
            .iter()
            .map(|id| self.plan.node(id).map(|n| n.id))
            .collect::<Result<_, _>>()?;
        for other in self.jobs() {
            let Ok(job) = self.job(&other) else { continue };
            if !job.ranks.iter().any(RankRecord::alive) {
                continue;
            }
            if other == spec.id {
                return Err(JobError::Running(other).into());
            }
            if job.port == spec.port {
                return Err(JobError::PortTaken {
                    other,
                    port: spec.port,
                }
                .into());
            }
        }
        let dir = job_dir(self, &spec.id);
        fs::create_dir_all(&dir).map_err(file_error(&dir))?;
        let devices = dir.join(DEVICES);
        let matrix = serde_json::to_string(&device_matrix(&nodes)).unwrap_or_default();
        fs::write(&devices, format!("{matrix}\n")).map_err(file_error(&devices))?;
        let coordinator = coordinator(&self.plan, &nodes)?;
        let configs = rank_configs(&self.plan, &nodes, spec.port, spec.rate, &dir)?;
        let mut record = JobRecord {
            id: spec.id.clone(),
            port: spec.port,
            rate: spec.rate,
            coordinator: coordinator.clone(),
            devices: devices.clone(),
            ranks: Vec::new(),
        };
        for (config, &node) in configs.iter().zip(&nodes) {
            let env = rank_environment(config.rank, &devices, &coordinator);
            match self.spawn_rank(spec, config, node, &env, &dir) {
                Ok(rank) => record.ranks.push(rank),
                Err(err) => {
                    // Nothing half-started is left behind.
                    for started in &record.ranks {
                        let _ = send(started.pid, Signal::SIGKILL);
                    }
                    self.reap_ranks(Duration::from_secs(1));
                    return Err(err);
                }
            }
        }
        let path = dir.join(RECORD);
        let text = serde_json::to_string_pretty(&record).unwrap_or_default();
        fs::write(&path, text).map_err(file_error(&path))?;
        if let Err(err) = self.wait_exec(&record) {
            let _ = self.stop_job(&record.id);
            return Err(err);
        }
        Ok(record)
    }

    /// Waits until every rank's pid runs the rank itself, no longer `ip
    /// netns exec` (which execs it once in the namespace): from then on its
    /// `/proc/PID/environ` and namespace are the rank's.
    fn wait_exec(&mut self, job: &JobRecord) -> Result<(), LabError> {
        let deadline = Instant::now() + crate::command::QUICK;
        for rank in &job.ranks {
            loop {
                let stat = proc_stat(rank.pid).filter(|s| s.state != 'Z');
                match stat {
                    Some(s) if s.comm != "ip" => break,
                    Some(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    _ => {
                        return Err(JobError::NotStarted {
                            job: job.id.clone(),
                            node: rank.node.clone(),
                            pid: rank.pid,
                            log: rank.log_tail(5),
                        }
                        .into());
                    }
                }
            }
        }
        Ok(())
    }

    fn spawn_rank(
        &mut self,
        spec: &JobSpec,
        config: &RankConfig,
        node: &str,
        env: &[(String, String)],
        dir: &Path,
    ) -> Result<RankRecord, LabError> {
        let ns = self.namespace(node)?.to_owned();
        let log = dir.join(format!("rank-{}.log", config.rank));
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(file_error(&log))?;
        let err = out.try_clone().map_err(file_error(&log))?;
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &ns])
            .arg(&spec.program)
            .arg("rank")
            .args(config.to_args());
        // Only the launcher's variables: none inherited from whoever runs
        // the lab.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("MLX_") {
                command.env_remove(key);
            }
        }
        let child = command
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| CommandError::Spawn {
                command: format!("ip netns exec {ns} lab rank"),
                source,
            })?;
        // `ip netns exec` execs the rank: the child is the rank itself, and
        // its start time stays the same across the exec.
        let pid = child.id();
        let start_ticks = proc_stat(pid).map_or(0, |s| s.start_ticks);
        self.ranks.push(child);
        Ok(RankRecord {
            rank: config.rank,
            node: node.to_owned(),
            pid,
            start_ticks,
            status: config.status.clone().unwrap_or_default(),
            log,
        })
    }

    /// Job `id` as recorded when it started.
    pub fn job(&self, id: &str) -> Result<JobRecord, LabError> {
        validate_id(id)?;
        let path = job_dir(self, id).join(RECORD);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(JobError::NoJob(id.to_owned()).into());
            }
            Err(source) => return Err(LabError::File { path, source }),
        };
        serde_json::from_str(&text).map_err(|e| {
            JobError::BadRecord {
                path,
                detail: e.to_string(),
            }
            .into()
        })
    }

    /// Waits until every rank of job `id` reports `mode` (its status file)
    /// and, when paced, has completed at least one step more than when the
    /// wait began, for at most `limit`; their reports then. A rank that is
    /// gone ends the wait at once, with its log's last lines.
    pub fn wait_job(
        &self,
        id: &str,
        mode: Mode,
        limit: Duration,
    ) -> Result<Vec<RankReport>, LabError> {
        let job = self.job(id)?;
        let started = Instant::now();
        // A rank that has not reported yet has made no step.
        let first: Vec<u64> = job
            .ranks
            .iter()
            .map(|r| r.report().map_or(0, |p| p.steps))
            .collect();
        loop {
            if let Some(gone) = job.ranks.iter().find(|r| !r.alive()) {
                return Err(LabError::Timeout {
                    what: format!("every rank of job {id} {mode:?}"),
                    waited: started.elapsed(),
                    last: format!(
                        "the rank on {} (pid {}) is gone; its log ends:\n{}",
                        gone.node,
                        gone.pid,
                        gone.log_tail(5)
                    ),
                });
            }
            let reports: Vec<Option<RankReport>> =
                job.ranks.iter().map(RankRecord::report).collect();
            let done = reports.iter().zip(&first).all(|(r, &before)| {
                r.as_ref()
                    .is_some_and(|r| r.mode == mode && (mode == Mode::Spinning || r.steps > before))
            });
            if done {
                return Ok(reports.into_iter().flatten().collect());
            }
            if started.elapsed() >= limit {
                let last = job
                    .ranks
                    .iter()
                    .zip(&reports)
                    .map(|(rank, report)| match report {
                        Some(r) => format!(
                            "rank {} on {}: {:?}, {} steps, {} spins",
                            rank.rank, rank.node, r.mode, r.steps, r.spins
                        ),
                        None => format!("rank {} on {}: no report", rank.rank, rank.node),
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(LabError::Timeout {
                    what: format!("every rank of job {id} {mode:?}"),
                    waited: started.elapsed(),
                    last,
                });
            }
            std::thread::sleep(rank::REPORT_EVERY);
        }
    }

    /// Each rank of job `id` with its load over `window` (`None`: gone).
    pub fn job_loads(
        &self,
        id: &str,
        window: Duration,
    ) -> Result<Vec<(RankRecord, Option<Load>)>, LabError> {
        let job = self.job(id)?;
        let pids: Vec<u32> = job.ranks.iter().map(|r| r.pid).collect();
        let measured = loads(&pids, window);
        Ok(job
            .ranks
            .into_iter()
            .zip(measured)
            .map(|(rank, load)| {
                let load = load.filter(|_| rank.alive());
                (rank, load)
            })
            .collect())
    }

    /// Sends `signal` to the rank of job `id` on `node`.
    pub fn signal_rank(&mut self, id: &str, node: &str, signal: Signal) -> Result<(), LabError> {
        let job = self.job(id)?;
        let rank = job.rank_on(node)?;
        if !rank.alive() {
            return Err(JobError::RankGone {
                job: id.to_owned(),
                node: node.to_owned(),
                pid: rank.pid,
            }
            .into());
        }
        send(rank.pid, signal)?;
        if signal == Signal::SIGKILL {
            self.reap_ranks(Duration::from_secs(1));
        }
        Ok(())
    }

    /// SIGSTOP: the rank on `node` goes silent without exiting.
    pub fn stop_rank(&mut self, id: &str, node: &str) -> Result<(), LabError> {
        self.signal_rank(id, node, Signal::SIGSTOP)
    }

    /// SIGCONT: it runs again.
    pub fn cont_rank(&mut self, id: &str, node: &str) -> Result<(), LabError> {
        self.signal_rank(id, node, Signal::SIGCONT)
    }

    /// SIGKILL: the rank dies as a crashed one does.
    pub fn kill_rank(&mut self, id: &str, node: &str) -> Result<(), LabError> {
        self.signal_rank(id, node, Signal::SIGKILL)
    }

    /// Ends every rank of job `id` (SIGTERM and SIGCONT, so a stopped rank
    /// acts on it; SIGKILL after a grace) and removes its record. A job
    /// whose ranks are all gone already is ended without error.
    pub fn stop_job(&mut self, id: &str) -> Result<(), LabError> {
        let job = self.job(id)?;
        let live: Vec<&RankRecord> = job.ranks.iter().filter(|r| r.alive()).collect();
        for rank in &live {
            let _ = send(rank.pid, Signal::SIGTERM);
            let _ = send(rank.pid, Signal::SIGCONT);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while live.iter().any(|r| r.alive()) && Instant::now() < deadline {
            self.reap_ranks(Duration::ZERO);
            std::thread::sleep(Duration::from_millis(20));
        }
        for rank in live.iter().filter(|r| r.alive()) {
            let _ = send(rank.pid, Signal::SIGKILL);
        }
        self.reap_ranks(Duration::from_secs(1));
        let path = job_dir(self, id).join(RECORD);
        fs::remove_file(&path).map_err(file_error(&path))?;
        Ok(())
    }

    /// Every job of this lab that has a record (running or not).
    pub fn jobs(&self) -> Vec<String> {
        let Ok(dirs) = fs::read_dir(self.state_dir()) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = dirs
            .filter_map(Result::ok)
            .filter(|d| d.path().join(RECORD).is_file())
            .filter_map(|d| {
                d.file_name()
                    .to_str()?
                    .strip_prefix("job-")
                    .map(str::to_owned)
            })
            .collect();
        ids.sort();
        ids
    }

    /// Reaps the ranks this process started that have exited, waiting up
    /// to `limit` for those still running (none are signalled).
    pub(crate) fn reap_ranks(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            self.ranks
                .retain_mut(|child| !matches!(child.try_wait(), Ok(Some(_)) | Err(_)));
            if self.ranks.is_empty() || Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Ends the ranks this process started (teardown).
    pub(crate) fn kill_own_ranks(&mut self) {
        for mut child in self.ranks.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends the traffic between `a` and `b` to each other's address on
    /// their cable over the management network: in `a` a host route to
    /// `b`'s cable address via `b`'s management address on `mgmt0`, in `b`
    /// the reverse. The cable stays up; what is bound to a cable port
    /// (meshd's probes) stays on it, what is not (the ranks' datagrams,
    /// sent from their cable addresses) goes over the management bridge.
    ///
    /// Reverse-path filtering: what arrives on `mgmt0` from the other's
    /// cable address passes even a strict filter (the reverse route is the
    /// one added here, through `mgmt0`), but what still arrives on the
    /// cable from that address (the replies to meshd's pinned probes) would
    /// be dropped by a strict one. Where `rp_filter` is strict (1) on `all`
    /// or on the cable port, it is set to 0 there, inside the lab's
    /// namespaces only; loose (2) and off (0, where the lab's namespaces
    /// start) are left as they are.
    pub fn route_via_mgmt(&self, a: &str, b: &str) -> Result<(), LabError> {
        for (me, far) in [(a, b), (b, a)] {
            for iface in ["all".to_owned(), mesh_iface(far)] {
                let key = format!("net.ipv4.conf.{iface}.rp_filter");
                if self.exec(me, "sysctl", &["-n", &key])?.trim() == "1" {
                    self.exec(me, "sysctl", &["-w", &format!("{key}=0")])?;
                }
            }
        }
        for (me, far) in [(a, b), (b, a)] {
            let (_, far_end) = self.cable_ends(me, far)?;
            let via = self.plan.node(far)?.mgmt_address.to_string();
            let host = format!("{far_end}/32");
            self.ip_in(
                me,
                &["route", "replace", &host, "via", &via, "dev", MGMT_IFACE],
            )?;
        }
        Ok(())
    }

    /// Undoes [`Lab::route_via_mgmt`]: the cable carries it all again.
    pub fn route_via_cable(&self, a: &str, b: &str) -> Result<(), LabError> {
        for (me, far) in [(a, b), (b, a)] {
            let (_, far_end) = self.cable_ends(me, far)?;
            let host = format!("{far_end}/32");
            let ns = self.namespace(me)?.to_owned();
            let routes = crate::command::ip(&["-n", &ns, "route", "show", &host])?;
            if !routes.trim().is_empty() {
                self.ip_in(me, &["route", "del", &host])?;
            }
        }
        Ok(())
    }

    /// `me`'s and `far`'s addresses on their cable.
    fn cable_ends(
        &self,
        me: &str,
        far: &str,
    ) -> Result<(std::net::Ipv4Addr, std::net::Ipv4Addr), LabError> {
        let cable = self.plan.cable(me, far)?;
        let (mine, theirs) = cable
            .ends_from(me)
            .ok_or_else(|| plan::PlanError::NoCable(me.to_owned(), far.to_owned()))?;
        Ok((mine.address, theirs.address))
    }

    /// The counters of `iface` in `node`.
    pub fn link_counters(&self, node: &str, iface: &str) -> Result<Counters, LabError> {
        let text = self.exec(node, "ip", &["-j", "-s", "link", "show", "dev", iface])?;
        let bad = |detail: String| LabError::BadCounters {
            node: node.to_owned(),
            iface: iface.to_owned(),
            detail,
        };
        let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let stats = &doc[0]["stats64"];
        let get = |dir: &str, what: &str| {
            stats[dir][what]
                .as_u64()
                .ok_or_else(|| bad(format!("no stats64.{dir}.{what} in {text}")))
        };
        Ok(Counters {
            rx_packets: get("rx", "packets")?,
            tx_packets: get("tx", "packets")?,
            rx_bytes: get("rx", "bytes")?,
            tx_bytes: get("tx", "bytes")?,
        })
    }
}

/// The environment of process `pid` (`/proc/PID/environ`): what it was
/// given at exec, where meshd looks for a rank's MLX variables.
pub fn environment(pid: u32) -> Result<BTreeMap<String, String>, LabError> {
    let path = PathBuf::from(format!("/proc/{pid}/environ"));
    let bytes = fs::read(&path).map_err(file_error(&path))?;
    Ok(bytes
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_matrix_names_each_nodes_port_towards_each_peer() {
        let m = device_matrix(&["a", "b"]);
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"[[null,"mesh-b"],["mesh-a",null]]"#
        );
        let m = device_matrix(&["c", "a", "d"]);
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"[[null,"mesh-a","mesh-d"],["mesh-c",null,"mesh-d"],["mesh-c","mesh-a",null]]"#
        );
        // JACCL's world size is the matrix's length; each row as long.
        assert!(m.iter().all(|row| row.len() == m.len()));
    }

    #[test]
    fn the_environment_is_mlx_launchs() {
        let plan = Plan::new("x", 4).unwrap();
        let coordinator = coordinator(&plan, &["c", "a"]).unwrap();
        assert_eq!(coordinator, "10.78.0.3:7430");
        let env = rank_environment(
            1,
            Path::new("/run/meshlab/x/job-job/devices.json"),
            &coordinator,
        );
        assert_eq!(
            env,
            [
                ("MLX_RANK".to_owned(), "1".to_owned()),
                (
                    "MLX_IBV_DEVICES".to_owned(),
                    "/run/meshlab/x/job-job/devices.json".to_owned()
                ),
                (
                    "MLX_JACCL_COORDINATOR".to_owned(),
                    "10.78.0.3:7430".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn each_rank_talks_to_each_peer_on_their_cable() {
        let plan = Plan::new("x", 4).unwrap();
        let dir = Path::new("/run/meshlab/x/job-j");
        let configs = rank_configs(&plan, &["c", "a", "d"], 7450, 200, dir).unwrap();
        assert_eq!(configs.len(), 3);
        let c = &configs[0];
        assert_eq!((c.rank, c.world), (0, 3));
        assert_eq!(
            c.peers.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["1,10.77.13.2,10.77.13.1", "2,10.77.34.1,10.77.34.2"]
        );
        let a = &configs[1];
        assert_eq!(
            a.peers.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["0,10.77.13.1,10.77.13.2", "2,10.77.14.1,10.77.14.2"]
        );
        assert_eq!(a.status.as_deref(), Some(dir.join("rank-1.json").as_path()));
        assert!(rank_configs(&plan, &["a", "z"], 7450, 200, dir).is_err());
    }

    #[test]
    fn job_names_are_checked() {
        assert!(validate_id("job").is_ok());
        assert!(validate_id("j2").is_ok());
        assert!(validate_id("").is_err());
        assert!(validate_id("../x").is_err());
        assert!(validate_id("Job").is_err());
    }

    #[test]
    fn a_sleeping_process_asks_for_little_and_a_spinning_one_for_a_core() {
        let me = std::process::id();
        assert!(sched_times(me).is_ok());
        let load = Load {
            used: 0.3,
            demand: 0.95,
        };
        assert!(load.spinning(), "a spinning rank on a crowded host");
        assert!(
            !Load {
                used: 0.02,
                demand: 0.05
            }
            .spinning()
        );
        let sleeper = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let measured = loads(&[sleeper.id(), u32::MAX], Duration::from_millis(300));
        let mut sleeper = sleeper;
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        let sleeping = measured[0].expect("sleep is running");
        assert!(!sleeping.spinning(), "{sleeping:?}");
        assert_eq!(measured[1], None, "no such process");
    }
}
