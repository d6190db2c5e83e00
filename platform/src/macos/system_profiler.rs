//! `system_profiler SPThunderboltDataType`: the host's Thunderbolt buses,
//! one per receptacle, and what is connected to each. Two forms are read:
//! `-json` (what the collector runs) and the plain text operators paste.

use serde_json::{Map, Value};

use crate::ibv::bits_per_second;

/// Thunderbolt's XDomain protocol id of the RDMA service; a peer Mac
/// advertises it only while RDMA is enabled on that peer.
pub const RDMA_SERVICE_PROTOCOL_ID: u64 = 64087;

/// One host Thunderbolt bus: a local receptacle and the tree of devices
/// behind it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThunderboltBus {
    /// "thunderboltusb4_bus_1", or "Thunderbolt/USB4 Bus 2" in the text
    /// form; empty when not given.
    pub name: String,
    /// The physical port number (`receptacle_id_key`), which is the N of
    /// hardware port "Thunderbolt N".
    pub receptacle: Option<u32>,
    /// This host's own domain UUID on this bus.
    pub domain_uuid: String,
    pub speed: ThunderboltSpeed,
    /// `receptacle_connected` / `receptacle_no_devices_connected`; `None`
    /// when not reported.
    pub connected: Option<bool>,
    pub devices: Vec<ThunderboltDevice>,
}

/// What `current_speed_key` / `Speed:` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThunderboltSpeed {
    /// A bare rate ("80 Gb/s"): the negotiated speed of a live link.
    Linked(u64),
    /// "Up to 120 Gb/s": what an idle port can do, with nothing linked.
    UpTo(u64),
    #[default]
    Unknown,
}

impl ThunderboltSpeed {
    /// "80 Gb/s", "Up to 120 Gb/s", "Up to 40 Gb/s x1" (a lane-count
    /// suffix is ignored).
    pub fn parse(text: &str) -> ThunderboltSpeed {
        let text = text.trim();
        let (rate, up_to) = match text.strip_prefix("Up to ") {
            Some(rate) => (rate, true),
            None => (text, false),
        };
        let mut words = rate.split_whitespace();
        let bps = match (words.next(), words.next()) {
            (Some(number), Some(unit)) => bits_per_second(number, unit),
            _ => None,
        };
        match (bps, up_to) {
            (Some(bps), true) => ThunderboltSpeed::UpTo(bps),
            (Some(bps), false) => ThunderboltSpeed::Linked(bps),
            (None, _) => ThunderboltSpeed::Unknown,
        }
    }

    /// 0 unless linked.
    pub fn negotiated_bps(self) -> u64 {
        match self {
            ThunderboltSpeed::Linked(bps) => bps,
            _ => 0,
        }
    }

    /// The idle capability; 0 when linked or unknown.
    pub fn max_bps(self) -> u64 {
        match self {
            ThunderboltSpeed::UpTo(bps) => bps,
            _ => 0,
        }
    }
}

/// A device behind a receptacle: a peer Mac, a dock, a drive or a hub.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThunderboltDevice {
    /// `_name`: the marketing name ("MacBook Pro", "Envoy Ultra").
    pub name: String,
    /// `device_name_key`: a Mac's model identifier ("Mac17,7"); a dock's
    /// product name.
    pub device_name: String,
    pub vendor: String,
    /// Only a Mac (an XDomain host) has one; docks and drives do not.
    pub domain_uuid: String,
    /// Advertises the RDMA service ([`RDMA_SERVICE_PROTOCOL_ID`]).
    pub rdma_service: bool,
    /// Devices connected behind this one (a peer behind a hub).
    pub devices: Vec<ThunderboltDevice>,
}

impl ThunderboltDevice {
    pub fn is_mac(&self) -> bool {
        !self.domain_uuid.is_empty()
    }

    /// How to name it to an operator: its marketing name, else its
    /// device name.
    pub fn label(&self) -> &str {
        if self.name.is_empty() {
            &self.device_name
        } else {
            &self.name
        }
    }
}

impl ThunderboltBus {
    /// Every device behind the receptacle, depth first.
    pub fn all_devices(&self) -> Vec<&ThunderboltDevice> {
        let mut found = Vec::new();
        let mut stack: Vec<&ThunderboltDevice> = self.devices.iter().rev().collect();
        while let Some(device) = stack.pop() {
            found.push(device);
            stack.extend(device.devices.iter().rev());
        }
        found
    }

