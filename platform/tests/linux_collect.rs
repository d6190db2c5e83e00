//! `linux::collect` and the counter reader on sysfs trees replayed from
//! temporary bundle directories, each modelled on a real layout.

use std::path::Path;

use meshd_domain::facts::{
    BootIdentity, BridgeFact, Gid, Ipv4Cidr, MemoryFacts, NodeFacts, PanicFacts, PanicReport,
    PortFact, RdmaPortFact, RdmaReader,
};
use meshd_domain::{Counter, RdmaPortState};
use meshd_platform::counters::{CounterChange, CounterGroup, CounterSample, CounterTracker};
use meshd_platform::linux::{self, counters::read_port_counters, net::read_bridges};
use meshd_platform::source::ReplaySource;

/// A bundle directory being filled with host files.
struct Bundle(tempfile::TempDir);

impl Bundle {
    fn new() -> Self {
        Self(tempfile::tempdir().expect("tempdir"))
    }

    fn path(&self, host_path: &str) -> std::path::PathBuf {
        self.0.path().join(host_path.trim_start_matches('/'))
    }

    fn file(&self, host_path: &str, text: &str) -> &Self {
        let path = self.path(host_path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
        self
    }

    fn dir(&self, host_path: &str) -> &Self {
        std::fs::create_dir_all(self.path(host_path)).expect("mkdir");
        self
    }

    /// Something that lists but does not read: a directory where a file
    /// should be, as an unreadable sysfs attribute (EINVAL) would behave.
    fn unreadable(&self, host_path: &str) -> &Self {
        self.dir(host_path)
    }

    fn ip_addr(&self, json: &str) -> &Self {
        std::fs::write(self.0.path().join("ip_j_4_addr_show.json"), json).expect("write");
        self
    }

    fn collect(&self) -> NodeFacts {
        linux::collect(&ReplaySource::open(self.0.path()).expect("open"))
    }

    /// Memory, pressure, boot and an empty pstore, from real captures
    /// (tests/fixtures/linux/SOURCES.md), so only what a test leaves out
    /// is a blind spot.
    fn host(&self) -> &Self {
        self.file(
            "/proc/meminfo",
            &fixture("proc_meminfo_Ubuntu_4GB_with-swap.txt"),
        )
        .file(
            "/proc/pressure/memory",
            &fixture("proc_pressure_memory_small-stalls.txt"),
        )
        .file("/proc/stat", &fixture("proc_stat_2.4-kernel_2-cpus.txt"))
        .file("/proc/sys/kernel/random/boot_id", BOOT_ID)
        .dir("/sys/fs/pstore")
    }

    fn replay(&self) -> ReplaySource {
        ReplaySource::open(self.0.path()).expect("open")
    }
}

const LINUX_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/linux");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(LINUX_FIXTURES).join(name)).expect("fixture")
}

/// A boot id as the kernel prints it (`proc_do_uuid`: lower-case UUID).
const BOOT_ID: &str = "033acd7c-b7ab-43a2-b973-1ccc461ffdd2\n";

fn gid(index: u32, address: &str) -> Gid {
    Gid {
        index,
        address: address.parse().expect("v6"),
    }
}

fn cidr(text: &str) -> Ipv4Cidr {
    text.parse().expect("cidr")
}

fn assert_blind_spot(facts: &NodeFacts, start: &str) {
    assert!(
        facts.blind_spots.iter().any(|s| s.starts_with(start)),
        "no blind spot starting {start:?} in {:#?}",
        facts.blind_spots
    );
}

const ZERO_GID: &str = "0000:0000:0000:0000:0000:0000:0000:0000\n";

