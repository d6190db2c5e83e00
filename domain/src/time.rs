//! Wall-clock times as meshd takes them from the wire and prints them:
//! from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z. Every
//! sane clock is inside; RFC 3339 (and the formatter) cannot write years
//! past 9999, and a time before 1970 is no clock meshd runs on.
//!
//! Formatting is total: a time outside the range (which the wire refuses,
//! so only a broken local clock could make one) prints as [`OUT_OF_RANGE`],
//! never a panic.

use std::time::{Duration, SystemTime};

/// 9999-12-31T23:59:59Z, in seconds since the Unix epoch.
pub const LATEST_SECONDS: i64 = 253_402_300_799;

/// What a time outside the range prints as.
pub const OUT_OF_RANGE: &str = "out of range";

/// The last instant meshd accepts.
pub fn latest() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::new(LATEST_SECONDS.unsigned_abs(), 999_999_999)
}

/// Whether `t` lies within 1970-01-01 .. 9999-12-31 (UTC).
pub fn in_range(t: SystemTime) -> bool {
    t >= SystemTime::UNIX_EPOCH && t <= latest()
}

/// "2027-01-15T08:00:00.123Z", or `None` outside the range.
pub fn rfc3339_millis(t: SystemTime) -> Option<String> {
    in_range(t).then(|| humantime::format_rfc3339_millis(t).to_string())
}

/// "2027-01-15T08:00:00Z", or `None` outside the range.
pub fn rfc3339_seconds(t: SystemTime) -> Option<String> {
    in_range(t).then(|| humantime::format_rfc3339_seconds(t).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_ends_are_printable_and_beyond_is_not() {
        assert_eq!(
            rfc3339_millis(SystemTime::UNIX_EPOCH).as_deref(),
            Some("1970-01-01T00:00:00.000Z")
        );
        assert_eq!(
            rfc3339_seconds(latest()).as_deref(),
            Some("9999-12-31T23:59:59Z")
        );
        assert_eq!(rfc3339_millis(latest() + Duration::from_nanos(1)), None);
        assert_eq!(
            rfc3339_seconds(SystemTime::UNIX_EPOCH - Duration::from_nanos(1)),
            None
        );
    }
}
