//! Per-link probe statistics: RTT quantiles, loss over sliding windows, a
//! baseline from the link's own history, silence and losses in a row.
//!
//! Pure: no clock, no I/O. Every call takes the `Instant` of the event, so the
//! prober feeds it real times and tests feed it made-up ones.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use meshd_domain::{LossWindow, RttHistogram, RttSummary};

use crate::histogram::DurationHistogram;
use crate::lateness::LatenessLog;

/// Loss windows reported, shortest first (observation.proto).
pub const LOSS_WINDOWS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(10),
    Duration::from_secs(60),
];

/// RTT quantiles are taken over this much recent history: long enough for
/// 100 samples at the default 10 probes/s, short enough to follow a change.
pub const RTT_WINDOW: Duration = Duration::from_secs(10);

/// Baseline summaries are kept this long; the baseline is their median, so a
/// degradation shorter than half of it cannot drag the baseline along.
pub const BASELINE_HISTORY: Duration = Duration::from_secs(300);

/// A baseline from one or two windows is just the current RTT again.
pub const BASELINE_MIN_WINDOWS: usize = 3;

/// Probes awaiting a reply beyond this are evicted as lost: a peer that never
/// answers must not grow memory, whatever the timeout is.
pub const MAX_OUTSTANDING: usize = 1024;

/// Hard cap on per-probe records. 60 s at the fastest allowed rates (10 ms
/// small, 100 ms MTU) is 6600, so this only bites when fed nonsense times.
pub const MAX_RECORDS: usize = 8192;

/// Hard cap on RTT samples kept for the open baseline window (1000 at the
/// fastest allowed 10 ms interval).
const MAX_WINDOW_SAMPLES: usize = 4096;

const MAX_BASELINE_WINDOWS: usize = (BASELINE_HISTORY.as_secs() / RTT_WINDOW.as_secs()) as usize;

/// RTT histogram bucket upper bounds: a Thunderbolt/veth RTT is tens of
/// µs, a sick or loaded link reaches ms, anything above 1 s is a timeout in
/// practice.
pub const RTT_BOUNDS: [Duration; 17] = [
    Duration::from_micros(5),
    Duration::from_micros(10),
    Duration::from_micros(25),
    Duration::from_micros(50),
    Duration::from_micros(100),
    Duration::from_micros(250),
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_micros(2_500),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
];

/// Which kind of probe: small ones measure RTT and loss; MTU-sized ones catch
/// size-dependent loss (a bad cable or MTU mismatch drops big frames only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeClass {
    Small,
    Mtu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatsConfig {
    /// A probe unanswered this long is lost, and a later reply is ignored.
    pub timeout: Duration,
    /// Answered probes sent this far apart had an outage between them (see
    /// [`Fate::Outage`]): the link's `down_after`, so a gap short enough
    /// not to be judged down is loss, and a longer one is judged as the
    /// outage it was rather than as loss afterwards.
    pub outage_gap: Duration,
    /// The small-probe period: silence is only counted from when probes
    /// were being sent (see [`ProbeStats::silence`]).
    pub interval: Duration,
    /// The longest gap between two on-time probe ticks: how long the peer
    /// may hold a request before its tick answers it.
    pub tick_gap: Duration,
}

impl LinkStatsConfig {
    fn confirmation(&self) -> Confirmation {
        Confirmation::new(self.interval, self.tick_gap)
    }
}

/// Small probes sent at once, beside the tick's own, when a link's silence
/// first outlasts what an answer can take (BFD's poll, in spirit): with
/// them a silence of [`Confirmation::silence`] has as many probes
/// unanswered behind it as `down_after` has at the steady rate, so it may
/// count as soon (see `LinkRules::silence_counts_after`).
pub const BURST_PROBES: u32 = 3;

/// At most one burst per link this often: a lossy link, silent again and
/// again, costs at most [`BURST_PROBES`] more probes a second. The steady
/// rate never changes.
pub const BURST_EVERY: Duration = Duration::from_secs(1);

/// When a silence is overdue and when a burst sent into it has gone
/// unanswered, from the probe period and the longest tick gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confirmation {
    /// Silence past every answer in flight: the peer holds a request up
    /// to a tick gap, and the next probe's answer was due a period later.
    pub overdue_after: Duration,
    /// A burst is answered within a tick gap (the peer's next tick) and a
    /// quarter of one (a busy host's wake-up), or it went unanswered.
    pub wait: Duration,
}

impl Confirmation {
    pub fn new(interval: Duration, tick_gap: Duration) -> Self {
        Self {
            overdue_after: tick_gap.saturating_add(interval),
            wait: tick_gap.saturating_add(tick_gap / 4),
        }
    }

    /// The least silence a confirmed end has: the burst went out once the
    /// silence was overdue, and waited.
    pub fn silence(&self) -> Duration {
        self.overdue_after.saturating_add(self.wait)
    }
}

/// Small probes lost in a row from which the prober's reader is told at
/// once ([`LinkStats::news`]), not at its next look.
pub const LOSING: u32 = 3;

/// What changes in a link's probing that its reader must see at once: the
/// rest (figures moving) waits for the next look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProbeNews {
    pub silent: bool,
    pub losing: bool,
    pub confirmed: bool,
}

/// What a link's probes measured, as of one moment: everything the
/// observation of the link takes from the prober, and nothing else.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeStats {
    pub rtt: RttSummary,
    /// Every counted small-probe RTT since the prober started.
    pub rtt_histogram: RttHistogram,
    /// Small-probe loss over [`LOSS_WINDOWS`], shortest first.
    pub loss: Vec<LossWindow>,
    pub mtu_loss: Vec<LossWindow>,
    pub probes_sent_total: u64,
    pub probes_lost_total: u64,
    pub last_reply_at: Option<Instant>,
    /// How long probes sent meanwhile have gone unanswered. Counted only
    /// from the first probe sent after the last reply (less one probe
    /// period): a prober that was not running sent nothing, and what it
    /// did not ask cannot have gone unanswered.
    pub silence: Duration,
    /// A burst sent into this silence went unanswered (see [`BURST_PROBES`]).
    pub silence_confirmed: bool,
    pub consecutive_lost: u32,
    /// The worst lateness of the prober's own timers in the last
    /// [`LATENESS_MEMORY`].
    pub lateness: Duration,
    /// When these were measured.
    pub at: Instant,
}

/// Replies that did not count, by reason; useful to spot a confused peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IgnoredReplies {
    /// No such probe outstanding: never sent, already answered (duplicate),
    /// or already expired as lost.
    pub unknown: u64,
    /// Arrived after the timeout; the probe was counted as lost.
    pub late: u64,
    /// Class in the reply differs from the class sent.
    pub class_mismatch: u64,
}

