//! Linux facts from sysfs (`/sys/class/infiniband`, `/sys/class/net`,
//! `/sys/fs/pstore`), procfs (memory, boot) and `ip -j -4 addr show`, all
//! read through a [`Source`] so that a bundle directory replays them. The read-only verbs library
//! ([`crate::verbs`]) is not needed here: sysfs already has every port's
//! state, rate and GID table.

pub mod addresses;
pub mod boot;
pub mod counters;
pub mod infiniband;
pub mod memory;
pub mod net;
pub mod pstore;
pub mod values;

use meshd_proto::facts::NodeFacts;

use self::addresses::{InterfaceAddresses, parse_ip_addr_json};
use self::values::parse_word;
use crate::source::{HostCommand, Source};

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
    facts.rdma_enabled = rdma.rdma_enabled;
    facts.rdma_devices_read = rdma.rdma_enabled.is_some();
    facts.ports_complete = rdma.complete;
    facts.blind_spots.extend(rdma.blind_spots);
    facts.ports = rdma.ports;
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
        .map_err(|e| e.to_string())
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
