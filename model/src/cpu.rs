//! CPU spikes: is this node's CPU busy for long enough to matter, and who is
//! burning it? Pure: samples and their time come in, alarms go out.
//!
//! Continuity agents (Universal Control, Screen Sharing, sharingd, rapportd)
//! and a Thunderbolt Bridge broadcast storm are the usual reasons a Mac in a
//! cluster suddenly loses a core or two; the alarm says which one it is.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::time::Moment;

use meshd_domain::jobs::{ProcessState, RankIdentity};
use meshd_domain::{Alarm, AlarmKind, NodeId, Severity};

/// The metrics series that sums every process not named on its own.
pub const OTHER: &str = "other";

/// The agents of a Screen Sharing session (the viewer's, its menu, its
/// invitations) run only while one is open or offered.
const SCREEN_SHARING_SESSION_FIX: &str = "close Screen Sharing sessions, or turn Screen Sharing off in System Settings > General > Sharing";

/// One short remedy per known offender (see `watch.cpu.offenders`); an
/// offender configured but not listed here gets [`GENERIC_OFFENDER_FIX`].
pub const OFFENDER_FIXES: &[(&str, &str)] = &[
    (
        "UniversalControl",
        "turn off Universal Control: System Settings > Displays > Advanced",
    ),
    (
        "screensharingd",
        "turn off Screen Sharing and Remote Management in System Settings > General > Sharing",
    ),
    ("ScreensharingAgent", SCREEN_SHARING_SESSION_FIX),
    ("SSMenuAgent", SCREEN_SHARING_SESSION_FIX),
    // Screen Sharing's invitation agent: it runs while a session is asked
    // for or offered (Messages, the Screen Sharing app), on the side being
    // viewed.
    ("SSInvitationAgent", SCREEN_SHARING_SESSION_FIX),
    (
        "sharingd",
        "turn off AirDrop and Handoff: System Settings > General > AirDrop & Handoff",
    ),
    (
        "rapportd",
        "turn off Handoff (System Settings > General > AirDrop & Handoff) and sign the cluster Macs out of a shared Apple ID",
    ),
    (
        "ContinuityCaptureAgent",
        "turn off Continuity Camera: System Settings > General > AirDrop & Handoff",
    ),
    (
        "AirPlayXPCHelper",
        "turn off AirPlay Receiver: System Settings > General > AirDrop & Handoff",
    ),
    (
        "ControlCenter",
        "turn off AirPlay Receiver (it runs inside ControlCenter since macOS 12): System Settings > General > AirDrop & Handoff",
    ),
    (
        "identityservicesd",
        "sign the cluster Macs out of iCloud/iMessage/FaceTime, or give them separate Apple IDs",
    ),
    // High Performance Screen Sharing (macOS 26) streams audio: coreaudiod
    // at 150-180 % and avconferenced at ~15 % while a session is open.
    (
        "coreaudiod",
        "close High Performance Screen Sharing sessions to this Mac, or use standard Screen Sharing",
    ),
    (
        "avconferenced",
        "close High Performance Screen Sharing sessions to this Mac, or use standard Screen Sharing",
    ),
];

pub const GENERIC_OFFENDER_FIX: &str = "quit or disable this background service on cluster nodes";

const GENERIC_FIX: &str =
    "check what the named processes are doing; stop or renice anything that is not part of the job";

/// One process in a sample.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcessSample {
    pub name: String,
    pub pid: u32,
    /// CPU in cores: 1.0 is one full core.
    pub cores: f64,
    pub command: Option<String>,
    /// Its parent's pid; `None` when unknown.
    pub parent: Option<u32>,
    /// Resident memory; `None` when unknown.
    pub memory_bytes: Option<u64>,
    /// What the OS says it is doing (a zombie is no process here).
    pub state: ProcessState,
    /// When it started, in the OS's own unit: with the pid it names the
    /// process (a pid is reused, the pair is not).
    pub started: u64,
    /// Its place in a distributed job, from its environment; `None` for a
    /// process that is no MLX rank, or whose environment was not read.
    pub rank: Option<Arc<RankIdentity>>,
    /// Linux: the network namespace it runs in (its `ns/net` inode), read
    /// for ranks only; `None` elsewhere.
    pub network_namespace: Option<u64>,
}

/// One look at the CPU.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CpuSample {
    /// Busy share of all cores, 0-1.
    pub busy_ratio: f64,
    pub processes: Vec<ProcessSample>,
}

