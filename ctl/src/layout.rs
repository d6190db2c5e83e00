//! Text for an 80-column terminal: words wrapped at spaces (never inside a
//! word), tables whose last column wraps under itself, and indented blocks
//! for evidence and fixes.

use std::fmt::Write as _;

/// The width every human-readable output of meshctl fits in.
pub const WIDTH: usize = 80;

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// `text` in lines of at most `width` characters, broken at spaces; its
/// own line breaks are kept. A word longer than `width` (a path, a URL)
/// gets a line of its own rather than being cut. Never returns an empty
/// list.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    for paragraph in text.split('\n') {
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            if !line.is_empty() && chars(&line) + 1 + chars(word) > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
    }
    lines
}

/// `first` then `text` wrapped to [`WIDTH`], continuation lines indented to
/// where the text started: a hanging indent.
pub fn hanging(out: &mut String, first: &str, text: &str) {
    let indent = chars(first);
    let mut lines = wrap(text, WIDTH.saturating_sub(indent).max(20)).into_iter();
    let _ = writeln!(out, "{first}{}", lines.next().unwrap_or_default());
    for line in lines {
        let _ = writeln!(out, "{:indent$}{line}", "");
    }
}

/// Left-aligned columns two spaces apart, indented by two. The last column
/// is free text: it wraps within what is left of [`WIDTH`], continuation
/// lines under its start; when less than a third of the width is left, it
/// goes on the lines below instead, indented by four.
pub fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    if columns == 0 {
        return;
    }
    let widths: Vec<usize> = (0..columns - 1)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| chars(s))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let start = 2 + widths.iter().map(|w| w + 2).sum::<usize>();
    let room = WIDTH.saturating_sub(start);
    for row in rows {
        let mut line = String::from("  ");
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        let last = if row.len() == columns {
            row.last().map_or("", String::as_str)
        } else {
            ""
        };
        if last.is_empty() {
            let _ = writeln!(out, "{}", line.trim_end());
        } else if room >= WIDTH / 3 {
            let mut pieces = wrap(last, room).into_iter();
            let _ = writeln!(out, "{line}{}", pieces.next().unwrap_or_default());
            for piece in pieces {
                let _ = writeln!(out, "{:start$}{piece}", "");
            }
        } else {
            let _ = writeln!(out, "{}", line.trim_end());
            hanging(out, "    ", last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_wrap_at_spaces_and_long_words_stand_alone() {
        assert_eq!(
            wrap("reseat or replace the cable", 12),
            ["reseat or", "replace the", "cable"]
        );
        assert_eq!(
            wrap("see /a/very/long/path/name now", 10),
            ["see", "/a/very/long/path/name", "now"]
        );
        assert_eq!(wrap("", 10), [""]);
        assert_eq!(wrap("one\ntwo three", 20), ["one", "two three"]);
    }

    #[test]
    fn a_table_wraps_its_last_column_under_itself() {
        let long = "word ".repeat(30);
        let rows = vec![
            vec!["NODE".into(), "STATE".into(), "EVIDENCE".into()],
            vec!["studio-1".into(), "up".into(), long.trim().to_owned()],
        ];
        let mut out = String::new();
        table(&mut out, &rows);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "  NODE      STATE  EVIDENCE");
        assert!(lines[1].starts_with("  studio-1  up     word word"));
        for line in &lines[2..] {
            assert!(line.starts_with(&" ".repeat(19)), "{line:?}");
            assert!(line.ends_with("word"), "never cut inside a word: {line:?}");
        }
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH), "{out}");
    }

    #[test]
    fn a_hanging_block_indents_its_continuations() {
        let mut out = String::new();
        hanging(&mut out, "    fix: ", &"x ".repeat(50));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("    fix: x x"));
        assert!(lines[1].starts_with("         x"));
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH));
    }
}
