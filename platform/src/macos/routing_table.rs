//! `netstat -r -n -f inet`: the IPv4 routing table, and a longest-prefix
//! lookup over it, so one call answers for every mesh peer.
//!
//! ```text
//! Routing tables
//!
//! Internet:
//! Destination        Gateway            Flags           Netif Expire
//! default            172.20.10.1        UGScg             en0
//! default            link#28            UCSIg           utun8
//! 100.64/10          link#28            UCS             utun8
//! 169.254            link#11            UCS               en0      !
//! 192.168.0.1        74:da:88:21:50:d9  UHLWIir           en0   1200
//! ```
//!
//! Columns are found by the header: `Refs` and `Use` are there before
//! macOS 11.3 and gone after; `Expire` is often empty. Every other column
//! is one word, so a row is read by position.
//!
//! Destinations are printed the way network_cmds' `netname` does: a
//! network route's address cut after its last non-zero octet of its class
//! (`10`, `169.254`, `192.168.1`), with `/len` only when the mask is not
//! the class's own (`10/16`, `100.64/10`, `128.0/1`); a host route (`H`)
//! in full. So a destination without `/len` is a /8 for 0–127, a /16 for
//! 128–191, a /24 above, and a /32 with `H`.
//!
//! The lookup leaves out interface-scoped routes (`I`): the kernel keeps
//! them apart and uses them only for sockets bound to that interface,
//! which a job's sockets are not. It cannot see what only the kernel
//! knows at lookup time (the host's own addresses, whose `lo0` rows are
//! scoped, come out on their subnet's interface), so where the answer for
//! a few addresses must be exact, [`super::route`] asks the kernel itself.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use meshd_domain::facts::Ipv4Cidr;

use super::route::is_interface_name;
use crate::route::{Egress, Lookup, NextHop, RouteError, ipv4, within};
use crate::source::{HostCommand, Source};

/// A table of many thousand routes (a busy LAN's neighbours each get a
/// row) fits; more is refused rather than half read.
pub const MAX_TABLE_BYTES: usize = 4 * 1024 * 1024;
pub const MAX_TABLE_LINES: usize = 50_000;

/// What a row names as its gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gateway {
    /// A router (`G`), or the far end of a point-to-point link.
    Address(Ipv4Addr),
    /// `link#N`: on the link of interface index N, no router.
    Link(u32),
    /// A neighbour's link-layer address (ARP entries, broadcast).
    LinkLayer(String),
    /// An interface by name (`utun0`), as routes added with `-interface`
    /// can show.
    Interface(String),
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteEntry {
    /// As printed: `default`, `169.254`, `10/16`, `192.168.0.1`.
    pub destination_text: String,
    pub destination: Ipv4Cidr,
    pub gateway: Gateway,
    /// The flag letters (`UGScg`, `UHLWIir`).
    pub flags: String,
    pub interface: String,
}

impl RouteEntry {
    fn has(&self, flag: char) -> bool {
        self.flags.contains(flag)
    }

    /// Only for sockets bound to its interface (`I`, `RTF_IFSCOPE`).
    pub fn is_scoped(&self) -> bool {
        self.has('I')
    }

    /// Rejects or drops what it matches (`R`, `B`; the lower-case letters
    /// are other flags).
    pub fn refuses(&self) -> bool {
        self.has('R') || self.has('B')
    }

    fn egress(&self) -> Result<Egress, String> {
        let next_hop = if self.has('G') {
            match self.gateway {
                Gateway::Address(gateway) => NextHop::Gateway(IpAddr::V4(gateway)),
                _ => {
                    return Err(format!(
                        "route {} has the G flag but no router address",
                        self.destination_text
                    ));
                }
            }
        } else if self.interface == "lo0" {
            NextHop::Local
        } else {
            NextHop::Direct
        };
        Ok(Egress {
            interface: self.interface.clone(),
            next_hop,
            matched: Some(self.destination),
        })
    }
}

/// The IPv4 routes, in output order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoutingTable {
    pub routes: Vec<RouteEntry>,
}

