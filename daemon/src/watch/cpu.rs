//! Samples this node's CPU and its processes, runs the spike detector, keeps
//! the per-process metrics, and hands each sample to the job watcher.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use meshd_model::time::Moment;
use meshd_proto::domain::{Alarm, NodeId};
use sysinfo::{
    CpuRefreshKind, ProcessRefreshKind, ProcessStatus, ProcessesToUpdate, RefreshKind, System,
    UpdateKind,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, CpuWatchConfig, settings};
use crate::metrics::Metrics;
use crate::watch::{Wake, next_wake, publish, ticks};
use meshd_model::cpu::{CpuSample, ProcessSample, SpikeDetector, reduce_for_metrics};

/// Command lines are for matching job patterns and for evidence; a few
/// hundred characters hold the interpreter, script and module.
const MAX_COMMAND_CHARS: usize = 512;

/// Linux keeps only this many bytes of a process name (TASK_COMM_LEN - 1);
/// `UniversalControl` is 16.
const TRUNCATED_NAME_LEN: usize = 15;

/// One sample and when it was taken.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub at: Moment,
    pub sample: CpuSample,
}

/// The real sampling path: sysinfo's CPU and process tables.
#[derive(Debug)]
pub struct Sampler {
    system: System,
    primed: bool,
}

impl Sampler {
    pub fn new() -> Result<Self, sysinfo::Error> {
        let refresh = RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing().with_usage());
        Ok(Self {
            system: System::new_with_specifics(refresh)?,
            primed: false,
        })
    }

    /// Refreshes CPU usage and the process table; `None` on the first call,
    /// since a usage figure is a rate between two refreshes.
    pub fn sample(&mut self) -> Option<CpuSample> {
        self.system.refresh_cpu_usage();
        // Processes only (no threads), CPU time and resident memory every
        // time (the orphan watcher names what a stray rank holds), the
        // command line once per process: one small read per pid.
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::All,
            true,
            ProcessRefreshKind::nothing()
                .with_cpu()
                .with_memory()
                .with_cmd(UpdateKind::OnlyIfNotSet)
                .without_tasks(),
        );
        if !std::mem::replace(&mut self.primed, true) {
            return None;
        }
        let busy = f64::from(self.system.global_cpu_usage()) / 100.0;
        let processes = self
            .system
            .processes()
            .iter()
            // A zombie has exited: it holds no memory and runs nothing,
            // though a parent that does not reap it keeps it listed.
            .filter(|(_, process)| process.status() != ProcessStatus::Zombie)
            .map(|(pid, process)| {
                let cmd = process.cmd();
                ProcessSample {
                    name: full_name(
                        &process.name().to_string_lossy(),
                        cmd.first().map(|a| a.to_string_lossy()).as_deref(),
                    ),
                    pid: pid.as_u32(),
                    cores: finite(f64::from(process.cpu_usage()) / 100.0).max(0.0),
                    command: command_line(cmd),
                    parent: process.parent().map(|p| p.as_u32()),
                    memory_bytes: Some(process.memory()),
                }
            })
            .collect();
        Some(CpuSample {
            busy_ratio: finite(busy).clamp(0.0, 1.0),
            processes,
        })
    }
}

fn finite(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// The process name, completed from `argv[0]` where the kernel cut it short,
/// so offender names match on Linux as on macOS.
pub fn full_name(name: &str, argv0: Option<&str>) -> String {
    if name.len() >= TRUNCATED_NAME_LEN
        && let Some(base) = argv0
            .and_then(|a| Path::new(a).file_name())
            .and_then(|b| b.to_str())
        && base.len() > name.len()
        && base.starts_with(name)
    {
        return base.to_owned();
    }
    name.to_owned()
}

fn command_line(cmd: &[OsString]) -> Option<String> {
    if cmd.is_empty() {
        return None;
    }
    let mut line = String::new();
    for arg in cmd {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&arg.to_string_lossy());
        if line.len() > MAX_COMMAND_CHARS {
            let end = (0..=MAX_COMMAND_CHARS)
                .rev()
                .find(|i| line.is_char_boundary(*i))
                .unwrap_or(0);
            line.truncate(end);
            break;
        }
    }
    Some(line)
}

/// What the CPU watcher publishes.
#[derive(Debug, Clone)]
pub struct CpuWatch {
    /// The `cpu_spike` alarm while it is active.
    pub alarms: watch::Receiver<Vec<Alarm>>,
    /// The latest sample, for the job watcher.
    pub samples: watch::Receiver<Option<Arc<Sampled>>>,
}

fn sample_every(config: &CpuWatchConfig) -> tokio::time::Interval {
    ticks(config.interval.max(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL))
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
            // A process table scan reads one file (Linux) or one sysctl
            // (macOS) per process: milliseconds, kept off the runtime.
            let scanned = tokio::task::spawn_blocking(move || {
                let sample = sampler.sample();
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
            let Some(sample) = sample else { continue };
            let at = Moment {
                now: std::time::Instant::now(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_names_are_completed_from_argv0() {
        assert_eq!(
            full_name("UniversalContro", Some("/tmp/x/UniversalControl")),
            "UniversalControl"
        );
        assert_eq!(
            full_name("UniversalControl", Some("/System/UniversalControl")),
            "UniversalControl"
        );
        // Short names are whole; argv[0] can be anything.
        assert_eq!(full_name("yes", Some("/tmp/UniversalControl")), "yes");
        assert_eq!(
            full_name("UniversalContro", Some("/usr/bin/python3")),
            "UniversalContro"
        );
        assert_eq!(full_name("UniversalContro", None), "UniversalContro");
    }

    #[test]
    fn command_lines_are_joined_and_capped() {
        assert_eq!(command_line(&[]), None);
        let cmd: Vec<OsString> = ["python3", "-m", "mlx.launch"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(command_line(&cmd).as_deref(), Some("python3 -m mlx.launch"));
        let long = vec![OsString::from("é".repeat(1000))];
        assert!(command_line(&long).unwrap().len() <= MAX_COMMAND_CHARS);
    }
}
