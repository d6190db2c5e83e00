//! A running lab: its namespaces and veths, one real `meshd run` per node,
//! and the way back to nothing (`down`), which also finds what a crashed or
//! killed run left behind.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::command::{self, CommandError, QUICK, in_namespace, ip};
use crate::plan::{self, MGMT_BRIDGE, MGMT_HOST, MGMT_IFACE, PREFIX, Plan, PlanError};
use crate::status::Status;

/// Where configs, logs and helper binaries of lab NAME live (tmpfs, root).
pub const STATE_ROOT: &str = "/run/meshlab";
/// meshctl gives up after 3 s on its own; this bounds a hung one.
const MESHCTL_LIMIT: Duration = Duration::from_secs(10);
/// A daemon asked to stop (SIGTERM) gets this long before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often `wait_for` asks the nodes again.
const POLL: Duration = Duration::from_millis(250);
/// How often a stopping daemon another process started is looked for: an
/// upgrade's downtime includes the wait.
const EXIT_POLL: Duration = Duration::from_millis(20);
/// A test records its pid here; a lab whose owner is gone is swept.
const OWNER_FILE: &str = "owner";

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error(transparent)]
    Stall(#[from] crate::stall::StallError),
    #[error(transparent)]
    Job(#[from] crate::job::JobError),
    #[error("node {0}'s meshd is already being stalled")]
    AlreadyStalled(String),
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "no {name} binary at {path} (build the workspace first: `cargo build --workspace`, or set {env})"
    )]
    MissingBinary {
        name: &'static str,
        path: PathBuf,
        env: &'static str,
    },
    #[error("the config of node {node} is not valid:\n{problems}")]
    BadConfig { node: String, problems: String },
    #[error("node {node}: meshctl could not get a status: {message}")]
    Unreachable { node: String, message: String },
    #[error("node {node}: meshctl printed something that is not a status: {source}")]
    BadStatus {
        node: String,
        source: serde_json::Error,
    },
    #[error("no meshd running in node {0}")]
    NoDaemon(String),
    #[error("no lab {0} is up")]
    NotUp(String),
    #[error("node {node}: cannot read the counters of {iface}: {detail}")]
    BadCounters {
        node: String,
        iface: String,
        detail: String,
    },
    #[error("no libfaketime here (Debian: apt-get install faketime)")]
    NoFaketime,
    #[error("still there after `down`: {0:?}")]
    Leftovers(Vec<String>),
    #[error("waited {waited:?} for {what}; last views:\n{last}")]
    Timeout {
        what: String,
        waited: Duration,
        last: String,
    },
}

/// The meshd and meshctl executables the lab runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub meshd: PathBuf,
    pub meshctl: PathBuf,
}

impl Binaries {
    /// `MESHLAB_MESHD` / `MESHLAB_MESHCTL`, or else the executables in `dir`
    /// (a cargo profile directory such as `target/debug`, where a workspace
    /// build puts every binary).
    pub fn find(dir: &Path) -> Result<Self, LabError> {
        let locate = |name: &'static str, env: &'static str| {
            let path = std::env::var_os(env).map_or_else(|| dir.join(name), PathBuf::from);
            if path.is_file() {
                Ok(path)
            } else {
                Err(LabError::MissingBinary { name, path, env })
            }
        };
        Ok(Self {
            meshd: locate("meshd", "MESHLAB_MESHD")?,
            meshctl: locate("meshctl", "MESHLAB_MESHCTL")?,
        })
    }

    /// Beside the running executable (`target/debug/lab` finds
    /// `target/debug/meshd`).
    pub fn beside_current_exe() -> Result<Self, LabError> {
        let exe = std::env::current_exe().map_err(|source| LabError::File {
            path: PathBuf::from("/proc/self/exe"),
            source,
        })?;
        Self::find(exe.parent().unwrap_or(Path::new(".")))
    }
}

/// What every node's meshd gets besides the plan.
#[derive(Debug, Clone)]
pub struct Options {
    /// Point every node at the Alertmanager the lab runs (see `observe`).
    pub alertmanager: bool,
    /// TOML appended to every node's config (e.g. `[thresholds]`).
    pub extra_config: String,
    /// meshd's `--log-level`; logs go to `STATE_ROOT/NAME/NODE.log`.
    pub log_level: String,
    /// Nodes that run another meshd build than [`Binaries::meshd`] (a
    /// mixed-version mesh): node id → executable.
    pub meshd_by_node: BTreeMap<String, PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            alertmanager: false,
            extra_config: String::new(),
            log_level: "info".to_owned(),
            meshd_by_node: BTreeMap::new(),
        }
    }
}

