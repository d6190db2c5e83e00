//! Node health end to end (issue #19), on a 3-node lab of real daemons:
//! every node's `/metrics` has its memory and boot series, and every
//! node's `meshctl status --json` shows every node's boot identity, the
//! same across a meshd restart and new when the node's boot id changes.
//! The new boot comes from a real feature: the node's own bundle
//! (`meshctl bundle`), replayed through `platform.replay_dir`, with its
//! `boot_id` changed as a reboot would change it.
//!
//! Root only (network namespaces); skipped with a message elsewhere,
//! except under `CI=true`. Deadlines are bounds, never speed checks.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{expect, settle};
use meshd_lab::{Lab, Status};

const ALL: [&str; 3] = ["a", "b", "c"];
const METRICS_LIMIT: Duration = Duration::from_secs(60);

/// Node `id`'s `/metrics`, fetched inside its namespace at its management
/// address (where its metrics listen).
fn metrics(lab: &Lab, id: &str) -> String {
    let fetcher = env!("CARGO_BIN_EXE_lab-bench");
    let addr = lab.plan.node(id).expect("node of the plan").metrics();
    lab.exec(id, fetcher, &["fetch-metrics", &addr])
        .unwrap_or_else(|err| panic!("metrics of {id}: {err}"))
}

/// The value of an unlabelled series in a scrape.
fn value(scrape: &str, name: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
        rest.trim().parse().ok()
    })
}

/// Every node's view holds `boot` as `id`'s boot id.
fn boot_is(s: &Status, id: &str, boot: &str) -> bool {
    s.boot_of(id).and_then(|b| b.id.as_deref()) == Some(boot)
}

/// Another boot id of the same shape: the last hex digit changed.
fn other_boot(boot: &str) -> String {
    let (head, last) = boot.split_at(boot.len() - 1);
    format!("{head}{}", if last == "0" { "1" } else { "0" })
}

#[test]
fn memory_series_and_boots_across_a_restart_and_a_reboot() {
    if !common::can_run(&[]) {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = common::up(3, false);
    // The namespaces share the kernel: every node is in the host's boot.
    let host_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .expect("boot_id")
        .trim()
        .to_owned();

    // Memory (read every 5 s) and the boot time (with the facts).
    for id in ALL {
        let started = Instant::now();
        loop {
            let scrape = metrics(&lab, id);
            let series = [
                "meshd_memory_total_bytes",
                "meshd_memory_wired_bytes",
                "meshd_memory_locked_bytes",
                "meshd_memory_swap_used_bytes",
                "meshd_memory_swap_total_bytes",
                "meshd_boot_time_seconds",
            ];
            if series.iter().all(|s| value(&scrape, s).is_some()) {
                assert!(value(&scrape, "meshd_memory_total_bytes").expect("total") > 0.0);
                assert!(
                    scrape.contains("meshd_memory_stall_ratio{scope=\"full\"}")
                        || !Path::new("/proc/pressure/memory").exists(),
                    "PSI is read where the kernel has it:\n{scrape}"
                );
                break;
            }
            assert!(
                started.elapsed() < METRICS_LIMIT,
                "{id} exports no memory series within {METRICS_LIMIT:?}:\n{scrape}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    let views = expect(&lab, &ALL, "every node's boot in every view", |s| {
        ALL.iter().all(|id| boot_is(s, id, &host_boot))
    });
    let booted_at = views[0].boot_of("c").and_then(|b| b.booted_at.clone());
    assert!(booted_at.is_some(), "{:?}", views[0].boot_of("c"));
    let old_run = lab.status("c").expect("c").incarnation;

    // A meshd restart: a new incarnation, the same boot.
    lab.stop("c").expect("stop c");
    lab.start("c", "info").expect("start c");
    let views = expect(&lab, &ALL, "c back, in the same boot", |s| {
        s.all_up() && ALL.iter().all(|id| boot_is(s, id, &host_boot))
    });
    assert_ne!(lab.status("c").expect("c").incarnation, old_run);
    for view in &views {
        assert_eq!(
            view.boot_of("c").and_then(|b| b.booted_at.clone()),
            booted_at
        );
        assert!(
            !view.has_alarm("node_rebooted", "c") && !view.has_alarm("kernel_panic", "c"),
            "a restart is no reboot: {}",
            view.summary()
        );
    }

    // A reboot: c's own bundle, replayed with another boot id.
    let archive = lab.state_dir().join("c-bundle.tar.gz");
    let meshctl = lab.binaries.meshctl.to_string_lossy().into_owned();
    lab.exec(
        "c",
        &meshctl,
        &["bundle", "--out", &archive.to_string_lossy()],
    )
    .expect("meshctl bundle");
    // Unpacked into a temporary directory that goes with `unpacked`; the
    // replay outlives it in the lab's state directory.
    let unpacked = meshd_platform::bundle::unpack(&archive).expect("unpack");
    let replay = lab.state_dir().join("c-replay");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(unpacked.dir())
        .arg(&replay)
        .status()
        .expect("cp");
    assert!(copied.success(), "cp -a the unpacked bundle");
    let boot_file = replay.join("proc/sys/kernel/random/boot_id");
    assert!(boot_file.is_file(), "the bundle holds the boot id");
    let new_boot = other_boot(&host_boot);
    std::fs::write(&boot_file, format!("{new_boot}\n")).expect("write boot id");
    lab.stop("c").expect("stop c");
    let config = lab.config_path("c");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "\n[platform]\nreplay_dir = \"{}\"\n",
        replay.display()
    ));
    std::fs::write(&config, text).expect("write config");
    lab.start("c", "info").expect("start c");

    let views = expect(&lab, &ALL, "c's new boot everywhere, and its reboot", |s| {
        boot_is(s, "c", &new_boot)
            && boot_is(s, "a", &host_boot)
            && s.has_alarm("node_rebooted", "c")
    });
    for view in &views {
        let rebooted: Vec<_> = view
            .alarms
            .iter()
            .filter(|a| a.kind == "node_rebooted")
            .collect();
        assert_eq!(
            rebooted.len(),
            1,
            "one alarm, however many peers raised it: {}",
            view.summary()
        );
        // c cannot see its own reboot: its peers' alarm reaches it quoted
        // as theirs; the others raise it in their own words.
        let (summary, evidence) = if view.node == "c" {
            (
                " reports \"c rebooted (no kernel panic report); now boot ",
                " says \"no kernel panic report newer than the boot before\"",
            )
        } else {
            (
                "c rebooted (no kernel panic report); now boot ",
                "no kernel panic report newer than the boot before",
            )
        };
        assert!(
            rebooted[0].summary.contains(summary),
            "{}",
            rebooted[0].summary
        );
        assert!(
            rebooted[0].evidence.iter().any(|e| e.ends_with(evidence)),
            "{:?}",
            rebooted[0].evidence
        );
        let c = view.nodes.iter().find(|n| n.id == "c").expect("c");
        assert!(
            c.evidence
                .iter()
                .any(|e| e.contains("rebooted (no kernel panic report)")),
            "{:?}",
            c.evidence
        );
    }
    settle(&lab, "the whole mesh up after c's reboot");
    lab.teardown().expect("lab down");
}
