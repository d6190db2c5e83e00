//! The responder's side of a link socket: which requests it answers (its
//! budget and size limit). What it answered and dropped is counted in the
//! metrics' [`crate::metrics::ResponderCounters`].

use std::time::Instant;

/// Replies per second on one link, sustained. Each link's socket only
/// hears its cable's peer, which probes at most every 10 ms (small) plus
/// every 100 ms (MTU), 110/s; 250/s leaves room for a burst after a stall
/// yet caps what a misbehaving peer can make this node send.
pub const REPLY_RATE_PER_SEC: u32 = 250;

/// Replies allowed back to back: absorbs a burst of probes queued behind a
/// scheduling hiccup on either node without dropping them as "loss".
pub const REPLY_BURST: u32 = 50;

/// Token bucket with time passed in, so it is testable without a clock.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_per_sec: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// Starts full, so the first burst after start is answered.
    pub fn new(rate_per_sec: u32, burst: u32, now: Instant) -> Self {
        Self {
            rate_per_sec: f64::from(rate_per_sec),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            last: now,
        }
    }

    pub fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.rate_per_sec).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What a link's socket does with one request: answers it, or drops it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Reply,
    RateLimited,
    TooLarge,
}

/// Decides whether to answer a request of `len` bytes that arrived at
/// `at`: within the link's reply budget and no larger than the largest
/// probe this node's config allows (a reply is as large as its request, so
/// nothing is ever amplified).
pub fn answer(bucket: &mut TokenBucket, len: usize, max_len: usize, at: Instant) -> Answer {
    if len > max_len {
        Answer::TooLarge
    } else if bucket.try_take(at) {
        Answer::Reply
    } else {
        Answer::RateLimited
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn token_bucket_allows_burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 100, t0);
        assert_eq!((0..150).filter(|_| b.try_take(t0)).count(), 100);
        // 10 ms at 1000/s refills 10 tokens.
        let t1 = t0 + Duration::from_millis(10);
        assert_eq!((0..50).filter(|_| b.try_take(t1)).count(), 10);
        // A long pause refills only up to the burst.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..500).filter(|_| b.try_take(t2)).count(), 100);
        // Time stepping back neither refills nor panics.
        assert!(!b.try_take(t0));
    }

    #[test]
    fn a_request_larger_than_any_probe_or_over_budget_is_not_answered() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(REPLY_RATE_PER_SEC, 2, t0);
        assert_eq!(answer(&mut b, 65_000, 1_472, t0), Answer::TooLarge);
        assert_eq!(answer(&mut b, 64, 1_472, t0), Answer::Reply);
        assert_eq!(answer(&mut b, 1_472, 1_472, t0), Answer::Reply);
        assert_eq!(answer(&mut b, 64, 1_472, t0), Answer::RateLimited);
    }

    #[test]
    fn token_bucket_sustains_its_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 100, t0);
        // 10 000 requests/s for 1 s.
        let granted = (0..10_000u64)
            .filter(|i| b.try_take(t0 + Duration::from_micros(i * 100)))
            .count();
        assert!((1_090..=1_110).contains(&granted), "granted {granted}");
    }
}
