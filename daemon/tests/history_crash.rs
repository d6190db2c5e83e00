//! The incident history survives SIGKILL: a real `meshd run` is killed 50
//! times at random points while its history is being written (a config
//! reload every 100 ms, each a point incident); every start must succeed,
//! and the history must hold every incident older than a second at the
//! kill. A garbage history file is moved aside and named in the log, and
//! meshd starts.
//!
//! Holds the machine-wide test lock: the one-second rule is about the
//! disk's fsync, which another suite's load must not stretch.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::EventKind;
use meshd_domain::history::{EntryKind, HistoryQuery, Incident};
use meshd_proto::convert::History;
use meshd_proto::wire;
use meshd_proto::wire::mesh_client::MeshClient;

const KILLS: usize = 50;
/// What the history may lose to a kill: its flush interval and a commit.
const MAY_LOSE: Duration = Duration::from_secs(1);
/// A reload's event is stamped just before its log line is written.
const STAMP_TO_LOG: Duration = Duration::from_millis(200);

fn config(dir: &Path, loss_degraded: f64) -> String {
    format!(
        "[node]\nid = \"crash\"\n\n[listen]\ngrpc = \"127.0.0.1:0\"\nmetrics = \"127.0.0.1:0\"\n\n\
         [thresholds]\nloss_degraded = {loss_degraded}\n\n[history]\npath = \"{}\"\n",
        dir.join("history.redb").display()
    )
}

/// The log lines of a running meshd, read on a thread, each parsed.
struct Logs {
    lines: mpsc::Receiver<serde_json::Value>,
    seen: Vec<serde_json::Value>,
}

impl Logs {
    fn follow(stderr: ChildStderr) -> Self {
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let entry = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "message": line }));
                if tx.send(entry).is_err() {
                    return;
                }
            }
        });
        Self {
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line with `message`; panics with the log so far after
    /// 20 s or when meshd exits.
    fn until(&mut self, message: &str) -> serde_json::Value {
        let said = |entry: &serde_json::Value| {
            entry["message"]
                .as_str()
                .is_some_and(|m| m.contains(message))
        };
        if let Some(entry) = self.seen.iter().find(|e| said(e)) {
            return entry.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(entry) => {
                    self.seen.push(entry.clone());
                    if entry["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(message))
                    {
                        return entry;
                    }
                }
                Err(_) => panic!("no {message:?} in the log: {:#?}", self.seen),
            }
        }
    }

    /// Every line until the pipe closes (meshd is dead).
    fn rest(mut self) -> Vec<serde_json::Value> {
        while let Ok(entry) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.seen.push(entry);
        }
        self.seen
    }
}

/// A meshd this test started: killed and reaped however the test ends, a
/// failed assertion included.
struct Meshd(Child);

