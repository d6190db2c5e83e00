//! Every test binary that takes the lock is in nextest's `mesh` group: one
//! left out waits on the lock inside a process slot of the two a CI box
//! has, and the suite's wall time grows by every minute it waits (CI once
//! lost a slot to four such binaries).

use std::path::{Path, PathBuf};

/// The call that takes the lock, spelt in two halves so that this file
/// does not read as taking it.
const LOCK_CALL: &str = concat!("meshd_test_lock::", "exclusive()");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The filters of the overrides that put tests in the `mesh` group.
fn mesh_group_filters() -> Vec<String> {
    let config = read(&root().join(".config/nextest.toml"));
    config
        .split("[[profile.default.overrides]]")
        .skip(1)
        .filter(|block| block.contains("test-group = 'mesh'"))
        .filter_map(|block| {
            let line = block.lines().find(|l| l.starts_with("filter = '"))?;
            Some(line["filter = '".len()..].trim_end_matches('\'').to_owned())
        })
        .collect()
}

/// Whether `filter` selects integration test binary `binary` of `package`:
/// a clause starting `package(NAME)` that names the binary, or takes every
/// test binary (`kind(test)`) less the ones it negates.
fn selects(filter: &str, package: &str, binary: &str) -> bool {
    let named = format!("binary({binary})");
    filter
        .split("package(")
        .skip(1)
        .filter(|clause| clause.starts_with(&format!("{package})")))
        .any(|clause| {
            let (taken, negated) = clause.split_once("!(").unwrap_or((clause, ""));
            taken.contains(&named) || (taken.contains("kind(test)") && !negated.contains(&named))
        })
}

/// The package name in a member's manifest.
fn package_name(member: &Path) -> String {
    read(&member.join("Cargo.toml"))
        .lines()
        .find_map(|l| l.strip_prefix("name = \""))
        .map(|rest| rest.trim_end_matches('"').to_owned())
        .unwrap_or_else(|| panic!("{}: no package name", member.display()))
}

#[test]
fn every_test_binary_taking_the_lock_is_in_the_mesh_group() {
    let filters = mesh_group_filters();
    assert!(
        !filters.is_empty(),
        "no override puts tests in the mesh group"
    );
    let mut takers = Vec::new();
    for entry in std::fs::read_dir(root()).expect("the workspace") {
        let member = entry.expect("an entry").path();
        let tests = member.join("tests");
        let Ok(files) = std::fs::read_dir(&tests) else {
            continue;
        };
        for file in files {
            let path = file.expect("an entry").path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            if !read(&path).contains(LOCK_CALL) {
                continue;
            }
            let stem = path
                .file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            takers.push((package_name(&member), stem));
        }
    }
    assert!(
        takers
            .iter()
            .any(|(p, b)| p == "meshd-lab" && b == "faults"),
        "the scan found no lab test: {takers:?}"
    );
    let outside: Vec<String> = takers
        .iter()
        .filter(|(package, binary)| !filters.iter().any(|f| selects(f, package, binary)))
        .map(|(package, binary)| format!("{package}::{binary}"))
        .collect();
    assert!(
        outside.is_empty(),
        "these take the test lock but are not in nextest's mesh group \
         (.config/nextest.toml): {outside:?}"
    );
}

#[test]
fn the_filter_reader_tells_a_negated_binary_from_a_taken_one() {
    let filter = "(package(meshd) & (binary(mesh) | binary(page))) | \
                  (package(meshd-lab) & kind(test) & !(binary(vm_verbs)))";
    assert!(selects(filter, "meshd", "page"));
    assert!(!selects(filter, "meshd", "story"));
    assert!(selects(filter, "meshd-lab", "faults"));
    assert!(!selects(filter, "meshd-lab", "vm_verbs"));
    assert!(!selects(filter, "meshctl", "page"));
}
