//! The incident history (issue 36) on real daemons: a cable cut, a node's
//! meshd killed, a reboot-like restart (a new boot id); then every node's
//! meshd restarted; then each node's `meshctl history --json` still lists
//! those incidents, each starting and ending between the fault's action
//! and the moment the test saw its verdict, and `--mesh` answers the same
//! incidents on every node.
//!
//! Root, `ip`; skipped with a message without them, except under `CI=true`.

mod common;

use std::collections::BTreeSet;
use std::time::SystemTime;

use common::{RECOVERY, expect, link_is, settle};
use meshd_lab::Lab;
use serde_json::Value;

const ALL: [&str; 4] = ["a", "b", "c", "d"];

/// `meshctl history --json` (with `--mesh`) on node `id`.
fn history(lab: &Lab, id: &str, mesh: bool) -> Value {
    let meshctl = lab.binaries.meshctl.to_string_lossy().into_owned();
    let mut args = vec!["history", "--json", "--since", "1h", "--limit", "1000"];
    if mesh {
        args.push("--mesh");
    }
    let out = lab
        .exec(id, &meshctl, &args)
        .unwrap_or_else(|err| panic!("meshctl history on {id}: {err}"));
    serde_json::from_str(&out).unwrap_or_else(|err| panic!("{id}: {err}: {out}"))
}

fn time(value: &Value) -> SystemTime {
    value
        .as_str()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

/// The incidents of `doc` observed by `observer` with an entry of `kind`
/// about `subject` (its nodes or its subject).
fn incidents_with<'a>(
    doc: &'a Value,
    observer: &str,
    kind: &str,
    about: impl Fn(&Value) -> bool + 'a,
) -> Vec<&'a Value> {
    doc["incidents"]
        .as_array()
        .expect("incidents")
        .iter()
        .filter(|i| i["observer"] == observer)
        .filter(|i| {
            i["entries"]
                .as_array()
                .is_some_and(|entries| entries.iter().any(|e| e["kind"] == kind && about(e)))
        })
        .collect()
}

fn names(entry: &Value, a: &str, b: &str) -> bool {
    let nodes: Vec<&str> = entry["nodes"]
        .as_array()
        .map(|n| n.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    nodes.contains(&a) && nodes.contains(&b)
}

/// Asserts `t` lies in `from..=to`, naming it.
fn within(what: &str, t: SystemTime, from: SystemTime, to: SystemTime, incident: &Value) {
    let ms = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default()
    };
    assert!(
        from <= t && t <= to,
        "{what}: {} ms is not within {} ..= {} ms: {incident:#}",
        ms(t),
        ms(from),
        ms(to)
    );
}

fn other_boot(boot: &str) -> String {
    let last = if boot.ends_with('0') { '1' } else { '0' };
    format!("{}{last}", &boot[..boot.len() - 1])
}

