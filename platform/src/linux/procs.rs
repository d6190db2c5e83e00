//! The process table as the CPU watcher samples it every second: one
//! `/proc/<pid>/stat` read per process it asks for, which holds everything a
//! tick needs (name, state, parent, CPU time, start time, resident pages).
//! Command lines (`/proc/<pid>/cmdline`) are read separately, once per
//! process, by a caller that caches them; `status` is never read.
//!
//! [`ProcReader::processes`] lists `/proc` every call, so a process that
//! exits or starts is seen at once, and reads the `stat` of only the pids
//! its caller wants: the others (processes the caller knows to be idle) come
//! back as [`Listed::Skipped`], unread, since generating a `stat` line is
//! the kernel's work and most of a tick's cost.
//!
//! [`ProcReader`] keeps each process's `stat` file open from one read to
//! the next, so a steady tick costs one listing of `/proc` (`getdents64`
//! into a reused buffer) and one `pread` at offset 0 per process read,
//! instead of an open, two reads and a close, and allocates nothing per
//! process but the parsed name. A procfs fd stays bound to its process:
//! once that process is gone, reads through it fail (`ESRCH`) even if its
//! pid is reused, so a kept fd never reads another process; a pid whose fd
//! fails, or whose start time changed, is opened afresh, and the fd of a
//! pid the listing no longer has is closed (a pid skipped but listed keeps
//! its fd). At most [`MAX_OPEN_STATS`] fds are kept, fewer when the caller
//! says so ([`ProcReader::keep_at_most`]: kept fds are a cache, and give
//! way when the process runs short of descriptors); processes beyond that
//! are opened, read and closed at each read, with the same result.
//!
//! ```text
//! 1234 (python3) S 1 1234 1234 0 -1 4194560 3520 0 0 0 150 37 0 0 20 0 4 0 81234 ...
//! ```
//!
//! Fields after the name's closing parenthesis, from proc(5): state (3),
//! ppid (4), flags (9), utime (14), stime (15), starttime (22), rss (24).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};

/// The Linux task flag of kernel threads, which have no command line.
const PF_KTHREAD: u64 = 0x0020_0000;

/// A command line is for matching job patterns and for evidence: this much
/// holds the interpreter, script and module, and bounds what one process
/// can make meshd read.
pub const MAX_CMDLINE_BYTES: usize = 4096;

/// At most this many `stat` files are kept open between ticks. meshd runs
/// under launchd or systemd, whose default soft `RLIMIT_NOFILE` can be
/// 1024, and needs fds of its own for sockets (peers, probes, the API) and
/// files; a host with more processes reads the rest the old way, opening
/// and closing each one's `stat` every tick.
pub const MAX_OPEN_STATS: usize = 512;

/// The most of a `stat` line that is read, as before the fds were kept:
/// lines are under 1 KiB (52 numbers and a name of at most 64 bytes), so
/// one read gets a whole line, and a line that does not end within the
/// buffer is read on to this cap, then parsed, never cut short at a read.
const MAX_STAT_BYTES: usize = MAX_CMDLINE_BYTES;

/// Room for a listing of `/proc` in few `getdents64` calls (an entry takes
/// 24 to 32 bytes for a name like a pid's).
#[cfg(target_os = "linux")]
const LISTING_BYTES: usize = 16 * 1024;

/// One process as its `stat` line shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    /// The kernel's name (`comm`), at most 15 bytes: longer names are cut.
    pub comm: String,
    /// `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    pub ppid: u32,
    pub kernel_thread: bool,
    /// User plus system time, in clock ticks.
    pub cpu_ticks: u64,
    /// When the process started, in clock ticks after boot: with the pid,
    /// it names one process for good (a pid is reused, the pair is not).
    pub start_ticks: u64,
    pub rss_pages: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatError {
    #[error("no process name in parentheses")]
    NoName,
    #[error("field {0} missing")]
    Missing(usize),
    #[error("field {field} is not a number: {value:?}")]
    NotANumber { field: usize, value: String },
}

