//! The process table the CPU watcher samples every tick, read as cheaply as
//! the OS allows: each tick reads every process's CPU time, parent and
//! resident memory (Linux: its `/proc/<pid>/stat` alone, through an fd kept
//! open from tick to tick by
//! [`ProcReader`](meshd_platform::linux::procs::ProcReader), so that a
//! tick is one listing of `/proc` and one `pread` per process, not an open,
//! reads and a close),
//! and names and command lines are resolved once per process and cached by
//! pid, start time and kernel name (an `exec` changes the name, so it is
//! resolved again). The cache is updated in place, not rebuilt: a steady
//! host costs one small read per process per tick, no command line at all,
//! and no allocation per process but the name and command line each
//! sample owns.
//!
//! Every process's command line is resolved once, not only the busiest
//! ones': the job watcher finds job ranks by their command line
//! (`python3 -m mlx.launch`), idle and orphaned ones included.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::Path;
use std::time::Instant;

use meshd_model::cpu::ProcessSample;

/// Command lines are for matching job patterns and for evidence; a few
/// hundred characters hold the interpreter, script and module.
const MAX_COMMAND_CHARS: usize = 512;

/// Linux keeps only this many bytes of a process name (TASK_COMM_LEN - 1);
/// `UniversalControl` is 16.
const TRUNCATED_NAME_LEN: usize = 15;

/// What a process is called, resolved once.
#[derive(Debug)]
struct Identity {
    name: String,
    command: Option<String>,
}

/// A process seen at a sample. With its pid, its start time names it for
/// good (a pid is reused, the pair is not); its kernel name changes on
/// `exec`, and then it is resolved again.
#[derive(Debug)]
struct Seen {
    start: u64,
    kernel_name: String,
    identity: Identity,
    /// Its CPU time at that sample.
    cpu: u64,
    /// Which sample last saw it.
    sample: u64,
}

impl Seen {
    fn is(&self, start: u64, kernel_name: &str) -> bool {
        self.start == start && self.kernel_name == kernel_name
    }
}

/// The processes seen last sample, by pid, updated in place each sample.
#[derive(Debug, Default)]
struct Known {
    entries: HashMap<u32, Seen>,
    sample: u64,
}

impl Known {
    /// Starts a sample: the processes it does not [`Known::observe`] are
    /// forgotten at [`Known::end`].
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

    /// The identity of the process, resolved with `args` (its command line,
    /// read only for a process not seen before), and the CPU time it had at
    /// the previous sample; `cpu` is its CPU time now.
    fn observe(
        &mut self,
        pid: u32,
        start: u64,
        kernel_name: &str,
        cpu: u64,
        args: impl FnOnce() -> Option<Vec<String>>,
    ) -> (&Identity, Option<u64>) {
        let sample = self.sample;
        match self.entries.entry(pid) {
            Entry::Occupied(entry) if entry.get().is(start, kernel_name) => {
                let seen = entry.into_mut();
                let before = std::mem::replace(&mut seen.cpu, cpu);
                seen.sample = sample;
                (&seen.identity, Some(before))
            }
            entry => {
                let args = args().unwrap_or_default();
                let seen = Seen {
                    start,
                    kernel_name: kernel_name.to_owned(),
                    identity: Identity {
                        name: full_name(kernel_name, args.first().map(String::as_str)),
                        command: command_line(&args),
                    },
                    cpu,
                    sample,
                };
                // New, a pid reused, or a process that exec'd: resolved
                // afresh.
                (&entry.insert_entry(seen).into_mut().identity, None)
            }
        }
    }

    /// Ends a sample: forgets the processes it did not see (gone, or
    /// zombies).
    fn end(&mut self) {
        let sample = self.sample;
        self.entries.retain(|_, seen| seen.sample == sample);
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
    use meshd_platform::linux::procs::{ProcReader, clock_ticks_per_second, page_bytes};

    use super::*;

    /// `/proc`, one `stat` read per process per tick, through the fds the
    /// reader keeps.
    #[derive(Debug)]
    pub struct ProcessTable {
        reader: ProcReader,
        ticks_per_second: f64,
        page_bytes: u64,
        known: Known,
        last: Option<Instant>,
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
                ticks_per_second: f64::from(
                    u32::try_from(clock_ticks_per_second()).unwrap_or(u32::MAX),
                ),
                page_bytes: page_bytes(),
                known: Known::default(),
                last: None,
            }
        }

