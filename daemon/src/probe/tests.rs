//! Loopback tests of responder, prober and probe set. Only 127.0.0.0/8 is
//! ever used; each test has its own 127.77.N.x addresses, or its own ports
//! on 127.0.0.1, so tests running in parallel cannot answer each other's
//! probes. Time limits are generous bounds against hanging, not speed
//! assertions.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use meshd_proto::domain::{LinkEnd, LinkObservation, NodeId};

use meshd_model::verdict::LocalObservation;
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::packet::{self, Header, Kind};
use super::responder::REPLY_BURST;
use super::*;

const PATIENCE: Duration = Duration::from_secs(15);

fn ip(n: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 77, n, host))
}

fn end(node: &str, address: IpAddr) -> LinkEnd {
    LinkEnd {
        address: Some(address),
        iface: Some("lo".to_owned()),
        ..LinkEnd::node_only(NodeId::new(node).expect("valid node id"))
    }
}

/// Outside Linux only 127.0.0.1 is usually configured; skip rather than fail.
async fn loopback_usable(addr: IpAddr) -> bool {
    match UdpSocket::bind(SocketAddr::new(addr, 0)).await {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipping: cannot bind {addr} ({e}); needs 127.0.0.0/8 on lo");
            false
        }
    }
}

fn key((local, remote, _): &(LinkEnd, LinkEnd, LinkPorts)) -> LinkKey {
    LinkKey::from((local.clone(), remote.clone()))
}

fn fast_settings() -> ProberSettings {
    ProberSettings {
        interval: Duration::from_millis(20),
        payload_bytes: 64,
        mtu_interval: Duration::from_millis(50),
        mtu_payload_bytes: 1472,
        timeout: Duration::from_millis(200),
    }
}

async fn wait_for(
    rx: &mut watch::Receiver<Option<LocalObservation>>,
    what: &str,
    mut f: impl FnMut(&LinkObservation) -> bool,
) -> LinkObservation {
    let wanted = |o: &Option<LocalObservation>| o.as_ref().is_some_and(|l| f(&l.observation));
    let found = match tokio::time::timeout(PATIENCE, rx.wait_for(wanted)).await {
        Ok(Ok(o)) => o.as_ref().map(|l| l.observation.clone()),
        Ok(Err(_)) => panic!("prober stopped while waiting for {what}"),
        Err(_) => None,
    };
    match found {
        Some(o) => o,
        None => panic!("gave up waiting for {what}: {:#?}", *rx.borrow()),
    }
}

fn window(o: &LinkObservation, secs: u64) -> meshd_proto::domain::LossWindow {
    *o.loss_over(Duration::from_secs(secs))
        .expect("window present")
}

async fn start_responder(
    addr: IpAddr,
    cancel: &CancellationToken,
) -> (
    SocketAddr,
    Arc<ResponderCounters>,
    tokio::task::JoinHandle<()>,
) {
    let responder = Responder::bind(SocketAddr::new(addr, 0))
        .await
        .expect("responder binds");
    let bound = responder.local_addr();
    let counters = responder.counters();
    let task = tokio::spawn(responder.run(cancel.clone()));
    (bound, counters, task)
}