/// A dual-port ConnectX-5 in RoCE mode as mlx5 lays it out: one ib device
/// per PCI function (mlx5_0, mlx5_1), each with port 1, a 256-entry GID
/// table whose used entries are the link-local and IPv4-mapped GIDs twice
/// (RoCE v1 and v2), `gid_attrs/ndevs/<i>` naming the netdev, `device/net/`
/// holding it, PortCounters with the extended set, and `hw_counters` with
/// `lifespan`.
fn mlx5_roce_host() -> Bundle {
    let bundle = Bundle::new();
    bundle.host();
    bundle
        .file("/proc/sys/kernel/osrelease", "6.1.0-18-amd64\n")
        .file("/sys/class/dmi/id/product_name", "PowerEdge R750\n");
    for (device, netdev, up, v4) in [
        (
            "mlx5_0",
            "enp59s0f0np0",
            true,
            Some("0000:0000:0000:0000:0000:ffff:c0a8:0a01"),
        ),
        ("mlx5_1", "enp59s0f1np1", false, None),
    ] {
        let port = format!("/sys/class/infiniband/{device}/ports/1");
        bundle
            .file(
                &format!("/sys/class/infiniband/{device}/node_type"),
                "1: CA\n",
            )
            .file(&format!("{port}/link_layer"), "Ethernet\n")
            .dir(&format!(
                "/sys/class/infiniband/{device}/device/net/{netdev}"
            ))
            .file(
                &format!("/sys/class/net/{netdev}/operstate"),
                if up { "up\n" } else { "down\n" },
            )
            .file(
                &format!("/sys/class/net/{netdev}/carrier"),
                if up { "1\n" } else { "0\n" },
            );
        if up {
            bundle
                .file(&format!("{port}/state"), "4: ACTIVE\n")
                .file(&format!("{port}/phys_state"), "5: LinkUp\n")
                .file(&format!("{port}/rate"), "100 Gb/sec (4X EDR)\n");
        } else {
            bundle
                .file(&format!("{port}/state"), "1: DOWN\n")
                .file(&format!("{port}/phys_state"), "3: Disabled\n")
                .file(&format!("{port}/rate"), "40 Gb/sec (4X QDR)\n");
        }
        let mut used = vec!["fe80:0000:0000:0000:0e42:a1ff:fe65:4d2e"; 2];
        used.extend(v4.into_iter().flat_map(|g| [g, g]));
        for index in 0..256 {
            let text = used
                .get(index)
                .map_or(ZERO_GID.to_owned(), |g| format!("{g}\n"));
            bundle.file(&format!("{port}/gids/{index}"), &text);
            if index < used.len() {
                bundle.file(
                    &format!("{port}/gid_attrs/ndevs/{index}"),
                    &format!("{netdev}\n"),
                );
            } else {
                bundle.unreadable(&format!("{port}/gid_attrs/ndevs/{index}"));
            }
        }
    }
    let counters = "/sys/class/infiniband/mlx5_0/ports/1/counters";
    let hw = "/sys/class/infiniband/mlx5_0/ports/1/hw_counters";
    bundle
        .file(&format!("{counters}/symbol_error"), "3\n")
        .file(&format!("{counters}/link_downed"), "1\n")
        .file(&format!("{counters}/port_rcv_data"), "5000000000\n")
        .file(&format!("{counters}/unicast_rcv_packets"), "912\n")
        .file(&format!("{hw}/out_of_buffer"), "0\n")
        .file(&format!("{hw}/lifespan"), "10\n")
        .file("/sys/class/net/enp59s0f0np0/statistics/rx_errors", "2\n")
        .file("/sys/class/net/enp59s0f0np0/statistics/rx_packets", "77\n");
    bundle.ip_addr(
        r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},{"ifindex":4,"ifname":"enp59s0f0np0","addr_info":[{"family":"inet","local":"192.168.10.1","prefixlen":30,"scope":"global","label":"enp59s0f0np0"}]}]"#,
    );
    bundle
}

