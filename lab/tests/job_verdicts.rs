//! meshd's verdicts on a job in the lab (issue #33): emulated JACCL ranks on
//! a, b and c (`lab job start`), found by each node's meshd by MLX's launch
//! variables, and judged across the mesh. A rank stopped or killed on a
//! healthy node is one `job_hung` about that node on every node, one
//! MeshJobHung page at a real Alertmanager, resolved when the rank
//! continues; a cable pulled under the running job is `job_hung` blaming
//! that cable beside the link's own page. How soon is noted on the
//! timeline and measured by `lab-bench job`; the waits here are bounds,
//! never speed checks.
//!
//! Root, Debian's `prometheus-alertmanager` (amtool); skipped with a
//! message without them, except under `CI=true`.

mod common;

use std::time::{Duration, Instant};

use common::alerting::{
    ALERT, Labels, PageWatch, can_observe, critical_pages, link_page, page, poll,
};
use common::{VERDICT, link_is};
use meshd_lab::Lab;
use meshd_lab::job::{DEFAULT_JOB, JobRecord, JobSpec};
use meshd_lab::rank::Mode;
use meshd_lab::status::Status;

/// A bound for the ranks to settle on a shared host; never a speed check.
const SETTLE: Duration = Duration::from_secs(30);

fn observed_lab() -> Lab {
    let mut lab = common::up(3, true);
    lab.start_alertmanager().expect("alertmanager");
    poll("Alertmanager to answer", ALERT, || critical_pages(&lab));
    lab
}

fn job_page(node: &str) -> Labels {
    page("MeshJobHung", &[("node", node)])
}

/// The job's `job_hung` alarm this view holds, if any: the alarm's node and
/// summary.
fn hung(s: &Status) -> Option<(&str, &str)> {
    s.alarms
        .iter()
        .find(|a| a.kind == "job_hung")
        .map(|a| (a.node.as_str(), a.summary.as_str()))
}

/// Every node lists the job with its three ranks live and no alarm.
fn running(s: &Status) -> bool {
    s.jobs.len() == 1
        && s.jobs[0].ranks.len() == 3
        && s.jobs[0].ranks.iter().all(|r| r.condition == "live")
        && hung(s).is_none()
}

/// Starts the emulated job on a, b and c and waits until its ranks make
/// progress and every node lists it running.
fn start_job(lab: &mut Lab) -> JobRecord {
    let job = lab
        .start_job(&JobSpec::new(env!("CARGO_BIN_EXE_lab")))
        .expect("start the job");
    lab.wait_job(DEFAULT_JOB, Mode::Paced, SETTLE)
        .expect("every rank makes progress");
    lab.wait_all("the job with three live ranks", VERDICT, running)
        .unwrap_or_else(|err| panic!("{err}"));
    job
}

/// Waits until every node holds `job_hung` about `node` whose summary says
/// `says`, and notes how long that took after `what` (a figure for the
/// timeline; `lab-bench job` measures it, no test asserts a speed).
fn hung_everywhere(
    lab: &Lab,
    pages: &mut PageWatch,
    node: &str,
    says: &str,
    what: &str,
    since: Instant,
) {
    lab.wait_all(&format!("job_hung about {node}: {says}"), VERDICT, |s| {
        hung(s).is_some_and(|(n, summary)| n == node && summary.contains(says))
    })
    .unwrap_or_else(|err| panic!("{err}"));
    pages.note(&format!(
        "job_hung on every node {:.1} s after {what}",
        since.elapsed().as_secs_f64()
    ));
}

#[test]
fn a_stopped_or_killed_rank_is_one_job_hung_page_naming_it_on_every_node() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = observed_lab();
    let mut pages = PageWatch::new();
    let job = start_job(&mut lab);
    pages.hold_exactly(&lab, "a running job", &[], Duration::from_secs(3));
    let b_pid = job.rank_on("b").expect("b's rank").pid;

    pages.note("SIGSTOP b's rank");
    let stopped = Instant::now();
    lab.stop_rank(DEFAULT_JOB, "b").expect("SIGSTOP");
    hung_everywhere(
        &lab,
        &mut pages,
        "b",
        &format!("rank 1 (pid {b_pid}) on b is stopped"),
        "the stop",
        stopped,
    );
    let statuses = lab.wait_all("the cable a-b named", VERDICT, |s| {
        hung(s).is_some_and(|(_, summary)| summary.contains("a/mesh-b ↔ b/mesh-a"))
            && s.jobs[0]
                .ranks
                .iter()
                .any(|r| r.node == "b" && r.condition == "stopped")
    });
    statuses.unwrap_or_else(|err| panic!("{err}"));
    let stop_page = job_page("b");
    pages.wait_for_exactly(&lab, "one MeshJobHung about b", &[&stop_page], &[], ALERT);
    pages.hold_exactly(
        &lab,
        "the stopped rank",
        &[&stop_page],
        Duration::from_secs(5),
    );
    pages.never_resolved(&lab, "the stopped rank", &stop_page);

    pages.note("SIGCONT b's rank");
    lab.cont_rank(DEFAULT_JOB, "b").expect("SIGCONT");
    lab.wait_all("the job running again", VERDICT, running)
        .unwrap_or_else(|err| panic!("{err}"));
    pages.wait_for_exactly(&lab, "resolved after SIGCONT", &[], &[&stop_page], ALERT);

    pages.note("SIGKILL c's rank");
    let c_pid = job.rank_on("c").expect("c's rank").pid;
    let killed = Instant::now();
    lab.kill_rank(DEFAULT_JOB, "c").expect("SIGKILL");
    hung_everywhere(
        &lab,
        &mut pages,
        "c",
        &format!("rank 2 (pid {c_pid}) on c exited or was killed"),
        "the kill",
        killed,
    );
    let kill_page = job_page("c");
    pages.wait_for_exactly(&lab, "one MeshJobHung about c", &[&kill_page], &[], ALERT);

    // The job ends: its remaining ranks stop, and with them the page.
    pages.note("stop the job");
    lab.stop_job(DEFAULT_JOB).expect("stop the job");
    lab.wait_all("no job", VERDICT, |s| {
        s.jobs.is_empty() && hung(s).is_none()
    })
    .unwrap_or_else(|err| panic!("{err}"));
    pages.wait_for_exactly(
        &lab,
        "resolved when the job ended",
        &[],
        &[&kill_page],
        ALERT,
    );
}

