//! A job's traffic off its cables: after a crash or a network change, the
//! route to a peer's cable address can leave by Wi-Fi, Ethernet or a VPN
//! while every cable and node stays healthy, and the job runs on, ten
//! times slower. Where this node runs a rank of a job that has ranks on
//! other nodes, the daemon asks the OS which interface it sends to each of
//! those nodes' cable addresses by; a route that leaves by another
//! interface than the cable's, on two checks in a row, is `job_off_mesh`
//! naming the peer, the interface used and the cable it should use; back on
//! the cable, it goes at once. A route that cannot be read is unknown,
//! never a verdict. Pure: the
//! answers and the time come in.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use meshd_domain::jobs::RankCondition;
use meshd_domain::{Alarm, AlarmKind, MeshStatus, NodeId, Severity};

use crate::cpu::Hold;
use crate::time::Moment;

/// The peers a job of this node talks to: the nodes of the other ranks of
/// every job with a live rank here.
pub fn job_peers(status: &MeshStatus, me: &NodeId) -> BTreeSet<NodeId> {
    status
        .jobs
        .iter()
        .filter(|job| {
            job.ranks
                .iter()
                .any(|r| &r.node == me && r.condition == RankCondition::Live)
        })
        .flat_map(|job| job.ranks.iter().map(|r| r.node.clone()))
        .filter(|node| node != me)
        .collect()
}

/// What the OS said of the route to one peer's cable address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteSeen {
    /// Sent by `interface`; `route` says how, for the evidence.
    Via { interface: String, route: String },
    /// No route at all (the reason the OS gave).
    NoRoute(String),
    /// The answer could not be read: unknown.
    Unknown(String),
}

/// One cable to a job's peer, and how the OS routes to its far address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteCheck {
    pub peer: NodeId,
    pub address: IpAddr,
    /// This end's interface on the cable.
    pub cable_iface: String,
    pub seen: RouteSeen,
}

impl RouteCheck {
    /// The interface the traffic leaves by instead of the cable's, if it
    /// does.
    fn off_cable(&self) -> Option<&str> {
        match &self.seen {
            RouteSeen::Via { interface, .. } if *interface != self.cable_iface => Some(interface),
            _ => None,
        }
    }
}

/// Follows each peer's route from check to check.
#[derive(Debug, Clone)]
pub struct OffMeshWatch {
    node: NodeId,
    /// How long a route must stay off the cable: a check and the next.
    window: Duration,
    held: BTreeMap<NodeId, Hold>,
}

impl OffMeshWatch {
    pub fn new(node: NodeId, window: Duration) -> Self {
        Self {
            node,
            window,
            held: BTreeMap::new(),
        }
    }

    /// Takes this round's checks (peers not checked now are forgotten: no
    /// job talks to them any more); returns the active alarms.
    pub fn update(&mut self, checks: &[RouteCheck], moment: Moment) -> Vec<Alarm> {
        let checked: BTreeSet<&NodeId> = checks.iter().map(|c| &c.peer).collect();
        self.held.retain(|peer, _| checked.contains(peer));
        let mut alarms = Vec::new();
        for (peer, of_peer) in group(checks) {
            let off: Vec<&RouteCheck> = of_peer
                .iter()
                .copied()
                .filter(|c| c.off_cable().is_some())
                .collect();
            // Unknown answers hold nothing up and raise nothing.
            let unknown = of_peer
                .iter()
                .all(|c| matches!(c.seen, RouteSeen::Unknown(_)));
            let hold = self
                .held
                .entry(peer.clone())
                .or_insert_with(|| Hold::new(self.window));
            if unknown {
                continue;
            }
            let since = hold.update(!off.is_empty(), moment.now);
            if let (Some(since), Some(first)) = (since, off.first()) {
                alarms.push(self.alarm(first, &off, moment.wall_of(since), moment));
            }
        }
        alarms
    }

    fn alarm(
        &self,
        first: &RouteCheck,
        off: &[&RouteCheck],
        since: std::time::SystemTime,
        moment: Moment,
    ) -> Alarm {
        let used = first.off_cable().unwrap_or_default();
        let evidence = off
            .iter()
            .map(|c| match &c.seen {
                RouteSeen::Via { route, .. } => format!(
                    "to {} ({}'s end of the cable on {}): {route}",
                    c.address, c.peer, c.cable_iface
                ),
                RouteSeen::NoRoute(why) | RouteSeen::Unknown(why) => {
                    format!("to {}: {why}", c.address)
                }
            })
            .collect();
        Alarm {
            kind: AlarmKind::JobOffMesh,
            severity: Severity::Warning,
            node: self.node.clone(),
            subject: first.peer.to_string(),
            summary: format!(
                "job traffic from {} to {} leaves by {used}, not its cable on {}",
                self.node, first.peer, first.cable_iface
            ),
            evidence,
            fix: Some(format!(
                "remove the route that sends {} elsewhere (`route -n get {}` on macOS, `ip \
                 route get {}` on Linux, names it), or give {}'s cable port its address again; \
                 on a Mac, put the Thunderbolt services above Wi-Fi and Ethernet in the service \
                 order",
                first.address, first.address, first.address, first.cable_iface
            )),
            since,
            updated: moment.wall,
        }
    }
}

