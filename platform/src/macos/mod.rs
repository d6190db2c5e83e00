//! macOS facts: Thunderbolt receptacles and peers (`system_profiler`),
//! hardware ports (`networksetup`), interfaces and bridges (`ifconfig`),
//! RDMA (`rdma_ctl`, `ibv_*`) and the OS version (`sw_vers`).
//!
//! [`collect`] only captures; [`join`] is the pure join of the parsed
//! outputs: receptacle N ↔ hardware port "Thunderbolt N" ↔ `enX` ↔
//! `rdma_enX`.

pub mod ifconfig;
pub mod networksetup;
pub mod rdma_ctl;
pub mod sw_vers;
pub mod sysctl;
pub mod system_profiler;

use std::collections::{BTreeMap, BTreeSet};

use meshd_proto::facts::{BridgeFact, Gid, NodeFacts, OsKind, PeerFact, PortFact, RdmaPortFact};

use crate::ibv::{RdmaDevice, parse_ibv_devices, parse_ibv_devinfo};
use crate::source::{CaptureError, HostCommand, Source};

use self::ifconfig::{Interface, parse_ifconfig};
use self::networksetup::{
    HardwarePort, NetworkService, parse_all_services, parse_hardware_ports, parse_service_order,
    service_for_device,
};
use self::rdma_ctl::{RdmaCtlStatus, parse_rdma_ctl_status};
use self::sw_vers::parse_sw_vers;
use self::sysctl::parse_hw_model;
use self::system_profiler::{ThunderboltBus, parse_thunderbolt};

/// This Mac's facts as read through `source`. Checks are not run here.
pub fn collect(source: &dyn Source) -> NodeFacts {
    join(&MacosOutputs::capture(source))
}

/// The output of each macOS command, or why there is none.
#[derive(Debug, Clone, Default)]
pub struct MacosOutputs {
    captures: BTreeMap<HostCommand, Result<String, CaptureError>>,
}

impl MacosOutputs {
    /// Runs (or replays) every [`HostCommand::MACOS`] command.
    pub fn capture(source: &dyn Source) -> MacosOutputs {
        MacosOutputs {
            captures: HostCommand::MACOS
                .iter()
                .map(|&command| (command, source.capture(command)))
                .collect(),
        }
    }

    /// The same with `command`'s output replaced.
    pub fn with(mut self, command: HostCommand, output: Result<String, CaptureError>) -> Self {
        self.captures.insert(command, output);
        self
    }

    /// The text of `command`; when there is none, the reason goes into
    /// `blind_spots`.
    fn text(&self, command: HostCommand, blind_spots: &mut Vec<String>) -> Option<&str> {
        match self.captures.get(&command) {
            Some(Ok(text)) => Some(text),
            Some(Err(error)) => {
                blind_spots.push(error.to_string());
                None
            }
            None => {
                blind_spots.push(format!("{command}: not captured"));
                None
            }
        }
    }
}

/// Every command's output parsed; `None` where it could not be had.
struct Parsed {
    buses: Option<Vec<ThunderboltBus>>,
    hardware_ports: Option<Vec<HardwarePort>>,
    service_order: Option<Vec<NetworkService>>,
    all_services: Option<Vec<NetworkService>>,
    interfaces: Option<Vec<Interface>>,
    listed_devices: Option<Vec<RdmaDevice>>,
    described_devices: Option<Vec<RdmaDevice>>,
}

