//! Pins a cable's sockets to the cable's interface: the probe sockets, so
//! their datagrams leave by that cable whatever the routing table prefers,
//! and the cable's report listener, so it takes connections that arrived by
//! that cable only.
//!
//! Binding the source address is not enough. XNU picks the outgoing
//! interface from the bound source address except for IPv4 link-local
//! (169.254/16), which is never tied to an interface: with several
//! Thunderbolt ports self-assigned in 169.254/16, every peer is reached
//! through one of them and the other links look down. Linux routes by the
//! destination alone. Pinned, a probe for a cable that is unplugged fails
//! to send (counted as lost) instead of finding its way over another cable.
//!
//! macOS: `IP_BOUND_IF` / `IPV6_BOUND_IF`. Linux: `SO_BINDTOIFINDEX`
//! (5.0+), which needs no privilege since 5.7 on a socket not yet pinned,
//! and `CAP_NET_RAW` before that. A socket that cannot be pinned still
//! probes, routed as the kernel decides, with one warning naming why.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::os::fd::AsFd;
use std::sync::Mutex;

/// Why a socket was not pinned.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("no interface of this host holds {0}")]
    NoInterface(IpAddr),
    #[error("cannot list this host's interfaces: {0}")]
    ListInterfaces(nix::Error),
    #[error("there is no interface {name}: {source}")]
    UnknownInterface { name: String, source: nix::Error },
    #[error("the kernel refused to pin the socket to {name}: {source}{}", refusal_hint(.source))]
    Refused { name: String, source: io::Error },
}

/// What an operator can do about a refusal, for the causes that have a
/// remedy.
fn refusal_hint(source: &io::Error) -> &'static str {
    match source.raw_os_error() {
        Some(nix::libc::EPERM) => {
            " (Linux before 5.7 needs CAP_NET_RAW for this: run meshd as root)"
        }
        Some(nix::libc::ENOPROTOOPT) => {
            " (this kernel has no SO_BINDTOIFINDEX: Linux 5.0 or later has it)"
        }
        _ => "",
    }
}

