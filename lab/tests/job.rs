//! A job in the lab (issue #33): emulated JACCL ranks, one per node of a
//! 3-node lab, each in its node's namespace with MLX's environment. They
//! exchange datagrams on the cables at a few percent of a core; a stopped
//! or killed rank makes every other rank busy-spin, as JACCL ranks do on
//! Apple's RDMA; a continued one calms them; the traffic between two ranks
//! can be sent over the management network while their cable stays up.
//!
//! CPU is what each rank asked for, from `/proc/PID/schedstat` (time on a
//! CPU plus time waiting in a run queue), so a spinning rank counts as a
//! whole core even while the host's two cores are shared with a build.
//! Root only, skipped elsewhere unless `CI=true`, like the rest of the lab.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::expect;
use meshd_lab::Lab;
use meshd_lab::job::{
    ENV_COORDINATOR, ENV_DEVICES, ENV_RANK, JobRecord, JobSpec, Load, RankRecord,
};
use meshd_lab::rank::Mode;

const JOB: &str = "job";
/// A bound for every rank reaching a mode on a shared host: never a speed
/// check (a rank changes mode within its 500 ms silence threshold).
const SETTLE: Duration = Duration::from_secs(30);
/// A paced rank sleeps between its ticks: it asks for a few percent of a
/// core (0.01–0.04 on the lab's host); far below a spinning one's 1.0.
const CALM_CORES: f64 = 0.3;
/// What a rank's CPU is measured over while calm.
const WINDOW: Duration = Duration::from_secs(1);

fn spec() -> JobSpec {
    JobSpec::new(env!("CARGO_BIN_EXE_lab"))
}

/// Each rank's load over `window`, by node (`None`: gone).
fn loads(lab: &Lab, window: Duration) -> BTreeMap<String, Option<Load>> {
    lab.job_loads(JOB, window)
        .expect("job loads")
        .into_iter()
        .map(|(rank, load)| (rank.node, load))
        .collect()
}

/// Each rank's load from 1 s to 2 s after `since` (a fault): what the
/// ranks do within 2 s of it.
fn loads_within_2s(lab: &Lab, since: Instant) -> BTreeMap<String, Option<Load>> {
    std::thread::sleep((since + Duration::from_secs(1)).saturating_duration_since(Instant::now()));
    let window = (since + Duration::from_secs(2))
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(500));
    loads(lab, window)
}

fn assert_calm(lab: &Lab, what: &str) {
    let loads = loads(lab, WINDOW);
    for (node, load) in &loads {
        let load = load.unwrap_or_else(|| panic!("{what}: the rank on {node} is gone"));
        assert!(
            load.demand < CALM_CORES,
            "{what}: the rank on {node} asks for {load:?}; all: {loads:?}"
        );
    }
}

fn assert_spinning(job: &JobRecord, loads: &BTreeMap<String, Option<Load>>, nodes: &[&str]) {
    for &node in nodes {
        let load = loads[node].unwrap_or_else(|| panic!("the rank on {node} is gone"));
        assert!(
            load.spinning(),
            "the rank on {node} should spin (≥ 0.8 core): {load:?}; all: {loads:?}"
        );
        let report = job.rank_on(node).unwrap().report().expect("a report");
        assert_eq!(report.mode, Mode::Spinning, "{report:?}");
    }
}

