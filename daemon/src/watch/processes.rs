//! The process table the CPU watcher samples every tick, read as cheaply as
//! the OS allows. Every tick lists every process, so one that starts or
//! exits is seen at once, and reads the CPU time, parent and resident
//! memory of those that may have changed. On Linux that is a process's
//! `/proc/<pid>/stat` alone, read through an fd kept open by
//! [`ProcReader`](meshd_platform::linux::procs::ProcReader) (one `pread`,
//! not an open, reads and a close), and only for processes that were busy
//! at their last read, new ones, and a share of the idle ones: a process
//! whose CPU time stood still between its last two reads is read again on
//! one tick in four and at least every 4 s (`IDLE_READ_EVERY`,
//! `IDLE_REREAD`), and shown in between as at its last read, with 0
//! cores. A steady tick on a mostly idle host is then one listing of
//! `/proc` and a `pread` for each busy process and a quarter of the idle
//! ones. (On macOS sysinfo reads every process every tick.) CPU is a rate
//! over the time since the process's own previous read, so one that wakes
//! between reads shows its average since then.
//!
//! Names and command lines are resolved once per process and cached by
//! pid, start time and kernel name (an `exec` changes the name, so it is
//! resolved again, as is a reused pid, at the process's next read). The
//! cache is updated in place, not rebuilt: a steady host costs no command
//! line at all, and no allocation per process but the name and command line
//! each sample owns.
//!
//! Every process's command line is resolved once, not only the busiest
//! ones': the job watcher finds job ranks by their command line
//! (`python3 -m mlx.launch`), idle and orphaned ones included.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use meshd_domain::jobs::{ProcessState, RankIdentity};
use meshd_model::cpu::ProcessSample;
use meshd_platform::rank_env::{MAX_RANK_FILE_BYTES, rank_identity};

/// Command lines are for matching job patterns and for evidence; a few
/// hundred characters hold the interpreter, script and module.
const MAX_COMMAND_CHARS: usize = 512;

/// Linux keeps only this many bytes of a process name (TASK_COMM_LEN - 1);
/// `UniversalControl` is 16.
const TRUNCATED_NAME_LEN: usize = 15;

/// What a process is called and which job rank it is, resolved once.
#[derive(Debug)]
struct Identity {
    name: String,
    command: Option<String>,
    rank: Option<Arc<RankIdentity>>,
    /// Linux: the network namespace a rank runs in.
    network_namespace: Option<u64>,
}

/// One reading of a process's counters.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Instant,
    /// CPU time, in [`Known::cpu_per_second`] units.
    cpu: u64,
    parent: Option<u32>,
    memory_bytes: Option<u64>,
    state: ProcessState,
}

/// A process seen at a sample. With its pid, its start time names it for
/// good (a pid is reused, the pair is not); its kernel name changes on
/// `exec`, and then it is resolved again.
#[derive(Debug)]
struct Seen {
    start: u64,
    kernel_name: String,
    identity: Identity,
    /// Its last reading, which a sample that does not read it shows.
    last: Reading,
    /// The CPU time and instant of the reading before `last`; none for a
    /// process read once, which has no rate yet.
    before: Option<(u64, Instant)>,
    /// Which sample last saw it, read or only listed.
    sample: u64,
}

impl Seen {
    fn is(&self, start: u64, kernel_name: &str) -> bool {
        self.start == start && self.kernel_name == kernel_name
    }

    /// As its last reading shows it, with its CPU rate between that
    /// reading and the one before, however far apart they are.
    fn to_sample(&self, pid: u32, cpu_per_second: f64) -> ProcessSample {
        ProcessSample {
            name: self.identity.name.clone(),
            pid,
            cores: self.before.map_or(0.0, |(cpu, at)| {
                let elapsed = self.last.at.saturating_duration_since(at);
                cores(cpu, self.last.cpu, cpu_per_second, elapsed.as_secs_f64())
            }),
            command: self.identity.command.clone(),
            parent: self.last.parent,
            memory_bytes: self.last.memory_bytes,
            state: self.last.state,
            started: self.start,
            rank: self.identity.rank.clone(),
            network_namespace: self.identity.network_namespace,
        }
    }
}

/// The processes seen last sample, by pid, updated in place each sample.
#[derive(Debug)]
struct Known {
    entries: HashMap<u32, Seen>,
    sample: u64,
    /// The unit of the readings' CPU times, per second.
    cpu_per_second: f64,
}

impl Known {
    fn new(cpu_per_second: f64) -> Self {
        Self {
            entries: HashMap::new(),
            sample: 0,
            cpu_per_second,
        }
    }

    /// Starts a sample: the processes it does not see are forgotten at
    /// [`Known::end`].
    fn begin(&mut self) {
        self.sample = self.sample.wrapping_add(1);
    }

