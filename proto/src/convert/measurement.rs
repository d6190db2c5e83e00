//! Link measurements: RTT summaries and histograms, loss windows, counters,
//! one end's link observation, and the per-end figures a link is judged on.

use std::net::Ipv6Addr;
use std::time::Duration;

use super::{
    Result, WireError, duration_from_wire, each, interface_state, interface_state_wire, nanos,
    node_id, optional_speed, optional_time, rdma_port_state, rdma_port_state_wire, required, time,
    timestamp,
};
use crate::wire;
use meshd_domain::{
    Counter, LinkEnd, LinkFigures, LinkMeasurement, LinkObservation, LossWindow, RdmaEndpoint,
    RdmaProbe, RttHistogram, RttSummary,
};

impl From<RttSummary> for wire::RttSummary {
    fn from(r: RttSummary) -> Self {
        Self {
            p50_ns: nanos(r.p50),
            p90_ns: nanos(r.p90),
            p99_ns: nanos(r.p99),
            max_ns: nanos(r.max),
            host_delay_p50_ns: nanos(r.host_delay_p50),
            baseline_p50_ns: nanos(r.baseline_p50),
            baseline_p99_ns: nanos(r.baseline_p99),
            samples: r.samples,
        }
    }
}

impl From<wire::RttSummary> for RttSummary {
    fn from(r: wire::RttSummary) -> Self {
        Self {
            p50: Duration::from_nanos(r.p50_ns),
            p90: Duration::from_nanos(r.p90_ns),
            p99: Duration::from_nanos(r.p99_ns),
            max: Duration::from_nanos(r.max_ns),
            host_delay_p50: Duration::from_nanos(r.host_delay_p50_ns),
            baseline_p50: Duration::from_nanos(r.baseline_p50_ns),
            baseline_p99: Duration::from_nanos(r.baseline_p99_ns),
            samples: r.samples,
        }
    }
}

impl From<RttHistogram> for wire::RttHistogram {
    fn from(h: RttHistogram) -> Self {
        Self {
            bounds_ns: h.bounds.into_iter().map(nanos).collect(),
            counts: h.counts,
            sum_ns: nanos(h.sum),
        }
    }
}

impl TryFrom<wire::RttHistogram> for RttHistogram {
    type Error = WireError;
    fn try_from(h: wire::RttHistogram) -> Result<Self> {
        if h.bounds_ns.is_empty() && h.counts.is_empty() {
            return Ok(Self::default());
        }
        if h.counts.len() != h.bounds_ns.len() + 1 {
            return Err(WireError::new(
                "counts",
                format!(
                    "{} counts for {} bounds; want bounds + 1",
                    h.counts.len(),
                    h.bounds_ns.len()
                ),
            ));
        }
        if h.bounds_ns.windows(2).any(|w| w[0] >= w[1]) {
            return Err(WireError::new("bounds_ns", "not strictly ascending"));
        }
        Ok(Self {
            bounds: h.bounds_ns.into_iter().map(Duration::from_nanos).collect(),
            counts: h.counts,
            sum: Duration::from_nanos(h.sum_ns),
        })
    }
}

impl From<LossWindow> for wire::LossWindow {
    fn from(w: LossWindow) -> Self {
        Self {
            window: prost_types::Duration::try_from(w.window).ok(),
            sent: w.sent,
            lost: w.lost,
        }
    }
}

impl TryFrom<wire::LossWindow> for LossWindow {
    type Error = WireError;
    fn try_from(w: wire::LossWindow) -> Result<Self> {
        if w.lost > w.sent {
            return Err(WireError::new(
                "lost",
                format!("{} lost of {} sent", w.lost, w.sent),
            ));
        }
        Ok(Self {
            window: duration_from_wire("window", w.window)?,
            sent: w.sent,
            lost: w.lost,
        })
    }
}

impl From<Counter> for wire::Counter {
    fn from(c: Counter) -> Self {
        Self {
            name: c.name,
            value: c.value,
            saturated: c.saturated,
        }
    }
}

impl From<wire::Counter> for Counter {
    fn from(c: wire::Counter) -> Self {
        Self {
            name: c.name,
            value: c.value,
            saturated: c.saturated,
        }
    }
}

