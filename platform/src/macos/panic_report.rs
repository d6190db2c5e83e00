//! Kernel panic reports in `/Library/Logs/DiagnosticReports`
//! (`panic-full-2026-03-11-114515.0002.panic`), written when the Mac boots
//! again after a panic. They run to megabytes, so only their first part is
//! read ([`PANIC_HEAD_BYTES`]), which holds all meshd needs:
//!
//! ```text
//! {"bug_type":"210","timestamp":"2021-07-19 06:34:05.00 +0300","os_version":"…","incident_id":"…"}
//! {
//!   "build" : "…",
//!   "date" : "2021-07-19 06:34:05.91 +0300",
//!   "panicString" : "panic(cpu 1 caller 0x…): Kernel data abort. …\n…Boot session UUID: …\n…",
//! ```
//!
//! A header line (JSON, bug type 210 for a panic), then the panic as JSON,
//! cut off anywhere by the bounded read. Reports from before macOS 11 are
//! plain text with a `panic(cpu …)` line; that line is found too.

use meshd_domain::facts::PanicReport;

use super::sysctl::parse_uuid;

/// Where macOS keeps the reports.
pub const DIAGNOSTIC_REPORTS: &str = "/Library/Logs/DiagnosticReports";
/// How much of a report is read: the header, and the panic string's first
/// lines, come within the first kilobytes.
pub const PANIC_HEAD_BYTES: usize = 64 * 1024;
/// A panic line is cut to this many characters.
const MAX_LINE_CHARS: usize = 512;

/// Whether a file in [`DIAGNOSTIC_REPORTS`] is a kernel panic report.
pub fn is_panic_report(name: &str) -> bool {
    name.ends_with(".panic")
}

/// The newest panic report among `names`: by the date and time in the name
/// (`panic-full-YYYY-MM-DD-HHMMSS…`, which sorts as text), then by name.
pub fn newest_panic_report<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    names
        .into_iter()
        .filter(|n| is_panic_report(n))
        .max_by_key(|n| (name_timestamp(n), *n))
}

/// "2026-03-11-114515" from a report's name, if it has one.
fn name_timestamp(name: &str) -> Option<&str> {
    let bytes = name.as_bytes();
    (0..bytes.len().saturating_sub(16)).find_map(|i| {
        let candidate = name.get(i..i + 17)?;
        let shape = candidate.bytes().enumerate().all(|(j, b)| match j {
            4 | 7 | 10 => b == b'-',
            _ => b.is_ascii_digit(),
        });
        shape.then_some(candidate)
    })
}

/// A report from the first part of its file; `Err` says why it is not a
/// readable kernel panic report.
pub fn parse_panic_report(file: &str, head: &str) -> Result<PanicReport, String> {
    let mut lines = head.splitn(2, '\n');
    let first = lines.next().unwrap_or_default().trim();
    let rest = lines.next().unwrap_or_default();
    let mut report = PanicReport {
        file: file.to_owned(),
        ..PanicReport::default()
    };
    let panic_text = match serde_json::from_str::<serde_json::Value>(first) {
        Ok(header) => {
            if let Some(kind) = header.get("bug_type").and_then(|v| v.as_str())
                && kind != "210"
            {
                return Err(format!("{file}: bug type {kind}, not a kernel panic (210)"));
            }
            report.at_unix = header
                .get("timestamp")
                .and_then(|v| v.as_str())
                .and_then(parse_report_time);
            json_string_value(rest, "panicString")
        }
        // Reports before macOS 11: plain text.
        Err(_) => Some(head.to_owned()),
    };
    let Some(panic_text) = panic_text else {
        return Ok(report);
    };
    report.first_line = panic_text
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("panic("))
        .or_else(|| panic_text.lines().map(str::trim).find(|l| !l.is_empty()))
        .map(|line| cut(line, MAX_LINE_CHARS))
        .unwrap_or_default();
    report.boot_id = panic_text.lines().find_map(|line| {
        let value = line.trim().strip_prefix("Boot session UUID:")?;
        parse_uuid(value)
    });
    Ok(report)
}

fn cut(line: &str, max_chars: usize) -> String {
    match line.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

/// The value of the JSON string `"key" : "…"` in `text`, decoded, up to its
/// closing quote or the end of `text` (a report cut off by the bounded
/// read); `None` when the key is not there.
fn json_string_value(text: &str, key: &str) -> Option<String> {
    let quoted = format!("\"{key}\"");
    let after = &text[text.find(&quoted)? + quoted.len()..];
    let after = after.trim_start().strip_prefix(':')?.trim_start();
    let mut chars = after.strip_prefix('"')?.chars();
    let mut value = String::new();
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => match chars.next() {
                Some('n') => value.push('\n'),
                Some('t') => value.push('\t'),
                Some('r') => value.push('\r'),
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    if let Some(c) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        value.push(c);
                    }
                }
                Some(other) => value.push(other),
                None => break,
            },
            c => value.push(c),
        }
    }
    Some(value)
}

