//! Samples this node's CPU, its processes and (Linux) its RDMA ports' data
//! counters, runs the spike detector, keeps the per-process metrics, and
//! publishes each sample for the node core, which judges the job ranks and
//! the node's load from it.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use meshd_domain::facts::{NodeFacts, OsKind};
use meshd_domain::{Alarm, NodeId};
use meshd_model::job_watch::Sampled;
use meshd_model::stall::DataCounters;
use meshd_model::time::Moment;
use meshd_platform::linux::counters::read_data_counters;
use sysinfo::{CpuRefreshKind, RefreshKind, System};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cadence;
use crate::config::{Config, CpuWatchConfig, PlatformConfig, settings};
use crate::metrics::Metrics;
use crate::watch::facts::{FactsFeed, with_source};
use crate::watch::processes::ProcessTable;
use crate::watch::{Wake, next_wake, publish};
use meshd_model::cpu::{CpuSample, SpikeDetector, reduce_for_metrics};

/// The real sampling path: the OS's CPU counters (sysinfo; Linux
/// `/proc/stat`) and the process table ([`ProcessTable`]).
#[derive(Debug)]
pub struct Sampler {
    system: System,
    processes: ProcessTable,
    primed: bool,
}

impl Sampler {
    pub fn new() -> std::io::Result<Self> {
        let refresh = RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing().with_usage());
        Ok(Self {
            system: System::new_with_specifics(refresh).map_err(std::io::Error::other)?,
            processes: ProcessTable::new()?,
            primed: false,
        })
    }

    /// Refreshes CPU usage and the process table; `None` on the first call,
    /// since a usage figure is a rate between two refreshes.
    pub fn sample(&mut self, now: Instant) -> std::io::Result<Option<CpuSample>> {
        self.system.refresh_cpu_usage();
        let processes = self.processes.sample(now)?;
        if !std::mem::replace(&mut self.primed, true) {
            return Ok(None);
        }
        let busy = f64::from(self.system.global_cpu_usage()) / 100.0;
        Ok(Some(CpuSample {
            busy_ratio: if busy.is_finite() {
                busy.clamp(0.0, 1.0)
            } else {
                0.0
            },
            processes,
        }))
    }
}

/// What the CPU watcher publishes.
#[derive(Debug, Clone)]
pub struct CpuWatch {
    /// The `cpu_spike` alarm while it is active.
    pub alarms: watch::Receiver<Vec<Alarm>>,
    /// The latest sample, for the node core and the memory watcher.
    pub samples: watch::Receiver<Option<Arc<Sampled>>>,
}

fn sample_every(config: &CpuWatchConfig) -> cadence::Ticker {
    cadence::every(config.interval.max(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL))
}

/// Starts sampling every `watch.cpu.interval`, following config reloads.
/// `other_alarms` are the other local watchers' active alarms (a broadcast
/// storm explains a spike); `facts` say which ports are RDMA ports.
pub fn spawn(
    node: NodeId,
    mut configs: watch::Receiver<Arc<Config>>,
    other_alarms: Vec<watch::Receiver<Vec<Alarm>>>,
    facts: FactsFeed,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> CpuWatch {
    let (alarms_tx, alarms) = watch::channel(Vec::new());
    let (samples_tx, samples) = watch::channel(None);
    tokio::spawn(async move {
        let mut sampler = match Sampler::new() {
            Ok(sampler) => sampler,
            Err(err) => {
                tracing::warn!("cannot read CPU usage, CPU spikes and hung jobs go unseen: {err}");
                return;
            }
        };
        let mut config = configs.borrow_and_update().clone();
        let mut detector = SpikeDetector::new(node, &settings::spike_rules(&config.watch.cpu));
        let mut tick = sample_every(&config.watch.cpu);
        while let Some(wake) = next_wake(&mut tick, &mut configs, &shutdown).await {
            if let Wake::Reconfigured(new) = wake {
                config = new;
                detector.reconfigure(&settings::spike_rules(&config.watch.cpu));
                tick = sample_every(&config.watch.cpu);
                continue;
            }
            // A process table scan reads one small file (Linux) or makes one
            // call (macOS) per process, and the counters are a few sysfs
            // files: milliseconds, kept off the runtime.
            let (platform, facts) = (config.platform.clone(), facts.borrow().clone());
            let scanned = tokio::task::spawn_blocking(move || {
                let sample = sampler.sample(Instant::now());
                let counters = facts.and_then(|facts| data_counters(&platform, &facts));
                (sampler, sample, counters)
            })
            .await;
            let (sample, data_counters) = match scanned {
                Ok((back, sample, counters)) => {
                    sampler = back;
                    (sample, counters)
                }
                Err(err) => {
                    tracing::warn!("CPU sampler failed, CPU watch stops: {err}");
                    return;
                }
            };
            let sample = match sample {
                Ok(Some(sample)) => sample,
                Ok(None) => continue,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot read the process table this tick");
                    continue;
                }
            };
            let at = Moment {
                now: Instant::now(),
                wall: SystemTime::now(),
            };
            metrics.watchers.record_process_cpu(&reduce_for_metrics(
                &sample.processes,
                config.watch.cpu.top,
                &config.watch.cpu.offenders,
            ));
            let others: Vec<Alarm> = other_alarms
                .iter()
                .flat_map(|rx| rx.borrow().clone())
                .collect();
            let active: Vec<Alarm> = detector
                .update(&sample, &others, at)
                .cloned()
                .into_iter()
                .collect();
            publish(&alarms_tx, active);
            samples_tx.send_replace(Some(Arc::new(Sampled {
                at,
                sample,
                data_counters,
            })));
        }
    });
    CpuWatch { alarms, samples }
}

/// The data counters of this node's active RDMA ports, summed (Linux
/// sysfs); `None` where there are none to read: macOS, no RDMA port, or a
/// counter that cannot be read or has stopped at its maximum.
fn data_counters(platform: &PlatformConfig, facts: &NodeFacts) -> Option<DataCounters> {
    if facts.os != OsKind::Linux {
        return None;
    }
    with_source(platform, |source, _| {
        let mut total: u64 = 0;
        let mut ports = Vec::new();
        for port in &facts.ports {
            let Some(rdma) = &port.rdma else { continue };
            if port.rdma_device.is_empty() {
                continue;
            }
            let value = read_data_counters(source, &port.rdma_device, rdma.port)?;
            total = total.wrapping_add(value);
            ports.push(format!("{}/{}", port.rdma_device, rdma.port));
        }
        (!ports.is_empty()).then_some(DataCounters { total, ports })
    })
    .ok()
    .flatten()
}
