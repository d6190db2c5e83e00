//! A cable's probe socket, bound to this end's address and connected to
//! the peer's. At the default probe interval it is not registered with the
//! runtime: the probe task reads it on its tick, so a datagram arriving
//! does not wake the task (or the thread) at all. With ticks further apart
//! than [`super::engine::MAX_REPLY_HOLD`] it is registered, and a request
//! is answered as soon as it arrives.

use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use tokio::io::Interest;

use super::stamp::Inbox;

#[derive(Debug)]
pub enum ProbeSocket {
    /// Read on the probe task's tick only.
    Polled(std::net::UdpSocket),
    /// Read whenever it is readable.
    Registered(tokio::net::UdpSocket),
}

impl ProbeSocket {
    /// `socket` (bound, connected, non-blocking) read on the tick, or
    /// registered with the runtime when `registered`.
    pub fn new(socket: std::net::UdpSocket, registered: bool) -> io::Result<Self> {
        if registered {
            tokio::net::UdpSocket::from_std(socket).map(Self::Registered)
        } else {
            Ok(Self::Polled(socket))
        }
    }

    pub fn try_send(&self, datagram: &[u8]) -> io::Result<usize> {
        match self {
            Self::Polled(socket) => socket.send(datagram),
            Self::Registered(socket) => socket.try_send(datagram),
        }
    }

    /// Reads the next batch of queued datagrams into `inbox` (see
    /// [`Inbox::try_recv`]), or `WouldBlock`.
    pub fn try_recv(&self, inbox: &mut Inbox) -> io::Result<()> {
        match self {
            Self::Polled(socket) => inbox.try_recv(socket),
            // Through `try_io`, so the runtime learns the socket is drained
            // (from the read that finds nothing: after a short batch it
            // still takes the socket for readable, and the task reads again).
            Self::Registered(socket) => {
                socket.try_io(Interest::READABLE, || inbox.try_recv(socket))
            }
        }
    }

    /// Ready when a registered socket has something to read; a polled one
    /// never wakes anyone.
    pub fn poll_recv_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Self::Polled(_) => Poll::Pending,
            Self::Registered(socket) => socket.poll_recv_ready(cx),
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Self::Polled(socket) => socket.local_addr(),
            Self::Registered(socket) => socket.local_addr(),
        }
    }
}

/// One drain of a socket: everything queued read a batch at a time (on
/// Linux one `recvmmsg` per tick while fewer than a batch are queued,
/// elsewhere one `recvmsg` per datagram and one more that finds the queue
/// empty). ECONNREFUSED (nothing listens on the peer's port: its daemon is
/// down) is read past, as the queue may hold datagrams behind it; any
/// other error ends the drain.
#[derive(Debug, Default)]
pub struct Drain {
    done: bool,
}

/// What [`Drain::step`] read.
#[derive(Debug)]
pub enum Step {
    /// A batch, in the inbox.
    Batch,
    Error(io::Error),
    Done,
}

impl Drain {
    pub fn step(&mut self, socket: &ProbeSocket, inbox: &mut Inbox) -> Step {
        if self.done {
            return Step::Done;
        }
        match socket.try_recv(inbox) {
            Ok(()) => {
                // A batch that is not full emptied the queue, unless an
                // error cut it short: the kernel then keeps the error for
                // the next drain's first read, which goes on after
                // ECONNREFUSED. Only an error arriving during the call does
                // that (a pending one comes before any datagram), so the
                // datagrams behind it wait a tick at worst.
                self.done = !inbox.full();
                Step::Batch
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Step::Done,
            Err(error) => {
                self.done = error.kind() != io::ErrorKind::ConnectionRefused;
                Step::Error(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    use super::super::stamp;
    use super::*;

    /// A bound against hanging, not a speed expected.
    const PATIENCE: Duration = Duration::from_secs(10);

    /// What one drain read: the datagrams and the errors.
    #[derive(Debug, Default)]
    struct Drained {
        datagrams: Vec<Vec<u8>>,
        errors: Vec<io::ErrorKind>,
    }

    impl Drained {
        fn drain(&mut self, socket: &ProbeSocket, inbox: &mut Inbox) {
            let mut drain = Drain::default();
            loop {
                match drain.step(socket, inbox) {
                    Step::Batch => self
                        .datagrams
                        .extend(inbox.datagrams().map(|(_, bytes)| bytes.to_vec())),
                    Step::Error(error) => self.errors.push(error.kind()),
                    Step::Done => return,
                }
            }
        }
    }

    /// A probe socket on 127.0.0.1 connected to `peer`, set up as the probe
    /// task sets up its own.
    fn connected(peer: SocketAddr) -> UdpSocket {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket.set_nonblocking(true).expect("non-blocking");
        socket.connect(peer).expect("connect");
        stamp::enable(&socket).expect("kernel timestamps");
        socket
    }

    /// Waits a little for a registered socket to be readable, as the probe
    /// task does; a polled one is read on the next "tick".
    async fn tick(socket: &ProbeSocket) {
        let ready = poll_fn(|cx| socket.poll_recv_ready(cx));
        let _ = tokio::time::timeout(Duration::from_millis(10), ready).await;
    }

    #[tokio::test]
    async fn draining_an_empty_socket_reads_nothing_and_no_error() {
        for registered in [false, true] {
            let peer = UdpSocket::bind("127.0.0.1:0").expect("bind");
            let socket = connected(peer.local_addr().expect("addr"));
            let socket = ProbeSocket::new(socket, registered).expect("probe socket");
            let mut drained = Drained::default();
            tick(&socket).await;
            drained.drain(&socket, &mut Inbox::new());
            assert!(drained.datagrams.is_empty(), "registered: {registered}");
            assert!(drained.errors.is_empty(), "registered: {registered}");
        }
    }

    #[tokio::test]
    async fn a_refused_probe_is_an_error_and_the_datagrams_queued_around_it_are_read() {
        for registered in [false, true] {
            let peer = UdpSocket::bind("127.0.0.1:0").expect("bind");
            let peer_addr = peer.local_addr().expect("addr");
            let socket = connected(peer_addr);
            let local = socket.local_addr().expect("addr");
            peer.send_to(b"before", local).expect("send");
            // Nothing listens on the peer's port any more: the probe comes
            // back as ICMP port unreachable, ECONNREFUSED on the socket.
            drop(peer);
            socket.send(b"probe").expect("send");
            let peer = UdpSocket::bind(peer_addr).expect("the peer's port again");
            peer.send_to(b"after", local).expect("send");

            let socket = ProbeSocket::new(socket, registered).expect("probe socket");
            let mut inbox = Inbox::new();
            let mut drained = Drained::default();
            let deadline = Instant::now() + PATIENCE;
            while drained.datagrams.len() < 2 || drained.errors.is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "registered: {registered}, {drained:?}"
                );
                tick(&socket).await;
                drained.drain(&socket, &mut inbox);
            }
            assert_eq!(
                drained.datagrams,
                [b"before".to_vec(), b"after".to_vec()],
                "registered: {registered}"
            );
            assert_eq!(
                drained.errors,
                [io::ErrorKind::ConnectionRefused],
                "registered: {registered}"
            );
        }
    }
}
