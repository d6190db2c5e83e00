//! Linux facts from sysfs (`/sys/class/infiniband`, `/sys/class/net`,
//! `/sys/fs/pstore`), procfs (memory, boot) and `ip -j -4 addr show`, all
//! read through a [`Source`] so that a bundle directory replays them. Where
//! the read-only verbs library ([`crate::verbs`]) works, the RDMA ports'
//! facts are its own, checked against sysfs ([`verbs_check`]); sysfs pairs
//! ports with interfaces and is the fallback. The CPU watcher's process
//! table ([`procs`]) is read every second straight from `/proc`, not as facts.

pub mod addresses;
pub mod boot;
pub mod counters;
pub mod infiniband;
pub mod memory;
pub mod net;
pub mod procs;
pub mod pstore;
pub mod queue_pairs;
pub mod route;
pub mod values;
pub mod verbs_check;

use meshd_domain::facts::{NodeFacts, OsKind};

use self::addresses::{InterfaceAddresses, parse_ip_addr_json};
use self::values::parse_word;
use crate::source::{CaptureError, HostCommand, Source};

const OS_RELEASE: &str = "/proc/sys/kernel/osrelease";
/// x86 and most servers: the DMI product name.
const DMI_PRODUCT_NAME: &str = "/sys/class/dmi/id/product_name";
/// ARM boards without DMI: the device tree's model, NUL-terminated.
const DEVICE_TREE_MODEL: &str = "/sys/firmware/devicetree/base/model";

/// This node's facts as sysfs, procfs and `ip` show them. What cannot be
/// read is named in `blind_spots`, never guessed.
pub fn collect(source: &dyn Source) -> NodeFacts {
    let mut facts = NodeFacts::default();
    match source.read_file(OS_RELEASE) {
        Ok(text) => facts.os_version = text.trim().to_owned(),
        Err(err) => facts.blind_spots.push(format!(
            "kernel release unknown: cannot read {OS_RELEASE}: {err}"
        )),
    }
    match model(source) {
        Ok(model) => facts.model = model,
        Err(why) => facts.blind_spots.push(why),
    }

    let addresses = interface_addresses(source, &mut facts.blind_spots);
    let rdma = infiniband::read_rdma_ports(source);
    let rdma_enabled = rdma.rdma_enabled;
    facts.rdma_enabled = rdma.rdma_enabled;
    facts.rdma_devices_read = rdma.rdma_enabled.is_some();
    facts.ports_complete = rdma.complete;
    facts.blind_spots.extend(rdma.blind_spots);
    facts.ports = rdma.ports;
    // A kernel without an RDMA core has nothing for the library to list.
    let verbs = match rdma_enabled {
        Some(false) => None,
        _ => source.rdma_devices(OsKind::Linux),
    };
    match verbs {
        Some(Ok(found)) => {
            let problems = verbs_check::prefer_verbs(&mut facts.ports, &found.devices);
            facts.blind_spots.extend(found.unknown);
            facts.blind_spots.extend(problems);
        }
        Some(Err(why)) => facts
            .blind_spots
            .push(format!("verbs: {why}; RDMA ports read from sysfs instead")),
        // No verbs library here (or a replayed bundle): sysfs alone.
        None => {}
    }
    for port in &mut facts.ports {
        if port.iface.is_empty() {
            continue;
        }
        port.iface_up = net::read_interface_up(source, &port.iface);
        if port.iface_up.is_none() {
            facts.blind_spots.push(format!(
                "{}: state of {} unknown (no readable operstate or carrier)",
                port.name, port.iface
            ));
        }
        if let Some(addresses) = &addresses {
            port.ipv4 = Some(
                addresses
                    .by_interface
                    .get(&port.iface)
                    .cloned()
                    .unwrap_or_default(),
            );
        }
    }

    match net::read_bridges(source) {
        Ok(bridges) => {
            facts.bridges = Some(bridges.bridges.into_iter().map(|b| b.bridge).collect());
            facts.blind_spots.extend(bridges.problems);
        }
        Err(err) => facts.blind_spots.push(format!(
            "bridges unknown: cannot list {}: {err}",
            net::SYS_CLASS_NET
        )),
    }
    facts.boot = boot::read_boot(source, &mut facts.blind_spots);
    facts.memory = memory::read_memory(source, &mut facts.blind_spots);
    facts.panics = pstore::read_panics(source, &mut facts.blind_spots);
    facts
}

/// BusyBox's `ip` (initramfs systems, small images) has no `-j`: say so in
/// one line instead of quoting its usage text.
fn without_json_output(err: &CaptureError) -> Option<String> {
    match err {
        CaptureError::Failed {
            command, stderr, ..
        } if stderr.starts_with("BusyBox") => Some(format!(
            "{command}: this `ip` is BusyBox's, which has no JSON output (-j); iproute2's `ip` has"
        )),
        _ => None,
    }
}

fn model(source: &dyn Source) -> Result<String, String> {
    let dmi = source.read_file(DMI_PRODUCT_NAME);
    if let Some(model) = dmi.as_deref().ok().and_then(parse_word) {
        return Ok(model.to_owned());
    }
    let tree = source.read_file(DEVICE_TREE_MODEL);
    if let Some(model) = tree
        .as_deref()
        .ok()
        .and_then(|text| parse_word(text.trim_end_matches('\0')))
    {
        return Ok(model.to_owned());
    }
    let why = |result: std::io::Result<String>| match result {
        Ok(_) => "empty".to_owned(),
        Err(err) => err.to_string(),
    };
    Err(format!(
        "hardware model unknown: {DMI_PRODUCT_NAME}: {}; {DEVICE_TREE_MODEL}: {}",
        why(dmi),
        why(tree)
    ))
}

/// The IPv4 addresses per interface, or `None` (with the reason in the
/// blind spots) when `ip` could not tell.
fn interface_addresses(
    source: &dyn Source,
    blind_spots: &mut Vec<String>,
) -> Option<InterfaceAddresses> {
    let parsed = source
        .capture(HostCommand::IpAddr)
        .map_err(|e| without_json_output(&e).unwrap_or_else(|| e.to_string()))
        .and_then(|text| parse_ip_addr_json(&text).map_err(|e| e.to_string()));
    match parsed {
        Ok(addresses) => {
            blind_spots.extend(
                addresses
                    .skipped
                    .iter()
                    .map(|why| format!("{}: {why}", HostCommand::IpAddr)),
            );
            Some(addresses)
        }
        Err(why) => {
            blind_spots.push(format!(
                "IPv4 addresses of the RDMA interfaces unknown: {why}"
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busybox_ip_is_named_in_one_line() {
        let busybox = CaptureError::Failed {
            command: "ip -j -4 addr show".into(),
            status: "exit status: 1".into(),
            stderr: "BusyBox v1.35.0 (Debian 1:1.35.0-4+deb12u1+b1) multi-call binary.\n\nUsage: ip [OPTIONS] address|route|link|tunnel|neigh|rule [ARGS]\n".into(),
        };
        assert_eq!(
            without_json_output(&busybox).as_deref(),
            Some(
                "ip -j -4 addr show: this `ip` is BusyBox's, which has no JSON output (-j); iproute2's `ip` has"
            )
        );
        let other = CaptureError::Failed {
            command: "ip -j -4 addr show".into(),
            status: "exit status: 255".into(),
            stderr: "Cannot open netlink socket".into(),
        };
        assert_eq!(without_json_output(&other), None);
    }
}
