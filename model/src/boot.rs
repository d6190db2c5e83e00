//! Restarts and reboots of the members: a node that panicked and came back
//! is otherwise just "down, then up". From each member's run (its
//! incarnation) and its facts (boot identity, panic reports), as this node
//! sees them one after another, tell:
//!
//! - a meshd restart: a new incarnation on the same boot of the host;
//! - a host reboot: a new boot identity;
//! - a reboot after a kernel panic: a new boot whose panic reports show a
//!   report that ended the boot before (it names that boot, or was written
//!   after that boot began, or appeared since the last facts).
//!
//! Every node that saw both boots raises the same `node_rebooted` or
//! `kernel_panic` alarm about the node (the alarm's node is the one that
//! rebooted), so the status keeps one of them ([`annotate`]); the node
//! verdict's evidence says what happened. Pure: time is passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use meshd_domain::facts::{BootIdentity, NodeFacts, PanicFacts, PanicReport};
use meshd_domain::{Alarm, AlarmKind, Event, EventKind, Incarnation, MeshStatus, NodeId, Severity};

/// Reports carry a node's facts every few seconds and when they change,
/// so a node that restarted shows its new incarnation before its new
/// facts: a restart is called a restart only once its facts had this long
/// to show another boot.
pub const FACTS_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootRules {
    /// How long `node_rebooted` and `kernel_panic` stay raised.
    pub alarm_for: Duration,
}

/// What one member's latest report and facts say about it.
#[derive(Debug, Clone, Copy)]
pub struct Sighting<'a> {
    pub node: &'a NodeId,
    /// Its meshd's run; `None` for a member whose reports this node has
    /// not taken yet.
    pub incarnation: Option<Incarnation>,
    pub facts: Option<&'a NodeFacts>,
}

/// Whether a kernel panic ended the boot before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PanicVerdict {
    Panicked(PanicReport),
    /// No panic report newer than the boot before.
    Clean,
    /// The panic reports cannot tell; why.
    Unknown(String),
}

/// A host booted again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reboot {
    pub node: NodeId,
    pub noticed_at: SystemTime,
    pub previous: BootIdentity,
    pub current: BootIdentity,
    pub panic: PanicVerdict,
}

/// What changed for a member since it was last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootChange {
    /// Its meshd started again on the same boot.
    Restarted {
        node: NodeId,
        incarnation: Incarnation,
        boot: BootIdentity,
    },
    Rebooted(Reboot),
}

/// What this node last knew of a member.
#[derive(Debug, Clone)]
struct Known {
    boot: BootIdentity,
    incarnation: Option<Incarnation>,
    panics: Option<PanicFacts>,
    /// A new incarnation on what still looks like the same boot, with when
    /// it was first seen: a restart once [`FACTS_GRACE`] has passed.
    pending_restart: Option<(Incarnation, SystemTime)>,
}

#[derive(Debug, Clone)]
pub struct BootTracker {
    rules: BootRules,
    known: BTreeMap<NodeId, Known>,
    /// Each member's latest reboot.
    reboots: BTreeMap<NodeId, Reboot>,
}

/// Each member's boot and what to add to its verdict, for [`annotate`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BootView {
    pub boots: BTreeMap<NodeId, BootIdentity>,
    pub evidence: BTreeMap<NodeId, String>,
}

impl BootTracker {
    pub fn new(rules: BootRules) -> Self {
        Self {
            rules,
            known: BTreeMap::new(),
            reboots: BTreeMap::new(),
        }
    }

    pub fn set_rules(&mut self, rules: BootRules) {
        self.rules = rules;
    }

    /// Forgets members no longer configured.
    pub fn retain(&mut self, members: &BTreeSet<NodeId>) {
        self.known.retain(|id, _| members.contains(id));
        self.reboots.retain(|id, _| members.contains(id));
    }

