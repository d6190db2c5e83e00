//! What docs/ARCHITECTURE.md says of the code's shape is held to the code:
//! the crate table names every workspace crate with exactly the meshd
//! crates its manifest depends on, and inside the daemon only the
//! composition root (`node.rs`) uses the aggregator.

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