#[test]
fn mlx5_roce_ports_with_their_interfaces_gids_speeds_and_addresses() {
    let facts = mlx5_roce_host().collect();
    assert_eq!(facts.blind_spots, Vec::<String>::new());
    assert_eq!(facts.os_version, "6.1.0-18-amd64");
    assert_eq!(facts.model, "PowerEdge R750");
    assert_eq!(facts.rdma_enabled, Some(true));
    assert_eq!(
        facts.ports,
        vec![
            PortFact {
                name: "mlx5_0/1".into(),
                iface: "enp59s0f0np0".into(),
                rdma_device: "mlx5_0".into(),
                negotiated_speed_bps: 100_000_000_000,
                usable_for_rdma: true,
                ipv4: Some(vec![cidr("192.168.10.1/30")]),
                iface_up: Some(true),
                rdma: Some(RdmaPortFact {
                    port: 1,
                    state: RdmaPortState::Active,
                    active_speed_bps: 100_000_000_000,
                    gids: vec![
                        gid(0, "fe80::e42:a1ff:fe65:4d2e"),
                        gid(1, "fe80::e42:a1ff:fe65:4d2e"),
                        gid(2, "::ffff:192.168.10.1"),
                        gid(3, "::ffff:192.168.10.1"),
                    ],
                    link_layer: String::new(),
                    active_mtu: None,
                    max_mtu: None,
                    reader: Some(RdmaReader::Sysfs),
                }),
                ..PortFact::default()
            },
            PortFact {
                name: "mlx5_1/1".into(),
                iface: "enp59s0f1np1".into(),
                rdma_device: "mlx5_1".into(),
                // Not linked: the driver's rate is no negotiated speed.
                negotiated_speed_bps: 0,
                usable_for_rdma: true,
                ipv4: Some(vec![]),
                iface_up: Some(false),
                rdma: Some(RdmaPortFact {
                    port: 1,
                    state: RdmaPortState::Down,
                    active_speed_bps: 40_000_000_000,
                    gids: vec![
                        gid(0, "fe80::e42:a1ff:fe65:4d2e"),
                        gid(1, "fe80::e42:a1ff:fe65:4d2e"),
                    ],
                    link_layer: String::new(),
                    active_mtu: None,
                    max_mtu: None,
                    reader: Some(RdmaReader::Sysfs),
                }),
                ..PortFact::default()
            },
        ]
    );
    assert_eq!(facts.bridges, Some(vec![]));
    assert!(facts.rdma_devices_read && facts.ports_complete);
}

#[test]
fn port_counters_are_read_and_tracked() {
    let bundle = mlx5_roce_host();
    let source = bundle.replay();
    let reading = read_port_counters(&source, "mlx5_0", 1, Some("enp59s0f0np0"));
    assert_eq!(reading.problems, Vec::<String>::new());
    let sample = |group, name: &str, value| CounterSample {
        group,
        name: name.into(),
        value,
    };
    assert_eq!(
        reading.samples,
        vec![
            sample(CounterGroup::PortCounters, "link_downed", 1),
            sample(CounterGroup::PortCounters, "port_rcv_data", 5_000_000_000),
            sample(CounterGroup::PortCounters, "symbol_error", 3),
            sample(CounterGroup::PortCounters, "unicast_rcv_packets", 912),
            sample(CounterGroup::HwCounters, "out_of_buffer", 0),
            sample(CounterGroup::NetStatistics, "rx_errors", 2),
            sample(CounterGroup::NetStatistics, "rx_packets", 77),
        ]
    );

    let mut tracker = CounterTracker::new();
    tracker.observe(&reading.samples);
    bundle
        .file(
            "/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed",
            "255\n",
        )
        .file(
            "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error",
            "9\n",
        );
    let next = read_port_counters(&source, "mlx5_0", 1, Some("enp59s0f0np0"));
    let changes = tracker.observe(&next.samples);
    assert_eq!(
        changes["link_downed"],
        CounterChange::Saturated { at_least: 254 }
    );
    assert_eq!(changes["symbol_error"], CounterChange::Increased(6));
    assert_eq!(changes["hw_out_of_buffer"], CounterChange::Increased(0));
    let totals = tracker.totals();
    assert!(totals.contains(&Counter {
        name: "link_downed".into(),
        value: 254,
        saturated: true
    }));
    assert!(totals.contains(&Counter {
        name: "symbol_error".into(),
        value: 6,
        saturated: false
    }));
}