    /// Takes the latest sighting of one member; returns what changed since
    /// the one before.
    pub fn observe(&mut self, sighting: Sighting<'_>, now: SystemTime) -> Option<BootChange> {
        let node = sighting.node;
        let boot = sighting.facts.map(|f| f.boot.clone()).unwrap_or_default();
        let panics = sighting.facts.and_then(|f| f.panics.clone());
        let Some(known) = self.known.get_mut(node) else {
            self.known.insert(
                node.clone(),
                Known {
                    boot,
                    incarnation: sighting.incarnation,
                    panics,
                    pending_restart: None,
                },
            );
            return None;
        };
        let mut change = None;
        match boot.same_boot_as(&known.boot) {
            Some(false) => {
                let reboot = Reboot {
                    node: node.clone(),
                    noticed_at: now,
                    previous: known.boot.clone(),
                    current: boot.clone(),
                    panic: panic_verdict(&known.boot, known.panics.as_ref(), panics.as_ref()),
                };
                known.pending_restart = None;
                self.reboots.insert(node.clone(), reboot.clone());
                change = Some(BootChange::Rebooted(reboot));
            }
            same => {
                if let Some(incarnation) = sighting.incarnation
                    && known.incarnation.is_some_and(|old| incarnation > old)
                {
                    known.pending_restart = Some((incarnation, now));
                }
                if let Some((incarnation, seen)) = known.pending_restart
                    && now.duration_since(seen).unwrap_or_default() >= FACTS_GRACE
                {
                    known.pending_restart = None;
                    // A boot that cannot be compared is no restart either.
                    if same == Some(true) {
                        change = Some(BootChange::Restarted {
                            node: node.clone(),
                            incarnation,
                            boot: boot.clone(),
                        });
                    }
                }
            }
        }
        if boot.is_known() {
            known.boot = boot;
        }
        if sighting.incarnation.is_some() {
            known.incarnation = sighting.incarnation;
        }
        if panics.is_some() {
            known.panics = panics;
        }
        change
    }

    /// The reboots still within `alarm_for`.
    fn recent(&self, now: SystemTime) -> impl Iterator<Item = &Reboot> {
        self.reboots.values().filter(move |r| {
            now.duration_since(r.noticed_at).unwrap_or_default() < self.rules.alarm_for
        })
    }

    /// One `kernel_panic` (critical) or `node_rebooted` (warning) alarm per
    /// member that rebooted within `alarm_for`.
    pub fn alarms(&self, now: SystemTime) -> Vec<Alarm> {
        self.recent(now).map(|r| alarm(r, now)).collect()
    }

    /// Each member's boot as last known, and what happened to those that
    /// rebooted recently.
    pub fn view(&self, now: SystemTime) -> BootView {
        BootView {
            boots: self
                .known
                .iter()
                .filter(|(_, k)| k.boot.is_known())
                .map(|(id, k)| (id.clone(), k.boot.clone()))
                .collect(),
            evidence: self
                .recent(now)
                .map(|r| (r.node.clone(), reboot_evidence(r)))
                .collect(),
        }
    }
}

/// Whether a panic ended `previous`, from the panic reports as they were
/// (`before`) and are now.
fn panic_verdict(
    previous: &BootIdentity,
    before: Option<&PanicFacts>,
    now: Option<&PanicFacts>,
) -> PanicVerdict {
    let Some(now) = now else {
        return PanicVerdict::Unknown("its kernel panic reports are unknown".to_owned());
    };
    let Some(latest) = &now.latest else {
        return PanicVerdict::Clean;
    };
    if let (Some(panicked), Some(previous)) = (&latest.boot_id, &previous.id) {
        return if panicked.eq_ignore_ascii_case(previous) {
            PanicVerdict::Panicked(latest.clone())
        } else {
            PanicVerdict::Clean
        };
    }
    if let (Some(at), Some(booted)) = (latest.at_unix, previous.booted_at_unix) {
        return if at > booted {
            PanicVerdict::Panicked(latest.clone())
        } else {
            PanicVerdict::Clean
        };
    }
    match before {
        Some(before) if before.latest.as_ref().map(|r| &r.file) == Some(&latest.file) => {
            PanicVerdict::Clean
        }
        Some(_) => PanicVerdict::Panicked(latest.clone()),
        None => PanicVerdict::Unknown(format!(
            "the panic report {} may be older than the boot before (its time is not known)",
            latest.file
        )),
    }
}

