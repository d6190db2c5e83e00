//! The settings that drift, judged on captured outputs: `pmset -g` of real
//! Macs (sleep and restart after power loss judged, disk sleep only shown), `networksetup
//! -getinfo` of services on a static address and on DHCP, and the
//! Thunderbolt Bridge's service, through the macOS join and the node
//! checks, as the daemon and `meshctl doctor` run them.

use meshd_domain::facts::{CheckResult, CheckStatus, NodeFacts};
use meshd_domain::fixtures::id;
use meshd_mesh::checks::node_checks;
use meshd_mesh::models::ModelTable;
use meshd_platform::macos::{MacosOutputs, join};
use meshd_platform::source::{CaptureError, HostCommand};

const OWN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/macos");
const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/macos-captures");

fn fixture(name: &str) -> String {
    [OWN, SHARED]
        .iter()
        .find_map(|dir| std::fs::read_to_string(format!("{dir}/{name}")).ok())
        .unwrap_or_else(|| panic!("no fixture {name}"))
}

fn check(facts: &NodeFacts, name: &str) -> CheckResult {
    node_checks(&id("studio-1"), facts, &ModelTable::builtin())
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

fn power(pmset: &str) -> CheckResult {
    let facts = join(&MacosOutputs::default().with(HostCommand::Pmset, Ok(fixture(pmset))));
    check(&facts, "power_settings")
}

#[test]
fn sleep_turned_on_fails_and_names_what_holds_it_off() {
    let result = power("pmset_g_autorestart0_sleep1_iMac20,1-SMBIOS.txt");
    assert_eq!(result.status, CheckStatus::Fail, "{result:?}");
    assert_eq!(
        result.evidence[0],
        "sleep 1: the system sleeps after 1 min idle; only sharingd, coreaudiod hold it off right \
         now, and only while they run: a sleeping node drops its cables and its jobs"
    );
    assert!(
        result.evidence[1].starts_with("disksleep 10: not judged: "),
        "{result:?}"
    );
    assert_eq!(result.fix, "sudo pmset -a sleep 0 autorestart 1");
}

#[test]
fn no_restart_after_power_loss_warns() {
    let result = power("pmset_g_autorestart0_OpenCore-guide.txt");
    assert_eq!(result.status, CheckStatus::Warn, "{result:?}");
    assert_eq!(
        result.evidence,
        [
            "sleep 0: the system never sleeps",
            "disksleep 10: not judged: it spins hard disks down after 10 min idle, and the \
             internal SSD has none to spin; meshd cannot see whether this node reads from a \
             spinning disk; if it does (model weights on an external hard disk), `sudo pmset -a \
             disksleep 0` spares the first read after a pause its spin-up",
            "autorestart 0: after a power failure this node stays off until someone presses its \
             power button",
        ]
    );
    // Only autorestart warns: its fix does not ask for disksleep 0.
    assert_eq!(result.fix, "sudo pmset -a sleep 0 autorestart 1");
}

/// macOS's own `disksleep 10` is what every stock Mac shows: with sleep off
/// and autorestart on, the node passes. The OpenCore guide's capture with
/// `autorestart 1` in place of its `autorestart 0` (no capture of a desktop
/// Mac with both was found).
#[test]
fn stock_disk_sleep_alone_passes_whatever_the_thunderbolt_ports_carry() {
    let pmset = fixture("pmset_g_autorestart0_OpenCore-guide.txt")
        .replace(" autorestart          0", " autorestart          1");
    let outputs = MacosOutputs::default().with(HostCommand::Pmset, Ok(pmset.clone()));
    let result = check(&join(&outputs), "power_settings");
    assert_eq!(result.status, CheckStatus::Pass, "{result:?}");
    assert!(result.evidence[1].starts_with("disksleep 10: not judged"));
    assert!(result.fix.is_empty(), "{result:?}");
    // A USB4 drive on Thunderbolt 4 (the M3 Ultra Studio's capture) is
    // named as a disk it may be, and still decides nothing.
    let outputs = MacosOutputs::default()
        .with(HostCommand::Pmset, Ok(pmset))
        .with(
            HostCommand::Thunderbolt,
            Ok(fixture(
                "system_profiler_SPThunderboltDataType_MacStudio-M3Ultra_one-TB5-peer_plus-USB4-drive.json",
            )),
        );
    let result = check(&join(&outputs), "power_settings");
    assert_eq!(result.status, CheckStatus::Pass, "{result:?}");
    assert!(
        result.evidence[1].contains("(its Thunderbolt ports carry Envoy Ultra (Thunderbolt 4"),
        "{result:?}"
    );
}

#[test]
fn sleep_disabled_passes_and_a_missing_autorestart_line_is_unknown() {
    let result = power("pmset_g_SleepDisabled_sleep-prevented.txt");
    assert_eq!(result.status, CheckStatus::Skipped, "{result:?}");
    assert_eq!(
        result.evidence[0],
        "SleepDisabled 1: the system never sleeps"
    );
    assert!(
        result.evidence[2].starts_with("`pmset -g` shows no autorestart setting"),
        "{result:?}"
    );
    // The same Mac's other capture: sleep off by `sleep 0`.
    let laptop = power("pmset_g_macOS26.3_M-series_AC.txt");
    assert_eq!(laptop.status, CheckStatus::Skipped, "{laptop:?}");
    assert_eq!(
        laptop.evidence[..2],
        [
            "sleep 0: the system never sleeps",
            "disksleep 0: disks never spin down"
        ]
    );
    // Without pmset nothing is judged.
    let unread = check(&join(&MacosOutputs::default()), "power_settings");
    assert_eq!(unread.status, CheckStatus::Skipped);
    assert!(
        unread.evidence[0].starts_with("power settings unknown"),
        "{unread:?}"
    );
}

/// How a Mac's Thunderbolt 1 (en2) is set up: its service's name and
/// `networksetup -getinfo`, the network location and what
/// /Library/LaunchDaemons holds.
struct Setup<'a> {
    service: &'a str,
    getinfo: Result<String, CaptureError>,
    location: &'a str,
    launch_daemons: &'a [&'a str],
    /// `ifconfig en2`, TN3205's capture (self-assigned 169.254.205.255/16)
    /// unless replaced.
    ifconfig: String,
}