    /// Whether the process is known, so needs no command line.
    #[cfg(not(target_os = "linux"))]
    fn is_known(&self, pid: u32, start: u64, kernel_name: &str) -> bool {
        self.entries
            .get(&pid)
            .is_some_and(|seen| seen.is(start, kernel_name))
    }

    /// The process as read now, its identity resolved with `args` (its
    /// command line) and `rank` (its place in a job), both read only for a
    /// process not seen before; its CPU a rate since its previous reading.
    fn observe(
        &mut self,
        pid: u32,
        start: u64,
        kernel_name: &str,
        reading: Reading,
        args: impl FnOnce() -> Option<Vec<String>>,
        rank: impl FnOnce() -> (Option<Arc<RankIdentity>>, Option<u64>),
    ) -> ProcessSample {
        let sample = self.sample;
        let seen = match self.entries.entry(pid) {
            Entry::Occupied(entry) if entry.get().is(start, kernel_name) => {
                let seen = entry.into_mut();
                seen.before = Some((seen.last.cpu, seen.last.at));
                seen.last = reading;
                seen.sample = sample;
                seen
            }
            entry => {
                let args = args().unwrap_or_default();
                let (rank, network_namespace) = rank();
                let seen = Seen {
                    start,
                    kernel_name: kernel_name.to_owned(),
                    identity: Identity {
                        name: full_name(kernel_name, args.first().map(String::as_str)),
                        command: command_line(&args),
                        rank,
                        network_namespace,
                    },
                    last: reading,
                    before: None,
                    sample,
                };
                // New, a pid reused, or a process that exec'd: resolved
                // afresh.
                entry.insert_entry(seen).into_mut()
            }
        };
        seen.to_sample(pid, self.cpu_per_second)
    }

    /// Ends a sample: forgets the processes it did not see (gone, or
    /// zombies).
    fn end(&mut self) {
        let sample = self.sample;
        self.entries.retain(|_, seen| seen.sample == sample);
    }
}

/// The job rank `pid` is, from its MLX variables (`variable`) and the files
/// they name (`read`); a rank whose environment does not make sense is
/// logged once, as it is resolved once, and is no rank.
fn resolve_rank(
    pid: u32,
    variable: impl Fn(&str) -> Option<String>,
    read: impl Fn(&str) -> Result<String, String>,
) -> Option<Arc<RankIdentity>> {
    match rank_identity(variable, read) {
        Ok(rank) => rank.map(Arc::new),
        Err(err) => {
            tracing::warn!(pid, error = %err, "a process's MLX environment names no job; it is not watched as a rank");
            None
        }
    }
}

/// The process name, completed from `argv[0]` where the kernel cut it short,
/// so offender names match on Linux as on macOS.
pub fn full_name(name: &str, argv0: Option<&str>) -> String {
    if name.len() >= TRUNCATED_NAME_LEN
        && let Some(base) = argv0
            .and_then(|a| Path::new(a).file_name())
            .and_then(|b| b.to_str())
        && base.len() > name.len()
        && base.starts_with(name)
    {
        return base.to_owned();
    }
    name.to_owned()
}

fn command_line(args: &[String]) -> Option<String> {
    if args.is_empty() {
        return None;
    }
    let mut line = String::new();
    for arg in args {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(arg);
        if line.len() > MAX_COMMAND_CHARS {
            let end = (0..=MAX_COMMAND_CHARS)
                .rev()
                .find(|i| line.is_char_boundary(*i))
                .unwrap_or(0);
            line.truncate(end);
            break;
        }
    }
    Some(line)
}

/// CPU in cores from two readings of a process's CPU time.
fn cores(cpu_before: u64, cpu_now: u64, per_second: f64, elapsed_secs: f64) -> f64 {
    if elapsed_secs <= 0.0 || per_second <= 0.0 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let used = cpu_now.saturating_sub(cpu_before) as f64 / per_second;
    let cores = used / elapsed_secs;
    if cores.is_finite() {
        cores.max(0.0)
    } else {
        0.0
    }
}

#[cfg(target_os = "linux")]
pub use linux::ProcessTable;

#[cfg(not(target_os = "linux"))]
pub use other::ProcessTable;

#[cfg(target_os = "linux")]
mod linux {
    use std::time::Duration;

    use meshd_platform::linux::procs::{Listed, ProcReader, clock_ticks_per_second, page_bytes};

    use super::*;

    /// An idle process is read on one tick in this many, its pid choosing
    /// which, so each tick reads about as many of the idle ones. Most of a
    /// host's processes sleep (kernel threads, daemons), and generating
    /// their `stat` lines was most of a tick's cost; a quarter of it is
    /// left, while one that wakes is seen within 4 ticks (4 s at the
    /// default interval, well inside the 10 s spike window), with its
    /// average over the whole time.
    const IDLE_READ_EVERY: u64 = 4;