#[derive(Debug)]
pub struct Lab {
    pub plan: Plan,
    pub binaries: Binaries,
    state: PathBuf,
    /// The daemons this process started (so they are reaped); a lab
    /// attached to by a later `lab` command finds them by namespace.
    daemons: BTreeMap<&'static str, Child>,
    /// CPU hogs this process started in the lab.
    pub(crate) hogs: Vec<Child>,
    /// Job ranks this process started (`job.rs`), so they are reaped.
    pub(crate) ranks: Vec<Child>,
    /// Prometheus and Alertmanager, when this process started them.
    pub(crate) services: Vec<Child>,
    /// The stall drivers this process runs, by node.
    pub(crate) stalls: BTreeMap<&'static str, crate::stall::Stall>,
    /// Tear everything down on drop (tests); `lab up` leaves it running.
    teardown_on_drop: bool,
}

fn state_dir(name: &str) -> PathBuf {
    Path::new(STATE_ROOT).join(name)
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> LabError + '_ {
    move |source| LabError::File {
        path: path.to_path_buf(),
        source,
    }
}

impl Lab {
    /// Builds lab `plan` from nothing (removing any leftover of the same
    /// name first) and starts a meshd in every node. On failure everything
    /// created so far is removed again.
    pub fn up(plan: Plan, binaries: Binaries, options: &Options) -> Result<Self, LabError> {
        sweep_orphans();
        down(&plan.name)?;
        let state = state_dir(&plan.name);
        fs::create_dir_all(&state).map_err(file_error(&state))?;
        let mut lab = Self {
            plan,
            binaries,
            state,
            daemons: BTreeMap::new(),
            hogs: Vec::new(),
            ranks: Vec::new(),
            services: Vec::new(),
            stalls: BTreeMap::new(),
            teardown_on_drop: true,
        };
        for (id, binary) in &options.meshd_by_node {
            lab.choose_meshd(id, binary)?;
        }
        lab.build_network()?;
        lab.write_configs(options)?;
        for id in lab.ids() {
            lab.start(id, &options.log_level)?;
        }
        Ok(lab)
    }

    /// A lab brought up earlier (by another `lab` command), found by name.
    pub fn attach(name: &str, binaries: Binaries) -> Result<Self, LabError> {
        plan::validate_name(name)?;
        let prefix = plan::namespace_prefix(name);
        let nodes = namespaces()?
            .iter()
            .filter(|ns| ns.starts_with(&prefix) && !ns.ends_with("-mgmt"))
            .count();
        if nodes == 0 {
            return Err(LabError::NotUp(name.to_owned()));
        }
        Ok(Self {
            plan: Plan::new(name, nodes)?,
            binaries,
            state: state_dir(name),
            daemons: BTreeMap::new(),
            hogs: Vec::new(),
            ranks: Vec::new(),
            services: Vec::new(),
            stalls: BTreeMap::new(),
            teardown_on_drop: false,
        })
    }

    /// Marks the lab as belonging to this process: if it dies without
    /// tearing down (killed by a test runner), the next `up` sweeps it.
    pub fn owned_by_this_process(&self) -> Result<(), LabError> {
        let path = self.state.join(OWNER_FILE);
        fs::write(&path, std::process::id().to_string()).map_err(file_error(&path))
    }

    /// Leaves the lab running when this value goes away (`lab up`).
    pub fn keep_running(mut self) {
        self.teardown_on_drop = false;
    }

