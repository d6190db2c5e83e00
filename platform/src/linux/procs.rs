//! The process table as the CPU watcher samples it every second: one
//! `/proc/<pid>/stat` read per process, which holds everything a tick needs
//! (name, state, parent, CPU time, start time, resident pages). Command
//! lines (`/proc/<pid>/cmdline`) are read separately, once per process, by
//! a caller that caches them; `status` is never read.
//!
//! ```text
//! 1234 (python3) S 1 1234 1234 0 -1 4194560 3520 0 0 0 150 37 0 0 20 0 4 0 81234 ...
//! ```
//!
//! Fields after the name's closing parenthesis, from proc(5): state (3),
//! ppid (4), flags (9), utime (14), stime (15), starttime (22), rss (24).

use std::io::Read;
use std::path::{Path, PathBuf};

/// The Linux task flag of kernel threads, which have no command line.
const PF_KTHREAD: u64 = 0x0020_0000;

/// A command line is for matching job patterns and for evidence: this much
/// holds the interpreter, script and module, and bounds what one process
/// can make meshd read.
pub const MAX_CMDLINE_BYTES: usize = 4096;

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
    // Field 3 onwards.
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
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

/// Reads the process table under a procfs root (`/proc`; a directory of
/// the same shape in tests), reusing one buffer.
#[derive(Debug)]
pub struct ProcReader {
    root: PathBuf,
    buf: Vec<u8>,
}

impl ProcReader {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            buf: Vec::with_capacity(512),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every process whose `stat` could be read and parsed. A process
    /// that exits between the listing and the read is simply not there;
    /// only a root that cannot be listed is an error.
    pub fn processes(&mut self) -> std::io::Result<Vec<ProcStat>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.root)? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let path = self.root.join(pid).join("stat");
            if read_capped(&path, &mut self.buf, MAX_CMDLINE_BYTES).is_ok()
                && let Ok(stat) = parse_stat(&self.buf)
            {
                found.push(stat);
            }
        }
        Ok(found)
    }

    /// `pid`'s command line, at most [`MAX_CMDLINE_BYTES`] of it; `None`
    /// when it cannot be read (gone, or not ours to read).
    pub fn command_line(&mut self, pid: u32) -> Option<Vec<String>> {
        let path = self.root.join(pid.to_string()).join("cmdline");
        read_capped(&path, &mut self.buf, MAX_CMDLINE_BYTES).ok()?;
        Some(parse_cmdline(&self.buf))
    }
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
        let found = reader.processes().unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].pid, 1234);
        assert_eq!(
            reader.command_line(1234),
            Some(vec!["python3".to_owned(), "train.py".to_owned()])
        );
        assert_eq!(reader.command_line(99), None);
        assert!(
            ProcReader::new(root.path().join("none"))
                .processes()
                .is_err()
        );
    }

    #[test]
    fn this_hosts_proc_has_this_process() {
        let mut reader = ProcReader::new("/proc");
        let Ok(found) = reader.processes() else {
            return;
        };
        let me = std::process::id();
        let mine = found.iter().find(|p| p.pid == me).expect("this process");
        assert!(mine.rss_pages > 0);
        assert!(!mine.kernel_thread);
        assert!(reader.command_line(me).is_some_and(|c| !c.is_empty()));
    }
}
