//! macOS: the kernel-event socket, and `ifconfig IFACE` for the carrier now.
//!
//! Why kernel events and not the route socket: in XNU (xnu-11417.101.15)
//! `rt_ifmsg()` (bsd/net/rtsock.c), the only sender of RTM_IFINFO, is
//! called from `if_updown()` (admin up/down), the MTU ioctl and the
//! promiscuous / all-multicast switches (bsd/net/if.c), never when a
//! driver reports its link: a driver's link change is `ifnet_event()` with
//! KEV_DL_LINK_ON / KEV_DL_LINK_OFF (bsd/net/dlil.c; e.g. `if_fake.c`'s
//! `interface_link_event`), which goes to kernel-event sockets alone. And
//! IFF_RUNNING, which RTM_IFINFO carries, stays set on an Ethernet-like
//! interface whose cable is out (ifconfig then says `status: inactive`,
//! from the media status). So a pulled cable is seen only as a kernel
//! event. Admin changes post KEV_DL_SIFFLAGS on the same socket
//! (`dlil_post_sifflags_msg`), after which the carrier is read again.
//!
//! XNU drops an event silently when the socket's buffer (KEV_RECVSPACE,
//! 32 KiB) is full (`kev_post_msg` only counts it, in `kes_fullsock`):
//! there is no ENOBUFS to report, so the watcher reads every carrier again
//! now and then.
//!
//! A new kernel-event socket receives nothing until SIOCSKEVFILT sets its
//! filter: `kev_attach()` (bsd/kern/kern_event.c) starts it at vendor code
//! 0xffffffff, which matches no event. That ioctl is this crate's only
//! `unsafe` outside the verbs FFI.
//!
//! Not run: no Mac was available; this is type-checked for
//! aarch64-apple-darwin and its parser tested from bytes laid out per XNU.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::io::{Errno, FdFlags};
use rustix::ioctl::{Opcode, Setter};
use rustix::net::{AddressFamily, RecvFlags, SocketType, sysproto};

use super::kernel_event::{KEV_DL_SUBCLASS, KEV_NETWORK_CLASS, KEV_VENDOR_APPLE};
use super::{CarrierChange, CarrierError, KernelEvent, parse_kernel_event, wait_readable};
use crate::command::{RunError, run_with_timeout};
use crate::macos::ifconfig::parse_ifconfig;

/// A kernel event is 24 bytes of header and a few dozen of data; a read
/// returns one event record.
const READ_SIZE: usize = 8 * 1024;
const MAX_READS: usize = 64;
/// `ifconfig IFACE` answers in milliseconds; a hung one must not hold the
/// reader.
const IFCONFIG_TIMEOUT: Duration = Duration::from_secs(2);
/// Less time than this left in a call: a re-read waits for the next call.
const MIN_REREAD: Duration = Duration::from_millis(50);

/// `struct kev_request` (bsd/sys/kern_event.h): the SIOCSKEVFILT argument.
#[repr(C)]
#[derive(Debug)]
struct KevRequest {
    vendor_code: u32,
    kev_class: u32,
    kev_subclass: u32,
}

/// `_IOW('e', 2, struct kev_request)`: see [`super::bsd_iow`].
const SIOCSKEVFILT: Opcode = super::SIOCSKEVFILT as Opcode;

#[derive(Debug)]
pub(super) struct Socket {
    fd: OwnedFd,
    /// Interfaces whose flags changed and whose carrier is still to be
    /// read again.
    reread: BTreeSet<String>,
}

fn open_error(step: &'static str) -> impl FnOnce(Errno) -> CarrierError {
    move |errno| CarrierError::Open {
        step,
        source: errno.into(),
    }
}

/// Lets only Apple's network data-link events through.
#[allow(unsafe_code)]
fn set_filter(fd: &OwnedFd) -> rustix::io::Result<()> {
    let request = KevRequest {
        vendor_code: KEV_VENDOR_APPLE,
        kev_class: KEV_NETWORK_CLASS,
        kev_subclass: KEV_DL_SUBCLASS,
    };
    // SAFETY: SIOCSKEVFILT copies in exactly one `struct kev_request`
    // (three u32s, matched by the #[repr(C)] KevRequest) through the
    // pointer `Setter` passes, which points at the value it owns for the
    // call; the ioctl neither keeps nor writes through it (`kev_control`,
    // bsd/kern/kern_event.c).
    unsafe { rustix::ioctl::ioctl(fd, Setter::<SIOCSKEVFILT, KevRequest>::new(request)) }
}

