//! The Prometheus text format (version 0.0.4), written at scrape time from
//! what meshd holds right then: every family once, with its HELP and TYPE,
//! its series in a stable order, label values escaped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::catalogue::{Kind, MetricSpec};

/// Label values of one series, in the family's label order.
pub type LabelValues = Vec<String>;

/// A scrape being written.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn into_text(self) -> String {
        self.text
    }

    /// Starts a family; its samples follow through the returned writer.
    pub fn family<'a>(&'a mut self, spec: &'a MetricSpec) -> Family<'a> {
        let _ = writeln!(self.text, "# HELP {} {}", spec.name, escape_help(spec.help));
        let _ = writeln!(self.text, "# TYPE {} {}", spec.name, spec.kind.as_str());
        Family { out: self, spec }
    }
}

/// The samples of one family.
#[derive(Debug)]
pub struct Family<'a> {
    out: &'a mut Exposition,
    spec: &'a MetricSpec,
}

impl Family<'_> {
    /// One gauge or counter sample; `labels` pairs with the spec's label names.
    pub fn sample(&mut self, labels: &[&str], value: f64) -> &mut Self {
        debug_assert_eq!(labels.len(), self.spec.labels.len(), "{}", self.spec.name);
        self.line(self.spec.name, "", labels, None, value);
        self
    }

    /// Series whose label values are owned, as [`Vanishing`] returns them.
    pub fn samples(&mut self, series: &[(LabelValues, f64)]) -> &mut Self {
        for (labels, value) in series {
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            self.sample(&labels, *value);
        }
        self
    }

    /// One histogram series: cumulative buckets, then sum and count.
    pub fn histogram(&mut self, labels: &[&str], histogram: &HistogramValues<'_>) -> &mut Self {
        debug_assert!(matches!(self.spec.kind, Kind::Histogram));
        let mut cumulative = 0;
        for (bound, count) in histogram.bounds.iter().zip(histogram.counts) {
            cumulative += count;
            let le = format_value(bound.as_secs_f64());
            self.line(
                self.spec.name,
                "_bucket",
                labels,
                Some(&le),
                as_f64(cumulative),
            );
        }
        let total: u64 = histogram.counts.iter().sum();
        self.line(
            self.spec.name,
            "_bucket",
            labels,
            Some("+Inf"),
            as_f64(total),
        );
        self.line(
            self.spec.name,
            "_sum",
            labels,
            None,
            histogram.sum.as_secs_f64(),
        );
        self.line(self.spec.name, "_count", labels, None, as_f64(total));
        self
    }

    fn line(&mut self, name: &str, suffix: &str, values: &[&str], le: Option<&str>, value: f64) {
        let text = &mut self.out.text;
        text.push_str(name);
        text.push_str(suffix);
        let mut pairs = self
            .spec
            .labels
            .iter()
            .zip(values)
            .map(|(k, v)| (*k, *v))
            .chain(le.map(|le| ("le", le)))
            .peekable();
        if pairs.peek().is_some() {
            text.push('{');
            for (i, (key, value)) in pairs.enumerate() {
                if i > 0 {
                    text.push(',');
                }
                text.push_str(key);
                text.push_str("=\"");
                escape_label_value(text, value);
                text.push('"');
            }
            text.push('}');
        }
        text.push(' ');
        text.push_str(&format_value(value));
        text.push('\n');
    }
}

/// A histogram's buckets as exported: upper bounds, the count in each
/// bucket (not cumulative; one more than `bounds` would be the overflow,
/// which only `+Inf` shows), and the sum of the observed values.
#[derive(Debug, Clone, Copy)]
pub struct HistogramValues<'a> {
    pub bounds: &'a [Duration],
    pub counts: &'a [u64],
    pub sum: Duration,
}

/// A histogram kept by meshd itself (the evaluation duration): fixed bounds,
/// counts per bucket with the last one for values above every bound.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: Vec<Duration>,
    counts: Vec<u64>,
    sum: Duration,
}

impl Histogram {
    pub fn new(bounds: &[Duration]) -> Self {
        Self {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: Duration::ZERO,
        }
    }

