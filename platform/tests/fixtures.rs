//! Every macOS command output in tests/fixtures/macos-captures and in this
//! crate's tests/fixtures/macos is parsed by its parser, and the facts it
//! holds (each directory's SOURCES.md) are asserted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use meshd_domain::RdmaPortState;
use meshd_domain::facts::{
    BootIdentity, FirewallRule, Ipv4Method, MemoryFacts, MemoryPressure, PowerSettings,
};
use meshd_platform::ibv::{RdmaDevice, parse_ibv_devices, parse_ibv_devinfo};
use meshd_platform::macos::ifconfig::{Interface, parse_ifconfig};
use meshd_platform::macos::memory::{MemoryOutputs, boot_identity, memory_facts};
use meshd_platform::macos::netstat::parse_netstat_interfaces;
use meshd_platform::macos::networksetup::{
    parse_all_services, parse_hardware_ports, parse_service_info, parse_service_order,
    service_for_device,
};
use meshd_platform::macos::panic_report::parse_panic_report;
use meshd_platform::macos::pmset::parse_pmset;
use meshd_platform::macos::rdma_ctl::{RdmaCtlStatus, parse_rdma_ctl_status};
use meshd_platform::macos::route::{parse_route_get, parse_route_get_fields};
use meshd_platform::macos::routing_table::{Gateway, RoutingTable, parse_routing_table};
use meshd_platform::macos::socketfilterfw::{
    GlobalState, ListAppsError, firewall_fact, parse_global_state, parse_listapps,
};
use meshd_platform::macos::sw_vers::parse_sw_vers;
use meshd_platform::macos::sysctl::parse_sysctl_values;
use meshd_platform::macos::system_profiler::{
    ThunderboltBus, ThunderboltPort, ThunderboltSpeed, parse_thunderbolt, parse_thunderbolt_json,
    parse_thunderbolt_text,
};
use meshd_platform::macos::vm_stat::parse_vm_stat;
use meshd_platform::route::{Lookup, NextHop};

/// The captures in macos-captures/, and the ones this crate adds (netstat, the
/// MLX docs' M3 Ultra device list).
const FIXTURE_DIRS: [&str; 2] = [
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/macos-captures"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/macos"),
];

/// Files in the fixture directory that are not the output of a command
/// the platform layer runs.
const NOT_PLATFORM_OUTPUTS: &[&str] = &[
    "SOURCES.md",
    "hostfile_jaccl_4node.json",
    "hostfile_ring_4node.json",
    "jaccl_error_lines_seen_in_reports.txt",
    "mlx_distributed_config_auto_no_mesh_no_ring_stderr.txt",
    "mlx_distributed_config_incomplete_mesh_stderr.txt",
    "mlx_distributed_config_rdma_not_enabled_stderr.txt",
    "mlx_ibv_devices_matrix_2node_from_exo_log.json",
];

type Check = fn(&str);

