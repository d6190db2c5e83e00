//! One evaluation of the verdict engine on a warmed-up engine, for full
//! meshes of 7, 64 and 256 nodes (ARCHITECTURE.md, Targets: < 50 µs / < 5 ms / < 50 ms).
//!
//! Realistic inputs: every peer heard, every link observed from both ends
//! with an RTT summary, an 18-bucket RTT histogram and three loss windows,
//! and one cable cut. Figures only: nothing here asserts a time.
//!
//! Also each end's figures gathered from the same inputs
//! (`MeshInputs::measurements`), which every status read from outside the
//! daemon (`GetStatus`, the mesh page) adds.
//!
//! Run: `cargo bench -p meshd-model --bench verdict -- --warm-up-time 1 --measurement-time 3`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use meshd_domain::fixtures::{identity, numbered_id};
use meshd_domain::{
    InterfaceState, LinkEnd, LinkFigures, LinkObservation, LossWindow, NodeId, NodeLoad,
    PeerReport, RdmaPortState, RttHistogram, RttSummary,
};
use meshd_model::fixtures::{default_engine_settings, moment};
use meshd_model::link_rules::{MEDIUM_WINDOW, SHORT_WINDOW};
use meshd_model::peers::{Path, PathState, PeerView};
use meshd_model::time::Moment;
use meshd_model::verdict::{Engine, ExpectedLink, LocalObservation, MeshInputs};

const LONG_WINDOW: Duration = Duration::from_secs(60);
const HISTOGRAM_BUCKETS: u64 = 18;

/// Node `node`'s end of its cable to `peer`: a port with its RDMA device.
fn end(node: usize, peer: usize) -> LinkEnd {
    let iface = format!("en{}", peer % 6 + 2);
    LinkEnd {
        address: Some(std::net::IpAddr::from([10, 0, 0, 1])),
        rdma_device: Some(format!("rdma_{iface}")),
        rdma_port: Some(1),
        ..meshd_domain::fixtures::end(numbered_id(node).as_str(), &iface)
    }
}

/// What `from` sees on its cable to `to` at `at`: a healthy TB5 link, or a
/// cut one silent for two seconds.
fn observation(from: usize, to: usize, cut: bool, at: SystemTime) -> LinkObservation {
    let silence = if cut {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(40)
    };
    let lost = |sent: u64| if cut { sent.min(20) } else { 0 };
    let window = |window: Duration, sent: u64| LossWindow {
        window,
        sent,
        lost: lost(sent),
    };
    LinkObservation {
        local: end(from, to),
        remote: end(to, from),
        figures: LinkFigures {
            interface_state: InterfaceState::Up,
            negotiated_speed_bps: Some(80_000_000_000),
            expected_speed_bps: Some(80_000_000_000),
            rdma_port_state: RdmaPortState::Active,
            rtt: RttSummary {
                p50: Duration::from_micros(38),
                p90: Duration::from_micros(55),
                p99: Duration::from_micros(92),
                max: Duration::from_micros(310),
                host_delay_p50: Duration::from_micros(7),
                baseline_p50: Duration::from_micros(39),
                baseline_p99: Duration::from_micros(95),
                samples: 6_000,
            },
            loss: vec![
                window(SHORT_WINDOW, 10),
                window(MEDIUM_WINDOW, 100),
                window(LONG_WINDOW, 600),
            ],
            silence,
        },
        gid_matches_address: Some(true),
        rtt_histogram: RttHistogram {
            // 17 bounds, 5 µs doubling to ~328 ms, and the overflow bucket.
            bounds: (0..HISTOGRAM_BUCKETS - 1)
                .map(|k| Duration::from_micros(5 << k))
                .collect(),
            counts: (0..HISTOGRAM_BUCKETS).map(|k| 4_000 >> k.min(12)).collect(),
            sum: Duration::from_millis(400),
        },
        mtu_loss: vec![window(MEDIUM_WINDOW, 10)],
        probes_sent_total: 360_000,
        probes_lost_total: lost(600),
        last_reply_at: Some(at - silence),
        error_counters: vec![],
        consecutive_lost: if cut { 20 } else { 0 },
        silence_confirmed: false,
        lateness: Duration::ZERO,
        rdma_probe: None,
        rdma_endpoint: None,
        carrier: None,
    }
}

