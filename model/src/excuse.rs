//! What an end's lateness excuses of its link's evidence (Lifeguard). A
//! node whose timers run late answers its peers' probes late, so they see
//! loss, silence and slow replies that are its CPU, not the cable. Every
//! message says how late its node ran within the last [`LATENESS_MEMORY`]
//! (the worst, and how long it was held up); the engine remembers the runs
//! of messages that said so for as long as the probes they explain stay in
//! a loss window.

use std::time::{Duration, Instant};

use meshd_domain::{Lateness, LossWindow};

use crate::lateness::{LATE, LATENESS_MEMORY};
use crate::link_rules::{LinkRules, MEDIUM_WINDOW};

/// What lateness explains of one end's view of a link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Excuse {
    /// The worst lateness: that much more silence, and replies that much
    /// slower, are no evidence.
    pub worst: Duration,
    /// The time, within the view's loss window, whose probes an end's
    /// lateness may have left unanswered.
    pub late_for: Duration,
    /// The part of the loss window `late_for` was measured over: the whole
    /// window, or less when the prober started within it.
    pub over: Duration,
}

impl Excuse {
    /// Two excuses together (both ends', or several runs of one): the
    /// worst of either, and both late times (overlapping ones counted
    /// twice, which only excuses more), never more than a window.
    pub fn and(self, other: Self) -> Self {
        Self {
            worst: self.worst.max(other.worst),
            late_for: self
                .late_for
                .saturating_add(other.late_for)
                .min(MEDIUM_WINDOW),
            over: self.over.max(other.over),
        }
    }

    /// The probes of window `w` that the late time can have left
    /// unanswered: those sent while an end ran late, and the one in flight.
    pub fn stalled_probes(&self, w: &LossWindow) -> u64 {
        if self.late_for.is_zero() || w.sent == 0 || w.window.is_zero() {
            return 0;
        }
        // A prober that started within the window sent its probes over
        // less of it: their period is that part over their count.
        let span = if self.over.is_zero() {
            w.window
        } else {
            self.over.min(w.window)
        };
        let period = span.as_secs_f64() / w.sent as f64;
        let during = (self.late_for.as_secs_f64() / period).ceil();
        // Saturating float-to-int conversion: a hostile lateness is capped.
        (during as u64).saturating_add(1)
    }
}

/// The time whose requests one stall `late` long loses. A node answers a
/// request on its next tick, up to a tick gap and that tick's lateness
/// after the request came, and its prober reads the answer on its own
/// tick, half a tick gap after that on average (the two ticks' phases are
/// unrelated): the requests of the first `1.5 tick_gap + late - timeout`
/// of the stall wait past the timeout.
fn lost_to_a_stall(late: Duration, rules: &LinkRules) -> Duration {
    rules
        .tick_gap
        .saturating_add(rules.tick_gap / 2)
        .saturating_add(late)
        .saturating_sub(rules.probe_timeout)
}

/// The requests a node leaves unanswered per time its timers were held up,
/// in stalls no longer than `worst`. What a stall loses per time held up
/// grows with its length, so stalls as long as the worst bound the loss.
/// Every tick 700 ms late (held up 7/8 of the time) loses 7/16 of the
/// requests; one 700-ms stall every 1.5 s (held up 7/15) 7/30.
fn lost_per_time_held_up(worst: Duration, rules: &LinkRules) -> f64 {
    let lost = lost_to_a_stall(worst, rules);
    (lost.as_secs_f64() / worst.as_secs_f64().max(1e-9)).clamp(0.0, 1.0)
}

/// `d` × `share`, saturating: a hostile lateness is capped, never a panic.
fn scaled(d: Duration, share: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * share).unwrap_or(Duration::MAX)
}

/// What one observation adds to what an end's lateness explains: the time
/// it was held up since the observation before (`over` that long) and what
/// of the requests meanwhile that lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HeldUp {
    over: Duration,
    lost: Duration,
}

