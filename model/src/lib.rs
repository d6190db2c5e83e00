//! Pure logic: no clock, sockets, files or processes. Everything here takes
//! observations and a `now` and returns verdicts, which is what makes the
//! quorum testable (and fast) without a network.

pub mod advice;
pub mod alerts;
pub mod boot;
pub mod bridge;
pub mod check_alarms;
pub mod clock;
pub mod cpu;
pub mod events;
pub mod excuse;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod histogram;
pub mod history;
pub mod job_mesh;
pub mod job_watch;
pub mod jobs;
pub mod lateness;
pub mod link;
pub mod link_rules;
pub mod linkstats;
pub mod load;
pub mod memory;
pub mod node;
pub mod observation;
pub mod off_mesh;
pub mod orphans;
pub mod outbox;
pub mod peer_alarms;
pub mod peers;
pub mod quorum;
pub mod rdma;
pub mod stall;
pub mod time;
pub mod topology;
pub mod verdict;
