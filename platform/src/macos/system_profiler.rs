//! `system_profiler SPThunderboltDataType`: the host's Thunderbolt buses,
//! one per receptacle, and what is connected to each. Two forms are read:
//! `-json` (what the collector runs) and the plain text operators paste.

use serde_json::{Map, Value};

use crate::ibv::bits_per_second;

/// Thunderbolt's XDomain protocol id of the RDMA service; a peer Mac
/// advertises it only while RDMA is enabled on that peer.
pub const RDMA_SERVICE_PROTOCOL_ID: u64 = 64087;

/// One host Thunderbolt bus (a host router): its receptacles and the tree
/// of devices behind them. Apple-silicon Macs have one receptacle per bus;
/// older Macs have two.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThunderboltBus {
    /// "thunderboltusb4_bus_1", or "Thunderbolt/USB4 Bus 2" in the text
    /// form; empty when not given.
    pub name: String,
    /// This host's own domain UUID on this bus.
    pub domain_uuid: String,
    /// Every receptacle of the bus, in report order.
    pub ports: Vec<ThunderboltPort>,
    /// Devices the report lists for the bus as a whole: on a bus with more
    /// than one receptacle the JSON form does not say which one they are
    /// on. Empty when they were placed on their receptacle.
    pub unplaced_devices: Vec<ThunderboltDevice>,
}

/// One receptacle of a bus.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThunderboltPort {
    /// The physical port number (`receptacle_id_key`, `Receptacle:`), which
    /// is the N of hardware port "Thunderbolt N".
    pub receptacle: Option<u32>,
    pub speed: ThunderboltSpeed,
    /// `receptacle_connected` / `Device connected` and their opposites;
    /// `None` when not reported.
    pub connected: Option<bool>,
    /// The devices behind it; `None` when the report lists the bus's devices
    /// without saying which receptacle they are on.
    pub devices: Option<Vec<ThunderboltDevice>>,
}

impl ThunderboltPort {
    /// Something is linked: a device behind it, a bare negotiated rate or
    /// a connected status; nothing: no device and an idle status or "Up
    /// to" capability; `None` when the report says neither.
    pub fn linked(&self) -> Option<bool> {
        let has_devices = self.devices.as_ref().is_some_and(|d| !d.is_empty());
        if has_devices
            || matches!(self.speed, ThunderboltSpeed::Linked(_))
            || self.connected == Some(true)
        {
            Some(true)
        } else if self.connected == Some(false) {
            Some(false)
        } else if self.devices.is_none() {
            // The bus's devices could be on this receptacle.
            None
        } else if matches!(self.speed, ThunderboltSpeed::UpTo(_)) {
            Some(false)
        } else {
            None
        }
    }

    /// The negotiated rate of a live link; 0 when idle or unknown. Older
    /// macOS prints "Up to 20 Gb/s" for a connected port: that is no
    /// negotiated rate, so it stays unknown.
    pub fn negotiated_bps(&self) -> u64 {
        self.speed.negotiated_bps()
    }

    /// What an idle port can do; 0 when it is linked (its "Up to" then
    /// describes the link, not the port) or unknown.
    pub fn max_bps(&self) -> u64 {
        if self.linked() == Some(false) {
            self.speed.max_bps()
        } else {
            0
        }
    }

    /// Linked, but the report gives only an "Up to" rate.
    pub fn speed_is_ambiguous(&self) -> bool {
        self.linked() == Some(true) && matches!(self.speed, ThunderboltSpeed::UpTo(_))
    }

