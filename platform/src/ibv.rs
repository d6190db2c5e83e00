//! RDMA devices as the verbs model describes them, whether read through the
//! verbs library ([`crate::verbs`]) or parsed from rdma-core's
//! `ibv_devices` / `ibv_devinfo [-v]` output (the same on macOS and Linux).

use std::net::Ipv6Addr;

use meshd_proto::domain::RdmaPortState;

/// One RDMA device ("rdma_en2" on macOS, "mlx5_0" on Linux).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdmaDevice {
    pub name: String,
    /// "e0c5797d9c8fac05" as `ibv_devices` prints it; empty when unknown.
    pub node_guid: String,
    /// "Thunderbolt (100)", "InfiniBand (0)"; empty when unknown.
    pub transport: String,
    pub ports: Vec<RdmaPort>,
}

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPort {
    /// 1-based, as verbs numbers ports.
    pub port: u32,
    pub state: RdmaPortState,
    /// Lanes (`active_width: 4X (2)` → 4); `None` when not reported.
    pub active_width_lanes: Option<u32>,
    /// Per-lane speed in bits/s (`active_speed: 10.0 Gbps (4)`); `None` when
    /// not reported.
    pub active_lane_speed_bps: Option<u64>,
    /// "Thunderbolt", "InfiniBand", "Ethernet"; empty when not reported.
    pub link_layer: String,
    /// Index → address, in table order; only `-v` output and the verbs
    /// library have them.
    pub gids: Vec<(u32, Ipv6Addr)>,
}

impl RdmaPort {
    /// Width × lane speed, when both are known.
    pub fn active_speed_bps(&self) -> Option<u64> {
        Some(u64::from(self.active_width_lanes?) * self.active_lane_speed_bps?)
    }
}