fn group(checks: &[RouteCheck]) -> BTreeMap<&NodeId, Vec<&RouteCheck>> {
    let mut by_peer: BTreeMap<&NodeId, Vec<&RouteCheck>> = BTreeMap::new();
    for check in checks {
        by_peer.entry(&check.peer).or_default().push(check);
    }
    by_peer
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{empty_status, id, wall};
    use meshd_domain::jobs::{JobBackend, JobView, RankView};

    use super::*;
    use crate::fixtures::moment;

    fn check(peer: &str, seen: RouteSeen) -> RouteCheck {
        RouteCheck {
            peer: id(peer),
            address: "10.77.12.2".parse().expect("ip"),
            cable_iface: "mesh-b".to_owned(),
            seen,
        }
    }

    fn via(interface: &str) -> RouteSeen {
        RouteSeen::Via {
            interface: interface.to_owned(),
            route: format!("{interface} via 10.78.0.2"),
        }
    }

    #[test]
    fn a_route_off_the_cable_on_two_checks_is_one_alarm_naming_peer_interface_and_cable() {
        let mut watch = OffMeshWatch::new(id("a"), Duration::from_secs(2));
        assert!(
            watch
                .update(&[check("b", via("mesh-b"))], moment(0))
                .is_empty()
        );
        assert!(
            watch
                .update(&[check("b", via("mgmt0"))], moment(3))
                .is_empty()
        );
        let alarms = watch.update(&[check("b", via("mgmt0"))], moment(6));
        assert_eq!(alarms.len(), 1, "{alarms:?}");
        let alarm = &alarms[0];
        assert_eq!((alarm.kind, &alarm.node), (AlarmKind::JobOffMesh, &id("a")));
        assert_eq!(alarm.subject, "b");
        assert_eq!(
            alarm.summary,
            "job traffic from a to b leaves by mgmt0, not its cable on mesh-b"
        );
        assert_eq!(
            alarm.evidence,
            ["to 10.77.12.2 (b's end of the cable on mesh-b): mgmt0 via 10.78.0.2"]
        );
        assert_eq!(alarm.since, moment(3).wall);
        // Back on the cable: the alarm goes at once.
        assert!(
            watch
                .update(&[check("b", via("mesh-b"))], moment(9))
                .is_empty()
        );
    }

    #[test]
    fn unknown_answers_and_missing_routes_raise_nothing() {
        let mut watch = OffMeshWatch::new(id("a"), Duration::from_secs(2));
        for secs in [0, 3, 6] {
            let unknown = check("b", RouteSeen::Unknown("`ip` timed out".to_owned()));
            let none = check("c", RouteSeen::NoRoute("network unreachable".to_owned()));
            assert!(watch.update(&[unknown, none], moment(secs)).is_empty());
        }
    }

    #[test]
    fn the_peers_checked_are_those_of_jobs_with_a_live_rank_here() {
        let rank = |rank, node: &str, condition| RankView {
            rank,
            node: id(node),
            pid: 1,
            name: "python3".to_owned(),
            condition,
            busy: false,
        };
        let job = |ranks| JobView {
            job: "j".to_owned(),
            backend: JobBackend::Jaccl,
            world: None,
            ranks,
            hung: None,
            since: wall(0),
        };
        let status = MeshStatus {
            jobs: vec![
                job(vec![
                    rank(0, "a", RankCondition::Live),
                    rank(1, "b", RankCondition::Live),
                ]),
                job(vec![
                    rank(0, "a", RankCondition::Gone),
                    rank(1, "c", RankCondition::Live),
                ]),
                job(vec![
                    rank(0, "c", RankCondition::Live),
                    rank(1, "d", RankCondition::Live),
                ]),
            ],
            ..empty_status("a", wall(0))
        };
        assert_eq!(
            job_peers(&status, &id("a")).into_iter().collect::<Vec<_>>(),
            [id("b")]
        );
    }
}
