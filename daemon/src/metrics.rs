//! Every metric meshd exports, defined here and nowhere else (see
//! docs/METRICS.md). Names are in Prometheus base units; labels are bounded
//! (node ids, states, kinds), never PIDs, GIDs or free text.
//!
//! Each node owns its own recorder instead of a process-global one, so
//! several nodes can live in one process (the demo, the integration tests)
//! without mixing their series.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use meshd_proto::domain::{
    EventKind, LinkState, MeshStatus, NodeId, NodeIdentity, NodeState, RdmaPortState, RejectReason,
    Severity,
};
use meshd_proto::facts::{CheckStatus, NodeFacts};
use metrics::{Key, KeyName, Label, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusRecorder};

use meshd_model::verdict::MeshInputs;

pub const BUILD_INFO: &str = "meshd_build_info";
pub const QUORUM_HAS_QUORUM: &str = "meshd_quorum_has_quorum";
pub const QUORUM_MEMBERS: &str = "meshd_quorum_members";
pub const QUORUM_CONFIGURED_MEMBERS: &str = "meshd_quorum_configured_members";
pub const QUORUM_IS_LEADER: &str = "meshd_quorum_is_leader";
pub const NODE_STATE: &str = "meshd_node_state";
pub const LINK_STATE: &str = "meshd_link_state";
pub const ALARMS_ACTIVE: &str = "meshd_alarms_active";
pub const EVENTS_TOTAL: &str = "meshd_events_total";
pub const EVALUATION_DURATION_SECONDS: &str = "meshd_evaluation_duration_seconds";
pub const LINK_RTT_SECONDS: &str = "meshd_link_rtt_seconds";
pub const LINK_RTT_P50_SECONDS: &str = "meshd_link_rtt_p50_seconds";
pub const LINK_RTT_P99_SECONDS: &str = "meshd_link_rtt_p99_seconds";
pub const LINK_PROBES_SENT_TOTAL: &str = "meshd_link_probes_sent_total";
pub const LINK_PROBES_LOST_TOTAL: &str = "meshd_link_probes_lost_total";
pub const LINK_LOSS_RATIO: &str = "meshd_link_loss_ratio";
pub const LINK_SILENCE_SECONDS: &str = "meshd_link_silence_seconds";
pub const LINK_SPEED_BITS_PER_SECOND: &str = "meshd_link_speed_bits_per_second";
pub const LINK_EXPECTED_SPEED_BITS_PER_SECOND: &str = "meshd_link_expected_speed_bits_per_second";
pub const LINK_RDMA_PORT_STATE: &str = "meshd_link_rdma_port_state";
pub const LINK_ERRORS_TOTAL: &str = "meshd_link_errors_total";
pub const LINKS_EXPECTED: &str = "meshd_links_expected";
pub const LINKS_OBSERVED: &str = "meshd_links_observed";
pub const PEER_REPORT_AGE_SECONDS: &str = "meshd_peer_report_age_seconds";
pub const REPORTS_REJECTED_TOTAL: &str = "meshd_reports_rejected_total";
pub const REPORTS_SENT_TOTAL: &str = "meshd_reports_sent_total";
pub const NODE_CPU_BUSY_RATIO: &str = "meshd_node_cpu_busy_ratio";
pub const ALERTS_FIRING: &str = "meshd_alerts_firing";
pub const ALERT_POSTS_TOTAL: &str = "meshd_alert_posts_total";
pub const BRIDGE_ACTIVE: &str = "meshd_bridge_active";
pub const BRIDGE_MESH_MEMBERS: &str = "meshd_bridge_mesh_members";
pub const BRIDGE_BROADCAST_PACKETS_PER_SECOND: &str = "meshd_bridge_broadcast_packets_per_second";
pub const PROCESS_CPU_CORES: &str = "meshd_process_cpu_cores";
pub const JOB_PROCESSES: &str = "meshd_job_processes";
pub const CHECK_STATUS: &str = "meshd_check_status";
pub const CABLES: &str = "meshd_cables";
pub const FACTS_READ_DURATION_SECONDS: &str = "meshd_facts_read_duration_seconds";
pub const FACTS_BLIND_SPOTS: &str = "meshd_facts_blind_spots";

/// Verdict evaluations take microseconds at 7 nodes and milliseconds at 256;
/// buckets cover both with room for a slow machine.
const EVALUATION_BUCKETS_SECONDS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1,
];