impl HeldUp {
    /// The share of the time `over` whose requests were lost.
    fn lost_share(&self) -> f64 {
        (self.lost.as_secs_f64() / self.over.as_secs_f64().max(1e-9)).clamp(0.0, 1.0)
    }
}

/// One run of an end's observations that said it ran late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LateRun {
    /// When the run began at the latest: as long before its first
    /// observation as it was held up since the one before, or its worst
    /// stall.
    began: Instant,
    first: Instant,
    last: Instant,
    worst: Duration,
    /// What the latest observation of the run added.
    latest: HeldUp,
    /// The time whose requests the run's lateness lost.
    lost_time: Duration,
    /// An observation after it said the end ran on time again.
    ended: bool,
}

impl LateRun {
    fn start(worst: Duration, held_up: Duration, added: HeldUp, at: Instant) -> Self {
        let before = held_up.max(worst).min(LATENESS_MEMORY);
        Self {
            began: at.checked_sub(before).unwrap_or(at),
            first: at,
            last: at,
            worst,
            latest: added,
            lost_time: added.lost,
            ended: false,
        }
    }

    fn extend(&mut self, worst: Duration, added: HeldUp, at: Instant) {
        self.worst = self.worst.max(worst);
        self.lost_time = self.lost_time.saturating_add(added.lost);
        self.last = self.last.max(at);
        self.latest = added;
    }

    /// The end said at `at` that it ran on time over the memory before: it
    /// was late until then at most.
    fn end(&mut self, added: HeldUp, at: Instant) {
        self.lost_time = self.lost_time.saturating_add(added.lost);
        self.last = self.last.max(at.checked_sub(LATENESS_MEMORY).unwrap_or(at));
        self.ended = true;
    }

    /// Until when its probes can still show in a loss window.
    fn remembered_until(&self) -> Instant {
        self.last
            .checked_add(MEDIUM_WINDOW + LATENESS_MEMORY)
            .unwrap_or(self.last)
    }

    /// The end of the run as seen from a window ending at `window_end`:
    /// a run not ended goes on to it, as late as it last said.
    fn through(&self, window_end: Instant) -> Self {
        let mut run = *self;
        if !run.ended && window_end > run.last {
            let to_come = window_end.saturating_duration_since(run.last);
            run.lost_time = run
                .lost_time
                .saturating_add(scaled(to_come, run.latest.lost_share()));
            run.last = window_end;
        }
        run
    }

    /// The time in the window ending at `window_end` whose probes the run
    /// may have left unanswered: the run's share of lost requests over
    /// what of it lies in the window, and at least what its worst stall
    /// lost (the requests that came in its first part waited past the
    /// timeout). A node late by less than the timeout less a tick gap
    /// loses nothing.
    fn explains(&self, window_end: Instant, probing: Duration, rules: &LinkRules) -> Duration {
        let run = self.through(window_end);
        let lasted = run.last.saturating_duration_since(run.began);
        let late = run.late_within(window_end, probing, lasted);
        let share = run.lost_time.as_secs_f64() / lasted.as_secs_f64().max(1e-9);
        let stall = lost_to_a_stall(run.worst, rules);
        stall.max(scaled(late, share.clamp(0.0, 1.0))).min(late)
    }

    /// The late time in the `probing` part of the window ending at
    /// `window_end`: no more than the run `lasted`, and only what of it can
    /// lie there. Each observation speaks of the memory before it, and the
    /// probes a late tick answers waited up to `worst` before it.
    fn late_within(&self, window_end: Instant, probing: Duration, lasted: Duration) -> Duration {
        let could_start = self
            .first
            .checked_sub(LATENESS_MEMORY.saturating_add(self.worst))
            .unwrap_or(self.first);
        let window_start = window_end
            .checked_sub(probing.min(MEDIUM_WINDOW))
            .unwrap_or(window_end);
        let overlap = self
            .last
            .min(window_end)
            .saturating_duration_since(could_start.max(window_start));
        lasted.min(overlap)
    }

