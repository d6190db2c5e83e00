//! Local watchers: what this node notices about itself.

pub mod load;
pub mod reload;
