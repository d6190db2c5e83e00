//! Bundles: everything the platform layer read on a node (every command's
//! raw output, or why it failed, and the host files it read) plus the facts
//! built from them, in one directory that [`crate::source::ReplaySource`]
//! replays on any machine, packed as one `.tar.gz` to send around.
//!
//! Layout of a bundle directory:
//! - `manifest.json`: format version, node, OS, when, which meshd, and what
//!   was captured ([`Manifest`]).
//! - `facts.json`: the [`NodeFacts`] built at capture time.
//! - one file per command ([`HostCommand::file_name`]), or `<file>.error`
//!   holding why it failed.
//! - host files under their own path (`sys/class/net/en2/operstate`).
//! - anything else the caller adds (`status.json` from the daemon).
//!
//! A bundle comes from another machine, so reading one trusts nothing in
//! it: an archive is unpacked into a fresh private temporary directory,
//! taking only regular files and directories within caps on entry size,
//! total size, entry count and depth ([`unpack`]); a bundle directory is
//! checked against the same caps before it is read ([`check_dir`]); and
//! every file is read through [`crate::file`], which follows no symbolic
//! link and reads at most [`MAX_FILE_BYTES`].

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use meshd_domain::facts::{NodeFacts, OsKind};
use serde::{Deserialize, Serialize};

use crate::file::{FileError, kind_name, read_beneath};
use crate::ibv::{parse_ibv_devices, parse_ibv_devinfo};
use crate::source::{HostCommand, Recorded, ReplaySource};

pub const MANIFEST_FILE: &str = "manifest.json";
pub const FACTS_FILE: &str = "facts.json";
/// Bumped when the layout changes incompatibly.
pub const FORMAT_VERSION: u32 = 1;

/// One file of a bundle: command outputs and host files are kilobytes
/// (`system_profiler`'s Thunderbolt report, the largest, is tens of them).
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// All files of a bundle together.
pub const MAX_TOTAL_BYTES: u64 = 64 << 20;
/// Files and directories in a bundle; a Linux node with RDMA counters has
/// a few hundred.
pub const MAX_ENTRIES: usize = 4096;
/// Path components below the bundle's top (`sys/class/infiniband/mlx5_0/
/// ports/1/counters/port_rcv_data` is 8, under an archive's top directory 9).
pub const MAX_DEPTH: usize = 16;
/// What gzip may expand to: the files plus tar's headers (512 bytes an
/// entry, and long names).
const MAX_ARCHIVE_BYTES: u64 = MAX_TOTAL_BYTES + 2048 * MAX_ENTRIES as u64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    /// The node id meshd uses, or the host name where no config was found.
    pub node: String,
    pub os: OsKind,
    /// Seconds since the Unix epoch.
    pub created_unix: u64,
    pub meshd_version: String,
    pub commands: Vec<CapturedCommand>,
    /// Host files, by their absolute path on the node.
    pub files: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapturedCommand {
    pub command: String,
    /// The file in the bundle: the output, or `<file>.error`.
    pub file: String,
    pub ok: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: not a meshd bundle: {problem}")]
    Invalid { path: PathBuf, problem: String },
    /// Something a bundle may not hold, or more of it than the caps allow.
    #[error("{path}: refused: {problem}")]
    Refused { path: PathBuf, problem: String },
    #[error(transparent)]
    File(#[from] FileError),
}

fn refused(path: &Path, problem: impl Into<String>) -> BundleError {
    BundleError::Refused {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes a bundle into `dir` (created if missing): what `recorded` saw,
/// the facts, the manifest, and `extra` files (name, text) as given.
pub fn write_dir(
    dir: &Path,
    node: &str,
    created_unix: u64,
    recorded: &[Recorded],
    facts: &NodeFacts,
    extra: &[(&str, String)],
) -> Result<Manifest, BundleError> {
    fs::create_dir_all(dir).map_err(io_at(dir))?;
    let mut manifest = Manifest {
        format: FORMAT_VERSION,
        node: node.to_owned(),
        os: facts.os,
        created_unix,
        meshd_version: env!("CARGO_PKG_VERSION").to_owned(),
        commands: Vec::new(),
        files: Vec::new(),
    };
    for item in recorded {
        match item {
            Recorded::Command {
                command,
                operand,
                output,
            } => {
                let name = command.file_name_for(operand.as_deref());
                let (file, text, ok) = match output {
                    Ok(text) => (name, text.clone(), true),
                    Err(why) => (format!("{name}.error"), format!("{why}\n"), false),
                };
                write(&dir.join(&file), &text)?;
                manifest.commands.push(CapturedCommand {
                    command: command.line_for(operand.as_deref()),
                    file,
                    ok,
                });
            }
            Recorded::File { path, text } => {
                let Some(relative) = inside(path) else {
                    continue;
                };
                let target = dir.join(relative);
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent).map_err(io_at(parent))?;
                }
                write(&target, text)?;
                manifest.files.push(path.clone());
            }
            Recorded::Dir { path } => {
                if let Some(relative) = inside(path) {
                    let target = dir.join(relative);
                    fs::create_dir_all(&target).map_err(io_at(&target))?;
                }
            }
        }
    }
    let facts_json = serde_json::to_string_pretty(facts).map_err(|e| BundleError::Invalid {
        path: dir.join(FACTS_FILE),
        problem: e.to_string(),
    })?;
    write(&dir.join(FACTS_FILE), &facts_json)?;
    for (name, text) in extra {
        write(&dir.join(name), text)?;
    }
    let manifest_json =
        serde_json::to_string_pretty(&manifest).map_err(|e| BundleError::Invalid {
            path: dir.join(MANIFEST_FILE),
            problem: e.to_string(),
        })?;
    write(&dir.join(MANIFEST_FILE), &manifest_json)?;
    Ok(manifest)
}

fn write(path: &Path, text: &str) -> Result<(), BundleError> {
    fs::write(path, text).map_err(io_at(path))
}

/// A host path as a relative path inside a bundle; `None` for anything that
/// could step outside it (`..`).
fn inside(path: &str) -> Option<PathBuf> {
    let relative = Path::new(path.trim_start_matches('/'));
    relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| relative.to_owned())
}