const METRICS: &[(&str, Kind, Option<Unit>, &str)] = &[
    (
        BUILD_INFO,
        Kind::Gauge,
        None,
        "Always 1; the labels say which node this is and which meshd build runs here.",
    ),
    (
        QUORUM_HAS_QUORUM,
        Kind::Gauge,
        None,
        "1 when the fresh members are a strict majority of the configured ones, as this node sees it.",
    ),
    (
        QUORUM_MEMBERS,
        Kind::Gauge,
        None,
        "Configured members with fresh reports, as this node sees them.",
    ),
    (
        QUORUM_CONFIGURED_MEMBERS,
        Kind::Gauge,
        None,
        "Members of the mesh as configured (this node and its peers).",
    ),
    (
        QUORUM_IS_LEADER,
        Kind::Gauge,
        None,
        "1 when this node is the alert leader (lowest id in the quorum).",
    ),
    (
        NODE_STATE,
        Kind::Gauge,
        None,
        "1 for the verdict this node holds on `node` (state=up|suspect|down), 0 for the others.",
    ),
    (
        LINK_STATE,
        Kind::Gauge,
        None,
        "1 for the verdict this node holds on the link between `a` and `b` (state=unknown|up|degraded|flapping|down), 0 for the others.",
    ),
    (
        ALARMS_ACTIVE,
        Kind::Gauge,
        None,
        "Active alarms this node knows of, by raising node, kind and severity.",
    ),
    (
        EVENTS_TOTAL,
        Kind::Counter,
        None,
        "Verdict events this node produced, by kind.",
    ),
    (
        EVALUATION_DURATION_SECONDS,
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time one evaluation of the verdict engine took.",
    ),
    (
        LINK_RTT_SECONDS,
        Kind::Histogram,
        Some(Unit::Seconds),
        "Round-trip time of the small probes on this node's link to `peer`, wire time only (the responder's own delay is taken out).",
    ),
    (
        LINK_RTT_P50_SECONDS,
        Kind::Gauge,
        Some(Unit::Seconds),
        "Exact median RTT of the small probes answered in the last 10 s on this node's link to `peer`; NaN when there were none.",
    ),
    (
        LINK_RTT_P99_SECONDS,
        Kind::Gauge,
        Some(Unit::Seconds),
        "Exact 99th-percentile RTT of the small probes answered in the last 10 s on this node's link to `peer`; NaN when there were none.",
    ),
    (
        LINK_PROBES_SENT_TOTAL,
        Kind::Counter,
        None,
        "Probes whose fate is known (answered or timed out) on this node's link to `peer`.",
    ),
    (
        LINK_PROBES_LOST_TOTAL,
        Kind::Counter,
        None,
        "Probes that timed out on this node's link to `peer`.",
    ),
    (
        LINK_LOSS_RATIO,
        Kind::Gauge,
        None,
        "Lost share (0-1) of the small probes on this node's link to `peer` over the sliding `window` (1s, 10s, 1m).",
    ),
    (
        LINK_SILENCE_SECONDS,
        Kind::Gauge,
        None,
        "Time since the last probe reply on this node's link to `peer`.",
    ),
    (
        LINK_SPEED_BITS_PER_SECOND,
        Kind::Gauge,
        None,
        "Negotiated speed of this node's cable to `peer` (Thunderbolt receptacle or NIC), where the platform reports it.",
    ),
    (
        LINK_EXPECTED_SPEED_BITS_PER_SECOND,
        Kind::Gauge,
        None,
        "The speed this node's cable to `peer` should negotiate (80 Gb/s for TB5 Mac-to-Mac), where known.",
    ),
    (
        LINK_RDMA_PORT_STATE,
        Kind::Gauge,
        None,
        "1 for the RDMA port state of this node's cable to `peer` (state=none|down|init|armed|active|active_defer; none: no RDMA device paired), 0 for the others.",
    ),
    (
        LINK_ERRORS_TOTAL,
        Kind::Counter,
        None,
        "Error counters of the interface or RDMA port of this node's cable to `peer`, by `counter` name (as the platform names them: symbol_error, link_downed, rx_errors, ...).",
    ),
    (
        LINKS_EXPECTED,
        Kind::Gauge,
        None,
        "Links a full mesh of the configured members needs: N(N-1)/2.",
    ),
    (
        LINKS_OBSERVED,
        Kind::Gauge,
        None,
        "Links that at least one end currently probes, as this node knows from its own probes and fresh reports.",
    ),
    (
        PEER_REPORT_AGE_SECONDS,
        Kind::Gauge,
        None,
        "Age of the latest accepted report of `peer`, on this node's clock.",
    ),
    (
        REPORTS_REJECTED_TOTAL,
        Kind::Counter,
        None,
        "Peer reports this node refused, by `reason` (unknown_node, replayed, old_incarnation, stale, malformed).",
    ),
    (
        REPORTS_SENT_TOTAL,
        Kind::Counter,
        None,
        "Reports this node pushed to `peer`, by `outcome` (accepted, rejected, failed).",
    ),
    (
        NODE_CPU_BUSY_RATIO,
        Kind::Gauge,
        None,
        "Busy share (0-1) of all CPU cores of this node.",
    ),
    (
        ALERTS_FIRING,
        Kind::Gauge,
        None,
        "Alerts this node, as the alert leader, keeps firing in Alertmanager (0 on other nodes).",
    ),
    (
        ALERT_POSTS_TOTAL,
        Kind::Counter,
        None,
        "Posts of alerts to `alertmanager` (host:port), by `outcome` (ok, failed).",
    ),
    (
        BRIDGE_ACTIVE,
        Kind::Gauge,
        None,
        "1 while `bridge` forwards frames (macOS status active, Linux operstate up), 0 when inactive or gone.",
    ),
    (
        BRIDGE_MESH_MEMBERS,
        Kind::Gauge,
        None,
        "Mesh ports that are members of `bridge`; above 0 on an active bridge is a bridge loop.",
    ),
    (
        BRIDGE_BROADCAST_PACKETS_PER_SECOND,
        Kind::Gauge,
        None,
        "Broadcast+multicast packets per second received on `iface` (bridges and their mesh members, where the OS counts them).",
    ),
    (
        PROCESS_CPU_CORES,
        Kind::Gauge,
        None,
        "CPU used by the processes called `process`, in cores (1 = one full core): the busiest names, running known offenders, and `other` for the rest.",
    ),
    (
        JOB_PROCESSES,
        Kind::Gauge,
        None,
        "Processes matching a job pattern on this node, by `state` (busy: burning at least `watch.jobs.busy_cores`; idle).",
    ),
    (
        CHECK_STATUS,
        Kind::Gauge,
        None,
        "Platform check `check` about `node` (empty for checks of the whole mesh): 1 for its current `status` (pass, warn, fail, skipped), 0 for the others.",
    ),
    (
        CABLES,
        Kind::Gauge,
        None,
        "Cables in this node's cable map, by `source`: discovered (Thunderbolt domain UUIDs) or configured ([[links]]).",
    ),
    (
        FACTS_READ_DURATION_SECONDS,
        Kind::Gauge,
        Some(Unit::Seconds),
        "How long the last read of this node's platform facts took (commands such as system_profiler, and sysfs).",
    ),
    (
        FACTS_BLIND_SPOTS,
        Kind::Gauge,
        None,
        "Platform facts this node could not read on its last read (a command missing, failing or timing out); `meshctl doctor` names them.",
    ),
];