    /// And an idle process is read at least this often, whatever the
    /// interval (up to 60 s): a long interval reads every process every
    /// tick, as ticks are few, rather than missing one that wakes for
    /// minutes.
    const IDLE_REREAD: Duration = Duration::from_secs(4);

    /// `stat`'s state letter (proc(5)); zombies never get here.
    fn linux_state(letter: char) -> ProcessState {
        match letter {
            'R' => ProcessState::Running,
            'S' | 'D' | 'I' | 'W' | 'P' => ProcessState::Sleeping,
            'T' | 't' => ProcessState::Stopped,
            _ => ProcessState::Unknown,
        }
    }

    // Skipping is Linux's alone: sysinfo reads every process anyway.
    impl Known {
        /// Whether `pid`, listed now, is to be read: a new one, one busy at
        /// its last read or read once, and an idle one when its turn
        /// comes.
        fn due(&self, pid: u32, now: Instant) -> bool {
            let Some(seen) = self.entries.get(&pid) else {
                return true;
            };
            let idle = seen.before.is_some_and(|(cpu, _)| cpu == seen.last.cpu);
            !idle
                || self.sample.wrapping_add(u64::from(pid)) % IDLE_READ_EVERY == 0
                || now.saturating_duration_since(seen.last.at) >= IDLE_REREAD
        }

        /// A process listed but not read, as at its last reading, which
        /// found it idle: 0 cores.
        fn keep(&mut self, pid: u32) -> Option<ProcessSample> {
            let seen = self.entries.get_mut(&pid)?;
            seen.sample = self.sample;
            Some(seen.to_sample(pid, self.cpu_per_second))
        }
    }

    /// `/proc`: a listing and a `stat` read per process due, through the
    /// fds the reader keeps.
    #[derive(Debug)]
    pub struct ProcessTable {
        reader: ProcReader,
        page_bytes: u64,
        known: Known,
    }

    impl ProcessTable {
        /// Fails where `/proc` cannot be listed.
        pub fn new() -> std::io::Result<Self> {
            let table = Self::with_root("/proc");
            std::fs::read_dir(table.reader.root())?;
            Ok(table)
        }

        pub fn with_root(root: impl Into<std::path::PathBuf>) -> Self {
            Self {
                reader: ProcReader::new(root),
                page_bytes: page_bytes(),
                known: Known::new(f64::from(
                    u32::try_from(clock_ticks_per_second()).unwrap_or(u32::MAX),
                )),
            }
        }

        /// The kept `stat` files are a cache: they may grow into what the
        /// listeners leave above the descriptor reserve and meshctl's
        /// share, and shrink when those are eaten into, so that the
        /// reserve stays free for what cannot do without a descriptor (a
        /// command's pipes, a file, a socket). A count that cannot be
        /// taken changes nothing.
        fn share_descriptors(&mut self) {
            use crate::ports::{Descriptors, LOCAL_GRPC_DESCRIPTOR_SHARE};
            let Some(headroom) = Descriptors::current()
                .and_then(|d| d.keeping(LOCAL_GRPC_DESCRIPTOR_SHARE).headroom())
            else {
                return;
            };
            let kept = i64::try_from(self.reader.open_stats()).unwrap_or(i64::MAX);
            let share = kept.saturating_add(headroom).max(0);
            self.reader
                .keep_at_most(usize::try_from(share).unwrap_or(usize::MAX));
        }