#[test]
fn unreadable_counters_are_named_and_missing_groups_are_not_problems() {
    let bundle = Bundle::new();
    bundle
        .file(
            "/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts",
            "10\n",
        )
        .file(
            "/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts",
            "ten\n",
        )
        .unreadable("/sys/class/infiniband/rxe0/ports/1/hw_counters/link_downed");
    let reading = read_port_counters(&bundle.replay(), "rxe0", 1, Some("veth0"));
    assert_eq!(
        reading.samples,
        vec![CounterSample {
            group: CounterGroup::HwCounters,
            name: "sent_pkts".into(),
            value: 10
        }]
    );
    assert_eq!(reading.problems.len(), 2, "{:?}", reading.problems);
    assert!(
        reading.problems[0]
            .starts_with("cannot read /sys/class/infiniband/rxe0/ports/1/hw_counters/link_downed"),
        "{:?}",
        reading.problems
    );
    assert_eq!(
        reading.problems[1],
        "/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts: not a counter value: \"ten\""
    );
}

/// An InfiniBand HCA (mlx5, link layer InfiniBand) with IPoIB: GID entries
/// have no netdev (reading `gid_attrs/ndevs/<i>` fails with EINVAL), the
/// IPoIB interface ib0 is under `device/net/`.
#[test]
fn infiniband_ports_pair_with_their_ipoib_interface() {
    let bundle = Bundle::new();
    bundle.host();
    let port = "/sys/class/infiniband/mlx5_2/ports/1";
    bundle
        .file("/proc/sys/kernel/osrelease", "5.14.0-362.el9.x86_64\n")
        .file("/sys/firmware/devicetree/base/model", "Ampere Altra Developer Platform\0")
        .file(&format!("{port}/state"), "4: ACTIVE\n")
        .file(&format!("{port}/phys_state"), "5: LinkUp\n")
        .file(&format!("{port}/rate"), "200 Gb/sec (4X HDR)\n")
        .file(&format!("{port}/link_layer"), "InfiniBand\n")
        .file(&format!("{port}/gids/0"), "fe80:0000:0000:0000:b859:9f03:00d4:f2a6\n")
        .file(&format!("{port}/gids/1"), ZERO_GID)
        .unreadable(&format!("{port}/gid_attrs/ndevs/0"))
        .dir("/sys/class/infiniband/mlx5_2/device/net/ib0")
        .file("/sys/class/net/ib0/operstate", "up\n")
        .ip_addr(r#"[{"ifindex":5,"ifname":"ib0","addr_info":[{"family":"inet","local":"10.20.0.7","prefixlen":24}]}]"#);
    let facts = bundle.collect();
    assert_eq!(facts.blind_spots, Vec::<String>::new());
    assert_eq!(facts.model, "Ampere Altra Developer Platform");
    assert_eq!(facts.ports.len(), 1);
    let port = &facts.ports[0];
    assert_eq!(port.name, "mlx5_2/1");
    assert_eq!(port.iface, "ib0");
    assert_eq!(port.iface_up, Some(true));
    assert_eq!(port.ipv4, Some(vec![cidr("10.20.0.7/24")]));
    assert_eq!(port.negotiated_speed_bps, 200_000_000_000);
    assert_eq!(
        port.rdma.as_ref().map(|r| r.gids.clone()),
        Some(vec![gid(0, "fe80::b859:9f03:d4:f2a6")])
    );
}

/// mlx4 has one PCI function for both ports: `device/net/` holds two
/// interfaces, told apart by `dev_port` (0-based). A software device names
/// its interface in `parent` only.
#[test]
fn shared_pci_functions_and_software_devices_find_their_interface() {
    let bundle = Bundle::new();
    for port in [1, 2] {
        let dir = format!("/sys/class/infiniband/mlx4_0/ports/{port}");
        bundle
            .file(&format!("{dir}/state"), "4: ACTIVE\n")
            .file(&format!("{dir}/phys_state"), "5: LinkUp\n")
            .file(&format!("{dir}/rate"), "40 Gb/sec (4X QDR)\n")
            .dir(&format!("{dir}/gids"));
    }
    bundle
        .dir("/sys/class/infiniband/mlx4_0/device/net/eth2")
        .dir("/sys/class/infiniband/mlx4_0/device/net/eth3")
        .file("/sys/class/net/eth2/dev_port", "0\n")
        .file("/sys/class/net/eth3/dev_port", "1\n")
        .file("/sys/class/infiniband/siw0/ports/1/state", "4: ACTIVE\n")
        .file(
            "/sys/class/infiniband/siw0/ports/1/phys_state",
            "5: LinkUp\n",
        )
        .file(
            "/sys/class/infiniband/siw0/ports/1/rate",
            "2.5 Gb/sec (1X SDR)\n",
        )
        .dir("/sys/class/infiniband/siw0/ports/1/gids")
        .file("/sys/class/infiniband/siw0/parent", "veth0\n");
    let facts = bundle.collect();
    let pairs: Vec<(&str, &str, u64)> = facts
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.iface.as_str(), p.negotiated_speed_bps))
        .collect();
    assert_eq!(
        pairs,
        [
            ("mlx4_0/1", "eth2", 40_000_000_000),
            ("mlx4_0/2", "eth3", 40_000_000_000),
            ("siw0/1", "veth0", 2_500_000_000),
        ]
    );
}

