//! `meshd install` and `meshd uninstall`: run meshd as a system service,
//! a LaunchDaemon on macOS and a systemd unit on Linux.
//!
//! A [`Plan`] is the list of steps (files to write or remove, commands to
//! run), built without I/O from the platform and the paths. It is either
//! described (`--dry-run`) or applied under a root directory — `/` in real
//! use, a temporary directory in tests — with commands going through a
//! [`Runner`], so tests record them instead of running them. The platform
//! is chosen at run time ([`Platform::current`]).
//!
//! An existing config file is never overwritten, and uninstall never removes
//! it: it is the operator's.

pub mod default_config;
pub mod docs;
pub mod firewall;
pub mod launchctl;
pub mod launchd;
pub mod systemd;

mod runner;
mod strict;

use meshd_platform::command::stderr_suffix;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshd_domain::NodeId;

pub use runner::{CommandOutput, RecordingRunner, Reply, Runner, SystemRunner};
pub use strict::require_strict_modes;

/// Where docs/INSTALL-macOS.md has operators copy the binary before `meshd install`;
/// the service files checked in under `launchd/` run this one.
pub const SYSTEM_BINARY: &str = "/usr/local/bin/meshd";
/// How long any one command may run before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Service files and the config: readable by all, written by root. launchd
/// refuses a plist that group or others can write.
const FILE_MODE: u32 = 0o644;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    MacOs,
    Linux,
}

impl Platform {
    /// This host's platform, from `std::env::consts::OS`.
    pub fn current() -> Result<Platform, InstallError> {
        Platform::from_os(std::env::consts::OS)
    }

    pub fn from_os(os: &str) -> Result<Platform, InstallError> {
        match os {
            "macos" => Ok(Platform::MacOs),
            "linux" => Ok(Platform::Linux),
            other => Err(InstallError::UnsupportedOs(other.to_owned())),
        }
    }

    /// Where install writes the config, and the service reads it, unless
    /// `--config` says otherwise.
    pub fn default_config(self) -> &'static Path {
        Path::new(match self {
            Platform::MacOs => launchd::DEFAULT_CONFIG,
            Platform::Linux => systemd::DEFAULT_CONFIG,
        })
    }

    /// The plist or the unit file.
    pub fn service_file(self) -> PathBuf {
        match self {
            Platform::MacOs => launchd::plist_path(),
            Platform::Linux => systemd::unit_path(),
        }
    }

    /// The text of the plist or the unit file that runs `binary` with
    /// `config`. Pure: what install writes to [`Platform::service_file`],
    /// and what `launchd/` in the repository holds for [`SYSTEM_BINARY`]
    /// and [`Platform::default_config`].
    ///
    /// `tls`: the config's TLS files, which a Linux unit passes to its
    /// sandboxed user as credentials (launchd runs meshd as root, who
    /// reads them).
    pub fn service_file_contents(
        self,
        binary: &Path,
        config: &Path,
        tls: Option<&systemd::TlsFiles>,
    ) -> Result<String, InstallError> {
        match self {
            Platform::MacOs => launchd::LaunchDaemon::new(binary, config)
                .to_xml()
                .map_err(InstallError::Plist),
            Platform::Linux => Ok(systemd::unit(binary, config, tls)),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Platform::MacOs => "macOS (launchd)",
            Platform::Linux => "Linux (systemd)",
        }
    }

    fn manager(self) -> &'static str {
        match self {
            Platform::MacOs => "launchctl",
            Platform::Linux => "systemctl",
        }
    }
}

/// What `meshd install` installs.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// The meshd executable the service runs; absolute.
    pub binary: PathBuf,
    /// The config file the service reads; absolute.
    pub config: PathBuf,
    /// The node id written into a new config.
    pub node_id: NodeId,
    /// The TLS files of the existing config, when it runs mutual TLS.
    pub tls: Option<systemd::TlsFiles>,
}

/// A command to run, with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    pub program: String,
    pub args: Vec<String>,
    /// Failing is normal (e.g. stopping a service that is not loaded): the
    /// reason is reported and the plan goes on.
    pub may_fail: Option<&'static str>,
}

