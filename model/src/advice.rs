//! What an operator should do about each link and node that is not up, in
//! one line, and evidence for every verdict that is not up. The engine's
//! output is passed through [`advised`]; everything here is read from the
//! status itself (states, blame, quorum, the ends' names and ports, the
//! evidence the engine wrote), so a status received over the wire could be
//! advised the same way.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use meshd_domain::facts::CheckStatus;
use meshd_domain::human;
use meshd_domain::{
    AlarmKind, Blame, LinkEnd, LinkState, LinkVerdict, MeshStatus, NodeId, NodeState, NodeVerdict,
};

/// The status with a `fix` on every node and link that is not up (none on
/// the others), and evidence on every one of them.
pub fn advised(mut status: MeshStatus) -> MeshStatus {
    let at = status.evaluated_at;
    let mesh = Mesh::of(&status);
    for node in &mut status.nodes {
        node.fix = node_fix(node);
        if node.state != NodeState::Up && node.evidence.is_empty() {
            node.evidence.push(node_fallback_evidence(node, at));
        }
    }
    for link in &mut status.links {
        if link.state != LinkState::Up && link.evidence.is_empty() {
            link.evidence.push(link_fallback_evidence(link, at));
        }
        link.fix = link_fix(link, &mesh);
    }
    status
}

/// What the whole status says that a link's fix depends on.
#[derive(Debug)]
struct Mesh {
    has_quorum: bool,
    /// Nodes whose verdict is suspect: their links wait for them.
    suspects: Vec<NodeId>,
    /// Nodes whose CPU is saturated or spiking: slow probes on their links
    /// may be theirs, not the cable's.
    busy: Vec<NodeId>,
    /// Each node's `rdma_enabled` check, where one was heard.
    rdma_enabled: BTreeMap<NodeId, CheckStatus>,
    /// When the status was evaluated: how long a verdict has stood.
    at: SystemTime,
}

impl Mesh {
    fn of(status: &MeshStatus) -> Self {
        let spiking = |id: &NodeId| {
            status
                .alarms
                .iter()
                .any(|a| a.kind == AlarmKind::CpuSpike && a.node == *id)
        };
        Self {
            has_quorum: status.quorum.has_quorum,
            suspects: status
                .nodes
                .iter()
                .filter(|n| n.state == NodeState::Suspect)
                .map(|n| n.id.clone())
                .collect(),
            busy: status
                .nodes
                .iter()
                .filter(|n| n.cpu_saturated || spiking(&n.id))
                .map(|n| n.id.clone())
                .chain(spiking(&status.node.id).then(|| status.node.id.clone()))
                .collect(),
            rdma_enabled: status
                .checks
                .iter()
                .filter(|c| c.name == "rdma_enabled")
                .filter_map(|c| Some((c.node.clone()?, c.status)))
                .collect(),
            at: status.evaluated_at,
        }
    }
}

fn node_fix(node: &NodeVerdict) -> Option<String> {
    let id = &node.id;
    match node.state {
        NodeState::Up => None,
        NodeState::Suspect => Some(format!(
            "check {id}'s management network and that meshd runs there \
             (`meshctl --addr {id}:7420 status`); it is called down if nobody hears it"
        )),
        NodeState::Down => Some(format!(
            "bring {id} back: check that it is on and awake, then that meshd runs there \
             (`sudo launchctl print system/io.meshd.agent`, or `systemctl status meshd`)"
        )),
    }
}

fn node_fallback_evidence(node: &NodeVerdict, at: SystemTime) -> String {
    match node.last_report_at {
        Some(last) => format!("last report {} ago", since(at, last)),
        None => format!(
            "{} since {} ago, never heard",
            node.state,
            since(at, node.since)
        ),
    }
}

fn link_fallback_evidence(link: &LinkVerdict, at: SystemTime) -> String {
    if link.state == LinkState::Flapping {
        format!(
            "{} swings between up and not up within the flap window; up right now",
            link.recent_changes
        )
    } else {
        format!("{} for {}", link.state, since(at, link.since))
    }
}

fn since(at: SystemTime, then: SystemTime) -> String {
    human::duration(at.duration_since(then).unwrap_or_default())
}

/// What the engine's evidence lines say went wrong, by the phrases the
/// link assessment writes (`link::assess`; the tests below run it, so a
/// rewording that this no longer recognises fails them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Silent,
    HeavyLoss,
    OneWay,
    RdmaPort,
    Speed,
    MtuLoss,
    Loss,
    Rtt,
    NeverAnswered,
    Unreported,
    /// The fault is over and the verdict waits for the link to prove it
    /// (`LinkTracker::holding`).
    Clearing,
}