/// The node's facts from the command outputs. What an output would have
/// told stays unknown when the output is missing or unreadable, and
/// `blind_spots` says why, in [`HostCommand::MACOS`] order.
pub fn join(outputs: &MacosOutputs) -> NodeFacts {
    let mut blind_spots = Vec::new();
    let blind = &mut blind_spots;

    let os_version = match outputs.text(HostCommand::SwVers, blind).map(parse_sw_vers) {
        Some(versions) if versions.product_version.is_empty() => {
            blind.push(format!("{}: no ProductVersion line", HostCommand::SwVers));
            String::new()
        }
        Some(versions) => versions.product_version,
        None => String::new(),
    };
    let model = match outputs
        .text(HostCommand::HwModel, blind)
        .map(parse_hw_model)
    {
        Some(Some(model)) => model,
        Some(None) => {
            blind.push(format!("{}: printed no model", HostCommand::HwModel));
            String::new()
        }
        None => String::new(),
    };
    let buses = outputs
        .text(HostCommand::Thunderbolt, blind)
        .and_then(|text| match parse_thunderbolt(text) {
            Ok(buses) => Some(buses),
            Err(error) => {
                blind.push(format!("{}: {error}", HostCommand::Thunderbolt));
                None
            }
        });
    let hardware_ports = outputs
        .text(HostCommand::HardwarePorts, blind)
        .map(parse_hardware_ports);
    let service_order = outputs
        .text(HostCommand::ServiceOrder, blind)
        .map(parse_service_order);
    let all_services = outputs
        .text(HostCommand::AllServices, blind)
        .map(parse_all_services);
    let interfaces = outputs
        .text(HostCommand::Ifconfig, blind)
        .map(parse_ifconfig);
    let rdma_enabled = match outputs
        .text(HostCommand::RdmaCtl, blind)
        .map(parse_rdma_ctl_status)
    {
        Some(RdmaCtlStatus::Enabled) => Some(true),
        Some(RdmaCtlStatus::Disabled) => Some(false),
        Some(RdmaCtlStatus::Unknown(text)) => {
            blind.push(format!(
                "{}: neither enabled nor disabled: {text:?}",
                HostCommand::RdmaCtl
            ));
            None
        }
        None => None,
    };
    let parsed = Parsed {
        buses,
        hardware_ports,
        service_order,
        all_services,
        interfaces,
        listed_devices: outputs
            .text(HostCommand::IbvDevices, blind)
            .map(parse_ibv_devices),
        described_devices: outputs
            .text(HostCommand::IbvDevinfo, blind)
            .map(parse_ibv_devinfo),
    };

    NodeFacts {
        os: OsKind::Macos,
        os_version,
        model,
        rdma_enabled,
        ports: ports(&parsed, blind),
        bridges: bridges(&parsed),
        checks: Vec::new(),
        blind_spots,
        source: String::new(),
    }
}

/// One port per Thunderbolt receptacle or "Thunderbolt N" hardware port,
/// by number; then one per RDMA device that no such port claims (its
/// hardware port unknown), so no RDMA device goes unreported.
fn ports(parsed: &Parsed, blind_spots: &mut Vec<String>) -> Vec<PortFact> {
    let mut receptacles: BTreeMap<u32, &ThunderboltBus> = BTreeMap::new();
    for bus in parsed.buses.iter().flatten() {
        match bus.receptacle {
            Some(number) => {
                receptacles.entry(number).or_insert(bus);
            }
            None => blind_spots.push(format!(
                "{}: bus {:?} has no receptacle number; left out",
                HostCommand::Thunderbolt,
                bus.name
            )),
        }
    }
    let hardware_ports: BTreeMap<u32, &HardwarePort> = parsed
        .hardware_ports
        .iter()
        .flatten()
        .filter_map(|port| Some((port.thunderbolt_number()?, port)))
        .collect();
    let numbers: BTreeSet<u32> = receptacles
        .keys()
        .chain(hardware_ports.keys())
        .copied()
        .collect();

    let rdma_devices = rdma_device_names(parsed);
    let mut ports: Vec<PortFact> = numbers
        .into_iter()
        .map(|number| {
            let hardware_port = hardware_ports.get(&number);
            let mut port = PortFact {
                name: hardware_port
                    .map_or_else(|| format!("Thunderbolt {number}"), |port| port.name.clone()),
                receptacle: number,
                iface: hardware_port.map(|p| p.device.clone()).unwrap_or_default(),
                usable_for_rdma: true,
                ..PortFact::default()
            };
            if let Some(bus) = receptacles.get(&number) {
                apply_thunderbolt(&mut port, bus);
            }
            let paired = format!("rdma_{}", port.iface);
            if !port.iface.is_empty() && rdma_devices.contains(&paired) {
                port.rdma_device = paired;
            }
            port
        })
        .collect();
    for device in &rdma_devices {
        if ports.iter().any(|p| &p.rdma_device == device) {
            continue;
        }
        ports.push(PortFact {
            iface: device.strip_prefix("rdma_").unwrap_or_default().to_owned(),
            rdma_device: device.clone(),
            usable_for_rdma: true,
            ..PortFact::default()
        });
    }
    for port in &mut ports {
        apply_interface(port, parsed.interfaces.as_deref(), blind_spots);
        port.rdma = rdma_port(parsed.described_devices.as_deref(), &port.rdma_device);
    }
    ports
}