#[derive(Debug, Clone, Copy)]
struct Outstanding {
    class: ProbeClass,
    sent_at: Instant,
    /// Sent in a burst ([`LinkStats::on_burst_sent`]): its answer ends a
    /// silence, but it is no sample of the steady rate's loss or RTT.
    burst: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Answered {
        rtt: Duration,
        host_delay: Duration,
    },
    Lost,
    /// Lost while the link was out (before it ever answered, or between two
    /// answered probes sent `outage_gap` apart): the outage is judged by its silence,
    /// and must not linger as "loss" in the windows after the link is back,
    /// or every restart of a peer would read as a degraded link.
    Outage,
    /// Answered, but sent before the first reply after an outage arrived:
    /// it waited for the path to come back (neighbour discovery, queues),
    /// so it counts as answered and its RTT is not the link's.
    Resumed,
}

/// Whether `t` lies strictly inside an outage window.
fn within((after, before): (Option<Instant>, Instant), t: Instant) -> bool {
    after.is_none_or(|after| t > after) && t < before
}

/// One probe whose fate is known, filed under the moment that became known:
/// that keeps the record queue in time order without sorting.
#[derive(Debug, Clone, Copy)]
struct Record {
    at: Instant,
    sent_at: Instant,
    class: ProbeClass,
    fate: Fate,
}

#[derive(Debug, Clone, Copy)]
struct WindowSummary {
    end: Instant,
    p50: Duration,
    p99: Duration,
}

#[derive(Debug, Clone)]
struct BaselineWindow {
    start: Instant,
    samples: Vec<Duration>,
}

/// Statistics of one link's probes. Bounded memory: at most
/// [`MAX_OUTSTANDING`] probes in flight, 60 s (at most [`MAX_RECORDS`]) of
/// per-probe records, and 5 min of 10-s window summaries.
#[derive(Debug, Clone)]
pub struct LinkStats {
    config: LinkStatsConfig,
    outstanding: BTreeMap<u64, Outstanding>,
    records: VecDeque<Record>,
    histogram: DurationHistogram,
    sent_total: u64,
    lost_total: u64,
    first_sent_at: Option<Instant>,
    last_reply_at: Option<Instant>,
    consecutive_lost: u32,
    /// The first probe sent since the last reply, if any: where silence
    /// can start.
    first_unanswered_sent_at: Option<Instant>,
    /// When the burst of the present silence went out, if one did.
    burst_sent_at: Option<Instant>,
    /// When the last burst went out, silence or not ([`BURST_EVERY`]).
    last_burst_at: Option<Instant>,
    /// Recent lateness of the prober's timers.
    lateness: LatenessLog,
    /// Send time of the newest answered probe.
    last_answered_sent_at: Option<Instant>,
    /// When the first reply after the last outage arrived; probes sent
    /// before it are [`Fate::Resumed`].
    resumed_at: Option<Instant>,
    /// The last outage that ended: probes sent strictly between these
    /// (from the start of time when the first bound is `None`) that are
    /// lost belong to it.
    outage: Option<(Option<Instant>, Instant)>,
    ignored: IgnoredReplies,
    window: Option<BaselineWindow>,
    summaries: VecDeque<WindowSummary>,
    /// Reused by every [`LinkStats::observation`] (the prober asks for one
    /// per probe sent and per reply): growing fresh vectors sample by sample
    /// was most of its cost.
    scratch_rtts: Vec<Duration>,
    scratch_host_delays: Vec<Duration>,
}

impl LinkStats {
    pub fn new(config: LinkStatsConfig) -> Self {
        Self {
            config,
            outstanding: BTreeMap::new(),
            records: VecDeque::new(),
            histogram: DurationHistogram::new(&RTT_BOUNDS),
            sent_total: 0,
            lost_total: 0,
            first_sent_at: None,
            last_reply_at: None,
            consecutive_lost: 0,
            first_unanswered_sent_at: None,
            burst_sent_at: None,
            last_burst_at: None,
            lateness: LatenessLog::default(),
            last_answered_sent_at: None,
            resumed_at: None,
            outage: None,
            ignored: IgnoredReplies::default(),
            window: None,
            summaries: VecDeque::new(),
            scratch_rtts: Vec::new(),
            scratch_host_delays: Vec::new(),
        }
    }

    pub fn config(&self) -> LinkStatsConfig {
        self.config
    }

    /// A probe left. A repeated `seq` keeps the first send: sequence numbers
    /// are never reused by the prober, so a repeat is a caller bug and must
    /// not reset a probe's age.
    pub fn on_sent(&mut self, seq: u64, class: ProbeClass, at: Instant) {
        let probe = Outstanding {
            class,
            sent_at: at,
            burst: false,
        };
        if self.track(seq, probe) {
            self.note_first_send(at);
            self.sent_total += 1;
        }
    }

    /// A small probe of a burst ([`Self::burst_due`]) left. Its answer ends
    /// the silence like any; unanswered it is forgotten: the loss windows,
    /// totals and RTTs stay those of the steady rate, which the lateness
    /// excuse and the loss thresholds are drawn for.
    pub fn on_burst_sent(&mut self, seq: u64, at: Instant) {
        let probe = Outstanding {
            class: ProbeClass::Small,
            sent_at: at,
            burst: true,
        };
        self.track(seq, probe);
    }

    /// Awaits `probe`'s reply, unless `seq` is awaited already; whether
    /// it was new.
    fn track(&mut self, seq: u64, probe: Outstanding) -> bool {
        if self.outstanding.contains_key(&seq) {
            return false;
        }
        self.make_room(probe.sent_at);
        self.outstanding.insert(seq, probe);
        true
    }

    fn make_room(&mut self, at: Instant) {
        while self.outstanding.len() >= MAX_OUTSTANDING {
            match self.outstanding.pop_first() {
                Some((_, old)) if !old.burst => self.record_lost(old.class, old.sent_at, at),
                Some(_) => {}
                None => break,
            }
        }
    }

    /// A probe could not even be sent (e.g. ENETUNREACH with the cable
    /// down): it counts as sent and lost at once, so a dead cable shows up
    /// as loss rather than as silence in the statistics.
    pub fn on_send_failed(&mut self, class: ProbeClass, at: Instant) {
        self.note_first_send(at);
        self.sent_total += 1;
        self.record_lost(class, at, at);
    }