impl Setup<'_> {
    /// A Mac set up by hand: the service named after its port, the
    /// location "Automatic", no tool's daemon.
    fn own(getinfo: Result<String, CaptureError>) -> Self {
        Setup {
            service: "Thunderbolt 1",
            getinfo,
            location: "Automatic",
            launch_daemons: &["com.example.backup.plist"],
            ifconfig: fixture("ifconfig_en2_with_ip_169.254_TN3205.txt"),
        }
    }

    /// What exo's network setup leaves: its location "exo", the port's
    /// service "EXO Thunderbolt 1" on DHCP, its LaunchDaemon installed.
    fn exo() -> Self {
        Setup {
            service: "EXO Thunderbolt 1",
            location: "exo",
            launch_daemons: &["io.exo.networksetup.plist"],
            ..Setup::own(Ok(fixture(
                "networksetup_getinfo_DHCP_self-assigned-169.254.txt",
            )))
        }
    }

    /// The Mac's facts, with Thunderbolt 1 (en2) cabled to a peer.
    fn facts(self) -> NodeFacts {
        let profiler = r#"{"SPThunderboltDataType": [
            {"domain_uuid_key": "LOCAL", "receptacle_1_tag": {"receptacle_id_key": "1", "current_speed_key": "80 Gb/s"},
             "_items": [{"_name": "Mac Studio", "device_name_key": "Mac15,14", "domain_uuid_key": "PEER"}]}
        ]}"#;
        let outputs = MacosOutputs::default()
            .with(HostCommand::Thunderbolt, Ok(profiler.to_owned()))
            .with(
                HostCommand::HardwarePorts,
                Ok("Hardware Port: Thunderbolt 1\nDevice: en2\n".to_owned()),
            )
            .with(
                HostCommand::ServiceOrder,
                Ok(format!(
                    "(1) {}\n(Hardware Port: Thunderbolt 1, Device: en2)\n",
                    self.service
                )),
            )
            .with(
                HostCommand::CurrentLocation,
                Ok(format!("{}\n", self.location)),
            )
            .with(HostCommand::Ifconfig, Ok(self.ifconfig))
            .with_launch_daemons(Ok(self
                .launch_daemons
                .iter()
                .map(|d| (*d).to_owned())
                .collect()))
            .with_service_info(self.service, self.getinfo);
        join(&outputs)
    }
}

