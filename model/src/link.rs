//! One link's verdict: what its two ends' observations say right now (the
//! raw assessment), and the hysteresis that turns a stream of raw
//! assessments into a verdict that does not chatter.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use meshd_domain::human;
use meshd_domain::{LinkObservation, LinkState, LossWindow, RdmaPortState, RttSummary};

use crate::excuse::Excuse;
use crate::lateness::LATE;
use crate::link_rules::{LinkRules, MEDIUM_WINDOW, SHORT_WINDOW};

/// A ratio over few probes is noise: one late MTU-sized probe is 10 % of a
/// 10 s window. Degraded needs at least this many lost, whatever the ratio.
pub const MIN_LOST_FOR_DEGRADED: u64 = 3;

/// Fewer RTT samples than this say nothing about a p99.
const MIN_RTT_SAMPLES: u64 = 20;

/// Replies must flow this long before a down link is called up again: one
/// lucky probe through a dying cable is not a recovery.
pub const UP_AFTER: Duration = Duration::from_secs(1);
/// A degradation must hold this long before it is reported.
pub const DEGRADED_AFTER: Duration = Duration::from_millis(500);
/// A degraded link must look clean this long before it is called up; loss
/// windows are 10 s, so anything shorter would chatter.
pub const CLEAR_AFTER: Duration = Duration::from_secs(5);
/// A flapping link that goes dark is reported down once it stayed dark
/// this long: one more swing of the flap is not news, a cable that then
/// died for good is (flapping never hides a link that stays down).
pub const DOWN_WHILE_FLAPPING: Duration = Duration::from_secs(5);

/// One end's observation of the link, as seen from the evaluating node now.
#[derive(Debug, Clone, Copy)]
pub struct EndView<'a> {
    pub node: &'a str,
    pub observation: &'a LinkObservation,
    /// Silence the end has confirmed since the observation was made: an end
    /// sends its observation again whenever the link stops or starts being
    /// silent, so while its later messages say nothing changed, a silent
    /// link stayed silent. Zero for an observation that was not silent.
    pub confirmed_silence: Duration,
    /// The part of the silence from before the far end's daemon last
    /// restarted: its previous life's (it was dead or starting), not the
    /// cable's. Zero when the far end did not restart since the silence
    /// began.
    pub previous_life: Duration,
    /// How long the far end's daemon had run when this end made the
    /// observation, if it restarted since this node knew it (zero when it
    /// restarted after): loss over a window longer than that is partly its
    /// previous life's, when it was dead or starting, not the cable's.
    pub far_life: Option<Duration>,
    /// The end's timers ran late (its own lateness, or its node saturated)
    /// while it gathered this: its RTT is no evidence, and its loss only
    /// beyond [`Self::excuse`].
    pub late: bool,
    /// What either end's recent lateness explains of this end's silence,
    /// loss and RTT ([`crate::excuse::LateMemory`]): no evidence.
    pub excuse: Excuse,
    /// An end node of the link sees most of its links slow at once: an RTT
    /// rise its cables share is its host's (a starved CPU answers and
    /// forwards late), not this cable's, so RTT is no evidence here.
    pub rtt_shared: bool,
    /// This end's host fails RDMA on most of its links at once: its own
    /// RDMA (a device, a driver, RDMA left disabled), raised once as its
    /// `rdma_disabled`, not a fault of each of its cables.
    pub rdma_shared: bool,
    /// The observation came before an end's daemon restarted or its node
    /// returned (down or unheard meanwhile): a carrier it says was lost
    /// then may be back now, so it proves nothing until the end looks
    /// again. Its silence is handled by `previous_life`.
    pub carrier_stale: bool,
}

impl EndView<'_> {
    /// Silence now: what the end measured, plus what it has confirmed since,
    /// from the far end's current life only.
    pub fn silence(&self) -> Duration {
        self.observation
            .figures
            .silence
            .saturating_add(self.confirmed_silence)
            .saturating_sub(self.previous_life)
    }

    /// The far end ran through a loss window of this length before the
    /// observation (or never restarted as far as this node knows).
    fn far_lived(&self, window: Duration) -> bool {
        self.far_life.is_none_or(|life| life >= window)
    }

    fn ever_answered(&self) -> bool {
        self.observation.last_reply_at.is_some()
    }

    /// Silent for `down_after` beyond what lateness explains, and beyond
    /// what this end, if late, needs to notice an answer. An end's
    /// silence only counts the time probes it sent went unanswered (see
    /// `linkstats::ProbeStats`), so its own stall adds little; but the far
    /// end answers on its probe tick, and a far end whose timers stalled
    /// answered nothing meanwhile: the worst lateness of either end
    /// ([`Self::excuse`]) is silence the cable did not cause.
    pub fn silent(&self, rules: &LinkRules) -> bool {
        self.observation.probes_sent_total > 0 && self.silence() >= self.silent_after(rules)
    }

    /// This end's port lost its carrier while it probed: nothing crosses
    /// the cable, whatever its silence says yet. The kernel's event is no
    /// lateness's doing, so no excuse applies.
    pub fn carrier_lost(&self) -> bool {
        !self.carrier_stale
            && self.observation.carrier == Some(false)
            && self.observation.probes_sent_total > 0
    }

    /// Silent long enough to confirm the other end's carrier loss: two
    /// probe ticks unanswered beyond what lateness explains. A carrier
    /// event alone never makes a verdict while the other end is heard
    /// answering.
    fn confirms_carrier_loss(&self, rules: &LinkRules) -> bool {
        let confirm = rules
            .tick_gap
            .saturating_mul(2)
            .saturating_add(self.excuse.worst)
            .saturating_add(self.noticing(rules));
        self.observation.probes_sent_total > 0 && self.silence() >= confirm
    }

    /// How long a silence must last to count (see [`Self::silent`]).
    pub fn silent_after(&self, rules: &LinkRules) -> Duration {
        rules
            .silence_counts_after(self.observation.silence_confirmed)
            .saturating_add(self.excuse.worst)
            .saturating_add(self.noticing(rules))
    }

    /// How long after the far end answers again this end may still say it
    /// is silent: a late end sends its probes and reads their replies on
    /// its late ticks, up to two of them, and reports late.
    fn noticing(&self, rules: &LinkRules) -> Duration {
        if self.late {
            rules
                .tick_gap
                .saturating_add(self.observation.lateness)
                .saturating_mul(2)
        } else {
            Duration::ZERO
        }
    }

    /// This end's timers ran late while it gathered the observation.
    pub fn ran_late(observation: &LinkObservation) -> bool {
        observation.lateness >= LATE
    }
}

