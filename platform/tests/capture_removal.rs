//! A missing capture is unknown, never a verdict.
//!
//! Every scenario under tests/scenarios/ is replayed as `meshctl doctor
//! --from` replays it, with every combination of its files removed (a file
//! that is not there is a command that failed or was never captured). For
//! every set of removed files and every further file, the property is:
//!
//! > removing that one more capture leaves each check's status as it was,
//! > or makes it `skipped`.
//!
//! So a capture's absence never turns a skipped (unknown) check into a
//! pass, a warn or a fail, and never changes one verdict into another:
//! what a check says without the capture it already said, or it says that
//! it cannot tell. A check that depended on the capture must become
//! skipped; one that did not must not move.
//!
//! It cannot hold vacuously: the test also requires that the scenarios
//! decide checks to begin with, that removals do turn decided checks into
//! skipped ones (with named examples), and that every file of every
//! scenario was removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use meshd_domain::NodeId;
use meshd_domain::facts::{CheckStatus, NodeFacts};
use meshd_domain::fixtures::id;
use meshd_mesh::checks::diagnose;
use meshd_mesh::models::ModelTable;
use meshd_platform::bundle::replay_facts;

const SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scenarios");

/// Scenarios with more files are replayed with each single file removed
/// only; every scenario today has at most this many.
const MAX_FILES_FOR_EVERY_COMBINATION: usize = 8;

/// A check: its name and the node it is about (`None` for the mesh).
type Key = (String, Option<String>);

/// What removing one more capture may do to a check.
fn allowed(before: CheckStatus, after: CheckStatus) -> bool {
    after == before || after == CheckStatus::Skipped
}

/// A scenario: its directory and its files, relative to it.
struct Scenario {
    name: String,
    dir: PathBuf,
    files: Vec<PathBuf>,
    /// `mesh-*`: a bundle per node subdirectory.
    nodes: Vec<String>,
}

