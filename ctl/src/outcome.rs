//! How a command ends: its output, and the exit code of the one table in
//! [`meshctl::cli`] (0 done or healthy, 1 unhealthy or refused, 2 meshd
//! unreachable, 64 wrong usage).

use std::io::Write as _;

use meshctl::cli::{EXIT_UNHEALTHY, EXIT_UNREACHABLE, EXIT_USAGE};

/// Why a command did not give its answer; the message says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The command line is wrong (exit 64).
    Usage(String),
    /// Understood and refused, or nothing usable to judge (exit 1).
    Refused(String),
    /// meshd could not be reached or answered something unusable (exit 2).
    Unreachable(String),
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => EXIT_USAGE,
            Failure::Refused(_) => EXIT_UNHEALTHY,
            Failure::Unreachable(_) => EXIT_UNREACHABLE,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::Usage(m) | Failure::Refused(m) | Failure::Unreachable(m) => m,
        }
    }
}

/// Writes `text` to standard output. A reader that went away (`meshctl
/// plan --json | head`) is not an error: the rest is dropped quietly, and
/// the command keeps the exit code its answer deserves. Any other write
/// error (a full disk behind a redirect) is.
pub fn emit(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(err) => Err(Failure::Refused(format!(
            "cannot write to standard output: {err}"
        ))),
    }
}

/// A line for the person at the terminal on standard error, prefixed
/// `meshctl: `; never panics, even with standard error closed.
pub fn note(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "meshctl: {message}");
}