#[tokio::test]
async fn probes_are_answered_then_loss_shows_when_responder_stops() {
    let (a, b) = (ip(1, 1), ip(1, 2));
    if !loopback_usable(a).await || !loopback_usable(b).await {
        return;
    }
    let responder_cancel = CancellationToken::new();
    let (bound, counters, responder_task) = start_responder(b, &responder_cancel).await;

    let prober = Prober::bind(end("a", a), end("b", b), bound.port(), fast_settings())
        .await
        .expect("prober binds");
    assert_eq!(prober.local_addr().ip(), a);
    assert_eq!(prober.peer_addr(), bound);
    let mut rx = prober.subscribe();
    let cancel = CancellationToken::new();
    let prober_task = tokio::spawn(prober.run(cancel.clone()));

    let healthy = wait_for(&mut rx, "answered small and MTU probes", |o| {
        o.rtt.samples >= 10 && window(o, 1).sent >= 10 && o.mtu_loss[0].sent >= 3
    })
    .await;
    assert_eq!(window(&healthy, 1).lost, 0, "{healthy:#?}");
    assert_eq!(window(&healthy, 60).lost, 0);
    assert_eq!(healthy.mtu_loss[0].lost, 0);
    assert_eq!(healthy.probes_lost_total, 0);
    assert!(healthy.rtt.max > Duration::ZERO);
    assert!(healthy.rtt.p50 > Duration::ZERO);
    assert!(healthy.rtt.p50 <= healthy.rtt.p99);
    assert!(healthy.last_reply_at.is_some());
    assert_eq!(healthy.consecutive_lost, 0);
    assert!(healthy.rtt_histogram.counts.iter().sum::<u64>() >= 10);
    assert_eq!(healthy.local.address, Some(a));
    assert!(counters.snapshot().replies >= 13);

    responder_cancel.cancel();
    responder_task.await.expect("responder task ends");

    let dead = wait_for(&mut rx, "a 1 s window of pure loss", |o| {
        let w = window(o, 1);
        o.consecutive_lost >= 10 && w.sent >= 5 && w.lost == w.sent
    })
    .await;
    assert!((window(&dead, 1).ratio() - 1.0).abs() < f64::EPSILON);
    assert!(
        dead.silence >= Duration::from_millis(200),
        "{:?}",
        dead.silence
    );
    assert!(dead.mtu_loss[0].lost > 0);
    assert!(dead.probes_lost_total >= 10);
    let later = wait_for(&mut rx, "silence to grow", |o| o.silence > dead.silence).await;
    assert!(later.consecutive_lost >= dead.consecutive_lost);

    cancel.cancel();
    prober_task.await.expect("prober task ends");
}

#[tokio::test]
async fn jumbo_mtu_probes_are_answered_and_counted_apart() {
    let (a, b) = (ip(2, 1), ip(2, 2));
    if !loopback_usable(a).await || !loopback_usable(b).await {
        return;
    }
    let cancel = CancellationToken::new();
    let (bound, _, _) = start_responder(b, &cancel).await;
    let settings = ProberSettings {
        mtu_payload_bytes: 8972,
        ..fast_settings()
    };
    let prober = Prober::bind(end("a", a), end("b", b), bound.port(), settings)
        .await
        .expect("binds");
    let mut rx = prober.subscribe();
    tokio::spawn(prober.run(cancel.clone()));
    let o = wait_for(&mut rx, "MTU probes answered", |o| o.mtu_loss[2].sent >= 5).await;
    assert_eq!(o.mtu_loss[2].lost, 0);
    let windows: Vec<Duration> = o.mtu_loss.iter().map(|w| w.window).collect();
    assert_eq!(
        windows,
        [1, 10, 60].map(Duration::from_secs).to_vec(),
        "shortest first"
    );
    cancel.cancel();
}

#[tokio::test]
async fn garbage_is_counted_and_never_answered() {
    let (client_ip, b) = (ip(3, 1), ip(3, 2));
    if !loopback_usable(client_ip).await || !loopback_usable(b).await {
        return;
    }
    let cancel = CancellationToken::new();
    let (bound, counters, _) = start_responder(b, &cancel).await;
    let client = UdpSocket::bind(SocketAddr::new(client_ip, 0))
        .await
        .expect("binds");
    client.connect(bound).await.expect("connects");

    let mut buf = [0u8; 2048];
    let reply_kind = Header {
        kind: Kind::Reply,
        ..Header::request(ProbeClass::Small, 1)
    };
    let reply_bytes = packet::encode(&reply_kind, 64, &mut buf)
        .expect("encodes")
        .to_vec();
    let garbage: [&[u8]; 4] = [b"", b"hello", &[0xFF; 64], &reply_bytes];
    for g in garbage {
        client.send(g).await.expect("sends");
    }
    // A valid request last: loopback keeps order, so the first reply being
    // this one proves none of the garbage was answered.
    let mut request = packet::encode(&Header::request(ProbeClass::Mtu, 42), 100, &mut buf)
        .expect("encodes")
        .to_vec();
    request[40] = 0xEE; // sender junk after the header is not echoed
    client.send(&request).await.expect("sends");

    let mut reply = [0u8; 4096];
    let len = tokio::time::timeout(PATIENCE, client.recv(&mut reply))
        .await
        .expect("a reply")
        .expect("recv works");
    assert_eq!(len, 100, "same size as the request, never larger");
    let h = packet::decode(&reply[..len]).expect("valid reply");
    assert_eq!((h.kind, h.class, h.seq), (Kind::Reply, ProbeClass::Mtu, 42));
    assert!(h.send_ns >= h.recv_ns);
    assert!(reply[32..len].iter().all(|b| *b == 0));

    let nothing = tokio::time::timeout(Duration::from_millis(200), client.recv(&mut reply)).await;
    assert!(nothing.is_err(), "garbage must not be answered");
    let stats = counters.snapshot();
    assert_eq!(stats.invalid, 4);
    assert_eq!(stats.replies, 1);
    cancel.cancel();
}

