//! Settings, moments and observations shared by the model's tests (and,
//! through the `fixtures` feature, by the daemon's tests, which check that
//! the config's defaults map to exactly these settings). The vocabulary
//! below them (ids, link ends, wall-clock times) is the domain's fixtures.

use std::time::{Duration, Instant};

use meshd_domain::fixtures::{id, wall_ms};
use meshd_domain::{
    InterfaceState, LinkEnd, LinkFigures, LinkObservation, LossWindow, RdmaPortState, RttHistogram,
    RttSummary,
};

use crate::link_rules::{LinkRules, MEDIUM_WINDOW, SHORT_WINDOW};
use crate::time::Moment;
use crate::verdict::EngineSettings;

/// Tests make up their times as offsets from one real instant, the same
/// for the whole test run: the only clock read in the model's code, and it
/// is test code.
#[expect(
    clippy::disallowed_methods,
    reason = "an `Instant` can only be had from the clock"
)]
pub fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The instant `secs` seconds after [`epoch`].
pub fn instant(secs: u64) -> Instant {
    instant_ms(secs * 1_000)
}

/// The instant `ms` milliseconds after [`epoch`].
pub fn instant_ms(ms: u64) -> Instant {
    epoch() + Duration::from_millis(ms)
}

/// The moment `secs` seconds after [`epoch`], on both clocks.
pub fn moment(secs: u64) -> Moment {
    moment_ms(secs * 1_000)
}

/// The moment `ms` milliseconds after [`epoch`], on both clocks: the wall
/// clock as many milliseconds after the domain fixtures' wall-clock origin.
pub fn moment_ms(ms: u64) -> Moment {
    Moment {
        now: instant_ms(ms),
        wall: wall_ms(ms),
    }
}

/// A node that stalled once, `worst` long, since it started.
pub fn stalled_once(worst: Duration) -> meshd_domain::Lateness {
    meshd_domain::Lateness {
        worst,
        held_up_total: worst,
    }
}

/// The engine settings of a config that sets nothing (`meshd.example.toml`
/// documents the same values).
pub fn default_engine_settings() -> EngineSettings {
    EngineSettings::new(
        Duration::from_secs(1),
        Duration::from_secs(3),
        Duration::from_secs(1),
        LinkRules {
            down_after: Duration::from_millis(600),
            loss_degraded: 0.02,
            loss_down: 0.5,
            rtt_p99_factor: 3.0,
            rtt_min_increase: Duration::from_millis(1),
            flap_window: Duration::from_secs(60),
            flap_changes: 4,
            probe_timeout: Duration::from_millis(500),
            probe_interval: Duration::from_millis(100),
            // The daemon's 100 ms tick on its 64 ms grid.
            tick_gap: Duration::from_millis(128),
        },
    )
}

/// The link rules of [`default_engine_settings`].
pub fn link_rules() -> LinkRules {
    default_engine_settings().link
}

/// `from`'s view of a healthy cable to `to`: replies flowing, no loss, RTTs
/// well inside the baseline.
pub fn healthy_observation(from: &str, to: &str) -> LinkObservation {
    LinkObservation {
        local: LinkEnd::node_only(id(from)),
        remote: LinkEnd::node_only(id(to)),
        figures: LinkFigures {
            interface_state: InterfaceState::Unknown,
            negotiated_speed_bps: None,
            expected_speed_bps: None,
            rdma_port_state: RdmaPortState::None,
            rtt: RttSummary {
                p50: Duration::from_micros(40),
                p90: Duration::from_micros(60),
                p99: Duration::from_micros(90),
                baseline_p99: Duration::from_micros(100),
                samples: 100,
                ..RttSummary::default()
            },
            loss: vec![
                LossWindow {
                    window: SHORT_WINDOW,
                    sent: 10,
                    lost: 0,
                },
                LossWindow {
                    window: MEDIUM_WINDOW,
                    sent: 100,
                    lost: 0,
                },
            ],
            silence: Duration::from_millis(50),
        },
        gid_matches_address: None,
        rtt_histogram: RttHistogram::default(),
        mtu_loss: vec![LossWindow {
            window: MEDIUM_WINDOW,
            sent: 10,
            lost: 0,
        }],
        probes_sent_total: 1000,
        probes_lost_total: 0,
        last_reply_at: Some(std::time::SystemTime::UNIX_EPOCH),
        error_counters: vec![],
        consecutive_lost: 0,
        silence_confirmed: false,
        lateness: Duration::ZERO,
        rdma_probe: None,
        rdma_endpoint: None,
        carrier: None,
    }
}

/// The node core's settings of a config that sets nothing: the engine's
/// above, a heartbeat a second with figures at most every other one, and the
/// watchers' defaults. The daemon's tests pin the config's defaults to these.
pub fn default_node_settings() -> crate::node::NodeSettings {
    let engine = default_engine_settings();
    let patterns: Vec<String> = ["mlx", "exo", "rpc-server", "ggml-rpc"]
        .map(str::to_owned)
        .to_vec();
    crate::node::NodeSettings {
        engine,
        outbox: crate::outbox::OutboxSettings {
            heartbeat: Duration::from_secs(1),
            refresh: Duration::from_secs(2),
            rules: engine.link,
        },
        boot: crate::boot::BootRules {
            alarm_for: Duration::from_secs(15 * 60),
        },
        jobs: crate::job_watch::JobSettings {
            hung: crate::jobs::JobRules {
                patterns: patterns.clone(),
                busy_cores: 0.9,
                window: Duration::from_secs(10),
            },
            orphans: crate::orphans::OrphanRules {
                patterns,
                grace: Duration::from_secs(30),
            },
            stalls: crate::stall::StallRules {
                window: Duration::from_secs(60),
                busy_cores: 0.9,
                idle_cores: 0.05,
            },
            mesh: crate::job_mesh::MeshJobRules {
                spinning_for: Duration::from_secs(2),
                blocked_for: Duration::from_secs(30),
            },
            network_namespace: None,
        },
        cpu_saturated_above: 0.9,
    }
}

/// The peer book's settings of a config that sets nothing (the daemon's
/// tests pin the config's defaults to these): a peer silent for a heartbeat
/// and a half that speaks again is news.
pub fn default_book_settings() -> crate::peers::BookSettings {
    crate::peers::BookSettings {
        quiet_after: Duration::from_millis(1_500),
        rules: link_rules(),
        boot_alarm_for: Duration::from_secs(15 * 60),
    }
}
