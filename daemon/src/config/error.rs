//! Problems found in a config, and the errors that carry them to the
//! operator with a file, a line and a key.

use std::fmt;
use std::path::PathBuf;

use meshd_platform::file::FileProblem;

/// A rule the config breaks, found by [`Config::validate`](super::Config::validate).
///
/// It holds key paths, not lines, so that validation stays pure and also
/// works on a config that never came from a file (the embedded default, or
/// one built in a test); lines are added when the source is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, like `peers[1].id`.
    pub key: String,
    /// What is wrong and what is allowed.
    pub message: String,
    /// For duplicates and conflicts: the key path of the earlier entry, so
    /// the operator can see both sides of the clash.
    pub first: Option<String>,
    /// For a rule between two keys: the other key, so the operator can
    /// find it.
    pub see: Option<String>,
}

impl Problem {
    pub(super) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            key: key.into(),
            message: message.into(),
            first: None,
            see: None,
        }
    }

    pub(super) fn see(mut self, other: impl Into<String>) -> Self {
        self.see = Some(other.into());
        self
    }

    pub(super) fn with_first(mut self, first: impl Into<String>) -> Self {
        self.first = Some(first.into());
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)?;
        if let Some(first) = &self.first {
            write!(f, " (first at {first})")?;
        }
        if let Some(other) = &self.see {
            write!(f, " (see {other})")?;
        }
        Ok(())
    }
}

/// One message for the operator, in the `file:line: key: message` shape
/// that editors and CI logs recognise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file name as the operator gave it.
    pub origin: String,
    /// 1-based; `None` only when the error cannot be tied to any place.
    pub line: Option<usize>,
    /// Dotted key path; `None` for syntax errors, which happen before keys exist.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Why a config could not be used. Every variant renders as one line per
/// problem so that `meshd check-config` output can be read and grepped.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The problem is part of the message rather than a `source`, so that
    /// error-chain printers do not repeat it.
    #[error("{}: cannot read the config file: {problem}", path.display())]
    Unreadable { path: PathBuf, problem: FileProblem },
    /// A TOML syntax error, or the one value of the wrong type or unknown
    /// key in the file: it could not be turned into a config at all.
    #[error("{0}")]
    Toml(Diagnostic),
    /// Several values of the wrong type or unknown keys, or (once every value
    /// reads) the rules the file breaks: all of them, by line.
    #[error("{}", Lines(.0))]
    Invalid(Vec<Diagnostic>),
}

impl ConfigError {
    /// The individual messages, for callers that show them one by one (the
    /// gRPC reload status, `meshctl`).
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        match self {
            ConfigError::Unreadable { path, problem } => vec![Diagnostic {
                origin: path.display().to_string(),
                line: None,
                key: None,
                message: format!("cannot read the config file: {problem}"),
            }],
            ConfigError::Toml(d) => vec![d.clone()],
            ConfigError::Invalid(ds) => ds.clone(),
        }
    }
}

struct Lines<'a>(&'a [Diagnostic]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}
