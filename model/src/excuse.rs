//! What an end's lateness excuses of its link's evidence (Lifeguard). A
//! node whose timers run late answers its peers' probes late, so they see
//! loss, silence and slow replies that are its CPU, not the cable. An
//! observation says how late its end ran within the last
//! [`LATENESS_MEMORY`]; the engine remembers the runs of observations that
//! said so for as long as the probes they explain stay in a loss window.

use std::time::{Duration, Instant};

use meshd_domain::LossWindow;

use crate::link_rules::{LinkRules, MEDIUM_WINDOW};
use crate::linkstats::{LATE, LATENESS_MEMORY};

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

/// The share of the requests a node late by `lateness` on every tick
/// leaves unanswered: it answers a request on its next tick, up to a tick
/// gap and its lateness after the request came, and the part of that
/// wait past the probe timeout loses it.
fn lost_share(lateness: Duration, rules: &LinkRules) -> f64 {
    let wait = rules.tick_gap.saturating_add(lateness);
    let past = wait.saturating_sub(rules.probe_timeout);
    (past.as_secs_f64() / wait.as_secs_f64().max(1e-9)).clamp(0.0, 1.0)
}

/// `d` × `share`, saturating: a hostile lateness is capped, never a panic.
fn scaled(d: Duration, share: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * share).unwrap_or(Duration::MAX)
}

/// One run of an end's observations that said it ran late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LateRun {
    first: Instant,
    last: Instant,
    worst: Duration,
    /// What the latest observation of the run said.
    latest: Duration,
    /// The run's time weighted by the share of requests lost to the
    /// lateness each observation said, from the observation before it.
    lost_time: Duration,
    /// An observation after it said the end ran on time again.
    ended: bool,
}

impl LateRun {
    fn start(lateness: Duration, at: Instant, rules: &LinkRules) -> Self {
        Self {
            first: at,
            last: at,
            worst: lateness,
            latest: lateness,
            lost_time: scaled(lateness, lost_share(lateness, rules)),
            ended: false,
        }
    }

    fn extend(&mut self, lateness: Duration, at: Instant, rules: &LinkRules) {
        self.worst = self.worst.max(lateness);
        if at > self.last {
            let since = at.saturating_duration_since(self.last);
            self.lost_time = self
                .lost_time
                .saturating_add(scaled(since, lost_share(lateness, rules)));
            self.last = at;
            self.latest = lateness;
        }
    }

    /// The end said at `at` that it ran on time over the memory before:
    /// it was late until then at most, as late as it last said.
    fn end(&mut self, at: Instant, rules: &LinkRules) {
        if at > self.last {
            let until = at.checked_sub(LATENESS_MEMORY).unwrap_or(at);
            self.extend(self.latest, until, rules);
            self.ended = true;
        }
    }

    /// Until when its probes can still show in a loss window.
    fn remembered_until(&self) -> Instant {
        self.last
            .checked_add(MEDIUM_WINDOW + LATENESS_MEMORY)
            .unwrap_or(self.last)
    }

