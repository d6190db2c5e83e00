//! Bridge loops and broadcast storms (ARCHITECTURE.md, Field facts): a bridge that has a
//! mesh port as a member forwards broadcast frames between cables, and once
//! two nodes do it the full mesh has a cycle and frames circulate forever.
//!
//! Pure: the watcher hands in what it saw and the time; this module keeps
//! the counters and windows and returns the alarms that are active.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{Alarm, AlarmKind, NodeId, Severity};

/// Which command line a fix is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    MacOs,
    Linux,
}

/// One bridge as the OS showed it in one sample.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BridgeObservation {
    pub name: String,
    /// Forwarding frames: UP and RUNNING and its status not `inactive`
    /// ([`meshd_domain::facts::BridgeFact::forwarding`]); `None` when this
    /// sample could not tell, which keeps a loop alarm as it was.
    pub active: Option<bool>,
    pub members: Vec<String>,
    /// Cumulative broadcast+multicast packets the bridge received, where the
    /// OS counts them (see the platform module for what each OS counts).
    pub packets: Option<u64>,
    /// The same counter for members; a member without one is absent.
    pub member_packets: BTreeMap<String, u64>,
    /// macOS: the network service whose device this bridge is, found by
    /// device because users can rename services.
    pub service: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormSettings {
    pub packets_per_second: u64,
    pub window: Duration,
}

/// Rate state of one interface (a bridge or a mesh member of one).
#[derive(Debug, Clone)]
struct Rate {
    last: Option<(u64, Instant)>,
    /// The latest measured rate, for evidence and metrics.
    per_second: Option<f64>,
    /// Start of the current run of samples above (or below) the threshold.
    above_since: Option<Instant>,
    below_since: Option<Instant>,
    storming: bool,
}

impl Rate {
    fn new() -> Self {
        Self {
            last: None,
            per_second: None,
            above_since: None,
            below_since: None,
            storming: false,
        }
    }

