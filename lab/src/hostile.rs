//! The load figures of issue 14: what a hostile client costs one real
//! `meshd run` (and `meshctl doctor --from` a hostile bundle), measured
//! from /proc on Linux. No root and no lab: one daemon on loopback ports,
//! with the mesh's TLS from `meshctl certs`. Figures only; nothing here
//! judges them (`lab-bench hostile` prints them for BENCHMARKS.md).

use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::Binaries;

/// The file-descriptor limit the flood runs meshd under.
pub const OPEN_FILES: u32 = 1024;
/// Idle connections of the flood: past [`OPEN_FILES`].
pub const IDLE_CONNECTIONS: usize = 1100;
/// What each flooding connection to the HTTP port sends: a request whose
/// headers never end.
const HALF_SENT_REQUEST: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: bench\r\n";
/// Made-up ranks of the hostfile request.
pub const RANKS: usize = 8000;
/// How long meshd's CPU is sampled while flooded.
const CPU_WINDOW: Duration = Duration::from_secs(10);
/// How long meshd may take to answer its first status.
const READY: Duration = Duration::from_secs(15);

/// One measured row: what, the figure, and the target.
#[derive(Debug, Clone)]
pub struct Row {
    pub what: String,
    pub figure: String,
    pub target: &'static str,
}