#[tokio::test]
async fn responder_rate_limits_a_flood() {
    let (client_ip, b) = (ip(4, 1), ip(4, 2));
    if !loopback_usable(client_ip).await || !loopback_usable(b).await {
        return;
    }
    let cancel = CancellationToken::new();
    let (bound, counters, _) = start_responder(b, &cancel).await;
    let client = UdpSocket::bind(SocketAddr::new(client_ip, 0))
        .await
        .expect("binds");
    client.connect(bound).await.expect("connects");
    let mut buf = [0u8; 64];
    for seq in 0..300 {
        let request = packet::encode(&Header::request(ProbeClass::Small, seq), 64, &mut buf)
            .expect("encodes");
        client.send(request).await.expect("sends");
    }
    // Wait until the responder has handled what reached it.
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let s = counters.snapshot();
        let handled = s.replies + s.rate_limited;
        if handled == last {
            break;
        }
        last = handled;
    }
    let s = counters.snapshot();
    assert!(s.rate_limited > 0, "{s:?}");
    assert!(s.replies < 300, "{s:?}");
    assert!(
        s.replies >= u64::from(REPLY_BURST),
        "the burst is answered: {s:?}"
    );
    cancel.cancel();
}

#[tokio::test]
async fn bind_errors_name_the_address() {
    let b = ip(5, 2);
    if !loopback_usable(b).await {
        return;
    }
    let taken = Responder::bind(SocketAddr::new(b, 0)).await.expect("binds");
    let err = Responder::bind(taken.local_addr())
        .await
        .expect_err("port is taken");
    assert!(matches!(err, ProbeError::Bind { addr, .. } if addr == taken.local_addr()));
    assert!(
        err.to_string().contains(&taken.local_addr().to_string()),
        "{err}"
    );
}