    /// `values` regrouped at those of `kept` that are among its bounds (a
    /// cumulative count at one of its own bounds is exact): fewer series
    /// for the same histogram. `None` when its counts do not match its
    /// bounds.
    pub fn regrouped(values: &HistogramValues<'_>, kept: &[Duration]) -> Option<Self> {
        if values.counts.len() != values.bounds.len() + 1 {
            return None;
        }
        let bounds: Vec<Duration> = kept
            .iter()
            .copied()
            .filter(|b| values.bounds.contains(b))
            .collect();
        let mut counts = vec![0_u64; bounds.len() + 1];
        for (i, count) in values.counts.iter().enumerate() {
            // Bucket i holds values up to its bound (the last one, above
            // every bound): they fall in the first kept bound at or above.
            let slot = values
                .bounds
                .get(i)
                .map_or(bounds.len(), |upper| bounds.partition_point(|k| k < upper));
            if let Some(sum) = counts.get_mut(slot) {
                *sum = sum.saturating_add(*count);
            }
        }
        Some(Self {
            bounds,
            counts,
            sum: values.sum,
        })
    }

    pub fn observe(&mut self, value: Duration) {
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        if let Some(count) = self.counts.get_mut(bucket) {
            *count += 1;
        }
        self.sum = self.sum.saturating_add(value);
    }

    pub fn values(&self) -> HistogramValues<'_> {
        HistogramValues {
            bounds: &self.bounds,
            counts: &self.counts,
            sum: self.sum,
        }
    }
}

/// Series of a family whose members come and go (alarms, checks, bridges,
/// process names, the states of a state set): one that vanished reads 0
/// for [`VANISHED_HOLD`], so a dashboard sees it fall, then it is dropped,
/// so a family never grows with time.
#[derive(Debug, Default)]
pub struct Vanishing {
    gone: BTreeMap<LabelValues, Instant>,
    current: BTreeSet<LabelValues>,
    /// At most this many vanished series are held (the latest to go);
    /// `None`: every one for the whole hold.
    gone_limit: Option<usize>,
}

/// How long a vanished series keeps reading 0.
pub const VANISHED_HOLD: Duration = Duration::from_secs(300);

impl Vanishing {
    /// For a family whose members churn (process names leaving the top):
    /// at most `limit` vanished series at 0, the ones that went last.
    pub fn with_gone_limit(limit: usize) -> Self {
        Self {
            gone_limit: Some(limit),
            ..Self::default()
        }
    }