const CASES: &[(&str, Check)] = &[
    (
        "system_profiler_SPThunderboltDataType_MacStudio-M3Ultra_one-TB5-peer_plus-USB4-drive.json",
        studio_m3_ultra,
    ),
    (
        "system_profiler_SPThunderboltDataType_MacBookPro-M5Max_macOS27_peer-plus-TB5-dock_RDMA-disabled_sanitized.json",
        m5_max_rdma_disabled,
    ),
    (
        "system_profiler_SPThunderboltDataType_MacBookPro-M5Max_macOS27_peer-plus-TB3-dock_RDMA-enabled_sanitized.json",
        m5_max_rdma_enabled,
    ),
    (
        "system_profiler_SPThunderboltDataType_MacMini-TB5_text-format_peer-MacStudio-M4Max_excerpt.txt",
        mac_mini_text_format,
    ),
    (
        "system_profiler_SPThunderboltDataType_MacBookPro_TB4-40G-port-idle_excerpt.json",
        tb4_idle_port,
    ),
    (
        "system_profiler_SPThunderboltDataType_peer-behind-TB-hub_excerpt.json",
        peer_behind_hub,
    ),
    (
        "networksetup_listallhardwareports_MacBookPro-M5Max_macOS27_sanitized.txt",
        hardware_ports_m5_max,
    ),
    (
        "networksetup_listallnetworkservices_bridge_enabled.txt",
        all_services_bridge_enabled,
    ),
    (
        "networksetup_listallnetworkservices_bridge_disabled.txt",
        all_services_bridge_disabled,
    ),
    ("networksetup_listnetworkserviceorder.txt", service_order),
    (
        "ifconfig_a_IntelMac_bridge0-inactive_plus-bridge100-vmnet.txt",
        ifconfig_a_intel_mac,
    ),
    (
        "ifconfig_bridge0_active_TN3205_excerpt.txt",
        bridge0_active_tn3205,
    ),
    (
        "ifconfig_bridge0_inactive_4members_IntelMac.txt",
        bridge0_inactive_intel_mac,
    ),
    (
        "ifconfig_en1_TB-port_bridge-member_no-ip_AppleSilicon.txt",
        en1_bridge_member_no_ip,
    ),
    (
        "ifconfig_en2_with_ip_169.254_TN3205.txt",
        en2_link_local_tn3205,
    ),
    (
        "ibv_devices_MacMini-M4Pro_3ports_TN3205.txt",
        ibv_devices_mac_mini,
    ),
    (
        "ibv_devices_MacBookPro-M5Max_macOS27_sanitized.txt",
        ibv_devices_m5_max,
    ),
    ("ibv_devices_rdma_disabled.txt", ibv_devices_header_only),
    (
        "ibv_devinfo_MacBookPro-M5Max_macOS27_all-PORT_DOWN_sanitized.txt",
        devinfo_all_down,
    ),
    (
        "ibv_devinfo_MacMini-M4Pro_all-PORT_ACTIVE_TN3205_excerpt.txt",
        devinfo_all_active,
    ),
    (
        "ibv_devinfo_v_grep_state-width-speed_TB4-Mac_macOS27.2.txt",
        devinfo_grep_tb4,
    ),
    (
        "ibv_devinfo_v_rdma_en2_GID-table_TN3205_excerpt.txt",
        devinfo_gid_table,
    ),
    ("rdma_ctl_status_enabled.txt", rdma_ctl_enabled),
    ("sw_vers_macOS26.5.txt", sw_vers_26_5),
    (
        "ibv_devices_MacStudio-M3Ultra_6ports_MLX-docs.txt",
        ibv_devices_m3_ultra,
    ),
    (
        "netstat_ib_AppleSilicon_bridge0-en2-en4.txt",
        netstat_apple_silicon,
    ),
    ("netstat_bi_IntelMac_en0-en1-fw0.txt", netstat_intel_mac),
    ("socketfilterfw_getglobalstate_enabled.txt", firewall_on),
    ("socketfilterfw_getglobalstate_disabled.txt", firewall_off),
    (
        "socketfilterfw_getglobalstate_state-2.txt",
        firewall_block_all,
    ),
    (
        "socketfilterfw_getglobalstate_Sequoia_state-2.txt",
        firewall_block_all,
    ),
    (
        "socketfilterfw_listapps_nix-darwin-VM_9-apps.txt",
        listapps_nine_rules,
    ),
    (
        "socketfilterfw_listapps_ALF-layout_trimmed-to-1-of-7.txt",
        listapps_cut_short,
    ),
    (
        "vm_stat_MacMini-AppleSilicon_32GB_16K-pages.txt",
        vm_stat_apple_silicon,
    ),
    ("vm_stat_IntelMac_4K-pages_wazuh-22113.txt", vm_stat_intel),
    (
        "sysctl_pressure-warning_swap_48GiB-Mac-under-load.txt",
        sysctl_under_load,
    ),
    (
        "sysctl_hw.model-hw.memsize_MacMini-M2Pro-32GB.txt",
        sysctl_memsize,
    ),
    ("sysctl_iogpu_raised-wired-limit.txt", sysctl_gpu_limit),
    (
        "sysctl_kern.boottime-bootsessionuuid_after-a-panic.txt",
        sysctl_boot,
    ),
    ("pmset_g_macOS26.3_M-series_AC.txt", pmset_m_series),
    (
        "pmset_g_SleepDisabled_sleep-prevented.txt",
        pmset_sleep_disabled,
    ),
    (
        "pmset_g_autorestart0_sleep1_iMac20,1-SMBIOS.txt",
        pmset_sleep_on,
    ),
    (
        "pmset_g_autorestart0_OpenCore-guide.txt",
        pmset_no_autorestart,
    ),
    (
        "networksetup_getinfo_Manual_router-null.txt",
        getinfo_manual,
    ),
    ("networksetup_getinfo_Manual_Wi-Fi.txt", getinfo_manual),
    (
        "networksetup_getinfo_DHCP_self-assigned-169.254.txt",
        getinfo_dhcp,
    ),
    (
        "panic-full_iPhoneOS14.6_cut-by-the-author.ips",
        panic_full_cut_off,
    ),
    (
        "panicString_IOGPUMemory_macOS26.4_MacMini-M4_omlx-862.txt",
        panic_string_iogpu,
    ),
    (
        "netstat_nr_Tailscale-utun8_bridge100_tailscale-10318_excerpt.txt",
        table_tailscale,
    ),
    (
        "netstat_nr_WireGuard-utun3-default_sshuttle-864_excerpt.txt",
        table_wireguard_default,
    ),
    (
        "netstat_rn_clash-TUN-utun2-split-routes_bridge1_clash-745_excerpt.txt",
        table_clash_split_routes,
    ),
    (
        "netstat_nr_f_inet_interface-as-gateway_utun0_wireguard-tools-8.txt",
        table_interface_gateway,
    ),
    (
        "netstat_rn_VPN-default-utun3_scoped-en0_jackpal-gateway.txt",
        table_vpn_default,
    ),
    (
        "netstat_nr_f_inet_Refs-Use_before-OpenVPN_en0.txt",
        table_before_openvpn,
    ),
    (
        "netstat_nr_f_inet_Refs-Use_after-OpenVPN-def1_utun3.txt",
        table_after_openvpn,
    ),
    (
        "netstat_rn_Refs-Use_169.254-on-en0-and-scoped-en7_peer-host-route.txt",
        table_link_local_on_two_interfaces,
    ),
    (
        "route_n_get_default_gateway-en0_with-metrics.txt",
        route_get_default_en0,
    ),
    (
        "route_n_get_default_VPN-utun4-owns-default_trimmed.txt",
        route_get_vpn_default,
    ),
    (
        "route_n_get_1.1.1.1_cloned-host-route-via-en0_trimmed.txt",
        route_get_cloned_host_route,
    ),
    (
        "route_n_get_0.0.0.0_interface-route-no-gateway_utun5.txt",
        route_get_interface_route,
    ),
    (
        "route_n_get_not-in-table_stderr.txt",
        route_get_not_in_table,
    ),
    (
        "route_get_169.254.0.0_link-local-net-route_en0_cloudflare-docs.txt",
        route_get_link_local_net,
    ),
    (
        "route_get_google.com_names-not-numbers_utun3_cloudflare-docs.txt",
        route_get_names_refused,
    ),
    (
        "route_n_get_169.254.170.2_stale-link-local-host-entry_en0_macOS25.6.txt",
        route_get_stale_link_local_entry,
    ),
    (
        "route_n_get_127.0.0.1_lo0-LOCAL_macOS25.6_trimmed.txt",
        route_get_loopback,
    ),
    (
        "route_n_get_169.254.99.99_covering-net-route_en0_macOS25.6_trimmed.txt",
        route_get_covering_net,
    ),
];

#[test]
fn every_command_output_fixture_has_its_facts_asserted() {
    let mut unchecked = Vec::new();
    let entries = FIXTURE_DIRS
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).expect("fixture directory"));
    for entry in entries {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if NOT_PLATFORM_OUTPUTS.contains(&name.as_str()) {
            continue;
        }
        match CASES.iter().find(|(file, _)| *file == name) {
            Some((_, check)) => check(&read(&name)),
            None => unchecked.push(name),
        }
    }
    assert!(
        unchecked.is_empty(),
        "fixtures without asserted facts: {unchecked:?}"
    );
    for (file, _) in CASES {
        assert!(
            FIXTURE_DIRS
                .iter()
                .any(|dir| std::path::Path::new(dir).join(file).is_file()),
            "{file} is listed but missing"
        );
    }
}

fn read(name: &str) -> String {
    FIXTURE_DIRS
        .iter()
        .find_map(|dir| std::fs::read_to_string(format!("{dir}/{name}")).ok())
        .expect("fixture")
}

const GBPS: u64 = 1_000_000_000;

/// (receptacle, speed, connected) of each receptacle, in output order.
fn receptacles(buses: &[ThunderboltBus]) -> Vec<(Option<u32>, ThunderboltSpeed, Option<bool>)> {
    buses
        .iter()
        .flat_map(|b| &b.ports)
        .map(|p| (p.receptacle, p.speed, p.connected))
        .collect()
}

/// The bus holding `receptacle`, and that receptacle.
fn bus(buses: &[ThunderboltBus], receptacle: u32) -> (&ThunderboltBus, &ThunderboltPort) {
    buses
        .iter()
        .find_map(|b| {
            let port = b.ports.iter().find(|p| p.receptacle == Some(receptacle))?;
            Some((b, port))
        })
        .expect("receptacle present")
}

