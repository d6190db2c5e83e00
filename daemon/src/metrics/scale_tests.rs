//! How many series one node exports: within budget at 8 nodes, linear in
//! the mesh's size, and steady over time on a steady mesh. The node is fed
//! the fullest state a healthy Mac cluster gives (every optional link
//! figure, RDMA on every cable, error counters, every event kind, a
//! bridge, memory), so the count is the worst steady case, not the demo's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::facts::{CheckResult, CheckStatus, MemoryFacts, MemoryPressure};
use meshd_domain::fixtures::node_verdict;
use meshd_domain::{
    Blame, ClockOffset, Counter, EventKind, Incarnation, LinkEnd, LinkFigures, LinkObservation,
    LinkState, LinkVerdict, LossWindow, MeshStatus, NodeId, NodeIdentity, NodeState, PeerReport,
    Quorum, RdmaPortState, RttHistogram,
};
use meshd_model::fixtures::healthy_observation;
use meshd_model::job_watch::JobFigures;
use meshd_model::linkstats::RTT_BOUNDS;
use meshd_model::peers::{Path, PathLiveness, PeerView};

use super::ResponderCounters;
use super::exposition::VANISHED_HOLD;
use super::{AlertPostOutcome, Metrics, ReportOutcome};
use crate::state::Published;

/// The per-node checks meshd runs, as many as a Mac node reports.
const NODE_CHECKS: usize = 11;
/// The checks of the whole mesh.
const MESH_CHECKS: usize = 7;

fn id(i: usize) -> NodeId {
    NodeId::new(format!("n{i}")).expect("id")
}

fn identity(i: usize) -> NodeIdentity {
    NodeIdentity {
        id: id(i),
        incarnation: Incarnation(1),
        version: "0".to_owned(),
        hostname: format!("host{i}"),
    }
}

fn end(i: usize, iface: usize) -> LinkEnd {
    LinkEnd {
        iface: Some(format!("en{iface}")),
        ..LinkEnd::node_only(id(i))
    }
}

/// Node 0's observation of its cable to `peer`, every figure present.
fn observation(peer: usize) -> LinkObservation {
    let mut counts = vec![0; RTT_BOUNDS.len() + 1];
    counts[3] = 900;
    counts[4] = 90;
    counts[8] = 10;
    LinkObservation {
        local: end(0, peer + 1),
        remote: end(peer, 1),
        figures: LinkFigures {
            negotiated_speed_bps: Some(80_000_000_000),
            expected_speed_bps: Some(80_000_000_000),
            rdma_port_state: RdmaPortState::Active,
            loss: [1, 10, 60]
                .map(|s| LossWindow {
                    window: Duration::from_secs(s),
                    sent: 10 * s,
                    lost: 0,
                })
                .to_vec(),
            ..healthy_observation("n0", &format!("n{peer}")).figures
        },
        rtt_histogram: RttHistogram {
            bounds: RTT_BOUNDS.to_vec(),
            counts,
            sum: Duration::from_millis(60),
        },
        error_counters: ["symbol_error", "link_downed"]
            .map(|name| Counter {
                name: name.to_owned(),
                value: 0,
                saturated: false,
            })
            .to_vec(),
        ..healthy_observation("n0", &format!("n{peer}"))
    }
}

