//! One grid for the daemon's timers, laid on the runtime's own timer
//! wheel so a periodic timer costs one wake-up per tick and no more.
//!
//! Tokio keeps its timers in a hierarchical wheel counted in milliseconds
//! from the instant the runtime was built. A timer due within the current
//! 64 ms block sits in the finest level; one due in a later block sits in
//! a coarser level, and the runtime wakes at the start of that block just
//! to move it down, then again at the deadline itself. With periodic
//! timers always pending, that was a wake-up at nearly every block start
//! (15 a second) on top of the timers' own, a third of a node's wake-ups.
//!
//! So the grid's step is that block, [`GRID`], and its origin the
//! runtime's start (see [`build_runtime`]): every tick at or above one
//! step falls on a block start, where the move down and the tick are one
//! wake-up. Ticks of every timer share those instants, so the probe tick,
//! the watchers and the heartbeat wake the node together. A
//! period that is not a whole number of steps (the probe's 100 ms) keeps
//! its rate on average: each tick is its exact instant rounded up to the
//! next step (gaps of 64 and 128 ms alternate, ten ticks a second).
//! Periods shorter than a step tick at their exact instants.
//!
//! How late the grid's ticks run is the node's measure of its own load:
//! the probe task notes its tick's lateness for the load watcher (see
//! `watch::load::TimerLateness`), rather than a timer of its own costing
//! as many wake-ups again.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// One block of the runtime's finest timer level (64 ticks of 1 ms).
pub const GRID: Duration = Duration::from_millis(64);

static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// What building a runtime may still do after its timer wheel started
/// counting (set up the scheduler): well under this.
const AFTER_WHEEL_START: Duration = Duration::from_micros(500);

/// Builds the runtime with `build` and fixes the grid's origin at the
/// instant its timer wheel started counting, which tokio does not tell: the
/// wheel rounds a deadline up to its next millisecond, so an origin up to a
/// millisecond before that start puts every grid point on a block start,
/// one later or earlier than that puts none. The wheel starts late in the
/// build (after the I/O driver), so the origin is the build's start when
/// the build was short, and [`AFTER_WHEEL_START`] before its end when it
/// was not (a host too busy to build a runtime in a millisecond).
/// Without it (tests, embedders) the origin is the first timer's start:
/// the ticks keep their periods, only their wake-ups are not shared.
pub fn build_runtime<T>(build: impl FnOnce() -> T) -> T {
    let before = Instant::now();
    let built = build();
    let after = Instant::now();
    let start = after
        .checked_sub(AFTER_WHEEL_START)
        .map_or(before, |late| late.max(before));
    let _ = ORIGIN.set(start);
    built
}

fn origin() -> Instant {
    *ORIGIN.get_or_init(Instant::now)
}

/// The first instant at or after `at` that is a whole number of `period`s
/// from the grid's origin (before or after it), rounded up to a whole
/// step when `period` is at least one. A point out of the clock's range
/// is `at` itself.
pub fn align(at: Instant, period: Duration) -> Instant {
    let exact = multiple_at_or_after(at, period);
    if period >= GRID {
        multiple_at_or_after(exact, GRID)
    } else {
        exact
    }
}

/// The longest gap between two ticks of a timer of `period`: a period
/// rounded up to whole steps.
pub fn longest_gap(period: Duration) -> Duration {
    if period < GRID {
        return period;
    }
    let steps = period.as_nanos().div_ceil(GRID.as_nanos());
    u32::try_from(steps)
        .ok()
        .and_then(|steps| GRID.checked_mul(steps))
        .unwrap_or(period)
}

fn multiple_at_or_after(at: Instant, period: Duration) -> Instant {
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
/// deadline the timer set, not against a busy start).
pub fn every(period: Duration) -> Ticker {
    let period = period.max(Duration::from_millis(1));
    Ticker {
        period,
        sleep: Box::pin(tokio::time::sleep_until(align(Instant::now(), period))),
    }
}

/// See [`every`]. A tick missed because the runtime fell behind is
/// skipped, not fired late in a burst, and the next one is on the grid
/// again.
#[derive(Debug)]
pub struct Ticker {
    period: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Ticker {
    /// Waits for the next tick and returns the instant it was due.
    /// Cancel-safe: a tick not taken is still there for the next call.
    pub async fn tick(&mut self) -> Instant {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        ready!(self.sleep.as_mut().poll(cx));
        let due = self.sleep.deadline();
        let now = Instant::now().max(due);
        let after = now.checked_add(Duration::from_nanos(1)).unwrap_or(now);
        let next = align(after, self.period);
        self.sleep.as_mut().reset(next);
        Poll::Ready(due)
    }
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
        // Every 128 ms point is a 64 ms point; a second's is one too.
        assert_eq!(align(coarse, GRID), coarse);
        let second = align(now, Duration::from_secs(1));
        assert_eq!(align(second, GRID), second);
        // A grid point is its own alignment; just past it, the next one.
        assert_eq!(align(fine, GRID), fine);
        assert_eq!(align(fine + Duration::from_nanos(1), GRID), fine + GRID);
    }

    #[test]
    fn a_period_off_the_steps_lands_on_the_next_step() {
        let period = Duration::from_millis(100);
        let start = align(Instant::now(), period);
        assert_eq!(align(start, GRID), start, "on a step");
        let mut at = start;
        let mut gaps = Vec::new();
        for _ in 0..16 {
            let next = align(at + Duration::from_nanos(1), period);
            gaps.push((next - at).as_millis());
            at = next;
        }
        // 16 ticks of 100 ms are 1.6 s: 25 steps, gaps of one or two.
        assert_eq!(at - start, Duration::from_millis(1600), "{gaps:?}");
        assert!(gaps.iter().all(|g| *g == 64 || *g == 128), "{gaps:?}");
        assert_eq!(longest_gap(period), Duration::from_millis(128));
        assert_eq!(longest_gap(GRID), GRID);
        let fast = Duration::from_millis(10);
        assert_eq!(longest_gap(fast), fast);
        let fine = align(Instant::now(), fast);
        assert_eq!(align(fine + Duration::from_nanos(1), fast) - fine, fast);
    }

    #[test]
    fn odd_periods_and_instants_never_panic() {
        let now = Instant::now();
        assert!(align(now, Duration::ZERO) >= now);
        assert!(align(now, Duration::from_nanos(1)) >= now);
        assert!(align(now, Duration::MAX) >= now);
        assert_eq!(longest_gap(Duration::MAX), Duration::MAX);
        // Before the origin the grid goes on.
        if let Some(before) = origin().checked_sub(GRID * 3 + Duration::from_millis(7)) {
            assert_eq!(align(before, GRID), origin() - GRID * 3);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn timers_of_different_periods_fire_at_the_same_instants() {
        let mut fine = every(GRID);
        let mut coarse = every(Duration::from_millis(100));
        let mut fine_ticks = Vec::new();
        let mut coarse_ticks = Vec::new();
        while coarse_ticks.len() < 5 {
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
        assert_eq!(late, first + GRID, "the missed tick is reported due");
        let next = tick.tick().await;
        assert_eq!(next, first + GRID * 4, "the ones missed are skipped");
        assert!(Instant::now() >= next);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tick_not_taken_stays_for_the_next_call() {
        let mut tick = every(GRID);
        let first = tick.tick().await;
        let abandoned = tokio::time::timeout(GRID / 2, tick.tick()).await;
        assert!(abandoned.is_err(), "no tick within half a step");
        assert_eq!(tick.tick().await, first + GRID);
    }
}
