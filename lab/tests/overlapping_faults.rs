//! Faults that overlap (issue 31), each asserting the exact pages a real
//! Alertmanager holds while it lasts and after it heals: a meshd restart
//! during a cable cut, an isolated node, a 2+2 management split, a cut at
//! an end whose timers run late, and a lossy cable at a node that stalls.
//!
//! Only meshd's own pushes reach this Alertmanager (no Prometheus is wired
//! to it): the pages are what meshd's alert leader, its followers' backups
//! and minorities post. Alertmanager is sampled every half second and every
//! sample must be exactly right for the whole fault (a page that comes and
//! goes is a page), leaving out only the shared host's own alerts
//! (`common::alerting::HOST_ALERTS`); a page must keep its start (a new one is a refire), and
//! Alertmanager's debug log must show no resolve of it while its fault
//! lasts (a resolve and refire between two samples).
//!
//! Root, Debian's `prometheus-alertmanager` (amtool), nftables for the
//! loss; skipped with a message without them, except under `CI=true`.

mod common;

use std::time::{Duration, Instant};

use common::alerting::{
    ALERT, HOST_ALERTS, Labels, PageWatch, can_observe, critical_pages, is_host_alert, link_page,
    page, poll,
};
use common::{VERDICT, four_nodes, link_is, node_blamed};
use meshd_lab::Lab;
use meshd_lab::stall::StallPattern;

/// How long each fault's pages are held to be exactly right.
const HOLD: Duration = Duration::from_secs(8);
/// How long nothing may be posted after a heal: past the resend interval's
/// read-backs and a minority's first retry after its backoff.
const QUIET_AFTER_HEAL: Duration = Duration::from_secs(5);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A 4-node lab whose meshd daemons push to a real Alertmanager that holds
/// nothing yet.
fn observed_lab() -> Lab {
    let mut lab = four_nodes(true);
    lab.start_alertmanager().expect("alertmanager");
    poll("Alertmanager to answer", ALERT, || critical_pages(&lab));
    lab
}

/// Nothing at Alertmanager for a few looks: the healthy mesh pages nothing.
fn quiet_before(lab: &Lab, pages: &mut PageWatch) {
    pages.hold_exactly(lab, "a healthy mesh", &[], Duration::from_secs(2));
}

/// Nothing at Alertmanager after the heal (the fault's own `pages` may
/// still be there until their resolves arrive, nothing else), and nothing
/// for a while after that.
fn quiet_after(lab: &Lab, pages: &mut PageWatch, what: &str, resolving: &[&Labels]) {
    pages.wait_for_exactly(lab, what, &[], resolving, ALERT);
    pages.hold_exactly(lab, &format!("{what}, and stays so"), &[], QUIET_AFTER_HEAL);
}

/// Restarts node `id`'s meshd at once: it dies (SIGKILL) and starts again,
/// as a service manager restarts a crashed daemon. How long it was gone
/// (the kill to its new process up), and how long until its new run
/// answers `meshctl status` and holds quorum again.
fn restart(lab: &mut Lab, id: &str) -> (Duration, Duration) {
    let began = Instant::now();
    lab.signal_daemon(id, "KILL").expect("kill");
    lab.start(id, "info").expect("start");
    let gone = began.elapsed();
    poll(
        &format!("{id}'s meshd to hold quorum again"),
        VERDICT,
        || lab.status(id).ok().filter(|s| s.quorum.has_quorum),
    );
    (gone, began.elapsed())
}

