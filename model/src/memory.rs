//! Memory that stops jobs: critical memory pressure, and wired memory that
//! no live job owns. On Mac clusters, wired memory is known to stay wired
//! after a job dies (only a reboot frees it), and jobs wire most of the
//! memory each; a node that is "up" but has no memory left for the next
//! job is as broken as a dead one. Pure: readings and their time come in,
//! alarms go out.

use std::time::{Duration, SystemTime};

use crate::time::Moment;

use meshd_domain::facts::{MemoryFacts, MemoryPressure};
use meshd_domain::{Alarm, AlarmKind, NodeId, Severity};

use crate::cpu::Hold;

/// The daemon's config (`[watch.memory]`) supplies the values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryRules {
    /// Share of physical memory (0-1) wired with no job running that is a
    /// leak...
    pub wired_leak_ratio: f64,
    /// ...when it lasts this long (a job that just exited may still be
    /// unwinding).
    pub leak_window: Duration,
    /// Critical pressure must last this long.
    pub pressure_window: Duration,
    /// Linux: the share of the last 10 s in which every task stalled on
    /// memory (PSI `full avg10`, 0-1) that is critical pressure.
    pub stall_critical_ratio: f64,
}

/// What the job watcher knows of the job processes right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsRunning {
    /// Names of the live processes matching a job pattern.
    pub names: Vec<String>,
}

/// Raises `memory_pressure` and `wired_memory_leak` on this node.
#[derive(Debug, Clone)]
pub struct MemoryWatch {
    node: NodeId,
    rules: MemoryRules,
    pressure: Hold,
    leak: Hold,
    /// The alarms as last built while their condition held; kept while it
    /// clears so they still say what they were about.
    pressure_alarm: Option<Alarm>,
    leak_alarm: Option<Alarm>,
}

/// "180.0 GiB".
pub fn gib(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let gib = bytes as f64 / f64::from(1u32 << 30);
    format!("{gib:.1} GiB")
}

#[allow(clippy::cast_precision_loss)]
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Whether memory is critically short: the kernel's level on macOS, the
/// all-tasks stall share on Linux; `None` when neither was read.
fn critical(memory: &MemoryFacts, rules: &MemoryRules) -> Option<(bool, String)> {
    if let Some(level) = memory.pressure {
        return Some((
            level == MemoryPressure::Critical,
            format!("kernel memory pressure level {level}"),
        ));
    }
    let full = memory.stall_full_bp?;
    let ratio = f64::from(full) / 10_000.0;
    Some((
        ratio >= rules.stall_critical_ratio,
        format!(
            "every task stalled on memory {:.1}% of the last 10 s (critical at {:.1}%)",
            ratio * 100.0,
            rules.stall_critical_ratio * 100.0
        ),
    ))
}

impl MemoryWatch {
    pub fn new(node: NodeId, rules: MemoryRules) -> Self {
        Self {
            node,
            pressure: Hold::new(rules.pressure_window),
            leak: Hold::new(rules.leak_window),
            rules,
            pressure_alarm: None,
            leak_alarm: None,
        }
    }

    /// Takes new settings after a config reload, keeping what already holds.
    pub fn reconfigure(&mut self, rules: MemoryRules) {
        self.rules = rules;
        self.pressure.set_window(rules.pressure_window);
        self.leak.set_window(rules.leak_window);
    }

    /// Feeds one reading. `memory` or `jobs` being `None` (not read) leaves
    /// the alarms as they were: an unknown is neither a raise nor a clear.
    pub fn update(
        &mut self,
        memory: Option<&MemoryFacts>,
        jobs: Option<&JobsRunning>,
        moment: Moment,
    ) -> Vec<Alarm> {
        let now = moment.wall;
        if let Some(memory) = memory
            && let Some((holds, why)) = critical(memory, &self.rules)
        {
            match self
                .pressure
                .update(holds, moment.now)
                .map(|s| moment.wall_of(s))
            {
                None => self.pressure_alarm = None,
                Some(since) => match &mut self.pressure_alarm {
                    Some(alarm) if !holds => alarm.updated = now,
                    _ => self.pressure_alarm = Some(self.pressure_alarm(memory, &why, since, now)),
                },
            }
        }
        if let (Some(memory), Some(jobs)) = (memory, jobs)
            && let (Some(wired), Some(total)) = (memory.wired_bytes, memory.total_bytes)
        {
            let holds = jobs.names.is_empty() && share(wired, total) >= self.rules.wired_leak_ratio;
            match self
                .leak
                .update(holds, moment.now)
                .map(|s| moment.wall_of(s))
            {
                None => self.leak_alarm = None,
                Some(since) => match &mut self.leak_alarm {
                    Some(alarm) if !holds => alarm.updated = now,
                    _ => self.leak_alarm = Some(self.leak_alarm(memory, wired, total, since, now)),
                },
            }
        }
        self.pressure_alarm
            .iter()
            .chain(&self.leak_alarm)
            .cloned()
            .collect()
    }

