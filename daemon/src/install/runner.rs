//! Running the plan's commands: for real with a timeout, or recorded.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

pub use meshd_platform::command::CommandOutput;
use meshd_platform::command::{RunError, run_with_timeout};

use super::{CommandSpec, InstallError};

/// Runs one command to completion. Failing to start it or to finish in time
/// is an error; a non-zero exit is an [`CommandOutput`] with `success`
/// false, which the plan judges.
pub trait Runner {
    fn run(&mut self, command: &CommandSpec) -> Result<CommandOutput, InstallError>;

    /// Waits between polls and retries: a real sleep by default.
    fn pause(&mut self, how_long: Duration) {
        std::thread::sleep(how_long);
    }
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

/// One recorded answer: what the command printed, or that it hung and
/// was killed at its timeout (as [`SystemRunner`] reports it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Output(CommandOutput),
    TimedOut,
}

impl From<CommandOutput> for Reply {
    fn from(output: CommandOutput) -> Reply {
        Reply::Output(output)
    }
}

/// Records command lines instead of running them, and pauses instead of
/// sleeping. A line with `responses` answers with them in order, the last
/// one again once they run out; otherwise it succeeds with no output,
/// unless it is in `failures` (line → stderr, exit status 1). `id -u`
/// answers root.
#[derive(Debug, Clone, Default)]
pub struct RecordingRunner {
    pub commands: Vec<String>,
    pub failures: BTreeMap<String, String>,
    pub responses: BTreeMap<String, VecDeque<Reply>>,
    pub uid: Option<u32>,
    /// Every pause asked for, in order.
    pub pauses: Vec<Duration>,
}

impl RecordingRunner {
    /// `line` answers with `replies`, in order; the last one repeats.
    pub fn respond<R: Into<Reply>>(&mut self, line: &str, replies: impl IntoIterator<Item = R>) {
        self.responses.insert(
            line.to_owned(),
            replies.into_iter().map(Into::into).collect(),
        );
    }

    /// How often `line` was run.
    pub fn count(&self, line: &str) -> usize {
        self.commands.iter().filter(|c| *c == line).count()
    }
}

impl Runner for RecordingRunner {
    fn run(&mut self, command: &CommandSpec) -> Result<CommandOutput, InstallError> {
        let line = command.to_string();
        self.commands.push(line.clone());
        if line == "id -u" {
            return Ok(CommandOutput::ok(&format!("{}\n", self.uid.unwrap_or(0))));
        }
        if let Some(queue) = self.responses.get_mut(&line) {
            let next = if queue.len() > 1 {
                queue.pop_front()
            } else {
                queue.front().cloned()
            };
            match next {
                Some(Reply::Output(output)) => return Ok(output),
                Some(Reply::TimedOut) => {
                    return Err(InstallError::TimedOut {
                        command: line,
                        after: super::COMMAND_TIMEOUT,
                        stderr: String::new(),
                    });
                }
                None => {}
            }
        }
        Ok(match self.failures.get(&line) {
            Some(stderr) => CommandOutput::failed(1, stderr),
            None => CommandOutput::ok(""),
        })
    }

    fn pause(&mut self, how_long: Duration) {
        self.pauses.push(how_long);
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