#[test]
fn each_node_keeps_its_incidents_across_restarts_and_the_mesh_agrees() {
    if !common::can_run(&[]) {
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let mut lab = common::four_nodes(false);

    // A cut: a-b pulled, then plugged.
    let pulled = SystemTime::now();
    lab.pull_cable("a", "b").expect("pull");
    expect(&lab, &ALL, "a-b down everywhere", |s| {
        link_is(s, "a", "b", "down")
    });
    let seen_down = SystemTime::now();
    let plugged = SystemTime::now();
    lab.plug_cable("a", "b").expect("plug");
    settle(&lab, "a-b up again");
    let seen_up = SystemTime::now();

    // A node's meshd killed, and started again once its peers call it down.
    let killed = SystemTime::now();
    lab.signal_daemon("c", "KILL").expect("kill c");
    expect(&lab, &["a", "b", "d"], "c down", |s| {
        s.node_state("c") == Some("down")
    });
    let seen_c_down = SystemTime::now();
    let restarted = SystemTime::now();
    lab.start("c", "info").expect("start c");
    settle(&lab, "c back");
    let seen_c_up = SystemTime::now();

    // A reboot-like restart of d: its facts replayed with another boot id.
    let host_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .expect("boot_id")
        .trim()
        .to_owned();
    let archive = lab.state_dir().join("d-bundle.tar.gz");
    let meshctl = lab.binaries.meshctl.to_string_lossy().into_owned();
    lab.exec(
        "d",
        &meshctl,
        &["bundle", "--out", &archive.to_string_lossy()],
    )
    .expect("meshctl bundle");
    let unpacked = meshd_platform::bundle::unpack(&archive).expect("unpack");
    let replay = lab.state_dir().join("d-replay");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(unpacked.dir())
        .arg(&replay)
        .status()
        .expect("cp");
    assert!(copied.success(), "cp -a the unpacked bundle");
    std::fs::write(
        replay.join("proc/sys/kernel/random/boot_id"),
        format!("{}\n", other_boot(&host_boot)),
    )
    .expect("write boot id");
    let rebooted = SystemTime::now();
    lab.stop("d").expect("stop d");
    let config = lab.config_path("d");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "\n[platform]\nreplay_dir = \"{}\"\n",
        replay.display()
    ));
    std::fs::write(&config, text).expect("write config");
    lab.start("d", "info").expect("start d");
    expect(&lab, &["a", "b", "c"], "d's reboot seen", |s| {
        s.has_alarm("node_rebooted", "d") && s.node_state("d") == Some("up")
    });
    let seen_rebooted = SystemTime::now();

    // Every node's meshd restarted: the history is read from disk.
    let restarts_began = SystemTime::now();
    for id in ALL {
        lab.stop(id).expect("stop");
        lab.start(id, "info").expect("start");
    }
    lab.wait_all("every node back after the restarts", RECOVERY, |s| {
        s.nodes.iter().all(|n| n.state == "up")
    })
    .unwrap_or_else(|err| panic!("{err}"));

    for id in ALL {
        let doc = history(&lab, id, false);
        let cut = incidents_with(&doc, id, "link_down", |e| names(e, "a", "b"));
        assert_eq!(cut.len(), 1, "{id}: one incident of the cut: {doc:#}");
        within(
            &format!("{id}: the cut's start"),
            time(&cut[0]["started_at"]),
            pulled,
            seen_down,
            cut[0],
        );
        within(
            &format!("{id}: the cut's end"),
            time(&cut[0]["ended_at"]),
            plugged,
            seen_up,
            cut[0],
        );
        if id != "c" {
            let death = incidents_with(&doc, id, "node_down", |e| e["subject"] == "c");
            assert_eq!(death.len(), 1, "{id}: one incident of c's death: {doc:#}");
            within(
                &format!("{id}: c's death's start"),
                time(&death[0]["started_at"]),
                killed,
                seen_c_down,
                death[0],
            );
            within(
                &format!("{id}: c's death's end"),
                time(&death[0]["ended_at"]),
                restarted,
                seen_c_up,
                death[0],
            );
        }
        if id != "d" {
            let reboot = incidents_with(&doc, id, "node_rebooted", |e| e["subject"] == "d");
            assert_eq!(reboot.len(), 1, "{id}: d's reboot: {doc:#}");
            let entry = reboot[0]["entries"]
                .as_array()
                .and_then(|e| e.iter().find(|e| e["kind"] == "node_rebooted"))
                .expect("the entry");
            within(
                &format!("{id}: d's reboot"),
                time(&entry["at"]),
                rebooted,
                seen_rebooted,
                reboot[0],
            );
        }
        // Its own starts: the lab's, c's or d's restarts, and the last one.
        let starts = incidents_with(&doc, id, "meshd_started", |_| true).len();
        assert!(
            starts >= 2,
            "{id}: {starts} starts of its meshd recorded: {doc:#}"
        );
    }

    // The mesh-wide history is the same incidents from every node.
    let mesh: Vec<BTreeSet<(String, u64)>> = ALL
        .iter()
        .map(|id| {
            let doc = history(&lab, id, true);
            let answered: Vec<&Value> = doc["nodes"].as_array().expect("nodes").iter().collect();
            assert_eq!(answered.len(), ALL.len(), "{id}: {doc:#}");
            assert!(
                answered.iter().all(|n| n.get("error").is_none()),
                "{id}: every node answered: {doc:#}"
            );
            doc["incidents"]
                .as_array()
                .expect("incidents")
                .iter()
                // What ended before the restarts (each node moves its
                // peers' times by the clock offsets it measured: none
                // lands near the edge).
                .filter(|i| i["ended_at"].is_string())
                .filter(|i| {
                    time(&i["ended_at"]) + std::time::Duration::from_millis(500) < restarts_began
                })
                .map(|i| {
                    (
                        i["observer"].as_str().unwrap_or_default().to_owned(),
                        i["id"].as_u64().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .collect();
    for (id, seen) in ALL.iter().zip(&mesh) {
        if seen != &mesh[0] {
            for asker in ["a", *id] {
                let doc = history(&lab, asker, true);
                eprintln!("--mesh on {asker}: {:#}", doc["incidents"]);
            }
            eprintln!(
                "seen_rebooted: {}",
                humantime::format_rfc3339_millis(seen_rebooted)
            );
        }
        assert_eq!(seen, &mesh[0], "{id}'s --mesh differs from a's");
    }
    let observers: BTreeSet<&str> = mesh[0].iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(
        observers,
        ALL.iter().copied().collect(),
        "every node's view is merged"
    );
}