/// RTTs of a Thunderbolt link are tens of microseconds, of a busy or
/// failing one milliseconds: buckets from 5 µs to 1 s.
const RTT_BUCKETS_SECONDS: &[f64] = &[
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
    Histogram,
}

/// One node's metrics: its recorder, and the one way to render them.
#[derive(Debug)]
pub struct Metrics {
    recorder: PrometheusRecorder,
    /// Alarm series set so far, so cleared ones can be zeroed.
    alarm_series: Mutex<BTreeSet<AlarmSeries>>,
    /// Bridges and interfaces with bridge series, so vanished ones read 0.
    bridge_series: Mutex<(BTreeSet<String>, BTreeSet<String>)>,
    /// `process` labels set by the last CPU sample, so names that left it
    /// read 0 instead of their last value.
    process_series: Mutex<BTreeSet<String>>,
    /// (node, check) series set so far, so checks that vanished read 0.
    check_series: Mutex<BTreeSet<(String, String)>>,
    /// The newest evaluation not yet written into the series. Evaluations
    /// run ten times a second and scrapes come every few seconds, so the
    /// verdict and input series are written when rendered, from the newest
    /// evaluation, rather than on every evaluation.
    pending: Mutex<Option<Evaluation>>,
}

/// What one evaluation read and concluded, kept for the next render.
#[derive(Debug)]
struct Evaluation {
    status: Arc<MeshStatus>,
    inputs: Arc<MeshInputs>,
    rejected: BTreeMap<RejectReason, u64>,
    at: SystemTime,
}