impl Cause {
    fn of(line: &str) -> Option<Cause> {
        let cause = if line.contains("only one end is silent") {
            Cause::OneWay
        } else if line.contains(": no reply for ") {
            Cause::Silent
        } else if line.contains("probes lost over the last 1s") {
            Cause::HeavyLoss
        } else if line.contains("MTU-sized probes lost over") {
            Cause::MtuLoss
        } else if line.contains("probes lost over") {
            Cause::Loss
        } else if line.contains("RTT p90 ") {
            Cause::Rtt
        } else if line.contains(": negotiated ") {
            Cause::Speed
        } else if line.contains("RDMA port is ") {
            Cause::RdmaPort
        } else if line.contains("no probe answered yet") {
            Cause::NeverAnswered
        } else if line.contains("no end reports this link") {
            Cause::Unreported
        } else if line.contains(": called up after ") {
            Cause::Clearing
        } else {
            return None;
        };
        Some(cause)
    }
}

/// How long an RDMA port stays DOWN, with IP crossing its cable and RDMA
/// enabled on both Macs, before it is called wedged: past a replug and a
/// port's own retraining, which take seconds.
pub const RDMA_PORT_WEDGED_AFTER: Duration = Duration::from_secs(60);

/// The fix of a link whose RDMA port is down while IP crosses the cable,
/// so the cable is plugged: the port is off (RDMA disabled on an end:
/// recoverable without touching the cable), or wedged (RDMA enabled on
/// both, DOWN past [`RDMA_PORT_WEDGED_AFTER`]: only a reboot recovers
/// it). Says plainly which, where the mesh's checks tell.
fn rdma_port_fix(link: &LinkVerdict, end: &str, mesh: &Mesh) -> String {
    let enabled = |node: &NodeId| mesh.rdma_enabled.get(node).copied();
    let disabled: Vec<&str> = [&link.a.node, &link.b.node]
        .into_iter()
        .filter(|n| enabled(n) == Some(CheckStatus::Fail))
        .map(NodeId::as_str)
        .collect();
    if !disabled.is_empty() {
        return format!(
            "no reboot is needed for this: rdma_enabled fails on {} (see its fix; `rdma_ctl \
             status` shows it), and the port comes up once RDMA is on at both ends",
            disabled.join(" and ")
        );
    }
    let both_enabled = [&link.a.node, &link.b.node]
        .into_iter()
        .all(|n| enabled(n) == Some(CheckStatus::Pass));
    if !both_enabled {
        return format!(
            "if `rdma_ctl status` says disabled on {} or {}, enable it there (`rdma_ctl \
             enable` from Recovery; no reboot is needed for the port then); if both are \
             enabled, reseat the cable (no reboot needed if {end}'s port comes back ACTIVE in \
             `ibv_devinfo`); if it stays DOWN with IP working, a reboot of {end} is needed: a \
             wedged RDMA port recovers only after one",
            link.a.node, link.b.node
        );
    }
    let down_for = mesh.at.duration_since(link.since).unwrap_or_default();
    if down_for >= RDMA_PORT_WEDGED_AFTER {
        format!(
            "a reboot of {end} is needed: its RDMA port has stayed DOWN for {} while IP crosses \
             the cable and RDMA is enabled on both Macs, which only a reboot recovers; stop its \
             jobs, reseat the cable once (no reboot if the port comes back ACTIVE in \
             `ibv_devinfo`), then restart {end} (`sudo shutdown -r now`)",
            human::duration(down_for)
        )
    } else {
        format!(
            "reseat the cable (no reboot needed if {end}'s port comes back ACTIVE in \
             `ibv_devinfo`): RDMA is enabled on both Macs and IP crosses the cable; if the port \
             stays DOWN past {}, a reboot of {end} is needed",
            human::duration(RDMA_PORT_WEDGED_AFTER)
        )
    }
}

/// How to name an end's port in a command: `ifconfig en2` on a.
fn ifconfig(end: &LinkEnd) -> String {
    match &end.iface {
        Some(iface) => format!("`ifconfig {iface}` on {}", end.node),
        None => format!("`ifconfig` on {}", end.node),
    }
}