    /// A reply arrived at `at`; `host_delay` is the responder's own time
    /// between receiving the request and sending the reply. Returns the wire
    /// RTT when the reply counted.
    pub fn on_reply(
        &mut self,
        seq: u64,
        class: ProbeClass,
        host_delay: Duration,
        at: Instant,
    ) -> Option<Duration> {
        let Some(probe) = self.outstanding.get(&seq).copied() else {
            self.ignored.unknown += 1;
            return None;
        };
        if probe.class != class {
            self.ignored.class_mismatch += 1;
            return None;
        }
        self.outstanding.remove(&seq);
        let elapsed = at.saturating_duration_since(probe.sent_at);
        // Judged on the probe's own times, so whether `expire` ran before
        // this reply or not cannot change the outcome.
        if elapsed >= self.config.timeout {
            self.ignored.late += 1;
            if !probe.burst {
                self.record_lost(probe.class, probe.sent_at, at);
            }
            return None;
        }
        if probe.burst {
            self.end_silence(at);
            return None;
        }
        let rtt = elapsed.saturating_sub(host_delay);
        let host_delay = host_delay.min(elapsed);
        if self.note_answered(probe.sent_at) {
            self.resumed_at = Some(at);
        }
        self.end_silence(at);
        // The first reply after an outage and the probes sent before it
        // waited for the path to come back.
        let resumed =
            self.resumed_at.is_some_and(|r| probe.sent_at < r) || self.resumed_at == Some(at);
        if resumed {
            self.push_record(Record {
                at,
                sent_at: probe.sent_at,
                class,
                fate: Fate::Resumed,
            });
            return None;
        }
        if class == ProbeClass::Small {
            self.histogram.observe(rtt);
            self.add_baseline_sample(rtt, at);
        }
        self.push_record(Record {
            at,
            sent_at: probe.sent_at,
            class,
            fate: Fate::Answered { rtt, host_delay },
        });
        Some(rtt)
    }

    fn end_silence(&mut self, at: Instant) {
        self.last_reply_at = Some(at);
        self.first_unanswered_sent_at = None;
        self.burst_sent_at = None;
        self.consecutive_lost = 0;
    }