/// What the ends say now, before hysteresis, with the evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    pub state: LinkState,
    pub evidence: Vec<String>,
    /// Every end that reports is silent: the one evidence no hold hides.
    pub every_end_silent: bool,
}

/// "a 550ms late, b 600ms late".
fn name_lateness(ends: &[EndView<'_>]) -> String {
    ends.iter()
        .map(|e| format!("{} {} late", e.node, fmt_duration(e.observation.lateness)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A round-trip time or silence as evidence and the mesh page write it, in
/// meshd's one duration format: "85µs", "1.2ms", "3.4s".
pub fn fmt_duration(d: Duration) -> String {
    meshd_domain::human::duration(d)
}

fn percent(ratio: f64) -> String {
    format!("{:.0}%", ratio * 100.0)
}

/// Judges the link from the ends that observe it (one or two).
pub fn assess(ends: &[EndView<'_>], rules: &LinkRules) -> Assessment {
    if ends.is_empty() {
        return Assessment {
            state: LinkState::Unknown,
            evidence: vec!["no end reports this link".to_owned()],
            every_end_silent: false,
        };
    }
    let mut evidence = Vec::new();
    // A carrier lost at an end, confirmed by every other end (its own
    // carrier, or its silence): the cable is out, without waiting for
    // `down_after`. Unconfirmed, the ends are judged by their probes.
    let carrier_gone = ends.iter().any(EndView::carrier_lost)
        && ends
            .iter()
            .all(|e| e.carrier_lost() || e.confirms_carrier_loss(rules));
    let silent: Vec<&EndView<'_>> = ends
        .iter()
        .filter(|e| carrier_gone || e.silent(rules))
        .collect();
    for end in &silent {
        if carrier_gone && end.carrier_lost() {
            let port = end.observation.local.iface.as_deref().unwrap_or("its port");
            evidence.push(format!(
                "{}: no carrier on {port} (the cable is out, or the far end's port is off)",
                end.node
            ));
            continue;
        }
        // Probes count as lost only once their timeout has passed, so early
        // in a silence none may be lost yet: say so only when some are.
        let lost = match end.observation.consecutive_lost {
            0 => String::new(),
            1 => " (1 probe lost)".to_owned(),
            n => format!(" ({n} probes lost in a row)"),
        };
        let excused = if end.excuse.worst.is_zero() {
            String::new()
        } else {
            format!(", past {} of lateness", fmt_duration(end.excuse.worst))
        };
        evidence.push(format!(
            "{}: no reply for {}{lost}{excused}",
            end.node,
            fmt_duration(end.silence()),
        ));
    }
    // Ends that both run later than the probe timeout answer each other's
    // probes too late to count, cable or not: their silence is no
    // evidence either way (and `mesh_saturated` says why).
    let too_late = |e: &EndView<'_>| {
        e.observation.lateness.saturating_add(rules.tick_gap) >= rules.probe_timeout
    };
    if silent.len() == ends.len() && ends.len() == 2 && !carrier_gone && ends.iter().all(too_late) {
        return Assessment {
            state: LinkState::Unknown,
            evidence: vec![format!(
                "both ends run later than the probe timeout ({}): their silence is no evidence",
                name_lateness(ends)
            )],
            every_end_silent: false,
        };
    }
    if silent.len() == ends.len() {
        return Assessment {
            state: LinkState::Down,
            evidence,
            every_end_silent: true,
        };
    }

    // A late end times its own probes out late or not at all: its loss is
    // no evidence of a dead link (Lifeguard), only its silence is.
    let heavy_loss: Vec<(&EndView<'_>, f64)> = ends
        .iter()
        .filter(|e| !e.late && e.far_lived(SHORT_WINDOW))
        .filter_map(|e| heavy_loss(e.observation, rules).map(|ratio| (e, ratio)))
        .collect();
    if heavy_loss.len() == ends.len() {
        evidence.extend(heavy_loss.iter().map(|(e, r)| {
            format!(
                "{}: {} of probes lost over the last 1s",
                e.node,
                percent(*r)
            )
        }));
        return Assessment {
            state: LinkState::Down,
            evidence,
            every_end_silent: false,
        };
    }

    // A far end late past the probe timeout answers every request too late
    // to count: one end's silence beside it is that lateness, not the
    // cable. (Both ends silent is always evidence, above.)
    let unexplained =
        |e: &&EndView<'_>| e.excuse.worst.saturating_add(rules.tick_gap) < rules.probe_timeout;
    evidence.retain(|line| {
        silent
            .iter()
            .filter(|e| !unexplained(e))
            .all(|e| !line.starts_with(&format!("{}: no reply for", e.node)))
    });
    if silent.iter().any(unexplained) {
        // One end hears nothing while the other gets replies: the path works
        // one way round or the silent end's prober is in trouble. Either way
        // it is not a cut cable.
        evidence.push("only one end is silent".to_owned());
    }
    // Lifeguard for degradation: a late node answers late, so the RTT of
    // its links, measured from either end, describes its CPU, not the
    // cable. Its loss does only as far as its lateness explains it (the
    // excuse): a prober that wakes late reads the replies waiting before
    // it expires a probe, and a responder late by less than the timeout
    // still answers every request in time.
    let rtt_counts = ends.iter().all(|e| !e.late);
    for end in ends {
        degradation(end, rules, rtt_counts, &mut evidence);
    }
    if !evidence.is_empty() {
        return Assessment {
            state: LinkState::Degraded,
            evidence,
            every_end_silent: false,
        };
    }
    if ends.iter().any(EndView::ever_answered) {
        Assessment {
            state: LinkState::Up,
            evidence: Vec::new(),
            every_end_silent: false,
        }
    } else {
        Assessment {
            state: LinkState::Unknown,
            evidence: vec!["no probe answered yet".to_owned()],
            every_end_silent: false,
        }
    }
}

/// The share of small probes lost over the last second, when it is enough
/// to call the link down.
fn heavy_loss(o: &LinkObservation, rules: &LinkRules) -> Option<f64> {
    let w = o.loss_over(SHORT_WINDOW)?;
    (w.sent > 0 && w.ratio() >= rules.loss_down).then_some(w.ratio())
}

/// The 10-s window of `windows` when its loss degrades the link, with the
/// probes it lost beyond those `excuse` explains.
fn lossy<'w>(
    windows: &'w [LossWindow],
    rules: &LinkRules,
    excuse: Excuse,
) -> Option<(&'w LossWindow, u64)> {
    let w = windows.iter().find(|w| w.window == MEDIUM_WINDOW)?;
    let counted = LossWindow {
        lost: w.lost.saturating_sub(excuse.stalled_probes(w)),
        ..*w
    };
    (counted.lost >= MIN_LOST_FOR_DEGRADED && counted.ratio() >= rules.loss_degraded)
        .then_some((w, counted.lost))
}

/// Whether a tenth of the probes (the RTT p90) are far above the link's own
/// baseline p99, by more than `excuse` (a late end answers that much later)
/// explains. A busy host answers a few probes late now and then, which
/// moves only the tail (p99); a slow cable slows them all, or many.
fn slow(rtt: &RttSummary, rules: &LinkRules, excuse: Duration) -> bool {
    if rtt.samples < MIN_RTT_SAMPLES || rtt.baseline_p99.is_zero() {
        return false;
    }
    let by_factor = rtt.baseline_p99.mul_f64(rules.rtt_p99_factor);
    let by_floor = rtt.baseline_p99.saturating_add(rules.rtt_min_increase);
    rtt.p90 > by_factor.max(by_floor).saturating_add(excuse)
}

fn slow_cable(o: &LinkObservation) -> Option<(u64, u64)> {
    match (o.figures.negotiated_speed_bps, o.figures.expected_speed_bps) {
        (Some(have), Some(want)) if have < want => Some((have, want)),
        _ => None,
    }
}

fn rdma_down(o: &LinkObservation) -> bool {
    !matches!(
        o.figures.rdma_port_state,
        RdmaPortState::None | RdmaPortState::Active
    )
}

fn degradation(end: &EndView<'_>, rules: &LinkRules, rtt_counts: bool, evidence: &mut Vec<String>) {
    let o = end.observation;
    let node = end.node;
    let loss_counts = end.far_lived(MEDIUM_WINDOW);
    for (what, windows) in [
        ("probes", &o.figures.loss),
        ("MTU-sized probes", &o.mtu_loss),
    ] {
        if let Some((w, lost)) = lossy(windows, rules, end.excuse).filter(|_| loss_counts) {
            let excused = if lost < w.lost {
                format!(
                    ", {} of them excused by {} of lateness, up to {}",
                    w.lost - lost,
                    fmt_duration(end.excuse.late_for),
                    fmt_duration(end.excuse.worst)
                )
            } else {
                String::new()
            };
            evidence.push(format!(
                "{node}: {} of {what} lost over 10s ({} of {}{excused})",
                percent(w.ratio()),
                w.lost,
                w.sent
            ));
        }
    }
    if rtt_counts && !end.rtt_shared && slow(&o.figures.rtt, rules, end.excuse.worst) {
        evidence.push(format!(
            "{node}: RTT p90 {} (p99 {}) against a baseline p99 of {}",
            fmt_duration(o.figures.rtt.p90),
            fmt_duration(o.figures.rtt.p99),
            fmt_duration(o.figures.rtt.baseline_p99)
        ));
    }
    if let Some((have, want)) = slow_cable(o) {
        evidence.push(format!(
            "{node}: negotiated {} Gb/s, expected {} Gb/s",
            have / 1_000_000_000,
            want / 1_000_000_000
        ));
    }
    if end.rdma_shared {
        return;
    }
    if rdma_down(o) {
        evidence.push(format!(
            "{node}: RDMA port is {} while IP probes get through",
            o.figures.rdma_port_state
        ));
    }
    // Reached only while IP probes get through (a link silent on both ends
    // is down before this): the RDMA path fails on its own.
    if let Some(failures) = rdma_probe_failing(o) {
        evidence.push(format!(
            "{node}: RDMA probes fail ({failures} in a row) while IP probes get through"
        ));
    }
}

/// The RDMA probe's failures in a row, when they are enough to speak of.
fn rdma_probe_failing(o: &LinkObservation) -> Option<u32> {
    o.rdma_probe.as_ref().and_then(crate::rdma::failing_streak)
}

/// What one end's observation says of the link, in the terms the verdict
/// rests on. An end sends its observation again at once whenever this
/// changes, so a peer's copy is never stale in any of these terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndClass {
    pub answered: bool,
    pub silent: bool,
    pub silence_confirmed: bool,
    pub heavy_loss: bool,
    pub lossy: bool,
    pub mtu_lossy: bool,
    pub slow: bool,
    pub slow_cable: bool,
    pub rdma_down: bool,
    pub rdma_probe_failing: bool,
    /// Not a verdict term, but the peer's RDMA probe connects to it: a new
    /// queue pair must reach the peer at once.
    pub rdma_endpoint: Option<meshd_domain::RdmaEndpoint>,
    pub late: bool,
    pub interface_state: meshd_domain::InterfaceState,
    pub carrier: Option<bool>,
    pub gid_matches_address: Option<bool>,
}

impl EndClass {
    pub fn of(o: &LinkObservation, rules: &LinkRules) -> Self {
        Self {
            answered: o.last_reply_at.is_some(),
            silent: o.probes_sent_total > 0
                && o.figures.silence >= rules.silence_counts_after(o.silence_confirmed),
            silence_confirmed: o.silence_confirmed,
            heavy_loss: heavy_loss(o, rules).is_some(),
            lossy: lossy(&o.figures.loss, rules, Excuse::default()).is_some(),
            mtu_lossy: lossy(&o.mtu_loss, rules, Excuse::default()).is_some(),
            slow: slow(&o.figures.rtt, rules, Duration::ZERO),
            slow_cable: slow_cable(o).is_some(),
            rdma_down: rdma_down(o),
            rdma_probe_failing: rdma_probe_failing(o).is_some(),
            rdma_endpoint: o.rdma_endpoint,
            late: EndView::ran_late(o),
            interface_state: o.figures.interface_state,
            carrier: o.carrier,
            gid_matches_address: o.gid_matches_address,
        }
    }
}

/// Turns raw assessments into the reported verdict: down at once (the
/// silence threshold already is the debounce), degraded after it held,
/// recovery only after the link stayed clean, and `flapping` instead of a
/// stream of changes, but never in place of down.
#[derive(Debug, Clone)]
pub struct LinkTracker {
    /// The verdict before flap suppression.
    settled: LinkState,
    /// The raw state and since when it has held.
    raw: LinkState,
    raw_since: Instant,
    /// When the settled state went down from up or degraded, within the
    /// flap window: the link's outages. A degradation is not one: it clears
    /// only after [`CLEAR_AFTER`] clean, so it cannot chatter.
    episodes: VecDeque<Instant>,
    /// Enough outages within the flap window to call the link flapping.
    flapping: bool,
    reported: LinkState,
    reported_since: Instant,
}

impl LinkTracker {
    pub fn new(now: Instant) -> Self {
        Self {
            settled: LinkState::Unknown,
            raw: LinkState::Unknown,
            raw_since: now,
            episodes: VecDeque::new(),
            flapping: false,
            reported: LinkState::Unknown,
            reported_since: now,
        }
    }

    pub fn state(&self) -> LinkState {
        self.reported
    }

    pub fn since(&self) -> Instant {
        self.reported_since
    }

    /// Whether the link has had enough outages within the flap window to
    /// flap (reported down, not flapping, once it stays dark).
    pub fn flapping(&self) -> bool {
        self.flapping
    }

    /// Outages within the flap window.
    pub fn recent_changes(&self) -> u32 {
        u32::try_from(self.episodes.len()).unwrap_or(u32::MAX)
    }

    /// When the settled state would change with no new evidence: a raw state
    /// that has not held long enough yet.
    pub fn pending_until(&self) -> Option<Instant> {
        let wait = match (self.settled, self.raw) {
            (LinkState::Down, LinkState::Up | LinkState::Degraded) => UP_AFTER,
            (LinkState::Up | LinkState::Unknown, LinkState::Degraded) => DEGRADED_AFTER,
            (LinkState::Degraded, LinkState::Up) => CLEAR_AFTER,
            (LinkState::Down, LinkState::Down) if self.flapping => DOWN_WHILE_FLAPPING,
            _ => return None,
        };
        self.raw_since.checked_add(wait)
    }

    /// Why the reported state is not what the link looks like right now,
    /// and how long that lasts if nothing changes: a degradation clearing,
    /// a down link answering again, a flapping link up for the moment.
    /// `None` when the report is what the link looks like.
    pub fn holding(&self, now: Instant, rules: &LinkRules) -> Option<String> {
        let held = now.saturating_duration_since(self.raw_since);
        let left = |wait: Duration| human::duration(wait.saturating_sub(held));
        match (self.reported, self.raw) {
            (LinkState::Degraded, LinkState::Up) => Some(format!(
                "clean again for {}: called up after {} clean, in {}",
                human::duration(held),
                human::duration(CLEAR_AFTER),
                left(CLEAR_AFTER)
            )),
            (LinkState::Down, LinkState::Up | LinkState::Degraded) => Some(format!(
                "answering again for {}: called up after {} of replies, in {}",
                human::duration(held),
                human::duration(UP_AFTER),
                left(UP_AFTER)
            )),
            (LinkState::Flapping, LinkState::Up | LinkState::Degraded) => {
                // Flapping ends when enough outages have left the window.
                let needed = rules.flap_episodes();
                let ends = self
                    .episodes
                    .len()
                    .checked_sub(needed)
                    .and_then(|i| self.episodes.get(i))
                    .and_then(|t| t.checked_add(rules.flap_window))?;
                Some(format!(
                    "{} outages within {}; up right now, and called up in {} if it stays up",
                    self.episodes.len(),
                    human::duration(rules.flap_window),
                    human::duration(ends.saturating_duration_since(now))
                ))
            }
            _ => None,
        }
    }

    /// Feeds one raw assessment; returns the reported state.
    pub fn update(&mut self, raw: LinkState, now: Instant, rules: &LinkRules) -> LinkState {
        if raw != self.raw {
            self.raw = raw;
            self.raw_since = now;
        }
        let held = now.saturating_duration_since(self.raw_since);
        let next = settle(self.settled, raw, held);
        if next != self.settled {
            let outage = next == LinkState::Down
                && matches!(self.settled, LinkState::Up | LinkState::Degraded);
            if outage {
                self.episodes.push_back(now);
            }
            self.settled = next;
        }
        while self
            .episodes
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > rules.flap_window)
        {
            self.episodes.pop_front();
        }
        self.flapping = self.episodes.len() >= rules.flap_episodes();
        let reported = match self.settled {
            LinkState::Down if self.flapping && held < DOWN_WHILE_FLAPPING => LinkState::Flapping,
            LinkState::Down | LinkState::Unknown => self.settled,
            _ if self.flapping => LinkState::Flapping,
            settled => settled,
        };
        if reported != self.reported {
            self.reported = reported;
            self.reported_since = now;
        }
        reported
    }

    /// Forgets the evidence without counting an episode: used while the
    /// verdict is held back (no quorum, an end's node down) so that what
    /// follows starts clean.
    pub fn hold_unknown(&mut self, now: Instant) {
        self.settled = LinkState::Unknown;
        self.raw = LinkState::Unknown;
        self.raw_since = now;
        if self.reported != LinkState::Unknown {
            self.reported = LinkState::Unknown;
            self.reported_since = now;
        }
    }

    /// An end restarted: its history is not the link's.
    pub fn restart(&mut self, now: Instant) {
        self.hold_unknown(now);
        self.episodes.clear();
        self.flapping = false;
    }
}

/// The settled state given the previous one and how long `raw` has held.
fn settle(settled: LinkState, raw: LinkState, held: Duration) -> LinkState {
    use LinkState::{Degraded, Down, Flapping, Unknown, Up};
    match (settled, raw) {
        (_, Down) => Down,
        (_, Unknown) => Unknown,
        // A link judged afresh (at start, after an end's restart or its
        // node's return) holds a degradation as long as an up link does:
        // the moment before the peer's first reply is not a degradation.
        (Unknown, Degraded) if held < DEGRADED_AFTER => Unknown,
        (Unknown, r) => r,
        (Down, Up | Degraded) if held >= UP_AFTER => raw,
        (Down, _) => Down,
        (Up, Degraded) if held >= DEGRADED_AFTER => Degraded,
        (Degraded, Up) if held >= CLEAR_AFTER => Up,
        (s, Up | Degraded) if s == raw => s,
        (Flapping, r) => r,
        (s, _) => s,
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::{LinkFigures, LossWindow, RdmaProbe, RttSummary};

    use super::*;
    use crate::fixtures::{healthy_observation, instant_ms, link_rules};
    use crate::rdma::RDMA_PROBE_FAILURES_FOR_DEGRADED;

    fn silent(for_ms: u64) -> LinkObservation {
        LinkObservation {
            figures: LinkFigures {
                silence: Duration::from_millis(for_ms),
                ..healthy_observation("a", "b").figures
            },
            consecutive_lost: 7,
            silence_confirmed: false,
            ..healthy_observation("a", "b")
        }
    }

    fn view<'a>(node: &'a str, o: &'a LinkObservation) -> EndView<'a> {
        EndView {
            node,
            observation: o,
            confirmed_silence: Duration::ZERO,
            previous_life: Duration::ZERO,
            far_life: None,
            late: EndView::ran_late(o),
            excuse: Excuse::default(),
            rtt_shared: false,
            rdma_shared: false,
            carrier_stale: false,
        }
    }

    #[test]
    fn loss_a_stall_explains_is_excused_and_loss_beyond_it_is_not() {
        let with_loss = |lost| LinkObservation {
            figures: LinkFigures {
                loss: vec![LossWindow {
                    window: MEDIUM_WINDOW,
                    sent: 100,
                    lost,
                }],
                ..healthy_observation("a", "b").figures
            },
            ..healthy_observation("a", "b")
        };
        let (quiet, stalled) = (healthy_observation("a", "b"), with_loss(9));
        let excused = |ms| EndView {
            excuse: Excuse {
                worst: Duration::from_millis(ms),
                late_for: Duration::from_millis(ms),
                over: MEDIUM_WINDOW,
            },
            ..view("b", &stalled)
        };
        // 800 ms at 10 probes a second: 8 probes and the one in flight.
        let verdict = assess(&[view("a", &quiet), excused(800)], &link_rules());
        assert_eq!(verdict.state, LinkState::Up, "{:?}", verdict.evidence);
        let verdict = assess(&[view("a", &quiet), excused(300)], &link_rules());
        assert_eq!(verdict.state, LinkState::Degraded);
        assert!(
            verdict
                .evidence
                .iter()
                .any(|e| e.contains("4 of them excused by 300ms of lateness")),
            "{:?}",
            verdict.evidence
        );
        let verdict = assess(&[view("a", &quiet), excused(0)], &link_rules());
        assert_eq!(verdict.state, LinkState::Degraded);
    }

    #[test]
    fn healthy_ends_are_up() {
        let (a, b) = (healthy_observation("a", "b"), healthy_observation("a", "b"));
        let verdict = assess(&[view("a", &a), view("b", &b)], &link_rules());
        assert_eq!(verdict.state, LinkState::Up);
        assert!(verdict.evidence.is_empty());
    }

    /// An end `silent_ms` without a reply, with `carrier` on its port.
    fn carrier(silent_ms: u64, carrier: Option<bool>) -> LinkObservation {
        LinkObservation {
            carrier,
            consecutive_lost: 0,
            silence_confirmed: false,
            local: meshd_domain::LinkEnd {
                iface: Some("en2".into()),
                ..healthy_observation("a", "b").local
            },
            ..silent(silent_ms)
        }
    }

    #[test]
    fn a_carrier_lost_at_both_ends_is_down_at_once() {
        let (a, b) = (carrier(20, Some(false)), carrier(40, Some(false)));
        let verdict = assess(&[view("a", &a), view("b", &b)], &link_rules());
        assert_eq!(verdict.state, LinkState::Down);
        assert!(verdict.every_end_silent);
        assert_eq!(
            verdict.evidence,
            [
                "a: no carrier on en2 (the cable is out, or the far end's port is off)",
                "b: no carrier on en2 (the cable is out, or the far end's port is off)",
            ]
        );
        // Late ends cannot hide it: the kernel's event is no lateness.
        let late = |o: &LinkObservation| LinkObservation {
            lateness: Duration::from_millis(900),
            ..o.clone()
        };
        let (a, b) = (late(&a), late(&b));
        let verdict = assess(&[view("a", &a), view("b", &b)], &link_rules());
        assert_eq!(verdict.state, LinkState::Down, "{:?}", verdict.evidence);
        // Only one end reports (the other node is not heard): its carrier
        // is the evidence there is.
        let verdict = assess(&[view("a", &a)], &link_rules());
        assert_eq!(verdict.state, LinkState::Down);
    }

    #[test]
    fn a_carrier_lost_at_one_end_waits_for_the_other_ends_silence() {
        let rules = link_rules();
        let confirm = rules.tick_gap.saturating_mul(2);
        let ms = |d: Duration| u64::try_from(d.as_millis()).expect("ms");
        let gone = carrier(20, Some(false));
        // The far end still hears replies: no verdict from one event alone.
        for far_carrier in [Some(true), None] {
            let answering = carrier(50, far_carrier);
            let verdict = assess(&[view("a", &gone), view("b", &answering)], &rules);
            assert_eq!(verdict.state, LinkState::Up, "{:?}", verdict.evidence);
        }
        // Two ticks of the far end's silence confirm it, long before
        // `down_after`.
        assert!(confirm < rules.down_after);
        let quiet = carrier(ms(confirm), Some(true));
        let verdict = assess(&[view("a", &gone), view("b", &quiet)], &rules);
        assert_eq!(verdict.state, LinkState::Down, "{:?}", verdict.evidence);
        assert_eq!(
            verdict.evidence[1],
            format!("b: no reply for {}", fmt_duration(confirm))
        );
        // Without a carrier event the same silence is not enough.
        let (a, b) = (carrier(ms(confirm), None), carrier(ms(confirm), Some(true)));
        let verdict = assess(&[view("a", &a), view("b", &b)], &rules);
        assert_eq!(verdict.state, LinkState::Up, "{:?}", verdict.evidence);
    }

    #[test]
    fn both_ends_silent_is_down_with_evidence() {
        let (a, b) = (silent(700), silent(650));
        let verdict = assess(&[view("a", &a), view("b", &b)], &link_rules());
        assert_eq!(verdict.state, LinkState::Down);
        assert_eq!(
            verdict.evidence,
            vec![
                "a: no reply for 700ms (7 probes lost in a row)".to_owned(),
                "b: no reply for 650ms (7 probes lost in a row)".to_owned(),
            ]
        );
    }

    #[test]
    fn silence_a_stall_explains_is_no_evidence_and_silence_beyond_it_is() {
        // Both ends silent for 991 ms after one of them stalled 500 ms: the
        // stalled end answered nothing meanwhile.
        let (a, d) = (silent(991), silent(991));
        let excused = |o, worst| EndView {
            excuse: Excuse {
                worst,
                late_for: worst,
                over: MEDIUM_WINDOW,
            },
            ..view("a", o)
        };
        let stall = Duration::from_millis(500);
        let verdict = assess(&[excused(&a, stall), excused(&d, stall)], &link_rules());
        assert_eq!(verdict.state, LinkState::Up, "{:?}", verdict.evidence);
        let (a, d) = (silent(1_200), silent(1_150));
        let verdict = assess(&[excused(&a, stall), excused(&d, stall)], &link_rules());
        assert_eq!(verdict.state, LinkState::Down);
        assert_eq!(
            verdict.evidence[0],
            "a: no reply for 1.2s (7 probes lost in a row), past 500ms of lateness"
        );
    }

    #[test]
    fn silence_the_end_confirmed_since_adds_to_it() {
        let (a, b) = (silent(700), silent(300));
        let mut far = view("b", &b);
        assert_eq!(
            assess(&[view("a", &a), far], &link_rules()).state,
            LinkState::Degraded
        );
        far.confirmed_silence = Duration::from_millis(300);
        assert_eq!(
            assess(&[view("a", &a), far], &link_rules()).state,
            LinkState::Down
        );
    }

    /// A silence a burst confirmed counts at `Confirmation::silence`
    /// (388 ms at the default period), at both ends; unconfirmed the same
    /// silence is nothing yet, and one confirmed end is only degraded.
    #[test]
    fn a_silence_a_burst_confirmed_counts_before_down_after() {
        let rules = link_rules();
        let counts = rules.silence_counts_after(true);
        assert_eq!(counts, Duration::from_millis(388));
        let ms = u64::try_from(counts.as_millis()).expect("ms");
        let confirmed = |ms| LinkObservation {
            silence_confirmed: true,
            ..silent(ms)
        };
        let (a, b) = (confirmed(ms), confirmed(ms));
        assert_eq!(
            assess(&[view("a", &a), view("b", &b)], &rules).state,
            LinkState::Down
        );
        let (a, b) = (silent(ms), silent(ms));
        assert_eq!(
            assess(&[view("a", &a), view("b", &b)], &rules).state,
            LinkState::Up
        );
        let (a, b) = (confirmed(ms), silent(ms));
        assert_eq!(
            assess(&[view("a", &a), view("b", &b)], &rules).state,
            LinkState::Degraded
        );
        // Never later than `down_after`, whatever the period.
        let slow = LinkRules {
            probe_interval: Duration::from_secs(1),
            ..rules
        };
        assert_eq!(slow.silence_counts_after(true), slow.down_after);
    }

    #[test]
    fn one_silent_end_is_degraded_not_down() {
        let (a, b) = (silent(2_000), healthy_observation("a", "b"));
        let verdict = assess(&[view("a", &a), view("b", &b)], &link_rules());
        assert_eq!(verdict.state, LinkState::Degraded);
        assert!(
            verdict
                .evidence
                .contains(&"only one end is silent".to_owned())
        );
    }

    #[test]
    fn a_single_observing_end_decides_alone() {
        let a = silent(700);
        assert_eq!(
            assess(&[view("a", &a)], &link_rules()).state,
            LinkState::Down
        );
    }

    /// Silence only counts probes that were sent and went unanswered, so a
    /// late end's silence is evidence like anyone's once it outlasts what
    /// the end needs to notice an answer (two late ticks); its loss is not.
    #[test]
    fn a_late_ends_silence_counts_but_its_loss_does_not() {
        let late = |o: LinkObservation| LinkObservation {
            lateness: Duration::from_millis(300),
            ..o
        };
        // 600 ms, and two ticks of 128 + 300 ms.
        let (a, b) = (late(silent(1_400)), silent(1_400));
        assert_eq!(
            assess(&[view("a", &a), view("b", &b)], &link_rules()).state,
            LinkState::Degraded,
            "the late end may not have read the replies yet"
        );
        let (a, b) = (late(silent(1_500)), silent(1_500));
        assert_eq!(
            assess(&[view("a", &a), view("b", &b)], &link_rules()).state,
            LinkState::Down
        );
        let evidence = assess(&[view("a", &a), view("b", &b)], &link_rules()).evidence;
        assert_eq!(evidence[0], "a: no reply for 1.5s (7 probes lost in a row)");
    }

    #[test]
    fn heavy_loss_on_both_ends_is_down() {
        let lossy = LinkObservation {
            figures: LinkFigures {
                loss: vec![LossWindow {
                    window: SHORT_WINDOW,
                    sent: 10,
                    lost: 6,
                }],
                ..healthy_observation("a", "b").figures
            },
            ..healthy_observation("a", "b")
        };
        let verdict = assess(&[view("a", &lossy), view("b", &lossy)], &link_rules());
        assert_eq!(verdict.state, LinkState::Down);
        assert_eq!(
            verdict.evidence[0],
            "a: 60% of probes lost over the last 1s"
        );
    }

    #[test]
    fn a_saturated_end_loss_does_not_make_a_link_down() {
        let lossy = LinkObservation {
            figures: LinkFigures {
                loss: vec![LossWindow {
                    window: SHORT_WINDOW,
                    sent: 10,
                    lost: 8,
                }],
                ..healthy_observation("a", "b").figures
            },
            ..healthy_observation("a", "b")
        };
        let mut busy = view("a", &lossy);
        busy.late = true;
        let verdict = assess(&[busy, view("b", &lossy)], &link_rules());
        assert_ne!(verdict.state, LinkState::Down, "{verdict:?}");
    }

    #[test]
    fn moderate_loss_slow_rtt_low_speed_and_rdma_down_are_degraded() {
        let b = healthy_observation("a", "b");
        let cases = [
            LinkObservation {
                figures: LinkFigures {
                    loss: vec![LossWindow {
                        window: MEDIUM_WINDOW,
                        sent: 100,
                        lost: 5,
                    }],
                    ..healthy_observation("a", "b").figures
                },
                ..healthy_observation("a", "b")
            },
            LinkObservation {
                mtu_loss: vec![LossWindow {
                    window: MEDIUM_WINDOW,
                    sent: 10,
                    lost: 3,
                }],
                ..healthy_observation("a", "b")
            },
            LinkObservation {
                figures: LinkFigures {
                    rtt: RttSummary {
                        p90: Duration::from_millis(40),
                        p99: Duration::from_millis(50),
                        ..healthy_observation("a", "b").figures.rtt
                    },
                    ..healthy_observation("a", "b").figures
                },
                ..healthy_observation("a", "b")
            },
            LinkObservation {
                figures: LinkFigures {
                    negotiated_speed_bps: Some(40_000_000_000),
                    expected_speed_bps: Some(80_000_000_000),
                    ..healthy_observation("a", "b").figures
                },
                ..healthy_observation("a", "b")
            },
            LinkObservation {
                figures: LinkFigures {
                    rdma_port_state: RdmaPortState::Down,
                    ..healthy_observation("a", "b").figures
                },
                ..healthy_observation("a", "b")
            },
        ];
        for a in &cases {
            let verdict = assess(&[view("a", a), view("b", &b)], &link_rules());
            assert_eq!(verdict.state, LinkState::Degraded, "{a:?}");
            assert_eq!(verdict.evidence.len(), 1, "{verdict:?}");
        }
    }

    #[test]
    fn a_failing_rdma_path_beside_a_working_ip_path_is_degraded_naming_rdma() {
        let probe = |failures| RdmaProbe {
            last_rtt: Some(Duration::from_micros(30)),
            consecutive_failures: failures,
            last_ok_at: None,
            probes_sent_total: 20,
            probes_failed_total: u64::from(failures),
        };
        let failing = LinkObservation {
            rdma_probe: Some(probe(RDMA_PROBE_FAILURES_FOR_DEGRADED)),
            ..healthy_observation("a", "b")
        };
        let b = healthy_observation("a", "b");
        let verdict = assess(&[view("a", &failing), view("b", &b)], &link_rules());
        assert_eq!(verdict.state, LinkState::Degraded);
        assert_eq!(
            verdict.evidence,
            ["a: RDMA probes fail (3 in a row) while IP probes get through"]
        );

        let a_miss = LinkObservation {
            rdma_probe: Some(probe(RDMA_PROBE_FAILURES_FOR_DEGRADED - 1)),
            ..healthy_observation("a", "b")
        };
        assert_eq!(
            assess(&[view("a", &a_miss), view("b", &b)], &link_rules()).state,
            LinkState::Up
        );

        // Both paths dead: a pulled cable, down rather than degraded.
        let (a, b) = (
            LinkObservation {
                rdma_probe: Some(probe(10)),
                ..silent(2_000)
            },
            silent(2_000),
        );
        assert_eq!(
            assess(&[view("a", &a), view("b", &b)], &link_rules()).state,
            LinkState::Down
        );
    }

    #[test]
    fn a_few_lost_probes_are_noise_and_a_late_end_loss_counts_beyond_its_excuse() {
        let b = healthy_observation("a", "b");
        let one_late_mtu_probe = LinkObservation {
            mtu_loss: vec![LossWindow {
                window: MEDIUM_WINDOW,
                sent: 10,
                lost: 1,
            }],
            ..healthy_observation("a", "b")
        };
        let verdict = assess(
            &[view("a", &one_late_mtu_probe), view("b", &b)],
            &link_rules(),
        );
        assert_eq!(verdict.state, LinkState::Up, "{verdict:?}");

        let lossy = LinkObservation {
            figures: LinkFigures {
                loss: vec![LossWindow {
                    window: MEDIUM_WINDOW,
                    sent: 100,
                    lost: 20,
                }],
                ..healthy_observation("a", "b").figures
            },
            ..healthy_observation("a", "b")
        };
        // Late, but by less than the timeout: every request was answered
        // in time, so the loss is the cable's.
        let mut busy = view("a", &lossy);
        busy.late = true;
        busy.excuse = Excuse {
            worst: Duration::from_millis(40),
            late_for: Duration::from_millis(40),
            over: MEDIUM_WINDOW,
        };
        let verdict = assess(&[busy, view("b", &b)], &link_rules());
        assert_eq!(verdict.state, LinkState::Degraded, "{verdict:?}");
        // Late past the timeout for two seconds: 21 probes explained.
        busy.excuse.late_for = Duration::from_secs(2);
        let verdict = assess(&[busy, view("b", &b)], &link_rules());
        assert_eq!(verdict.state, LinkState::Up, "{verdict:?}");
    }

    #[test]
    fn a_saturated_end_rtt_is_not_evidence() {
        let a = LinkObservation {
            figures: LinkFigures {
                rtt: RttSummary {
                    p90: Duration::from_millis(40),
                    p99: Duration::from_millis(50),
                    ..healthy_observation("a", "b").figures.rtt
                },
                ..healthy_observation("a", "b").figures
            },
            ..healthy_observation("a", "b")
        };
        let mut busy = view("a", &a);
        busy.late = true;
        assert_eq!(assess(&[busy], &link_rules()).state, LinkState::Up);

        // Measured by a node on time, towards a late node: the late node's
        // replies are what is slow, not the cable.
        let b = healthy_observation("a", "b");
        let mut late_far_end = view("b", &b);
        late_far_end.late = true;
        assert_eq!(
            assess(&[view("a", &a), late_far_end], &link_rules()).state,
            LinkState::Up
        );
        assert_eq!(
            assess(&[view("a", &a), view("b", &b)], &link_rules()).state,
            LinkState::Degraded,
            "with both ends on time the RTT counts"
        );
    }

    #[test]
    fn a_few_late_replies_move_the_tail_and_are_not_a_slow_cable() {
        let spiky = LinkObservation {
            figures: LinkFigures {
                rtt: RttSummary {
                    p99: Duration::from_millis(3),
                    ..healthy_observation("a", "b").figures.rtt
                },
                ..healthy_observation("a", "b").figures
            },
            ..healthy_observation("a", "b")
        };
        assert_eq!(
            assess(&[view("a", &spiky)], &link_rules()).state,
            LinkState::Up
        );
        let slow = LinkObservation {
            figures: LinkFigures {
                rtt: RttSummary {
                    p90: Duration::from_millis(2),
                    ..spiky.figures.rtt
                },
                ..healthy_observation("a", "b").figures
            },
            ..healthy_observation("a", "b")
        };
        let verdict = assess(&[view("a", &slow)], &link_rules());
        assert_eq!(verdict.state, LinkState::Degraded);
        assert_eq!(
            verdict.evidence,
            ["a: RTT p90 2.0ms (p99 3.0ms) against a baseline p99 of 100µs"]
        );
    }

    #[test]
    fn small_rtt_rises_are_jitter_not_degradation() {
        let a = LinkObservation {
            figures: LinkFigures {
                rtt: RttSummary {
                    p90: Duration::from_micros(900),
                    p99: Duration::from_micros(950),
                    ..healthy_observation("a", "b").figures.rtt
                },
                ..healthy_observation("a", "b").figures
            },
            ..healthy_observation("a", "b")
        };
        assert_eq!(
            assess(&[view("a", &a)], &link_rules()).state,
            LinkState::Up,
            "9x but < 1 ms"
        );
    }

    #[test]
    fn never_answered_is_unknown() {
        let a = LinkObservation {
            figures: LinkFigures {
                silence: Duration::from_millis(100),
                ..healthy_observation("a", "b").figures
            },
            last_reply_at: None,
            ..healthy_observation("a", "b")
        };
        assert_eq!(
            assess(&[view("a", &a)], &link_rules()).state,
            LinkState::Unknown
        );
    }

    #[test]
    fn tracker_goes_down_at_once_and_recovers_after_a_clean_second() {
        let mut t = LinkTracker::new(instant_ms(0));
        assert_eq!(
            t.update(LinkState::Up, instant_ms(0), &link_rules()),
            LinkState::Up
        );
        assert_eq!(
            t.update(LinkState::Down, instant_ms(100), &link_rules()),
            LinkState::Down
        );
        assert_eq!(t.since(), instant_ms(100));
        assert_eq!(
            t.update(LinkState::Up, instant_ms(200), &link_rules()),
            LinkState::Down
        );
        assert_eq!(
            t.update(LinkState::Up, instant_ms(1_100), &link_rules()),
            LinkState::Down
        );
        assert_eq!(
            t.update(LinkState::Up, instant_ms(1_200), &link_rules()),
            LinkState::Up
        );
        assert_eq!(t.recent_changes(), 1, "one outage");
    }

    #[test]
    fn tracker_needs_degradation_to_hold_and_to_clear() {
        let mut t = LinkTracker::new(instant_ms(0));
        t.update(LinkState::Up, instant_ms(0), &link_rules());
        assert_eq!(
            t.update(LinkState::Degraded, instant_ms(100), &link_rules()),
            LinkState::Up
        );
        assert_eq!(
            t.update(LinkState::Up, instant_ms(200), &link_rules()),
            LinkState::Up,
            "a blip"
        );
        assert_eq!(
            t.update(LinkState::Degraded, instant_ms(300), &link_rules()),
            LinkState::Up
        );
        assert_eq!(
            t.update(LinkState::Degraded, instant_ms(800), &link_rules()),
            LinkState::Degraded
        );
        assert_eq!(
            t.update(LinkState::Up, instant_ms(900), &link_rules()),
            LinkState::Degraded
        );
        assert_eq!(
            t.holding(instant_ms(2_900), &link_rules()).as_deref(),
            Some("clean again for 2.0s: called up after 5.0s clean, in 3.0s"),
            "a held verdict says what it waits for"
        );
        assert_eq!(
            t.update(LinkState::Up, instant_ms(5_900), &link_rules()),
            LinkState::Up
        );
        assert_eq!(t.holding(instant_ms(5_900), &link_rules()), None);
    }

    #[test]
    fn a_link_judged_afresh_holds_a_degradation_like_an_up_link() {
        let mut t = LinkTracker::new(instant_ms(0));
        // The peer's first reply is a moment away: not a degradation.
        assert_eq!(
            t.update(LinkState::Degraded, instant_ms(0), &link_rules()),
            LinkState::Unknown
        );
        assert_eq!(t.pending_until(), Some(instant_ms(500)));
        assert_eq!(
            t.update(LinkState::Up, instant_ms(200), &link_rules()),
            LinkState::Up
        );
        t.restart(instant_ms(1_000));
        assert_eq!(
            t.update(LinkState::Degraded, instant_ms(1_000), &link_rules()),
            LinkState::Unknown
        );
        assert_eq!(
            t.update(LinkState::Degraded, instant_ms(1_500), &link_rules()),
            LinkState::Degraded,
            "a lasting one is"
        );
        t.restart(instant_ms(2_000));
        assert_eq!(
            t.update(LinkState::Down, instant_ms(2_000), &link_rules()),
            LinkState::Down,
            "down needs no wait"
        );
    }

    #[test]
    fn tracker_reports_flapping_instead_of_each_change_and_calms_down() {
        let mut t = LinkTracker::new(instant_ms(0));
        let mut reported = Vec::new();
        let mut now = 0;
        t.update(LinkState::Up, instant_ms(now), &link_rules());
        for _ in 0..4 {
            now += 100;
            reported.push(t.update(LinkState::Down, instant_ms(now), &link_rules()));
            now += 1_100;
            t.update(LinkState::Up, instant_ms(now - 1_000), &link_rules());
            reported.push(t.update(LinkState::Up, instant_ms(now), &link_rules()));
        }
        // The second outage within the window makes it flapping; further
        // swings, down and up, change nothing.
        assert_eq!(
            reported,
            [
                LinkState::Down,
                LinkState::Up,
                LinkState::Flapping,
                LinkState::Flapping,
                LinkState::Flapping,
                LinkState::Flapping,
                LinkState::Flapping,
                LinkState::Flapping,
            ],
        );
        // Quiet for a whole flap window: back to the plain verdict.
        assert_eq!(
            t.update(LinkState::Up, instant_ms(now + 61_000), &link_rules()),
            LinkState::Up
        );
    }

    #[test]
    fn flapping_never_hides_a_link_that_stays_down() {
        let mut t = LinkTracker::new(instant_ms(0));
        let mut now = 0;
        t.update(LinkState::Up, instant_ms(now), &link_rules());
        for _ in 0..2 {
            now += 100;
            t.update(LinkState::Down, instant_ms(now), &link_rules());
            now += 1_100;
            t.update(LinkState::Up, instant_ms(now - 1_000), &link_rules());
            t.update(LinkState::Up, instant_ms(now), &link_rules());
        }
        assert_eq!(t.state(), LinkState::Flapping);
        let died = now + 100;
        assert_eq!(
            t.update(LinkState::Down, instant_ms(died), &link_rules()),
            LinkState::Flapping
        );
        let due = t.pending_until().expect("a deadline to report it down");
        assert_eq!(due, instant_ms(died) + DOWN_WHILE_FLAPPING);
        assert_eq!(
            t.update(LinkState::Down, due, &link_rules()),
            LinkState::Down
        );
    }

    #[test]
    fn holding_back_forgets_without_counting_a_swing() {
        let mut t = LinkTracker::new(instant_ms(0));
        t.update(LinkState::Up, instant_ms(0), &link_rules());
        t.hold_unknown(instant_ms(100));
        assert_eq!(t.state(), LinkState::Unknown);
        assert_eq!(
            t.update(LinkState::Up, instant_ms(200), &link_rules()),
            LinkState::Up
        );
        assert_eq!(t.recent_changes(), 0);
    }
}
