//! IPv4 addresses per interface from `ip -j -4 addr show` (iproute2's JSON
//! output; sysfs has no addresses). JSON rather than `ip -o` text because
//! interface names and address flags then need no guessing.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use meshd_domain::facts::Ipv4Cidr;
use serde_json::Value;

/// The addresses found, and what could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InterfaceAddresses {
    /// Interface name → its IPv4 addresses in the order `ip` lists them.
    pub by_interface: BTreeMap<String, Vec<Ipv4Cidr>>,
    /// Entries that were skipped, each saying why.
    pub skipped: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressesError {
    #[error("ip -j -4 addr show: not JSON: {0}")]
    NotJson(String),
    #[error("ip -j -4 addr show: expected a list of interfaces, found {0}")]
    NotAList(&'static str),
}

/// Parses `ip -j -4 addr show`.
pub fn parse_ip_addr_json(text: &str) -> Result<InterfaceAddresses, AddressesError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| AddressesError::NotJson(e.to_string()))?;
    let Value::Array(interfaces) = value else {
        return Err(AddressesError::NotAList(json_kind(&value)));
    };
    let mut found = InterfaceAddresses::default();
    for (position, interface) in interfaces.iter().enumerate() {
        // iproute2 before 6.x prints `{}` for every interface without an
        // IPv4 address when filtering with -4.
        if interface.as_object().is_some_and(serde_json::Map::is_empty) {
            continue;
        }
        let Some(name) = interface.get("ifname").and_then(Value::as_str) else {
            found
                .skipped
                .push(format!("interface #{position}: no \"ifname\""));
            continue;
        };
        let addresses = found.by_interface.entry(name.to_owned()).or_default();
        let infos = interface
            .get("addr_info")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for info in infos {
            if info.get("family").and_then(Value::as_str) != Some("inet") {
                continue;
            }
            match address(info) {
                Some(cidr) => addresses.push(cidr),
                None => found
                    .skipped
                    .push(format!("{name}: unreadable address {}", compact(info))),
            }
        }
    }
    Ok(found)
}

fn address(info: &Value) -> Option<Ipv4Cidr> {
    let local: Ipv4Addr = info.get("local")?.as_str()?.parse().ok()?;
    let prefix = u8::try_from(info.get("prefixlen")?.as_u64()?).ok()?;
    Ipv4Cidr::new(local, prefix)
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The entry as JSON, shortened for a message.
fn compact(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// `ip -j -4 addr show` as iproute2 6.1 (Debian 12) printed it on the
    /// development machine, with a veth pair mdtest0/mdtest1 where only
    /// mdtest0 has addresses (two).
    const IP_ADDR: &str = r#"[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue","operstate":"UNKNOWN","group":"default","txqlen":1000,"addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":4,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1400,"qdisc":"pfifo_fast","operstate":"UP","group":"default","txqlen":1000,"addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24,"broadcast":"192.0.2.255","scope":"global","label":"eth0","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":6,"link":"mdtest1","ifname":"mdtest0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","operstate":"UP","group":"default","txqlen":1000,"addr_info":[{"family":"inet","local":"10.9.0.1","prefixlen":30,"scope":"global","label":"mdtest0","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet","local":"169.254.3.1","prefixlen":16,"scope":"global","label":"mdtest0","valid_life_time":4294967295,"preferred_life_time":4294967295}]}]"#;

    fn cidr(text: &str) -> Ipv4Cidr {
        text.parse().expect("cidr")
    }

    #[test]
    fn addresses_per_interface() {
        let found = parse_ip_addr_json(IP_ADDR).expect("parses");
        assert_eq!(found.skipped, Vec::<String>::new());
        assert_eq!(found.by_interface.len(), 3);
        assert_eq!(found.by_interface["lo"], [cidr("127.0.0.1/8")]);
        assert_eq!(found.by_interface["eth0"], [cidr("192.0.2.2/24")]);
        assert_eq!(
            found.by_interface["mdtest0"],
            [cidr("10.9.0.1/30"), cidr("169.254.3.1/16")]
        );
    }

    #[test]
    fn the_empty_objects_of_older_iproute2_are_not_interfaces() {
        let text = r#"[{},{"ifindex":2,"ifname":"en1","addr_info":[{"family":"inet","local":"10.0.0.1","prefixlen":30}]},{}]"#;
        let found = parse_ip_addr_json(text).expect("parses");
        assert_eq!(found.skipped, Vec::<String>::new());
        assert_eq!(found.by_interface.len(), 1);
        assert_eq!(found.by_interface["en1"], [cidr("10.0.0.1/30")]);
    }

    #[test]
    fn broken_entries_are_skipped_with_a_reason() {
        let text = r#"[{"ifname":"en1","addr_info":[{"family":"inet","local":"10.0.0.1","prefixlen":40},{"family":"inet6","local":"fe80::1","prefixlen":64},{"family":"inet","local":"10.0.0.5","prefixlen":30}]},{"ifindex":3}]"#;
        let found = parse_ip_addr_json(text).expect("parses");
        assert_eq!(found.by_interface["en1"], [cidr("10.0.0.5/30")]);
        assert_eq!(found.skipped.len(), 2, "{:?}", found.skipped);
        assert!(found.skipped[0].starts_with("en1: unreadable address"));
        assert_eq!(found.skipped[1], "interface #1: no \"ifname\"");
    }

    #[test]
    fn not_a_list_of_interfaces_is_an_error_saying_what_it_was() {
        assert_eq!(
            parse_ip_addr_json("{}").map_err(|e| e.to_string()),
            Err("ip -j -4 addr show: expected a list of interfaces, found an object".into())
        );
        assert!(matches!(
            parse_ip_addr_json("1: lo    inet 127.0.0.1/8 scope host lo"),
            Err(AddressesError::NotJson(_))
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            let _ = parse_ip_addr_json(&text);
        }

        #[test]
        fn mutated_output_never_panics(index in 0usize..2000, byte in any::<u8>()) {
            let mut bytes = IP_ADDR.as_bytes().to_vec();
            let at = index % bytes.len();
            bytes[at] = byte;
            let _ = parse_ip_addr_json(&String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn truncated_output_never_panics(len in 0usize..2000) {
            let cut = IP_ADDR.get(..len.min(IP_ADDR.len())).unwrap_or("");
            let _ = parse_ip_addr_json(cut);
        }
    }
}