    /// Probes unanswered for `timeout` or longer become lost.
    pub fn expire(&mut self, now: Instant) {
        let timeout = self.config.timeout;
        let expired: Vec<u64> = self
            .outstanding
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.sent_at) >= timeout)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in expired {
            if let Some(p) = self.outstanding.remove(&seq)
                && !p.burst
            {
                self.record_lost(p.class, p.sent_at, now);
            }
        }
    }

    pub fn ignored_replies(&self) -> IgnoredReplies {
        self.ignored
    }

    /// Small probes lost in a row, as of the last [`Self::expire`].
    pub fn consecutive_lost(&self) -> u32 {
        self.consecutive_lost
    }

    /// What the prober tells its reader at once when it changes, as of
    /// `now`: silence for `outage` (the link's `down_after`), and
    /// [`LOSING`] or more small probes lost in a row.
    pub fn news(&self, now: Instant, outage: Duration) -> ProbeNews {
        ProbeNews {
            silent: self.silence(now) >= outage,
            losing: self.consecutive_lost >= LOSING,
            confirmed: self.silence_confirmed(now),
        }
    }

    /// How many small probes to send now beside the tick's own: a burst
    /// of [`BURST_PROBES`] the first time a silence is overdue (at most one
    /// per silence, and per [`BURST_EVERY`]), else none. The caller sends
    /// them with [`Self::on_burst_sent`].
    pub fn burst_due(&mut self, now: Instant) -> u32 {
        let due = self.burst_sent_at.is_none()
            && self.first_unanswered_sent_at.is_some()
            && self.silence(now) >= self.config.confirmation().overdue_after
            && self
                .last_burst_at
                .is_none_or(|last| now.saturating_duration_since(last) >= BURST_EVERY);
        if !due {
            return 0;
        }
        self.burst_sent_at = Some(now);
        self.last_burst_at = Some(now);
        BURST_PROBES
    }

    /// The burst of the present silence went out and its answers are
    /// overdue: the silence is no lost probe or two.
    pub fn silence_confirmed(&self, now: Instant) -> bool {
        self.burst_sent_at.is_some_and(|sent| {
            now.saturating_duration_since(sent) >= self.config.confirmation().wait
        })
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// The prober's timer that should have fired at `at - late` fired at
    /// `at`.
    pub fn note_lateness(&mut self, late: Duration, at: Instant) {
        self.lateness.note(late, at);
    }

    /// What this end measured, as of `now`.
    pub fn stats(&mut self, now: Instant) -> ProbeStats {
        self.expire(now);
        self.prune(now);
        self.roll_baseline_window(now);

        let mut rtts = std::mem::take(&mut self.scratch_rtts);
        let mut host_delays = std::mem::take(&mut self.scratch_host_delays);
        rtts.clear();
        host_delays.clear();
        let rtt_since = now.checked_sub(RTT_WINDOW);
        for r in self.records.iter().rev() {
            if rtt_since.is_some_and(|since| r.at < since) {
                break;
            }
            if let (ProbeClass::Small, Fate::Answered { rtt, host_delay }) = (r.class, r.fate) {
                rtts.push(rtt);
                host_delays.push(host_delay);
            }
        }
        rtts.sort_unstable();
        host_delays.sort_unstable();
        let (baseline_p50, baseline_p99) = self.baseline(now);
        let rtt = RttSummary {
            p50: quantile(&rtts, 0.50),
            p90: quantile(&rtts, 0.90),
            p99: quantile(&rtts, 0.99),
            max: rtts.last().copied().unwrap_or_default(),
            host_delay_p50: quantile(&host_delays, 0.50),
            baseline_p50,
            baseline_p99,
            samples: rtts.len() as u64,
        };

        self.scratch_rtts = rtts;
        self.scratch_host_delays = host_delays;

        let [loss, mtu_loss] = self.loss_windows(now);
        ProbeStats {
            rtt,
            rtt_histogram: self.histogram.to_rtt_histogram(),
            loss,
            mtu_loss,
            probes_sent_total: self.sent_total,
            probes_lost_total: self.lost_total,
            last_reply_at: self.last_reply_at,
            silence: self.silence(now),
            silence_confirmed: self.silence_confirmed(now),
            consecutive_lost: self.consecutive_lost,
            lateness: self.lateness.worst(now),
            at: now,
        }
    }

    /// Silence runs from the last reply (or the first probe ever sent), but
    /// never from before the first probe sent since: a prober that stalled
    /// sent nothing in between, and that is no evidence against the link.
    pub fn silence(&self, now: Instant) -> Duration {
        let Some(first_unanswered) = self.first_unanswered_sent_at else {
            return Duration::ZERO;
        };
        let start = match self.last_reply_at {
            Some(reply) => reply.max(
                first_unanswered
                    .checked_sub(self.config.interval)
                    .unwrap_or(first_unanswered),
            ),
            None => self.first_sent_at.unwrap_or(first_unanswered),
        };
        now.saturating_duration_since(start)
    }

    fn note_first_send(&mut self, at: Instant) {
        if self.first_sent_at.is_none() {
            self.first_sent_at = Some(at);
        }
        if self.first_unanswered_sent_at.is_none() {
            self.first_unanswered_sent_at = Some(at);
        }
    }

    /// A probe sent at `sent_at` was answered. If the answered probe before
    /// it was sent `outage_gap` earlier or more (or there was none), the link
    /// was out in between: the losses of that gap, known now or found later
    /// (probes sent into it time out after this reply), leave the windows.
    /// Returns whether this reply ends an outage of a link that had
    /// answered before (not its very first reply).
    fn note_answered(&mut self, sent_at: Instant) -> bool {
        let previous = self.last_answered_sent_at;
        let outage = previous
            .is_none_or(|prev| sent_at.saturating_duration_since(prev) >= self.config.outage_gap);
        self.last_answered_sent_at = Some(previous.map_or(sent_at, |prev| prev.max(sent_at)));
        if !outage {
            return false;
        }
        let window = (previous, sent_at);
        self.outage = Some(window);
        for r in &mut self.records {
            if r.fate == Fate::Lost && within(window, r.sent_at) {
                r.fate = Fate::Outage;
            }
        }
        previous.is_some()
    }

    fn record_lost(&mut self, class: ProbeClass, sent_at: Instant, at: Instant) {
        self.lost_total += 1;
        let in_past_outage = self.outage.is_some_and(|window| within(window, sent_at));
        if class == ProbeClass::Small && !in_past_outage {
            self.consecutive_lost = self.consecutive_lost.saturating_add(1);
        }
        self.push_record(Record {
            at,
            sent_at,
            class,
            fate: if in_past_outage {
                Fate::Outage
            } else {
                Fate::Lost
            },
        });
    }

    fn push_record(&mut self, mut record: Record) {
        // Keeps the queue ordered even if a caller's instants step back, so
        // the window scans may stop at the first record that is too old.
        if let Some(last) = self.records.back() {
            record.at = record.at.max(last.at);
        }
        if self.records.len() >= MAX_RECORDS {
            self.records.pop_front();
        }
        self.records.push_back(record);
        self.prune(record.at);
    }

    fn prune(&mut self, now: Instant) {
        let Some(oldest_kept) = now.checked_sub(LOSS_WINDOWS[LOSS_WINDOWS.len() - 1]) else {
            return;
        };
        while self.records.front().is_some_and(|r| r.at < oldest_kept) {
            self.records.pop_front();
        }
    }

    /// Small and MTU probes' loss over each of [`LOSS_WINDOWS`], in one
    /// walk back through the records (a look reads every link's, and the
    /// longest window holds a minute of them): each window counts from the
    /// newest record back to the first one older than its start.
    fn loss_windows(&self, now: Instant) -> [Vec<LossWindow>; 2] {
        let since = LOSS_WINDOWS.map(|window| now.checked_sub(window));
        // Sent and lost, by class (small, MTU) and window.
        let mut counts = [[(0, 0); LOSS_WINDOWS.len()]; 2];
        // The windows still counting, shortest first: once a window has met
        // a record older than its start, the shorter ones have too.
        let mut counting = LOSS_WINDOWS.len();
        for r in self.records.iter().rev() {
            while counting > 0
                && since[LOSS_WINDOWS.len() - counting].is_some_and(|since| r.at < since)
            {
                counting -= 1;
            }
            if counting == 0 {
                break;
            }
            if r.fate == Fate::Outage {
                continue;
            }
            let class = match r.class {
                ProbeClass::Small => 0,
                ProbeClass::Mtu => 1,
            };
            for (sent, lost) in &mut counts[class][LOSS_WINDOWS.len() - counting..] {
                *sent += 1;
                *lost += u64::from(r.fate == Fate::Lost);
            }
        }
        counts.map(|by_window| {
            LOSS_WINDOWS
                .iter()
                .zip(by_window)
                .map(|(&window, (sent, lost))| LossWindow { window, sent, lost })
                .collect()
        })
    }

    fn add_baseline_sample(&mut self, rtt: Duration, at: Instant) {
        self.roll_baseline_window(at);
        let window = self.window.get_or_insert_with(|| BaselineWindow {
            start: at,
            samples: Vec::new(),
        });
        if window.samples.len() < MAX_WINDOW_SAMPLES {
            window.samples.push(rtt);
        }
    }

    /// Closes the open 10-s window once `now` is past its end; the next one
    /// starts on the 10-s grid, so windows never overlap.
    fn roll_baseline_window(&mut self, now: Instant) {
        let Some(window) = self.window.as_mut() else {
            return;
        };
        let elapsed = now.saturating_duration_since(window.start);
        if elapsed < RTT_WINDOW {
            return;
        }
        let mut samples = std::mem::take(&mut window.samples);
        let end = window.start.checked_add(RTT_WINDOW).unwrap_or(now);
        let whole_windows = elapsed.as_nanos() / RTT_WINDOW.as_nanos();
        let skip = RTT_WINDOW.saturating_mul(u32::try_from(whole_windows).unwrap_or(u32::MAX));
        window.start = window.start.checked_add(skip).unwrap_or(now);
        if !samples.is_empty() {
            samples.sort_unstable();
            if self.summaries.len() >= MAX_BASELINE_WINDOWS {
                self.summaries.pop_front();
            }
            self.summaries.push_back(WindowSummary {
                end,
                p50: quantile(&samples, 0.50),
                p99: quantile(&samples, 0.99),
            });
        }
    }

    fn baseline(&self, now: Instant) -> (Duration, Duration) {
        let since = now.checked_sub(BASELINE_HISTORY);
        let recent: Vec<&WindowSummary> = self
            .summaries
            .iter()
            .filter(|s| since.is_none_or(|since| s.end >= since))
            .collect();
        if recent.len() < BASELINE_MIN_WINDOWS {
            return (Duration::ZERO, Duration::ZERO);
        }
        let mut p50s: Vec<Duration> = recent.iter().map(|s| s.p50).collect();
        let mut p99s: Vec<Duration> = recent.iter().map(|s| s.p99).collect();
        p50s.sort_unstable();
        p99s.sort_unstable();
        (quantile(&p50s, 0.5), quantile(&p99s, 0.5))
    }
}

/// Nearest-rank quantile of sorted samples; zero when there are none.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.saturating_sub(1).min(sorted.len() - 1))
        .copied()
        .unwrap_or_default()
}

