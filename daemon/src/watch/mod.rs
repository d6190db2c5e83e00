//! Local watchers: what this node notices about itself (and, for reboots,
//! about its peers).

pub mod boot;
pub mod bridge;
pub mod cpu;
pub mod facts;
pub mod jobs;
pub mod load;
pub mod memory;