#[test]
fn what_cannot_be_read_is_a_blind_spot_and_never_a_guess() {
    let bundle = Bundle::new();
    let port = "/sys/class/infiniband/mlx5_0/ports/1";
    bundle
        .file(&format!("{port}/state"), "7: SIDEWAYS\n")
        .unreadable(&format!("{port}/phys_state"))
        .file(
            &format!("{port}/gids/0"),
            "fe80:0000:0000:0000:0e42:a1ff:fe65:4d2e\n",
        )
        .unreadable(&format!("{port}/gids/1"))
        .file("/sys/class/infiniband/mlx4_0/ports", "not a directory\n");
    std::fs::write(
        bundle.0.path().join("ip_j_4_addr_show.json.error"),
        "cannot run ip -j -4 addr show: No such file or directory (os error 2)\n",
    )
    .expect("write");
    let facts = bundle.collect();
    assert_eq!(facts.os_version, "");
    assert_eq!(facts.model, "");
    assert_eq!(facts.rdma_enabled, Some(true));
    assert_eq!(facts.ports.len(), 1);
    let port_fact = &facts.ports[0];
    assert_eq!(port_fact.iface, "");
    assert_eq!(port_fact.iface_up, None);
    assert_eq!(port_fact.negotiated_speed_bps, 0);
    assert_eq!(
        port_fact.rdma,
        Some(RdmaPortFact {
            port: 1,
            state: RdmaPortState::None,
            active_speed_bps: 0,
            gids: vec![gid(0, "fe80::e42:a1ff:fe65:4d2e")],
            link_layer: String::new(),
            active_mtu: None,
            max_mtu: None,
            reader: Some(RdmaReader::Sysfs),
        })
    );
    let spots = facts.blind_spots.join("\n");
    for expected in [
        "kernel release unknown: cannot read /proc/sys/kernel/osrelease",
        "hardware model unknown: /sys/class/dmi/id/product_name: ",
        "IPv4 addresses of the RDMA interfaces unknown: cannot run ip -j -4 addr show",
        "mlx4_0: cannot list /sys/class/infiniband/mlx4_0/ports",
        "mlx5_0/1: unrecognised /sys/class/infiniband/mlx5_0/ports/1/state: \"7: SIDEWAYS\"",
        "mlx5_0/1: cannot read /sys/class/infiniband/mlx5_0/ports/1/phys_state",
        "mlx5_0/1: cannot read /sys/class/infiniband/mlx5_0/ports/1/rate",
        "mlx5_0/1: unreadable GID entries in /sys/class/infiniband/mlx5_0/ports/1/gids: 1 (",
        "mlx5_0/1: no paired network interface",
        "bridges unknown: cannot list /sys/class/net",
        "boot id unknown: cannot read /proc/sys/kernel/random/boot_id",
        "boot time unknown: cannot read /proc/stat",
        "memory unknown: cannot read /proc/meminfo",
        "kernel panics unknown: cannot list /sys/fs/pstore",
    ] {
        assert!(spots.contains(expected), "missing {expected:?} in\n{spots}");
    }
    assert_eq!(facts.blind_spots.len(), 14, "{spots}");
    assert!(!facts.boot.is_known());
    assert_eq!((facts.memory, facts.panics), (None, None));
}