/// (1) A cable cut, then a restart of each of its ends' meshd in turn (the
/// follower end, then the alert leader's end): MeshLinkDown fires once and
/// stays firing through both; a quick restart is no dead node (the 2-s
/// restart grace of closed streams); after the plug, resolved. The restart
/// is a kill and a start at once (a SIGTERM stop, bounded to 1 s, is the
/// test after it).
#[test]
fn a_meshd_restart_during_a_cable_cut_keeps_its_one_page_and_pages_no_node() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = observed_lab();
    let mut pages = PageWatch::new();
    quiet_before(&lab, &mut pages);
    let down = link_page("MeshLinkDown", "a", "b");

    pages.note("pull a-b");
    lab.pull_cable("a", "b").expect("pull");
    pages.wait_for_exactly(&lab, "MeshLinkDown a-b", &[&down], &[], ALERT);
    pages.hold_exactly(&lab, "the cut alone", &[&down], Duration::from_secs(2));

    for id in ["b", "a"] {
        pages.note(&format!("restart {id}'s meshd (kill, start at once)"));
        let (gone, answers) = restart(&mut lab, id);
        pages.note(&format!(
            "{id}'s meshd was gone {:.2} s, holds quorum again {:.2} s after the kill",
            gone.as_secs_f64(),
            answers.as_secs_f64()
        ));
        pages.hold_exactly(
            &lab,
            &format!("the cut through {id}'s restart"),
            &[&down],
            HOLD,
        );
    }
    pages.never_resolved(&lab, "the cut through both restarts", &down);
    lab.wait_all("a-b down everywhere after the restarts", VERDICT, |s| {
        link_is(s, "a", "b", "down") && s.nodes.iter().all(|n| n.state == "up")
    })
    .unwrap_or_else(|err| panic!("{err}"));

    pages.note("plug a-b");
    lab.plug_cable("a", "b").expect("plug");
    quiet_after(
        &lab,
        &mut pages,
        "everything resolved after the plug",
        &[&down],
    );
}

/// A service manager's stop (SIGTERM) of an end of a pulled cable: meshd
/// must exit within the 2-s restart grace, or a restart by `systemctl
/// restart` or launchd during a cut is a dead node for its peers.
#[test]
fn a_sigterm_to_an_end_of_a_pulled_cable_stops_meshd_within_the_restart_grace() {
    if !common::can_run(&[]) {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = four_nodes(false);
    lab.pull_cable("a", "b").expect("pull");
    lab.wait_all("a-b down", VERDICT, |s| link_is(s, "a", "b", "down"))
        .unwrap_or_else(|err| panic!("{err}"));
    let began = Instant::now();
    lab.stop("b").expect("stop");
    let took = began.elapsed();
    eprintln!(
        "b's meshd stopped {:.2} s after SIGTERM",
        took.as_secs_f64()
    );
    assert!(
        took < Duration::from_secs(2),
        "SIGTERM to b took {took:?} (SIGKILL comes after 10 s)"
    );
}

/// (2) One node of four cut from the management network and from every
/// cable, the alert leader `a` itself: the majority pages exactly
/// MeshNodeDown for it, nothing about the healthy three. The isolated node
/// has no quorum and would post only MeshNoQuorum, but that cannot reach an
/// Alertmanager on the management network it lost, so Alertmanager holds
/// MeshNodeDown{node=a} alone; after it rejoins, nothing.
#[test]
fn an_isolated_node_of_four_is_one_node_down_page_and_pages_nobody_else() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let lab = observed_lab();
    let mut pages = PageWatch::new();
    quiet_before(&lab, &mut pages);
    let down = page("MeshNodeDown", &[("node", "a")]);

    pages.note("isolate a (management port and its three cables)");
    lab.isolate("a").expect("isolate");
    pages.wait_for_exactly(&lab, "MeshNodeDown a", &[&down], &[], ALERT);
    lab.wait_for(
        &["b", "c", "d"],
        "a down, its links blamed on it",
        VERDICT,
        |s| node_blamed(s, "a"),
    )
    .unwrap_or_else(|err| panic!("{err}"));
    pages.hold_exactly(&lab, "the isolation", &[&down], HOLD);
    // Past `stale_after`: the isolated node has settled into no quorum
    // and says so, to itself.
    let alone = lab.status("a").expect("a's view");
    assert!(
        !alone.quorum.has_quorum && alone.has_alarm("no_quorum", "a"),
        "{}",
        alone.summary()
    );
    pages.never_resolved(&lab, "the isolation", &down);

    pages.note("rejoin a");
    lab.rejoin("a").expect("rejoin");
    quiet_after(
        &lab,
        &mut pages,
        "everything resolved after a rejoins",
        &[&down],
    );
    // Nor did the isolated node's lost quorum fire at Alertmanager as it
    // rejoined (it holds it back while its peers' streams return; its
    // resolve may arrive, which pages nothing).
    let received = lab.received_alerts().expect("Alertmanager's log");
    let other: Vec<_> = received
        .iter()
        .filter(|r| {
            !r.resolved
                && r.alertname != "MeshNodeDown"
                && !HOST_ALERTS.contains(&r.alertname.as_str())
        })
        .collect();
    assert!(other.is_empty(), "received besides MeshNodeDown: {other:?}");
}