/// (name, device name, domain UUID, RDMA service) of the port's peer Mac.
fn peer(port: &ThunderboltPort) -> Option<(&str, &str, &str, Option<bool>)> {
    port.peer().map(|p| {
        (
            p.name.as_str(),
            p.device_name.as_str(),
            p.domain_uuid.as_str(),
            p.rdma_service,
        )
    })
}

fn labels(port: &ThunderboltPort) -> Vec<&str> {
    port.other_devices().iter().map(|d| d.label()).collect()
}

fn devices(port: &ThunderboltPort) -> &[meshd_platform::macos::system_profiler::ThunderboltDevice] {
    port.devices.as_deref().unwrap_or_default()
}

fn studio_m3_ultra(text: &str) {
    let buses = parse_thunderbolt_json(text).expect("json");
    let idle = ThunderboltSpeed::UpTo(120 * GBPS);
    let linked = ThunderboltSpeed::Linked(80 * GBPS);
    assert_eq!(
        receptacles(&buses),
        [
            (Some(6), idle, Some(false)),
            (Some(5), idle, Some(false)),
            (Some(4), linked, Some(true)),
            (Some(3), idle, Some(false)),
            (Some(2), linked, Some(true)),
            (Some(1), idle, Some(false)),
        ]
    );
    let (macbook_bus, to_macbook) = bus(&buses, 2);
    assert_eq!(macbook_bus.name, "thunderboltusb4_bus_1");
    assert_eq!(
        macbook_bus.domain_uuid,
        "28CA4C30-A263-4C55-B302-953416D0B209"
    );
    let macbook = (
        "MacBook Pro",
        "Mac17,7",
        "817DCFA4-B481-4100-80FC-91C7AA969F0B",
        Some(true),
    );
    assert_eq!(peer(to_macbook), Some(macbook));
    assert!(labels(to_macbook).is_empty());
    let (_, to_drive) = bus(&buses, 4);
    assert_eq!(peer(to_drive), None, "a drive is not a peer");
    assert_eq!(labels(to_drive), ["Envoy Ultra"]);
    assert_eq!(devices(to_drive)[0].vendor, "Other World Computing");
    assert_eq!(to_drive.linked(), Some(true));
    for idle_port in [1, 3, 5, 6] {
        let (_, idle) = bus(&buses, idle_port);
        assert!(devices(idle).is_empty());
        assert_eq!(idle.linked(), Some(false));
    }
    assert!(buses.iter().all(|b| b.unplaced_devices.is_empty()));
}

fn m5_max_rdma_disabled(text: &str) {
    let buses = parse_thunderbolt_json(text).expect("json");
    assert_eq!(
        receptacles(&buses),
        [
            (Some(3), ThunderboltSpeed::Linked(80 * GBPS), Some(true)),
            (Some(2), ThunderboltSpeed::Linked(80 * GBPS), Some(true)),
            (Some(1), ThunderboltSpeed::UpTo(120 * GBPS), Some(false)),
        ]
    );
    let (_, dock) = bus(&buses, 3);
    assert_eq!(peer(dock), None);
    assert_eq!(labels(dock), ["SB-XTM5"]);
    let other_mac = (
        "MacBook Pro",
        "Mac17,6",
        "00000003-0000-4000-8000-000000000003",
        Some(true),
    );
    let (own_bus, to_peer) = bus(&buses, 2);
    assert_eq!(peer(to_peer), Some(other_mac), "the peer has RDMA on");
    assert_eq!(own_bus.domain_uuid, "00000004-0000-4000-8000-000000000004");
}

fn m5_max_rdma_enabled(text: &str) {
    let buses = parse_thunderbolt_json(text).expect("json");
    assert_eq!(
        receptacles(&buses),
        [
            (Some(3), ThunderboltSpeed::Linked(40 * GBPS), Some(true)),
            (Some(2), ThunderboltSpeed::Linked(80 * GBPS), Some(true)),
            (Some(1), ThunderboltSpeed::UpTo(120 * GBPS), Some(false)),
        ]
    );
    assert_eq!(labels(bus(&buses, 3).1), ["TBU405Pro"]);
    // The reciprocal view: this peer is the RDMA-disabled Mac above. Its
    // services are listed (only `service_ip`), so "no RDMA" is known.
    let other_mac = (
        "MacBook Pro",
        "Mac17,6",
        "00000004-0000-4000-8000-000000000004",
        Some(false),
    );
    assert_eq!(
        peer(bus(&buses, 2).1),
        Some(other_mac),
        "the peer has RDMA off"
    );
}

fn mac_mini_text_format(text: &str) {
    let buses = parse_thunderbolt_text(text);
    assert_eq!(parse_thunderbolt(text), Ok(buses.clone()));
    assert_eq!(
        receptacles(&buses),
        [(Some(3), ThunderboltSpeed::Linked(80 * GBPS), Some(true))]
    );
    let (studio_bus, to_studio) = bus(&buses, 3);
    assert_eq!(studio_bus.name, "Thunderbolt/USB4 Bus 2");
    assert_eq!(
        studio_bus.domain_uuid,
        "7F158861-C131-4D0D-83B6-CA50EF76C32B"
    );
    let studio = (
        "Mac Studio",
        "Mac16,9",
        "88F10ACA-5CAA-4F5D-8361-03EED54ACB5A",
        Some(true),
    );
    assert_eq!(peer(to_studio), Some(studio));
    assert!(labels(to_studio).is_empty());
    assert_eq!(buses[1].domain_uuid, "0A3248FD-13DA-4F5B-9167-7C469F35421C");
    assert!(buses[1].ports.is_empty(), "cut before its port");
}

fn tb4_idle_port(text: &str) {
    let buses = parse_thunderbolt(text).expect("json");
    assert_eq!(
        receptacles(&buses),
        [(Some(3), ThunderboltSpeed::UpTo(40 * GBPS), Some(false))]
    );
    assert_eq!(buses[0].domain_uuid, "5693EDBE-82A0-4A7D-ADD4-E861D14CBE36");
    let idle = &buses[0].ports[0];
    assert_eq!((idle.linked(), idle.max_bps()), (Some(false), 40 * GBPS));
}

fn peer_behind_hub(text: &str) {
    let buses = parse_thunderbolt_json(text).expect("json");
    assert_eq!(
        receptacles(&buses),
        [(Some(2), ThunderboltSpeed::Linked(80 * GBPS), None)]
    );
    // exo kept only the keys its parser reads: no services are listed, so
    // whether the Mac offers RDMA is unknown, not "no".
    let behind_hub = (
        "MacBook Pro",
        "",
        "F74D8F9B-DCDF-40D4-A428-3A3674BCB3F4",
        None,
    );
    let port = &buses[0].ports[0];
    assert_eq!(peer(port), Some(behind_hub));
    assert_eq!(labels(port), ["iVANKY Fusiondock Ultra"]);
}

