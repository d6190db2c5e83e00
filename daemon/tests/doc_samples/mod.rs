//! The documentation's sample outputs, and how they are held to what the
//! binaries print.
//!
//! A sample is a fenced `text` or `json` block in README.md or docs/*.md
//! with a marker on the line right before it:
//!
//! - `<!-- sample: NAME -->`: the block is what a test produces under that
//!   name (`daemon/tests/samples.rs` for `meshd`'s own output,
//!   `ctl/tests/samples.rs` for `meshctl` against a demo). A first line
//!   `$ COMMAND` only shows the command and is not compared.
//! - `<!-- sample: NAME; not checked: WHY -->`: output no test can produce
//!   here (a real Mac, the root-only lab, an abridged document); WHY says
//!   where it comes from. Such names are listed in [`NOT_CHECKED`].
//!
//! `daemon/tests/docs.rs` requires a marker on every such block, and every
//! name in exactly one of the lists below. Comparison goes through
//! [`normalise`]; with `MESHD_UPDATE_SAMPLES=1` a test writes what the
//! binary printed into the block instead of comparing.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Samples `daemon/tests/samples.rs` produces with the `meshd` binary.
pub const CHECKED_BY_DAEMON: &[&str] = &["check-config-bad", "demo-port-taken"];
/// Samples `ctl/tests/samples.rs` produces with `meshctl` against a demo.
pub const CHECKED_BY_CTL: &[&str] = &["status-cut-a-b", "watch-cut-a-b", "hostfile-cut-a-b"];
/// Samples no test here can produce; each marker says where it comes from.
pub const NOT_CHECKED: &[&str] = &["jobs-lab-rank-stop", "status-json-contract"];

/// The environment variable that makes the tests rewrite the samples.
pub const UPDATE: &str = "MESHD_UPDATE_SAMPLES";

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// README.md and every docs/*.md, sorted.
pub fn doc_files() -> Vec<PathBuf> {
    let root = root();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    files.insert(0, root.join("README.md"));
    files
}

/// A fenced output block and its marker.
#[derive(Debug, Clone)]
pub struct Block {
    pub file: PathBuf,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The marker's text after `sample:`, or `None` without a marker.
    pub marker: Option<String>,
    /// The lines between the fences, the fence's indentation taken off.
    pub body: Vec<String>,
}

impl Block {
    /// The sample's name: the marker up to its first `;`.
    pub fn name(&self) -> Option<&str> {
        self.marker
            .as_deref()
            .map(|m| m.split(';').next().unwrap_or_default().trim())
    }

    /// Why the sample is not checked, when its marker says so.
    pub fn not_checked(&self) -> Option<&str> {
        self.marker
            .as_deref()
            .and_then(|m| m.split_once("; not checked:"))
            .map(|(_, why)| why.trim())
    }

    /// The output the block shows, without a leading `$ COMMAND` line.
    pub fn output(&self) -> String {
        let mut lines = self.body.iter().peekable();
        if lines.peek().is_some_and(|l| l.starts_with("$ ")) {
            lines.next();
        }
        lines.cloned().collect::<Vec<_>>().join("\n")
    }
}

/// The marker on `line`, if it is one: the text between `sample:` and `-->`.
fn marker(line: &str) -> Option<String> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim()
        .strip_prefix("sample:")?;
    Some(inner.trim().to_owned())
}

/// Every fenced `text` and `json` block of `text`, with its marker.
pub fn blocks_of(file: &Path, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            let indent = lines[i].len() - trimmed.len();
            let close = (i + 1..lines.len()).find(|&j| lines[j].trim() == "```");
            let Some(close) = close else { break };
            if matches!(info.trim(), "text" | "json") {
                let body = lines[i + 1..close]
                    .iter()
                    .map(|l| l.get(indent..).unwrap_or(l.trim_start()).to_owned())
                    .collect();
                let marker = i.checked_sub(1).and_then(|m| marker(lines[m]));
                blocks.push(Block {
                    file: file.to_path_buf(),
                    line: i + 1,
                    marker,
                    body,
                });
            }
            i = close + 1;
            continue;
        }
        i += 1;
    }
    blocks
}

/// Every output block of README.md and docs/*.md.
pub fn blocks() -> Vec<Block> {
    doc_files()
        .iter()
        .flat_map(|f| {
            let text =
                std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            blocks_of(f, &text)
        })
        .collect()
}

