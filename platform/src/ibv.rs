//! RDMA devices as the verbs model describes them, whether read through the
//! verbs library ([`crate::verbs`]) or parsed from rdma-core's
//! `ibv_devices` / `ibv_devinfo [-v]` output (the same on macOS and Linux).

use std::net::Ipv6Addr;

use meshd_domain::RdmaPortState;
use meshd_domain::facts::{Gid, RdmaPortFact, RdmaReader};

/// One RDMA device ("rdma_en2" on macOS, "mlx5_0" on Linux).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdmaDevice {
    pub name: String,
    /// "e0c5797d9c8fac05" as `ibv_devices` prints it; empty when unknown.
    pub node_guid: String,
    /// "Thunderbolt (100)", "InfiniBand (0)"; empty when unknown.
    pub transport: String,
    pub ports: Vec<RdmaPort>,
}

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPort {
    /// 1-based, as verbs numbers ports.
    pub port: u32,
    pub state: RdmaPortState,
    /// Lanes (`active_width: 4X (2)` → 4); `None` when not reported.
    pub active_width_lanes: Option<u32>,
    /// Per-lane speed in bits/s (`active_speed: 10.0 Gbps (4)`); `None` when
    /// not reported.
    pub active_lane_speed_bps: Option<u64>,
    /// "Thunderbolt", "InfiniBand", "Ethernet"; empty when not reported.
    pub link_layer: String,
    /// `active_mtu: 4096 (5)` → 4096 bytes; `None` when not reported.
    pub active_mtu: Option<u32>,
    /// `max_mtu`, likewise.
    pub max_mtu: Option<u32>,
    /// Index → address, in table order; only `-v` output and the verbs
    /// library have them.
    pub gids: Vec<(u32, Ipv6Addr)>,
}

impl RdmaPort {
    /// Width × lane speed, when both are known and the product fits (a
    /// garbled `active_width` or `active_speed` can make it overflow).
    pub fn active_speed_bps(&self) -> Option<u64> {
        u64::from(self.active_width_lanes?).checked_mul(self.active_lane_speed_bps?)
    }

    /// The port as a node fact, read by `reader`.
    pub fn fact(&self, reader: RdmaReader) -> RdmaPortFact {
        RdmaPortFact {
            port: self.port,
            state: self.state,
            active_speed_bps: self.active_speed_bps().unwrap_or(0),
            gids: self
                .gids
                .iter()
                .map(|&(index, address)| Gid { index, address })
                .collect(),
            link_layer: self.link_layer.clone(),
            active_mtu: self.active_mtu,
            max_mtu: self.max_mtu,
            reader: Some(reader),
        }
    }
}

/// `ibv_devices`: one device per row, name then node GUID. The header-only
/// output (RDMA disabled, or a Thunderbolt 4 Mac) means no devices.
///
/// rdma-core separates the columns with a tab, Apple's TN3205 renders it
/// as spaces; both are read by splitting on whitespace. A row counts only
/// when its second column is a hex GUID, which skips the header, the dash
/// line and any message text.
pub fn parse_ibv_devices(text: &str) -> Vec<RdmaDevice> {
    let mut devices: Vec<RdmaDevice> = Vec::new();
    for line in text.lines() {
        let mut columns = line.split_whitespace();
        let (Some(name), Some(guid), None) = (columns.next(), columns.next(), columns.next())
        else {
            continue;
        };
        let Some(node_guid) = normalized_guid(guid) else {
            continue;
        };
        if devices.iter().any(|d| d.name == name) {
            continue;
        }
        devices.push(RdmaDevice {
            name: name.to_owned(),
            node_guid,
            ..RdmaDevice::default()
        });
    }
    devices
}

/// `ibv_devinfo` or `ibv_devinfo -v` (also `-d DEV`, and the output of
/// `ibv_devinfo -v | grep …`) into devices with their ports.
///
/// Read as a stream of `key: value` fields rather than line by line,
/// because Apple's TN3205 reflows several fields onto one line
/// (`hca_id: rdma_en2 transport: Thunderbolt (100) node_guid:`) and puts
/// the GUID at the start of the next; text before the first key of a line
/// continues the previous field. `...` elisions are dropped. A device that
/// appears twice (outputs of `ibv_devinfo -d X` appended) is one device.
pub fn parse_ibv_devinfo(text: &str) -> Vec<RdmaDevice> {
    let mut reader = DevinfoReader::default();
    for (key, value) in devinfo_fields(text) {
        reader.field(&key, &value);
    }
    reader.devices
}

