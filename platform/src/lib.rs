//! meshd's platform layer.
//!
//! - Raw text comes from a [`source::Source`]: this host (every command under
//!   a timeout), a bundle directory replayed on any machine, or either of
//!   those recorded into a new bundle.
//! - Parsers are plain functions from text to facts (`macos::*`,
//!   `linux::*`, [`ibv`]); they never panic, on any input.
//! - [`collect`] assembles a [`NodeFacts`] for this OS; what cannot be seen
//!   goes into its `blind_spots`, never silently missing.
//!
//! The daemon and meshctl both use this crate, so `meshctl doctor --from
//! DIR` diagnoses a bundle on any machine without a daemon. What is judged
//! of the mesh as a whole from the facts (the cable map, the checks, plans
//! and hostfiles) is the pure `meshd-mesh` crate.

pub mod bundle;
pub mod carrier;
pub mod command;
pub mod counters;
pub mod file;
pub mod ibv;
pub mod linux;
pub mod macos;
pub mod paths;
pub mod rank_env;
pub mod route;
pub mod source;
pub mod verbs;
pub mod verbs_probe;

use std::collections::BTreeMap;

use meshd_domain::facts::{MemoryFacts, NodeFacts, OsKind};

use crate::source::Source;

/// The platform this binary runs on.
pub fn this_os() -> OsKind {
    match std::env::consts::OS {
        "macos" => OsKind::Macos,
        "linux" => OsKind::Linux,
        _ => OsKind::Other,
    }
}

/// Every interface's MTU as `source` shows it (macOS `ifconfig -a`, Linux
/// `/sys/class/net/<name>/mtu`), by interface name; interfaces whose MTU
/// cannot be read are absent, so an absent name means unknown, never a
/// default.
pub fn interface_mtus(source: &dyn Source, os: OsKind) -> BTreeMap<String, u32> {
    match os {
        OsKind::Macos => source
            .capture(source::HostCommand::Ifconfig)
            .map(|text| {
                macos::ifconfig::parse_ifconfig(&text)
                    .into_iter()
                    .filter_map(|i| Some((i.name, i.mtu?)))
                    .collect()
            })
            .unwrap_or_default(),
        OsKind::Linux => linux::net::read_mtus(source),
        OsKind::Other => BTreeMap::new(),
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

/// This node's memory alone, as the memory watcher reads it every few
/// seconds (the facts read includes it too); `None` when nothing about it
/// could be read, with the reasons in `blind_spots`.
pub fn read_memory(
    source: &dyn Source,
    os: OsKind,
    blind_spots: &mut Vec<String>,
) -> Option<MemoryFacts> {
    match os {
        OsKind::Macos => macos::memory::read_memory(source, blind_spots),
        OsKind::Linux => linux::memory::read_memory(source, blind_spots),
        OsKind::Other => {
            blind_spots.push("memory unknown: OS not recognised".to_owned());
            None
        }
    }
}
