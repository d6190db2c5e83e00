//! macOS facts: Thunderbolt receptacles and peers (`system_profiler`),
//! hardware ports and how their addresses are configured (`networksetup`),
//! interfaces and bridges (`ifconfig`), RDMA (`rdma_ctl`, `ibv_*`), the OS
//! version (`sw_vers`), memory and boot (`sysctl`, `vm_stat`), power
//! settings (`pmset`) and the newest kernel panic report.
//!
//! [`collect`] only captures; [`join`] is the pure join of the parsed
//! outputs: receptacle N ↔ hardware port "Thunderbolt N" ↔ `enX` ↔
//! `rdma_enX`.

pub mod ifconfig;
pub mod memory;
pub mod netstat;
pub mod networksetup;
pub mod panic_report;
pub mod pmset;
pub mod rdma_ctl;
pub mod route;
pub mod routing_table;
pub mod socketfilterfw;
pub mod sw_vers;
pub mod sysctl;
pub mod system_profiler;
pub mod vm_stat;

use std::collections::{BTreeMap, BTreeSet};

use meshd_domain::facts::{
    BridgeFact, EXO_NETWORK_DAEMON, FirewallFact, HardwarePort, NetworkSetupFact, NodeFacts,
    OsKind, PanicFacts, PanicReport, PeerFact, PortFact, PowerSettings, RdmaPortFact, RdmaReader,
};

use crate::ibv::{RdmaDevice, parse_ibv_devices, parse_ibv_devinfo};
use crate::source::{CaptureError, HostCommand, Source};

use self::ifconfig::{Interface, parse_ifconfig};
use self::memory::{MemoryOutputs, boot_identity, memory_facts};
use self::networksetup::{
    NetworkService, parse_all_services, parse_current_location, parse_hardware_ports,
    parse_service_info, parse_service_order, service_for_device,
};
use self::panic_report::{
    DIAGNOSTIC_REPORTS, PANIC_HEAD_BYTES, newest_panic_report, parse_panic_report,
};
use self::pmset::parse_pmset;
use self::rdma_ctl::{RdmaCtlStatus, parse_rdma_ctl_status};
use self::sw_vers::parse_sw_vers;
use self::sysctl::parse_hw_model;
use self::system_profiler::{
    ThunderboltBus, ThunderboltPort, is_mac_model_identifier, parse_thunderbolt,
};

/// This Mac's facts as read through `source`. Checks are not run here.
/// The RDMA devices come from the verbs library where `source` has it
/// (live, macOS 26.2+), else from `ibv_devices` / `ibv_devinfo -v`.
pub fn collect(source: &dyn Source) -> NodeFacts {
    match source.rdma_devices(OsKind::Macos) {
        Some(Ok(found)) => {
            let mut facts = join(&MacosOutputs::capture_with_verbs(source, found.devices));
            facts.blind_spots.extend(found.unknown);
            facts
        }
        Some(Err(why)) => {
            let mut facts = join(&MacosOutputs::capture(source));
            facts
                .blind_spots
                .push(format!("verbs: {why}; used ibv_devinfo instead"));
            facts
        }
        None => join(&MacosOutputs::capture(source)),
    }
}

/// What is known of the panic reports: the listing of
/// [`DIAGNOSTIC_REPORTS`], and the first part of the newest report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PanicOutputs {
    /// The directory could not be listed.
    Unlisted(String),
    /// Listed; no panic report in it.
    None,
    /// The newest report's file name and the first part of it.
    Newest {
        file: String,
        head: Result<String, String>,
    },
}

/// The output of each macOS command, or why there is none.
#[derive(Debug, Clone, Default)]
pub struct MacosOutputs {
    captures: BTreeMap<HostCommand, Result<String, CaptureError>>,
    /// `networksetup -getinfo SERVICE` of each Thunderbolt port's service.
    service_infos: BTreeMap<String, Result<String, CaptureError>>,
    /// `None` when not looked at.
    panics: Option<PanicOutputs>,
    /// The entries of [`LAUNCH_DAEMONS`], or why they could not be listed;
    /// `None` when not looked at.
    launch_daemons: Option<Result<Vec<String>, String>>,
    /// The devices as the verbs library listed them; when present, the
    /// `ibv_*` tools were not run.
    verbs: Option<Vec<RdmaDevice>>,
}

impl MacosOutputs {
    /// Runs (or replays) every [`HostCommand::MACOS`] command, the service
    /// info of each Thunderbolt port, and reads the newest panic report.
    pub fn capture(source: &dyn Source) -> MacosOutputs {
        Self::capture_commands(source, HostCommand::MACOS.iter().copied(), None)
    }

    /// Runs every command but the `ibv_*` tools, whose facts `devices`
    /// (from the verbs library) already hold.
    pub fn capture_with_verbs(source: &dyn Source, devices: Vec<RdmaDevice>) -> MacosOutputs {
        Self::capture_commands(
            source,
            HostCommand::MACOS
                .iter()
                .copied()
                .filter(|c| !matches!(c, HostCommand::IbvDevices | HostCommand::IbvDevinfo)),
            Some(devices),
        )
    }