impl CommandSpec {
    pub fn new(program: &str, args: &[&str]) -> CommandSpec {
        CommandSpec {
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            may_fail: None,
        }
    }

    fn may_fail(mut self, because: &'static str) -> CommandSpec {
        self.may_fail = Some(because);
        self
    }
}

impl std::fmt::Display for CommandSpec {
    /// The command line as a shell would take it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.program)?;
        for arg in &self.args {
            if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || "'\"$\\".contains(c)) {
                write!(f, " '{}'", arg.replace('\'', r"'\''"))?;
            } else {
                write!(f, " {arg}")?;
            }
        }
        Ok(())
    }
}

/// One step of a plan, with absolute paths as on the real system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    CreateDir {
        path: PathBuf,
    },
    /// Writes (or replaces) a file; missing parent directories are created.
    WriteFile {
        path: PathBuf,
        contents: String,
    },
    /// Writes the file only if nothing exists at `path`; never overwrites.
    WriteConfig {
        path: PathBuf,
        contents: String,
    },
    /// Writes (or replaces) the shell completions and man pages; listed by
    /// path only, not by contents, in a dry run.
    WriteDocs {
        files: Vec<docs::DocFile>,
    },
    /// Removes a file; one that is not there is fine.
    RemoveFile {
        path: PathBuf,
    },
    Run(CommandSpec),
    /// macOS: adds the binary to the Application Firewall when it is on
    /// (see [`firewall`]).
    AllowThroughFirewall {
        binary: PathBuf,
    },
    /// macOS: writes the LaunchDaemon and (re)loads it, putting the
    /// previous one back if that fails (see [`launchctl`]).
    ReplaceLaunchDaemon {
        path: PathBuf,
        contents: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Install,
    Uninstall,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Install => "install",
            Action::Uninstall => "uninstall",
        }
    }
}

/// The steps of an install or uninstall, in order.
#[derive(Debug, Clone)]
pub struct Plan {
    pub action: Action,
    pub platform: Platform,
    pub steps: Vec<Step>,
}

impl Plan {
    /// Config (only if missing), service file, then load and start it.
    pub fn install(platform: Platform, options: &InstallOptions) -> Result<Plan, InstallError> {
        for (what, path) in [("binary", &options.binary), ("config", &options.config)] {
            if !path.is_absolute() {
                return Err(InstallError::NotAbsolute {
                    what,
                    path: path.clone(),
                });
            }
            match platform {
                Platform::Linux => {
                    if let Some(dir) = systemd::hidden_from_service(path) {
                        return Err(InstallError::HiddenFromService {
                            what,
                            path: path.clone(),
                            dir,
                        });
                    }
                }
                Platform::MacOs => {
                    if let Some(folder) = launchd::protected_folder(path) {
                        return Err(InstallError::ProtectedFolder {
                            what,
                            path: path.clone(),
                            folder,
                        });
                    }
                    if let Some(place) = launchd::vanishing_place(path) {
                        return Err(InstallError::VanishingPlace {
                            what,
                            path: path.clone(),
                            place,
                        });
                    }
                }
            }
        }
        if let (Platform::Linux, Some((what, path))) = (
            platform,
            options.tls.as_ref().and_then(systemd::TlsFiles::unfit),
        ) {
            return Err(InstallError::UnfitCredential {
                what,
                path: path.to_owned(),
            });
        }
        let config = Step::WriteConfig {
            path: options.config.clone(),
            contents: default_config::text(&options.node_id, &options.config.display().to_string()),
        };
        let service = Step::WriteFile {
            path: platform.service_file(),
            contents: platform.service_file_contents(
                &options.binary,
                &options.config,
                options.tls.as_ref(),
            )?,
        };
        let steps = match platform {
            // The firewall rule before the service: a failure there leaves
            // the running meshd untouched, and the new one never starts
            // into an unanswered prompt.
            Platform::MacOs => vec![
                config,
                Step::CreateDir {
                    path: PathBuf::from(launchd::LOG_DIR),
                },
                Step::AllowThroughFirewall {
                    binary: options.binary.clone(),
                },
                match service {
                    Step::WriteFile { path, contents } => {
                        Step::ReplaceLaunchDaemon { path, contents }
                    }
                    other => other,
                },
            ],
            // `enable` + `restart` rather than `enable --now`: a reinstall
            // (new binary, new unit) must restart a meshd that already runs.
            Platform::Linux => vec![
                config,
                service,
                Step::Run(CommandSpec::new("systemctl", &["daemon-reload"])),
                Step::Run(CommandSpec::new("systemctl", &["enable", systemd::UNIT])),
                Step::Run(CommandSpec::new("systemctl", &["restart", systemd::UNIT])),
            ],
        };
        let mut steps = steps;
        steps.push(Step::WriteDocs {
            files: docs::files(),
        });
        Ok(Plan {
            action: Action::Install,
            platform,
            steps,
        })
    }

