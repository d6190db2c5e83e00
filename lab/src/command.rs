//! External commands, each under a deadline: `ip`, `tc`, `nft`, `kill` and
//! meshctl can all hang on a wedged kernel or daemon, and a lab that waits
//! forever is worse than one that fails.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

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
        status: ExitStatus,
        stderr: String,
    },
    #[error("waiting for `{command}`: {source}")]
    Wait {
        command: String,
        source: std::io::Error,
    },
}

/// What a finished command printed and how it ended.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

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
    let command = describe(program, args);
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| CommandError::Spawn {
            command: command.clone(),
            source,
        })?;
    // Pipes are drained on their own threads so a chatty command cannot
    // block on a full pipe while it is being waited for.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_until(&mut child, limit).map_err(|source| CommandError::Wait {
        command: command.clone(),
        source,
    })?;
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(CommandError::TimedOut { command, limit });
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Runs a command that must succeed; its standard output.
pub fn run(program: &str, args: &[&str], limit: Duration) -> Result<String, CommandError> {
    let output = run_any(program, args, limit)?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(CommandError::Failed {
            command: describe(program, args),
            status: output.status,
            stderr: output.stderr.trim().to_owned(),
        })
    }
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

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
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
        let started = Instant::now();
        let err = run_any("sleep", &["30"], Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, CommandError::TimedOut { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn failure_carries_the_command_and_its_stderr() {
        let err = run("sh", &["-c", "echo nope >&2; exit 3"], QUICK).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sh -c") && text.contains("nope"), "{text}");
        assert_eq!(run("sh", &["-c", "echo yes"], QUICK).unwrap(), "yes\n");
    }
}