/// Bucket `i` holds (`bounds[i-1]`, `bounds[i]`]; the last one everything
/// above the last bound.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::lateness::LATENESS_MEMORY;
    const TIMEOUT: Duration = Duration::from_millis(500);
    /// The link's `down_after`, as the prober sets it.
    const OUTAGE_GAP: Duration = Duration::from_millis(600);
    const INTERVAL: Duration = Duration::from_millis(100);
    const TICK_GAP: Duration = Duration::from_millis(128);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn stats() -> LinkStats {
        LinkStats::new(LinkStatsConfig {
            timeout: TIMEOUT,
            outage_gap: OUTAGE_GAP,
            interval: INTERVAL,
            tick_gap: TICK_GAP,
        })
    }

    fn observe(s: &mut LinkStats, now: Instant) -> ProbeStats {
        s.stats(now)
    }

    /// Sends a small probe at `t0 + at` and answers it `rtt` later.
    fn answered(s: &mut LinkStats, seq: u64, t0: Instant, at: Duration, rtt: Duration) {
        s.on_sent(seq, ProbeClass::Small, t0 + at);
        assert!(
            s.on_reply(seq, ProbeClass::Small, Duration::ZERO, t0 + at + rtt)
                .is_some()
        );
    }

    fn window(o: &ProbeStats, secs: u64) -> LossWindow {
        *o.loss
            .iter()
            .find(|w| w.window == Duration::from_secs(secs))
            .expect("window present")
    }

    #[test]
    fn fresh_stats_are_empty() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        let o = observe(&mut s, t0);
        assert_eq!(o.silence, Duration::ZERO);
        assert_eq!(o.rtt, RttSummary::default());
        assert_eq!(o.loss.len(), 3);
        assert_eq!(o.mtu_loss.len(), 3);
        assert!(o.loss.iter().all(|w| w.sent == 0 && w.lost == 0));
        let windows: Vec<Duration> = o.loss.iter().map(|w| w.window).collect();
        assert_eq!(windows, LOSS_WINDOWS.to_vec());
        assert_eq!(o.last_reply_at, None);
        assert_eq!(o.lateness, Duration::ZERO);
        assert_eq!(
            o.rtt_histogram.counts.len(),
            o.rtt_histogram.bounds.len() + 1
        );
        assert_eq!(o.rtt_histogram.bounds.len(), 17);
        assert_eq!(o.rtt_histogram.bounds.last(), Some(&Duration::from_secs(1)));
    }

    #[test]
    fn quantiles_over_last_ten_seconds() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        // 100 probes, RTT 1..=100 µs, all within the 10-s window.
        for i in 0..100u64 {
            answered(&mut s, i, t0, ms(i * 50), us(i + 1));
        }
        let o = observe(&mut s, t0 + ms(5_000));
        assert_eq!(o.rtt.samples, 100);
        assert_eq!(o.rtt.p50, us(50));
        assert_eq!(o.rtt.p90, us(90));
        assert_eq!(o.rtt.p99, us(99));
        assert_eq!(o.rtt.max, us(100));

        // Eleven seconds later, only probes after t0 + 1 s remain... none
        // were sent then, so the summary is empty again.
        let o = observe(&mut s, t0 + ms(16_000));
        assert_eq!(o.rtt.samples, 0);
        assert_eq!(o.rtt.p50, Duration::ZERO);
    }

    #[test]
    fn rtt_excludes_host_delay() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        s.on_sent(1, ProbeClass::Small, t0);
        assert!(
            s.on_reply(1, ProbeClass::Small, us(30), t0 + us(100))
                .is_some()
        );
        let o = observe(&mut s, t0 + ms(1));
        assert_eq!(o.rtt.p50, us(70));
        assert_eq!(o.rtt.host_delay_p50, us(30));

        // A responder claiming more delay than the whole round trip cannot
        // make the RTT negative.
        s.on_sent(2, ProbeClass::Small, t0 + ms(2));
        assert!(
            s.on_reply(2, ProbeClass::Small, ms(5), t0 + ms(2) + us(10))
                .is_some()
        );
        let o = observe(&mut s, t0 + ms(3));
        assert_eq!(o.rtt.p50, Duration::ZERO);
    }

    #[test]
    fn in_flight_probes_count_in_no_window_and_timeouts_become_lost() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        s.on_sent(1, ProbeClass::Small, t0);
        let o = observe(&mut s, t0 + ms(100));
        assert_eq!(
            window(&o, 1),
            LossWindow {
                window: Duration::from_secs(1),
                sent: 0,
                lost: 0
            }
        );
        assert_eq!(o.probes_sent_total, 1);
        assert_eq!(o.probes_lost_total, 0);

        s.expire(t0 + ms(499));
        assert_eq!(s.outstanding(), 1);
        s.expire(t0 + TIMEOUT);
        assert_eq!(s.outstanding(), 0);
        let o = observe(&mut s, t0 + TIMEOUT);
        assert_eq!(window(&o, 1).sent, 1);
        assert_eq!(window(&o, 1).lost, 1);
        assert_eq!(o.probes_lost_total, 1);
        assert_eq!(o.consecutive_lost, 1);
    }

    #[test]
    fn loss_windows_slide() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        // Second 0..10: all answered. Second 10..12: all lost.
        let mut seq = 0;
        for i in 0..100u64 {
            answered(&mut s, seq, t0, ms(i * 100), us(20));
            seq += 1;
        }
        for i in 100..120u64 {
            s.on_sent(seq, ProbeClass::Small, t0 + ms(i * 100));
            s.expire(t0 + ms(i * 100));
            seq += 1;
        }
        let now = t0 + ms(12_000);
        let o = observe(&mut s, now);
        // Probes are filed when their fate became known: the losses at
        // 10.5..=11.9 s by the loop's `expire`, the one sent at 11.5 s at
        // 12.0 s by the observation; the last four are still in flight.
        let w1 = window(&o, 1);
        assert_eq!((w1.sent, w1.lost), (11, 11));
        assert!((w1.ratio() - 1.0).abs() < f64::EPSILON);
        let w10 = window(&o, 10);
        assert_eq!((w10.sent, w10.lost), (80 + 16, 16));
        let w60 = window(&o, 60);
        assert_eq!((w60.sent, w60.lost), (116, 16));

        // A minute later the 60 s window has slid past everything but the
        // four probes that were still in flight and expire only now.
        let o = observe(&mut s, now + Duration::from_secs(61));
        let w60 = window(&o, 60);
        assert_eq!((w60.sent, w60.lost), (4, 4));
        assert_eq!(o.probes_sent_total, 120);
        assert_eq!(o.probes_lost_total, 20);
    }

    #[test]
    fn mtu_probes_count_in_mtu_loss_only() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        s.on_sent(1, ProbeClass::Mtu, t0);
        assert!(
            s.on_reply(1, ProbeClass::Mtu, Duration::ZERO, t0 + us(200))
                .is_some()
        );
        s.on_sent(2, ProbeClass::Mtu, t0 + ms(100));
        let o = observe(&mut s, t0 + ms(700));
        let mtu1 = o.mtu_loss[0];
        assert_eq!((mtu1.sent, mtu1.lost), (2, 1));
        assert_eq!(window(&o, 1).sent, 0);
        // MTU RTTs include serialisation of a big frame; kept out of `rtt`.
        assert_eq!(o.rtt.samples, 0);
        // MTU losses do not count as small probes lost in a row.
        assert_eq!(o.consecutive_lost, 0);
    }

    #[test]
    fn losses_before_the_first_reply_are_not_loss() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        for seq in 0..2u64 {
            s.on_sent(seq, ProbeClass::Small, t0 + ms(seq * 100));
        }
        s.expire(t0 + ms(800));
        assert_eq!(
            window(&observe(&mut s, t0 + ms(800)), 1).lost,
            2,
            "loss while it lasts"
        );
        answered(&mut s, 10, t0 + ms(800), ms(1), us(30));
        let o = observe(&mut s, t0 + ms(900));
        assert_eq!((window(&o, 10).sent, window(&o, 10).lost), (1, 0));
        assert_eq!(o.probes_lost_total, 2, "totals stay honest");
    }

    #[test]
    fn probes_sent_into_an_outage_and_found_lost_after_it_are_not_loss() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        // Sent before the peer answered anything, found lost only after the
        // first reply (they time out later).
        s.on_sent(1, ProbeClass::Small, t0);
        s.on_sent(2, ProbeClass::Mtu, t0 + ms(50));
        answered(&mut s, 3, t0 + ms(100), ms(0), us(30));
        s.expire(t0 + ms(700));
        let o = observe(&mut s, t0 + ms(700));
        assert_eq!(window(&o, 10).lost, 0, "{o:?}");
        assert_eq!(o.mtu_loss[1].lost, 0);
        assert_eq!(o.consecutive_lost, 0);
        // A probe sent after the recovery and lost is loss again.
        s.on_sent(4, ProbeClass::Small, t0 + ms(800));
        s.expire(t0 + ms(1_400));
        assert_eq!(window(&observe(&mut s, t0 + ms(1_400)), 10).lost, 1);
    }

    #[test]
    fn an_outage_leaves_the_loss_windows_once_the_link_is_back_but_loss_stays() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        // A probe every 100 ms; 5 and 12 lost alone (loss), 20 to 26 lost
        // in a row (an outage: 27 is answered 800 ms after 19).
        let lost = |seq: u64| seq == 5 || seq == 12 || (20..=26).contains(&seq);
        for seq in 0..=30u64 {
            let at = t0 + ms(seq * 100);
            s.expire(at);
            s.on_sent(seq, ProbeClass::Small, at);
            if !lost(seq) {
                // 27 ends the outage: answered, but not an RTT sample.
                assert_eq!(
                    s.on_reply(seq, ProbeClass::Small, Duration::ZERO, at + us(30))
                        .is_some(),
                    seq != 27
                );
            }
        }
        s.expire(t0 + ms(3_600));
        let o = observe(&mut s, t0 + ms(3_600));
        assert_eq!(window(&o, 10).lost, 2, "only the lone losses remain: {o:?}");
        assert_eq!(window(&o, 10).sent, 31 - 7);
        assert_eq!(o.probes_lost_total, 9, "totals stay honest");
    }

    #[test]
    fn replies_that_waited_for_the_path_to_come_back_are_not_rtt_samples() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        for seq in 0..10u64 {
            answered(&mut s, seq, t0, ms(seq * 100), us(40));
        }
        // The cable is out from 1 s to 2 s; the probes sent at 2.0 s and
        // 2.1 s wait 400 ms for neighbour discovery once it is back.
        for seq in 10..20u64 {
            s.on_sent(seq, ProbeClass::Small, t0 + ms(seq * 100));
        }
        s.expire(t0 + ms(2_000));
        for seq in 20..22u64 {
            s.on_sent(seq, ProbeClass::Small, t0 + ms(seq * 100));
        }
        for seq in 20..22u64 {
            let back = t0 + ms(2_400 + (seq - 20));
            assert_eq!(
                s.on_reply(seq, ProbeClass::Small, Duration::ZERO, back),
                None
            );
        }
        // Sent while they queued behind neighbour discovery: answered late.
        for seq in 22..24u64 {
            s.on_sent(seq, ProbeClass::Small, t0 + ms(seq * 100));
            let back = t0 + ms(2_402 + (seq - 22));
            assert_eq!(
                s.on_reply(seq, ProbeClass::Small, Duration::ZERO, back),
                None
            );
        }
        for seq in 25..30u64 {
            answered(&mut s, seq, t0, ms(seq * 100), us(40));
        }
        let o = observe(&mut s, t0 + ms(3_000));
        assert_eq!(o.rtt.max, us(40), "no 400 ms sample: {:?}", o.rtt);
        assert_eq!(window(&o, 10).lost, 0, "the outage is not loss: {o:?}");
        // Nothing sent since the last reply: nothing has gone unanswered.
        assert_eq!(o.silence, Duration::ZERO);
    }

    /// Lifeguard at the source: a prober whose timers stalled for 1.5 s
    /// sent nothing meanwhile, so it has no evidence the link went quiet;
    /// the link is silent only for as long as probes it did send went
    /// unanswered.
    #[test]
    fn a_prober_that_stalled_is_not_silent_for_the_stall() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        for seq in 0..10u64 {
            answered(&mut s, seq, t0, ms(seq * 100), us(40));
        }
        // Stalled from 0.9 s to 2.4 s; the first probe after the stall is
        // in flight when the stats are read.
        s.on_sent(10, ProbeClass::Small, t0 + ms(2_400));
        s.note_lateness(ms(1_400), t0 + ms(2_400));
        let o = observe(&mut s, t0 + ms(2_450));
        assert_eq!(o.silence, ms(150), "one probe period and 50 ms, not 1.5 s");
        assert_eq!(o.lateness, ms(1_400));
        // A cable that really is dead goes on growing silent as the probes
        // sent after the stall go unanswered.
        for seq in 11..20u64 {
            s.on_sent(seq, ProbeClass::Small, t0 + ms(2_400 + (seq - 10) * 100));
        }
        let o = observe(&mut s, t0 + ms(3_400));
        assert_eq!(o.silence, ms(1_100));
        // Lateness is forgotten after a while.
        let o = observe(&mut s, t0 + ms(2_400) + LATENESS_MEMORY + ms(1));
        assert_eq!(o.lateness, Duration::ZERO);
    }

    /// A gap shorter than the outage threshold (the link's `down_after`) is
    /// loss, however many probes in a row it took: a link dark 400 ms of
    /// every second must not read as healthy.
    #[test]
    fn a_repeated_short_blackout_is_loss() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        for seq in 0..100u64 {
            let at = t0 + ms(seq * 100);
            s.expire(at);
            s.on_sent(seq, ProbeClass::Small, at);
            // Dark for the first 400 ms of every second.
            if seq % 10 >= 4 {
                assert!(
                    s.on_reply(seq, ProbeClass::Small, Duration::ZERO, at + us(30))
                        .is_some()
                        || seq % 10 == 4,
                    "{seq}"
                );
            }
        }
        s.expire(t0 + ms(10_100));
        let o = observe(&mut s, t0 + ms(10_100));
        let w = window(&o, 10);
        assert!(w.lost >= 36, "40 % of the probes lost: {w:?}");
        assert!(w.ratio() > 0.3, "{w:?}");
    }

    #[test]
    fn consecutive_lost_resets_on_reply() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        for seq in 0..5u64 {
            s.on_sent(seq, ProbeClass::Small, t0 + ms(seq * 100));
        }
        s.on_send_failed(ProbeClass::Small, t0 + ms(500));
        s.expire(t0 + ms(1_000));
        assert_eq!(observe(&mut s, t0 + ms(1_000)).consecutive_lost, 6);
        answered(&mut s, 10, t0, ms(1_100), us(30));
        assert_eq!(observe(&mut s, t0 + ms(1_200)).consecutive_lost, 0);
    }

    /// The burst goes out once a silence is overdue, once per silence and
    /// per `BURST_EVERY`; it confirms the silence after its wait; its
    /// probes are no loss, and an answer to one ends the silence.
    #[test]
    fn a_burst_confirms_an_overdue_silence_and_is_no_loss() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        let overdue = Confirmation::new(INTERVAL, TICK_GAP);
        answered(&mut s, 0, t0, ms(0), us(30));
        let mut seq = 1;
        let mut burst_at = None;
        for tick in 1..=4u64 {
            let at = t0 + ms(tick * 100);
            s.on_sent(seq, ProbeClass::Small, at);
            seq += 1;
            let due = s.burst_due(at);
            if s.silence(at) >= overdue.overdue_after && burst_at.is_none() {
                assert_eq!(due, BURST_PROBES, "tick {tick}");
                burst_at = Some(at);
                for _ in 0..due {
                    s.on_burst_sent(seq, at);
                    seq += 1;
                }
            } else {
                assert_eq!(due, 0, "tick {tick}: one burst per silence");
            }
        }
        let burst_at = burst_at.expect("a burst by 400 ms of silence");
        assert!(!s.silence_confirmed(burst_at + overdue.wait - ms(1)));
        let confirmed_at = burst_at + overdue.wait;
        assert!(s.silence_confirmed(confirmed_at));
        assert!(s.news(confirmed_at, OUTAGE_GAP).confirmed);
        let seen = observe(&mut s, t0 + ms(2_000));
        assert!(seen.silence_confirmed);
        // Lost: the four steady probes of the silence, not the burst's.
        assert_eq!(seen.probes_sent_total, 5);
        assert_eq!(seen.probes_lost_total, 4);
        // A reply ends the silence and its confirmation.
        s.on_sent(seq, ProbeClass::Small, t0 + ms(2_000));
        s.on_reply(seq, ProbeClass::Small, Duration::ZERO, t0 + ms(2_001));
        assert!(!s.silence_confirmed(t0 + ms(2_001)));
        let mut s2 = stats();
        answered(&mut s2, 0, t0, ms(0), us(30));
        s2.on_sent(1, ProbeClass::Small, t0 + ms(100));
        assert_eq!(s2.burst_due(t0 + ms(300)), BURST_PROBES);
        s2.on_burst_sent(2, t0 + ms(300));
        // An answer to the burst ends the silence, and with it the burst.
        assert!(
            s2.on_reply(2, ProbeClass::Small, Duration::ZERO, t0 + ms(310))
                .is_none()
        );
        assert_eq!(s2.silence(t0 + ms(310)), Duration::ZERO);
        s2.on_sent(3, ProbeClass::Small, t0 + ms(400));
        assert_eq!(
            s2.burst_due(t0 + ms(700)),
            0,
            "within BURST_EVERY of the last"
        );
        assert_eq!(s2.burst_due(t0 + ms(1_300)), BURST_PROBES);
    }

    #[test]
    fn send_failures_count_as_sent_and_lost() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        s.on_send_failed(ProbeClass::Small, t0);
        s.on_send_failed(ProbeClass::Mtu, t0);
        let o = observe(&mut s, t0 + ms(1));
        assert_eq!((o.probes_sent_total, o.probes_lost_total), (2, 2));
        assert_eq!((window(&o, 1).sent, window(&o, 1).lost), (1, 1));
        assert_eq!((o.mtu_loss[0].sent, o.mtu_loss[0].lost), (1, 1));
        assert_eq!(o.silence, ms(1));
    }

    #[test]
    fn silence_runs_from_last_reply_or_first_send() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        assert_eq!(observe(&mut s, t0 + ms(300)).silence, Duration::ZERO);
        s.on_sent(1, ProbeClass::Small, t0 + ms(1_000));
        assert_eq!(observe(&mut s, t0 + ms(3_000)).silence, ms(2_000));

        s.on_sent(2, ProbeClass::Mtu, t0 + ms(3_000));
        assert!(
            s.on_reply(2, ProbeClass::Mtu, Duration::ZERO, t0 + ms(3_001))
                .is_some()
        );
        s.on_sent(3, ProbeClass::Small, t0 + ms(3_050));
        let o = observe(&mut s, t0 + ms(4_001));
        assert_eq!(o.silence, ms(1_000));
        assert_eq!(o.last_reply_at, Some(t0 + ms(3_001)));
    }

    #[test]
    fn duplicate_unknown_late_and_mismatched_replies_are_ignored() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        assert!(
            s.on_reply(99, ProbeClass::Small, Duration::ZERO, t0)
                .is_none()
        );

        answered(&mut s, 1, t0, ms(0), us(40));
        assert!(
            s.on_reply(1, ProbeClass::Small, Duration::ZERO, t0 + us(50))
                .is_none()
        );

        s.on_sent(2, ProbeClass::Small, t0 + ms(10));
        assert!(
            s.on_reply(2, ProbeClass::Mtu, Duration::ZERO, t0 + ms(11))
                .is_none()
        );
        // Still outstanding after the mismatched reply; the right one counts.
        assert!(
            s.on_reply(2, ProbeClass::Small, Duration::ZERO, t0 + ms(11))
                .is_some()
        );

        // Late without `expire` having run: lost, not an RTT of 600 ms.
        s.on_sent(3, ProbeClass::Small, t0 + ms(20));
        assert!(
            s.on_reply(3, ProbeClass::Small, Duration::ZERO, t0 + ms(620))
                .is_none()
        );
        // Exactly at the timeout is late, as `expire` would have it.
        s.on_sent(5, ProbeClass::Small, t0 + ms(25));
        assert!(
            s.on_reply(5, ProbeClass::Small, Duration::ZERO, t0 + ms(525))
                .is_none()
        );
        // Late after `expire`: unknown by then.
        s.on_sent(4, ProbeClass::Small, t0 + ms(30));
        s.expire(t0 + ms(600));
        assert!(
            s.on_reply(4, ProbeClass::Small, Duration::ZERO, t0 + ms(640))
                .is_none()
        );

        let ignored = s.ignored_replies();
        assert_eq!(ignored.unknown, 3);
        assert_eq!(ignored.late, 2);
        assert_eq!(ignored.class_mismatch, 1);
        let o = observe(&mut s, t0 + ms(700));
        assert_eq!(o.rtt.samples, 2);
        assert_eq!(o.rtt.max, ms(1));
        assert_eq!((window(&o, 1).sent, window(&o, 1).lost), (5, 3));
        assert_eq!(o.probes_lost_total, 3);
        // The late replies did not end the run of losses.
        assert_eq!(o.consecutive_lost, 3);
    }

    #[test]
    fn repeated_send_keeps_first_timestamp() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        s.on_sent(1, ProbeClass::Small, t0);
        s.on_sent(1, ProbeClass::Small, t0 + ms(400));
        s.expire(t0 + ms(500));
        assert_eq!(s.outstanding(), 0);
        assert_eq!(observe(&mut s, t0 + ms(500)).probes_sent_total, 1);
    }

    #[test]
    fn histogram_buckets_at_the_bounds() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        let rtts = [
            us(5),                           // exactly on the first bound: bucket 0
            us(5) + Duration::from_nanos(1), // just above: bucket 1
            us(10),                          // bucket 1
            ms(1),                           // bound 7
            Duration::from_secs(1),          // last bound, index 16
        ];
        let mut s_long = LinkStats::new(LinkStatsConfig {
            timeout: Duration::from_secs(5),
            outage_gap: OUTAGE_GAP,
            interval: INTERVAL,
            tick_gap: TICK_GAP,
        });
        for (i, rtt) in rtts.iter().enumerate() {
            answered(&mut s_long, i as u64, t0, ms(i as u64 * 10), *rtt);
        }
        // Above the last bound goes to the overflow bucket.
        answered(&mut s_long, 10, t0, ms(100), ms(1_001));
        let h = observe(&mut s_long, t0 + ms(2_000)).rtt_histogram;
        assert_eq!(h.counts.len(), 18);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[1], 2);
        assert_eq!(h.counts[7], 1);
        assert_eq!(h.counts[16], 1);
        assert_eq!(h.counts[17], 1);
        assert_eq!(h.counts.iter().sum::<u64>(), 6);
        assert_eq!(h.bounds[0], us(5));
        assert_eq!(h.bounds[7], ms(1));

        // Cumulative since start: old samples stay counted after the windows slide.
        answered(&mut s, 1, t0, ms(0), us(7));
        let h = observe(&mut s, t0 + Duration::from_secs(600)).rtt_histogram;
        assert_eq!(h.counts[1], 1);
    }

    #[test]
    fn baseline_needs_three_windows_and_uses_medians() {
        let t0 = crate::fixtures::epoch();
        let mut s = stats();
        let mut seq = 0;
        let mut fill = |s: &mut LinkStats, from_s: u64, rtt: Duration| {
            for i in 0..100u64 {
                answered(s, seq, t0, ms(from_s * 1_000 + i * 100), rtt);
                seq += 1;
            }
        };
        fill(&mut s, 0, us(20));
        fill(&mut s, 10, us(30));
        let o = observe(&mut s, t0 + ms(20_500));
        assert_eq!(o.rtt.baseline_p50, Duration::ZERO);
        assert_eq!(o.rtt.baseline_p99, Duration::ZERO);

        fill(&mut s, 20, us(40));
        let o = observe(&mut s, t0 + ms(30_500));
        assert_eq!(o.rtt.baseline_p50, us(30));
        assert_eq!(o.rtt.baseline_p99, us(30));

        // A degradation in the current window does not move the baseline yet,
        // and one bad window among many barely does.
        fill(&mut s, 30, ms(5));
        fill(&mut s, 40, us(30));
        let o = observe(&mut s, t0 + ms(40_500));
        // Windows 20, 30, 40 µs and 5 ms: the median stays with the healthy ones.
        assert_eq!(o.rtt.baseline_p50, us(30));
        let o = observe(&mut s, t0 + ms(50_500));
        assert_eq!(o.rtt.baseline_p50, us(30));
        assert!(o.rtt.p99 < ms(5));

        // After five quiet minutes all windows have aged out.
        let o = observe(&mut s, t0 + Duration::from_secs(400));
        assert_eq!(o.rtt.baseline_p50, Duration::ZERO);
    }

    #[test]
    fn memory_stays_bounded() {
        let t0 = crate::fixtures::epoch();
        let mut s = LinkStats::new(LinkStatsConfig {
            timeout: Duration::from_secs(3_600),
            outage_gap: OUTAGE_GAP,
            interval: INTERVAL,
            tick_gap: TICK_GAP,
        });
        // A peer that never answers, probed every millisecond for 10 s.
        for seq in 0..10_000u64 {
            s.on_sent(seq, ProbeClass::Small, t0 + ms(seq));
        }
        assert_eq!(s.outstanding(), MAX_OUTSTANDING);
        let o = observe(&mut s, t0 + ms(10_000));
        assert_eq!(o.probes_lost_total, 10_000 - MAX_OUTSTANDING as u64);
        assert_eq!(o.probes_sent_total, 10_000);

        // Answered every millisecond for 11 minutes: records stay within 60 s
        // and the cap, window summaries within 5 minutes.
        let mut s = stats();
        for seq in 0..660_000u64 {
            answered(&mut s, seq, t0, ms(seq), us(20));
        }
        assert!(s.records.len() <= MAX_RECORDS);
        assert!(s.summaries.len() <= MAX_BASELINE_WINDOWS);
        assert!(s.outstanding.is_empty());
        let o = observe(&mut s, t0 + ms(660_000));
        assert_eq!(o.rtt.baseline_p50, us(20));
        assert!(s.records.len() <= MAX_RECORDS);
    }

    #[test]
    fn quantile_edges() {
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
        assert_eq!(quantile(&[us(7)], 0.99), us(7));
        assert_eq!(quantile(&[us(1), us(2)], 0.5), us(1));
        assert_eq!(quantile(&[us(1), us(2)], 0.99), us(2));
    }
}
