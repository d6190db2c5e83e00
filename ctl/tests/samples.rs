//! The docs' samples of what `meshctl` prints, produced by this build's
//! meshctl against a 4-node demo mesh (see `doc_samples`): `status` and
//! `hostfile` on node a after `cut a b`, and `watch` on node d from before
//! the cut until `heal a b`. `MESHD_UPDATE_SAMPLES=1` rewrites them. The
//! abridged `status --json` document (not a whole output) is held by its
//! keys: each must be one `status --json` prints.
//!
//! The checks in `status` are this host's (the demo's nodes all read the
//! machine they run on): the samples show a Linux host without RDMA, so the
//! test runs on such a host and skips elsewhere, saying so.

mod binary;
#[path = "../../daemon/tests/common/mod.rs"]
mod common;
#[path = "../../daemon/tests/doc_samples/mod.rs"]
mod doc_samples;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshd_domain::{LinkState, MeshStatus};
use serde_json::Value;

use binary::{meshctl, text};

/// A Linux host without an RDMA device: what the samples show.
fn like_the_samples() -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err("the samples show a Linux host".to_owned());
    }
    let devices = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count())
        .unwrap_or(0);
    if devices > 0 {
        return Err("this host has RDMA devices; the samples show one without".to_owned());
    }
    Ok(())
}

/// a's view of the cable a–b: down, with both ends' evidence, each with
/// probes lost in a row (just after the cut an end may have lost none or
/// one yet).
fn a_b_down(s: &MeshStatus) -> bool {
    s.links.iter().any(|l| {
        l.a.node.as_str() == "a"
            && l.b.node.as_str() == "b"
            && l.state == LinkState::Down
            && l.evidence.len() == 2
            && l.evidence
                .iter()
                .all(|e| e.contains("probes lost in a row"))
    })
}

/// `meshctl watch` on a node, its lines collected as they come.
struct Watch {
    child: std::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Watch {
    fn start(addr: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_meshctl"))
            .args(["--addr", addr, "watch"])
            .env_remove("MESHCTL_ADDR")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("meshctl watch runs");
        let stdout = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().expect("lines").push(line);
            }
        });
        Self { child, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    /// Waits for a line that contains `words`.
    async fn until(&self, words: &str) {
        let started = Instant::now();
        while !self.lines().iter().any(|l| l.contains(words)) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no watch line with {words:?}: {:#?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meshctls_samples_are_what_it_prints_against_a_demo() {
    if let Err(why) = like_the_samples() {
        eprintln!("skipped: {why}");
        return;
    }
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, plan) = common::start_demo(4).await;
    let a = plan.nodes[0].grpc();
    let d = plan.nodes[3].grpc();
    common::until(a, "all up", MeshStatus::is_healthy).await;
    // Every link, not only d's own three: the sample's snapshot shows six.
    common::until(d, "all up at d, every link known", |s| {
        s.is_healthy() && s.links.len() == 6
    })
    .await;
    let watch = Watch::start(&d.to_string());
    watch.until(" snapshot ").await;

    let reply = demo.execute("cut a b").await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{reply}");
    common::until(a, "a-b down at a, both ends heard", a_b_down).await;
    watch.until(" link_down ").await;

    // The sample shows the cut alone: on a busy machine a lateness alarm
    // (`mesh_saturated`) can come and go meanwhile, so wait it out.
    let started = Instant::now();
    let status = loop {
        let out = meshctl(&["--addr", &a.to_string(), "status"]).await;
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let shown = text(&out.stdout);
        if shown.contains("alarms: none besides") && shown.contains("probes lost in a row") {
            break out;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the cut never showed alone: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let hostfile = meshctl(&["--addr", &a.to_string(), "hostfile"]).await;
    assert_eq!(
        hostfile.status.code(),
        Some(1),
        "{}",
        text(&hostfile.stdout)
    );

    let cut_json = meshctl(&["--addr", &a.to_string(), "status", "--json"]).await;

    let reply = demo.execute("heal a b").await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{reply}");
    watch.until(" link_recovered ").await;
    // The first snapshot and the cable's own events: alarms a busy machine
    // raises about its lateness (`mesh_saturated`) are not part of the
    // sample, nor a fresh snapshot a watcher that fell behind is sent.
    let lines = watch.lines();
    let first_snapshot = lines.iter().find(|l| l.contains(" snapshot "));
    let watched = first_snapshot
        .into_iter()
        .chain(lines.iter().filter(|l| l.contains("link a <-> b")))
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    drop(watch);

    // An alarm for the JSON contract's keys: a without quorum.
    for command in ["kill b", "kill c"] {
        let reply = demo.execute(command).await.reply.unwrap_or_default();
        assert!(reply.starts_with("ok"), "{reply}");
    }
    common::until(a, "a without quorum, its alarm raised", |s| {
        !s.quorum.has_quorum && !s.alarms.is_empty()
    })
    .await;
    let alarm_json = meshctl(&["--addr", &a.to_string(), "status", "--json"]).await;
    demo.stop().await;
    the_contract_shows_only_keys_status_json_has(&cut_json.stdout, &alarm_json.stdout);

    // The samples show the demo on its default ports, node a's gRPC first.
    let shown_a = text(&hostfile.stderr).replace(&a.to_string(), "127.0.0.1:17401");
    doc_samples::check("status-cut-a-b", &text(&status.stdout));
    doc_samples::check("hostfile-cut-a-b", &shown_a);
    doc_samples::check("watch-cut-a-b", &watched);
}

/// Every key of the abridged `status --json` document docs/CLI.md shows
/// (its sample `status-json-contract`) is one that `meshctl status --json`
/// prints, at the same place: `cut` is a's status after `cut a b`, `alarm`
/// its status without quorum (for the keys of an alarm).
fn the_contract_shows_only_keys_status_json_has(cut: &[u8], alarm: &[u8]) {
    let block = doc_samples::blocks()
        .into_iter()
        .find(|b| b.name() == Some("status-json-contract"))
        .expect("the sample status-json-contract");
    let shown: Value = serde_json::from_str(&block.output()).expect("the sample is JSON");
    let cut: Value = serde_json::from_slice(cut).expect("status --json");
    let alarm: Value = serde_json::from_slice(alarm).expect("status --json");
    let mut missing = Vec::new();
    keys_within(&shown, &cut, "", &mut missing);
    missing.retain(|path| !path.starts_with(".alarms"));
    keys_within(&shown["alarms"], &alarm["alarms"], ".alarms", &mut missing);
    assert!(
        missing.is_empty(),
        "docs/CLI.md's status --json shows keys meshctl does not print: {missing:?}\n{cut:#}"
    );
}

/// The paths of `shown`'s object keys that `real` lacks; an array is
/// judged by its first element against the real array's first.
fn keys_within(shown: &Value, real: &Value, at: &str, missing: &mut Vec<String>) {
    match (shown, real) {
        (Value::Object(shown), Value::Object(real)) => {
            for (key, value) in shown {
                let path = format!("{at}.{key}");
                match real.get(key) {
                    Some(inner) => keys_within(value, inner, &path, missing),
                    None => missing.push(path),
                }
            }
        }
        (Value::Array(shown), Value::Array(real)) => {
            if let Some(first) = shown.first() {
                match real.first() {
                    Some(inner) => keys_within(first, inner, &format!("{at}[0]"), missing),
                    None => missing.push(format!("{at}[0] (the real array is empty)")),
                }
            }
        }
        _ => {}
    }
}