/// The manifest of a bundle directory, if it has a readable one.
pub fn read_manifest(dir: &Path) -> Result<Manifest, BundleError> {
    let path = dir.join(MANIFEST_FILE);
    let bytes = read_beneath(dir, Path::new(MANIFEST_FILE), MAX_FILE_BYTES)?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| BundleError::Invalid {
        path: path.clone(),
        problem: e.to_string(),
    })?;
    if manifest.format != FORMAT_VERSION {
        return Err(BundleError::Invalid {
            path,
            problem: format!(
                "format {} (this meshd reads format {FORMAT_VERSION})",
                manifest.format
            ),
        });
    }
    Ok(manifest)
}

/// The OS a bundle directory was captured on: from its manifest, else from
/// what it holds (a directory of macOS command outputs, as in the test
/// fixtures, has no manifest): any output of a command only macOS runs, or
/// RDMA devices named the macOS way (`rdma_en2`: `rdma_` and the BSD
/// interface name); sysfs or procfs files for Linux; else `Other`.
pub fn os_of(dir: &Path) -> OsKind {
    if let Ok(manifest) = read_manifest(dir) {
        return manifest.os;
    }
    // Present is enough (not followed: a link is refused when read).
    let present = |path: PathBuf| path.symlink_metadata().is_ok();
    let has = |command: &HostCommand| {
        present(dir.join(command.file_name()))
            || present(dir.join(format!("{}.error", command.file_name())))
    };
    if HostCommand::ALL.iter().filter(|c| c.macos_only()).any(has) || names_macos_rdma_devices(dir)
    {
        OsKind::Macos
    } else if present(dir.join("sys")) || present(dir.join("proc")) {
        OsKind::Linux
    } else {
        OsKind::Other
    }
}