    /// Takes one cumulative counter reading. A counter that went backwards
    /// was reset (driver reload, interface recreated) or wrapped; that
    /// interval has no trustworthy rate, so it neither starts nor ends a
    /// storm, and the next interval is measured from the new value.
    fn update(&mut self, count: u64, now: Instant, settings: StormSettings) {
        let previous = self.last.replace((count, now));
        let Some((before, at)) = previous else {
            return;
        };
        let elapsed = now.saturating_duration_since(at);
        if count < before || elapsed.is_zero() {
            // The unknown interval breaks both runs: a storm needs a full
            // measured window above, and clearing one a full window below.
            self.per_second = None;
            self.above_since = None;
            self.below_since = None;
            return;
        }
        #[allow(clippy::cast_precision_loss)]
        let rate = (count - before) as f64 / elapsed.as_secs_f64();
        self.per_second = Some(rate);
        // The rate is an average over [at, now], so a run that starts with
        // this sample started at `at`.
        #[allow(clippy::cast_precision_loss)]
        if rate > settings.packets_per_second as f64 {
            self.below_since = None;
            let since = *self.above_since.get_or_insert(at);
            if now.saturating_duration_since(since) >= settings.window {
                self.storming = true;
            }
        } else {
            self.above_since = None;
            let since = *self.below_since.get_or_insert(at);
            if now.saturating_duration_since(since) >= settings.window {
                self.storming = false;
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Since {
    loop_since: Option<SystemTime>,
    storm_since: Option<SystemTime>,
}

/// Keeps the rates and alarm start times between samples.
#[derive(Debug)]
pub struct BridgeDetector {
    node: NodeId,
    os: Os,
    storm: StormSettings,
    rates: BTreeMap<String, Rate>,
    since: BTreeMap<String, Since>,
}

impl BridgeDetector {
    /// New storm thresholds after a config reload; rates and held alarms
    /// carry on.
    pub fn set_storm(&mut self, storm: StormSettings) {
        self.storm = storm;
    }

    pub fn new(node: NodeId, os: Os, storm: StormSettings) -> Self {
        Self {
            node,
            os,
            storm,
            rates: BTreeMap::new(),
            since: BTreeMap::new(),
        }
    }

    /// The latest broadcast+multicast rate of each watched interface (the
    /// bridges and their mesh members) that has one.
    pub fn rates(&self) -> impl Iterator<Item = (&str, f64)> {
        self.rates
            .iter()
            .filter_map(|(name, r)| r.per_second.map(|p| (name.as_str(), p)))
    }

    /// Takes one sample and returns the alarms active after it.
    pub fn observe(
        &mut self,
        bridges: &[BridgeObservation],
        mesh: &BTreeSet<String>,
        now: Instant,
        wall: SystemTime,
    ) -> Vec<Alarm> {
        self.sample_rates(bridges, mesh, now);
        let mut alarms = Vec::new();
        let mut since = BTreeMap::new();
        for bridge in bridges {
            let previous = self.since.get(&bridge.name).copied();
            let mesh_members: Vec<&str> = bridge
                .members
                .iter()
                .filter(|m| mesh.contains(*m))
                .map(String::as_str)
                .collect();
            let evidence = self.evidence(bridge, &mesh_members);
            let loop_since = previous.and_then(|p| p.loop_since);
            let looping = self.loop_alarm(bridge, &mesh_members, &evidence, loop_since, wall);
            let storm_since = previous.and_then(|p| p.storm_since);
            let storm = self.storm_alarm(bridge, &mesh_members, evidence, storm_since, wall);
            let entry = Since {
                loop_since: looping.as_ref().map(|a| a.since),
                storm_since: storm.as_ref().map(|a| a.since),
            };
            if entry.loop_since.is_some() || entry.storm_since.is_some() {
                since.insert(bridge.name.clone(), entry);
            }
            alarms.extend(looping);
            alarms.extend(storm);
        }
        self.since = since;
        alarms
    }

    /// Takes the counters of the bridges and of their mesh members.
    fn sample_rates(
        &mut self,
        bridges: &[BridgeObservation],
        mesh: &BTreeSet<String>,
        now: Instant,
    ) {
        let mut seen = BTreeSet::new();
        let storm = self.storm;
        for bridge in bridges {
            if let Some(count) = bridge.packets {
                self.rate_of(&bridge.name, &mut seen)
                    .update(count, now, storm);
            }
            for (member, count) in &bridge.member_packets {
                if mesh.contains(member) && bridge.members.contains(member) {
                    self.rate_of(member, &mut seen).update(*count, now, storm);
                }
            }
        }
        // An interface that vanished (a deleted bridge, a member that left)
        // starts over if it comes back.
        self.rates.retain(|name, _| seen.contains(name));
    }

    /// `bridge_loop` while `bridge` forwards with mesh ports among its
    /// members; `held_since` is when the alarm began, if it was raised.
    fn loop_alarm(
        &self,
        bridge: &BridgeObservation,
        mesh_members: &[&str],
        evidence: &[String],
        held_since: Option<SystemTime>,
        wall: SystemTime,
    ) -> Option<Alarm> {
        let looping = match bridge.active {
            Some(active) => active,
            // An unreadable state is no evidence either way.
            None => held_since.is_some(),
        };
        if !looping || mesh_members.is_empty() {
            return None;
        }
        Some(Alarm {
            kind: AlarmKind::BridgeLoop,
            severity: Severity::Warning,
            node: self.node.clone(),
            subject: bridge.name.clone(),
            summary: format!(
                "{} bridges mesh ports {}: broadcast frames can loop between cables",
                bridge.name,
                mesh_members.join(", ")
            ),
            evidence: evidence.to_vec(),
            fix: Some(fix(self.os, bridge, mesh_members)),
            since: held_since.unwrap_or(wall),
            updated: wall,
        })
    }

    /// `broadcast_storm` while `bridge` or one of its mesh members storms;
    /// `held_since` is when the alarm began, if it was raised.
    fn storm_alarm(
        &self,
        bridge: &BridgeObservation,
        mesh_members: &[&str],
        evidence: Vec<String>,
        held_since: Option<SystemTime>,
        wall: SystemTime,
    ) -> Option<Alarm> {
        let storming: Vec<String> = std::iter::once(bridge.name.as_str())
            .chain(mesh_members.iter().copied())
            .filter_map(|name| self.rates.get(name).map(|r| (name, r)))
            .filter(|(_, r)| r.storming)
            .map(|(name, r)| match r.per_second {
                Some(r) => format!("{name} {r:.0}/s"),
                None => format!("{name} (rate unknown this sample)"),
            })
            .collect();
        if storming.is_empty() {
            return None;
        }
        Some(Alarm {
            kind: AlarmKind::BroadcastStorm,
            severity: Severity::Warning,
            node: self.node.clone(),
            subject: bridge.name.clone(),
            summary: format!(
                "broadcast storm on {}: {} (threshold {}/s for {})",
                bridge.name,
                storming.join(", "),
                self.storm.packets_per_second,
                humantime::format_duration(self.storm.window)
            ),
            evidence,
            fix: Some(fix(self.os, bridge, mesh_members)),
            since: held_since.unwrap_or(wall),
            updated: wall,
        })
    }

    fn rate_of(&mut self, name: &str, seen: &mut BTreeSet<String>) -> &mut Rate {
        seen.insert(name.to_owned());
        self.rates.entry(name.to_owned()).or_insert_with(Rate::new)
    }

    fn evidence(&self, bridge: &BridgeObservation, mesh_members: &[&str]) -> Vec<String> {
        let mut evidence = vec![
            format!(
                "{} is {}",
                bridge.name,
                match bridge.active {
                    Some(true) => "forwarding (up, running)",
                    Some(false) => "not forwarding",
                    None => "in an unknown state this sample",
                }
            ),
            format!(
                "members: {}",
                list(bridge.members.iter().map(String::as_str))
            ),
            format!(
                "mesh ports among them: {}",
                list(mesh_members.iter().copied())
            ),
        ];
        let rates: Vec<String> = std::iter::once(bridge.name.as_str())
            .chain(mesh_members.iter().copied())
            .filter_map(|name| {
                let r = self.rates.get(name)?.per_second?;
                Some(format!("{name} {r:.0}/s"))
            })
            .collect();
        if !rates.is_empty() {
            evidence.push(format!("broadcast+multicast packets: {}", rates.join(", ")));
        }
        if let Some(service) = &bridge.service {
            evidence.push(format!("network service: {service}"));
        }
        evidence
    }
}

fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The command that takes the bridge out of the mesh on this OS.
fn fix(os: Os, bridge: &BridgeObservation, mesh_members: &[&str]) -> String {
    match os {
        Os::MacOs => match &bridge.service {
            Some(service) => format!(
                "sudo networksetup -setnetworkserviceenabled {} off",
                double_quoted(service)
            ),
            // Without the service name the command cannot be written; the
            // ifconfig line helps until the next reboot or network change.
            None => format!(
                "turn off the network service whose device is {0} (System Settings > Network), \
                 or for now: sudo ifconfig {0} down",
                bridge.name
            ),
        },
        Os::Linux => {
            let release: Vec<String> = mesh_members
                .iter()
                .map(|m| format!("sudo ip link set {m} nomaster"))
                .collect();
            format!(
                "{} (or remove the bridge: sudo ip link del {}), and remove it from the \
                 network configuration that creates it",
                release.join(" && "),
                bridge.name
            )
        }
    }
}

/// A shell word in double quotes: `"`, `\`, `$` and backquotes escaped, so a
/// user-chosen service name is pasted safely.
fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Mesh-wide view of the alarms of every node (this one's and its peers'):
/// one node bridging mesh ports is a warning, but once two or more do, the
/// mesh has a cycle through them, so their `bridge_loop` alarms become
/// critical. Other alarms pass through unchanged.
pub fn escalate_bridge_loops(mut alarms: Vec<Alarm>) -> Vec<Alarm> {
    let looping: BTreeSet<&NodeId> = alarms
        .iter()
        .filter(|a| a.kind == AlarmKind::BridgeLoop)
        .map(|a| &a.node)
        .collect();
    if looping.len() < 2 {
        return alarms;
    }
    let names = looping
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let note = format!(
        "{} nodes bridge mesh ports ({names}): the mesh has a loop",
        looping.len()
    );
    for alarm in alarms
        .iter_mut()
        .filter(|a| a.kind == AlarmKind::BridgeLoop)
    {
        alarm.severity = Severity::Critical;
        if !alarm.evidence.contains(&note) {
            alarm.evidence.push(note.clone());
        }
    }
    alarms
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::id;

    use super::*;
    use crate::fixtures::moment;
    use crate::time::Moment;

    const SETTINGS: StormSettings = StormSettings {
        packets_per_second: 1_000,
        window: Duration::from_secs(5),
    };

    fn mesh() -> BTreeSet<String> {
        ["en1", "en2"].into_iter().map(String::from).collect()
    }

    fn bridge(active: bool, members: &[&str]) -> BridgeObservation {
        BridgeObservation {
            name: "bridge0".into(),
            active: Some(active),
            members: members.iter().map(|m| (*m).to_owned()).collect(),
            packets: None,
            member_packets: BTreeMap::new(),
            service: Some("Thunderbolt Bridge".into()),
        }
    }

    fn counted(packets: u64) -> BridgeObservation {
        BridgeObservation {
            packets: Some(packets),
            ..bridge(false, &["en1", "en5"])
        }
    }

    fn detector(os: Os) -> BridgeDetector {
        BridgeDetector::new(id("a"), os, SETTINGS)
    }

    fn kinds(alarms: &[Alarm]) -> Vec<AlarmKind> {
        alarms.iter().map(|a| a.kind).collect()
    }

    #[test]
    fn loop_is_raised_at_once_and_cleared_when_inactive() {
        let mut d = detector(Os::MacOs);
        let Moment { now, wall } = moment(0);
        let alarms = d.observe(&[bridge(true, &["en1", "en2", "en3"])], &mesh(), now, wall);
        assert_eq!(kinds(&alarms), [AlarmKind::BridgeLoop]);
        let a = &alarms[0];
        assert_eq!(a.severity, Severity::Warning);
        assert_eq!(a.subject, "bridge0");
        assert!(a.summary.contains("en1, en2"), "{}", a.summary);
        assert!(!a.summary.contains('\n'));
        assert!(a.evidence.iter().any(|e| e == "members: en1, en2, en3"));
        assert!(
            a.evidence
                .iter()
                .any(|e| e == "mesh ports among them: en1, en2")
        );
        assert_eq!(
            a.fix.as_deref(),
            Some("sudo networksetup -setnetworkserviceenabled \"Thunderbolt Bridge\" off")
        );

        let Moment { now, wall: later } = moment(3);
        let again = d.observe(&[bridge(true, &["en1", "en2", "en3"])], &mesh(), now, later);
        assert_eq!(again[0].since, wall, "since is kept across updates");
        assert_eq!(again[0].updated, later);

        let Moment { now, wall } = moment(4);
        assert!(
            d.observe(&[bridge(false, &["en1"])], &mesh(), now, wall)
                .is_empty()
        );
        // Raised again later, it starts a new `since`.
        let Moment { now, wall } = moment(5);
        let back = d.observe(&[bridge(true, &["en1"])], &mesh(), now, wall);
        assert_eq!(back[0].since, wall);
    }

    #[test]
    fn an_unknown_state_neither_raises_nor_clears_a_loop() {
        let mut d = detector(Os::MacOs);
        let unknown = BridgeObservation {
            active: None,
            ..bridge(true, &["en1"])
        };
        let Moment { now, wall } = moment(0);
        assert!(
            d.observe(std::slice::from_ref(&unknown), &mesh(), now, wall)
                .is_empty()
        );
        let Moment { now, wall } = moment(1);
        let raised = d.observe(&[bridge(true, &["en1"])], &mesh(), now, wall);
        assert_eq!(kinds(&raised), [AlarmKind::BridgeLoop]);
        let Moment { now, wall: later } = moment(2);
        let held = d.observe(&[unknown], &mesh(), now, later);
        assert_eq!(kinds(&held), [AlarmKind::BridgeLoop]);
        assert_eq!(held[0].since, wall);
        assert!(
            held[0]
                .evidence
                .contains(&"bridge0 is in an unknown state this sample".to_owned())
        );
    }

    #[test]
    fn loop_clears_when_mesh_members_leave_or_bridge_vanishes() {
        let mut d = detector(Os::Linux);
        let Moment { now, wall } = moment(0);
        assert_eq!(
            kinds(&d.observe(&[bridge(true, &["en2"])], &mesh(), now, wall)),
            [AlarmKind::BridgeLoop]
        );
        let Moment { now, wall } = moment(1);
        assert!(
            d.observe(&[bridge(true, &["en7"])], &mesh(), now, wall)
                .is_empty()
        );
        let Moment { now, wall } = moment(2);
        assert!(
            d.observe(&[bridge(true, &[])], &mesh(), now, wall)
                .is_empty()
        );
        let Moment { now, wall } = moment(3);
        assert!(d.observe(&[], &mesh(), now, wall).is_empty());
    }

    #[test]
    fn fixes_per_os() {
        let mut b = bridge(true, &["en1", "en2"]);
        assert_eq!(
            fix(Os::Linux, &b, &["en1", "en2"]),
            "sudo ip link set en1 nomaster && sudo ip link set en2 nomaster \
             (or remove the bridge: sudo ip link del bridge0), and remove it from the \
             network configuration that creates it"
        );
        b.service = Some("My \"TB\" $bridge".into());
        assert_eq!(
            fix(Os::MacOs, &b, &[]),
            r#"sudo networksetup -setnetworkserviceenabled "My \"TB\" \$bridge" off"#
        );
        b.service = None;
        assert!(fix(Os::MacOs, &b, &[]).contains("sudo ifconfig bridge0 down"));
    }

    /// Feeds `rate` packets/s for seconds `from..to` and returns the alarm
    /// kinds after each sample.
    fn feed(
        d: &mut BridgeDetector,
        count: &mut u64,
        rate: u64,
        from: u64,
        to: u64,
    ) -> Vec<Vec<AlarmKind>> {
        (from..to)
            .map(|s| {
                *count += rate;
                let Moment { now, wall } = moment(s);
                let alarms = d.observe(&[counted(*count)], &mesh(), now, wall);
                alarms.into_iter().map(|a| a.kind).collect()
            })
            .collect()
    }

    #[test]
    fn storm_needs_the_full_window_and_clears_after_a_quiet_one() {
        let mut d = detector(Os::Linux);
        let mut count = 0;
        // First sample at 0 has no rate; from 0 to 4 the rate is high but
        // the window (5 s) is not yet full.
        let early = feed(&mut d, &mut count, 20_000, 0, 5);
        assert!(early.iter().all(Vec::is_empty), "{early:?}");
        let Moment { now, wall } = moment(5);
        count += 20_000;
        let alarms = d.observe(&[counted(count)], &mesh(), now, wall);
        assert_eq!(kinds(&alarms), [AlarmKind::BroadcastStorm]);
        assert!(
            alarms[0].summary.contains("bridge0 20000/s"),
            "{}",
            alarms[0].summary
        );
        assert_eq!(alarms[0].since, wall);
        assert_eq!(d.rates().collect::<Vec<_>>(), [("bridge0", 20_000.0)]);

        // One quiet sample does not clear it, nor do four.
        let quiet = feed(&mut d, &mut count, 10, 6, 10);
        assert!(
            quiet.iter().all(|k| k == &[AlarmKind::BroadcastStorm]),
            "{quiet:?}"
        );
        let Moment { now, wall: later } = moment(10);
        count += 10;
        let still = d.observe(&[counted(count)], &mesh(), now, later);
        // The quiet run started at 5: at 10 it is a full window.
        assert!(still.is_empty(), "{still:?}");
    }

    #[test]
    fn a_single_spike_or_dip_does_not_flap() {
        let mut d = detector(Os::Linux);
        let mut count = 0;
        let mut kinds = feed(&mut d, &mut count, 10, 0, 3);
        kinds.extend(feed(&mut d, &mut count, 50_000, 3, 4));
        kinds.extend(feed(&mut d, &mut count, 10, 4, 10));
        assert!(kinds.iter().all(Vec::is_empty), "{kinds:?}");

        kinds = feed(&mut d, &mut count, 50_000, 10, 16);
        assert_eq!(kinds.last().map(Vec::len), Some(1));
        kinds = feed(&mut d, &mut count, 10, 16, 17);
        kinds.extend(feed(&mut d, &mut count, 50_000, 17, 30));
        assert!(
            kinds.iter().all(|k| k == &[AlarmKind::BroadcastStorm]),
            "{kinds:?}"
        );
    }

    #[test]
    fn counter_resets_and_wraps_do_not_panic_or_invent_rates() {
        let mut d = detector(Os::Linux);
        let mut count = u64::MAX - 30_000;
        let before = feed(&mut d, &mut count, 10_000, 0, 3);
        assert!(before.iter().all(Vec::is_empty));
        // Wrapped past u64::MAX / reset to a small value: no rate, no panic.
        let Moment { now, wall } = moment(3);
        assert!(d.observe(&[counted(5)], &mesh(), now, wall).is_empty());
        assert_eq!(d.rates().count(), 0);
        let mut count = 5;
        // The storm goes on from the new base and still needs a window.
        let after = feed(&mut d, &mut count, 10_000, 4, 20);
        assert!(after[..4].iter().all(Vec::is_empty), "{after:?}");
        assert_eq!(after.last().map(Vec::len), Some(1));
        // The same instant twice: no division by zero.
        let Moment { now, wall } = moment(19);
        let _ = d.observe(&[counted(count + 5)], &mesh(), now, wall);
    }

    #[test]
    fn storm_on_a_mesh_member_counts_but_not_on_other_members() {
        let mut d = detector(Os::MacOs);
        let mut observe = |secs: u64, n: u64| {
            let mut b = bridge(false, &["en1", "en5"]);
            b.member_packets.insert("en1".into(), n);
            b.member_packets.insert("en5".into(), n * 10);
            let Moment { now, wall } = moment(secs);
            d.observe(&[b], &mesh(), now, wall)
        };
        for s in 0..6 {
            assert!(observe(s, s * 5_000).is_empty() || s == 5);
        }
        let alarms = observe(6, 30_000);
        assert_eq!(kinds(&alarms), [AlarmKind::BroadcastStorm]);
        assert!(
            alarms[0].summary.contains("en1 5000/s"),
            "{}",
            alarms[0].summary
        );
        assert!(!alarms[0].summary.contains("en5"));
    }

    fn loop_from(node: &str) -> Alarm {
        Alarm {
            kind: AlarmKind::BridgeLoop,
            severity: Severity::Warning,
            node: id(node),
            subject: "bridge0".into(),
            summary: String::new(),
            evidence: vec![],
            fix: None,
            since: SystemTime::UNIX_EPOCH,
            updated: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn two_nodes_with_loops_are_critical() {
        let storm = Alarm {
            kind: AlarmKind::BroadcastStorm,
            ..loop_from("c")
        };
        let one = escalate_bridge_loops(vec![loop_from("a"), storm.clone()]);
        assert_eq!(one[0].severity, Severity::Warning);
        // Two bridges on one node are still one node.
        let same = escalate_bridge_loops(vec![loop_from("a"), loop_from("a")]);
        assert!(same.iter().all(|a| a.severity == Severity::Warning));

        let two = escalate_bridge_loops(vec![loop_from("a"), storm.clone(), loop_from("b")]);
        assert_eq!(two[0].severity, Severity::Critical);
        assert_eq!(two[2].severity, Severity::Critical);
        assert_eq!(two[1], storm);
        assert!(two[0].evidence[0].contains("2 nodes bridge mesh ports (a, b)"));
        // Idempotent: evaluating again does not pile up evidence.
        let again = escalate_bridge_loops(two);
        assert_eq!(again[0].evidence.len(), 1);
    }
}
