//! meshd's platform layer.
//!
//! - Raw text comes from a [`source::Source`]: this host (every command under
//!   a timeout), a bundle directory replayed on any machine, or either of
//!   those recorded into a new bundle.
//! - Parsers are plain functions from text to facts (`macos::*`,
//!   `linux::*`, [`ibv`]); they never panic, on any input.
//! - [`collect`] assembles a [`NodeFacts`] for this OS; what cannot be seen
//!   goes into its `blind_spots`, never silently missing.
//! - [`mesh`] is pure: the cable map from every node's facts, the checks,
//!   cabling plans and JACCL hostfiles.
//!
//! The daemon and meshctl both use this crate, so `meshctl doctor --from
//! DIR` diagnoses a bundle on any machine without a daemon.

pub mod bundle;
pub mod command;
pub mod counters;
pub mod ibv;
pub mod linux;
pub mod macos;
pub mod mesh;
pub mod source;
pub mod verbs;
pub mod verbs_probe;

use meshd_proto::facts::{NodeFacts, OsKind};

use crate::source::Source;

/// The platform this binary runs on.
pub fn this_os() -> OsKind {
    match std::env::consts::OS {
        "macos" => OsKind::Macos,
        "linux" => OsKind::Linux,
        _ => OsKind::Other,
    }
}

/// This node's facts as read through `source`, for the platform `os`.
pub fn collect(source: &dyn Source, os: OsKind) -> NodeFacts {
    let mut facts = match os {
        OsKind::Macos => macos::collect(source),
        OsKind::Linux => linux::collect(source),
        // A bundle whose files name no OS lands here too, so the message
        // must not name the OS of the machine reading it.
        OsKind::Other => NodeFacts {
            blind_spots: vec![
                "OS not recognised (neither macOS nor Linux, or a bundle whose files name \
                 neither): no ports, RDMA or bridge facts"
                    .to_owned(),
            ],
            ..NodeFacts::default()
        },
    };
    facts.os = os;
    facts.source = source.describe();
    facts
}