/// A condition must hold for `window` before it counts, and be absent for
/// `window` before it stops counting, so one noisy sample neither raises nor
/// clears anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    window: Duration,
    /// When the condition started to hold (raising) or stopped holding
    /// (clearing) without having lasted the window yet.
    pending: Option<Instant>,
    /// When the active condition first held.
    active_since: Option<Instant>,
}

impl Hold {
    /// A new window applies from the next update; what already holds stays.
    pub fn set_window(&mut self, window: Duration) {
        self.window = window;
    }

    pub fn new(window: Duration) -> Self {
        Self {
            window,
            pending: None,
            active_since: None,
        }
    }

    /// Feeds one observation; returns when the active condition began, or
    /// `None` while it is not active.
    pub fn update(&mut self, holds: bool, now: Instant) -> Option<Instant> {
        let lasted = |from: Instant| now.saturating_duration_since(from) >= self.window;
        match self.active_since {
            None if holds => {
                let start = *self.pending.get_or_insert(now);
                if lasted(start) {
                    self.pending = None;
                    self.active_since = Some(start);
                }
            }
            None => self.pending = None,
            Some(_) if holds => self.pending = None,
            Some(_) => {
                let quiet = *self.pending.get_or_insert(now);
                if lasted(quiet) {
                    self.pending = None;
                    self.active_since = None;
                }
            }
        }
        self.active_since
    }

    pub fn is_active(&self) -> bool {
        self.active_since.is_some()
    }

    /// When the active condition began.
    pub fn active_since(&self) -> Option<Instant> {
        self.active_since
    }

    /// Neither active nor on its way to be: nothing to remember.
    pub fn is_idle(&self) -> bool {
        self.active_since.is_none() && self.pending.is_none()
    }
}

/// What makes a spike and what its alarm names; the daemon's config
/// (`[watch.cpu]`) supplies the values.
#[derive(Debug, Clone, PartialEq)]
pub struct SpikeRules {
    /// Busy share of all cores (0-1) that counts as a spike...
    pub spike_ratio: f64,
    /// ...when it holds this long.
    pub spike_window: Duration,
    /// How many of the busiest processes an alarm names.
    pub top: usize,
    /// Process names known to add CPU and network noise on a Mac cluster.
    pub offenders: Vec<String>,
}

/// Raises `cpu_spike` on this node.
#[derive(Debug, Clone)]
pub struct SpikeDetector {
    node: NodeId,
    spike_ratio: f64,
    top: usize,
    offenders: Vec<String>,
    hold: Hold,
    /// The alarm as last built from a sample over the threshold; kept while
    /// the spike is clearing so it still names the culprits.
    alarm: Option<Alarm>,
}

impl SpikeDetector {
    pub fn new(node: NodeId, config: &SpikeRules) -> Self {
        Self {
            node,
            spike_ratio: config.spike_ratio,
            top: config.top,
            offenders: config.offenders.clone(),
            hold: Hold::new(config.spike_window),
            alarm: None,
        }
    }

    /// Takes new settings after a config reload without forgetting a spike
    /// that is already held, raising or clearing.
    pub fn reconfigure(&mut self, config: &SpikeRules) {
        self.spike_ratio = config.spike_ratio;
        self.top = config.top;
        self.offenders.clone_from(&config.offenders);
        self.hold.set_window(config.spike_window);
    }

    /// Feeds one sample; `local_alarms` are what the other watchers of this
    /// node hold active right now. Returns the active alarm, if any.
    pub fn update(
        &mut self,
        sample: &CpuSample,
        local_alarms: &[Alarm],
        moment: Moment,
    ) -> Option<&Alarm> {
        let busy = sample.busy_ratio >= self.spike_ratio;
        let Some(since) = self.hold.update(busy, moment.now) else {
            self.alarm = None;
            return None;
        };
        match &mut self.alarm {
            Some(alarm) if !busy => alarm.updated = moment.wall,
            _ => {
                let since = moment.wall_of(since);
                self.alarm = Some(self.build(sample, local_alarms, since, moment.wall));
            }
        }
        self.alarm.as_ref()
    }

    fn is_offender(&self, name: &str) -> bool {
        self.offenders.iter().any(|o| o == name)
    }