fn scenarios() -> Vec<Scenario> {
    let mut found: Vec<Scenario> = std::fs::read_dir(SCENARIOS)
        .expect("scenarios")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .map(|dir| {
            let mut nodes: Vec<String> = std::fs::read_dir(&dir)
                .expect("scenario")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.is_dir())
                .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
                .collect();
            nodes.sort();
            let mut files = Vec::new();
            let bundles: Vec<PathBuf> = if nodes.is_empty() {
                vec![PathBuf::new()]
            } else {
                nodes.iter().map(PathBuf::from).collect()
            };
            for bundle in bundles {
                for entry in std::fs::read_dir(dir.join(&bundle)).expect("bundle") {
                    let entry = entry.expect("entry");
                    if entry.path().is_file() {
                        files.push(bundle.join(entry.file_name()));
                    }
                }
            }
            files.sort();
            Scenario {
                name: dir
                    .file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned(),
                dir,
                files,
                nodes,
            }
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

impl Scenario {
    /// Every check's status with the files in `removed` (a bit set over
    /// `files`) left out.
    fn replay_without(&self, removed: u32) -> BTreeMap<Key, CheckStatus> {
        let copy = tempfile::tempdir().expect("tempdir");
        for node in &self.nodes {
            std::fs::create_dir(copy.path().join(node)).expect("mkdir");
        }
        for (i, file) in self.files.iter().enumerate() {
            if removed & (1 << i) == 0 {
                std::fs::copy(self.dir.join(file), copy.path().join(file)).expect("copy");
            }
        }
        let facts: BTreeMap<NodeId, NodeFacts> = if self.nodes.is_empty() {
            BTreeMap::from([(id("node"), replay(copy.path()))])
        } else {
            self.nodes
                .iter()
                .map(|node| (id(node), replay(&copy.path().join(node))))
                .collect()
        };
        diagnose(&facts, &ModelTable::builtin())
            .all_checks()
            .map(|r| {
                let key = (r.name.clone(), r.node.as_ref().map(ToString::to_string));
                (key, r.status)
            })
            .collect()
    }

    fn describe(&self, removed: u32) -> String {
        let names: Vec<String> = self
            .files
            .iter()
            .enumerate()
            .filter(|(i, _)| removed & (1 << i) != 0)
            .map(|(_, f)| f.display().to_string())
            .collect();
        format!("{} without [{}]", self.name, names.join(", "))
    }
}

fn replay(dir: &Path) -> NodeFacts {
    replay_facts(dir).expect("bundle directory")
}

/// One scenario's findings.
#[derive(Default)]
struct Findings {
    violations: Vec<String>,
    /// (removed set, added file, check) where a decided check became
    /// skipped.
    became_unknown: Vec<(u32, usize, Key, CheckStatus)>,
    decided_at_first: usize,
    removals: usize,
}

fn explore(scenario: &Scenario) -> Findings {
    let n = scenario.files.len();
    let every_combination = n <= MAX_FILES_FOR_EVERY_COMBINATION;
    let sets: Vec<u32> = if every_combination {
        (0..1u32 << n).collect()
    } else {
        vec![0]
    };
    let results: BTreeMap<u32, BTreeMap<Key, CheckStatus>> = sets
        .iter()
        .chain((0..n).map(|i| 1u32 << i).collect::<Vec<_>>().iter())
        .map(|&set| (set, scenario.replay_without(set)))
        .collect();
    let mut findings = Findings {
        decided_at_first: results[&0]
            .values()
            .filter(|s| **s != CheckStatus::Skipped)
            .count(),
        ..Findings::default()
    };
    for &set in &sets {
        for file in (0..n).filter(|i| set & (1 << i) == 0) {
            let before = &results[&set];
            let after = &results[&(set | 1 << file)];
            findings.removals += 1;
            assert_eq!(
                before.keys().collect::<Vec<_>>(),
                after.keys().collect::<Vec<_>>(),
                "{}: the same checks run",
                scenario.describe(set | 1 << file)
            );
            for (key, &was) in before {
                let now = after[key];
                if !allowed(was, now) {
                    findings.violations.push(format!(
                        "{}: removing {} turned {key:?} from {was} into {now}",
                        scenario.describe(set),
                        scenario.files[file].display()
                    ));
                } else if was != now {
                    findings.became_unknown.push((set, file, key.clone(), was));
                }
            }
        }
    }
    findings
}

#[test]
fn a_removed_capture_leaves_every_check_as_it_was_or_skipped() {
    let scenarios = scenarios();
    assert!(scenarios.len() >= 14, "{} scenarios", scenarios.len());
    let mut violations = Vec::new();
    let mut decided = 0;
    let mut became_unknown = 0;
    let mut examples: BTreeMap<(String, String, Key), CheckStatus> = BTreeMap::new();
    for scenario in &scenarios {
        assert!(
            scenario.files.len() <= MAX_FILES_FOR_EVERY_COMBINATION,
            "{} has {} files: raise the bound (every combination is cheap) or accept \
             single removals for it",
            scenario.name,
            scenario.files.len()
        );
        let findings = explore(scenario);
        assert_eq!(
            findings.removals,
            scenario.files.len() << scenario.files.len().saturating_sub(1),
            "{}: every file removed from every combination",
            scenario.name
        );
        violations.extend(findings.violations);
        decided += findings.decided_at_first;
        became_unknown += findings.became_unknown.len();
        for (set, file, key, was) in findings.became_unknown {
            if set == 0 {
                examples.insert(
                    (
                        scenario.name.clone(),
                        scenario.files[file].display().to_string(),
                        key,
                    ),
                    was,
                );
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));

    // Not vacuous: the scenarios decide checks, and taking captures away
    // does make decided checks unknown, these among them.
    eprintln!("decided at first: {decided}; became skipped: {became_unknown}");
    assert!(decided >= 20, "only {decided} checks decided");
    assert!(
        became_unknown >= 1000,
        "only {became_unknown} became unknown"
    );
    let key = |name: &str, node: Option<&str>| (name.to_owned(), node.map(str::to_owned));
    for (scenario, file, check, was) in [
        (
            "mac-mini-m4-pro-tn3205-bridge-active",
            "ifconfig_a.txt",
            key("thunderbolt_bridge_inactive", Some("node")),
            CheckStatus::Fail,
        ),
        (
            "mac-mini-m4-pro-tn3205-bridge-active",
            "ibv_devinfo_v.txt",
            key("rdma_enabled", Some("node")),
            CheckStatus::Pass,
        ),
        (
            "macbook-m5-max-rdma-disabled",
            "ibv_devices.txt",
            key("rdma_enabled", Some("node")),
            CheckStatus::Fail,
        ),
        (
            "tb4-mac-rdma-devices-on-40g-ports",
            "system_profiler_SPThunderboltDataType.json",
            key("rdma_enabled", Some("node")),
            CheckStatus::Fail,
        ),
        (
            "mesh-m5-max-pair",
            "rdma-on/system_profiler_SPThunderboltDataType.json",
            key("full_mesh_cabled", None),
            CheckStatus::Pass,
        ),
        // rdma-off's model is known only as rdma-on's report shows it.
        (
            "mesh-m5-max-pair",
            "rdma-on/system_profiler_SPThunderboltDataType.json",
            key("port_usable", Some("rdma-off")),
            CheckStatus::Pass,
        ),
    ] {
        assert_eq!(
            examples.get(&(scenario.to_owned(), file.to_owned(), check.clone())),
            Some(&was),
            "{scenario} without {file}: {check:?} should go from {was} to skipped"
        );
    }
}

#[test]
fn the_rule_allows_only_keeping_a_status_or_becoming_skipped() {
    use CheckStatus::{Fail, Pass, Skipped, Warn};
    let all = [Pass, Warn, Fail, Skipped];
    for before in all {
        for after in all {
            let expected = after == before || after == Skipped;
            assert_eq!(allowed(before, after), expected, "{before} -> {after}");
        }
    }
    // The transitions a guessed fact would make are all refused.
    for guessed in [Pass, Warn, Fail] {
        assert!(!allowed(Skipped, guessed));
    }
    assert!(!allowed(Pass, Fail) && !allowed(Fail, Pass) && !allowed(Warn, Fail));
}
