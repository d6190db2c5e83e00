//! Observations shared by the model's unit tests.

use std::time::{Duration, SystemTime};

use meshd_proto::domain::{
    InterfaceState, LinkEnd, LinkObservation, LossWindow, NodeId, RdmaPortState, RttHistogram,
    RttSummary,
};

use super::link::{MEDIUM_WINDOW, SHORT_WINDOW};

/// `from`'s view of a healthy cable to `to`: replies flowing, no loss, RTTs
/// well inside the baseline.
pub(crate) fn healthy_observation(from: &str, to: &str) -> LinkObservation {
    let end = |n: &str| LinkEnd::node_only(NodeId::new(n).expect("id"));
    LinkObservation {
        local: end(from),
        remote: end(to),
        interface_state: InterfaceState::Unknown,
        negotiated_speed_bps: None,
        expected_speed_bps: None,
        rdma_port_state: RdmaPortState::None,
        gid_matches_address: None,
        rtt: RttSummary {
            p50: Duration::from_micros(40),
            p99: Duration::from_micros(90),
            baseline_p99: Duration::from_micros(100),
            samples: 100,
            ..RttSummary::default()
        },
        rtt_histogram: RttHistogram::default(),
        loss: vec![
            LossWindow {
                window: SHORT_WINDOW,
                sent: 10,
                lost: 0,
            },
            LossWindow {
                window: MEDIUM_WINDOW,
                sent: 100,
                lost: 0,
            },
        ],
        mtu_loss: vec![LossWindow {
            window: MEDIUM_WINDOW,
            sent: 10,
            lost: 0,
        }],
        probes_sent_total: 1000,
        probes_lost_total: 0,
        last_reply_at: Some(SystemTime::UNIX_EPOCH),
        error_counters: vec![],
        silence: Duration::from_millis(50),
        consecutive_lost: 0,
    }
}
