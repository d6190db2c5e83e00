//! The CPU watcher on the real sysinfo path, and the node core's job
//! judgement on its samples: a copy of `yes` named like a known offender or
//! a job rank burns a core, and they must see it by name and raise (then
//! clear) their alarms. Deadlines are generous; nothing here asserts a
//! speed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd::config::{CpuWatchConfig, JobWatchConfig, settings};
use meshd::metrics::Metrics;
use meshd::state::Published;
use meshd::watch::cpu;
use meshd_domain::fixtures::identity;
use meshd_domain::{Alarm, AlarmKind, MeshStatus, NodeId, NodeState, NodeVerdict, Quorum};
use meshd_model::job_watch::{JobFigures, JobWatch, Sampled};
use meshd_model::jobs::mesh_fault;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(60);

/// Clearing takes one 2 s quiet window; on a host that is never quiet this
/// bounds the wait so the test stays inside nextest's limit.
const CLEAR_DEADLINE: Duration = Duration::from_secs(30);

/// A burner runs a whole core on a quiet machine; on a shared two-core box
/// crowded by compilers it still gets this much.
const BUSY_CORES: f64 = 0.2;

/// Kills the burner however the test ends.
struct Burner {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Burner {
    /// `yes` under another name: it burns a core writing to /dev/null.
    fn start(name: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let exe: PathBuf = dir.path().join(name);
        std::fs::copy(yes(), &exe).expect("copy yes");
        let child = Command::new(&exe)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the burner");
        Self { child, _dir: dir }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        self.stop();
    }
}

fn yes() -> &'static Path {
    ["/usr/bin/yes", "/bin/yes"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("a yes binary")
}

fn cores() -> f64 {
    let n = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    f64::from(u32::try_from(n).unwrap_or(u32::MAX))
}

/// Waits until `done` holds for the latest value of `rx`.
async fn until<T: Clone>(
    rx: &mut watch::Receiver<T>,
    what: &str,
    mut done: impl FnMut(&T) -> bool,
) -> T {
    let wait = async {
        loop {
            let value = rx.borrow_and_update().clone();
            if done(&value) {
                return value;
            }
            rx.changed().await.expect("watcher alive");
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .unwrap_or_else(|_| panic!("{what} within {DEADLINE:?}"))
}

fn seen(sampled: &Option<Arc<Sampled>>, name: &str, pid: u32) -> Option<f64> {
    sampled.as_ref().and_then(|s| {
        s.sample
            .processes
            .iter()
            .find(|p| p.pid == pid && p.name == name)
            .map(|p| p.cores)
    })
}

/// A config channel as the node has one, holding the defaults changed by
/// `edit`; keep the sender alive for as long as the watcher runs.
fn configs_with(
    edit: impl FnOnce(&mut meshd::config::Config),
) -> (
    watch::Sender<Arc<meshd::config::Config>>,
    watch::Receiver<Arc<meshd::config::Config>>,
) {
    let mut config = meshd::config::Config::embedded_default("cpu-test");
    edit(&mut config);
    watch::channel(Arc::new(config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_universal_control_raises_a_cpu_spike_that_clears_when_it_stops() {
    let _serial = meshd_test_lock::exclusive();
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let metrics = Arc::new(Metrics::new(&identity("a", 1)));
    // One busy core must be a spike whatever the machine: 70% of one core's
    // share of the whole.
    let config = CpuWatchConfig {
        interval: Duration::from_secs(1),
        spike_ratio: (0.7 / cores()).min(0.9),
        spike_window: Duration::from_secs(2),
        // Room for the compilers of a shared build box above the burner.
        top: 10,
        ..CpuWatchConfig::default()
    };
    let mut burner = Burner::start("UniversalControl");
    let pid = burner.pid();
    let (_configs, configs) = configs_with(|c| c.watch.cpu = config.clone());
    let (_facts, facts) = watch::channel(None);
    let mut watcher = cpu::spawn(
        identity("a", 1).id,
        configs,
        Vec::new(),
        facts,
        metrics.clone(),
        shutdown.clone(),
    );

    // The real sampler sees it by its full name, burning CPU (a whole core
    // on a quiet machine; its share of two on a crowded one).
    until(&mut watcher.samples, "UniversalControl busy", |s| {
        seen(s, "UniversalControl", pid).is_some_and(|c| c >= BUSY_CORES)
    })
    .await;

    let alarms = until(&mut watcher.alarms, "cpu_spike", |a: &Vec<Alarm>| {
        a.iter()
            .any(|a| a.kind == AlarmKind::CpuSpike && a.summary.contains("UniversalControl"))
    })
    .await;
    let alarm = &alarms[0];
    assert!(
        alarm.summary.contains("UniversalControl ") && alarm.summary.contains("(known offender)"),
        "{}",
        alarm.summary
    );
    assert!(
        alarm
            .evidence
            .iter()
            .any(|e| e.starts_with(&format!("UniversalControl (pid {pid})"))),
        "{:?}",
        alarm.evidence
    );
    assert!(
        alarm
            .fix
            .as_deref()
            .is_some_and(|f| f.contains("Universal Control")),
        "{:?}",
        alarm.fix
    );
    let text = metrics.render(&Published::placeholder(&identity("a", 1)));
    assert!(
        text.contains(r#"meshd_process_cpu_cores{process="UniversalControl"}"#),
        "{text}"
    );

    burner.stop();
    // The alarm must clear once the host has been quiet for the window. A
    // host kept busy by others (a shared build box) never gets quiet; then
    // the alarm must simply stay, which is also checked.
    let quiet_enough = config.spike_window + config.interval * 3;
    let mut quiet_since: Option<std::time::Instant> = None;
    let cleared = tokio::time::timeout(CLEAR_DEADLINE, async {
        loop {
            watcher.samples.changed().await.expect("watcher alive");
            let Some(sampled) = watcher.samples.borrow_and_update().clone() else {
                continue;
            };
            // Alarms are published before the sample they came from.
            if watcher.alarms.borrow().is_empty() {
                return;
            }
            if sampled.sample.busy_ratio >= config.spike_ratio {
                quiet_since = None;
                continue;
            }
            let since = *quiet_since.get_or_insert(sampled.at.now);
            let quiet = sampled.at.now.saturating_duration_since(since);
            assert!(
                quiet <= quiet_enough,
                "quiet for {quiet:?} and the spike is still raised"
            );
        }
    })
    .await;
    if cleared.is_err() {
        eprintln!("the host stayed busy without the burner; clearing not observed");
    }
    let last = watcher.samples.borrow().clone();
    assert!(
        seen(&last, "UniversalControl", pid).is_none(),
        "gone after the kill"
    );
}

fn peer_down_status() -> MeshStatus {
    let node = |id: &str, state| NodeVerdict {
        id: NodeId::new(id).expect("id"),
        state,
        since: SystemTime::now(),
        evidence: vec![],
        identity: None,
        last_report_at: None,
        cpu_saturated: false,
        boot: Default::default(),
        fix: None,
    };
    MeshStatus {
        node: identity("a", 1),
        evaluated_at: SystemTime::now(),
        quorum: Quorum::default(),
        nodes: vec![node("a", NodeState::Up), node("b", NodeState::Down)],
        links: vec![],
        alarms: vec![],
        cables: vec![],
        checks: vec![],
        measurements: vec![],
        jobs: Vec::new(),
    }
}

/// What the node core made of the job ranks in the latest sample.
struct Judged {
    alarms: watch::Receiver<Vec<Alarm>>,
    figures: watch::Receiver<Option<JobFigures>>,
    /// Held for the test's length: the watcher stops when it is dropped.
    _configs: watch::Sender<Arc<meshd::config::Config>>,
}

impl Judged {
    /// The metrics as the node renders them with these figures.
    fn render(&self, metrics: &Metrics) -> String {
        metrics.render(&Published {
            jobs: *self.figures.borrow(),
            ..Published::placeholder(&identity("a", 1))
        })
    }
}

/// The real CPU sampler, and the job judgement the node core runs on each
/// of its samples (`meshd_model::job_watch`, with the rules the config
/// gives), on a mesh where peer b is down.
fn job_watcher(
    jobs: JobWatchConfig,
    metrics: &Arc<Metrics>,
    shutdown: &CancellationToken,
) -> Judged {
    let rules = settings::jobs(&jobs);
    let (configs_tx, configs) = configs_with(|c| c.watch.jobs = jobs);
    let (_facts, facts) = watch::channel(None);
    let mut samples = cpu::spawn(
        identity("a", 1).id,
        configs,
        Vec::new(),
        facts,
        metrics.clone(),
        shutdown.clone(),
    )
    .samples;
    let (alarms_tx, alarms) = watch::channel(Vec::new());
    let (figures_tx, figures) = watch::channel(None);
    let fault = mesh_fault(&peer_down_status(), &identity("a", 1).id);
    let mut judge = JobWatch::new(identity("a", 1).id, &rules);
    tokio::spawn(async move {
        while samples.changed().await.is_ok() {
            let sampled = samples.borrow_and_update().clone();
            alarms_tx.send_replace(judge.judge(sampled.as_deref(), fault.as_ref()).to_vec());
            figures_tx.send_replace(judge.figures());
        }
    });
    Judged {
        alarms,
        figures,
        _configs: configs_tx,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_job_rank_with_a_dead_peer_is_reported_hung() {
    let _serial = meshd_test_lock::exclusive();
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let metrics = Arc::new(Metrics::new(&identity("a", 1)));
    let mut burner = Burner::start("mlx-rank0");
    let pid = burner.pid();
    let mut judged = job_watcher(
        JobWatchConfig {
            busy_cores: BUSY_CORES,
            window: Duration::from_secs(2),
            ..JobWatchConfig::default()
        },
        &metrics,
        &shutdown,
    );

    let raised = until(&mut judged.alarms, "job_hung", |a: &Vec<Alarm>| {
        !a.is_empty()
    })
    .await;
    let alarm = &raised[0];
    assert_eq!(alarm.kind, AlarmKind::JobHung);
    assert_eq!(alarm.subject, "mlx-rank0");
    assert!(
        alarm.summary.contains("likely spinning on a dead peer: b"),
        "{}",
        alarm.summary
    );
    assert!(
        alarm
            .evidence
            .iter()
            .any(|e| e.starts_with(&format!("mlx-rank0 (pid {pid})"))),
        "{:?}",
        alarm.evidence
    );
    let text = judged.render(&metrics);
    assert!(
        text.contains(r#"meshd_job_processes{state="busy"}"#),
        "{text}"
    );

    burner.stop();
    until(&mut judged.alarms, "job_hung to clear", Vec::is_empty).await;
}

/// A rank whose launcher exits is re-parented by the kernel (to init, or
/// to a subreaper): the job watcher names it and what it holds once the
/// grace period has passed, and lets it go when it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_whose_launcher_exited_is_reported_orphaned() {
    let _serial = meshd_test_lock::exclusive();
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let metrics = Arc::new(Metrics::new(&identity("a", 1)));
    let mut judged = job_watcher(
        JobWatchConfig {
            orphan_grace: Duration::from_secs(1),
            ..JobWatchConfig::default()
        },
        &metrics,
        &shutdown,
    );
    // The launcher: a shell that starts a rank (a `sleep` named like one),
    // says its pid, and exits after the watcher has seen the pair.
    let dir = tempfile::tempdir().expect("tempdir");
    let rank = dir.path().join("mlx-orphan-rank");
    let sleep = ["/usr/bin/sleep", "/bin/sleep"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("a sleep binary");
    std::fs::copy(sleep, &rank).expect("copy sleep");
    let launcher = Command::new("sh")
        .args(["-c", "\"$0\" 600 >/dev/null 2>&1 & echo $!; sleep 4"])
        .arg(&rank)
        .stdout(Stdio::piped())
        .spawn()
        .expect("launcher");
    let out = tokio::task::spawn_blocking(move || launcher.wait_with_output())
        .await
        .expect("join")
        .expect("launcher output");
    let pid: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the rank's pid");
    let kill = move || {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    };
    let raised = until(&mut judged.alarms, "job_orphaned", |a: &Vec<Alarm>| {
        a.iter().any(|a| a.kind == AlarmKind::JobOrphaned)
    })
    .await;
    let alarm = raised
        .iter()
        .find(|a| a.kind == AlarmKind::JobOrphaned)
        .expect("orphan");
    let evidence = alarm.evidence.join("; ");
    kill();
    assert_eq!(alarm.subject, "mlx-orphan-rank");
    assert!(
        evidence.starts_with(&format!("mlx-orphan-rank (pid {pid}): re-parented to pid ")),
        "{evidence}"
    );
    assert!(
        evidence.contains("holds "),
        "its memory is named: {evidence}"
    );
    let text = judged.render(&metrics);
    assert!(text.contains("meshd_job_orphaned_processes 1"), "{text}");
    until(
        &mut judged.alarms,
        "job_orphaned to clear",
        |a: &Vec<Alarm>| a.iter().all(|a| a.kind != AlarmKind::JobOrphaned),
    )
    .await;
}

/// The whole way from a watcher to the operator: a busy `UniversalControl`
/// on a running node shows as a `cpu_spike` alarm in its status (what
/// `meshctl status --json` prints), in `/metrics` and as an `alarm_raised`
/// event on the stream `meshctl watch` reads; stopping it clears it there
/// too (when the host gets quiet enough).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_spike_reaches_status_metrics_and_the_event_stream() {
    use meshd_domain::EventKind;
    use tokio_stream::StreamExt;

    let _serial = meshd_test_lock::exclusive();
    let mut config = meshd::config::Config::embedded_default("alarm-test");
    config.listen.grpc = "127.0.0.1:0".parse().expect("addr");
    config.listen.metrics = "127.0.0.1:0".parse().expect("addr");
    config.watch.cpu = CpuWatchConfig {
        interval: Duration::from_secs(1),
        spike_ratio: (0.7 / cores()).min(0.9),
        spike_window: Duration::from_secs(2),
        top: 10,
        ..CpuWatchConfig::default()
    };
    let node = meshd::node::RunningNode::start(&config, "alarm-test")
        .await
        .expect("node starts");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.grpc_addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut client = meshd_proto::wire::mesh_client::MeshClient::new(channel);
    let mut events = client
        .watch_events(meshd_proto::wire::WatchEventsRequest {})
        .await
        .expect("watch")
        .into_inner();

    let mut burner = Burner::start("UniversalControl");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let raised = loop {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("an alarm_raised event before the deadline")
            .expect("stream open")
            .expect("event");
        let event = meshd_domain::Event::try_from(event).expect("well-formed event");
        if event.kind == EventKind::AlarmRaised
            && event.summary.starts_with("cpu_spike on alarm-test")
        {
            break event;
        }
    };
    assert!(
        raised.summary.contains("UniversalControl"),
        "{}",
        raised.summary
    );

    let status = client
        .clone()
        .get_status(meshd_proto::wire::GetStatusRequest {})
        .await
        .expect("status")
        .into_inner();
    let status = MeshStatus::try_from(status).expect("well-formed status");
    let alarm = status
        .alarms
        .iter()
        .find(|a| a.kind == AlarmKind::CpuSpike)
        .expect("cpu_spike in the status");
    assert_eq!(alarm.node.as_str(), "alarm-test");
    assert!(
        alarm.summary.contains("UniversalControl"),
        "{}",
        alarm.summary
    );
    assert!(!status.is_healthy(), "a warning alarm makes meshctl exit 1");

    let metrics = http_get(node.metrics_addr, "/metrics").await;
    assert!(
        metrics.contains(
            r#"meshd_alarms_active{node="alarm-test",kind="cpu_spike",severity="warning"} 1"#
        ),
        "{metrics}"
    );

    // The clearing is read from the node's own event feed (the one the
    // stream above forwards).
    let mut feed = node.state.subscribe_events();
    burner.stop();
    let cleared = tokio::time::timeout(CLEAR_DEADLINE, async {
        loop {
            let Ok(numbered) = feed.recv().await else {
                return false;
            };
            let event = numbered.event;
            if event.kind == EventKind::AlarmCleared && event.summary.starts_with("cpu_spike") {
                return true;
            }
        }
    })
    .await;
    match cleared {
        Ok(true) => {
            let metrics = http_get(node.metrics_addr, "/metrics").await;
            assert!(
                metrics.contains(r#"meshd_alarms_active{node="alarm-test",kind="cpu_spike",severity="warning"} 0"#),
                "a cleared alarm reads 0: {metrics}"
            );
        }
        Ok(false) => panic!("the event feed ended"),
        Err(_) => {
            // Only acceptable when the host itself stayed over the threshold.
            let busy = node
                .state
                .current()
                .alarms
                .iter()
                .any(|a| a.kind == AlarmKind::CpuSpike);
            assert!(busy, "no alarm_cleared event, yet the alarm is gone");
            eprintln!("note: the host stayed busy without the burner; clearing not observed");
        }
    }
    node.shutdown();
    node.wait().await.expect("clean stop");
}

/// A plain HTTP/1.0 GET body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.expect("read");
    raw.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}
