//! Kernel panics kept across a reboot by pstore (`/sys/fs/pstore`): the
//! kernel writes the end of its log there when it panics or oopses
//! (`dmesg-ramoops-0`, `dmesg-efi-…`), and the next boot finds the records.
//! Each record starts with a header naming the dump and its part:
//!
//! ```text
//! Panic#1 Part1
//! <0>[ 7.1] Kernel panic - not syncing: Fatal exception
//! ```
//!
//! Part1 holds the newest lines, with the panic message. Only the first
//! part of each record is read. systemd-pstore moves the records to
//! `/var/lib/systemd/pstore` at boot where it is enabled; meshd does not
//! read that archive, so there a panic is seen only until it runs.

use meshd_domain::facts::{PanicFacts, PanicReport};

use crate::source::Source;

pub const PSTORE: &str = "/sys/fs/pstore";
/// How much of a record is read: the header and the panic message are at
/// its start.
pub const RECORD_HEAD_BYTES: usize = 16 * 1024;
/// Records looked at, newest names first: a crash writes a few parts.
const MAX_RECORDS: usize = 16;
const MAX_LINE_CHARS: usize = 512;

/// What one record's first part says: its header ("Panic#1 Part1") and the
/// panic line, if there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PstoreRecord {
    pub header: String,
    /// "Kernel panic - not syncing: …", without the log prefix.
    pub panic_line: Option<String>,
}

/// `None` unless `head` starts with a pstore dump header.
pub fn parse_record(head: &str) -> Option<PstoreRecord> {
    let mut lines = head.lines();
    let header = lines.next()?.trim();
    let (reason, part) = header.split_once(' ')?;
    let dump = reason.split_once('#').is_some_and(|(kind, n)| {
        !kind.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    });
    if !dump || !part.starts_with("Part") {
        return None;
    }
    let panic_line = lines
        .map(strip_log_prefix)
        .find(|line| line.starts_with("Kernel panic"))
        .map(|line| cut(line, MAX_LINE_CHARS));
    Some(PstoreRecord {
        header: header.to_owned(),
        panic_line,
    })
}

/// "<0>[   12.345678][    C2] Kernel panic …" → "Kernel panic …": the
/// level, the time and the caller id some kernels add.
fn strip_log_prefix(line: &str) -> &str {
    let mut line = line.trim();
    if let Some(rest) = line.strip_prefix('<').and_then(|r| r.split_once('>')) {
        line = rest.1.trim_start();
    }
    while let Some(rest) = line.strip_prefix('[').and_then(|r| r.split_once(']')) {
        line = rest.1.trim_start();
    }
    line
}

fn cut(line: &str, max_chars: usize) -> String {
    match line.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

/// The newest panic pstore keeps: among the dmesg records (newest names
/// first), the first with a panic line, else the first Part1, else the
/// first record. `None` when pstore cannot be listed (not mounted, no
/// access), with the reason in `blind_spots`.
pub fn read_panics(source: &dyn Source, blind_spots: &mut Vec<String>) -> Option<PanicFacts> {
    let names = match source.list_dir(PSTORE) {
        Ok(names) => names,
        Err(err) => {
            blind_spots.push(format!(
                "kernel panics unknown: cannot list {PSTORE} (pstore not mounted, or no access): \
                 {err}"
            ));
            return None;
        }
    };
    let mut records: Vec<(String, PstoreRecord)> = Vec::new();
    for name in names
        .iter()
        .rev()
        .filter(|n| n.starts_with("dmesg-"))
        .take(MAX_RECORDS)
    {
        let path = format!("{PSTORE}/{name}");
        match source.read_file_head(&path, RECORD_HEAD_BYTES) {
            Ok(head) => match parse_record(&head) {
                Some(record) => records.push((name.clone(), record)),
                None => blind_spots.push(format!("{path}: no pstore dump header")),
            },
            Err(err) => blind_spots.push(format!("cannot read {path}: {err}")),
        }
    }
    let chosen = records
        .iter()
        .find(|(_, r)| r.panic_line.is_some())
        .or_else(|| records.iter().find(|(_, r)| r.header.ends_with("Part1")))
        .or_else(|| records.first());
    Some(PanicFacts {
        latest: chosen.map(|(name, record)| PanicReport {
            file: name.clone(),
            at_unix: None,
            first_line: record
                .panic_line
                .clone()
                .unwrap_or_else(|| record.header.clone()),
            boot_id: None,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_panic_lines() {
        let record = parse_record(
            "Panic#1 Part1\n<6>[ 7.0] something\n<0>[    7.1] Kernel panic - not syncing: Fatal exception\n",
        )
        .expect("record");
        assert_eq!(record.header, "Panic#1 Part1");
        assert_eq!(
            record.panic_line.as_deref(),
            Some("Kernel panic - not syncing: Fatal exception")
        );
        let oops = parse_record("Oops#1 Part1\n<4>[ 1.0] RIP: 0010:x\n").expect("oops");
        assert_eq!(oops.panic_line, None);
        for bad in ["", "hello world", "Panic# Part1", "Panic#1 Section1"] {
            assert_eq!(parse_record(bad), None, "{bad}");
        }
        assert_eq!(strip_log_prefix("<4>[  105.480943][    C2] RSP"), "RSP");
    }
}