/// `ibv_devices` or `ibv_devinfo` in `dir` lists a device `rdma_en<N>`,
/// which only macOS names so (Linux devices are `mlx5_0`, `rxe0`, …).
fn names_macos_rdma_devices(dir: &Path) -> bool {
    let macos_name = |name: &str| {
        name.strip_prefix("rdma_en")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    [
        (
            HostCommand::IbvDevices,
            parse_ibv_devices as fn(&str) -> Vec<_>,
        ),
        (HostCommand::IbvDevinfo, parse_ibv_devinfo),
    ]
    .into_iter()
    .filter_map(|(command, parse)| {
        let bytes = read_beneath(dir, Path::new(command.file_name()), MAX_FILE_BYTES).ok()?;
        Some(parse(&String::from_utf8_lossy(&bytes)))
    })
    .flatten()
    .any(|device| macos_name(&device.name))
}

/// Checks a bundle directory before it is read: regular files and
/// directories only (no symbolic link, FIFO, device or socket anywhere),
/// within [`MAX_FILE_BYTES`], [`MAX_TOTAL_BYTES`], [`MAX_ENTRIES`] and
/// [`MAX_DEPTH`]. Nothing is followed and no file is opened.
pub fn check_dir(dir: &Path) -> Result<(), BundleError> {
    let mut seen = Seen::default();
    check_tree(dir, 1, &mut seen)
}

#[derive(Debug, Default)]
struct Seen {
    entries: usize,
    bytes: u64,
}

impl Seen {
    fn entry(&mut self, path: &Path, depth: usize) -> Result<(), BundleError> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(refused(path, format!("more than {MAX_ENTRIES} entries")));
        }
        if depth > MAX_DEPTH {
            return Err(refused(
                path,
                format!("nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn file(&mut self, path: &Path, size: u64) -> Result<(), BundleError> {
        if size > MAX_FILE_BYTES {
            return Err(refused(
                path,
                format!("{size} bytes, more than the {MAX_FILE_BYTES} a bundle file may have"),
            ));
        }
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes > MAX_TOTAL_BYTES {
            return Err(refused(
                path,
                format!("the bundle holds more than {MAX_TOTAL_BYTES} bytes"),
            ));
        }
        Ok(())
    }
}

fn check_tree(dir: &Path, depth: usize, seen: &mut Seen) -> Result<(), BundleError> {
    for entry in fs::read_dir(dir).map_err(io_at(dir))? {
        let entry = entry.map_err(io_at(dir))?;
        let path = entry.path();
        seen.entry(&path, depth)?;
        // Of the entry itself: a DirEntry's metadata does not follow links.
        let meta = entry.metadata().map_err(io_at(&path))?;
        // mode_t is 16 bits on macOS, 32 on Linux.
        let file_type = rustix::fs::RawMode::try_from(meta.mode()).map_or(
            rustix::fs::FileType::Unknown,
            rustix::fs::FileType::from_raw_mode,
        );
        match file_type {
            rustix::fs::FileType::Directory => check_tree(&path, depth + 1, seen)?,
            rustix::fs::FileType::RegularFile => seen.file(&path, meta.len())?,
            other => return Err(not_allowed(&path, kind_name(other))),
        }
    }
    Ok(())
}

fn not_allowed(path: &Path, kind: &str) -> BundleError {
    refused(
        path,
        format!("is {kind}; a bundle holds regular files and directories only"),
    )
}

/// A bundle directory's facts, re-read from its raw outputs (so a newer
/// reader applies its newer parsers) for the OS [`os_of`] finds.
pub fn replay_facts(dir: &Path) -> io::Result<NodeFacts> {
    let source = ReplaySource::open(dir)?;
    Ok(crate::collect(&source, os_of(dir)))
}

/// Packs a bundle directory into a `.tar.gz` whose entries sit under one
/// top-level directory named `top`.
pub fn pack(dir: &Path, top: &str, out: &Path) -> Result<(), BundleError> {
    let file = fs::File::create(out).map_err(io_at(out))?;
    let gzip = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut archive = tar::Builder::new(gzip);
    archive.follow_symlinks(false);
    archive.append_dir_all(top, dir).map_err(io_at(dir))?;
    let gzip = archive.into_inner().map_err(io_at(out))?;
    gzip.finish().map_err(io_at(out))?;
    Ok(())
}

/// An unpacked bundle in its own private temporary directory (random name,
/// mode 0700), removed when this is dropped.
#[derive(Debug)]
pub struct Unpacked {
    dir: PathBuf,
    _temporary: tempfile::TempDir,
}

impl Unpacked {
    /// The bundle directory (the archive's top directory, or the temporary
    /// directory itself for an archive without one).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Unpacks a `.tar.gz` made by [`pack`] into a new private temporary
/// directory. Only regular files and directories are taken, at relative
/// paths without `..`, within [`MAX_FILE_BYTES`], [`MAX_TOTAL_BYTES`],
/// [`MAX_ENTRIES`] and [`MAX_DEPTH`]; the first entry that breaks a rule
/// refuses the whole archive, naming the entry.
pub fn unpack(archive: &Path) -> Result<Unpacked, BundleError> {
    let temporary = tempfile::Builder::new()
        .prefix("meshd-bundle-")
        .tempdir()
        .map_err(io_at(&std::env::temp_dir()))?;
    let dir = unpack_into(archive, temporary.path())?;
    Ok(Unpacked {
        dir,
        _temporary: temporary,
    })
}

fn unpack_into(archive: &Path, into: &Path) -> Result<PathBuf, BundleError> {
    let file = fs::File::open(archive).map_err(io_at(archive))?;
    let gzip = Capped {
        inner: flate2::read::GzDecoder::new(file),
        left: MAX_ARCHIVE_BYTES,
    };
    let mut tar = tar::Archive::new(gzip);
    let mut seen = Seen::default();
    for entry in tar.entries().map_err(io_at(archive))? {
        let mut entry = entry.map_err(io_at(archive))?;
        let name = entry.path().map_err(io_at(archive))?.into_owned();
        let at = |problem: String| refused(archive, format!("entry {}: {problem}", name.display()));
        let relative = relative_inside(&name).ok_or_else(|| {
            at("an absolute path or one with `..`, which could land outside the bundle".to_owned())
        })?;
        seen.entry(&relative, relative.components().count())
            .map_err(|e| at(refusal_problem(e)))?;
        let target = into.join(&relative);
        match entry.header().entry_type() {
            tar::EntryType::Directory => fs::create_dir_all(&target).map_err(io_at(&target))?,
            tar::EntryType::Regular => {
                let size = entry.header().size().map_err(io_at(archive))?;
                seen.file(&relative, size)
                    .map_err(|e| at(refusal_problem(e)))?;
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent).map_err(io_at(parent))?;
                }
                // A second entry of the same name is refused, never merged.
                let mut out = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&target)
                    .map_err(io_at(&target))?;
                io::copy(&mut (&mut entry).take(size), &mut out).map_err(io_at(archive))?;
            }
            other => {
                return Err(at(format!(
                    "is {}; a bundle holds regular files and directories only",
                    entry_kind(other)
                )));
            }
        }
    }
    let mut dirs = fs::read_dir(into)
        .map_err(io_at(into))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()));
    let has_manifest = |dir: &Path| {
        dir.join(MANIFEST_FILE)
            .symlink_metadata()
            .is_ok_and(|m| m.is_file())
    };
    match (dirs.next(), dirs.next()) {
        (Some(only), None) if has_manifest(&only.path()) => Ok(only.path()),
        _ if has_manifest(into) => Ok(into.to_owned()),
        _ => Err(BundleError::Invalid {
            path: archive.to_owned(),
            problem: format!("no {MANIFEST_FILE} at its top"),
        }),
    }
}

