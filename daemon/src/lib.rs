//! meshd: an agent on every node of an RDMA / Thunderbolt mesh that measures
//! every link, agrees with its peers on what is broken, and tells Prometheus,
//! Alertmanager and the operator's terminal.
//!
//! Layout (docs/ARCHITECTURE.md): the decisions live in the `meshd-model`
//! crate, pure and with time passed in; here are the edges that feed and
//! drive it. `probe` measures the cables, `watch` the node itself; the
//! `aggregator` gathers their output and the peers' reports and runs the
//! model's node core; `state` holds what they share; `grpc` is the thin
//! served surface and `transport` the client side towards the peers;
//! `http` serves metrics, health and the mesh page; `ports` bounds the
//! plain listeners (connection caps, timeouts, the file-descriptor reserve); `alert` pushes to
//! Alertmanager; `config` loads, validates, reloads and turns the file into
//! settings; `node` wires one running meshd (and alone uses the
//! aggregator); `demo` runs a whole mesh in one process with injected
//! faults; `install` makes meshd a launchd or systemd service. OS facts
//! live in the `meshd-platform` crate, the pure checks, plans and hostfiles
//! built on them in `meshd-mesh`, both shared with meshctl.

pub mod aggregator;
pub mod alert;
pub mod cadence;
pub mod certificates;
pub mod cli;
pub mod config;
pub mod demo;
pub mod grpc;
pub mod history;
pub mod http;
pub mod install;
pub mod logging;
pub mod metrics;
pub mod node;
pub mod ports;
pub mod probe;
pub mod state;
pub mod transport;
pub mod watch;