fn time(unix: u64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(unix);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// "boot 40962879… since 2026-09-26T11:16:55Z".
fn describe(boot: &BootIdentity) -> String {
    let id = boot
        .id
        .as_deref()
        .map(|id| format!("boot {}", id.get(..8).unwrap_or(id)))
        .unwrap_or_else(|| "a boot".to_owned());
    match boot.booted_at_unix {
        Some(at) => format!("{id} since {}", time(at)),
        None => id,
    }
}

fn panic_clause(report: &PanicReport) -> String {
    let at = report
        .at_unix
        .map(|at| format!(" at {}", time(at)))
        .unwrap_or_default();
    format!("after a kernel panic{at}")
}

/// "rebooted after a kernel panic at 2026-09-26T06:14:02Z (boot 40962879…
/// since …)", for the node's verdict.
pub fn reboot_evidence(reboot: &Reboot) -> String {
    let how = match &reboot.panic {
        PanicVerdict::Panicked(report) => {
            format!("rebooted {}: {}", panic_clause(report), report.first_line)
        }
        PanicVerdict::Clean => "rebooted (no kernel panic report)".to_owned(),
        PanicVerdict::Unknown(_) => "rebooted".to_owned(),
    };
    format!("{how}; now {}", describe(&reboot.current))
}

/// What to do about a `kernel_panic` or a `node_rebooted` alarm.
pub fn fix(kind: AlarmKind) -> &'static str {
    if kind == AlarmKind::KernelPanic {
        "read the whole report on the node (/Library/Logs/DiagnosticReports on macOS, pstore \
         on Linux); GPU memory panics (IOGPUMemory) follow wired limits raised with \
         iogpu.wired_limit_mb and jobs that wire most of the memory: lower them, then relaunch \
         the job"
    } else {
        "if nobody restarted it, look for a power loss or a watchdog reset on the node (pmset \
         -g log on macOS, journalctl -b -1 on Linux); relaunch the jobs it ran"
    }
}

fn alarm(reboot: &Reboot, now: SystemTime) -> Alarm {
    let node = &reboot.node;
    let mut evidence = vec![
        format!("before: {}", describe(&reboot.previous)),
        format!("now: {}", describe(&reboot.current)),
    ];
    let (kind, severity, summary) = match &reboot.panic {
        PanicVerdict::Panicked(report) => {
            evidence.push(format!(
                "panic report {}: {}",
                report.file, report.first_line
            ));
            (
                AlarmKind::KernelPanic,
                Severity::Critical,
                format!("{node} {}", reboot_evidence(reboot)),
            )
        }
        other => {
            if let PanicVerdict::Unknown(why) = other {
                evidence.push(format!(
                    "whether a kernel panic caused it is unknown: {why}"
                ));
            } else {
                evidence.push("no kernel panic report newer than the boot before".to_owned());
            }
            (
                AlarmKind::NodeRebooted,
                Severity::Warning,
                format!("{node} {}", reboot_evidence(reboot)),
            )
        }
    };
    Alarm {
        kind,
        severity,
        node: node.clone(),
        subject: "boot".to_owned(),
        summary,
        evidence,
        fix: Some(fix(kind).to_owned()),
        since: reboot.noticed_at,
        updated: now,
    }
}