    /// The end of the run as seen from a window ending at `window_end`:
    /// a run not ended goes on to it, as late as it last said.
    fn through(&self, window_end: Instant, rules: &LinkRules) -> Self {
        let mut run = *self;
        if !run.ended {
            run.extend(run.latest, window_end, rules);
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
        let run = self.through(window_end, rules);
        let lasted = run
            .last
            .saturating_duration_since(run.first)
            .saturating_add(run.worst);
        let late = run.late_within(window_end, probing, lasted);
        let share = run.lost_time.as_secs_f64() / lasted.as_secs_f64().max(1e-9);
        let stall = rules
            .tick_gap
            .saturating_add(run.worst)
            .saturating_sub(rules.probe_timeout);
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
}

impl LateMemory {
    /// Notes the lateness an end reported in an observation made `at`.
    /// Observations come in order; the same one may be noted again.
    pub fn note(&mut self, lateness: Duration, at: Instant, rules: &LinkRules) {
        let mut kept = self
            .runs
            .into_iter()
            .flatten()
            .filter(|run| run.remembered_until() > at);
        self.runs = std::array::from_fn(|_| kept.next());
        let open = self.runs.iter_mut().flatten().find(|run| !run.ended);
        match open {
            Some(run) if lateness < LATE => run.end(at, rules),
            Some(run) => run.extend(lateness, at, rules),
            None if lateness < LATE => {}
            None => self.push(LateRun::start(lateness, at, rules)),
        }
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

    /// A run of observations every 100 ms from `from` to `to` that said
    /// the end ran `late`.
    fn late_run(memory: &mut LateMemory, t0: Instant, from: u64, to: u64, late: Duration) {
        for at in (from..=to).step_by(100) {
            memory.note(late, t0 + ms(at), &rules());
        }
    }

    #[test]
    fn on_time_is_no_excuse() {
        let t0 = crate::fixtures::epoch();
        let mut memory = LateMemory::default();
        memory.note(ms(5), t0, &rules());
        assert_eq!(
            memory.excuse(t0, MEDIUM_WINDOW, t0, &rules()),
            Excuse::default()
        );
        assert_eq!(Excuse::default().stalled_probes(&window(100, 50)), 0);
    }

    #[test]
    fn a_stall_past_the_timeout_excuses_what_waited_too_long_until_it_left_the_window() {
        let t0 = crate::fixtures::epoch();
        let mut memory = LateMemory::default();
        memory.note(ms(900), t0, &rules());
        memory.note(Duration::ZERO, t0 + ms(2_500), &rules());
        let excuse = memory.excuse(t0 + ms(3_000), MEDIUM_WINDOW, t0 + ms(3_000), &rules());
        assert_eq!(excuse.worst, ms(900));
        // Late from 900 ms before the observation to 2 s before the one
        // that said on time: 1.4 s, with answers up to 1 s apart, half of
        // that wait past the timeout.
        assert_eq!(excuse.late_for, ms(700));
        // 700 ms at 10 probes a second, and the one in flight.
        assert_eq!(excuse.stalled_probes(&window(100, 50)), 8);
        // Remembered for a window and the lateness memory after the run.
        let later = t0 + ms(12_400);
        assert_ne!(
            memory.excuse(later, MEDIUM_WINDOW, later, &rules()),
            Excuse::default()
        );
        let later = t0 + ms(12_500);
        assert_eq!(
            memory.excuse(later, MEDIUM_WINDOW, later, &rules()),
            Excuse::default()
        );
    }

    #[test]
    fn lateness_that_keeps_every_wait_under_the_timeout_excuses_no_loss() {
        // A busy node 50 ms late on every tick, or one stall of 300 ms:
        // every request is answered within 400 ms, so a lossy cable beside
        // it still shows; its slower answers are excused from RTT.
        let t0 = crate::fixtures::epoch();
        let mut busy = LateMemory::default();
        late_run(&mut busy, t0, 0, 9_000, ms(50));
        let excuse = busy.excuse(t0 + ms(9_000), MEDIUM_WINDOW, t0 + ms(9_000), &rules());
        assert_eq!((excuse.worst, excuse.late_for), (ms(50), Duration::ZERO));
        assert_eq!(excuse.stalled_probes(&window(100, 20)), 0);
        let mut stalled = LateMemory::default();
        stalled.note(ms(300), t0, &rules());
        let excuse = stalled.excuse(t0 + ms(1_000), MEDIUM_WINDOW, t0 + ms(1_000), &rules());
        assert_eq!((excuse.worst, excuse.late_for), (ms(300), Duration::ZERO));
    }

    #[test]
    fn a_busy_nodes_one_long_stall_excuses_that_stall_not_its_whole_run() {
        // Reports a second apart of a node 50 ms late, but for two of them
        // 600 ms: 2 s at 2 in 7 lost, not the whole run at its worst.
        let t0 = crate::fixtures::epoch();
        let mut memory = LateMemory::default();
        for second in 0..=9 {
            let late = if (4..=5).contains(&second) { 600 } else { 50 };
            memory.note(ms(late), t0 + ms(second * 1_000), &rules());
        }
        let excuse = memory.excuse(t0 + ms(9_000), MEDIUM_WINDOW, t0 + ms(9_000), &rules());
        assert_eq!(excuse.worst, ms(600));
        assert_eq!(excuse.late_for.as_millis(), 2 * 1_000 * 2 / 7);
        // A cable losing a fifth of its probes beside it still shows.
        assert_eq!(excuse.stalled_probes(&window(100, 20)), 7);
    }

    #[test]
    fn a_node_late_past_the_timeout_excuses_its_share_of_the_whole_run() {
        let t0 = crate::fixtures::epoch();
        let mut memory = LateMemory::default();
        late_run(&mut memory, t0, 0, 5_900, ms(700));
        // Still late: the run lasts to the view's end, 9.7 s with the
        // lateness before the first observation. Answers come up to 800 ms
        // apart, so 300 ms in 800 of them is past the timeout.
        let excuse = memory.excuse(t0 + ms(9_000), MEDIUM_WINDOW, t0 + ms(9_000), &rules());
        assert_eq!(excuse.worst, ms(700));
        assert_eq!(excuse.late_for.as_millis(), 9_700 * 3 / 8);
        // On time again at 8 s: late until 6 s at most.
        memory.note(Duration::ZERO, t0 + ms(8_000), &rules());
        let excuse = memory.excuse(t0 + ms(9_000), MEDIUM_WINDOW, t0 + ms(9_000), &rules());
        assert_eq!(excuse.late_for.as_millis(), 6_700 * 3 / 8);
        // The 24 of 100 probes such a run loses are all excused.
        assert_eq!(excuse.stalled_probes(&window(100, 24)), 27);
        // Once most of the run left the window only what is still in it
        // counts: its last second.
        let later = t0 + ms(15_000);
        assert_eq!(
            memory
                .excuse(later, MEDIUM_WINDOW, later, &rules())
                .late_for,
            ms(375)
        );
    }

    #[test]
    fn separate_runs_add_up_and_a_full_memory_merges_the_oldest() {
        let t0 = crate::fixtures::epoch();
        let mut memory = LateMemory::default();
        for start in [0, 2_500, 5_000, 7_500, 10_000] {
            memory.note(ms(600), t0 + ms(start), &rules());
            memory.note(Duration::ZERO, t0 + ms(start + 2_000), &rules());
        }
        assert_eq!(memory.runs.iter().flatten().count(), MAX_RUNS);
        // Five stalls of 600 ms, each 200 ms past the timeout less a tick
        // gap. The first two merged into one run that spans the time
        // between them too, and explains what both lost: 2 in 7 of
        // 600 ms twice.
        let excuse = memory.excuse(t0 + ms(9_000), MEDIUM_WINDOW, t0 + ms(12_000), &rules());
        assert_eq!(excuse.worst, ms(600));
        assert_eq!(excuse.late_for.as_millis(), 2 * 600 * 2 / 7 + 3 * 200);
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
        memory.note(Duration::MAX, t0, &rules());
        memory.note(Duration::MAX, t0 + ms(100), &rules());
        let excuse = memory.excuse(t0 + ms(100), MEDIUM_WINDOW, t0 + ms(100), &rules());
        assert_eq!(excuse.worst, Duration::MAX);
        assert!(excuse.late_for <= MEDIUM_WINDOW);
    }
}
