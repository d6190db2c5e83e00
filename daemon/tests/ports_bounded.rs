//! Every port bounded (issue 32): a meshd held to the field's 1024 file
//! descriptors (a child process under `ulimit -n`, so that the test's own
//! sockets do not count against it) flooded with half-sent HTTP requests
//! and held gRPC connections still answers `GetStatus` and `WatchEvents`
//! within the 3 s, and its watchers keep reading; under a lower
//! limit the descriptor reserve, not the caps, is what holds. Loopback
//! only; no privilege needed.

mod common;

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use meshd::ports::{EVENT_STREAMS_PER_CONNECTION, HTTP_MAX_CONNECTIONS, descriptors};
use meshd_proto::wire;
use meshd_proto::wire::mesh_client::MeshClient;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use tonic::transport::{Channel, Endpoint};

use common::free_ports;

/// What the issue accepts for `meshctl status` and `watch` under a flood.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);
const HALF_SENT_REQUESTS: usize = 1100;
const HELD_GRPC_CONNECTIONS: usize = 200;
/// How long the floods are kept up: past one facts read (every 5 s here)
/// and past the HTTP port's header deadline, so the flood is renewed as
/// meshd cuts it.
const FLOOD_FOR: Duration = Duration::from_secs(8);
/// The series a facts read leaves: how long it took.
const FACTS_READ: &str = "meshd_facts_read_duration_seconds ";

/// A meshd in a child process under a descriptor limit, killed when dropped.
struct LimitedMeshd {
    child: Child,
    grpc: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
    limit: u64,
    _dir: tempfile::TempDir,
}

impl Drop for LimitedMeshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LimitedMeshd {
    /// Starts meshd with at most `limit` descriptors (soft and hard, so it
    /// cannot raise them) and facts read every 5 s; returns once it answers.
    async fn start(limit: u64) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let [grpc, metrics] = free_ports();
        let grpc = SocketAddr::from(([127, 0, 0, 1], grpc));
        let metrics = SocketAddr::from(([127, 0, 0, 1], metrics));
        let config = dir.path().join("meshd.toml");
        std::fs::write(
            &config,
            format!(
                "[node]\nid = \"ports\"\n\n[listen]\ngrpc = \"{grpc}\"\nmetrics = \"{metrics}\"\n\n\
                 [platform]\nfacts_interval = \"5s\"\n"
            ),
        )
        .expect("config");
        let log = dir.path().join("meshd.log");
        let child = Command::new("sh")
            .args([
                "-c",
                &format!("ulimit -n {limit} && exec \"$0\" \"$@\""),
                env!("CARGO_BIN_EXE_meshd"),
                "run",
                "--config",
            ])
            .arg(&config)
            .args(["--log-format", "json"])
            .env("RUST_LOG", "info")
            // Its incident history in its own directory, not the machine's.
            .env("STATE_DIRECTORY", dir.path())
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("log file"))
            .spawn()
            .expect("meshd starts");
        let meshd = Self {
            child,
            grpc,
            metrics,
            log,
            limit,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while get_status(grpc).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "meshd did not answer within 30 s: {}",
                meshd.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        meshd
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The child's open descriptors leave the reserve free, give or take
    /// the few a watcher has open right then. Where there is no
    /// `/proc/PID/fd` to count them (macOS), the caps and the watchers'
    /// checks speak for it.
    fn assert_reserve_free(&self) {
        if let Ok(entries) = std::fs::read_dir(format!("/proc/{}/fd", self.child.id())) {
            let open = entries.count() as u64;
            assert!(
                open + descriptors::RESERVE <= self.limit + 8,
                "meshd holds {open} of its {} descriptors, into the reserve of {}",
                self.limit,
                descriptors::RESERVE
            );
        }
    }

    /// No watcher (nor anything else) met the descriptor limit.
    fn assert_never_out_of_descriptors(&self) {
        let logs = self.logs();
        assert!(
            !logs.contains("Too many open files") && !logs.contains("os error 24"),
            "meshd ran out of descriptors: {logs}"
        );
    }
}

