//! Every metric meshd exports, defined here and nowhere else: name, type,
//! labels, unit and help. meshd's own are `meshd_*`; the `process_*` ones
//! are the standard process metrics every Prometheus client exports. docs/METRICS.md is the written specification;
//! a test keeps the two the same. Names are in Prometheus base units;
//! label values come from bounded sets (member ids, states, kinds, the
//! configured ports), never PIDs, GIDs or free text.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// The base unit a metric's values are in, where it has one; its name ends
/// with the unit (a test checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Ratio,
    Bytes,
    BytesPerSecond,
    Cores,
}

impl Unit {
    #[cfg(test)]
    fn suffix(self) -> &'static str {
        match self {
            Unit::Seconds => "_seconds",
            Unit::Ratio => "_ratio",
            Unit::Bytes => "_bytes",
            Unit::BytesPerSecond => "_bytes_per_second",
            Unit::Cores => "_cores",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct MetricSpec {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

macro_rules! metrics {
    ($($id:ident: $name:literal, $kind:ident, [$($label:literal),*], $unit:expr, $help:literal;)+) => {
        $(pub const $id: MetricSpec = MetricSpec {
            name: $name,
            kind: Kind::$kind,
            labels: &[$($label),*],
            help: $help,
        };)+

        /// Every metric with its unit, in the order a scrape lists them.
        pub const ALL: &[(MetricSpec, Option<Unit>)] = &[$(($id, $unit)),+];
    };
}

metrics! {
    BUILD_INFO: "meshd_build_info", Gauge, ["node", "version", "os", "arch"], None,
        "Always 1; the labels say which node this is and which meshd build runs here.";
    QUORUM_HAS_QUORUM: "meshd_quorum_has_quorum", Gauge, [], None,
        "1 when the fresh members are a strict majority of the configured ones, as this node sees it.";
    QUORUM_MEMBERS: "meshd_quorum_members", Gauge, [], None,
        "Configured members with fresh reports, as this node sees them.";
    QUORUM_CONFIGURED_MEMBERS: "meshd_quorum_configured_members", Gauge, [], None,
        "Members of the mesh as configured (this node and its peers).";
    QUORUM_IS_LEADER: "meshd_quorum_is_leader", Gauge, [], None,
        "1 when this node is the alert leader (lowest id in the quorum).";
    NODE_STATE: "meshd_node_state", Gauge, ["node", "state"], None,
        "1 for the verdict this node holds on `node` (state=up|suspect|down); a state it left reads 0 for five minutes.";
    LINK_STATE: "meshd_link_state", Gauge, ["a", "b", "state", "blame"], None,
        "1 for the verdict this node holds on its link between `a` and `b` (state=unknown|up|degraded|flapping|down), on the links this node is an end of; `blame` (none|link|node) says whom the verdict blames: a dead node's links are down blamed on the node. A state or blame it left reads 0 for five minutes.";
    ALARMS_ACTIVE: "meshd_alarms_active", Gauge, ["node", "kind", "severity"], None,
        "Active alarms this node knows of, by raising node, kind and severity.";
    JOBS: "meshd_jobs", Gauge, ["state"], None,
        "Distributed jobs whose ranks the mesh's nodes run, as this node sees them, by `state` (running; hung: its job_hung alarm is active); no series while no job runs, and a state left reads 0 for five minutes.";
    JOB_RANKS: "meshd_job_ranks", Gauge, ["condition"], None,
        "Ranks of those jobs by `condition`: live, stopped (by a signal), gone (exited or killed), restarted (another process took its rank), unheard (its node is not heard).";
    EVENTS_TOTAL: "meshd_events_total", Counter, ["kind"], None,
        "Verdict events this node produced, by kind.";
    EVALUATION_DURATION_SECONDS: "meshd_evaluation_duration_seconds", Histogram, [], Some(Unit::Seconds),
        "Time one evaluation of the verdict engine took.";
    LINK_RTT_SECONDS: "meshd_link_rtt_seconds", Histogram, ["peer", "iface"], Some(Unit::Seconds),
        "Round-trip time of the small probes on this node's link to `peer` over its interface `iface`, wire time only (the responder's own delay is taken out).";
    LINK_RTT_P50_SECONDS: "meshd_link_rtt_p50_seconds", Gauge, ["peer", "iface"], Some(Unit::Seconds),
        "Exact median RTT of the small probes answered in the last 10 s on this node's link to `peer`; NaN when there were none.";
    LINK_RTT_P99_SECONDS: "meshd_link_rtt_p99_seconds", Gauge, ["peer", "iface"], Some(Unit::Seconds),
        "Exact 99th-percentile RTT of the small probes answered in the last 10 s on this node's link to `peer`; NaN when there were none.";
    LINK_PROBES_SENT_TOTAL: "meshd_link_probes_sent_total", Counter, ["peer", "iface"], None,
        "Probes whose fate is known (answered or timed out) on this node's link to `peer`.";
    LINK_PROBES_LOST_TOTAL: "meshd_link_probes_lost_total", Counter, ["peer", "iface"], None,
        "Probes that timed out on this node's link to `peer`.";
    LINK_LOSS_RATIO: "meshd_link_loss_ratio", Gauge, ["peer", "iface", "window"], Some(Unit::Ratio),
        "Lost share (0-1) of the small probes on this node's link to `peer` over the sliding `window` (1s, 10s, 1m).";
    LINK_LAST_REPLY_TIMESTAMP_SECONDS: "meshd_link_last_reply_timestamp_seconds", Gauge, ["peer", "iface"], Some(Unit::Seconds),
        "When the last probe reply arrived on this node's link to `peer`, in seconds since the Unix epoch; no series before the first reply.";
    LINK_SPEED_BYTES_PER_SECOND: "meshd_link_speed_bytes_per_second", Gauge, ["peer", "iface"], Some(Unit::BytesPerSecond),
        "Negotiated speed of this node's cable to `peer` (Thunderbolt receptacle or NIC), in bytes per second (80 Gb/s is 1e10), where the platform reports it.";
    LINK_EXPECTED_SPEED_BYTES_PER_SECOND: "meshd_link_expected_speed_bytes_per_second", Gauge, ["peer", "iface"], Some(Unit::BytesPerSecond),
        "The speed this node's cable to `peer` should negotiate, in bytes per second (80 Gb/s, 1e10, for TB5 Mac-to-Mac), where known.";
    LINK_RDMA_PORT_STATE: "meshd_link_rdma_port_state", Gauge, ["peer", "iface", "state"], None,
        "1 for the RDMA port state of this node's cable to `peer` (state=none|down|init|armed|active|active_defer; none: no RDMA device paired); a state it left reads 0 for five minutes.";
    LINK_RDMA_PROBE_RTT_SECONDS: "meshd_link_rdma_probe_rtt_seconds", Gauge, ["peer", "iface"], Some(Unit::Seconds),
        "Round trip of the last answered active RDMA probe (probe.rdma) on this node's cable to `peer`; no series while the probe does not run or nothing was answered.";
    LINK_RDMA_PROBES_TOTAL: "meshd_link_rdma_probes_total", Counter, ["peer", "iface"], None,
        "Active RDMA probes sent on this node's cable to `peer`; no series while the probe does not run.";
    LINK_RDMA_PROBE_FAILURES_TOTAL: "meshd_link_rdma_probe_failures_total", Counter, ["peer", "iface"], None,
        "Active RDMA probes unanswered within 500 ms, or that could not be sent (queue pair or device not usable), on this node's cable to `peer`.";
    LINK_ERRORS_TOTAL: "meshd_link_errors_total", Counter, ["peer", "iface", "counter"], None,
        "Error counters of the interface or RDMA port of this node's cable to `peer`, by `counter` name (as the platform names them: symbol_error, link_downed, rx_errors, ...).";
    LINKS_EXPECTED: "meshd_links_expected", Gauge, [], None,
        "Links a full mesh of the configured members needs: N(N-1)/2.";
    LINKS_OBSERVED: "meshd_links_observed", Gauge, [], None,
        "Links that at least one end currently probes, as this node knows from its own probes and fresh reports.";
    PROBE_RESPONDER_DATAGRAMS_TOTAL: "meshd_probe_responder_datagrams_total", Counter, ["outcome"], None,
        "Datagrams the probe responders of this node (one per cable end) handled, by `outcome`: answered, invalid (not a probe request), rate_limited, send_error, recv_error.";
    PEER_LAST_REPORT_TIMESTAMP_SECONDS: "meshd_peer_last_report_timestamp_seconds", Gauge, ["peer"], Some(Unit::Seconds),
        "When this node last heard `peer` on any path, on its own clock, in seconds since the Unix epoch.";
    PEER_PATH_UP: "meshd_peer_path_up", Gauge, ["peer", "path"], None,
        "1 while `peer`'s report stream on `path` (management, or this end of a cable) is open and spoke within report.stale_after, 0 otherwise.";
    PEER_CLOCK_OFFSET_SECONDS: "meshd_peer_clock_offset_seconds", Gauge, ["peer"], Some(Unit::Seconds),
        "`peer`'s clock minus this node's, measured NTP-style from the report streams; shown and alarmed on (clock_skew), never used in a verdict.";
    INSECURE: "meshd_insecure", Gauge, [], None,
        "1 when this node runs its mesh without TLS (tls.insecure): reports between nodes can be forged.";
    TLS_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS: "meshd_tls_certificate_expiry_timestamp_seconds", Gauge, ["node"], Some(Unit::Seconds),
        "When the certificate of `node` ends (its notAfter), in seconds since the Unix epoch: this node's own, and each peer's as its last handshake with this node showed it; no series without TLS.";
    REPORTS_REJECTED_TOTAL: "meshd_reports_rejected_total", Counter, ["reason"], None,
        "Peer streams and updates this node refused, by `reason` (unknown_node, replayed, old_incarnation, malformed, foreign_alarm, not_authenticated, over_limit, incarnation_ahead; protocol, a peer release too far apart, present once it happened).";
    REPORTS_SENT_TOTAL: "meshd_reports_sent_total", Counter, ["peer", "outcome"], None,
        "Report streams this node opened to `peer` (outcome accepted), updates the peer refused (rejected), and streams that broke or could not open (failed).";
    NODE_CPU_BUSY_RATIO: "meshd_node_cpu_busy_ratio", Gauge, [], Some(Unit::Ratio),
        "Busy share (0-1) of all CPU cores of this node.";
    TIMER_LATENESS_SECONDS: "meshd_timer_lateness_seconds", Gauge, [], Some(Unit::Seconds),
        "The latest this node's probe timer fired in the last 2 s (a tick overdue now counts as late as it is overdue).";
    TIMER_HELD_UP_SECONDS_TOTAL: "meshd_timer_held_up_seconds_total", Counter, [], Some(Unit::Seconds),
        "Time this node's probe timer was held up since meshd started, from when each late firing was due until it fired.";
    ALERTS_FIRING: "meshd_alerts_firing", Gauge, [], None,
        "Alerts this node, as the alert leader, keeps firing in Alertmanager (0 on other nodes).";
    ALERT_POSTS_TOTAL: "meshd_alert_posts_total", Counter, ["alertmanager", "outcome"], None,
        "Posts of alerts to `alertmanager` (host:port), by `outcome` (ok, failed).";
    BRIDGE_ACTIVE: "meshd_bridge_active", Gauge, ["bridge"], None,
        "1 while `bridge` forwards frames (macOS status active, Linux operstate up), 0 when inactive or gone.";
    BRIDGE_MESH_MEMBERS: "meshd_bridge_mesh_members", Gauge, ["bridge"], None,
        "Mesh ports that are members of `bridge`; above 0 on an active bridge is a bridge loop.";
    BRIDGE_BROADCAST_PACKETS_PER_SECOND: "meshd_bridge_broadcast_packets_per_second", Gauge, ["iface"], None,
        "Broadcast+multicast packets per second received on `iface` (bridges and their mesh members, where the OS counts them).";
    PROCESS_CPU_CORES: "meshd_process_cpu_cores", Gauge, ["process"], Some(Unit::Cores),
        "CPU used by the processes called `process`, in cores (1 = one full core): the busiest names, known offenders while they burn CPU, and `other` for the rest.";
    JOB_PROCESSES: "meshd_job_processes", Gauge, ["state"], None,
        "Processes matching a job pattern on this node, by `state` (busy: burning at least `watch.jobs.busy_cores`; idle).";
    CHECK_STATUS: "meshd_check_status", Gauge, ["node", "check", "status"], None,
        "This node's own platform check `check` (`node` is this node's id; empty for checks of the whole mesh): 1 for its current `status` (pass, warn, fail, skipped); a status it left reads 0 for five minutes.";
    CABLES: "meshd_cables", Gauge, ["source"], None,
        "Cables in this node's cable map, by `source`: discovered (Thunderbolt domain UUIDs) or configured ([[links]]).";
    FACTS_READ_DURATION_SECONDS: "meshd_facts_read_duration_seconds", Gauge, [], Some(Unit::Seconds),
        "How long the last read of this node's platform facts took (commands such as system_profiler, and sysfs).";
    FACTS_BLIND_SPOTS: "meshd_facts_blind_spots", Gauge, [], None,
        "Platform facts this node could not read on its last read (a command missing, failing or timing out), and the reasons its verbs stack cannot run the opt-in RDMA probe; `meshctl doctor` names them.";
    BOOT_TIME_SECONDS: "meshd_boot_time_seconds", Gauge, [], Some(Unit::Seconds),
        "When this node's host booted, in seconds since the Unix epoch (macOS kern.boottime, Linux btime); it changes on a reboot, not on a meshd restart.";
    MEMORY_TOTAL_BYTES: "meshd_memory_total_bytes", Gauge, [], Some(Unit::Bytes),
        "Physical memory of this node (macOS hw.memsize, Linux MemTotal).";
    MEMORY_WIRED_BYTES: "meshd_memory_wired_bytes", Gauge, [], Some(Unit::Bytes),
        "Memory the kernel will not page out (macOS wired pages, Linux Unevictable, which includes Mlocked); wired memory with no job running is a leak only a reboot frees.";
    MEMORY_LOCKED_BYTES: "meshd_memory_locked_bytes", Gauge, [], Some(Unit::Bytes),
        "Linux: memory locked by processes with mlock(2) (Mlocked).";
    MEMORY_SWAP_USED_BYTES: "meshd_memory_swap_used_bytes", Gauge, [], Some(Unit::Bytes),
        "Swap in use on this node.";
    MEMORY_SWAP_TOTAL_BYTES: "meshd_memory_swap_total_bytes", Gauge, [], Some(Unit::Bytes),
        "Swap this node has (macOS grows it as needed).";
    MEMORY_GPU_WIRED_LIMIT_BYTES: "meshd_memory_gpu_wired_limit_bytes", Gauge, [], Some(Unit::Bytes),
        "macOS: how much memory the GPU may wire (iogpu.wired_limit_mb); 0 is macOS's own default.";
    MEMORY_PRESSURE_LEVEL: "meshd_memory_pressure_level", Gauge, ["level"], None,
        "macOS: 1 for the kernel's memory pressure level (level=normal|warning|critical); a level it left reads 0 for five minutes.";
    MEMORY_STALL_RATIO: "meshd_memory_stall_ratio", Gauge, ["scope"], Some(Unit::Ratio),
        "Linux: share (0-1) of the last 10 s in which some (scope=some) or every (scope=full) runnable task waited for memory (PSI avg10).";
    JOB_ORPHANED_PROCESSES: "meshd_job_orphaned_processes", Gauge, [], None,
        "Job processes on this node whose launcher is gone (re-parented to launchd/init for longer than watch.jobs.orphan_grace).";
    JOB_ORPHANED_MEMORY_BYTES: "meshd_job_orphaned_memory_bytes", Gauge, [], Some(Unit::Bytes),
        "Resident memory the orphaned job processes hold.";
    CONFIG_LAST_RELOAD_SUCCESSFUL: "meshd_config_last_reload_successful", Gauge, [], None,
        "1 when the last read of the config file (at start, on a change or on SIGHUP) gave a valid config now in force, 0 when it was refused and the previous one stays.";
    CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS: "meshd_config_last_reload_success_timestamp_seconds", Gauge, [], Some(Unit::Seconds),
        "When the config in force was read, in seconds since the Unix epoch.";
    HISTORY_STORE_BYTES: "meshd_history_store_bytes", Gauge, [], Some(Unit::Bytes),
        "Size on disk of this node's incident history (history.path), kept under history.max_bytes; absent when the node keeps no history.";
    HISTORY_WRITE_ERRORS_TOTAL: "meshd_history_write_errors_total", Counter, [], None,
        "Writes to the incident history that failed (the incidents stay in memory and are written with the next batch), and batches dropped because the store fell behind.";
    HISTORY_INCIDENTS_RECORDED_TOTAL: "meshd_history_incidents_recorded_total", Counter, [], None,
        "Incidents this run of meshd wrote to its history for the first time.";
    CONNECTIONS_REFUSED_TOTAL: "meshd_connections_refused_total", Counter, ["listener", "reason"], None,
        "Connections the HTTP port (listener http) or the local gRPC listener (grpc_local) closed as soon as they were accepted, by `reason`: cap (the listener held its cap of connections) or descriptors (the open file descriptors were within the reserve kept for the watchers).";
    PROCESS_CPU_SECONDS_TOTAL: "process_cpu_seconds_total", Counter, [], Some(Unit::Seconds),
        "Total user and system CPU time spent by meshd, in seconds.";
    PROCESS_RESIDENT_MEMORY_BYTES: "process_resident_memory_bytes", Gauge, [], Some(Unit::Bytes),
        "Resident memory size of meshd, in bytes.";
    PROCESS_VIRTUAL_MEMORY_BYTES: "process_virtual_memory_bytes", Gauge, [], Some(Unit::Bytes),
        "Virtual memory size of meshd, in bytes.";
    PROCESS_OPEN_FDS: "process_open_fds", Gauge, [], None,
        "Open file descriptors of meshd.";
    PROCESS_MAX_FDS: "process_max_fds", Gauge, [], None,
        "The most file descriptors meshd may open (its soft limit).";
    PROCESS_START_TIME_SECONDS: "process_start_time_seconds", Gauge, [], Some(Unit::Seconds),
        "When meshd started, in seconds since the Unix epoch.";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/METRICS.md is the written spec: every metric defined here must
    /// be in it, and every metric it lists must be defined here.
    #[test]
    fn the_metrics_spec_lists_exactly_the_defined_metrics() {
        let spec = include_str!("../../../docs/METRICS.md");
        for (metric, _) in ALL {
            assert!(
                spec.contains(&format!("| `{}` |", metric.name)),
                "{} is not in docs/METRICS.md",
                metric.name
            );
        }
        let listed = spec
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter(|l| l.starts_with("meshd_") || l.starts_with("process_"))
            .filter_map(|l| l.split('`').next())
            .map(str::to_owned);
        for name in listed {
            assert!(
                ALL.iter().any(|(defined, _)| defined.name == name),
                "docs/METRICS.md lists {name}, which meshd does not export"
            );
        }
    }

    /// The process metrics of the Prometheus client libraries, by their
    /// standard names (not meshd's prefix), so that dashboards for any
    /// exporter work.
    const STANDARD_PROCESS: &[&str] = &[
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ];

    /// Prometheus conventions: counters end in `_total`, a unit is the
    /// name's last word, names are unique and prefixed.
    #[test]
    fn names_follow_the_conventions() {
        let mut seen = std::collections::BTreeSet::new();
        for (metric, unit) in ALL {
            assert!(
                metric.name.starts_with("meshd_") || STANDARD_PROCESS.contains(&metric.name),
                "{}",
                metric.name
            );
            assert!(seen.insert(metric.name), "{} defined twice", metric.name);
            assert_eq!(
                metric.kind == Kind::Counter,
                metric.name.ends_with("_total"),
                "{}: only counters end in _total",
                metric.name
            );
            if let Some(unit) = unit {
                assert!(
                    metric
                        .name
                        .trim_end_matches("_total")
                        .ends_with(unit.suffix()),
                    "{} is in {unit:?} but its name does not say so",
                    metric.name
                );
            }
            assert!(!metric.labels.contains(&"le"), "{}", metric.name);
        }
    }
}