/// Pins `socket` to the interface named `iface`, for the socket's own
/// address family (read from its bound address). Returns the interface
/// index.
pub fn pin_to_interface(socket: &impl AsFd, iface: &str) -> Result<NonZeroU32, PinError> {
    let unknown = |source| PinError::UnknownInterface {
        name: iface.to_owned(),
        source,
    };
    let index = nix::net::if_::if_nametoindex(iface).map_err(unknown)?;
    let index = NonZeroU32::new(index).ok_or_else(|| unknown(nix::Error::ENODEV))?;
    let socket = socket2::SockRef::from(socket);
    let refused = |source| PinError::Refused {
        name: iface.to_owned(),
        source,
    };
    let ipv6 = socket.local_addr().map_err(refused)?.is_ipv6();
    bind_to_index(&socket, ipv6, index).map_err(refused)?;
    Ok(index)
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
fn bind_to_index(socket: &socket2::SockRef<'_>, ipv6: bool, index: NonZeroU32) -> io::Result<()> {
    if ipv6 {
        socket.bind_device_by_index_v6(Some(index))
    } else {
        socket.bind_device_by_index_v4(Some(index))
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn bind_to_index(_: &socket2::SockRef<'_>, _: bool, _: NonZeroU32) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "meshd pins sockets on macOS and Linux only",
    ))
}

/// The interface that holds `address` (the cable's end on this host).
pub fn interface_holding(address: IpAddr) -> Result<String, PinError> {
    let interfaces = nix::ifaddrs::getifaddrs().map_err(PinError::ListInterfaces)?;
    interfaces
        .filter_map(|entry| {
            let held = entry.address.as_ref().and_then(|a| {
                a.as_sockaddr_in()
                    .map(|v4| IpAddr::V4(v4.ip()))
                    .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
            })?;
            (held == address).then_some(entry.interface_name)
        })
        .next()
        .ok_or(PinError::NoInterface(address))
}

/// Pins `what` (a probe socket, a cable's report listener), bound to
/// `local`, to the cable's interface: `iface` when the config names it,
/// else the interface that holds `local`. Loopback and the unspecified
/// address are left alone (there is only one way to the first, and no
/// cable behind the second). Returns the interface pinned to; on failure
/// the socket stays as it was and the reason is logged once per socket
/// kind, interface and cause.
pub fn pin_to_cable(
    socket: &impl AsFd,
    iface: Option<&str>,
    local: IpAddr,
    what: &'static str,
) -> Option<String> {
    if local.is_loopback() || local.is_unspecified() {
        return None;
    }
    let pinned = match iface {
        Some(name) => Ok(name.to_owned()),
        None => interface_holding(local),
    }
    .and_then(|name| pin_to_interface(socket, &name).map(|_| name));
    match pinned {
        Ok(name) => {
            tracing::debug!(%local, iface = %name, socket = what, "pinned to its cable's interface");
            Some(name)
        }
        Err(error) => {
            if first_time(&format!("{what}: {}: {error}", iface.unwrap_or(""))) {
                tracing::warn!(
                    %local, %error, socket = what,
                    "not pinned to its cable's interface: it follows the routing table (warned once)"
                );
            }
            None
        }
    }
}

/// True the first time `key` is seen in this process: a link whose prober
/// restarts every few seconds must not repeat the same warning.
fn first_time(key: &str) -> bool {
    static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    WARNED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.to_owned())
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket};

    use super::*;

    fn loopback_name() -> String {
        interface_holding(IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("loopback has 127.0.0.1")
    }

    #[test]
    fn the_interface_holding_an_address_is_found_by_the_address() {
        let name = loopback_name();
        assert!(name == "lo" || name == "lo0", "{name}");
        let err = interface_holding("192.0.2.77".parse().expect("ip")).expect_err("TEST-NET-1");
        assert_eq!(
            err.to_string(),
            "no interface of this host holds 192.0.2.77"
        );
    }

    #[test]
    fn an_unknown_interface_is_named() {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let err = pin_to_interface(&socket, "meshd-none0").expect_err("no such interface");
        assert!(
            err.to_string()
                .starts_with("there is no interface meshd-none0"),
            "{err}"
        );
    }

    /// Pinning to loopback needs no privilege on Linux 5.7+ and macOS; a
    /// refusal must name the cause.
    #[test]
    fn a_socket_is_pinned_to_a_named_interface_or_the_refusal_says_why() {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let name = loopback_name();
        match pin_to_interface(&socket, &name) {
            Ok(index) => {
                let bound = socket2::SockRef::from(&socket)
                    .device_index_v4()
                    .expect("read back");
                assert_eq!(bound, Some(index));
            }
            Err(PinError::Refused { source, .. }) => {
                let hint = refusal_hint(&source);
                assert!(!hint.is_empty(), "refused without a named cause: {source}");
            }
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn loopback_probes_are_left_alone_and_failures_do_not_stop_probing() {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        assert_eq!(
            pin_to_cable(
                &socket,
                None,
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                "probe socket"
            ),
            None
        );
        // An address no interface holds: not pinned, logged, no panic.
        assert_eq!(
            pin_to_cable(
                &socket,
                None,
                "192.0.2.78".parse().expect("ip"),
                "probe socket"
            ),
            None
        );
    }

    #[test]
    fn each_warning_is_given_once() {
        assert!(first_time("meshd-test-key"));
        assert!(!first_time("meshd-test-key"));
        assert!(first_time("meshd-test-other-key"));
    }

    #[test]
    fn refusals_name_their_cause() {
        let eperm = io::Error::from_raw_os_error(nix::libc::EPERM);
        assert!(refusal_hint(&eperm).contains("CAP_NET_RAW"));
        let enoprotoopt = io::Error::from_raw_os_error(nix::libc::ENOPROTOOPT);
        assert!(refusal_hint(&enoprotoopt).contains("SO_BINDTOIFINDEX"));
        assert_eq!(refusal_hint(&io::Error::other("x")), "");
    }
}
