//! Running the plan's commands: for real with a timeout, or recorded.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{CommandSpec, InstallError};

/// What a finished command left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    pub success: bool,
    /// "exit status 5" and the like, for messages.
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub fn ok(stdout: &str) -> CommandOutput {
        CommandOutput {
            success: true,
            status: "exit status: 0".to_owned(),
            stdout: stdout.to_owned(),
            stderr: String::new(),
        }
    }
}

/// Runs one command to completion. Failing to start it or to finish in time
/// is an error; a non-zero exit is an [`CommandOutput`] with `success`
/// false, which the plan judges.
pub trait Runner {
    fn run(&mut self, command: &CommandSpec) -> Result<CommandOutput, InstallError>;
}

/// Runs commands on this host; each is killed after `timeout`.
#[derive(Debug, Clone)]
pub struct SystemRunner {
    pub timeout: Duration,
}

impl Runner for SystemRunner {
    fn run(&mut self, spec: &CommandSpec) -> Result<CommandOutput, InstallError> {
        let mut child = Command::new(&spec.program)
            .args(&spec.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| InstallError::Spawn {
                command: spec.to_string(),
                source,
            })?;
        // Read both pipes on their own threads so a chatty command cannot
        // block on a full pipe while we wait for it.
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(InstallError::TimedOut {
                        command: spec.to_string(),
                        after: self.timeout,
                        stderr: collect(&stderr),
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(source) => {
                    let _ = child.kill();
                    return Err(InstallError::Spawn {
                        command: spec.to_string(),
                        source,
                    });
                }
            }
        };
        Ok(CommandOutput {
            success: status.success(),
            status: status.to_string(),
            stdout: collect(&stdout),
            stderr: collect(&stderr),
        })
    }
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

/// Records command lines instead of running them. Each succeeds, unless
/// its line is in `failures` (line → stderr), and `id -u` answers root.
#[derive(Debug, Clone, Default)]
pub struct RecordingRunner {
    pub commands: Vec<String>,
    pub failures: BTreeMap<String, String>,
    pub uid: Option<u32>,
}

impl Runner for RecordingRunner {
    fn run(&mut self, command: &CommandSpec) -> Result<CommandOutput, InstallError> {
        let line = command.to_string();
        self.commands.push(line.clone());
        if line == "id -u" {
            return Ok(CommandOutput::ok(&format!("{}\n", self.uid.unwrap_or(0))));
        }
        Ok(match self.failures.get(&line) {
            Some(stderr) => CommandOutput {
                success: false,
                status: "exit status: 1".to_owned(),
                stdout: String::new(),
                stderr: stderr.clone(),
            },
            None => CommandOutput::ok(""),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(program: &str, args: &[&str]) -> CommandSpec {
        CommandSpec {
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            may_fail: None,
            retry: false,
        }
    }

    fn runner(timeout: Duration) -> SystemRunner {
        SystemRunner { timeout }
    }

    #[test]
    fn a_command_runs_and_its_output_is_kept() {
        let out = runner(Duration::from_secs(10))
            .run(&spec("sh", &["-c", "echo out; echo err >&2; exit 3"]))
            .expect("runs");
        assert!(!out.success);
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert!(out.status.contains('3'), "{}", out.status);
    }

    #[test]
    fn a_hanging_command_is_killed_at_the_timeout() {
        let started = Instant::now();
        let err = runner(Duration::from_millis(200))
            .run(&spec("sh", &["-c", "echo stuck >&2; exec sleep 30"]))
            .expect_err("times out");
        assert!(started.elapsed() < Duration::from_secs(10));
        let message = err.to_string();
        assert!(
            message.contains("`sh -c 'echo stuck >&2; exec sleep 30'`"),
            "{message}"
        );
        assert!(message.contains("did not finish within 200ms"), "{message}");
        assert!(message.contains("stuck"), "{message}");
    }

    #[test]
    fn a_missing_program_is_named() {
        let err = runner(Duration::from_secs(1))
            .run(&spec("/nonexistent/launchctl", &["list"]))
            .expect_err("cannot start");
        assert!(
            err.to_string()
                .starts_with("cannot run `/nonexistent/launchctl list`: "),
            "{err}"
        );
    }
}