/// (raising node, kind, severity)
type AlarmSeries = (String, String, Severity);

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

impl Metrics {
    pub fn new(identity: &NodeIdentity) -> Result<Self, BuildError> {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(EVALUATION_DURATION_SECONDS.to_owned()),
                EVALUATION_BUCKETS_SECONDS,
            )?
            .set_buckets_for_metric(
                Matcher::Full(LINK_RTT_SECONDS.to_owned()),
                RTT_BUCKETS_SECONDS,
            )?
            .build_recorder();
        for (name, kind, unit, help) in METRICS {
            let (name, help) = (KeyName::from_const_str(name), SharedString::const_str(help));
            match kind {
                Kind::Gauge => recorder.describe_gauge(name, *unit, help),
                Kind::Counter => recorder.describe_counter(name, *unit, help),
                Kind::Histogram => recorder.describe_histogram(name, *unit, help),
            }
        }
        let metrics = Self {
            recorder,
            alarm_series: Mutex::default(),
            bridge_series: Mutex::default(),
            process_series: Mutex::default(),
            check_series: Mutex::default(),
            pending: Mutex::default(),
        };
        metrics
            .gauge(
                BUILD_INFO,
                vec![
                    Label::new("node", identity.id.to_string()),
                    Label::new("version", identity.version.clone()),
                    Label::new("os", std::env::consts::OS),
                    Label::new("arch", std::env::consts::ARCH),
                ],
            )
            .set(1.0);
        Ok(metrics)
    }

    /// The Prometheus text exposition of every series, with the verdict and
    /// input series as of the newest evaluation.
    pub fn render(&self) -> String {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(e) = pending {
            self.record_status(&e.status);
            self.record_inputs(&e.inputs, &e.rejected, e.at);
        }
        self.recorder.handle().render()
    }

    /// Keeps one evaluation's status and inputs for the next render (see
    /// [`Metrics::render`]); replaces any evaluation not rendered yet. Costs
    /// a lock and a few pointer copies, so it can run on every evaluation.
    pub fn record_evaluation(
        &self,
        status: Arc<MeshStatus>,
        inputs: Arc<MeshInputs>,
        rejected: BTreeMap<RejectReason, u64>,
        at: SystemTime,
    ) {
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = Some(Evaluation {
            status,
            inputs,
            rejected,
            at,
        });
    }

    /// Drains histogram samples into their buckets; call it every few
    /// seconds so memory stays flat between scrapes.
    pub fn run_upkeep(&self) {
        self.recorder.handle().run_upkeep();
    }

    pub fn observe_evaluation(&self, took: Duration) {
        self.recorder
            .register_histogram(
                &Key::from_static_name(EVALUATION_DURATION_SECONDS),
                &METADATA,
            )
            .record(took.as_secs_f64());
    }

    pub fn count_event(&self, kind: EventKind) {
        self.recorder
            .register_counter(
                &Key::from_parts(EVENTS_TOTAL, vec![Label::new("kind", kind.as_str())]),
                &METADATA,
            )
            .increment(1);
    }

    pub fn record_status(&self, status: &MeshStatus) {
        let quorum = &status.quorum;
        self.gauge(QUORUM_HAS_QUORUM, vec![])
            .set(f64::from(u8::from(quorum.has_quorum)));
        self.gauge(QUORUM_MEMBERS, vec![])
            .set(count(quorum.members.len()));
        self.gauge(QUORUM_CONFIGURED_MEMBERS, vec![])
            .set(count(quorum.configured.len()));
        let is_leader = quorum.leader.as_ref() == Some(&status.node.id);
        self.gauge(QUORUM_IS_LEADER, vec![])
            .set(f64::from(u8::from(is_leader)));

        for node in &status.nodes {
            for state in NodeState::ALL {
                let labels = vec![
                    Label::new("node", node.id.to_string()),
                    Label::new("state", state.as_str()),
                ];
                self.gauge(NODE_STATE, labels)
                    .set(f64::from(u8::from(node.state == *state)));
            }
        }
        for link in &status.links {
            for state in LinkState::ALL {
                let labels = vec![
                    Label::new("a", link.a.node.to_string()),
                    Label::new("b", link.b.node.to_string()),
                    Label::new("state", state.as_str()),
                ];
                self.gauge(LINK_STATE, labels)
                    .set(f64::from(u8::from(link.state == *state)));
            }
        }
        self.record_alarms(status);
        self.record_checks(status);
        for (source, discovered) in [("discovered", true), ("configured", false)] {
            let n = status
                .cables
                .iter()
                .filter(|c| c.discovered == discovered)
                .count();
            self.gauge(CABLES, vec![Label::new("source", source)])
                .set(count(n));
        }
    }

    fn record_checks(&self, status: &MeshStatus) {
        let gauge = |node: &str, check: &str, state: CheckStatus| {
            self.gauge(
                CHECK_STATUS,
                vec![
                    Label::new("node", node.to_owned()),
                    Label::new("check", check.to_owned()),
                    Label::new("status", state.as_str()),
                ],
            )
        };
        let mut current: BTreeMap<(String, String), CheckStatus> = BTreeMap::new();
        for check in &status.checks {
            let node = check
                .node
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            // Several results of one check about one node (one per port):
            // the worst one stands for the series.
            let worst = current
                .entry((node, check.name.clone()))
                .or_insert(check.status);
            *worst = worse(*worst, check.status);
        }
        let mut shown = self
            .check_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (node, check) in shown.iter().filter(|s| !current.contains_key(*s)) {
            for state in CHECK_STATUSES {
                gauge(node, check, state).set(0.0);
            }
        }
        for ((node, check), status) in &current {
            for state in CHECK_STATUSES {
                gauge(node, check, state).set(f64::from(u8::from(state == *status)));
            }
        }
        shown.clear();
        shown.extend(current.into_keys());
    }

    /// After each read of this node's platform facts.
    pub fn record_facts(&self, facts: &NodeFacts, took: Duration) {
        self.gauge(FACTS_READ_DURATION_SECONDS, vec![])
            .set(took.as_secs_f64());
        self.gauge(FACTS_BLIND_SPOTS, vec![])
            .set(count(facts.blind_spots.len()));
    }

    fn record_alarms(&self, status: &MeshStatus) {
        let mut active: BTreeMap<AlarmSeries, usize> = BTreeMap::new();
        for alarm in &status.alarms {
            *active
                .entry((
                    alarm.node.to_string(),
                    alarm.kind.to_string(),
                    alarm.severity,
                ))
                .or_default() += 1;
        }
        let mut shown = self
            .alarm_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A series whose alarms all cleared must read 0, not its last count.
        for series in shown.iter().filter(|s| !active.contains_key(*s)) {
            self.alarm_gauge(series).set(0.0);
        }
        for (series, n) in &active {
            self.alarm_gauge(series).set(count(*n));
        }
        shown.clear();
        shown.extend(active.into_keys());
    }

    fn alarm_gauge(&self, (node, kind, severity): &AlarmSeries) -> metrics::Gauge {
        self.gauge(
            ALARMS_ACTIVE,
            vec![
                Label::new("node", node.clone()),
                Label::new("kind", kind.clone()),
                Label::new("severity", severity.as_str()),
            ],
        )
    }

    /// The RTT histogram of this node's link to `peer`; the prober records
    /// every answered probe into it.
    pub fn link_rtt(&self, peer: &NodeId) -> metrics::Histogram {
        self.recorder.register_histogram(
            &Key::from_parts(LINK_RTT_SECONDS, vec![Label::new("peer", peer.to_string())]),
            &METADATA,
        )
    }

    pub fn count_report_sent(&self, peer: &NodeId, outcome: &'static str) {
        self.recorder
            .register_counter(
                &Key::from_parts(
                    REPORTS_SENT_TOTAL,
                    vec![
                        Label::new("peer", peer.to_string()),
                        Label::new("outcome", outcome),
                    ],
                ),
                &METADATA,
            )
            .increment(1);
    }

    /// What went into one evaluation: this node's own probes, the age of
    /// each peer's report, refused reports, and how much of the mesh is seen.
    pub fn record_inputs(
        &self,
        inputs: &MeshInputs,
        rejected: &BTreeMap<RejectReason, u64>,
        now: SystemTime,
    ) {
        for local in &inputs.local_links {
            let o = &local.observation;
            let peer = || Label::new("peer", o.remote.node.to_string());
            self.counter(LINK_PROBES_SENT_TOTAL, vec![peer()])
                .absolute(o.probes_sent_total);
            self.counter(LINK_PROBES_LOST_TOTAL, vec![peer()])
                .absolute(o.probes_lost_total);
            self.gauge(LINK_SILENCE_SECONDS, vec![peer()])
                .set(o.silence.as_secs_f64());
            // Exact, unlike a quantile estimated from the histogram's buckets,
            // whose 100–250 µs bucket cannot place a veth link's RTT.
            // Two gauges, not one with a `quantile` label: Prometheus keeps
            // that label for summaries.
            for (name, rtt) in [
                (LINK_RTT_P50_SECONDS, o.rtt.p50),
                (LINK_RTT_P99_SECONDS, o.rtt.p99),
            ] {
                let seconds = if o.rtt.samples == 0 {
                    f64::NAN
                } else {
                    rtt.as_secs_f64()
                };
                self.gauge(name, vec![peer()]).set(seconds);
            }
            if let Some(bps) = o.negotiated_speed_bps {
                #[allow(clippy::cast_precision_loss)]
                self.gauge(LINK_SPEED_BITS_PER_SECOND, vec![peer()])
                    .set(bps as f64);
            }
            if let Some(bps) = o.expected_speed_bps {
                #[allow(clippy::cast_precision_loss)]
                self.gauge(LINK_EXPECTED_SPEED_BITS_PER_SECOND, vec![peer()])
                    .set(bps as f64);
            }
            for state in RdmaPortState::ALL {
                let labels = vec![peer(), Label::new("state", state.as_str())];
                self.gauge(LINK_RDMA_PORT_STATE, labels)
                    .set(f64::from(u8::from(o.rdma_port_state == *state)));
            }
            // Totals since meshd started watching the port (the platform
            // accumulates the hardware deltas), so every evaluation can set them.
            for counter in &o.error_counters {
                let labels = vec![peer(), Label::new("counter", counter.name.clone())];
                self.counter(LINK_ERRORS_TOTAL, labels)
                    .absolute(counter.value);
            }
            for window in &o.loss {
                let labels = vec![
                    peer(),
                    Label::new(
                        "window",
                        humantime::format_duration(window.window).to_string(),
                    ),
                ];
                self.gauge(LINK_LOSS_RATIO, labels).set(window.ratio());
            }
        }
        for (peer, received) in &inputs.reports {
            let age = now.duration_since(received.at).unwrap_or_default();
            self.gauge(
                PEER_REPORT_AGE_SECONDS,
                vec![Label::new("peer", peer.to_string())],
            )
            .set(age.as_secs_f64());
        }
        for reason in RejectReason::ALL {
            let total = rejected.get(reason).copied().unwrap_or(0);
            self.counter(
                REPORTS_REJECTED_TOTAL,
                vec![Label::new("reason", reason.as_str())],
            )
            .absolute(total);
        }
        let n = inputs.configured.len();
        self.gauge(LINKS_EXPECTED, vec![])
            .set(count(n * n.saturating_sub(1) / 2));
        let observed: BTreeSet<(&NodeId, &NodeId)> = inputs
            .local_links
            .iter()
            .map(|l| &l.observation)
            .chain(inputs.reports.values().flat_map(|r| r.report.links.iter()))
            .filter(|o| o.probes_sent_total > 0)
            .map(|o| {
                let (x, y) = (&o.local.node, &o.remote.node);
                if x <= y { (x, y) } else { (y, x) }
            })
            .collect();
        self.gauge(LINKS_OBSERVED, vec![])
            .set(count(observed.len()));
        self.gauge(NODE_CPU_BUSY_RATIO, vec![])
            .set(inputs.local_load.cpu_busy_ratio);
    }

    pub fn set_alerts_firing(&self, firing: usize) {
        self.gauge(ALERTS_FIRING, vec![]).set(count(firing));
    }

    pub fn count_alert_post(&self, alertmanager: &str, outcome: &'static str) {
        self.counter(
            ALERT_POSTS_TOTAL,
            vec![
                Label::new("alertmanager", alertmanager.to_owned()),
                Label::new("outcome", outcome),
            ],
        )
        .increment(1);
    }

    /// One sample of the bridge watcher: each bridge's state and mesh
    /// members, and the broadcast+multicast rate of each watched interface.
    /// Series of bridges or interfaces that are gone are set to 0.
    pub fn record_bridges<'a>(
        &self,
        bridges: impl Iterator<Item = (&'a str, bool, usize)>,
        rates: impl Iterator<Item = (&'a str, f64)>,
    ) {
        let mut shown = self
            .bridge_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (seen_bridges, seen_ifaces) = &mut *shown;
        let mut bridges_now = BTreeSet::new();
        for (bridge, active, mesh_members) in bridges {
            let label = || vec![Label::new("bridge", bridge.to_owned())];
            self.gauge(BRIDGE_ACTIVE, label())
                .set(f64::from(u8::from(active)));
            self.gauge(BRIDGE_MESH_MEMBERS, label())
                .set(count(mesh_members));
            bridges_now.insert(bridge.to_owned());
        }
        for gone in seen_bridges.difference(&bridges_now) {
            let label = || vec![Label::new("bridge", gone.clone())];
            self.gauge(BRIDGE_ACTIVE, label()).set(0.0);
            self.gauge(BRIDGE_MESH_MEMBERS, label()).set(0.0);
        }
        let mut ifaces_now = BTreeSet::new();
        for (iface, rate) in rates {
            self.gauge(
                BRIDGE_BROADCAST_PACKETS_PER_SECOND,
                vec![Label::new("iface", iface.to_owned())],
            )
            .set(rate);
            ifaces_now.insert(iface.to_owned());
        }
        for gone in seen_ifaces.difference(&ifaces_now) {
            self.gauge(
                BRIDGE_BROADCAST_PACKETS_PER_SECOND,
                vec![Label::new("iface", gone.clone())],
            )
            .set(0.0);
        }
        // Keep vanished names so they stay at 0 rather than being set again
        // each sample; the set is bounded by the host's interfaces.
        seen_bridges.extend(bridges_now);
        seen_ifaces.extend(ifaces_now);
    }

    /// CPU per process name, already reduced to a bounded set of names
    /// (`model::cpu::reduce_for_metrics`).
    pub fn record_process_cpu(&self, cores: &BTreeMap<String, f64>) {
        let mut shown = self
            .process_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let gauge = |name: &str| {
            self.gauge(
                PROCESS_CPU_CORES,
                vec![Label::new("process", name.to_owned())],
            )
        };
        for gone in shown.iter().filter(|n| !cores.contains_key(*n)) {
            gauge(gone).set(0.0);
        }
        for (name, value) in cores {
            gauge(name).set(*value);
        }
        shown.clear();
        shown.extend(cores.keys().cloned());
    }

    pub fn record_job_processes(&self, busy: usize, idle: usize) {
        for (state, n) in [("busy", busy), ("idle", idle)] {
            self.gauge(JOB_PROCESSES, vec![Label::new("state", state)])
                .set(count(n));
        }
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>) -> metrics::Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &METADATA)
    }

    fn gauge(&self, name: &'static str, labels: Vec<Label>) -> metrics::Gauge {
        self.recorder
            .register_gauge(&Key::from_parts(name, labels), &METADATA)
    }
}

