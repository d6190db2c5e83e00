//! The service files checked in under `launchd/` at the repository root are
//! exactly what `meshd install` writes for the binary in
//! `/usr/local/bin/meshd` and each platform's default config, so operators
//! can read them without building meshd.
//!
//! After changing the generator, regenerate them with
//! `MESHD_BLESS=1 cargo nextest run -p meshd --test service_files`.

use std::path::{Path, PathBuf};

use meshd::install::{Platform, SYSTEM_BINARY};

const REGENERATE: &str = "MESHD_BLESS=1 cargo nextest run -p meshd --test service_files";

fn launchd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lies in the workspace")
        .join("launchd")
}

/// The checked-in copy of `platform`'s service file: same name as on the
/// system.
fn checked_in(platform: Platform) -> PathBuf {
    launchd_dir().join(
        platform
            .service_file()
            .file_name()
            .expect("the service file has a name"),
    )
}

fn bless() -> bool {
    std::env::var_os("MESHD_BLESS").is_some_and(|v| !v.is_empty() && v != "0")
}

fn check(platform: Platform) {
    let generated = platform
        .service_file_contents(Path::new(SYSTEM_BINARY), platform.default_config(), None)
        .expect("the service file generates");
    let path = checked_in(platform);
    if bless() {
        std::fs::write(&path, &generated)
            .unwrap_or_else(|err| panic!("writing {}: {err}", path.display()));
        return;
    }
    let on_disk = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) => panic!(
            "{} cannot be read ({err}); regenerate it with `{REGENERATE}`",
            path.display()
        ),
    };
    if on_disk != generated {
        let first = on_disk
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| on_disk.lines().count().min(generated.lines().count()));
        let checked = on_disk.lines().nth(first);
        let wanted = generated.lines().nth(first);
        let where_ = if checked == wanted {
            "in line endings or the final newline".to_owned()
        } else {
            format!(
                "first at line {}: checked in {:?}, generated {:?}",
                first + 1,
                checked.unwrap_or("<end of file>"),
                wanted.unwrap_or("<end of file>"),
            )
        };
        panic!(
            "{} differs from what `meshd install` generates ({where_}); \
             regenerate it with `{REGENERATE}` and commit the result",
            path.display(),
        );
    }
}

#[test]
fn the_checked_in_plist_is_what_install_writes() {
    check(Platform::MacOs);
}

#[test]
fn the_checked_in_unit_is_what_install_writes() {
    check(Platform::Linux);
}

/// Only the two generated files and the notes: a renamed service file must
/// not leave a stale copy behind.
#[test]
fn launchd_holds_only_the_service_files_and_the_notes() {
    let mut names: Vec<String> = std::fs::read_dir(launchd_dir())
        .expect("launchd/ is there")
        .map(|entry| {
            entry
                .expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort_unstable();
    let mut expected: Vec<String> = [Platform::MacOs, Platform::Linux]
        .into_iter()
        .map(|p| {
            checked_in(p)
                .file_name()
                .expect("named")
                .to_string_lossy()
                .into_owned()
        })
        .chain(["README.md".to_owned()])
        .collect();
    expected.sort_unstable();
    assert_eq!(names, expected, "files in {}", launchd_dir().display());
}