/// Why a table cannot be read. Any unreadable row refuses the whole
/// table: the row left out could be the route that matters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingTableError {
    #[error("{bytes} bytes, over the {MAX_TABLE_BYTES}-byte cap: refused unread")]
    TooLarge { bytes: usize },
    #[error("more than {MAX_TABLE_LINES} lines: refused unread")]
    TooManyLines,
    #[error("no header line with Destination, Gateway, Flags and Netif")]
    NoHeader,
    #[error("unreadable row {line:?}: {why}")]
    Row { line: String, why: String },
    /// Two unscoped routes of the same length both match: the table says
    /// two things, so neither is taken.
    #[error("{address}: {first} and {second} match it equally")]
    Ambiguous {
        address: Ipv4Addr,
        first: String,
        second: String,
    },
    #[error("{0}")]
    Inconsistent(String),
}

struct Columns {
    destination: usize,
    gateway: usize,
    flags: usize,
    netif: usize,
    /// Every column, `Expire` included, which may be empty.
    count: usize,
}

impl Columns {
    fn from_header(line: &str) -> Option<Columns> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = |name: &str| words.iter().position(|w| *w == name);
        let columns = Columns {
            destination: at("Destination")?,
            gateway: at("Gateway")?,
            flags: at("Flags")?,
            netif: at("Netif")?,
            count: words.len(),
        };
        (columns.destination == 0).then_some(columns)
    }
}

pub fn parse_routing_table(text: &str) -> Result<RoutingTable, RoutingTableError> {
    within(text, MAX_TABLE_BYTES).map_err(|bytes| RoutingTableError::TooLarge { bytes })?;
    if text.lines().nth(MAX_TABLE_LINES).is_some() {
        return Err(RoutingTableError::TooManyLines);
    }
    let mut lines = text.lines();
    let columns = lines
        .by_ref()
        .find_map(Columns::from_header)
        .ok_or(RoutingTableError::NoHeader)?;
    let mut table = RoutingTable::default();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        // The next family's section (`Internet6:`) ends the IPv4 one.
        if words.len() == 1 && words[0].ends_with(':') {
            break;
        }
        let row = |why: String| RoutingTableError::Row {
            line: line.trim_end().to_owned(),
            why,
        };
        // Expire is the last column and the only one that may be empty.
        if words.len() != columns.count && words.len() + 1 != columns.count {
            return Err(row(format!(
                "{} words for {} columns",
                words.len(),
                columns.count
            )));
        }
        table.routes.push(read_row(&words, &columns).map_err(row)?);
    }
    Ok(table)
}

fn read_row(words: &[&str], columns: &Columns) -> Result<RouteEntry, String> {
    // A row one word short (no Expire) lacks the last column, whichever
    // the header put last.
    let word = |at: usize, name: &str| {
        words
            .get(at)
            .copied()
            .ok_or_else(|| format!("no {name} in a row of {} words", words.len()))
    };
    let flags = word(columns.flags, "Flags")?;
    if !flags.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("flags {flags:?} are not flag letters"));
    }
    let interface = word(columns.netif, "Netif")?;
    if !is_interface_name(interface) {
        return Err(format!("{interface:?} is not an interface name"));
    }
    let destination_text = word(columns.destination, "Destination")?;
    let destination = parse_destination(destination_text, flags.contains('H'))?;
    Ok(RouteEntry {
        destination_text: destination_text.to_owned(),
        destination,
        gateway: parse_gateway(word(columns.gateway, "Gateway")?)?,
        flags: flags.to_owned(),
        interface: interface.to_owned(),
    })
}