/// The problem of a refusal, to be told again about an archive entry.
fn refusal_problem(err: BundleError) -> String {
    match err {
        BundleError::Refused { problem, .. } => problem,
        other => other.to_string(),
    }
}

/// An archive path as a relative path of plain names (`./` dropped);
/// `None` for an absolute path, one with `..`, or an empty one.
fn relative_inside(name: &Path) -> Option<PathBuf> {
    let mut relative = PathBuf::new();
    for component in name.components() {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!relative.as_os_str().is_empty()).then_some(relative)
}

fn entry_kind(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Symlink => "a symbolic link",
        tar::EntryType::Link => "a hard link",
        tar::EntryType::Char => "a character device",
        tar::EntryType::Block => "a block device",
        tar::EntryType::Fifo => "a FIFO",
        tar::EntryType::GNUSparse => "a sparse file",
        _ => "an entry of another kind",
    }
}

/// A reader that fails, rather than ends, past `left` bytes: gzip can
/// expand a small archive a thousandfold, and the tar reader buffers
/// whole long-name headers, so what is decompressed is capped before
/// anything reads it.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            io::Error::other(format!(
                "more than {MAX_ARCHIVE_BYTES} bytes once decompressed"
            ))
        })?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Recorder, Source};

    fn recorded_sample(dir: &Path) -> (Vec<Recorded>, NodeFacts) {
        fs::write(dir.join("rdma_ctl_status.txt"), "enabled\n").expect("write");
        fs::create_dir_all(dir.join("sys/class/net/en2")).expect("mkdir");
        fs::write(dir.join("sys/class/net/en2/operstate"), "up\n").expect("write");
        let recorder = Recorder::new(ReplaySource::open(dir).expect("open"));
        let _ = recorder.capture(HostCommand::RdmaCtl);
        let _ = recorder.capture(HostCommand::IbvDevinfo);
        let _ = recorder.list_dir("/sys/class/net");
        let _ = recorder.read_file("/sys/class/net/en2/operstate");
        let facts = NodeFacts {
            os: OsKind::Macos,
            os_version: "26.2".into(),
            ..NodeFacts::default()
        };
        (recorder.into_recorded(), facts)
    }

    #[test]
    fn a_written_bundle_replays_what_was_recorded() {
        let captured = tempfile::tempdir().expect("tempdir");
        let (recorded, facts) = recorded_sample(captured.path());
        let bundle = tempfile::tempdir().expect("tempdir");
        let manifest = write_dir(
            bundle.path(),
            "studio-1",
            1_700_000_000,
            &recorded,
            &facts,
            &[("status.json", "{}".to_owned())],
        )
        .expect("written");
        assert_eq!(manifest.commands.len(), 2);
        assert!(manifest.commands[0].ok);
        assert_eq!(manifest.commands[1].file, "ibv_devinfo_v.txt.error");
        assert_eq!(manifest.files, vec!["/sys/class/net/en2/operstate"]);
        assert_eq!(read_manifest(bundle.path()).expect("manifest"), manifest);
        assert_eq!(os_of(bundle.path()), OsKind::Macos);

        let replay = ReplaySource::open(bundle.path()).expect("open");
        assert_eq!(
            replay.capture(HostCommand::RdmaCtl).as_deref(),
            Ok("enabled\n")
        );
        let missing = replay
            .capture(HostCommand::IbvDevinfo)
            .expect_err("recorded failure");
        assert!(
            missing.to_string().contains("not in the bundle"),
            "{missing}"
        );
        assert_eq!(
            replay
                .read_file("/sys/class/net/en2/operstate")
                .expect("file"),
            "up\n"
        );
        let facts_back: NodeFacts = serde_json::from_str(
            &fs::read_to_string(bundle.path().join(FACTS_FILE)).expect("facts"),
        )
        .expect("facts parse");
        assert_eq!(facts_back, facts);
    }

    #[test]
    fn packed_bundles_unpack_to_the_same_files() {
        let captured = tempfile::tempdir().expect("tempdir");
        let (recorded, facts) = recorded_sample(captured.path());
        let bundle = tempfile::tempdir().expect("tempdir");
        write_dir(bundle.path(), "b", 1, &recorded, &facts, &[]).expect("written");
        let out = tempfile::tempdir().expect("tempdir");
        let archive = out.path().join("b.tar.gz");
        pack(bundle.path(), "meshd-bundle-b", &archive).expect("packed");
        let unpacked = unpack(&archive).expect("unpacked");
        let dir = unpacked.dir();
        assert!(dir.ends_with("meshd-bundle-b"));
        assert_eq!(
            fs::read_to_string(dir.join("rdma_ctl_status.txt")).expect("file"),
            "enabled\n"
        );
        assert_eq!(read_manifest(dir).expect("manifest").node, "b");
        check_dir(dir).expect("a bundle we wrote passes the checks");
    }

    #[test]
    fn garbage_is_not_a_bundle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let archive = dir.path().join("x.tar.gz");
        fs::write(&archive, "not gzip").expect("write");
        assert!(unpack(&archive).is_err());
        fs::write(dir.path().join(MANIFEST_FILE), "{\"format\": 99}").expect("write");
        let err = read_manifest(dir.path()).expect_err("bad manifest");
        assert!(err.to_string().contains("not a meshd bundle"), "{err}");
        assert_eq!(
            os_of(tempfile::tempdir().expect("tempdir").path()),
            OsKind::Other
        );
    }

    #[test]
    fn a_bundle_without_a_manifest_is_told_by_what_it_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path();
        assert_eq!(os_of(path), OsKind::Other);
        // Only the rdma-core list: macOS by its device names.
        fs::write(
            path.join("ibv_devices.txt"),
            "    device          \t   node GUID\n    rdma_en2        \t8096a9d9edbaac05\n",
        )
        .expect("write");
        assert_eq!(os_of(path), OsKind::Macos);
        fs::write(
            path.join("ibv_devices.txt"),
            "    device          \t   node GUID\n    mlx5_0          \t0c42a10300aabbcc\n",
        )
        .expect("write");
        assert_eq!(
            os_of(path),
            OsKind::Other,
            "Linux devices prove nothing alone"
        );
        fs::create_dir_all(path.join("sys/class/net")).expect("mkdir");
        assert_eq!(os_of(path), OsKind::Linux);
        for command in HostCommand::ALL.iter().filter(|c| c.macos_only()) {
            let only = tempfile::tempdir().expect("tempdir");
            fs::write(
                only.path().join(format!("{}.error", command.file_name())),
                "x",
            )
            .expect("write");
            assert_eq!(os_of(only.path()), OsKind::Macos, "{command}");
        }
    }

    #[test]
    fn host_paths_cannot_escape_the_bundle() {
        assert_eq!(
            inside("/sys/class/net/en2/operstate"),
            Some(PathBuf::from("sys/class/net/en2/operstate"))
        );
        assert_eq!(inside("/sys/../../etc/passwd"), None);
    }
}
