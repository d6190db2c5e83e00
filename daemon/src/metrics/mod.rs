//! What meshd exports to Prometheus, written at scrape time from what each
//! part of the node holds right then: the aggregator's latest publication
//! (verdicts, this node's links, what the evaluation rested on), and the
//! latest samples and counts of the watchers, the reporter, the alert
//! pusher and the probe responders. Nothing is written per evaluation, and
//! a series exists only while what it describes does (plus a short while
//! at 0, see [`exposition::Vanishing`]).
//!
//! Each node owns its own `Metrics`, so several nodes can live in one
//! process (the demo, the integration tests) without mixing their series.

pub mod catalogue;
mod config;
mod delivery;
pub mod exposition;
mod history;
mod links;
mod listeners;
mod mesh;
mod probes;
mod process;
#[cfg(test)]
mod scale_tests;
mod watchers;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime};

use meshd_domain::NodeIdentity;

pub use config::ConfigSeries;
pub use delivery::{AlertPostOutcome, DeliverySeries, ReportOutcome};
pub use history::HistorySeries;
pub use listeners::{Listener, ListenerSeries, Refusal};
pub use probes::{ProbeSeries, ResponderCounters, ResponderStats};
pub use watchers::WatcherSeries;

use crate::certificates::Certificates;
use crate::state::Published;
use exposition::Exposition;
use links::LinkSeries;
use mesh::MeshSeries;
use process::ProcessSeries;

/// Recorders never panic while holding a lock, but a poisoned one still
/// holds the last good values.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One node's metrics: what the parts of the node record, and the one way
/// to render them.
#[derive(Debug)]
pub struct Metrics {
    build: [String; 4],
    insecure: std::sync::atomic::AtomicBool,
    /// The certificates of a node running mutual TLS, once it started.
    certificates: std::sync::OnceLock<Arc<Certificates>>,
    mesh: MeshSeries,
    links: LinkSeries,
    pub delivery: DeliverySeries,
    pub watchers: WatcherSeries,
    pub probes: ProbeSeries,
    pub config: ConfigSeries,
    pub history: HistorySeries,
    pub listeners: ListenerSeries,
    process: ProcessSeries,
}

impl Metrics {
    /// A node's metrics, made as it starts with the config just read.
    pub fn new(identity: &NodeIdentity) -> Self {
        Self {
            build: [
                identity.id.to_string(),
                identity.version.clone(),
                std::env::consts::OS.to_owned(),
                std::env::consts::ARCH.to_owned(),
            ],
            insecure: std::sync::atomic::AtomicBool::new(false),
            certificates: std::sync::OnceLock::new(),
            mesh: MeshSeries::default(),
            links: LinkSeries::default(),
            delivery: DeliverySeries::default(),
            watchers: WatcherSeries::default(),
            probes: ProbeSeries::default(),
            config: ConfigSeries::new(SystemTime::now()),
            history: HistorySeries::default(),
            listeners: ListenerSeries::default(),
            process: ProcessSeries::default(),
        }
    }

    /// Whether the mesh runs without TLS.
    pub fn set_insecure(&self, insecure: bool) {
        self.insecure
            .store(insecure, std::sync::atomic::Ordering::Relaxed);
    }

    /// Exports the expiry of the certificates in `certificates`.
    pub fn watch_certificates(&self, certificates: Arc<Certificates>) {
        let _ = self.certificates.set(certificates);
    }

    /// The Prometheus text exposition of every series, with the verdict and
    /// link series as of `published`, the aggregator's newest evaluation.
    pub fn render(&self, published: &Published) -> String {
        self.render_at(published, Instant::now())
    }

    /// [`Self::render`] at `now`, which decides how long a vanished series
    /// has read 0.
    fn render_at(&self, published: &Published, now: Instant) -> String {
        let mut out = Exposition::new();
        let build: Vec<&str> = self.build.iter().map(String::as_str).collect();
        out.family(&catalogue::BUILD_INFO).sample(&build, 1.0);
        out.family(&catalogue::INSECURE).sample(
            &[],
            exposition::flag(self.insecure.load(std::sync::atomic::Ordering::Relaxed)),
        );
        let expiries = self
            .certificates
            .get()
            .map(|c| c.expiries())
            .unwrap_or_default();
        let mut expiry = out.family(&catalogue::TLS_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS);
        for (node, at) in &expiries {
            expiry.sample(&[node.as_str()], links::unix_seconds(*at));
        }
        self.mesh.write(&mut out, published, now);
        self.links.write(&mut out, &published.links, now);
        self.probes.write(&mut out);
        self.delivery.write(&mut out);
        self.watchers.write(&mut out, published.jobs, now);
        self.config.write(&mut out);
        self.history.write(&mut out);
        self.listeners.write(&mut out);
        self.process.write(&mut out);
        out.into_text()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, SystemTime};