    fn pressure_alarm(
        &self,
        memory: &MemoryFacts,
        why: &str,
        since: SystemTime,
        now: SystemTime,
    ) -> Alarm {
        let mut evidence = vec![why.to_owned()];
        evidence.extend(usage(memory));
        Alarm {
            kind: AlarmKind::MemoryPressure,
            severity: Severity::Critical,
            node: self.node.clone(),
            subject: "memory".to_owned(),
            summary: format!("memory on {} is critically short: {why}", self.node),
            evidence,
            fix: Some(
                "stop or shrink what runs on this node (a smaller model, a shorter context, \
                 fewer ranks); if iogpu.wired_limit_mb was raised, lower it (sudo sysctl \
                 iogpu.wired_limit_mb=0 restores macOS's default)"
                    .to_owned(),
            ),
            since,
            updated: now,
        }
    }

    fn leak_alarm(
        &self,
        memory: &MemoryFacts,
        wired: u64,
        total: u64,
        since: SystemTime,
        now: SystemTime,
    ) -> Alarm {
        let mut evidence = vec![
            format!(
                "wired {} of {} ({:.0}%), a leak at {:.0}%",
                gib(wired),
                gib(total),
                share(wired, total) * 100.0,
                self.rules.wired_leak_ratio * 100.0
            ),
            "no process matches the job patterns (watch.jobs.patterns)".to_owned(),
        ];
        evidence.extend(usage(memory).into_iter().skip(1));
        Alarm {
            kind: AlarmKind::WiredMemoryLeak,
            severity: Severity::Warning,
            node: self.node.clone(),
            subject: "wired".to_owned(),
            summary: format!(
                "{} wired on {} with no job running: only a reboot frees it",
                gib(wired),
                self.node
            ),
            evidence,
            fix: Some(
                "drain the node and reboot it (sudo shutdown -r now); if a job still runs under \
                 a name the patterns miss, add it to watch.jobs.patterns"
                    .to_owned(),
            ),
            since,
            updated: now,
        }
    }
}