fn hardware_ports_m5_max(text: &str) {
    let ports = parse_hardware_ports(text);
    let pairs: Vec<(&str, &str, Option<u32>)> = ports
        .iter()
        .map(|p| (p.name.as_str(), p.device.as_str(), p.thunderbolt_number()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("Ethernet Adapter (en3)", "en3", None),
            ("Thunderbolt Bridge", "bridge0", None),
            ("Wi-Fi", "en0", None),
            ("Thunderbolt 1", "en1", Some(1)),
            ("Thunderbolt 2", "en6", Some(2)),
            ("Thunderbolt 3", "en2", Some(3)),
        ]
    );
    assert_eq!(ports[4].ethernet_address, "02:00:00:00:00:02");
}

fn enabled_names(text: &str) -> Vec<(String, bool)> {
    parse_all_services(text)
        .into_iter()
        .map(|s| (s.name, s.enabled))
        .collect()
}

fn all_services_bridge_enabled(text: &str) {
    let services = enabled_names(text);
    assert_eq!(services.len(), 7);
    assert!(services.iter().all(|(_, enabled)| *enabled));
    assert!(services.contains(&("Thunderbolt Bridge".into(), true)));
    assert_eq!(services[0].0, "Thunderbolt Ethernet");
}

fn all_services_bridge_disabled(text: &str) {
    assert_eq!(
        enabled_names(text),
        [
            ("Ethernet 1".into(), true),
            ("Ethernet 2".into(), true),
            ("Wi-Fi".into(), false),
            ("Bluetooth PAN".into(), false),
            ("Thunderbolt Bridge".into(), false),
        ]
    );
}

fn service_order(text: &str) {
    let services = parse_service_order(text);
    assert_eq!(services.len(), 6);
    assert!(services.iter().all(|s| s.enabled));
    let bridge = service_for_device(&services, "bridge0").expect("bridge0");
    assert_eq!(bridge.name, "Thunderbolt Bridge");
    assert_eq!(bridge.hardware_port.as_deref(), Some("Thunderbolt Bridge"));
    let lan2 = service_for_device(&services, "en11").expect("en11");
    assert_eq!(lan2.name, "USB 10/100/1000 LAN 2");
    assert_eq!(lan2.hardware_port.as_deref(), Some("USB 10/100/1000 LAN"));
}

fn interface<'a>(interfaces: &'a [Interface], name: &str) -> &'a Interface {
    interfaces
        .iter()
        .find(|i| i.name == name)
        .expect("interface present")
}

fn members(interface: &Interface) -> Vec<&str> {
    interface.members.iter().map(String::as_str).collect()
}

fn ifconfig_a_intel_mac(text: &str) {
    let interfaces = parse_ifconfig(text);
    let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "lo0",
            "gif0",
            "stf0",
            "en0",
            "en1",
            "en3",
            "en2",
            "en4",
            "bridge0",
            "p2p0",
            "awdl0",
            "utun0",
            "en10",
            "bridge100",
            "utun1",
            "en5",
            "en8"
        ]
    );
    let lo0 = interface(&interfaces, "lo0");
    assert_eq!(lo0.ipv4[0].to_string(), "127.0.0.1/8");
    assert_eq!(
        lo0.ipv6,
        [
            "::1".parse::<Ipv6Addr>().expect("v6"),
            "fe80::1".parse().expect("v6")
        ]
    );
    assert_eq!(lo0.mtu, Some(16384));
    for tb in ["en1", "en2", "en3", "en4"] {
        let port = interface(&interfaces, tb);
        assert_eq!(
            (port.has_flag("PROMISC"), port.has_flag("UP")),
            (Some(true), Some(true)),
            "{tb}"
        );
        assert_eq!(port.active, Some(false), "{tb}");
        assert!(port.ipv4.is_empty(), "{tb}");
    }
    let bridge0 = interface(&interfaces, "bridge0");
    assert!(bridge0.is_bridge());
    assert_eq!(members(bridge0), ["en1", "en2", "en3", "en4"]);
    assert_eq!(bridge0.active, Some(false));
    assert_eq!(bridge0.up_and_running(), Some(true));
    assert_eq!(
        bridge0.bridge_fact().forwarding(),
        Some(false),
        "up, but no member has link"
    );
    let bridge100 = interface(&interfaces, "bridge100");
    assert_eq!(members(bridge100), ["en10"]);
    assert_eq!(bridge100.ipv4[0].to_string(), "192.168.64.1/24");
    assert_eq!(bridge100.bridge_fact().forwarding(), Some(true));
    let bridges: Vec<&str> = interfaces
        .iter()
        .filter(|i| i.is_bridge())
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(bridges, ["bridge0", "bridge100"]);
    assert_eq!(interface(&interfaces, "en8").active, Some(true));
    assert_eq!(
        interface(&interfaces, "gif0").flags.as_deref(),
        Some(&["POINTOPOINT".to_owned(), "MULTICAST".to_owned()][..])
    );
    assert_eq!(
        interface(&interfaces, "stf0").flags.as_deref(),
        Some(&[][..]),
        "flags=0<>: known, none set"
    );
    assert_eq!(interface(&interfaces, "stf0").up_and_running(), Some(false));
}

fn bridge0_active_tn3205(text: &str) {
    let interfaces = parse_ifconfig(text);
    assert_eq!(interfaces.len(), 1);
    assert_eq!(members(&interfaces[0]), ["en2", "en3", "en4"]);
    assert_eq!(interfaces[0].active, Some(true));
    assert!(interfaces[0].is_bridge());
    assert_eq!(interfaces[0].bridge_fact().forwarding(), Some(true));
}

fn bridge0_inactive_intel_mac(text: &str) {
    let interfaces = parse_ifconfig(text);
    assert_eq!(interfaces.len(), 1);
    assert_eq!(members(&interfaces[0]), ["en1", "en2", "en3", "en4"]);
    assert!(interfaces[0].bridge_configuration);
    assert_eq!(interfaces[0].bridge_fact().forwarding(), Some(false));
}

fn en1_bridge_member_no_ip(text: &str) {
    let interfaces = parse_ifconfig(text);
    assert_eq!(interfaces.len(), 1);
    let en1 = &interfaces[0];
    assert_eq!(en1.name, "en1");
    assert!(!en1.is_bridge(), "a member port alone is not a bridge");
    assert!(en1.ipv4.is_empty() && en1.ipv6.is_empty());
    assert_eq!(en1.active, Some(false));
}