    use meshd_domain::fixtures::{end, id, wall_ms};
    use meshd_domain::{
        Counter, InterfaceState, LinkEnd, LinkFigures, LinkObservation, RdmaPortState, RdmaProbe,
        RttHistogram, RttSummary,
    };

    use super::*;

    /// Node a, whose version the build info is checked to carry.
    fn identity() -> NodeIdentity {
        NodeIdentity {
            version: "0".to_owned(),
            hostname: "h".to_owned(),
            ..meshd_domain::fixtures::identity("a", 1)
        }
    }

    #[test]
    fn processes_that_leave_the_top_read_zero() {
        let m = Metrics::new(&identity());
        let published = Published::placeholder(&identity());
        let sample = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
        };
        m.watchers
            .record_process_cpu(&sample(&[("yes", 1.0), ("other", 0.25)]));
        let text = m.render(&published);
        assert!(
            text.contains(r#"meshd_process_cpu_cores{process="yes"} 1"#),
            "{text}"
        );
        m.watchers
            .record_process_cpu(&sample(&[("python3", 2.0), ("other", 0.5)]));
        let text = m.render(&published);
        for line in [
            r#"meshd_process_cpu_cores{process="yes"} 0"#,
            r#"meshd_process_cpu_cores{process="python3"} 2"#,
            r#"meshd_process_cpu_cores{process="other"} 0.5"#,
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }

    #[test]
    fn cable_speed_rdma_state_errors_and_rtt_are_exported_per_peer() {
        let metrics = Metrics::new(&identity());
        let observation = LinkObservation {
            local: end("a", "en2"),
            remote: LinkEnd::node_only(id("b")),
            figures: LinkFigures {
                interface_state: InterfaceState::Up,
                negotiated_speed_bps: Some(40_000_000_000),
                expected_speed_bps: Some(80_000_000_000),
                rdma_port_state: RdmaPortState::Active,
                rtt: RttSummary {
                    p50: Duration::from_micros(250),
                    p99: Duration::from_millis(2),
                    samples: 9,
                    ..RttSummary::default()
                },
                loss: vec![],
                silence: Duration::ZERO,
            },
            gid_matches_address: Some(true),
            rtt_histogram: RttHistogram {
                bounds: vec![Duration::from_micros(100), Duration::from_millis(1)],
                counts: vec![0, 7, 2],
                sum: Duration::from_micros(5_750),
            },
            mtu_loss: vec![],
            probes_sent_total: 10,
            probes_lost_total: 0,
            last_reply_at: Some(wall_ms(250)),
            error_counters: vec![Counter {
                name: "symbol_error".into(),
                value: 3,
                saturated: false,
            }],
            consecutive_lost: 0,
            silence_confirmed: false,
            lateness: Duration::ZERO,
            rdma_probe: Some(RdmaProbe {
                last_rtt: Some(Duration::from_micros(40)),
                consecutive_failures: 1,
                last_ok_at: None,
                probes_sent_total: 60,
                probes_failed_total: 2,
            }),
            rdma_endpoint: None,
            carrier: None,
        };
        let published = Published {
            links: vec![observation],
            ..Published::placeholder(&identity())
        };
        // Rendered twice: a total read twice is still the total.
        metrics.render(&published);
        let text = metrics.render(&published);
        for line in [
            "meshd_link_speed_bytes_per_second{peer=\"b\",iface=\"en2\"} 5000000000",
            "meshd_link_rtt_p50_seconds{peer=\"b\",iface=\"en2\"} 0.00025",
            "meshd_link_rtt_p99_seconds{peer=\"b\",iface=\"en2\"} 0.002",
            "meshd_link_expected_speed_bytes_per_second{peer=\"b\",iface=\"en2\"} 10000000000",
            "meshd_link_rdma_port_state{peer=\"b\",iface=\"en2\",state=\"active\"} 1",
            "meshd_link_errors_total{peer=\"b\",iface=\"en2\",counter=\"symbol_error\"} 3",
            "meshd_link_rtt_seconds_bucket{peer=\"b\",iface=\"en2\",le=\"0.0001\"} 0",
            "meshd_link_rtt_seconds_bucket{peer=\"b\",iface=\"en2\",le=\"0.001\"} 7",
            "meshd_link_rtt_seconds_bucket{peer=\"b\",iface=\"en2\",le=\"+Inf\"} 9",
            "meshd_link_rtt_seconds_count{peer=\"b\",iface=\"en2\"} 9",
            "meshd_link_rtt_seconds_sum{peer=\"b\",iface=\"en2\"} 0.00575",
            "meshd_link_last_reply_timestamp_seconds{peer=\"b\",iface=\"en2\"} 1800000000.25",
            "meshd_link_rdma_probe_rtt_seconds{peer=\"b\",iface=\"en2\"} 0.00004",
            "meshd_link_rdma_probes_total{peer=\"b\",iface=\"en2\"} 60",
            "meshd_link_rdma_probe_failures_total{peer=\"b\",iface=\"en2\"} 2",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }

        // The same series in the same order, whatever order the links come in.
        let other = LinkObservation {
            remote: LinkEnd::node_only(id("c")),
            ..published.links[0].clone()
        };
        let order = |links: Vec<LinkObservation>| {
            let published = Published {
                links,
                ..Published::placeholder(&identity())
            };
            metrics
                .render(&published)
                .lines()
                .filter(|l| l.starts_with("meshd_link_"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let first = published.links[0].clone();
        assert_eq!(
            order(vec![first.clone(), other.clone()]),
            order(vec![other, first])
        );
    }

    #[test]
    fn the_process_and_its_config_are_exported() {
        let metrics = Metrics::new(&identity());
        let published = Published::placeholder(&identity());
        let text = metrics.render(&published);
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} missing in:\n{text}"))
        };
        assert!(value("process_resident_memory_bytes") > 0.0);
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(value("process_start_time_seconds") > 1.6e9);
        #[cfg(target_os = "linux")]
        assert!(value("process_open_fds") > 0.0);
        assert_eq!(value("meshd_config_last_reload_successful"), 1.0);
        let read_at = value("meshd_config_last_reload_success_timestamp_seconds");

        metrics.config.refused();
        let text = metrics.render(&published);
        assert!(
            text.contains("meshd_config_last_reload_successful 0\n"),
            "{text}"
        );
        metrics
            .config
            .reloaded(SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000));
        let text = metrics.render(&published);
        assert!(
            text.contains("meshd_config_last_reload_successful 1\n"),
            "{text}"
        );
        assert!(
            text.contains("meshd_config_last_reload_success_timestamp_seconds 2000000000\n"),
            "{text}"
        );
        assert!(read_at > 1.6e9);
    }

    /// A hung job and its ranks are counted; when the jobs end their
    /// series read 0 before they go.
    #[test]
    fn jobs_are_counted_by_state_and_their_ranks_by_condition() {
        use meshd_domain::jobs::{JobBackend, JobView, RankCondition, RankView};

        let metrics = Metrics::new(&identity());
        let mut published = Published::placeholder(&identity());
        let text = metrics.render(&published);
        assert!(!text.contains("meshd_jobs{"), "no job, no series: {text}");
        let rank = |rank, condition| RankView {
            rank,
            node: id("a"),
            pid: 10 + rank,
            name: "python3".to_owned(),
            condition,
            busy: false,
        };
        Arc::make_mut(&mut published.status).jobs = vec![JobView {
            job: "10.0.0.1:5000".to_owned(),
            backend: JobBackend::Jaccl,
            world: Some(2),
            ranks: vec![
                rank(0, RankCondition::Live),
                rank(1, RankCondition::Stopped),
            ],
            hung: Some("job 10.0.0.1:5000 hangs".to_owned()),
            since: SystemTime::UNIX_EPOCH,
        }];
        let text = metrics.render(&published);
        for line in [
            "meshd_jobs{state=\"hung\"} 1\n",
            "meshd_job_ranks{condition=\"live\"} 1\n",
            "meshd_job_ranks{condition=\"stopped\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
        Arc::make_mut(&mut published.status).jobs.clear();
        let text = metrics.render(&published);
        assert!(text.contains("meshd_jobs{state=\"hung\"} 0\n"), "{text}");
    }

    /// Every family is announced once, with HELP and TYPE, and a scrape
    /// lists series in the same order every time.
    #[test]
    fn a_scrape_names_each_family_once_in_a_stable_order() {
        let metrics = Metrics::new(&identity());
        let published = Published::placeholder(&identity());
        // The series, without their values (the process's own move).
        let series = |text: &str| -> Vec<String> {
            text.lines()
                .map(|l| {
                    l.rsplit_once(' ')
                        .map_or(l, |(series, _)| series)
                        .to_owned()
                })
                .collect()
        };
        let first = metrics.render(&published);
        assert_eq!(series(&first), series(&metrics.render(&published)));
        let mut types = std::collections::BTreeSet::new();
        for line in first.lines().filter(|l| l.starts_with("# TYPE ")) {
            assert!(types.insert(line.to_owned()), "{line} twice in:\n{first}");
        }
        assert!(first.contains("meshd_build_info{node=\"a\",version=\"0\""));
    }
}
