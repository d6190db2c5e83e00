//! Running the plan's commands: for real with a timeout, or recorded.

use std::collections::BTreeMap;
use std::time::Duration;

pub use meshd_platform::command::CommandOutput;
use meshd_platform::command::{RunError, run_with_timeout};

use super::{CommandSpec, InstallError};

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
        run_with_timeout(&spec.program, &spec.args, self.timeout).map_err(|err| match err {
            RunError::Spawn { source, .. } => InstallError::Spawn {
                command: spec.to_string(),
                source,
            },
            RunError::TimedOut { after, stderr, .. } => InstallError::TimedOut {
                command: spec.to_string(),
                after,
                stderr,
            },
        })
    }
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
                code: Some(1),
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
    fn a_hanging_command_is_killed_at_the_timeout() {
        let err = runner(Duration::from_millis(200))
            .run(&spec("sh", &["-c", "echo stuck >&2; exec sleep 30"]))
            .expect_err("times out");
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