fn en2_link_local_tn3205(text: &str) {
    let interfaces = parse_ifconfig(text);
    assert_eq!(interfaces.len(), 1);
    let en2 = &interfaces[0];
    assert_eq!(en2.ipv4.len(), 1);
    assert_eq!(en2.ipv4[0].to_string(), "169.254.205.255/16");
    assert_eq!(
        en2.ipv6,
        ["fe80::1021:1bac:fe1:b5e3".parse::<Ipv6Addr>().expect("v6")]
    );
    assert_eq!(en2.active, Some(true));
}

fn names_and_guids(devices: &[RdmaDevice]) -> Vec<(&str, &str)> {
    devices
        .iter()
        .map(|d| (d.name.as_str(), d.node_guid.as_str()))
        .collect()
}

fn ibv_devices_mac_mini(text: &str) {
    assert_eq!(
        names_and_guids(&parse_ibv_devices(text)),
        [
            ("rdma_en2", "e0c5797d9c8fac05"),
            ("rdma_en3", "e1c5797d9c8fac05"),
            ("rdma_en4", "e2c5797d9c8fac05"),
        ]
    );
}

fn ibv_devices_m5_max(text: &str) {
    assert_eq!(
        names_and_guids(&parse_ibv_devices(text)),
        [
            ("rdma_en1", "0000000000000001"),
            ("rdma_en6", "0000000000000002"),
            ("rdma_en2", "0000000000000003"),
        ]
    );
}

fn ibv_devices_header_only(text: &str) {
    assert!(parse_ibv_devices(text).is_empty());
}

/// (device, port, state, width, lane speed) of every port.
type PortRow<'a> = (&'a str, u32, RdmaPortState, Option<u32>, Option<u64>);

fn port_rows(devices: &[RdmaDevice]) -> Vec<PortRow<'_>> {
    devices
        .iter()
        .flat_map(|d| {
            d.ports.iter().map(move |p| {
                (
                    d.name.as_str(),
                    p.port,
                    p.state,
                    p.active_width_lanes,
                    p.active_lane_speed_bps,
                )
            })
        })
        .collect()
}

fn devinfo_all_down(text: &str) {
    let devices = parse_ibv_devinfo(text);
    assert_eq!(
        port_rows(&devices),
        [
            ("rdma_en1", 1, RdmaPortState::Down, None, None),
            ("rdma_en6", 1, RdmaPortState::Down, None, None),
            ("rdma_en2", 1, RdmaPortState::Down, None, None),
        ]
    );
    assert_eq!(
        names_and_guids(&devices),
        [
            ("rdma_en1", "0000000000000002"),
            ("rdma_en6", "0000000000000003"),
            ("rdma_en2", "0000000000000004"),
        ]
    );
    for device in &devices {
        assert_eq!(device.transport, "Thunderbolt (100)");
        let port = &device.ports[0];
        assert_eq!(port.link_layer, "Thunderbolt");
        assert_eq!((port.max_mtu, port.active_mtu), (Some(4096), Some(4096)));
        assert!(port.gids.is_empty());
    }
}

fn devinfo_all_active(text: &str) {
    let devices = parse_ibv_devinfo(text);
    assert_eq!(
        port_rows(&devices),
        [
            ("rdma_en2", 1, RdmaPortState::Active, None, None),
            ("rdma_en3", 1, RdmaPortState::Active, None, None),
            ("rdma_en4", 1, RdmaPortState::Active, None, None),
        ]
    );
    assert!(devices.iter().all(|d| d.transport == "Thunderbolt (100)"));
}

fn devinfo_grep_tb4(text: &str) {
    let devices = parse_ibv_devinfo(text);
    let eight = Some(8);
    let ten_gbps = Some(10 * GBPS);
    assert_eq!(
        port_rows(&devices),
        [
            ("rdma_en2", 1, RdmaPortState::Down, eight, ten_gbps),
            ("rdma_en3", 1, RdmaPortState::Down, eight, ten_gbps),
            ("rdma_en4", 1, RdmaPortState::Active, Some(4), ten_gbps),
        ]
    );
    assert_eq!(devices[2].ports[0].active_speed_bps(), Some(40 * GBPS));
    assert_eq!(devices[0].ports[0].active_speed_bps(), Some(80 * GBPS));
}

fn devinfo_gid_table(text: &str) {
    let devices = parse_ibv_devinfo(text);
    assert_eq!(
        port_rows(&devices),
        [(
            "rdma_en2",
            1,
            RdmaPortState::Active,
            Some(8),
            Some(10 * GBPS)
        )]
    );
    assert_eq!(devices[0].transport, "Thunderbolt (100)");
    assert_eq!(
        devices[0].node_guid, "90933a232588ac05",
        "GUID reflowed onto the next line"
    );
    let v6 = |s: &str| s.parse::<Ipv6Addr>().expect("v6");
    assert_eq!(
        devices[0].ports[0].gids,
        [
            (0, v6("fe80::344d:4ff:feea:4e40")),
            (1, v6("::ffff:169.254.205.255")),
            (2, v6("fe80::1021:1bac:fe1:b5e3")),
        ]
    );
}

fn rdma_ctl_enabled(text: &str) {
    assert_eq!(parse_rdma_ctl_status(text), RdmaCtlStatus::Enabled);
}

fn sw_vers_26_5(text: &str) {
    let versions = parse_sw_vers(text);
    assert_eq!(
        (
            versions.product_name.as_str(),
            versions.product_version.as_str(),
            versions.build_version.as_str()
        ),
        ("macOS", "26.5", "25F71")
    );
}

fn ibv_devices_m3_ultra(text: &str) {
    assert_eq!(
        names_and_guids(&parse_ibv_devices(text)),
        [
            ("rdma_en2", "8096a9d9edbaac05"),
            ("rdma_en3", "8196a9d9edbaac05"),
            ("rdma_en5", "8396a9d9edbaac05"),
            ("rdma_en4", "8296a9d9edbaac05"),
            ("rdma_en6", "8496a9d9edbaac05"),
            ("rdma_en7", "8596a9d9edbaac05"),
        ]
    );
}

/// (name, down, input packets, input bytes) of every interface.
fn netstat_rows(text: &str) -> Vec<(String, bool, u64, Option<u64>)> {
    let parsed = parse_netstat_interfaces(text).expect("header");
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    parsed
        .interfaces
        .into_iter()
        .map(|i| (i.name, i.down, i.input_packets, i.input_bytes))
        .collect()
}

