//! The one place the TOML config becomes the settings each part of meshd
//! takes: the model's rules (verdicts, watchers), the prober's, the report
//! book's. The model never sees the config; the config never reaches past
//! this module into a decision.

use meshd_domain::{LinkEnd, NodeId};
use meshd_model::boot::BootRules;
use meshd_model::bridge::StormSettings;
use meshd_model::cpu::SpikeRules;
use meshd_model::job_mesh::MeshJobRules;
use meshd_model::job_watch::JobSettings;
use meshd_model::jobs::JobRules;
use meshd_model::link_rules::LinkRules;
use meshd_model::memory::MemoryRules;
use meshd_model::node::NodeSettings;
use meshd_model::orphans::OrphanRules;
use meshd_model::outbox::OutboxSettings;
use meshd_model::peers::BookSettings;
use meshd_model::stall::StallRules;
use meshd_model::verdict::{EngineSettings, ExpectedLink};

use super::{
    BootWatchConfig, Config, CpuWatchConfig, JobWatchConfig, LinkConfig, MemoryWatchConfig,
};

/// A link's figures (RTT, loss) are sent to the peers at most this many
/// heartbeats apart when nothing the verdicts rest on changed.
const REFRESH_HEARTBEATS: u32 = 2;

fn link_rules(config: &Config) -> LinkRules {
    let t = &config.thresholds;
    LinkRules {
        down_after: t.down_after,
        loss_degraded: t.loss_degraded,
        loss_down: t.loss_down,
        rtt_p99_factor: t.rtt_p99_factor,
        rtt_min_increase: t.rtt_min_increase,
        flap_window: t.flap_window,
        flap_changes: t.flap_changes,
        probe_timeout: config.probe.timeout,
        probe_interval: config.probe.interval,
        tick_gap: crate::cadence::longest_gap(config.probe.interval),
    }
}

/// The verdict engine's settings.
pub fn engine(config: &Config) -> EngineSettings {
    EngineSettings::new(
        config.report.interval,
        config.report.stale_after,
        config.thresholds.clock_skew,
        link_rules(config),
    )
}

/// The node core's settings: the engine's, when to send the peers what,
/// and the rules of the judgements the core makes beside the verdicts
/// (boots, job ranks, saturation).
pub fn node(config: &Config) -> NodeSettings {
    NodeSettings {
        engine: engine(config),
        outbox: OutboxSettings {
            heartbeat: config.report.interval,
            refresh: config.report.interval.saturating_mul(REFRESH_HEARTBEATS),
            rules: link_rules(config),
        },
        boot: boot_rules(&config.watch.boot),
        jobs: jobs(&config.watch.jobs),
        cpu_saturated_above: config.thresholds.cpu_saturated,
    }
}

/// The peer book's settings. A peer silent for a heartbeat and a half that
/// speaks again is news the engine must see at once: it missed its
/// heartbeat.
pub fn book(config: &Config) -> BookSettings {
    BookSettings {
        quiet_after: config.report.interval.saturating_mul(3) / 2,
        rules: link_rules(config),
        boot_alarm_for: config.watch.boot.alarm_for,
    }
}

/// The cables this node is configured to have.
pub fn expected_links(config: &Config, local: &NodeId) -> Vec<ExpectedLink> {
    config
        .links
        .iter()
        .map(|link| expected_link(link, local))
        .collect()
}

/// One cable of `config` as `local` is configured to have it.
pub fn expected_link(link: &LinkConfig, local: &NodeId) -> ExpectedLink {
    ExpectedLink {
        local: LinkEnd {
            node: local.clone(),
            iface: link.local_iface.clone(),
            address: Some(link.local_address),
            rdma_device: link.rdma_device_on(meshd_platform::this_os()),
            rdma_port: None,
        },
        remote: LinkEnd {
            address: Some(link.peer_address),
            ..LinkEnd::node_only(link.peer.clone())
        },
        expected_speed_bps: link
            .expected_speed_gbps
            .map(|gbps| u64::from(gbps) * 1_000_000_000),
    }
}

pub fn spike_rules(c: &CpuWatchConfig) -> SpikeRules {
    SpikeRules {
        spike_ratio: c.spike_ratio,
        spike_window: c.spike_window,
        top: c.top,
        offenders: c.offenders.clone(),
    }
}

pub fn jobs(c: &JobWatchConfig) -> JobSettings {
    JobSettings {
        hung: JobRules {
            patterns: c.patterns.clone(),
            busy_cores: c.busy_cores,
            window: c.window,
        },
        orphans: OrphanRules {
            patterns: c.patterns.clone(),
            grace: c.orphan_grace,
        },
        stalls: StallRules {
            window: c.stall_window,
            busy_cores: c.busy_cores,
            idle_cores: c.idle_cores,
        },
        mesh: MeshJobRules {
            spinning_for: c.silent_rank_window,
            blocked_for: c.silent_rank_blocked_window,
        },
        network_namespace: if c.own_network_namespace_only {
            own_network_namespace()
        } else {
            None
        },
    }
}

/// meshd's own network namespace (Linux); `None` where there is none to
/// tell, and then every rank on the host is this node's.
fn own_network_namespace() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        meshd_platform::linux::procs::namespace_inode(std::path::Path::new("/proc/self/ns/net"))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

pub fn memory_rules(c: &MemoryWatchConfig) -> MemoryRules {
    MemoryRules {
        wired_leak_ratio: c.wired_leak_ratio,
        leak_window: c.leak_window,
        pressure_window: c.pressure_window,
        stall_critical_ratio: c.stall_critical_ratio,
    }
}

pub fn boot_rules(c: &BootWatchConfig) -> BootRules {
    BootRules {
        alarm_for: c.alarm_for,
    }
}

pub fn storm(config: &Config) -> StormSettings {
    StormSettings {
        packets_per_second: config.watch.bridge.storm_packets_per_second,
        window: config.watch.bridge.storm_window,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model's tests run with fixed settings; they must be what a
    /// config that sets nothing gives, or those tests test something else.
    #[test]
    fn the_default_config_gives_the_settings_the_model_tests_use() {
        let config = Config::embedded_default("test");
        assert_eq!(
            engine(&config),
            meshd_model::fixtures::default_engine_settings()
        );
        assert_eq!(
            node(&config),
            meshd_model::fixtures::default_node_settings()
        );
        assert_eq!(
            book(&config),
            meshd_model::fixtures::default_book_settings()
        );
    }
}
