//! One real node in-process: gRPC status, health and reflection, HTTP
//! metrics and health, graceful shutdown, and a clear error on a taken port.

mod common;

use common::{channel, http_get, loopback_config, start, stop};
use meshd_domain::{AlarmKind, MeshStatus, NodeState};
use meshd_proto::wire;
use meshd_proto::wire::mesh_client::MeshClient;
use tokio_stream::StreamExt;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

#[tokio::test]
async fn single_node_reports_itself_healthy() {
    let node = start(&loopback_config()).await;
    let mut client = MeshClient::new(channel(node.grpc_addr).await);
    let reply = client
        .get_status(wire::GetStatusRequest {})
        .await
        .expect("status")
        .into_inner();
    let status = MeshStatus::try_from(reply).expect("well-formed status");

    assert_eq!(status.node.id.as_str(), "test-host", "named after the host");
    assert_eq!(status.node.hostname, common::HOSTNAME);
    assert!(status.quorum.has_quorum);
    assert_eq!(status.quorum.leader, Some(status.node.id.clone()));
    assert_eq!(status.nodes.len(), 1);
    assert_eq!(status.nodes[0].state, NodeState::Up);
    assert!(status.links.is_empty());
    assert!(status.alarms.is_empty());
    assert!(status.is_healthy());
    stop(node).await;
}

#[tokio::test]
async fn configured_peers_that_never_report_leave_the_node_without_quorum() {
    let mut config = loopback_config();
    config.peers = toml::from_str::<PeersOnly>(
        r#"
        [[peers]]
        id = "b"
        address = "127.0.0.1:1"
        [[peers]]
        id = "c"
        address = "127.0.0.1:2"
        "#,
    )
    .expect("peers")
    .peers;
    let certs = tempfile::tempdir().expect("tempdir");
    common::join_mesh(&mut config, certs.path());
    let node = start(&config).await;
    // Peers get `report.stale_after` to connect before they are down and
    // the missing quorum is an alarm.
    let settled = tokio::time::Instant::now() + config.report.stale_after;
    let deadline = settled + std::time::Duration::from_secs(10);
    let status = loop {
        let status = node.state.current();
        let peers_down = status
            .nodes
            .iter()
            .filter(|n| n.state == NodeState::Down)
            .count()
            == 2;
        if peers_down && status.alarms.iter().any(|a| a.kind == AlarmKind::NoQuorum) {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no no_quorum alarm: {status:#?}"
        );
        if tokio::time::Instant::now() < settled {
            assert!(
                status.alarms.is_empty(),
                "raised before it settled: {status:#?}"
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(!status.quorum.has_quorum);
    assert_eq!(status.quorum.leader, None);
    let states: Vec<(&str, NodeState)> = status
        .nodes
        .iter()
        .map(|n| (n.id.as_str(), n.state))
        .collect();
    assert_eq!(
        states,
        vec![
            ("b", NodeState::Down),
            ("c", NodeState::Down),
            ("test-host", NodeState::Up)
        ]
    );
    let kinds: Vec<AlarmKind> = status.alarms.iter().map(|a| a.kind).collect();
    assert_eq!(kinds, [AlarmKind::NoQuorum], "{:#?}", status.alarms);
    assert!(!status.is_healthy());
    stop(node).await;
}

#[derive(serde::Deserialize)]
struct PeersOnly {
    peers: Vec<meshd::config::PeerConfig>,
}

#[tokio::test]
async fn metrics_and_healthz_answer_over_http() {
    let node = start(&loopback_config()).await;
    // Let the aggregator evaluate a few times so the histogram has samples.
    tokio::time::sleep(meshd::state::MAX_LOOK_INTERVAL * 3).await;

    let (code, body) = http_get(node.metrics_addr, "/metrics").await;
    assert_eq!(code, 200);
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        body.lines().any(|l| l.starts_with("meshd_build_info{")
            && l.contains(&format!("version=\"{version}\""))
            && l.ends_with(" 1")),
        "{body}"
    );
    assert!(body.contains("# HELP meshd_build_info "), "{body}");
    assert!(body.contains("meshd_quorum_has_quorum 1"), "{body}");
    assert!(
        body.contains("meshd_node_state{node=\"test-host\",state=\"up\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("meshd_evaluation_duration_seconds_bucket{le=\"0.001\"}"),
        "a real histogram with buckets: {body}"
    );
    assert!(!body.contains("quantile="), "no summaries: {body}");

    let (code, body) = http_get(node.metrics_addr, "/healthz").await;
    assert_eq!(code, 200);
    let health: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(health["status"], "ok");
    assert_eq!(health["node"], "test-host");

    let (code, _) = http_get(node.metrics_addr, "/nope").await;
    assert_eq!(code, 404);
    stop(node).await;
}

#[tokio::test]
async fn grpc_health_reports_serving() {
    let node = start(&loopback_config()).await;
    let mut health = HealthClient::new(channel(node.grpc_addr).await);
    for service in ["", "meshd.v1.Mesh"] {
        let reply = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health check")
            .into_inner();
        assert_eq!(
            reply.status,
            ServingStatus::Serving as i32,
            "service {service:?}"
        );
    }
    stop(node).await;
}

async fn reflect(
    client: &mut ServerReflectionClient<tonic::transport::Channel>,
    request: MessageRequest,
) -> MessageResponse {
    let outbound = tokio_stream::once(ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    });
    let mut inbound = client
        .server_reflection_info(outbound)
        .await
        .expect("reflection call")
        .into_inner();
    inbound
        .next()
        .await
        .expect("one response")
        .expect("ok response")
        .message_response
        .expect("a message")
}

#[tokio::test]
async fn reflection_lists_and_describes_the_served_services() {
    let node = start(&loopback_config()).await;
    let mut client = ServerReflectionClient::new(channel(node.grpc_addr).await);

    let MessageResponse::ListServicesResponse(list) =
        reflect(&mut client, MessageRequest::ListServices(String::new())).await
    else {
        panic!("expected a service list");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    // Exactly the served services: every one of them, and nothing else.
    assert_eq!(names, common::SERVED_SERVICES);

    // Every listed service describes itself, reflection included: clients
    // that load every advertised service stop at the first that does not.
    for name in names {
        let answer = reflect(
            &mut client,
            MessageRequest::FileContainingSymbol(name.clone()),
        )
        .await;
        let MessageResponse::FileDescriptorResponse(files) = answer else {
            panic!("{name}: expected file descriptors, got {answer:?}");
        };
        assert!(!files.file_descriptor_proto.is_empty(), "{name}");
    }
    stop(node).await;
}

#[tokio::test]
async fn event_stream_ends_when_the_node_shuts_down() {
    let node = start(&loopback_config()).await;
    let mut client = MeshClient::new(channel(node.grpc_addr).await);
    let mut events = client
        .watch_events(wire::WatchEventsRequest {})
        .await
        .expect("watch")
        .into_inner();
    let opening = tokio::time::timeout(std::time::Duration::from_secs(10), events.next())
        .await
        .expect("the stream opens with the status")
        .expect("stream open")
        .expect("snapshot");
    assert_eq!(opening.kind, wire::EventKind::Snapshot as i32);
    node.shutdown();
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), events.next())
        .await
        .expect("the stream ends instead of hanging");
    assert!(
        next.is_none_or(|item| item.is_err()),
        "no event without a change"
    );
    tokio::time::timeout(std::time::Duration::from_secs(10), node.wait())
        .await
        .expect("stops")
        .expect("clean");
}

#[tokio::test]
async fn a_taken_port_fails_the_start_naming_the_address() {
    let holder = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let taken = holder.local_addr().expect("addr");
    let mut config = loopback_config();
    config.listen.metrics = taken;
    let err = meshd::node::RunningNode::start(&config, common::HOSTNAME)
        .await
        .expect_err("port is taken");
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("cannot listen for metrics on {taken}:")),
        "{message}"
    );
}