    fn merge(self, newer: Self) -> Self {
        Self {
            began: self.began.min(newer.began),
            first: self.first.min(newer.first),
            last: self.last.max(newer.last),
            worst: self.worst.max(newer.worst),
            latest: newer.latest,
            lost_time: self.lost_time.saturating_add(newer.lost_time),
            ended: self.ended && newer.ended,
        }
    }
}

/// More runs than this within one memory are merged, oldest first: the
/// merged run spans the time between them too, which only excuses more.
const MAX_RUNS: usize = 4;

/// One end's recent runs of lateness, as its observations reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LateMemory {
    /// Oldest first.
    runs: [Option<LateRun>; MAX_RUNS],
    /// The latest observation noted: when, and the time held up in all it
    /// said.
    noted: Option<(Instant, Duration)>,
}

impl LateMemory {
    /// Notes the lateness an end reported in an observation made `at`.
    /// Observations come in order; the same one may be noted again.
    pub fn note(&mut self, lateness: Lateness, at: Instant, rules: &LinkRules) {
        let mut kept = self
            .runs
            .into_iter()
            .flatten()
            .filter(|run| run.remembered_until() > at);
        self.runs = std::array::from_fn(|_| kept.next());
        let over = match self.noted {
            Some((before, _)) if at <= before => return,
            Some((before, _)) => at.saturating_duration_since(before),
            None => LATENESS_MEMORY,
        };
        let held_up = self.held_up_since_noted(lateness.held_up_total, over);
        self.noted = Some((at, lateness.held_up_total));
        let added = HeldUp {
            over,
            lost: scaled(held_up, lost_per_time_held_up(lateness.worst, rules)),
        };
        let open = self.runs.iter_mut().flatten().find(|run| !run.ended);
        match open {
            Some(run) if lateness.worst < LATE => run.end(added, at),
            Some(run) => run.extend(lateness.worst, added, at),
            None if lateness.worst < LATE => {}
            None => self.push(LateRun::start(lateness.worst, held_up, added, at)),
        }
    }

    /// The time an end was held up since its observation noted before,
    /// from the totals both said: never more than the time `over` between
    /// them (a hostile total is capped), and after a restart (a total that
    /// went back) what the new process counted.
    fn held_up_since_noted(&self, total: Duration, over: Duration) -> Duration {
        let before = self.noted.map_or(Duration::ZERO, |(_, total)| total);
        let since = total.checked_sub(before).unwrap_or(total);
        since.min(over)
    }

    fn push(&mut self, run: LateRun) {
        if let Some(free) = self.runs.iter_mut().find(|slot| slot.is_none()) {
            *free = Some(run);
            return;
        }
        if let [Some(oldest), Some(next), ..] = self.runs {
            self.runs[0] = Some(oldest.merge(next));
            self.runs.copy_within(2.., 1);
            self.runs[MAX_RUNS - 1] = Some(run);
        }
    }

