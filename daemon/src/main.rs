//! The `meshd` binary: `run` the agent, `check-config` a file, `demo` a
//! mesh, or `install` / `uninstall` the system service.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use meshd::cli::{Cli, Command, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use meshd::config::Config;
use meshd::config::reload::Hangups;
use meshd::demo;
use meshd::install::{self, InstallError, InstallOptions, Plan, Platform, SystemRunner};
use meshd::logging;
use meshd::node::RunningNode;
use meshd_domain::NodeId;

#[allow(clippy::print_stderr)]
fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version are answers, not mistakes.
            let code = if err.use_stderr() {
                EXIT_USAGE
            } else {
                EXIT_OK
            };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    let hostname = gethostname::gethostname().to_string_lossy().into_owned();
    match cli.command {
        Command::CheckConfig { file, template } => check_config(&file, template, &hostname),
        Command::Run {
            config,
            log_format,
            log_level,
            log_file,
        } => {
            if let Err(err) = logging::init(log_format, &log_level, log_file.as_deref()) {
                eprintln!("meshd: {err}");
                return ExitCode::from(EXIT_FAILED);
            }
            match run(config, &hostname) {
                Ok(()) => ExitCode::from(EXIT_OK),
                Err(err) => {
                    tracing::error!("{}", once_each(&err));
                    ExitCode::from(EXIT_FAILED)
                }
            }
        }
        Command::Demo {
            nodes,
            ids,
            base_port,
            log_format,
            log_level,
        } => {
            if let Err(err) = logging::init(log_format, &log_level, None) {
                eprintln!("meshd: {err}");
                return ExitCode::from(EXIT_FAILED);
            }
            run_demo(nodes, &ids, base_port, &hostname)
        }
        Command::Install {
            dry_run,
            config,
            binary,
        } => service(
            install_plan(config, binary, &hostname).map(|(plan, binary)| (plan, Some(binary))),
            dry_run,
        ),
        Command::Uninstall { dry_run } => service(
            Platform::current().map(|platform| (Plan::uninstall(platform), None)),
            dry_run,
        ),
    }
}

fn install_plan(
    config: Option<PathBuf>,
    binary: Option<PathBuf>,
    hostname: &str,
) -> Result<(Plan, PathBuf), InstallError> {
    let platform = Platform::current()?;
    let absolute = |path: PathBuf| std::path::absolute(&path).unwrap_or(path);
    let binary = match binary {
        Some(path) => absolute(path),
        None => std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .map_err(InstallError::CurrentExe)?,
    };
    let config = config.map_or_else(|| platform.default_config().to_owned(), absolute);
    let options = InstallOptions {
        tls: existing_tls_files(&config, hostname)?,
        binary,
        config,
        node_id: Config::embedded_default(hostname).node.id,
    };
    Ok((Plan::install(platform, &options)?, options.binary))
}

/// The TLS files of the config the service will read, when it exists and
/// runs mutual TLS: the unit passes them on. A config meshd would refuse
/// is refused here, not left for the service to fail on in a loop.
fn existing_tls_files(
    config: &std::path::Path,
    hostname: &str,
) -> Result<Option<install::systemd::TlsFiles>, InstallError> {
    if !config.exists() {
        return Ok(None);
    }
    let loaded = Config::load(config, hostname).map_err(|err| InstallError::InvalidConfig {
        path: config.to_owned(),
        reason: err.to_string(),
    })?;
    let meshes = !loaded.peers.is_empty() || loaded.listen.mesh.is_some();
    let tls = loaded.tls;
    Ok(match (meshes && !tls.insecure, tls.ca, tls.cert, tls.key) {
        (true, Some(ca), Some(cert), Some(key)) => {
            Some(install::systemd::TlsFiles { ca, cert, key })
        }
        _ => None,
    })
}

