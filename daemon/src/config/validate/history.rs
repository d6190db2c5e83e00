//! The `[history]` section: the incident history's caps.

use std::time::Duration;

use super::super::Config;
use super::super::error::Problem;
use super::{check_duration, s};

/// Below a mebibyte the store's own pages leave no room for incidents.
const MIN_HISTORY_BYTES: u64 = 1 << 20;
/// A history is text; a larger cap is a typo (bytes read as kilobytes).
const MAX_HISTORY_BYTES: u64 = 16 << 30;
/// An hour at least, so that last night's incidents are there in the
/// morning; ten years at most.
const HISTORY_AGE_RANGE: (Duration, Duration) = (s(3600), s(10 * 366 * 24 * 3600));

pub(super) fn check_history(c: &Config, p: &mut Vec<Problem>) {
    let history = &c.history;
    if !(MIN_HISTORY_BYTES..=MAX_HISTORY_BYTES).contains(&history.max_bytes) {
        p.push(Problem::new(
            "history.max_bytes",
            format!(
                "{} bytes is outside {MIN_HISTORY_BYTES} (1 MiB) to {MAX_HISTORY_BYTES} (16 GiB)",
                history.max_bytes
            ),
        ));
    }
    check_duration(p, "history.max_age", history.max_age, HISTORY_AGE_RANGE);
    if let Some(path) = &history.path
        && (path.as_os_str().is_empty() || path.is_dir())
    {
        p.push(Problem::new(
            "history.path",
            format!(
                "{} is a directory; name the history's file, such as {}/history.redb",
                path.display(),
                path.display()
            ),
        ));
    }
}
