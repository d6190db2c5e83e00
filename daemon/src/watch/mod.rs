//! Local watchers: what this node notices about itself.

pub mod bridge;
pub mod cpu;
pub mod facts;
pub mod jobs;
pub mod load;
