//! Shared by the lab's end-to-end tests: a fresh lab per test, under a name
//! no other test shares, torn down however the test ends (and swept by the
//! next run if the test process was killed). Every test holds the
//! machine-wide test lock (`meshd_test_lock::exclusive`) while its labs run:
//! labs share the host's two cores, and one lab's storms and hogs must not
//! be judged by another's verdicts.
#![allow(dead_code)]

pub mod alerting;

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use meshd_lab::{Binaries, Lab, Options, Plan, Status};

/// Generous bounds for verdicts that take about a second on an idle host:
/// the CI box has two cores shared with compilers. Never a speed check.
pub const VERDICT: Duration = Duration::from_secs(45);
/// Recovery includes the 10 s loss window and the 5 s degraded hold.
pub const RECOVERY: Duration = Duration::from_secs(90);

/// The suite injects faults back to back within a minute or two, so the
/// flap window is shortened from its 60 s default: a link that swung a few
/// times under a storm is judged again 10 s after the storm, instead of
/// staying `flapping` for the rest of the test.
const SUITE_CONFIG: &str = "[thresholds]\nflap_window = \"10s\"\n";

/// Whether the lab can run; under `CI=true` it must, so a missing
/// prerequisite fails the test instead of skipping it.
pub fn can_run(tools: &[&str]) -> bool {
    let mut missing: Vec<String> = meshd_lab::missing_prerequisite().into_iter().collect();
    for tool in tools {
        let found = std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()));
        if !found {
            missing.push(format!("`{tool}` is not installed"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let reason = missing.join(", ");
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "the lab must run under CI=true, but: {reason}"
    );
    eprintln!("skipped: {reason}");
    false
}

/// meshd and meshctl from the same build as this test: a workspace build
/// (`cargo nextest run --workspace`, `cargo test --workspace`) puts them
/// beside the `lab` binary cargo built for this package.
pub fn binaries() -> Binaries {
    let dir = Path::new(env!("CARGO_BIN_EXE_lab"))
        .parent()
        .expect("the lab binary is in a directory");
    Binaries::find(dir).unwrap_or_else(|err| panic!("{err}"))
}

/// A lab name no other lab shares: the pid tells test processes apart,
/// the counter the labs of one process (`cargo test` runs a binary's tests
/// as threads of one process; a test may run two labs).
pub fn unique_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("t{}x{n}", std::process::id())
}

/// A 4-node lab with every node seeing the whole mesh up.
pub fn four_nodes(alertmanager: bool) -> Lab {
    up(4, alertmanager)
}

/// A lab of `nodes` nodes, each seeing the whole mesh up.
pub fn up(nodes: usize, alertmanager: bool) -> Lab {
    up_with(nodes, &suite_options(alertmanager))
}

/// What every node of the suite's labs runs with.
pub fn suite_options(alertmanager: bool) -> Options {
    Options {
        alertmanager,
        extra_config: SUITE_CONFIG.to_owned(),
        ..Options::default()
    }
}

/// A lab of `nodes` nodes run with `options`, each seeing the whole mesh up.
pub fn up_with(nodes: usize, options: &Options) -> Lab {
    let plan = Plan::new(&unique_name(), nodes).expect("plan");
    let lab = Lab::up(plan, binaries(), options).unwrap_or_else(|err| panic!("lab up: {err}"));
    lab.owned_by_this_process().expect("owner file");
    settle(&lab, &format!("{nodes} nodes and every link up"));
    lab
}

/// Waits until every node sees every node and link up.
pub fn settle(lab: &Lab, what: &str) -> Vec<Status> {
    lab.wait_all(what, RECOVERY, Status::all_up)
        .unwrap_or_else(|err| panic!("{err}"))
}

/// Waits until every node in `nodes` sees what `holds` says.
pub fn expect(
    lab: &Lab,
    nodes: &[&str],
    what: &str,
    holds: impl Fn(&Status) -> bool,
) -> Vec<Status> {
    lab.wait_for(nodes, what, VERDICT, holds)
        .unwrap_or_else(|err| panic!("{err}"))
}

/// The link x-y is `state`, blamed on the link itself.
pub fn link_is(s: &Status, x: &str, y: &str, state: &str) -> bool {
    s.link(x, y)
        .is_some_and(|l| l.state == state && l.blame == "link")
}

/// Node `id` is down in this view and every link to it is blamed on it,
/// not on the cable; every other node is up.
pub fn node_blamed(s: &Status, id: &str) -> bool {
    s.quorum.has_quorum
        && s.nodes
            .iter()
            .all(|n| n.state == if n.id == id { "down" } else { "up" })
        && s.links
            .iter()
            .filter(|l| l.a == id || l.b == id)
            .all(|l| l.state == "down" && l.blame == "node" && l.blamed_node.as_deref() == Some(id))
}

/// No link is down and blamed on a cable, and every node is up: what a
/// fault that breaks no cable and no node must leave. (Degraded links are
/// allowed: on a saturated shared host RTTs do rise.)
pub fn no_broken_cable_or_node(s: &Status) -> bool {
    s.nodes.iter().all(|n| n.state == "up")
        && s.links
            .iter()
            .all(|l| !(l.state == "down" && l.blame == "link"))
}