/// Waits (at most 5 s) until none of `ranks` is alive.
fn all_gone(ranks: &[RankRecord]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while ranks.iter().any(RankRecord::alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    !ranks.iter().any(RankRecord::alive)
}

#[test]
fn a_stopped_or_killed_rank_makes_the_others_spin_and_a_continued_one_calms_them() {
    if !common::can_run(&[]) {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = common::up(3, false);
    let job = lab.start_job(&spec()).expect("start the job");
    assert_eq!(
        job.ranks
            .iter()
            .map(|r| r.node.as_str())
            .collect::<Vec<_>>(),
        ["a", "b", "c"],
        "rank order is node order"
    );

    // Progress at a few percent of a core.
    let reports = lab
        .wait_job(JOB, Mode::Paced, SETTLE)
        .expect("every rank makes progress");
    for report in &reports {
        assert!(
            report.peers.iter().all(|p| p.sent > 0 && p.received > 0),
            "{report:?}"
        );
        assert_eq!(report.strays, 0, "{report:?}");
    }
    assert_calm(&lab, "a running job");

    // What `mlx.launch --backend jaccl` gives a rank, in its initial
    // environment, inside its node's namespace.
    let matrix = std::fs::read_to_string(&job.devices).expect("the device matrix");
    assert_eq!(
        matrix.trim(),
        r#"[[null,"mesh-b","mesh-c"],["mesh-a",null,"mesh-c"],["mesh-a","mesh-b",null]]"#
    );
    for rank in &job.ranks {
        let env = meshd_lab::job::environment(rank.pid).expect("environ");
        assert_eq!(env.get(ENV_RANK), Some(&rank.rank.to_string()), "{env:?}");
        assert_eq!(
            env.get(ENV_DEVICES).map(String::as_str),
            Some(job.devices.to_str().unwrap())
        );
        assert_eq!(
            env.get(ENV_COORDINATOR).map(String::as_str),
            Some("10.78.0.1:7430")
        );
        let ns = meshd_lab::command::run(
            "ip",
            &["netns", "identify", &rank.pid.to_string()],
            meshd_lab::command::QUICK,
        )
        .expect("ip netns identify");
        assert_eq!(ns.trim(), lab.namespace(&rank.node).unwrap());
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", rank.pid)).unwrap();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            cmdline.contains(" rank --rank "),
            "the pid is the rank itself: {cmdline}"
        );
    }

    // b stops: a and c hear nothing from it and spin.
    lab.stop_rank(JOB, "b").expect("SIGSTOP");
    let stopped = Instant::now();
    let within = loads_within_2s(&lab, stopped);
    assert_spinning(&job, &within, &["a", "c"]);
    assert_eq!(job.rank_on("b").unwrap().state(), Some('T'));
    let steps = job.rank_on("a").unwrap().report().unwrap().steps;
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        job.rank_on("a").unwrap().report().unwrap().steps,
        steps,
        "no step completes without b"
    );

    // b continues: every rank is paced again, at a few percent of a core.
    lab.cont_rank(JOB, "b").expect("SIGCONT");
    lab.wait_job(JOB, Mode::Paced, SETTLE)
        .expect("paced again after SIGCONT");
    assert_calm(&lab, "after SIGCONT");

    // c is killed: a and b spin, for good.
    lab.kill_rank(JOB, "c").expect("SIGKILL");
    let killed = Instant::now();
    let within = loads_within_2s(&lab, killed);
    assert_eq!(within["c"], None, "the killed rank is gone");
    assert_spinning(&job, &within, &["a", "b"]);
    assert!(
        lab.stop_rank(JOB, "c").is_err(),
        "a dead rank cannot be stopped"
    );

    // A stopped rank and a spinning one both end with the lab.
    lab.stop_rank(JOB, "a").expect("SIGSTOP");
    lab.teardown().expect("lab down");
    assert!(all_gone(&job.ranks), "ranks outlived the lab");
}

/// `lab …` on this test's lab, which must succeed; its output.
fn lab_cli(lab: &Lab, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["--name", &lab.plan.name])
        .args(args)
        .output()
        .expect("run lab");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "lab {args:?} failed: {text}");
    text
}

/// Over `window`: how many datagrams rank a sent to rank b and b took in
/// from a (from their reports), and how many packets left a through its
/// cable to b and through its management port.
#[derive(Debug)]
struct Traffic {
    sent: u64,
    received: u64,
    cable: u64,
    mgmt: u64,
}

fn traffic(lab: &Lab, job: &JobRecord, window: Duration) -> Traffic {
    let (a, b) = (job.rank_on("a").unwrap(), job.rank_on("b").unwrap());
    let a_to_b = |r: &RankRecord| {
        let report = r.report().expect("a report");
        report.peers.iter().find(|p| p.rank == 1).unwrap().sent
    };
    let b_from_a = |r: &RankRecord| {
        let report = r.report().expect("a report");
        report.peers.iter().find(|p| p.rank == 0).unwrap().received
    };
    let counters = || {
        (
            lab.link_counters("a", "mesh-b").unwrap().tx_packets,
            lab.link_counters("a", "mgmt0").unwrap().tx_packets,
        )
    };
    let (sent, received, (cable, mgmt)) = (a_to_b(a), b_from_a(b), counters());
    std::thread::sleep(window);
    let (sent2, received2, (cable2, mgmt2)) = (a_to_b(a), b_from_a(b), counters());
    Traffic {
        sent: sent2 - sent,
        received: received2 - received,
        cable: cable2 - cable,
        mgmt: mgmt2 - mgmt,
    }
}

