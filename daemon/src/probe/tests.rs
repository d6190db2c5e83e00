//! Loopback tests of the probe task. Only 127.0.0.1 is used, every cable end
//! on its own port the OS said was free, so tests running in parallel
//! cannot answer each other's probes. Time limits are generous bounds
//! against hanging, not speed assertions.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use meshd_domain::fixtures::{end, id, identity};
use meshd_domain::{LinkEnd, LossWindow};
use meshd_model::linkstats::ProbeStats;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::packet::{self, Header, Kind};
use super::responder::REPLY_BURST;
use super::*;

const PATIENCE: Duration = Duration::from_secs(15);
const HERE: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// `node`'s end of a cable on the loopback interface.
fn loopback_end(node: &str) -> LinkEnd {
    LinkEnd {
        address: Some(HERE),
        ..end(node, "lo")
    }
}

/// The cable from `local` to `remote`, this end's socket on `ports.local`.
fn cable(local: &str, remote: &str, ports: LinkPorts) -> ProbedLink {
    ProbedLink {
        link: ExpectedLink {
            local: loopback_end(local),
            remote: loopback_end(remote),
            expected_speed_bps: None,
        },
        ports,
    }
}

fn ports(local: u16, peer: u16) -> LinkPorts {
    LinkPorts { local, peer }
}

fn fast_settings() -> ProberSettings {
    ProberSettings {
        interval: Duration::from_millis(20),
        payload_bytes: 64,
        mtu_interval: Duration::from_millis(50),
        mtu_payload_bytes: 1472,
        timeout: Duration::from_millis(200),
        outage_gap: Duration::from_millis(500),
    }
}

/// Ports the OS says are free on 127.0.0.1, all different.
async fn free_ports<const N: usize>() -> [u16; N] {
    let mut held = Vec::with_capacity(N);
    for _ in 0..N {
        held.push(UdpSocket::bind((HERE, 0)).await.expect("binds"));
    }
    std::array::from_fn(|i| held[i].local_addr().expect("has address").port())
}

fn metrics(node: &str) -> Arc<Metrics> {
    Arc::new(Metrics::new(&identity(node, 1)))
}

/// A node's probe task and what stops it.
struct Node {
    probes: Probes,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
}

