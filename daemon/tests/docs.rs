//! The README and docs/*.md hold together: every relative link points at a
//! file of the repository and, with `#anchor`, at a heading of it (GitHub's
//! anchors); nothing points outside the repository but http(s) URLs; the
//! README stays a short front page; and every output block carries a
//! sample marker (see `doc_samples`), its name known to the test that
//! produces it or listed as not checked.

#[path = "doc_samples/mod.rs"]
mod doc_samples;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use doc_samples::{CHECKED_BY_CTL, CHECKED_BY_DAEMON, NOT_CHECKED, doc_files, root};

/// The README's limit, in lines: what meshd is, how to run and test it, the
/// Mac quick start, and where the rest is.
const README_MAX_LINES: usize = 400;

/// GitHub's anchor for a heading: lowercase, punctuation dropped (letters,
/// digits, `-`, `_` and spaces kept), each space a `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines of `text` outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// The anchors of a Markdown file's headings; a repeated heading's second
/// anchor gets `-1`, its third `-2`, as GitHub numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor(&line[hashes..].replace('`', ""));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The inline link targets of a line, `[text](target)`, outside code spans.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '`' => in_code = !in_code,
            ']' if !in_code && chars.get(i + 1) == Some(&'(') => {
                if let Some(len) = chars[i + 2..].iter().position(|&c| c == ')') {
                    let target: String = chars[i + 2..i + 2 + len].iter().collect();
                    out.push(target.split_whitespace().next().unwrap_or("").to_owned());
                    i += 2 + len;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// `path` with `.` and `..` taken out lexically, or `None` when `..`
/// climbs above where it started.
fn lexical(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with the links of `file` (a path from `root`), whose text
/// is `text`: each problem names the line and the link.
fn link_problems(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let dir = file.parent().unwrap_or(Path::new(""));
    for (number, line) in prose(text) {
        for target in links(line) {
            let at = format!("{}:{number}: ({target})", file.display());
            if target.starts_with("https://") || target.starts_with("http://") {
                continue;
            }
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                problems.push(format!("{at}: not a relative link nor an http(s) URL"));
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let Some(resolved) = (if path.is_empty() {
                Some(file.to_path_buf())
            } else if path.starts_with('/') {
                None
            } else {
                lexical(&dir.join(path))
            }) else {
                problems.push(format!("{at}: points outside the repository"));
                continue;
            };
            let full = root.join(&resolved);
            if !full.exists() {
                problems.push(format!("{at}: {} does not exist", resolved.display()));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if full.extension().is_none_or(|x| x != "md") {
                problems.push(format!("{at}: an anchor into a file that is not Markdown"));
                continue;
            }
            let target_text = std::fs::read_to_string(&full).unwrap_or_default();
            if !anchors(&target_text).contains(fragment) {
                problems.push(format!(
                    "{at}: {} has no heading with the anchor #{fragment}",
                    resolved.display()
                ));
            }
        }
    }
    problems
}

fn relative(path: &Path) -> PathBuf {
    path.strip_prefix(root())
        .expect("in the repository")
        .to_path_buf()
}

#[test]
fn every_relative_link_points_at_a_file_and_heading_of_the_repository() {
    let root = root();
    let mut problems = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).expect("read");
        problems.extend(link_problems(&root, &relative(&file), &text));
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_readme_is_a_short_front_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; keep it to {README_MAX_LINES} and move the rest to docs/"
    );
    for doc in [
        "INSTALL-macOS.md",
        "INSTALL-linux.md",
        "CONFIGURATION.md",
        "SECURITY.md",
        "LAB.md",
        "TROUBLESHOOTING.md",
        "CLI.md",
        "WATCHERS.md",
        "DASHBOARDS.md",
        "ALERTING.md",
        "ARCHITECTURE.md",
        "METRICS.md",
        "RUNBOOK.md",
    ] {
        assert!(
            readme.contains(&format!("](docs/{doc})")),
            "the README links docs/{doc}"
        );
    }
}

/// The README's test command is the one `.ci/run` runs.
#[test]
fn the_readme_gives_the_test_command_ci_runs() {
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    let command = ci
        .lines()
        .skip_while(|l| !l.starts_with("step \"tests"))
        .nth(1)
        .expect("the line after the tests step")
        .trim();
    assert!(command.starts_with("cargo nextest run"), "{command}");
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    assert!(
        readme.lines().any(|l| l.trim() == command),
        "README.md does not give {command:?}, the test command .ci/run runs"
    );
}

#[test]
fn every_output_block_is_a_sample_named_by_its_test_or_said_unchecked() {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let known: BTreeSet<&str> = CHECKED_BY_CTL
        .iter()
        .chain(CHECKED_BY_DAEMON)
        .chain(NOT_CHECKED)
        .copied()
        .collect();
    for block in doc_samples::blocks() {
        let at = format!("{}:{}", relative(&block.file).display(), block.line);
        let Some(name) = block.name() else {
            problems.push(format!(
                "{at}: an output block without a `<!-- sample: NAME -->` marker"
            ));
            continue;
        };
        if !seen.insert(name.to_owned()) {
            problems.push(format!("{at}: a second sample named {name}"));
        }
        if !known.contains(name) {
            problems.push(format!(
                "{at}: {name} is produced by no test and not listed as not checked"
            ));
        }
        let unchecked = NOT_CHECKED.contains(&name);
        match block.not_checked() {
            Some(why) if !unchecked => problems.push(format!(
                "{at}: {name} says not checked ({why}) but a test produces it"
            )),
            Some("") => problems.push(format!("{at}: {name}: not checked, but not why")),
            None if unchecked => problems.push(format!(
                "{at}: {name} is not checked: its marker must say why (`; not checked: …`)"
            )),
            _ => {}
        }
    }
    for name in &known {
        if !seen.contains(*name) {
            problems.push(format!("no block is marked `sample: {name}`"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(
        anchor("Install on Linux (systemd)"),
        "install-on-linux-systemd"
    );
    assert_eq!(anchor("hostfile, plan, bundle"), "hostfile-plan-bundle");
    assert_eq!(
        anchor("Hostile clients (issue 14)"),
        "hostile-clients-issue-14"
    );
    assert_eq!(
        anchor("Mac quick start (10 minutes)"),
        "mac-quick-start-10-minutes"
    );
    let text = "# A\n\n```sh\n# not a heading\n```\n## B `c`\n## A\n";
    assert_eq!(
        anchors(text),
        ["a", "a-1", "b-c"].into_iter().map(str::to_owned).collect()
    );
}

#[test]
fn bad_links_are_named_and_good_ones_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir(root.join("docs")).expect("docs");
    std::fs::write(root.join("docs/A.md"), "# A\n\n## Part two\n").expect("write");
    std::fs::write(root.join("x.txt"), "").expect("write");
    let text = "\
[ok](A.md) [ok](A.md#part-two) [ok](#a) [ok](../x.txt) [ok](https://example.com/#x)
[missing](B.md) [no heading](A.md#part-three) [outside](../../etc/passwd)
[absolute](/etc/passwd) [scheme](file:///etc/passwd) [anchor into text](../x.txt#a)
`[in code](nowhere.md)`
```
[fenced](nowhere.md)
```
[unicode ✓ and an unclosed paren](
";
    let problems = link_problems(root, Path::new("docs/A.md"), text);
    let named: Vec<&str> = problems
        .iter()
        .map(|p| {
            p.split(": (")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .unwrap_or(p)
        })
        .collect();
    assert_eq!(
        named,
        [
            "B.md",
            "A.md#part-three",
            "../../etc/passwd",
            "/etc/passwd",
            "file:///etc/passwd",
            "../x.txt#a",
        ],
        "{problems:#?}"
    );
}