#[test]
fn rdma_presence_from_the_infiniband_class() {
    let none = Bundle::new();
    none.dir("/sys/class/net");
    let facts = none.collect();
    assert_eq!(facts.rdma_enabled, Some(false));
    assert_blind_spot(
        &facts,
        "no /sys/class/infiniband: this kernel has no RDMA core",
    );

    let empty = Bundle::new();
    empty.dir("/sys/class/infiniband").dir("/sys/class/net");
    let facts = empty.collect();
    assert_eq!(facts.rdma_enabled, Some(false));
    assert!(
        !facts.blind_spots.iter().any(|s| s.contains("infiniband")),
        "{:?}",
        facts.blind_spots
    );

    let unlistable = Bundle::new();
    unlistable.file("/sys/class/infiniband", "");
    let facts = unlistable.collect();
    assert_eq!(facts.rdma_enabled, None);
    assert_blind_spot(&facts, "cannot list /sys/class/infiniband (");
}

/// Bridges as the Linux bridge driver lays them out: `bridge/` marks one,
/// `brif/<member>` lists its ports; docker0 has no members and is down.
#[test]
fn bridges_with_members_state_and_storm_counters() {
    let bundle = Bundle::new();
    bundle
        .dir("/sys/class/infiniband")
        .dir("/sys/class/net/br0/bridge")
        .dir("/sys/class/net/br0/brif/eth1")
        .dir("/sys/class/net/br0/brif/eth2")
        .file("/sys/class/net/br0/operstate", "up\n")
        .file("/sys/class/net/br0/flags", "0x1003\n")
        .file("/sys/class/net/br0/statistics/rx_packets", "1234\n")
        .file("/sys/class/net/eth1/statistics/multicast", "77\n")
        .file("/sys/class/net/eth1/statistics/rx_packets", "999999\n")
        .file("/sys/class/net/eth2/statistics/multicast", "garbage\n")
        .dir("/sys/class/net/docker0/bridge")
        .dir("/sys/class/net/docker0/brif")
        .file("/sys/class/net/docker0/operstate", "down\n")
        .file("/sys/class/net/docker0/flags", "0x1003\n")
        .dir("/sys/class/net/weird/bridge")
        .file("/sys/class/net/weird/brif", "")
        .file("/sys/class/net/eth3/operstate", "up\n");
    let bridges = read_bridges(&bundle.replay()).expect("lists");
    let names: Vec<&str> = bridges
        .bridges
        .iter()
        .map(|b| b.bridge.name.as_str())
        .collect();
    assert_eq!(names, ["br0", "docker0", "weird"]);
    let br0 = &bridges.bridges[0];
    assert_eq!(br0.packets, Some(1234));
    assert_eq!(br0.member_packets.get("eth1"), Some(&77));
    assert_eq!(br0.member_packets.get("eth2"), None, "unparsable counter");
    assert_eq!(bridges.bridges[1].packets, None);
    assert_eq!(bridges.problems.len(), 2, "{:?}", bridges.problems);
    assert!(
        bridges.problems[0].starts_with("weird: cannot list members in /sys/class/net/weird/brif")
    );
    assert!(bridges.problems[1].starts_with("weird: cannot read /sys/class/net/weird/operstate"));

    let facts = bundle.collect();
    assert_eq!(
        facts.bridges,
        Some(vec![
            BridgeFact {
                name: "br0".into(),
                up: Some(true),
                member_link: Some(true),
                members: vec!["eth1".into(), "eth2".into()],
                service: None,
                service_enabled: None,
            },
            // Up, but no member forwards: no carrier.
            BridgeFact {
                name: "docker0".into(),
                up: Some(true),
                member_link: Some(false),
                members: vec![],
                service: None,
                service_enabled: None,
            },
            // Neither flags nor operstate: unknown, not "down".
            BridgeFact {
                name: "weird".into(),
                up: None,
                member_link: None,
                members: vec![],
                service: None,
                service_enabled: None,
            },
        ])
    );
    let forwarding: Vec<Option<bool>> = facts
        .bridges
        .iter()
        .flatten()
        .map(BridgeFact::forwarding)
        .collect();
    assert_eq!(forwarding, [Some(true), Some(false), None]);
    assert!(
        facts
            .blind_spots
            .iter()
            .any(|s| s.starts_with("weird: cannot list members"))
    );
}