#[tokio::test]
async fn probe_set_rejects_unusable_links() {
    let cancel = CancellationToken::new();
    let settings = crate::config::settings::prober(&crate::config::ProbeConfig::default());
    let ports = LinkPorts {
        local: crate::config::DEFAULT_PROBE_PORT,
        peer: crate::config::DEFAULT_PROBE_PORT,
    };
    let no_address = LinkEnd::node_only(NodeId::new("b").expect("valid"));
    let err = ProbeSet::start(
        [(end("a", ip(6, 1)), no_address, ports)],
        settings,
        None,
        &cancel,
    )
    .await
    .expect_err("remote has no address");
    assert!(
        matches!(err, ProbeError::MissingAddress { end: "remote", .. }),
        "{err}"
    );

    let v6 = end("b", IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
    let err = ProbeSet::start([(end("a", ip(6, 1)), v6, ports)], settings, None, &cancel)
        .await
        .expect_err("mixed families");
    assert!(
        matches!(err, ProbeError::AddressFamilyMismatch { .. }),
        "{err}"
    );

    if !loopback_usable(ip(6, 1)).await {
        return;
    }
    let link = (end("a", ip(6, 1)), end("b", ip(6, 2)), ports);
    let err = ProbeSet::start([link.clone(), link], settings, None, &cancel)
        .await
        .expect_err("duplicate");
    assert!(matches!(err, ProbeError::DuplicateLink { .. }), "{err}");
}

/// Ports the OS says are free on 127.0.0.1, all different.
async fn free_ports<const N: usize>() -> [u16; N] {
    let mut held = Vec::with_capacity(N);
    for _ in 0..N {
        held.push(UdpSocket::bind("127.0.0.1:0").await.expect("binds"));
    }
    std::array::from_fn(|i| held[i].local_addr().expect("has address").port())
}

#[tokio::test]
async fn two_probe_sets_measure_a_cable_from_both_ends() {
    // Only 127.0.0.1, which every host has: node a's two cables and node
    // b's one all end on it, each end's responder on its own port, as two
    // cables of one node sharing an address would.
    let here = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let [a_to_b_port, a_to_c_port, b_to_a_port, absent] = free_ports().await;
    let settings = fast_settings();
    let cancel = CancellationToken::new();
    let a_to_b = (
        end("a", here),
        end("b", here),
        LinkPorts {
            local: a_to_b_port,
            peer: b_to_a_port,
        },
    );
    let b_to_a = (
        end("b", here),
        end("a", here),
        LinkPorts {
            local: b_to_a_port,
            peer: a_to_b_port,
        },
    );
    // Node a also has a second cable to a node "c" whose responder is absent.
    let a_to_c = (
        end("a", here),
        end("c", here),
        LinkPorts {
            local: a_to_c_port,
            peer: absent,
        },
    );
    let identity = meshd_proto::domain::NodeIdentity {
        id: NodeId::new("a").expect("id"),
        incarnation: meshd_proto::domain::Incarnation(1),
        version: "test".into(),
        hostname: "a".into(),
    };
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::new(&identity));
    let set_a = ProbeSet::start(
        [a_to_b.clone(), a_to_c.clone()],
        settings,
        Some(metrics.clone()),
        &cancel,
    )
    .await
    .expect("node a starts");
    let set_b = ProbeSet::start([b_to_a.clone()], settings, None, &cancel)
        .await
        .expect("node b starts");
    assert_eq!(set_a.observations().len(), 2);
    // Replies of each of node a's responders, by port.
    let replies = || -> std::collections::BTreeMap<u16, u64> {
        set_a
            .responder_stats()
            .iter()
            .map(|(addr, stats)| {
                assert_eq!(addr.ip(), here);
                (addr.port(), stats.replies)
            })
            .collect()
    };
    let mut expected = vec![a_to_b_port, a_to_c_port];
    expected.sort_unstable();
    assert_eq!(
        replies().into_keys().collect::<Vec<_>>(),
        expected,
        "one responder per cable end"
    );

    let mut rx_ab = set_a.observation(&key(&a_to_b)).expect("a->b");
    let mut rx_ba = set_b.observation(&key(&b_to_a)).expect("b->a");
    let mut rx_ac = set_a.observation(&key(&a_to_c)).expect("a->c");
    for rx in [&mut rx_ab, &mut rx_ba] {
        let o = wait_for(rx, "answered probes", |o| o.rtt.samples >= 5).await;
        assert_eq!(o.probes_lost_total, 0, "{o:#?}");
        // Every answered small probe is in the histogram that is exported.
        let counted: u64 = o.rtt_histogram.counts.iter().sum();
        assert!(counted >= 5, "{o:#?}");
    }
    let o = wait_for(&mut rx_ac, "loss to the absent peer", |o| {
        window(o, 1).lost >= 5
    })
    .await;
    assert_eq!(window(&o, 1).lost, window(&o, 1).sent);
    assert!(set_b.responder_stats()[0].1.replies > 0);
    // b's probes reached the responder of a's cable to b, not the other one.
    let replies = replies();
    assert!(replies[&a_to_b_port] >= 5, "{replies:?}");
    assert_eq!(replies[&a_to_c_port], 0, "{replies:?}");
    let exported = metrics.render(&crate::aggregator::Published::placeholder(&identity));
    let answered = exported
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!(
                "meshd_probe_responder_datagrams_total{{address=\"{here}:{a_to_b_port}\",outcome=\"answered\"}} "
            ))
        })
        .and_then(|n| n.parse::<u64>().ok());
    assert!(
        answered.is_some_and(|n| n > 0),
        "a's responder answers b, and its counters are exported: {exported}"
    );

    set_a.shutdown().await;
    // Node a's responder is gone: b now sees loss.
    wait_for(&mut rx_ba, "loss after node a stops", |o| {
        o.consecutive_lost >= 5
    })
    .await;
    drop(set_b);
    // Dropping the set stops the prober, which closes the channel.
    let closed =
        tokio::time::timeout(PATIENCE, async { while rx_ba.changed().await.is_ok() {} }).await;
    assert!(
        closed.is_ok(),
        "prober did not stop when its set was dropped"
    );
}
