//! The kernel's link state ("carrier") of this node's interfaces, as
//! events: a pulled Thunderbolt cable is seen by both kernels at once, long
//! before a probe times out (issue #38).
//!
//! - Linux: a `NETLINK_ROUTE` socket joined to `RTMGRP_LINK`; every
//!   `RTM_NEWLINK` / `RTM_DELLINK` carries the interface's flags
//!   ([`parse_netlink`]).
//! - macOS: a `PF_SYSTEM` / `SYSPROTO_EVENT` kernel-event socket filtered to
//!   Apple's network data-link events, `KEV_DL_LINK_ON` / `KEV_DL_LINK_OFF`
//!   ([`parse_kernel_event`]); why not the route socket is said in
//!   `carrier/macos.rs`.
//! - Elsewhere [`CarrierEvents::open`] says [`CarrierError::Unsupported`].
//!
//! The parsers are pure byte parsing, built and tested on every OS; only
//! the sockets are per OS.

use std::time::Duration;

mod kernel_event;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "macos")]
mod macos;
mod netlink;

pub use kernel_event::{KernelEvent, parse_kernel_event};
pub use netlink::parse_netlink;

/// An interface's carrier as the kernel just reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarrierChange {
    pub iface: String,
    /// The interface is up and has its lower-layer link: Linux `IFF_UP` and
    /// `IFF_LOWER_UP` (or `IFF_RUNNING`); macOS `KEV_DL_LINK_ON`, or a
    /// re-read after a flags change. `false` when it went away.
    pub carrier: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CarrierError {
    #[error("link-state events are not read on {os}: only Linux and macOS have a reader")]
    Unsupported { os: &'static str },
    #[error("cannot open the link-state socket ({step}): {source}")]
    Open {
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("reading link-state events failed: {0}")]
    Receive(#[source] std::io::Error),
    /// The kernel dropped events: what each carrier is now must be read
    /// again ([`current`]).
    #[error("the kernel dropped link-state events ({why}): the carriers must be read again")]
    Lost { why: String },
    #[error("malformed {what} at byte {offset}: {why}")]
    Malformed {
        what: &'static str,
        offset: usize,
        why: String,
    },
    #[error("{0:?} is not an interface name ({1})")]
    BadName(String, &'static str),
    #[error("reading the carrier of {iface} failed: {why}")]
    Read { iface: String, why: String },
}

impl CarrierError {
    fn malformed(what: &'static str, offset: usize, why: impl Into<String>) -> Self {
        CarrierError::Malformed {
            what,
            offset,
            why: why.into(),
        }
    }
}

/// A blocking reader of the kernel's link-state events.
#[derive(Debug)]
pub struct CarrierEvents {
    #[cfg(target_os = "linux")]
    inner: linux::Socket,
    #[cfg(target_os = "macos")]
    inner: macos::Socket,
}

impl CarrierEvents {
    /// Opens and subscribes the socket; events after this call are seen.
    /// Read the carriers with [`current`] after opening, not before, so a
    /// change between the two is not lost.
    pub fn open() -> Result<Self, CarrierError> {
        #[cfg(target_os = "linux")]
        {
            Ok(Self {
                inner: linux::Socket::open()?,
            })
        }
        #[cfg(target_os = "macos")]
        {
            Ok(Self {
                inner: macos::Socket::open()?,
            })
        }
        #[cfg(not(any(target_os = "linux", target_os = "macos")))]
        {
            Err(CarrierError::Unsupported {
                os: std::env::consts::OS,
            })
        }
    }

    /// The changes the kernel reported, waiting at most `timeout` for the
    /// first; empty when none came. Everything already queued is returned
    /// at once, in the kernel's order (the last change of an interface is
    /// its state). [`CarrierError::Lost`] means events were dropped.
    pub fn next(&mut self, timeout: Duration) -> Result<Vec<CarrierChange>, CarrierError> {
        #[cfg(any(target_os = "linux", target_os = "macos"))]
        {
            self.inner.next(timeout)
        }
        #[cfg(not(any(target_os = "linux", target_os = "macos")))]
        {
            let _ = timeout;
            Err(CarrierError::Unsupported {
                os: std::env::consts::OS,
            })
        }
    }
}

/// `iface`'s carrier now: `None` when the interface does not exist or its
/// state cannot be read.
pub fn current(iface: &str) -> Result<Option<bool>, CarrierError> {
    check_name(iface)?;
    #[cfg(target_os = "linux")]
    {
        Ok(linux::current(iface))
    }
    #[cfg(target_os = "macos")]
    {
        macos::current(iface)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        Err(CarrierError::Unsupported {
            os: std::env::consts::OS,
        })
    }
}

/// Interface names as both kernels allow them (at most IFNAMSIZ - 1 = 15
/// bytes), and never a path: the Linux reader joins the name into a sysfs
/// path, the macOS one passes it to ifconfig.
fn check_name(iface: &str) -> Result<(), CarrierError> {
    let why = if iface.is_empty() {
        "empty"
    } else if iface.len() > 15 {
        "longer than 15 bytes"
    } else if iface == "." || iface == ".." || iface.contains('/') {
        "a path"
    } else if iface.starts_with('-') {
        "an option"
    } else if iface.chars().any(|c| c.is_whitespace() || c.is_control()) {
        "has spaces or control characters"
    } else {
        return Ok(());
    };
    Err(CarrierError::BadName(iface.to_owned(), why))
}

/// Waits until `fd` can be read, at most `timeout`; `false` when it
/// cannot. An interrupted wait is a short one: the caller's loop comes
/// back.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn wait_readable(fd: &std::os::fd::OwnedFd, timeout: Duration) -> Result<bool, CarrierError> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::io::Errno;
    // A timeout too long for a timespec is a day: the caller loops anyway.
    let timespec = Timespec::try_from(timeout).unwrap_or(Timespec {
        tv_sec: 86_400,
        tv_nsec: 0,
    });
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    match poll(&mut fds, Some(&timespec)) {
        Ok(ready) => Ok(ready > 0),
        Err(Errno::INTR) => Ok(false),
        Err(errno) => Err(CarrierError::Receive(errno.into())),
    }
}

/// BSD's `_IOW(group, number, size)` (bsd/sys/ioccom.h): IOC_IN
/// (0x80000000), the size masked by IOCPARM_MASK (0x1fff) at bit 16, the
/// group at bit 8 and the number. Spelled out, not taken from rustix, so
/// the number macOS is sent is tested on Linux too.
const fn bsd_iow(group: u8, number: u8, size: usize) -> u32 {
    0x8000_0000 | (((size as u32) & 0x1fff) << 16) | ((group as u32) << 8) | number as u32
}

/// `SIOCSKEVFILT` = `_IOW('e', 2, struct kev_request)` (bsd/sys/kern_event.h),
/// a `kev_request` being three u32s.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
const SIOCSKEVFILT: u32 = bsd_iow(b'e', 2, 12);

/// The carrier an `ifconfig IFACE` stanza shows: UP and RUNNING, and
/// `status: active` where the interface has a media status (a Thunderbolt
/// or Ethernet port whose cable is out stays RUNNING, `status: inactive`);
/// `None` when its flags are unreadable.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn carrier_from_ifconfig(interface: &crate::macos::ifconfig::Interface) -> Option<bool> {
    Some(interface.up_and_running()? && interface.active.unwrap_or(true))
}

/// Reads a native-endian integer at `offset`; `None` past the end.
fn read_u32(buf: &[u8], offset: usize) -> Option<u32> {
    let bytes = buf.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

fn read_u16(buf: &[u8], offset: usize) -> Option<u16> {
    let bytes = buf.get(offset..offset.checked_add(2)?)?;
    Some(u16::from_ne_bytes(bytes.try_into().ok()?))
}

/// A C string from a fixed or attribute-sized field: up to its first NUL
/// (or the whole field), which must be non-empty UTF-8.
fn c_name(field: &[u8], what: &'static str, offset: usize) -> Result<String, CarrierError> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    let name = std::str::from_utf8(&field[..end])
        .map_err(|_| CarrierError::malformed(what, offset, "interface name is not UTF-8"))?;
    if name.is_empty() {
        return Err(CarrierError::malformed(
            what,
            offset,
            "empty interface name",
        ));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_paths_or_options_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "../etc",
            "a/b",
            "-a",
            "en 2",
            "0123456789abcdef",
        ] {
            assert!(
                matches!(check_name(bad), Err(CarrierError::BadName(..))),
                "{bad:?}"
            );
        }
        for good in ["en2", "lo", "veth-a", "bridge0", "enp1s0f0np0", "ib0.8001"] {
            check_name(good).unwrap();
        }
    }

    #[test]
    fn c_names_stop_at_the_first_nul() {
        assert_eq!(c_name(b"en\0\0junk", "x", 0).unwrap(), "en");
        assert_eq!(c_name(b"thunderbolt", "x", 0).unwrap(), "thunderbolt");
        assert!(c_name(b"\0en", "x", 0).is_err());
        assert!(c_name(b"\xff\xfe\0", "x", 0).is_err());
    }

    #[test]
    fn siocskevfilt_is_xnus_number() {
        // _IOW('e', 2, struct kev_request) as the macOS SDK expands it.
        assert_eq!(SIOCSKEVFILT, 0x800c_6502);
    }

    #[test]
    fn ifconfig_carrier_needs_up_running_and_active() {
        use crate::macos::ifconfig::parse_ifconfig;
        let carrier = |text: &str| carrier_from_ifconfig(&parse_ifconfig(text)[0]);
        let stanza = |flags: &str, status: &str| {
            format!(
                "en2: flags={flags} mtu 1500\n\toptions=460<TSO4,TSO6,CHANNEL_IO>\n\tmedia: autoselect <full-duplex>\n{status}"
            )
        };
        let up = "8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST>";
        let down = "8822<BROADCAST,SMART,SIMPLEX,MULTICAST>";
        assert_eq!(carrier(&stanza(up, "\tstatus: active\n")), Some(true));
        // Cable out: still RUNNING, but inactive.
        assert_eq!(carrier(&stanza(up, "\tstatus: inactive\n")), Some(false));
        assert_eq!(carrier(&stanza(down, "\tstatus: active\n")), Some(false));
        // No media status (lo0, utun): the flags alone.
        assert_eq!(carrier(&stanza(up, "")), Some(true));
    }

    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    #[test]
    fn other_oses_are_unsupported() {
        assert!(matches!(
            CarrierEvents::open(),
            Err(CarrierError::Unsupported { .. })
        ));
    }
}