    /// The first Mac behind the receptacle, also behind a hub.
    pub fn peer(&self) -> Option<&ThunderboltDevice> {
        self.all_devices().into_iter().find(|d| d.is_mac())
    }

    /// The docks, drives and hubs, not Macs.
    pub fn other_devices(&self) -> Vec<&ThunderboltDevice> {
        self.all_devices()
            .into_iter()
            .filter(|d| !d.is_mac())
            .collect()
    }
}

/// Why a Thunderbolt report could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThunderboltParseError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("no SPThunderboltDataType list in the JSON")]
    NoThunderboltList,
}

/// Either form: JSON when the text starts with `{`, else the text form
/// (operators paste that, also into bundles).
pub fn parse_thunderbolt(text: &str) -> Result<Vec<ThunderboltBus>, ThunderboltParseError> {
    if text.trim_start().starts_with('{') {
        parse_thunderbolt_json(text)
    } else {
        Ok(parse_thunderbolt_text(text))
    }
}

/// `system_profiler SPThunderboltDataType -json`. Keys that are missing or
/// of an odd type leave their field unknown; only text that is not JSON,
/// or JSON without the list, is an error.
pub fn parse_thunderbolt_json(text: &str) -> Result<Vec<ThunderboltBus>, ThunderboltParseError> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| ThunderboltParseError::NotJson(e.to_string()))?;
    let buses = root
        .get("SPThunderboltDataType")
        .and_then(Value::as_array)
        .ok_or(ThunderboltParseError::NoThunderboltList)?;
    Ok(buses
        .iter()
        .filter_map(Value::as_object)
        .map(json_bus)
        .collect())
}

fn json_bus(bus: &Map<String, Value>) -> ThunderboltBus {
    let receptacle = bus.get("receptacle_1_tag").and_then(Value::as_object);
    let receptacle_field = |key: &str| receptacle.and_then(|r| r.get(key));
    ThunderboltBus {
        name: json_text(bus.get("_name")),
        receptacle: receptacle_field("receptacle_id_key").and_then(json_number),
        domain_uuid: json_text(bus.get("domain_uuid_key")),
        speed: ThunderboltSpeed::parse(&json_text(receptacle_field("current_speed_key"))),
        connected: receptacle_field("receptacle_status_key")
            .and_then(Value::as_str)
            .and_then(|status| match status {
                "receptacle_connected" => Some(true),
                "receptacle_no_devices_connected" => Some(false),
                _ => None,
            }),
        devices: json_devices(bus),
    }
}

fn json_devices(parent: &Map<String, Value>) -> Vec<ThunderboltDevice> {
    let Some(items) = parent.get("_items").and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(Value::as_object)
        .map(|item| ThunderboltDevice {
            name: json_text(item.get("_name")),
            device_name: json_text(item.get("device_name_key")),
            vendor: json_text(item.get("vendor_name_key")),
            domain_uuid: json_text(item.get("domain_uuid_key")),
            // Match the protocol id, not `service_key_key`: the JSON
            // renders that key as non-ASCII bytes, not "rdma".
            rdma_service: item
                .get("services_title")
                .and_then(Value::as_array)
                .is_some_and(|services| {
                    services.iter().any(|service| {
                        service.get("protocol_id_key").and_then(json_number)
                            == Some(RDMA_SERVICE_PROTOCOL_ID)
                    })
                }),
            devices: json_devices(item),
        })
        .collect()
}

