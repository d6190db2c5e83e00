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
    // The same order every scrape, whatever order the links came in.
    let mut links: Vec<&LinkObservation> = links.iter().collect();
    links.sort_by(|x, y| (&x.remote.node, &x.local.iface).cmp(&(&y.remote.node, &y.local.iface)));
    let ends: Vec<[String; 2]> = links
        .iter()
        .map(|o| {
            [
                o.remote.node.to_string(),
                o.local.iface.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let each = || {
        links
            .iter()
            .copied()
            .zip(ends.iter().map(|[p, i]| [p.as_str(), i.as_str()]))
    };

    let mut family = out.family(&c::LINK_RTT_SECONDS);
    for (o, end) in each() {
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
    // Exact, unlike a quantile estimated from the histogram's buckets,
    // whose 100-250 µs bucket cannot place a veth link's RTT. Two gauges,
    // not one with a `quantile` label: Prometheus keeps that label for
    // summaries.
    type Quantile = fn(&RttSummary) -> Duration;
    let quantiles: [(&MetricSpec, Quantile); 2] = [
        (&c::LINK_RTT_P50_SECONDS, |rtt| rtt.p50),
        (&c::LINK_RTT_P99_SECONDS, |rtt| rtt.p99),
    ];
    for (spec, quantile) in quantiles {
        let mut family = out.family(spec);
        for (o, end) in each() {
            let seconds = if o.rtt.samples == 0 {
                f64::NAN
            } else {
                quantile(&o.rtt).as_secs_f64()
            };
            family.sample(&end, seconds);
        }
    }
    let mut family = out.family(&c::LINK_PROBES_SENT_TOTAL);
    for (o, end) in each() {
        family.sample(&end, as_f64(o.probes_sent_total));
    }
    let mut family = out.family(&c::LINK_PROBES_LOST_TOTAL);
    for (o, end) in each() {
        family.sample(&end, as_f64(o.probes_lost_total));
    }
    let mut family = out.family(&c::LINK_LOSS_RATIO);
    for (o, [peer, iface]) in each() {
        for window in &o.loss {
            let window_name = humantime::format_duration(window.window).to_string();
            family.sample(&[peer, iface, &window_name], window.ratio());
        }
    }
    let mut family = out.family(&c::LINK_LAST_REPLY_TIMESTAMP_SECONDS);
    for (o, end) in each() {
        if let Some(at) = o.last_reply_at {
            family.sample(&end, unix_seconds(at));
        }
    }
    let mut family = out.family(&c::LINK_SPEED_BYTES_PER_SECOND);
    for (o, end) in each() {
        if let Some(bps) = o.negotiated_speed_bps {
            family.sample(&end, as_f64(bps) / BITS_PER_BYTE);
        }
    }
    let mut family = out.family(&c::LINK_EXPECTED_SPEED_BYTES_PER_SECOND);
    for (o, end) in each() {
        if let Some(bps) = o.expected_speed_bps {
            family.sample(&end, as_f64(bps) / BITS_PER_BYTE);
        }
    }
    let states = each()
        .map(|(o, [peer, iface])| {
            let key = vec![
                peer.to_owned(),
                iface.to_owned(),
                o.rdma_port_state.as_str().to_owned(),
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
        let mut family = out.family(spec);
        for (o, end) in each() {
            if let Some(value) = o.rdma_probe.as_ref().and_then(figure) {
                family.sample(&end, value);
            }
        }
    }
    // Totals since meshd started watching the port (the platform
    // accumulates the hardware deltas).
    let mut family = out.family(&c::LINK_ERRORS_TOTAL);
    for (o, [peer, iface]) in each() {
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
