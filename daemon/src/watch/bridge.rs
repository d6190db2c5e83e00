//! Bridge loops and broadcast storms on this node: every
//! `watch.bridge.interval` it lists the bridges (Linux: sysfs; macOS:
//! `ifconfig -a`, `netstat -i -b -n` for their packet counters, plus
//! `networksetup -listnetworkserviceorder` for the service name a fix
//! needs), runs the detector and publishes the alarms it holds active.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::facts::{NodeFacts, OsKind};
use meshd_domain::{Alarm, NodeId};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, settings};
use crate::metrics::Metrics;
use crate::watch::facts::FactsFeed;
use meshd_model::bridge::{BridgeDetector, BridgeObservation, Os};
use meshd_platform::linux::net::read_bridges;
use meshd_platform::macos::{ifconfig, netstat, networksetup};
use meshd_platform::source::{HostCommand, LiveSource, Source};

const SYS_CLASS_NET: &str = "/sys/class/net";

/// The mesh ports: every link's `local_iface`, `watch.bridge.mesh_ifaces`,
/// and on a Mac the interface of every Thunderbolt port the platform facts
/// list (discovery finds the cables; the config need not name them).
pub fn mesh_ifaces(config: &Config, facts: Option<&NodeFacts>) -> BTreeSet<String> {
    let discovered = facts
        .filter(|f| f.os == OsKind::Macos)
        .into_iter()
        .flat_map(|f| &f.ports)
        .filter(|p| !p.iface.is_empty())
        .map(|p| p.iface.clone());
    config
        .links
        .iter()
        .filter_map(|l| l.local_iface.clone())
        .chain(config.watch.bridge.mesh_ifaces.iter().cloned())
        .chain(discovered)
        .collect()
}

/// The detector's view of the platform the platform layer chose: macOS
/// commands there, sysfs everywhere else.
fn this_os() -> Os {
    match meshd_platform::this_os() {
        OsKind::Macos => Os::MacOs,
        OsKind::Linux | OsKind::Other => Os::Linux,
    }
}

fn sample_every(config: &Config) -> crate::cadence::Ticker {
    crate::cadence::every(config.watch.bridge.interval.max(Duration::from_millis(100)))
}

/// Samples every `watch.bridge.interval`, following config reloads; on
/// macOS also at once when the network configuration changes, so a
/// re-enabled Thunderbolt Bridge is seen without waiting for the next tick,
/// and when the platform facts (`facts`, re-read after a hotplug) list
/// other Thunderbolt ports.
pub fn spawn(
    mut configs: watch::Receiver<Arc<Config>>,
    mut facts: FactsFeed,
    node: NodeId,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> watch::Receiver<Vec<Alarm>> {
    let (tx, rx) = watch::channel(Vec::new());
    let os = this_os();
    let mut config = configs.borrow_and_update().clone();
    let mut detector = BridgeDetector::new(node, os, settings::storm(&config));
    let mut mesh = mesh_ifaces(&config, facts.borrow_and_update().as_deref());
    tokio::spawn(async move {
        let mut tick = sample_every(&config);
        let (network_changed, mut network_changes) = tokio::sync::mpsc::channel(1);
        // Kept for the life of the task: dropping it stops the watching.
        let _network_watch =
            (os == Os::MacOs).then(|| crate::watch::network::watch_network_config(network_changed));
        let mut facts_open = true;
        let mut failing = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
                Some(()) = network_changes.recv() => {}
                changed = configs.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    config = configs.borrow_and_update().clone();
                    detector.set_storm(settings::storm(&config));
                    mesh = mesh_ifaces(&config, facts.borrow().as_deref());
                    tick = sample_every(&config);
                    continue;
                }
                // The ports changed (a hotplug, a new read): sample at once
                // with the new mesh ports.
                changed = facts.changed(), if facts_open => {
                    if changed.is_err() {
                        facts_open = false;
                        continue;
                    }
                    let discovered = mesh_ifaces(&config, facts.borrow_and_update().as_deref());
                    if discovered == mesh {
                        continue;
                    }
                    mesh = discovered;
                }
            }
            let bridges = match sample(os, &mesh).await {
                Ok(bridges) => {
                    if failing {
                        tracing::info!("bridge watcher reads bridges again");
                        failing = false;
                    }
                    bridges
                }
                Err(err) => {
                    // Keep the alarms held so far: a failed read is no
                    // evidence that a loop went away. Warn once per outage.
                    if !failing {
                        tracing::warn!("bridge watcher cannot read bridges: {err}");
                        failing = true;
                    }
                    continue;
                }
            };
            let alarms = detector.observe(&bridges, &mesh, Instant::now(), SystemTime::now());
            metrics.watchers.record_bridges(
                bridges.iter().map(|b| {
                    let mesh_members = b.members.iter().filter(|m| mesh.contains(*m)).count();
                    (b.name.as_str(), b.active == Some(true), mesh_members)
                }),
                detector.rates(),
            );
            // Only a change wakes the aggregator; an active alarm changes
            // every sample (`updated` says when it was last seen).
            crate::watch::publish(&tx, alarms);
        }
    });
    rx
}

