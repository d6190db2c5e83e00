//! File descriptors: the soft limit raised at start-up, and a reserve the
//! listeners leave to the watchers and probes.
//!
//! A flood of connections once took all 1024 descriptors of a node: the
//! CPU and bridge watchers failed with "Too many open files" and the node
//! went blind. The listeners now refuse a connection while the open
//! descriptors are within [`RESERVE`] of the limit, so what the watchers
//! open (a file under /proc, a pipe to a command, a probe socket) always
//! finds a free one.

use std::time::{Duration, Instant};

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Descriptors kept free for the watchers and probes. The facts watcher
/// runs a command at a time (three pipes), the CPU and memory watchers
/// read a few files, each cable holds two probe sockets, a peer stream
/// one: far below this on a mesh of 8 nodes.
pub const RESERVE: u64 = 128;

/// The soft limit meshd raises itself to at most: ample for the listeners'
/// caps and the reserve, and low enough that a leak still shows.
pub const RAISE_TO: u64 = 65_536;

/// The process's descriptor budget: its soft limit and the reserve kept
/// for the watchers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    limit: u64,
    reserve: u64,
}

impl Descriptors {
    /// Raises the soft limit towards the hard one (at most [`RAISE_TO`]),
    /// logs the outcome, and returns the budget with [`RESERVE`]. The
    /// limit is the process's: calling this again (several nodes in one
    /// process) changes nothing.
    pub fn raise() -> Self {
        let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
            Ok(limits) => limits,
            Err(error) => {
                tracing::warn!(%error, "cannot read the file descriptor limit; counting on the default 1024");
                return Self::new(1024, RESERVE);
            }
        };
        let mut target = hard.min(RAISE_TO);
        // macOS refuses more than kern.maxfilesperproc even under an
        // unlimited hard limit: halve until the kernel takes it.
        while target > soft {
            match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
                Ok(()) => {
                    tracing::info!(
                        from = soft,
                        to = target,
                        hard,
                        reserve = RESERVE,
                        "raised the file descriptor limit"
                    );
                    return Self::new(target, RESERVE);
                }
                Err(_) => target /= 2,
            }
        }
        if soft < 4 * RESERVE {
            tracing::warn!(
                limit = soft,
                hard,
                reserve = RESERVE,
                "the file descriptor limit is low: the listeners will refuse connections early (raise LimitNOFILE or NumberOfFiles)"
            );
        }
        Self::new(soft, RESERVE)
    }

    /// The budget under the soft limit in force now, with [`RESERVE`].
    pub fn current() -> Option<Self> {
        let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
        Some(Self::new(soft, RESERVE))
    }

    pub fn new(limit: u64, reserve: u64) -> Self {
        Self { limit, reserve }
    }

    /// The same budget keeping `more` descriptors free besides the reserve:
    /// for a listener that must give way first.
    pub fn keeping(self, more: u64) -> Self {
        Self {
            reserve: self.reserve.saturating_add(more),
            ..self
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn reserve(&self) -> u64 {
        self.reserve
    }

    /// Descriptors free above the reserve now (negative when the reserve
    /// is already eaten into); `None` when they cannot be counted.
    pub fn headroom(&self) -> Option<i64> {
        let free =
            i128::from(self.limit) - i128::from(self.reserve) - i128::from(open_descriptors()?);
        Some(i64::try_from(free).unwrap_or(if free < 0 { i64::MIN } else { i64::MAX }))
    }
}

/// A count taken this long ago still stands, if it was far enough from
/// the line.
const RECOUNT_AFTER: Duration = Duration::from_millis(100);

/// A count stands only this far from the line: what the watchers and the
/// other listeners open within [`RECOUNT_AFTER`] fits in it.
const RECOUNT_MARGIN: u64 = 64;

/// One listener's view of the budget: whether it may take one more
/// connection, the open descriptors leaving the reserve free. They are
/// counted again only when the answer may have changed (near the line, or
/// after [`RECOUNT_AFTER`]): a count lists every open descriptor, a few
/// hundred µs with hundreds open, which per connection would cost a
/// flood's worth of CPU.
#[derive(Debug)]
pub struct Room {
    descriptors: Descriptors,
    /// The last count and when it was taken.
    counted: Option<(Instant, u64)>,
    /// Connections taken since: each may hold one more descriptor.
    taken_since: u64,
}

impl Room {
    pub fn new(descriptors: Descriptors) -> Self {
        Self {
            descriptors,
            counted: None,
            taken_since: 0,
        }
    }

    pub fn descriptors(&self) -> Descriptors {
        self.descriptors
    }

    /// Takes room for one connection, if there is. A count that cannot be
    /// taken (no descriptor left even to list them) is no room.
    pub fn take_one(&mut self) -> bool {
        let Descriptors { limit, reserve } = self.descriptors;
        let now = Instant::now();
        let estimate = self
            .counted
            .filter(|(at, _)| now.duration_since(*at) < RECOUNT_AFTER)
            .map(|(_, open)| open + self.taken_since);
        let clear = estimate.is_some_and(|open| open + RECOUNT_MARGIN + reserve < limit);
        if !clear {
            let Some(open) = open_descriptors() else {
                return false;
            };
            self.counted = Some((now, open));
            self.taken_since = 0;
            if open + reserve >= limit {
                return false;
            }
        }
        self.taken_since += 1;
        true
    }
}

/// How many descriptors this process has open, from the kernel's own list
/// (Linux `/proc/self/fd`, macOS `/dev/fd`); the listing's own descriptor
/// is counted too, which errs on the safe side.
pub fn open_descriptors() -> Option<u64> {
    let dir = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    let entries = std::fs::read_dir(dir).ok()?;
    Some(entries.filter(Result::is_ok).count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_descriptors_are_counted() {
        let before = open_descriptors().expect("countable on Linux and macOS");
        let files: Vec<_> = (0..300)
            .map(|_| tempfile::tempfile().expect("tempfile"))
            .collect();
        let after = open_descriptors().expect("countable");
        // Other tests of this process open and close a few meanwhile.
        assert!(after >= before + 200, "{before} then {after}");
        drop(files);
    }

    /// With wide margins: the other tests of this process open and close
    /// descriptors meanwhile.
    #[test]
    fn there_is_room_only_outside_the_reserve() {
        let open = open_descriptors().expect("countable");
        let take = |d: Descriptors| Room::new(d).take_one();
        assert!(take(Descriptors::new(open + 1000, 10)));
        assert!(!take(Descriptors::new(open + 100, 1000)));
        assert!(!take(Descriptors::new(0, 0)));
        assert!(!take(Descriptors::new(open + 1000, 10).keeping(2000)));
        let headroom = Descriptors::new(open + 1000, 10)
            .headroom()
            .expect("countable");
        assert!((500..=990).contains(&headroom), "{headroom}");
        assert!(Descriptors::new(0, 10).headroom().expect("countable") < 0);
    }

    /// Far from the line one count serves many connections.
    #[test]
    fn far_from_the_line_one_count_serves_many() {
        let mut room = Room::new(Descriptors::new(u64::MAX / 2, 0));
        assert!(room.take_one());
        let first = room.counted;
        for _ in 0..1000 {
            assert!(room.take_one());
        }
        assert_eq!(room.counted, first, "counted again");
        assert_eq!(room.taken_since, 1001);
    }

    /// Near the line, or after a while, the descriptors are counted again
    /// (a count near the line from earlier, here made up, does not stand).
    #[test]
    fn near_the_line_or_after_a_while_they_are_counted_again() {
        let limit = open_descriptors().expect("countable") + 1000;
        let mut room = Room::new(Descriptors::new(limit, 0));
        let near = Instant::now();
        room.counted = Some((near, limit - RECOUNT_MARGIN));
        assert!(room.take_one(), "the real count is far from the line");
        let (at, open) = room.counted.expect("counted");
        assert!(at > near && open < limit - 500, "not counted again");
        let stale = Instant::now() - 2 * RECOUNT_AFTER;
        room.counted = Some((stale, 0));
        assert!(room.take_one());
        assert!(
            room.counted.expect("counted").0 > stale,
            "not counted again"
        );
    }

    #[test]
    fn raising_keeps_the_limit_within_the_hard_one_and_is_idempotent() {
        let first = Descriptors::raise();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        assert_eq!(first.limit(), soft);
        assert!(soft <= hard);
        assert_eq!(Descriptors::raise(), first);
    }
}