fn dhcp() -> Result<String, CaptureError> {
    Ok(fixture(
        "networksetup_getinfo_DHCP_self-assigned-169.254.txt",
    ))
}

fn manual() -> Result<String, CaptureError> {
    Ok(fixture("networksetup_getinfo_Manual_router-null.txt"))
}

#[test]
fn a_cable_self_assigned_on_dhcp_by_hand_warns_and_names_its_service() {
    let result = check(&Setup::own(dhcp()).facts(), "link_address_static");
    assert_eq!(result.status, CheckStatus::Warn, "{result:?}");
    assert_eq!(
        result.evidence,
        [
            "Thunderbolt 1 (en2): self-assigned 169.254.205.255/16 (its service \"Thunderbolt 1\" \
             is on dhcp, and a cable has no DHCP server): JACCL works on it (any IPv4 address \
             gives the port its RDMA GID), but it changes when the link comes back, and IP to \
             the peer over this cable (the ring backend, ssh) follows it"
        ]
    );
    assert!(
        result.fix.starts_with(
            "sudo networksetup -setmanual \"Thunderbolt 1\" <address> 255.255.255.252  #"
        ),
        "{result:?}"
    );
    assert!(!result.fix.contains("exo"), "{result:?}");
}

#[test]
fn exos_setup_is_valid_and_a_manual_address_under_its_daemon_is_told_it_will_be_undone() {
    let exo = Setup::exo().facts();
    let setup = exo.network_setup.clone().expect("read");
    assert_eq!(
        (setup.location.as_deref(), setup.exo_daemon),
        (Some("exo"), Some(true))
    );
    assert_eq!(exo.ports[0].service, "EXO Thunderbolt 1");
    let result = check(&exo, "link_address_static");
    assert_eq!(result.status, CheckStatus::Pass, "{result:?}");
    assert!(
        result.evidence[0].starts_with(
            "Thunderbolt 1 (en2): self-assigned 169.254.205.255/16 on dhcp, exo's setup (its \
             service \"EXO Thunderbolt 1\" is exo's; the network location is exo's \"exo\"; \
             exo's io.exo.networksetup re-applies it"
        ),
        "{result:?}"
    );

    // exo's services left behind without its daemon: still exo's setup.
    let left = Setup {
        launch_daemons: &[],
        ..Setup::exo()
    };
    assert_eq!(
        check(&left.facts(), "link_address_static").status,
        CheckStatus::Pass
    );

    // A static address typed into exo's service: its daemon undoes it.
    let typed = Setup {
        getinfo: manual(),
        ..Setup::exo()
    };
    let result = check(&typed.facts(), "link_address_static");
    assert_eq!(result.status, CheckStatus::Warn, "{result:?}");
    assert!(
        result.evidence[0].contains("will put back on DHCP"),
        "{result:?}"
    );
    assert!(
        result
            .fix
            .contains("sudo launchctl bootout system/io.exo.networksetup"),
        "{result:?}"
    );
    // Its daemon also switches a Mac back to "exo" from any other location.
    let elsewhere = Setup {
        getinfo: manual(),
        service: "Thunderbolt 1",
        location: "Automatic",
        ..Setup::exo()
    };
    assert_eq!(
        check(&elsewhere.facts(), "link_address_static").status,
        CheckStatus::Warn
    );
}