    /// Stop and unload the service, remove its file. The config and the
    /// logs stay.
    pub fn uninstall(platform: Platform) -> Plan {
        let steps = match platform {
            Platform::MacOs => vec![
                Step::Run(
                    CommandSpec::new(
                        "launchctl",
                        &["bootout", &format!("system/{}", launchd::LABEL)],
                    )
                    .may_fail("meshd was not loaded"),
                ),
                Step::RemoveFile {
                    path: launchd::plist_path(),
                },
            ],
            Platform::Linux => vec![
                Step::Run(
                    CommandSpec::new("systemctl", &["disable", "--now", systemd::UNIT])
                        .may_fail("meshd was not installed"),
                ),
                Step::RemoveFile {
                    path: systemd::unit_path(),
                },
                Step::Run(CommandSpec::new("systemctl", &["daemon-reload"])),
            ],
        };
        let mut steps = steps;
        steps.extend(
            docs::files()
                .into_iter()
                .map(|file| Step::RemoveFile { path: file.path }),
        );
        Plan {
            action: Action::Uninstall,
            platform,
            steps,
        }
    }

    /// The commands of the plan, in order.
    pub fn commands(&self) -> Vec<&CommandSpec> {
        self.steps
            .iter()
            .filter_map(|step| match step {
                Step::Run(command) => Some(command),
                _ => None,
            })
            .collect()
    }

    /// One sentence on why root is needed, for the refusal message.
    pub fn needs_root_because(&self) -> String {
        let verb = match self.action {
            Action::Install => "writes",
            Action::Uninstall => "removes",
        };
        format!(
            "it {verb} {} and runs {}",
            self.platform.service_file().display(),
            self.platform.manager()
        )
    }