/// Node 0 of a healthy mesh of `nodes`, as its aggregator publishes it and
/// its watchers, reporter and responders record it.
fn healthy_node(nodes: usize, at: Instant) -> (Metrics, Published) {
    let me = identity(0);
    let metrics = Metrics::new(&me);
    let ids: Vec<NodeId> = (0..nodes).map(id).collect();
    let peers = 1..nodes;
    let mut links = Vec::new();
    for a in 0..nodes {
        for b in a + 1..nodes {
            links.push(LinkVerdict {
                a: end(a, b),
                b: end(b, a),
                state: LinkState::Up,
                since: SystemTime::UNIX_EPOCH,
                evidence: vec![],
                blame: Blame::None,
                blamed_node: None,
                recent_changes: 0,
                flapping: false,
                fix: None,
            });
        }
    }
    let mut checks = Vec::new();
    for node in &ids {
        for check in 0..NODE_CHECKS {
            checks.push(CheckResult {
                name: format!("node_check_{check}"),
                node: Some(node.clone()),
                status: CheckStatus::Pass,
                evidence: vec![],
                fix: String::new(),
            });
        }
    }
    for check in 0..MESH_CHECKS {
        checks.push(CheckResult {
            name: format!("mesh_check_{check}"),
            node: None,
            status: CheckStatus::Warn,
            evidence: vec![],
            fix: String::new(),
        });
    }
    let status = MeshStatus {
        node: me.clone(),
        evaluated_at: meshd_domain::fixtures::wall(0),
        quorum: Quorum {
            configured: ids.clone(),
            members: ids.clone(),
            has_quorum: true,
            leader: Some(id(0)),
        },
        nodes: ids
            .iter()
            .map(|node| node_verdict(node.clone(), NodeState::Up, SystemTime::UNIX_EPOCH))
            .collect(),
        links,
        alarms: vec![],
        cables: vec![],
        checks,
        measurements: vec![],
        jobs: Vec::new(),
    };
    let published = Published {
        status: Arc::new(status),
        links: peers.clone().map(observation).collect(),
        peers: peers
            .clone()
            .map(|p| {
                let view = PeerView {
                    report: Arc::new(PeerReport::empty(identity(p))),
                    received_at: at,
                    since: at,
                    paths: BTreeMap::new(),
                    links_received: BTreeMap::new(),
                    duplicate: None,
                };
                (id(p), view)
            })
            .collect(),
        links_observed: nodes * (nodes - 1) / 2,
        clock_offsets: peers
            .clone()
            .map(|p| ClockOffset {
                peer: id(p),
                offset_ns: 1_000,
                rtt: Duration::from_micros(80),
            })
            .collect(),
        paths: peers
            .clone()
            .flat_map(|p| {
                [Path::Management, Path::Cable(format!("en{p}"))].map(|path| PathLiveness {
                    peer: id(p),
                    path,
                    up: true,
                })
            })
            .collect(),
        jobs: Some(JobFigures::default()),
        events: EventKind::ALL
            .iter()
            .filter(|kind| kind.is_verdict_change())
            .map(|kind| (*kind, 1))
            .collect(),
        at,
        ..Published::placeholder(&me)
    };
    for p in peers {
        let address = format!("10.0.{p}.1:9421").parse().expect("address");
        metrics
            .probes
            .responder_started(address, Arc::new(ResponderCounters::default()));
        metrics
            .delivery
            .count_report_sent(&id(p), ReportOutcome::Accepted);
        metrics
            .delivery
            .count_report_sent(&id(p), ReportOutcome::Failed);
    }
    metrics
        .delivery
        .count_alert_post("127.0.0.1:9093", AlertPostOutcome::Ok);
    let watchers = &metrics.watchers;
    watchers.record_process_cpu(&busiest());
    watchers.record_bridges(
        [("bridge0", false, 0)].into_iter(),
        [("bridge0", 0.0)].into_iter(),
    );
    watchers.record_facts(Duration::from_millis(300), 0, Some(1_700_000_000));
    watchers.record_memory(Some(&MemoryFacts {
        total_bytes: Some(1 << 39),
        wired_bytes: Some(1 << 30),
        swap_total_bytes: Some(0),
        swap_used_bytes: Some(0),
        pressure: Some(MemoryPressure::Normal),
        gpu_wired_limit_bytes: Some(0),
        // A Mac's figures: Linux has no pressure level nor GPU limit, but
        // the locked and stall ones, one fewer.
        ..MemoryFacts::default()
    }));
    (metrics, published)
}

/// The top five of a host and `other`.
fn busiest() -> BTreeMap<String, f64> {
    [
        "python3",
        "kernel_task",
        "WindowServer",
        "mds",
        "meshd",
        "other",
    ]
    .iter()
    .map(|name| ((*name).to_owned(), 0.5))
    .collect()
}

fn series(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').map_or(l, |(series, _)| series))
        .collect()
}

fn count_at(nodes: usize) -> usize {
    let at = Instant::now();
    let (metrics, published) = healthy_node(nodes, at);
    series(&metrics.render_at(&published, at)).len()
}

