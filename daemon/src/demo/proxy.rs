//! The demo's fault-injecting proxies, in the spirit of toxiproxy: a cable
//! proxy per pair of nodes (the probes, both ways), and TCP relays for the
//! management network and for the report streams over each cable. Each
//! consults [`Faults`] for every datagram and connection; everything they
//! hold is bounded.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::faults::{Fate, Faults};
use super::plan::{CableProxyPlan, Gate, TcpProxyPlan};

/// Delayed datagrams held per cable; beyond this, a slow cable drops, as a
/// real queue would.
pub const MAX_IN_FLIGHT: usize = 256;
/// Open connections per TCP relay. A node needs one per peer and path.
pub const MAX_TCP_CONNECTIONS: usize = 16;
/// Largest UDP datagram.
const DATAGRAM_BUFFER: usize = 65_536;
/// A peer that does not accept within this is treated as down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One side of a cable: the socket a node's end talks to, connected to
/// that end, so nothing but that end is heard on it.
#[derive(Debug)]
struct Side {
    node: usize,
    socket: Arc<UdpSocket>,
}

/// The cable between two nodes' ends: what one end sends to its side
/// leaves the other side towards the other end.
#[derive(Debug)]
pub struct CableProxy {
    a: Side,
    b: Side,
}

impl CableProxy {
    /// Binds both sides now, so a taken port fails the demo's start.
    pub async fn bind(plan: CableProxyPlan) -> io::Result<CableProxy> {
        let side = |s: super::plan::CableSide| async move {
            let socket = UdpSocket::bind(s.listen).await?;
            socket.connect(s.end).await?;
            Ok::<_, io::Error>(Side {
                node: s.node,
                socket: Arc::new(socket),
            })
        };
        Ok(CableProxy {
            a: side(plan.a).await?,
            b: side(plan.b).await?,
        })
    }

    /// The ports the two ends talk to.
    pub fn local_addrs(&self) -> io::Result<(SocketAddr, SocketAddr)> {
        Ok((self.a.socket.local_addr()?, self.b.socket.local_addr()?))
    }

    /// Relays both ways until `shutdown`.
    pub async fn run(self, faults: Arc<Faults>, shutdown: CancellationToken) {
        let (delayed_tx, delayed_rx) = mpsc::channel(MAX_IN_FLIGHT);
        let mut tasks = JoinSet::new();
        tasks.spawn(send_delayed(delayed_rx, shutdown.clone()));
        for (from, to) in [(&self.a, &self.b), (&self.b, &self.a)] {
            tasks.spawn(relay(
                (from.node, from.socket.clone()),
                (to.node, to.socket.clone()),
                faults.clone(),
                delayed_tx.clone(),
                shutdown.clone(),
            ));
        }
        drop(delayed_tx);
        while tasks.join_next().await.is_some() {}
    }
}

