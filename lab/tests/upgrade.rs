//! A rolling upgrade between two builds (issue 40): the previous release,
//! built from its tag in a git worktree (`meshd_lab::release`), and this
//! one, side by side in one mesh. Two nodes start on the previous release:
//! every node and link comes up, this release's nodes raise a
//! `version_skew` notice and nothing is paged; a cut and a kill are judged
//! as in a mesh of one build. Then the old nodes are upgraded one at a time
//! as an operator's reinstall does (stop, swap, start), and one node is
//! downgraded: each step makes no page and no link verdict.
//!
//! The first run builds the previous release (minutes; CI builds it before
//! the suite with `lab previous-release`). Root, git and cargo, Debian's
//! `prometheus-alertmanager` (amtool); skipped with a message without them,
//! except under `CI=true`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::alerting::{ALERT, PageWatch, can_observe, critical_pages, link_page, page, poll};
use common::{expect, link_is, node_blamed, settle};
use meshd_lab::release::{self, PREVIOUS};
use meshd_lab::{Binaries, Lab, Status};

const THIS_RELEASE: &str = env!("CARGO_PKG_VERSION");
/// The rest of a reinstall between the stop and the start (copying the
/// executable, launchd dropping the old job and loading the new one, which
/// `meshd install` polls for every 500 ms): the 2-s restart grace, counted
/// from the old run's streams closing, leaves the new run the rest to
/// start and speak (not measured on a Mac).
const REINSTALL: Duration = Duration::from_millis(500);
/// How long each upgrade step is watched for a page or a link verdict:
/// past the restart grace, a report period's worth of verdicts and the
/// alert rules' read-backs.
const WATCH_STEP: Duration = Duration::from_secs(12);

/// meshd and meshctl of the previous release, built once per target
/// directory.
fn previous_release() -> Binaries {
    let lab = Path::new(env!("CARGO_BIN_EXE_lab"));
    let target = lab
        .parent()
        .and_then(Path::parent)
        .expect("the lab binary is in target/PROFILE/");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let began = Instant::now();
    let found = release::binaries(&workspace, target, &PREVIOUS, None)
        .unwrap_or_else(|err| panic!("release {}: {err}", PREVIOUS.tag));
    eprintln!(
        "release {} at {} ({:.1} s)",
        PREVIOUS.tag,
        found.meshd.display(),
        began.elapsed().as_secs_f64()
    );
    found
}

/// The `version_skew` notice this view holds: its evidence.
fn skew(s: &Status) -> Option<&[String]> {
    s.alarms
        .iter()
        .find(|a| a.kind == "version_skew")
        .map(|a| a.evidence.as_slice())
}

/// This release's view names both releases and who runs each; an info
/// notice, never more.
fn skew_names(s: &Status, old: &[&str], new: &[&str]) -> bool {
    let Some(evidence) = skew(s) else {
        return false;
    };
    let line =
        |version: &str, members: &[&str]| format!("meshd {version} on {}", members.join(", "));
    s.alarms
        .iter()
        .filter(|a| a.kind == "version_skew")
        .all(|a| a.severity == "info")
        && evidence.contains(&line(PREVIOUS.version(), old))
        && evidence.contains(&line(THIS_RELEASE, new))
}

/// Asserts each node runs the release it should.
fn versions(lab: &Lab, old: &[&str]) {
    for id in lab.ids() {
        let view = lab.status(id).unwrap_or_else(|err| panic!("{err}"));
        let expected = if old.contains(&id) {
            PREVIOUS.version()
        } else {
            THIS_RELEASE
        };
        assert_eq!(view.version, expected, "node {id}'s release");
    }
}