    fn capture_commands(
        source: &dyn Source,
        commands: impl Iterator<Item = HostCommand>,
        verbs: Option<Vec<RdmaDevice>>,
    ) -> MacosOutputs {
        let captures: BTreeMap<HostCommand, Result<String, CaptureError>> = commands
            .map(|command| (command, source.capture(command)))
            .collect();
        let service_infos = thunderbolt_services(&captures)
            .into_iter()
            .map(|service| {
                let info = source.capture_for(HostCommand::ServiceInfo, &service);
                (service, info)
            })
            .collect();
        MacosOutputs {
            captures,
            service_infos,
            panics: Some(read_panic_reports(source)),
            launch_daemons: Some(
                source
                    .list_dir(LAUNCH_DAEMONS)
                    .map_err(|err| format!("cannot list {LAUNCH_DAEMONS}: {err}")),
            ),
            verbs,
        }
    }

    /// The same with `command`'s output replaced.
    pub fn with(mut self, command: HostCommand, output: Result<String, CaptureError>) -> Self {
        self.captures.insert(command, output);
        self
    }

    /// The same with `service`'s `networksetup -getinfo` output replaced.
    pub fn with_service_info(
        mut self,
        service: &str,
        output: Result<String, CaptureError>,
    ) -> Self {
        self.service_infos.insert(service.to_owned(), output);
        self
    }

    /// The same with the entries of /Library/LaunchDaemons replaced.
    pub fn with_launch_daemons(mut self, listed: Result<Vec<String>, String>) -> Self {
        self.launch_daemons = Some(listed);
        self
    }

    /// The same with what the panic reports hold replaced.
    pub fn with_panics(mut self, panics: PanicOutputs) -> Self {
        self.panics = Some(panics);
        self
    }

