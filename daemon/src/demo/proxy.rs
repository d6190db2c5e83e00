//! The demo's fault-injecting proxies, in the spirit of toxiproxy: a UDP
//! proxy per direction of every cable (probes) and a TCP proxy per ordered
//! pair of nodes (the management network). Each consults [`Faults`] for
//! every datagram and connection; everything they hold is bounded.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::faults::{Fate, Faults, Leg};

/// Delayed datagrams held per proxy; beyond this, a slow cable drops, as a
/// real queue would.
pub const MAX_IN_FLIGHT: usize = 256;
/// Distinct senders a UDP proxy relays for. A prober uses one or two
/// sockets per link; the oldest mapping is replaced beyond this.
pub const MAX_UDP_CLIENTS: usize = 8;
/// Open connections per TCP proxy. A reporter needs one per peer.
pub const MAX_TCP_CONNECTIONS: usize = 16;
/// Largest UDP datagram.
const DATAGRAM_BUFFER: usize = 65_536;
/// A peer that does not accept within this is treated as down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Relays datagrams for cable direction `from → to`.
#[derive(Debug)]
pub struct UdpProxy {
    socket: Arc<UdpSocket>,
    upstream: SocketAddr,
    from: usize,
    to: usize,
}

impl UdpProxy {
    /// Binds now, so a taken port fails the demo's start, not later.
    pub async fn bind(
        listen: SocketAddr,
        upstream: SocketAddr,
        (from, to): (usize, usize),
    ) -> io::Result<UdpProxy> {
        let socket = UdpSocket::bind(listen).await?;
        Ok(UdpProxy {
            socket: Arc::new(socket),
            upstream,
            from,
            to,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Relays until `shutdown`. Each sender gets its own upstream socket,
    /// so replies find their way back to the socket that asked.
    pub async fn run(self, faults: Arc<Faults>, shutdown: CancellationToken) {
        let (delayed_tx, delayed_rx) = mpsc::channel(MAX_IN_FLIGHT);
        let mut tasks = JoinSet::new();
        tasks.spawn(send_delayed(delayed_rx, shutdown.clone()));
        let mut clients: HashMap<SocketAddr, Client> = HashMap::new();
        let mut buf = vec![0u8; DATAGRAM_BUFFER];
        let mut uses: u64 = 0;
        loop {
            let (len, sender) = tokio::select! {
                () = shutdown.cancelled() => break,
                received = self.socket.recv_from(&mut buf) => match received {
                    Ok(r) => r,
                    Err(err) => {
                        // ICMP errors from earlier sends surface here; the
                        // socket itself is fine.
                        tracing::trace!(%err, "udp proxy receive");
                        continue;
                    }
                },
            };
            uses += 1;
            let upstream = match clients.get_mut(&sender) {
                Some(client) => {
                    client.last_use = uses;
                    client.upstream.clone()
                }
                None => match self.new_client(sender).await {
                    Ok(upstream) => {
                        if clients.len() >= MAX_UDP_CLIENTS {
                            evict_oldest(&mut clients);
                            // Reaps the aborted reply task, so churning
                            // senders cannot grow the set.
                            while tasks.try_join_next().is_some() {}
                        }
                        let abort = tasks.spawn(relay_replies(
                            upstream.clone(),
                            self.socket.clone(),
                            sender,
                            faults.clone(),
                            (self.to, self.from),
                            shutdown.clone(),
                        ));
                        clients.insert(
                            sender,
                            Client {
                                upstream: upstream.clone(),
                                reply_task: abort,
                                last_use: uses,
                            },
                        );
                        upstream
                    }
                    Err(err) => {
                        tracing::warn!(%err, upstream = %self.upstream, "udp proxy cannot open an upstream socket");
                        continue;
                    }
                },
            };
            let Some(datagram) = buf.get(..len) else {
                continue;
            };
            match faults.fate(self.from, self.to, Leg::Request) {
                Fate::Drop => {}
                Fate::Forward { delay } if delay.is_zero() => {
                    let _ = upstream.send(datagram).await;
                }
                Fate::Forward { delay } => {
                    let item = Delayed {
                        due: Instant::now() + delay,
                        datagram: datagram.to_vec(),
                        socket: upstream,
                    };
                    if delayed_tx.try_send(item).is_err() {
                        tracing::trace!("udp proxy delay queue full; datagram dropped");
                    }
                }
            }
        }
        drop(delayed_tx);
        tasks.shutdown().await;
    }

    async fn new_client(&self, sender: SocketAddr) -> io::Result<Arc<UdpSocket>> {
        // The upstream is a node on this host, so its own address is a
        // source it can answer, and nothing but that address is bound.
        let socket = UdpSocket::bind(SocketAddr::new(self.upstream.ip(), 0)).await?;
        // Connected: only the upstream's answers arrive on it.
        socket.connect(self.upstream).await?;
        tracing::debug!(%sender, upstream = %self.upstream, "udp proxy client");
        Ok(Arc::new(socket))
    }
}

#[derive(Debug)]
struct Client {
    upstream: Arc<UdpSocket>,
    reply_task: AbortHandle,
    last_use: u64,
}

fn evict_oldest(clients: &mut HashMap<SocketAddr, Client>) {
    let oldest = clients
        .iter()
        .min_by_key(|(_, c)| c.last_use)
        .map(|(addr, _)| *addr);
    if let Some(client) = oldest.and_then(|addr| clients.remove(&addr)) {
        client.reply_task.abort();
    }
}

#[derive(Debug)]
struct Delayed {
    due: Instant,
    datagram: Vec<u8>,
    socket: Arc<UdpSocket>,
}

/// In arrival order: the delay of a cable is the same for every datagram,
/// so due times only go backwards when the delay is lowered.
async fn send_delayed(mut queue: mpsc::Receiver<Delayed>, shutdown: CancellationToken) {
    loop {
        let item = tokio::select! {
            () = shutdown.cancelled() => return,
            item = queue.recv() => match item {
                Some(item) => item,
                None => return,
            },
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep_until(item.due) => {
                let _ = item.socket.send(&item.datagram).await;
            }
        }
    }
}

/// Carries the upstream's answers back to `client` from the address it
/// sent to. `(from, to)` is the direction of the reply.
async fn relay_replies(
    upstream: Arc<UdpSocket>,
    listener: Arc<UdpSocket>,
    client: SocketAddr,
    faults: Arc<Faults>,
    (from, to): (usize, usize),
    shutdown: CancellationToken,
) {
    let mut buf = vec![0u8; DATAGRAM_BUFFER];
    loop {
        let len = tokio::select! {
            () = shutdown.cancelled() => return,
            received = upstream.recv(&mut buf) => match received {
                Ok(len) => len,
                // Refused while the peer is down; it may come back.
                Err(_) => continue,
            },
        };
        if faults.fate(from, to, Leg::Reply) == Fate::Drop {
            continue;
        }
        if let Some(datagram) = buf.get(..len) {
            let _ = listener.send_to(datagram, client).await;
        }
    }
}

/// Relays gRPC connections opened by node `from` to node `to`, as long as
/// the management network lets them through.
#[derive(Debug)]
pub struct TcpProxy {
    listener: TcpListener,
    upstream: SocketAddr,
    from: usize,
    to: usize,
}

impl TcpProxy {
    pub async fn bind(
        listen: SocketAddr,
        upstream: SocketAddr,
        (from, to): (usize, usize),
    ) -> io::Result<TcpProxy> {
        Ok(TcpProxy {
            listener: TcpListener::bind(listen).await?,
            upstream,
            from,
            to,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts until `shutdown`. A connection across a partition is closed
    /// right after it is accepted, which the client sees as a reset or EOF
    /// before any reply — like a firewall that rejects.
    pub async fn run(self, faults: Arc<Faults>, shutdown: CancellationToken) {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.listener.accept() => {
                    let Ok((stream, peer)) = accepted else { continue };
                    if !faults.connected(self.from, self.to) {
                        tracing::debug!(%peer, "tcp proxy: partitioned, connection refused");
                        continue;
                    }
                    if connections.len() >= MAX_TCP_CONNECTIONS {
                        tracing::debug!(%peer, "tcp proxy: too many connections");
                        continue;
                    }
                    connections.spawn(relay_connection(
                        stream,
                        self.upstream,
                        faults.clone(),
                        (self.from, self.to),
                        shutdown.clone(),
                    ));
                }
            }
        }
        connections.shutdown().await;
    }
}

async fn relay_connection(
    mut client: TcpStream,
    upstream: SocketAddr,
    faults: Arc<Faults>,
    (from, to): (usize, usize),
    shutdown: CancellationToken,
) {
    let mut partition = faults.watch_partition();
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream));
    let mut server = tokio::select! {
        () = shutdown.cancelled() => return,
        connected = connect => match connected {
            Ok(Ok(server)) => server,
            // The peer is down: the client sees the connection close.
            _ => return,
        },
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let relay = tokio::io::copy_bidirectional(&mut client, &mut server);
    tokio::pin!(relay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = &mut relay => return,
            changed = partition.changed() => {
                if changed.is_err() || !faults.connected(from, to) {
                    tracing::debug!(from, to, "tcp proxy: partition closes a connection");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const LOOPBACK: &str = "127.0.0.1:0";
    const WAIT: Duration = Duration::from_secs(5);
    /// How long a test waits for a datagram that must not arrive.
    const SILENCE: Duration = Duration::from_millis(300);

    fn loopback() -> SocketAddr {
        LOOPBACK.parse().expect("addr")
    }

    /// A UDP echo server standing in for a probe responder.
    async fn udp_echo(shutdown: CancellationToken) -> SocketAddr {
        let socket = UdpSocket::bind(loopback()).await.expect("bind echo");
        let addr = socket.local_addr().expect("addr");
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    Ok((n, from)) = socket.recv_from(&mut buf) => {
                        let _ = socket.send_to(&buf[..n], from).await;
                    }
                }
            }
        });
        addr
    }

    struct UdpSetup {
        faults: Arc<Faults>,
        client: UdpSocket,
        proxy: SocketAddr,
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    async fn udp_setup(seed: u64) -> UdpSetup {
        let shutdown = CancellationToken::new();
        let echo = udp_echo(shutdown.clone()).await;
        let faults = Arc::new(Faults::with_seed(seed));
        let proxy = UdpProxy::bind(loopback(), echo, (0, 1))
            .await
            .expect("bind proxy");
        let proxy_addr = proxy.local_addr().expect("addr");
        let task = tokio::spawn(proxy.run(faults.clone(), shutdown.clone()));
        let client = UdpSocket::bind(loopback()).await.expect("client");
        UdpSetup {
            faults,
            client,
            proxy: proxy_addr,
            shutdown,
            task,
        }
    }

    impl UdpSetup {
        /// Sends `payload` and waits up to `wait` for its echo.
        async fn round_trip(&self, payload: &[u8], wait: Duration) -> Option<Vec<u8>> {
            self.client
                .send_to(payload, self.proxy)
                .await
                .expect("send");
            let mut buf = [0u8; 2048];
            match tokio::time::timeout(wait, self.client.recv_from(&mut buf)).await {
                Ok(Ok((n, from))) => {
                    assert_eq!(from, self.proxy, "replies come from the proxy address");
                    Some(buf[..n].to_vec())
                }
                _ => None,
            }
        }

        async fn stop(self) {
            self.shutdown.cancel();
            tokio::time::timeout(WAIT, self.task)
                .await
                .expect("proxy stops")
                .expect("proxy task");
        }
    }

    #[tokio::test]
    async fn udp_proxy_relays_a_round_trip() {
        let setup = udp_setup(1).await;
        assert_eq!(
            setup.round_trip(b"probe-1", WAIT).await.as_deref(),
            Some(&b"probe-1"[..])
        );
        assert_eq!(
            setup.round_trip(b"probe-2", WAIT).await.as_deref(),
            Some(&b"probe-2"[..])
        );
        setup.stop().await;
    }

    #[tokio::test]
    async fn udp_proxy_serves_more_senders_than_it_remembers() {
        let setup = udp_setup(1).await;
        assert!(setup.round_trip(b"first", WAIT).await.is_some());
        for i in 0..u8::try_from(MAX_UDP_CLIENTS + 4).expect("small") {
            let other = UdpSocket::bind(loopback()).await.expect("bind");
            other.send_to(&[i], setup.proxy).await.expect("send");
            let mut buf = [0u8; 8];
            let (n, _) = tokio::time::timeout(WAIT, other.recv_from(&mut buf))
                .await
                .expect("reply")
                .expect("recv");
            assert_eq!(&buf[..n], &[i]);
        }
        // The first sender was forgotten and is mapped again.
        assert!(setup.round_trip(b"again", WAIT).await.is_some());
        setup.stop().await;
    }

    #[tokio::test]
    async fn udp_proxy_drops_everything_when_cut_and_relays_after_heal() {
        let setup = udp_setup(1).await;
        setup.faults.update_link(1, 0, |f| f.cut = true);
        for i in 0..5u8 {
            assert_eq!(setup.round_trip(&[i], SILENCE).await, None);
        }
        setup.faults.update_link(0, 1, |f| f.cut = false);
        assert_eq!(
            setup.round_trip(b"healed", WAIT).await.as_deref(),
            Some(&b"healed"[..])
        );
        setup.stop().await;
    }

    #[tokio::test]
    async fn udp_proxy_drops_about_the_lossy_share() {
        let setup = udp_setup(7).await;
        setup.faults.update_link(0, 1, |f| f.loss_percent = 30);
        let sent = 400;
        let mut received = 0;
        let mut buf = [0u8; 64];
        // Small bursts, drained before the next, so no socket buffer on the
        // way can overflow and add losses of its own.
        for burst in 0..sent / 20 {
            for i in 0..20u16 {
                let seq = (burst * 20 + i).to_be_bytes();
                setup.client.send_to(&seq, setup.proxy).await.expect("send");
            }
            while let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_millis(100), setup.client.recv_from(&mut buf))
                    .await
            {
                received += 1;
            }
        }
        let lost = sent - received;
        assert!((80..=160).contains(&lost), "lost {lost} of {sent}");
        setup.stop().await;
    }

    #[tokio::test]
    async fn udp_proxy_adds_at_least_the_delay_when_slow() {
        let setup = udp_setup(1).await;
        let delay = Duration::from_millis(150);
        setup.faults.update_link(0, 1, |f| f.delay = delay);
        for _ in 0..3 {
            let started = std::time::Instant::now();
            assert!(setup.round_trip(b"slow", WAIT).await.is_some());
            assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
        }
        setup.faults.update_link(0, 1, |f| f.delay = Duration::ZERO);
        assert!(setup.round_trip(b"fast", WAIT).await.is_some());
        setup.stop().await;
    }

    #[tokio::test]
    async fn udp_proxy_bounds_the_delayed_datagrams() {
        let setup = udp_setup(1).await;
        setup
            .faults
            .update_link(0, 1, |f| f.delay = Duration::from_millis(500));
        let burst = MAX_IN_FLIGHT + 100;
        for i in 0..burst {
            let seq = u32::try_from(i).expect("small").to_be_bytes();
            setup.client.send_to(&seq, setup.proxy).await.expect("send");
            if i % 50 == 49 {
                // Lets the proxy keep up, so the kernel buffer drops nothing.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let mut received = 0;
        let mut buf = [0u8; 64];
        while let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_secs(2), setup.client.recv_from(&mut buf)).await
        {
            received += 1;
        }
        assert!(received <= MAX_IN_FLIGHT + 1, "received {received}");
        assert!(received > 0);
        setup.stop().await;
    }

    async fn tcp_echo(shutdown: CancellationToken) -> SocketAddr {
        let listener = TcpListener::bind(loopback()).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    Ok((mut stream, _)) = listener.accept() => {
                        tokio::spawn(async move {
                            let (mut r, mut w) = stream.split();
                            let _ = tokio::io::copy(&mut r, &mut w).await;
                        });
                    }
                }
            }
        });
        addr
    }

    /// Writes `msg` and reads the echo; `None` when the connection is closed.
    async fn echo(stream: &mut TcpStream, msg: &[u8]) -> Option<Vec<u8>> {
        if stream.write_all(msg).await.is_err() {
            return None;
        }
        let mut buf = vec![0u8; msg.len()];
        match tokio::time::timeout(WAIT, stream.read_exact(&mut buf)).await {
            Ok(Ok(_)) => Some(buf),
            Ok(Err(_)) => None,
            Err(_) => panic!("no answer and no close within {WAIT:?}"),
        }
    }

    #[tokio::test]
    async fn tcp_proxy_relays_and_partitions() {
        let shutdown = CancellationToken::new();
        let upstream = tcp_echo(shutdown.clone()).await;
        let faults = Arc::new(Faults::with_seed(1));
        let proxy = TcpProxy::bind(loopback(), upstream, (0, 1))
            .await
            .expect("bind");
        let addr = proxy.local_addr().expect("addr");
        let task = tokio::spawn(proxy.run(faults.clone(), shutdown.clone()));

        let mut open = TcpStream::connect(addr).await.expect("connect");
        assert_eq!(
            echo(&mut open, b"hello").await.as_deref(),
            Some(&b"hello"[..])
        );

        faults.partition(&[vec![0], vec![1, 2]]);
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(WAIT, open.read(&mut buf))
            .await
            .expect("the open connection is closed");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

        let mut refused = TcpStream::connect(addr)
            .await
            .expect("accepted, then closed");
        assert_eq!(echo(&mut refused, b"again").await, None);

        // A partition that leaves the pair on the same side lets it through.
        faults.partition(&[vec![0, 1], vec![2]]);
        let mut same_side = TcpStream::connect(addr).await.expect("connect");
        assert!(echo(&mut same_side, b"same").await.is_some());

        faults.partition(&[vec![1], vec![0]]);
        faults.heal_all();
        let mut healed = TcpStream::connect(addr).await.expect("connect");
        assert_eq!(
            echo(&mut healed, b"healed").await.as_deref(),
            Some(&b"healed"[..])
        );

        shutdown.cancel();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("proxy stops")
            .expect("proxy task");
    }
}
