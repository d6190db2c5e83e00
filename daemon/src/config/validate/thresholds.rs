//! The `[thresholds]` section: loss ratios, RTT limits and flap counts that
//! turn measurements into link and node states.

use super::super::Config;
use super::super::error::Problem;
use super::{
    CLOCK_SKEW_RANGE, DOWN_AFTER_RANGE, FLAP_CHANGES_RANGE, FLAP_WINDOW_RANGE,
    RTT_MIN_INCREASE_RANGE, RTT_P99_FACTOR_RANGE, check_duration, check_ratio, fmt_duration,
};

pub(super) fn check_thresholds(c: &Config, p: &mut Vec<Problem>) {
    let t = &c.thresholds;
    check_duration(p, "thresholds.down_after", t.down_after, DOWN_AFTER_RANGE);
    let min_down = c.probe.interval.saturating_mul(2);
    if t.down_after < min_down {
        p.push(
            Problem::new(
                "thresholds.down_after",
                format!(
                    "{} is shorter than 2 × probe.interval ({}); one late reply would cut the link",
                    fmt_duration(t.down_after),
                    fmt_duration(min_down)
                ),
            )
            .see("probe.interval"),
        );
    }
    if c.probe.timeout > t.down_after {
        p.push(
            Problem::new(
                "probe.timeout",
                format!(
                    "{} is longer than thresholds.down_after ({}); a link would be called down \
                     before any of its probes counted as lost",
                    fmt_duration(c.probe.timeout),
                    fmt_duration(t.down_after)
                ),
            )
            .see("thresholds.down_after"),
        );
    }
    check_duration(p, "thresholds.clock_skew", t.clock_skew, CLOCK_SKEW_RANGE);
    check_duration(
        p,
        "thresholds.rtt_min_increase",
        t.rtt_min_increase,
        RTT_MIN_INCREASE_RANGE,
    );
    let degraded_ok = check_ratio(p, "thresholds.loss_degraded", t.loss_degraded);
    let down_ok = check_ratio(p, "thresholds.loss_down", t.loss_down);
    if degraded_ok && down_ok && t.loss_degraded >= t.loss_down {
        p.push(Problem::new(
            "thresholds.loss_degraded",
            format!(
                "{} is not below thresholds.loss_down ({}); a link must be degraded before it is down",
                t.loss_degraded, t.loss_down
            ),
        ));
    }
    let (lo, hi) = RTT_P99_FACTOR_RANGE;
    if !(t.rtt_p99_factor >= lo && t.rtt_p99_factor <= hi) {
        p.push(Problem::new(
            "thresholds.rtt_p99_factor",
            format!(
                "{} is out of range; use {lo:.1} to {hi:.1} (a multiple of the link's baseline p99)",
                t.rtt_p99_factor
            ),
        ));
    }
    check_duration(
        p,
        "thresholds.flap_window",
        t.flap_window,
        FLAP_WINDOW_RANGE,
    );
    let (lo, hi) = FLAP_CHANGES_RANGE;
    if !(lo..=hi).contains(&t.flap_changes) {
        p.push(Problem::new(
            "thresholds.flap_changes",
            format!(
                "{} is out of range; use {lo} to {hi} state changes",
                t.flap_changes
            ),
        ));
    }
    check_ratio(p, "thresholds.cpu_saturated", t.cpu_saturated);
}