/// Devices named by `ibv_devices` or `ibv_devinfo`, in that order.
fn rdma_device_names(parsed: &Parsed) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let listed = parsed.listed_devices.iter().flatten();
    let described = parsed.described_devices.iter().flatten();
    for device in listed.chain(described) {
        if !names.contains(&device.name) {
            names.push(device.name.clone());
        }
    }
    names
}

fn apply_thunderbolt(port: &mut PortFact, bus: &ThunderboltBus) {
    port.domain_uuid = bus.domain_uuid.clone();
    port.negotiated_speed_bps = bus.speed.negotiated_bps();
    port.max_speed_bps = bus.speed.max_bps();
    port.peer = bus.peer().map(|peer| PeerFact {
        domain_uuid: peer.domain_uuid.clone(),
        model: peer.device_name.clone(),
        name: peer.name.clone(),
        rdma_service: peer.rdma_service,
    });
    let others: Vec<&str> = bus.other_devices().iter().map(|d| d.label()).collect();
    port.other_device = (!others.is_empty()).then(|| others.join(", "));
}

fn apply_interface(
    port: &mut PortFact,
    interfaces: Option<&[Interface]>,
    blind_spots: &mut Vec<String>,
) {
    let Some(interfaces) = interfaces else {
        return;
    };
    if port.iface.is_empty() {
        return;
    }
    match interfaces.iter().find(|i| i.name == port.iface) {
        Some(interface) => {
            port.ipv4 = interface.ipv4.clone();
            port.iface_up = interface.active;
        }
        None => blind_spots.push(format!(
            "{}: no {} stanza, so its address and status are unknown",
            HostCommand::Ifconfig,
            port.iface
        )),
    }
}

/// Port 1 of `device` as `ibv_devinfo` describes it; macOS RDMA devices
/// have exactly one port.
fn rdma_port(described: Option<&[RdmaDevice]>, device: &str) -> Option<RdmaPortFact> {
    let port = described?
        .iter()
        .find(|d| d.name == device)?
        .ports
        .iter()
        .find(|p| p.port == 1)?;
    Some(RdmaPortFact {
        port: port.port,
        state: port.state,
        active_speed_bps: port.active_speed_bps().unwrap_or(0),
        gids: port
            .gids
            .iter()
            .map(|&(index, address)| Gid { index, address })
            .collect(),
    })
}

/// Every bridge interface with the network service found by its device
/// (users rename services); the service's enabled state from the
/// all-services list, else from the order's `(*)` mark.
fn bridges(parsed: &Parsed) -> Vec<BridgeFact> {
    parsed
        .interfaces
        .iter()
        .flatten()
        .filter(|i| i.is_bridge())
        .map(|bridge| {
            let service = parsed
                .service_order
                .as_deref()
                .and_then(|order| service_for_device(order, &bridge.name));
            let service_enabled = service.map(|service| {
                parsed
                    .all_services
                    .iter()
                    .flatten()
                    .find(|listed| listed.name == service.name)
                    .map_or(service.enabled, |listed| listed.enabled)
            });
            BridgeFact {
                name: bridge.name.clone(),
                active: bridge.forwarding(),
                members: bridge.members.clone(),
                service: service.map(|s| s.name.clone()),
                service_enabled,
            }
        })
        .collect()
}
