//! `route -n get ADDRESS`: the kernel's own answer (an `RTM_GET` on the
//! routing socket) to which route carries packets to one IPv4 address.
//! Scoped routes, cloned host routes and the primary interface's
//! preferences are all the kernel's to weigh, so this is the reader to
//! trust; [`super::routing_table`] answers many addresses from one
//! `netstat` call by redoing the lookup here.
//!
//! The layout is `print_getmsg` in network_cmds' `route.c`:
//!
//! ```text
//!    route to: default
//! destination: default
//!        mask: default
//!     gateway: 192.168.1.1
//!   interface: en0
//!       flags: <UP,GATEWAY,DONE,STATIC,PRCLONING,GLOBAL>
//!  recvpipe  sendpipe  ssthresh  rtt,msec    rttvar  hopcount      mtu     expire
//!        0         0         0         0         0         0      1500         0
//! ```
//!
//! `gateway:` is printed only for a route through a router (`GATEWAY`),
//! `mask:` only for a network route, `interface:` only when the kernel
//! named one. When no route matches, `route` prints nothing on standard
//! output, `route: writing to routing socket: not in table` on standard
//! error, and exits 0: an empty output is that answer.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use meshd_domain::facts::Ipv4Cidr;

use crate::route::{Egress, Lookup, NextHop, RouteError, ipv4, within};
use crate::source::{CaptureError, HostCommand, Source};

/// Far above the ~330 bytes `route -n get` prints, below anything that
/// could hurt to hold.
pub const MAX_ROUTE_GET_BYTES: usize = 16 * 1024;

/// What `route` writes when the routing socket refuses the query because
/// no route matches (`ESRCH`).
const NOT_IN_TABLE: &str = "route: writing to routing socket: not in table";

/// One `route -n get` answer, as printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteGet {
    /// The address asked about (`route to:`); `None` for `default`.
    pub route_to: Option<Ipv4Addr>,
    /// The matched route's key; `0.0.0.0` for `default`.
    pub destination: Option<Ipv4Addr>,
    /// Its prefix length from `mask:`; `None` where no mask was printed
    /// (host routes).
    pub mask_len: Option<u8>,
    pub gateway: Option<Ipv4Addr>,
    pub interface: String,
    /// The route's flags by name (`UP`, `GATEWAY`, `HOST`, `IFSCOPE`, …).
    pub flags: Vec<String>,
}

impl RouteGet {
    pub fn has_flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    /// The matched route as a network; a host route without a mask is a
    /// /32.
    pub fn matched(&self) -> Option<Ipv4Cidr> {
        let destination = self.destination?;
        let len = match self.mask_len {
            Some(len) => len,
            None if self.has_flag("HOST") => 32,
            None => return None,
        };
        Ipv4Cidr::new(destination, len)
    }

    /// Where packets go by this route.
    pub fn lookup(&self) -> Lookup {
        for refusing in ["REJECT", "BLACKHOLE"] {
            if self.has_flag(refusing) {
                return Lookup::NoRoute {
                    reason: format!("the matching route is a {refusing} route"),
                };
            }
        }
        let next_hop = match self.gateway {
            Some(gateway) => NextHop::Gateway(IpAddr::V4(gateway)),
            // lo0 is the loopback on every Mac: the address is this
            // host's own.
            None if self.has_flag("LOCAL") || self.interface == "lo0" => NextHop::Local,
            None => NextHop::Direct,
        };
        Lookup::Route(Egress {
            interface: self.interface.clone(),
            next_hop,
            matched: self.matched(),
        })
    }
}