impl Socket {
    pub(super) fn open() -> Result<Self, CarrierError> {
        let fd = rustix::net::socket(
            AddressFamily::SYSTEM,
            SocketType::RAW,
            Some(sysproto::EVENT),
        )
        .map_err(open_error("socket(PF_SYSTEM, SYSPROTO_EVENT)"))?;
        rustix::io::fcntl_setfd(&fd, FdFlags::CLOEXEC).map_err(open_error("FD_CLOEXEC"))?;
        set_filter(&fd).map_err(open_error("SIOCSKEVFILT"))?;
        Ok(Self {
            fd,
            reread: BTreeSet::new(),
        })
    }

    pub(super) fn next(&mut self, timeout: Duration) -> Result<Vec<CarrierChange>, CarrierError> {
        let deadline = Instant::now() + timeout;
        // Re-reads left over from the last call come first: they are
        // changes already announced.
        let mut changes = self.reread_flags(deadline);
        if !changes.is_empty() {
            return Ok(changes);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if !wait_readable(&self.fd, left)? {
            return Ok(changes);
        }
        let mut buf = vec![0u8; READ_SIZE];
        for _ in 0..MAX_READS {
            let len = match rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::DONTWAIT) {
                Ok((len, _)) => len,
                Err(Errno::AGAIN) | Err(Errno::INTR) => break,
                Err(Errno::NOBUFS) => {
                    return Err(CarrierError::Lost {
                        why: "ENOBUFS: the kernel-event socket's buffer overflowed".to_owned(),
                    });
                }
                Err(errno) => return Err(CarrierError::Receive(errno.into())),
            };
            if len == 0 {
                break;
            }
            for event in parse_kernel_event(&buf[..len])? {
                match event {
                    KernelEvent::Carrier(change) => {
                        // A link event is newer than a pending re-read.
                        self.reread.remove(&change.iface);
                        changes.push(change);
                    }
                    KernelEvent::FlagsChanged { iface } => {
                        self.reread.insert(iface);
                    }
                }
            }
        }
        changes.extend(self.reread_flags(deadline));
        Ok(changes)
    }

    /// The carriers of the interfaces whose flags changed, read within
    /// what is left until `deadline`; those not read stay pending.
    fn reread_flags(&mut self, deadline: Instant) -> Vec<CarrierChange> {
        let mut changes = Vec::new();
        for iface in std::mem::take(&mut self.reread) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left < MIN_REREAD {
                self.reread.insert(iface);
                continue;
            }
            match current_within(&iface, left.min(IFCONFIG_TIMEOUT)) {
                Ok(Some(carrier)) => changes.push(CarrierChange { iface, carrier }),
                // Gone: its detach event says so.
                Ok(None) => {}
                Err(err) => {
                    tracing::debug!("re-reading {iface}'s carrier after a flags change: {err}");
                    self.reread.insert(iface);
                }
            }
        }
        changes
    }
}

pub(super) fn current(iface: &str) -> Result<Option<bool>, CarrierError> {
    current_within(iface, IFCONFIG_TIMEOUT)
}

/// `ifconfig IFACE`: up, running and (where it has a media status)
/// `status: active`. `None` when ifconfig does not know the interface.
fn current_within(iface: &str, timeout: Duration) -> Result<Option<bool>, CarrierError> {
    let read_error = |why: String| CarrierError::Read {
        iface: iface.to_owned(),
        why,
    };
    let output = run_with_timeout("/sbin/ifconfig", &[iface.to_owned()], timeout)
        .map_err(|err: RunError| read_error(err.to_string()))?;
    if !output.success {
        // "ifconfig: interface en9 does not exist".
        return Ok(None);
    }
    Ok(parse_ifconfig(&output.stdout)
        .into_iter()
        .find(|i| i.name == iface)
        .and_then(|i| super::carrier_from_ifconfig(&i)))
}