impl From<LinkObservation> for wire::LinkObservation {
    fn from(o: LinkObservation) -> Self {
        let figures = WireFigures::from(o.figures);
        Self {
            local: Some(o.local.into()),
            remote: Some(o.remote.into()),
            interface_state: figures.interface_state,
            negotiated_speed_bps: figures.negotiated_speed_bps,
            expected_speed_bps: figures.expected_speed_bps,
            rdma_port_state: figures.rdma_port_state,
            gid_matches_address: o.gid_matches_address,
            rtt: figures.rtt,
            rtt_histogram: Some(o.rtt_histogram.into()),
            loss: figures.loss,
            mtu_loss: o.mtu_loss.into_iter().map(Into::into).collect(),
            probes_sent_total: o.probes_sent_total,
            probes_lost_total: o.probes_lost_total,
            last_reply_at: o.last_reply_at.map(Into::into),
            error_counters: o.error_counters.into_iter().map(Into::into).collect(),
            silence_ns: figures.silence_ns,
            consecutive_lost: o.consecutive_lost,
            lateness_ns: nanos(o.lateness),
            rdma_probe: o.rdma_probe.map(|p| wire::RdmaProbe {
                last_rtt_ns: p.last_rtt.map_or(0, nanos),
                consecutive_failures: p.consecutive_failures,
                last_ok_at: p.last_ok_at.map(Into::into),
                probes_sent_total: p.probes_sent_total,
                probes_failed_total: p.probes_failed_total,
            }),
            rdma_endpoint: o.rdma_endpoint.map(Into::into),
            carrier: o.carrier,
            silence_confirmed: o.silence_confirmed,
        }
    }
}

impl From<RdmaEndpoint> for wire::RdmaEndpoint {
    fn from(e: RdmaEndpoint) -> Self {
        Self {
            qpn: e.qpn,
            psn: e.psn,
            gid: e.gid.octets().to_vec(),
            connected_qpn: e.connected_qpn.unwrap_or(0),
        }
    }
}

/// Queue pair and packet sequence numbers are 24 bits wide.
const MAX_QP_NUMBER: u32 = 0x00FF_FFFF;

fn qp_number(field: &str, value: u32) -> Result<u32> {
    if value > MAX_QP_NUMBER {
        return Err(WireError::new(
            field,
            format!("{value} does not fit in 24 bits"),
        ));
    }
    Ok(value)
}

impl TryFrom<wire::RdmaEndpoint> for RdmaEndpoint {
    type Error = WireError;
    fn try_from(e: wire::RdmaEndpoint) -> Result<Self> {
        let gid: [u8; 16] =
            e.gid.as_slice().try_into().map_err(|_| {
                WireError::new("gid", format!("{} bytes, a GID has 16", e.gid.len()))
            })?;
        // Queue pairs 0 and 1 are the management ones (SMI, GSI): no
        // program's queue pair has either number.
        let qpn = qp_number("qpn", e.qpn)?;
        if qpn < 2 {
            return Err(WireError::new(
                "qpn",
                format!("{qpn} is a reserved queue pair"),
            ));
        }
        let connected = qp_number("connected_qpn", e.connected_qpn)?;
        Ok(Self {
            qpn,
            psn: qp_number("psn", e.psn)?,
            gid: Ipv6Addr::from(gid),
            connected_qpn: (connected != 0).then_some(connected),
        })
    }
}