fn start(node: &str, links: Vec<ProbedLink>, settings: ProberSettings) -> Node {
    let metrics = metrics(node);
    let stop = CancellationToken::new();
    let probes = Probes::start(links, settings, metrics.clone(), stop.clone());
    Node {
        probes,
        metrics,
        stop,
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Waits until the statistics of the link to `peer` satisfy `f`, reading
/// the board every 10 ms.
async fn wait_for(
    node: &Node,
    peer: &str,
    what: &str,
    mut f: impl FnMut(&ProbeStats) -> bool,
) -> ProbeStats {
    let rx = node.probes.subscribe();
    let peer = id(peer);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let read = rx.borrow().read(std::time::Instant::now());
        if let Some(stats) = read.links.get(&peer).filter(|s| f(s)) {
            return stats.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what}: {read:#?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn window(windows: &[LossWindow], secs: u64) -> LossWindow {
    *windows
        .iter()
        .find(|w| w.window == Duration::from_secs(secs))
        .expect("window present")
}

/// The responder counter of the socket on `port` for `outcome`, as the
/// node's metrics hold it (the export sums every socket of the node).
fn exported(metrics: &Metrics, port: u16, outcome: &str) -> Option<u64> {
    let s = metrics
        .probes
        .responder_stats(SocketAddr::new(HERE, port))?;
    match outcome {
        "answered" => Some(s.replies),
        "invalid" => Some(s.invalid),
        "rate_limited" => Some(s.rate_limited),
        _ => None,
    }
}

#[tokio::test]
async fn both_ends_of_a_cable_measure_it_then_see_loss_when_the_peer_stops() {
    let [pa, pb] = free_ports().await;
    let a = start("a", vec![cable("a", "b", ports(pa, pb))], fast_settings());
    let b = start("b", vec![cable("b", "a", ports(pb, pa))], fast_settings());

    for (node, peer) in [(&a, "b"), (&b, "a")] {
        let healthy = wait_for(node, peer, "answered small and MTU probes", |s| {
            s.rtt.samples >= 10 && window(&s.mtu_loss, 1).sent >= 3
        })
        .await;
        assert_eq!(healthy.probes_lost_total, 0, "{healthy:#?}");
        assert_eq!(window(&healthy.loss, 60).lost, 0);
        assert!(healthy.rtt.p50 > Duration::ZERO);
        assert!(healthy.rtt.p50 <= healthy.rtt.p99);
        assert!(healthy.last_reply_at.is_some());
        assert_eq!(healthy.consecutive_lost, 0);
        // At most the probe in flight goes unanswered.
        assert!(healthy.silence < fast_settings().timeout, "{healthy:#?}");
        assert!(healthy.rtt_histogram.counts.iter().sum::<u64>() >= 10);
    }
    assert!(exported(&b.metrics, pb, "answered").is_some_and(|n| n >= 13));

    // A wake-up when the link starts losing in a row (3 probes), when a
    // burst confirms its silence and when it goes silent (the outage gap),
    // not one per tick; and each wake-up is for what the board then reads.
    let mut woken = a.probes.subscribe();
    woken.borrow_and_update();
    b.stop.cancel();
    let silent = tokio::time::timeout(PATIENCE, async {
        loop {
            woken.changed().await.expect("the probe task runs");
            let read = woken.borrow_and_update().read(std::time::Instant::now());
            let link = &read.links[&id("b")];
            let silent = link.silence >= fast_settings().outage_gap;
            assert!(
                silent || link.consecutive_lost >= 3 || link.silence_confirmed,
                "woken for nothing the board shows: {link:#?}"
            );
            if silent {
                break;
            }
        }
    })
    .await;
    assert!(silent.is_ok(), "silence was not signalled");

    let dead = wait_for(&a, "b", "a 1 s window of pure loss", |s| {
        let w = window(&s.loss, 1);
        s.consecutive_lost >= 10 && w.sent >= 5 && w.lost == w.sent
    })
    .await;
    assert!((window(&dead.loss, 1).ratio() - 1.0).abs() < f64::EPSILON);
    assert!(dead.probes_lost_total >= 10);
    let later = wait_for(&a, "b", "silence to grow", |s| s.silence > dead.silence).await;
    assert!(later.consecutive_lost >= dead.consecutive_lost);
}

/// A node probing slowly answers as soon as a request arrives, not on its
/// own (two-second) tick: the fast prober's 200 ms timeout would count
/// nearly every probe lost otherwise.
#[tokio::test]
async fn a_slow_prober_answers_requests_at_once() {
    let [pa, pb] = free_ports().await;
    let slow = ProberSettings {
        interval: Duration::from_secs(2),
        mtu_interval: Duration::from_secs(2),
        ..fast_settings()
    };
    let a = start("a", vec![cable("a", "b", ports(pa, pb))], fast_settings());
    let _b = start("b", vec![cable("b", "a", ports(pb, pa))], slow);
    let answered = wait_for(&a, "b", "50 probes answered by the slow prober", |s| {
        s.rtt.samples >= 50
    })
    .await;
    assert!(
        answered.probes_lost_total * 10 <= answered.probes_sent_total,
        "{answered:#?}"
    );
}

#[tokio::test]
async fn jumbo_mtu_probes_are_answered_and_counted_apart() {
    let [pa, pb] = free_ports().await;
    let settings = ProberSettings {
        mtu_payload_bytes: 8972,
        ..fast_settings()
    };
    let a = start("a", vec![cable("a", "b", ports(pa, pb))], settings);
    let _b = start("b", vec![cable("b", "a", ports(pb, pa))], settings);
    let s = wait_for(&a, "b", "MTU probes answered", |s| {
        window(&s.mtu_loss, 60).sent >= 5
    })
    .await;
    assert_eq!(window(&s.mtu_loss, 60).lost, 0);
    let windows: Vec<Duration> = s.mtu_loss.iter().map(|w| w.window).collect();
    assert_eq!(
        windows,
        [1, 10, 60].map(Duration::from_secs).to_vec(),
        "shortest first"
    );
}

/// A raw socket standing where node a's cable expects node b.
async fn fake_peer(at: u16, node_a_port: u16) -> UdpSocket {
    let socket = UdpSocket::bind((HERE, at)).await.expect("binds");
    socket.connect((HERE, node_a_port)).await.expect("connects");
    socket
}

/// The probe task's ticks are the node's measure of how late its timers
/// run (what the core judges saturation by), with no cable to probe too.
#[tokio::test(flavor = "current_thread")]
async fn a_runtime_held_up_shows_in_the_lateness_the_probe_task_notes() {
    let stop = CancellationToken::new();
    let probes = Probes::start(Vec::new(), fast_settings(), metrics("a"), stop.clone());
    let board = probes.subscribe();
    tokio::time::sleep(fast_settings().interval * 3).await;
    // Hold the only runtime thread well past the next tick: that tick can
    // only come that much later or more.
    let held = Duration::from_millis(150);
    std::thread::sleep(held + fast_settings().interval);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut worst = Duration::ZERO;
    while worst < held && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        worst = worst.max(
            board
                .borrow()
                .read(std::time::Instant::now())
                .lateness
                .worst,
        );
    }
    assert!(worst >= held, "{worst:?}");
    stop.cancel();
}

#[tokio::test]
async fn garbage_is_counted_and_never_answered() {
    let [pa, pb] = free_ports().await;
    let a = start("a", vec![cable("a", "b", ports(pa, pb))], fast_settings());
    let peer = fake_peer(pb, pa).await;
    // Node a probes the fake peer too; drain those so the first request-
    // shaped datagram below is a reply to us.
    let mut buf = [0u8; 2048];
    let reply_shaped = Header {
        kind: Kind::Reply,
        ..Header::request(ProbeClass::Small, 1)
    };
    let mut reply_bytes = packet::encode(&reply_shaped, &[], 64, &mut buf)
        .expect("encodes")
        .to_vec();
    // The fake peer is from before echoes: node a answers it with plain
    // replies.
    reply_bytes[7] = 0;
    let garbage: [&[u8]; 3] = [b"", b"hello", &[0xFF; 64]];
    for g in garbage {
        peer.send(g).await.expect("sends");
    }
    // A reply to no probe of a's is ignored, never answered.
    peer.send(&reply_bytes).await.expect("sends");
    let mut request = packet::encode(&Header::request(ProbeClass::Mtu, 42), &[], 100, &mut buf)
        .expect("encodes")
        .to_vec();
    request[7] = 0;
    request[40] = 0xEE; // sender junk after the header is not echoed
    peer.send(&request).await.expect("sends");

    let mut datagram = [0u8; 4096];
    let reply = tokio::time::timeout(PATIENCE, async {
        loop {
            let len = peer.recv(&mut datagram).await.expect("recv works");
            let h = packet::decode(&datagram[..len])
                .expect("valid datagram")
                .header;
            if h.kind == Kind::Reply {
                return (len, h);
            }
            // One of node a's own probes.
            assert_eq!(h.kind, Kind::Request);
        }
    })
    .await
    .expect("a reply");
    let (len, h) = reply;
    assert_eq!(len, 100, "same size as the request, never larger");
    assert_eq!((h.class, h.seq), (ProbeClass::Mtu, 42));
    assert!(h.send_ns >= h.recv_ns);
    assert!(datagram[32..len].iter().all(|b| *b == 0));
    assert_eq!(exported(&a.metrics, pa, "invalid"), Some(3));
    assert_eq!(exported(&a.metrics, pa, "answered"), Some(1));
}

/// Sends a request of `class`, `seq` and `len` bytes from the fake peer and
/// waits for the datagram of node a that answers it (skipping a's probes
/// that do not): that datagram's header and size.
async fn carrier_of(peer: &UdpSocket, class: ProbeClass, seq: u64, len: usize) -> (Header, usize) {
    let mut buf = vec![0u8; len];
    let request =
        packet::encode(&Header::request(class, seq), &[], len, &mut buf).expect("encodes");
    peer.send(request).await.expect("sends");
    let mut datagram = [0u8; 4096];
    tokio::time::timeout(PATIENCE, async {
        loop {
            let len = peer.recv(&mut datagram).await.expect("recv works");
            let got = packet::decode(&datagram[..len]).expect("valid datagram");
            assert!(got.reads_echoes);
            if let Some(answer) = got.answers().find(|answer| answer.seq == seq) {
                assert!(answer.held < PATIENCE, "{answer:?}");
                return (got.header, len);
            }
        }
    })
    .await
    .expect("answered in time")
}

/// A peer that reads echoes gets the answers to its requests inside node
/// a's own probes of the same class, one datagram each way and tick, and a
/// plain reply to a request no probe of a's carries.
#[tokio::test]
async fn a_peer_that_reads_echoes_is_answered_inside_the_nodes_probes() {
    let [pa, pb] = free_ports().await;
    // One MTU probe at the start, then none for an hour.
    let settings = ProberSettings {
        mtu_interval: Duration::from_secs(3600),
        ..fast_settings()
    };
    let a = start("a", vec![cable("a", "b", ports(pa, pb))], settings);
    let peer = fake_peer(pb, pa).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (carrier, len) = carrier_of(&peer, ProbeClass::Mtu, 1_000, 1472).await;
    assert_eq!(carrier.kind, Kind::Reply, "no MTU probe was due");
    assert_eq!(
        (carrier.class, carrier.seq, len),
        (ProbeClass::Mtu, 1_000, 1472)
    );
    for seq in 0..10 {
        let (carrier, len) = carrier_of(&peer, ProbeClass::Small, seq, 64).await;
        assert_eq!(
            carrier.kind,
            Kind::Request,
            "seq {seq} got a reply of its own"
        );
        assert_eq!((carrier.class, len), (ProbeClass::Small, 64));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(exported(&a.metrics, pa, "answered"), Some(11));
}

/// A peer that stops answering gets one burst of small probes beside a
/// tick's own once the silence is overdue, and the silence is confirmed
/// when the burst goes unanswered; the steady rate never changes.
#[tokio::test]
async fn a_silence_gets_one_burst_of_probes_and_is_confirmed_by_it() {
    use meshd_model::linkstats::BURST_PROBES;

    let [pa, pb] = free_ports().await;
    let settings = ProberSettings {
        interval: Duration::from_millis(50),
        mtu_interval: Duration::from_secs(3600),
        ..fast_settings()
    };
    let a = start("a", vec![cable("a", "b", ports(pa, pb))], settings);
    let peer = fake_peer(pb, pa).await;
    let mut datagram = [0u8; 4096];
    let mut reply = [0u8; 4096];
    let small_requests = |datagram: &[u8]| {
        packet::decode(datagram)
            .ok()
            .filter(|d| d.header.kind == Kind::Request && d.header.class == ProbeClass::Small)
            .map(|d| d.header)
    };
    // Answered for half a second.
    let answering_until = std::time::Instant::now() + Duration::from_millis(500);
    while std::time::Instant::now() < answering_until {
        let Ok(Ok(len)) =
            tokio::time::timeout(Duration::from_millis(100), peer.recv(&mut datagram)).await
        else {
            continue;
        };
        if let Some(request) = small_requests(&datagram[..len]) {
            let header = Header {
                kind: Kind::Reply,
                ..request
            };
            let out = packet::encode(&header, &[], len, &mut reply).expect("encodes");
            peer.send(out).await.expect("sends");
        }
    }
    // Then silent: when each small request arrives, for 800 ms.
    let mut arrivals = Vec::new();
    let silent_until = std::time::Instant::now() + Duration::from_millis(800);
    while std::time::Instant::now() < silent_until {
        if let Ok(Ok(len)) =
            tokio::time::timeout(Duration::from_millis(50), peer.recv(&mut datagram)).await
            && small_requests(&datagram[..len]).is_some()
        {
            arrivals.push(std::time::Instant::now());
        }
    }
    // Requests closer than a fifth of the period went out on one tick.
    let mut per_tick: Vec<usize> = Vec::new();
    for (i, at) in arrivals.iter().enumerate() {
        let same_tick = i > 0 && at.duration_since(arrivals[i - 1]) < Duration::from_millis(10);
        match per_tick.last_mut() {
            Some(count) if same_tick => *count += 1,
            _ => per_tick.push(1),
        }
    }
    let burst = usize::try_from(BURST_PROBES).expect("small") + 1;
    assert_eq!(
        per_tick.iter().filter(|n| **n == burst).count(),
        1,
        "one tick with the burst, the rest one probe each: {per_tick:?}"
    );
    assert!(
        per_tick.iter().all(|n| *n == 1 || *n == burst),
        "{per_tick:?}"
    );
    let confirmed = wait_for(&a, "b", "the silence confirmed", |s| s.silence_confirmed).await;
    assert!(confirmed.silence < settings.outage_gap.saturating_mul(2));
}

/// A request larger than this node's own probe of its class (the peer's
/// config says larger probes) gets a plain reply of its size: riding in
/// this node's probe would make that probe as large, and lost with it
/// where only the larger size cannot pass.
#[tokio::test]
async fn a_request_larger_than_the_nodes_own_probe_gets_a_plain_reply() {
    let [pa, pb] = free_ports().await;
    let _a = start("a", vec![cable("a", "b", ports(pa, pb))], fast_settings());
    let peer = fake_peer(pb, pa).await;
    let (carrier, len) = carrier_of(&peer, ProbeClass::Small, 77, 200).await;
    assert_eq!((carrier.kind, carrier.seq, len), (Kind::Reply, 77, 200));
}

#[tokio::test]
async fn datagrams_from_anyone_but_the_cables_peer_are_not_answered() {
    let [pa, pb] = free_ports().await;
    let a = start("a", vec![cable("a", "b", ports(pa, pb))], fast_settings());
    let stranger = UdpSocket::bind((HERE, 0)).await.expect("binds");
    let mut buf = [0u8; 64];
    let request = packet::encode(&Header::request(ProbeClass::Small, 7), &[], 64, &mut buf)
        .expect("encodes")
        .to_vec();
    let mut reply = [0u8; 128];
    for _ in 0..20 {
        stranger.send_to(&request, (HERE, pa)).await.expect("sends");
    }
    let nothing = tokio::time::timeout(Duration::from_millis(300), stranger.recv(&mut reply)).await;
    assert!(nothing.is_err(), "a stranger's request was answered");
    // The socket exists (its counters are exported) but heard nothing.
    assert_eq!(exported(&a.metrics, pa, "answered"), Some(0));
    assert_eq!(exported(&a.metrics, pa, "invalid"), Some(0));
}

#[tokio::test]
async fn a_flood_from_the_peer_is_rate_limited() {
    let [pa, pb] = free_ports().await;
    let a = start("a", vec![cable("a", "b", ports(pa, pb))], fast_settings());
    let peer = fake_peer(pb, pa).await;
    let mut buf = [0u8; 64];
    for seq in 0..300 {
        let request = packet::encode(&Header::request(ProbeClass::Small, seq), &[], 64, &mut buf)
            .expect("encodes");
        peer.send(request).await.expect("sends");
    }
    // Wait until node a has handled what reached it.
    let handled = || {
        exported(&a.metrics, pa, "answered").unwrap_or(0)
            + exported(&a.metrics, pa, "rate_limited").unwrap_or(0)
    };
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = handled();
        if now == last && now > 0 {
            break;
        }
        last = now;
    }
    let answered = exported(&a.metrics, pa, "answered").unwrap_or(0);
    let limited = exported(&a.metrics, pa, "rate_limited").unwrap_or(0);
    assert!(limited > 0, "answered {answered}, limited {limited}");
    assert!(answered < 300);
    assert!(answered >= u64::from(REPLY_BURST), "the burst is answered");
}

#[tokio::test]
async fn a_taken_port_names_the_address_and_is_retried_until_free() {
    let [pa, pb] = free_ports().await;
    let link = cable("a", "b", ports(pa, pb));
    let taken = UdpSocket::bind((HERE, pa)).await.expect("binds");
    let err = engine::bind(&link, false).await.expect_err("port is taken");
    assert!(
        matches!(err, ProbeError::Bind { addr, .. } if addr == SocketAddr::new(HERE, pa)),
        "{err}"
    );
    assert!(err.to_string().contains(&format!("{HERE}:{pa}")), "{err}");

    let a = start("a", vec![link], fast_settings());
    let _b = start("b", vec![cable("b", "a", ports(pb, pa))], fast_settings());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !a.probes
            .subscribe()
            .borrow()
            .read(std::time::Instant::now())
            .links
            .contains_key(&id("b")),
        "a cable without its socket has no statistics (and no verdict from this end)"
    );
    drop(taken);
    wait_for(&a, "b", "probing once the port is free", |s| {
        s.rtt.samples > 0
    })
    .await;
}

#[test]
fn a_cable_end_without_an_address_cannot_be_probed() {
    let mut link = cable("a", "b", ports(1, 2));
    link.link.remote.address = None;
    let err = link.addresses().expect_err("no peer address");
    assert!(
        matches!(err, ProbeError::MissingAddress { end: "peer", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("to b"), "{err}");
}

#[tokio::test]
async fn a_node_with_two_cables_on_one_address_tells_them_apart_by_port() {
    // Node a's two cables end on 127.0.0.1, each on its own port; node c's
    // end is absent.
    let [ab, ac, ba, absent] = free_ports().await;
    let a = start(
        "a",
        vec![
            cable("a", "b", ports(ab, ba)),
            cable("a", "c", ports(ac, absent)),
        ],
        fast_settings(),
    );
    let b = start("b", vec![cable("b", "a", ports(ba, ab))], fast_settings());
    for (node, peer) in [(&a, "b"), (&b, "a")] {
        let s = wait_for(node, peer, "answered probes", |s| s.rtt.samples >= 5).await;
        assert_eq!(s.probes_lost_total, 0, "{s:#?}");
    }
    let s = wait_for(&a, "c", "loss to the absent peer", |s| {
        window(&s.loss, 1).lost >= 5
    })
    .await;
    assert_eq!(window(&s.loss, 1).lost, window(&s.loss, 1).sent);
    assert!(s.rtt.samples == 0);
    // b's probes reached the socket of a's cable to b, not the other one.
    assert!(exported(&a.metrics, ab, "answered").is_some_and(|n| n >= 5));
    assert_eq!(exported(&a.metrics, ac, "answered"), Some(0));
}

#[tokio::test]
async fn a_new_config_keeps_unchanged_cables_and_drops_removed_ones() {
    let [ab, ac, ba, ca] = free_ports().await;
    let to_b = cable("a", "b", ports(ab, ba));
    let to_c = cable("a", "c", ports(ac, ca));
    let a = start("a", vec![to_b.clone(), to_c], fast_settings());
    let _b = start("b", vec![cable("b", "a", ports(ba, ab))], fast_settings());
    let before = wait_for(&a, "b", "answered probes", |s| s.rtt.samples >= 5).await;

    a.probes.apply(vec![to_b.clone()], fast_settings());
    let rx = a.probes.subscribe();
    tokio::time::timeout(PATIENCE, async {
        while rx
            .borrow()
            .read(std::time::Instant::now())
            .links
            .contains_key(&id("c"))
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the removed cable is gone");
    assert_eq!(
        exported(&a.metrics, ac, "answered"),
        None,
        "its socket closed"
    );
    let after = wait_for(&a, "b", "statistics", |_| true).await;
    assert!(
        after.probes_sent_total >= before.probes_sent_total,
        "the unchanged cable kept its statistics: {} then {}",
        before.probes_sent_total,
        after.probes_sent_total
    );

    // New probe settings are a new measurement: statistics start over.
    let slower = ProberSettings {
        interval: Duration::from_millis(40),
        ..fast_settings()
    };
    a.probes.apply(vec![to_b], slower);
    wait_for(&a, "b", "statistics started over", |s| {
        s.probes_sent_total < after.probes_sent_total
    })
    .await;
}

#[test]
fn the_board_reads_as_of_the_last_tick_so_a_reply_waiting_for_the_next_is_not_silence() {
    use meshd_model::linkstats::LinkStatsConfig;

    let t0 = std::time::Instant::now();
    let ms = Duration::from_millis;
    let mut stats = LinkStats::new(LinkStatsConfig {
        timeout: ms(500),
        outage_gap: ms(600),
        interval: ms(100),
        tick_gap: ms(128),
    });
    stats.on_sent(1, ProbeClass::Small, t0);
    stats.on_reply(1, ProbeClass::Small, Duration::ZERO, t0 + ms(1));
    // The next tick sends probe 2; its reply arrives a millisecond later
    // and waits in the socket, because the task then stalls.
    stats.on_sent(2, ProbeClass::Small, t0 + ms(100));
    let mut ticks = Ticks {
        drained_at: Some(t0 + ms(100)),
        due_by: Some(t0 + ms(228)),
        ..Ticks::default()
    };
    ticks.lateness.note(ms(30), t0 + ms(100));
    let ticks = Arc::new(Mutex::new(ticks));
    let board = ProbeBoard::new(
        [(id("b"), Arc::new(Mutex::new(stats)))].into(),
        ticks.clone(),
    );
    let read = board.read(t0 + ms(200));
    assert_eq!(
        (read.lateness.worst, read.lateness.held_up_total),
        (ms(30), ms(30)),
        "the next tick is not due yet"
    );
    let read = board.read(t0 + ms(750));
    let silence = read.links[&id("b")].silence;
    assert!(silence < ms(600), "{silence:?} would read as a dead cable");
    assert_eq!(
        (read.lateness.worst, read.lateness.held_up_total),
        (ms(522), ms(30 + 522)),
        "the stalled tick is as late as it is overdue, and held up since it was due"
    );
    assert_eq!(read.links[&id("b")].at, t0 + ms(100));
}
