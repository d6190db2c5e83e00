//! Kernel receive timestamps for the probe sockets.
//!
//! A datagram's receive time taken in user space comes after the task's
//! wake-up, so it carries scheduler latency that a kernel-timed pinger
//! (iputils ping) does not; on a veth link that is most of the RTT. The
//! kernel stamps each datagram as it queues it (`SO_TIMESTAMPNS` on Linux,
//! `SO_TIMESTAMP` in µs elsewhere) and hands the stamp over as a control
//! message of `recvmsg`.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt,
};

/// A kernel stamp older than this when read is not trusted: a probe waits in
/// the socket queue for microseconds, so such an age means the wall clock
/// (which the stamp is on) stepped in between.
const MAX_STAMP_AGE: Duration = Duration::from_secs(1);

/// One received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub len: usize,
    /// The sender; None only if the kernel did not say.
    pub from: Option<SocketAddr>,
    /// When it arrived: the kernel's stamp, or the time it was read where
    /// there is none.
    pub at: Instant,
}

/// Asks the kernel to stamp every datagram `socket` receives. Failing that,
/// receive times are taken in user space, which only costs accuracy, so the
/// error is for the caller to log, not to fail on.
pub fn enable(socket: &impl AsFd) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    let option = sockopt::ReceiveTimestampns;
    #[cfg(not(target_os = "linux"))]
    let option = sockopt::ReceiveTimestamp;
    setsockopt(socket, option, &true).map_err(io::Error::from)
}

pub fn try_recv_from(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<Received> {
    let mut cmsgs = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        Some(cmsgs.as_mut_slice()),
        MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    let stamp = msg.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|cmsg| match cmsg {
            #[cfg(target_os = "linux")]
            ControlMessageOwned::ScmTimestampns(ts) => Some(Duration::new(
                u64::try_from(ts.tv_sec()).ok()?,
                u32::try_from(ts.tv_nsec()).ok()?,
            )),
            ControlMessageOwned::ScmTimestamp(tv) => Some(Duration::new(
                u64::try_from(tv.tv_sec()).ok()?,
                u32::try_from(tv.tv_usec()).ok()?.checked_mul(1_000)?,
            )),
            _ => None,
        })
    });
    let from = msg.address.as_ref().and_then(socket_addr);
    let at = arrival(stamp, Instant::now(), SystemTime::now());
    Ok(Received {
        len: msg.bytes,
        from,
        at,
    })
}

fn socket_addr(addr: &SockaddrStorage) -> Option<SocketAddr> {
    addr.as_sockaddr_in()
        .map(|v4| SocketAddr::from(*v4))
        .or_else(|| addr.as_sockaddr_in6().map(|v6| SocketAddr::from(*v6)))
}

/// The arrival as an `Instant`, from the kernel's stamp (time since the Unix
/// epoch on the wall clock) and the two clocks read at the same moment.
/// Only the stamp's age is taken from the wall clock, so a clock that is
/// merely wrong does no harm; a missing, future or implausibly old stamp
/// falls back to `now`.
fn arrival(stamp: Option<Duration>, now: Instant, wall_now: SystemTime) -> Instant {
    stamp
        .and_then(|since_epoch| {
            let age = wall_now
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()?
                .checked_sub(since_epoch)?;
            if age > MAX_STAMP_AGE {
                return None;
            }
            now.checked_sub(age)
        })
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrival_is_the_stamp_on_the_monotonic_clock() {
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let since_epoch = |d: Duration| wall.duration_since(SystemTime::UNIX_EPOCH).unwrap() - d;
        let age = Duration::from_micros(180);
        assert_eq!(arrival(Some(since_epoch(age)), now, wall), now - age);
        assert_eq!(arrival(None, now, wall), now);
        // From the future (the clock stepped back) or too old (it stepped
        // forward): not trusted.
        let future = since_epoch(Duration::ZERO) + Duration::from_millis(5);
        assert_eq!(arrival(Some(future), now, wall), now);
        let stale = since_epoch(MAX_STAMP_AGE + Duration::from_millis(1));
        assert_eq!(arrival(Some(stale), now, wall), now);
    }

    #[tokio::test]
    async fn the_kernel_stamp_is_when_the_datagram_arrived_not_when_it_was_read() {
        let rx = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind");
        enable(&rx).expect("kernel timestamps");
        let tx = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let to = rx.local_addr().expect("addr");
        // Left unread for a while: a user-space time would include it.
        let unread = Duration::from_millis(100);
        let mut buf = [0u8; 16];
        // Linux turns stamping on for the whole host from a work queue, so
        // datagrams right after the first socket asks for it may arrive
        // unstamped (and get the read time); later ones are stamped.
        let mut tries = 0;
        loop {
            tries += 1;
            let sent_at = Instant::now();
            tx.send_to(b"probe", to).await.expect("send");
            tokio::time::sleep(unread).await;
            rx.readable().await.expect("readable");
            let got = try_recv_from(&rx, &mut buf).expect("receive");
            let read_at = Instant::now();
            assert_eq!(got.len, 5);
            assert_eq!(&buf[..5], b"probe");
            assert_eq!(got.from, Some(tx.local_addr().expect("addr")));
            assert!(got.at >= sent_at - Duration::from_millis(1), "{:?}", got.at);
            if read_at.duration_since(got.at) >= unread {
                break;
            }
            assert!(tries < 10, "no kernel stamp after {tries} datagrams");
        }
    }
}