/// The event of a change, as `observer` saw it.
pub fn event(change: &BootChange, observer: &NodeId, at: SystemTime) -> Event {
    let (kind, subject, summary) = match change {
        BootChange::Restarted {
            node,
            incarnation,
            boot,
        } => (
            EventKind::NodeRestarted,
            node.to_string(),
            format!(
                "{node}: meshd restarted (incarnation {}) on the same {}",
                incarnation.0,
                describe(boot)
            ),
        ),
        BootChange::Rebooted(reboot) => (
            EventKind::NodeRebooted,
            reboot.node.to_string(),
            format!("{}: {}", reboot.node, reboot_evidence(reboot)),
        ),
    };
    Event {
        at,
        observer: observer.clone(),
        kind,
        subject,
        summary,
        detail: None,
    }
}

/// Adds what the boots say to a status the engine made: each node's boot
/// identity and, for a node that rebooted recently, that evidence (from
/// this node's own sightings, else from the alarm its peers raised: a
/// node learns of its own reboot from them); and keeps one of the
/// identical `node_rebooted` / `kernel_panic` alarms the peers that saw
/// the reboot each raise.
pub fn annotate(status: &mut MeshStatus, view: &BootView) {
    let mut seen = BTreeSet::new();
    status.alarms.retain(|a| {
        !a.kind.about_a_boot() || seen.insert((a.kind, a.node.clone(), a.subject.clone()))
    });
    let alarms = &status.alarms;
    for node in &mut status.nodes {
        if let Some(boot) = view.boots.get(&node.id) {
            node.boot = boot.clone();
        }
        // A peer saw the reboot, this node did not: its summary, quoted.
        let raised = || {
            let alarm = alarms
                .iter()
                .find(|a| a.kind.about_a_boot() && a.node == node.id)?;
            let prefix = format!("{} ", node.id);
            let summary = &alarm.summary;
            Some(summary.strip_prefix(&prefix).unwrap_or(summary).to_owned())
        };
        if let Some(evidence) = view.evidence.get(&node.id).cloned().or_else(raised) {
            node.evidence.push(evidence);
        }
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, wall};

    use super::*;

    fn facts(boot: &str, booted: u64, panics: Option<PanicFacts>) -> NodeFacts {
        NodeFacts {
            boot: BootIdentity {
                id: Some(boot.to_owned()),
                booted_at_unix: Some(booted),
            },
            panics,
            ..NodeFacts::default()
        }
    }

    fn report(file: &str, at: Option<u64>, boot: Option<&str>) -> PanicFacts {
        PanicFacts {
            latest: Some(PanicReport {
                file: file.to_owned(),
                at_unix: at,
                first_line:
                    "panic(cpu 7 caller 0x1): \"completeMemory() prepare count underflow\" \
                             @IOGPUMemory.cpp:550"
                        .to_owned(),
                boot_id: boot.map(str::to_owned),
            }),
        }
    }

    fn see<'a>(node: &'a NodeId, run: u64, facts: &'a NodeFacts) -> Sighting<'a> {
        Sighting {
            node,
            incarnation: Some(Incarnation(run)),
            facts: Some(facts),
        }
    }

    fn rules() -> BootRules {
        BootRules {
            alarm_for: Duration::from_secs(900),
        }
    }

    #[test]
    fn a_restart_on_the_same_boot_is_a_restart_once_the_facts_had_time() {
        let c = id("c");
        let mut tracker = BootTracker::new(rules());
        let boot = facts("A", 100, Some(PanicFacts::default()));
        assert_eq!(tracker.observe(see(&c, 1, &boot), wall(0)), None);
        assert_eq!(
            tracker.observe(see(&c, 2, &boot), wall(1)),
            None,
            "facts may lag"
        );
        assert_eq!(tracker.observe(see(&c, 2, &boot), wall(20)), None);
        let change = tracker
            .observe(see(&c, 2, &boot), wall(31))
            .expect("restart");
        assert!(
            matches!(
                &change,
                BootChange::Restarted {
                    incarnation: Incarnation(2),
                    ..
                }
            ),
            "{change:?}"
        );
        assert_eq!(tracker.observe(see(&c, 2, &boot), wall(40)), None, "once");
        assert!(
            tracker.alarms(wall(40)).is_empty(),
            "a restart pages nobody"
        );
        assert_eq!(
            event(&change, &id("a"), wall(31)).summary,
            "c: meshd restarted (incarnation 2) on the same boot A since 1970-01-01T00:01:40Z"
        );
    }

    #[test]
    fn a_new_boot_is_a_reboot_and_a_panic_naming_the_old_boot_is_a_kernel_panic() {
        let c = id("c");
        let mut tracker = BootTracker::new(rules());
        tracker.observe(
            see(&c, 1, &facts("A", 100, Some(PanicFacts::default()))),
            wall(0),
        );
        // The new run shows up first with the old facts, then with its own.
        tracker.observe(
            see(&c, 2, &facts("A", 100, Some(PanicFacts::default()))),
            wall(5),
        );
        let after = facts(
            "B",
            500,
            Some(report("panic-full-x.panic", Some(450), Some("a"))),
        );
        let change = tracker
            .observe(see(&c, 2, &after), wall(8))
            .expect("reboot");
        let BootChange::Rebooted(reboot) = &change else {
            panic!("{change:?}")
        };
        assert!(
            matches!(reboot.panic, PanicVerdict::Panicked(_)),
            "{reboot:?}"
        );
        // No restart follows: the reboot explained the new incarnation.
        assert_eq!(tracker.observe(see(&c, 2, &after), wall(60)), None);
        let alarms = tracker.alarms(wall(60));
        assert_eq!(alarms.len(), 1);
        assert_eq!(alarms[0].kind, AlarmKind::KernelPanic);
        assert_eq!(alarms[0].severity, Severity::Critical);
        assert_eq!((alarms[0].node.as_str(), alarms[0].since), ("c", wall(8)));
        assert!(
            alarms[0].summary.starts_with(
                "c rebooted after a kernel panic at 1970-01-01T00:07:30Z: panic(cpu 7"
            ),
            "{}",
            alarms[0].summary
        );
        let view = tracker.view(wall(60));
        assert_eq!(view.boots[&c].id.as_deref(), Some("B"));
        assert!(
            view.evidence[&c].starts_with("rebooted after a kernel panic"),
            "{view:?}"
        );
        // The alarm lasts alarm_for.
        assert!(tracker.alarms(wall(8 + 900)).is_empty());
        assert!(tracker.view(wall(8 + 900)).evidence.is_empty());
    }

    #[test]
    fn which_reboots_a_panic_report_explains() {
        let old = BootIdentity {
            id: Some("OLD".into()),
            booted_at_unix: Some(1_000),
        };
        let panicked = |v: PanicVerdict| matches!(v, PanicVerdict::Panicked(_));
        // Named boot: decides.
        assert!(panicked(panic_verdict(
            &old,
            None,
            Some(&report("p", None, Some("old")))
        )));
        assert_eq!(
            panic_verdict(&old, None, Some(&report("p", Some(5_000), Some("OLDER")))),
            PanicVerdict::Clean,
            "a panic that ended an older boot"
        );
        // Without a boot in the report: its time against the old boot's.
        assert!(panicked(panic_verdict(
            &old,
            None,
            Some(&report("p", Some(1_001), None))
        )));
        assert_eq!(
            panic_verdict(&old, None, Some(&report("p", Some(999), None))),
            PanicVerdict::Clean
        );
        // Without a time (pstore): a report that appeared since.
        let before = report("dmesg-efi-1", None, None);
        assert_eq!(
            panic_verdict(
                &old,
                Some(&before),
                Some(&report("dmesg-efi-1", None, None))
            ),
            PanicVerdict::Clean
        );
        assert!(panicked(panic_verdict(
            &old,
            Some(&PanicFacts::default()),
            Some(&report("dmesg-efi-2", None, None))
        )));
        assert!(matches!(
            panic_verdict(&old, None, Some(&report("dmesg-efi-2", None, None))),
            PanicVerdict::Unknown(_)
        ));
        assert!(matches!(
            panic_verdict(&old, None, None),
            PanicVerdict::Unknown(_)
        ));
        assert_eq!(
            panic_verdict(&old, None, Some(&PanicFacts::default())),
            PanicVerdict::Clean
        );
    }

    #[test]
    fn a_clean_or_unknown_reboot_is_node_rebooted_and_unknown_boots_are_never_judged() {
        let c = id("c");
        let mut tracker = BootTracker::new(rules());
        let unknown = NodeFacts::default();
        tracker.observe(see(&c, 1, &unknown), wall(0));
        tracker.observe(see(&c, 2, &unknown), wall(1));
        assert_eq!(
            tracker.observe(see(&c, 2, &unknown), wall(100)),
            None,
            "nothing to compare"
        );
        tracker.observe(see(&c, 2, &facts("A", 100, None)), wall(101));
        let change = tracker.observe(see(&c, 2, &facts("B", 200, None)), wall(102));
        assert!(
            matches!(change, Some(BootChange::Rebooted(_))),
            "{change:?}"
        );
        let alarms = tracker.alarms(wall(102));
        assert_eq!(alarms[0].kind, AlarmKind::NodeRebooted);
        assert!(
            alarms[0]
                .evidence
                .iter()
                .any(|e| e.starts_with("whether a kernel panic caused it is unknown")),
            "{alarms:?}"
        );
        tracker.retain(&BTreeSet::new());
        assert!(tracker.alarms(wall(102)).is_empty());
    }

    #[test]
    fn annotate_sets_boots_adds_evidence_and_keeps_one_alarm_per_reboot() {
        use meshd_domain::{NodeIdentity, NodeState, NodeVerdict, Quorum};
        let c = id("c");
        let mut tracker = BootTracker::new(rules());
        tracker.observe(see(&c, 1, &facts("A", 1, None)), wall(0));
        tracker.observe(see(&c, 1, &facts("B", 2, None)), wall(1));
        let raised = tracker.alarms(wall(2));
        let mut status = MeshStatus {
            node: NodeIdentity {
                id: id("a"),
                incarnation: Incarnation(1),
                version: String::new(),
                hostname: String::new(),
            },
            evaluated_at: wall(2),
            quorum: Quorum::default(),
            nodes: vec![NodeVerdict {
                id: c.clone(),
                state: NodeState::Up,
                since: wall(0),
                evidence: vec!["last report 0.1s ago".into()],
                identity: None,
                last_report_at: None,
                cpu_saturated: false,
                boot: BootIdentity::default(),
                fix: None,
            }],
            links: vec![],
            // This node's own and two peers' copies.
            alarms: [raised.clone(), raised.clone(), raised].concat(),
            cables: vec![],
            checks: vec![],
            measurements: vec![],
            jobs: Vec::new(),
        };
        let mut from_peers = status.clone();
        annotate(&mut status, &tracker.view(wall(2)));
        assert_eq!(status.alarms.len(), 1);
        assert_eq!(status.nodes[0].boot.id.as_deref(), Some("B"));
        assert_eq!(status.nodes[0].evidence.len(), 2);
        // The node that rebooted knows only what its peers raised.
        annotate(&mut from_peers, &BootView::default());
        assert_eq!(from_peers.nodes[0].evidence, status.nodes[0].evidence);
        assert_eq!(
            from_peers.nodes[0].boot,
            BootIdentity::default(),
            "its facts say that"
        );
        assert!(
            status.nodes[0].evidence[1].starts_with("rebooted"),
            "{:?}",
            status.nodes[0]
        );
    }
}