/// A destination as `netname` prints it; see the module documentation.
pub fn parse_destination(text: &str, host: bool) -> Result<Ipv4Cidr, String> {
    if text == "default" {
        return Ok(Ipv4Cidr {
            address: Ipv4Addr::UNSPECIFIED,
            prefix: 0,
        });
    }
    let bad = |why: &str| format!("destination {text:?}: {why}");
    let (address, length) = match text.split_once('/') {
        Some((address, length)) => (address, Some(length)),
        None => (text, None),
    };
    let octets: Vec<&str> = address.split('.').collect();
    if octets.len() > 4 {
        return Err(bad("more than four octets"));
    }
    let mut bytes = [0u8; 4];
    for (byte, octet) in bytes.iter_mut().zip(&octets) {
        if octet.is_empty() || octet.len() > 3 || !octet.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(
                "not a numeric IPv4 address (was netstat run without -n?)",
            ));
        }
        *byte = octet.parse().map_err(|_| bad("an octet over 255"))?;
    }
    let address = Ipv4Addr::from(bytes);
    let prefix = match length {
        Some(length) => {
            if length.is_empty() || !length.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("the prefix length is not a number"));
            }
            match length.parse::<u8>() {
                Ok(prefix) if prefix <= 32 => prefix,
                _ => return Err(bad("a prefix length over 32")),
            }
        }
        None if host => {
            if octets.len() != 4 {
                return Err(bad("a host route with fewer than four octets"));
            }
            32
        }
        None => {
            let class = match bytes[0] {
                0..=127 => 8,
                128..=191 => 16,
                _ => 24,
            };
            // netname prints more octets only with a /len after them.
            if octets.len() * 8 > usize::from(class) {
                return Err(bad("more octets than its class without a /len"));
            }
            class
        }
    };
    let cidr = Ipv4Cidr::new(address, prefix).ok_or_else(|| bad("a prefix length over 32"))?;
    if cidr.network() != address {
        return Err(bad("address bits beyond its prefix length"));
    }
    Ok(cidr)
}