async fn sample(os: Os, mesh: &BTreeSet<String>) -> Result<Vec<BridgeObservation>, String> {
    match os {
        // sysfs files live in memory: reading a handful is microseconds, so
        // it runs inline like the load sampler.
        Os::Linux => linux_bridges(&LiveSource),
        Os::MacOs => {
            let mut bridges = macos_bridges(&capture(HostCommand::Ifconfig).await?);
            if !bridges.is_empty() {
                match capture(HostCommand::InterfaceCounters).await {
                    Ok(text) => add_macos_counters(&mut bridges, &text),
                    // No rate this sample: a storm neither starts nor ends.
                    Err(err) => tracing::debug!("no bridge packet counters: {err}"),
                }
            }
            // The service name is only needed for a fix, so networksetup
            // runs only when a bridge holds a mesh port.
            if bridges
                .iter()
                .any(|b| b.members.iter().any(|m| mesh.contains(m)))
            {
                match capture(HostCommand::ServiceOrder).await {
                    Ok(text) => {
                        let services = networksetup::parse_service_order(&text);
                        for bridge in &mut bridges {
                            bridge.service =
                                networksetup::service_for_device(&services, &bridge.name)
                                    .map(|s| s.name.clone());
                        }
                    }
                    // The alarm still goes out, with the generic fix.
                    Err(err) => tracing::debug!("no service names: {err}"),
                }
            }
            Ok(bridges)
        }
    }
}

/// The bridges under `/sys/class/net` as `source` shows it, with the
/// counters the storm detector uses (see the platform crate's `linux::net`
/// for which counters and why). Pieces that vanished while being read are
/// logged and left out; only an unlistable `/sys/class/net` fails.
pub fn linux_bridges(source: &dyn Source) -> Result<Vec<BridgeObservation>, String> {
    let read = read_bridges(source).map_err(|e| format!("{SYS_CLASS_NET}: {e}"))?;
    for problem in &read.problems {
        tracing::debug!("bridge sample: {problem}");
    }
    Ok(read
        .bridges
        .into_iter()
        .map(|r| BridgeObservation {
            active: r.bridge.forwarding(),
            name: r.bridge.name,
            members: r.bridge.members,
            packets: r.packets,
            member_packets: r.member_packets,
            service: None,
        })
        .collect())
}

/// The bridges in `ifconfig -a` output, forwarding by their flags and
/// status. `ifconfig` shows no packet counters; [`add_macos_counters`]
/// adds them.
fn macos_bridges(text: &str) -> Vec<BridgeObservation> {
    ifconfig::parse_ifconfig(text)
        .into_iter()
        .filter(ifconfig::Interface::is_bridge)
        .map(|i| BridgeObservation {
            active: i.bridge_fact().forwarding(),
            name: i.name,
            members: i.members,
            ..BridgeObservation::default()
        })
        .collect()
}

/// Each bridge's input packets from `netstat -i -b -n`: XNU counts every
/// broadcast and multicast frame a member receives on the bridge
/// interface as well, on every pass round a loop (see the platform
/// crate's `macos::netstat`). Members get none: their own input counts
/// the job's unicast traffic too.
fn add_macos_counters(bridges: &mut [BridgeObservation], netstat_output: &str) {
    match netstat::parse_netstat_interfaces(netstat_output) {
        Ok(counters) => {
            for problem in &counters.problems {
                tracing::debug!("bridge counters: {problem}");
            }
            for bridge in bridges {
                bridge.packets = counters.get(&bridge.name).map(|c| c.input_packets);
            }
        }
        Err(err) => {
            tracing::debug!("bridge counters: {}: {err}", HostCommand::InterfaceCounters);
            for bridge in bridges {
                bridge.packets = None;
            }
        }
    }
}

