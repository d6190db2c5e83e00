//! The clock offset between this node and each peer, measured the way NTP
//! does from the replies on its report streams: the update's send time
//! (this node's clock), the peer's receive and reply times (its clock), the
//! reply's arrival (this node's again). Offsets are shown and alarmed on
//! (`clock_skew`), never used in a decision: freshness is judged on each
//! node's own monotonic clock.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{ClockOffset, ClockSample, NodeId};

/// Samples older than this are dropped.
const MEMORY: Duration = Duration::from_secs(60);

/// Samples kept per peer.
const KEPT: usize = 16;

/// A sample whose round trip is longer than this measures queues, not
/// clocks.
const MAX_RTT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    offset_ns: i64,
    rtt: Duration,
}

#[derive(Debug, Default)]
pub struct ClockBook {
    samples: BTreeMap<NodeId, VecDeque<Sample>>,
}

fn nanos_since_epoch(t: SystemTime) -> Option<i128> {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i128::try_from(d.as_nanos()).ok()
}

impl ClockBook {
    /// A reply from `peer` carrying `sample` arrived at `arrived` (this
    /// node's wall clock) and `now` (its monotonic one).
    pub fn on_sample(
        &mut self,
        peer: &NodeId,
        sample: ClockSample,
        arrived: SystemTime,
        now: Instant,
    ) {
        let (Some(t1), Some(t2), Some(t3), Some(t4)) = (
            nanos_since_epoch(sample.echoed),
            nanos_since_epoch(sample.received),
            nanos_since_epoch(sample.replied),
            nanos_since_epoch(arrived),
        ) else {
            return;
        };
        if t3 < t2 || t4 < t1 {
            return;
        }
        let rtt = (t4 - t1) - (t3 - t2);
        let Ok(rtt_ns) = u64::try_from(rtt) else {
            return;
        };
        let rtt = Duration::from_nanos(rtt_ns);
        if rtt > MAX_RTT {
            return;
        }
        let Ok(offset_ns) = i64::try_from(((t2 - t1) + (t3 - t4)) / 2) else {
            return;
        };
        let kept = self.samples.entry(peer.clone()).or_default();
        if kept.len() >= KEPT {
            kept.pop_front();
        }
        kept.push_back(Sample {
            at: now,
            offset_ns,
            rtt,
        });
    }

    /// Forgets peers that left the mesh.
    pub fn retain(&mut self, members: impl Fn(&NodeId) -> bool) {
        self.samples.retain(|peer, _| members(peer));
    }

    /// Each peer's offset: the recent sample with the shortest round trip,
    /// whose error is at most half of it.
    pub fn offsets(&mut self, now: Instant) -> Vec<ClockOffset> {
        let mut out = Vec::new();
        for (peer, kept) in &mut self.samples {
            kept.retain(|s| now.saturating_duration_since(s.at) < MEMORY);
            if let Some(best) = kept.iter().min_by_key(|s| s.rtt) {
                out.push(ClockOffset {
                    peer: peer.clone(),
                    offset_ns: best.offset_ns,
                    rtt: best.rtt,
                });
            }
        }
        self.samples.retain(|_, kept| !kept.is_empty());
        out
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, wall_ms};

    use super::*;

    #[test]
    fn the_offset_is_the_peers_clock_minus_ours_from_the_best_round_trip() {
        let t0 = crate::fixtures::epoch();
        let peer = id("b");
        let mut book = ClockBook::default();
        // b's clock is 15 s behind ours; 2 ms each way, 1 ms in b.
        let behind = Duration::from_secs(15);
        book.on_sample(
            &peer,
            ClockSample {
                echoed: wall_ms(0),
                received: wall_ms(2) - behind,
                replied: wall_ms(3) - behind,
            },
            wall_ms(5),
            t0,
        );
        // A slower sample (100 ms each way) says the same less precisely.
        book.on_sample(
            &peer,
            ClockSample {
                echoed: wall_ms(1_000),
                received: wall_ms(1_140) - behind,
                replied: wall_ms(1_141) - behind,
            },
            wall_ms(1_201),
            t0,
        );
        let offsets = book.offsets(t0);
        assert_eq!(offsets.len(), 1);
        assert_eq!(offsets[0].offset_ns, -15_000_000_000);
        assert_eq!(offsets[0].rtt, Duration::from_millis(4));
        // Samples age out.
        assert!(book.offsets(t0 + MEMORY).is_empty());
    }

    #[test]
    fn nonsense_samples_are_dropped() {
        let t0 = crate::fixtures::epoch();
        let peer = id("b");
        let mut book = ClockBook::default();
        // Replied before it was received, and a year-long round trip.
        book.on_sample(
            &peer,
            ClockSample {
                echoed: wall_ms(0),
                received: wall_ms(10),
                replied: wall_ms(5),
            },
            wall_ms(1),
            t0,
        );
        book.on_sample(
            &peer,
            ClockSample {
                echoed: SystemTime::UNIX_EPOCH,
                received: wall_ms(0),
                replied: wall_ms(0),
            },
            wall_ms(0),
            t0,
        );
        assert!(book.offsets(t0).is_empty());
    }
}