/// Why a `route -n get` output cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteGetError {
    #[error("{bytes} bytes, over the {MAX_ROUTE_GET_BYTES}-byte cap: refused unread")]
    TooLarge { bytes: usize },
    /// `route` said why it could not answer (other than "not in table").
    #[error("route refused: {0:?}")]
    Refused(String),
    #[error("a line that is not part of route's answer: {0:?}")]
    UnexpectedLine(String),
    #[error("{0:?} is printed twice")]
    Repeated(String),
    #[error("no {0:?} line")]
    Missing(&'static str),
    #[error("{key}: {value:?} is not {expected}")]
    BadValue {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    /// `GATEWAY` without a gateway or the other way round: one of them is
    /// not what `route` printed.
    #[error("the GATEWAY flag and the gateway line disagree")]
    GatewayMismatch,
}

/// The answer `text` gives: a route, or none ("not in table", or nothing
/// printed at all, which is how `route` answers that on standard output).
pub fn parse_route_get(text: &str) -> Result<Lookup, RouteGetError> {
    Ok(match parse_route_get_fields(text)? {
        Some(route) => route.lookup(),
        None if text.trim().is_empty() => Lookup::NoRoute {
            reason: "route printed nothing: the routing socket refused the query \
                     (\"not in table\" when no route matches)"
                .to_owned(),
        },
        None => Lookup::NoRoute {
            reason: "not in table".to_owned(),
        },
    })
}

/// The fields of a route answer, strictly: a line this layout does not
/// have is an error, not skipped. `None` when `route` found no route.
pub fn parse_route_get_fields(text: &str) -> Result<Option<RouteGet>, RouteGetError> {
    within(text, MAX_ROUTE_GET_BYTES).map_err(|bytes| RouteGetError::TooLarge { bytes })?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    match read_route_get(text)? {
        Answer::NotInTable => Ok(None),
        Answer::Route(route) => Ok(Some(route)),
    }
}

enum Answer {
    NotInTable,
    Route(RouteGet),
}

fn read_route_get(text: &str) -> Result<Answer, RouteGetError> {
    let mut fields: BTreeMap<&'static str, &str> = BTreeMap::new();
    let mut metrics_header = false;
    let mut metrics_values = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed == NOT_IN_TABLE {
            return Ok(Answer::NotInTable);
        }
        if trimmed.starts_with("route:") {
            return Err(RouteGetError::Refused(trimmed.to_owned()));
        }
        if trimmed.starts_with("recvpipe") && !metrics_header {
            metrics_header = true;
            continue;
        }
        if metrics_header && !metrics_values && is_metrics_row(trimmed) {
            metrics_values = true;
            continue;
        }
        // Printed when the answer carries addresses beyond the usual ones.
        if trimmed.starts_with("sockaddrs:") {
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            return Err(RouteGetError::UnexpectedLine(trimmed.to_owned()));
        };
        let key = match key.trim() {
            "route to" => "route to",
            "destination" => "destination",
            "mask" => "mask",
            "gateway" => "gateway",
            "interface" => "interface",
            "flags" => "flags",
            _ => return Err(RouteGetError::UnexpectedLine(trimmed.to_owned())),
        };
        if fields.insert(key, value.trim()).is_some() {
            return Err(RouteGetError::Repeated(key.to_owned()));
        }
    }
    let field = |key: &'static str| fields.get(key).copied();
    let route_to = address_or_default(
        "route to",
        field("route to").ok_or(RouteGetError::Missing("route to"))?,
    )?;
    let interface = field("interface").ok_or(RouteGetError::Missing("interface"))?;
    if !is_interface_name(interface) {
        return Err(RouteGetError::BadValue {
            key: "interface",
            value: interface.to_owned(),
            expected: "an interface name",
        });
    }
    let flags = parse_flags(field("flags").ok_or(RouteGetError::Missing("flags"))?)?;
    let destination = field("destination")
        .map(|d| address_or_default("destination", d))
        .transpose()?
        .map(|d| d.unwrap_or(Ipv4Addr::UNSPECIFIED));
    let mask_len = field("mask").map(parse_mask).transpose()?;
    let gateway = field("gateway")
        .map(|g| {
            g.parse::<Ipv4Addr>().map_err(|_| RouteGetError::BadValue {
                key: "gateway",
                value: g.to_owned(),
                expected: "an IPv4 address",
            })
        })
        .transpose()?;
    let route = RouteGet {
        route_to,
        destination,
        mask_len,
        gateway,
        interface: interface.to_owned(),
        flags,
    };
    if route.has_flag("GATEWAY") != route.gateway.is_some() {
        return Err(RouteGetError::GatewayMismatch);
    }
    Ok(Answer::Route(route))
}

/// `default` or a dotted quad; `None` for `default`.
fn address_or_default(key: &'static str, value: &str) -> Result<Option<Ipv4Addr>, RouteGetError> {
    if value == "default" {
        return Ok(None);
    }
    value
        .parse::<Ipv4Addr>()
        .map(Some)
        .map_err(|_| RouteGetError::BadValue {
            key,
            value: value.to_owned(),
            expected: "an IPv4 address or \"default\"",
        })
}

/// `default` (no mask: /0) or a contiguous dotted-quad mask.
fn parse_mask(value: &str) -> Result<u8, RouteGetError> {
    if value == "default" {
        return Ok(0);
    }
    let bad = || RouteGetError::BadValue {
        key: "mask",
        value: value.to_owned(),
        expected: "a contiguous IPv4 netmask or \"default\"",
    };
    let mask = u32::from(value.parse::<Ipv4Addr>().map_err(|_| bad())?);
    let len = mask.leading_ones();
    if mask.checked_shl(len).unwrap_or(0) != 0 {
        return Err(bad());
    }
    u8::try_from(len).map_err(|_| bad())
}

/// `<UP,GATEWAY,DONE>`, or nothing when no flag is set.
fn parse_flags(value: &str) -> Result<Vec<String>, RouteGetError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let inner = value
        .strip_prefix('<')
        .and_then(|v| v.strip_suffix('>'))
        .ok_or_else(|| RouteGetError::BadValue {
            key: "flags",
            value: value.to_owned(),
            expected: "flag names between < and >",
        })?;
    inner
        .split(',')
        .map(|flag| {
            if !flag.is_empty() && flag.bytes().all(|b| b.is_ascii_alphanumeric()) {
                Ok(flag.to_owned())
            } else {
                Err(RouteGetError::BadValue {
                    key: "flags",
                    value: value.to_owned(),
                    expected: "flag names between < and >",
                })
            }
        })
        .collect()
}