fn netstat_apple_silicon(text: &str) {
    let rows = netstat_rows(text);
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "lo0", "gif0", "stf0", "anpi1", "anpi0", "anpi3", "en0", "en5", "en6", "en7", "en2",
            "en3", "en4", "bridge0", "en8", "utun0", "utun1", "ap1", "en1", "awdl0", "utun2",
            "utun3", "llw0", "utun4", "utun5"
        ],
        "one row per interface, address rows skipped"
    );
    let row = |name: &str| rows.iter().find(|r| r.0 == name).cloned().expect("row");
    assert_eq!(row("gif0"), ("gif0".into(), true, 0, Some(0)), "`*`: down");
    assert_eq!(row("bridge0"), ("bridge0".into(), false, 0, Some(0)));
    assert_eq!(
        row("en1"),
        ("en1".into(), false, 53_389_897, Some(51_846_588_555))
    );
    // No link-layer address: the values are still read from the right.
    assert_eq!(row("utun4"), ("utun4".into(), false, 56, Some(11_648)));
}

fn netstat_intel_mac(text: &str) {
    let rows = netstat_rows(text);
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names, ["lo0", "gif0", "stf0", "en0", "en1", "fw0", "p2p0"]);
    let parsed = parse_netstat_interfaces(text).expect("header");
    let en0 = parsed.get("en0").expect("en0");
    assert_eq!(
        (en0.input_packets, en0.output_packets, en0.output_bytes),
        (7_968_840, 30_171_941, Some(43_120_998_925))
    );
    // FireWire's 8-byte address is one column like a MAC.
    assert_eq!(parsed.get("fw0").map(|i| i.output_bytes), Some(Some(692)));
}

fn firewall_on(text: &str) {
    assert_eq!(parse_global_state(text), GlobalState::On);
}

fn firewall_off(text: &str) {
    assert_eq!(parse_global_state(text), GlobalState::Off);
}

/// Both wordings of state 2 (older "enabled", Sequoia's "blocking all
/// non-essential incoming connections").
fn firewall_block_all(text: &str) {
    assert_eq!(parse_global_state(text), GlobalState::BlockAll);
}

fn listapps_nine_rules(text: &str) {
    let rules = parse_listapps(text).expect("parses");
    assert_eq!(rules.len(), 9);
    assert_eq!(
        rules[0],
        FirewallRule {
            path: "/usr/libexec/sshd-session".into(),
            allowed: Some(false)
        }
    );
    assert_eq!(
        rules[8],
        FirewallRule {
            path: "/usr/sbin/smbd".into(),
            allowed: Some(true)
        }
    );
    assert_eq!(rules.iter().filter(|r| r.allowed == Some(false)).count(), 2);
    // The list was read and has no rule for meshd: known, and empty.
    let (fact, blind) = firewall_fact(Some("Firewall is enabled. (State = 1)\n"), Some(text));
    assert_eq!(fact.meshd_rules, Some(vec![]));
    assert!(blind.is_empty());
}

/// The author kept 1 of 7 rules: a listing cut short is refused, not read
/// as a shorter list.
fn listapps_cut_short(text: &str) {
    assert_eq!(
        parse_listapps(text),
        Err(ListAppsError::CountMismatch { said: 7, listed: 1 })
    );
}

fn vm_stat_apple_silicon(text: &str) {
    let stat = parse_vm_stat(text);
    assert_eq!(stat.page_size, Some(16_384));
    assert_eq!(stat.wired_bytes(), Some(127_718 * 16_384));
    assert_eq!(stat.pages.get("Translation faults"), Some(&5_220_385_534));
    assert_eq!(stat.pages.len(), 22);
}

fn vm_stat_intel(text: &str) {
    let stat = parse_vm_stat(text);
    assert_eq!(stat.page_size, Some(4096));
    // 2.7 GiB wired on an Intel Mac.
    assert_eq!(stat.wired_bytes(), Some(715_958 * 4096));
    assert_eq!(stat.pages.get("Pages occupied by compressor"), Some(&0));
}

fn sysctl_under_load(text: &str) {
    let mut blind = Vec::new();
    let memory = memory_facts(
        MemoryOutputs {
            sysctl: Some(text),
            ..MemoryOutputs::default()
        },
        &mut blind,
    )
    .expect("memory");
    assert_eq!(memory.pressure, Some(MemoryPressure::Warning));
    assert_eq!(memory.swap_total_bytes, Some(13_312 << 20));
    // 11625.69 MiB.
    assert_eq!(memory.swap_used_bytes, Some(12_190_419_517));
    // This capture has no hw.memsize line: unknown, and said.
    assert_eq!(memory.total_bytes, None);
    assert_eq!(
        blind,
        [
            "sysctl hw.memsize vm.swapusage kern.memorystatus_vm_pressure_level \
                        kern.bootsessionuuid kern.boottime: no hw.memsize line"
        ]
    );
}

fn sysctl_memsize(text: &str) {
    let values = parse_sysctl_values(text);
    assert_eq!(values["hw.memsize"], "34359738368");
    assert_eq!(values["hw.model"], "Mac14,12");
}

fn sysctl_gpu_limit(text: &str) {
    let mut blind = Vec::new();
    let memory = memory_facts(
        MemoryOutputs {
            gpu_wired_limit: Some(text),
            ..MemoryOutputs::default()
        },
        &mut blind,
    )
    .expect("memory");
    assert_eq!(
        memory,
        MemoryFacts {
            gpu_wired_limit_bytes: Some(118_000 << 20),
            ..MemoryFacts::default()
        }
    );
    assert!(blind.is_empty(), "{blind:?}");
}

fn sysctl_boot(text: &str) {
    let mut blind = Vec::new();
    assert_eq!(
        boot_identity(Some(text), &mut blind),
        BootIdentity {
            id: Some("40962879-B7EE-4F13-AF6E-E7266EF5E732".into()),
            booted_at_unix: Some(1_790_421_415),
        }
    );
    assert!(blind.is_empty(), "{blind:?}");
}

fn pmset_m_series(text: &str) {
    assert_eq!(
        parse_pmset(text),
        Some(PowerSettings {
            sleep_minutes: Some(0),
            disk_sleep_minutes: Some(0),
            // A MacBook: no autorestart line.
            auto_restart: None,
            sleep_disabled: None,
            sleep_prevented_by: vec![],
        })
    );
}

fn pmset_sleep_disabled(text: &str) {
    let power = parse_pmset(text).expect("pmset");
    assert_eq!(power.sleep_disabled, Some(true));
    assert_eq!(power.sleep_minutes, Some(0));
    assert_eq!(power.sleep_prevented_by.len(), 8);
    assert_eq!(power.sleep_prevented_by[5], "coreaudiod");
}

fn pmset_sleep_on(text: &str) {
    let power = parse_pmset(text).expect("pmset");
    assert_eq!(
        (power.sleep_minutes, power.disk_sleep_minutes),
        (Some(1), Some(10))
    );
    assert_eq!(power.sleep_prevented_by, ["sharingd", "coreaudiod"]);
    assert_eq!(power.auto_restart, None);
}

