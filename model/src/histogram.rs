//! A histogram of durations with fixed bucket bounds: how the prober counts
//! RTTs and the aggregator counts its evaluation times. Counts are per
//! bucket (not cumulative); the last bucket holds values above every bound.

use std::time::Duration;

use meshd_domain::RttHistogram;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationHistogram {
    bounds: &'static [Duration],
    counts: Vec<u64>,
    sum: Duration,
}

impl DurationHistogram {
    pub fn new(bounds: &'static [Duration]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: Duration::ZERO,
        }
    }

    /// Counts `value` in the first bucket whose bound is at least `value`
    /// (Prometheus's `le`).
    pub fn observe(&mut self, value: Duration) {
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        if let Some(count) = self.counts.get_mut(bucket) {
            *count += 1;
        }
        self.sum = self.sum.saturating_add(value);
    }

    pub fn bounds(&self) -> &'static [Duration] {
        self.bounds
    }

    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    pub fn sum(&self) -> Duration {
        self.sum
    }

    pub fn to_rtt_histogram(&self) -> RttHistogram {
        RttHistogram {
            bounds: self.bounds.to_vec(),
            counts: self.counts.clone(),
            sum: self.sum,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: [Duration; 2] = [Duration::from_millis(1), Duration::from_millis(10)];

    #[test]
    fn values_land_in_the_first_bucket_that_holds_them() {
        let mut h = DurationHistogram::new(&BOUNDS);
        for ms in [0, 1, 2, 10, 11, 500] {
            h.observe(Duration::from_millis(ms));
        }
        assert_eq!(h.counts(), [2, 2, 2]);
        assert_eq!(h.sum(), Duration::from_millis(524));
    }
}
