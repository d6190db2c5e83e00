//! Text for the page: HTML escaping, and figures and times written the way
//! a person reads them.

use std::fmt;
use std::fmt::Write as _;
use std::time::SystemTime;

/// Writes `text` with every character that means something in HTML (or
/// in an attribute value) replaced by its entity. Everything the status
/// carries goes through this: evidence, summaries and fixes come from
/// peers and are not trusted.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(['&', '<', '>', '"', '\'', '\r']) {
            f.write_str(&rest[..at])?;
            f.write_str(match rest.as_bytes()[at] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                b'\'' => "&#39;",
                // A bare CR would end a server-sent event's data line.
                _ => "&#13;",
            })?;
            rest = &rest[at + 1..];
        }
        f.write_str(rest)
    }
}

pub fn esc(text: &str) -> Escaped<'_> {
    Escaped(text)
}

/// How long ago `then` was, seen at `now`, in meshd's one duration format:
/// "300ms ago", "4m12s ago". A time ahead of `now` (another clock) reads
/// "just now".
pub fn age(then: SystemTime, now: SystemTime) -> String {
    match now.duration_since(then) {
        Ok(ago) => format!("{} ago", meshd_domain::human::duration(ago)),
        Err(_) => "just now".to_owned(),
    }
}

/// A wall-clock time, to the second, in UTC: "2026-11-29T12:00:03Z".
pub fn utc(t: SystemTime) -> String {
    meshd_domain::time::rfc3339_seconds(t)
        .unwrap_or_else(|| meshd_domain::time::OUT_OF_RANGE.to_owned())
}

/// A loss ratio (0–1) as a percentage: "0 %", "0.4 %", "12 %".
pub fn percent(ratio: f64) -> String {
    let p = ratio * 100.0;
    if p == 0.0 || p >= 10.0 {
        format!("{p:.0} %")
    } else {
        format!("{p:.1} %")
    }
}

/// A link speed: "80 Gb/s", "2.5 Gb/s", "100 Mb/s".
pub fn speed(bps: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let gbps = bps as f64 / 1e9;
    if gbps >= 1.0 {
        let text = format!("{gbps:.1}");
        format!("{} Gb/s", text.trim_end_matches(".0"))
    } else {
        format!("{} Mb/s", bps / 1_000_000)
    }
}

/// At most `max` characters of `text`, with "…" when cut: names drawn in
/// the picture must fit it (the full text stays in the tooltip and lists).
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let kept: String = text.chars().take(max.saturating_sub(1)).collect();
        format!("{kept}…")
    }
}

/// A fix or other advice as HTML: escaped, its `quoted` commands as code.
/// The model writes its fixes as prose with the commands in backticks.
pub fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (i, part) in text.split('`').enumerate() {
        // Odd parts sit between a pair of backticks; an unpaired last one
        // is code to the end, which costs the reader nothing.
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", esc(part));
        } else {
            let _ = write!(out, "{}", esc(part));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn escaping_leaves_no_markup() {
        assert_eq!(
            esc(r#"<script>alert("x's")</script> & co"#).to_string(),
            "&lt;script&gt;alert(&quot;x&#39;s&quot;)&lt;/script&gt; &amp; co"
        );
        assert_eq!(esc("a\r\nb").to_string(), "a&#13;\nb");
        assert_eq!(esc("plain µs").to_string(), "plain µs");
    }

    #[test]
    fn figures_read_naturally() {
        assert_eq!(percent(0.0), "0 %");
        assert_eq!(percent(0.004), "0.4 %");
        assert_eq!(percent(0.5), "50 %");
        assert_eq!(speed(80_000_000_000), "80 Gb/s");
        assert_eq!(speed(2_500_000_000), "2.5 Gb/s");
        assert_eq!(speed(100_000_000), "100 Mb/s");
    }

    #[test]
    fn ages_are_relative_and_tolerate_other_clocks() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(age(now - Duration::from_millis(300), now), "300ms ago");
        assert_eq!(age(now - Duration::from_secs(42), now), "42s ago");
        assert_eq!(age(now - Duration::from_secs(600), now), "10m00s ago");
        assert_eq!(age(now - Duration::from_secs(3 * 86_400), now), "3d00h ago");
        assert_eq!(age(now + Duration::from_secs(2), now), "just now");
        assert_eq!(utc(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            utc(SystemTime::UNIX_EPOCH - Duration::from_secs(1)),
            "out of range"
        );
    }

    #[test]
    fn commands_in_prose_are_code_and_nothing_else_is_markup() {
        assert_eq!(
            prose("bring d back (`systemctl status meshd`) <now>"),
            "bring d back (<code>systemctl status meshd</code>) &lt;now&gt;"
        );
        assert_eq!(prose("no command"), "no command");
        assert_eq!(prose("`<b>`"), "<code>&lt;b&gt;</code>");
    }

    #[test]
    fn long_names_are_clipped_by_characters() {
        assert_eq!(clip("studio-1", 16), "studio-1");
        assert_eq!(clip("abcdefghij", 5), "abcd…");
        assert_eq!(clip("µµµµµµ", 3), "µµ…");
    }
}