    /// What the runs still remembered at `now` excuse of a view whose loss
    /// window ends at `window_end`, of which its prober sent in the last
    /// `probing` (the whole window, unless it started within it).
    pub fn excuse(
        &self,
        window_end: Instant,
        probing: Duration,
        now: Instant,
        rules: &LinkRules,
    ) -> Excuse {
        self.runs
            .iter()
            .flatten()
            .filter(|run| now < run.remembered_until())
            .fold(Excuse::default(), |excuse, run| {
                excuse.and(Excuse {
                    worst: run.worst,
                    late_for: run.explains(window_end, probing, rules),
                    over: probing.min(MEDIUM_WINDOW),
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Probes every 100 ms, lost after 500 ms.
    fn rules() -> LinkRules {
        LinkRules {
            tick_gap: ms(100),
            probe_timeout: ms(500),
            ..crate::fixtures::link_rules()
        }
    }

    fn window(sent: u64, lost: u64) -> LossWindow {
        LossWindow {
            window: MEDIUM_WINDOW,
            sent,
            lost,
        }
    }

    /// An end's observations as its messages carry them, and what this
    /// node remembers of them.
    #[derive(Default)]
    struct End {
        memory: LateMemory,
        held_up_total: Duration,
    }

    impl End {
        /// An observation made at `t0 + at_ms`: the worst lateness of the
        /// last two seconds, held up `held_up_ms` since the one before.
        fn says(&mut self, t0: Instant, at_ms: u64, worst_ms: u64, held_up_ms: f64) {
            self.held_up_total += Duration::from_secs_f64(held_up_ms / 1e3);
            let lateness = Lateness {
                worst: ms(worst_ms),
                held_up_total: self.held_up_total,
            };
            self.memory.note(lateness, t0 + ms(at_ms), &rules());
        }

        /// Observations every 100 ms from `from` to `to` of an end whose
        /// every tick is `late` late: held up `late` of every `late` and a
        /// tick gap.
        fn late_on_every_tick(&mut self, t0: Instant, from: u64, to: u64, late: u64) {
            let share = late as f64 / (100 + late) as f64;
            for at in (from..=to).step_by(100) {
                self.says(t0, at, late, 100.0 * share);
            }
        }

        fn excuse(&self, window_end: Instant, now: Instant) -> Excuse {
            self.memory.excuse(window_end, MEDIUM_WINDOW, now, &rules())
        }
    }

    #[test]
    fn on_time_is_no_excuse() {
        let t0 = crate::fixtures::epoch();
        let mut end = End::default();
        end.says(t0, 0, 5, 2.0);
        assert_eq!(end.excuse(t0, t0), Excuse::default());
        assert_eq!(Excuse::default().stalled_probes(&window(100, 50)), 0);
    }

    #[test]
    fn a_stall_past_the_timeout_excuses_what_waited_too_long_until_it_left_the_window() {
        let t0 = crate::fixtures::epoch();
        let mut end = End::default();
        end.says(t0, 0, 0, 0.0);
        end.says(t0, 1_000, 900, 900.0);
        end.says(t0, 3_500, 0, 0.0);
        let excuse = end.excuse(t0 + ms(4_000), t0 + ms(4_000));
        assert_eq!(excuse.worst, ms(900));
        // The requests of its first 550 ms waited past the timeout: a tick
        // gap and 900 ms, less 500 ms, and half a tick gap for the prober
        // to read the answer.
        assert_eq!(excuse.late_for, ms(550));
        // 550 ms at 10 probes a second, and the one in flight.
        assert_eq!(excuse.stalled_probes(&window(100, 50)), 7);
        // Remembered for a window and the lateness memory after the run,
        // which the observation on time says ended 2 s before it at most.
        let later = t0 + ms(13_499);
        assert_ne!(end.excuse(later, later), Excuse::default());
        let later = t0 + ms(13_500);
        assert_eq!(end.excuse(later, later), Excuse::default());
    }

    #[test]
    fn lateness_that_keeps_every_wait_under_the_timeout_excuses_no_loss() {
        // A busy node 50 ms late on every tick, or one stall of 300 ms:
        // every request is answered within 400 ms, so a lossy cable beside
        // it still shows; its slower answers are excused from RTT.
        let t0 = crate::fixtures::epoch();
        let mut busy = End::default();
        busy.late_on_every_tick(t0, 0, 9_000, 50);
        let excuse = busy.excuse(t0 + ms(9_000), t0 + ms(9_000));
        assert_eq!((excuse.worst, excuse.late_for), (ms(50), Duration::ZERO));
        assert_eq!(excuse.stalled_probes(&window(100, 20)), 0);
        let mut stalled = End::default();
        stalled.says(t0, 0, 300, 300.0);
        let excuse = stalled.excuse(t0 + ms(1_000), t0 + ms(1_000));
        assert_eq!((excuse.worst, excuse.late_for), (ms(300), Duration::ZERO));
    }

    #[test]
    fn periodic_stalls_excuse_what_they_held_up_not_the_whole_interval() {
        // A 700-ms stall every 1.5 s, reported every 750 ms: the worst is
        // that of every tick 700 ms late, but the stalls lost 7/30 of the
        // requests, not 7/16.
        let t0 = crate::fixtures::epoch();
        let mut stalls = End::default();
        for at in (0..=9_000).step_by(750) {
            let held_up = if at % 1_500 == 0 { 700.0 } else { 0.0 };
            stalls.says(t0, at, 700, held_up);
        }
        let excuse = stalls.excuse(t0 + ms(9_000), t0 + ms(9_000));
        assert_eq!(excuse.late_for, ms(7 * 350));
        // A cable losing a fifth of its probes beside it still shows.
        assert!(excuse.stalled_probes(&window(100, 36)) < 30, "{excuse:?}");
        // Every tick 700 ms late loses more, and is excused more.
        let mut every_tick_late = End::default();
        every_tick_late.late_on_every_tick(t0, 0, 9_000, 700);
        let excuse = every_tick_late.excuse(t0 + ms(9_000), t0 + ms(9_000));
        assert!(excuse.stalled_probes(&window(100, 36)) >= 36, "{excuse:?}");
    }

    #[test]
    fn how_often_an_end_is_heard_changes_nothing_it_was_held_up() {
        // The same 700-ms stalls, each ending on a multiple of 1.5 s, heard
        // every 100 ms between them or only right after each (when its
        // last two seconds look worst): the totals say what happened
        // between, however the messages fell.
        let t0 = crate::fixtures::epoch();
        let mut often = End::default();
        let mut seldom = End::default();
        for at in (0..=9_000).step_by(100).filter(|at| at % 1_500 <= 800) {
            let held_up = if at % 1_500 == 0 { 700.0 } else { 0.0 };
            often.says(t0, at, 700, held_up);
            if at % 1_500 == 0 {
                seldom.says(t0, at, 700, held_up);
            }
        }
        let now = t0 + ms(9_000);
        assert_eq!(often.excuse(now, now), seldom.excuse(now, now));
    }

    #[test]
    fn a_busy_nodes_one_long_stall_excuses_that_stall_not_its_whole_run() {
        // Reports a second apart of a node 50 ms late on every tick, but
        // for two of them 600 ms: 2 s at 5 in 14 lost, not the whole run
        // at its worst.
        let t0 = crate::fixtures::epoch();
        let mut end = End::default();
        for second in 0..=9 {
            let late: u64 = if (4..=5).contains(&second) { 600 } else { 50 };
            let held_up = 1_000.0 * late as f64 / (100 + late) as f64;
            end.says(t0, second * 1_000, late, held_up);
        }
        let excuse = end.excuse(t0 + ms(9_000), t0 + ms(9_000));
        assert_eq!(excuse.worst, ms(600));
        assert_eq!(excuse.late_for.as_millis(), 2 * 1_000 * 5 / 14);
        // A cable losing a fifth of its probes beside it still shows.
        assert_eq!(excuse.stalled_probes(&window(100, 20)), 9);
    }

    #[test]
    fn a_node_late_past_the_timeout_excuses_its_share_of_the_whole_run() {
        let t0 = crate::fixtures::epoch();
        let mut end = End::default();
        // First heard already held up 7/8 of its last two seconds.
        end.says(t0, 0, 700, 1_750.0);
        end.late_on_every_tick(t0, 100, 5_900, 700);
        // Still late: the run lasts to the view's end, from 1.75 s before
        // the first observation. Answers come up to 800 ms apart (and
        // are read up to 50 ms later), so 350 ms in 800 of them is past
        // the timeout: 7/16 of the run (4.8 s of 10.75 s) over the 10 s
        // of it in the window.
        let excuse = end.excuse(t0 + ms(9_000), t0 + ms(9_000));
        assert_eq!(excuse.worst, ms(700));
        assert_eq!(excuse.late_for.as_millis(), 4_476);
        // On time again at 8 s: late until 6 s at most (3.46 s lost of
        // 7.75 s), 7 s of it in the window.
        end.says(t0, 8_000, 0, 0.0);
        let excuse = end.excuse(t0 + ms(9_000), t0 + ms(9_000));
        assert_eq!(excuse.late_for.as_millis(), 3_121);
        // The 28 of 100 probes such a run loses are all excused.
        assert_eq!(excuse.stalled_probes(&window(100, 28)), 33);
        // Once most of the run left the window only what is still in it
        // counts: its last second.
        let later = t0 + ms(15_000);
        assert_eq!(end.excuse(later, later).late_for.as_millis(), 445);
    }

    #[test]
    fn separate_runs_add_up_and_a_full_memory_merges_the_oldest() {
        let t0 = crate::fixtures::epoch();
        let mut end = End::default();
        for start in [0, 2_500, 5_000, 7_500, 10_000] {
            end.says(t0, start, 500, 500.0);
            end.says(t0, start + 2_000, 0, 0.0);
        }
        assert_eq!(end.memory.runs.iter().flatten().count(), MAX_RUNS);
        // Five stalls of 500 ms, each losing 150 ms of requests. The first
        // two merged into one run that spans the time between them too,
        // and explains what both lost.
        let excuse = end.excuse(t0 + ms(9_000), t0 + ms(12_000));
        assert_eq!(excuse.worst, ms(500));
        assert_eq!(excuse.late_for.as_millis(), 5 * 150);
    }

    #[test]
    fn a_repeated_observation_adds_nothing_and_a_restart_counts_anew() {
        let t0 = crate::fixtures::epoch();
        let mut end = End::default();
        end.says(t0, 0, 0, 0.0);
        end.says(t0, 1_000, 900, 900.0);
        let once = end.memory;
        end.memory.note(
            Lateness {
                worst: ms(900),
                held_up_total: ms(900),
            },
            t0 + ms(1_000),
            &rules(),
        );
        assert_eq!(end.memory, once);
        // A new process counts from zero: its 600 ms are taken as they
        // are, not as a total that went back.
        end.memory.note(
            Lateness {
                worst: ms(900),
                held_up_total: ms(600),
            },
            t0 + ms(1_800),
            &rules(),
        );
        let excuse = end.excuse(t0 + ms(1_800), t0 + ms(1_800));
        assert_eq!(excuse.late_for.as_millis(), 550 + 600 * 11 / 18);
    }

    #[test]
    fn hostile_lateness_never_overflows() {
        let hostile = Excuse {
            worst: Duration::MAX,
            late_for: Duration::MAX,
            over: MEDIUM_WINDOW,
        };
        assert_eq!(hostile.stalled_probes(&window(100, 50)), u64::MAX);
        assert_eq!(hostile.stalled_probes(&window(0, 0)), 0);
        assert_eq!(hostile.and(hostile).late_for, MEDIUM_WINDOW);
        let t0 = crate::fixtures::epoch();
        let mut memory = LateMemory::default();
        let hostile = Lateness {
            worst: Duration::MAX,
            held_up_total: Duration::MAX,
        };
        memory.note(hostile, t0, &rules());
        memory.note(hostile, t0 + ms(100), &rules());
        let excuse = memory.excuse(t0 + ms(100), MEDIUM_WINDOW, t0 + ms(100), &rules());
        assert_eq!(excuse.worst, Duration::MAX);
        assert!(excuse.late_for <= MEDIUM_WINDOW);
        // A total that claims more than the time since is capped by it.
        let mut end = End::default();
        end.says(t0, 0, 0, 0.0);
        end.says(t0, 100, 900, 1e9);
        assert!(
            end.excuse(t0 + ms(100), t0 + ms(100)).late_for <= lost_to_a_stall(ms(900), &rules())
        );
    }
}
