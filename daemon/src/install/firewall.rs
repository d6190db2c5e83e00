//! macOS: letting meshd through the Application Firewall. With the
//! firewall on, an ad-hoc-signed daemon listening on its gRPC, metrics and
//! probe ports gets an "allow incoming connections?" prompt that nobody on
//! a headless cluster answers, and its peers see it as dead. So when the
//! firewall is on (or its state cannot be read), install adds the binary
//! and unblocks it. A rule is tied to the binary's signature, so a rebuilt
//! binary needs this again: `meshd install` is the way to redo it.

use std::path::Path;

use meshd_domain::facts::SOCKETFILTERFW;
use meshd_platform::macos::socketfilterfw::{GlobalState, parse_global_state};

use super::runner::Runner;
use super::{CommandSpec, InstallError};

/// What socketfilterfw prints on a Mac whose firewall is managed by a
/// profile (MDM): the profile, not install, decides the rules.
const MANAGED: &str = "cannot be modified from command line on managed Mac";

fn global_state() -> CommandSpec {
    CommandSpec::new(SOCKETFILTERFW, &["--getglobalstate"])
}

fn add(binary: &Path) -> CommandSpec {
    CommandSpec::new(SOCKETFILTERFW, &["--add", &binary.display().to_string()])
}

fn unblock(binary: &Path) -> CommandSpec {
    CommandSpec::new(
        SOCKETFILTERFW,
        &["--unblockapp", &binary.display().to_string()],
    )
}

/// The step for `--dry-run`.
pub fn describe(binary: &Path) -> String {
    format!(
        "if the Application Firewall is on (`{}`): run {}, then {}",
        global_state(),
        add(binary),
        unblock(binary)
    )
}

/// Adds and unblocks `binary` when the firewall is on. A failure is an
/// error before the service is touched, so the previous meshd keeps
/// running; a managed firewall is reported and left to its profile.
pub fn allow(binary: &Path, runner: &mut dyn Runner) -> Result<Vec<String>, InstallError> {
    let out = runner.run(&global_state())?;
    let state = if out.success {
        parse_global_state(&out.stdout)
    } else {
        GlobalState::Unknown(format!("{} ({})", out.stderr.trim(), out.status))
    };
    let mut done = Vec::new();
    match &state {
        GlobalState::Off => {
            done.push("the Application Firewall is off: meshd needs no rule".to_owned());
            return Ok(done);
        }
        GlobalState::On => done.push("the Application Firewall is on".to_owned()),
        GlobalState::BlockAll => done.push(
            "the Application Firewall is on and blocks ALL incoming connections: peers cannot \
             reach meshd until \"Block all incoming connections\" is turned off (System \
             Settings > Network > Firewall > Options); adding meshd's rule anyway"
                .to_owned(),
        ),
        GlobalState::Unknown(said) => done.push(format!(
            "the Application Firewall's state is unknown ({said:?}); adding meshd's rule anyway, \
             which changes nothing while it is off"
        )),
    }
    for command in [add(binary), unblock(binary)] {
        let out = runner.run(&command)?;
        let said = format!("{}{}", out.stdout, out.stderr);
        if said.contains(MANAGED) {
            done.push(format!(
                "the Application Firewall is managed by a profile (`{command}`: {}); have the \
                 profile allow {}",
                said.trim(),
                binary.display()
            ));
            return Ok(done);
        }
        if !out.success {
            return Err(InstallError::Firewall {
                command: command.to_string(),
                status: out.status,
                stderr: out.stderr.trim().to_owned(),
                binary: binary.to_owned(),
            });
        }
        done.push(format!("ran {command}"));
    }
    Ok(done)
}
