//! Kernel receive timestamps for the probe sockets, read with the
//! datagrams.
//!
//! A datagram's receive time taken in user space comes after the task's
//! wake-up, so it carries scheduler latency that a kernel-timed pinger
//! (iputils ping) does not; on a veth link that is most of the RTT. The
//! kernel stamps each datagram as it queues it (`SO_TIMESTAMPNS` on Linux,
//! `SO_TIMESTAMP` in µs elsewhere) and hands the stamp over as a control
//! message of `recvmsg`.
//!
//! On Linux an [`Inbox`] reads up to [`BATCH`] datagrams, each with its own
//! buffer and stamp, in one `recvmmsg`, and a batch that comes back short
//! means the queue is empty. A tick usually finds two datagrams on a socket
//! (the peer's request and its reply), so reading it costs one system call,
//! not three (a `recvmsg` per datagram and one more to find the queue
//! empty). macOS has no `recvmmsg`: there a batch is one datagram, read
//! with one `recvmsg`, and the tick still costs three.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::socket::{
    CmsgIterator, ControlMessageOwned, MsgFlags, RecvMsg, SockaddrStorage, setsockopt, sockopt,
};
use nix::sys::time::TimeSpec;

use super::packet::MAX_DATAGRAM_LEN;

/// Datagrams one read returns at most. Eight: a tick finds two queued
/// (the peer's request and reply), more only after a stall, and each takes
/// a buffer of the largest datagram.
#[cfg(target_os = "linux")]
pub const BATCH: usize = 8;
/// Without `recvmmsg` a read is one `recvmsg`, so one datagram.
#[cfg(not(target_os = "linux"))]
pub const BATCH: usize = 1;

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

/// The datagrams of the last read and their buffers, allocated once: a
/// batch of the largest datagram is half a megabyte.
pub struct Inbox {
    /// One byte more than any UDP payload, so nothing is ever truncated.
    bufs: [Box<[u8]>; BATCH],
    /// What the last read put in the buffers of the same index.
    received: Vec<Received>,
}

impl Inbox {
    pub fn new() -> Self {
        Self {
            bufs: std::array::from_fn(|_| vec![0; MAX_DATAGRAM_LEN + 1].into_boxed_slice()),
            received: Vec::with_capacity(BATCH),
        }
    }

    /// Reads up to [`BATCH`] queued datagrams, in place of the last read's,
    /// or fails with `WouldBlock` when none is queued. A pending socket
    /// error (such as `ECONNREFUSED`) is reported before the datagrams
    /// queued with it; one that cuts a batch short comes with the next read.
    pub fn try_recv(&mut self, socket: &impl AsRawFd) -> io::Result<()> {
        self.received.clear();
        recv_batch(socket, &mut self.bufs, &mut self.received)
    }

    /// The last read's datagrams, each with its bytes.
    pub fn datagrams(&self) -> impl Iterator<Item = (Received, &[u8])> {
        self.received
            .iter()
            .zip(&self.bufs)
            .filter_map(|(received, buf)| Some((*received, buf.get(..received.len)?)))
    }

    /// Whether the last read filled the batch, so more may be queued.
    pub fn full(&self) -> bool {
        self.received.len() == BATCH
    }
}

