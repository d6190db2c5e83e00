//! Replacing the LaunchDaemon: the reinstall sequence, and putting the
//! previous one back when it fails.
//!
//! `launchctl bootout` returns before launchd has torn the old job down,
//! and a `bootstrap` of the same label meanwhile fails with "5:
//! Input/output error" (reported on macOS 26 too). So the sequence is:
//! write the new plist (the old text kept), bootout, wait until `launchctl
//! print` no longer finds the job (bounded), enable, bootstrap (retried
//! for a bounded time on that error only). If any of it fails, the previous
//! plist goes back and, if a job was loaded before, is bootstrapped again,
//! so a failed reinstall leaves the previous meshd running rather than
//! none.
//!
//! A launchctl that does not finish in time (it is killed) or cannot
//! start fails its step like a non-zero exit: the rollback runs all the
//! same. A `bootstrap` killed mid-way may still have loaded the new job,
//! so the rollback first unloads whatever job is there, then loads the
//! previous one.
//!
//! Commands and pauses go through the [`Runner`], so the whole sequence is
//! tested with recorded launchctl outputs.

use std::path::Path;
use std::time::{Duration, Instant};

use super::runner::Runner;
use super::{CommandOutput, CommandSpec, InstallError, launchd, under, write_replacing};

/// How long launchd gets to remove the old job after `bootout`.
pub const GONE_WITHIN: Duration = Duration::from_secs(30);
const GONE_POLL: Duration = Duration::from_millis(500);
/// How long `bootstrap` is retried while it fails with "5: Input/output
/// error" (launchd still tearing the old job down).
pub const BOOTSTRAP_WITHIN: Duration = Duration::from_secs(30);
const BOOTSTRAP_PAUSE: Duration = Duration::from_secs(1);
/// launchctl's exit status when it cannot find the service.
const NOT_FOUND_STATUS: i32 = 113;

/// `system/io.meshd.agent`.
pub fn target() -> String {
    format!("system/{}", launchd::LABEL)
}

fn print_job() -> CommandSpec {
    CommandSpec::new("launchctl", &["print", &target()])
}

fn bootout() -> CommandSpec {
    CommandSpec::new("launchctl", &["bootout", &target()])
}

fn enable() -> CommandSpec {
    CommandSpec::new("launchctl", &["enable", &target()])
}

fn bootstrap(plist: &Path) -> CommandSpec {
    CommandSpec::new(
        "launchctl",
        &["bootstrap", "system", &plist.display().to_string()],
    )
}

/// The commands of the sequence, for `--dry-run`.
pub fn describe(plist: &Path) -> String {
    format!(
        "run: {bootout}   (skipped when `{print}` does not find the job)\n   \
         wait until `{print}` no longer finds it (up to {gone}s)\n   \
         run: {enable}\n   \
         run: {bootstrap}   (retried for up to {retry}s while it fails with \"5: Input/output error\")\n   \
         if any of these fails or does not finish in time, the previous plist is put back and its job loaded again",
        bootout = bootout(),
        print = print_job(),
        gone = GONE_WITHIN.as_secs(),
        enable = enable(),
        bootstrap = bootstrap(plist),
        retry = BOOTSTRAP_WITHIN.as_secs(),
    )
}

/// What `launchctl print system/<label>` says of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Job {
    Loaded,
    Gone,
    /// Neither: launchctl failed some other way (the text says how).
    Unknown(String),
}

/// A launchctl run; one that could not start or was killed at its timeout
/// is an `Err` with the runner's message, for the caller to judge like a
/// failed run (see the module doc).
fn launchctl(runner: &mut dyn Runner, command: &CommandSpec) -> Result<CommandOutput, String> {
    runner.run(command).map_err(|err| err.to_string())
}