#[test]
fn this_machine_is_read_honestly() {
    let facts = meshd_platform::collect(
        &meshd_platform::source::LiveSource,
        meshd_domain::facts::OsKind::Linux,
    );
    assert_eq!(facts.source, "live");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("procfs");
    assert_eq!(facts.os_version, release.trim());
    let has_rdma_class = Path::new("/sys/class/infiniband").is_dir();
    if has_rdma_class {
        assert!(facts.rdma_enabled.is_some(), "{facts:?}");
    } else {
        assert_eq!(facts.rdma_enabled, Some(false));
        assert!(facts.ports.is_empty());
        assert_blind_spot(
            &facts,
            "no /sys/class/infiniband: this kernel has no RDMA core",
        );
    }
    let bridges = std::fs::read_dir("/sys/class/net")
        .expect("sysfs")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("bridge").is_dir())
        .count();
    assert_eq!(
        facts.bridges.as_ref().map(Vec::len),
        Some(bridges),
        "{:?}",
        facts.bridges
    );
    println!("facts of this machine: {facts:#?}");
}

#[test]
fn interface_mtus_are_read_from_sysfs_and_unreadable_ones_are_unknown() {
    let bundle = Bundle::new();
    bundle
        .file("/sys/class/net/lo/mtu", "65536\n")
        .file("/sys/class/net/veth-a/mtu", "9000\n")
        .file("/sys/class/net/odd0/mtu", "lots\n")
        .unreadable("/sys/class/net/gone0/mtu");
    let mtus = meshd_platform::interface_mtus(&bundle.replay(), meshd_domain::facts::OsKind::Linux);
    assert_eq!(
        mtus.into_iter().collect::<Vec<_>>(),
        [("lo".to_owned(), 65536), ("veth-a".to_owned(), 9000)]
    );
}