fn pmset_no_autorestart(text: &str) {
    let power = parse_pmset(text).expect("pmset");
    assert_eq!(power.auto_restart, Some(false));
    assert_eq!(power.sleep_minutes, Some(0));
    assert_eq!(power.sleep_prevented_by, ["screensharingd"]);
}

fn getinfo_manual(text: &str) {
    assert_eq!(parse_service_info(text), Some(Ipv4Method::Manual));
}

fn getinfo_dhcp(text: &str) {
    assert_eq!(parse_service_info(text), Some(Ipv4Method::Dhcp));
}

fn panic_full_cut_off(text: &str) {
    let report = parse_panic_report("panic-full-2021-07-19-063405.000.ips", text).expect("panic");
    assert_eq!(
        report.first_line,
        "panic(cpu 1 caller 0xfffffff01a3072d4): Kernel data abort. at pc 0xfffffff01a655334, \
         lr 0xfffffff01a655320 (saved state: 0xffffffe815c4b3a0)"
    );
    // 2021-07-19 06:34:05 +0300.
    assert_eq!(report.at_unix, Some(1_626_665_645));
    assert_eq!(
        report.boot_id, None,
        "paniclog version 13 names no boot session"
    );
    // The bounded read cuts anywhere: the first kilobyte still gives the line.
    let cut = &text[..text.char_indices().nth(1024).map_or(text.len(), |(i, _)| i)];
    assert_eq!(
        parse_panic_report("p", cut).expect("cut").first_line,
        report.first_line
    );
}

fn panic_string_iogpu(text: &str) {
    // The decoded panic string, as Console and the issue show it.
    let report = parse_panic_report("panic-full.panic", text).expect("panic");
    assert_eq!(
        report.first_line,
        "panic(cpu 7 caller 0xfffffe004418be28): \"completeMemory() prepare count underflow\" \
         @IOGPUMemory.cpp:550"
    );
    assert_eq!(
        report.boot_id.as_deref(),
        Some("7EDF3EA8-1F47-4E07-A28D-C02488B3E469")
    );
}

fn table(text: &str) -> RoutingTable {
    parse_routing_table(text).expect("table")
}

/// (interface, next hop, matched route) of `address` in `table`.
fn via(table: &RoutingTable, address: [u8; 4]) -> (String, NextHop, String) {
    let address = Ipv4Addr::from(address);
    match table.lookup(address).expect("lookup") {
        Lookup::Route(egress) => (
            egress.interface,
            egress.next_hop,
            egress.matched.map(|m| m.to_string()).unwrap_or_default(),
        ),
        Lookup::NoRoute { reason } => panic!("{address}: no route: {reason}"),
    }
}

fn direct(interface: &str, matched: &str) -> (String, NextHop, String) {
    (interface.to_owned(), NextHop::Direct, matched.to_owned())
}

fn through(interface: &str, gateway: [u8; 4], matched: &str) -> (String, NextHop, String) {
    (
        interface.to_owned(),
        NextHop::Gateway(IpAddr::from(gateway)),
        matched.to_owned(),
    )
}

fn table_tailscale(text: &str) {
    let table = table(text);
    assert_eq!(table.routes.len(), 12);
    assert_eq!(
        table.routes[2].gateway,
        Gateway::Link(48),
        "bridge100's scoped default"
    );
    // A tailnet peer without a host route of its own: the /10 on utun8.
    assert_eq!(
        via(&table, [100, 101, 102, 103]),
        direct("utun8", "100.64.0.0/10")
    );
    // Its cloned host route is scoped (UHWIi), so the /10 answers too.
    assert_eq!(
        via(&table, [100, 99, 240, 77]),
        direct("utun8", "100.64.0.0/10")
    );
    // Everything else: the one unscoped default, over Wi-Fi.
    assert_eq!(
        via(&table, [8, 8, 8, 8]),
        through("en0", [172, 20, 10, 1], "0.0.0.0/0")
    );
}

fn table_wireguard_default(text: &str) {
    let table = table(text);
    assert_eq!(table.routes.len(), 16);
    // The tunnel owns the unscoped default: an address on no cable leaves
    // by utun3, the fallback this reader is for.
    assert_eq!(via(&table, [10, 0, 0, 9]), direct("utun3", "0.0.0.0/0"));
    assert_eq!(
        via(&table, [169, 254, 87, 238]),
        direct("en0", "169.254.0.0/16")
    );
    assert_eq!(table.routes[2].flags, "UHW3Ig", "scoped, so not the answer");
    assert_eq!(via(&table, [8, 8, 8, 8]), direct("utun3", "0.0.0.0/0"));
}

fn table_clash_split_routes(text: &str) {
    let table = table(text);
    assert_eq!(table.routes.len(), 21);
    let destinations: Vec<String> = table.routes[2..9]
        .iter()
        .map(|r| r.destination.to_string())
        .collect();
    assert_eq!(
        destinations,
        [
            "1.0.0.0/8",
            "2.0.0.0/7",
            "4.0.0.0/6",
            "8.0.0.0/5",
            "16.0.0.0/4",
            "32.0.0.0/3",
            "64.0.0.0/2"
        ]
    );
    assert_eq!(
        via(&table, [10, 0, 12, 2]),
        through("utun2", [198, 18, 0, 1], "8.0.0.0/5")
    );
    assert_eq!(
        via(&table, [200, 1, 1, 1]),
        through("utun2", [198, 18, 0, 1], "128.0.0.0/1")
    );
    // The LAN and link-local routes are longer than the tunnel's halves.
    assert_eq!(
        via(&table, [192, 168, 0, 50]),
        direct("en9", "192.168.0.0/24")
    );
    assert_eq!(
        via(&table, [169, 254, 10, 2]),
        direct("en9", "169.254.0.0/16")
    );
    assert_eq!(
        via(&table, [192, 168, 2, 255]),
        direct("bridge1", "192.168.2.0/24"),
        "the broadcast row is scoped"
    );
    assert_eq!(
        table.routes[20].gateway,
        Gateway::LinkLayer("ff.ff.ff.ff.ff.ff".into())
    );
}

fn table_interface_gateway(text: &str) {
    let table = table(text);
    assert_eq!(table.routes[0].gateway, Gateway::Interface("utun0".into()));
    assert_eq!(via(&table, [10, 0, 0, 1]), direct("utun0", "0.0.0.0/1"));
    // The only default is scoped: the upper half has no unscoped route.
    assert!(matches!(
        table.lookup(Ipv4Addr::new(200, 0, 0, 1)),
        Ok(Lookup::NoRoute { .. })
    ));
}