        /// Every live process (zombies are gone, whatever their parent
        /// says, once read); CPU is a rate since the process's previous
        /// read, 0 for a process first seen now or not read now.
        pub fn sample(&mut self, now: Instant) -> std::io::Result<Vec<ProcessSample>> {
            self.known.begin();
            self.share_descriptors();
            let known = &self.known;
            let listed = self.reader.processes(|pid| known.due(pid, now))?;
            let mut samples = Vec::with_capacity(listed.len());
            for entry in &listed {
                let stat = match entry {
                    Listed::Read(stat) => stat,
                    Listed::Skipped(pid) => {
                        samples.extend(self.known.keep(*pid));
                        continue;
                    }
                };
                if matches!(stat.state, 'Z' | 'X') {
                    continue;
                }
                let reading = Reading {
                    at: now,
                    cpu: stat.cpu_ticks,
                    parent: Some(stat.ppid),
                    memory_bytes: Some(stat.rss_pages.saturating_mul(self.page_bytes)),
                    state: linux_state(stat.state),
                };
                // A kernel thread has no command line or environment.
                let user = !stat.kernel_thread;
                let reader = std::cell::RefCell::new(&mut self.reader);
                samples.push(self.known.observe(
                    stat.pid,
                    stat.start_ticks,
                    &stat.comm,
                    reading,
                    || user.then(|| reader.borrow_mut().command_line(stat.pid))?,
                    || {
                        let Some(env) = user
                            .then(|| reader.borrow_mut().rank_environment(stat.pid))
                            .flatten()
                        else {
                            return (None, None);
                        };
                        let rank = resolve_rank(
                            stat.pid,
                            |name| env.variable(name),
                            |path| env.read(path, MAX_RANK_FILE_BYTES),
                        );
                        let namespace = rank
                            .as_ref()
                            .and_then(|_| reader.borrow_mut().network_namespace(stat.pid));
                        (rank, namespace)
                    },
                ));
            }
            self.known.end();
            Ok(samples)
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod other {
    use sysinfo::{
        Pid, ProcessRefreshKind, ProcessStatus, ProcessesToUpdate, RefreshKind, System, UpdateKind,
    };

    use super::*;

    /// sysinfo's process table (macOS: one `proc_pidinfo` per process),
    /// with arguments (`KERN_PROCARGS2`) fetched only for processes not seen
    /// before.
    #[derive(Debug)]
    pub struct ProcessTable {
        system: System,
        known: Known,
    }

    /// sysinfo's status of a process (from `proc_pidinfo`'s `pbi_status`).
    fn macos_state(status: ProcessStatus) -> ProcessState {
        match status {
            ProcessStatus::Run => ProcessState::Running,
            ProcessStatus::Sleep | ProcessStatus::Idle => ProcessState::Sleeping,
            ProcessStatus::Stop => ProcessState::Stopped,
            _ => ProcessState::Unknown,
        }
    }

    /// The text of `path` as a process with working directory `cwd` names
    /// it, at most [`MAX_RANK_FILE_BYTES`].
    fn read_as(cwd: Option<&std::path::Path>, path: &str) -> Result<String, String> {
        let full = match cwd {
            Some(cwd) if !path.starts_with('/') => cwd.join(path),
            _ => std::path::PathBuf::from(path),
        };
        let file = std::fs::File::open(&full).map_err(|e| e.to_string())?;
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(
                file,
                u64::try_from(MAX_RANK_FILE_BYTES + 1).unwrap_or(u64::MAX),
            ),
            &mut text,
        )
        .map_err(|e| e.to_string())?;
        if text.len() > MAX_RANK_FILE_BYTES {
            return Err(format!("over {MAX_RANK_FILE_BYTES} bytes"));
        }
        Ok(text)
    }

    impl ProcessTable {
        pub fn new() -> std::io::Result<Self> {
            Ok(Self {
                system: System::new_with_specifics(RefreshKind::nothing())
                    .map_err(std::io::Error::other)?,
                // sysinfo counts CPU time in milliseconds.
                known: Known::new(1000.0),
            })
        }

        pub fn sample(&mut self, now: Instant) -> std::io::Result<Vec<ProcessSample>> {
            self.system.refresh_processes_specifics(
                ProcessesToUpdate::All,
                true,
                ProcessRefreshKind::nothing()
                    .with_cpu()
                    .with_memory()
                    .without_tasks(),
            );
            // The arguments of the processes not seen before, in one refresh.
            let new: Vec<Pid> = self
                .system
                .processes()
                .iter()
                .filter(|(pid, p)| {
                    !self
                        .known
                        .is_known(pid.as_u32(), p.start_time(), &p.name().to_string_lossy())
                })
                .map(|(pid, _)| *pid)
                .collect();
            if !new.is_empty() {
                // KERN_PROCARGS2 holds both the arguments and the
                // environment it was started with: one read each.
                self.system.refresh_processes_specifics(
                    ProcessesToUpdate::Some(&new),
                    false,
                    ProcessRefreshKind::nothing()
                        .with_cmd(UpdateKind::Always)
                        .with_environ(UpdateKind::Always)
                        .with_cwd(UpdateKind::Always),
                );
            }
            self.known.begin();
            let mut samples = Vec::new();
            for (pid, process) in self.system.processes() {
                // A zombie has exited: it holds no memory and runs nothing.
                if process.status() == ProcessStatus::Zombie {
                    continue;
                }
                let reading = Reading {
                    at: now,
                    cpu: process.accumulated_cpu_time(),
                    parent: process.parent().map(|p| p.as_u32()),
                    memory_bytes: Some(process.memory()),
                    state: macos_state(process.status()),
                };
                samples.push(self.known.observe(
                    pid.as_u32(),
                    process.start_time(),
                    &process.name().to_string_lossy(),
                    reading,
                    || {
                        Some(
                            process
                                .cmd()
                                .iter()
                                .map(|a| a.to_string_lossy().into_owned())
                                .collect(),
                        )
                    },
                    || {
                        let variable = |name: &str| {
                            let prefix = format!("{name}=");
                            process.environ().iter().find_map(|entry| {
                                entry.to_str()?.strip_prefix(&prefix).map(str::to_owned)
                            })
                        };
                        if variable("MLX_RANK").is_none() {
                            return (None, None);
                        }
                        let rank = resolve_rank(pid.as_u32(), variable, |path| {
                            read_as(process.cwd(), path)
                        });
                        (rank, None)
                    },
                ));
            }
            self.known.end();
            Ok(samples)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_names_are_completed_from_argv0() {
        assert_eq!(
            full_name("UniversalContro", Some("/tmp/x/UniversalControl")),
            "UniversalControl"
        );
        assert_eq!(
            full_name("UniversalControl", Some("/System/UniversalControl")),
            "UniversalControl"
        );
        // Short names are whole; argv[0] can be anything.
        assert_eq!(full_name("yes", Some("/tmp/UniversalControl")), "yes");
        assert_eq!(
            full_name("UniversalContro", Some("/usr/bin/python3")),
            "UniversalContro"
        );
        assert_eq!(full_name("UniversalContro", None), "UniversalContro");
    }

    #[test]
    fn command_lines_are_joined_and_capped() {
        assert_eq!(command_line(&[]), None);
        let cmd: Vec<String> = ["python3", "-m", "mlx.launch"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(command_line(&cmd).as_deref(), Some("python3 -m mlx.launch"));
        let long = vec!["é".repeat(1000)];
        assert!(command_line(&long).unwrap().len() <= MAX_COMMAND_CHARS);
    }

    fn reading(at: Instant, cpu: u64) -> Reading {
        Reading {
            at,
            cpu,
            parent: Some(1),
            memory_bytes: Some(4096),
            state: ProcessState::Sleeping,
        }
    }

    /// A process that is no rank, resolved once.
    fn no_rank() -> (Option<Arc<RankIdentity>>, Option<u64>) {
        (None, None)
    }

    #[test]
    fn known_processes_are_updated_in_place_and_forgotten_once_unseen() {
        let t0 = Instant::now();
        let at = |secs| t0 + std::time::Duration::from_secs(secs);
        let mut known = Known::new(100.0);
        known.begin();
        let sample = known.observe(
            10,
            500,
            "python3",
            reading(at(0), 100),
            || Some(vec!["python3".to_owned(), "train.py".to_owned()]),
            no_rank,
        );
        assert_eq!(sample.command.as_deref(), Some("python3 train.py"));
        assert_eq!((sample.cores, sample.memory_bytes), (0.0, Some(4096)));
        known.observe(11, 501, "bash", reading(at(0), 5), || None, no_rank);
        known.end();

        // The same process: a rate over the time since its last reading,
        // and no command line asked for. The one not seen is forgotten.
        known.begin();
        let sample = known.observe(
            10,
            500,
            "python3",
            reading(at(2), 150),
            || panic!("resolved again"),
            || panic!("resolved again"),
        );
        assert_eq!(sample.name, "python3");
        assert!((sample.cores - 0.25).abs() < 1e-9, "{sample:?}");
        known.end();
        assert_eq!(known.entries.len(), 1);

        // An exec (a new kernel name), then the pid reused (a new start
        // time): each resolved afresh, with no rate.
        known.begin();
        let sample = known.observe(
            10,
            500,
            "torchrun",
            reading(at(3), 160),
            || Some(vec!["torchrun".into()]),
            no_rank,
        );
        assert_eq!((sample.name.as_str(), sample.cores), ("torchrun", 0.0));
        known.end();
        known.begin();
        let sample = known.observe(10, 900, "torchrun", reading(at(4), 1), || None, no_rank);
        assert_eq!((sample.command.as_deref(), sample.cores), (None, 0.0));
        known.end();
        assert_eq!(known.entries.len(), 1);
    }

    #[test]
    fn cores_are_cpu_time_over_wall_time() {
        assert!((cores(100, 150, 100.0, 1.0) - 0.5).abs() < 1e-9);
        assert!((cores(0, 2_000, 1000.0, 1.0) - 2.0).abs() < 1e-9);
        // A counter that went back, or no time passed: nothing, not NaN.
        assert_eq!(cores(150, 100, 100.0, 1.0), 0.0);
        assert_eq!(cores(0, 100, 100.0, 0.0), 0.0);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod linux_tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use meshd_model::cpu::ProcessSample;
    use meshd_platform::linux::procs::{clock_ticks_per_second, page_bytes};

    use super::ProcessTable;

    fn stat(pid: u32, comm: &str, state: char, ticks: u64, start: u64, rss: u64) -> String {
        format!(
            "{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 0 0 0 0 {ticks} 0 0 0 20 0 1 0 {start} 1000 {rss} 0\n"
        )
    }

    /// A fake procfs: a process per (pid, stat line, command line). The
    /// files of a pid still there are rewritten in place, as procfs shows a
    /// live process's changes through the same file; the reader keeps
    /// `stat` open, and on a plain directory a file deleted and written
    /// anew would leave it reading the deleted one (on procfs a process
    /// gone makes its fd fail). Pids not given are removed.
    fn write(root: &std::path::Path, processes: &[(u32, String, &str)]) {
        for entry in std::fs::read_dir(root).unwrap() {
            let entry = entry.unwrap();
            if !processes
                .iter()
                .any(|(pid, ..)| entry.file_name() == pid.to_string().as_str())
            {
                std::fs::remove_dir_all(entry.path()).unwrap();
            }
        }
        for (pid, stat, cmdline) in processes {
            let dir = root.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("stat"), stat).unwrap();
            std::fs::write(dir.join("cmdline"), cmdline).unwrap();
        }
    }

    /// A real child process started the way mlx.launch starts a JACCL
    /// rank is read as that rank, in its state, with its network
    /// namespace; stopped, it reads stopped.
    #[test]
    fn a_jaccl_rank_is_found_by_its_environment_and_its_stop_is_seen() {
        use meshd_domain::jobs::{JobBackend, ProcessState};

        let dir = tempfile::tempdir().unwrap();
        let devices = dir.path().join("devices.json");
        std::fs::write(&devices, r#"[[null, "rdma_en4"], ["rdma_en5", null]]"#).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("MLX_RANK", "1")
            .env("MLX_JACCL_COORDINATOR", "10.0.0.1:5000")
            .env("MLX_IBV_DEVICES", &devices)
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut table = ProcessTable::new().unwrap();
        let find = |samples: Vec<ProcessSample>| {
            samples
                .into_iter()
                .find(|p| p.pid == pid)
                .expect("the child is listed")
        };
        let t0 = Instant::now();
        // Just spawned, the child may still be running its exec: it is
        // read once it waits in its sleep (bounded, as the stop below).
        let rank = (1..=50)
            .map(|i| {
                std::thread::sleep(Duration::from_millis(20));
                find(table.sample(t0 + Duration::from_millis(i * 20)).unwrap())
            })
            .find(|p| p.state == ProcessState::Sleeping)
            .expect("the child sleeps");
        let identity = rank.rank.as_deref().expect("a rank");
        assert_eq!(identity.job, "10.0.0.1:5000");
        assert_eq!(identity.backend, JobBackend::Jaccl);
        assert_eq!((identity.rank, identity.world), (1, Some(2)));
        assert_eq!(identity.devices, [Some("rdma_en5".to_owned()), None]);
        let own = meshd_platform::linux::procs::namespace_inode(std::path::Path::new(
            "/proc/self/ns/net",
        ));
        assert_eq!(rank.network_namespace, own);

        let signalled = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(signalled.success());
        let stopped = (1..=50)
            .map(|i| {
                std::thread::sleep(Duration::from_millis(20));
                find(table.sample(t0 + Duration::from_secs(i)).unwrap())
            })
            .find(|p| p.state == ProcessState::Stopped);
        let _ = child.kill();
        let _ = child.wait();
        let stopped = stopped.expect("the stop is seen");
        assert!(stopped.rank.is_some(), "still the rank it was");
        // A process without the variables is no rank.
        let this = find_self(&mut table, t0 + Duration::from_secs(60));
        assert!(this.rank.is_none());
    }

    fn find_self(table: &mut ProcessTable, at: Instant) -> ProcessSample {
        table
            .sample(at)
            .unwrap()
            .into_iter()
            .find(|p| p.pid == std::process::id())
            .expect("this process")
    }

    #[test]
    fn cpu_is_a_rate_names_are_resolved_once_and_zombies_are_gone() {
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::with_root(root.path());
        let t0 = std::time::Instant::now();
        write(
            root.path(),
            &[
                (
                    10,
                    stat(10, "python3", 'R', 1_000, 500, 25),
                    "python3\0-m\0mlx.launch\0",
                ),
                (
                    11,
                    stat(11, "UniversalContro", 'S', 0, 501, 25),
                    "/System/UniversalControl\0",
                ),
                (12, stat(12, "defunct", 'Z', 0, 502, 25), ""),
            ],
        );
        let first = table.sample(t0).unwrap();
        assert_eq!(first.len(), 2, "{first:?}");
        assert!(
            first.iter().all(|p| p.cores == 0.0),
            "no rate yet: {first:?}"
        );
        let python = first.iter().find(|p| p.pid == 10).unwrap();
        assert_eq!(python.command.as_deref(), Some("python3 -m mlx.launch"));
        assert_eq!(python.parent, Some(1));
        assert_eq!(python.memory_bytes, Some(25 * page_bytes()));
        assert!(first.iter().any(|p| p.name == "UniversalControl"));

        // A second later: python3 used one tick-second per second. Its
        // command line now says otherwise, but it is not read again.
        // UniversalControl used a tick, so it is read again next tick.
        let ticks = clock_ticks_per_second();
        write(
            root.path(),
            &[
                (
                    10,
                    stat(10, "python3", 'R', 1_000 + ticks, 500, 25),
                    "changed\0",
                ),
                (
                    11,
                    stat(11, "UniversalContro", 'S', 1, 501, 25),
                    "changed\0",
                ),
            ],
        );
        let second = table.sample(t0 + Duration::from_secs(1)).unwrap();
        let python = second.iter().find(|p| p.pid == 10).unwrap();
        assert!((python.cores - 1.0).abs() < 1e-9, "{python:?}");
        assert_eq!(python.command.as_deref(), Some("python3 -m mlx.launch"));

        // The pid reused by another process (a new start time), and a
        // process that exec'd (a new name): both resolved afresh.
        write(
            root.path(),
            &[
                (
                    10,
                    stat(10, "python3", 'R', 5, 900, 25),
                    "python3\0other.py\0",
                ),
                (11, stat(11, "bash", 'S', 3, 501, 25), "bash\0"),
            ],
        );
        let third = table.sample(t0 + Duration::from_secs(2)).unwrap();
        let python = third.iter().find(|p| p.pid == 10).unwrap();
        assert_eq!(python.command.as_deref(), Some("python3 other.py"));
        assert_eq!(python.cores, 0.0);
        let bash = third.iter().find(|p| p.pid == 11).unwrap();
        assert_eq!(
            (bash.name.as_str(), bash.command.as_deref()),
            ("bash", Some("bash"))
        );
    }

    fn by_pid(samples: Vec<ProcessSample>) -> BTreeMap<u32, ProcessSample> {
        samples.into_iter().map(|p| (p.pid, p)).collect()
    }

    /// The tick that last read `process`: the tests below write each
    /// process's resident pages as the tick number.
    fn read_at(process: &ProcessSample) -> u64 {
        process.memory_bytes.unwrap() / page_bytes()
    }

    fn sleeper(pid: u32, tick: u64) -> (u32, String, &'static str) {
        (pid, stat(pid, "sleeper", 'S', 5, 500, tick), "sleeper\0")
    }

    #[test]
    fn idle_processes_are_read_one_tick_in_four_and_busy_ones_every_tick() {
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::with_root(root.path());
        let t0 = Instant::now();
        let per_second = clock_ticks_per_second();
        let idle = [20, 21, 22, 23];
        let mut reads: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for tick in 1..=14 {
            let mut processes: Vec<_> = idle.iter().map(|pid| sleeper(*pid, tick)).collect();
            processes.push((
                30,
                stat(30, "python3", 'R', tick * per_second, 600, tick),
                "python3\0train.py\0",
            ));
            write(root.path(), &processes);
            let samples = by_pid(table.sample(t0 + Duration::from_secs(tick)).unwrap());
            assert_eq!(
                samples.keys().copied().collect::<Vec<_>>(),
                [20, 21, 22, 23, 30],
                "tick {tick}"
            );
            for pid in idle {
                // Read or not, the same process, idle.
                let p = &samples[&pid];
                assert_eq!(
                    (p.name.as_str(), p.command.as_deref(), p.parent, p.cores),
                    ("sleeper", Some("sleeper"), Some(1), 0.0),
                    "pid {pid}, tick {tick}"
                );
                if read_at(p) == tick {
                    reads.entry(pid).or_default().push(tick);
                }
            }
            let busy = &samples[&30];
            assert_eq!(read_at(busy), tick, "the busy one is read every tick");
            if tick > 1 {
                assert!((busy.cores - 1.0).abs() < 1e-9, "tick {tick}: {busy:?}");
            }
            // Once known idle, their pids spread them: one a tick.
            if tick > 2 {
                let read = idle.iter().filter(|pid| reads[*pid].ends_with(&[tick]));
                assert_eq!(read.count(), 1, "tick {tick}: {reads:?}");
            }
        }
        // Read on the first two ticks (no rate yet at the first), then
        // every fourth tick from the tick their turn first came.
        for (pid, ticks) in &reads {
            assert_eq!(ticks[..2], [1, 2], "pid {pid}");
            assert!((3..=6).contains(&ticks[2]), "pid {pid}: {ticks:?}");
            assert!(
                ticks[2..].windows(2).all(|w| w[1] - w[0] == 4),
                "pid {pid}: {ticks:?}"
            );
        }
    }

    #[test]
    fn a_process_that_woke_unread_shows_its_average_since_its_last_read() {
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::with_root(root.path());
        let t0 = Instant::now();
        let per_second = clock_ticks_per_second();
        let mut sample = |tick: u64, cpu: u64| {
            write(
                root.path(),
                &[(20, stat(20, "sleeper", 'S', cpu, 500, tick), "sleeper\0")],
            );
            let samples = table.sample(t0 + Duration::from_secs(tick)).unwrap();
            assert_eq!(samples.len(), 1);
            samples.into_iter().next().unwrap()
        };
        sample(1, 5);
        sample(2, 5);
        // Its first turn as an idle process.
        let turn = (3..=6)
            .find(|tick| read_at(&sample(*tick, 5)) == *tick)
            .expect("read within 4 ticks");
        // It burns a second of CPU between the next two ticks, unread.
        for (tick, cpu) in [
            (turn + 1, 5),
            (turn + 2, 5 + per_second),
            (turn + 3, 5 + per_second),
        ] {
            let p = sample(tick, cpu);
            assert_eq!((read_at(&p), p.cores), (turn, 0.0), "tick {tick}");
        }
        // Read 4 s after its last read: one second over four, not over the
        // last tick's one.
        let p = sample(turn + 4, 5 + per_second);
        assert_eq!(read_at(&p), turn + 4);
        assert!((p.cores - 0.25).abs() < 1e-9, "{p:?}");
        // It moved, so it is read the next tick, found idle again, and
        // skipped after.
        let p = sample(turn + 5, 5 + per_second);
        assert_eq!((read_at(&p), p.cores), (turn + 5, 0.0));
        assert_eq!(read_at(&sample(turn + 6, 5 + per_second)), turn + 5);
    }

    #[test]
    fn new_vanished_and_reused_pids_among_skipped_ones() {
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::with_root(root.path());
        let t0 = Instant::now();
        let mut sample = |tick: u64, processes: &[(u32, String, &str)]| {
            write(root.path(), processes);
            by_pid(table.sample(t0 + Duration::from_secs(tick)).unwrap())
        };
        // 20 and 24 share a turn (pids 4 apart): find it.
        let mut turn = 0;
        for tick in 1..=6 {
            let samples = sample(tick, &[sleeper(20, tick), sleeper(24, tick)]);
            if tick > 2 && read_at(&samples[&20]) == tick {
                assert_eq!(read_at(&samples[&24]), tick);
                turn = tick;
                break;
            }
        }
        assert!(turn > 2, "read within 4 ticks");

        // The next tick skips both: 24 has exited, a new process has
        // started, and 20 is another process (a new start time, name and
        // command line). The listing alone shows the first two.
        let reused = |tick| (20, stat(20, "bash", 'S', 1, 900, tick), "bash\0");
        let new = |tick| (40, stat(40, "new", 'S', 1, 950, tick), "new\0-x\0");
        let samples = sample(turn + 1, &[reused(turn + 1), new(turn + 1)]);
        assert_eq!(samples.keys().copied().collect::<Vec<_>>(), [20, 40]);
        assert_eq!(samples[&40].command.as_deref(), Some("new -x"));
        assert_eq!(read_at(&samples[&40]), turn + 1);
        // Until its next read, 20 is shown as the process last read.
        assert_eq!(samples[&20].name, "sleeper");
        assert_eq!(read_at(&samples[&20]), turn);
        for tick in turn + 2..turn + 4 {
            let samples = sample(tick, &[reused(tick), new(tick)]);
            let p = &samples[&20];
            assert_eq!(
                (p.name.as_str(), read_at(p)),
                ("sleeper", turn),
                "tick {tick}"
            );
            // Read once, so read again to learn whether it is idle.
            if tick == turn + 2 {
                assert_eq!(read_at(&samples[&40]), tick);
            }
        }
        let samples = sample(turn + 4, &[reused(turn + 4), new(turn + 4)]);
        let p = &samples[&20];
        assert_eq!(
            (p.name.as_str(), p.command.as_deref(), p.cores, read_at(p)),
            ("bash", Some("bash"), 0.0, turn + 4)
        );
    }

    #[test]
    fn a_long_interval_reads_idle_processes_every_tick() {
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::with_root(root.path());
        let t0 = Instant::now();
        for tick in 1..=6 {
            write(root.path(), &[sleeper(20, tick)]);
            let samples = table.sample(t0 + Duration::from_secs(10 * tick)).unwrap();
            assert_eq!(read_at(&samples[0]), tick);
        }
    }
}