#[test]
fn one_node_of_eight_exports_at_most_300_series_growing_linearly_with_the_mesh() {
    let counts: Vec<usize> = [4, 6, 8].map(count_at).to_vec();
    eprintln!("series of one node at 4, 6, 8 nodes: {counts:?}");
    assert!(counts[2] <= 300, "8 nodes: {} series", counts[2]);
    // Linear: each two nodes more add the same number of series.
    assert_eq!(
        counts[2] - counts[1],
        counts[1] - counts[0],
        "series at 4, 6, 8 nodes: {counts:?}"
    );
}

#[test]
fn a_node_exports_its_own_links_and_checks_and_every_nodes_verdict() {
    let at = Instant::now();
    let (metrics, published) = healthy_node(4, at);
    let text = metrics.render_at(&published, at);
    for line in [
        r#"meshd_link_state{a="n0",b="n3",state="up",blame="none"} 1"#,
        r#"meshd_node_state{node="n3",state="up"} 1"#,
        r#"meshd_check_status{node="n0",check="node_check_0",status="pass"} 1"#,
        r#"meshd_check_status{node="",check="mesh_check_0",status="warn"} 1"#,
        r#"meshd_probe_responder_datagrams_total{outcome="answered"} 0"#,
        r#"meshd_link_rdma_port_state{peer="n1",iface="en2",state="active"} 1"#,
        r#"meshd_link_rtt_seconds_bucket{peer="n1",iface="en2",le="0.0001"} 990"#,
        r#"meshd_link_rtt_seconds_bucket{peer="n1",iface="en2",le="0.001"} 990"#,
        r#"meshd_link_rtt_seconds_bucket{peer="n1",iface="en2",le="0.01"} 1000"#,
        r#"meshd_link_rtt_seconds_bucket{peer="n1",iface="en2",le="+Inf"} 1000"#,
    ] {
        assert!(text.contains(line), "{line} missing in:\n{text}");
    }
    for absent in [
        // A link between two peers is theirs to export.
        r#"meshd_link_state{a="n1",b="n2""#,
        // So are a peer's checks, and the states nothing holds.
        r#"meshd_check_status{node="n1""#,
        r#"state="down""#,
        // The prober's fine buckets.
        r#"le="0.00005""#,
    ] {
        assert!(!text.contains(absent), "{absent} in:\n{text}");
    }
}

#[test]
fn a_steady_mesh_exports_the_same_series_for_ever_and_a_change_goes_back() {
    let t0 = Instant::now();
    let (metrics, published) = healthy_node(7, t0);
    let steady: Vec<String> = series(&metrics.render_at(&published, t0))
        .into_iter()
        .map(str::to_owned)
        .collect();
    // An hour of scrapes every 10 s, with every process name of a busy
    // host passing through the top on the way.
    for tick in 1..=360_u32 {
        let at = t0 + Duration::from_secs(10) * tick;
        let churn: BTreeMap<String, f64> = (0..6)
            .map(|i| (format!("proc{}", tick * 6 + i), 1.0))
            .chain([("other".to_owned(), 0.5)])
            .collect();
        metrics.watchers.record_process_cpu(&churn);
        let text = metrics.render_at(&published, at);
        let processes = series(&text)
            .iter()
            .filter(|s| s.starts_with("meshd_process_cpu_cores"))
            .count();
        assert!(
            processes <= 7 + 20,
            "tick {tick}: {processes} process series"
        );
    }
    metrics.watchers.record_process_cpu(&busiest());
    // A link of this node goes down, and comes back.
    let mut down = (*published.status).clone();
    if let Some(link) = down.links.first_mut() {
        link.state = LinkState::Down;
    }
    let down = Published {
        status: Arc::new(down),
        ..published.clone()
    };
    let t1 = t0 + Duration::from_secs(3_700);
    let text = metrics.render_at(&down, t1);
    assert!(
        text.contains(r#"meshd_link_state{a="n0",b="n1",state="down",blame="none"} 1"#),
        "{text}"
    );
    let t2 = t1 + Duration::from_secs(10);
    let text = metrics.render_at(&published, t2);
    assert!(
        text.contains(r#"meshd_link_state{a="n0",b="n1",state="down",blame="none"} 0"#),
        "{text}"
    );

    // Once the hold has passed, the same series as at the start.
    let later = t2 + VANISHED_HOLD + Duration::from_secs(1);
    assert_eq!(series(&metrics.render_at(&published, later)), steady);
}