    /// What `--dry-run` prints: every step, the full text of every file
    /// that would be written, whether the config exists (looked up under
    /// `root`), and every command.
    pub fn describe(&self, root: &Path) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "meshd {} on {}, dry run: nothing is changed. It would:",
            self.action.name(),
            self.platform.name()
        );
        for (n, step) in self.steps.iter().enumerate() {
            let n = n + 1;
            match step {
                Step::CreateDir { path } => {
                    let state = if under(root, path).is_dir() {
                        "exists"
                    } else {
                        "would be created"
                    };
                    let _ = writeln!(out, "{n}. directory {}: {state}", path.display());
                }
                Step::WriteFile { path, contents } => {
                    let _ = writeln!(out, "{n}. write {} (mode {FILE_MODE:04o}):", path.display());
                    file_block(&mut out, path, contents);
                }
                Step::WriteConfig { path, contents } => {
                    if under(root, path).symlink_metadata().is_ok() {
                        let _ = writeln!(out, "{n}. config {}: exists, kept", path.display());
                    } else {
                        let _ = writeln!(
                            out,
                            "{n}. config {}: would be created (mode {FILE_MODE:04o}):",
                            path.display()
                        );
                        file_block(&mut out, path, contents);
                    }
                }
                Step::WriteDocs { files } => {
                    let _ = writeln!(
                        out,
                        "{n}. write {} shell completions and man pages (mode {FILE_MODE:04o}):",
                        files.len()
                    );
                    for file in files {
                        let _ = writeln!(out, "   {}", file.path.display());
                    }
                }
                Step::RemoveFile { path } => {
                    let state = if under(root, path).symlink_metadata().is_ok() {
                        "would be removed"
                    } else {
                        "not there"
                    };
                    let _ = writeln!(out, "{n}. remove {}: {state}", path.display());
                }
                Step::Run(command) => {
                    let _ = write!(out, "{n}. run: {command}");
                    if let Some(because) = command.may_fail {
                        let _ = write!(out, "   (may fail: {because})");
                    }
                    out.push('\n');
                }
                Step::AllowThroughFirewall { binary } => {
                    let _ = writeln!(out, "{n}. {}", firewall::describe(binary));
                }
                Step::ReplaceLaunchDaemon { path, contents } => {
                    let _ = writeln!(
                        out,
                        "{n}. replace the LaunchDaemon {} (mode {FILE_MODE:04o}), keeping the \
                         previous one to put back:",
                        path.display()
                    );
                    file_block(&mut out, path, contents);
                    let _ = writeln!(out, "   {}", launchctl::describe(path));
                }
            }
        }
        if self.action == Action::Uninstall {
            let _ = writeln!(
                out,
                "The config ({} unless install was given --config) and the logs are kept.",
                self.platform.default_config().display()
            );
        }
        out
    }

    /// Carries the plan out under `root`, running commands through
    /// `runner`. Stops at the first step that fails; returns one line per
    /// step on what was done.
    pub fn apply(&self, root: &Path, runner: &mut dyn Runner) -> Result<Vec<String>, InstallError> {
        let mut done = Vec::new();
        for step in &self.steps {
            done.extend(apply_step(step, root, runner)?);
        }
        if self.action == Action::Uninstall {
            done.push(format!(
                "kept the config ({} unless install was given --config) and the logs",
                self.platform.default_config().display()
            ));
        }
        Ok(done)
    }
}

fn file_block(out: &mut String, path: &Path, contents: &str) {
    let _ = writeln!(out, "--- {} ---", path.display());
    out.push_str(contents);
    if !contents.ends_with('\n') {
        out.push('\n');
    }
    let _ = writeln!(out, "--- end of {} ---", path.display());
}

/// `path` (absolute, as on the real system) inside `root`.
pub fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// One line per thing done; the composite macOS steps say more than one.
fn apply_step(
    step: &Step,
    root: &Path,
    runner: &mut dyn Runner,
) -> Result<Vec<String>, InstallError> {
    let line = match step {
        Step::AllowThroughFirewall { binary } => return firewall::allow(binary, runner),
        Step::ReplaceLaunchDaemon { path, contents } => {
            return launchctl::replace(root, path, contents, runner);
        }
        Step::CreateDir { path } => {
            std::fs::create_dir_all(under(root, path)).map_err(|source| InstallError::Io {
                action: "create the directory",
                path: path.clone(),
                source,
            })?;
            format!("directory {} is there", path.display())
        }
        Step::WriteFile { path, contents } => {
            write_replacing(&under(root, path), contents).map_err(|source| InstallError::Io {
                action: "write",
                path: path.clone(),
                source,
            })?;
            format!("wrote {}", path.display())
        }
        Step::WriteConfig { path, contents } => {
            let created = write_if_missing(&under(root, path), contents).map_err(|source| {
                InstallError::Io {
                    action: "write the config",
                    path: path.clone(),
                    source,
                }
            })?;
            if created {
                format!(
                    "created the config {} (a one-node mesh: add the peers and links)",
                    path.display()
                )
            } else {
                format!(
                    "kept the config {}: it exists, and install never overwrites it",
                    path.display()
                )
            }
        }
        Step::WriteDocs { files } => {
            for file in files {
                write_replacing(&under(root, &file.path), &file.contents).map_err(|source| {
                    InstallError::Io {
                        action: "write",
                        path: file.path.clone(),
                        source,
                    }
                })?;
            }
            format!(
                "wrote {} shell completions and man pages under {}",
                files.len(),
                docs::SHARE_DIR
            )
        }
        Step::RemoveFile { path } => match std::fs::remove_file(under(root, path)) {
            Ok(()) => format!("removed {}", path.display()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                format!("{} was not there", path.display())
            }
            Err(source) => {
                return Err(InstallError::Io {
                    action: "remove",
                    path: path.clone(),
                    source,
                });
            }
        },
        Step::Run(command) => run_step(command, runner)?,
    };
    Ok(vec![line])
}