/// A loopback port free a moment ago.
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One meshd on loopback: a local (read-only) listener, metrics, and a
/// mesh listener with TLS from a fresh CA; stopped when dropped.
struct Daemon {
    child: Child,
    grpc: SocketAddr,
    mesh: SocketAddr,
    metrics: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// Started under `ulimit -n open_files` (the shell applies it, then
    /// runs meshd in its place).
    fn start(bin: &Binaries, open_files: u32) -> anyhow::Result<Daemon> {
        let dir = tempfile::tempdir()?;
        // `meshctl certs` writes into `tls/` of its working directory.
        for args in [&["certs", "init"][..], &["certs", "issue", "bench"]] {
            run_ok(
                Command::new(&bin.meshctl)
                    .args(args)
                    .current_dir(dir.path()),
            )?;
        }
        let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let mesh: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let config = dir.path().join("meshd.toml");
        fs::write(
            &config,
            format!(
                "[node]\nid = \"bench\"\n\n[listen]\ngrpc = \"{grpc}\"\nmetrics = \"{metrics}\"\nmesh = \"{mesh}\"\n\n\
                 [tls]\nca = \"tls/ca.pem\"\ncert = \"tls/bench.pem\"\nkey = \"tls/bench-key.pem\"\n"
            ),
        )?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\" \"$@\""))
            .arg(&bin.meshd)
            .args(["run", "--log-level", "error", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting meshd")?;
        let daemon = Daemon {
            child,
            grpc,
            mesh,
            metrics,
            _dir: dir,
        };
        let started = Instant::now();
        while status_once(bin, daemon.grpc).is_err() {
            if started.elapsed() > READY {
                bail!("meshd did not answer status within {READY:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(daemon)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_ok(command: &mut Command) -> anyhow::Result<Output> {
    let out = command.output().with_context(|| format!("{command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out)
}

/// `meshctl status` against `addr`, timed; an error when it prints no
/// status (exit 1 with a status means "not healthy": a busy bench host
/// raises cpu_spike).
fn status_once(bin: &Binaries, addr: SocketAddr) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let out = Command::new(&bin.meshctl)
        .args(["status", "--addr"])
        .arg(addr.to_string())
        .output()?;
    let printed = String::from_utf8_lossy(&out.stdout).starts_with("meshd ");
    if !printed || !matches!(out.status.code(), Some(0 | 1)) {
        bail!(
            "meshctl status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(started.elapsed())
}

/// A line of /proc/PID/status in kB: "VmHWM", "VmRSS".
fn proc_status_kib(pid: u32, key: &str) -> anyhow::Result<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {key} in /proc/{pid}/status"))
}

/// User + system CPU of `pid` so far, in clock ticks (1/100 s on Linux).
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which may hold spaces: state is 3rd.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("a /proc stat line")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> anyhow::Result<u64> {
        Ok(fields.get(n).context("a short stat line")?.parse()?)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    Ok(field(11)? + field(12)?)
}

fn mb(kib: u64) -> String {
    format!("{:.1} MB", kib as f64 * 1024.0 / 1e6)
}

/// meshd's peak RSS around one `meshctl hostfile` naming [`RANKS`]
/// made-up ranks for the ring backend, sent 10 times.
pub fn hostfile(bin: &Binaries) -> anyhow::Result<Vec<Row>> {
    let daemon = Daemon::start(bin, 8192)?;
    let before = proc_status_kib(daemon.pid(), "VmHWM")?;
    let ranks: Vec<String> = (0..RANKS).map(|i| format!("n{i}")).collect();
    let ranks = ranks.join(",");
    let mut refused = 0;
    let started = Instant::now();
    for _ in 0..10 {
        let out = Command::new(&bin.meshctl)
            .args(["hostfile", "--backend", "jaccl-ring", "--addr"])
            .arg(daemon.grpc.to_string())
            .arg(format!("--ranks={ranks}"))
            .output()?;
        if out.status.code() == Some(1) {
            refused += 1;
        }
    }
    let each = started.elapsed() / 10;
    let after = proc_status_kib(daemon.pid(), "VmHWM")?;
    Ok(vec![Row {
        what: format!("GetHostfile, {RANKS} made-up ranks (ring), 10 requests: meshd peak RSS"),
        figure: format!(
            "{} (before: {}); {refused}/10 refused; {:.0} ms each with meshctl",
            mb(after),
            mb(before),
            each.as_secs_f64() * 1000.0
        ),
        target: "< 300 MB",
    }])
}

/// [`IDLE_CONNECTIONS`] TCP connections that never speak (or, on the HTTP
/// port, never finish a request's headers), against meshd under `ulimit
/// -n` [`OPEN_FILES`], on the listener `which` names: `meshctl status`
/// time on the local listener, meshd's CPU and the descriptors it holds.
pub fn idle_flood(bin: &Binaries) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for which in ["mesh (TLS)", "local (read-only)", "HTTP (metrics)"] {
        let daemon = Daemon::start(bin, OPEN_FILES)?;
        let (target, greeting) = match which {
            "mesh (TLS)" => (daemon.mesh, &b""[..]),
            "local (read-only)" => (daemon.grpc, &b""[..]),
            _ => (daemon.metrics, HALF_SENT_REQUEST),
        };
        let flood = Flood::start(target, greeting);
        // Let the flood fill up before measuring.
        std::thread::sleep(Duration::from_secs(2));
        let ticks = cpu_ticks(daemon.pid())?;
        let window = Instant::now();
        let mut times = Vec::new();
        while window.elapsed() < CPU_WINDOW {
            let started = Instant::now();
            let answered = status_once(bin, daemon.grpc).is_ok();
            times.push((started.elapsed(), answered));
            std::thread::sleep(Duration::from_millis(500));
        }
        let cpu = (cpu_ticks(daemon.pid())? - ticks) as f64 / window.elapsed().as_secs_f64();
        let held = fs::read_dir(format!("/proc/{}/fd", daemon.pid()))?.count();
        let (open, reopened, refused) = flood.stop();
        let slowest = times.iter().map(|(t, _)| *t).max().unwrap_or_default();
        let answered = times.iter().filter(|(_, ok)| *ok).count();
        rows.push(Row {
            what: format!(
                "{IDLE_CONNECTIONS} idle connections on the {which} listener, meshd at {OPEN_FILES} open files: `meshctl status`"
            ),
            figure: format!(
                "{answered}/{} answered, slowest {:.0} ms ({open} connections open at the end; meshd closed {reopened} of them, each opened again at once; {refused} connects timed out; meshd held {held} of its {OPEN_FILES} descriptors at the end)",
                times.len(),
                slowest.as_secs_f64() * 1000.0,
            ),
            target: "< 3 s",
        });
        rows.push(Row {
            what: format!("… meshd CPU while flooded on the {which} listener ({CPU_WINDOW:?})"),
            figure: format!("{cpu:.1} % of one core"),
            target: "not spinning",
        });
    }
    Ok(rows)
}

/// Whether the server still holds `stream` (non-blocking): nothing to
/// read yet, rather than an end or an error.
fn still_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// [`IDLE_CONNECTIONS`] connections to one address that send `greeting`
/// and nothing more, each opened again as soon as the server closes it,
/// until stopped.
struct Flood {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(usize, u64, u64)>,
}

impl Flood {
    fn start(target: SocketAddr, greeting: &'static [u8]) -> Flood {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let connect = move || {
            // Short: past a full accept queue the kernel drops the SYN,
            // and a pass over every slot must stay quick.
            let mut stream =
                TcpStream::connect_timeout(&target, Duration::from_millis(100)).ok()?;
            std::io::Write::write_all(&mut stream, greeting).ok()?;
            stream.set_nonblocking(true).ok()?;
            Some(stream)
        };
        let thread = std::thread::spawn(move || {
            let (mut reopened, mut refused) = (0, 0);
            let mut slots: Vec<Option<TcpStream>> = (0..IDLE_CONNECTIONS).map(|_| None).collect();
            while !stopped.load(Ordering::Relaxed) {
                for slot in &mut slots {
                    if stopped.load(Ordering::Relaxed) {
                        break;
                    }
                    let closed = match slot {
                        None => true,
                        Some(stream) if still_open(stream) => false,
                        Some(_) => {
                            reopened += 1;
                            true
                        }
                    };
                    if closed {
                        *slot = connect();
                        if slot.is_none() {
                            refused += 1;
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let open = slots.iter().flatten().filter(|s| still_open(s)).count();
            (open, reopened, refused)
        });
        Flood { stop, thread }
    }

    /// Stops the flood: connections open at the end, connections the
    /// server closed (each opened again), connects that failed.
    fn stop(self) -> (usize, u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// `meshctl doctor --from` a copy of `scenario` whose Thunderbolt file is a
/// symbolic link to /dev/zero: wall time and peak RSS of meshctl.
pub fn dev_zero_bundle(bin: &Binaries, scenario: &Path) -> anyhow::Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    for entry in fs::read_dir(scenario).with_context(|| scenario.display().to_string())? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            fs::copy(entry.path(), dir.path().join(entry.file_name()))?;
        }
    }
    let link: PathBuf = dir
        .path()
        .join("system_profiler_SPThunderboltDataType.json");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink("/dev/zero", &link)?;
    // Measured by a helper whose only child is meshctl, so the children's
    // peak RSS is meshctl's own.
    let out = Command::new(std::env::current_exe()?)
        .args(["peak-rss", "--"])
        .arg(&bin.meshctl)
        .args(["doctor", "--from"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let measured = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("peak-rss "))
        .with_context(|| format!("no figures from the helper: {stderr}"))?;
    let (kib, wall_ms) = measured
        .split_once(' ')
        .and_then(|(k, w)| Some((k.parse::<u64>().ok()?, w.parse::<f64>().ok()?)))
        .with_context(|| format!("bad figures from the helper: {measured}"))?;
    let refused = stderr
        .lines()
        .find(|l| l.contains("refused"))
        .unwrap_or("no refusal printed")
        .trim()
        .to_owned();
    Ok(vec![Row {
        what: "`meshctl doctor --from` a bundle with a /dev/zero symlink: wall time, peak RSS"
            .to_owned(),
        figure: format!("{wall_ms:.0} ms, {}; says \"{refused}\"", mb(kib)),
        target: "< 10 s, < 200 MB",
    }])
}

/// Runs `command` as this process's only child and prints
/// `peak-rss KIB WALL_MS` (its peak RSS from getrusage, its wall time)
/// after its own output; returns its exit code.
pub fn peak_rss(command: &[String]) -> anyhow::Result<i32> {
    use nix::sys::resource::{UsageWho, getrusage};
    let (program, args) = command.split_first().context("no command")?;
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .status()?;
    let wall = started.elapsed();
    // ru_maxrss is in KiB on Linux (bytes on macOS, where /proc figures
    // above do not exist anyway).
    let kib = getrusage(UsageWho::RUSAGE_CHILDREN)?.max_rss();
    #[allow(clippy::print_stdout)]
    {
        println!("peak-rss {kib} {:.1}", wall.as_secs_f64() * 1000.0);
    }
    Ok(status.code().unwrap_or(-1))
}