/// Replaces node `id`'s meshd with `binary` while Alertmanager and every
/// node's view are watched for [`WATCH_STEP`]: no page, no link blamed on
/// its cable, no node down in any view; then the whole mesh up again.
fn swap_without_a_verdict(lab: &mut Lab, pages: &mut PageWatch, id: &str, binary: &Path) {
    pages.note(&format!("{id} to {}", binary.display()));
    let took = lab.upgrade(id, binary, "info", REINSTALL).expect("upgrade");
    pages.note(&format!("{id} stopped and started again in {took:.1?}"));
    let watched = Instant::now();
    let mut verdicts = Vec::new();
    let mut looks = 0;
    while watched.elapsed() < WATCH_STEP {
        pages.look_exactly(lab, &format!("swapping {id}"), &[]);
        looks += 1;
        for node in lab.ids() {
            let Ok(view) = lab.status(node) else { continue };
            verdicts.extend(
                view.links
                    .iter()
                    .filter(|l| l.blame == "link" && l.state != "up")
                    .map(|l| format!("[{node}] link {}-{} {} {:?}", l.a, l.b, l.state, l.evidence)),
            );
            verdicts.extend(
                view.nodes
                    .iter()
                    .filter(|n| n.state == "down")
                    .map(|n| format!("[{node}] node {} down {:?}", n.id, n.evidence)),
            );
        }
    }
    assert!(
        verdicts.is_empty(),
        "swapping {id}'s meshd made verdicts: {verdicts:#?}"
    );
    pages.note(&format!(
        "swapping {id}: no page in {looks} looks, no verdict in any view"
    ));
    settle(lab, &format!("all up after {id}'s swap"));
}

#[test]
fn a_mesh_of_two_releases_judges_faults_and_upgrades_and_downgrades_without_a_page() {
    if !common::can_run(&["git", "cargo"]) || !can_observe() {
        return;
    }
    let previous = previous_release();
    let current = common::binaries();
    let _serial = meshd_test_lock::exclusive();
    let old = ["c", "d"];
    let mut options = common::suite_options(true);
    options.meshd_by_node = old
        .iter()
        .map(|id| ((*id).to_owned(), previous.meshd.clone()))
        .collect();
    let mut lab = common::up_with(4, &options);
    lab.start_alertmanager().expect("alertmanager");
    poll("Alertmanager to answer", ALERT, || critical_pages(&lab));
    let mut pages = PageWatch::new();

    // A mixed mesh: all up (settled by `up_with`), a notice, no page.
    versions(&lab, &old);
    expect(
        &lab,
        &["a", "b"],
        "a version_skew notice naming who runs what",
        |s| skew_names(s, &old, &["a", "b"]),
    );
    pages.hold_exactly(&lab, "a mixed mesh", &[], Duration::from_secs(3));

    // A cut between the releases: down on its cable in every view, one
    // page, resolved when plugged.
    let cut = link_page("MeshLinkDown", "a", "c");
    lab.pull_cable("a", "c").expect("pull");
    expect(&lab, &lab.ids(), "a-c down on its cable", |s| {
        link_is(s, "a", "c", "down")
    });
    pages.wait_for_exactly(&lab, "MeshLinkDown a-c", &[&cut], &[], ALERT);
    lab.plug_cable("a", "c").expect("plug");
    settle(&lab, "all up after the plug");
    pages.wait_for_exactly(&lab, "the cut resolved", &[], &[&cut], ALERT);

    // A kill of an old node: down, blamed on it, in every other view.
    let death = page("MeshNodeDown", &[("node", "d")]);
    lab.signal_daemon("d", "KILL").expect("kill d");
    expect(
        &lab,
        &["a", "b", "c"],
        "d down with its links blamed on it",
        |s| node_blamed(s, "d"),
    );
    pages.wait_for_exactly(&lab, "MeshNodeDown d", &[&death], &[], ALERT);
    lab.start("d", "info").expect("restart d on its release");
    settle(&lab, "all up after d restarts");
    versions(&lab, &old);
    pages.wait_for_exactly(&lab, "d's death resolved", &[], &[&death], ALERT);

    // The rolling upgrade, one node at a time.
    swap_without_a_verdict(&mut lab, &mut pages, "c", &current.meshd);
    versions(&lab, &["d"]);
    swap_without_a_verdict(&mut lab, &mut pages, "d", &current.meshd);
    versions(&lab, &[]);
    let views = settle(&lab, "all up on one release");
    for view in &views {
        assert!(
            skew(view).is_none(),
            "{} still holds version_skew on one release",
            view.node
        );
    }

    // A downgrade of one node: the same.
    swap_without_a_verdict(&mut lab, &mut pages, "b", &previous.meshd);
    versions(&lab, &["b"]);
    expect(
        &lab,
        &["a", "c", "d"],
        "a version_skew notice about b",
        |s| skew_names(s, &["b"], &["a", "c", "d"]),
    );
    pages.hold_exactly(&lab, "after the downgrade", &[], Duration::from_secs(3));
}
