//! The two clocks the model is given. Every decision runs on the monotonic
//! one (`Instant`): ages, windows, hysteresis. The wall clock only dates
//! what is shown to people and exported, through [`Moment::wall_of`].

use std::time::{Instant, SystemTime};

/// One moment on both clocks, read together by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    pub now: Instant,
    pub wall: SystemTime,
}

impl Moment {
    /// The wall-clock date of `t`, for display: as long ago on the wall
    /// clock as `t` is on the monotonic one. A step of the wall clock moves
    /// every displayed date, never a decision.
    pub fn wall_of(&self, t: Instant) -> SystemTime {
        let ago = self.now.saturating_duration_since(t);
        self.wall
            .checked_sub(ago)
            .filter(|t| *t >= SystemTime::UNIX_EPOCH)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_past_instant_is_dated_as_long_ago_on_the_wall_clock() {
        let now = crate::fixtures::epoch() + Duration::from_secs(10);
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let m = Moment { now, wall };
        assert_eq!(
            m.wall_of(now - Duration::from_secs(3)),
            wall - Duration::from_secs(3)
        );
        // A future instant is dated now, and nothing is dated before 1970.
        assert_eq!(m.wall_of(now + Duration::from_secs(3)), wall);
        let early = Moment {
            now,
            wall: SystemTime::UNIX_EPOCH,
        };
        assert_eq!(
            early.wall_of(now - Duration::from_secs(3)),
            SystemTime::UNIX_EPOCH
        );
    }
}
