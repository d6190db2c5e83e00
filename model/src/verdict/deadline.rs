//! When the engine must look again with no new input: a peer turning suspect
//! or stale (its restart grace or a hearsay delay ending), a link's pending
//! hysteresis, silence or hold, or the idle bound.

use std::time::Instant;

use super::{Engine, HEARSAY_DELAY, MAX_IDLE, MeshInputs, RESTART_GRACE};

impl Engine {
    /// When something could change with no new input: a peer turning
    /// suspect or stale (that much later while this node runs late, see
    /// `node_verdict`), a link's pending hysteresis.
    pub(super) fn next_deadline(&self, inputs: &MeshInputs, now: Instant) -> Instant {
        let idle = now + MAX_IDLE;
        let allowance = inputs.lateness_allowance();
        let peers = inputs.peers.values().flat_map(|v| {
            let closed = v.closed_at();
            [
                self.settings.suspect_after,
                self.settings.stale_after,
                RESTART_GRACE,
                self.settings.stale_after + HEARSAY_DELAY,
            ]
            .into_iter()
            .filter_map(move |after| v.received_at.checked_add(after + allowance))
            .chain(closed.and_then(|at| at.checked_add(RESTART_GRACE + allowance)))
        });
        let links = self
            .links
            .values()
            .flat_map(|l| [l.tracker.pending_until(), l.recheck_at])
            .flatten();
        let first_silence = self
            .started
            .and_then(|s| s.checked_add(self.settings.stale_after));
        let settling = self
            .alarm_since
            .keys()
            .filter_map(|(kind, node)| self.settled_at(*kind, node));
        peers
            .chain(links)
            .chain(settling)
            .chain(first_silence)
            .filter(|at| *at > now)
            .min()
            .map_or(idle, |at| at.min(idle))
    }
}
