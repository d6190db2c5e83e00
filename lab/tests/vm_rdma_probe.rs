//! The active RDMA probe between two Soft-RoCE VMs joined by a cable, with
//! meshd running in each: probes answered over RDMA; the cable pulled is a
//! down link (RDMA and IP both fail); the RDMA device deleted on one side
//! while IP still works is a degraded link whose evidence names that
//! side's RDMA, and meshd lets go of the device so the deletion finishes;
//! "idle" steps aside while another program holds a queue pair; after
//! meshd stops, none of its queue pairs is left. Two VMs for every step
//! (the boots are the expensive part).

mod vm;

use std::time::{Duration, Instant};

use meshd_lab::Binaries;
use meshd_lab::status::LinkView;
use meshd_lab::vm::mesh::{self, NODES};
use meshd_lab::vm::{CABLE_IFACE, CABLE_NIC, Vm, Vms};

/// TCG guests on two shared cores run meshd slowly; every wait is generous.
const SETTLE: Duration = Duration::from_secs(120);

fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|err| panic!("{err}"))
}

/// Reads `read` from `vm` until `holds` accepts it; what was read then.
fn wait_until<T: std::fmt::Debug>(
    vm: &mut Vm,
    what: &str,
    read: impl Fn(&mut Vm) -> T,
    holds: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + SETTLE;
    loop {
        let seen = read(vm);
        if holds(&seen) {
            return seen;
        }
        if Instant::now() >= deadline {
            let log = mesh::log_tail(vm);
            panic!(
                "VM {}: waited {SETTLE:?} for {what}; last read {seen:?}\n--- meshd log ---\n{log}",
                vm.name
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Waits until `vm`'s view of the cable satisfies `holds`; that view.
fn wait_for_link(vm: &mut Vm, what: &str, holds: impl Fn(&LinkView) -> bool) -> LinkView {
    wait_until(
        vm,
        what,
        |vm| ok(mesh::cable(vm)),
        |link| link.as_ref().is_some_and(&holds),
    )
    .expect("held")
}

/// Waits until `vm`'s metrics satisfy `holds`; that text.
fn wait_for_metrics(vm: &mut Vm, what: &str, holds: impl Fn(&str) -> bool) -> String {
    // Nothing to read while meshd starts: an empty text until it listens.
    wait_until(
        vm,
        what,
        |vm| mesh::metrics(vm).unwrap_or_default(),
        |text| holds(text),
    )
}

fn answered(text: &str) -> bool {
    mesh::cable_metric(text, "meshd_link_rdma_probe_rtt_seconds").is_some()
}

#[test]
fn the_rdma_probe_is_answered_fails_with_the_cable_and_names_a_deleted_device() {
    let _serial = meshd_test_lock::exclusive();
    if !vm::can_run() {
        return;
    }
    let files = tempfile::tempdir().expect("tempdir");
    let binaries = ok(Binaries::find(&vm::profile_dir()));
    let image = vm::image(&ok(mesh::mesh_files(&binaries, files.path())));
    let mut vms = ok(Vms::pair(&image));
    for id in NODES {
        let vm = vms.vm(id);
        vm::run(
            vm,
            &format!("rdma link add rxe0 type rxe netdev {CABLE_IFACE}"),
        );
        ok(mesh::start_meshd(vm, "always"));
    }

    // Both ends probe each other over RDMA and get answers, one queue pair
    // each.
    for id in NODES {
        let vm = vms.vm(id);
        wait_for_link(vm, "the cable up", |l| l.state == "up");
        let text = wait_for_metrics(vm, "an answered RDMA probe", answered);
        let sent =
            mesh::cable_metric(&text, "meshd_link_rdma_probes_total").expect("probes counted");
        assert!(sent >= 1.0, "VM {id}: {sent} RDMA probes");
        assert_eq!(ok(mesh::meshd_queue_pairs(vm)).len(), 1, "VM {id}");
    }

    // The cable pulled: RDMA probes fail as IP ones do, and the link is
    // down (blamed on the cable), not degraded.
    let failed_before = mesh::cable_metric(
        &ok(mesh::metrics(vms.vm("a"))),
        "meshd_link_rdma_probe_failures_total",
    )
    .unwrap_or(0.0);
    ok(vms.vm("a").set_link(CABLE_NIC, false));
    let down = wait_for_link(vms.vm("a"), "the cable down", |l| l.state == "down");
    assert_eq!(down.blame, "link", "{down:?}");
    wait_for_metrics(vms.vm("a"), "failed RDMA probes", |text| {
        mesh::cable_metric(text, "meshd_link_rdma_probe_failures_total")
            .is_some_and(|failed| failed >= failed_before + 2.0)
    });
    ok(vms.vm("a").set_link(CABLE_NIC, true));
    wait_for_link(vms.vm("a"), "the cable up again", |l| l.state == "up");
    wait_for_metrics(vms.vm("a"), "RDMA probes answered again", |text| {
        mesh::cable_metric(text, "meshd_link_rdma_probe_failures_total").is_some() && answered(text)
    });

    // RDMA gone on b while IP works. rxe cannot take a device away from a
    // program that holds it: the deletion finishes only because meshd lets
    // go. Degraded, the evidence naming b's RDMA, on both ends.
    vm::run(vms.vm("b"), "rdma link delete rxe0");
    for id in NODES {
        let degraded = wait_for_link(vms.vm(id), "the link degraded by RDMA", |l| {
            l.state == "degraded"
        });
        assert!(
            degraded
                .evidence
                .iter()
                .any(|e| e.starts_with("b: RDMA probes fail")),
            "VM {id}: {degraded:?}"
        );
        assert_eq!(degraded.blame, "link", "{degraded:?}");
    }
    // The device back: the probe reconnects and the link heals.
    vm::run(
        vms.vm("b"),
        &format!("rdma link add rxe0 type rxe netdev {CABLE_IFACE}"),
    );
    for id in NODES {
        wait_for_link(vms.vm(id), "the link up after RDMA is back", |l| {
            l.state == "up"
        });
    }

    // meshd stopped: its queue pair is gone from the device.
    let failures = |vm: &mut Vm| {
        mesh::cable_metric(
            &ok(mesh::metrics(vm)),
            "meshd_link_rdma_probe_failures_total",
        )
        .expect("b probes")
    };
    let b_failed_before = failures(vms.vm("b"));
    let a = vms.vm("a");
    ok(mesh::stop_meshd(a));
    assert_eq!(
        ok(mesh::meshd_queue_pairs(a)),
        Vec::<String>::new(),
        "meshd's queue pair freed"
    );

    // "idle" on a: it probes while nothing else holds a queue pair, steps
    // aside (closing its own) while a program does, without any verdict,
    // and comes back after.
    ok(mesh::start_meshd(a, "idle"));
    wait_for_metrics(a, "an answered RDMA probe in idle mode", answered);
    // Its own queue pair (whose `pid` is meshd's probe thread) is not
    // another program's: it keeps the same one over several idle checks.
    let own = ok(mesh::meshd_queue_pairs(a));
    assert_eq!(own.len(), 1, "{own:?}");
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(
        ok(mesh::meshd_queue_pairs(a)),
        own,
        "meshd kept its queue pair"
    );
    // b went on probing across a's restart: a's new queue pair is connected
    // to, and the restart cost b no failing streak (at most a probe or two
    // in flight as a stopped), so no RDMA evidence.
    let b = vms.vm("b");
    wait_for_metrics(b, "b's RDMA probes answered by the restarted a", answered);
    let b_failed = failures(b) - b_failed_before;
    assert!(
        b_failed < 3.0,
        "a restart of a cost b {b_failed} failed RDMA probes"
    );
    let a = vms.vm("a");
    vm::run(
        a,
        "setsid ibv_uc_pingpong -d rxe0 -g 1 </dev/null >/tmp/pingpong.log 2>&1 & \
         echo $! >/run/pingpong.pid",
    );
    wait_for_metrics(a, "the RDMA probe paused", |text| !answered(text));
    vm::wait_for(
        a,
        "rdma resource show qp",
        "meshd's queue pair closed",
        SETTLE,
        |text| !text.contains("comm meshd") && text.contains("comm ibv_uc_pingpong"),
    );
    for id in NODES {
        let link = ok(mesh::cable(vms.vm(id))).expect("the cable is judged");
        assert_eq!(
            link.state, "up",
            "VM {id}: a paused probe is no verdict: {link:?}"
        );
    }
    let a = vms.vm("a");
    vm::run(a, "kill $(cat /run/pingpong.pid)");
    wait_for_metrics(a, "the RDMA probe back", answered);
    assert_eq!(ok(mesh::meshd_queue_pairs(a)).len(), 1);
}
