//! Reading files that someone else controls (a config, a credential, a
//! bundle from another machine) without being led astray: regular files
//! only, read through a bounded reader, and never blocking on a FIFO.
//!
//! - [`read_regular`] follows symbolic links (a config managed as a link
//!   into a release directory is normal) but judges the file it opened: a
//!   FIFO, a device (`/dev/zero`), a socket or a directory is refused by
//!   name, so a link to `/dev/zero` is refused rather than read forever.
//! - [`read_beneath`] and [`list_beneath`] read inside a directory tree
//!   (a bundle) and follow no symbolic link at all, at any depth: a bundle
//!   holds what was captured, and a link in it can only point at this
//!   machine's own files (`/etc/hostname`) or devices.
//!
//! Files are opened with `O_NONBLOCK` so that opening a FIFO returns at
//! once (it is then refused for what it is), and judged with `fstat` on
//! the opened descriptor, so nothing can be swapped in between the check
//! and the read.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Dir, FileType, Mode, OFlags};

/// A file that could not be read, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct FileError {
    pub path: PathBuf,
    pub problem: FileProblem,
}

/// Why a file could not be read, without its path (for messages that name
/// the path their own way).
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error("{0}")]
    Io(io::Error),
    #[error("is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("is a symbolic link, which is not followed here")]
    Symlink,
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    #[error("not a path inside the directory (no `..`, no absolute paths)")]
    Outside,
    #[error("not UTF-8 text")]
    NotText,
}

impl FileError {
    fn new(path: &Path, problem: FileProblem) -> FileError {
        FileError {
            path: path.to_owned(),
            problem,
        }
    }

    fn io(path: &Path, source: impl Into<io::Error>) -> FileError {
        FileError::new(path, FileProblem::Io(source.into()))
    }

    /// The error came from a file that is not there.
    pub fn is_not_found(&self) -> bool {
        matches!(&self.problem, FileProblem::Io(source) if source.kind() == io::ErrorKind::NotFound)
    }
}

/// What a file type is called in a refusal.
pub fn kind_name(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

/// The bytes of the regular file at `path` (symbolic links followed), at
/// most `max` of them.
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| FileError::io(path, e))?;
    read_opened(fd, path, max)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_text(path: &Path, max: u64) -> Result<String, FileError> {
    text(read_regular(path, max)?, path)
}

/// The bytes of the regular file at `relative` inside `root`, at most
/// `max`, following no symbolic link on the way (`root` itself, named by
/// the caller, may be one).
pub fn read_beneath(root: &Path, relative: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let path = root.join(relative);
    let (parent, name) = walk_to_parent(root, relative)?;
    let fd = rustix::fs::openat(
        &parent,
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| refusal(&parent, name, &path, e))?;
    read_opened(fd, &path, max)
}