        /// Every live process (zombies are gone, whatever their parent
        /// says); CPU is a rate since the previous sample, 0 for a process
        /// first seen now.
        pub fn sample(&mut self, now: Instant) -> std::io::Result<Vec<ProcessSample>> {
            let stats = self.reader.processes()?;
            let elapsed = self.last.map_or(0.0, |last| {
                now.saturating_duration_since(last).as_secs_f64()
            });
            self.last = Some(now);
            self.known.begin();
            let mut samples = Vec::with_capacity(stats.len());
            for stat in &stats {
                if matches!(stat.state, 'Z' | 'X') {
                    continue;
                }
                let reader = &mut self.reader;
                let (identity, before) = self.known.observe(
                    stat.pid,
                    stat.start_ticks,
                    &stat.comm,
                    stat.cpu_ticks,
                    || {
                        // A kernel thread has no command line to read.
                        (!stat.kernel_thread).then(|| reader.command_line(stat.pid))?
                    },
                );
                samples.push(ProcessSample {
                    name: identity.name.clone(),
                    pid: stat.pid,
                    cores: before.map_or(0.0, |before| {
                        cores(before, stat.cpu_ticks, self.ticks_per_second, elapsed)
                    }),
                    command: identity.command.clone(),
                    parent: Some(stat.ppid),
                    memory_bytes: Some(stat.rss_pages.saturating_mul(self.page_bytes)),
                });
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
        last: Option<Instant>,
    }

    impl ProcessTable {
        pub fn new() -> std::io::Result<Self> {
            Ok(Self {
                system: System::new_with_specifics(RefreshKind::nothing())
                    .map_err(std::io::Error::other)?,
                known: Known::default(),
                last: None,
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
            let elapsed = self.last.map_or(0.0, |last| {
                now.saturating_duration_since(last).as_secs_f64()
            });
            self.last = Some(now);
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
                self.system.refresh_processes_specifics(
                    ProcessesToUpdate::Some(&new),
                    false,
                    ProcessRefreshKind::nothing().with_cmd(UpdateKind::Always),
                );
            }
            self.known.begin();
            let mut samples = Vec::new();
            for (pid, process) in self.system.processes() {
                // A zombie has exited: it holds no memory and runs nothing.
                if process.status() == ProcessStatus::Zombie {
                    continue;
                }
                // sysinfo counts CPU time in milliseconds.
                let cpu = process.accumulated_cpu_time();
                let (identity, before) = self.known.observe(
                    pid.as_u32(),
                    process.start_time(),
                    &process.name().to_string_lossy(),
                    cpu,
                    || {
                        Some(
                            process
                                .cmd()
                                .iter()
                                .map(|a| a.to_string_lossy().into_owned())
                                .collect(),
                        )
                    },
                );
                samples.push(ProcessSample {
                    name: identity.name.clone(),
                    pid: pid.as_u32(),
                    cores: before.map_or(0.0, |before| cores(before, cpu, 1000.0, elapsed)),
                    command: identity.command.clone(),
                    parent: process.parent().map(|p| p.as_u32()),
                    memory_bytes: Some(process.memory()),
                });
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

    #[test]
    fn known_processes_are_updated_in_place_and_forgotten_once_unseen() {
        let mut known = Known::default();
        known.begin();
        let (identity, before) = known.observe(10, 500, "python3", 100, || {
            Some(vec!["python3".to_owned(), "train.py".to_owned()])
        });
        assert_eq!(identity.command.as_deref(), Some("python3 train.py"));
        assert_eq!(before, None);
        known.observe(11, 501, "bash", 5, || None);
        known.end();

        // The same process: its CPU time then, and no command line asked
        // for. The one not seen is forgotten.
        known.begin();
        let (identity, before) =
            known.observe(10, 500, "python3", 150, || panic!("resolved again"));
        assert_eq!((identity.name.as_str(), before), ("python3", Some(100)));
        known.end();
        assert_eq!(known.entries.len(), 1);

        // An exec (a new kernel name), then the pid reused (a new start
        // time): each resolved afresh, with no CPU time before.
        known.begin();
        let (identity, before) =
            known.observe(10, 500, "torchrun", 160, || Some(vec!["torchrun".into()]));
        assert_eq!((identity.name.as_str(), before), ("torchrun", None));
        known.end();
        known.begin();
        let (identity, before) = known.observe(10, 900, "torchrun", 1, || None);
        assert_eq!((identity.command.as_deref(), before), (None, None));
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
    use std::time::Duration;

    use meshd_platform::linux::procs::{clock_ticks_per_second, page_bytes};

    use super::ProcessTable;

    fn stat(pid: u32, comm: &str, state: char, ticks: u64, start: u64) -> String {
        format!(
            "{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 0 0 0 0 {ticks} 0 0 0 20 0 1 0 {start} 1000 25 0\n"
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
                    stat(10, "python3", 'R', 1_000, 500),
                    "python3\0-m\0mlx.launch\0",
                ),
                (
                    11,
                    stat(11, "UniversalContro", 'S', 0, 501),
                    "/System/UniversalControl\0",
                ),
                (12, stat(12, "defunct", 'Z', 0, 502), ""),
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
        let ticks = clock_ticks_per_second();
        write(
            root.path(),
            &[
                (
                    10,
                    stat(10, "python3", 'R', 1_000 + ticks, 500),
                    "changed\0",
                ),
                (11, stat(11, "UniversalContro", 'S', 0, 501), "changed\0"),
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
                (10, stat(10, "python3", 'R', 5, 900), "python3\0other.py\0"),
                (11, stat(11, "bash", 'S', 3, 501), "bash\0"),
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
}