/// (3) The management network split into halves, a+b (with Alertmanager)
/// and c+d, over intact cables: every node keeps quorum over the cables,
/// and in halves no member reaches a management majority, so nobody is
/// named management_unreachable. One warning, MeshManagementSplit (about
/// the mesh, no node), and no page: no MeshNodeDown, no link page, no
/// MeshManagementUnreachable; nothing after the heal.
#[test]
fn a_two_and_two_management_split_is_one_split_warning_and_no_page() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let lab = observed_lab();
    let mut pages = PageWatch::new();
    quiet_before(&lab, &mut pages);

    pages.note("split management a+b | c+d");
    lab.partition(&[vec!["a", "b"], vec!["c", "d"]])
        .expect("2+2");
    // The split is seen once c and d are heard over the cables only.
    lab.wait_for(
        &["a", "b"],
        "c and d heard over the cables only",
        VERDICT,
        |s| {
            ["c", "d"].iter().all(|far| {
                s.nodes.iter().any(|n| {
                    n.id == *far
                        && n.evidence
                            .first()
                            .is_some_and(|e| !e.contains("management"))
                })
            })
        },
    )
    .unwrap_or_else(|err| panic!("{err}"));
    let split = page("MeshManagementSplit", &[]);
    pages.wait_for_exactly(&lab, "MeshManagementSplit", &[&split], &[], ALERT);
    // Past the settling of management_unreachable (`stale_after`) and a
    // follower's backup grace.
    pages.hold_exactly(&lab, "the 2+2 split", &[&split], Duration::from_secs(12));
    // Every node keeps quorum, sees everything up and names nobody (a busy
    // host's cpu_spike is the host's, as at Alertmanager).
    for id in ["a", "b", "c", "d"] {
        let s = lab.status(id).expect("status");
        assert!(
            s.quorum.has_quorum
                && s.all_up()
                && s.has_alarm("management_split", id)
                && s.alarms
                    .iter()
                    .all(|a| ["cpu_spike", "management_split"].contains(&a.kind.as_str())),
            "{}",
            s.summary()
        );
    }

    pages.note("heal the split");
    lab.heal_partition().expect("heal");
    quiet_after(&lab, &mut pages, "nothing after the heal", &[&split]);
}

/// One phase of (4): node `late`'s timers run late by up to `pattern`'s
/// stops, then the cable `a`-`b` (one end `late`) is pulled: exactly one
/// MeshLinkDown, never MeshLinkDegraded before it, nothing about the late
/// node or another cable; resolved after the plug.
fn cut_at_a_late_end(
    lab: &mut Lab,
    pages: &mut PageWatch,
    late: &str,
    pattern: StallPattern,
    (a, b): (&str, &str),
) {
    pages.note(&format!(
        "{late}'s meshd stopped {} ms of every {} ms",
        pattern.stopped.as_millis(),
        pattern.every.as_millis()
    ));
    lab.start_stalls(late, pattern).expect("late timers");
    pages.hold_exactly(
        lab,
        &format!("{late} running late alone"),
        &[],
        Duration::from_secs(4),
    );

    let down = link_page("MeshLinkDown", a, b);
    pages.note(&format!("pull {a}-{b}"));
    lab.pull_cable(a, b).expect("pull");
    pages.wait_for_exactly(lab, &format!("MeshLinkDown {a}-{b}"), &[&down], &[], ALERT);
    pages.hold_exactly(lab, &format!("the cut at late {late}"), &[&down], HOLD);
    pages.never_resolved(lab, &format!("the cut at late {late}"), &down);
    let received = lab.received_alerts().expect("Alertmanager's log");
    let degraded: Vec<_> = received
        .iter()
        .filter(|r| r.alertname != "MeshLinkDown" && !HOST_ALERTS.contains(&r.alertname.as_str()))
        .collect();
    assert!(
        degraded.is_empty(),
        "nothing but MeshLinkDown reached Alertmanager: {degraded:?}"
    );

    pages.note(&format!("plug {a}-{b}"));
    lab.plug_cable(a, b).expect("plug");
    quiet_after(
        lab,
        pages,
        &format!("{a}-{b} resolved, {late} still late"),
        &[&down],
    );
    let report = lab.end_stalls(late).expect("late timers end");
    pages.note(&format!(
        "{late}'s meshd ran again: {} stops, the longest {} ms",
        report.cycles,
        report.longest_stop.as_millis()
    ));
}