#[cfg(target_os = "linux")]
fn recv_batch(
    socket: &impl AsRawFd,
    bufs: &mut [Box<[u8]>; BATCH],
    into: &mut Vec<Received>,
) -> io::Result<()> {
    use nix::sys::socket::{MultiHeaders, recvmmsg};
    // Fresh headers on every call, not kept in the inbox: nix's are not
    // Send, so they could not be held by the probe task across an await;
    // and the kernel overwrites their control lengths with what it wrote,
    // which nix does not restore (nix-rust/nix#2813), so a reused header
    // could lose the stamps. They are a few small allocations.
    let mut headers =
        MultiHeaders::<SockaddrStorage>::preallocate(BATCH, Some(nix::cmsg_space!(TimeSpec)));
    let mut iovs = bufs.each_mut().map(|buf| [IoSliceMut::new(buf)]);
    let batch = recvmmsg(
        socket.as_raw_fd(),
        &mut headers,
        &mut iovs,
        MsgFlags::MSG_DONTWAIT,
        None,
    )
    .map_err(io::Error::from)?;
    let read_at = (Instant::now(), SystemTime::now());
    into.extend(batch.map(|msg| received(&msg, read_at)));
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn recv_batch(
    socket: &impl AsRawFd,
    bufs: &mut [Box<[u8]>; BATCH],
    into: &mut Vec<Received>,
) -> io::Result<()> {
    let [buf] = bufs;
    let mut cmsgs = nix::cmsg_space!(TimeSpec);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = nix::sys::socket::recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        Some(cmsgs.as_mut_slice()),
        MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    into.push(received(&msg, (Instant::now(), SystemTime::now())));
    Ok(())
}

/// A datagram as `recvmsg` or `recvmmsg` returned it, read at `read_at`
/// (the monotonic and the wall clock).
fn received(msg: &RecvMsg<'_, '_, SockaddrStorage>, read_at: (Instant, SystemTime)) -> Received {
    let stamp = msg.cmsgs().ok().and_then(kernel_stamp);
    Received {
        len: msg.bytes,
        from: msg.address.as_ref().and_then(socket_addr),
        at: arrival(stamp, read_at.0, read_at.1),
    }
}

/// The kernel's receive stamp among a datagram's control messages, as time
/// since the Unix epoch.
fn kernel_stamp(mut cmsgs: CmsgIterator<'_>) -> Option<Duration> {
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
    use std::net::UdpSocket;

    use super::*;

    /// A bound against hanging, not a speed expected.
    const PATIENCE: Duration = Duration::from_secs(10);

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

    /// A socket on 127.0.0.1 that asked for kernel stamps.
    fn stamped_socket() -> UdpSocket {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        enable(&socket).expect("kernel timestamps");
        socket
    }

    fn sender() -> UdpSocket {
        UdpSocket::bind("127.0.0.1:0").expect("bind")
    }

    /// Reads `rx` until at least `n` datagrams came, and how many each read
    /// returned.
    fn receive(
        rx: &UdpSocket,
        inbox: &mut Inbox,
        n: usize,
    ) -> (Vec<(Received, Vec<u8>)>, Vec<usize>) {
        let deadline = Instant::now() + PATIENCE;
        let (mut got, mut reads) = (Vec::new(), Vec::new());
        while got.len() < n {
            match inbox.try_recv(rx) {
                Ok(()) => {
                    let before = got.len();
                    got.extend(inbox.datagrams().map(|(r, bytes)| (r, bytes.to_vec())));
                    reads.push(got.len() - before);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    assert!(
                        Instant::now() < deadline,
                        "{} of {n} datagrams came",
                        got.len()
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(error) => panic!("receive: {error}"),
            }
        }
        (got, reads)
    }

    /// Sends datagrams until one is read with the kernel's stamp. Linux
    /// turns stamping on for the whole host from a work queue, so datagrams
    /// right after the first socket asks for it may arrive unstamped (and
    /// get the read time); later ones are stamped.
    fn until_stamped(rx: &UdpSocket, tx: &UdpSocket, inbox: &mut Inbox) {
        let to = rx.local_addr().expect("addr");
        // Left unread for a while: a user-space time would include it.
        let unread = Duration::from_millis(100);
        let mut tries = 0;
        loop {
            tries += 1;
            let sent_at = Instant::now();
            tx.send_to(b"probe", to).expect("send");
            std::thread::sleep(unread);
            let (got, _) = receive(rx, inbox, 1);
            let read_at = Instant::now();
            let [(got, bytes)] = got.as_slice() else {
                panic!("one datagram sent, {} read", got.len());
            };
            assert_eq!(got.len, 5);
            assert_eq!(bytes, b"probe");
            assert_eq!(got.from, Some(tx.local_addr().expect("addr")));
            assert!(got.at >= sent_at - Duration::from_millis(1), "{:?}", got.at);
            if read_at.duration_since(got.at) >= unread {
                return;
            }
            assert!(tries < 10, "no kernel stamp after {tries} datagrams");
        }
    }

    #[test]
    fn the_kernel_stamp_is_when_the_datagram_arrived_not_when_it_was_read() {
        until_stamped(&stamped_socket(), &sender(), &mut Inbox::new());
    }

    #[test]
    fn more_datagrams_than_a_batch_arrive_whole_with_their_senders_and_kernel_stamps() {
        let rx = stamped_socket();
        let senders = [sender(), sender()];
        let mut inbox = Inbox::new();
        until_stamped(&rx, &senders[0], &mut inbox);
        let to = rx.local_addr().expect("addr");
        // Each a different length, filled with its index; the last as long
        // as any can be, so a truncation would show.
        let sent: Vec<Vec<u8>> = (0..20u8)
            .map(|i| {
                let len = if i == 19 {
                    MAX_DATAGRAM_LEN
                } else {
                    usize::from(i) + 1
                };
                vec![i; len]
            })
            .collect();
        let sent_at = Instant::now();
        for (i, datagram) in sent.iter().enumerate() {
            senders[i % 2].send_to(datagram, to).expect("send");
        }
        let unread = Duration::from_millis(50);
        std::thread::sleep(unread);
        let (mut got, reads) = receive(&rx, &mut inbox, sent.len());
        let read_at = Instant::now();
        assert_eq!(got.len(), sent.len(), "{reads:?}");
        assert!(reads.iter().all(|&n| n <= BATCH), "{reads:?}");
        assert!(reads.contains(&BATCH), "never a full batch: {reads:?}");
        got.sort_by_key(|(_, bytes)| bytes.first().copied());
        for (i, ((received, bytes), datagram)) in got.iter().zip(&sent).enumerate() {
            assert_eq!(received.len, datagram.len(), "datagram {i}");
            assert!(bytes == datagram, "datagram {i}: {} bytes", bytes.len());
            assert_eq!(
                received.from,
                Some(senders[i % 2].local_addr().expect("addr")),
                "datagram {i}"
            );
            assert!(
                received.at >= sent_at - Duration::from_millis(1)
                    && read_at.duration_since(received.at) >= unread,
                "datagram {i} stamped {:?} after sending, {:?} before reading",
                received.at.saturating_duration_since(sent_at),
                read_at.saturating_duration_since(received.at),
            );
        }
    }

    #[test]
    fn an_empty_socket_reads_nothing_and_would_block() {
        let rx = stamped_socket();
        let mut inbox = Inbox::new();
        // Something read before, so the empty read must also forget it.
        sender()
            .send_to(b"probe", rx.local_addr().expect("addr"))
            .expect("send");
        receive(&rx, &mut inbox, 1);
        let error = inbox.try_recv(&rx).expect_err("nothing queued");
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(inbox.datagrams().count(), 0);
        assert!(!inbox.full());
    }
}