/// The numbers under the metrics header (an `L` marks a locked metric;
/// `expire` may be negative).
fn is_metrics_row(line: &str) -> bool {
    line.split_whitespace().all(|word| {
        let word = word.strip_suffix('L').unwrap_or(word);
        let word = word.strip_prefix('-').unwrap_or(word);
        !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit())
    })
}

/// BSD interface names are letters then a unit number (`en0`, `utun12`,
/// `bridge100`); VLANs and the like add dots or dashes.
pub(crate) fn is_interface_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Each of `addresses` with the kernel's answer, from one `route -n get`
/// per address. IPv6 addresses are not asked: each gets
/// [`RouteError::Unsupported`].
pub fn route_interfaces(
    source: &dyn Source,
    addresses: &[IpAddr],
) -> BTreeMap<IpAddr, Result<Lookup, RouteError>> {
    addresses
        .iter()
        .map(|&address| (address, route_interface(source, address)))
        .collect()
}

fn route_interface(source: &dyn Source, address: IpAddr) -> Result<Lookup, RouteError> {
    let command = HostCommand::RouteGet;
    let line = command.line_for(Some(&address.to_string()));
    // The cables carry IPv4; `route` would need `-inet6` for the rest.
    let asked = ipv4(address, "route -n get")?;
    let text = match source.capture_for(command, &asked.to_string()) {
        Ok(text) => text,
        // Some `route` builds exit non-zero when nothing matches.
        Err(CaptureError::Failed { ref stderr, .. }) if stderr.trim() == NOT_IN_TABLE => {
            return Ok(Lookup::NoRoute {
                reason: "not in table".to_owned(),
            });
        }
        Err(error) => return Err(error.into()),
    };
    let route = parse_route_get_fields(&text).map_err(|e| RouteError::Unreadable {
        command: line.clone(),
        detail: e.to_string(),
    })?;
    match route {
        // `route to:` is the address asked, as `default` when it is 0.0.0.0.
        Some(route) if route.route_to.unwrap_or(Ipv4Addr::UNSPECIFIED) != asked => {
            Err(RouteError::OtherAddress {
                command: line,
                answered: route
                    .route_to
                    .map_or_else(|| "default".to_owned(), |a| a.to_string()),
            })
        }
        Some(route) => Ok(route.lookup()),
        None => parse_route_get(&text).map_err(|e| RouteError::Unreadable {
            command: line,
            detail: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cloned_host_route_to_a_neighbour_is_direct() {
        // The shape of a cable peer's answer once ARP has resolved it.
        let text = "   route to: 10.99.0.2\ndestination: 10.99.0.2\n  interface: en7\n\
                    \x20     flags: <UP,HOST,DONE,LLINFO,WASCLONED,IFSCOPE>\n";
        let Ok(Lookup::Route(egress)) = parse_route_get(text) else {
            panic!("a route");
        };
        assert_eq!(egress.interface, "en7");
        assert_eq!(egress.next_hop, NextHop::Direct);
        assert_eq!(
            egress.matched.map(|m| m.to_string()),
            Some("10.99.0.2/32".into())
        );
    }

    #[test]
    fn garbled_answers_are_named_not_guessed() {
        let cases: &[(&str, &str)] = &[
            (
                "   route to: 10.0.0.1\n  interface: en0\n",
                "no \"flags\" line",
            ),
            (
                "   route to: 10.0.0.1\n  interface: en0\n  interface: en1\n      flags: <UP>\n",
                "\"interface\" is printed twice",
            ),
            (
                "   route to: 10.0.0.1\n       mask: 255.0.255.0\n  interface: en0\n      flags: <UP>\n",
                "mask: \"255.0.255.0\" is not a contiguous IPv4 netmask or \"default\"",
            ),
            (
                "   route to: 10.0.0.1\n  interface: en0\n      flags: <UP,GATEWAY>\n",
                "the GATEWAY flag and the gateway line disagree",
            ),
            (
                "   route to: 10.0.0.1\n  interface: en0\n      flags: <UP>\nhello\n",
                "a line that is not part of route's answer: \"hello\"",
            ),
            (
                "route: bad address: 10.0.0\n",
                "route refused: \"route: bad address: 10.0.0\"",
            ),
        ];
        for (text, expected) in cases {
            let error = parse_route_get(text).expect_err(text);
            assert_eq!(error.to_string(), *expected, "{text}");
        }
    }

    #[test]
    fn reject_and_blackhole_routes_carry_nothing() {
        let text = "   route to: 10.0.0.1\ndestination: 10.0.0.0\n       mask: 255.0.0.0\n\
                    \x20 interface: lo0\n      flags: <UP,DONE,STATIC,BLACKHOLE>\n";
        assert_eq!(
            parse_route_get(text),
            Ok(Lookup::NoRoute {
                reason: "the matching route is a BLACKHOLE route".into()
            })
        );
    }

    #[test]
    fn huge_input_is_refused() {
        let text = " ".repeat(MAX_ROUTE_GET_BYTES + 1);
        assert_eq!(
            parse_route_get(&text),
            Err(RouteGetError::TooLarge {
                bytes: MAX_ROUTE_GET_BYTES + 1
            })
        );
    }
}