/// One of the platform layer's commands, under its timeout, on the
/// blocking pool.
async fn capture(command: HostCommand) -> Result<String, String> {
    tokio::task::spawn_blocking(move || LiveSource.capture(command))
        .await
        .map_err(|e| format!("{command}: {e}"))?
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macos_bridges_are_the_bridge_stanzas_of_ifconfig() {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../platform/tests/fixtures/macos-captures/ifconfig_a_IntelMac_bridge0-inactive_plus-bridge100-vmnet.txt"
        ));
        /// (name, forwarding, members, packets)
        type Seen = (String, Option<bool>, Vec<String>, Option<u64>);
        let seen: Vec<Seen> = macos_bridges(text)
            .into_iter()
            .map(|b| (b.name, b.active, b.members, b.packets))
            .collect();
        let members = |list: &[&str]| list.iter().map(|m| (*m).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            seen,
            [
                // UP,RUNNING, but `status: inactive`: no member has link.
                (
                    "bridge0".to_owned(),
                    Some(false),
                    members(&["en1", "en2", "en3", "en4"]),
                    None
                ),
                ("bridge100".to_owned(), Some(true), members(&["en10"]), None),
            ]
        );
    }

    #[test]
    fn a_bridge_taken_down_does_not_forward_although_its_status_says_active() {
        // TN3205's active bridge0, as `sudo ifconfig bridge0 down` leaves
        // it: the flags lose UP and RUNNING, XNU's status line stays.
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../platform/tests/fixtures/macos-captures/ifconfig_bridge0_active_TN3205_excerpt.txt"
        ));
        let up = macos_bridges(text);
        assert_eq!(up[0].active, Some(true));
        let down = text.replacen(
            "flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST>",
            "flags=8822<BROADCAST,SMART,SIMPLEX,MULTICAST>",
            1,
        );
        assert_eq!(macos_bridges(&down)[0].active, Some(false));
    }

    #[test]
    fn macos_bridges_get_their_input_packets_from_netstat() {
        let netstat = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../platform/tests/fixtures/macos/netstat_ib_AppleSilicon_bridge0-en2-en4.txt"
        ));
        let mut bridges = vec![
            BridgeObservation {
                name: "bridge0".into(),
                ..BridgeObservation::default()
            },
            BridgeObservation {
                name: "bridge100".into(),
                ..BridgeObservation::default()
            },
        ];
        add_macos_counters(&mut bridges, netstat);
        assert_eq!(bridges[0].packets, Some(0));
        assert_eq!(bridges[1].packets, None, "not in the output: no rate");
        assert!(bridges[0].member_packets.is_empty());
        add_macos_counters(&mut bridges, "netstat: sysctl: Operation not permitted\n");
        assert_eq!(bridges[0].packets, None);
    }

    #[test]
    fn mesh_ports_are_the_configured_ones_and_a_macs_discovered_thunderbolt_ports() {
        use meshd_domain::facts::PortFact;
        let config = Config::parse(
            "[[peers]]\nid = \"b\"\naddress = \"10.0.0.2:7420\"\n\
             [[links]]\npeer = \"b\"\nlocal_iface = \"en2\"\n\
             local_address = \"10.254.0.1\"\npeer_address = \"10.254.0.2\"\n\
             [watch.bridge]\nmesh_ifaces = [\"en9\"]\n\
             [listen]\nmesh = \"10.0.0.1:7420\"\n[tls]\ninsecure = true\n",
            "meshd.toml",
            "a",
        )
        .expect("valid");
        let port = |iface: &str| PortFact {
            iface: iface.into(),
            ..PortFact::default()
        };
        let mut facts = NodeFacts {
            os: OsKind::Macos,
            // Thunderbolt 1..3 as en1, en6, en2 (the M5 Max order), and a
            // port whose interface is unknown.
            ports: vec![port("en1"), port("en6"), port("en2"), port("")],
            ..NodeFacts::default()
        };
        let names = |set: BTreeSet<String>| set.into_iter().collect::<Vec<_>>();
        assert_eq!(names(mesh_ifaces(&config, None)), ["en2", "en9"]);
        assert_eq!(
            names(mesh_ifaces(&config, Some(&facts))),
            ["en1", "en2", "en6", "en9"]
        );
        // Linux facts list RDMA NICs, which may be bridged on purpose
        // (VMs): only the configured ports count there.
        facts.os = OsKind::Linux;
        assert_eq!(names(mesh_ifaces(&config, Some(&facts))), ["en2", "en9"]);
    }

    #[tokio::test]
    async fn linux_sample_reads_this_machine() {
        if cfg!(target_os = "linux") {
            assert!(sample(Os::Linux, &BTreeSet::new()).await.is_ok());
        }
    }
}
