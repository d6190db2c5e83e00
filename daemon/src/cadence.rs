//! One grid for the daemon's periodic timers. Every periodic deadline
//! falls on a whole multiple of its period counted from one instant taken
//! when the first timer starts, so timers whose periods divide one another
//! (the lateness probe's 50 ms, the probe tick's 100 ms, the watchers' and
//! the heartbeat's seconds) come due in the same millisecond and the
//! runtime wakes once for all of them instead of once for each. Each
//! timer still fires at its own period; only the phases are shared.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::{Instant, Interval, MissedTickBehavior};

/// The finest period on the grid: the lateness probe's. Deadlines that
/// need no precise instant (the aggregator's next look) are rounded up to
/// it, so they share the wake-up that is coming anyway.
pub const GRID: Duration = Duration::from_millis(50);

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// The first instant at or after `at` that is a whole number of `period`s
/// from the grid's origin (before or after it). A grid point out of the
/// clock's range is `at` itself.
pub fn align(at: Instant, period: Duration) -> Instant {
    let origin = origin();
    let period_ns = period.as_nanos().max(1);
    let offset = |periods: u128| {
        periods
            .checked_mul(period_ns)
            .and_then(|ns| u64::try_from(ns).ok())
            .map(Duration::from_nanos)
    };
    let aligned = match at.checked_duration_since(origin) {
        Some(since) => {
            offset(since.as_nanos().div_ceil(period_ns)).and_then(|after| origin.checked_add(after))
        }
        None => offset((origin - at).as_nanos() / period_ns)
            .and_then(|before| origin.checked_sub(before)),
    };
    aligned.unwrap_or(at)
}

/// A timer ticking every `period` on the grid, from the first grid point
/// at or after now (never before: a tick's lateness is measured against a
/// deadline the timer set, not against a busy start). A tick missed
/// because the runtime fell behind is skipped, not fired late in a burst,
/// and the next one is on the grid again.
pub fn every(period: Duration) -> Interval {
    let period = period.max(Duration::from_millis(1));
    let mut tick = tokio::time::interval_at(align(Instant::now(), period), period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    tick
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_points_of_dividing_periods_coincide() {
        let now = Instant::now();
        let fine = align(now, GRID);
        assert!(fine >= now && fine - now < GRID, "{:?}", fine - now);
        let coarse = align(now, GRID * 2);
        assert!(coarse >= now && coarse - now < GRID * 2);
        // Every 100 ms point is a 50 ms point, and a second's is both.
        assert_eq!(align(coarse, GRID), coarse);
        let second = align(now, Duration::from_secs(1));
        assert_eq!(align(second, GRID * 2), second);
        assert_eq!(align(second, GRID), second);
        // A grid point is its own alignment; just past it, the next one.
        assert_eq!(align(fine, GRID), fine);
        assert_eq!(align(fine + Duration::from_nanos(1), GRID), fine + GRID);
    }

    #[test]
    fn odd_periods_and_instants_never_panic() {
        let now = Instant::now();
        assert!(align(now, Duration::ZERO) >= now);
        assert!(align(now, Duration::from_nanos(1)) >= now);
        assert!(align(now, Duration::MAX) >= now);
        // Before the origin the grid goes on.
        if let Some(before) = origin().checked_sub(GRID * 3 + Duration::from_millis(7)) {
            assert_eq!(align(before, GRID), origin() - GRID * 3);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn timers_of_dividing_periods_fire_at_the_same_instants() {
        let mut fine = every(GRID);
        let mut coarse = every(GRID * 2);
        let mut fine_ticks = Vec::new();
        let mut coarse_ticks = Vec::new();
        while coarse_ticks.len() < 3 {
            tokio::select! {
                at = fine.tick() => fine_ticks.push(at),
                at = coarse.tick() => coarse_ticks.push(at),
            }
        }
        // The fine timer fires at the coarse one's instant too (the select
        // may have taken the coarse one first).
        fine_ticks.push(fine.tick().await);
        for at in coarse_ticks {
            assert!(fine_ticks.contains(&at), "{at:?} not in {fine_ticks:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_tick_is_skipped_and_the_next_is_on_the_grid() {
        let mut tick = every(GRID);
        let first = tick.tick().await;
        tokio::time::advance(GRID * 3 + Duration::from_millis(7)).await;
        let late = tick.tick().await;
        let next = tick.tick().await;
        assert_eq!(align(next, GRID), next);
        assert!(next > late);
        assert_eq!(
            (next - first).as_nanos() % GRID.as_nanos(),
            0,
            "{:?}",
            next - first
        );
    }
}