    fn build(
        &self,
        sample: &CpuSample,
        local_alarms: &[Alarm],
        since: std::time::SystemTime,
        now: std::time::SystemTime,
    ) -> Alarm {
        let top = busiest(&sample.processes, self.top);
        let storm = local_alarms
            .iter()
            .find(|a| a.kind == AlarmKind::BroadcastStorm && a.node == self.node);
        let named: Vec<String> = top
            .iter()
            .map(|p| {
                let mark = if self.is_offender(&p.name) {
                    " (known offender)"
                } else {
                    ""
                };
                format!("{} {:.2} cores{mark}", p.name, p.cores)
            })
            .collect();
        let mut summary = format!(
            "CPU {:.0}% busy (spike at {:.0}%)",
            sample.busy_ratio * 100.0,
            self.spike_ratio * 100.0
        );
        if !named.is_empty() {
            summary.push_str("; top: ");
            summary.push_str(&named.join(", "));
        }
        if storm.is_some() {
            summary.push_str("; likely cause: the broadcast storm on this node");
        }

        let mut evidence = vec![format!(
            "total busy {:.1}% of all cores, threshold {:.1}%",
            sample.busy_ratio * 100.0,
            self.spike_ratio * 100.0
        )];
        evidence.extend(top.iter().map(|p| {
            let mark = if self.is_offender(&p.name) {
                ", known offender"
            } else {
                ""
            };
            let command = p
                .command
                .as_deref()
                .filter(|c| !c.is_empty())
                .map(|c| format!(": {}", truncate(c, 120)))
                .unwrap_or_default();
            format!(
                "{} (pid {}): {:.2} cores{mark}{command}",
                p.name, p.pid, p.cores
            )
        }));
        if let Some(storm) = storm {
            evidence.push(format!(
                "{} active on {}: {}",
                AlarmKind::BroadcastStorm,
                storm.node,
                storm.summary
            ));
        }

        let mut fixes: Vec<String> = Vec::new();
        if let Some(storm) = storm {
            fixes.push(
                storm
                    .fix
                    .clone()
                    .unwrap_or_else(|| "stop the broadcast storm first".to_owned()),
            );
        }
        for p in top.iter().filter(|p| self.is_offender(&p.name)) {
            let fix = offender_fix(&p.name);
            if !fixes.iter().any(|f| f == fix) {
                fixes.push(fix.to_owned());
            }
        }
        if fixes.is_empty() {
            fixes.push(GENERIC_FIX.to_owned());
        }

        Alarm {
            kind: AlarmKind::CpuSpike,
            severity: Severity::Warning,
            node: self.node.clone(),
            subject: "cpu".to_owned(),
            summary,
            evidence,
            fix: Some(fixes.join("; ")),
            since,
            updated: now,
        }
    }
}

/// The remedy for a known offender.
pub fn offender_fix(name: &str) -> &'static str {
    OFFENDER_FIXES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(GENERIC_OFFENDER_FIX, |(_, fix)| fix)
}

/// The `n` busiest processes, busiest first (pid breaks ties, so the order
/// is stable).
pub fn busiest(processes: &[ProcessSample], n: usize) -> Vec<&ProcessSample> {
    let mut sorted: Vec<&ProcessSample> = processes.iter().collect();
    sorted.sort_by(|a, b| b.cores.total_cmp(&a.cores).then(a.pid.cmp(&b.pid)));
    sorted.truncate(n);
    sorted
}

/// CPU an offender outside the top must burn to be named in the metrics:
/// the continuity agents run on every Mac and idle at a few thousandths of
/// a core, which is no news; one at a twentieth of a core is.
pub const OFFENDER_NAMED_CORES: f64 = 0.05;

/// CPU per process name for the metrics, with bounded cardinality: the `top`
/// busiest names, the known offenders burning at least
/// [`OFFENDER_NAMED_CORES`], and everything else summed as [`OTHER`]
/// (always present). Processes sharing a name are summed first, since the
/// name is the only label. A name that drops out leaves its series to the
/// exporter's idle expiry.
pub fn reduce_for_metrics(
    processes: &[ProcessSample],
    top: usize,
    offenders: &[String],
) -> BTreeMap<String, f64> {
    let mut by_name: BTreeMap<&str, f64> = BTreeMap::new();
    for p in processes {
        *by_name.entry(p.name.as_str()).or_default() += p.cores;
    }
    let mut ranked: Vec<(&str, f64)> = by_name.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let mut out = BTreeMap::new();
    let mut other = 0.0;
    for (i, (name, cores)) in ranked.into_iter().enumerate() {
        let busy_offender = cores >= OFFENDER_NAMED_CORES && offenders.iter().any(|o| o == name);
        if name != OTHER && (i < top || busy_offender) {
            out.insert(name.to_owned(), cores);
        } else {
            other += cores;
        }
    }
    out.insert(OTHER.to_owned(), other);
    out
}

fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::id;

    use super::*;
    use crate::fixtures::moment;

    fn config() -> SpikeRules {
        SpikeRules {
            spike_ratio: 0.9,
            spike_window: Duration::from_secs(10),
            top: 2,
            offenders: vec!["UniversalControl".to_owned(), "sharingd".to_owned()],
        }
    }

    fn p(name: &str, pid: u32, cores: f64) -> ProcessSample {
        ProcessSample {
            name: name.to_owned(),
            pid,
            cores,
            ..ProcessSample::default()
        }
    }

    fn sample(busy: f64) -> CpuSample {
        CpuSample {
            busy_ratio: busy,
            processes: vec![
                p("python3", 10, 3.5),
                p("UniversalControl", 20, 1.2),
                p("kernel_task", 1, 0.3),
                p("sharingd", 30, 0.0),
            ],
        }
    }

    fn storm() -> Alarm {
        Alarm {
            kind: AlarmKind::BroadcastStorm,
            severity: Severity::Critical,
            node: id("studio-1"),
            subject: "bridge0".to_owned(),
            summary: "40000 broadcast packets/s on bridge0".to_owned(),
            evidence: vec![],
            fix: Some("turn off Thunderbolt Bridge".to_owned()),
            since: moment(0).wall,
            updated: moment(0).wall,
        }
    }

    #[test]
    fn hold_needs_the_whole_window_both_ways() {
        let mut h = Hold::new(Duration::from_secs(10));
        assert_eq!(h.update(true, moment(0).now), None);
        assert_eq!(h.update(true, moment(9).now), None);
        assert_eq!(h.update(true, moment(10).now), Some(moment(0).now));
        // One quiet sample does not clear, and the quiet clock restarts.
        assert_eq!(h.update(false, moment(11).now), Some(moment(0).now));
        assert_eq!(h.update(true, moment(12).now), Some(moment(0).now));
        assert_eq!(h.update(false, moment(13).now), Some(moment(0).now));
        assert_eq!(h.update(false, moment(22).now), Some(moment(0).now));
        assert_eq!(h.update(false, moment(23).now), None);
        assert!(!h.is_active());
        // One busy sample in a quiet run restarts the raising clock.
        assert_eq!(h.update(true, moment(30).now), None);
        assert_eq!(h.update(false, moment(31).now), None);
        assert_eq!(h.update(true, moment(32).now), None);
        assert_eq!(h.update(true, moment(41).now), None);
        assert_eq!(h.update(true, moment(42).now), Some(moment(32).now));
    }

    #[test]
    fn hold_survives_a_clock_stepping_back() {
        let mut h = Hold::new(Duration::from_secs(10));
        assert_eq!(h.update(true, moment(100).now), None);
        assert_eq!(h.update(true, moment(50).now), None);
        assert_eq!(h.update(true, moment(110).now), Some(moment(100).now));
    }

    #[test]
    fn spike_raises_only_after_the_window_and_below_threshold_never() {
        let mut d = SpikeDetector::new(id("studio-1"), &config());
        for s in 0..30 {
            assert!(d.update(&sample(0.89), &[], moment(s)).is_none());
        }
        assert!(d.update(&sample(0.95), &[], moment(30)).is_none());
        assert!(d.update(&sample(0.90), &[], moment(39)).is_none());
        let alarm = d.update(&sample(0.97), &[], moment(40)).unwrap().clone();
        assert_eq!(alarm.kind, AlarmKind::CpuSpike);
        assert_eq!(alarm.severity, Severity::Warning);
        assert_eq!(alarm.node, id("studio-1"));
        assert_eq!(alarm.since, moment(30).wall);
        assert_eq!(alarm.updated, moment(40).wall);
        let later = d.update(&sample(0.99), &[], moment(41)).unwrap();
        assert_eq!(later.since, moment(30).wall, "since is kept across updates");
        assert_eq!(later.updated, moment(41).wall);
    }

    #[test]
    fn spike_names_the_top_processes_and_marks_offenders() {
        let mut d = SpikeDetector::new(id("studio-1"), &config());
        d.update(&sample(0.95), &[], moment(0));
        let alarm = d.update(&sample(0.95), &[], moment(10)).unwrap();
        assert!(alarm.summary.contains("python3 3.50 cores"), "{alarm:?}");
        assert!(
            alarm
                .summary
                .contains("UniversalControl 1.20 cores (known offender)"),
            "{alarm:?}"
        );
        assert!(!alarm.summary.contains("kernel_task"), "top is 2");
        assert!(!alarm.summary.contains("python3 3.50 cores (known"));
        assert_eq!(alarm.evidence.len(), 3);
        assert!(alarm.evidence[1].starts_with("python3 (pid 10): 3.50 cores"));
        assert!(alarm.evidence[2].contains("(pid 20)"));
        assert!(alarm.evidence[2].contains("known offender"));
        let fix = alarm.fix.as_deref().unwrap();
        assert!(fix.contains("Universal Control"), "{fix}");
        assert!(fix.contains("Displays > Advanced"), "{fix}");
        assert!(!alarm.summary.contains("storm"));
    }

    #[test]
    fn every_screen_sharing_agent_has_the_screen_sharing_fix() {
        for agent in ["ScreensharingAgent", "SSMenuAgent", "SSInvitationAgent"] {
            assert_eq!(offender_fix(agent), SCREEN_SHARING_SESSION_FIX, "{agent}");
        }
        assert_eq!(offender_fix("ssinvitationagent"), GENERIC_OFFENDER_FIX);
    }

    #[test]
    fn offender_names_match_exactly() {
        let mut d = SpikeDetector::new(id("studio-1"), &config());
        let s = CpuSample {
            busy_ratio: 1.0,
            processes: vec![
                p("universalcontrol", 1, 2.0),
                p("UniversalControlX", 2, 1.0),
            ],
        };
        d.update(&s, &[], moment(0));
        let alarm = d.update(&s, &[], moment(10)).unwrap();
        assert!(!alarm.summary.contains("offender"), "{alarm:?}");
        assert_eq!(alarm.fix.as_deref(), Some(GENERIC_FIX));
    }

    #[test]
    fn an_active_storm_on_this_node_is_named_as_the_likely_cause() {
        let mut d = SpikeDetector::new(id("studio-1"), &config());
        d.update(&sample(0.95), &[storm()], moment(0));
        let alarm = d.update(&sample(0.95), &[storm()], moment(10)).unwrap();
        assert!(alarm.summary.contains("likely cause"), "{alarm:?}");
        assert!(
            alarm
                .evidence
                .iter()
                .any(|e| e.starts_with(AlarmKind::BroadcastStorm.as_str()))
        );
        let fix = alarm.fix.as_deref().unwrap();
        assert!(fix.starts_with("turn off Thunderbolt Bridge"), "{fix}");

        // A storm on another node is not this node's cause.
        let mut other = storm();
        other.node = id("studio-2");
        let alarm = d.update(&sample(0.95), &[other], moment(11)).unwrap();
        assert!(!alarm.summary.contains("likely cause"), "{alarm:?}");
    }

    #[test]
    fn a_spike_clears_after_a_quiet_window_and_keeps_naming_the_culprits_meanwhile() {
        let mut d = SpikeDetector::new(id("studio-1"), &config());
        d.update(&sample(0.95), &[], moment(0));
        assert!(d.update(&sample(0.95), &[], moment(10)).is_some());
        let quiet = CpuSample {
            busy_ratio: 0.1,
            processes: vec![p("idle", 1, 0.1)],
        };
        let alarm = d.update(&quiet, &[], moment(11)).unwrap();
        assert!(alarm.summary.contains("UniversalControl"));
        assert_eq!(alarm.updated, moment(11).wall);
        assert!(d.update(&quiet, &[], moment(20)).is_some());
        assert!(d.update(&quiet, &[], moment(21)).is_none());
        // A new spike starts from scratch.
        assert!(d.update(&sample(0.95), &[], moment(22)).is_none());
        assert_eq!(
            d.update(&sample(0.95), &[], moment(32)).unwrap().since,
            moment(22).wall
        );
    }

    #[test]
    fn metrics_reduction_keeps_top_names_busy_offenders_and_other() {
        let offenders = config().offenders;
        let mut processes = sample(1.0).processes;
        processes.push(p("python3", 11, 0.5));
        processes.push(p("Safari", 40, 0.2));
        processes.push(p("UniversalControl", 21, 0.1));
        let reduced = reduce_for_metrics(&processes, 1, &offenders);
        let expected: BTreeMap<String, f64> = [
            ("python3", 4.0),
            // A busy offender outside the top is named...
            ("UniversalControl", 1.3),
            // ...an idle one (sharingd) is not: it is in `other`.
            (OTHER, 0.5),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_owned(), c))
        .collect();
        assert_eq!(reduced.len(), expected.len(), "{reduced:?}");
        for (name, cores) in &expected {
            assert!((reduced[name] - cores).abs() < 1e-9, "{name}: {reduced:?}");
        }
        // Bounded however many processes run.
        let many: Vec<ProcessSample> = (0..500).map(|i| p(&format!("p{i}"), i, 0.01)).collect();
        assert_eq!(reduce_for_metrics(&many, 5, &offenders).len(), 6);
        assert_eq!(
            reduce_for_metrics(&[], 5, &offenders),
            BTreeMap::from([(OTHER.to_owned(), 0.0)])
        );
    }
}
