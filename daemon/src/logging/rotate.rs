//! A log file that cannot fill the disk: past [`MAX_FILE_BYTES`] it is
//! renamed to `<name>.1` (older ones shift to `.2` … `.KEEP`, the oldest
//! dropped) and a new one is started, so the log takes at most
//! `(KEEP + 1) × MAX_FILE_BYTES`.
//!
//! Why meshd rotates its own file instead of leaving it to newsyslog on
//! macOS: launchd opens `StandardOutPath` once, when the job starts, and
//! holds that descriptor. newsyslog renames the file and can only signal
//! a process to reopen it; launchd never reopens, so meshd would go on
//! writing into the renamed file (or, once newsyslog compresses it, into
//! an unlinked one whose space is freed only by a restart). meshd opens
//! the file itself, so it can start a new one. On Linux meshd logs to
//! stderr and journald caps the journal.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// One log file's size before it is rotated.
pub const MAX_FILE_BYTES: u64 = 10 << 20;
/// Rotated files kept beside the current one.
pub const KEEP: usize = 4;

#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    file: File,
    written: u64,
}

impl RotatingFile {
    /// Opens (appending) or creates `path`; the defaults of the module.
    pub fn open(path: &Path) -> io::Result<RotatingFile> {
        RotatingFile::with_limits(path, MAX_FILE_BYTES, KEEP)
    }

    pub fn with_limits(path: &Path, max_bytes: u64, keep: usize) -> io::Result<RotatingFile> {
        let file = open_log(path)?;
        let written = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_owned(),
            max_bytes,
            keep,
            file,
            written,
        })
    }

    fn numbered(&self, n: usize) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> io::Result<()> {
        for n in (1..self.keep).rev() {
            let from = self.numbered(n);
            if from.exists() {
                std::fs::rename(&from, self.numbered(n + 1))?;
            }
        }
        if self.keep > 0 {
            std::fs::rename(&self.path, self.numbered(1))?;
        } else {
            std::fs::remove_file(&self.path)?;
        }
        self.file = open_log(&self.path)?;
        self.written = 0;
        Ok(())
    }
}

/// Appends, creating the file 0644; a link planted in its place is not
/// followed.
fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let len = u64::try_from(buf.len()).unwrap_or(u64::MAX);
        if self.written > 0 && self.written.saturating_add(len) > self.max_bytes {
            // A failed rotation keeps writing to the current file rather
            // than losing lines; the next write tries again.
            let _ = self.rotate();
        }
        let n = self.file.write(buf)?;
        self.written = self
            .written
            .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(path: &Path) -> u64 {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }

    #[test]
    fn the_log_never_takes_more_than_its_files_allow() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("meshd.log");
        let mut log = RotatingFile::with_limits(&path, 1000, 2).expect("open");
        let line = [b'x'; 99];
        for _ in 0..10_000 {
            log.write_all(&line).expect("write");
            log.write_all(b"\n").expect("write");
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["meshd.log", "meshd.log.1", "meshd.log.2"]);
        let total: u64 = names.iter().map(|n| size(&dir.path().join(n))).sum();
        assert!(total <= 3 * 1000, "{total} bytes");
        assert!(
            size(&dir.path().join("meshd.log.1")) > 900,
            "rotated files are full"
        );
    }

    #[test]
    fn an_existing_log_is_appended_to_and_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("meshd.log");
        std::fs::write(&path, vec![b'o'; 950]).expect("write");
        let mut log = RotatingFile::with_limits(&path, 1000, 1).expect("open");
        log.write_all(&[b'n'; 100]).expect("write");
        assert_eq!(size(&dir.path().join("meshd.log.1")), 950);
        assert_eq!(size(&path), 100);
    }

    #[test]
    fn a_link_in_place_of_the_log_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep me").expect("write");
        let path = dir.path().join("meshd.log");
        std::os::unix::fs::symlink(&target, &path).expect("symlink");
        assert!(RotatingFile::open(&path).is_err());
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep me");
    }
}