fn json_text(value: Option<&Value>) -> String {
    value
        .and_then(Value::as_str)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// A number, or a string holding one ("3"): Apple writes receptacle ids as
/// strings and protocol ids as numbers.
fn json_number<T: TryFrom<u64>>(value: &Value) -> Option<T> {
    let number = match value {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    T::try_from(number).ok()
}

/// `system_profiler SPThunderboltDataType` without `-json`: an indented
/// outline of `Heading:` and `Key: Value` lines.
pub fn parse_thunderbolt_text(text: &str) -> Vec<ThunderboltBus> {
    let outline = Outline::parse(text);
    outline
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| node.heading && node.key.contains(" Bus "))
        .map(|(index, node)| text_bus(&outline, index, &node.key))
        .collect()
}

fn text_bus(outline: &Outline, bus: usize, name: &str) -> ThunderboltBus {
    let port = outline
        .children(bus)
        .find(|&child| is_port_heading(&outline.nodes[child].key));
    let port_field = |key: &str| port.and_then(|p| outline.field(p, key)).unwrap_or("");
    ThunderboltBus {
        name: name.to_owned(),
        receptacle: port_field("Receptacle").parse().ok(),
        domain_uuid: outline.field(bus, "Domain UUID").unwrap_or("").to_owned(),
        speed: ThunderboltSpeed::parse(port_field("Speed")),
        connected: match port_field("Status") {
            "Device connected" => Some(true),
            "No device connected" => Some(false),
            _ => None,
        },
        devices: text_devices(outline, bus, 0),
    }
}

/// Devices are the headings under a bus or device that are neither a
/// port nor its services. Apple indents a connected device deeper than the
/// bus's `Port:` heading, so devices are also looked for under ports.
fn text_devices(outline: &Outline, parent: usize, depth: usize) -> Vec<ThunderboltDevice> {
    // Real chains are a few devices long; the bound keeps hostile input
    // from exhausting the stack.
    const MAX_DEPTH: usize = 16;
    if depth >= MAX_DEPTH {
        return Vec::new();
    }
    let mut devices = Vec::new();
    for child in outline.children(parent) {
        let node = &outline.nodes[child];
        if !node.heading || node.key == "Services" {
            continue;
        }
        if is_port_heading(&node.key) {
            devices.extend(text_devices(outline, child, depth + 1));
            continue;
        }
        devices.push(ThunderboltDevice {
            name: node.key.clone(),
            device_name: outline.field(child, "Device Name").unwrap_or("").to_owned(),
            vendor: outline.field(child, "Vendor Name").unwrap_or("").to_owned(),
            domain_uuid: outline.field(child, "Domain UUID").unwrap_or("").to_owned(),
            rdma_service: outline
                .children(child)
                .filter(|&c| outline.nodes[c].key == "Services")
                .any(|services| {
                    outline.descendants(services).any(|d| {
                        let node = &outline.nodes[d];
                        node.key == "Protocol ID"
                            && node.value.parse() == Ok(RDMA_SERVICE_PROTOCOL_ID)
                    })
                }),
            devices: text_devices(outline, child, depth + 1),
        });
    }
    devices
}

/// `Port:` and `Port (Upstream):`.
fn is_port_heading(key: &str) -> bool {
    key == "Port" || key.starts_with("Port (")
}

/// Indented `Key: Value` lines as a tree, in an arena so that no input can
/// make building or dropping it recurse.
#[derive(Debug, Default)]
struct Outline {
    nodes: Vec<OutlineNode>,
}

#[derive(Debug)]
struct OutlineNode {
    indent: usize,
    /// A line ending in `:` ("Port:", "Service: Unknown:") opens a
    /// heading; its key is the whole line without that colon.
    heading: bool,
    key: String,
    value: String,
    children: Vec<usize>,
}

impl Outline {
    fn parse(text: &str) -> Outline {
        let mut outline = Outline::default();
        // The open headings, innermost last.
        let mut open: Vec<usize> = Vec::new();
        for line in text.lines() {
            let content = line.trim();
            if content.is_empty() {
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            while open
                .last()
                .is_some_and(|&h| outline.nodes[h].indent >= indent)
            {
                open.pop();
            }
            let (heading, key, value) = match content.strip_suffix(':') {
                Some(key) => (true, key.trim(), ""),
                None => match content.split_once(": ") {
                    Some((key, value)) => (false, key.trim(), value.trim()),
                    None => (false, content, ""),
                },
            };
            let index = outline.nodes.len();
            outline.nodes.push(OutlineNode {
                indent,
                heading,
                key: key.to_owned(),
                value: value.to_owned(),
                children: Vec::new(),
            });
            if let Some(&parent) = open.last() {
                outline.nodes[parent].children.push(index);
            }
            if heading {
                open.push(index);
            }
        }
        outline
    }

    fn children(&self, parent: usize) -> impl Iterator<Item = usize> + '_ {
        self.nodes[parent].children.iter().copied()
    }

    /// Everything below `ancestor`: nodes are in line order, so that is
    /// the run of nodes after it whose parent chain reaches it.
    fn descendants(&self, ancestor: usize) -> impl Iterator<Item = usize> + '_ {
        (ancestor + 1..self.nodes.len())
            .take_while(move |&i| self.nodes[i].indent > self.nodes[ancestor].indent)
    }

    /// The value of the first `key:` field directly under `parent`.
    fn field(&self, parent: usize, key: &str) -> Option<&str> {
        self.children(parent)
            .map(|i| &self.nodes[i])
            .find(|node| !node.heading && node.key == key)
            .map(|node| node.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_linked_idle_and_unknown() {
        assert_eq!(
            ThunderboltSpeed::parse("80 Gb/s"),
            ThunderboltSpeed::Linked(80_000_000_000)
        );
        assert_eq!(
            ThunderboltSpeed::parse("Up to 120 Gb/s"),
            ThunderboltSpeed::UpTo(120_000_000_000)
        );
        assert_eq!(
            ThunderboltSpeed::parse("Up to 40 Gb/s x1"),
            ThunderboltSpeed::UpTo(40_000_000_000)
        );
        for odd in ["", "fast", "Up to", "80", "Gb/s 80"] {
            assert_eq!(
                ThunderboltSpeed::parse(odd),
                ThunderboltSpeed::Unknown,
                "{odd}"
            );
        }
        assert_eq!(ThunderboltSpeed::Linked(5).max_bps(), 0);
        assert_eq!(ThunderboltSpeed::UpTo(5).negotiated_bps(), 0);
    }

    #[test]
    fn odd_json_leaves_fields_unknown_and_only_non_json_fails() {
        let odd = r#"{"SPThunderboltDataType": [
            7,
            {"receptacle_1_tag": {"receptacle_id_key": 2, "current_speed_key": 80},
             "_items": [{"_name": "Mac", "domain_uuid_key": "U",
                         "services_title": [{"protocol_id_key": "64087"}]}, "x"]},
            {"receptacle_1_tag": "nope", "_items": {"not": "a list"}}
        ]}"#;
        let buses = parse_thunderbolt_json(odd).expect("json");
        assert_eq!(buses.len(), 2);
        assert_eq!(buses[0].receptacle, Some(2));
        assert_eq!(buses[0].speed, ThunderboltSpeed::Unknown);
        assert_eq!(buses[0].connected, None);
        let peer = buses[0].peer().expect("peer");
        assert!(peer.rdma_service);
        assert_eq!(buses[1], ThunderboltBus::default());

        assert!(matches!(
            parse_thunderbolt_json("Thunderbolt/USB4:"),
            Err(ThunderboltParseError::NotJson(_))
        ));
        assert_eq!(
            parse_thunderbolt_json(r#"{"SPUSBDataType": []}"#),
            Err(ThunderboltParseError::NoThunderboltList)
        );
        assert_eq!(
            parse_thunderbolt_json(r#"{"SPThunderboltDataType": []}"#),
            Ok(vec![])
        );
    }

    #[test]
    fn text_dock_with_a_mac_behind_it() {
        let text = "Thunderbolt/USB4:\n\n    Thunderbolt/USB4 Bus 0:\n\n\
                    \x20     Domain UUID: AAAA\n      Port:\n\
                    \x20         Status: Device connected\n          Speed: 40 Gb/s\n\
                    \x20         Receptacle: 1\n\n\
                    \x20       Dock:\n\n          Vendor Name: ACME\n          Device Name: Dock\n\
                    \x20         Port (Upstream):\n            Status: Device connected\n\
                    \x20         Port:\n            Status: Device connected\n\n\
                    \x20           MacBook Pro:\n\n              Device Name: Mac17,7\n\
                    \x20             Domain UUID: BBBB\n";
        let buses = parse_thunderbolt_text(text);
        assert_eq!(buses.len(), 1);
        let bus = &buses[0];
        assert_eq!(
            (bus.receptacle, bus.domain_uuid.as_str(), bus.connected),
            (Some(1), "AAAA", Some(true))
        );
        assert_eq!(bus.speed, ThunderboltSpeed::Linked(40_000_000_000));
        let others: Vec<&str> = bus.other_devices().iter().map(|d| d.label()).collect();
        assert_eq!(others, ["Dock"]);
        let peer = bus.peer().expect("peer behind the dock");
        assert_eq!(
            (peer.device_name.as_str(), peer.domain_uuid.as_str()),
            ("Mac17,7", "BBBB")
        );
        assert!(!peer.rdma_service);
    }

    #[test]
    fn deep_text_nesting_is_bounded() {
        let text: String = (0..5000)
            .map(|i| format!("{}Hub {i}:\n", " ".repeat(i + 1)))
            .collect();
        let text = format!("Thunderbolt/USB4 Bus 1:\n{text}");
        let buses = parse_thunderbolt_text(&text);
        assert_eq!(buses.len(), 1);
        assert!(buses[0].all_devices().len() <= 16);
    }
}
