//! Bundles from someone else's machine, built to hurt: every one is
//! refused with a named reason, quickly, and reads nothing outside the
//! bundle. Archives are made here with hostile entries written straight
//! into their tar headers (the tar crate's own builder refuses most of
//! them).

use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Instant;

use meshd_platform::bundle::{
    self, BundleError, FACTS_FILE, MANIFEST_FILE, MAX_DEPTH, MAX_ENTRIES, MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
};
use meshd_platform::source::{HostCommand, ReplaySource, Source};

/// A tar entry with its name written into the header as given, so `..`
/// and absolute paths reach the archive.
fn raw_entry(
    tar: &mut tar::Builder<impl Write>,
    name: &str,
    kind: tar::EntryType,
    link: Option<&str>,
    data: &[u8],
) {
    let mut header = tar::Header::new_gnu();
    let bytes = header.as_mut_bytes();
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    header.set_entry_type(kind);
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    if let Some(link) = link {
        let bytes = header.as_mut_bytes();
        bytes[157..157 + link.len()].copy_from_slice(link.as_bytes());
    }
    header.set_cksum();
    tar.append(&header, data).expect("append");
}

/// A `.tar.gz` with a valid bundle at `top/` and whatever `hostile` adds.
fn archive(
    dir: &Path,
    hostile: impl FnOnce(&mut tar::Builder<flate2::write::GzEncoder<fs::File>>),
) -> PathBuf {
    let path = dir.join("bundle.tar.gz");
    let file = fs::File::create(&path).expect("create");
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::fast(),
    ));
    let manifest = br#"{"format":1,"node":"b","os":"linux","created_unix":1,"meshd_version":"0","commands":[],"files":[]}"#;
    raw_entry(
        &mut tar,
        "top/manifest.json",
        tar::EntryType::Regular,
        None,
        manifest,
    );
    hostile(&mut tar);
    tar.into_inner().expect("tar").finish().expect("gzip");
    path
}

fn refusal(archive: &Path) -> String {
    let started = Instant::now();
    let err = bundle::unpack(archive).expect_err("refused");
    eprintln!("refused in {:?}: {err}", started.elapsed());
    assert!(
        matches!(err, BundleError::Refused { .. }),
        "a refusal, not another error: {err}"
    );
    err.to_string()
}

#[test]
fn archive_paths_that_leave_the_bundle_are_refused() {
    for name in ["top/../../escaped.txt", "/etc/cron.d/evil", "../x"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = archive(dir.path(), |tar| {
            raw_entry(tar, name, tar::EntryType::Regular, None, b"x");
        });
        let message = refusal(&path);
        assert!(message.contains(&format!("entry {name}")), "{message}");
        assert!(message.contains("outside the bundle"), "{message}");
        assert!(!dir.path().join("escaped.txt").exists());
    }
}

#[test]
fn links_devices_and_fifos_in_an_archive_are_refused_by_kind() {
    for (kind, link, named) in [
        (
            tar::EntryType::Symlink,
            Some("/etc/hostname"),
            "a symbolic link",
        ),
        (
            tar::EntryType::Link,
            Some("top/manifest.json"),
            "a hard link",
        ),
        (tar::EntryType::Char, None, "a character device"),
        (tar::EntryType::Block, None, "a block device"),
        (tar::EntryType::Fifo, None, "a FIFO"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = archive(dir.path(), |tar| {
            raw_entry(tar, "top/ibv_devinfo_v.txt", kind, link, b"");
        });
        let message = refusal(&path);
        assert!(
            message.contains(&format!("entry top/ibv_devinfo_v.txt: is {named}")),
            "{message}"
        );
    }
}

#[test]
fn an_entry_over_the_size_cap_is_refused_before_it_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = vec![0u8; usize::try_from(MAX_FILE_BYTES).expect("fits") + 1];
    let path = archive(dir.path(), |tar| {
        raw_entry(tar, "top/sw_vers.txt", tar::EntryType::Regular, None, &big);
    });
    let message = refusal(&path);
    assert!(message.contains("entry top/sw_vers.txt"), "{message}");
    assert!(
        message.contains(&format!("more than the {MAX_FILE_BYTES}")),
        "{message}"
    );
}

#[test]
fn archives_over_the_total_or_the_entry_count_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = vec![0u8; usize::try_from(MAX_FILE_BYTES).expect("fits")];
    let files = MAX_TOTAL_BYTES / MAX_FILE_BYTES + 1;
    let path = archive(dir.path(), |tar| {
        for i in 0..files {
            raw_entry(
                tar,
                &format!("top/f{i}"),
                tar::EntryType::Regular,
                None,
                &file,
            );
        }
    });
    let message = refusal(&path);
    assert!(
        message.contains(&format!("more than {MAX_TOTAL_BYTES} bytes")),
        "{message}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let path = archive(dir.path(), |tar| {
        for i in 0..MAX_ENTRIES {
            raw_entry(
                tar,
                &format!("top/f{i}"),
                tar::EntryType::Regular,
                None,
                b"",
            );
        }
    });
    let message = refusal(&path);
    assert!(
        message.contains(&format!("more than {MAX_ENTRIES} entries")),
        "{message}"
    );
}

#[test]
fn two_thousand_nested_directories_in_an_archive_stop_at_the_depth_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = archive(dir.path(), |tar| {
        let mut name = String::from("top");
        for _ in 0..2000 {
            name.push_str("/d");
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            // Long names go out as GNU long-name entries.
            tar.append_data(&mut header, &name, std::io::empty())
                .expect("append");
        }
    });
    let message = refusal(&path);
    assert!(
        message.contains(&format!("nested deeper than {MAX_DEPTH} levels")),
        "{message}"
    );
}