#[derive(Default)]
struct DevinfoReader {
    devices: Vec<RdmaDevice>,
    device: Option<usize>,
    port: Option<usize>,
    /// The current port came from a `port:` line, not from inference.
    port_announced: bool,
    port_has_state: bool,
}

impl DevinfoReader {
    fn field(&mut self, key: &DevinfoKey, value: &str) {
        let first = value.split_whitespace().next().unwrap_or("");
        match key {
            DevinfoKey::Named(name) => match name.as_str() {
                "hca_id" if !first.is_empty() => self.start_device(first),
                "transport" => {
                    if let Some(device) = self.current_device() {
                        device.transport = value.to_owned();
                    }
                }
                "node_guid" => {
                    if let (Some(guid), Some(device)) =
                        (normalized_guid(first), self.current_device())
                    {
                        device.node_guid = guid;
                    }
                }
                "port" => {
                    if let Ok(number) = first.parse::<u32>() {
                        self.select_port(number);
                        self.port_announced = true;
                    }
                }
                "state" => {
                    // `grep`-filtered output has no `port:` lines; each
                    // `state:` then starts the next port of the device.
                    if !self.port_announced && self.port_has_state {
                        let next = self.current_ports().map_or(Some(1), |ports| {
                            ports
                                .iter()
                                .map(|p| p.port)
                                .max()
                                .unwrap_or(0)
                                .checked_add(1)
                        });
                        // After a port numbered u32::MAX there is no next
                        // port to give this state to.
                        let Some(next) = next else {
                            return;
                        };
                        self.select_port(next);
                    }
                    if let Some(port) = self.current_port() {
                        port.state = port_state(value);
                    }
                    self.port_has_state = true;
                }
                "active_width" => {
                    if let Some(port) = self.current_port() {
                        port.active_width_lanes = first
                            .strip_suffix(['X', 'x'])
                            .and_then(|lanes| lanes.parse().ok());
                    }
                }
                "active_speed" => {
                    let mut words = value.split_whitespace();
                    let speed = match (words.next(), words.next()) {
                        (Some(number), Some(unit)) => bits_per_second(number, unit),
                        _ => None,
                    };
                    if let Some(port) = self.current_port() {
                        port.active_lane_speed_bps = speed;
                    }
                }
                "link_layer" => {
                    if let Some(port) = self.current_port() {
                        port.link_layer = first.to_owned();
                    }
                }
                "active_mtu" | "max_mtu" => {
                    let bytes = first
                        .parse::<u32>()
                        .ok()
                        .filter(|b| (256..=65536).contains(b));
                    if let Some(port) = self.current_port() {
                        if name == "active_mtu" {
                            port.active_mtu = bytes;
                        } else {
                            port.max_mtu = bytes;
                        }
                    }
                }
                _ => {}
            },
            DevinfoKey::Gid(index) => {
                // Linux appends the GID type: `fe80::…, RoCE v2`.
                let address = first.trim_end_matches(',').parse::<Ipv6Addr>();
                if let (Ok(address), Some(port)) = (address, self.current_port()) {
                    match port.gids.iter_mut().find(|(i, _)| i == index) {
                        Some(gid) => gid.1 = address,
                        None => port.gids.push((*index, address)),
                    }
                }
            }
        }
    }

    fn start_device(&mut self, name: &str) {
        let index = match self.devices.iter().position(|d| d.name == name) {
            Some(index) => index,
            None => {
                self.devices.push(RdmaDevice {
                    name: name.to_owned(),
                    ..RdmaDevice::default()
                });
                self.devices.len() - 1
            }
        };
        self.device = Some(index);
        self.port = None;
        self.port_announced = false;
        self.port_has_state = false;
    }

    fn current_device(&mut self) -> Option<&mut RdmaDevice> {
        self.devices.get_mut(self.device?)
    }

    fn current_ports(&mut self) -> Option<&mut Vec<RdmaPort>> {
        Some(&mut self.current_device()?.ports)
    }

    fn select_port(&mut self, number: u32) {
        let Some(ports) = self.current_ports() else {
            return;
        };
        let index = match ports.iter().position(|p| p.port == number) {
            Some(index) => index,
            None => {
                ports.push(RdmaPort::numbered(number));
                ports.len() - 1
            }
        };
        self.port = Some(index);
        self.port_has_state = false;
    }