async fn connect(addr: SocketAddr) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect_timeout(ANSWER_WITHIN)
        .connect()
        .await
}

/// A fresh connection and one `GetStatus`, as `meshctl status` makes them.
async fn get_status(addr: SocketAddr) -> Result<wire::MeshStatus, String> {
    let call = async {
        let mut client = MeshClient::new(connect(addr).await.map_err(|e| e.to_string())?);
        client
            .get_status(wire::GetStatusRequest {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| s.to_string())
    };
    timeout(ANSWER_WITHIN, call)
        .await
        .map_err(|_| format!("no answer within {ANSWER_WITHIN:?}"))?
}

/// A fresh connection and an event stream, as `meshctl watch` opens them.
async fn watch(addr: SocketAddr) -> Result<tonic::Streaming<wire::Event>, String> {
    let call = async {
        let mut client = MeshClient::new(connect(addr).await.map_err(|e| e.to_string())?);
        client
            .watch_events(wire::WatchEventsRequest {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| s.to_string())
    };
    timeout(ANSWER_WITHIN, call)
        .await
        .map_err(|_| format!("no stream within {ANSWER_WITHIN:?}"))?
}

/// Opens `count` HTTP requests to `addr` that never finish their headers,
/// and keeps `count` of them open until `until`, opening a new one for
/// every one meshd closes (refused, or past its header deadline).
async fn half_sent_flood(addr: SocketAddr, count: usize, until: Instant) -> usize {
    let mut open: Vec<Option<TcpStream>> = (0..count).map(|_| None).collect();
    let mut opened = 0;
    while Instant::now() < until {
        for slot in &mut open {
            let closed = match slot {
                None => true,
                Some(stream) => {
                    let mut byte = [0u8; 1];
                    match stream.try_read(&mut byte) {
                        Ok(_) => true,
                        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                    }
                }
            };
            if !closed {
                continue;
            }
            *slot = None;
            let Ok(Ok(mut stream)) =
                timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
            else {
                continue;
            };
            // Headers begun, never ended.
            if stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                .await
                .is_ok()
            {
                opened += 1;
                *slot = Some(stream);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    opened
}

/// A scrape of `/metrics` at `addr` that holds `needle`. Once the floods
/// are over a refused connection is closed at once and the half-sent ones
/// within the header deadline, so a scrape gets in within a few seconds.
async fn scrape(addr: SocketAddr, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = timeout(Duration::from_secs(2), async {
            let mut stream = TcpStream::connect(addr).await?;
            stream
                .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
                .await?;
            let mut raw = String::new();
            tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut raw).await?;
            Ok::<_, std::io::Error>(raw)
        })
        .await;
        if let Ok(Ok(raw)) = attempt
            && let Some((_, body)) = raw.split_once("\r\n\r\n")
            && body.contains(needle)
        {
            return body.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no scrape with {needle} within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of the series `series` (name and labels as written).
fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// This test process holds ~1400 sockets: it raises its own limit, and
/// skips (except under CI) where the hard limit does not allow that.
fn room_for_the_floods() -> bool {
    let needed = (HALF_SENT_REQUESTS + HELD_GRPC_CONNECTIONS + 256) as u64;
    let limit = descriptors::Descriptors::raise().limit();
    if limit >= needed {
        return true;
    }
    let reason = format!("this process may open {limit} descriptors, the floods need {needed}");
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "ports_bounded must run under CI: {reason}"
    );
    eprintln!("skipped: {reason}");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_and_held_connections_leave_status_watch_and_watchers_working() {
    if !room_for_the_floods() {
        return;
    }
    let meshd = LimitedMeshd::start(1024).await;
    let before = scrape(meshd.metrics, FACTS_READ).await;

    // The held gRPC connections: each spoke (a status), none closes.
    let mut held = Vec::new();
    for _ in 0..HELD_GRPC_CONNECTIONS {
        let channel = connect(meshd.grpc).await.expect("held connection");
        MeshClient::new(channel.clone())
            .get_status(wire::GetStatusRequest {})
            .await
            .expect("status on a held connection");
        held.push(channel);
    }
    // One connection holds its share of event streams, and no more.
    let mut greedy = MeshClient::new(held[0].clone());
    let mut streams = Vec::new();
    for _ in 0..EVENT_STREAMS_PER_CONNECTION {
        streams.push(
            greedy
                .watch_events(wire::WatchEventsRequest {})
                .await
                .expect("within the connection's share"),
        );
    }
    let refused = greedy
        .watch_events(wire::WatchEventsRequest {})
        .await
        .expect_err("past the connection's share");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains(&format!(
            "already holds {EVENT_STREAMS_PER_CONNECTION} event streams"
        )),
        "{refused:?}"
    );

    let until = Instant::now() + FLOOD_FOR;
    let flood = tokio::spawn(half_sent_flood(meshd.metrics, HALF_SENT_REQUESTS, until));
    // Once the flood is up, and then every second while it lasts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut answered = 0;
    while Instant::now() < until {
        get_status(meshd.grpc)
            .await
            .unwrap_or_else(|e| panic!("status during the flood: {e}; {}", meshd.logs()));
        watch(meshd.grpc)
            .await
            .unwrap_or_else(|e| panic!("watch during the flood: {e}; {}", meshd.logs()));
        answered += 1;
        meshd.assert_reserve_free();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let opened = flood.await.expect("flood task");
    assert!(answered >= 3, "answered {answered} times");
    assert!(
        opened >= HALF_SENT_REQUESTS,
        "the flood opened {opened} requests"
    );
    drop((streams, held));

    let after = scrape(meshd.metrics, FACTS_READ).await;
    let refused_for_cap = value(
        &after,
        "meshd_connections_refused_total{listener=\"http\",reason=\"cap\"}",
    )
    .expect("refusals counted");
    assert!(
        refused_for_cap >= (HALF_SENT_REQUESTS - HTTP_MAX_CONNECTIONS) as f64,
        "{refused_for_cap} refused"
    );
    assert_watchers_kept_reading(&before, &after);
    meshd.assert_never_out_of_descriptors();
}

/// Under a limit too low for the caps to hold alone, the HTTP port gives
/// way at the reserve (and meshctl's share) instead of taking the last
/// descriptors: status still answers, the watchers still read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_low_limit_the_descriptor_reserve_holds() {
    if !room_for_the_floods() {
        return;
    }
    const LOW_LIMIT: u64 = 384;
    let meshd = LimitedMeshd::start(LOW_LIMIT).await;
    let before = scrape(meshd.metrics, FACTS_READ).await;
    let until = Instant::now() + FLOOD_FOR;
    let flood = tokio::spawn(half_sent_flood(meshd.metrics, HALF_SENT_REQUESTS, until));
    tokio::time::sleep(Duration::from_secs(2)).await;
    while Instant::now() < until {
        get_status(meshd.grpc)
            .await
            .unwrap_or_else(|e| panic!("status at the reserve: {e}; {}", meshd.logs()));
        meshd.assert_reserve_free();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    flood.await.expect("flood task");
    let after = scrape(meshd.metrics, FACTS_READ).await;
    let refused = value(
        &after,
        "meshd_connections_refused_total{listener=\"http\",reason=\"descriptors\"}",
    )
    .expect("refusals counted");
    assert!(refused > 0.0, "the reserve never refused: {after}");
    assert_watchers_kept_reading(&before, &after);
    meshd.assert_never_out_of_descriptors();
}

/// The facts watcher read again while the port was flooded (a new read
/// takes a new time) and saw no more blind spots than before (a command it
/// could not start for want of a descriptor would be one); the CPU watcher
/// still samples.
fn assert_watchers_kept_reading(before: &str, after: &str) {
    let took = |s: &str| value(s, FACTS_READ.trim_end());
    assert_ne!(took(before), took(after), "no facts read since");
    let blind = |s: &str| value(s, "meshd_facts_blind_spots").expect("blind spots");
    assert!(blind(after) <= blind(before), "{before}\n---\n{after}");
    assert!(
        value(after, "meshd_node_cpu_busy_ratio").is_some(),
        "the CPU watcher stopped: {after}"
    );
}
