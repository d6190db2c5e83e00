//! `lab`: bring a mesh of network namespaces up and down, and break it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use meshd_lab::job::{DEFAULT_JOB, JobSpec};
use meshd_lab::rank::{self, Mode, RankArgs};
use meshd_lab::stall::StallPattern;
use meshd_lab::{Binaries, Lab, Options, Plan, lab, vm};

/// The longest a timed fault (a storm, a hog) may be held from here.
const MAX_HOLD_SECS: u64 = 600;
/// How long `lab up` waits for every node to see the whole mesh up.
const SETTLE: Duration = Duration::from_secs(60);
/// How long `lab job start` waits for every rank to make progress.
const JOB_SETTLE: Duration = Duration::from_secs(30);
/// The window `lab job status` measures each rank's CPU over.
const LOAD_WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug, Parser)]
#[command(
    name = "lab",
    about = "A full mesh of network namespaces running meshd (root)"
)]
struct Cli {
    /// The lab's name: namespaces are meshlab-NAME-a, …, meshlab-NAME-mgmt.
    #[arg(long, short, global = true, default_value = "lab")]
    name: String,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create N nodes (2 to 8) and start meshd in each; waits until every
    /// node sees the whole mesh up.
    Up {
        nodes: usize,
        /// Also run Prometheus (the shipped rules) and Alertmanager in the
        /// management namespace; meshd pushes its alerts there.
        #[arg(long)]
        observe: bool,
        /// meshd's log level (logs in /run/meshlab/NAME/NODE.log).
        #[arg(long, default_value = "info")]
        log_level: String,
        /// Run NODE on another meshd build (a mixed-version mesh);
        /// repeatable.
        #[arg(long = "binary", value_name = "NODE=PATH", value_parser = node_binary)]
        binaries: Vec<(String, PathBuf)>,
    },
    /// Remove the lab (processes, namespaces, veths, state); idempotent.
    Down {
        /// Every lab on this host, whatever its name.
        #[arg(long)]
        all: bool,
    },
    /// `meshctl status` inside NODE's namespace.
    Status {
        node: String,
        #[arg(long)]
        json: bool,
    },
    /// Inject or remove a fault.
    #[command(subcommand)]
    Fault(Fault),
    /// A job of emulated JACCL ranks, one per node (issue #33).
    #[command(subcommand)]
    Job(JobCmd),
    /// One emulated JACCL rank (what `lab job start` runs in each node).
    #[command(hide = true)]
    Rank(RankArgs),
    /// Build meshd and meshctl of the previous release (its tag, in a git
    /// worktree) into target/releases/TAG/, unless they are there; prints
    /// the directory, for `up --binary` and `fault upgrade`.
    PreviousRelease {
        /// The cargo target directory of the build (default: one of its
        /// own under target/releases/, so no running test's binaries are
        /// replaced).
        #[arg(long)]
        build_target: Option<PathBuf>,
    },
    /// Soft-RoCE VMs (qemu, no root needed): see lab/README.md, "VMs".
    #[command(subcommand)]
    Vm(VmCmd),
}

