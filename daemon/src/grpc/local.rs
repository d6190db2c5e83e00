//! The local listener's connections (meshctl, plain TCP on loopback):
//! admitted by a [`Gate`], closed once quiet, and known to the handlers
//! as a [`LocalClient`] so that one connection holds at most its share of
//! event streams.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;

use crate::ports::{
    Gate, LOCAL_GRPC_FIRST_BYTES_TIMEOUT, LOCAL_GRPC_IDLE_TIMEOUT, OpenStreams, Quiet,
};

/// Who is on the other end of a local connection, as a handler finds it in
/// a request's extensions.
#[derive(Debug, Clone)]
pub struct LocalClient {
    pub remote: SocketAddr,
    /// The event streams open on this connection.
    pub streams: OpenStreams,
}

#[derive(Debug)]
pub struct LocalConnection {
    io: Quiet,
    client: LocalClient,
}

impl Connected for LocalConnection {
    type ConnectInfo = LocalClient;

    fn connect_info(&self) -> LocalClient {
        self.client.clone()
    }
}

/// The connections `gate` admits until `shutdown`, as a stream for tonic.
/// Each must speak within [`LOCAL_GRPC_FIRST_BYTES_TIMEOUT`] before the
/// server sees it (so a silent one is closed without a byte from meshd,
/// and costs no HTTP/2 state; at the cap the oldest silent one gives way
/// to a newcomer, see [`Gate::evicting_silent`]), and is closed after
/// [`LOCAL_GRPC_IDLE_TIMEOUT`] without a byte unless it holds an event
/// stream.
pub fn incoming(
    mut gate: Gate,
    shutdown: CancellationToken,
) -> ReceiverStream<io::Result<LocalConnection>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        while let Some(admitted) = gate.next(&shutdown).await {
            let tx = tx.clone();
            tokio::spawn(async move {
                if !admitted.spoke_within(LOCAL_GRPC_FIRST_BYTES_TIMEOUT).await {
                    tracing::debug!(remote = %admitted.remote, "closed a local connection that did not speak");
                    return;
                }
                let streams = OpenStreams::default();
                let client = LocalClient {
                    remote: admitted.remote,
                    streams: streams.clone(),
                };
                let io = admitted.quiet_after(LOCAL_GRPC_IDLE_TIMEOUT, Some(streams));
                let _ = tx.send(Ok(LocalConnection { io, client })).await;
            });
        }
    });
    ReceiverStream::new(rx)
}

impl AsyncRead for LocalConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for LocalConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