fn run_step(command: &CommandSpec, runner: &mut dyn Runner) -> Result<String, InstallError> {
    let output = runner.run(command)?;
    if output.success {
        return Ok(format!("ran {command}"));
    }
    let stderr = output.stderr.trim();
    match command.may_fail {
        Some(because) => Ok(format!(
            "ran {command}: failed ({}), fine: {because}{}",
            output.status,
            if stderr.is_empty() {
                String::new()
            } else {
                format!(" ({stderr})")
            }
        )),
        None => Err(InstallError::CommandFailed {
            command: command.to_string(),
            status: output.status,
            stderr: stderr.to_owned(),
        }),
    }
}

/// Writes beside the file and renames over it, so a reader never sees half
/// a plist or unit.
pub(crate) fn write_replacing(path: &Path, contents: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".meshd-new");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, contents)?;
    set_mode(&temporary, FILE_MODE)?;
    std::fs::rename(&temporary, path)
}

/// Creates the file only when nothing is at `path` (`create_new`, so not
/// even a race overwrites one). Returns whether it was created.
fn write_if_missing(path: &Path, contents: &str) -> std::io::Result<bool> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(err) => return Err(err),
    };
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    set_mode(path, FILE_MODE)?;
    Ok(true)
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// What stops a real install or uninstall before anything is touched, in
/// the order the real run checks: root, systemd (Linux), the binary, the
/// files' owners and modes. `--dry-run` runs the same checks and reports
/// them all; the real run stops at the first.
#[derive(Debug)]
pub struct Preflight {
    /// Not running as root: the real run stops here; a dry run, which
    /// needs no root, only says so.
    pub not_root: Option<InstallError>,
    /// Everything else the real run would refuse for.
    pub refusals: Vec<InstallError>,
}

impl Preflight {
    pub fn check(
        plan: &Plan,
        root: &Path,
        binary: Option<&Path>,
        runner: &mut dyn Runner,
    ) -> Preflight {
        let mut refusals = Vec::new();
        refusals.extend(require_service_manager(plan, root).err());
        let missing = binary.and_then(|b| require_binary(&under(root, b), b).err());
        // A missing binary has no owner or mode to judge: said once.
        let judged = if missing.is_some() { None } else { binary };
        refusals.extend(missing);
        refusals.extend(require_strict_modes(plan, root, judged).err());
        Preflight {
            not_root: require_root(plan, runner).err(),
            refusals,
        }
    }

