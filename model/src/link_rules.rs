//! The lines a link verdict is drawn by: the config's thresholds and the
//! windows the prober reports over. Their own module, since the prober's
//! figures, the lateness excuse and the assessment all read them.

use std::time::Duration;

use crate::linkstats::Confirmation;

/// The windows the prober reports, by length.
pub const SHORT_WINDOW: Duration = Duration::from_secs(1);
pub const MEDIUM_WINDOW: Duration = Duration::from_secs(10);
/// The lines the engine draws, from the config's thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkRules {
    pub down_after: Duration,
    pub loss_degraded: f64,
    pub loss_down: f64,
    pub rtt_p99_factor: f64,
    pub rtt_min_increase: Duration,
    pub flap_window: Duration,
    /// Changes between up and down within `flap_window` that make a link
    /// flapping; down and back is two changes, so this many halved is the
    /// number of outages (at least two: one pull and plug of a cable is
    /// never flapping).
    pub flap_changes: u32,
    /// A probe unanswered this long is lost (`probe.timeout`).
    pub probe_timeout: Duration,
    /// How often the prober sends a small probe: how many probes a time
    /// spans, in a window the prober did not probe through (it started
    /// within it).
    pub probe_interval: Duration,
    /// The longest an on-time probe tick waits for the next: a peer's
    /// request waits that long for its answer, and a late tick's lateness
    /// more.
    pub tick_gap: Duration,
}

impl LinkRules {
    /// The silence that counts at an end: `down_after`, or sooner once a
    /// burst sent into it went unanswered ([`crate::linkstats::BURST_PROBES`]).
    pub fn silence_counts_after(&self, confirmed: bool) -> Duration {
        if confirmed {
            Confirmation::new(self.probe_interval, self.tick_gap)
                .silence()
                .min(self.down_after)
        } else {
            self.down_after
        }
    }

    /// Outages within the window that make a link flapping.
    pub(crate) fn flap_episodes(&self) -> usize {
        usize::try_from(self.flap_changes / 2)
            .unwrap_or(usize::MAX)
            .max(2)
    }
}
