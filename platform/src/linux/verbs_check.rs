//! The RDMA ports as the verbs library reads them, checked against
//! sysfs (ARCHITECTURE.md, "RDMA readers"): where the library works, each
//! port's RDMA facts are the library's, the same code that reads a Mac's
//! devices, and every difference from sysfs is named; sysfs still pairs
//! ports with interfaces and stays the fallback where the library fails.

use std::collections::BTreeSet;

use meshd_domain::facts::{PortFact, RdmaPortFact, RdmaReader};

use crate::ibv::{RdmaDevice, RdmaPort};

/// The sysfs `ports` with the verbs library's facts where it lists the
/// port; what the two disagree on, and what only one of them lists, is
/// returned as blind spots.
pub fn prefer_verbs(ports: &mut [PortFact], devices: &[RdmaDevice]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut matched = BTreeSet::new();
    for port in ports.iter_mut() {
        let Some(sysfs) = port.rdma.as_ref() else {
            continue;
        };
        let number = sysfs.port;
        let device = devices.iter().find(|d| d.name == port.rdma_device);
        let listed = device.and_then(|d| d.ports.iter().find(|p| p.port == number).map(|p| (d, p)));
        let Some((device, verbs)) = listed else {
            problems.push(format!(
                "{}: in {} but not listed by the verbs library; read from sysfs",
                port.name,
                super::infiniband::SYS_CLASS_INFINIBAND
            ));
            continue;
        };
        matched.insert((port.rdma_device.clone(), number));
        problems.extend(disagreements(verbs, sysfs).into_iter().map(|what| {
            format!(
                "{}: the verbs library and sysfs disagree: {what}",
                port.name
            )
        }));
        port.rdma = Some(verbs.fact(RdmaReader::Verbs));
        // Only the library has the node GUID.
        port.rdma_node_guid.clone_from(&device.node_guid);
    }
    for device in devices {
        for verbs in &device.ports {
            if !matched.contains(&(device.name.clone(), verbs.port)) {
                problems.push(format!(
                    "{}/{}: listed by the verbs library but not in {}",
                    device.name,
                    verbs.port,
                    super::infiniband::SYS_CLASS_INFINIBAND
                ));
            }
        }
    }
    problems
}

