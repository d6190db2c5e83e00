//! The Linux mesh lab (ARCHITECTURE.md, "How we know it works"): a full mesh of network
//! namespaces joined by veth "cables", a management network on a bridge in
//! a namespace of its own, a real `meshd run` in every node, and the
//! faults the end-to-end suite and the benchmarks inject. Needs root and
//! iproute2; the loss fault needs nftables, the storm seed iputils `ping`.

pub mod command;
pub mod events;
pub mod fault;
pub mod hostile;
pub mod job;
pub mod lab;
pub mod observe;
pub mod plan;
pub mod rank;
pub mod release;
pub mod stall;
pub mod status;
pub mod vm;

pub use lab::{Binaries, Lab, LabError, Options};
pub use plan::Plan;
pub use status::Status;

/// Why the lab cannot run on this machine, if it cannot: it needs root
/// (namespaces) and `ip`.
pub fn missing_prerequisite() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    if euid != Some("0") {
        return Some("not root (network namespaces need it)".into());
    }
    match command::run_any("ip", &["-V"], command::QUICK) {
        Ok(out) if out.success => None,
        _ => Some("`ip` (iproute2) is missing".into()),
    }
}