    /// `command`'s output through `parse`; when there is none, the
    /// reason goes into `blind_spots`.
    fn parsed<T>(
        &self,
        command: HostCommand,
        parse: fn(&str) -> T,
        blind_spots: &mut Vec<String>,
    ) -> Option<T> {
        self.text(command, blind_spots).map(parse)
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

/// The network services of the Thunderbolt hardware ports (found by
/// device: users rename services), whose address configuration is asked
/// for; none when the ports or the services were not listed.
fn thunderbolt_services(
    captures: &BTreeMap<HostCommand, Result<String, CaptureError>>,
) -> Vec<String> {
    let text = |command| captures.get(&command).and_then(|c| c.as_deref().ok());
    let (Some(ports), Some(order)) = (
        text(HostCommand::HardwarePorts),
        text(HostCommand::ServiceOrder),
    ) else {
        return Vec::new();
    };
    let order = parse_service_order(order);
    let mut services: Vec<String> = parse_hardware_ports(ports)
        .iter()
        .filter(|port| port.thunderbolt_number().is_some() && !port.device.is_empty())
        .filter_map(|port| service_for_device(&order, &port.device))
        .map(|service| service.name.clone())
        .collect();
    services.sort();
    services.dedup();
    services
}

/// Lists [`DIAGNOSTIC_REPORTS`] and reads the first part of the newest
/// panic report in it.
fn read_panic_reports(source: &dyn Source) -> PanicOutputs {
    let names = match source.list_dir(DIAGNOSTIC_REPORTS) {
        Ok(names) => names,
        Err(err) => {
            return PanicOutputs::Unlisted(format!("cannot list {DIAGNOSTIC_REPORTS}: {err}"));
        }
    };
    let Some(newest) = newest_panic_report(names.iter().map(String::as_str)) else {
        return PanicOutputs::None;
    };
    let path = format!("{DIAGNOSTIC_REPORTS}/{newest}");
    PanicOutputs::Newest {
        file: newest.to_owned(),
        head: source
            .read_file_head(&path, PANIC_HEAD_BYTES)
            .map_err(|err| format!("cannot read {path}: {err}")),
    }
}

/// What the panic reports say; `None` (with the reason in `blind_spots`)
/// when they were not looked at or could not be listed.
fn panics(outputs: Option<&PanicOutputs>, blind_spots: &mut Vec<String>) -> Option<PanicFacts> {
    match outputs {
        None => {
            blind_spots.push(format!(
                "kernel panic reports: {DIAGNOSTIC_REPORTS} not read"
            ));
            None
        }
        Some(PanicOutputs::Unlisted(why)) => {
            blind_spots.push(format!("kernel panic reports unknown: {why}"));
            None
        }
        Some(PanicOutputs::None) => Some(PanicFacts { latest: None }),
        Some(PanicOutputs::Newest { file, head }) => {
            let report = head
                .as_ref()
                .map_err(String::clone)
                .and_then(|head| parse_panic_report(file, head))
                .unwrap_or_else(|why| {
                    // The newest report exists; only what it says is unknown.
                    blind_spots.push(format!("kernel panic report: {why}"));
                    PanicReport {
                        file: file.clone(),
                        ..PanicReport::default()
                    }
                });
            Some(PanicFacts {
                latest: Some(report),
            })
        }
    }
}

/// macOS offers no per-port RDMA traffic counter that meshd could read
/// without privileges: verbs has none, and `netstat` counts the IP packets
/// of `enX`, not what `rdma_enX` moves.
pub const NO_RDMA_TRAFFIC_COUNTER: &str = "RDMA traffic per port: macOS has no per-port RDMA \
     data counter readable without privileges (verbs has none; netstat counts IP packets on enX, \
     not RDMA), so a stalled job cannot be told from a working one (job_stalled is judged on \
     Linux only)";

/// Every command's output parsed; `None` where it could not be had.
struct Parsed {
    buses: Option<Vec<ThunderboltBus>>,
    hardware_ports: Option<Vec<HardwarePort>>,
    service_order: Option<Vec<NetworkService>>,
    all_services: Option<Vec<NetworkService>>,
    interfaces: Option<Vec<Interface>>,
    listed_devices: Option<Vec<RdmaDevice>>,
    described_devices: Option<Vec<RdmaDevice>>,
    /// What described the devices.
    reader: RdmaReader,
}

/// The node's facts from the command outputs. What an output would have
/// told stays unknown when the output is missing or unreadable, and
/// `blind_spots` says why, in [`HostCommand::MACOS`] order.
pub fn join(outputs: &MacosOutputs) -> NodeFacts {
    let mut blind_spots = Vec::new();
    let blind = &mut blind_spots;

    let (os_version, os_build) = os_version(outputs, blind);
    let model = hardware_model(outputs, blind);
    let buses = thunderbolt_buses(outputs, blind);
    let hardware_ports = outputs.parsed(HostCommand::HardwarePorts, parse_hardware_ports, blind);
    let service_order = outputs.parsed(HostCommand::ServiceOrder, parse_service_order, blind);
    let all_services = outputs.parsed(HostCommand::AllServices, parse_all_services, blind);
    let location = current_location(outputs, blind);
    let interfaces = outputs.parsed(HostCommand::Ifconfig, parse_ifconfig, blind);
    let rdma_enabled = rdma_enabled(outputs, blind);
    let (listed_devices, described_devices, reader) = rdma_device_outputs(outputs, blind);
    let parsed = Parsed {
        buses,
        hardware_ports,
        service_order,
        all_services,
        interfaces,
        listed_devices,
        described_devices,
        reader,
    };

    let firewall = firewall(outputs, blind);
    // The memory, boot and power commands are named in command order,
    // before what the ports' join finds.
    let sysctl = outputs.text(HostCommand::Sysctl, blind);
    let boot = boot_identity(sysctl, blind);
    let memory = memory_facts(
        MemoryOutputs {
            sysctl,
            vm_stat: outputs.text(HostCommand::VmStat, blind),
            gpu_wired_limit: outputs.text(HostCommand::GpuWiredLimit, blind),
        },
        blind,
    );
    let power = power(outputs, blind);
    let (mut ports, ports_complete) = ports(&parsed, blind);
    apply_services(&mut ports, outputs, parsed.service_order.as_deref(), blind);
    let panics = panics(outputs.panics.as_ref(), blind);
    let network_setup = network_setup(location, outputs.launch_daemons.as_ref(), blind);
    blind.push(NO_RDMA_TRAFFIC_COUNTER.to_owned());
    NodeFacts {
        os: OsKind::Macos,
        os_version,
        os_build,
        model,
        rdma_enabled,
        rdma_devices_read: parsed.listed_devices.is_some() || parsed.described_devices.is_some(),
        ports,
        ports_complete,
        bridges: bridges(&parsed),
        checks: Vec::new(),
        blind_spots,
        source: String::new(),
        firewall,
        boot,
        memory,
        power,
        panics,
        network_setup,
    }
}

/// Where LaunchDaemons are installed; a tool's daemon there runs as root
/// at boot whoever is logged in.
const LAUNCH_DAEMONS: &str = "/Library/LaunchDaemons";

/// The active network location; `None` (and named) when unknown.
fn current_location(outputs: &MacosOutputs, blind: &mut Vec<String>) -> Option<String> {
    let location = parse_current_location(outputs.text(HostCommand::CurrentLocation, blind)?);
    if location.is_none() {
        blind.push(format!(
            "{}: printed no location name",
            HostCommand::CurrentLocation
        ));
    }
    location
}

/// The location and whether exo's network daemon is installed; `None`
/// when neither is known.
fn network_setup(
    location: Option<String>,
    launch_daemons: Option<&Result<Vec<String>, String>>,
    blind: &mut Vec<String>,
) -> Option<NetworkSetupFact> {
    let plist = format!("{EXO_NETWORK_DAEMON}.plist");
    let exo_daemon = match launch_daemons {
        Some(Ok(names)) => Some(names.contains(&plist)),
        Some(Err(why)) => {
            blind.push(format!("whether exo's network daemon is installed: {why}"));
            None
        }
        None => {
            blind.push(format!(
                "whether exo's network daemon is installed: {LAUNCH_DAEMONS} not read"
            ));
            None
        }
    };
    (location.is_some() || exo_daemon.is_some()).then_some(NetworkSetupFact {
        location,
        exo_daemon,
    })
}

/// The product version and build from `sw_vers`, each empty (and named)
/// where its line is missing.
fn os_version(outputs: &MacosOutputs, blind: &mut Vec<String>) -> (String, String) {
    let Some(versions) = outputs.parsed(HostCommand::SwVers, parse_sw_vers, blind) else {
        return (String::new(), String::new());
    };
    for (value, line) in [
        (&versions.product_version, "ProductVersion"),
        (&versions.build_version, "BuildVersion"),
    ] {
        if value.is_empty() {
            blind.push(format!("{}: no {line} line", HostCommand::SwVers));
        }
    }
    (versions.product_version, versions.build_version)
}

/// The hardware model identifier ("Mac16,9"); empty where it could not be
/// read.
fn hardware_model(outputs: &MacosOutputs, blind: &mut Vec<String>) -> String {
    match outputs.parsed(HostCommand::HwModel, parse_hw_model, blind) {
        Some(Some(model)) => model,
        Some(None) => {
            blind.push(format!("{}: printed no model", HostCommand::HwModel));
            String::new()
        }
        None => String::new(),
    }
}

fn thunderbolt_buses(
    outputs: &MacosOutputs,
    blind: &mut Vec<String>,
) -> Option<Vec<ThunderboltBus>> {
    let text = outputs.text(HostCommand::Thunderbolt, blind)?;
    match parse_thunderbolt(text) {
        Ok(buses) => Some(buses),
        Err(error) => {
            blind.push(format!("{}: {error}", HostCommand::Thunderbolt));
            None
        }
    }
}

/// Whether `rdma_ctl status` says RDMA is enabled.
fn rdma_enabled(outputs: &MacosOutputs, blind: &mut Vec<String>) -> Option<bool> {
    match outputs.parsed(HostCommand::RdmaCtl, parse_rdma_ctl_status, blind)? {
        RdmaCtlStatus::Enabled => Some(true),
        RdmaCtlStatus::Disabled => Some(false),
        RdmaCtlStatus::Unknown(text) => {
            blind.push(format!(
                "{}: neither enabled nor disabled: {text:?}",
                HostCommand::RdmaCtl
            ));
            None
        }
    }
}

/// The RDMA devices as listed and as described, and what described them:
/// the verbs library where it was read, else `ibv_devices` and
/// `ibv_devinfo`.
fn rdma_device_outputs(
    outputs: &MacosOutputs,
    blind: &mut Vec<String>,
) -> (Option<Vec<RdmaDevice>>, Option<Vec<RdmaDevice>>, RdmaReader) {
    match &outputs.verbs {
        Some(devices) => (
            Some(devices.clone()),
            Some(devices.clone()),
            RdmaReader::Verbs,
        ),
        None => (
            outputs.parsed(HostCommand::IbvDevices, parse_ibv_devices, blind),
            outputs.parsed(HostCommand::IbvDevinfo, parse_ibv_devinfo, blind),
            RdmaReader::IbvDevinfo,
        ),
    }
}

/// The power settings from `pmset`; `None` (and named) where it shows none
/// that meshd reads.
fn power(outputs: &MacosOutputs, blind: &mut Vec<String>) -> Option<PowerSettings> {
    let power = parse_pmset(outputs.text(HostCommand::Pmset, blind)?);
    if power.is_none() {
        blind.push(format!("{}: no setting meshd reads", HostCommand::Pmset));
    }
    power
}

/// Each Thunderbolt port's network service, and how it configures the
/// port's address (its `networksetup -getinfo`); unknown (and named) where
/// the service or its info is not known. A port without a service of its
/// own has no configuration to read.
fn apply_services(
    ports: &mut [PortFact],
    outputs: &MacosOutputs,
    order: Option<&[NetworkService]>,
    blind_spots: &mut Vec<String>,
) {
    let Some(order) = order else {
        return;
    };
    for port in ports
        .iter_mut()
        .filter(|p| !p.iface.is_empty() && p.receptacle != 0)
    {
        let Some(service) = service_for_device(order, &port.iface) else {
            continue;
        };
        port.service.clone_from(&service.name);
        match outputs.service_infos.get(&service.name) {
            Some(Ok(text)) => {
                port.ipv4_method = parse_service_info(text);
                if port.ipv4_method.is_none() {
                    blind_spots.push(format!(
                        "{}: names no configuration method",
                        HostCommand::ServiceInfo.line_for(Some(&service.name))
                    ));
                }
            }
            Some(Err(err)) => blind_spots.push(err.to_string()),
            None => blind_spots.push(format!(
                "{}: not captured",
                HostCommand::ServiceInfo.line_for(Some(&service.name))
            )),
        }
    }
}

/// The Application Firewall; `None` when neither of its outputs could be
/// had.
fn firewall(outputs: &MacosOutputs, blind: &mut Vec<String>) -> Option<FirewallFact> {
    let state = outputs.text(HostCommand::FirewallState, blind);
    let rules = outputs.text(HostCommand::FirewallRules, blind);
    if state.is_none() && rules.is_none() {
        return None;
    }
    let (fact, unknown) = socketfilterfw::firewall_fact(state, rules);
    blind.extend(unknown);
    Some(fact)
}

/// One port per Thunderbolt receptacle or "Thunderbolt N" hardware port,
/// by number; then one per RDMA device that no such port claims (its
/// hardware port unknown), so no RDMA device goes unreported. Complete
/// when the hardware ports, or a Thunderbolt report that placed every
/// receptacle, were read.
fn ports(parsed: &Parsed, blind_spots: &mut Vec<String>) -> (Vec<PortFact>, bool) {
    let (receptacles, every_receptacle_placed) = receptacles(parsed, blind_spots);
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
    let complete =
        parsed.hardware_ports.is_some() || (parsed.buses.is_some() && every_receptacle_placed);

    let rdma_devices = rdma_devices(parsed);
    let mut ports: Vec<PortFact> = numbers
        .into_iter()
        .map(|number| {
            let mut port = numbered_port(number, hardware_ports.get(&number).copied());
            if let Some((bus, receptacle)) = receptacles.get(&number) {
                apply_thunderbolt(&mut port, bus, receptacle, blind_spots);
            }
            let paired = format!("rdma_{}", port.iface);
            if let Some(device) = rdma_devices
                .iter()
                .find(|d| !port.iface.is_empty() && d.name == paired)
            {
                port.rdma_device = device.name.clone();
                port.rdma_node_guid = device.node_guid.clone();
            }
            port
        })
        .collect();
    let unclaimed: Vec<PortFact> = rdma_devices
        .iter()
        .filter(|device| !ports.iter().any(|p| p.rdma_device == device.name))
        .map(unclaimed_device_port)
        .collect();
    ports.extend(unclaimed);
    for port in &mut ports {
        apply_interface(port, parsed.interfaces.as_deref(), blind_spots);
        port.rdma = rdma_port(
            parsed.described_devices.as_deref(),
            &port.rdma_device,
            parsed.reader,
        );
    }
    (ports, complete)
}

/// The Thunderbolt report's receptacles by number (the first bus to name a
/// number keeps it), and whether every receptacle was placed: a bus
/// without receptacles, or a receptacle without a number, is left out and
/// named.
fn receptacles<'p>(
    parsed: &'p Parsed,
    blind_spots: &mut Vec<String>,
) -> (
    BTreeMap<u32, (&'p ThunderboltBus, &'p ThunderboltPort)>,
    bool,
) {
    let mut receptacles = BTreeMap::new();
    let mut every_receptacle_placed = true;
    for bus in parsed.buses.iter().flatten() {
        if bus.ports.is_empty() {
            every_receptacle_placed = false;
            blind_spots.push(format!(
                "{}: bus {:?} has no receptacle; left out",
                HostCommand::Thunderbolt,
                bus.name
            ));
        }
        if !bus.unplaced_devices.is_empty() {
            blind_spots.push(format!(
                "{}: bus {:?} lists {} device(s) without saying which of its receptacles \
                 they are on, so what is cabled to each is unknown",
                HostCommand::Thunderbolt,
                bus.name,
                bus.unplaced_devices.len()
            ));
        }
        for port in &bus.ports {
            match port.receptacle {
                Some(number) => {
                    receptacles.entry(number).or_insert((bus, port));
                }
                None => {
                    every_receptacle_placed = false;
                    blind_spots.push(format!(
                        "{}: bus {:?} has a receptacle without a number; left out",
                        HostCommand::Thunderbolt,
                        bus.name
                    ));
                }
            }
        }
    }
    (receptacles, every_receptacle_placed)
}

/// Port `number`, named and paired with its interface by its hardware port
/// where there is one.
fn numbered_port(number: u32, hardware_port: Option<&HardwarePort>) -> PortFact {
    PortFact {
        name: hardware_port
            .map_or_else(|| format!("Thunderbolt {number}"), |port| port.name.clone()),
        receptacle: number,
        iface: hardware_port.map(|p| p.device.clone()).unwrap_or_default(),
        usable_for_rdma: true,
        ..PortFact::default()
    }
}

/// A port for an RDMA device that no Thunderbolt port claims, its interface
/// taken from the device's name (`rdma_enX`).
fn unclaimed_device_port(device: &RdmaDevice) -> PortFact {
    PortFact {
        iface: device
            .name
            .strip_prefix("rdma_")
            .unwrap_or_default()
            .to_owned(),
        rdma_device: device.name.clone(),
        rdma_node_guid: device.node_guid.clone(),
        usable_for_rdma: true,
        ..PortFact::default()
    }
}

/// Devices named by `ibv_devices` or `ibv_devinfo`, in that order, each
/// with the node GUID either gives.
fn rdma_devices(parsed: &Parsed) -> Vec<RdmaDevice> {
    let mut devices: Vec<RdmaDevice> = Vec::new();
    let listed = parsed.listed_devices.iter().flatten();
    let described = parsed.described_devices.iter().flatten();
    for device in listed.chain(described) {
        match devices.iter_mut().find(|d| d.name == device.name) {
            Some(known) if known.node_guid.is_empty() => {
                known.node_guid.clone_from(&device.node_guid)
            }
            Some(_) => {}
            None => devices.push(RdmaDevice {
                name: device.name.clone(),
                node_guid: device.node_guid.clone(),
                ..RdmaDevice::default()
            }),
        }
    }
    devices
}

fn apply_thunderbolt(
    port: &mut PortFact,
    bus: &ThunderboltBus,
    receptacle: &ThunderboltPort,
    blind_spots: &mut Vec<String>,
) {
    port.domain_uuid = bus.domain_uuid.clone();
    port.linked = receptacle.linked();
    port.negotiated_speed_bps = receptacle.negotiated_bps();
    port.max_speed_bps = receptacle.max_bps();
    if receptacle.speed_is_ambiguous() {
        blind_spots.push(format!(
            "{}: {} is linked but reports only an \"Up to\" speed, so its negotiated speed \
             is unknown",
            HostCommand::Thunderbolt,
            port.name
        ));
    }
    port.peer = receptacle.peer().map(|peer| PeerFact {
        domain_uuid: peer.domain_uuid.clone(),
        model: if is_mac_model_identifier(&peer.device_name) {
            peer.device_name.clone()
        } else {
            String::new()
        },
        name: peer.name.clone(),
        rdma_service: peer.rdma_service,
    });
    let others: Vec<&str> = receptacle
        .other_devices()
        .iter()
        .map(|d| d.label())
        .collect();
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
            port.ipv4 = Some(interface.ipv4.clone());
            port.iface_up = interface.active;
        }
        None => blind_spots.push(format!(
            "{}: no {} stanza, so its address and status are unknown",
            HostCommand::Ifconfig,
            port.iface
        )),
    }
}