/// What the two readers say differently of one port: state, speed, GIDs.
/// A fact one of them does not know is no disagreement.
fn disagreements(verbs: &RdmaPort, sysfs: &RdmaPortFact) -> Vec<String> {
    let mut found = Vec::new();
    if verbs.state != sysfs.state {
        found.push(format!(
            "state {} (verbs), {} (sysfs)",
            verbs.state, sysfs.state
        ));
    }
    if let Some(speed) = verbs.active_speed_bps()
        && sysfs.active_speed_bps != 0
        && speed != sysfs.active_speed_bps
    {
        found.push(format!(
            "active speed {speed} b/s (verbs), {} b/s (sysfs)",
            sysfs.active_speed_bps
        ));
    }
    let from_verbs: BTreeSet<(u32, std::net::Ipv6Addr)> = verbs.gids.iter().copied().collect();
    let from_sysfs: BTreeSet<(u32, std::net::Ipv6Addr)> =
        sysfs.gids.iter().map(|g| (g.index, g.address)).collect();
    if from_verbs != from_sysfs {
        let list = |gids: &BTreeSet<(u32, std::net::Ipv6Addr)>| {
            gids.iter()
                .map(|(index, address)| format!("[{index}] {address}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        found.push(format!(
            "GIDs {} (verbs), {} (sysfs)",
            list(&from_verbs),
            list(&from_sysfs)
        ));
    }
    found
}

#[cfg(test)]
mod tests {
    use meshd_domain::RdmaPortState;
    use meshd_domain::facts::Gid;

    use super::*;

    fn gid(text: &str) -> std::net::Ipv6Addr {
        text.parse().expect("gid")
    }

    /// rxe0 on eth0 as sysfs reads it in the test VM.
    fn sysfs_port(state: RdmaPortState) -> PortFact {
        PortFact {
            name: "rxe0/1".into(),
            iface: "eth0".into(),
            rdma_device: "rxe0".into(),
            rdma: Some(RdmaPortFact {
                port: 1,
                state,
                active_speed_bps: 2_500_000_000,
                gids: vec![
                    Gid {
                        index: 0,
                        address: gid("fe80::5054:ff:fe6d:1"),
                    },
                    Gid {
                        index: 1,
                        address: gid("::ffff:10.0.0.1"),
                    },
                ],
                link_layer: String::new(),
                active_mtu: None,
                max_mtu: None,
                reader: Some(RdmaReader::Sysfs),
            }),
            ..PortFact::default()
        }
    }

    fn verbs_device(state: RdmaPortState) -> RdmaDevice {
        RdmaDevice {
            name: "rxe0".into(),
            node_guid: "505400fffe6d0001".into(),
            transport: "InfiniBand (0)".into(),
            ports: vec![RdmaPort {
                port: 1,
                state,
                active_width_lanes: Some(1),
                active_lane_speed_bps: Some(2_500_000_000),
                link_layer: "Ethernet".into(),
                active_mtu: Some(1024),
                max_mtu: Some(4096),
                gids: vec![
                    (0, gid("fe80::5054:ff:fe6d:1")),
                    (1, gid("::ffff:10.0.0.1")),
                ],
            }],
        }
    }

    #[test]
    fn agreeing_readers_give_the_verbs_facts_and_no_blind_spot() {
        let mut ports = vec![sysfs_port(RdmaPortState::Active)];
        let problems = prefer_verbs(&mut ports, &[verbs_device(RdmaPortState::Active)]);
        assert_eq!(problems, Vec::<String>::new());
        let rdma = ports[0].rdma.as_ref().expect("rdma");
        assert_eq!(rdma.reader, Some(RdmaReader::Verbs));
        assert_eq!(rdma.link_layer, "Ethernet", "only verbs knows it");
        assert_eq!(rdma.active_mtu, Some(1024));
        assert_eq!(rdma.gid(1), Some(gid("::ffff:10.0.0.1")));
        assert_eq!(ports[0].iface, "eth0", "sysfs still pairs the interface");
        assert_eq!(ports[0].rdma_node_guid, "505400fffe6d0001");
    }

    #[test]
    fn a_disagreement_is_named_and_the_verbs_facts_are_kept() {
        let mut ports = vec![sysfs_port(RdmaPortState::Down)];
        let mut device = verbs_device(RdmaPortState::Active);
        device.ports[0].gids.pop();
        let problems = prefer_verbs(&mut ports, &[device]);
        assert_eq!(
            problems,
            [
                "rxe0/1: the verbs library and sysfs disagree: state active (verbs), down (sysfs)",
                "rxe0/1: the verbs library and sysfs disagree: GIDs [0] fe80::5054:ff:fe6d:1 (verbs), \
                 [0] fe80::5054:ff:fe6d:1, [1] ::ffff:10.0.0.1 (sysfs)",
            ]
        );
        assert_eq!(
            ports[0].rdma.as_ref().map(|r| r.reader),
            Some(Some(RdmaReader::Verbs))
        );
    }

    #[test]
    fn ports_only_one_reader_lists_are_named_and_sysfs_stays() {
        let mut ports = vec![sysfs_port(RdmaPortState::Active)];
        let mut other = verbs_device(RdmaPortState::Active);
        other.name = "rxe1".into();
        let problems = prefer_verbs(&mut ports, &[other]);
        assert_eq!(
            problems,
            [
                "rxe0/1: in /sys/class/infiniband but not listed by the verbs library; read from sysfs",
                "rxe1/1: listed by the verbs library but not in /sys/class/infiniband",
            ]
        );
        assert_eq!(
            ports[0].rdma.as_ref().map(|r| r.reader),
            Some(Some(RdmaReader::Sysfs))
        );
    }
}