/// The names in the directory `relative` inside `root`, sorted, following
/// no symbolic link on the way. At most `max_entries` are listed.
pub fn list_beneath(
    root: &Path,
    relative: &Path,
    max_entries: usize,
) -> Result<Vec<String>, FileError> {
    let path = root.join(relative);
    let dir = walk(root, relative)?;
    let entries = Dir::read_from(&dir).map_err(|e| FileError::io(&path, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FileError::io(&path, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        if names.len() == max_entries {
            return Err(FileError::io(
                &path,
                io::Error::other(format!("more than {max_entries} entries")),
            ));
        }
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// Opens every directory of `relative` below `root` without following a
/// symbolic link, and returns the last one with the final name.
fn walk_to_parent<'a>(
    root: &Path,
    relative: &'a Path,
) -> Result<(OwnedFd, &'a std::ffi::OsStr), FileError> {
    let name = match relative.components().next_back() {
        Some(Component::Normal(name)) => name,
        _ => {
            return Err(FileError::new(relative, FileProblem::Outside));
        }
    };
    let parent = relative.parent().unwrap_or(Path::new(""));
    Ok((walk(root, parent)?, name))
}

fn walk(root: &Path, relative: &Path) -> Result<OwnedFd, FileError> {
    let directory = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd =
        rustix::fs::open(root, directory, Mode::empty()).map_err(|e| FileError::io(root, e))?;
    let mut path = root.to_owned();
    for component in relative.components() {
        match component {
            Component::Normal(name) => {
                path.push(name);
                fd = rustix::fs::openat(&fd, name, directory | OFlags::NOFOLLOW, Mode::empty())
                    .map_err(|e| refusal(&fd, name, &path, e))?;
            }
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(FileError::new(relative, FileProblem::Outside));
            }
        }
    }
    Ok(fd)
}

/// An open of `name` in `dir` that failed on a link says so: `O_NOFOLLOW`
/// gives `ELOOP` on a link (or `ENOTDIR` with `O_DIRECTORY` on Linux), so
/// those are told apart from real errors by looking at the entry itself.
fn refusal(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    path: &Path,
    errno: rustix::io::Errno,
) -> FileError {
    let on_a_link = matches!(errno, rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR)
        && rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Symlink);
    if on_a_link {
        FileError::new(path, FileProblem::Symlink)
    } else {
        FileError::io(path, errno)
    }
}

fn read_opened(fd: OwnedFd, path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let stat = rustix::fs::fstat(&fd).map_err(|e| FileError::io(path, e))?;
    let file_type = FileType::from_raw_mode(stat.st_mode);
    if file_type != FileType::RegularFile {
        return Err(FileError::new(
            path,
            FileProblem::NotRegular(kind_name(file_type)),
        ));
    }
    let too_large = || FileError::new(path, FileProblem::TooLarge(max));
    if u64::try_from(stat.st_size).unwrap_or(u64::MAX) > max {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    // One byte past the cap tells a file that grew since the fstat.
    File::from(fd)
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::io(path, e))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max {
        return Err(too_large());
    }
    Ok(bytes)
}

fn text(bytes: Vec<u8>, path: &Path) -> Result<String, FileError> {
    String::from_utf8(bytes).map_err(|_| FileError::new(path, FileProblem::NotText))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn a_regular_file_is_read_and_a_link_to_one_is_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("meshd.toml");
        std::fs::write(&file, "x = 1\n").expect("write");
        let link = dir.path().join("current.toml");
        symlink(&file, &link).expect("symlink");
        assert_eq!(read_regular_text(&file, 100).expect("read"), "x = 1\n");
        assert_eq!(read_regular_text(&link, 100).expect("read"), "x = 1\n");
    }

    #[test]
    fn devices_fifos_and_directories_are_refused_by_kind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let zero = dir.path().join("zero");
        symlink("/dev/zero", &zero).expect("symlink");
        let err = read_regular(&zero, 1 << 20).expect_err("a device");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: is a character device, not a regular file",
                zero.display()
            )
        );
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        // No writer ever opens it: a blocking open would hang here.
        let err = read_regular(&fifo, 1 << 20).expect_err("a FIFO");
        assert!(
            err.to_string().ends_with("is a FIFO, not a regular file"),
            "{err}"
        );
        let err = read_regular(dir.path(), 1 << 20).expect_err("a directory");
        assert!(
            matches!(err.problem, FileProblem::NotRegular("a directory")),
            "{err}"
        );
        assert!(
            read_regular(&dir.path().join("missing"), 1)
                .expect_err("missing")
                .is_not_found()
        );
    }

    #[test]
    fn a_file_over_the_cap_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("big");
        std::fs::write(&file, vec![b'x'; 101]).expect("write");
        let err = read_regular(&file, 100).expect_err("too large");
        assert!(matches!(err.problem, FileProblem::TooLarge(100)), "{err}");
        assert_eq!(read_regular(&file, 101).expect("at the cap").len(), 101);
        std::fs::write(&file, [0xff, 0xfe]).expect("write");
        let err = read_regular_text(&file, 10).expect_err("not text");
        assert!(matches!(err.problem, FileProblem::NotText), "{err}");
    }

    #[test]
    fn beneath_a_root_no_link_is_followed_at_any_depth() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        std::fs::create_dir_all(root.join("sys/class/net/en2")).expect("mkdir");
        std::fs::write(root.join("sys/class/net/en2/operstate"), "up\n").expect("write");
        assert_eq!(
            read_beneath(root, Path::new("sys/class/net/en2/operstate"), 10).expect("read"),
            b"up\n"
        );
        assert_eq!(
            list_beneath(root, Path::new("sys/class/net"), 10).expect("list"),
            ["en2"]
        );

        symlink("/etc/hostname", root.join("hostname.txt")).expect("symlink");
        let err = read_beneath(root, Path::new("hostname.txt"), 1 << 20).expect_err("a link");
        assert!(matches!(err.problem, FileProblem::Symlink), "{err}");

        // A directory on the way that is a link: refused, not followed.
        symlink("/etc", root.join("sys/etc")).expect("symlink");
        let err = read_beneath(root, Path::new("sys/etc/hostname"), 1 << 20).expect_err("link dir");
        assert!(matches!(err.problem, FileProblem::Symlink), "{err}");
        let err = list_beneath(root, Path::new("sys/etc"), 10).expect_err("link dir");
        assert!(matches!(err.problem, FileProblem::Symlink), "{err}");

        for outside in ["../x", "/etc/hostname", "sys/../../x"] {
            let err = read_beneath(root, Path::new(outside), 10).expect_err(outside);
            assert!(
                matches!(err.problem, FileProblem::Outside),
                "{outside}: {err}"
            );
        }
        let err = list_beneath(root, Path::new("sys/class"), 0).expect_err("too many");
        assert!(err.to_string().contains("more than 0 entries"), "{err}");
    }
}
