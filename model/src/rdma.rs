//! The active RDMA probe's decisions, without the verbs calls: whom this
//! end's queue pair should be connected to, whether a probe may go out,
//! and the figures its results add up to. The daemon's prober does the
//! calls (`meshd::probe::rdma`) and feeds the results back here.
//!
//! The two ends learn each other's queue pair from their link
//! observations, which travel on the authenticated report streams. An end
//! probes only once the peer says its queue pair is connected to this
//! end's current one: a restarted end (new queue pair), a paused one or
//! one whose device is gone is never probed through a stale queue pair,
//! so none of those reads as an RDMA failure on the other end.

use std::net::Ipv6Addr;
use std::time::{Duration, SystemTime};

use meshd_domain::{RdmaEndpoint, RdmaProbe};

/// The active RDMA probe (about one a second) must miss this many in a
/// row before the RDMA path counts as failing: one lost UC message is not
/// a broken queue pair.
pub const RDMA_PROBE_FAILURES_FOR_DEGRADED: u32 = 3;

/// What this end's RDMA probe of one link shows the verdicts and the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaProbeEnd {
    /// This end's queue pair, while it is open.
    pub endpoint: Option<RdmaEndpoint>,
    /// The probe's figures, while it probes (or cannot open its device).
    pub probe: Option<RdmaProbe>,
}

/// What to do about the peer's queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partner {
    /// The peer shows no usable queue pair: its probe is off or paused,
    /// it is not heard, or it has not opened its device.
    Absent,
    /// The peer's queue pair claims a GID that is not the peer's address
    /// on this cable; it is not connected to.
    WrongGid(Ipv6Addr),
    /// Connect this end's queue pair to this one (again, when the peer's
    /// changed).
    Connect(RdmaEndpoint),
    /// Connected; the peer has not connected its queue pair to this end's
    /// current one yet.
    Waiting,
    /// Both queue pairs are connected to each other: probe.
    Ready,
}

/// The same queue pair: number, first sequence number and GID (what a
/// connection was made with; `connected_qpn` is the peer's business).
fn same_queue_pair(a: &RdmaEndpoint, b: &RdmaEndpoint) -> bool {
    a.qpn == b.qpn && a.psn == b.psn && a.gid == b.gid
}

/// What to do, given this end's queue pair (`own`), the peer queue pair it
/// is connected to (`connected_to`), the GID the peer must send from on
/// this cable, and the peer's queue pair as the peer last reported it
/// (`None` when the peer is not heard now).
pub fn partner(
    own: &RdmaEndpoint,
    connected_to: Option<&RdmaEndpoint>,
    peer_gid: Ipv6Addr,
    peer: Option<&RdmaEndpoint>,
) -> Partner {
    let Some(peer) = peer else {
        return Partner::Absent;
    };
    if peer.gid != peer_gid {
        return Partner::WrongGid(peer.gid);
    }
    if !connected_to.is_some_and(|c| same_queue_pair(c, peer)) {
        return Partner::Connect(*peer);
    }
    if peer.connected_qpn == Some(own.qpn) {
        Partner::Ready
    } else {
        Partner::Waiting
    }
}

/// The outcome of one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    Answered(Duration),
    /// No reply within the wait.
    Unanswered,
    /// The probe could not be sent, or the device could not be opened or
    /// the queue pair connected.
    Failed,
}

/// Adds up one link's probe outcomes; a probe that did not happen (peer
/// absent, paused) is no outcome at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaProbeStats {
    probe: RdmaProbe,
}

impl RdmaProbeStats {
    pub fn record(&mut self, outcome: ProbeOutcome, wall: SystemTime) {
        let probe = &mut self.probe;
        if !matches!(outcome, ProbeOutcome::Failed) {
            probe.probes_sent_total += 1;
        }
        match outcome {
            ProbeOutcome::Answered(rtt) => {
                probe.last_rtt = Some(rtt);
                probe.last_ok_at = Some(wall);
                probe.consecutive_failures = 0;
            }
            ProbeOutcome::Unanswered | ProbeOutcome::Failed => {
                probe.probes_failed_total += 1;
                probe.consecutive_failures = probe.consecutive_failures.saturating_add(1);
            }
        }
    }

    /// The probe stopped for a reason that is not the path's (the peer
    /// went away, a pause): a failing streak must not carry over to when
    /// it starts again.
    pub fn interrupt(&mut self) {
        self.probe.consecutive_failures = 0;
    }

    /// The figures, once anything was recorded.
    pub fn figures(&self) -> Option<RdmaProbe> {
        (self.probe.probes_sent_total > 0 || self.probe.probes_failed_total > 0)
            .then_some(self.probe)
    }
}

/// The probe's failures in a row, when they are enough to be evidence.
pub fn failing_streak(probe: &RdmaProbe) -> Option<u32> {
    Some(probe.consecutive_failures)
        .filter(|failures| *failures >= RDMA_PROBE_FAILURES_FOR_DEGRADED)
}