/// A full mesh of `n` seen from node 0 at `now`, every peer heard 50 ms
/// ago on its management path and one cable; with `cut`, the cable between
/// nodes 1 and 2 is cut.
fn inputs(n: usize, cut: bool, moment: Moment) -> MeshInputs {
    let is_cut = |x: usize, y: usize| cut && x.min(y) == 1 && x.max(y) == 2;
    let observations = |from: usize, at: SystemTime| -> Vec<LinkObservation> {
        (0..n)
            .filter(|to| *to != from)
            .map(|to| observation(from, to, is_cut(from, to), at))
            .collect()
    };
    let now = moment.now;
    let age = Duration::from_millis(50);
    let peers: BTreeMap<NodeId, PeerView> = (1..n)
        .map(|p| {
            let report = PeerReport {
                sequence: 42,
                sent_at: moment.wall - age,
                links: observations(p, moment.wall - age).into(),
                hears: (0..n).filter(|q| *q != p).map(numbered_id).collect(),
                heard_on_management: (0..n).filter(|q| *q != p).map(numbered_id).collect(),
                has_quorum: true,
                load: NodeLoad {
                    cpu_busy_ratio: 0.2,
                    cpu_saturated: false,
                },
                ..PeerReport::empty(identity(numbered_id(p).as_str(), 1))
            };
            let heard = now - age;
            let fresh = PathState {
                last_message: heard,
                closed_at: None,
            };
            (
                numbered_id(p),
                PeerView {
                    links_received: report
                        .links
                        .iter()
                        .map(|l| (l.remote.node.clone(), heard))
                        .collect(),
                    report: Arc::new(report),
                    received_at: heard,
                    since: now - Duration::from_secs(600),
                    paths: [
                        (Path::Management, fresh),
                        (Path::Cable("en2".into()), fresh),
                    ]
                    .into_iter()
                    .collect(),
                    duplicate: None,
                },
            )
        })
        .collect();
    MeshInputs {
        local: identity(numbered_id(0).as_str(), 1),
        configured: (0..n).map(numbered_id).collect(),
        local_load: NodeLoad {
            cpu_busy_ratio: 0.2,
            cpu_saturated: false,
        },
        local_lateness: meshd_domain::Lateness::default(),
        local_links: observations(0, moment.wall)
            .into_iter()
            .map(|observation| LocalObservation {
                observation,
                at: now,
            })
            .collect(),
        expected_links: (1..n)
            .map(|to| ExpectedLink {
                local: end(0, to),
                remote: end(to, 0),
                expected_speed_bps: None,
            })
            .collect(),
        peers,
        local_alarms: vec![],
        clock_offsets: vec![],
        refused_releases: vec![],
    }
}

fn evaluate(c: &mut Criterion) {
    let now = moment(110);
    let mut group = c.benchmark_group("verdict_evaluate");
    for n in [7usize, 64, 256] {
        // Warmed up: the engine has learned every link on a healthy mesh
        // ten seconds ago and already judged the cut, so each measured
        // evaluation is the steady state a running daemon is in.
        let mut engine = Engine::new(default_engine_settings());
        let before = moment(100);
        engine.evaluate(&inputs(n, false, before), before);
        let faulted = inputs(n, true, now);
        engine.evaluate(&faulted, now);
        if n >= 256 {
            // Keeps the run within minutes on two shared cores.
            group.sample_size(10);
        }
        group.bench_with_input(BenchmarkId::from_parameter(n), &faulted, |b, faulted| {
            b.iter(|| black_box(engine.evaluate(black_box(faulted), now)));
        });
    }
    group.finish();
}

fn measurements(c: &mut Criterion) {
    let now = moment(100);
    let mut group = c.benchmark_group("status_measurements");
    for n in [7usize, 64, 256] {
        let inputs = inputs(n, true, now);
        if n >= 256 {
            group.sample_size(10);
        }
        group.bench_with_input(BenchmarkId::from_parameter(n), &inputs, |b, inputs| {
            b.iter(|| black_box(black_box(inputs).measurements(now)));
        });
    }
    group.finish();
}

criterion_group!(benches, evaluate, measurements);
criterion_main!(benches);
