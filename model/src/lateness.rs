//! How late a node's own timers run (the Lifeguard rule, docs/ARCHITECTURE.md
//! "Verdicts"). A node whose timers run late answers its peers' probes late
//! and measures its own late: evidence gathered meanwhile is suspect. What
//! it explains depends on how the lateness came: one stall of 700 ms every
//! 1.5 s loses far fewer probes than every tick 700 ms late, though both
//! fire a timer 700 ms late. A node therefore says both the worst and how
//! long its timers were held up in all.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use meshd_domain::Lateness;

/// A timer this late means what was measured meanwhile is suspect: 20 ms,
/// a thirtieth of the default `down_after`.
pub const LATE: Duration = Duration::from_millis(20);

/// Lateness is remembered this long: the longest evidence a verdict rests
/// on that a late timer can distort is a loss or RTT window's recent part
/// and a silence of `down_after`.
pub const LATENESS_MEMORY: Duration = Duration::from_secs(2);

/// How late a timer fired lately: each firing 1 ms late or more, for
/// [`LATENESS_MEMORY`], and the time all of them held the timers up.
#[derive(Debug, Clone, Default)]
pub struct LatenessLog {
    recent: VecDeque<(Instant, Duration)>,
    held_up_total: Duration,
}

impl LatenessLog {
    /// The timer that should have fired at `at - late` fired at `at`.
    pub fn note(&mut self, late: Duration, at: Instant) {
        while self
            .recent
            .front()
            .is_some_and(|(noted, _)| at.saturating_duration_since(*noted) > LATENESS_MEMORY)
        {
            self.recent.pop_front();
        }
        self.held_up_total = self.held_up_total.saturating_add(late);
        if late >= Duration::from_millis(1) {
            self.recent.push_back((at, late));
        }
    }

    /// The worst lateness within [`LATENESS_MEMORY`] before `now`.
    pub fn worst(&self, now: Instant) -> Duration {
        self.recent
            .iter()
            .filter(|(at, _)| now.saturating_duration_since(*at) <= LATENESS_MEMORY)
            .map(|(_, late)| *late)
            .max()
            .unwrap_or_default()
    }

    /// How late the timers run as a look at `now` sees it, as of the last
    /// firing (`as_of`) and, when the next was due by `due_by` and has not
    /// fired, as late as it is overdue: a timer notes its lateness only
    /// once it fires, and meanwhile the peers' probes wait unanswered. The
    /// overdue time counts as held up already; when the timer fires, its
    /// lateness includes it, so the total never goes back.
    pub fn seen_at(&self, as_of: Instant, due_by: Option<Instant>, now: Instant) -> Lateness {
        let overdue = due_by.map_or(Duration::ZERO, |due| now.saturating_duration_since(due));
        Lateness {
            worst: self.worst(as_of).max(overdue),
            held_up_total: self.held_up_total.saturating_add(overdue),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Ticks every 100 ms from `t0` until `until_ms`, the `n`th `late(n)`
    /// late, a ticker that skips what a late tick missed; returns the log
    /// and the last tick.
    fn ticking(late: impl Fn(u64) -> u64, until_ms: u64) -> (LatenessLog, Instant) {
        let t0 = crate::fixtures::epoch();
        let mut log = LatenessLog::default();
        let mut at = t0;
        let mut tick = 0;
        while at < t0 + ms(until_ms) {
            let l = ms(late(tick));
            at += ms(100) + l;
            log.note(l, at);
            tick += 1;
        }
        (log, at)
    }

    #[test]
    fn every_tick_late_is_held_up_that_share_of_the_time() {
        let (log, last) = ticking(|_| 700, 8_000);
        let seen = log.seen_at(last, Some(last + ms(100)), last);
        assert_eq!(seen.worst, ms(700));
        // 10 ticks of 800 ms, 700 of each held up.
        assert_eq!(seen.held_up_total, ms(7_000));
    }

    #[test]
    fn one_stall_every_one_and_a_half_seconds_is_held_up_less_at_the_same_worst() {
        // A 700-ms stall, then 7 ticks on time: 1.5 s a round.
        let (log, last) = ticking(|tick| if tick % 8 == 0 { 700 } else { 0 }, 7_400);
        let seen = log.seen_at(last, Some(last + ms(100)), last);
        assert_eq!(seen.worst, ms(700));
        assert_eq!(seen.held_up_total, ms(5 * 700));
    }

    #[test]
    fn a_tick_overdue_now_is_held_up_until_now_and_the_total_never_goes_back() {
        let (mut log, last) = ticking(|_| 0, 3_000);
        let due = last + ms(100);
        let seen = log.seen_at(last, Some(due), last + ms(900));
        assert_eq!(
            seen,
            Lateness {
                worst: ms(800),
                held_up_total: ms(800),
            }
        );
        log.note(ms(850), due + ms(850));
        let fired = log.seen_at(due + ms(850), Some(due + ms(950)), due + ms(850));
        assert_eq!(fired.held_up_total, ms(850));
    }

    #[test]
    fn timers_on_time_are_held_up_for_nothing() {
        let (log, last) = ticking(|_| 0, 3_000);
        assert_eq!(
            log.seen_at(last, Some(last + ms(100)), last),
            Lateness::default()
        );
    }

    #[test]
    fn hostile_lateness_saturates() {
        let t0 = crate::fixtures::epoch();
        let mut log = LatenessLog::default();
        log.note(Duration::MAX, t0 + ms(10));
        log.note(Duration::MAX, t0 + ms(20));
        let seen = log.seen_at(t0 + ms(20), Some(t0), t0 + ms(30));
        assert_eq!(seen.held_up_total, Duration::MAX);
    }
}