    /// The real run's verdict: the first thing that stops it.
    pub fn first(self) -> Result<(), InstallError> {
        match self.not_root.into_iter().chain(self.refusals).next() {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    }
}

/// A real install needs the binary it points the service at (`found` is
/// where it is looked up, `named` what the service runs).
fn require_binary(found: &Path, named: &Path) -> Result<(), InstallError> {
    if found.is_file() {
        Ok(())
    } else {
        Err(InstallError::BinaryMissing {
            path: named.to_owned(),
        })
    }
}

/// Refuses a real install or uninstall unless this process runs as root,
/// before anything is touched.
pub fn require_root(plan: &Plan, runner: &mut dyn Runner) -> Result<(), InstallError> {
    let id = CommandSpec::new("id", &["-u"]);
    let output = runner.run(&id)?;
    if output.success && output.stdout.trim() == "0" {
        return Ok(());
    }
    Err(InstallError::NotRoot {
        action: plan.action.name(),
        because: plan.needs_root_because(),
    })
}

/// Refuses a real install or uninstall on Linux when systemd is not the
/// init system (the test `sd_booted(3)` uses, looked up under `root`), before
/// anything is touched: the unit would be written and never started.
pub fn require_service_manager(plan: &Plan, root: &Path) -> Result<(), InstallError> {
    if plan.platform == Platform::Linux && !under(root, Path::new("/run/systemd/system")).is_dir() {
        return Err(InstallError::NoSystemd {
            action: plan.action.name(),
        });
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(
        "meshd {action} needs systemd, and this host was not booted with it \
         (/run/systemd/system is missing); run `meshd run --config FILE` under \
         this host's own service manager instead"
    )]
    NoSystemd { action: &'static str },
    #[error("meshd install knows macOS (launchd) and Linux (systemd), not {0}")]
    UnsupportedOs(String),
    #[error("the {what} path must be absolute, not {}", path.display())]
    NotAbsolute { what: &'static str, path: PathBuf },
    #[error(
        "the {what} {} is under {dir}, which the systemd unit hides from meshd \
         (ProtectHome=yes, PrivateTmp=yes); put it elsewhere first \
         (e.g. /usr/local/bin/meshd for the binary, /etc/meshd/meshd.toml for the config)",
        path.display()
    )]
    HiddenFromService {
        what: &'static str,
        path: PathBuf,
        dir: &'static str,
    },
    #[error(
        "the {what} {} is under ~/{folder}, which macOS protects (TCC): launchd cannot \
         read it and meshd would fail with \"Operation not permitted\"; copy it out first \
         (e.g. `sudo install -d /usr/local/bin && sudo install -m 755 <file> \
         /usr/local/bin/meshd` for the binary; the config's default is \
         /usr/local/etc/meshd/meshd.toml)",
        path.display()
    )]
    ProtectedFolder {
        what: &'static str,
        path: PathBuf,
        folder: &'static str,
    },
    #[error(
        "the {what} {} is on {}: {}; copy it to the startup disk first (e.g. `sudo install -d \
         /usr/local/bin && sudo install -m 755 <file> /usr/local/bin/meshd` for the binary; \
         the config's default is /usr/local/etc/meshd/meshd.toml)",
        path.display(),
        place.name(),
        place.why()
    )]
    VanishingPlace {
        what: &'static str,
        path: PathBuf,
        place: launchd::VanishingPlace,
    },
    #[error(
        "`{command}` failed ({status}){}; meshd would not be reachable through the \
         Application Firewall, so nothing else was changed: allow {} in System Settings > \
         Network > Firewall > Options and run install again",
        stderr_suffix(stderr),
        binary.display()
    )]
    Firewall {
        command: String,
        status: String,
        stderr: String,
        binary: PathBuf,
    },
    #[error("install failed: {failure}; {outcome}")]
    ServiceNotReplaced { failure: String, outcome: String },
    #[error(
        "the config's {what} {} cannot be passed to the systemd unit (a credential path must \
         be absolute, without spaces or control characters); move the file and point {what} \
         at it, then install again",
        path.display()
    )]
    UnfitCredential { what: &'static str, path: PathBuf },
    #[error(
        "the config {} is not valid, and the service would not start with it: {reason}; fix it \
         (`meshd check-config {}` names every problem), then install again",
        path.display(),
        path.display()
    )]
    InvalidConfig { path: PathBuf, reason: String },
    #[error("the binary {} is not a file", path.display())]
    BinaryMissing { path: PathBuf },
    #[error(
        "the {what} {} is {problem}: the service runs or reads it (as root on macOS), so \
         whoever can change it controls the service. Fix it with `{fix}`, then install again",
        path.display()
    )]
    NotRootsAlone {
        what: &'static str,
        path: PathBuf,
        problem: String,
        fix: String,
    },
    #[error("cannot find the running meshd executable (pass --binary): {0}")]
    CurrentExe(std::io::Error),
    #[error(
        "meshd {action} must run as root: {because}. Run it with sudo; \
         `meshd {action} --dry-run` shows what it would do without root"
    )]
    NotRoot {
        action: &'static str,
        because: String,
    },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error(
        "`{command}` did not finish within {after:?} and was killed{}",
        stderr_suffix(stderr)
    )]
    TimedOut {
        command: String,
        after: Duration,
        stderr: String,
    },
    #[error("`{command}` failed ({status}){}", stderr_suffix(stderr))]
    CommandFailed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("cannot generate the launchd plist: {0}")]
    Plist(plist::Error),
}

#[cfg(test)]
mod tests;