/// What `launchctl print` says; a run that did not finish says nothing
/// either way.
fn job(runner: &mut dyn Runner) -> Job {
    match launchctl(runner, &print_job()) {
        Ok(out) if out.success => Job::Loaded,
        Ok(out)
            if out.code == Some(NOT_FOUND_STATUS)
                || out.stderr.contains("Could not find service") =>
        {
            Job::Gone
        }
        Ok(out) => Job::Unknown(format!("{} ({})", out.stderr.trim(), out.status)),
        Err(why) => Job::Unknown(why),
    }
}

/// Polls `launchctl print` until the job is gone, for `GONE_WITHIN` at
/// most. Returns the last thing it said when the job is still there.
fn wait_until_gone(runner: &mut dyn Runner) -> Result<(), String> {
    let started = Instant::now();
    let polls = GONE_WITHIN.as_millis() / GONE_POLL.as_millis();
    let mut last = String::new();
    for poll in 0..=polls {
        match job(runner) {
            Job::Gone => return Ok(()),
            Job::Loaded => last = "it is still loaded".to_owned(),
            Job::Unknown(said) => last = format!("launchctl print says: {said}"),
        }
        if poll == polls || started.elapsed() >= GONE_WITHIN {
            break;
        }
        runner.pause(GONE_POLL);
    }
    Err(last)
}

/// Runs `bootstrap`, again every second for `BOOTSTRAP_WITHIN` while it
/// fails with "5: Input/output error"; any other failure, a timeout
/// included, ends it at once.
fn bootstrap_with_retry(runner: &mut dyn Runner, plist: &Path) -> Result<u32, String> {
    let started = Instant::now();
    let tries = u32::try_from(BOOTSTRAP_WITHIN.as_secs() / BOOTSTRAP_PAUSE.as_secs())
        .unwrap_or(u32::MAX)
        .max(1);
    let command = bootstrap(plist);
    let mut attempt = 1;
    loop {
        let out = launchctl(runner, &command)?;
        if out.success {
            return Ok(attempt);
        }
        let busy = out.stderr.contains("5: Input/output error");
        if !busy || attempt >= tries || started.elapsed() >= BOOTSTRAP_WITHIN {
            return Err(format!(
                "`{command}` failed ({}){}{}",
                out.status,
                super::stderr_suffix(&out.stderr),
                if busy {
                    format!(
                        " on each of {attempt} tries over {}s",
                        BOOTSTRAP_WITHIN.as_secs()
                    )
                } else {
                    String::new()
                }
            ));
        }
        attempt += 1;
        runner.pause(BOOTSTRAP_PAUSE);
    }
}

/// The plist that was there before, to put back on failure.
struct Previous {
    plist: Option<String>,
    /// A job was loaded (or may have been: launchctl could not say) before
    /// the bootout.
    loaded: bool,
}

/// Replaces the LaunchDaemon at `plist` (under `root`) with `contents`
/// and loads it; on failure puts the previous one back (see the module
/// doc). Returns one line per step done.
pub fn replace(
    root: &Path,
    plist: &Path,
    contents: &str,
    runner: &mut dyn Runner,
) -> Result<Vec<String>, InstallError> {
    let on_disk = under(root, plist);
    let previous = Previous {
        plist: match std::fs::read_to_string(&on_disk) {
            Ok(text) => Some(text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(InstallError::Io {
                    action: "read the current plist",
                    path: plist.to_owned(),
                    source,
                });
            }
        },
        loaded: job(runner) != Job::Gone,
    };
    write_replacing(&on_disk, contents).map_err(|source| InstallError::Io {
        action: "write",
        path: plist.to_owned(),
        source,
    })?;
    let mut done = vec![format!("wrote {}", plist.display())];

    if previous.loaded {
        done.push(match launchctl(runner, &bootout()) {
            Ok(out) if out.success => format!("ran {}", bootout()),
            Ok(out) => format!(
                "ran {}: failed ({}){}; waiting for the job to go anyway",
                bootout(),
                out.status,
                super::stderr_suffix(&out.stderr)
            ),
            Err(why) => format!("{why}; waiting for the job to go anyway"),
        });
        if let Err(last) = wait_until_gone(runner) {
            // The old job was never removed: it keeps running as it was;
            // only its file needs to be what it was.
            let outcome = restore_file(root, plist, &previous);
            return Err(InstallError::ServiceNotReplaced {
                failure: format!(
                    "the old meshd job was not removed within {}s of `{}` ({last})",
                    GONE_WITHIN.as_secs(),
                    bootout()
                ),
                outcome: format!("{outcome}; the old job was left as it was, so run install again"),
            });
        }
        done.push(format!(
            "the old job is gone (`{}` no longer finds it)",
            print_job()
        ));
    }

    let failure = match launchctl(runner, &enable()) {
        Ok(out) if out.success => None,
        Ok(out) => Some(format!(
            "`{}` failed ({}){}",
            enable(),
            out.status,
            super::stderr_suffix(&out.stderr)
        )),
        Err(why) => Some(why),
    };
    if let Some(failure) = failure {
        return Err(roll_back(root, plist, &previous, failure, runner));
    }
    done.push(format!("ran {}", enable()));

    match bootstrap_with_retry(runner, plist) {
        Ok(1) => done.push(format!("ran {}", bootstrap(plist))),
        Ok(tries) => done.push(format!(
            "ran {} (loaded on try {tries}: launchd was still removing the old job)",
            bootstrap(plist)
        )),
        Err(failure) => return Err(roll_back(root, plist, &previous, failure, runner)),
    }
    Ok(done)
}