#[tokio::test]
async fn watch_streams_every_event_live_while_the_channel_serves_other_calls() {
    use meshd_domain::{Event, EventKind};
    let node = start(&loopback_config()).await;
    let channel = channel(node.grpc_addr).await;
    let mut client = MeshClient::new(channel.clone());
    let mut events = client
        .watch_events(wire::WatchEventsRequest {})
        .await
        .expect("watch")
        .into_inner();
    let opening = tokio::time::timeout(std::time::Duration::from_secs(5), events.next())
        .await
        .expect("the stream opens with the status")
        .expect("stream open")
        .expect("snapshot");
    let Some(wire::event::Detail::Snapshot(status)) = &opening.detail else {
        panic!("the first message is a snapshot: {opening:?}");
    };
    assert_eq!(
        status.node.as_ref().map(|n| n.id.as_str()),
        Some(node.identity.id.as_str())
    );
    let mut last = opening.sequence;
    for i in 0..3 {
        node.notices
            .send(Event {
                at: std::time::SystemTime::now(),
                observer: node.identity.id.clone(),
                kind: EventKind::ConfigReloaded,
                subject: "config".into(),
                summary: format!("event {i}"),
                detail: None,
            })
            .await
            .expect("the aggregator takes notices");
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), events.next())
            .await
            .unwrap_or_else(|_| panic!("event {i} did not arrive"))
            .expect("stream open")
            .expect("event");
        assert_eq!(got.summary, format!("event {i}"));
        assert!(
            got.sequence > last,
            "numbered in order: {got:?} after {last}"
        );
        last = got.sequence;
        // A unary call on the same channel between two events.
        MeshClient::new(channel.clone())
            .get_status(wire::GetStatusRequest {})
            .await
            .expect("status");
    }
    stop(node).await;
}