    /// The series to write now: `current` with their values, then the ones
    /// that vanished within the hold, at 0.
    pub fn update(
        &mut self,
        current: Vec<(LabelValues, f64)>,
        now: Instant,
    ) -> Vec<(LabelValues, f64)> {
        let now_keys: BTreeSet<LabelValues> = current.iter().map(|(k, _)| k.clone()).collect();
        for previous in std::mem::take(&mut self.current) {
            if !now_keys.contains(&previous) {
                self.gone.insert(previous, now);
            }
        }
        for key in &now_keys {
            self.gone.remove(key);
        }
        self.gone
            .retain(|_, since| now.saturating_duration_since(*since) < VANISHED_HOLD);
        if let Some(limit) = self.gone_limit
            && self.gone.len() > limit
        {
            let mut by_age: Vec<(Instant, LabelValues)> = std::mem::take(&mut self.gone)
                .into_iter()
                .map(|(key, since)| (since, key))
                .collect();
            by_age.sort();
            let excess = by_age.len() - limit;
            self.gone = by_age
                .into_iter()
                .skip(excess)
                .map(|(since, key)| (key, since))
                .collect();
        }
        self.current = now_keys;
        let mut all = current;
        all.extend(self.gone.keys().map(|k| (k.clone(), 0.0)));
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

#[allow(clippy::cast_precision_loss)]
pub fn as_f64(n: u64) -> f64 {
    n as f64
}

pub fn count(n: usize) -> f64 {
    as_f64(u64::try_from(n).unwrap_or(u64::MAX))
}

/// A state-set member: 1 for the current state, 0 for the others.
pub fn flag(on: bool) -> f64 {
    f64::from(u8::from(on))
}

/// Prometheus spells the special values its own way; everything else in
/// the shortest form that reads back as the same number.
fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GAUGE: MetricSpec = MetricSpec {
        name: "t_gauge",
        kind: Kind::Gauge,
        labels: &["a", "b"],
        help: "A test gauge.",
    };

    const HIST: MetricSpec = MetricSpec {
        name: "t_seconds",
        kind: Kind::Histogram,
        labels: &["peer"],
        help: "A test histogram.",
    };

    #[test]
    fn samples_escape_label_values_and_spell_special_values() {
        let mut out = Exposition::new();
        out.family(&GAUGE)
            .sample(&["x\"y", "back\\slash\nnl"], 1.5)
            .sample(&["n", "n"], f64::NAN)
            .sample(&["i", "i"], f64::INFINITY);
        let text = out.into_text();
        assert_eq!(
            text,
            "# HELP t_gauge A test gauge.\n# TYPE t_gauge gauge\n\
             t_gauge{a=\"x\\\"y\",b=\"back\\\\slash\\nnl\"} 1.5\n\
             t_gauge{a=\"n\",b=\"n\"} NaN\n\
             t_gauge{a=\"i\",b=\"i\"} +Inf\n"
        );
    }

    #[test]
    fn a_histogram_is_cumulative_with_inf_sum_and_count() {
        let mut h = Histogram::new(&[Duration::from_millis(1), Duration::from_millis(10)]);
        for ms in [0, 1, 5, 50] {
            h.observe(Duration::from_millis(ms));
        }
        let mut out = Exposition::new();
        out.family(&HIST).histogram(&["b"], &h.values());
        let text = out.into_text();
        for line in [
            "t_seconds_bucket{peer=\"b\",le=\"0.001\"} 2",
            "t_seconds_bucket{peer=\"b\",le=\"0.01\"} 3",
            "t_seconds_bucket{peer=\"b\",le=\"+Inf\"} 4",
            "t_seconds_sum{peer=\"b\"} 0.056",
            "t_seconds_count{peer=\"b\"} 4",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
    }

    #[test]
    fn a_regrouped_histogram_keeps_the_cumulative_counts_at_its_kept_bounds() {
        let ms = Duration::from_millis;
        let mut h = Histogram::new(&[ms(1), ms(2), ms(5), ms(10)]);
        for v in [0, 1, 2, 3, 4, 6, 20, 30] {
            h.observe(ms(v));
        }
        // 50 ms is not a bound of the histogram: it is left out.
        let kept = Histogram::regrouped(&h.values(), &[ms(2), ms(10), ms(50)]).unwrap();
        let mut out = Exposition::new();
        out.family(&HIST).histogram(&["b"], &kept.values());
        let text = out.into_text();
        for line in [
            "t_seconds_bucket{peer=\"b\",le=\"0.002\"} 3",
            "t_seconds_bucket{peer=\"b\",le=\"0.01\"} 6",
            "t_seconds_bucket{peer=\"b\",le=\"+Inf\"} 8",
            "t_seconds_sum{peer=\"b\"} 0.066",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        assert_eq!(text.matches("_bucket").count(), 3, "{text}");
        let broken = HistogramValues {
            bounds: &[ms(1)],
            counts: &[1],
            sum: ms(1),
        };
        assert!(Histogram::regrouped(&broken, &[ms(1)]).is_none());
    }

    #[test]
    fn a_gone_limit_keeps_the_latest_to_go() {
        let mut v = Vanishing::with_gone_limit(2);
        let t0 = Instant::now();
        let key = |s: &str| vec![s.to_owned()];
        for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
            let at = t0 + Duration::from_secs(u64::try_from(i).unwrap());
            v.update(vec![(key(name), 1.0)], at);
        }
        assert_eq!(
            v.update(vec![(key("d"), 1.0)], t0 + Duration::from_secs(5)),
            vec![(key("b"), 0.0), (key("c"), 0.0), (key("d"), 1.0)]
        );
    }

    #[test]
    fn a_vanished_series_reads_zero_for_a_while_then_goes() {
        let mut v = Vanishing::default();
        let t0 = Instant::now();
        let key = |s: &str| vec![s.to_owned()];
        assert_eq!(
            v.update(vec![(key("a"), 1.0), (key("b"), 2.0)], t0),
            vec![(key("a"), 1.0), (key("b"), 2.0)]
        );
        assert_eq!(
            v.update(vec![(key("b"), 3.0)], t0 + Duration::from_secs(1)),
            vec![(key("a"), 0.0), (key("b"), 3.0)]
        );
        assert_eq!(
            v.update(vec![(key("b"), 3.0)], t0 + VANISHED_HOLD),
            vec![(key("a"), 0.0), (key("b"), 3.0)]
        );
        assert_eq!(
            v.update(
                vec![(key("b"), 3.0)],
                t0 + VANISHED_HOLD + Duration::from_secs(2)
            ),
            vec![(key("b"), 3.0)]
        );
        // Back again: a live series, not a zero.
        assert_eq!(
            v.update(vec![(key("a"), 4.0)], t0 + VANISHED_HOLD * 2),
            vec![(key("a"), 4.0), (key("b"), 0.0)]
        );
    }
}