impl TryFrom<wire::LinkObservation> for LinkObservation {
    type Error = WireError;
    fn try_from(o: wire::LinkObservation) -> Result<Self> {
        Ok(Self {
            local: LinkEnd::try_from(required("local", o.local)?).map_err(|e| e.within("local"))?,
            remote: LinkEnd::try_from(required("remote", o.remote)?)
                .map_err(|e| e.within("remote"))?,
            figures: LinkFigures::try_from(WireFigures {
                interface_state: o.interface_state,
                negotiated_speed_bps: o.negotiated_speed_bps,
                expected_speed_bps: o.expected_speed_bps,
                rdma_port_state: o.rdma_port_state,
                rtt: o.rtt,
                loss: o.loss,
                silence_ns: o.silence_ns,
            })?,
            gid_matches_address: o.gid_matches_address,
            rtt_histogram: o
                .rtt_histogram
                .map(RttHistogram::try_from)
                .transpose()
                .map_err(|e| e.within("rtt_histogram"))?
                .unwrap_or_default(),
            mtu_loss: each("mtu_loss", o.mtu_loss, LossWindow::try_from)?,
            probes_sent_total: o.probes_sent_total,
            probes_lost_total: o.probes_lost_total,
            last_reply_at: optional_time("last_reply_at", o.last_reply_at)?,
            error_counters: o.error_counters.into_iter().map(Counter::from).collect(),
            consecutive_lost: o.consecutive_lost,
            lateness: Duration::from_nanos(o.lateness_ns),
            rdma_probe: o
                .rdma_probe
                .map(|p| -> Result<RdmaProbe> {
                    Ok(RdmaProbe {
                        last_rtt: (p.last_rtt_ns > 0).then(|| Duration::from_nanos(p.last_rtt_ns)),
                        consecutive_failures: p.consecutive_failures,
                        last_ok_at: optional_time("last_ok_at", p.last_ok_at)?,
                        probes_sent_total: p.probes_sent_total,
                        probes_failed_total: p.probes_failed_total,
                    })
                })
                .transpose()
                .map_err(|e| e.within("rdma_probe"))?,
            rdma_endpoint: o
                .rdma_endpoint
                .map(RdmaEndpoint::try_from)
                .transpose()
                .map_err(|e| e.within("rdma_endpoint"))?,
            carrier: o.carrier,
            silence_confirmed: o.silence_confirmed,
        })
    }
}

impl From<LinkMeasurement> for wire::LinkMeasurement {
    fn from(m: LinkMeasurement) -> Self {
        let figures = WireFigures::from(m.figures);
        Self {
            node: m.node.to_string(),
            peer: m.peer.to_string(),
            at: timestamp(m.at),
            interface_state: figures.interface_state,
            negotiated_speed_bps: figures.negotiated_speed_bps,
            expected_speed_bps: figures.expected_speed_bps,
            rdma_port_state: figures.rdma_port_state,
            rtt: figures.rtt,
            loss: figures.loss,
            silence_ns: figures.silence_ns,
        }
    }
}

impl TryFrom<wire::LinkMeasurement> for LinkMeasurement {
    type Error = WireError;
    fn try_from(m: wire::LinkMeasurement) -> Result<Self> {
        Ok(Self {
            node: node_id("node", m.node)?,
            peer: node_id("peer", m.peer)?,
            at: time("at", m.at)?,
            figures: LinkFigures::try_from(WireFigures {
                interface_state: m.interface_state,
                negotiated_speed_bps: m.negotiated_speed_bps,
                expected_speed_bps: m.expected_speed_bps,
                rdma_port_state: m.rdma_port_state,
                rtt: m.rtt,
                loss: m.loss,
                silence_ns: m.silence_ns,
            })?,
        })
    }
}

/// The figures both `LinkObservation` and `LinkMeasurement` carry, as
/// their wire fields: each message's conversion moves them here, and the
/// figures are read and checked once.
struct WireFigures {
    interface_state: i32,
    negotiated_speed_bps: u64,
    expected_speed_bps: u64,
    rdma_port_state: i32,
    rtt: Option<wire::RttSummary>,
    loss: Vec<wire::LossWindow>,
    silence_ns: u64,
}

impl From<LinkFigures> for WireFigures {
    fn from(f: LinkFigures) -> Self {
        Self {
            interface_state: interface_state_wire(f.interface_state),
            negotiated_speed_bps: f.negotiated_speed_bps.unwrap_or_default(),
            expected_speed_bps: f.expected_speed_bps.unwrap_or_default(),
            rdma_port_state: rdma_port_state_wire(f.rdma_port_state),
            rtt: Some(f.rtt.into()),
            loss: f.loss.into_iter().map(Into::into).collect(),
            silence_ns: nanos(f.silence),
        }
    }
}

impl TryFrom<WireFigures> for LinkFigures {
    type Error = WireError;
    fn try_from(f: WireFigures) -> Result<Self> {
        Ok(Self {
            interface_state: interface_state("interface_state", f.interface_state)?,
            negotiated_speed_bps: optional_speed(f.negotiated_speed_bps),
            expected_speed_bps: optional_speed(f.expected_speed_bps),
            rdma_port_state: rdma_port_state("rdma_port_state", f.rdma_port_state)?,
            rtt: f.rtt.map(RttSummary::from).unwrap_or_default(),
            loss: each("loss", f.loss, LossWindow::try_from)?,
            silence: Duration::from_nanos(f.silence_ns),
        })
    }
}