/// Puts the previous plist back (or removes the new one when there was
/// none). Says what it did.
fn restore_file(root: &Path, plist: &Path, previous: &Previous) -> String {
    let on_disk = under(root, plist);
    match &previous.plist {
        Some(text) => match write_replacing(&on_disk, text) {
            Ok(()) => format!("the previous {} is back", plist.display()),
            Err(err) => format!(
                "the previous {} could not be put back ({err})",
                plist.display()
            ),
        },
        None => match std::fs::remove_file(&on_disk) {
            Ok(()) => format!(
                "there was no previous plist; the new {} was removed",
                plist.display()
            ),
            Err(err) => format!("the new {} could not be removed ({err})", plist.display()),
        },
    }
}

/// Unloads a job the failed attempt may have left loaded (a `bootstrap`
/// killed at its timeout may have loaded the new plist): the previous
/// one cannot be bootstrapped over it. Nothing to do when none is loaded.
fn unload_new_job(runner: &mut dyn Runner) -> Result<(), String> {
    if job(runner) == Job::Gone {
        return Ok(());
    }
    // Its own failure is judged by what `print` says next.
    let _ = launchctl(runner, &bootout());
    wait_until_gone(runner)
}

/// After the old job was booted out and the new one did not load: the
/// previous plist back, and its job loaded again.
fn roll_back(
    root: &Path,
    plist: &Path,
    previous: &Previous,
    failure: String,
    runner: &mut dyn Runner,
) -> InstallError {
    let unloaded = unload_new_job(runner);
    let restored = restore_file(root, plist, previous);
    if let Err(last) = unloaded {
        return InstallError::ServiceNotReplaced {
            failure,
            outcome: format!(
                "{restored}, but the job the failed attempt may have loaded could not be \
                 removed ({last}); check `sudo {}`, then `sudo {}` and `sudo {}`",
                print_job(),
                bootout(),
                bootstrap(plist)
            ),
        };
    }
    let outcome = match (&previous.plist, previous.loaded) {
        (Some(_), true) => match bootstrap_with_retry(runner, plist) {
            Ok(_) => format!("{restored} and the previous meshd is loaded and running again"),
            Err(why) => format!(
                "{restored}, but loading it failed too ({why}); meshd is not running: \
                 load it by hand with `sudo {}`",
                bootstrap(plist)
            ),
        },
        (_, false) => format!("{restored}; no meshd was loaded before, and none is now"),
        (None, true) => format!(
            "{restored}; the job that was loaded before had no plist at {} to load again, \
             so meshd is not running",
            plist.display()
        ),
    };
    InstallError::ServiceNotReplaced { failure, outcome }
}
