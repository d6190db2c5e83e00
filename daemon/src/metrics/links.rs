//! This node's own links, from the observations the aggregator built and
//! reported: one route for every figure, the RTT histogram included.

use std::time::Duration;

use meshd_proto::domain::{LinkObservation, RdmaPortState, RttSummary};

use super::catalogue::{self as c, MetricSpec};
use super::exposition::{Exposition, HistogramValues, as_f64, flag};

pub fn write(out: &mut Exposition, links: &[LinkObservation]) {
    let peer = |o: &LinkObservation| o.remote.node.to_string();
    let mut family = out.family(&c::LINK_RTT_SECONDS);
    for o in links {
        let h = &o.rtt_histogram;
        if h.counts.len() == h.bounds.len() + 1 {
            family.histogram(
                &[&peer(o)],
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
        for o in links {
            let seconds = if o.rtt.samples == 0 {
                f64::NAN
            } else {
                quantile(&o.rtt).as_secs_f64()
            };
            family.sample(&[&peer(o)], seconds);
        }
    }
    let mut family = out.family(&c::LINK_PROBES_SENT_TOTAL);
    for o in links {
        family.sample(&[&peer(o)], as_f64(o.probes_sent_total));
    }
    let mut family = out.family(&c::LINK_PROBES_LOST_TOTAL);
    for o in links {
        family.sample(&[&peer(o)], as_f64(o.probes_lost_total));
    }
    let mut family = out.family(&c::LINK_LOSS_RATIO);
    for o in links {
        for window in &o.loss {
            let window_name = humantime::format_duration(window.window).to_string();
            family.sample(&[&peer(o), &window_name], window.ratio());
        }
    }
    let mut family = out.family(&c::LINK_SILENCE_SECONDS);
    for o in links {
        family.sample(&[&peer(o)], o.silence.as_secs_f64());
    }
    let mut family = out.family(&c::LINK_SPEED_BITS_PER_SECOND);
    for o in links {
        if let Some(bps) = o.negotiated_speed_bps {
            family.sample(&[&peer(o)], as_f64(bps));
        }
    }
    let mut family = out.family(&c::LINK_EXPECTED_SPEED_BITS_PER_SECOND);
    for o in links {
        if let Some(bps) = o.expected_speed_bps {
            family.sample(&[&peer(o)], as_f64(bps));
        }
    }
    let mut family = out.family(&c::LINK_RDMA_PORT_STATE);
    for o in links {
        for state in RdmaPortState::ALL {
            family.sample(
                &[&peer(o), state.as_str()],
                flag(o.rdma_port_state == *state),
            );
        }
    }
    // Totals since meshd started watching the port (the platform
    // accumulates the hardware deltas).
    let mut family = out.family(&c::LINK_ERRORS_TOTAL);
    for o in links {
        for counter in &o.error_counters {
            family.sample(&[&peer(o), &counter.name], as_f64(counter.value));
        }
    }
}
