//! The gRPC surface: a thin layer over the state the aggregator publishes.

pub mod service;