/// "2021-07-19 06:34:05.00 +0300" → seconds since the Unix epoch.
pub fn parse_report_time(text: &str) -> Option<u64> {
    let mut parts = text.split_whitespace();
    let (date, time, zone) = (parts.next()?, parts.next()?, parts.next()?);
    let mut date = date.split('-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let time = time.split('.').next()?;
    let mut clock = time.split(':').map(|p| p.parse::<i64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    // Four-digit years only: far larger ones would overflow the day and
    // second arithmetic below.
    let valid = (0..=9999).contains(&year)
        && (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..=60).contains(&second);
    if !valid {
        return None;
    }
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits = zone.get(1..)?;
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let offset =
        sign * (digits[..2].parse::<i64>().ok()? * 3600 + digits[2..].parse::<i64>().ok()? * 60);
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(local - offset).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_times_are_utc_seconds() {
        assert_eq!(parse_report_time("1970-01-01 00:00:00.00 +0000"), Some(0));
        // 2021-07-19 03:34:05 UTC.
        assert_eq!(
            parse_report_time("2021-07-19 06:34:05.00 +0300"),
            Some(1_626_665_645)
        );
        assert_eq!(
            parse_report_time("2026-03-11 11:45:15 -0700"),
            Some(1_773_254_715)
        );
        for bad in [
            "",
            "2021-13-01 00:00:00 +0000",
            "2021-07-19 06:34:05",
            "x y z",
        ] {
            assert_eq!(parse_report_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_huge_year_is_no_time_rather_than_an_overflow() {
        for hostile in [
            "9223372036854775807-12-31 23:59:59 +0000",
            "+9223372036854775807-01-01 00:00:00 -2359",
            "106751991167301-01-01 00:00:00 +0000",
            "10000-01-01 00:00:00 +0000",
        ] {
            assert_eq!(parse_report_time(hostile), None, "{hostile}");
        }
        assert_eq!(
            parse_report_time("9999-12-31 23:59:59 +0000"),
            Some(253_402_300_799)
        );
        let head = "{\"bug_type\":\"210\",\"timestamp\":\"9223372036854775807-01-01 00:00:00.00 +0000\"}\n";
        let report = parse_panic_report("h.panic", head).expect("a panic report");
        assert_eq!(report.at_unix, None);
    }

    #[test]
    fn the_newest_report_by_the_time_in_its_name() {
        let names = [
            "panic-full-2026-03-11-114515.0002.panic",
            "panic-full-2026-09-23-171933.0002.panic",
            "WindowServer-2026-09-24-091158.ips",
            "Kernel_old.panic",
        ];
        assert_eq!(
            newest_panic_report(names),
            Some("panic-full-2026-09-23-171933.0002.panic")
        );
        assert_eq!(newest_panic_report(["a.ips"]), None);
        assert_eq!(
            name_timestamp("x-2026-09-23-171933"),
            Some("2026-09-23-171933")
        );
        assert_eq!(name_timestamp("short"), None);
    }

    #[test]
    fn a_cut_off_report_still_gives_its_first_line_and_boot() {
        let head = "{\"bug_type\":\"210\",\"timestamp\":\"2026-04-20 10:00:00.00 +0800\"}\n\
                    {\n  \"panicString\" : \"panic(cpu 7 caller 0xfffffe004418be28): \\\"completeMemory() \
                    prepare count underflow\\\" @IOGPUMemory.cpp:550\\nDebugger message: panic\\n\
                    Boot session UUID: 7edf3ea8-1f47-4e07-a28d-c02488b3e469\\nPaniclog ver";
        let report = parse_panic_report("p.panic", head).expect("panic");
        assert_eq!(
            report.first_line,
            "panic(cpu 7 caller 0xfffffe004418be28): \"completeMemory() prepare count underflow\" \
             @IOGPUMemory.cpp:550"
        );
        assert_eq!(
            report.boot_id.as_deref(),
            Some("7EDF3EA8-1F47-4E07-A28D-C02488B3E469")
        );
        assert_eq!(report.at_unix, Some(1_776_650_400));
    }

    #[test]
    fn other_reports_and_missing_strings() {
        assert!(
            parse_panic_report("x.panic", "{\"bug_type\":\"309\"}\n{}")
                .expect_err("a crash")
                .contains("bug type 309")
        );
        let no_string =
            parse_panic_report("x.panic", "{\"bug_type\":\"210\"}\n{\"build\":").expect("ok");
        assert_eq!(
            (no_string.first_line.as_str(), no_string.boot_id),
            ("", None)
        );
        let old = parse_panic_report(
            "Kernel_2016.panic",
            "Anonymous UUID: 46DA\n\n*** Panic Report ***\npanic(cpu 2 caller 0x1): \"Possible memory corruption\"\n",
        )
        .expect("old text report");
        assert_eq!(
            old.first_line,
            "panic(cpu 2 caller 0x1): \"Possible memory corruption\""
        );
        let long = format!("{{}}\n{{\"panicString\" : \"{}\"", "y".repeat(600));
        assert_eq!(
            parse_panic_report("l.panic", &long)
                .expect("ok")
                .first_line
                .chars()
                .count(),
            MAX_LINE_CHARS + 1
        );
    }
}
