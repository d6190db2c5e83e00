//! This node's own links, from the observations the aggregator built and
//! reported: one route for every figure, the RTT histogram included. Each
//! series carries the far end (`peer`) and this end's interface (`iface`,
//! empty where unknown), which joins with node_exporter's `device`.
//!
//! Every series here is per own link, so a node's link series grow with
//! its peers, never with the mesh's links.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{LinkObservation, RdmaProbe, RttSummary};

use super::catalogue::{self as c, MetricSpec};
use super::exposition::{Exposition, Histogram, HistogramValues, Vanishing, as_f64};
use super::lock;

/// Bits per byte: the platform reports speeds in bits per second,
/// Prometheus's base unit is bytes.
const BITS_PER_BYTE: f64 = 8.0;

/// The bucket bounds exported of each link's RTT histogram: the prober's
/// own at each decade a cable's RTT can be in. The exact p50/p99 gauges
/// carry the fine detail; these show the shape over any range Prometheus
/// keeps, at 7 series a link instead of 20.
const EXPORTED_RTT_BOUNDS: [Duration; 4] = [
    Duration::from_micros(100),
    Duration::from_millis(1),
    Duration::from_millis(10),
    Duration::from_millis(100),
];

/// This node's link series; only the RDMA port state remembers anything
/// between scrapes (a state left reads 0 for a while).
#[derive(Debug, Default)]
pub struct LinkSeries {
    rdma_states: Mutex<Vanishing>,
}

impl LinkSeries {
    pub fn write(&self, out: &mut Exposition, links: &[LinkObservation], now: Instant) {
        write(out, links, &mut lock(&self.rdma_states), now);
    }
}

fn write(
    out: &mut Exposition,
    links: &[LinkObservation],
    rdma_states: &mut Vanishing,
    now: Instant,
) {
    let links = LabelledLinks::sorted(links);
    write_rtt_histograms(out, &links);
    write_rtt_quantiles(out, &links);
    write_probe_counts(out, &links);
    write_speeds(out, &links);
    write_rdma(out, &links, rdma_states, now);
    write_error_counters(out, &links);
}

/// This node's links with their `peer` and `iface` label values.
struct LabelledLinks<'a> {
    links: Vec<&'a LinkObservation>,
    ends: Vec<[String; 2]>,
}

impl<'a> LabelledLinks<'a> {
    /// The same order every scrape, whatever order the links came in.
    fn sorted(links: &'a [LinkObservation]) -> Self {
        let mut links: Vec<&LinkObservation> = links.iter().collect();
        links.sort_by(|x, y| {
            (&x.remote.node, &x.local.iface).cmp(&(&y.remote.node, &y.local.iface))
        });
        let ends = links
            .iter()
            .map(|o| {
                [
                    o.remote.node.to_string(),
                    o.local.iface.clone().unwrap_or_default(),
                ]
            })
            .collect();
        Self { links, ends }
    }

