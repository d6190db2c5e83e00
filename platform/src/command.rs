//! Running an external command under a timeout, without an async runtime:
//! the platform layer is called from the daemon's blocking pool and from
//! meshctl alike.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a finished command left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    pub success: bool,
    /// "exit status: 5" and the like, for messages.
    pub status: String,
    /// The exit code; `None` when a signal ended the command.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub fn ok(stdout: &str) -> CommandOutput {
        CommandOutput {
            success: true,
            status: "exit status: 0".to_owned(),
            code: Some(0),
            stdout: stdout.to_owned(),
            stderr: String::new(),
        }
    }

    /// A command that exited with `code` and printed `stderr`.
    pub fn failed(code: i32, stderr: &str) -> CommandOutput {
        CommandOutput {
            success: code == 0,
            status: format!("exit status: {code}"),
            code: Some(code),
            stdout: String::new(),
            stderr: stderr.to_owned(),
        }
    }
}

/// A command that could not be run to completion.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot run {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command} did not finish within {after:?}; killed{}", stderr_suffix(.stderr))]
    TimedOut {
        command: String,
        after: Duration,
        stderr: String,
    },
}

/// ": <stderr>" for messages, or nothing when it is empty.
pub fn stderr_suffix(stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// Runs `program args…` with stdin closed; kills it after `timeout`. A
/// non-zero exit is an output with `success` false, not an error.
pub fn run_with_timeout(
    program: &str,
    args: &[String],
    timeout: Duration,
) -> Result<CommandOutput, RunError> {
    let line = command_line(program, args);
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| RunError::Spawn {
            command: line.clone(),
            source,
        })?;
    // Read both pipes on their own threads so a chatty command cannot block
    // on a full pipe while we wait for it.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::TimedOut {
                    command: line,
                    after: timeout,
                    stderr: collect(&stderr),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::Spawn {
                    command: line,
                    source,
                });
            }
        }
    };
    Ok(CommandOutput {
        success: status.success(),
        status: status.to_string(),
        code: status.code(),
        stdout: collect(&stdout),
        stderr: collect(&stderr),
    })
}

/// `program arg…`, quoting arguments with spaces, for messages.
pub fn command_line(program: &str, args: &[String]) -> String {
    std::iter::once(program.to_owned())
        .chain(args.iter().map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("'{a}'")
            } else {
                a.clone()
            }
        }))
        .collect::<Vec<_>>()
        .join(" ")
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
        });
    }
    rx
}

/// The pipe's text; empty if a grandchild still holds it open.
fn collect(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(Duration::from_secs(1)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn output_exit_status_and_stderr_are_kept() {
        let out = run_with_timeout(
            "sh",
            &args(&["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(5),
        )
        .expect("runs");
        assert!(!out.success);
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert!(out.status.contains('3'), "{}", out.status);
        assert_eq!(out.code, Some(3));
    }

    #[test]
    fn a_hanging_command_is_killed_at_the_timeout() {
        let err = run_with_timeout(
            "sh",
            &args(&["-c", "echo partial >&2; sleep 30"]),
            Duration::from_millis(200),
        )
        .expect_err("times out");
        let text = err.to_string();
        assert!(text.contains("did not finish within"), "{text}");
        assert!(matches!(err, RunError::TimedOut { .. }));
    }

    #[test]
    fn a_missing_program_is_a_spawn_error_naming_it() {
        let err = run_with_timeout("meshd-no-such-program", &[], Duration::from_secs(1))
            .expect_err("missing");
        assert!(
            err.to_string()
                .starts_with("cannot run meshd-no-such-program"),
            "{err}"
        );
    }

    #[test]
    fn command_lines_quote_arguments_with_spaces() {
        assert_eq!(
            command_line("networksetup", &args(&["-getinfo", "Thunderbolt Bridge"])),
            "networksetup -getinfo 'Thunderbolt Bridge'"
        );
    }
}
