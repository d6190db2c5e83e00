//! Pure logic: no clock, sockets, files or processes. Everything here takes
//! observations and a `now` and returns verdicts, which is what makes the
//! quorum testable (and fast) without a network.

pub mod advice;
pub mod alerts;
pub mod boot;
pub mod bridge;
pub mod check_alarms;
pub mod cpu;
pub mod events;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod histogram;
pub mod intake;
pub mod jobs;
pub mod link;
pub mod link_facts;
pub mod linkstats;
pub mod memory;
pub mod orphans;
pub mod quorum;
pub mod stall;
pub mod topology;
pub mod verdict;
