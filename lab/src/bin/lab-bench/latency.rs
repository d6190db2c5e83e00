//! Latency tables of trials, as the detection and job benchmarks print
//! them: nearest-rank percentiles, in ms.

use std::time::{Duration, SystemTime};

use crate::percentile;

pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Milliseconds from `t0` to `at` (0 when `at` is earlier).
pub(crate) fn since(t0: SystemTime, at: SystemTime) -> f64 {
    millis(at.duration_since(t0).unwrap_or_default())
}

/// A column of a latency table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Column {
    Min,
    /// The nearest-rank percentile.
    P(f64),
    Max,
}

impl Column {
    fn heading(self) -> String {
        match self {
            Self::Min => "min".to_owned(),
            Self::P(p) => format!("p{p}"),
            Self::Max => "max".to_owned(),
        }
    }

    /// This column's figure of `sorted` values (NaN when there are none).
    fn of(self, sorted: &[f64]) -> f64 {
        match self {
            Self::Min => sorted.first().copied().unwrap_or(f64::NAN),
            Self::P(p) => percentile(sorted, p),
            Self::Max => sorted.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// One row per `(what, values in ms)`: the trials, then `columns`; the
/// first heading is `first`.
#[allow(clippy::print_stdout)]
pub(crate) fn print_latencies(first: &str, columns: &[Column], rows: &[(&str, Vec<f64>)]) {
    let headings: Vec<String> = columns.iter().map(|c| c.heading()).collect();
    println!("| {first} | trials | {} |", headings.join(" | "));
    println!("|---|---:|{}", "---:|".repeat(columns.len()));
    for (what, values) in rows {
        let mut v = values.clone();
        v.sort_by(f64::total_cmp);
        let figures: Vec<String> = columns
            .iter()
            .map(|c| format!("{:.0} ms", c.of(&v)))
            .collect();
        println!("| {what} | {} | {} |", v.len(), figures.join(" | "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_read_sorted_values() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(Column::Min.of(&v), 1.0);
        assert_eq!(Column::P(50.0).of(&v), 2.0);
        assert_eq!(Column::P(99.0).of(&v), 4.0);
        assert_eq!(Column::Max.of(&v), 4.0);
        assert!(Column::Min.of(&[]).is_nan());
        assert_eq!(Column::P(50.0).heading(), "p50");
        assert_eq!(Column::P(99.0).heading(), "p99");
    }
}