/// Parses one `/proc/<pid>/stat` line. The name may hold spaces and
/// parentheses itself, so it runs to the last `)`.
pub fn parse_stat(line: &[u8]) -> Result<ProcStat, StatError> {
    let text = String::from_utf8_lossy(line);
    let open = text.find('(').ok_or(StatError::NoName)?;
    let close = text
        .rfind(')')
        .filter(|c| *c > open)
        .ok_or(StatError::NoName)?;
    let pid = number(text[..open].trim(), 1)?;
    let comm = text[open + 1..close].to_owned();
    // Fields 3 to 24, the last one read: on the stack, not in a `Vec`.
    let mut rest = [""; 22];
    let mut count = 0;
    for (slot, value) in rest
        .iter_mut()
        .zip(text[close + 1..].split_ascii_whitespace())
    {
        *slot = value;
        count += 1;
    }
    let rest = &rest[..count];
    let field = |n: usize| rest.get(n - 3).copied().ok_or(StatError::Missing(n));
    let state = field(3)?.chars().next().ok_or(StatError::Missing(3))?;
    let flags = number(field(9)?, 9)?;
    let utime = number(field(14)?, 14)?;
    let stime = number(field(15)?, 15)?;
    Ok(ProcStat {
        pid: u32::try_from(pid).map_err(|_| StatError::NotANumber {
            field: 1,
            value: pid.to_string(),
        })?,
        comm,
        state,
        ppid: u32::try_from(number(field(4)?, 4)?).unwrap_or(0),
        kernel_thread: flags & PF_KTHREAD != 0,
        cpu_ticks: utime.saturating_add(stime),
        start_ticks: number(field(22)?, 22)?,
        rss_pages: number(field(24)?, 24)?,
    })
}

fn number(value: &str, field: usize) -> Result<u64, StatError> {
    value.parse().map_err(|_| StatError::NotANumber {
        field,
        value: value.chars().take(32).collect(),
    })
}

/// The unit of `stat`'s CPU times: clock ticks (USER_HZ) per second.
pub fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// The unit of `stat`'s resident set size: bytes per page.
pub fn page_bytes() -> u64 {
    u64::try_from(rustix::param::page_size()).unwrap_or(u64::MAX)
}

/// The arguments of a `cmdline` file (NUL-separated, maybe NUL-ended);
/// empty for a kernel thread or a zombie.
pub fn parse_cmdline(raw: &[u8]) -> Vec<String> {
    raw.split(|b| *b == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

/// A pid of a listing of `/proc`, read or not as the caller wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    Read(ProcStat),
    /// Listed, so alive (or a zombie), but not read.
    Skipped(u32),
}

/// Reads the process table under a procfs root (`/proc`; a directory of
/// the same shape in tests), keeping each process's `stat` open between
/// calls (see the module docs) and reusing its buffers.
pub struct ProcReader {
    root: PathBuf,
    /// For command lines.
    buf: Vec<u8>,
    /// For `stat` lines: [`MAX_STAT_BYTES`].
    stat_buf: Box<[u8]>,
    /// For the listing's `getdents64`: its spare capacity, never its
    /// length.
    #[cfg(target_os = "linux")]
    listing: Vec<u8>,
    /// The pids of the last listing.
    pids: Vec<u32>,
    /// `<pid>/stat`, relative to the root, built where a `stat` is opened.
    path: String,
    /// The kept `stat` files, by pid; at most `keep`.
    open: HashMap<u32, OpenStat>,
    /// How many `stat` files may be kept: [`MAX_OPEN_STATS`] or fewer.
    keep: usize,
    /// Counts calls to [`ProcReader::processes`].
    tick: u64,
}

/// A `stat` file kept open, and which process it was opened for.
#[derive(Debug)]
struct OpenStat {
    file: File,
    /// The process's start time: with the pid, the process itself.
    start_ticks: u64,
    /// The last tick whose listing had the pid.
    listed: u64,
}

impl std::fmt::Debug for ProcReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcReader")
            .field("root", &self.root)
            .field("open_stats", &self.open.len())
            .field("tick", &self.tick)
            .finish_non_exhaustive()
    }
}