#[test]
fn a_cable_pulled_under_a_running_job_is_job_hung_blaming_that_cable() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = observed_lab();
    let mut pages = PageWatch::new();
    start_job(&mut lab);

    pages.note("pull a-b");
    let pulled = Instant::now();
    lab.pull_cable("a", "b").expect("pull");
    lab.wait_all("a-b down and the job hung on it", VERDICT, |s| {
        link_is(s, "a", "b", "down")
            && hung(s).is_some_and(|(node, summary)| {
                node == "a" && summary.contains("the link a ↔ b between its ranks is down")
            })
    })
    .unwrap_or_else(|err| panic!("{err}"));
    let took = pulled.elapsed();
    pages.note(&format!(
        "job_hung on every node {:.1} s after the pull",
        took.as_secs_f64()
    ));
    let down = link_page("MeshLinkDown", "a", "b");
    let job = job_page("a");
    pages.wait_for_exactly(
        &lab,
        "the link's page and the job's",
        &[&down, &job],
        &[],
        ALERT,
    );

    pages.note("plug a-b");
    lab.plug_cable("a", "b").expect("plug");
    lab.wait_all("the job running again", VERDICT, running)
        .unwrap_or_else(|err| panic!("{err}"));
    pages.wait_for_exactly(&lab, "both resolved", &[], &[&down, &job], ALERT);
}

/// A job's traffic between a and b sent over the management network (a
/// /32 route to each other's cable address via `mgmt0`, as a fallback
/// route takes it after a crash) while the cable stays up: `job_off_mesh`
/// on a and on b, each naming `mgmt0` and its cable; gone
/// when the routes are removed.
#[test]
fn traffic_routed_off_its_cable_is_job_off_mesh_naming_the_interface() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = observed_lab();
    let mut pages = PageWatch::new();
    start_job(&mut lab);

    let off = |s: &Status, node: &str, peer: &str, cable: &str| {
        s.alarms.iter().any(|a| {
            a.kind == "job_off_mesh"
                && a.node == node
                && a.subject == peer
                && a.summary
                    .contains(&format!("leaves by mgmt0, not its cable on {cable}"))
        })
    };
    pages.note("route a-b's job traffic over mgmt0");
    let routed = Instant::now();
    lab.route_via_mgmt("a", "b").expect("routes via mgmt0");
    lab.wait_all("job_off_mesh on a and b", VERDICT, |s| {
        off(s, "a", "b", "mesh-b")
            && off(s, "b", "a", "mesh-a")
            && s.link("a", "b").is_some_and(|l| l.state == "up")
    })
    .unwrap_or_else(|err| panic!("{err}"));
    let took = routed.elapsed();
    pages.note(&format!(
        "job_off_mesh on every node {:.1} s after the routes",
        took.as_secs_f64()
    ));
    let (on_a, on_b) = (
        page("MeshJobOffMesh", &[("node", "a")]),
        page("MeshJobOffMesh", &[("node", "b")]),
    );
    pages.wait_for_exactly(
        &lab,
        "MeshJobOffMesh on a and b",
        &[&on_a, &on_b],
        &[],
        ALERT,
    );

    pages.note("routes back to the cable");
    lab.route_via_cable("a", "b").expect("routes via the cable");
    lab.wait_all("no job_off_mesh", VERDICT, |s| {
        !s.alarms.iter().any(|a| a.kind == "job_off_mesh")
    })
    .unwrap_or_else(|err| panic!("{err}"));
    pages.wait_for_exactly(&lab, "both resolved", &[], &[&on_a, &on_b], ALERT);
}