#[test]
fn memory_boot_and_panics_from_real_captures() {
    let bundle = Bundle::new();
    bundle.host().dir("/sys/class/net");
    let facts = bundle.collect();
    assert_eq!(
        facts.boot,
        BootIdentity {
            id: Some("033acd7c-b7ab-43a2-b973-1ccc461ffdd2".into()),
            booted_at_unix: Some(1_062_315_585),
        }
    );
    assert_eq!(
        facts.memory,
        Some(MemoryFacts {
            total_bytes: Some(4_060_612 * 1024),
            wired_bytes: Some(0),
            locked_bytes: Some(0),
            swap_total_bytes: Some(3_317_380 * 1024),
            swap_used_bytes: Some(0),
            stall_some_bp: Some(5),
            stall_full_bp: Some(5),
            ..MemoryFacts::default()
        })
    );
    assert_eq!(
        facts.panics,
        Some(PanicFacts { latest: None }),
        "pstore empty: no panic"
    );

    // A kernel without PSI: the stalls alone are unknown.
    std::fs::remove_file(bundle.path("/proc/pressure/memory")).expect("rm");
    let facts = bundle.collect();
    let memory = facts.memory.clone().expect("meminfo still read");
    assert_eq!((memory.stall_some_bp, memory.stall_full_bp), (None, None));
    assert_blind_spot(
        &facts,
        "memory pressure stalls unknown: cannot read /proc/pressure/memory",
    );

    let hugepages = linux::memory::memory_from_meminfo(&linux::memory::parse_meminfo(&fixture(
        "proc_meminfo_SGI-UV_1G-hugepages_LKML.txt",
    )));
    assert_eq!(hugepages.total_bytes, Some(32_395_508 * 1024));
    assert_eq!(hugepages.swap_used_bytes, Some(0), "no swap at all");
}

#[test]
fn a_panic_kept_by_pstore_is_named_by_its_message() {
    let bundle = Bundle::new();
    bundle.host().dir("/sys/class/net");
    // The parts of one panic, as efi_pstore writes them: Part1 holds the
    // newest lines, and here the panic message is in Part3.
    for part in 1..=3 {
        bundle.file(
            &format!("/sys/fs/pstore/dmesg-efi-17000000000{part}001"),
            &fixture(&format!(
                "pstore_dmesg-efi_ath11k-resume-panic_Panic1-Part{part}.txt"
            )),
        );
    }
    let facts = bundle.collect();
    assert_eq!(
        facts.panics,
        Some(PanicFacts {
            latest: Some(PanicReport {
                file: "dmesg-efi-170000000003001".into(),
                at_unix: None,
                first_line: "Kernel panic - not syncing: ath11k_pci 0000:01:00.0: unrecoverable \
                             failure"
                    .into(),
                boot_id: None,
            }),
        })
    );
    // Without the part that has the message, Part1 names the dump.
    std::fs::remove_file(bundle.path("/sys/fs/pstore/dmesg-efi-170000000003001")).expect("rm");
    let facts = bundle.collect();
    let latest = facts.panics.expect("read").latest.expect("a record");
    assert_eq!(
        (latest.file.as_str(), latest.first_line.as_str()),
        ("dmesg-efi-170000000001001", "Panic#1 Part1")
    );
}

#[test]
fn data_counters_sum_what_moves_and_a_saturated_one_proves_nothing() {
    use meshd_platform::linux::counters::read_data_counters;
    let bundle = Bundle::new();
    let port = "/sys/class/infiniband/mlx5_0/ports/1";
    bundle
        .file(&format!("{port}/counters/port_xmit_data"), "1000\n")
        .file(&format!("{port}/counters/port_rcv_data"), "24\n")
        .file(&format!("{port}/counters/symbol_error"), "3\n");
    let replay = bundle.replay();
    assert_eq!(read_data_counters(&replay, "mlx5_0", 1), Some(1024));
    // rxe: no PortCounters, the driver's packet counts instead.
    let rxe = "/sys/class/infiniband/rxe0/ports/1/hw_counters";
    bundle
        .file(&format!("{rxe}/sent_pkts"), "7\n")
        .file(&format!("{rxe}/rcvd_pkts"), "8\n");
    assert_eq!(read_data_counters(&replay, "rxe0", 1), Some(15));
    // A 32-bit data counter stopped at its maximum: still, but not idle.
    bundle.file(&format!("{port}/counters/port_xmit_data"), "4294967295\n");
    assert_eq!(read_data_counters(&replay, "mlx5_0", 1), None);
    bundle.file(&format!("{port}/counters/port_xmit_data"), "lots\n");
    assert_eq!(read_data_counters(&replay, "mlx5_0", 1), None, "unreadable");
    assert_eq!(
        read_data_counters(&replay, "mlx5_9", 1),
        None,
        "no such device"
    );
}
