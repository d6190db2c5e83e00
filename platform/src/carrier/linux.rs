//! Linux: rtnetlink's link group, and sysfs for the carrier now.

use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::io::Errno;
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SocketFlags, SocketType};

use super::{CarrierChange, CarrierError, parse_netlink, wait_readable};

/// `RTMGRP_LINK` (linux/rtnetlink.h): RTM_NEWLINK / RTM_DELLINK.
const RTMGRP_LINK: u32 = 1;
/// Larger than any one link message (a few KiB with its statistics); the
/// kernel says so with MSG_TRUNC otherwise.
const READ_SIZE: usize = 32 * 1024;
/// A flapping cable or a bridge with many ports queues bursts; the
/// default buffer (~200 KiB) can overflow, and ENOBUFS loses events.
const RECEIVE_BUFFER: usize = 1024 * 1024;
/// Reads drained per call, so a storm of events still returns.
const MAX_READS: usize = 64;

#[derive(Debug)]
pub(super) struct Socket {
    fd: OwnedFd,
}

fn open_error(step: &'static str) -> impl FnOnce(Errno) -> CarrierError {
    move |errno| CarrierError::Open {
        step,
        source: errno.into(),
    }
}

impl Socket {
    pub(super) fn open() -> Result<Self, CarrierError> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            // None is NETLINK_ROUTE (protocol 0).
            None,
        )
        .map_err(open_error("socket(AF_NETLINK, NETLINK_ROUTE)"))?;
        // Best effort: a smaller buffer still works, ENOBUFS says when not.
        if let Err(err) = rustix::net::sockopt::set_socket_recv_buffer_size(&fd, RECEIVE_BUFFER) {
            tracing::debug!("netlink receive buffer left at its default: {err}");
        }
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, RTMGRP_LINK))
            .map_err(open_error("bind to RTMGRP_LINK"))?;
        Ok(Self { fd })
    }

    pub(super) fn next(&mut self, timeout: Duration) -> Result<Vec<CarrierChange>, CarrierError> {
        if !wait_readable(&self.fd, timeout)? {
            return Ok(Vec::new());
        }
        let mut changes = Vec::new();
        let mut buf = vec![0u8; READ_SIZE];
        for _ in 0..MAX_READS {
            let read = rustix::net::recvfrom(
                &self.fd,
                &mut buf[..],
                RecvFlags::DONTWAIT | RecvFlags::TRUNC,
            );
            let (len, full, from) = match read {
                Ok(read) => read,
                Err(Errno::AGAIN) | Err(Errno::INTR) => break,
                Err(Errno::NOBUFS) => {
                    return Err(CarrierError::Lost {
                        why: "ENOBUFS: the netlink receive buffer overflowed".to_owned(),
                    });
                }
                Err(errno) => return Err(CarrierError::Receive(errno.into())),
            };
            if full > len {
                return Err(CarrierError::Lost {
                    why: format!("a {full}-byte netlink message did not fit {len} bytes"),
                });
            }
            // Only the kernel (port 0) speaks for the links; another
            // process's message to this socket is not believed.
            let from_kernel = from
                .and_then(|addr| SocketAddrNetlink::try_from(addr).ok())
                .is_some_and(|addr| addr.pid() == 0);
            if !from_kernel {
                tracing::debug!("netlink message not from the kernel ignored");
                continue;
            }
            changes.extend(parse_netlink(&buf[..len])?);
        }
        Ok(changes)
    }
}

/// `/sys/class/net/IFACE`: `flags` (IFF_UP), then `carrier`, then
/// `operstate`.
pub(super) fn current(iface: &str) -> Option<bool> {
    let dir = std::path::Path::new(crate::linux::net::SYS_CLASS_NET).join(iface);
    let flags = std::fs::read_to_string(dir.join("flags")).ok();
    let carrier = std::fs::read_to_string(dir.join("carrier"));
    let operstate = std::fs::read_to_string(dir.join("operstate")).ok();
    carrier_from_sysfs(
        flags.as_deref(),
        carrier
            .as_ref()
            .map(String::as_str)
            .map_err(|e| e.raw_os_error()),
        operstate.as_deref(),
    )
}

const EINVAL: i32 = 22;

/// The carrier sysfs shows: `None` when the interface's flags cannot be
/// read (it is gone); not up is no carrier; then `carrier` (the kernel
/// refuses it with EINVAL on a down interface, which is no carrier), and
/// `operstate` when `carrier` says nothing.
pub(crate) fn carrier_from_sysfs(
    flags: Option<&str>,
    carrier: Result<&str, Option<i32>>,
    operstate: Option<&str>,
) -> Option<bool> {
    let flags = flags?.trim();
    let flags = u32::from_str_radix(flags.strip_prefix("0x").unwrap_or(flags), 16).ok()?;
    if flags & 0x1 == 0 {
        return Some(false);
    }
    match carrier.map(str::trim) {
        Ok("1") => Some(true),
        Ok("0") | Err(Some(EINVAL)) => Some(false),
        _ => match operstate.map(str::trim) {
            Some("up") => Some(true),
            Some("down" | "lowerlayerdown" | "notpresent" | "dormant") => Some(false),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_readings() {
        assert_eq!(carrier_from_sysfs(None, Ok("1"), Some("up")), None);
        assert_eq!(
            carrier_from_sysfs(Some("0x1002\n"), Err(Some(EINVAL)), Some("down")),
            Some(false)
        );
        assert_eq!(
            carrier_from_sysfs(Some("0x1003\n"), Ok("1\n"), Some("up")),
            Some(true)
        );
        assert_eq!(
            carrier_from_sysfs(Some("0x1003\n"), Ok("0\n"), Some("up")),
            Some(false)
        );
        assert_eq!(
            carrier_from_sysfs(Some("0x1003\n"), Err(Some(EINVAL)), None),
            Some(false)
        );
        assert_eq!(
            carrier_from_sysfs(Some("0x1003"), Err(Some(13)), Some("up")),
            Some(true)
        );
        assert_eq!(
            carrier_from_sysfs(Some("0x1003"), Err(None), Some("unknown")),
            None
        );
        assert_eq!(
            carrier_from_sysfs(Some("garbage"), Ok("1"), Some("up")),
            None
        );
    }
}