fn table_vpn_default(text: &str) {
    let table = table(text);
    assert_eq!(table.routes.len(), 2, "the trailing blank line is no row");
    assert_eq!(via(&table, [10, 0, 0, 1]), direct("utun3", "0.0.0.0/0"));
}

fn table_before_openvpn(text: &str) {
    let table = table(text);
    assert_eq!(table.routes.len(), 13);
    assert_eq!(
        via(&table, [10, 0, 0, 9]),
        through("en0", [192, 168, 0, 1], "0.0.0.0/0")
    );
    assert_eq!(
        via(&table, [169, 254, 1, 1]),
        direct("en0", "169.254.0.0/16")
    );
}

fn table_after_openvpn(text: &str) {
    let table = table(text);
    assert_eq!(table.routes.len(), 19);
    // The same address as before the tunnel came up now leaves by it.
    assert_eq!(
        via(&table, [10, 0, 0, 9]),
        through("utun3", [192, 168, 255, 5], "10.0.0.0/8")
    );
    assert_eq!(
        via(&table, [8, 8, 8, 8]),
        through("utun3", [192, 168, 255, 5], "0.0.0.0/1")
    );
    assert_eq!(
        via(&table, [200, 0, 0, 1]),
        through("utun3", [192, 168, 255, 5], "128.0.0.0/1")
    );
    // The VPN server itself stays on the LAN.
    assert_eq!(
        via(&table, [13, 125, 122, 244]),
        through("en0", [192, 168, 0, 1], "13.125.122.244/32")
    );
    assert_eq!(
        via(&table, [169, 254, 3, 4]),
        direct("en0", "169.254.0.0/16")
    );
}

fn table_link_local_on_two_interfaces(text: &str) {
    let table = table(text);
    assert_eq!(table.routes.len(), 7);
    // The peer on the second cable has a host route of its own (UHLSW,
    // not scoped): it leaves by en7.
    assert_eq!(
        via(&table, [169, 254, 155, 207]),
        direct("en7", "169.254.155.207/32")
    );
    // Any other link-local address takes the unscoped 169.254 of en0:
    // macOS routes 169.254/16 by one interface only.
    assert_eq!(
        via(&table, [169, 254, 1, 1]),
        direct("en0", "169.254.0.0/16")
    );
}

fn route_get_default_en0(text: &str) {
    let route = parse_route_get_fields(text)
        .expect("answer")
        .expect("a route");
    assert_eq!((route.route_to, route.mask_len), (None, Some(0)));
    assert_eq!(
        route.flags,
        ["UP", "GATEWAY", "DONE", "STATIC", "PRCLONING", "GLOBAL"]
    );
    let Ok(Lookup::Route(egress)) = parse_route_get(text) else {
        panic!("a route");
    };
    assert_eq!(egress.interface, "en0");
    assert_eq!(egress.gateway(), Some(IpAddr::from([192, 168, 1, 1])));
    assert_eq!(
        egress.matched.map(|m| m.to_string()).as_deref(),
        Some("0.0.0.0/0")
    );
}

fn route_get_vpn_default(text: &str) {
    let Ok(Lookup::Route(egress)) = parse_route_get(text) else {
        panic!("a route");
    };
    assert_eq!(
        (egress.interface.as_str(), egress.gateway()),
        ("utun4", Some(IpAddr::from([10, 8, 0, 1])))
    );
}

fn route_get_cloned_host_route(text: &str) {
    let route = parse_route_get_fields(text)
        .expect("answer")
        .expect("a route");
    assert_eq!(route.route_to, Some(Ipv4Addr::new(1, 1, 1, 1)));
    assert!(route.has_flag("IFSCOPE") && route.has_flag("WASCLONED"));
    let Lookup::Route(egress) = route.lookup() else {
        panic!("a route");
    };
    assert_eq!(egress.interface, "en0");
    assert_eq!(egress.gateway(), Some(IpAddr::from([192, 168, 0, 1])));
    // No mask line: a host route.
    assert_eq!(
        egress.matched.map(|m| m.to_string()).as_deref(),
        Some("1.1.1.1/32")
    );
}

fn route_get_interface_route(text: &str) {
    let Ok(Lookup::Route(egress)) = parse_route_get(text) else {
        panic!("a route");
    };
    assert_eq!(egress.interface, "utun5");
    assert!(egress.is_direct(), "no gateway line, no GATEWAY flag");
    assert_eq!(
        egress.matched.map(|m| m.to_string()).as_deref(),
        Some("0.0.0.0/1")
    );
}

fn route_get_not_in_table(text: &str) {
    assert_eq!(parse_route_get_fields(text), Ok(None));
    assert_eq!(
        parse_route_get(text),
        Ok(Lookup::NoRoute {
            reason: "not in table".into()
        })
    );
}

/// (interface, next hop, matched route) of a `route -n get` answer.
fn answered(text: &str) -> (String, NextHop, String) {
    match parse_route_get(text).expect("answer") {
        Lookup::Route(egress) => (
            egress.interface,
            egress.next_hop,
            egress.matched.map(|m| m.to_string()).unwrap_or_default(),
        ),
        Lookup::NoRoute { reason } => panic!("no route: {reason}"),
    }
}

fn route_get_link_local_net(text: &str) {
    // A link-local peer with no host route yet: the 169.254 network route,
    // on the link, no gateway. The expire is negative.
    assert_eq!(answered(text), direct("en0", "169.254.0.0/16"));
}

fn route_get_names_refused(text: &str) {
    // Run without -n, route prints names; meshd always passes -n, and a
    // name is refused rather than resolved here.
    assert_eq!(
        parse_route_get(text).expect_err("a name").to_string(),
        "route to: \"lga25s81-in-f14.1e100.net\" is not an IPv4 address or \"default\""
    );
}

fn route_get_stale_link_local_entry(text: &str) {
    let route = parse_route_get_fields(text)
        .expect("answer")
        .expect("a route");
    assert!(route.has_flag("b016"), "a flag bit without a name is kept");
    // The kernel sends to the stale entry's interface, so that is the
    // answer: en0, not a cable.
    assert_eq!(answered(text), direct("en0", "169.254.170.2/32"));
}

fn route_get_loopback(text: &str) {
    assert_eq!(
        answered(text),
        ("lo0".to_owned(), NextHop::Local, "127.0.0.1/32".to_owned())
    );
}

fn route_get_covering_net(text: &str) {
    let route = parse_route_get_fields(text)
        .expect("answer")
        .expect("a route");
    assert_eq!(route.route_to, Some(Ipv4Addr::new(169, 254, 99, 99)));
    assert_eq!(answered(text), direct("en0", "169.254.0.0/16"));
}