impl RdmaProbeEnd {
    /// Whether this differs from `before` in what the verdicts or the peer
    /// read (the queue pair, whether the probe runs, a failing streak), not
    /// only in a probe's figures.
    pub fn is_news_against(&self, before: Option<&Self>) -> bool {
        let Some(before) = before else {
            return true;
        };
        let failing = |end: &Self| end.probe.as_ref().and_then(failing_streak).is_some();
        self.endpoint != before.endpoint
            || self.probe.is_some() != before.probe.is_some()
            || failing(self) != failing(before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(qpn: u32, gid: &str, connected: Option<u32>) -> RdmaEndpoint {
        RdmaEndpoint {
            qpn,
            psn: qpn * 7,
            gid: gid.parse().unwrap(),
            connected_qpn: connected,
        }
    }

    const A_GID: &str = "::ffff:10.0.0.1";
    const B_GID: &str = "::ffff:10.0.0.2";

    #[test]
    fn ends_connect_then_probe_only_once_both_are_connected_to_each_other() {
        let b_gid: Ipv6Addr = B_GID.parse().unwrap();
        let own = endpoint(17, A_GID, None);
        assert_eq!(partner(&own, None, b_gid, None), Partner::Absent);

        let peer = endpoint(40, B_GID, None);
        assert_eq!(
            partner(&own, None, b_gid, Some(&peer)),
            Partner::Connect(peer)
        );
        let own = endpoint(17, A_GID, Some(40));
        assert_eq!(
            partner(&own, Some(&peer), b_gid, Some(&peer)),
            Partner::Waiting,
            "the peer is not connected to this end yet"
        );
        let peer_done = endpoint(40, B_GID, Some(17));
        assert_eq!(
            partner(&own, Some(&peer), b_gid, Some(&peer_done)),
            Partner::Ready
        );
        // The peer is still connected to this end's previous queue pair
        // (this end restarted): no probe until it connects to the new one.
        let own_again = endpoint(18, A_GID, Some(40));
        assert_eq!(
            partner(&own_again, Some(&peer), b_gid, Some(&peer_done)),
            Partner::Waiting
        );
    }

    #[test]
    fn a_restarted_peer_is_connected_to_again_and_a_foreign_gid_never() {
        let b_gid: Ipv6Addr = B_GID.parse().unwrap();
        let own = endpoint(17, A_GID, Some(40));
        let old = endpoint(40, B_GID, Some(17));
        let restarted = endpoint(41, B_GID, None);
        assert_eq!(
            partner(&own, Some(&old), b_gid, Some(&restarted)),
            Partner::Connect(restarted)
        );
        // Same number, new sequence: a new queue pair all the same.
        let renumbered = RdmaEndpoint { psn: 5, ..old };
        assert_eq!(
            partner(&own, Some(&old), b_gid, Some(&renumbered)),
            Partner::Connect(renumbered)
        );
        let elsewhere = endpoint(40, "::ffff:10.9.9.9", Some(17));
        assert_eq!(
            partner(&own, Some(&old), b_gid, Some(&elsewhere)),
            Partner::WrongGid("::ffff:10.9.9.9".parse().unwrap())
        );
    }

    #[test]
    fn an_end_is_news_for_its_queue_pair_its_running_and_its_streak_not_its_figures() {
        let probe = |failures| RdmaProbe {
            consecutive_failures: failures,
            probes_sent_total: 10,
            ..RdmaProbe::default()
        };
        let end = RdmaProbeEnd {
            endpoint: Some(endpoint(17, A_GID, Some(40))),
            probe: Some(probe(0)),
        };
        assert!(end.is_news_against(None));
        let counted = RdmaProbeEnd {
            probe: Some(RdmaProbe {
                probes_sent_total: 11,
                last_rtt: Some(Duration::from_micros(30)),
                ..probe(1)
            }),
            ..end
        };
        assert!(!counted.is_news_against(Some(&end)), "only figures moved");
        let failing = RdmaProbeEnd {
            probe: Some(probe(RDMA_PROBE_FAILURES_FOR_DEGRADED)),
            ..end
        };
        assert!(failing.is_news_against(Some(&counted)));
        let paused = RdmaProbeEnd { probe: None, ..end };
        assert!(paused.is_news_against(Some(&end)));
        let reconnected = RdmaProbeEnd {
            endpoint: Some(endpoint(17, A_GID, Some(41))),
            ..end
        };
        assert!(reconnected.is_news_against(Some(&end)));
    }

    #[test]
    fn a_streak_counts_failures_until_an_answer_and_an_interruption_ends_it() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut stats = RdmaProbeStats::default();
        assert_eq!(stats.figures(), None, "nothing probed is nothing known");
        stats.record(ProbeOutcome::Answered(Duration::from_micros(40)), wall);
        stats.record(ProbeOutcome::Unanswered, wall);
        stats.record(ProbeOutcome::Failed, wall);
        let figures = stats.figures().expect("probed");
        assert_eq!(figures.consecutive_failures, 2);
        assert_eq!(figures.probes_sent_total, 2, "a failed send sent nothing");
        assert_eq!(figures.probes_failed_total, 2);
        assert_eq!(figures.last_rtt, Some(Duration::from_micros(40)));
        assert_eq!(figures.last_ok_at, Some(wall));
        stats.interrupt();
        let interrupted = stats.figures().unwrap();
        assert_eq!(interrupted.consecutive_failures, 0);
        assert_eq!(interrupted.probes_failed_total, 2, "totals stay");
        stats.record(ProbeOutcome::Failed, wall);
        stats.record(ProbeOutcome::Answered(Duration::from_micros(30)), wall);
        assert_eq!(stats.figures().unwrap().consecutive_failures, 0);
    }
}
