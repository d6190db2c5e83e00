//! By which interface this host sends to an address: the question behind
//! path fallback (issue #33). After a crash or a re-plug, a mesh peer's
//! address can stop being reached over its Thunderbolt cable and fall
//! back to Wi-Fi, Ethernet or a tunnel (Tailscale's `utun`), at a tenth of
//! the throughput, with nothing failing outright.
//!
//! Each OS answers in its own words; the readers turn them into one
//! [`Lookup`] per address:
//!
//! - macOS: [`crate::macos::route`] (`route -n get ADDRESS`, the kernel's
//!   own lookup, one call per address) and
//!   [`crate::macos::routing_table`] (`netstat -rn -f inet`, one call for
//!   every address, looked up here);
//! - Linux: [`crate::linux::route`] (`ip -j route get ADDRESS`).
//!
//! [`route_interfaces`] picks the reader for the OS. Nothing here judges
//! whether the interface is the right one: that needs the cable map.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use meshd_domain::facts::{Ipv4Cidr, OsKind};

use crate::source::{CaptureError, Source};

/// How packets to one address leave this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    /// The interface they leave by: `bridge0`, `en2`, `utun4`,
    /// `thunderbolt0`, `wlan0`.
    pub interface: String,
    pub next_hop: NextHop,
    /// The route that matched, where the tool names it (`route -n get`'s
    /// destination and mask, the table's row); `ip route get` does not.
    pub matched: Option<Ipv4Cidr>,
}

/// Where the interface hands the packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextHop {
    /// To the destination itself, on the interface's own link: a cable's
    /// /30, a link-local /16, a host route to the neighbour.
    Direct,
    /// To a router: the destination is not on any link of this host by
    /// this route, the usual sign of a fallback.
    Gateway(IpAddr),
    /// Nowhere: the address is this host's own.
    Local,
}

impl Egress {
    pub fn gateway(&self) -> Option<IpAddr> {
        match self.next_hop {
            NextHop::Gateway(gateway) => Some(gateway),
            NextHop::Direct | NextHop::Local => None,
        }
    }

    /// The route reaches the destination without a router.
    pub fn is_direct(&self) -> bool {
        self.next_hop == NextHop::Direct
    }
}

/// `en0 via 192.168.1.1 (route 0.0.0.0/0)`, `bridge0 direct`, `lo0
/// local`: for messages and evidence.
impl fmt::Display for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.next_hop {
            NextHop::Direct => write!(f, "{} direct", self.interface)?,
            NextHop::Gateway(gateway) => write!(f, "{} via {gateway}", self.interface)?,
            NextHop::Local => write!(f, "{} local", self.interface)?,
        }
        match self.matched {
            Some(route) => write!(f, " (route {route})"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Lookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lookup::Route(egress) => egress.fmt(f),
            Lookup::NoRoute { reason } => write!(f, "no route: {reason}"),
        }
    }
}

/// What the routing of this host says about one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Route(Egress),
    /// Nothing would carry packets there: no route matches, or the one
    /// that does rejects or drops them. `reason` says which, in the tool's
    /// words where it gave any.
    NoRoute {
        reason: String,
    },
}

impl Lookup {
    pub fn egress(&self) -> Option<&Egress> {
        match self {
            Lookup::Route(egress) => Some(egress),
            Lookup::NoRoute { .. } => None,
        }
    }
}

/// Why the route to an address is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The command could not be run, failed, or is not in the bundle.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// It printed something its parser cannot read; `detail` names what.
    #[error("{command}: {detail}")]
    Unreadable { command: String, detail: String },
    /// It answered about another address than the one asked.
    #[error("{command}: answered for {answered}, not for the address asked")]
    OtherAddress { command: String, answered: String },
    /// This reader cannot ask about this kind of address.
    #[error("{address}: {why}")]
    Unsupported { address: IpAddr, why: String },
}

/// Each of `addresses` with what this host's routing says about it, read
/// through `source` the way `os` asks: `route -n get` on macOS (the
/// kernel's own lookup; IPv4 only), `ip -j route get` on Linux. Each
/// address is asked on its own, so one failure leaves the others known.
pub fn route_interfaces(
    source: &dyn Source,
    os: OsKind,
    addresses: &[IpAddr],
) -> BTreeMap<IpAddr, Result<Lookup, RouteError>> {
    match os {
        OsKind::Macos => crate::macos::route::route_interfaces(source, addresses),
        OsKind::Linux => crate::linux::route::route_interfaces(source, addresses),
        OsKind::Other => addresses
            .iter()
            .map(|&address| {
                let error = RouteError::Unsupported {
                    address,
                    why: "no route reader: OS not recognised (neither macOS nor Linux)".to_owned(),
                };
                (address, Err(error))
            })
            .collect(),
    }
}

/// `Err(length)` when `text` is longer than `limit` bytes: such an answer
/// is refused unread rather than cut, since part of a table could miss
/// the route that matters.
pub(crate) fn within(text: &str, limit: usize) -> Result<(), usize> {
    if text.len() > limit {
        Err(text.len())
    } else {
        Ok(())
    }
}

/// The address an IPv4-only reader (`reader`) may ask about.
pub(crate) fn ipv4(address: IpAddr, reader: &str) -> Result<Ipv4Addr, RouteError> {
    match address {
        IpAddr::V4(v4) => Ok(v4),
        IpAddr::V6(_) => Err(RouteError::Unsupported {
            address,
            why: format!("an IPv6 address; {reader} reads IPv4 routes only"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_reads_as_interface_next_hop_and_route() {
        let egress = Egress {
            interface: "en0".into(),
            next_hop: NextHop::Gateway(IpAddr::from([192, 168, 1, 1])),
            matched: Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 0),
        };
        assert_eq!(egress.to_string(), "en0 via 192.168.1.1 (route 0.0.0.0/0)");
        let cable = Egress {
            interface: "thunderbolt0".into(),
            next_hop: NextHop::Direct,
            matched: None,
        };
        assert_eq!(Lookup::Route(cable).to_string(), "thunderbolt0 direct");
        let none = Lookup::NoRoute {
            reason: "not in table".into(),
        };
        assert_eq!(none.to_string(), "no route: not in table");
    }
}
