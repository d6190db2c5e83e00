//! RDMA devices and ports from `/sys/class/infiniband` (the kernel's view,
//! no verbs library needed), following the stable sysfs ABI
//! (`Documentation/ABI/stable/sysfs-class-infiniband`).

use std::io::ErrorKind;

use meshd_domain::RdmaPortState;
use meshd_domain::facts::{Gid, PortFact, RdmaPortFact, RdmaReader};

use super::net::SYS_CLASS_NET;
use super::values::{parse_gid, parse_phys_link_up, parse_port_state, parse_rate_bps, parse_word};
use crate::source::Source;

pub const SYS_CLASS_INFINIBAND: &str = "/sys/class/infiniband";

/// What sysfs shows of this host's RDMA ports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdmaPorts {
    /// Whether any RDMA device exists; `None` when it could not be seen.
    pub rdma_enabled: Option<bool>,
    /// One per RDMA port, in device then port order. `iface_up` and `ipv4`
    /// are left for the caller, which knows the interfaces.
    pub ports: Vec<PortFact>,
    /// Every device's ports could be listed.
    pub complete: bool,
    pub blind_spots: Vec<String>,
}

/// Every RDMA port under `/sys/class/infiniband`.
///
/// A port is named "<device>/<port>" ("mlx5_0/1"), as `rdma link` names
/// it: that name always exists, is unique and stays put, while the paired
/// network interface may be missing (InfiniBand without IPoIB), shared by
/// several ports' GID entries, or renamed.
pub fn read_rdma_ports(source: &dyn Source) -> RdmaPorts {
    let mut found = RdmaPorts::default();
    let devices = match source.list_dir(SYS_CLASS_INFINIBAND) {
        Ok(devices) => devices,
        Err(err) if err.kind() == ErrorKind::NotFound => {
            found.rdma_enabled = Some(false);
            found.complete = true;
            found.blind_spots.push(format!(
                "no {SYS_CLASS_INFINIBAND}: this kernel has no RDMA core loaded (ib_core), \
                 so there are no RDMA devices or ports to see"
            ));
            return found;
        }
        Err(err) => {
            found.blind_spots.push(format!(
                "cannot list {SYS_CLASS_INFINIBAND} ({err}): RDMA devices unknown"
            ));
            return found;
        }
    };
    found.rdma_enabled = Some(!devices.is_empty());
    found.complete = true;
    for device in devices {
        let ports_dir = format!("{SYS_CLASS_INFINIBAND}/{device}/ports");
        match source.list_dir(&ports_dir) {
            Ok(entries) => {
                for port in numbered(&entries) {
                    let mut reader = PortReader {
                        source,
                        device: &device,
                        port,
                        blind_spots: &mut found.blind_spots,
                    };
                    found.ports.push(reader.read());
                }
            }
            Err(err) => {
                found.complete = false;
                found.blind_spots.push(format!(
                    "{device}: cannot list {ports_dir} ({err}): ports unknown"
                ));
            }
        }
    }
    found
}

/// Directory entries that are numbers ("1", "10"), in numeric order.
fn numbered(entries: &[String]) -> Vec<u32> {
    let mut numbers: Vec<u32> = entries.iter().filter_map(|e| e.parse().ok()).collect();
    numbers.sort_unstable();
    numbers
}

struct PortReader<'a> {
    source: &'a dyn Source,
    device: &'a str,
    port: u32,
    blind_spots: &'a mut Vec<String>,
}

