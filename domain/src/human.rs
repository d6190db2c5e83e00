//! Durations as people read them, in one format wherever meshd shows one:
//! the evidence of a verdict, `meshctl status` and the mesh page. Two
//! significant figures at most, the unit glued on, larger spans in two
//! units: "85µs", "1.2ms", "605ms", "5.1s", "42s", "4m12s", "3h05m", "2d04h".

use std::time::Duration;

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// `d` in meshd's one duration format (see the module).
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= DAY {
        format!("{}d{:02}h", secs / DAY, secs % DAY / HOUR)
    } else if secs >= HOUR {
        format!("{}h{:02}m", secs / HOUR, secs % HOUR / MINUTE)
    } else if secs >= MINUTE {
        format!("{}m{:02}s", secs / MINUTE, secs % MINUTE)
    } else if d >= Duration::from_secs(1) {
        scaled(d.as_secs_f64(), "s")
    } else if d >= Duration::from_millis(1) {
        scaled(d.as_secs_f64() * 1e3, "ms")
    } else {
        format!("{}µs", d.as_micros())
    }
}

/// One decimal below 10 of the unit, none above: "5.1s", "42s". A value
/// that rounds up to 10 is written without the decimal ("10s", not "10.0s").
fn scaled(value: f64, unit: &str) -> String {
    if value < 9.95 {
        format!("{value:.1}{unit}")
    } else {
        format!("{value:.0}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_has_its_shape() {
        let cases = [
            (Duration::ZERO, "0µs"),
            (Duration::from_micros(85), "85µs"),
            (Duration::from_micros(999), "999µs"),
            (Duration::from_micros(1_234), "1.2ms"),
            (Duration::from_micros(9_960), "10ms"),
            (Duration::from_millis(605), "605ms"),
            (Duration::from_millis(5_100), "5.1s"),
            (Duration::from_millis(4_200), "4.2s"),
            (Duration::from_secs(42), "42s"),
            (Duration::from_millis(59_999), "60s"),
            (Duration::from_secs(60), "1m00s"),
            (Duration::from_secs(252), "4m12s"),
            (Duration::from_secs(3 * 3600 + 5 * 60 + 59), "3h05m"),
            (Duration::from_secs(2 * 86_400 + 4 * 3600), "2d04h"),
        ];
        for (d, want) in cases {
            assert_eq!(duration(d), want, "{d:?}");
        }
    }
}