impl ProcReader {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            buf: Vec::with_capacity(512),
            stat_buf: vec![0; MAX_STAT_BYTES].into_boxed_slice(),
            #[cfg(target_os = "linux")]
            listing: Vec::with_capacity(LISTING_BYTES),
            pids: Vec::new(),
            path: String::new(),
            open: HashMap::new(),
            keep: MAX_OPEN_STATS,
            tick: 0,
        }
    }

    /// Keeps at most `n` `stat` files open from now on (never more than
    /// [`MAX_OPEN_STATS`]), closing the excess at once.
    pub fn keep_at_most(&mut self, n: usize) {
        self.keep = n.min(MAX_OPEN_STATS);
        let excess = self.open.len().saturating_sub(self.keep);
        let closed: Vec<u32> = self.open.keys().take(excess).copied().collect();
        for pid in closed {
            self.open.remove(&pid);
        }
    }

    /// How many `stat` files are kept open now.
    pub fn open_stats(&self) -> usize {
        self.open.len()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every listed process: its `stat`, read and parsed, where `wants`
    /// says so for its pid, else [`Listed::Skipped`]. A process that exits
    /// between the listing and the read is simply not there; only a root
    /// that cannot be listed is an error.
    pub fn processes(
        &mut self,
        mut wants: impl FnMut(u32) -> bool,
    ) -> std::io::Result<Vec<Listed>> {
        let dir = rustix::fs::open(
            &self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        self.tick = self.tick.wrapping_add(1);
        self.list(&dir);
        // A pid the listing no longer has has exited: its fd goes, and
        // makes room for a new process's.
        let tick = self.tick;
        self.open.retain(|_, open| open.listed == tick);
        // Taken out and put back, to read with `self` free: no allocation.
        let pids = std::mem::take(&mut self.pids);
        let mut found = Vec::with_capacity(pids.len());
        for &pid in &pids {
            if !wants(pid) {
                found.push(Listed::Skipped(pid));
            } else if let Some(stat) = self.stat(&dir, pid) {
                found.push(Listed::Read(stat));
            }
        }
        self.pids = pids;
        Ok(found)
    }

    /// The pids under the root, into `pids`, marking the kept fds of those
    /// still there. On Linux, `getdents64` into a reused buffer: no
    /// allocation per entry, where `read_dir` makes two.
    #[cfg(target_os = "linux")]
    fn list(&mut self, dir: &OwnedFd) {
        self.pids.clear();
        let mut entries = rustix::fs::RawDir::new(dir, self.listing.spare_capacity_mut());
        while let Some(entry) = entries.next() {
            // A listing that fails half way ends there, as `read_dir`'s.
            let Ok(entry) = entry else { break };
            if let Some(pid) = pid_of(entry.file_name().to_bytes()) {
                self.pids.push(pid);
            }
        }
        self.mark_listed();
    }

    /// Elsewhere there is no procfs, only a directory of the same shape in
    /// tests: `read_dir` lists it.
    #[cfg(not(target_os = "linux"))]
    fn list(&mut self, _dir: &OwnedFd) {
        self.pids.clear();
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries {
            let Ok(entry) = entry else { break };
            if let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| pid_of(n.as_bytes()))
            {
                self.pids.push(pid);
            }
        }
        self.mark_listed();
    }

    fn mark_listed(&mut self) {
        for pid in &self.pids {
            if let Some(open) = self.open.get_mut(pid) {
                open.listed = self.tick;
            }
        }
    }

    /// `pid`'s `stat`, through its kept fd where that still reads as the
    /// same process, else opened afresh (and kept, if there is room).
    fn stat(&mut self, dir: &OwnedFd, pid: u32) -> Option<ProcStat> {
        if let Some(stat) = self.read_kept(pid) {
            return Some(stat);
        }
        self.path.clear();
        // Cannot fail: a `String` takes any text.
        let _ = write!(self.path, "{pid}/stat");
        let file = rustix::fs::openat(
            dir,
            self.path.as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .ok()?;
        let file = File::from(file);
        let stat = read_stat(&file, &mut self.stat_buf)?;
        if self.open.len() < self.keep {
            self.open.insert(
                pid,
                OpenStat {
                    file,
                    start_ticks: stat.start_ticks,
                    listed: self.tick,
                },
            );
        }
        Some(stat)
    }

    /// `pid`'s `stat` through its kept fd; `None`, and the fd closed, where
    /// that no longer reads as the process it was opened for. On procfs
    /// that is a process gone (the read fails with `ESRCH`, or reads
    /// nothing); on a plain directory, a file rewritten for a new process
    /// (a new start time) or into something else.
    fn read_kept(&mut self, pid: u32) -> Option<ProcStat> {
        let open = self.open.get(&pid)?;
        match read_stat(&open.file, &mut self.stat_buf) {
            Some(stat) if stat.start_ticks == open.start_ticks => Some(stat),
            _ => {
                self.open.remove(&pid);
                None
            }
        }
    }

    /// `pid`'s command line, at most [`MAX_CMDLINE_BYTES`] of it; `None`
    /// when it cannot be read (gone, or not ours to read).
    pub fn command_line(&mut self, pid: u32) -> Option<Vec<String>> {
        let path = self.root.join(pid.to_string()).join("cmdline");
        read_capped(&path, &mut self.buf, MAX_CMDLINE_BYTES).ok()?;
        Some(parse_cmdline(&self.buf))
    }

    /// `pid`'s MLX variables (`MLX_*`, from the environment it was
    /// started with; the first [`MAX_ENVIRON_BYTES`] of it), and a reader of
    /// the files they name as the process sees them (through its root and
    /// working directory: a rank in a container reads its own files).
    /// `None` when the environment cannot be read (gone, or not ours).
    pub fn rank_environment(&mut self, pid: u32) -> Option<RankEnvironment> {
        let dir = self.root.join(pid.to_string());
        read_capped(&dir.join("environ"), &mut self.buf, MAX_ENVIRON_BYTES).ok()?;
        Some(RankEnvironment {
            variables: mlx_variables(&self.buf),
            dir,
        })
    }

    /// The network namespace `pid` runs in: the inode its `ns/net` link
    /// names (`net:[4026531840]`); `None` when unreadable.
    pub fn network_namespace(&self, pid: u32) -> Option<u64> {
        namespace_inode(&self.root.join(pid.to_string()).join("ns/net"))
    }

    /// The kept fds: each one's pid and start time, by pid.
    #[cfg(test)]
    fn kept(&self) -> Vec<(u32, u64)> {
        let mut kept: Vec<(u32, u64)> = self
            .open
            .iter()
            .map(|(pid, open)| (*pid, open.start_ticks))
            .collect();
        kept.sort_unstable();
        kept
    }
}

/// The most of a process's environment read for its MLX variables: a
/// shell's environment is a few KiB; one that is larger than this keeps
/// what lies past it unread.
pub const MAX_ENVIRON_BYTES: usize = 128 * 1024;

/// A process's MLX variables, and where its files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnvironment {
    /// `MLX_*` variables, by name.
    pub variables: Vec<(String, String)>,
    /// Its `/proc/<pid>`.
    dir: PathBuf,
}

