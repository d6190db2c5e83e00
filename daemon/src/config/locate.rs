//! Maps between byte offsets in a config file and dotted key paths such as
//! `peers[1].address`, using toml_edit's spans.
//!
//! serde only reports a byte span, and validation only knows key paths; an
//! operator needs both a line and a key, so every message goes through here.

use std::ops::Range;

use toml_edit::{Document, Item, Table, Value};

/// One key or array element of the file, with where its key and its value
/// were written.
#[derive(Debug)]
struct Entry {
    path: String,
    key: Option<Range<usize>>,
    value: Option<Range<usize>>,
}

/// The key paths of one parsed file and their positions.
#[derive(Debug)]
pub(super) struct Locator<'a> {
    source: &'a str,
    entries: Vec<Entry>,
}

impl<'a> Locator<'a> {
    /// `source` is the text `doc` was parsed from.
    pub(super) fn new(source: &'a str, doc: &Document<&str>) -> Self {
        let mut entries = Vec::new();
        walk_table(&mut entries, "", doc.as_table());
        Locator { source, entries }
    }

    /// The line where `path` is written. A key that is absent (left at its
    /// default) is placed at its closest written ancestor, e.g. the `[report]`
    /// header, which is where the operator would add it.
    pub(super) fn line_of(&self, path: &str) -> Option<usize> {
        let mut path = path;
        loop {
            if let Some(line) = self.exact_line_of(path) {
                return Some(line);
            }
            path = parent(path)?;
        }
    }

    /// The line where `path` itself is written, without falling back: used
    /// for "first at line N", which would mislead if it named a section.
    pub(super) fn exact_line_of(&self, path: &str) -> Option<usize> {
        let entry = self.entries.iter().find(|e| e.path == path)?;
        let start = entry.key.as_ref().or(entry.value.as_ref())?.start;
        Some(line_of_offset(self.source, start))
    }

    pub(super) fn line_of_offset(&self, offset: usize) -> usize {
        line_of_offset(self.source, offset)
    }

    /// The innermost key path whose key or value covers `offset`.
    pub(super) fn path_at(&self, offset: usize) -> Option<&str> {
        self.entries
            .iter()
            .flat_map(|e| {
                [&e.key, &e.value]
                    .into_iter()
                    .flatten()
                    .map(move |s| (e, s))
            })
            .filter(|(_, span)| span.contains(&offset) || (span.is_empty() && span.start == offset))
            .min_by_key(|(e, span)| (span.len(), usize::MAX - e.path.len()))
            .map(|(e, _)| e.path.as_str())
    }
}

/// 1-based line of a byte offset. Offsets past the end (serde may point just
/// after the last byte) land on the last line rather than panicking.
pub(super) fn line_of_offset(source: &str, offset: usize) -> usize {
    let end = offset.min(source.len());
    source
        .as_bytes()
        .get(..end)
        .unwrap_or_default()
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

fn parent(path: &str) -> Option<&str> {
    if path.ends_with(']') {
        return path.rfind('[').and_then(|i| path.get(..i));
    }
    path.rfind('.').and_then(|i| path.get(..i))
}

fn join(prefix: &str, key: &str) -> String {
    // Keys that need quoting in TOML are quoted in the path too, so that
    // "a.b" (one key) and a.b (two keys) stay distinguishable in messages.
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    let key = if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    };
    if prefix.is_empty() {
        key
    } else {
        format!("{prefix}.{key}")
    }
}

fn walk_table(entries: &mut Vec<Entry>, prefix: &str, table: &Table) {
    for (key, item) in table.iter() {
        let path = join(prefix, key);
        let key_span = table.key(key).and_then(|k| k.span());
        entries.push(Entry {
            path: path.clone(),
            key: key_span,
            value: item.span(),
        });
        match item {
            Item::None => {}
            Item::Value(value) => walk_value(entries, &path, value),
            Item::Table(table) => walk_table(entries, &path, table),
            Item::ArrayOfTables(array) => {
                for (i, table) in array.iter().enumerate() {
                    let path = format!("{path}[{i}]");
                    entries.push(Entry {
                        path: path.clone(),
                        key: None,
                        value: table.span(),
                    });
                    walk_table(entries, &path, table);
                }
            }
        }
    }
}

fn walk_value(entries: &mut Vec<Entry>, path: &str, value: &Value) {
    match value {
        Value::Array(array) => {
            for (i, value) in array.iter().enumerate() {
                let path = format!("{path}[{i}]");
                entries.push(Entry {
                    path: path.clone(),
                    key: None,
                    value: value.span(),
                });
                walk_value(entries, &path, value);
            }
        }
        Value::InlineTable(table) => {
            for (key, value) in table.iter() {
                let path = join(path, key);
                entries.push(Entry {
                    path: path.clone(),
                    key: table.key(key).and_then(|k| k.span()),
                    value: value.span(),
                });
                walk_value(entries, &path, value);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"[node]
id = "a"

[[peers]]
id = "b"
address = "10.0.0.2:7420"

[[peers]]
id = "c"
address = "10.0.0.3:7420"

[alerting]
alertmanagers = [
  "http://x:9093",
  "http://y:9093",
]
"q.r" = { s = 1 }
"#;

    #[test]
    fn paths_map_to_lines_and_back() {
        let doc = Document::parse(SRC).unwrap();
        let loc = Locator::new(SRC, &doc);
        assert_eq!(loc.line_of("node.id"), Some(2));
        assert_eq!(loc.line_of("peers[0]"), Some(4));
        assert_eq!(loc.line_of("peers[1].address"), Some(10));
        assert_eq!(loc.line_of("alerting.alertmanagers[1]"), Some(15));
        // Absent keys fall back to their section.
        assert_eq!(loc.line_of("alerting.resend_interval"), Some(12));
        assert_eq!(loc.line_of("probe.interval"), None);

        let at = |needle: &str| loc.path_at(SRC.find(needle).unwrap());
        assert_eq!(at("\"10.0.0.3"), Some("peers[1].address"));
        assert_eq!(at("\"http://y"), Some("alerting.alertmanagers[1]"));
        assert_eq!(at("s = 1"), Some("alerting.\"q.r\".s"));
        assert_eq!(loc.path_at(SRC.len() + 10), None);
    }

    #[test]
    fn line_of_offset_is_total() {
        assert_eq!(line_of_offset("", 5), 1);
        assert_eq!(line_of_offset("a\nb\n", 2), 2);
        assert_eq!(line_of_offset("a\nb\n", 99), 3);
    }
}