#[test]
fn rank_traffic_moves_to_the_management_network_and_back_while_the_cable_stays_up() {
    if !common::can_run(&["sysctl"]) {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = common::up(3, false);
    // Strict reverse-path filtering everywhere, as a host may give new
    // namespaces (the lab's start with 0): `rank-via-mgmt` must lower it
    // where the cable's own replies would be dropped.
    for id in lab.ids() {
        lab.exec(id, "sysctl", &["-w", "net.ipv4.conf.all.rp_filter=1"])
            .expect("strict rp_filter");
    }

    // A rank that cannot start fails the start, which leaves nothing.
    let mut bogus = spec();
    bogus.id = "bogus".to_owned();
    bogus.program = "/nonexistent/lab".into();
    let err = lab.start_job(&bogus).unwrap_err().to_string();
    assert!(
        err.contains("did not start") && err.contains("/nonexistent/lab"),
        "{err}"
    );
    assert!(lab.job("bogus").is_err(), "no record of it");

    // Through the command line, as an operator would: the ranks outlive
    // the `lab` process that started them.
    let started = lab_cli(&lab, &["job", "start", "--rate", "500"]);
    assert!(started.contains("MLX_RANK=0 on a"), "{started}");
    let job = lab.job(JOB).expect("the job's record");
    lab.wait_job(JOB, Mode::Paced, SETTLE).expect("progress");
    let again = lab.start_job(&spec()).unwrap_err().to_string();
    assert!(again.contains("running in this lab already"), "{again}");
    let mut other = spec();
    other.id = "other".to_owned();
    let clash = lab.start_job(&other).unwrap_err().to_string();
    assert!(clash.contains("port 7450"), "{clash}");
    // 500 datagrams a second from a to b against meshd's ~20 probe
    // packets a second on the cable.
    let window = Duration::from_secs(2);

    let before = traffic(&lab, &job, window);
    assert!(before.sent > 0, "{before:?}");
    assert!(
        before.cable * 10 >= before.sent * 7,
        "a's datagrams to b leave through the cable: {before:?}"
    );

    lab_cli(&lab, &["fault", "rank-via-mgmt", "a", "b"]);
    let routed = lab
        .exec("a", "ip", &["route", "get", "10.77.12.2"])
        .expect("ip route get");
    assert!(routed.contains("via 10.78.0.2 dev mgmt0"), "{routed}");
    std::thread::sleep(Duration::from_millis(300));
    let over_mgmt = traffic(&lab, &job, window);
    assert!(
        over_mgmt.mgmt * 10 >= over_mgmt.sent * 7,
        "a's datagrams to b leave through mgmt0: {over_mgmt:?}"
    );
    assert!(
        over_mgmt.cable * 5 <= over_mgmt.sent,
        "the cable carries only meshd's own packets: {over_mgmt:?}"
    );
    assert!(
        over_mgmt.received * 2 >= over_mgmt.sent,
        "b takes them in, under strict rp_filter: {over_mgmt:?}"
    );
    lab.wait_job(JOB, Mode::Paced, SETTLE)
        .expect("the job goes on over the management network");
    for (node, port) in [("a", "mesh-b"), ("b", "mesh-a")] {
        for iface in ["all", port] {
            let key = format!("net.ipv4.conf.{iface}.rp_filter");
            let value = lab.exec(node, "sysctl", &["-n", &key]).unwrap();
            assert_eq!(value.trim(), "0", "{node}: {key}");
        }
    }
    let link_up = |s: &meshd_lab::Status| s.link("a", "b").is_some_and(|l| l.state != "down");
    expect(&lab, &["a", "b"], "a-b not down: the cable is up", link_up);

    lab_cli(&lab, &["fault", "rank-via-cable", "a", "b"]);
    std::thread::sleep(Duration::from_millis(300));
    let back = traffic(&lab, &job, window);
    assert!(
        back.cable * 10 >= back.sent * 7,
        "a's datagrams to b are back on the cable: {back:?}"
    );

    lab_cli(&lab, &["job", "stop"]);
    assert!(all_gone(&job.ranks), "`lab job stop` ends every rank");
    assert!(lab.job(JOB).is_err(), "the record is gone");

    // A second job on two nodes, left running: `lab down` ends it.
    let started = lab_cli(&lab, &["job", "start", "--job", "two", "--nodes", "c,a"]);
    assert!(started.contains("MLX_RANK=1 on a"), "{started}");
    let two = lab.job("two").expect("the second job");
    let devices = std::fs::read_to_string(&two.devices).unwrap();
    assert_eq!(devices.trim(), r#"[[null,"mesh-a"],["mesh-c",null]]"#);
    let env = meshd_lab::job::environment(two.ranks[0].pid).unwrap();
    assert_eq!(
        env.get(ENV_COORDINATOR).map(String::as_str),
        Some("10.78.0.3:7430")
    );
    lab.teardown().expect("lab down");
    assert!(all_gone(&two.ranks), "ranks outlived the lab");
}
