//! The gRPC surface (a thin layer over the state the aggregator publishes)
//! and the reporter that pushes this node's view to its peers.

pub mod intake;
pub mod reporter;
pub mod service;
pub mod topology;
