//! Caps on what one message may carry where the domain itself sets no
//! bound. A receiver refuses a message over a cap, naming the field
//! (`alarms[0].evidence: 40 lines, at most 32`); a sender trims its own
//! messages to the caps when it encodes them ([`crate::convert`]), so an
//! honest node never sends one that is refused. The proto files repeat
//! them beside the fields.

/// Link observations in one report: a node reports on its own cables, one
/// per peer at most in a full mesh; 256 covers a 257-node mesh.
pub const MAX_LINKS_PER_REPORT: usize = 256;
/// Active local alarms in one report.
pub const MAX_ALARMS_PER_REPORT: usize = 64;
/// Peers one report says the sender hears (members, so a mesh size).
pub const MAX_HEARS_PER_REPORT: usize = 256;
/// Evidence lines of one alarm.
pub const MAX_EVIDENCE_LINES: usize = 32;
/// Bytes of one evidence line.
pub const MAX_EVIDENCE_LINE_BYTES: usize = 512;
/// Bytes of an alarm's subject ("bridge0", "node-a/en2").
pub const MAX_SUBJECT_BYTES: usize = 256;
/// Bytes of an alarm's one-line summary.
pub const MAX_SUMMARY_BYTES: usize = 512;
/// Bytes of an alarm's fix.
pub const MAX_FIX_BYTES: usize = 1024;

/// Incidents in one `GetHistory` reply.
pub const MAX_INCIDENTS_PER_REPLY: usize = 1000;
/// The encoded size a `GetHistory` reply is trimmed to (oldest incidents
/// left out), under gRPC's default 4 MiB message limit.
pub const MAX_HISTORY_REPLY_BYTES: usize = 3 << 20;
/// Nodes one history entry names, and open problems of one incident.
pub const MAX_HISTORY_NAMES: usize = 256;
/// Per-node answers of a mesh-wide history.
pub const MAX_HISTORY_ANSWERS: usize = 256;
/// Bytes of a history request's link ("a-b").
pub const MAX_HISTORY_LINK_BYTES: usize = 2 * meshd_domain::NODE_ID_MAX_LEN + 3;

/// `text` cut to at most `max` bytes on a character boundary, ending in
/// "…" when cut.
pub fn clip(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    const ELLIPSIS: &str = "…";
    let mut end = max.saturating_sub(ELLIPSIS.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut clipped = text;
    clipped.truncate(end);
    clipped.push_str(ELLIPSIS);
    clipped
}

/// Evidence within [`MAX_EVIDENCE_LINES`] lines of [`MAX_EVIDENCE_LINE_BYTES`]:
/// the first lines, and a last one saying how many more there were.
pub fn clip_evidence(mut lines: Vec<String>) -> Vec<String> {
    if lines.len() > MAX_EVIDENCE_LINES {
        let more = lines.len() - (MAX_EVIDENCE_LINES - 1);
        lines.truncate(MAX_EVIDENCE_LINES - 1);
        lines.push(format!("… and {more} more"));
    }
    lines
        .into_iter()
        .map(|line| clip(line, MAX_EVIDENCE_LINE_BYTES))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_keeps_whole_characters_within_the_cap() {
        assert_eq!(clip("short".to_owned(), 10), "short");
        let clipped = clip("µ".repeat(10), 7);
        assert!(clipped.len() <= 7, "{clipped}");
        assert_eq!(clipped, "µµ…");
        assert_eq!(clip("abcdef".to_owned(), 4), "a…");
    }

    #[test]
    fn long_evidence_keeps_its_first_lines_and_counts_the_rest() {
        let lines: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        let clipped = clip_evidence(lines);
        assert_eq!(clipped.len(), MAX_EVIDENCE_LINES);
        assert_eq!(clipped[0], "line 0");
        assert_eq!(clipped[MAX_EVIDENCE_LINES - 1], "… and 69 more");
        let long = clip_evidence(vec!["x".repeat(10_000)]);
        assert!(long[0].len() <= MAX_EVIDENCE_LINE_BYTES);
    }
}