/// Port 1 of `device` as the verbs library or `ibv_devinfo` describes it;
/// macOS RDMA devices have exactly one port.
fn rdma_port(
    described: Option<&[RdmaDevice]>,
    device: &str,
    reader: RdmaReader,
) -> Option<RdmaPortFact> {
    let port = described?
        .iter()
        .find(|d| d.name == device)?
        .ports
        .iter()
        .find(|p| p.port == 1)?;
    Some(port.fact(reader))
}

/// Every bridge interface with the network service found by its device
/// (users rename services); the service's enabled state from the
/// all-services list, else from the order's `(*)` mark. `None` when the
/// interfaces could not be listed.
fn bridges(parsed: &Parsed) -> Option<Vec<BridgeFact>> {
    let interfaces = parsed.interfaces.as_ref()?;
    Some(
        interfaces
            .iter()
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
                    service: service.map(|s| s.name.clone()),
                    service_enabled,
                    ..bridge.bridge_fact()
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshd_domain::RdmaPortState;

    fn outputs(texts: &[(HostCommand, &str)]) -> MacosOutputs {
        texts
            .iter()
            .fold(MacosOutputs::default(), |outputs, (command, text)| {
                outputs.with(*command, Ok((*text).to_owned()))
            })
    }

    const HARDWARE_PORTS: &str = "Hardware Port: Thunderbolt 2\nDevice: en6\n\n\
                                  Hardware Port: Thunderbolt 1\nDevice: en1\n";

    #[test]
    fn failures_and_unreadable_outputs_are_named_and_leave_facts_unknown() {
        let facts = join(
            &outputs(&[
                (HostCommand::SwVers, "ProductName:\tmacOS\n"),
                (HostCommand::HwModel, "\n"),
                (HostCommand::Thunderbolt, "{\"SPThunderboltDataType\": "),
                (HostCommand::RdmaCtl, "Operation not permitted\n"),
            ])
            .with(
                HostCommand::IbvDevinfo,
                Err(CaptureError::Run(
                    "ibv_devinfo -v did not finish within 5s; killed".into(),
                )),
            )
            .with(
                HostCommand::Ifconfig,
                Err(CaptureError::Failed {
                    command: "ifconfig -a".into(),
                    status: "exit status: 1".into(),
                    stderr: "ifconfig: ioctl: bad file descriptor".into(),
                }),
            ),
        );
        assert_eq!(
            (
                facts.os_version.as_str(),
                facts.model.as_str(),
                facts.rdma_enabled
            ),
            ("", "", None)
        );
        assert!(facts.ports.is_empty() && !facts.ports_complete);
        assert_eq!(
            facts.bridges, None,
            "ifconfig failed: bridges unknown, not none"
        );
        assert!(!facts.rdma_devices_read);
        let blind: Vec<&str> = facts.blind_spots.iter().map(String::as_str).collect();
        assert_eq!(blind.len(), 21, "{blind:#?}");
        assert_eq!(
            blind[14..],
            [
                "sysctl hw.memsize vm.swapusage kern.memorystatus_vm_pressure_level \
                 kern.bootsessionuuid kern.boottime: not captured",
                "vm_stat: not captured",
                "sysctl iogpu.wired_limit_mb: not captured",
                "pmset -g: not captured",
                "kernel panic reports: /Library/Logs/DiagnosticReports not read",
                "whether exo's network daemon is installed: /Library/LaunchDaemons not read",
                NO_RDMA_TRAFFIC_COUNTER,
            ]
        );
        assert_eq!(
            (facts.memory, facts.power, facts.panics),
            (None, None, None)
        );
        assert!(!facts.boot.is_known());
        assert_eq!(blind[0], "sw_vers: no ProductVersion line");
        assert_eq!(blind[1], "sw_vers: no BuildVersion line");
        assert_eq!(blind[2], "sysctl -n hw.model: printed no model");
        assert!(
            blind[3].starts_with("system_profiler SPThunderboltDataType -json: not JSON: "),
            "{}",
            blind[3]
        );
        assert_eq!(blind[4], "networksetup -listallhardwareports: not captured");
        assert_eq!(blind[7], "networksetup -getcurrentlocation: not captured");
        assert_eq!(
            blind[8],
            "ifconfig -a failed (exit status: 1): ifconfig: ioctl: bad file descriptor"
        );
        assert_eq!(
            blind[9],
            "rdma_ctl status: neither enabled nor disabled: \"Operation not permitted\""
        );
        assert_eq!(blind[11], "ibv_devinfo -v did not finish within 5s; killed");
        assert_eq!(
            blind[12],
            "/usr/libexec/ApplicationFirewall/socketfilterfw --getglobalstate: not captured"
        );
        assert_eq!(facts.firewall, None, "neither firewall output: unknown");
    }

    #[test]
    fn ports_join_receptacle_hardware_port_interface_and_rdma_device() {
        let profiler = r#"{"SPThunderboltDataType": [
            {"domain_uuid_key": "LOCAL-2",
             "receptacle_1_tag": {"receptacle_id_key": "2", "current_speed_key": "80 Gb/s"},
             "_items": [{"_name": "Hub", "_items": [{"_name": "Mac", "device_name_key": "Mac16,9",
                         "domain_uuid_key": "PEER"}]}]},
            {"receptacle_1_tag": {"receptacle_id_key": "7", "current_speed_key": "Up to 120 Gb/s"}}
        ]}"#;
        let ifconfig = "en6: flags=8863<UP,RUNNING> mtu 1500\n\
                        \tinet 10.0.12.1 netmask 0xfffffffc broadcast 10.0.12.3\n\
                        \tstatus: active\n";
        let devinfo = "hca_id:\trdma_en6\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\
                       \t\t\tactive_width:\t\t8X (4)\n\t\t\tactive_speed:\t\t10.0 Gbps (4)\n\
                       \t\t\tGID[  1]:\t\t::ffff:10.0.12.1\n";
        let facts = join(&outputs(&[
            (HostCommand::Thunderbolt, profiler),
            (HostCommand::HardwarePorts, HARDWARE_PORTS),
            (HostCommand::Ifconfig, ifconfig),
            (HostCommand::IbvDevices, "    rdma_en1\t0000000000000001\n"),
            (HostCommand::IbvDevinfo, devinfo),
        ]));
        let paired = |number: u32, iface: &str| PortFact {
            name: format!("Thunderbolt {number}"),
            receptacle: number,
            iface: iface.to_owned(),
            rdma_device: format!("rdma_{iface}"),
            rdma_node_guid: "0000000000000001".into(),
            usable_for_rdma: true,
            ..PortFact::default()
        };
        assert!(facts.ports_complete && facts.rdma_devices_read);
        assert_eq!(facts.ports.len(), 3);
        assert_eq!(
            facts.ports[0],
            paired(1, "en1"),
            "listed by ibv_devices, not described"
        );
        assert_eq!(
            facts.ports[2],
            PortFact {
                name: "Thunderbolt 7".into(),
                receptacle: 7,
                linked: Some(false),
                max_speed_bps: 120_000_000_000,
                usable_for_rdma: true,
                ..PortFact::default()
            },
            "no hardware port: no interface, no RDMA device"
        );
        let tb2 = &facts.ports[1];
        assert_eq!(tb2.domain_uuid, "LOCAL-2");
        assert_eq!(tb2.other_device.as_deref(), Some("Hub"));
        let peer = tb2.peer.as_ref().expect("peer behind the hub");
        assert_eq!(
            (peer.domain_uuid.as_str(), peer.model.as_str()),
            ("PEER", "Mac16,9")
        );
        assert_eq!(tb2.linked, Some(true));
        assert_eq!(tb2.addresses()[0].to_string(), "10.0.12.1/30");
        assert_eq!(tb2.iface_up, Some(true));
        let rdma = tb2.rdma.as_ref().expect("rdma port");
        assert_eq!(
            (rdma.state, rdma.active_speed_bps),
            (RdmaPortState::Active, 80_000_000_000)
        );
        assert_eq!(rdma.gid(1), Some("::ffff:10.0.12.1".parse().expect("v6")));
        assert_eq!(
            facts.ports[0].rdma, None,
            "rdma_en1 is listed but not described"
        );
        assert!(
            facts
                .blind_spots
                .iter()
                .any(|s| s == "ifconfig -a: no en1 stanza, so its address and status are unknown"),
            "{:?}",
            facts.blind_spots
        );
    }

    #[test]
    fn bridge_service_is_found_by_device_and_the_service_list_decides_enabled() {
        let ifconfig = "bridge0: flags=8863<UP,RUNNING> mtu 1500\n\tmember: en2 flags=3<>\n\
                        \tstatus: inactive\n";
        let order = "(1) Mesh\n(Hardware Port: Thunderbolt Bridge, Device: bridge0)\n";
        let with_list = |list: &str| {
            join(&outputs(&[
                (HostCommand::Ifconfig, ifconfig),
                (HostCommand::ServiceOrder, order),
                (HostCommand::AllServices, list),
            ]))
            .bridges
        };
        let disabled =
            with_list("An asterisk (*) denotes that a network service is disabled.\n*Mesh\n");
        assert_eq!(
            disabled,
            Some(vec![BridgeFact {
                name: "bridge0".into(),
                up: Some(true),
                member_link: Some(false),
                members: vec!["en2".into()],
                service: Some("Mesh".into()),
                service_enabled: Some(false),
            }])
        );
        let unlisted = with_list("Wi-Fi\n").expect("bridges");
        assert_eq!(
            unlisted[0].service_enabled,
            Some(true),
            "the order's own mark"
        );
        let without_services = join(&outputs(&[(HostCommand::Ifconfig, ifconfig)]));
        let bridge = &without_services.bridges.expect("bridges")[0];
        assert_eq!((&bridge.service, bridge.service_enabled), (&None, None));
    }

    #[test]
    fn mac_model_and_version_are_read() {
        let facts = join(&outputs(&[
            (
                HostCommand::SwVers,
                "ProductName:\t\tmacOS\nProductVersion:\t\t26.2\nBuildVersion:\t\t25C5031i\n",
            ),
            (HostCommand::HwModel, "Mac16,9\n"),
            (HostCommand::RdmaCtl, "disabled\n"),
        ]));
        assert_eq!(
            (
                facts.os_version.as_str(),
                facts.model.as_str(),
                facts.rdma_enabled
            ),
            ("26.2", "Mac16,9", Some(false))
        );
        assert_eq!(facts.os_build, "25C5031i");
        assert!(facts.blind_spots.iter().all(|s| !s.contains("sw_vers")));
    }

    #[test]
    fn a_connected_port_with_only_an_up_to_speed_is_linked_at_an_unknown_speed() {
        let profiler = r#"{"SPThunderboltDataType": [
            {"receptacle_1_tag": {"receptacle_id_key": "1", "current_speed_key": "Up to 20 Gb/s",
                                  "receptacle_status_key": "receptacle_connected"},
             "_items": [{"_name": "MacBook Pro", "device_name_key": "MacBookPro16,1"}]}
        ]}"#;
        let facts = join(&outputs(&[(HostCommand::Thunderbolt, profiler)]));
        let port = &facts.ports[0];
        assert_eq!(port.linked, Some(true));
        assert_eq!((port.negotiated_speed_bps, port.max_speed_bps), (0, 0));
        let peer = port.peer.as_ref().expect("a Mac without a domain UUID");
        assert_eq!(
            (
                peer.domain_uuid.as_str(),
                peer.model.as_str(),
                peer.rdma_service
            ),
            ("", "MacBookPro16,1", None)
        );
        assert!(
            facts
                .blind_spots
                .iter()
                .any(|s| s.contains("Thunderbolt 1 is linked but reports only an \"Up to\" speed")),
            "{:?}",
            facts.blind_spots
        );
    }
}