fn link_fix(link: &LinkVerdict, mesh: &Mesh) -> Option<String> {
    if link.state == LinkState::Up {
        return None;
    }
    let (a, b) = (&link.a, &link.b);
    let cable = format!("{a} <-> {b}");
    if !mesh.has_quorum {
        return Some(
            "this node has no quorum, so it judges no link: follow the no_quorum alarm's fix"
                .to_owned(),
        );
    }
    if link.blame == Blame::Node {
        let node = link.blamed_node.as_ref().unwrap_or(&a.node);
        return Some(format!(
            "bring {node} back (see its line under nodes); the cable needs nothing"
        ));
    }
    if let Some(node) = [&a.node, &b.node]
        .into_iter()
        .find(|n| mesh.suspects.contains(n))
    {
        return Some(format!(
            "wait: {node} is suspect and this verdict waits for its own; if it stays \
             suspect, check {node}'s management network"
        ));
    }
    let causes: Vec<(Cause, &str)> = link
        .evidence
        .iter()
        .filter_map(|line| Cause::of(line).map(|c| (c, line.as_str())))
        .collect();
    let has = |cause: Cause| causes.iter().find(|(c, _)| *c == cause).map(|(_, l)| *l);
    let reseat = format!(
        "reseat or replace the cable {cable}, then check both ports are up with their \
         address ({} and {})",
        ifconfig(a),
        ifconfig(b)
    );
    let fix = match link.state {
        LinkState::Up => return None,
        LinkState::Down | LinkState::Degraded
            if has(Cause::Clearing).is_some() && causes.len() == 1 =>
        {
            format!(
                "nothing, if it stays clean: the fault on {cable} is over and the verdict \
                 waits for the link to prove it (see the evidence for how long)"
            )
        }
        LinkState::Down => reseat,
        LinkState::Flapping => format!(
            "reseat or replace the cable {cable}, and keep both Macs awake \
             (`sudo pmset -a sleep 0`)"
        ),
        LinkState::Degraded => {
            if let Some(line) = has(Cause::OneWay).and(has(Cause::Silent)) {
                let silent = line.split(':').next().unwrap_or("one end");
                format!(
                    "only {silent} gets no replies: check that nothing on {silent} or its \
                     peer drops UDP on the probe port (probe.port, 7421) of this cable"
                )
            } else if let Some(line) = has(Cause::RdmaPort) {
                let end = line.split(':').next().unwrap_or("its end");
                rdma_port_fix(link, end, mesh)
            } else if has(Cause::Speed).is_some() {
                format!(
                    "reseat the cable {cable}, or use a Thunderbolt 5 cable and port: \
                     it negotiated less than expected"
                )
            } else if has(Cause::MtuLoss).is_some() && has(Cause::Loss).is_none() {
                format!(
                    "give both ends of {cable} the same MTU (`ifconfig IFACE mtu 1500`): \
                     full-size probes are lost, small ones pass"
                )
            } else if has(Cause::Loss).is_some() || has(Cause::MtuLoss).is_some() {
                format!("reseat or replace the cable {cable}: it loses probes")
            } else if has(Cause::Rtt).is_some() {
                let busy: Vec<&str> = [&a.node, &b.node]
                    .into_iter()
                    .filter(|n| mesh.busy.contains(n))
                    .map(NodeId::as_str)
                    .collect();
                if busy.is_empty() {
                    format!(
                        "the cable {cable} adds delay while both hosts are idle: reseat it, or \
                         replace it (a worn cable, or a dock or hub in its path, adds latency)"
                    )
                } else {
                    format!(
                        "free the CPU of {} (its cpu_spike alarm or `top` names the processes): \
                         a busy host answers probes late; on a test host that is always busy, \
                         raise thresholds.rtt_min_increase",
                        busy.join(" and ")
                    )
                }
            } else {
                reseat
            }
        }
        LinkState::Unknown => {
            if has(Cause::Unreported).is_some() {
                format!(
                    "list this cable in the [[links]] of {} and {} (or plug it in): \
                     no end probes it",
                    a.node, b.node
                )
            } else {
                format!(
                    "check that meshd runs on {} and {}, that both list this cable in \
                     [[links]], and that no firewall drops UDP 7421 (probe.port)",
                    a.node, b.node
                )
            }
        }
    };
    Some(fix)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use meshd_domain::fixtures::{end, identity, wall_ms};
    use meshd_domain::{LinkObservation, LossWindow, RdmaPortState};

    use super::*;
    use crate::fixtures::{healthy_observation, link_rules};
    use crate::link::{EndView, assess};
    use crate::link_rules::{MEDIUM_WINDOW, SHORT_WINDOW};

    /// The evidence `link::assess` writes for the two ends' observations.
    fn evidence(a: &LinkObservation, b: &LinkObservation) -> Vec<String> {
        let view = |node, observation| EndView {
            node,
            observation,
            confirmed_silence: Duration::ZERO,
            previous_life: Duration::ZERO,
            far_life: None,
            late: false,
            excuse: crate::excuse::Excuse::default(),
            rtt_shared: false,
            rdma_shared: false,
            carrier_stale: false,
        };
        assess(&[view("a", a), view("b", b)], &link_rules()).evidence
    }

    fn verdict(state: LinkState, evidence: Vec<String>) -> LinkVerdict {
        LinkVerdict {
            a: end("a", "en2"),
            b: end("b", "en3"),
            state,
            since: wall_ms(0),
            evidence,
            blame: if state == LinkState::Up {
                Blame::None
            } else {
                Blame::Link
            },
            blamed_node: None,
            recent_changes: 0,
            flapping: false,
            fix: None,
        }
    }

    /// A mesh with quorum, nobody suspect or busy, no checks heard, looked
    /// at when the verdicts began.
    fn quorate() -> Mesh {
        Mesh {
            has_quorum: true,
            suspects: Vec::new(),
            busy: Vec::new(),
            rdma_enabled: BTreeMap::new(),
            at: wall_ms(0),
        }
    }

    fn fix(state: LinkState, evidence: Vec<String>) -> String {
        link_fix(&verdict(state, evidence), &quorate()).expect("a fix")
    }

    fn healthy() -> (LinkObservation, LinkObservation) {
        (healthy_observation("a", "b"), healthy_observation("b", "a"))
    }

    fn lossy(windows: &mut [LossWindow], window: Duration, lost: u64) {
        for w in windows.iter_mut().filter(|w| w.window == window) {
            w.lost = lost;
        }
    }

    #[test]
    fn a_silent_cable_is_reseated_and_its_ports_checked() {
        let (mut a, mut b) = healthy();
        a.figures.silence = Duration::from_secs(3);
        b.figures.silence = Duration::from_secs(3);
        let lines = evidence(&a, &b);
        assert_eq!(
            lines,
            ["a: no reply for 3.0s", "b: no reply for 3.0s"],
            "no probe counted lost yet reads without a count"
        );
        let text = fix(LinkState::Down, lines);
        assert!(text.starts_with("reseat or replace the cable a/en2 <-> b/en3"));
        assert!(text.contains("`ifconfig en2` on a and `ifconfig en3` on b"));
    }

    #[test]
    fn each_degradation_gets_its_own_fix() {
        let (mut a, b) = healthy();
        a.figures.silence = Duration::from_secs(3);
        let one_way = fix(LinkState::Degraded, evidence(&a, &b));
        assert!(one_way.starts_with("only a gets no replies"), "{one_way}");

        let (mut a, b) = healthy();
        a.figures.rdma_port_state = RdmaPortState::Down;
        let rdma = fix(LinkState::Degraded, evidence(&a, &b));
        assert!(
            rdma.starts_with("if `rdma_ctl status` says disabled on a or b")
                && rdma.contains("a reboot of a is needed"),
            "{rdma}"
        );

        let (mut a, b) = healthy();
        a.figures.negotiated_speed_bps = Some(40_000_000_000);
        a.figures.expected_speed_bps = Some(80_000_000_000);
        let speed = fix(LinkState::Degraded, evidence(&a, &b));
        assert!(speed.contains("Thunderbolt 5 cable and port"), "{speed}");

        let (mut a, b) = healthy();
        lossy(&mut a.mtu_loss, MEDIUM_WINDOW, 5);
        let mtu = fix(LinkState::Degraded, evidence(&a, &b));
        assert!(mtu.starts_with("give both ends"), "{mtu}");

        let (mut a, b) = healthy();
        lossy(&mut a.figures.loss, MEDIUM_WINDOW, 10);
        let loss = fix(LinkState::Degraded, evidence(&a, &b));
        assert!(loss.ends_with("it loses probes"), "{loss}");

        let (mut a, b) = healthy();
        a.figures.rtt.p90 = Duration::from_millis(15);
        a.figures.rtt.p99 = Duration::from_millis(20);
        let rtt = fix(LinkState::Degraded, evidence(&a, &b));
        assert!(
            rtt.starts_with("the cable a/en2 <-> b/en3 adds delay"),
            "{rtt}"
        );
    }

    #[test]
    fn an_rdma_port_down_says_plainly_whether_a_reboot_is_needed() {
        let (mut a, b) = healthy();
        a.figures.rdma_port_state = RdmaPortState::Down;
        let port_down = verdict(LinkState::Degraded, evidence(&a, &b));
        // The status `secs` after the link went degraded, with the
        // `rdma_enabled` checks the mesh heard from a and b.
        let fix_after = |secs: u64, a_check, b_check| {
            let check = |node: &str, status| meshd_domain::facts::CheckResult {
                name: "rdma_enabled".to_owned(),
                node: Some(meshd_domain::fixtures::id(node)),
                status,
                evidence: Vec::new(),
                fix: String::new(),
            };
            let mut status = MeshStatus {
                node: identity("a", 1),
                evaluated_at: wall_ms(secs * 1000),
                quorum: Default::default(),
                nodes: vec![],
                links: vec![port_down.clone()],
                alarms: vec![],
                cables: vec![],
                checks: vec![check("a", a_check), check("b", b_check)],
                measurements: vec![],
                jobs: Vec::new(),
            };
            status.quorum.has_quorum = true;
            advised(status).links[0].fix.clone().expect("a fix")
        };

        let off = fix_after(600, CheckStatus::Pass, CheckStatus::Fail);
        assert!(
            off.starts_with("no reboot is needed for this: rdma_enabled fails on b"),
            "RDMA off at an end is recoverable however long it lasts: {off}"
        );
        let fresh = fix_after(10, CheckStatus::Pass, CheckStatus::Pass);
        assert!(
            fresh.starts_with("reseat the cable (no reboot needed if a's port comes back"),
            "{fresh}"
        );
        let wedged = fix_after(90, CheckStatus::Pass, CheckStatus::Pass);
        assert!(
            wedged.starts_with("a reboot of a is needed: its RDMA port has stayed DOWN for 1m30s"),
            "{wedged}"
        );
        // An end whose RDMA state was not checked: both ways are named.
        let unknown = fix_after(600, CheckStatus::Pass, CheckStatus::Skipped);
        assert!(
            unknown.starts_with("if `rdma_ctl status` says disabled on a or b"),
            "{unknown}"
        );
    }

    #[test]
    fn slow_probes_blame_a_host_only_when_it_is_busy() {
        let (mut a, b) = healthy();
        a.figures.rtt.p90 = Duration::from_millis(15);
        a.figures.rtt.p99 = Duration::from_millis(20);
        let slow = verdict(LinkState::Degraded, evidence(&a, &b));
        let busy_b = Mesh {
            busy: vec![meshd_domain::fixtures::id("b")],
            ..quorate()
        };
        let fix = link_fix(&slow, &busy_b).expect("a fix");
        assert!(fix.starts_with("free the CPU of b "), "{fix}");
    }

    #[test]
    fn a_verdict_held_while_it_clears_says_to_wait() {
        let rules = link_rules();
        let at = |ms| crate::fixtures::instant_ms(ms);
        let mut tracker = crate::link::LinkTracker::new(at(0));
        tracker.update(LinkState::Degraded, at(0), &rules);
        tracker.update(LinkState::Degraded, at(600), &rules);
        tracker.update(LinkState::Up, at(1_000), &rules);
        let held = tracker.holding(at(3_000), &rules).expect("held");
        let fix = fix(LinkState::Degraded, vec![held]);
        assert!(fix.starts_with("nothing, if it stays clean"), "{fix}");
    }

    #[test]
    fn heavy_loss_on_both_ends_is_a_cable_fault() {
        let (mut a, mut b) = healthy();
        lossy(&mut a.figures.loss, SHORT_WINDOW, 9);
        lossy(&mut b.figures.loss, SHORT_WINDOW, 9);
        let lines = evidence(&a, &b);
        assert!(
            lines.iter().all(|l| Cause::of(l) == Some(Cause::HeavyLoss)),
            "{lines:?}"
        );
        assert!(fix(LinkState::Down, lines).starts_with("reseat or replace"));
    }

    #[test]
    fn flapping_without_evidence_gets_some_and_a_fix() {
        let mut status = MeshStatus {
            node: identity("a", 1),
            evaluated_at: wall_ms(10_000),
            quorum: Default::default(),
            nodes: vec![],
            links: vec![LinkVerdict {
                recent_changes: 4,
                flapping: false,
                ..verdict(LinkState::Flapping, vec![])
            }],
            alarms: vec![],
            cables: vec![],
            checks: vec![],
            measurements: vec![],
            jobs: Vec::new(),
        };
        status.quorum.has_quorum = true;
        let status = advised(status);
        let link = &status.links[0];
        assert_eq!(
            link.evidence,
            ["4 swings between up and not up within the flap window; up right now"]
        );
        assert!(
            link.fix.as_deref().is_some_and(|f| f.contains("pmset")),
            "{link:?}"
        );
    }
}
