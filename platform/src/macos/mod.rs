//! macOS facts: Thunderbolt receptacles and peers (`system_profiler`),
//! hardware ports (`networksetup`), interfaces and bridges (`ifconfig`),
//! RDMA (`rdma_ctl`, `ibv_*`) and the OS version (`sw_vers`).

use meshd_proto::facts::NodeFacts;

use crate::source::Source;

/// PLACEHOLDER until the collector lands: reports everything as unseen.
pub fn collect(source: &dyn Source) -> NodeFacts {
    let _ = source;
    NodeFacts {
        blind_spots: vec!["collector not written yet".to_owned()],
        ..NodeFacts::default()
    }
}