/// `install` and `uninstall`: print the plan and every check the real run
/// makes (`--dry-run`, exit 1 if the real run would refuse), or carry it
/// out after those checks, printing each step done.
#[allow(clippy::print_stdout, clippy::print_stderr)]
fn service(plan: Result<(Plan, Option<PathBuf>), InstallError>, dry_run: bool) -> ExitCode {
    let root = std::path::Path::new("/");
    let mut runner = SystemRunner {
        timeout: install::COMMAND_TIMEOUT,
    };
    let result = plan.and_then(|(plan, binary)| {
        let preflight = install::Preflight::check(&plan, root, binary.as_deref(), &mut runner);
        if dry_run {
            print!("{}", plan.describe(root));
            if let Some(not_root) = &preflight.not_root {
                println!("note: {not_root}");
            }
            for refusal in &preflight.refusals {
                eprintln!("meshd: the real run would refuse: {refusal}");
            }
            if preflight.refusals.is_empty() {
                println!("every check the real run makes passes");
            }
            return Ok(preflight.refusals.is_empty());
        }
        preflight.first()?;
        for line in plan.apply(root, &mut runner)? {
            println!("{line}");
        }
        Ok(true)
    });
    match result {
        Ok(true) => ExitCode::from(EXIT_OK),
        Ok(false) => ExitCode::from(EXIT_FAILED),
        Err(err) => {
            eprintln!("meshd: {err}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// An error and its causes on one line, each said once: a cause whose text
/// its parent already quotes (thiserror's `{0}` next to `#[from]`) is not
/// repeated.
fn once_each(err: &anyhow::Error) -> String {
    let mut line = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

/// Errors go to stderr as plain text, not as a log line: the demo is
/// interactive and the message (e.g. which port is taken, and the
/// `--base-port` that avoids it) is for a person to read and act on.
#[allow(clippy::print_stderr)]
/// `ids`, when given, name the nodes and set their count instead of `nodes`.
fn run_demo(nodes: usize, ids: &[String], base_port: u16, hostname: &str) -> ExitCode {
    // The demo mesh's certificates live as long as the demo, and go with it.
    let certs = tempfile::Builder::new().prefix("meshd-demo-").tempdir();
    let result = certs
        .map_err(|e| anyhow::anyhow!("cannot create a directory for the certificates: {e}"))
        .and_then(|dir| {
            let certs = dir.path().join("tls");
            let plan = if ids.is_empty() {
                demo::plan::Plan::new(nodes, base_port, &certs)?
            } else {
                let ids = ids
                    .iter()
                    .map(|id| {
                        NodeId::new(id.as_str())
                            .map_err(|e| anyhow::anyhow!("--ids: {id:?} is not a node id: {e}"))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                demo::plan::Plan::with_ids(ids, base_port, &certs)?
            };
            Ok((dir, plan))
        })
        .and_then(|(_dir, plan)| {
            runtime()?.block_on(async {
                let mut signals = StopSignals::install()?;
                demo::run(plan, hostname, async move { signals.next().await }).await
            })
        });
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(err) => {
            eprintln!("meshd demo: {}", once_each(&err));
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// The MTUs of this host's interfaces, which a config's probe sizes are
/// checked against (the config of a node is checked on that node).
fn this_host_mtus() -> std::collections::BTreeMap<String, u32> {
    meshd_platform::interface_mtus(
        &meshd_platform::source::LiveSource,
        meshd_platform::this_os(),
    )
}

/// Exits 1 on problems; warnings (what works but is likely wrong) go to
/// stderr and leave the exit code 0. A `template` is checked by every rule
/// but the TLS files it names, which exist only on a node.
#[allow(clippy::print_stdout, clippy::print_stderr)]
fn check_config(file: &std::path::Path, template: bool, hostname: &str) -> ExitCode {
    match Config::load_with_advice(file, hostname, &this_host_mtus()) {
        Ok(checked) => {
            for warning in &checked.warnings {
                eprintln!("warning: {warning}");
            }
            let config = &checked.config;
            let tls_warnings = if template {
                Vec::new()
            } else {
                match meshd::transport::tls::MeshTls::for_config(config) {
                    Ok(tls) => tls.map(|t| t.warnings().to_vec()).unwrap_or_default(),
                    Err(err) => {
                        eprintln!("{}: {err}", file.display());
                        if matches!(err, meshd::transport::tls::TlsError::File(_)) {
                            eprintln!(
                                "(a template such as meshd.example.toml? `meshd check-config \
                                 --template {}` checks all but the files it names)",
                                file.display()
                            );
                        }
                        return ExitCode::from(EXIT_FAILED);
                    }
                }
            };
            for warning in &tls_warnings {
                eprintln!("warning: {}: {warning}", file.display());
            }
            let warnings = match checked.warnings.len() + tls_warnings.len() {
                0 => String::new(),
                1 => ", 1 warning".to_owned(),
                n => format!(", {n} warnings"),
            };
            let template = if template {
                " as a template: the TLS files it names are not checked"
            } else {
                ""
            };
            println!(
                "{}: ok{template} (node {}, {} members, {} static links{warnings})",
                file.display(),
                config.node.id,
                config.members().len(),
                config.links.len()
            );
            ExitCode::from(EXIT_OK)
        }
        Err(err) => {
            eprintln!("{err}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

fn run(config_path: Option<PathBuf>, hostname: &str) -> anyhow::Result<()> {
    let config = match &config_path {
        Some(path) => {
            let checked = Config::load_with_advice(path, hostname, &this_host_mtus())?;
            for warning in &checked.warnings {
                tracing::warn!("config: {warning}");
            }
            checked.config
        }
        None => {
            tracing::info!("no config file given: single-node mesh with the embedded defaults");
            Config::embedded_default(hostname)
        }
    };
    let runtime = node_runtime()?;
    let outcome = runtime.block_on(async {
        // Watch for signals before anything starts, so a stop request that
        // arrives during start-up is a graceful stop, not a kill.
        let mut signals = StopSignals::install()?;
        let hangups = Hangups::install();
        // `meshd run` keeps its history in the state directory unless the
        // config names a file.
        let state_directory = std::env::var("STATE_DIRECTORY").ok();
        let config = config.with_default_history_path(state_directory.as_deref());
        let mut node = RunningNode::start(&config, hostname).await?;
        match config_path {
            Some(path) => node.watch_config(path, hostname.to_owned(), hangups),
            None => drop(hangups),
        }
        let signal = signals.next().await?;
        tracing::info!(signal, "shutting down");
        node.shutdown();
        node.wait().await?;
        tracing::info!("stopped");
        Ok(())
    });
    // Tasks the node does not wait for (report streams, a blocking read of
    // the process table) must not hold the exit up either: dropping the
    // runtime would wait for blocking reads without bound.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    outcome
}

/// How long the runtime's leftover tasks get once the node has stopped.
const RUNTIME_SHUTDOWN: std::time::Duration = std::time::Duration::from_millis(500);

/// Two workers: meshd's work is many small tasks, and it must stay light
/// next to the jobs it watches.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    meshd::cadence::build_runtime(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    })
    .context("cannot start the async runtime")
}

/// One node's daemon: a single thread. Its work is hundreds of tiny tasks a
/// second (each probe, reply, report and timer a wake-up of microseconds);
/// with two workers most of them woke or handed over to the other thread,
/// and those switches cost more than the work. Blocking reads (facts, the
/// process table) still go to the blocking pool.
fn node_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    meshd::cadence::build_runtime(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    })
    .context("cannot start the async runtime")
}

/// SIGINT and SIGTERM (launchd and systemd stop with SIGTERM).
struct StopSignals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                terminate: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
                interrupt: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    async fn next(&mut self) -> anyhow::Result<&'static str> {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => Ok("SIGINT"),
                _ = self.terminate.recv() => Ok("SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c()
                .await
                .context("cannot watch Ctrl-C")?;
            Ok("Ctrl-C")
        }
    }
}