impl Drop for Meshd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Meshd {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Meshd {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

fn start(meshd_dir: &Path, config_path: &Path) -> (Meshd, Logs, SocketAddr) {
    let mut child = Meshd(
        Command::new(env!("CARGO_BIN_EXE_meshd"))
            .args(["run", "--config"])
            .arg(config_path)
            .args(["--log-format", "json"])
            .current_dir(meshd_dir)
            .env_remove("RUST_LOG")
            .env_remove("STATE_DIRECTORY")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("meshd starts"),
    );
    let mut logs = Logs::follow(child.stderr.take().expect("stderr"));
    let started = logs.until("meshd started");
    let grpc: SocketAddr = started["grpc"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .expect("the start line names the gRPC address");
    (child, logs, grpc)
}

fn kill(child: &mut Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// The history once `done` holds of it (what a run just recorded reaches
/// the store within a flush); panics with it after 10 s.
async fn history_until(grpc: SocketAddr, done: impl Fn(&[Incident]) -> bool) -> Vec<Incident> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let incidents = history(grpc).await;
        if done(&incidents) {
            return incidents;
        }
        assert!(
            Instant::now() < deadline,
            "the history never got there: {incidents:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn count(incidents: &[Incident], wanted: impl Fn(&meshd_domain::history::Entry) -> bool) -> usize {
    incidents
        .iter()
        .flat_map(|i| &i.entries)
        .filter(|e| wanted(e))
        .count()
}

async fn history(grpc: SocketAddr) -> Vec<Incident> {
    let mut client = MeshClient::new(common::channel(grpc).await);
    let request = wire::GetHistoryRequest::from(HistoryQuery {
        since: Some(SystemTime::UNIX_EPOCH),
        limit: 1000,
        ..Default::default()
    });
    let reply = tokio::time::timeout(Duration::from_secs(10), client.get_history(request))
        .await
        .expect("GetHistory answers in time")
        .expect("GetHistory answers");
    History::try_from(reply.into_inner())
        .expect("a well-formed history")
        .incidents
}

/// When each config reload of a run was logged.
fn reloads_logged(lines: &[serde_json::Value]) -> Vec<SystemTime> {
    lines
        .iter()
        .filter(|l| l["kind"] == "config_reloaded")
        .filter_map(|l| l["timestamp"].as_str())
        .filter_map(|t| humantime::parse_rfc3339(t).ok())
        .collect()
}

/// Whether every logged reload has its own entry in the history, stamped
/// up to `STAMP_TO_LOG` before its log line.
fn missing(logged: &[SystemTime], recorded: &[SystemTime]) -> Vec<SystemTime> {
    let mut recorded = recorded.to_vec();
    recorded.sort();
    let mut missing = Vec::new();
    for log in logged {
        let found = recorded
            .iter()
            .position(|at| *at <= *log + Duration::from_millis(5) && *log <= *at + STAMP_TO_LOG);
        match found {
            Some(i) => {
                recorded.remove(i);
            }
            None => missing.push(*log),
        }
    }
    missing
}

/// xorshift: the kill points, repeatable from the seed the test prints.
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_loses_nothing_older_than_a_second() {
    let _serial = meshd_test_lock::exclusive();
    let dir = tempfile::tempdir().expect("dir");
    let config_path = dir.path().join("meshd.toml");
    std::fs::write(&config_path, config(dir.path(), 0.02)).expect("config");
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 | 1)
        .unwrap_or(1);
    eprintln!("kill points from seed {seed}");
    let mut random = Random(seed);
    // Every reload logged at least a second before a kill, over all runs.
    let mut must_survive: Vec<SystemTime> = Vec::new();
    let mut version = 0u32;
    for run in 0..KILLS {
        let (mut child, logs, grpc) = start(dir.path(), &config_path);
        // The history must already hold what the runs before wrote.
        let recorded: Vec<SystemTime> = history(grpc)
            .await
            .iter()
            .flat_map(|i| &i.entries)
            .filter(|e| e.kind == EntryKind::Event(EventKind::ConfigReloaded))
            .map(|e| e.at)
            .collect();
        let lost = missing(&must_survive, &recorded);
        assert!(
            lost.is_empty(),
            "run {run}: reloads older than {MAY_LOSE:?} at their kill are missing: {lost:?} \
             (seed {seed})"
        );
        // A new config every 100 ms (meshd reloads at most every 200 ms,
        // each a changed config), and a kill at a random point among them.
        let writing_for = Duration::from_millis(600 + random.below(1400));
        let until = Instant::now() + writing_for;
        while Instant::now() < until {
            version += 1;
            let value = 0.02 + f64::from(version) * 0.0001;
            std::fs::write(&config_path, config(dir.path(), value)).expect("config");
            kill(&mut child, "-HUP");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(random.below(100))).await;
        let killed_at = SystemTime::now();
        kill(&mut child, "-KILL");
        let _ = child.wait();
        let lines = logs.rest();
        must_survive.extend(
            reloads_logged(&lines)
                .into_iter()
                .filter(|logged| *logged + MAY_LOSE <= killed_at),
        );
    }
    eprintln!(
        "{KILLS} kills; {} reloads logged at least {MAY_LOSE:?} before their kill, all kept",
        must_survive.len()
    );
    assert!(
        must_survive.len() >= KILLS,
        "the runs reloaded their config: {}",
        must_survive.len()
    );
    // The last check, and the meshd_started of every run.
    let (mut child, logs, grpc) = start(dir.path(), &config_path);
    let started = |e: &meshd_domain::history::Entry| e.kind == EntryKind::MeshdStarted;
    // Every start is in the history, this one too once flushed.
    let incidents = history_until(grpc, |i| count(i, started) == KILLS + 1).await;
    assert_eq!(
        count(&incidents, |e| e.summary.contains("ended without stopping")),
        KILLS,
        "each start after a kill says so"
    );
    let recorded: Vec<SystemTime> = incidents
        .iter()
        .flat_map(|i| &i.entries)
        .filter(|e| e.kind == EntryKind::Event(EventKind::ConfigReloaded))
        .map(|e| e.at)
        .collect();
    assert_eq!(missing(&must_survive, &recorded), Vec::<SystemTime>::new());
    kill(&mut child, "-TERM");
    assert_eq!(child.wait().expect("exit").code(), Some(0));
    drop(logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_or_truncated_history_is_moved_aside_named_in_the_log_and_meshd_starts() {
    let dir = tempfile::tempdir().expect("dir");
    let config_path = dir.path().join("meshd.toml");
    std::fs::write(&config_path, config(dir.path(), 0.02)).expect("config");
    let history_path = dir.path().join("history.redb");
    // A real history first, then cut short.
    let (mut child, logs, grpc) = start(dir.path(), &config_path);
    history_until(grpc, |i| !i.is_empty()).await;
    kill(&mut child, "-TERM");
    let _ = child.wait();
    drop(logs);
    let length = std::fs::metadata(&history_path).expect("history").len();
    let truncated: Vec<u8> =
        std::fs::read(&history_path).expect("read")[..(length / 3) as usize].to_vec();
    let garbage: Vec<u8> = (0..50_000u32)
        .map(|i| (i.wrapping_mul(40_503) >> 7) as u8)
        .collect();
    for (what, bytes) in [("truncated", truncated), ("garbage", garbage)] {
        std::fs::write(&history_path, &bytes).expect("spoil the history");
        let (mut child, mut logs, grpc) = start(dir.path(), &config_path);
        let moved = logs.until("moved aside");
        assert_eq!(moved["level"], "WARN", "{what}: {moved}");
        let aside = moved["moved_to"]
            .as_str()
            .expect("the log names the new name");
        assert!(aside.contains("history.redb.corrupt-"), "{what}: {aside}");
        assert_eq!(
            std::fs::read(aside).expect("the file moved aside"),
            bytes,
            "{what}"
        );
        // The new history starts by saying so.
        history_until(grpc, |i| {
            count(i, |e| e.summary.contains("was unreadable and was moved to")) == 1
        })
        .await;
        kill(&mut child, "-TERM");
        assert_eq!(child.wait().expect("exit").code(), Some(0), "{what}");
        std::fs::remove_file(aside).expect("remove");
        drop(logs.rest());
    }
}