    fn each(&self) -> impl Iterator<Item = (&'a LinkObservation, [&str; 2])> + '_ {
        self.links
            .iter()
            .copied()
            .zip(self.ends.iter().map(|[p, i]| [p.as_str(), i.as_str()]))
    }
}

/// One sample of `spec` for each link that has the figure.
fn write_figure(
    out: &mut Exposition,
    spec: &MetricSpec,
    links: &LabelledLinks<'_>,
    figure: impl Fn(&LinkObservation) -> Option<f64>,
) {
    let mut family = out.family(spec);
    for (o, end) in links.each() {
        if let Some(value) = figure(o) {
            family.sample(&end, value);
        }
    }
}

fn write_rtt_histograms(out: &mut Exposition, links: &LabelledLinks<'_>) {
    let mut family = out.family(&c::LINK_RTT_SECONDS);
    for (o, end) in links.each() {
        let h = &o.rtt_histogram;
        let values = HistogramValues {
            bounds: &h.bounds,
            counts: &h.counts,
            sum: h.sum,
        };
        if let Some(coarse) = Histogram::regrouped(&values, &EXPORTED_RTT_BOUNDS) {
            family.histogram(&end, &coarse.values());
        }
    }
}

/// Exact, unlike a quantile estimated from the histogram's buckets, whose
/// 100-250 µs bucket cannot place a veth link's RTT. Two gauges, not one
/// with a `quantile` label: Prometheus keeps that label for summaries.
fn write_rtt_quantiles(out: &mut Exposition, links: &LabelledLinks<'_>) {
    type Quantile = fn(&RttSummary) -> Duration;
    let quantiles: [(&MetricSpec, Quantile); 2] = [
        (&c::LINK_RTT_P50_SECONDS, |rtt| rtt.p50),
        (&c::LINK_RTT_P99_SECONDS, |rtt| rtt.p99),
    ];
    for (spec, quantile) in quantiles {
        write_figure(out, spec, links, |o| {
            Some(if o.figures.rtt.samples == 0 {
                f64::NAN
            } else {
                quantile(&o.figures.rtt).as_secs_f64()
            })
        });
    }
}

/// Probes sent and lost, the loss over each window, the last reply.
fn write_probe_counts(out: &mut Exposition, links: &LabelledLinks<'_>) {
    write_figure(out, &c::LINK_PROBES_SENT_TOTAL, links, |o| {
        Some(as_f64(o.probes_sent_total))
    });
    write_figure(out, &c::LINK_PROBES_LOST_TOTAL, links, |o| {
        Some(as_f64(o.probes_lost_total))
    });
    let mut family = out.family(&c::LINK_LOSS_RATIO);
    for (o, [peer, iface]) in links.each() {
        for window in &o.figures.loss {
            let window_name = humantime::format_duration(window.window).to_string();
            family.sample(&[peer, iface, &window_name], window.ratio());
        }
    }
    write_figure(out, &c::LINK_LAST_REPLY_TIMESTAMP_SECONDS, links, |o| {
        o.last_reply_at.map(unix_seconds)
    });
}

/// The speed negotiated and the speed expected of the cable.
fn write_speeds(out: &mut Exposition, links: &LabelledLinks<'_>) {
    write_figure(out, &c::LINK_SPEED_BYTES_PER_SECOND, links, |o| {
        o.figures
            .negotiated_speed_bps
            .map(|bps| as_f64(bps) / BITS_PER_BYTE)
    });
    write_figure(out, &c::LINK_EXPECTED_SPEED_BYTES_PER_SECOND, links, |o| {
        o.figures
            .expected_speed_bps
            .map(|bps| as_f64(bps) / BITS_PER_BYTE)
    });
}

/// The RDMA port's state, then what its probe found.
fn write_rdma(
    out: &mut Exposition,
    links: &LabelledLinks<'_>,
    rdma_states: &mut Vanishing,
    now: Instant,
) {
    let states = links
        .each()
        .map(|(o, [peer, iface])| {
            let key = vec![
                peer.to_owned(),
                iface.to_owned(),
                o.figures.rdma_port_state.as_str().to_owned(),
            ];
            (key, 1.0)
        })
        .collect();
    let states = rdma_states.update(states, now);
    out.family(&c::LINK_RDMA_PORT_STATE).samples(&states);
    type RdmaFigure = fn(&RdmaProbe) -> Option<f64>;
    let rdma_figures: [(&MetricSpec, RdmaFigure); 3] = [
        (&c::LINK_RDMA_PROBE_RTT_SECONDS, |p| {
            p.last_rtt.map(|rtt| rtt.as_secs_f64())
        }),
        (&c::LINK_RDMA_PROBES_TOTAL, |p| {
            Some(as_f64(p.probes_sent_total))
        }),
        (&c::LINK_RDMA_PROBE_FAILURES_TOTAL, |p| {
            Some(as_f64(p.probes_failed_total))
        }),
    ];
    for (spec, figure) in rdma_figures {
        write_figure(out, spec, links, |o| o.rdma_probe.as_ref().and_then(figure));
    }
}

/// Totals since meshd started watching the port (the platform accumulates
/// the hardware deltas).
fn write_error_counters(out: &mut Exposition, links: &LabelledLinks<'_>) {
    let mut family = out.family(&c::LINK_ERRORS_TOTAL);
    for (o, [peer, iface]) in links.each() {
        for counter in &o.error_counters {
            family.sample(&[peer, iface, &counter.name], as_f64(counter.value));
        }
    }
}

/// A wall-clock time as Prometheus timestamps are written: seconds since
/// the Unix epoch (0 for a clock before it).
pub fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}