    /// Every device behind the receptacle, depth first.
    pub fn all_devices(&self) -> Vec<&ThunderboltDevice> {
        let mut found = Vec::new();
        let mut stack: Vec<&ThunderboltDevice> = self.devices.iter().flatten().rev().collect();
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
    /// Advertises the RDMA service ([`RDMA_SERVICE_PROTOCOL_ID`]); `None`
    /// when the report lists no services for it.
    pub rdma_service: Option<bool>,
    /// Devices connected behind this one (a peer behind a hub).
    pub devices: Vec<ThunderboltDevice>,
}

impl ThunderboltDevice {
    /// A Mac (an XDomain host): it has a domain UUID, or its device name is
    /// a Mac model identifier ("Mac16,9") even where the report leaves the
    /// UUID out. Docks and drives have neither.
    pub fn is_mac(&self) -> bool {
        !self.domain_uuid.is_empty() || is_mac_model_identifier(&self.device_name)
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

/// "Mac16,9", "MacBookPro18,1", "Macmini9,1", "iMac21,1": a family name
/// from Apple's list and `major,minor`.
pub fn is_mac_model_identifier(text: &str) -> bool {
    const FAMILIES: &[&str] = &[
        "Mac",
        "MacBookPro",
        "MacBookAir",
        "MacBook",
        "Macmini",
        "MacPro",
        "iMac",
        "iMacPro",
    ];
    let Some(digits_at) = text.find(|c: char| c.is_ascii_digit()) else {
        return false;
    };
    let (family, version) = text.split_at(digits_at);
    let Some((major, minor)) = version.split_once(',') else {
        return false;
    };
    let number = |s: &str| !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit());
    FAMILIES.contains(&family) && number(major) && number(minor)
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
    // `receptacle_1_tag`, `receptacle_2_tag`, …: one per receptacle of
    // the bus, in their number's order.
    let mut tags: Vec<(u32, &Map<String, Value>)> = bus
        .iter()
        .filter_map(|(key, value)| {
            let number = key.strip_prefix("receptacle_")?.strip_suffix("_tag")?;
            Some((number.parse().ok()?, value.as_object()?))
        })
        .collect();
    tags.sort_by_key(|(number, _)| *number);
    let devices = json_devices(bus);
    let placed = tags.len() == 1;
    let ports = tags
        .into_iter()
        .map(|(_, tag)| ThunderboltPort {
            receptacle: tag.get("receptacle_id_key").and_then(json_number),
            speed: ThunderboltSpeed::parse(&json_text(tag.get("current_speed_key"))),
            connected: tag
                .get("receptacle_status_key")
                .and_then(Value::as_str)
                .and_then(|status| match status {
                    "receptacle_connected" => Some(true),
                    "receptacle_no_devices_connected" => Some(false),
                    _ => None,
                }),
            devices: placed.then(|| devices.clone()),
        })
        .collect();
    ThunderboltBus {
        name: json_text(bus.get("_name")),
        domain_uuid: json_text(bus.get("domain_uuid_key")),
        ports,
        unplaced_devices: if placed { Vec::new() } else { devices },
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
            // renders that key as non-ASCII bytes, not "rdma". Without a
            // service list the answer is unknown, not "no".
            rdma_service: item
                .get("services_title")
                .and_then(Value::as_array)
                .map(|services| {
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
    let port_headings: Vec<usize> = outline
        .children(bus)
        .filter(|&child| is_port_heading(&outline.nodes[child].key))
        .collect();
    // Devices are normally indented under their port; any listed under the
    // bus itself belong to its only port, or to no port in particular.
    let loose = text_devices(outline, bus, 0, false);
    let placed_loose = port_headings.len() == 1;
    let ports = port_headings
        .iter()
        .map(|&port| {
            let field = |key: &str| outline.field(port, key).unwrap_or("");
            let mut devices = text_devices(outline, port, 0, true);
            if placed_loose {
                devices.extend(loose.iter().cloned());
            }
            ThunderboltPort {
                receptacle: field("Receptacle").parse().ok(),
                speed: ThunderboltSpeed::parse(field("Speed")),
                connected: match field("Status") {
                    "Device connected" => Some(true),
                    "No device connected" => Some(false),
                    _ => None,
                },
                devices: Some(devices),
            }
        })
        .collect();
    ThunderboltBus {
        name: name.to_owned(),
        domain_uuid: outline.field(bus, "Domain UUID").unwrap_or("").to_owned(),
        ports,
        unplaced_devices: if placed_loose { Vec::new() } else { loose },
    }
}

/// Devices are the headings under a bus, port or device that are neither
/// a port nor its services. Apple indents a connected device deeper than
/// the bus's `Port:` heading; a dock's own ports (`Port (Upstream):`,
/// `Port:`) hold the devices behind it. `into_ports`: look inside port
/// headings (below a device or port), not only at direct children.
fn text_devices(
    outline: &Outline,
    parent: usize,
    depth: usize,
    into_ports: bool,
) -> Vec<ThunderboltDevice> {
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
            if into_ports {
                devices.extend(text_devices(outline, child, depth + 1, true));
            }
            continue;
        }
        let services: Vec<usize> = outline
            .children(child)
            .filter(|&c| outline.nodes[c].key == "Services")
            .collect();
        devices.push(ThunderboltDevice {
            name: node.key.clone(),
            device_name: outline.field(child, "Device Name").unwrap_or("").to_owned(),
            vendor: outline.field(child, "Vendor Name").unwrap_or("").to_owned(),
            domain_uuid: outline.field(child, "Domain UUID").unwrap_or("").to_owned(),
            rdma_service: (!services.is_empty()).then(|| {
                services.iter().any(|&services| {
                    outline.descendants(services).any(|d| {
                        let node = &outline.nodes[d];
                        node.key == "Protocol ID"
                            && node.value.parse() == Ok(RDMA_SERVICE_PROTOCOL_ID)
                    })
                })
            }),
            devices: text_devices(outline, child, depth + 1, true),
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

/// `Key: Value`, `Key:\tValue`, `Key:   Value`: split at the first colon
/// followed by whitespace, so a value may hold colons ("Link Status: 0x2",
/// a time "12:30") and any blank may follow the key's colon.
fn split_field(content: &str) -> Option<(&str, &str)> {
    content
        .char_indices()
        .find(|&(i, c)| c == ':' && content[i + 1..].starts_with(char::is_whitespace))
        .map(|(i, _)| (&content[..i], &content[i + 1..]))
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
                None => match split_field(content) {
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
        let port = &buses[0].ports[0];
        assert_eq!(port.receptacle, Some(2));
        assert_eq!(port.speed, ThunderboltSpeed::Unknown);
        assert_eq!(port.connected, None);
        assert_eq!(port.linked(), Some(true), "a device is behind it");
        let peer = port.peer().expect("peer");
        assert_eq!(peer.rdma_service, Some(true));
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
    fn a_mac_is_a_mac_without_a_domain_uuid_and_unlisted_services_are_unknown() {
        let json = r#"{"SPThunderboltDataType": [
            {"receptacle_1_tag": {"receptacle_id_key": "1", "current_speed_key": "80 Gb/s"},
             "_items": [{"_name": "Mac Studio", "device_name_key": "Mac16,9",
                         "vendor_name_key": "Apple Inc."}]},
            {"receptacle_1_tag": {"receptacle_id_key": "2", "current_speed_key": "40 Gb/s"},
             "_items": [{"_name": "Pro Display XDR", "device_name_key": "Pro Display XDR",
                         "vendor_name_key": "Apple Inc."}]}
        ]}"#;
        let buses = parse_thunderbolt_json(json).expect("json");
        let mac = buses[0].ports[0].peer().expect("a Mac, not a dock");
        assert_eq!((mac.domain_uuid.as_str(), mac.rdma_service), ("", None));
        assert!(buses[0].ports[0].other_devices().is_empty());
        assert_eq!(buses[1].ports[0].peer(), None, "Apple's display is no Mac");
        for (id, mac) in [
            ("Mac17,7", true),
            ("MacBookPro18,1", true),
            ("Macmini9,1", true),
            ("iMac21,1", true),
            ("Mac16", false),
            ("SB-XTM5", false),
            ("Mac16,9x", false),
            ("Dock1,2", false),
            ("", false),
        ] {
            assert_eq!(is_mac_model_identifier(id), mac, "{id}");
        }
    }

    #[test]
    fn every_receptacle_of_a_multi_port_bus_is_read() {
        let json = r#"{"SPThunderboltDataType": [
            {"domain_uuid_key": "HOST",
             "receptacle_1_tag": {"receptacle_id_key": "1", "current_speed_key": "Up to 40 Gb/s",
                                  "receptacle_status_key": "receptacle_no_devices_connected"},
             "receptacle_2_tag": {"receptacle_id_key": "2", "current_speed_key": "Up to 20 Gb/s",
                                  "receptacle_status_key": "receptacle_connected"},
             "_items": [{"_name": "Mac mini", "domain_uuid_key": "PEER"}]}
        ]}"#;
        let bus = &parse_thunderbolt_json(json).expect("json")[0];
        let numbers: Vec<Option<u32>> = bus.ports.iter().map(|p| p.receptacle).collect();
        assert_eq!(numbers, [Some(1), Some(2)]);
        assert_eq!(bus.ports[0].linked(), Some(false));
        assert_eq!(bus.ports[0].max_bps(), 40_000_000_000);
        // Older macOS: "Up to" on a connected port is not an idle port.
        let connected = &bus.ports[1];
        assert_eq!(connected.linked(), Some(true));
        assert!(connected.speed_is_ambiguous());
        assert_eq!((connected.negotiated_bps(), connected.max_bps()), (0, 0));
        assert_eq!(
            connected.devices, None,
            "which port the Mac is on is unknown"
        );
        assert_eq!(bus.unplaced_devices.len(), 1);
    }

    #[test]
    fn text_fields_split_at_any_blank_after_the_colon() {
        let text = "Thunderbolt/USB4 Bus 0:\n  Domain UUID:\tAAAA\n  Port:\n      Status:\tDevice connected\n\
                    \x20     Speed:\t80 Gb/s\n      Receptacle:\t1\n      Link Status: 0x2\n\
                    \x20   Mac:\n        Device Name:    Mac15,14\n        Domain UUID:\tBBBB\n\
                    \x20       Firmware Version: 1.2:3\n";
        let buses = parse_thunderbolt_text(text);
        let bus = &buses[0];
        assert_eq!(bus.domain_uuid, "AAAA");
        let port = &bus.ports[0];
        assert_eq!(
            (port.receptacle, port.connected, port.speed),
            (
                Some(1),
                Some(true),
                ThunderboltSpeed::Linked(80_000_000_000)
            )
        );
        let peer = port.peer().expect("peer");
        assert_eq!(
            (peer.device_name.as_str(), peer.domain_uuid.as_str()),
            ("Mac15,14", "BBBB")
        );
        assert_eq!(peer.rdma_service, None, "no Services heading");
        assert_eq!(
            split_field("Firmware Version: 1.2:3"),
            Some(("Firmware Version", " 1.2:3"))
        );
        assert_eq!(split_field("UID:0x05"), None);
    }

    #[test]
    fn text_bus_with_two_ports_keeps_both() {
        let text = "Thunderbolt Bus 0:\n  Domain UUID: HOST\n  Port:\n    Status: No device connected\n\
                    \x20   Speed: Up to 40 Gb/s\n    Receptacle: 1\n  Port:\n    Status: Device connected\n\
                    \x20   Speed: Up to 20 Gb/s\n    Receptacle: 2\n    MacBook Pro:\n      Device Name: MacBookPro16,1\n";
        let bus = &parse_thunderbolt_text(text)[0];
        assert_eq!(bus.ports.len(), 2);
        assert_eq!(bus.ports[0].linked(), Some(false));
        let second = &bus.ports[1];
        assert_eq!((second.receptacle, second.linked()), (Some(2), Some(true)));
        assert!(second.peer().is_some(), "the Mac is under its own port");
        assert!(bus.ports[0].peer().is_none());
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
        let port = &bus.ports[0];
        assert_eq!(
            (port.receptacle, bus.domain_uuid.as_str(), port.connected),
            (Some(1), "AAAA", Some(true))
        );
        assert_eq!(port.speed, ThunderboltSpeed::Linked(40_000_000_000));
        let others: Vec<&str> = port.other_devices().iter().map(|d| d.label()).collect();
        assert_eq!(others, ["Dock"]);
        let peer = port.peer().expect("peer behind the dock");
        assert_eq!(
            (peer.device_name.as_str(), peer.domain_uuid.as_str()),
            ("Mac17,7", "BBBB")
        );
        assert_eq!(peer.rdma_service, None);
    }

    #[test]
    fn deep_text_nesting_is_bounded() {
        let text: String = (0..5000)
            .map(|i| format!("{}Hub {i}:\n", " ".repeat(i + 2)))
            .collect();
        let text = format!("Thunderbolt/USB4 Bus 1:\n Port:\n{text}");
        let buses = parse_thunderbolt_text(&text);
        assert_eq!(buses.len(), 1);
        assert!(buses[0].ports[0].all_devices().len() <= 16);
    }
}
