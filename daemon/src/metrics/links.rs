//! This node's own links, from the observations the aggregator built and
//! reported: one route for every figure, the RTT histogram included. Each
//! series carries the far end (`peer`) and this end's interface (`iface`,
//! empty where unknown), which joins with node_exporter's `device`.

use std::time::{Duration, SystemTime};

use meshd_proto::domain::{LinkObservation, RdmaPortState, RttSummary};

use super::catalogue::{self as c, MetricSpec};
use super::exposition::{Exposition, HistogramValues, as_f64, flag};

/// Bits per byte: the platform reports speeds in bits per second,
/// Prometheus's base unit is bytes.
const BITS_PER_BYTE: f64 = 8.0;

pub fn write(out: &mut Exposition, links: &[LinkObservation]) {
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
        if h.counts.len() == h.bounds.len() + 1 {
            family.histogram(
                &end,
                &HistogramValues {
                    bounds: &h.bounds,
                    counts: &h.counts,
                    sum: h.sum,
                },
            );
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
    let mut family = out.family(&c::LINK_RDMA_PORT_STATE);
    for (o, [peer, iface]) in each() {
        for state in RdmaPortState::ALL {
            family.sample(
                &[peer, iface, state.as_str()],
                flag(o.rdma_port_state == *state),
            );
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
