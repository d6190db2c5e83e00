//! Local watchers: what this node notices about itself.

pub mod cpu;
pub mod jobs;
pub mod load;