    pub fn ids(&self) -> Vec<&'static str> {
        self.plan.nodes.iter().map(|n| n.id).collect()
    }

    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    pub fn namespace(&self, id: &str) -> Result<&str, LabError> {
        Ok(self.plan.node(id)?.namespace.as_str())
    }

    fn build_network(&self) -> Result<(), LabError> {
        for ns in self.plan.namespaces() {
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        let mgmt = self.plan.mgmt_namespace();
        ip(&["-n", &mgmt, "link", "add", MGMT_BRIDGE, "type", "bridge"])?;
        ip(&[
            "-n",
            &mgmt,
            "addr",
            "add",
            &Plan::mgmt_cidr(MGMT_HOST),
            "dev",
            MGMT_BRIDGE,
        ])?;
        ip(&["-n", &mgmt, "link", "set", MGMT_BRIDGE, "up"])?;
        for node in &self.plan.nodes {
            // Both ends are created inside their namespaces: nothing ever
            // appears in the host's own.
            ip(&[
                "link",
                "add",
                MGMT_IFACE,
                "netns",
                &node.namespace,
                "type",
                "veth",
                "peer",
                "name",
                &node.mgmt_port,
                "netns",
                &mgmt,
            ])?;
            ip(&[
                "-n",
                &mgmt,
                "link",
                "set",
                &node.mgmt_port,
                "master",
                MGMT_BRIDGE,
                "up",
            ])?;
            let cidr = Plan::mgmt_cidr(node.mgmt_address);
            ip(&[
                "-n",
                &node.namespace,
                "addr",
                "add",
                &cidr,
                "dev",
                MGMT_IFACE,
            ])?;
            ip(&["-n", &node.namespace, "link", "set", MGMT_IFACE, "up"])?;
        }
        for cable in &self.plan.cables {
            let (a, b) = (self.plan.node(cable.a.node)?, self.plan.node(cable.b.node)?);
            ip(&[
                "link",
                "add",
                &cable.a.iface,
                "netns",
                &a.namespace,
                "type",
                "veth",
                "peer",
                "name",
                &cable.b.iface,
                "netns",
                &b.namespace,
            ])?;
            for (node, end) in [(a, &cable.a), (b, &cable.b)] {
                let cidr = format!("{}/30", end.address);
                ip(&[
                    "-n",
                    &node.namespace,
                    "addr",
                    "add",
                    &cidr,
                    "dev",
                    &end.iface,
                ])?;
                ip(&["-n", &node.namespace, "link", "set", &end.iface, "up"])?;
            }
        }
        Ok(())
    }

    pub fn config_path(&self, id: &str) -> PathBuf {
        self.state.join(format!("{id}.toml"))
    }

    pub fn log_path(&self, id: &str) -> PathBuf {
        self.state.join(format!("{id}.log"))
    }

    /// The mesh's CA and every node's certificate, made with `meshctl certs`
    /// as an operator would, in the state directory's `tls/` (which the
    /// configs name relative to themselves).
    fn write_certificates(&self) -> Result<(), LabError> {
        let dir = self.state.join(plan::TLS_DIR);
        let dir = dir.to_string_lossy();
        let meshctl = self.binaries.meshctl.to_string_lossy();
        let name = format!("meshlab {} CA", self.plan.name);
        command::run(
            &meshctl,
            &["certs", "--dir", &dir, "init", "--name", &name],
            QUICK,
        )?;
        let mut issue = vec!["certs", "--dir", &dir, "issue"];
        issue.extend(self.ids());
        command::run(&meshctl, &issue, QUICK)?;
        Ok(())
    }

    fn write_configs(&self, options: &Options) -> Result<(), LabError> {
        self.write_certificates()?;
        let alertmanager = options.alertmanager.then(plan::alertmanager_url);
        for id in self.ids() {
            let text = self
                .plan
                .config(id, alertmanager.as_deref(), &options.extra_config)?;
            let path = self.config_path(id);
            fs::write(&path, text).map_err(file_error(&path))?;
            self.fit_config(id)?;
        }
        Ok(())
    }

    /// Fits node `id`'s config to the build it runs, as an operator does
    /// for a build that knows another set of keys: its `[history]` for the
    /// lab's own build, none for another (a release before refuses the
    /// key). Then checks it with that build.
    fn fit_config(&self, id: &str) -> Result<(), LabError> {
        let path = self.config_path(id);
        let text = fs::read_to_string(&path).map_err(file_error(&path))?;
        let section = plan::Plan::history_section(id);
        let without = text.replace(&section, "");
        let meshd = self.meshd_of(id)?;
        let own = fs::canonicalize(&self.binaries.meshd).ok() == fs::canonicalize(&meshd).ok();
        let fitted = if own { without + &section } else { without };
        if fitted != text {
            fs::write(&path, fitted).map_err(file_error(&path))?;
        }
        let meshd = meshd.to_string_lossy();
        let checked = command::run_any(&meshd, &["check-config", &path.to_string_lossy()], QUICK)?;
        if !checked.success {
            return Err(LabError::BadConfig {
                node: id.to_owned(),
                problems: format!("{}{}", checked.stdout, checked.stderr),
            });
        }
        Ok(())
    }

    /// The meshd executable node `id` runs: the one `up` or an upgrade
    /// chose for it, else the lab's. The choice is kept in the state
    /// directory, so a later `lab` command restarts the node on the same
    /// build.
    pub fn meshd_of(&self, id: &str) -> Result<PathBuf, LabError> {
        let record = self.meshd_record(id)?;
        match fs::read_to_string(&record) {
            Ok(path) => Ok(PathBuf::from(path.trim_end())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                Ok(self.binaries.meshd.clone())
            }
            Err(source) => Err(LabError::File {
                path: record,
                source,
            }),
        }
    }

    fn meshd_record(&self, id: &str) -> Result<PathBuf, LabError> {
        let node = self.plan.node(id)?.id;
        Ok(self.state.join(format!("{node}.meshd-binary")))
    }

    /// Makes node `id` run `binary` from its next start on.
    fn choose_meshd(&self, id: &str, binary: &Path) -> Result<(), LabError> {
        let binary = fs::canonicalize(binary).map_err(file_error(binary))?;
        if !binary.is_file() {
            return Err(LabError::MissingBinary {
                name: "meshd",
                path: binary,
                env: "--binary",
            });
        }
        let record = self.meshd_record(id)?;
        fs::write(&record, binary.to_string_lossy().as_bytes()).map_err(file_error(&record))
    }

    /// Upgrades (or downgrades) node `id` to `binary` as an operator's
    /// reinstall does: its meshd stopped as a service manager stops it,
    /// the executable swapped, `pause` for the rest of the reinstall
    /// (copying files, the service manager loading the job again), and
    /// started with the same config. How long from the stop to the new
    /// process's start.
    pub fn upgrade(
        &mut self,
        id: &str,
        binary: &Path,
        log_level: &str,
        pause: Duration,
    ) -> Result<Duration, LabError> {
        let previous = self.meshd_of(id)?;
        // A bad path is refused here, before the running daemon is stopped.
        self.choose_meshd(id, binary)?;
        let stopped_at = Instant::now();
        if let Err(err) = self.stop(id) {
            self.choose_meshd(id, &previous)?;
            return Err(err);
        }
        std::thread::sleep(pause);
        self.fit_config(id)?;
        self.start(id, log_level)?;
        Ok(stopped_at.elapsed())
    }

    /// Starts node `id`'s meshd (again) with its config, logging to its
    /// log file.
    pub fn start(&mut self, id: &str, log_level: &str) -> Result<(), LabError> {
        self.start_with_env(id, log_level, &[])
    }

    /// Starts node `id`'s meshd with its wall clock `offset_seconds` away
    /// from the host's (negative: behind), through libfaketime; its
    /// monotonic clock stays true, as after a step of a real clock.
    pub fn start_with_wall_clock_offset(
        &mut self,
        id: &str,
        log_level: &str,
        offset_seconds: i64,
    ) -> Result<(), LabError> {
        let library = libfaketime().ok_or(LabError::NoFaketime)?;
        let env = [
            ("LD_PRELOAD", library.to_string_lossy().into_owned()),
            ("FAKETIME", format!("{offset_seconds:+}")),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ];
        self.start_with_env(id, log_level, &env)
    }

    fn start_with_env(
        &mut self,
        id: &str,
        log_level: &str,
        env: &[(&str, String)],
    ) -> Result<(), LabError> {
        let node = self.plan.node(id)?.clone();
        let log = self.log_path(id);
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(file_error(&log))?;
        let err = out.try_clone().map_err(file_error(&log))?;
        let meshd = self.meshd_of(id)?;
        let child = Command::new("ip")
            .args(["netns", "exec", &node.namespace])
            .arg(&meshd)
            .arg("run")
            .arg("--config")
            .arg(self.config_path(id))
            .args(["--log-level", log_level])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| CommandError::Spawn {
                command: format!("ip netns exec {} meshd run", node.namespace),
                source,
            })?;
        self.daemons.insert(node.id, child);
        Ok(())
    }

    /// The pid of node `id`'s running meshd.
    pub fn daemon_pid(&mut self, id: &str) -> Result<u32, LabError> {
        let node = self.plan.node(id)?.id;
        if let Some(child) = self.daemons.get_mut(node)
            && matches!(child.try_wait(), Ok(None))
        {
            return Ok(child.id());
        }
        let ns = self.namespace(id)?.to_owned();
        pids_in(&ns)?
            .into_iter()
            .find(|&pid| live_command(pid).as_deref() == Some("meshd"))
            .ok_or_else(|| LabError::NoDaemon(id.to_owned()))
    }

    /// Sends `signal` to node `id`'s meshd: `STOP` freezes it, `CONT`
    /// thaws it, `KILL` is a crash.
    pub fn signal_daemon(&mut self, id: &str, signal: &str) -> Result<(), LabError> {
        let pid = self.daemon_pid(id)?;
        command::signal(pid, signal)?;
        if signal == "KILL" {
            self.reap(id, pid, STOP_GRACE);
        }
        Ok(())
    }

    /// Stops node `id`'s meshd as a service manager would (SIGTERM, then
    /// SIGKILL after a grace period).
    pub fn stop(&mut self, id: &str) -> Result<(), LabError> {
        // A stalled daemon must run to act on the TERM: its driver ends
        // (and continues it) first.
        self.stalls.remove(id);
        let pid = self.daemon_pid(id)?;
        command::signal(pid, "TERM")?;
        if !self.reap(id, pid, STOP_GRACE) {
            command::signal(pid, "KILL")?;
            self.reap(id, pid, STOP_GRACE);
        }
        Ok(())
    }

    /// Waits up to `limit` for node `id`'s daemon (`pid`) to exit; whether
    /// it did. One another `lab` command started is not this process's
    /// child: it is watched until its pid is gone.
    fn reap(&mut self, id: &str, pid: u32, limit: Duration) -> bool {
        let Some(child) = self.daemons.get_mut(id) else {
            let deadline = Instant::now() + limit;
            while live_command(pid).is_some() {
                if Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(EXIT_POLL);
            }
            return true;
        };
        let exited = matches!(command::wait_until(child, limit), Ok(Some(_)));
        if exited {
            self.daemons.remove(id);
        }
        exited
    }

    /// Node `id`'s view, from `meshctl status --json` run in its namespace.
    pub fn status(&self, id: &str) -> Result<Status, LabError> {
        let ns = self.namespace(id)?;
        let meshctl = self.binaries.meshctl.to_string_lossy();
        let out = command::run_any(
            "ip",
            &["netns", "exec", ns, &meshctl, "status", "--json"],
            MESHCTL_LIMIT,
        )?;
        // 0 healthy, 1 unhealthy: both carry the document; 2 is unreachable.
        if !matches!(out.code, Some(0 | 1)) {
            return Err(LabError::Unreachable {
                node: id.to_owned(),
                message: out.stderr.trim().to_owned(),
            });
        }
        Status::parse(&out.stdout).map_err(|source| LabError::BadStatus {
            node: id.to_owned(),
            source,
        })
    }

    /// Asks `nodes` until every one's view satisfies `holds`, for at most
    /// `limit`; their views at that moment.
    pub fn wait_for(
        &self,
        nodes: &[&str],
        what: &str,
        limit: Duration,
        mut holds: impl FnMut(&Status) -> bool,
    ) -> Result<Vec<Status>, LabError> {
        let started = Instant::now();
        loop {
            let views: Vec<Result<Status, LabError>> =
                nodes.iter().map(|id| self.status(id)).collect();
            if views.iter().all(|v| v.as_ref().is_ok_and(&mut holds)) {
                return Ok(views.into_iter().filter_map(Result::ok).collect());
            }
            if started.elapsed() >= limit {
                let last = views
                    .iter()
                    .map(|v| match v {
                        Ok(status) => status.summary(),
                        Err(err) => err.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(LabError::Timeout {
                    what: what.to_owned(),
                    waited: started.elapsed(),
                    last,
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// `wait_for` on every node.
    pub fn wait_all(
        &self,
        what: &str,
        limit: Duration,
        holds: impl FnMut(&Status) -> bool,
    ) -> Result<Vec<Status>, LabError> {
        self.wait_for(&self.ids(), what, limit, holds)
    }

    /// Runs `program args…` inside node `id`'s namespace; its output.
    pub fn exec(&self, id: &str, program: &str, args: &[&str]) -> Result<String, LabError> {
        Ok(in_namespace(self.namespace(id)?, program, args)?)
    }

    /// Stops what this process started, then removes the whole lab.
    pub fn teardown(&mut self) -> Result<(), LabError> {
        // Each driver continues its daemon as it ends, so the daemons stop
        // on SIGTERM below instead of waiting for SIGKILL.
        self.stalls.clear();
        self.kill_own_ranks();
        for mut helper in self.hogs.drain(..).chain(self.services.drain(..)) {
            let _ = helper.kill();
            let _ = helper.wait();
        }
        for id in self.ids() {
            if self.daemons.contains_key(id) {
                let _ = self.stop(id);
            }
        }
        down(&self.plan.name)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.teardown_on_drop
            && let Err(err) = self.teardown()
        {
            eprintln!("lab {}: teardown failed: {err}", self.plan.name);
        }
    }
}

/// Every network namespace on the host.
fn namespaces() -> Result<Vec<String>, LabError> {
    Ok(ip(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// Namespaces left by any lab.
pub fn leftover_namespaces() -> Result<Vec<String>, LabError> {
    Ok(namespaces()?
        .into_iter()
        .filter(|ns| ns.starts_with(PREFIX))
        .collect())
}

fn pids_in(ns: &str) -> Result<Vec<u32>, LabError> {
    Ok(ip(&["netns", "pids", ns])?
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// A process's command name, unless it has exited (gone or a zombie).
fn live_command(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S …": the name may hold spaces and parentheses.
    let (head, tail) = stat.rsplit_once(") ")?;
    let name = head.split_once(" (")?.1;
    (!tail.starts_with('Z')).then(|| name.to_owned())
}

/// Ends every process in `namespaces` (SIGTERM, then SIGKILL for what is
/// still alive after the grace period).
fn end_processes(namespaces: &[String]) -> Result<(), LabError> {
    let mut pids = Vec::new();
    for ns in namespaces {
        pids.extend(pids_in(ns)?);
    }
    for &pid in &pids {
        let _ = command::signal(pid, "TERM");
        // A frozen or stalled daemon (`lab fault freeze`, `stall`, `late`)
        // acts on the TERM only once it runs again.
        let _ = command::signal(pid, "CONT");
    }
    let deadline = Instant::now() + STOP_GRACE;
    while pids.iter().any(|&p| live_command(p).is_some()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for &pid in pids.iter().filter(|&&p| live_command(p).is_some()) {
        let _ = command::signal(pid, "KILL");
    }
    Ok(())
}

/// Removes lab `name`: its processes, namespaces (and with them every veth
/// and bridge) and state directory. Idempotent; checks nothing is left.
pub fn down(name: &str) -> Result<(), LabError> {
    plan::validate_name(name)?;
    let prefix = plan::namespace_prefix(name);
    let mine: Vec<String> = namespaces()?
        .into_iter()
        .filter(|ns| ns.starts_with(&prefix))
        .collect();
    end_processes(&mine)?;
    for ns in &mine {
        ip(&["netns", "del", ns])?;
    }
    let state = state_dir(name);
    if state.exists() {
        fs::remove_dir_all(&state).map_err(file_error(&state))?;
    }
    let left: Vec<String> = namespaces()?
        .into_iter()
        .filter(|ns| ns.starts_with(&prefix))
        .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(LabError::Leftovers(left))
    }
}

/// Every lab's name: from namespaces `meshlab-NAME-…` and state directories.
pub fn lab_names() -> Result<Vec<String>, LabError> {
    let mut names: Vec<String> = leftover_namespaces()?
        .iter()
        .filter_map(|ns| ns.strip_prefix(PREFIX)?.rsplit_once('-'))
        .map(|(name, _)| name.to_owned())
        .collect();
    if let Ok(dirs) = fs::read_dir(STATE_ROOT) {
        names.extend(
            dirs.filter_map(Result::ok)
                .filter_map(|d| d.file_name().into_string().ok()),
        );
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// Removes every lab on the host.
pub fn down_all() -> Result<(), LabError> {
    for name in lab_names()? {
        down(&name)?;
    }
    Ok(())
}

/// Removes labs whose owning test process is gone.
fn sweep_orphans() {
    let Ok(names) = lab_names() else { return };
    for name in names {
        let owner = fs::read_to_string(state_dir(&name).join(OWNER_FILE));
        if let Ok(pid) = owner.as_deref().map(str::trim)
            && pid.parse::<u32>().is_ok()
            && !Path::new("/proc").join(pid).exists()
            && let Err(err) = down(&name)
        {
            eprintln!("lab {name}: removing the leftover of a dead run failed: {err}");
        }
    }
}

/// Debian's libfaketime for this machine's architecture, if installed.
pub fn libfaketime() -> Option<PathBuf> {
    let triplet = format!("{}-linux-gnu", std::env::consts::ARCH);
    let path = PathBuf::from(format!("/usr/lib/{triplet}/faketime/libfaketime.so.1"));
    path.is_file().then_some(path)
}