/// (4) A cable pulled while one of its ends' meshd runs its timers late by
/// tens of milliseconds (stopped 40 of every 100 ms): a follower end, b.
#[test]
fn a_cut_at_an_end_40_ms_late_is_one_link_down_page() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = observed_lab();
    let mut pages = PageWatch::new();
    quiet_before(&lab, &mut pages);
    let forty = StallPattern::new(ms(40), ms(100)).expect("pattern");
    cut_at_a_late_end(&mut lab, &mut pages, "b", forty, ("b", "c"));
}

/// (4) The same with the alert leader's end a couple hundred milliseconds
/// late (stopped 200 of every 400 ms), cable a-d.
#[test]
fn a_cut_at_the_leaders_end_200_ms_late_is_one_link_down_page() {
    if !can_observe() {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = observed_lab();
    let mut pages = PageWatch::new();
    quiet_before(&lab, &mut pages);
    let two_hundred = StallPattern::new(ms(200), ms(400)).expect("pattern");
    cut_at_a_late_end(&mut lab, &mut pages, "a", two_hundred, ("a", "d"));
}

/// (5) Node d's meshd stopped 700 ms of every 1.5 s while its cable to c
/// loses a fifth of the packets each way: the lossy cable is paged
/// (MeshLinkDegraded, or Down or Flapping when seconds lose half), one page
/// that stays; no MeshNodeDown for the stalling node, nothing about the
/// other cables.
#[test]
fn a_lossy_cable_at_a_node_with_periodic_stalls_is_still_paged() {
    if !can_observe() || !common::can_run(&["nft"]) {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = observed_lab();
    let mut pages = PageWatch::new();
    quiet_before(&lab, &mut pages);
    let lossy: Vec<Labels> = ["MeshLinkDegraded", "MeshLinkDown", "MeshLinkFlapping"]
        .iter()
        .map(|name| link_page(name, "c", "d"))
        .collect();

    pages.note("d stalls 700 ms of every 1.5 s; c-d loses 20 % at d");
    lab.start_stalls("d", StallPattern::new(ms(700), ms(1500)).expect("pattern"))
        .expect("stalls");
    lab.lose("d", "c", 20).expect("nft loss");
    let began = Instant::now();
    // Whichever of the lossy cable's pages comes first is the one page.
    let first = poll("a page for the lossy cable c-d", ALERT, || {
        let now = common::alerting::active(&lab);
        if let Some(stray) = now.keys().find(|l| !lossy.contains(l) && !is_host_alert(l)) {
            panic!("only the lossy cable may page: {stray:?}");
        }
        now.into_keys().find(|l| lossy.contains(l))
    });
    pages.note(&format!(
        "the lossy cable paged {:.1} s after the loss began",
        began.elapsed().as_secs_f64()
    ));
    pages.wait_for_exactly(&lab, "the lossy cable's page", &[&first], &[], ALERT);
    pages.hold_exactly(&lab, "the lossy cable beside the stalls", &[&first], HOLD);

    // The stalls end first: the cable still loses a fifth, so its page
    // stays; only the end of the loss may resolve it.
    let report = lab.end_stalls("d").expect("stalls end");
    pages.note(&format!(
        "stalls end ({} stalls, the longest {} ms); the loss goes on",
        report.cycles,
        report.longest_stop.as_millis()
    ));
    pages.hold_exactly(&lab, "the lossy cable after the stalls", &[&first], HOLD);
    pages.never_resolved(&lab, "the lossy cable, stalls and after", &first);

    pages.note("loss off");
    lab.clear_loss("d").expect("nft loss off");
    quiet_after(
        &lab,
        &mut pages,
        "the lossy cable's page resolved",
        &[&first],
    );
}