const CHECK_STATUSES: [CheckStatus; 4] = [
    CheckStatus::Pass,
    CheckStatus::Warn,
    CheckStatus::Fail,
    CheckStatus::Skipped,
];

/// Fail over warn over skipped over pass.
fn worse(a: CheckStatus, b: CheckStatus) -> CheckStatus {
    let rank = |s: CheckStatus| match s {
        CheckStatus::Pass => 0,
        CheckStatus::Skipped => 1,
        CheckStatus::Warn => 2,
        CheckStatus::Fail => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}

#[allow(clippy::cast_precision_loss)]
fn count(n: usize) -> f64 {
    n as f64
}

#[cfg(test)]
mod tests {
    use meshd_proto::domain::Incarnation;

    use super::*;

    fn metrics() -> Metrics {
        Metrics::new(&NodeIdentity {
            id: NodeId::new("a").unwrap(),
            incarnation: Incarnation(1),
            version: "0".to_owned(),
            hostname: "h".to_owned(),
        })
        .unwrap()
    }

    #[test]
    fn processes_that_leave_the_top_read_zero() {
        let m = metrics();
        let sample = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
        };
        m.record_process_cpu(&sample(&[("yes", 1.0), ("other", 0.25)]));
        let text = m.render();
        assert!(
            text.contains(r#"meshd_process_cpu_cores{process="yes"} 1"#),
            "{text}"
        );
        m.record_process_cpu(&sample(&[("python3", 2.0), ("other", 0.5)]));
        let text = m.render();
        assert!(
            text.contains(r#"meshd_process_cpu_cores{process="yes"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"meshd_process_cpu_cores{process="python3"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"meshd_process_cpu_cores{process="other"} 0.5"#),
            "{text}"
        );
    }

    #[test]
    fn cable_speed_rdma_state_and_errors_are_exported_per_peer() {
        use meshd_proto::domain::{
            Counter, Incarnation, InterfaceState, LinkEnd, LinkObservation, RttHistogram,
            RttSummary,
        };

        use meshd_model::verdict::LocalObservation;

        let id = |s: &str| NodeId::new(s).expect("id");
        let identity = NodeIdentity {
            id: id("a"),
            incarnation: Incarnation(1),
            version: "t".into(),
            hostname: "a".into(),
        };
        let metrics = Metrics::new(&identity).expect("metrics");
        let observation = LinkObservation {
            local: LinkEnd::node_only(id("a")),
            remote: LinkEnd::node_only(id("b")),
            interface_state: InterfaceState::Up,
            negotiated_speed_bps: Some(40_000_000_000),
            expected_speed_bps: Some(80_000_000_000),
            rdma_port_state: RdmaPortState::Active,
            gid_matches_address: Some(true),
            rtt: RttSummary {
                p50: Duration::from_micros(250),
                p99: Duration::from_millis(2),
                samples: 9,
                ..RttSummary::default()
            },
            rtt_histogram: RttHistogram::default(),
            loss: vec![],
            mtu_loss: vec![],
            probes_sent_total: 10,
            probes_lost_total: 0,
            last_reply_at: None,
            error_counters: vec![Counter {
                name: "symbol_error".into(),
                value: 3,
                saturated: false,
            }],
            silence: Duration::ZERO,
            consecutive_lost: 0,
        };
        let inputs = MeshInputs {
            local: identity.clone(),
            configured: [id("a"), id("b")].into_iter().collect(),
            local_load: meshd_proto::domain::NodeLoad::default(),
            local_links: vec![LocalObservation {
                observation,
                at: SystemTime::UNIX_EPOCH,
            }],
            expected_links: vec![],
            reports: BTreeMap::new(),
            local_alarms: vec![],
        };
        metrics.record_inputs(&inputs, &BTreeMap::new(), SystemTime::UNIX_EPOCH);
        metrics.record_inputs(&inputs, &BTreeMap::new(), SystemTime::UNIX_EPOCH);
        let text = metrics.render();
        for line in [
            "meshd_link_speed_bits_per_second{peer=\"b\"} 40000000000",
            "meshd_link_rtt_p50_seconds{peer=\"b\"} 0.00025",
            "meshd_link_rtt_p99_seconds{peer=\"b\"} 0.002",
            "meshd_link_expected_speed_bits_per_second{peer=\"b\"} 80000000000",
            "meshd_link_rdma_port_state{peer=\"b\",state=\"active\"} 1",
            "meshd_link_rdma_port_state{peer=\"b\",state=\"down\"} 0",
            // A total read twice is still the total.
            "meshd_link_errors_total{peer=\"b\",counter=\"symbol_error\"} 3",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }

    /// docs/METRICS.md is the written spec: every metric defined here must
    /// be in it, and every metric it lists must be defined here.
    #[test]
    fn the_metrics_spec_lists_exactly_the_defined_metrics() {
        let spec = include_str!("../../docs/METRICS.md");
        for (name, ..) in METRICS {
            assert!(
                spec.contains(&format!("| `{name}` |")),
                "{name} is not in docs/METRICS.md"
            );
        }
        let listed = spec
            .lines()
            .filter_map(|l| l.strip_prefix("| `meshd_"))
            .filter_map(|l| l.split('`').next())
            .map(|rest| format!("meshd_{rest}"));
        for name in listed {
            assert!(
                METRICS.iter().any(|(defined, ..)| *defined == name),
                "docs/METRICS.md lists {name}, which meshd does not export"
            );
        }
    }
}