/// Carries what node `from`'s end sends to its side out of node `to`'s side.
async fn relay(
    (from, inbound): (usize, Arc<UdpSocket>),
    (to, outbound): (usize, Arc<UdpSocket>),
    faults: Arc<Faults>,
    delayed: mpsc::Sender<Delayed>,
    shutdown: CancellationToken,
) {
    let mut buf = vec![0u8; DATAGRAM_BUFFER];
    loop {
        let len = tokio::select! {
            () = shutdown.cancelled() => return,
            received = inbound.recv(&mut buf) => match received {
                Ok(len) => len,
                // ICMP "refused" from an earlier send while that end is
                // down; the socket itself is fine.
                Err(_) => continue,
            },
        };
        let Some(datagram) = buf.get(..len) else {
            continue;
        };
        match faults.fate(from, to) {
            Fate::Drop => {}
            Fate::Forward { delay } if delay.is_zero() => {
                let _ = outbound.send(datagram).await;
            }
            Fate::Forward { delay } => {
                let item = Delayed {
                    due: Instant::now() + delay,
                    datagram: datagram.to_vec(),
                    socket: outbound.clone(),
                };
                if delayed.try_send(item).is_err() {
                    tracing::trace!("cable proxy delay queue full; datagram dropped");
                }
            }
        }
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

/// Relays TCP connections to `upstream` while their gate is open: the
/// management network between two nodes, or a cable.
#[derive(Debug)]
pub struct TcpProxy {
    listener: TcpListener,
    upstream: SocketAddr,
    gate: Gate,
}

impl TcpProxy {
    pub async fn bind(plan: TcpProxyPlan) -> io::Result<TcpProxy> {
        Ok(TcpProxy {
            listener: TcpListener::bind(plan.listen).await?,
            upstream: plan.upstream,
            gate: plan.gate,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts until `shutdown`. A connection through a closed gate is
    /// closed right after it is accepted, which the client sees as a reset
    /// or EOF before any reply — like a firewall that rejects.
    pub async fn run(self, faults: Arc<Faults>, shutdown: CancellationToken) {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.listener.accept() => {
                    let Ok((stream, peer)) = accepted else { continue };
                    if !faults.open(self.gate) {
                        tracing::debug!(%peer, gate = ?self.gate, "tcp proxy: closed, connection refused");
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
                        self.gate,
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
    gate: Gate,
    shutdown: CancellationToken,
) {
    let mut changes = faults.watch();
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
            changed = changes.changed() => {
                if changed.is_err() || !faults.open(gate) {
                    tracing::debug!(?gate, "tcp proxy: the gate closes a connection");
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
    use crate::demo::plan::CableSide;
    use crate::probe::ProbeClass;
    use crate::probe::packet::{self, Header, Kind};

    const WAIT: Duration = Duration::from_secs(5);
    /// How long a test waits for a datagram that must not arrive.
    const SILENCE: Duration = Duration::from_millis(300);

    fn loopback() -> SocketAddr {
        "127.0.0.1:0".parse().expect("addr")
    }

    /// Two node ends joined by a cable proxy; end `b` answers every probe
    /// as a responder would.
    struct Cable {
        faults: Arc<Faults>,
        end_a: UdpSocket,
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    async fn cable(seed: u64) -> Cable {
        let shutdown = CancellationToken::new();
        let end_a = UdpSocket::bind(loopback()).await.expect("bind a");
        let end_b = UdpSocket::bind(loopback()).await.expect("bind b");
        let proxy = CableProxy::bind(CableProxyPlan {
            a: CableSide {
                node: 0,
                listen: loopback(),
                end: end_a.local_addr().expect("addr"),
            },
            b: CableSide {
                node: 1,
                listen: loopback(),
                end: end_b.local_addr().expect("addr"),
            },
        })
        .await
        .expect("bind proxy");
        let (side_a, side_b) = proxy.local_addrs().expect("addrs");
        end_a.connect(side_a).await.expect("connect a");
        end_b.connect(side_b).await.expect("connect b");
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            loop {
                let len = tokio::select! {
                    () = stop.cancelled() => return,
                    r = end_b.recv(&mut buf) => match r { Ok(n) => n, Err(_) => continue },
                };
                let Ok(request) = packet::decode(&buf[..len]) else {
                    continue;
                };
                let reply = Header {
                    kind: Kind::Reply,
                    ..request.header
                };
                let mut out = [0u8; 2048];
                if let Ok(datagram) = packet::encode(&reply, &[], len, &mut out) {
                    let _ = end_b.send(datagram).await;
                }
            }
        });
        let faults = Arc::new(Faults::with_seed(seed));
        let task = tokio::spawn(proxy.run(faults.clone(), shutdown.clone()));
        Cable {
            faults,
            end_a,
            shutdown,
            task,
        }
    }

    impl Cable {
        /// Sends probe `seq` from end a and waits up to `wait` for its reply.
        async fn round_trip(&self, seq: u64, wait: Duration) -> Option<u64> {
            let mut buf = [0u8; 64];
            let probe = packet::encode(&Header::request(ProbeClass::Small, seq), &[], 64, &mut buf)
                .expect("encodes");
            self.end_a.send(probe).await.expect("send");
            let mut reply = [0u8; 2048];
            loop {
                match tokio::time::timeout(wait, self.end_a.recv(&mut reply)).await {
                    Ok(Ok(n)) => {
                        let h = packet::decode(&reply[..n]).expect("a probe reply").header;
                        assert_eq!(h.kind, Kind::Reply);
                        if h.seq == seq {
                            return Some(h.seq);
                        }
                    }
                    _ => return None,
                }
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
    async fn a_cable_relays_round_trips_between_the_two_ends() {
        let cable = cable(1).await;
        assert_eq!(cable.round_trip(1, WAIT).await, Some(1));
        assert_eq!(cable.round_trip(2, WAIT).await, Some(2));
        cable.stop().await;
    }

    #[tokio::test]
    async fn a_cut_cable_drops_everything_and_relays_after_heal() {
        let cable = cable(1).await;
        cable.faults.update_link(1, 0, |f| f.cut = true);
        for seq in 0..5 {
            assert_eq!(cable.round_trip(seq, SILENCE).await, None);
        }
        cable.faults.update_link(0, 1, |f| f.cut = false);
        assert_eq!(cable.round_trip(99, WAIT).await, Some(99));
        cable.stop().await;
    }

    #[tokio::test]
    async fn a_lossy_cable_loses_about_the_asked_share_of_probes() {
        let cable = cable(7).await;
        cable.faults.update_link(0, 1, |f| f.loss_percent = 30);
        let sent = 200;
        let mut answered = 0;
        for seq in 0..sent {
            if cable
                .round_trip(seq, Duration::from_millis(100))
                .await
                .is_some()
            {
                answered += 1;
            }
        }
        // 30 % of round trips, not 30 % of each crossing (51 %).
        let lost = sent - answered;
        assert!((35..=85).contains(&lost), "lost {lost} of {sent}");
        cable.stop().await;
    }

    #[tokio::test]
    async fn a_slow_cable_adds_its_delay_once_per_round_trip() {
        let cable = cable(1).await;
        let delay = Duration::from_millis(150);
        cable.faults.update_link(0, 1, |f| f.delay = delay);
        for seq in 0..3 {
            let started = std::time::Instant::now();
            assert!(cable.round_trip(seq, WAIT).await.is_some());
            let took = started.elapsed();
            assert!(took >= delay, "{took:?}");
        }
        cable.faults.update_link(0, 1, |f| f.delay = Duration::ZERO);
        assert!(cable.round_trip(9, WAIT).await.is_some());
        cable.stop().await;
    }

    #[tokio::test]
    async fn a_slow_cable_bounds_the_datagrams_it_holds() {
        let cable = cable(1).await;
        cable
            .faults
            .update_link(0, 1, |f| f.delay = Duration::from_millis(500));
        let burst = MAX_IN_FLIGHT + 100;
        let mut buf = [0u8; 64];
        for seq in 0..burst {
            let seq = u64::try_from(seq).expect("small");
            let probe = packet::encode(&Header::request(ProbeClass::Small, seq), &[], 64, &mut buf)
                .expect("encodes");
            cable.end_a.send(probe).await.expect("send");
            if seq % 50 == 49 {
                // Lets the proxy keep up, so the kernel buffer drops nothing.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let mut received = 0;
        let mut reply = [0u8; 2048];
        while let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_secs(2), cable.end_a.recv(&mut reply)).await
        {
            received += 1;
        }
        assert!(received <= MAX_IN_FLIGHT + 1, "received {received}");
        assert!(received > 0);
        cable.stop().await;
    }

    #[tokio::test]
    async fn a_stranger_is_not_relayed() {
        let cable = cable(1).await;
        let side_a = cable.end_a.peer_addr().expect("side a");
        let stranger = UdpSocket::bind(loopback()).await.expect("bind");
        let mut buf = [0u8; 64];
        let probe = packet::encode(&Header::request(ProbeClass::Small, 5), &[], 64, &mut buf)
            .expect("encodes");
        stranger.send_to(probe, side_a).await.expect("send");
        let mut reply = [0u8; 64];
        let heard = tokio::time::timeout(SILENCE, stranger.recv(&mut reply)).await;
        assert!(heard.is_err(), "the cable relayed a stranger's datagram");
        cable.stop().await;
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

    async fn tcp_proxy(gate: Gate) -> (Arc<Faults>, SocketAddr, CancellationToken) {
        let shutdown = CancellationToken::new();
        let upstream = tcp_echo(shutdown.clone()).await;
        let faults = Arc::new(Faults::with_seed(1));
        let proxy = TcpProxy::bind(TcpProxyPlan {
            gate,
            listen: loopback(),
            upstream,
        })
        .await
        .expect("bind");
        let addr = proxy.local_addr().expect("addr");
        tokio::spawn(proxy.run(faults.clone(), shutdown.clone()));
        (faults, addr, shutdown)
    }

    async fn closed(stream: &mut TcpStream) -> bool {
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("the open connection is closed");
        matches!(read, Ok(0) | Err(_))
    }

    #[tokio::test]
    async fn the_management_relay_follows_partitions() {
        let (faults, addr, shutdown) = tcp_proxy(Gate::Management { from: 0, to: 1 }).await;
        let mut open = TcpStream::connect(addr).await.expect("connect");
        assert_eq!(
            echo(&mut open, b"hello").await.as_deref(),
            Some(&b"hello"[..])
        );

        faults.update_link(0, 1, |f| f.cut = true);
        assert!(
            echo(&mut open, b"cable").await.is_some(),
            "a cut leaves it alone"
        );

        faults.partition(&[vec![0], vec![1, 2]]);
        assert!(closed(&mut open).await);
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
    }

    #[tokio::test]
    async fn the_cable_relay_follows_cuts() {
        let (faults, addr, shutdown) = tcp_proxy(Gate::Cable { a: 0, b: 1 }).await;
        let mut open = TcpStream::connect(addr).await.expect("connect");
        assert!(echo(&mut open, b"over the cable").await.is_some());
        faults.partition(&[vec![0], vec![1]]);
        assert!(
            echo(&mut open, b"still").await.is_some(),
            "a partition leaves it alone"
        );
        faults.update_link(1, 0, |f| f.cut = true);
        assert!(closed(&mut open).await);
        let mut refused = TcpStream::connect(addr)
            .await
            .expect("accepted, then closed");
        assert_eq!(echo(&mut refused, b"cut").await, None);
        faults.update_link(0, 1, |f| f.cut = false);
        let mut healed = TcpStream::connect(addr).await.expect("connect");
        assert!(echo(&mut healed, b"healed").await.is_some());
        shutdown.cancel();
    }
}