#[test]
fn a_gzip_bomb_stops_at_the_decompressed_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A GNU long name of 100 MB of zeros: the tar reader would buffer all
    // of it before any entry could be judged.
    let bomb = vec![0u8; 100 << 20];
    let path = archive(dir.path(), |tar| {
        raw_entry(
            tar,
            "././@LongLink",
            tar::EntryType::GNULongName,
            None,
            &bomb,
        );
    });
    let started = Instant::now();
    let err = bundle::unpack(&path).expect_err("refused");
    eprintln!("gzip bomb refused in {:?}: {err}", started.elapsed());
    assert!(err.to_string().contains("bytes once decompressed"), "{err}");
}

/// A bundle directory like the ones `meshctl bundle` writes.
fn bundle_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(
        dir.path().join(MANIFEST_FILE),
        r#"{"format":1,"node":"b","os":"macos","created_unix":1,"meshd_version":"0","commands":[],"files":[]}"#,
    )
    .expect("manifest");
    fs::write(dir.path().join(FACTS_FILE), "{}").expect("facts");
    fs::write(dir.path().join("sw_vers.txt"), "ProductVersion: 26.2\n").expect("sw_vers");
    dir
}

#[test]
fn a_bundle_file_linked_to_dev_zero_is_refused_not_read() {
    let dir = bundle_dir();
    let file = HostCommand::Thunderbolt.file_name();
    symlink("/dev/zero", dir.path().join(file)).expect("symlink");
    let started = Instant::now();
    let err = bundle::check_dir(dir.path()).expect_err("refused");
    assert!(
        err.to_string()
            .ends_with("is a symbolic link; a bundle holds regular files and directories only"),
        "{err}"
    );
    // Read anyway (as the daemon's replay does): refused by name, at once.
    let replay = ReplaySource::open(dir.path()).expect("open");
    let captured = replay.capture(HostCommand::Thunderbolt);
    let message = captured.expect_err("not read").to_string();
    assert!(message.contains("is a symbolic link"), "{message}");
    let facts = bundle::replay_facts(dir.path()).expect("replayed without the link");
    assert!(
        facts
            .blind_spots
            .iter()
            .any(|s| s.contains("is a symbolic link")),
        "{:?}",
        facts.blind_spots
    );
    eprintln!(
        "/dev/zero link refused and replayed around in {:?}",
        started.elapsed()
    );
}

#[test]
fn a_bundle_file_linked_to_a_host_file_is_refused_and_its_content_never_read() {
    let dir = bundle_dir();
    let secret = tempfile::NamedTempFile::new().expect("secret");
    fs::write(secret.path(), "host-secret-42\n").expect("write");
    symlink(secret.path(), dir.path().join("sw_vers.txt.link")).expect("symlink");
    fs::remove_file(dir.path().join("sw_vers.txt")).expect("rm");
    symlink(secret.path(), dir.path().join("sw_vers.txt")).expect("symlink");
    let err = bundle::check_dir(dir.path()).expect_err("refused");
    assert!(!err.to_string().contains("host-secret-42"), "{err}");
    let replay = ReplaySource::open(dir.path()).expect("open");
    let message = replay
        .capture(HostCommand::SwVers)
        .expect_err("not read")
        .to_string();
    assert!(message.contains("is a symbolic link"), "{message}");
    assert!(!message.contains("host-secret-42"), "{message}");
    let facts = bundle::replay_facts(dir.path()).expect("replayed");
    let everything = format!("{facts:?}");
    assert!(!everything.contains("host-secret-42"), "{everything}");
}

#[test]
fn a_directory_linked_out_of_the_bundle_is_not_followed() {
    let dir = bundle_dir();
    fs::create_dir(dir.path().join("sys")).expect("mkdir");
    symlink("/sys/class", dir.path().join("sys/class")).expect("symlink");
    let err = bundle::check_dir(dir.path()).expect_err("refused");
    assert!(
        err.to_string()
            .contains("sys/class: refused: is a symbolic link"),
        "{err}"
    );
    let replay = ReplaySource::open(dir.path()).expect("open");
    let err = replay.list_dir("/sys/class/net").expect_err("not followed");
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
}

#[test]
fn two_thousand_nested_directories_stop_at_the_depth_cap() {
    use rustix::fs::{Mode, OFlags};
    let dir = bundle_dir();
    // Made a level at a time from an open directory: the whole path would
    // be near PATH_MAX.
    let mut current = rustix::fs::open(
        dir.path(),
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .expect("open");
    for _ in 0..2000 {
        rustix::fs::mkdirat(&current, "d", Mode::RWXU).expect("mkdir");
        current = rustix::fs::openat(
            &current,
            "d",
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .expect("open");
    }
    let started = Instant::now();
    let err = bundle::check_dir(dir.path()).expect_err("refused");
    eprintln!("deep directories refused in {:?}", started.elapsed());
    assert!(
        err.to_string()
            .contains(&format!("nested deeper than {MAX_DEPTH} levels")),
        "{err}"
    );
}

#[test]
fn a_fifo_in_a_bundle_is_refused_without_blocking() {
    let dir = bundle_dir();
    let fifo = dir.path().join(HostCommand::IbvDevinfo.file_name());
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let err = bundle::check_dir(dir.path()).expect_err("refused");
    assert!(err.to_string().contains("is a FIFO"), "{err}");
    let replay = ReplaySource::open(dir.path()).expect("open");
    let message = replay
        .capture(HostCommand::IbvDevinfo)
        .expect_err("not read")
        .to_string();
    assert!(
        message.contains("is a FIFO, not a regular file"),
        "{message}"
    );
}
