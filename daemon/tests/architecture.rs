//! What docs/ARCHITECTURE.md says of the code's shape is held to the code:
//! the crate table names every workspace crate with exactly the meshd
//! crates its manifest depends on, and inside the daemon only the
//! composition root (`node.rs`) uses the aggregator.
//!
//! And the test suite's shape: every test binary that takes the
//! machine-wide test lock is in nextest's `mesh` group. One left out waits
//! on the lock inside a process slot of the two a CI box has, and the
//! suite's wall time grows by every minute it waits (CI once lost a slot
//! to four such binaries).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The workspace's member directories, from its manifest.
fn members() -> Vec<String> {
    let manifest = read(&root().join("Cargo.toml"));
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// A manifest's package name and the workspace crates under its
/// `[dependencies]`.
fn package(dir: &str) -> (String, BTreeSet<String>) {
    let manifest = read(&root().join(dir).join("Cargo.toml"));
    let mut name = None;
    let mut section = String::new();
    let mut depends = BTreeSet::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        if section == "[package]"
            && let Some(value) = line.strip_prefix("name = ")
        {
            name = Some(value.trim_matches('"').to_owned());
        }
        if section == "[dependencies]"
            && let Some(dependency) = line.split(['.', ' ', '=']).next()
            && (dependency.starts_with("meshd") || dependency == "meshctl")
        {
            depends.insert(dependency.to_owned());
        }
    }
    (name.expect("a package name"), depends)
}

/// The crate table of ARCHITECTURE.md: each crate's directory and the
/// crates it says it depends on (the backquoted names of the last column).
fn documented() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let doc = read(&root().join("docs/ARCHITECTURE.md"));
    let section = doc
        .split("\n## Crates\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Crates section");
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            // "", crate, directory, what, depends on, "".
            let [_, name, dir, _, depends, ..] = cells.as_slice() else {
                return None;
            };
            let name = ticked(name).into_iter().next()?;
            let dir = ticked(dir).into_iter().next()?;
            let depends = ticked(depends)
                .into_iter()
                .filter(|d| d.starts_with("meshd") || d == "meshctl")
                .collect();
            Some((name, (dir.trim_end_matches('/').to_owned(), depends)))
        })
        .filter(|(name, _)| name.starts_with("meshd") || name == "meshctl")
        .collect()
}

#[test]
fn the_crate_table_names_every_crate_and_what_it_depends_on() {
    let documented = documented();
    let members = members();
    assert!(members.len() >= 8, "{members:?}");
    for dir in &members {
        let (name, depends) = package(dir);
        let Some((documented_dir, documented_depends)) = documented.get(&name) else {
            panic!("{name} ({dir}/) is not in ARCHITECTURE.md's crate table");
        };
        assert_eq!(documented_dir, dir, "{name}'s directory");
        assert_eq!(
            documented_depends, &depends,
            "{name}: ARCHITECTURE.md says it depends on {documented_depends:?}, its manifest on {depends:?}"
        );
    }
    assert_eq!(
        documented.len(),
        members.len(),
        "the table names a crate the workspace does not have: {:?}",
        documented.keys().collect::<Vec<_>>()
    );
}

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn only_the_composition_root_uses_the_aggregator() {
    let src = root().join("daemon/src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let users: Vec<String> = files
        .iter()
        .filter(|f| !f.ends_with("aggregator.rs") && !f.ends_with("lib.rs"))
        .filter(|f| {
            read(f).lines().any(|line| {
                let code = line.split("//").next().unwrap_or_default();
                code.contains("crate::aggregator") || code.contains("meshd::aggregator")
            })
        })
        .map(|f| f.strip_prefix(&src).unwrap_or(f).display().to_string())
        .collect();
    assert_eq!(users, vec!["node.rs".to_owned()]);
}

/// The call that takes the lock, spelt in two halves so that this file
/// does not read as taking it.
const LOCK_CALL: &str = concat!("meshd_test_lock::", "exclusive()");

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

#[test]
fn every_test_binary_taking_the_lock_is_in_the_mesh_group() {
    let filters = mesh_group_filters();
    assert!(
        !filters.is_empty(),
        "no override puts tests in the mesh group"
    );
    let mut takers = Vec::new();
    for member in members() {
        let Ok(files) = std::fs::read_dir(root().join(&member).join("tests")) else {
            continue;
        };
        let (package, _) = package(&member);
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
            takers.push((package.clone(), stem));
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