impl PortReader<'_> {
    fn read(&mut self) -> PortFact {
        let state = self.value("state", parse_port_state);
        let link_up = self.value("phys_state", parse_phys_link_up);
        let rate_bps = self.value("rate", parse_rate_bps);
        let gids = self.gids();
        let iface = self.paired_interface(&gids);
        if iface.is_none() {
            self.blind(format!(
                "no paired network interface (none in gid_attrs/ndevs, {SYS_CLASS_INFINIBAND}/{}/device/net or parent)",
                self.device
            ));
        }
        PortFact {
            name: format!("{}/{}", self.device, self.port),
            iface: iface.unwrap_or_default(),
            rdma_device: self.device.to_owned(),
            // Drivers report a rate for ports without a link too; only a
            // physically linked port has negotiated one.
            negotiated_speed_bps: match link_up {
                Some(true) => rate_bps.unwrap_or(0),
                Some(false) | None => 0,
            },
            usable_for_rdma: true,
            rdma: Some(RdmaPortFact {
                port: self.port,
                // The verbs "no state" value, with the reason in the blind
                // spots.
                state: state.unwrap_or(RdmaPortState::None),
                active_speed_bps: rate_bps.unwrap_or(0),
                gids,
                link_layer: String::new(),
                active_mtu: None,
                max_mtu: None,
                reader: Some(RdmaReader::Sysfs),
            }),
            ..PortFact::default()
        }
    }

    fn dir(&self) -> String {
        format!("{SYS_CLASS_INFINIBAND}/{}/ports/{}", self.device, self.port)
    }

    fn blind(&mut self, what: String) {
        self.blind_spots
            .push(format!("{}/{}: {what}", self.device, self.port));
    }

    /// The port file `name` parsed, or a blind spot saying why not.
    fn value<T>(&mut self, name: &str, parse: fn(&str) -> Option<T>) -> Option<T> {
        let path = format!("{}/{name}", self.dir());
        match self.source.read_file(&path) {
            Ok(text) => {
                let value = parse(&text);
                if value.is_none() {
                    self.blind(format!("unrecognised {path}: {:?}", text.trim()));
                }
                value
            }
            Err(err) => {
                self.blind(format!("cannot read {path}: {err}"));
                None
            }
        }
    }

    /// The used GID table entries (unused ones read as zeros).
    fn gids(&mut self) -> Vec<Gid> {
        let table = format!("{}/gids", self.dir());
        let entries = match self.source.list_dir(&table) {
            Ok(entries) => entries,
            Err(err) => {
                self.blind(format!("cannot list {table} ({err}): GIDs unknown"));
                return Vec::new();
            }
        };
        let mut gids = Vec::new();
        let mut unreadable = Vec::new();
        for index in numbered(&entries) {
            match self.source.read_file(&format!("{table}/{index}")) {
                Ok(text) => gids.extend(parse_gid(&text).map(|address| Gid { index, address })),
                Err(err) => unreadable.push(format!("{index} ({err})")),
            }
        }
        if !unreadable.is_empty() {
            self.blind(format!(
                "unreadable GID entries in {table}: {}",
                unreadable.join(", ")
            ));
        }
        gids
    }

    /// The network interface this port carries traffic for.
    fn paired_interface(&self, gids: &[Gid]) -> Option<String> {
        // RoCE: the kernel pairs each GID entry with its interface.
        let ndevs = format!("{}/gid_attrs/ndevs", self.dir());
        let from_gids = gids.iter().find_map(|gid| {
            let text = self
                .source
                .read_file(&format!("{ndevs}/{}", gid.index))
                .ok()?;
            parse_word(&text).map(str::to_owned)
        });
        if from_gids.is_some() {
            return from_gids;
        }
        // InfiniBand (IPoIB) and NICs: the interfaces of the PCI function;
        // mlx4 has one function for two ports, told apart by dev_port.
        let device_dir = format!("{SYS_CLASS_INFINIBAND}/{}", self.device);
        if let Ok(interfaces) = self.source.list_dir(&format!("{device_dir}/device/net")) {
            if let [only] = interfaces.as_slice() {
                return Some(only.clone());
            }
            // dev_port counts from 0, verbs ports from 1 (a switch's
            // management port 0 has no interface).
            let dev_port = self.port.checked_sub(1).map(|p| p.to_string());
            let by_port = interfaces.into_iter().find(|iface| {
                self.source
                    .read_file(&format!("{SYS_CLASS_NET}/{iface}/dev_port"))
                    .is_ok_and(|text| Some(text.trim()) == dev_port.as_deref())
            });
            if by_port.is_some() {
                return by_port;
            }
        }
        // Software devices (rxe, siw) name their interface in `parent`.
        let parent = self
            .source
            .read_file(&format!("{device_dir}/parent"))
            .ok()?;
        parse_word(&parent).map(str::to_owned)
    }
}