/// Past [`meshd::grpc::MAX_EVENT_STREAMS`] open event streams (from any
/// number of connections) a new one is refused with RESOURCE_EXHAUSTED,
/// the node keeps answering everything else, and a stream that closes
/// frees its place.
#[tokio::test]
async fn event_streams_beyond_the_cap_are_refused_and_a_closed_one_frees_its_place() {
    use meshd::grpc::MAX_EVENT_STREAMS;
    use meshd::ports::EVENT_STREAMS_PER_CONNECTION;
    let node = start(&loopback_config()).await;
    let mut open = Vec::new();
    // Many connections, as many clients would open them, each with its
    // share.
    for _ in 0..MAX_EVENT_STREAMS / EVENT_STREAMS_PER_CONNECTION {
        let mut client = MeshClient::new(channel(node.grpc_addr).await);
        for _ in 0..EVENT_STREAMS_PER_CONNECTION {
            let stream = client
                .watch_events(wire::WatchEventsRequest {})
                .await
                .expect("within the cap")
                .into_inner();
            open.push(stream);
        }
    }
    let mut client = MeshClient::new(channel(node.grpc_addr).await);
    let refused = client
        .watch_events(wire::WatchEventsRequest {})
        .await
        .expect_err("one past the cap");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused
            .message()
            .contains(&format!("already serves {MAX_EVENT_STREAMS} event streams")),
        "{refused:?}"
    );
    client
        .get_status(wire::GetStatusRequest {})
        .await
        .expect("status still answers at the cap");

    drop(open.pop());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match client.watch_events(wire::WatchEventsRequest {}).await {
            Ok(_) => break,
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "a closed stream never freed its place"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(other) => panic!("unexpected refusal: {other:?}"),
        }
    }
    stop(node).await;
}

/// Peak resident memory of this test process (the node runs inside it),
/// from /proc; `None` where there is no procfs.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// 8000 made-up ranks for the ring backend used to be laid out as an
/// 8000 x 8000 matrix before any rank was checked (1.5 GB); they are now
/// refused at the first made-up rank, before anything is built. The peak memory is printed
/// for the record, not asserted.
#[tokio::test]
async fn a_hostfile_request_for_thousands_of_made_up_ranks_is_refused_before_any_work() {
    use meshd_proto::wire::topology_client::TopologyClient;
    let node = start(&loopback_config()).await;
    let mut topology = TopologyClient::new(channel(node.grpc_addr).await);
    let before = peak_rss_kib();
    let refused = topology
        .get_hostfile(wire::GetHostfileRequest {
            backend: wire::HostfileBackend::JacclRing as i32,
            ranks: (0..8000).map(|i| format!("n{i}")).collect(),
            ..Default::default()
        })
        .await
        .expect_err("made-up ranks");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused
            .message()
            .starts_with("ranks[0]: n0 is not a member of the mesh; its members are "),
        "{refused:?}"
    );
    eprintln!(
        "peak RSS of the test process around an 8000-rank GetHostfile: {before:?} KiB before, {:?} KiB after",
        peak_rss_kib()
    );
    stop(node).await;
}

/// A request whose headers never end is cut at the HTTP port's header
/// deadline, and a keep-alive connection that sends no next request too;
/// a whole request on the next connection is served as ever.
#[tokio::test]
async fn half_sent_and_idle_keep_alive_http_connections_are_closed_at_the_header_deadline() {
    use meshd::ports::HTTP_HEADER_READ_TIMEOUT;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = start(&loopback_config()).await;
    let within = HTTP_HEADER_READ_TIMEOUT + std::time::Duration::from_secs(5);

    let mut half_sent = tokio::net::TcpStream::connect(node.metrics_addr)
        .await
        .expect("connect");
    half_sent
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(within, half_sent.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "a half-sent request still open after {within:?}"
    );

    let mut keep_alive = tokio::net::TcpStream::connect(node.metrics_addr)
        .await
        .expect("connect");
    keep_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(within, keep_alive.read_to_end(&mut answer)).await;
    assert!(
        closed.is_ok(),
        "an idle keep-alive still open after {within:?}"
    );
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    let (code, _) = http_get(node.metrics_addr, "/healthz").await;
    assert_eq!(code, 200);
    stop(node).await;
}
