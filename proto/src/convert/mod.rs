//! Wire ↔ domain conversions.
//!
//! Domain → wire is total. Wire → domain checks every field a peer or a
//! server could get wrong and names it in the error (`nodes[2].state: ...`),
//! so one bad message is rejected with a clear reason and nothing else is
//! lost.

use std::time::{Duration, SystemTime};

use crate::wire;
use meshd_domain::facts::{CheckStatus, Ipv4Method, MemoryPressure};
use meshd_domain::jobs::{JobBackend, ProcessState, RankCondition};
use meshd_domain::{
    Blame, EventKind, InterfaceState, LinkState, NodeId, NodeState, RdmaPortState, RejectReason,
    Severity,
};

mod facts;
mod history;
mod hostfile;
mod jobs;
mod measurement;
mod ports;
mod status;
mod stream;

pub use history::{History, HistoryAnswer, decode_incident, encode_incident};
pub use stream::update_from_wire;

/// A wire message that does not make sense, with the path of the bad field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct WireError {
    pub field: String,
    pub problem: String,
}

impl WireError {
    fn new(field: &str, problem: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            problem: problem.into(),
        }
    }

    /// Puts the enclosing field in front: `state` inside `nodes[2]` becomes
    /// `nodes[2].state`.
    fn within(self, parent: &str) -> Self {
        Self {
            field: format!("{parent}.{}", self.field),
            problem: self.problem,
        }
    }
}

type Result<T> = std::result::Result<T, WireError>;

fn node_id(field: &str, id: String) -> Result<NodeId> {
    NodeId::new(id).map_err(|e| WireError::new(field, e.to_string()))
}

fn node_ids(field: &str, ids: Vec<String>) -> Result<Vec<NodeId>> {
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| node_id(&format!("{field}[{i}]"), id))
        .collect()
}

fn optional_node_id(field: &str, id: String) -> Result<Option<NodeId>> {
    if id.is_empty() {
        Ok(None)
    } else {
        node_id(field, id).map(Some)
    }
}

/// A wire time within [`meshd_domain::time`]'s range (1970 to 9999), refused
/// otherwise: nothing downstream formats or adds to a time it cannot hold.
fn time(field: &str, ts: Option<prost_types::Timestamp>) -> Result<SystemTime> {
    let ts = ts.ok_or_else(|| WireError::new(field, "missing"))?;
    if !(0..=999_999_999).contains(&ts.nanos) {
        return Err(WireError::new(
            field,
            format!("nanos {} is outside 0-999999999", ts.nanos),
        ));
    }
    if ts.seconds < 0 {
        return Err(WireError::new(
            field,
            format!("{} s is before 1970", ts.seconds),
        ));
    }
    if ts.seconds > meshd_domain::time::LATEST_SECONDS {
        return Err(WireError::new(
            field,
            format!("{} s is after 9999", ts.seconds),
        ));
    }
    SystemTime::try_from(ts).map_err(|e| WireError::new(field, format!("not a valid time: {e}")))
}

fn optional_time(field: &str, ts: Option<prost_types::Timestamp>) -> Result<Option<SystemTime>> {
    ts.map(|t| time(field, Some(t))).transpose()
}

fn required<T>(field: &str, value: Option<T>) -> Result<T> {
    value.ok_or_else(|| WireError::new(field, "missing"))
}

/// Converts each element, naming the failing one by index.
fn each<W, D>(field: &str, items: Vec<W>, convert: impl Fn(W) -> Result<D>) -> Result<Vec<D>> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| convert(item).map_err(|e| e.within(&format!("{field}[{i}]"))))
        .collect()
}

/// Refuses a list longer than `max` before any element is converted.
fn at_most<T>(field: &str, items: &[T], max: usize) -> Result<()> {
    if items.len() > max {
        return Err(WireError::new(
            field,
            format!("{} entries, at most {max}", items.len()),
        ));
    }
    Ok(())
}

/// Refuses a text longer than `max` bytes.
fn text_at_most(field: &str, text: String, max: usize) -> Result<String> {
    if text.len() > max {
        return Err(WireError::new(
            field,
            format!("{} bytes, at most {max}", text.len()),
        ));
    }
    Ok(text)
}

