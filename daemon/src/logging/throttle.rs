//! Repeated warnings, thinned: at most one line per key per interval, and
//! the line that is written says how many were held back since the last
//! one. For warnings that a peer, a packet or a failing host can trigger
//! in a loop (refused reports, failing reads), so that one cause cannot
//! write thousands of lines a second. Pure: the caller passes the time.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The usual interval between two lines of one key.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(10);

/// Keys tracked at once. Keys come from code and configured members, but
/// a bound keeps a stream of new keys from growing the map: past it, idle
/// keys are forgotten, and a new key that still finds no room is held back
/// (and counted with the next line written).
const MAX_KEYS: usize = 256;

#[derive(Debug)]
pub struct Throttle<K> {
    interval: Duration,
    slots: HashMap<K, Slot>,
    /// Held back for want of a slot; told with the next line written.
    unplaced: u64,
}

#[derive(Debug)]
struct Slot {
    written_at: Instant,
    held_back: u64,
}

impl<K: Eq + Hash> Throttle<K> {
    pub fn new(interval: Duration) -> Self {
        Throttle {
            interval,
            slots: HashMap::new(),
            unplaced: 0,
        }
    }

    /// Whether a line for `key` is written at `now`: `Some(n)` with the
    /// number of lines held back since the last one written (for this key,
    /// plus any that found no slot), `None` when this one is held back.
    pub fn admit(&mut self, key: K, now: Instant) -> Option<u64> {
        if let Some(slot) = self.slots.get_mut(&key) {
            if now.saturating_duration_since(slot.written_at) < self.interval {
                slot.held_back += 1;
                return None;
            }
            let held_back =
                std::mem::take(&mut slot.held_back) + std::mem::take(&mut self.unplaced);
            slot.written_at = now;
            return Some(held_back);
        }
        if self.slots.len() >= MAX_KEYS {
            let interval = self.interval;
            self.slots
                .retain(|_, slot| now.saturating_duration_since(slot.written_at) < interval);
        }
        if self.slots.len() >= MAX_KEYS {
            self.unplaced += 1;
            return None;
        }
        self.slots.insert(
            key,
            Slot {
                written_at: now,
                held_back: 0,
            },
        );
        Some(std::mem::take(&mut self.unplaced))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_key_per_interval_with_the_count_held_back() {
        let t0 = Instant::now();
        let mut throttle = Throttle::new(Duration::from_secs(10));
        assert_eq!(throttle.admit("a", t0), Some(0));
        assert_eq!(throttle.admit("b", t0), Some(0), "keys are apart");
        for i in 1..=5 {
            assert_eq!(throttle.admit("a", t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(throttle.admit("a", t0 + Duration::from_secs(10)), Some(5));
        assert_eq!(throttle.admit("a", t0 + Duration::from_secs(21)), Some(0));
    }

    #[test]
    fn new_keys_past_the_bound_are_held_back_and_counted() {
        let t0 = Instant::now();
        let mut throttle = Throttle::new(Duration::from_secs(10));
        for key in 0..MAX_KEYS {
            assert_eq!(throttle.admit(key, t0), Some(0));
        }
        assert_eq!(throttle.admit(MAX_KEYS, t0), None);
        assert_eq!(throttle.admit(MAX_KEYS + 1, t0), None);
        // Once the old keys are idle, they make room, and the count of
        // what found none is told.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(throttle.admit(MAX_KEYS, later), Some(2));
        assert!(throttle.slots.len() <= MAX_KEYS);
    }
}