/// What varies from run to run, replaced by a placeholder, and whitespace
/// collapsed (column widths and where text wraps follow the widths of the
/// values replaced):
///
/// - durations (`85µs`, `605ms`, `5.1s`, `4m12s`, `3h05m`) → `<dur>`
/// - times (`2026-11-29T17:02:09.120Z`) → `<time>`
/// - the number after `incarnation ` and after `pid ` → `<n>`
/// - ports on 127.0.0.1 (`127.0.0.1:17401`) → `127.0.0.1:<port>`
/// - the count of `N probes lost in a row` → `<n>` (how many fell in the
///   silence before the verdict)
/// - `, past 314ms of lateness` after a silent end's evidence: how late
///   that end's own timers ran, which says how busy the machine running the
///   test was, not what the mesh is
pub fn normalise(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts_word = i == 0 || !chars[i - 1].is_alphanumeric();
        if c.is_ascii_digit() && starts_word {
            let (token, next) = value(&chars, i, &out);
            out.push_str(&token);
            i = next;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(", past <dur> of lateness", "")
}

/// The value starting at `chars[start]` (a digit), replaced if it is one
/// that varies; and where it ends.
fn value(chars: &[char], start: usize, before: &str) -> (String, usize) {
    let digits = |from: usize| {
        (from..chars.len())
            .find(|&j| !chars[j].is_ascii_digit())
            .unwrap_or(chars.len())
    };
    let is_end = |j: usize| j >= chars.len() || !chars[j].is_alphanumeric();
    let text = |from: usize, to: usize| chars[from..to].iter().collect::<String>();
    // A time: 2026-11-29T17:02:09(.120)Z
    let stamp: String = chars[start..chars.len().min(start + 20)].iter().collect();
    if stamp.len() >= 20
        && stamp.as_bytes()[4] == b'-'
        && stamp.as_bytes()[10] == b'T'
        && let Some(z) = (start..chars.len()).find(|&j| chars[j] == 'Z' || chars[j].is_whitespace())
        && chars.get(z) == Some(&'Z')
    {
        return ("<time>".to_owned(), z + 1);
    }
    let mut end = digits(start);
    if before.ends_with("incarnation ")
        || before.ends_with("pid ")
        || before.ends_with("127.0.0.1:")
    {
        let placeholder = if before.ends_with(':') {
            "<port>"
        } else {
            "<n>"
        };
        return (placeholder.to_owned(), end);
    }
    let rest: String = chars[end..chars.len().min(end + 22)].iter().collect();
    if rest.starts_with(" probes lost in a row") {
        return ("<n>".to_owned(), end);
    }
    // 4m12s, 3h05m
    for (unit, next_unit) in [('m', 's'), ('h', 'm')] {
        if chars.get(end) == Some(&unit) {
            let after = digits(end + 1);
            if after > end + 1 && chars.get(after) == Some(&next_unit) && is_end(after + 1) {
                return ("<dur>".to_owned(), after + 1);
            }
        }
    }
    if chars.get(end) == Some(&'.') && chars.get(end + 1).is_some_and(char::is_ascii_digit) {
        end = digits(end + 1);
    }
    for unit in ["µs", "ms", "s"] {
        let unit: Vec<char> = unit.chars().collect();
        if chars.get(end..end + unit.len()) == Some(&unit[..]) && is_end(end + unit.len()) {
            return ("<dur>".to_owned(), end + unit.len());
        }
    }
    (text(start, end), end)
}

/// Holds the sample `name` to `produced`, what the binary printed: the
/// block's output and `produced` must be equal once normalised. With
/// `MESHD_UPDATE_SAMPLES=1` writes `produced` into the block instead.
pub fn check(name: &str, produced: &str) {
    let found: Vec<Block> = blocks()
        .into_iter()
        .filter(|b| b.name() == Some(name))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one block marked `sample: {name}`: {found:?}"
    );
    let block = &found[0];
    assert!(
        block.not_checked().is_none(),
        "{name} is marked not checked, yet a test produces it"
    );
    let produced = produced.trim_end();
    if std::env::var_os(UPDATE).is_some_and(|v| v == "1") {
        rewrite(block, produced);
        return;
    }
    let shown = normalise(&block.output());
    let printed = normalise(produced);
    assert!(
        shown == printed,
        "{}:{}: sample {name} is not what the binary prints; run the test with \
         {UPDATE}=1 to rewrite it.\n--- shown (normalised)\n{shown}\n--- printed (normalised)\n\
         {printed}\n--- printed\n{produced}",
        block.file.display(),
        block.line
    );
}

/// Replaces the block's output with `produced`, keeping its `$ COMMAND`
/// line and its indentation.
fn rewrite(block: &Block, produced: &str) {
    let text = std::fs::read_to_string(&block.file).expect("read");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let open = block.line - 1;
    let indent: String = lines[open]
        .chars()
        .take_while(|c| c.is_whitespace())
        .collect();
    let close = open + 1 + block.body.len();
    let mut body: Vec<String> = Vec::new();
    if let Some(command) = block.body.first().filter(|l| l.starts_with("$ ")) {
        body.push(format!("{indent}{command}"));
    }
    body.extend(produced.lines().map(|l| {
        if l.is_empty() {
            String::new()
        } else {
            format!("{indent}{l}")
        }
    }));
    lines.splice(open + 1..close, body);
    let mut out = lines.join("\n");
    out.push('\n');
    std::fs::write(&block.file, out).expect("write");
}

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn normalise_replaces_what_varies_and_keeps_counts() {
        assert_eq!(
            normalise("a  up   10s   last message 1.0s ago; 4m12s 3h05m 85µs"),
            "a up <dur> last message <dur> ago; <dur> <dur> <dur>"
        );
        assert_eq!(
            normalise("2026-11-29T17:02:09.120Z  d (incarnation 17960) at 127.0.0.1:17401"),
            "<time> d (incarnation <n>) at 127.0.0.1:<port>"
        );
        assert_eq!(
            normalise("no reply for 4.0s (34 probes lost in a row), past 314ms of\n  lateness"),
            "no reply for <dur> (<n> probes lost in a row)"
        );
        assert_eq!(
            normalise("27 skipped, 4 pass, en2 v0.1.0"),
            "27 skipped, 4 pass, en2 v0.1.0"
        );
    }
}
