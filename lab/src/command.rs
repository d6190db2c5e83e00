//! External commands, each under a deadline: `ip`, `tc`, `nft`, `kill` and
//! meshctl can all hang on a wedged kernel or daemon, and a lab that waits
//! forever is worse than one that fails.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use meshd_platform::command::{RunError, run_with_timeout};

/// How long a configuration command (`ip`, `tc`, `nft`, `kill`) may take.
pub const QUICK: Duration = Duration::from_secs(10);

/// How often a running command is checked for having exited.
const POLL: Duration = Duration::from_millis(5);

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` did not finish within {limit:?} and was killed")]
    TimedOut { command: String, limit: Duration },
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
}

/// What a finished command printed and how it ended.
pub use meshd_platform::command::CommandOutput as Output;

/// `program args…` as one line, for messages.
pub fn describe(program: &str, args: &[&str]) -> String {
    std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a command to its end, or kills it after `limit`; any exit status is
/// returned, the caller decides what failure means.
pub fn run_any(program: &str, args: &[&str], limit: Duration) -> Result<Output, CommandError> {
    let owned: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    run_with_timeout(program, &owned, limit).map_err(|err| match err {
        RunError::Spawn { source, .. } => CommandError::Spawn {
            command: describe(program, args),
            source,
        },
        RunError::TimedOut { .. } => CommandError::TimedOut {
            command: describe(program, args),
            limit,
        },
    })
}

/// Runs a command that must succeed; its standard output.
pub fn run(program: &str, args: &[&str], limit: Duration) -> Result<String, CommandError> {
    let output = run_any(program, args, limit)?;
    if output.success {
        Ok(output.stdout)
    } else {
        Err(CommandError::Failed {
            command: describe(program, args),
            status: output.status,
            stderr: output.stderr.trim().to_owned(),
        })
    }
}

/// Runs a command that must succeed in directory `dir` (through `env -C`,
/// so the deadline and error handling stay those of [`run`]).
pub fn run_in(
    dir: &std::path::Path,
    program: &str,
    args: &[&str],
    limit: Duration,
) -> Result<String, CommandError> {
    let dir = dir.to_string_lossy();
    let mut full = vec!["-C", dir.as_ref(), program];
    full.extend_from_slice(args);
    run("env", &full, limit)
}

/// Waits for `child` to exit for at most `limit`: its status, or `None`
/// when it is still running.
pub fn wait_until(child: &mut Child, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// `ip args…`, which must succeed.
pub fn ip(args: &[&str]) -> Result<String, CommandError> {
    run("ip", args, QUICK)
}

/// `program args…` inside network namespace `ns`, which must succeed.
pub fn in_namespace(ns: &str, program: &str, args: &[&str]) -> Result<String, CommandError> {
    let mut full = vec!["netns", "exec", ns, program];
    full.extend_from_slice(args);
    run("ip", &full, QUICK)
}

/// Sends `signal` (`TERM`, `KILL`, `STOP`, `CONT`) to a process.
pub fn signal(pid: u32, signal: &str) -> Result<(), CommandError> {
    run("kill", &[&format!("-{signal}"), &pid.to_string()], QUICK).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_outlives_its_limit_is_killed() {
        let err = run_any("sleep", &["30"], Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, CommandError::TimedOut { .. }), "{err}");
    }

    #[test]
    fn failure_carries_the_command_and_its_stderr() {
        let err = run("sh", &["-c", "echo nope >&2; exit 3"], QUICK).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sh -c") && text.contains("nope"), "{text}");
        assert_eq!(run("sh", &["-c", "echo yes"], QUICK).unwrap(), "yes\n");
    }
}
