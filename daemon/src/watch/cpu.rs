//! Samples this node's CPU and its processes, runs the spike detector, keeps
//! the per-process metrics, and hands each sample to the job watcher.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use meshd_domain::{Alarm, NodeId};
use meshd_model::time::Moment;
use sysinfo::{CpuRefreshKind, RefreshKind, System};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cadence;
use crate::config::{Config, CpuWatchConfig, settings};
use crate::metrics::Metrics;
use crate::watch::processes::ProcessTable;
use crate::watch::{Wake, next_wake, publish};
use meshd_model::cpu::{CpuSample, SpikeDetector, reduce_for_metrics};

/// One sample and when it was taken.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub at: Moment,
    pub sample: CpuSample,
}

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
    /// The latest sample, for the job watcher.
    pub samples: watch::Receiver<Option<Arc<Sampled>>>,
}

fn sample_every(config: &CpuWatchConfig) -> cadence::Ticker {
    cadence::every(config.interval.max(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL))
}

/// Starts sampling every `watch.cpu.interval`, following config reloads. `other_alarms` are the other
/// local watchers' active alarms (a broadcast storm explains a spike).
pub fn spawn(
    node: NodeId,
    mut configs: watch::Receiver<Arc<Config>>,
    other_alarms: Vec<watch::Receiver<Vec<Alarm>>>,
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
        let mut config = configs.borrow_and_update().watch.cpu.clone();
        let mut detector = SpikeDetector::new(node, &settings::spike_rules(&config));
        let mut tick = sample_every(&config);
        while let Some(wake) = next_wake(&mut tick, &mut configs, &shutdown).await {
            if let Wake::Reconfigured(new) = wake {
                config = new.watch.cpu.clone();
                detector.reconfigure(&settings::spike_rules(&config));
                tick = sample_every(&config);
                continue;
            }
            // A process table scan reads one small file (Linux) or makes one
            // call (macOS) per process: milliseconds, kept off the runtime.
            let scanned = tokio::task::spawn_blocking(move || {
                let sample = sampler.sample(Instant::now());
                (sampler, sample)
            })
            .await;
            let sample = match scanned {
                Ok((back, sample)) => {
                    sampler = back;
                    sample
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
                config.top,
                &config.offenders,
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
            samples_tx.send_replace(Some(Arc::new(Sampled { at, sample })));
        }
    });
    CpuWatch { alarms, samples }
}
