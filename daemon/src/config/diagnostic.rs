//! Diagnostics from what went wrong: serde's errors and the rules'
//! problems, each given its key and line in the file and phrased for an
//! operator.

use super::DEFAULT_GRPC_PORT;
use super::error::{Diagnostic, Problem};
use super::locate::Locator;

/// serde's messages name neither the key nor the line; add both, and phrase
/// the common cases the way an operator would.
pub(super) fn serde_diagnostic(
    err: &toml::de::Error,
    origin: &str,
    locator: &Locator<'_>,
) -> Diagnostic {
    let start = err.span().map(|s| s.start);
    let line = start.map(|s| locator.line_of_offset(s));
    let path = start.and_then(|s| locator.path_at(s)).map(str::to_owned);
    let message = one_line(err.message());

    if let Some(field) = backticked(&message, "missing field ") {
        let key = match path {
            Some(table) => format!("{table}.{field}"),
            None => field.to_owned(),
        };
        return Diagnostic {
            origin: origin.to_owned(),
            line,
            key: Some(key),
            message: "required key is missing".to_owned(),
        };
    }

    let message = humanize_types(&message);
    let message = if let Some(rest) = message.strip_prefix("unknown field") {
        format!("unknown key{rest}")
    } else if message.ends_with("expected a duration") {
        format!("{message} such as \"100ms\", \"1s\" or \"1m\"")
    } else if message == "invalid socket address syntax" {
        format!("{message}; use ip:port, like \"0.0.0.0:{DEFAULT_GRPC_PORT}\"")
    } else if message == "invalid IP address syntax" {
        format!(
            "{message}; use an IPv4 or IPv6 address without a port or scope, like \"10.254.0.1\""
        )
    } else {
        message
    };
    Diagnostic {
        origin: origin.to_owned(),
        line,
        key: path,
        message,
    }
}

pub(super) fn problem_diagnostic(
    problem: Problem,
    origin: &str,
    locator: &Locator<'_>,
) -> Diagnostic {
    let mut message = problem.message;
    if let Some(first) = &problem.first {
        match locator.exact_line_of(first) {
            Some(line) => message.push_str(&format!(" (first at line {line})")),
            None => message.push_str(&format!(" (first at {first})")),
        }
    }
    if let Some(other) = &problem.see {
        match locator.exact_line_of(other) {
            Some(line) => message.push_str(&format!(" (see {other} at line {line})")),
            None => message.push_str(&format!(" (see {other})")),
        }
    }
    Diagnostic {
        origin: origin.to_owned(),
        line: locator.line_of(&problem.key),
        key: Some(problem.key),
        message,
    }
}

/// serde names Rust types ("expected struct ProbeConfig", "expected u16");
/// say what to write in TOML instead.
fn humanize_types(message: &str) -> String {
    if let Some(i) = message.find("expected struct ") {
        return format!("{}expected a table", message.get(..i).unwrap_or_default());
    }
    message
        .replace("expected u16", "expected an integer from 0 to 65535")
        .replace("expected u32", "expected an integer from 0 to 4294967295")
        .replace("expected f64", "expected a number")
}

/// The name in `` prefix`name`... `` messages from serde.
fn backticked<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?.strip_prefix('`')?;
    rest.split_once('`').map(|(name, _)| name)
}

/// One diagnostic is one line of output, whatever the underlying error says.
pub(super) fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