fn parse_gateway(text: &str) -> Result<Gateway, String> {
    if let Some(index) = text.strip_prefix("link#") {
        return index
            .parse()
            .map(Gateway::Link)
            .map_err(|_| format!("gateway {text:?}: link# without an interface index"));
    }
    if let Ok(address) = text.parse::<Ipv4Addr>() {
        return Ok(Gateway::Address(address));
    }
    // `1:0:5e:0:0:fb`; broadcast rows of some interfaces print dots.
    let is_link_layer = |separator: char| {
        let parts: Vec<&str> = text.split(separator).collect();
        parts.len() == 6
            && parts
                .iter()
                .all(|p| (1..=2).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    if is_link_layer(':') || is_link_layer('.') {
        return Ok(Gateway::LinkLayer(text.to_owned()));
    }
    if is_interface_name(text) && text.bytes().any(|b| b.is_ascii_alphabetic()) {
        return Ok(Gateway::Interface(text.to_owned()));
    }
    Err(format!(
        "gateway {text:?} is neither an address, link#N, a link-layer address nor an interface"
    ))
}

impl RoutingTable {
    /// The route an unbound socket's packets to `address` take: the
    /// longest unscoped prefix that holds it.
    pub fn lookup(&self, address: Ipv4Addr) -> Result<Lookup, RoutingTableError> {
        let mut best: Option<&RouteEntry> = None;
        for route in self
            .routes
            .iter()
            .filter(|r| !r.is_scoped() && r.destination.contains(address))
        {
            match best {
                Some(known) if known.destination.prefix > route.destination.prefix => {}
                Some(known) if known.destination.prefix == route.destination.prefix => {
                    if (&known.interface, &known.gateway, known.refuses())
                        != (&route.interface, &route.gateway, route.refuses())
                    {
                        return Err(RoutingTableError::Ambiguous {
                            address,
                            first: describe(known),
                            second: describe(route),
                        });
                    }
                }
                _ => best = Some(route),
            }
        }
        let Some(route) = best else {
            return Ok(Lookup::NoRoute {
                reason: format!("no unscoped route holds {address}"),
            });
        };
        if route.refuses() {
            return Ok(Lookup::NoRoute {
                reason: format!("{} rejects or drops it", describe(route)),
            });
        }
        route
            .egress()
            .map(Lookup::Route)
            .map_err(RoutingTableError::Inconsistent)
    }
}

fn describe(route: &RouteEntry) -> String {
    format!(
        "{} ({}, {})",
        route.destination_text, route.flags, route.interface
    )
}

/// Each of `addresses` with the route the table gives it, from one
/// `netstat -rn -f inet`. IPv6 addresses get an error each: the table
/// read is IPv4's.
pub fn route_interfaces_from_table(
    source: &dyn Source,
    addresses: &[IpAddr],
) -> Result<BTreeMap<IpAddr, Result<Lookup, RouteError>>, RouteError> {
    let command = HostCommand::RoutingTable;
    let text = source.capture(command)?;
    let unreadable = |error: RoutingTableError| RouteError::Unreadable {
        command: command.line(),
        detail: error.to_string(),
    };
    let table = parse_routing_table(&text).map_err(unreadable)?;
    Ok(addresses
        .iter()
        .map(|&address| {
            let lookup =
                ipv4(address, &command.line()).and_then(|v4| table.lookup(v4).map_err(unreadable));
            (address, lookup)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str, host: bool) -> Result<String, String> {
        parse_destination(text, host).map(|c| c.to_string())
    }

    /// A header with Netif last and a row one word short (as a row with
    /// no Expire is): an error naming the missing column, not a panic
    /// (the never-panic proptest found it).
    #[test]
    fn a_row_short_of_a_column_the_header_put_last_is_an_error() {
        let text = "Internet:\nDestination Gateway Flags Netif\ndefault 192.168.1.1 UGScg\n";
        let error = parse_routing_table(text).expect_err("a row without its Netif");
        assert!(error.to_string().contains("no Netif"), "{error}");
    }

    #[test]
    fn destinations_are_read_the_way_netname_prints_them() {
        let cases = [
            ("default", false, "0.0.0.0/0"),
            ("127", false, "127.0.0.0/8"),
            ("10/16", false, "10.0.0.0/16"),
            ("169.254", false, "169.254.0.0/16"),
            ("192.168.1", false, "192.168.1.0/24"),
            ("100.64/10", false, "100.64.0.0/10"),
            ("128.0/1", false, "128.0.0.0/1"),
            ("0/1", false, "0.0.0.0/1"),
            ("224.0.0/4", false, "224.0.0.0/4"),
            ("255.255.255.255/32", false, "255.255.255.255/32"),
            ("10.88.88.0/24", false, "10.88.88.0/24"),
            ("192.168.0.1", true, "192.168.0.1/32"),
        ];
        for (text, host, expected) in cases {
            assert_eq!(cidr(text, host).as_deref(), Ok(expected), "{text}");
        }
        for (text, host) in [
            ("127.0.0.1", false),
            ("10.1/8", false),
            ("192.168", true),
            ("localhost", true),
            ("10/33", false),
            ("1.2.3.4.5", false),
            ("256", false),
            ("fe80::1%lo0", true),
        ] {
            assert!(cidr(text, host).is_err(), "{text} must be refused");
        }
    }

    #[test]
    fn equal_matches_that_disagree_are_refused() {
        let text = "Destination        Gateway            Flags           Netif Expire\n\
                    10/8               link#4             UCS               en0\n\
                    10                 link#5             UCS               en1\n";
        let table = parse_routing_table(text).expect("table");
        assert_eq!(
            table
                .lookup(Ipv4Addr::new(10, 1, 2, 3))
                .expect_err("ambiguous")
                .to_string(),
            "10.1.2.3: 10/8 (UCS, en0) and 10 (UCS, en1) match it equally"
        );
    }

    #[test]
    fn unreadable_rows_refuse_the_table() {
        let text = "Destination        Gateway            Flags           Netif Expire\n\
                    default            192.168.1.1        UGScg\n";
        assert_eq!(
            parse_routing_table(text)
                .expect_err("short row")
                .to_string(),
            "unreadable row \"default            192.168.1.1        UGScg\": 3 words for 5 columns"
        );
        assert_eq!(
            parse_routing_table("Routing tables\n"),
            Err(RoutingTableError::NoHeader)
        );
    }

    #[test]
    fn huge_tables_are_refused_unread() {
        let header = "Destination Gateway Flags Netif Expire\n";
        let row = "10 link#4 UCS en0\n";
        let long = format!("{header}{}", row.repeat(MAX_TABLE_LINES));
        assert_eq!(
            parse_routing_table(&long),
            Err(RoutingTableError::TooManyLines)
        );
        let wide = format!("{header}{}", "x".repeat(MAX_TABLE_BYTES));
        assert!(matches!(
            parse_routing_table(&wide),
            Err(RoutingTableError::TooLarge { .. })
        ));
    }
}