/// What else the reading says, for evidence.
fn usage(memory: &MemoryFacts) -> Vec<String> {
    let mut lines = Vec::new();
    if let (Some(wired), Some(total)) = (memory.wired_bytes, memory.total_bytes) {
        lines.push(format!("wired {} of {}", gib(wired), gib(total)));
    }
    if let (Some(used), Some(total)) = (memory.swap_used_bytes, memory.swap_total_bytes) {
        lines.push(format!("swap {} used of {}", gib(used), gib(total)));
    }
    match memory.gpu_wired_limit_bytes {
        Some(0) => lines.push("GPU wired limit: macOS default (iogpu.wired_limit_mb 0)".to_owned()),
        Some(limit) => lines.push(format!(
            "GPU wired limit raised to {} (iogpu.wired_limit_mb)",
            gib(limit)
        )),
        None => {}
    }
    lines
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::id;

    use super::*;
    use crate::fixtures::moment;

    fn rules() -> MemoryRules {
        MemoryRules {
            wired_leak_ratio: 0.25,
            leak_window: Duration::from_secs(60),
            pressure_window: Duration::from_secs(30),
            stall_critical_ratio: 0.1,
        }
    }

    fn watch() -> MemoryWatch {
        MemoryWatch::new(id("studio-1"), rules())
    }

    const GIB: u64 = 1 << 30;

    fn mac(wired_gib: u64, level: MemoryPressure) -> MemoryFacts {
        MemoryFacts {
            total_bytes: Some(512 * GIB),
            wired_bytes: Some(wired_gib * GIB),
            pressure: Some(level),
            gpu_wired_limit_bytes: Some(0),
            swap_total_bytes: Some(0),
            swap_used_bytes: Some(0),
            ..MemoryFacts::default()
        }
    }

    fn none() -> JobsRunning {
        JobsRunning { names: vec![] }
    }

    #[test]
    fn wired_memory_with_no_job_for_the_window_is_a_leak_and_a_job_clears_it() {
        let mut w = watch();
        let leaked = mac(180, MemoryPressure::Normal);
        assert!(w.update(Some(&leaked), Some(&none()), moment(0)).is_empty());
        assert!(
            w.update(Some(&leaked), Some(&none()), moment(59))
                .is_empty()
        );
        let alarms = w.update(Some(&leaked), Some(&none()), moment(60));
        assert_eq!(alarms.len(), 1, "{alarms:?}");
        let alarm = &alarms[0];
        assert_eq!(alarm.kind, AlarmKind::WiredMemoryLeak);
        assert_eq!(
            alarm.summary,
            "180.0 GiB wired on studio-1 with no job running: only a reboot frees it"
        );
        assert_eq!(
            alarm.evidence[0],
            "wired 180.0 GiB of 512.0 GiB (35%), a leak at 25%"
        );
        assert_eq!(alarm.since, moment(0).wall);
        // Unknown jobs: nothing changes.
        assert_eq!(w.update(Some(&leaked), None, moment(61)).len(), 1);
        // A job runs again: its wired memory is its own; clears after the window.
        let running = JobsRunning {
            names: vec!["python3".into()],
        };
        assert_eq!(w.update(Some(&leaked), Some(&running), moment(62)).len(), 1);
        assert!(
            w.update(Some(&leaked), Some(&running), moment(122))
                .is_empty()
        );
    }

    #[test]
    fn little_wired_memory_or_a_running_job_is_no_leak() {
        let mut w = watch();
        for s in 0..200 {
            assert!(
                w.update(
                    Some(&mac(20, MemoryPressure::Normal)),
                    Some(&none()),
                    moment(s)
                )
                .is_empty()
            );
        }
        let mut w = watch();
        let busy = JobsRunning {
            names: vec!["mlx".into()],
        };
        for s in 0..200 {
            assert!(
                w.update(
                    Some(&mac(400, MemoryPressure::Warning)),
                    Some(&busy),
                    moment(s)
                )
                .is_empty()
            );
        }
        // Total unknown: no share, no judgement.
        let mut w = watch();
        let unknown = MemoryFacts {
            wired_bytes: Some(400 * GIB),
            ..MemoryFacts::default()
        };
        for s in 0..200 {
            assert!(
                w.update(Some(&unknown), Some(&none()), moment(s))
                    .is_empty()
            );
        }
    }

    #[test]
    fn critical_pressure_held_raises_on_macos_and_on_linux_stalls() {
        let mut w = watch();
        let critical = mac(10, MemoryPressure::Critical);
        w.update(Some(&critical), Some(&none()), moment(0));
        let alarms = w.update(Some(&critical), Some(&none()), moment(30));
        assert_eq!(alarms[0].kind, AlarmKind::MemoryPressure);
        assert_eq!(alarms[0].severity, Severity::Critical);
        assert!(
            alarms[0]
                .summary
                .ends_with("kernel memory pressure level critical")
        );
        assert!(
            alarms[0]
                .evidence
                .contains(&"GPU wired limit: macOS default (iogpu.wired_limit_mb 0)".to_owned())
        );
        // Back to normal: clears after the window, not at once.
        assert_eq!(
            w.update(Some(&mac(10, MemoryPressure::Normal)), None, moment(31))
                .len(),
            1
        );
        assert!(
            w.update(Some(&mac(10, MemoryPressure::Normal)), None, moment(61))
                .is_empty()
        );

        let mut w = watch();
        let linux = |full_bp| MemoryFacts {
            stall_full_bp: Some(full_bp),
            ..MemoryFacts::default()
        };
        w.update(Some(&linux(2_500)), None, moment(0));
        let alarms = w.update(Some(&linux(1_000)), None, moment(30));
        assert!(
            alarms[0].summary.ends_with(
                "every task stalled on memory 10.0% of the last 10 s (critical at 10.0%)"
            ),
            "{alarms:?}"
        );
        let mut w = watch();
        for s in 0..100 {
            assert!(w.update(Some(&linux(999)), None, moment(s)).is_empty());
        }
    }
}
