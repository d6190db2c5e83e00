//! `networksetup`: hardware ports (`-listallhardwareports`), network
//! services (`-listallnetworkservices`, `-listnetworkserviceorder`) and how
//! a service gets its address (`-getinfo SERVICE`).

use meshd_domain::facts::{HardwarePort, Ipv4Method};

/// Blocks of `Hardware Port:` / `Device:` / `Ethernet Address:` separated
/// by blank lines; the trailing `VLAN Configurations` section is not a
/// port.
pub fn parse_hardware_ports(text: &str) -> Vec<HardwarePort> {
    let mut ports: Vec<HardwarePort> = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            in_block = false;
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_owned();
        let key = key.trim();
        if key == "Hardware Port" {
            ports.push(HardwarePort {
                name: value,
                ..HardwarePort::default()
            });
            in_block = true;
            continue;
        }
        let Some(port) = ports.last_mut().filter(|_| in_block) else {
            continue;
        };
        match key {
            "Device" => port.device = value,
            "Ethernet Address" => port.ethernet_address = value,
            _ => {}
        }
    }
    ports
}

/// A network service. Its name is user-editable: match services by
/// device, and only show the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkService {
    pub name: String,
    /// From the service order; `None` in the all-services list.
    pub hardware_port: Option<String>,
    pub device: Option<String>,
    pub enabled: bool,
}

const ASTERISK_LEGEND: &str = "An asterisk (*) denotes";

/// `-listallnetworkservices`: one name a line, `*` before a disabled one,
/// after a legend line.
pub fn parse_all_services(text: &str) -> Vec<NetworkService> {
    text.lines()
        .map(str::trim_end)
        .filter(|line| !line.trim().is_empty() && !line.starts_with(ASTERISK_LEGEND))
        .map(|line| {
            let (name, enabled) = match line.strip_prefix('*') {
                Some(name) => (name, false),
                None => (line, true),
            };
            NetworkService {
                name: name.to_owned(),
                hardware_port: None,
                device: None,
                enabled,
            }
        })
        .collect()
}

/// Longest location name taken: macOS keeps them short; anything longer
/// is not a location name.
const MAX_LOCATION_CHARS: usize = 128;

/// `-getcurrentlocation`: the location's name on one line; `None` when
/// there is no name (or something that cannot be one).
pub fn parse_current_location(text: &str) -> Option<String> {
    let name = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    (name.chars().count() <= MAX_LOCATION_CHARS).then(|| name.to_owned())
}

/// `-listnetworkserviceorder`: `(1) Name` (`(*) Name` when disabled), each
/// followed by `(Hardware Port: X, Device: Y)`.
pub fn parse_service_order(text: &str) -> Vec<NetworkService> {
    let mut services: Vec<NetworkService> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(detail) = line.strip_prefix("(Hardware Port:") {
            if let Some(service) = services.last_mut() {
                let detail = detail.strip_suffix(')').unwrap_or(detail);
                // A port name may itself contain ", ", so split at the last
                // `, Device:`.
                let (port, device) = match detail.rsplit_once(", Device:") {
                    Some((port, device)) => (port, Some(device.trim())),
                    None => (detail, None),
                };
                service.hardware_port = Some(port.trim().to_owned());
                service.device = device.filter(|d| !d.is_empty()).map(str::to_owned);
            }
            continue;
        }
        let Some((tag, name)) = line.strip_prefix('(').and_then(|rest| rest.split_once(')')) else {
            continue;
        };
        let name = name.trim();
        let numbered = !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit());
        if (numbered || tag == "*") && !name.is_empty() {
            services.push(NetworkService {
                name: name.to_owned(),
                hardware_port: None,
                device: None,
                enabled: tag != "*",
            });
        }
    }
    services
}

/// The service whose device is `device` (e.g. `bridge0`).
pub fn service_for_device<'a>(
    services: &'a [NetworkService],
    device: &str,
) -> Option<&'a NetworkService> {
    services
        .iter()
        .find(|s| s.device.as_deref() == Some(device))
}

/// `networksetup -getinfo SERVICE`: its first line names how the IPv4
/// address is configured ("Manual Configuration", "DHCP Configuration",
/// "BOOTP Configuration", "Manually Using DHCP Router Configuration");
/// `None` when it is none of these.
pub fn parse_service_info(text: &str) -> Option<Ipv4Method> {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    match first {
        "Manual Configuration" => Some(Ipv4Method::Manual),
        "DHCP Configuration" => Some(Ipv4Method::Dhcp),
        "BOOTP Configuration" => Some(Ipv4Method::Bootp),
        "Manually Using DHCP Router Configuration" => Some(Ipv4Method::ManualWithDhcpRouter),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_numbered_thunderbolt_ports_have_a_number() {
        let port = |name: &str| HardwarePort {
            name: name.to_owned(),
            ..HardwarePort::default()
        };
        assert_eq!(port("Thunderbolt 4").thunderbolt_number(), Some(4));
        for name in [
            "Thunderbolt Bridge",
            "Thunderbolt ",
            "Thunderbolt +1",
            "Thunderbolt Ethernet Slot 1",
            "Thunderbolt 99999999999",
        ] {
            assert_eq!(port(name).thunderbolt_number(), None, "{name}");
        }
    }

    #[test]
    fn renamed_and_disabled_service_is_still_found_by_device() {
        // No capture of `(*)` exists (SOURCES.md); the form is exo's.
        let text = "An asterisk (*) denotes that a network service is disabled.\n\
                    (1) Wi-Fi\n(Hardware Port: Wi-Fi, Device: en0)\n\n\
                    (*) My \"TB\" mesh\n(Hardware Port: Thunderbolt Bridge, Device: bridge0)\n\
                    (2) Odd\n(Hardware Port: Odd, Device: )\n";
        let services = parse_service_order(text);
        let bridge = service_for_device(&services, "bridge0").expect("bridge0");
        assert_eq!(bridge.name, "My \"TB\" mesh");
        assert!(!bridge.enabled);
        assert_eq!(services[2].device, None);
        assert_eq!(service_for_device(&services, "en9"), None);
    }

    #[test]
    fn hardware_port_lines_tolerate_indentation_and_trailing_spaces() {
        let ports = parse_hardware_ports(
            "  Hardware Port: Thunderbolt 1 \n\tDevice: en1 \nEthernet Address: N/A\n\nDevice: stray\n",
        );
        assert_eq!(
            ports,
            [HardwarePort {
                name: "Thunderbolt 1".into(),
                device: "en1".into(),
                ethernet_address: "N/A".into(),
            }]
        );
    }

    #[test]
    fn service_info_names_the_address_method() {
        assert_eq!(
            parse_service_info("\nManual Configuration\nIP address: 10.0.12.1\n"),
            Some(Ipv4Method::Manual)
        );
        assert_eq!(
            parse_service_info("DHCP Configuration\nIP address: 169.254.34.128\n"),
            Some(Ipv4Method::Dhcp)
        );
        assert_eq!(
            parse_service_info("Manually Using DHCP Router Configuration\n"),
            Some(Ipv4Method::ManualWithDhcpRouter)
        );
        assert_eq!(
            parse_service_info("** Error: The parameters were not valid.\n"),
            None
        );
        assert_eq!(parse_service_info(""), None);
    }
}