#[derive(Debug, Subcommand)]
enum VmCmd {
    /// Fetch and unpack the Debian packages the VMs are made of (into
    /// target/vm-cache), unless they are there already.
    Fetch,
    /// Boot one VM, add rxe0 on its cable and print `meshctl doctor --json`.
    Doctor,
    /// Boot one VM (or, with --pair, two joined by a cable) and run each
    /// SCRIPT in it: `a:SCRIPT` or `b:SCRIPT` picks the VM (default a).
    Run {
        #[arg(long)]
        pair: bool,
        #[arg(required = true)]
        scripts: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum JobCmd {
    /// Start one rank per node, in node order, each in its node's
    /// namespace with MLX_RANK, MLX_IBV_DEVICES and MLX_JACCL_COORDINATOR;
    /// waits until every rank makes progress.
    Start {
        /// The nodes (comma-separated), rank 0 first; default every node.
        #[arg(long)]
        nodes: Option<String>,
        /// Datagrams a second from each rank to each peer.
        #[arg(long, default_value_t = rank::DEFAULT_RATE)]
        rate: u32,
        #[arg(long, default_value = DEFAULT_JOB)]
        job: String,
        /// The ranks' UDP port on their cable addresses.
        #[arg(long, default_value_t = rank::DEFAULT_PORT)]
        port: u16,
    },
    /// End every rank of the job (SIGTERM, SIGKILL after 5 s).
    Stop {
        #[arg(long, default_value = DEFAULT_JOB)]
        job: String,
    },
    /// Each rank: node, pid, process state, paced or spinning, steps, and
    /// its CPU over a second.
    Status {
        #[arg(long, default_value = DEFAULT_JOB)]
        job: String,
    },
}

#[derive(Debug, Subcommand)]
enum Fault {
    /// Pull the cable A-B out of A's port.
    Pull {
        node: String,
        peer: String,
    },
    /// Plug it back in.
    Plug {
        node: String,
        peer: String,
    },
    /// Cut what A sends to B to KBIT kbit/s (tc tbf).
    Throttle {
        node: String,
        peer: String,
        kbit: u32,
    },
    Unthrottle {
        node: String,
        peer: String,
    },
    /// Drop PERCENT of A's packets to and from B (nftables).
    Loss {
        node: String,
        peer: String,
        percent: u8,
    },
    /// Remove A's loss rules.
    Unloss {
        node: String,
    },
    /// Bridge the mesh ports between NODES (comma-separated, 3 or more for
    /// a loop) for SECS seconds: a real broadcast storm.
    BridgeLoop {
        nodes: String,
        #[arg(long = "for", default_value_t = 10)]
        secs: u64,
    },
    /// A storm on a loop of bridges outside the mesh in NODE, for SECS.
    Storm {
        node: String,
        #[arg(long = "for", default_value_t = 10)]
        secs: u64,
    },
    /// COUNT busy processes named UniversalControl in NODE, for SECS.
    Hog {
        node: String,
        #[arg(long, default_value_t = 1)]
        count: usize,
        #[arg(long = "for", default_value_t = 30)]
        secs: u64,
    },
    /// Freeze NODE's meshd (SIGSTOP).
    Freeze {
        node: String,
    },
    /// Thaw it (SIGCONT).
    Thaw {
        node: String,
    },
    /// Kill NODE's meshd (SIGKILL).
    Kill {
        node: String,
    },
    /// Start NODE's meshd again.
    Restart {
        node: String,
        #[arg(long, default_value = "info")]
        log_level: String,
    },
    /// Upgrade (or downgrade) NODE to the meshd at PATH as a reinstall
    /// does: stop (SIGTERM), swap the executable, start; the node keeps
    /// PATH across later restarts.
    Upgrade {
        node: String,
        path: PathBuf,
        /// How long the node stays without meshd between the stop and the
        /// start (ms): the rest of a reinstall.
        #[arg(long, default_value_t = 0)]
        pause_ms: u64,
        #[arg(long, default_value = "info")]
        log_level: String,
    },
    /// Split the management network into GROUPS (each comma-separated).
    Partition {
        #[arg(required = true, num_args = 2..)]
        groups: Vec<String>,
    },
    /// Join the management network again.
    HealPartition,
    /// Cut NODE off from everything: its management port and every mesh
    /// cable down (its meshd runs on, alone).
    Isolate {
        node: String,
    },
    /// Undo `isolate`: the management port and every cable of NODE up.
    Rejoin {
        node: String,
    },
    /// Stall NODE's meshd: SIGSTOP for STOP_MS out of every EVERY_MS
    /// (a busy host's stalls), for SECS; it is always left running, also
    /// on Ctrl-C.
    Stall {
        node: String,
        /// How long each stall lasts (ms).
        #[arg(long, default_value_t = 700)]
        stop_ms: u64,
        /// How often a stall begins (ms); more than --stop-ms.
        #[arg(long, default_value_t = 1500)]
        every_ms: u64,
        /// How long to keep stalling it (seconds).
        #[arg(long = "for", default_value_t = 30)]
        secs: u64,
    },
    /// Make NODE's meshd run its timers late by up to BY_MS: the stall
    /// driver with short stops (SIGSTOP for BY_MS out of every EVERY_MS),
    /// for SECS; always left running, also on Ctrl-C.
    Late {
        node: String,
        /// The most its timers run late (ms): each stop's length.
        #[arg(long, default_value_t = 40)]
        by_ms: u64,
        /// How often a stop begins (ms); more than --by-ms.
        #[arg(long, default_value_t = 100)]
        every_ms: u64,
        /// How long to keep it late (seconds).
        #[arg(long = "for", default_value_t = 30)]
        secs: u64,
    },
    /// Stop NODE's rank of the job (SIGSTOP): every other rank spins.
    RankStop {
        node: String,
        #[arg(long, default_value = DEFAULT_JOB)]
        job: String,
    },
    /// Continue it (SIGCONT).
    RankCont {
        node: String,
        #[arg(long, default_value = DEFAULT_JOB)]
        job: String,
    },
    /// Kill NODE's rank of the job (SIGKILL).
    RankKill {
        node: String,
        #[arg(long, default_value = DEFAULT_JOB)]
        job: String,
    },
    /// Send what A and B send to each other's cable address over the
    /// management network (a host route via the other's mgmt0 address in
    /// each); the cable stays up.
    RankViaMgmt {
        node: String,
        peer: String,
    },
    /// Undo rank-via-mgmt: the cable carries it again.
    RankViaCable {
        node: String,
        peer: String,
    },
}

/// `lab previous-release`: needs no root, only git and cargo.
#[allow(clippy::print_stdout)]
fn previous_release(build_target: Option<&std::path::Path>) -> anyhow::Result<()> {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let exe = std::env::current_exe().context("the lab's own executable")?;
    // target/PROFILE/lab: the target directory is two levels up.
    let target = exe
        .parent()
        .and_then(std::path::Path::parent)
        .context("the lab's executable is not in a cargo target directory")?;
    let release = meshd_lab::release::PREVIOUS;
    let found = meshd_lab::release::binaries(&workspace, target, &release, build_target)
        .with_context(|| format!("building release {}", release.tag))?;
    let dir = found.meshd.parent().unwrap_or(&found.meshd);
    println!("{}", dir.display());
    Ok(())
}

/// `NODE=PATH` of `up --binary`.
fn node_binary(arg: &str) -> Result<(String, PathBuf), String> {
    match arg.split_once('=') {
        Some((node, path)) if !node.is_empty() && !path.is_empty() => {
            Ok((node.to_owned(), PathBuf::from(path)))
        }
        _ => Err(format!(
            "`{arg}` is not NODE=PATH (e.g. b=/opt/meshd-0.1.0/meshd)"
        )),
    }
}

fn nodes(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

fn hold(secs: u64) -> anyhow::Result<()> {
    if secs > MAX_HOLD_SECS {
        bail!("--for is at most {MAX_HOLD_SECS} s");
    }
    std::thread::sleep(Duration::from_secs(secs));
    Ok(())
}

#[allow(clippy::print_stdout)]
fn fault(lab: &mut Lab, fault: Fault) -> anyhow::Result<()> {
    match fault {
        Fault::Pull { node, peer } => lab.pull_cable(&node, &peer)?,
        Fault::Plug { node, peer } => lab.plug_cable(&node, &peer)?,
        Fault::Throttle { node, peer, kbit } => lab.throttle(&node, &peer, kbit)?,
        Fault::Unthrottle { node, peer } => lab.unthrottle(&node, &peer)?,
        Fault::Loss {
            node,
            peer,
            percent,
        } => lab.lose(&node, &peer, percent)?,
        Fault::Unloss { node } => lab.clear_loss(&node)?,
        Fault::BridgeLoop { nodes: list, secs } => {
            let members = nodes(&list);
            lab.bridge_loop(&members)?;
            println!("bridged {list}; removing the bridges in {secs} s");
            let held = hold(secs);
            lab.unbridge(&members)?;
            held?;
        }
        Fault::Storm { node, secs } => {
            lab.storm_outside_mesh(&node)?;
            println!("storm outside the mesh in {node}; ending it in {secs} s");
            let held = hold(secs);
            lab.calm_storm_outside_mesh(&node)?;
            held?;
        }
        Fault::Hog { node, count, secs } => {
            lab.start_hogs(&node, count)?;
            println!("{count} × UniversalControl in {node} for {secs} s");
            let held = hold(secs);
            lab.stop_hogs();
            held?;
        }
        Fault::Freeze { node } => lab.signal_daemon(&node, "STOP")?,
        Fault::Thaw { node } => lab.signal_daemon(&node, "CONT")?,
        Fault::Kill { node } => lab.signal_daemon(&node, "KILL")?,
        Fault::Restart { node, log_level } => lab.start(&node, &log_level)?,
        Fault::Upgrade {
            node,
            path,
            pause_ms,
            log_level,
        } => {
            if pause_ms > MAX_HOLD_SECS * 1000 {
                bail!("--pause-ms is at most {} ms", MAX_HOLD_SECS * 1000);
            }
            let took = lab.upgrade(&node, &path, &log_level, Duration::from_millis(pause_ms))?;
            println!(
                "{node} runs {} (stopped to started again: {took:.1?})",
                path.display()
            );
        }
        Fault::Partition { groups } => {
            let groups: Vec<Vec<&str>> = groups.iter().map(|g| nodes(g)).collect();
            lab.partition(&groups)?;
        }
        Fault::HealPartition => lab.heal_partition()?,
        Fault::Isolate { node } => lab.isolate(&node)?,
        Fault::Rejoin { node } => lab.rejoin(&node)?,
        Fault::Stall {
            node,
            stop_ms,
            every_ms,
            secs,
        }
        | Fault::Late {
            node,
            by_ms: stop_ms,
            every_ms,
            secs,
        } => stall(lab, &node, stop_ms, every_ms, secs)?,
        Fault::RankStop { node, job } => lab.stop_rank(&job, &node)?,
        Fault::RankCont { node, job } => lab.cont_rank(&job, &node)?,
        Fault::RankKill { node, job } => lab.kill_rank(&job, &node)?,
        Fault::RankViaMgmt { node, peer } => lab.route_via_mgmt(&node, &peer)?,
        Fault::RankViaCable { node, peer } => lab.route_via_cable(&node, &peer)?,
    }
    println!("ok");
    Ok(())
}

/// `lab job …`.
#[allow(clippy::print_stdout)]
fn job(lab: &mut Lab, command: JobCmd) -> anyhow::Result<()> {
    match command {
        JobCmd::Start {
            nodes: list,
            rate,
            job,
            port,
        } => {
            let program = std::env::current_exe().context("the lab's own executable")?;
            let spec = JobSpec {
                id: job.clone(),
                nodes: list
                    .as_deref()
                    .map(|l| nodes(l).into_iter().map(str::to_owned).collect())
                    .unwrap_or_default(),
                rate,
                port,
                program,
            };
            let record = lab.start_job(&spec)?;
            lab.wait_job(&job, Mode::Paced, JOB_SETTLE)
                .context("waiting for every rank to make progress")?;
            println!(
                "job {job}: {} ranks exchanging {rate} datagrams/s with each peer on port {port}",
                record.ranks.len()
            );
            println!(
                "  {}={}",
                meshd_lab::job::ENV_DEVICES,
                record.devices.display()
            );
            println!(
                "  {}={}",
                meshd_lab::job::ENV_COORDINATOR,
                record.coordinator
            );
            for rank in &record.ranks {
                println!(
                    "  MLX_RANK={} on {} (pid {}, log {})",
                    rank.rank,
                    rank.node,
                    rank.pid,
                    rank.log.display()
                );
            }
        }
        JobCmd::Stop { job } => {
            lab.stop_job(&job)?;
            println!("ok");
        }
        JobCmd::Status { job } => {
            let loads = lab.job_loads(&job, LOAD_WINDOW)?;
            println!("rank node pid      state mode      steps     cpu used/asked");
            for (rank, load) in loads {
                let state = rank.state().map_or("gone".to_owned(), |s| s.to_string());
                let (mode, steps) = rank.report().map_or(("-".to_owned(), "-".to_owned()), |r| {
                    (format!("{:?}", r.mode).to_lowercase(), r.steps.to_string())
                });
                let cpu = load.map_or("-".to_owned(), |l| format!("{:.2}/{:.2}", l.used, l.demand));
                println!(
                    "{:<4} {:<4} {:<8} {:<5} {:<9} {:<9} {cpu}",
                    rank.rank, rank.node, rank.pid, state, mode, steps
                );
            }
        }
    }
    Ok(())
}

/// Runs the stall driver on NODE's meshd for `secs`, or until SIGINT,
/// SIGTERM or SIGHUP: whichever comes first, the daemon is left running.
#[allow(clippy::print_stdout)]
fn stall(lab: &mut Lab, node: &str, stop_ms: u64, every_ms: u64, secs: u64) -> anyhow::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    if secs > MAX_HOLD_SECS {
        bail!("--for is at most {MAX_HOLD_SECS} s");
    }
    let pattern = StallPattern::new(
        Duration::from_millis(stop_ms),
        Duration::from_millis(every_ms),
    )?;
    // Blocked before the driver's thread starts (it inherits the mask), so
    // an interrupt is taken here, where the driver is ended, not by the
    // default action, which would leave the daemon stopped.
    let mut ending = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGALRM,
    ] {
        ending.add(signal);
    }
    ending.thread_block()?;
    lab.start_stalls(node, pattern)?;
    println!(
        "{node}'s meshd stopped {stop_ms} ms of every {every_ms} ms for {secs} s (Ctrl-C ends it)"
    );
    nix::unistd::alarm::set(u32::try_from(secs.max(1)).unwrap_or(u32::MAX));
    let woken_by = ending.wait();
    let report = lab.end_stalls(node)?;
    println!(
        "{} stops, the longest {} ms; {node}'s meshd runs",
        report.cycles,
        report.longest_stop.as_millis()
    );
    match woken_by? {
        Signal::SIGALRM => Ok(()),
        other => bail!("interrupted by {other}"),
    }
}

/// The VM commands; they need qemu, not root.
#[allow(clippy::print_stdout)]
fn vm(command: VmCmd) -> anyhow::Result<()> {
    if let Some(reason) = vm::missing_prerequisite() {
        bail!("VMs cannot run here: {reason}");
    }
    let binaries = Binaries::beside_current_exe()?;
    let profile_dir = binaries.meshd.parent().unwrap_or(std::path::Path::new("."));
    let cache = vm::cache_beside(profile_dir);
    if let VmCmd::Fetch = command {
        let packages = vm::packages::prepare(&cache)?;
        println!("{}", packages.dir.display());
        return Ok(());
    }
    let image = vm::Image::build(&cache, &binaries, &[])?;
    match command {
        VmCmd::Fetch => {}
        VmCmd::Doctor => {
            let mut vms = vm::Vms::one(&image)?;
            let a = vms.vm("a");
            a.run(&format!(
                "rdma link add rxe0 type rxe netdev {}",
                vm::CABLE_IFACE
            ))?;
            let out = a.exec("meshctl doctor --json", Duration::from_secs(60))?;
            print!("{}", out.text);
        }
        VmCmd::Run { pair, scripts } => {
            let mut vms = if pair {
                vm::Vms::pair(&image)?
            } else {
                vm::Vms::one(&image)?
            };
            for script in scripts {
                let (name, script) = match script.split_once(':') {
                    Some((name @ ("a" | "b"), rest)) => (name.to_owned(), rest.to_owned()),
                    _ => ("a".to_owned(), script),
                };
                let out = vms.vm(&name).exec(&script, Duration::from_secs(300))?;
                println!("{name}$ {script}\n{}(exit {})", out.text, out.code);
            }
        }
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Cmd::Vm(command) = cli.command {
        return vm(command);
    }
    if let Cmd::Rank(args) = &cli.command {
        // Started by `lab job start` inside a node's namespace.
        return Ok(rank::run(args)?);
    }
    if let Cmd::PreviousRelease { build_target } = &cli.command {
        return previous_release(build_target.as_deref());
    }
    if let Some(reason) = meshd_lab::missing_prerequisite() {
        bail!("the lab cannot run here: {reason}");
    }
    match cli.command {
        Cmd::Up {
            nodes,
            observe,
            log_level,
            binaries: meshd_by_node,
        } => {
            let plan = Plan::new(&cli.name, nodes)?;
            let binaries = Binaries::beside_current_exe()?;
            let options = Options {
                alertmanager: observe,
                log_level,
                meshd_by_node: meshd_by_node.into_iter().collect(),
                ..Options::default()
            };
            let mut lab = Lab::up(plan, binaries, &options).context("lab up")?;
            if observe {
                let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../dashboards/prometheus/meshd.rules.yml");
                lab.start_prometheus(&rules, true)?;
                lab.start_alertmanager()?;
            }
            let what = format!("{nodes} nodes and every link up");
            lab.wait_all(&what, SETTLE, meshd_lab::Status::all_up)?;
            let first = &lab.plan.nodes[0];
            println!(
                "lab {} is up: {what}.\n  state and logs: {}\n  ask a node:     ip netns exec {} meshctl status\n  remove it:      lab --name {} down",
                cli.name,
                lab.state_dir().display(),
                first.namespace,
                cli.name
            );
            lab.keep_running();
        }
        Cmd::Down { all } => {
            if all {
                lab::down_all()?;
            } else {
                lab::down(&cli.name)?;
            }
            println!("ok");
        }
        Cmd::Status { node, json } => {
            let lab = Lab::attach(&cli.name, Binaries::beside_current_exe()?)?;
            let meshctl = lab.binaries.meshctl.to_string_lossy().into_owned();
            let mut args = vec!["status"];
            if json {
                args.push("--json");
            }
            let ns = lab.namespace(&node)?.to_owned();
            let mut full = vec!["netns", "exec", ns.as_str(), meshctl.as_str()];
            full.extend(args);
            let out = meshd_lab::command::run_any("ip", &full, Duration::from_secs(10))?;
            print!("{}{}", out.stdout, out.stderr);
            std::process::exit(out.code.unwrap_or(2));
        }
        Cmd::Fault(f) => {
            let mut lab = Lab::attach(&cli.name, Binaries::beside_current_exe()?)?;
            fault(&mut lab, f)?;
        }
        Cmd::Job(command) => {
            let mut lab = Lab::attach(&cli.name, Binaries::beside_current_exe()?)?;
            job(&mut lab, command)?;
        }
        Cmd::Vm(_) | Cmd::Rank(_) | Cmd::PreviousRelease { .. } => {
            unreachable!("handled before the lab's prerequisites")
        }
    }
    Ok(())
}