    /// The port a port field belongs to; port 1 when the output names none.
    fn current_port(&mut self) -> Option<&mut RdmaPort> {
        if self.port.is_none() {
            self.select_port(1);
        }
        let index = self.port?;
        self.current_ports()?.get_mut(index)
    }
}

impl RdmaPort {
    fn numbered(port: u32) -> RdmaPort {
        RdmaPort {
            port,
            state: RdmaPortState::None,
            active_width_lanes: None,
            active_lane_speed_bps: None,
            link_layer: String::new(),
            active_mtu: None,
            max_mtu: None,
            gids: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum DevinfoKey {
    Named(String),
    Gid(u32),
}

/// Every `key: value` of the text, in order.
fn devinfo_fields(text: &str) -> Vec<(DevinfoKey, String)> {
    let mut fields: Vec<(DevinfoKey, String)> = Vec::new();
    for line in text.lines() {
        let mut rest = line;
        let mut leading = true;
        while !rest.trim().is_empty() {
            let (value, key, after) = match next_key(rest) {
                Some((start, key, end)) => (&rest[..start], Some(key), &rest[end..]),
                None => (rest, None, ""),
            };
            let value = without_elisions(value);
            if let Some((_, last)) = fields.last_mut()
                && !value.is_empty()
            {
                if leading && !last.is_empty() {
                    last.push(' ');
                }
                if leading || last.is_empty() {
                    last.push_str(&value);
                }
            }
            leading = false;
            match key {
                Some(key) => fields.push((key, String::new())),
                None => break,
            }
            rest = after;
        }
    }
    fields
}

fn without_elisions(text: &str) -> String {
    text.split_whitespace()
        .filter(|word| *word != "...")
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first key in `text`: its byte range and what it is. A key is a
/// word `name:` (letters, digits, `_`) or `GID[ n]:`.
fn next_key(text: &str) -> Option<(usize, DevinfoKey, usize)> {
    let mut offset = 0;
    while offset < text.len() {
        let rest = &text[offset..];
        let word_start = offset + (rest.len() - rest.trim_start().len());
        let word_rest = &text[word_start..];
        let word_len = word_rest
            .find(char::is_whitespace)
            .unwrap_or(word_rest.len());
        if let Some(inner) = word_rest.strip_prefix("GID[")
            && let Some(close) = inner.find("]:")
            && let Ok(index) = inner[..close].trim().parse::<u32>()
        {
            let end = word_start + "GID[".len() + close + "]:".len();
            return Some((word_start, DevinfoKey::Gid(index), end));
        }
        let word = &word_rest[..word_len];
        if let Some(name) = word.strip_suffix(':') {
            let starts_well = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            if starts_well && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Some((
                    word_start,
                    DevinfoKey::Named(name.to_owned()),
                    word_start + word_len,
                ));
            }
        }
        if word_len == 0 {
            break;
        }
        offset = word_start + word_len;
    }
    None
}

/// `PORT_ACTIVE (4)`: the name decides; the number in parentheses when the
/// name is one this parser does not know.
fn port_state(value: &str) -> RdmaPortState {
    let (name, number) = match value.split_once('(') {
        Some((name, number)) => (name.trim(), number.split(')').next().unwrap_or("").trim()),
        None => (value.trim(), ""),
    };
    match name {
        "PORT_NOP" => RdmaPortState::None,
        "PORT_DOWN" => RdmaPortState::Down,
        "PORT_INIT" => RdmaPortState::Init,
        "PORT_ARMED" => RdmaPortState::Armed,
        "PORT_ACTIVE" => RdmaPortState::Active,
        "PORT_ACTIVE_DEFER" => RdmaPortState::ActiveDefer,
        _ => match number {
            "1" => RdmaPortState::Down,
            "2" => RdmaPortState::Init,
            "3" => RdmaPortState::Armed,
            "4" => RdmaPortState::Active,
            "5" => RdmaPortState::ActiveDefer,
            _ => RdmaPortState::None,
        },
    }
}

/// `e0c5797d9c8fac05` (`ibv_devices`) and `e0c5:797d:9c8f:ac05`
/// (`ibv_devinfo`) both become `e0c5797d9c8fac05`, so the two compare.
fn normalized_guid(text: &str) -> Option<String> {
    let digits: String = text
        .chars()
        .filter(|c| *c != ':')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let valid =
        !digits.is_empty() && digits.len() <= 16 && digits.chars().all(|c| c.is_ascii_hexdigit());
    valid.then_some(digits)
}

/// `10.0` `Gbps` → 10 000 000 000; also `53.125 Gbps` and Thunderbolt's
/// `80 Gb/s`. Decimal arithmetic, so no float rounding creeps into a speed
/// that checks compare exactly.
pub(crate) fn bits_per_second(number: &str, unit: &str) -> Option<u64> {
    const DIGITS_OF_GIGA: u32 = 9;
    let exponent = match unit {
        "Gbps" | "Gb/s" => DIGITS_OF_GIGA,
        "Mbps" | "Mb/s" => 6,
        "Kbps" | "Kb/s" => 3,
        "bps" | "b/s" => 0,
        _ => return None,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let fraction = fraction.trim_end_matches('0');
    let fraction_len = u32::try_from(fraction.len()).ok()?;
    if fraction_len > exponent {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let fraction: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    whole
        .checked_mul(10u64.pow(exponent))?
        .checked_add(fraction.checked_mul(10u64.pow(exponent - fraction_len))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_are_exact_decimals() {
        for (number, unit, bps) in [
            ("2.5", "Gbps", 2_500_000_000),
            ("5.0", "Gbps", 5_000_000_000),
            ("10.0", "Gbps", 10_000_000_000),
            ("14.0", "Gbps", 14_000_000_000),
            ("25.0", "Gbps", 25_000_000_000),
            ("50.0", "Gbps", 50_000_000_000),
            ("53.125", "Gbps", 53_125_000_000),
            ("100.0", "Gbps", 100_000_000_000),
            ("80", "Gb/s", 80_000_000_000),
            ("120", "Gb/s", 120_000_000_000),
            ("480", "Mb/s", 480_000_000),
        ] {
            assert_eq!(bits_per_second(number, unit), Some(bps), "{number} {unit}");
        }
        for (number, unit) in [
            ("", "Gbps"),
            (".5", "Gbps"),
            ("1.2.3", "Gbps"),
            ("-1", "Gbps"),
            ("10", "parsecs"),
            ("0.0000000001", "Gbps"),
            ("99999999999999999999", "Gbps"),
            ("invalid", "speed"),
        ] {
            assert_eq!(bits_per_second(number, unit), None, "{number} {unit}");
        }
    }

    #[test]
    fn every_port_state_name_and_number() {
        for (text, state) in [
            ("PORT_NOP (0)", RdmaPortState::None),
            ("PORT_DOWN (1)", RdmaPortState::Down),
            ("PORT_INIT (2)", RdmaPortState::Init),
            ("PORT_ARMED (3)", RdmaPortState::Armed),
            ("PORT_ACTIVE (4)", RdmaPortState::Active),
            ("PORT_ACTIVE_DEFER (5)", RdmaPortState::ActiveDefer),
            ("PORT_ACTIVE", RdmaPortState::Active),
            ("SOMETHING_NEW (4)", RdmaPortState::Active),
            ("gibberish", RdmaPortState::None),
        ] {
            assert_eq!(port_state(text), state, "{text}");
        }
    }

    #[test]
    fn linux_verbose_output_with_two_ports_roce_gids_and_odd_speeds() {
        let text = "hca_id:\tmlx5_0\n\
            \ttransport:\t\t\tInfiniBand (0)\n\
            \tnode_guid:\t\t\t248a:0703:0049:d468\n\
            \t\tdevice_cap_flags:\t\t0x25a1bc36\n\
            \t\t\t\t\tBAD_PKEY_CNTR\n\
            \t\tport:\t1\n\
            \t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\
            \t\t\tactive_width:\t\t4X (2)\n\
            \t\t\tactive_speed:\t\t53.125 Gbps (128)\n\
            \t\t\tlink_layer:\t\tEthernet\n\
            \t\t\tGID[  0]:\t\tfe80:0000:0000:0000:268a:07ff:fe49:d468, RoCE v1\n\
            \t\t\tGID[  3]:\t\t::ffff:10.0.0.1, RoCE v2\n\
            \t\tport:\t2\n\
            \t\t\tstate:\t\t\tPORT_DOWN (1)\n\
            \t\t\tactive_width:\t\tinvalid width (0)\n\
            \t\t\tactive_speed:\t\tinvalid speed (0)\n\
            \t\t\tlink_layer:\t\tEthernet\n";
        let devices = parse_ibv_devinfo(text);
        assert_eq!(devices.len(), 1);
        let mlx = &devices[0];
        assert_eq!(
            (
                mlx.name.as_str(),
                mlx.node_guid.as_str(),
                mlx.transport.as_str()
            ),
            ("mlx5_0", "248a07030049d468", "InfiniBand (0)")
        );
        assert_eq!(mlx.ports.len(), 2);
        let up = &mlx.ports[0];
        assert_eq!((up.port, up.state), (1, RdmaPortState::Active));
        assert_eq!(up.active_speed_bps(), Some(212_500_000_000));
        assert_eq!(up.link_layer, "Ethernet");
        assert_eq!(
            up.gids,
            vec![
                (0, "fe80::268a:7ff:fe49:d468".parse().expect("v6")),
                (3, "::ffff:10.0.0.1".parse().expect("v6")),
            ]
        );
        let down = &mlx.ports[1];
        assert_eq!((down.port, down.state), (2, RdmaPortState::Down));
        assert_eq!(
            (down.active_width_lanes, down.active_lane_speed_bps),
            (None, None)
        );
    }

    #[test]
    fn appended_single_device_outputs_make_one_device() {
        let text = "hca_id:\trdma_en2\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n\
                    hca_id:\trdma_en3\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\
                    hca_id:\trdma_en2\n\t\tport:\t1\n\t\t\tGID[  1]:\t::ffff:169.254.0.1\n";
        let devices = parse_ibv_devinfo(text);
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["rdma_en2", "rdma_en3"]);
        assert_eq!(devices[0].ports.len(), 1);
        assert_eq!(devices[0].ports[0].state, RdmaPortState::Down);
        assert_eq!(devices[0].ports[0].gids.len(), 1);
    }

    #[test]
    fn grep_filtered_output_of_a_two_port_device_keeps_both_ports() {
        let text = "hca_id:\tmlx4_0\n\
                    \t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tactive_width:\t\t4X (2)\n\
                    \t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tactive_width:\t\t1X (1)\n";
        let devices = parse_ibv_devinfo(text);
        let ports: Vec<(u32, RdmaPortState, Option<u32>)> = devices[0]
            .ports
            .iter()
            .map(|p| (p.port, p.state, p.active_width_lanes))
            .collect();
        assert_eq!(
            ports,
            [
                (1, RdmaPortState::Active, Some(4)),
                (2, RdmaPortState::Down, Some(1)),
            ]
        );
    }

    #[test]
    fn a_width_times_speed_that_overflows_is_unknown() {
        let text = "hca_id:\trdma_en2\n\t\tport:\t1\n\
                    \t\t\tactive_width:\t\t4294967295X (2)\n\
                    \t\t\tactive_speed:\t\t18446744073 Gbps (4)\n";
        let devices = parse_ibv_devinfo(text);
        let port = &devices[0].ports[0];
        assert_eq!(
            (port.active_width_lanes, port.active_lane_speed_bps),
            (Some(u32::MAX), Some(18_446_744_073_000_000_000))
        );
        assert_eq!(port.active_speed_bps(), None);
        assert_eq!(port.fact(RdmaReader::IbvDevinfo).active_speed_bps, 0);
    }

    #[test]
    fn a_grep_filtered_state_after_the_last_port_number_is_dropped() {
        // The device named again (appended outputs), its second part
        // without `port:` lines after a port numbered u32::MAX.
        let text = "hca_id:\ta\n\tport:\t4294967295\n\t\tstate:\tPORT_ACTIVE (4)\n\
                    hca_id:\ta\n\t\tstate:\tPORT_DOWN (1)\n\t\tstate:\tPORT_INIT (2)\n";
        let devices = parse_ibv_devinfo(text);
        let ports: Vec<(u32, RdmaPortState)> =
            devices[0].ports.iter().map(|p| (p.port, p.state)).collect();
        assert_eq!(
            ports,
            [(u32::MAX, RdmaPortState::Active), (1, RdmaPortState::Down)]
        );
    }

    #[test]
    fn no_devices_message_and_header_only_list_mean_no_devices() {
        assert!(parse_ibv_devinfo("No IB devices found\n").is_empty());
        assert!(
            parse_ibv_devices(
                "    device          \t   node GUID\n    ------          \t----------------\n"
            )
            .is_empty()
        );
        assert!(
            parse_ibv_devices("Failed to get IB devices list: Function not implemented\n")
                .is_empty()
        );
    }
}
