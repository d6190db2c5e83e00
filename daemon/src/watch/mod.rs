//! Local watchers: what this node notices about itself.

pub mod bridge;
pub mod load;
pub mod reload;
