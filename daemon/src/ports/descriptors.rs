//! File descriptors: the soft limit raised at start-up, and a reserve the
//! listeners leave to the watchers and probes.
//!
//! A flood of connections once took all 1024 descriptors of a node: the
//! CPU and bridge watchers failed with "Too many open files" and the node
//! went blind. The listeners now refuse a connection while the open
//! descriptors are within [`RESERVE`] of the limit, so what the watchers
//! open (a file under /proc, a pipe to a command, a probe socket) always
//! finds a free one.

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

    /// Whether a listener may take one more connection: the open
    /// descriptors leave the reserve free. A count that cannot be taken
    /// (no descriptor left even to list them) is no room.
    pub fn have_room(&self) -> bool {
        open_descriptors().is_some_and(|open| open + self.reserve < self.limit)
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
        let file = tempfile::tempfile().expect("tempfile");
        let after = open_descriptors().expect("countable");
        assert!(after > before, "{before} then {after}");
        drop(file);
    }

    #[test]
    fn there_is_room_only_outside_the_reserve() {
        let open = open_descriptors().expect("countable");
        assert!(Descriptors::new(open + 100, 10).have_room());
        assert!(!Descriptors::new(open + 100, 100).have_room());
        assert!(!Descriptors::new(open, 0).have_room());
        assert!(!Descriptors::new(open + 100, 10).keeping(90).have_room());
        let headroom = Descriptors::new(open + 100, 10)
            .headroom()
            .expect("countable");
        assert!((85..=90).contains(&headroom), "{headroom}");
        assert!(Descriptors::new(0, 10).headroom().expect("countable") < 0);
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