fn non_empty(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

/// A peer's free text where a short one is expected: refused, naming the
/// field, when longer than `max` characters.
fn bounded(field: &str, s: String, max: usize) -> Result<String> {
    let chars = s.chars().count();
    if chars > max {
        return Err(WireError::new(
            field,
            format!("{chars} characters; at most {max} are accepted"),
        ));
    }
    Ok(s)
}

fn timestamp(t: SystemTime) -> Option<prost_types::Timestamp> {
    Some(t.into())
}

/// Maps a wire enum (an `i32` on the wire) to its domain twin, rejecting the
/// UNSPECIFIED zero and numbers this build does not know.
macro_rules! enum_conversions {
    ($domain:ident, $wire:ident, $to_domain:ident, $to_wire:ident,
     { $($variant:ident => $wire_variant:ident),+ $(,)? }) => {
        fn $to_domain(field: &str, raw: i32) -> Result<$domain> {
            match wire::$wire::try_from(raw) {
                $(Ok(wire::$wire::$wire_variant) => Ok($domain::$variant),)+
                Ok(wire::$wire::Unspecified) => Err(WireError::new(field, "unspecified")),
                Err(_) => Err(WireError::new(field, format!("unknown value {raw}"))),
            }
        }

        fn $to_wire(value: $domain) -> i32 {
            match value {
                $($domain::$variant => wire::$wire::$wire_variant as i32,)+
            }
        }
    };
}

enum_conversions!(NodeState, NodeState, node_state, node_state_wire, {
    Up => Up, Suspect => Suspect, Down => Down,
});
enum_conversions!(LinkState, LinkState, link_state, link_state_wire, {
    Unknown => Unknown, Up => Up, Degraded => Degraded, Flapping => Flapping, Down => Down,
});
enum_conversions!(Severity, Severity, severity, severity_wire, {
    Info => Info, Warning => Warning, Critical => Critical,
});
enum_conversions!(Blame, Blame, blame, blame_wire, {
    None => None, Link => Link, Node => Node,
});
enum_conversions!(EventKind, EventKind, event_kind, event_kind_wire, {
    LinkDown => LinkDown,
    LinkDegraded => LinkDegraded,
    LinkFlapping => LinkFlapping,
    LinkRecovered => LinkRecovered,
    LinkUp => LinkUp,
    LinkUnknown => LinkUnknown,
    NodeDown => NodeDown,
    NodeSuspect => NodeSuspect,
    NodeUp => NodeUp,
    QuorumLost => QuorumLost,
    QuorumRegained => QuorumRegained,
    AlarmRaised => AlarmRaised,
    AlarmCleared => AlarmCleared,
    ConfigReloaded => ConfigReloaded,
    ConfigRejected => ConfigRejected,
    NodeRestarted => NodeRestarted,
    NodeRebooted => NodeRebooted,
    Snapshot => Snapshot,
});
enum_conversions!(MemoryPressure, MemoryPressure, memory_pressure, memory_pressure_wire, {
    Normal => Normal, Warning => Warning, Critical => Critical,
});
enum_conversions!(Ipv4Method, Ipv4Method, ipv4_method, ipv4_method_wire, {
    Manual => Manual, Dhcp => Dhcp, Bootp => Bootp, ManualWithDhcpRouter => ManualWithDhcpRouter,
});

enum_conversions!(InterfaceState, InterfaceState, interface_state, interface_state_wire, {
    Up => Up, Down => Down, Absent => Absent, Unknown => Unknown,
});
enum_conversions!(RdmaPortState, RdmaPortState, rdma_port_state, rdma_port_state_wire, {
    None => None,
    Down => Down,
    Init => Init,
    Armed => Armed,
    Active => Active,
    ActiveDefer => ActiveDefer,
});
enum_conversions!(CheckStatus, CheckStatus, check_status, check_status_wire, {
    Pass => Pass, Warn => Warn, Fail => Fail, Skipped => Skipped,
});
enum_conversions!(RejectReason, RejectReason, reject_reason, reject_reason_wire, {
    UnknownNode => UnknownNode,
    Replayed => Replayed,
    OldIncarnation => OldIncarnation,
    Malformed => Malformed,
    NotAuthenticated => NotAuthenticated,
    OverLimit => OverLimit,
    IncarnationAhead => IncarnationAhead,
    ForeignAlarm => ForeignAlarm,
    Protocol => Protocol,
});

enum_conversions!(JobBackend, JobBackend, job_backend, job_backend_wire, {
    Jaccl => Jaccl, Ring => Ring,
});
enum_conversions!(ProcessState, ProcessState, process_state, process_state_wire, {
    Unknown => Unknown, Running => Running, Sleeping => Sleeping, Stopped => Stopped,
});
enum_conversions!(RankCondition, RankCondition, rank_condition, rank_condition_wire, {
    Live => Live, Stopped => Stopped, Gone => Gone, Restarted => Restarted, Unheard => Unheard,
});

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn duration_from_wire(field: &str, d: Option<prost_types::Duration>) -> Result<Duration> {
    let d = required(field, d)?;
    Duration::try_from(d).map_err(|e| WireError::new(field, format!("not a valid duration: {e}")))
}

fn optional_speed(bps: u64) -> Option<u64> {
    (bps != 0).then_some(bps)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limits;
    use meshd_domain::facts::{
        BootIdentity, BridgeFact, Cable, CableEnd, CheckResult, FirewallFact, FirewallRule, Gid,
        MemoryFacts, NetworkSetupFact, NodeFacts, OsKind, PanicFacts, PanicReport, PeerFact,
        PortFact, PowerSettings, RdmaPortFact, RdmaReader,
    };
    use meshd_domain::fixtures::{id, wall};
    use meshd_domain::jobs::{JobRank, JobView, RankView};
    use meshd_domain::{
        Alarm, ClockOffset, ClockSample, Counter, Event, EventDetail, Incarnation, LinkEnd,
        LinkFigures, LinkMeasurement, LinkObservation, LinkVerdict, LossWindow, MeshStatus,
        NodeIdentity, NodeLoad, NodeVerdict, PeerReply, Quorum, RdmaEndpoint, RdmaProbe, Refusal,
        ReportUpdate, RttHistogram, RttSummary, StreamOpen,
    };

    fn sample_status() -> MeshStatus {
        let identity = NodeIdentity {
            id: id("a"),
            incarnation: Incarnation(1_700_000_000_000_000_000),
            version: "0.1.0".into(),
            hostname: "a.local".into(),
        };
        MeshStatus {
            node: identity.clone(),
            evaluated_at: wall(100),
            quorum: Quorum {
                configured: vec![id("a"), id("b"), id("c")],
                members: vec![id("a"), id("b")],
                has_quorum: true,
                leader: Some(id("a")),
            },
            nodes: vec![
                NodeVerdict {
                    id: id("a"),
                    state: NodeState::Up,
                    since: wall(10),
                    evidence: vec![],
                    identity: Some(identity),
                    last_report_at: Some(wall(99)),
                    cpu_saturated: false,
                    boot: BootIdentity {
                        id: Some("40962879-B7EE-4F13-AF6E-E7266EF5E732".into()),
                        booted_at_unix: Some(1_790_421_415),
                    },
                    fix: None,
                },
                NodeVerdict {
                    id: id("c"),
                    state: NodeState::Down,
                    since: wall(50),
                    evidence: vec!["no report for 3s".into()],
                    identity: None,
                    last_report_at: None,
                    cpu_saturated: false,
                    boot: BootIdentity::default(),
                    fix: Some("bring c back".into()),
                },
            ],
            links: vec![LinkVerdict {
                a: LinkEnd {
                    node: id("a"),
                    iface: Some("en2".into()),
                    address: Some("169.254.0.1".parse().expect("ip")),
                    rdma_device: Some("rdma_en2".into()),
                    rdma_port: Some(1),
                },
                b: LinkEnd::node_only(id("c")),
                state: LinkState::Down,
                since: wall(50),
                evidence: vec!["c is down".into()],
                blame: Blame::Node,
                blamed_node: Some(id("c")),
                recent_changes: 1,
                flapping: false,
                fix: Some("bring c back".into()),
            }],
            alarms: vec![Alarm {
                kind: meshd_domain::AlarmKind::BridgeLoop,
                severity: Severity::Critical,
                node: id("b"),
                subject: "bridge0".into(),
                summary: "Thunderbolt Bridge is active over mesh ports".into(),
                evidence: vec!["members: en1, en2".into()],
                fix: Some("networksetup -setnetworkserviceenabled 'Thunderbolt Bridge' off".into()),
                since: wall(60),
                updated: wall(90),
            }],
            cables: vec![Cable {
                a: CableEnd {
                    node: id("a"),
                    port: "Thunderbolt 2".into(),
                    iface: "en2".into(),
                    rdma_device: "rdma_en2".into(),
                    address: Some("169.254.0.1".parse().expect("ip")),
                },
                b: CableEnd {
                    node: id("c"),
                    port: String::new(),
                    iface: String::new(),
                    rdma_device: String::new(),
                    address: None,
                },
                speed_bps: 80_000_000_000,
                discovered: true,
            }],
            checks: vec![CheckResult {
                name: "full_mesh_cabled".into(),
                node: None,
                status: CheckStatus::Fail,
                evidence: vec!["no cable between b and c".into()],
                fix: "connect a Thunderbolt 5 cable between b and c".into(),
            }],
            measurements: vec![LinkMeasurement {
                figures: LinkFigures {
                    interface_state: InterfaceState::Up,
                    negotiated_speed_bps: Some(80_000_000_000),
                    expected_speed_bps: None,
                    rdma_port_state: RdmaPortState::Active,
                    rtt: RttSummary {
                        p50: Duration::from_micros(80),
                        p99: Duration::from_micros(140),
                        samples: 500,
                        ..RttSummary::default()
                    },
                    loss: vec![LossWindow {
                        window: Duration::from_secs(1),
                        sent: 100,
                        lost: 100,
                    }],
                    silence: Duration::from_millis(2_500),
                },
                node: id("a"),
                peer: id("c"),
                at: wall(99),
            }],
            jobs: vec![JobView {
                job: "10.0.0.1:5000".into(),
                backend: JobBackend::Jaccl,
                world: Some(2),
                ranks: vec![
                    RankView {
                        rank: 0,
                        node: id("a"),
                        pid: 4242,
                        name: "python3.12".into(),
                        condition: RankCondition::Live,
                        busy: true,
                    },
                    RankView {
                        rank: 1,
                        node: id("b"),
                        pid: 77,
                        name: "python3.12".into(),
                        condition: RankCondition::Stopped,
                        busy: false,
                    },
                ],
                hung: Some("job 10.0.0.1:5000 hangs: rank 1 (pid 77) on b is stopped".into()),
                since: wall(90),
            }],
        }
    }

    fn sample_rank() -> JobRank {
        JobRank {
            job: "10.0.0.1:5000".into(),
            backend: JobBackend::Jaccl,
            rank: 1,
            world: Some(2),
            pid: 77,
            started: 123_456,
            name: "python3.12".into(),
            state: ProcessState::Stopped,
            busy: false,
            devices: vec![Some("rdma_en5".into()), None],
        }
    }

    fn sample_facts() -> NodeFacts {
        NodeFacts {
            os: OsKind::Macos,
            os_version: "26.2".into(),
            os_build: "25C56".into(),
            model: "Mac16,9".into(),
            rdma_enabled: Some(true),
            rdma_devices_read: true,
            ports_complete: true,
            ports: vec![
                PortFact {
                    name: "Thunderbolt 2".into(),
                    receptacle: 2,
                    domain_uuid: "28CA4C30-A263-4C55-B302-953416D0B209".into(),
                    iface: "en2".into(),
                    rdma_device: "rdma_en2".into(),
                    rdma_node_guid: "8096a9d9edbaac05".into(),
                    linked: Some(true),
                    negotiated_speed_bps: 80_000_000_000,
                    max_speed_bps: 0,
                    peer: Some(PeerFact {
                        domain_uuid: "817DCFA4-B481-4100-80FC-91C7AA969F0B".into(),
                        model: "Mac17,7".into(),
                        name: "MacBook Pro".into(),
                        rdma_service: Some(true),
                    }),
                    other_device: None,
                    usable_for_rdma: true,
                    ipv4: Some(vec!["169.254.0.1/30".parse().expect("cidr")]),
                    iface_up: Some(true),
                    ipv4_method: Some(Ipv4Method::Manual),
                    service: "EXO Thunderbolt 2".into(),
                    rdma: Some(RdmaPortFact {
                        port: 1,
                        state: RdmaPortState::Active,
                        active_speed_bps: 80_000_000_000,
                        gids: vec![Gid {
                            index: 1,
                            address: "::ffff:169.254.0.1".parse().expect("gid"),
                        }],
                        link_layer: "Thunderbolt".into(),
                        active_mtu: Some(4096),
                        max_mtu: Some(4096),
                        reader: Some(RdmaReader::Verbs),
                    }),
                },
                PortFact {
                    name: "Thunderbolt 4".into(),
                    receptacle: 4,
                    linked: Some(true),
                    other_device: Some("Envoy Ultra".into()),
                    ipv4: Some(vec![]),
                    ..PortFact::default()
                },
                PortFact {
                    name: "Thunderbolt 5".into(),
                    receptacle: 5,
                    peer: Some(PeerFact {
                        model: "Mac16,9".into(),
                        rdma_service: None,
                        ..PeerFact::default()
                    }),
                    ..PortFact::default()
                },
            ],
            checks: vec![CheckResult {
                name: "rdma_enabled".into(),
                node: Some(id("a")),
                status: CheckStatus::Pass,
                evidence: vec!["rdma_ctl status: enabled".into()],
                fix: String::new(),
            }],
            bridges: Some(vec![BridgeFact {
                name: "bridge0".into(),
                up: Some(false),
                member_link: Some(true),
                members: vec!["en1".into(), "en2".into()],
                service: Some("Thunderbolt Bridge".into()),
                service_enabled: Some(false),
            }]),
            blind_spots: vec!["ibv_devinfo: timed out after 5s".into()],
            source: "live".into(),
            boot: BootIdentity {
                id: Some("40962879-B7EE-4F13-AF6E-E7266EF5E732".into()),
                booted_at_unix: Some(1_790_421_415),
            },
            memory: Some(MemoryFacts {
                total_bytes: Some(51_539_607_552),
                wired_bytes: Some(4_449_812_480),
                swap_total_bytes: Some(13_958_643_712),
                swap_used_bytes: Some(12_190_348_574),
                pressure: Some(MemoryPressure::Warning),
                gpu_wired_limit_bytes: Some(0),
                ..MemoryFacts::default()
            }),
            power: Some(PowerSettings {
                sleep_minutes: Some(1),
                disk_sleep_minutes: Some(10),
                auto_restart: None,
                sleep_disabled: Some(false),
                sleep_prevented_by: vec!["sharingd".into(), "coreaudiod".into()],
            }),
            panics: Some(PanicFacts {
                latest: Some(PanicReport {
                    file: "panic-full-2026-03-11-114515.0002.panic".into(),
                    at_unix: Some(1_773_225_915),
                    first_line: "panic(cpu 6 caller 0xfffffe0048cc402c): watchdog timeout".into(),
                    boot_id: Some("7EDF3EA8-1F47-4E07-A28D-C02488B3E469".into()),
                }),
            }),
            firewall: Some(FirewallFact {
                enabled: Some(true),
                block_all: Some(false),
                meshd_rules: Some(vec![FirewallRule {
                    path: "/usr/local/bin/meshd".into(),
                    allowed: Some(true),
                }]),
            }),
            network_setup: Some(NetworkSetupFact {
                location: Some("exo".into()),
                exo_daemon: Some(true),
            }),
        }
    }

    #[test]
    fn unknown_memory_boot_and_panics_stay_unknown_and_long_peer_text_is_refused() {
        let blind = NodeFacts::default();
        let wire: wire::NodeFacts = blind.clone().into();
        assert!(wire.boot.is_none() && wire.memory.is_none() && !wire.panics_read);
        assert_eq!(NodeFacts::try_from(wire), Ok(blind));

        let none_found = NodeFacts {
            panics: Some(PanicFacts { latest: None }),
            ..NodeFacts::default()
        };
        let wire: wire::NodeFacts = none_found.clone().into();
        assert_eq!(
            NodeFacts::try_from(wire),
            Ok(none_found),
            "looked, found none"
        );

        let mut long: wire::NodeFacts = sample_facts().into();
        long.latest_panic.as_mut().expect("panic").first_line = "x".repeat(513);
        assert_eq!(
            NodeFacts::try_from(long).expect_err("too long").field,
            "latest_panic.first_line"
        );
        let mut long: wire::NodeFacts = sample_facts().into();
        long.boot.as_mut().expect("boot").id = "b".repeat(65);
        assert_eq!(
            NodeFacts::try_from(long).expect_err("too long").field,
            "boot.id"
        );
        let mut many: wire::NodeFacts = sample_facts().into();
        many.power.as_mut().expect("power").sleep_prevented_by = vec!["p".into(); 33];
        assert_eq!(
            NodeFacts::try_from(many).expect_err("too many").field,
            "power.sleep_prevented_by"
        );
        let mut bad: wire::NodeFacts = sample_facts().into();
        bad.memory.as_mut().expect("memory").pressure = Some(9);
        assert_eq!(
            NodeFacts::try_from(bad)
                .expect_err("unknown level")
                .to_string(),
            "memory.pressure: unknown value 9"
        );
        let mut bad: wire::NodeFacts = sample_facts().into();
        bad.ports[0].ipv4_method = Some(0);
        assert_eq!(
            NodeFacts::try_from(bad).expect_err("unspecified").field,
            "ports[0].ipv4_method"
        );
    }

    #[test]
    fn facts_round_trip_and_bad_fields_are_named() {
        let facts = sample_facts();
        let wire: wire::NodeFacts = facts.clone().into();
        assert_eq!(NodeFacts::try_from(wire.clone()), Ok(facts));

        let mut bad = wire.clone();
        bad.ports[0].ipv4[0] = "169.254.0.1/40".into();
        assert_eq!(
            NodeFacts::try_from(bad).expect_err("bad cidr").field,
            "ports[0].ipv4[0]"
        );
        let mut bad = wire.clone();
        bad.ports[0].rdma.as_mut().expect("rdma").gids[0].address = "x".into();
        assert_eq!(
            NodeFacts::try_from(bad).expect_err("bad gid").field,
            "ports[0].rdma.gids[0].address"
        );
        let mut bad = wire.clone();
        let rule = bad.firewall.as_ref().expect("firewall").meshd_rules[0].clone();
        bad.firewall.as_mut().expect("firewall").meshd_rules = vec![rule; 65];
        assert_eq!(
            NodeFacts::try_from(bad)
                .expect_err("too many rules")
                .to_string(),
            "firewall.meshd_rules: 65 rules; at most 64 are accepted"
        );
        let mut bad = wire;
        bad.checks[0].status = 0;
        assert_eq!(
            NodeFacts::try_from(bad)
                .expect_err("bad status")
                .to_string(),
            "checks[0].status: unspecified"
        );
    }

    #[test]
    fn an_unspecified_or_newer_rdma_reader_is_unknown_not_an_error() {
        for raw in [0, 99] {
            let mut wire: wire::NodeFacts = sample_facts().into();
            wire.ports[0].rdma.as_mut().expect("rdma").reader = raw;
            let facts = NodeFacts::try_from(wire).expect("still valid");
            assert_eq!(facts.ports[0].rdma.as_ref().expect("rdma").reader, None);
        }
    }

    #[test]
    fn unknown_facts_stay_unknown_on_the_wire() {
        let blind = NodeFacts {
            os: OsKind::Macos,
            ports: vec![PortFact {
                name: "Thunderbolt 1".into(),
                ..PortFact::default()
            }],
            ..NodeFacts::default()
        };
        let wire: wire::NodeFacts = blind.clone().into();
        assert!(!wire.bridges_read && !wire.ports[0].ipv4_read);
        assert_eq!(wire.firewall, None);
        assert_eq!(wire.ports[0].linked, None);
        assert_eq!(NodeFacts::try_from(wire), Ok(blind));
    }

    #[test]
    fn facts_from_older_peers_keep_what_they_list_and_leave_the_rest_unknown() {
        // An older peer sends addresses and bridges but none of the flags.
        let mut old: wire::NodeFacts = sample_facts().into();
        old.bridges_read = false;
        old.ports_complete = false;
        for port in &mut old.ports {
            port.ipv4_read = false;
            port.peer_rdma_service = port.peer_rdma_service.filter(|offered| *offered);
        }
        let facts = NodeFacts::try_from(old).expect("valid");
        assert_eq!(facts.bridges.as_ref().map(Vec::len), Some(1));
        assert_eq!(facts.ports[0].addresses().len(), 1);
        assert_eq!(facts.ports[1].ipv4, None, "an empty list is no proof");
        assert!(!facts.ports_complete);

        let mut none: wire::NodeFacts = sample_facts().into();
        none.bridges.clear();
        none.bridges_read = false;
        assert_eq!(NodeFacts::try_from(none).expect("valid").bridges, None);
    }

    #[test]
    fn status_round_trips() {
        let status = sample_status();
        let wire: wire::MeshStatus = status.clone().into();
        assert_eq!(MeshStatus::try_from(wire), Ok(status));
    }

    #[test]
    fn event_round_trips() {
        let status = sample_status();
        let event = Event {
            at: wall(120),
            observer: id("a"),
            kind: EventKind::LinkDown,
            subject: "a/en2 <-> c".into(),
            summary: "link down".into(),
            detail: Some(EventDetail::Link(status.links[0].clone())),
        };
        let wire: wire::Event = event.clone().into();
        assert_eq!(Event::try_from(wire), Ok(event));
    }

    #[test]
    fn bad_fields_are_named_with_their_path() {
        let mut wire: wire::MeshStatus = sample_status().into();
        wire.nodes[1].state = 0;
        let err = MeshStatus::try_from(wire).expect_err("unspecified state");
        assert_eq!(err.to_string(), "nodes[1].state: unspecified");

        let mut wire: wire::MeshStatus = sample_status().into();
        wire.links[0].a.as_mut().expect("a").address = "not-an-ip".into();
        let err = MeshStatus::try_from(wire).expect_err("bad address");
        assert_eq!(err.field, "links[0].a.address");

        let mut wire: wire::MeshStatus = sample_status().into();
        wire.alarms[0].severity = 42;
        let err = MeshStatus::try_from(wire).expect_err("unknown severity");
        assert_eq!(err.to_string(), "alarms[0].severity: unknown value 42");

        let mut wire: wire::MeshStatus = sample_status().into();
        wire.quorum.as_mut().expect("quorum").members[0] = "bad id".into();
        let err = MeshStatus::try_from(wire).expect_err("bad id");
        assert_eq!(err.field, "quorum.members[0]");

        let mut wire: wire::MeshStatus = sample_status().into();
        wire.measurements[0].loss[0].lost = 101;
        let err = MeshStatus::try_from(wire).expect_err("more lost than sent");
        assert_eq!(err.field, "measurements[0].loss[0].lost");

        let mut wire: wire::MeshStatus = sample_status().into();
        wire.measurements[0].rdma_port_state = 0;
        let err = MeshStatus::try_from(wire).expect_err("unspecified port state");
        assert_eq!(
            err.to_string(),
            "measurements[0].rdma_port_state: unspecified"
        );

        let mut wire: wire::MeshStatus = sample_status().into();
        wire.node = None;
        assert_eq!(
            MeshStatus::try_from(wire).expect_err("no node").to_string(),
            "node: missing"
        );
    }

    const BOUNDS: [Duration; 2] = [Duration::from_micros(25), Duration::from_micros(50)];

    fn sample_update() -> ReportUpdate {
        let status = sample_status();
        ReportUpdate {
            sequence: 42,
            sent_at: wall(200),
            lateness: meshd_domain::Lateness {
                worst: Duration::from_millis(4),
                held_up_total: Duration::from_millis(9_000),
            },
            full: true,
            links: vec![LinkObservation {
                figures: LinkFigures {
                    interface_state: InterfaceState::Up,
                    negotiated_speed_bps: Some(80_000_000_000),
                    expected_speed_bps: Some(80_000_000_000),
                    rdma_port_state: RdmaPortState::Active,
                    rtt: RttSummary {
                        p50: Duration::from_micros(40),
                        p90: Duration::from_micros(55),
                        p99: Duration::from_micros(90),
                        max: Duration::from_micros(300),
                        host_delay_p50: Duration::from_micros(8),
                        baseline_p50: Duration::from_micros(41),
                        baseline_p99: Duration::from_micros(95),
                        samples: 600,
                    },
                    loss: vec![LossWindow {
                        window: Duration::from_secs(1),
                        sent: 10,
                        lost: 1,
                    }],
                    silence: Duration::from_millis(90),
                },
                local: status.links[0].a.clone(),
                remote: status.links[0].b.clone(),
                gid_matches_address: Some(true),
                rtt_histogram: RttHistogram {
                    bounds: BOUNDS.to_vec(),
                    counts: vec![10, 500, 90],
                    sum: Duration::from_micros(27_000),
                },
                mtu_loss: vec![LossWindow {
                    window: Duration::from_secs(10),
                    sent: 10,
                    lost: 0,
                }],
                probes_sent_total: 1000,
                probes_lost_total: 3,
                last_reply_at: Some(wall(199)),
                error_counters: vec![Counter {
                    name: "symbol_error".into(),
                    value: 2,
                    saturated: false,
                }],
                consecutive_lost: 0,
                silence_confirmed: false,
                lateness: Duration::from_millis(3),
                rdma_probe: Some(RdmaProbe {
                    last_rtt: Some(Duration::from_micros(12)),
                    consecutive_failures: 0,
                    last_ok_at: Some(wall(199)),
                    probes_sent_total: 60,
                    probes_failed_total: 2,
                }),
                rdma_endpoint: Some(RdmaEndpoint {
                    qpn: 0x11,
                    psn: 0x00AB_CDEF,
                    gid: "::ffff:10.0.0.1".parse().unwrap(),
                    connected_qpn: Some(0x12),
                }),
                carrier: Some(true),
            }],
            removed_links: vec![status.links[0].b.clone()],
            alarms: Some(status.alarms.clone()),
            hears: Some(vec![id("b"), id("c")]),
            heard_on_management: Some(vec![id("b")]),
            load: NodeLoad {
                cpu_busy_ratio: 0.25,
                cpu_saturated: false,
            },
            facts: Some(sample_facts()),
            has_quorum: Some(true),
            leader: Some(Some(id("a"))),
            clock_offsets: Some(vec![ClockOffset {
                peer: id("b"),
                offset_ns: -1_500_000_000,
                rtt: Duration::from_micros(300),
            }]),
            jobs: Some(vec![sample_rank()]),
        }
    }

    #[test]
    fn an_update_round_trips_with_the_streams_bounds() {
        let update = sample_update();
        let wire: wire::ReportUpdate = update.clone().into();
        assert!(
            wire.links[0]
                .rtt_histogram
                .as_ref()
                .is_some_and(|h| h.bounds_ns.is_empty()),
            "bounds travel once per stream"
        );
        assert_eq!(update_from_wire(wire, &BOUNDS), Ok(update));
        // A delta: only what changed is present, and absent stays absent.
        let delta = ReportUpdate {
            full: false,
            links: vec![],
            removed_links: vec![],
            alarms: None,
            hears: None,
            heard_on_management: None,
            facts: None,
            has_quorum: None,
            leader: None,
            clock_offsets: None,
            jobs: None,
            ..sample_update()
        };
        assert_eq!(update_from_wire(delta.clone().into(), &BOUNDS), Ok(delta));
    }

    /// N/N-1: a newer release's alarm kinds are left out, the rest of its
    /// report stands; a kind that is no name at all is still refused.
    #[test]
    fn an_alarm_of_a_kind_this_release_does_not_know_is_left_out_not_refused() {
        let update = sample_update();
        let mut wire: wire::ReportUpdate = update.clone().into();
        let alarms = &mut wire.alarms.as_mut().expect("alarms").alarms;
        let known = alarms.len();
        assert!(known > 0, "the sample carries an alarm");
        let mut newer = alarms[0].clone();
        newer.kind = "kind_of_a_later_release".into();
        alarms.push(newer.clone());
        let read = update_from_wire(wire.clone(), &BOUNDS).expect("the report stands");
        assert_eq!(read.alarms, update.alarms, "the newer kind is left out");
        assert_eq!(read.alarms.as_ref().map(Vec::len), Some(known));

        let alarms = &mut wire.alarms.as_mut().expect("alarms").alarms;
        alarms.last_mut().expect("pushed").kind = "Not A Kind!".into();
        let err = update_from_wire(wire, &BOUNDS).expect_err("no name");
        assert_eq!(err.field, format!("alarms.alarms[{known}].kind"));
    }

    /// A stream from a release before versions were sent opens as
    /// protocol 0, which this release understands.
    #[test]
    fn a_stream_open_carries_its_protocols_and_an_old_one_reads_as_zero() {
        let open = StreamOpen {
            sender: sample_status().node,
            instance: 1,
            rtt_bounds: BOUNDS.to_vec(),
            protocols: meshd_domain::Protocols::THIS_RELEASE,
        };
        let mut wire = wire::StreamOpen::from(open.clone());
        assert_eq!(StreamOpen::try_from(wire.clone()), Ok(open));
        wire.protocol = 0;
        wire.oldest_protocol = 0;
        let old = StreamOpen::try_from(wire).expect("an old release's open");
        assert_eq!(
            old.protocols,
            meshd_domain::Protocols {
                spoken: 0,
                oldest: 0
            }
        );
        assert_eq!(
            meshd_domain::Protocols::THIS_RELEASE.mismatch(old.protocols),
            None
        );
    }

    #[test]
    fn a_bad_rdma_endpoint_is_refused_by_field() {
        let bad = |change: fn(&mut wire::RdmaEndpoint)| {
            let mut wire: wire::ReportUpdate = sample_update().into();
            change(wire.links[0].rdma_endpoint.as_mut().expect("endpoint"));
            update_from_wire(wire, &BOUNDS).expect_err("refused")
        };
        let err = bad(|e| e.gid = vec![0; 4]);
        assert_eq!(
            err.to_string(),
            "links[0].rdma_endpoint.gid: 4 bytes, a GID has 16"
        );
        let err = bad(|e| e.qpn = 1 << 24);
        assert_eq!(err.field, "links[0].rdma_endpoint.qpn");
        let err = bad(|e| e.qpn = 1);
        assert_eq!(
            err.to_string(),
            "links[0].rdma_endpoint.qpn: 1 is a reserved queue pair"
        );
        let err = bad(|e| e.connected_qpn = u32::MAX);
        assert_eq!(err.field, "links[0].rdma_endpoint.connected_qpn");
        let err = bad(|e| e.psn = 1 << 24);
        assert_eq!(err.field, "links[0].rdma_endpoint.psn");
    }

    #[test]
    fn a_reply_round_trips_refused_or_not() {
        let receiver = sample_status().node;
        let accepted = PeerReply {
            receiver: receiver.clone(),
            sequence: 7,
            refusal: None,
            clock: Some(ClockSample {
                echoed: wall(1),
                received: wall(2),
                replied: wall(3),
            }),
            resync: true,
        };
        assert_eq!(
            PeerReply::try_from(wire::PeerReply::from(accepted.clone())),
            Ok(accepted)
        );
        let refused = PeerReply {
            receiver,
            sequence: 0,
            refusal: Some(Refusal {
                reason: RejectReason::OldIncarnation,
                detail: "a restarted node takes a larger incarnation".into(),
                known_incarnation: Some(Incarnation(99)),
            }),
            clock: None,
            resync: false,
        };
        assert_eq!(
            PeerReply::try_from(wire::PeerReply::from(refused.clone())),
            Ok(refused)
        );
    }

    #[test]
    fn inconsistent_observations_are_rejected_by_field() {
        let mut wire: wire::ReportUpdate = sample_update().into();
        wire.links[0].loss[0].lost = 11;
        let err = update_from_wire(wire, &BOUNDS).expect_err("more lost than sent");
        assert_eq!(err.field, "links[0].loss[0].lost");

        let mut wire: wire::ReportUpdate = sample_update().into();
        wire.links[0]
            .rtt_histogram
            .as_mut()
            .expect("histogram")
            .counts
            .pop();
        let err = update_from_wire(wire, &BOUNDS).expect_err("short counts");
        assert_eq!(err.field, "links[0].rtt_histogram.counts");

        let mut wire: wire::ReportUpdate = sample_update().into();
        wire.load.as_mut().expect("load").cpu_busy_ratio = f64::NAN;
        let err = update_from_wire(wire, &BOUNDS).expect_err("NaN load");
        assert_eq!(err.field, "load.cpu_busy_ratio");

        let open = StreamOpen {
            sender: NodeIdentity {
                incarnation: Incarnation(0),
                ..sample_status().node
            },
            instance: 1,
            rtt_bounds: BOUNDS.to_vec(),
            protocols: meshd_domain::Protocols::THIS_RELEASE,
        };
        let err = StreamOpen::try_from(wire::StreamOpen::from(open)).expect_err("no incarnation");
        assert_eq!(err.field, "sender.incarnation");
    }

    #[test]
    fn default_message_is_rejected_not_misread() {
        assert!(MeshStatus::try_from(wire::MeshStatus::default()).is_err());
        assert!(Event::try_from(wire::Event::default()).is_err());
        assert!(Alarm::try_from(wire::Alarm::default()).is_err());
        assert!(update_from_wire(wire::ReportUpdate::default(), &BOUNDS).is_err());
        assert!(StreamOpen::try_from(wire::StreamOpen::default()).is_err());
        assert!(LinkObservation::try_from(wire::LinkObservation::default()).is_err());
    }

    fn wire_time(seconds: i64, nanos: i32) -> Option<prost_types::Timestamp> {
        Some(prost_types::Timestamp { seconds, nanos })
    }

    #[test]
    fn times_outside_1970_to_9999_are_refused_with_their_field() {
        let good: wire::ReportUpdate = sample_update().into();
        for (since, why) in [
            (wire_time(-1, 0), "before 1970"),
            (wire_time(253_402_300_800, 0), "after 9999"),
            (wire_time(i64::MAX, 999_999_999), "after 9999"),
            (wire_time(i64::MIN, 0), "before 1970"),
            (wire_time(0, -1), "nanos"),
            (wire_time(0, 1_000_000_000), "nanos"),
        ] {
            let mut update = good.clone();
            update.alarms.as_mut().expect("alarms").alarms[0].since = since;
            let err = update_from_wire(update, &BOUNDS).expect_err(why);
            assert_eq!(err.field, "alarms.alarms[0].since", "{why}");
            assert!(err.problem.contains(why), "{why}: {err}");
        }
        let mut update = good.clone();
        update.sent_at = wire_time(253_402_300_799, 999_999_999);
        assert!(
            update_from_wire(update, &BOUNDS).is_ok(),
            "the last second of 9999 is fine"
        );
    }

    #[test]
    fn lists_and_texts_over_their_caps_are_refused_by_field() {
        let good: wire::ReportUpdate = sample_update().into();
        let check = |change: &dyn Fn(&mut wire::ReportUpdate), field: &str| {
            let mut update = good.clone();
            change(&mut update);
            let err = update_from_wire(update, &BOUNDS).expect_err(field);
            assert_eq!(err.field, field, "{err}");
            assert!(err.problem.contains("at most"), "{err}");
        };
        fn alarms(u: &mut wire::ReportUpdate) -> &mut Vec<wire::Alarm> {
            &mut u.alarms.as_mut().expect("alarms").alarms
        }
        check(
            &|u| u.links = vec![u.links[0].clone(); limits::MAX_LINKS_PER_REPORT + 1],
            "links",
        );
        check(
            &|u| {
                let list = alarms(u);
                *list = vec![list[0].clone(); limits::MAX_ALARMS_PER_REPORT + 1];
            },
            "alarms.alarms",
        );
        check(
            &|u| {
                u.hears = Some(wire::NodeList {
                    ids: vec!["b".to_owned(); limits::MAX_HEARS_PER_REPORT + 1],
                });
            },
            "hears.ids",
        );
        check(
            &|u| alarms(u)[0].evidence = vec![String::new(); limits::MAX_EVIDENCE_LINES + 1],
            "alarms.alarms[0].evidence",
        );
        check(
            &|u| alarms(u)[0].summary = "x".repeat(limits::MAX_SUMMARY_BYTES + 1),
            "alarms.alarms[0].summary",
        );
        check(
            &|u| alarms(u)[0].fix = "x".repeat(limits::MAX_FIX_BYTES + 1),
            "alarms.alarms[0].fix",
        );
    }

    /// A peer's job ranks are bounded and checked like the rest of its
    /// report: no more ranks than a world may have, rank numbers inside
    /// their world, short printable texts, known enums.
    #[test]
    fn hostile_job_ranks_are_refused_by_field() {
        let good: wire::ReportUpdate = sample_update().into();
        let refused = |change: &dyn Fn(&mut wire::JobRank)| {
            let mut update = good.clone();
            change(&mut update.jobs.as_mut().expect("jobs").ranks[0]);
            update_from_wire(update, &BOUNDS)
                .expect_err("refused")
                .to_string()
        };
        assert_eq!(
            refused(&|r| r.rank = 2),
            "jobs.ranks[0].rank: 2 is outside a world of 2"
        );
        assert_eq!(
            refused(&|r| r.world = 65),
            "jobs.ranks[0].world: 65; at most 64"
        );
        assert_eq!(
            refused(&|r| {
                r.world = 0;
                r.rank = 64;
            }),
            "jobs.ranks[0].rank: 64 is outside a world of 64"
        );
        assert_eq!(refused(&|r| r.job.clear()), "jobs.ranks[0].job: empty");
        assert_eq!(
            refused(&|r| r.name = "a\nb".into()),
            "jobs.ranks[0].name: holds a control character"
        );
        assert!(
            refused(&|r| r.job = "j".repeat(129)).starts_with("jobs.ranks[0].job: 129 characters")
        );
        assert_eq!(
            refused(&|r| r.state = 9),
            "jobs.ranks[0].state: unknown value 9"
        );
        assert_eq!(
            refused(&|r| r.backend = 0),
            "jobs.ranks[0].backend: unspecified"
        );
        assert!(
            refused(&|r| r.devices = vec![wire::JobDevice { name: None }; 65])
                .starts_with("jobs.ranks[0].devices: 65 entries")
        );
        let mut update = good.clone();
        let ranks = &mut update.jobs.as_mut().expect("jobs").ranks;
        *ranks = vec![ranks[0].clone(); 65];
        assert_eq!(
            update_from_wire(update, &BOUNDS)
                .expect_err("too many")
                .to_string(),
            "jobs.ranks: 65 entries, at most 64"
        );
        let mut none = good.clone();
        none.jobs = None;
        assert_eq!(update_from_wire(none, &BOUNDS).expect("ok").jobs, None);
    }

    #[test]
    fn a_sender_trims_its_update_to_the_caps_so_no_peer_refuses_it() {
        let mut update = sample_update();
        let mut alarm = update.alarms.as_ref().expect("alarms")[0].clone();
        alarm.summary = "s".repeat(10_000);
        alarm.fix = Some("f".repeat(10_000));
        alarm.evidence = vec!["e".repeat(10_000); 500];
        alarm.severity = Severity::Info;
        let mut critical = alarm.clone();
        critical.severity = Severity::Critical;
        let mut alarms = vec![alarm; 100];
        alarms.push(critical);
        update.alarms = Some(alarms);
        update.links = vec![update.links[0].clone(); 300];
        let wire: wire::ReportUpdate = update.into();
        let sent = &wire.alarms.as_ref().expect("alarms").alarms;
        assert_eq!(sent.len(), limits::MAX_ALARMS_PER_REPORT);
        assert_eq!(wire.links.len(), limits::MAX_LINKS_PER_REPORT);
        assert_eq!(
            sent[0].severity,
            wire::Severity::Critical as i32,
            "the most severe alarm is kept"
        );
        let back = update_from_wire(wire, &BOUNDS).expect("within the caps");
        let alarms = back.alarms.expect("alarms");
        assert!(alarms[0].summary.ends_with('…'));
        assert_eq!(alarms[0].evidence.len(), limits::MAX_EVIDENCE_LINES);
    }

    proptest::proptest! {
        /// Any timestamp converts without a panic; it is accepted exactly
        /// when it lies within 1970..=9999 with normalised nanos, and then
        /// round-trips.
        #[test]
        fn any_timestamp_converts_without_panic_and_only_in_range_is_taken(
            seconds in proptest::prop_oneof![
                proptest::num::i64::ANY,
                -10i64..10,
                meshd_domain::time::LATEST_SECONDS - 10..meshd_domain::time::LATEST_SECONDS + 10,
            ],
            nanos in proptest::prop_oneof![proptest::num::i32::ANY, 0i32..1_000_000_000],
        ) {
            let ts = prost_types::Timestamp { seconds, nanos };
            let valid = (0..=meshd_domain::time::LATEST_SECONDS).contains(&seconds)
                && (0..1_000_000_000).contains(&nanos);
            match time("t", Some(ts)) {
                Ok(t) => {
                    proptest::prop_assert!(valid);
                    proptest::prop_assert!(meshd_domain::time::in_range(t));
                    proptest::prop_assert_eq!(timestamp(t), Some(ts));
                    proptest::prop_assert!(meshd_domain::time::rfc3339_millis(t).is_some());
                }
                Err(err) => {
                    proptest::prop_assert!(!valid);
                    proptest::prop_assert_eq!(err.field, "t");
                }
            }
        }
    }

    #[test]
    fn an_alarm_kind_this_build_does_not_know_is_refused_by_name() {
        let mut alarm = wire::Alarm::from(Alarm {
            kind: meshd_domain::AlarmKind::CpuSpike,
            severity: Severity::Warning,
            node: id("a"),
            subject: "cpu".into(),
            summary: "busy".into(),
            evidence: vec![],
            fix: None,
            since: SystemTime::UNIX_EPOCH,
            updated: SystemTime::UNIX_EPOCH,
        });
        assert_eq!(
            Alarm::try_from(alarm.clone()).map(|a| a.kind),
            Ok(meshd_domain::AlarmKind::CpuSpike)
        );
        alarm.kind = "made_up".into();
        let err = Alarm::try_from(alarm).expect_err("unknown kind");
        assert_eq!(err.field, "kind");
        assert!(err.problem.contains("made_up"), "{err}");
    }
}
