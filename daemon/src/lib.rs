//! meshd: an agent on every node of an RDMA / Thunderbolt mesh that measures
//! every link, agrees with its peers on what is broken, and tells Prometheus,
//! Alertmanager and the operator's terminal.
//!
//! Layout (see DESIGN.md §3): `model` is pure logic with time passed in;
//! `aggregator` owns the state and runs the model; `peer` is the thin gRPC
//! layer; `http` serves metrics, health and the mesh page; `node` wires one
//! running meshd; `demo` runs a whole mesh in one process with injected
//! faults; `install` makes meshd a launchd or systemd service. OS facts
//! (commands, sysfs, verbs) and the pure checks, plans and hostfiles built on
//! them live in the `meshd-platform` crate, which meshctl shares.

pub mod aggregator;
pub mod alert;
pub mod config;
pub mod demo;
pub mod http;
pub mod install;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod node;
pub mod peer;
pub mod probe;
pub mod watch;