#[test]
fn an_address_set_by_hand_over_dhcp_warns_and_the_fix_keeps_it() {
    // What `mlx.distributed_config --auto-setup` runs: `ifconfig en2 inet
    // 192.168.0.1 netmask 255.255.255.252` on a port whose service is on
    // DHCP.
    let by_hand = Setup {
        ifconfig: fixture("ifconfig_en2_with_ip_169.254_TN3205.txt").replace(
            "inet 169.254.205.255 netmask 0xffff0000 broadcast 169.254.255.255",
            "inet 192.168.0.1 netmask 0xfffffffc broadcast 192.168.0.3",
        ),
        ..Setup::own(dhcp())
    };
    let result = check(&by_hand.facts(), "link_address_static");
    assert_eq!(result.status, CheckStatus::Warn, "{result:?}");
    assert!(
        result.evidence[0].starts_with(
            "Thunderbolt 1 (en2) holds 192.168.0.1/30 although its service \"Thunderbolt 1\" is \
             on dhcp: an address set by hand"
        ),
        "{result:?}"
    );
    assert!(
        result.fix.starts_with(
            "sudo networksetup -setmanual \"Thunderbolt 1\" 192.168.0.1 255.255.255.252"
        ),
        "{result:?}"
    );
}

#[test]
fn a_static_cable_passes_and_an_unread_service_or_setup_is_unknown() {
    let result = check(&Setup::own(manual()).facts(), "link_address_static");
    assert_eq!(result.status, CheckStatus::Pass, "{result:?}");
    let failed = Setup::own(Err(CaptureError::Run(
        "networksetup -getinfo 'Thunderbolt 1' did not finish within 5s; killed".into(),
    )))
    .facts();
    let result = check(&failed, "link_address_static");
    assert_eq!(result.status, CheckStatus::Skipped, "{result:?}");
    assert!(
        failed.blind_spots.contains(
            &"networksetup -getinfo 'Thunderbolt 1' did not finish within 5s; killed".to_owned()
        ),
        "{:?}",
        failed.blind_spots
    );
    // Without the location and the daemons, exo is not assumed either way.
    let unread = join(&MacosOutputs::default());
    assert_eq!(unread.network_setup, None);
    assert!(
        unread
            .blind_spots
            .contains(&"networksetup -getcurrentlocation: not captured".to_owned()),
        "{:?}",
        unread.blind_spots
    );
}

/// TN3205's capture of an active bridge0 over en2, en3, en4, with the
/// service named as the captures name it.
fn bridge(services: &str) -> NodeFacts {
    let outputs = MacosOutputs::default()
        .with(
            HostCommand::Ifconfig,
            Ok(fixture("ifconfig_bridge0_inactive_4members_IntelMac.txt")),
        )
        .with(
            HostCommand::ServiceOrder,
            Ok(fixture("networksetup_listnetworkserviceorder.txt")),
        )
        .with(HostCommand::AllServices, Ok(fixture(services)));
    join(&outputs)
}

#[test]
fn the_thunderbolt_bridge_service_back_on_warns() {
    let enabled = check(
        &bridge("networksetup_listallnetworkservices_bridge_enabled.txt"),
        "thunderbolt_bridge_service_off",
    );
    assert_eq!(enabled.status, CheckStatus::Warn, "{enabled:?}");
    assert!(
        enabled.evidence[0]
            .contains("its service \"Thunderbolt Bridge\" is enabled (macOS re-creates"),
        "{enabled:?}"
    );
    assert_eq!(
        enabled.fix,
        "sudo networksetup -setnetworkserviceenabled \"Thunderbolt Bridge\" off"
    );
    let disabled = check(
        &bridge("networksetup_listallnetworkservices_bridge_disabled.txt"),
        "thunderbolt_bridge_service_off",
    );
    assert_eq!(disabled.status, CheckStatus::Pass, "{disabled:?}");
    let unknown = check(
        &join(&MacosOutputs::default()),
        "thunderbolt_bridge_service_off",
    );
    assert_eq!(unknown.status, CheckStatus::Skipped, "{unknown:?}");
}
