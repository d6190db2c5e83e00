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

use super::stamp::{self, Received};

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

    /// The next queued datagram, or `WouldBlock`.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        match self {
            Self::Polled(socket) => stamp::try_recv_from(socket, buf),
            // Through `try_io`, so the runtime learns the socket is drained.
            Self::Registered(socket) => {
                socket.try_io(Interest::READABLE, || stamp::try_recv_from(socket, buf))
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