impl RankEnvironment {
    pub fn variable(&self, name: &str) -> Option<String> {
        self.variables
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// The text of `path` as the process names it (relative to its working
    /// directory, or absolute within its root), at most `cap` bytes: more
    /// is an error, as is a file that is not UTF-8.
    pub fn read(&self, path: &str, cap: usize) -> Result<String, String> {
        let base = if path.starts_with('/') { "root" } else { "cwd" };
        let full = self.dir.join(base).join(path.trim_start_matches('/'));
        let mut buf = Vec::new();
        read_capped(&full, &mut buf, cap.saturating_add(1)).map_err(|e| e.to_string())?;
        if buf.len() > cap {
            return Err(format!("over {cap} bytes"));
        }
        String::from_utf8(buf).map_err(|_| "not UTF-8 text".to_owned())
    }
}

/// The `MLX_*` entries of a NUL-separated environment block; entries that
/// are not `NAME=value` UTF-8 are skipped.
fn mlx_variables(block: &[u8]) -> Vec<(String, String)> {
    block
        .split(|b| *b == 0)
        .filter(|entry| entry.starts_with(b"MLX_"))
        .filter_map(|entry| std::str::from_utf8(entry).ok()?.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// The inode a namespace link (`/proc/<pid>/ns/net`) names.
pub fn namespace_inode(link: &Path) -> Option<u64> {
    let target = std::fs::read_link(link).ok()?;
    let target = target.to_str()?;
    target.split_once(":[")?.1.strip_suffix(']')?.parse().ok()
}

/// The pid a procfs entry is named for: plain decimal, as procfs names
/// processes; anything else (`self`, `uptime`, a leading zero, a number
/// past `u32`) is no process.
fn pid_of(name: &[u8]) -> Option<u32> {
    if name.is_empty() || (name.len() > 1 && name[0] == b'0') {
        return None;
    }
    name.iter().try_fold(0_u32, |pid, digit| {
        if !digit.is_ascii_digit() {
            return None;
        }
        pid.checked_mul(10)?.checked_add(u32::from(digit - b'0'))
    })
}

/// Parses a `stat` file read from its start into `buf`: one `pread` on
/// procfs, which hands over the whole line at once, and more only where a
/// read stops short of the line's end, to `buf`'s length.
fn read_stat(file: &File, buf: &mut [u8]) -> Option<ProcStat> {
    let mut len = 0;
    while len < buf.len() {
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(read) => {
                len += read;
                if buf[len - 1] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    parse_stat(&buf[..len]).ok()
}

fn read_capped(path: &Path, buf: &mut Vec<u8>, cap: usize) -> std::io::Result<()> {
    buf.clear();
    let file = std::fs::File::open(path)?;
    file.take(u64::try_from(cap).unwrap_or(u64::MAX))
        .read_to_end(buf)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTHON: &str = "1234 (python3) S 1 1234 1234 0 -1 4194560 3520 0 0 0 150 37 0 0 20 0 4 0 81234 123456789 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";

    #[test]
    fn a_stat_line_gives_name_state_parent_times_and_memory() {
        let stat = parse_stat(PYTHON.as_bytes()).unwrap();
        assert_eq!(
            stat,
            ProcStat {
                pid: 1234,
                comm: "python3".into(),
                state: 'S',
                ppid: 1,
                kernel_thread: false,
                cpu_ticks: 187,
                start_ticks: 81234,
                rss_pages: 5000,
            }
        );
    }

    #[test]
    fn names_with_spaces_and_parentheses_and_kernel_threads_parse() {
        let odd = PYTHON.replace("(python3)", "(a) b (c))");
        assert_eq!(parse_stat(odd.as_bytes()).unwrap().comm, "a) b (c)");
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 3 0 0 20 0 1 0 2 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 0 0 0 0 0 0 0\n";
        let stat = parse_stat(kthread.as_bytes()).unwrap();
        assert!(stat.kernel_thread);
        assert_eq!((stat.ppid, stat.cpu_ticks), (0, 3));
    }

    #[test]
    fn broken_stat_lines_are_errors_not_panics() {
        assert_eq!(parse_stat(b""), Err(StatError::NoName));
        assert_eq!(parse_stat(b"12 python3 S 1"), Err(StatError::NoName));
        assert_eq!(parse_stat(b"12 (x) S 1 2"), Err(StatError::Missing(9)));
        assert!(matches!(
            parse_stat(PYTHON.replace(" 150 ", " x ").as_bytes()),
            Err(StatError::NotANumber { field: 14, .. })
        ));
        assert!(parse_stat(b")(").is_err());
        assert!(parse_stat(&[0xff, b'(', b')']).is_err());
    }

    #[test]
    fn mlx_variables_are_taken_from_an_environment_block() {
        let block = b"HOME=/root\0MLX_RANK=1\0MLX_JACCL_COORDINATOR=10.0.0.1:5000\0MLX_BAD\0\xff=x\0MLX_EMPTY=\0";
        assert_eq!(
            mlx_variables(block),
            [
                ("MLX_RANK".to_owned(), "1".to_owned()),
                (
                    "MLX_JACCL_COORDINATOR".to_owned(),
                    "10.0.0.1:5000".to_owned()
                ),
                ("MLX_EMPTY".to_owned(), String::new()),
            ]
        );
    }

    #[test]
    fn a_ranks_files_are_read_through_its_root_and_cwd_within_a_cap() {
        let dir = tempfile::tempdir().expect("tmp");
        let proc = dir.path().join("42");
        std::fs::create_dir_all(proc.join("root/tmp")).expect("mkdir");
        std::fs::create_dir_all(proc.join("cwd")).expect("mkdir");
        std::fs::write(proc.join("environ"), b"MLX_RANK=0\0PATH=/bin\0").expect("write");
        std::fs::write(proc.join("root/tmp/d.json"), "[[null]]").expect("write");
        std::fs::write(proc.join("cwd/hosts_0.json"), "[[null]]").expect("write");
        let mut reader = ProcReader::new(dir.path());
        let env = reader.rank_environment(42).expect("readable");
        assert_eq!(env.variable("MLX_RANK").as_deref(), Some("0"));
        assert_eq!(env.variable("PATH"), None);
        assert_eq!(env.read("/tmp/d.json", 64).as_deref(), Ok("[[null]]"));
        assert_eq!(env.read("hosts_0.json", 64).as_deref(), Ok("[[null]]"));
        assert_eq!(env.read("hosts_0.json", 4), Err("over 4 bytes".to_owned()));
        assert!(env.read("/tmp/none.json", 64).is_err());
        assert!(reader.rank_environment(43).is_none());
    }

    #[test]
    fn a_namespace_link_names_its_inode() {
        let dir = tempfile::tempdir().expect("tmp");
        let link = dir.path().join("net");
        std::os::unix::fs::symlink("net:[4026531840]", &link).expect("symlink");
        assert_eq!(namespace_inode(&link), Some(4_026_531_840));
        std::fs::remove_file(&link).expect("rm");
        std::os::unix::fs::symlink("pipe:[12]x", &link).expect("symlink");
        assert_eq!(namespace_inode(&link), None);
        assert_eq!(namespace_inode(&dir.path().join("none")), None);
    }

    #[test]
    fn command_lines_split_on_nul() {
        assert_eq!(
            parse_cmdline(b"python3\0-m\0mlx.launch\0"),
            vec!["python3", "-m", "mlx.launch"]
        );
        assert!(parse_cmdline(b"").is_empty());
    }

    #[test]
    fn a_proc_tree_is_read_skipping_what_is_not_a_process() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("1234");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("stat"), PYTHON).unwrap();
        std::fs::write(dir.join("cmdline"), b"python3\0train.py\0").unwrap();
        // A process that is gone (no stat), one with garbage, and procfs's
        // other entries.
        std::fs::create_dir(root.path().join("99")).unwrap();
        std::fs::create_dir(root.path().join("98")).unwrap();
        std::fs::write(root.path().join("98/stat"), "garbage").unwrap();
        std::fs::create_dir(root.path().join("self")).unwrap();
        std::fs::write(root.path().join("uptime"), "1 2").unwrap();
        let mut reader = ProcReader::new(root.path());
        let found = read_all(&mut reader).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].pid, 1234);
        assert_eq!(
            reader.command_line(1234),
            Some(vec!["python3".to_owned(), "train.py".to_owned()])
        );
        assert_eq!(reader.command_line(99), None);
        assert!(read_all(&mut ProcReader::new(root.path().join("none"))).is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_hosts_proc_has_this_process() {
        let mut reader = ProcReader::new("/proc");
        let found = read_all(&mut reader).expect("Linux lists /proc");
        let me = std::process::id();
        let mine = found.iter().find(|p| p.pid == me).expect("this process");
        assert!(mine.rss_pages > 0);
        assert!(!mine.kernel_thread);
        assert!(reader.command_line(me).is_some_and(|c| !c.is_empty()));
    }

    /// Every listed process, all of them wanted.
    fn read_all(reader: &mut ProcReader) -> std::io::Result<Vec<ProcStat>> {
        Ok(reader
            .processes(|_| true)?
            .into_iter()
            .map(|listed| match listed {
                Listed::Read(stat) => stat,
                Listed::Skipped(pid) => panic!("{pid} wanted but skipped"),
            })
            .collect())
    }

    /// A `stat` line as the fake procfs below holds it: CPU time is `ticks`
    /// plus 7 of system time.
    fn line(pid: u32, comm: &str, ticks: u64, start: u64, rss: u64) -> String {
        format!(
            "{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 {ticks} 7 0 0 20 0 1 0 {start} 1000 {rss} 0\n"
        )
    }

    /// Writes `pid`'s `stat` in place where it is there, as procfs shows a
    /// live process's changes through the same file. (On a plain
    /// directory a file deleted and written anew would leave a kept fd
    /// reading the deleted one; procfs has no such thing: there a process
    /// gone makes its fd fail, which only the real `/proc` can show.)
    fn put(root: &Path, pid: u32, content: &str) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stat"), content).unwrap();
    }

    fn by_pid(mut found: Vec<ProcStat>) -> Vec<ProcStat> {
        found.sort_by_key(|p| p.pid);
        found
    }

    /// What a reader with no fds kept reads: open, read, close.
    fn fresh(root: &Path) -> Vec<ProcStat> {
        by_pid(read_all(&mut ProcReader::new(root)).unwrap())
    }

    #[test]
    fn kept_fds_read_what_a_fresh_open_reads_tick_after_tick() {
        let root = tempfile::tempdir().unwrap();
        let mut reader = ProcReader::new(root.path());
        // Longer than the cap: read to the cap and parsed, as ever.
        let long = line(13, "long", 1, 503, 1).replace('\n', &" 0".repeat(3000));
        assert!(long.len() > MAX_STAT_BYTES);
        for tick in 0..6_u64 {
            // Lines grow and shrink from tick to tick.
            let ticks = if tick % 2 == 0 {
                123_456_789 * tick
            } else {
                tick
            };
            put(root.path(), 10, &line(10, "python3", ticks, 500, 25 + tick));
            put(root.path(), 11, &line(11, "a) b (c", tick, 501, 3));
            put(
                root.path(),
                12,
                line(12, "no newline", tick, 502, 1).trim_end(),
            );
            put(root.path(), 13, &long);
            let found = by_pid(read_all(&mut reader).unwrap());
            assert_eq!(found, fresh(root.path()), "tick {tick}");
            assert_eq!(
                found.iter().map(|p| p.cpu_ticks).collect::<Vec<_>>(),
                [ticks + 7, tick + 7, tick + 7, 8],
                "tick {tick}"
            );
            assert_eq!(found[1].comm, "a) b (c");
            assert_eq!(
                found[3],
                parse_stat(&long.as_bytes()[..MAX_STAT_BYTES]).unwrap()
            );
            assert_eq!(
                reader.kept(),
                [(10, 500), (11, 501), (12, 502), (13, 503)],
                "tick {tick}"
            );
            // The kept fd reads the line again, from its start.
            assert_eq!(reader.read_kept(10).as_ref(), Some(&found[0]));
        }
    }

    #[test]
    fn fewer_fds_are_kept_when_asked_and_every_process_is_still_read() {
        let root = tempfile::tempdir().unwrap();
        let mut reader = ProcReader::new(root.path());
        for pid in 10..14 {
            put(
                root.path(),
                pid,
                &line(pid, "python3", 1, 500 + u64::from(pid), 1),
            );
        }
        assert_eq!(read_all(&mut reader).unwrap().len(), 4);
        assert_eq!(reader.open_stats(), 4);
        reader.keep_at_most(1);
        assert_eq!(reader.open_stats(), 1, "the excess is closed at once");
        assert_eq!(read_all(&mut reader).unwrap().len(), 4, "all still read");
        assert_eq!(reader.open_stats(), 1);
        reader.keep_at_most(usize::MAX);
        assert_eq!(read_all(&mut reader).unwrap().len(), 4);
        assert_eq!(reader.open_stats(), 4);
    }

    #[test]
    fn a_process_gone_from_the_listing_loses_its_fd() {
        let root = tempfile::tempdir().unwrap();
        let mut reader = ProcReader::new(root.path());
        put(root.path(), 10, &line(10, "python3", 1, 500, 1));
        put(root.path(), 11, &line(11, "bash", 1, 501, 1));
        assert_eq!(read_all(&mut reader).unwrap().len(), 2);
        assert_eq!(reader.kept(), [(10, 500), (11, 501)]);
        // Here the deleted file's fd would still read it; it is the
        // listing without pid 11 that closes the fd. (On procfs the fd of
        // a process gone fails by itself: see
        // `this_hosts_proc_is_read_through_kept_fds`.)
        std::fs::remove_dir_all(root.path().join("11")).unwrap();
        let found = read_all(&mut reader).unwrap();
        assert_eq!(found.iter().map(|p| p.pid).collect::<Vec<_>>(), [10]);
        assert_eq!(reader.kept(), [(10, 500)]);
        // A pid whose stat is now garbage, or empty, is no process, and
        // keeps no fd.
        put(root.path(), 10, "garbage");
        assert_eq!(read_all(&mut reader).unwrap(), []);
        assert_eq!(reader.kept(), []);
        put(root.path(), 10, &line(10, "python3", 2, 500, 1));
        assert_eq!(read_all(&mut reader).unwrap().len(), 1);
        put(root.path(), 10, "");
        assert_eq!(read_all(&mut reader).unwrap(), []);
        assert_eq!(reader.kept(), []);
    }

    #[test]
    fn a_reused_pid_is_read_as_the_new_process() {
        let root = tempfile::tempdir().unwrap();
        let mut reader = ProcReader::new(root.path());
        put(root.path(), 10, &line(10, "python3", 100, 500, 1));
        assert_eq!(read_all(&mut reader).unwrap()[0].start_ticks, 500);
        // Another process with the pid, from one tick to the next. On
        // procfs the old fd would fail; here it reads the new line, whose
        // start time says it is not the process the fd was opened for.
        put(root.path(), 10, &line(10, "bash", 5, 900, 2));
        let found = read_all(&mut reader).unwrap();
        assert_eq!(found, fresh(root.path()));
        assert_eq!((found[0].start_ticks, found[0].cpu_ticks), (900, 12));
        assert_eq!(found[0].comm, "bash");
        assert_eq!(reader.kept(), [(10, 900)]);
        // Gone for a tick, then back as yet another process.
        std::fs::remove_dir_all(root.path().join("10")).unwrap();
        assert_eq!(read_all(&mut reader).unwrap(), []);
        assert_eq!(reader.kept(), []);
        put(root.path(), 10, &line(10, "sh", 1, 950, 3));
        let found = read_all(&mut reader).unwrap();
        assert_eq!((found[0].start_ticks, found[0].cpu_ticks), (950, 8));
        assert_eq!(reader.kept(), [(10, 950)]);
    }

    #[test]
    fn pids_not_wanted_are_listed_unread_and_keep_their_fds() {
        let root = tempfile::tempdir().unwrap();
        let mut reader = ProcReader::new(root.path());
        put(root.path(), 10, &line(10, "python3", 1, 500, 1));
        put(root.path(), 11, &line(11, "bash", 1, 501, 1));
        read_all(&mut reader).unwrap();
        let pid = |listed: &Listed| match listed {
            Listed::Read(stat) => stat.pid,
            Listed::Skipped(pid) => *pid,
        };
        let mut asked = Vec::new();
        let mut listed = reader
            .processes(|p| {
                asked.push(p);
                p != 10
            })
            .unwrap();
        listed.sort_by_key(pid);
        asked.sort_unstable();
        assert_eq!(asked, [10, 11], "each listed pid asked once");
        assert_eq!(
            listed,
            [
                Listed::Skipped(10),
                Listed::Read(parse_stat(line(11, "bash", 1, 501, 1).as_bytes()).unwrap())
            ]
        );
        // Listed, so still there: its fd is kept, and reads it when wanted.
        assert_eq!(reader.kept(), [(10, 500), (11, 501)]);
        put(root.path(), 10, &line(10, "python3", 9, 500, 2));
        assert_eq!(by_pid(read_all(&mut reader).unwrap()), fresh(root.path()));
        // Gone from the listing while skipped: gone, fd and all.
        std::fs::remove_dir_all(root.path().join("10")).unwrap();
        assert_eq!(reader.processes(|_| false).unwrap(), [Listed::Skipped(11)]);
        assert_eq!(reader.kept(), [(11, 501)]);
        // The pid reused while skipped: the next read is of the new process.
        put(root.path(), 11, &line(11, "sh", 3, 950, 1));
        assert_eq!(reader.processes(|_| false).unwrap(), [Listed::Skipped(11)]);
        assert_eq!(read_all(&mut reader).unwrap()[0].start_ticks, 950);
        assert_eq!(reader.kept(), [(11, 950)]);
    }

    #[test]
    fn processes_beyond_the_kept_fds_are_all_read() {
        let root = tempfile::tempdir().unwrap();
        let mut reader = ProcReader::new(root.path());
        let count = u32::try_from(MAX_OPEN_STATS).unwrap() + 20;
        for pid in 1..=count {
            put(root.path(), pid, &line(pid, "worker", 0, u64::from(pid), 1));
        }
        let found = by_pid(read_all(&mut reader).unwrap());
        assert_eq!(found.len(), MAX_OPEN_STATS + 20);
        assert_eq!(reader.kept().len(), MAX_OPEN_STATS);
        // Every one changes: kept fd or not, each reads as a fresh open.
        for pid in 1..=count {
            put(root.path(), pid, &line(pid, "worker", 1, u64::from(pid), 2));
        }
        let found = by_pid(read_all(&mut reader).unwrap());
        assert_eq!(found, fresh(root.path()));
        assert!(found.iter().all(|p| p.cpu_ticks == 8 && p.rss_pages == 2));
        assert_eq!(reader.kept().len(), MAX_OPEN_STATS);
        // 30 processes with kept fds exit: the rest now all fit.
        for (pid, _) in reader.kept().into_iter().take(30) {
            std::fs::remove_dir_all(root.path().join(pid.to_string())).unwrap();
        }
        let found = by_pid(read_all(&mut reader).unwrap());
        assert_eq!(found.len(), MAX_OPEN_STATS - 10);
        assert_eq!(found, fresh(root.path()));
        assert_eq!(reader.kept().len(), MAX_OPEN_STATS - 10);
    }

    #[test]
    fn only_plain_decimal_names_are_pids() {
        assert_eq!(pid_of(b"1234"), Some(1234));
        assert_eq!(pid_of(b"0"), Some(0));
        assert_eq!(pid_of(b"4294967295"), Some(u32::MAX));
        for name in [
            &b""[..],
            b"self",
            b"12a",
            b"0123",
            b"4294967296",
            b"-1",
            b"+1",
        ] {
            assert_eq!(pid_of(name), None, "{name:?}");
        }
    }

    /// What only procfs shows: an fd kept for a process reads it afresh at
    /// offset 0 tick after tick, and fails once that process is gone.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_hosts_proc_is_read_through_kept_fds() {
        let mut reader = ProcReader::new("/proc");
        let first = read_all(&mut reader).expect("Linux lists /proc");
        let me = std::process::id();
        let mine = |found: &[ProcStat]| {
            found
                .iter()
                .find(|p| p.pid == me)
                .cloned()
                .expect("this process")
        };
        let first = mine(&first);
        let second = mine(&read_all(&mut reader).unwrap());
        assert_eq!(second.start_ticks, first.start_ticks);
        assert!(second.cpu_ticks >= first.cpu_ticks);
        let is_kept = |reader: &ProcReader, pid: u32| reader.kept().iter().any(|(p, _)| *p == pid);
        // (A host with more than MAX_OPEN_STATS processes may not keep ours.)
        if is_kept(&reader, me) {
            let kept = reader.read_kept(me).expect("read through the kept fd");
            assert_eq!(kept.start_ticks, first.start_ticks);
            assert!(kept.cpu_ticks >= second.cpu_ticks);
        }

        // A child's fd, once the child has exited and been reaped, reads
        // nothing, though nothing has listed the root since: the fd goes.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("coreutils' sleep runs");
        let found = read_all(&mut reader).unwrap();
        assert!(found.iter().any(|p| p.pid == child.id()));
        let kept = is_kept(&reader, child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        if kept {
            assert_eq!(reader.read_kept(child.id()), None);
            assert!(!is_kept(&reader, child.id()));
        }
    }
}
