//! The model stays free of I/O by construction: its clippy.toml forbids
//! clock, file, socket and process calls, and this test keeps runtimes and
//! I/O crates out of everything it is built from, not only out of its own
//! manifest. The walk follows the model's normal dependencies through the
//! workspace's manifests and the lock file, and every crate it reaches must
//! be on a short list of pure ones: a new dependency anywhere below the
//! model (a runtime pulled in through the protocol crate, say) fails here
//! by name.

use std::collections::{BTreeMap, BTreeSet};

/// Every crate the model may be built from, each pure: data, parsing and
/// formatting, derive macros. Nothing here opens a file or a socket, reads
/// a clock, spawns a thread or a process, or runs an event loop.
const ALLOWED: &[&str] = &[
    // meshd's own pure crates.
    "meshd-domain",
    "meshd-mesh",
    // Durations and times as text.
    "humantime",
    // Error types.
    "thiserror",
    "thiserror-impl",
    // Serialisation: the facts, the Mac model table (TOML), hostfiles (JSON).
    "serde",
    "serde_core",
    "serde_derive",
    "serde_json",
    "serde_spanned",
    "itoa",
    "memchr",
    "zmij",
    "ryu",
    "toml",
    "toml_datetime",
    "toml_parser",
    "toml_writer",
    "winnow",
    "indexmap",
    "equivalent",
    "hashbrown",
    "foldhash",
    // The derive macros' own dependencies (build time only).
    "proc-macro2",
    "quote",
    "syn",
    "unicode-ident",
];

const LOCK: &str = include_str!("../../Cargo.lock");

/// The workspace's own crates, by package name: their manifests say which
/// of their dependencies are normal ones (the lock file mixes in their dev
/// dependencies).
const WORKSPACE: &[(&str, &str)] = &[
    ("meshd-model", include_str!("../Cargo.toml")),
    ("meshd-domain", include_str!("../../domain/Cargo.toml")),
    ("meshd-mesh", include_str!("../../mesh/Cargo.toml")),
    ("meshd-proto", include_str!("../../proto/Cargo.toml")),
    ("meshd-platform", include_str!("../../platform/Cargo.toml")),
];

/// The names under `[dependencies]` of a manifest.
fn normal_dependencies(manifest: &str) -> Vec<String> {
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies
            && let Some((name, _)) = line.split_once(['.', ' ', '='])
            && !name.is_empty()
            && !name.starts_with('#')
        {
            found.push(name.to_owned());
        }
    }
    found
}

/// Each package of the lock file with the names of its dependencies (a
/// registry crate's build dependencies included, which only makes the walk
/// stricter).
fn locked_packages() -> BTreeMap<String, Vec<String>> {
    let mut packages = BTreeMap::new();
    for block in LOCK.split("[[package]]").skip(1) {
        let mut name = None;
        let mut dependencies = Vec::new();
        let mut in_list = false;
        for line in block.lines().map(str::trim) {
            if let Some(value) = line.strip_prefix("name = ") {
                name = Some(value.trim_matches('"').to_owned());
            } else if line.starts_with("dependencies = [") {
                in_list = true;
            } else if in_list && line == "]" {
                in_list = false;
            } else if in_list {
                // `"serde"` or `"syn 2.0.100"`: the name is the first word.
                let entry = line.trim_matches([',', '"']);
                if let Some(dependency) = entry.split_whitespace().next() {
                    dependencies.push(dependency.to_owned());
                }
            }
        }
        if let Some(name) = name {
            packages.entry(name).or_insert(dependencies);
        }
    }
    packages
}

/// Every crate the model is built from, by the path that first reached it.
fn reachable() -> BTreeMap<String, String> {
    let locked = locked_packages();
    let workspace: BTreeMap<&str, &str> = WORKSPACE.iter().copied().collect();
    let mut reached = BTreeMap::new();
    let mut queue = vec![("meshd-model".to_owned(), "meshd-model".to_owned())];
    while let Some((name, path)) = queue.pop() {
        let dependencies = match workspace.get(name.as_str()) {
            Some(manifest) => normal_dependencies(manifest),
            None if name.starts_with("meshd-") => {
                panic!("{name} is a workspace crate this test does not know: add its manifest")
            }
            None => locked
                .get(&name)
                .unwrap_or_else(|| panic!("{name} is not in Cargo.lock"))
                .clone(),
        };
        for dependency in dependencies {
            if !reached.contains_key(&dependency) {
                let through = format!("{path} -> {dependency}");
                reached.insert(dependency.clone(), through.clone());
                queue.push((dependency, through));
            }
        }
    }
    reached
}

#[test]
fn the_model_is_built_from_pure_crates_only() {
    let reached = reachable();
    assert!(
        reached.contains_key("meshd-domain") && reached.contains_key("serde"),
        "the walk found too little: {reached:?}"
    );
    let impure: BTreeSet<String> = reached
        .iter()
        .filter(|(name, _)| !ALLOWED.contains(&name.as_str()))
        .map(|(_, path)| path.clone())
        .collect();
    assert!(
        impure.is_empty(),
        "the model must be built from pure crates only (decisions take time and data as \
         arguments); reached: {impure:?}. A crate that is pure (no files, sockets, clock, \
         threads or processes) can be added to ALLOWED with the reason."
    );
}

#[test]
fn the_walk_catches_a_runtime_below_the_model() {
    // The protocol crate is built on tonic and tokio: were the model to
    // depend on it, the walk must see them.
    let locked = locked_packages();
    let workspace: BTreeMap<&str, &str> = WORKSPACE.iter().copied().collect();
    let proto = normal_dependencies(workspace["meshd-proto"]);
    assert!(proto.iter().any(|d| d == "tonic"), "{proto:?}");
    let tonic = &locked["tonic"];
    assert!(
        tonic.iter().any(|d| d == "tokio"),
        "tonic's dependencies in the lock file: {tonic:?}"
    );
    for crate_with_io in ["tonic", "tokio", "libloading", "rustix", "tempfile", "tar"] {
        assert!(!ALLOWED.contains(&crate_with_io), "{crate_with_io}");
    }
}
