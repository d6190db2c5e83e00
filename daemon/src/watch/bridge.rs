//! Bridge loops and broadcast storms on this node: every
//! `watch.bridge.interval` it lists the bridges (Linux: sysfs; macOS:
//! `ifconfig -a`, plus `networksetup -listnetworkserviceorder` for the
//! service name a fix needs), runs the detector and publishes the alarms
//! it holds active.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_proto::domain::{Alarm, NodeId};
use meshd_proto::facts::OsKind;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, settings};
use crate::metrics::Metrics;
use meshd_model::bridge::{BridgeDetector, BridgeObservation, Os};
use meshd_platform::linux::net::read_bridges;
use meshd_platform::macos::{ifconfig, networksetup};
use meshd_platform::source::{HostCommand, LiveSource, Source};

const SYS_CLASS_NET: &str = "/sys/class/net";

/// The mesh ports: every link's `local_iface` plus `watch.bridge.mesh_ifaces`.
pub fn mesh_ifaces(config: &Config) -> BTreeSet<String> {
    config
        .links
        .iter()
        .filter_map(|l| l.local_iface.clone())
        .chain(config.watch.bridge.mesh_ifaces.iter().cloned())
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

fn sample_every(config: &Config) -> tokio::time::Interval {
    let mut tick =
        tokio::time::interval(config.watch.bridge.interval.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// Samples every `watch.bridge.interval`, following config reloads; on
/// macOS also at once when the network configuration changes, so a
/// re-enabled Thunderbolt Bridge is seen without waiting for the next tick.
pub fn spawn(
    mut configs: watch::Receiver<Arc<Config>>,
    node: NodeId,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> watch::Receiver<Vec<Alarm>> {
    let (tx, rx) = watch::channel(Vec::new());
    let os = this_os();
    let config = configs.borrow_and_update().clone();
    let mut detector = BridgeDetector::new(node, os, settings::storm(&config));
    let mut mesh = mesh_ifaces(&config);
    tokio::spawn(async move {
        let mut tick = sample_every(&config);
        let (network_changed, mut network_changes) = tokio::sync::mpsc::channel(1);
        // Kept for the life of the task: dropping it stops the watching.
        let _network_watch = (os == Os::MacOs).then(|| watch_network_config(network_changed));
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
                    let config = configs.borrow_and_update().clone();
                    detector.set_storm(settings::storm(&config));
                    mesh = mesh_ifaces(&config);
                    tick = sample_every(&config);
                    continue;
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
                    (b.name.as_str(), b.active, mesh_members)
                }),
                detector.rates(),
            );
            // Every sample, so `updated` says when the alarm was last seen;
            // the aggregator reads the channel on its own cadence.
            tx.send_replace(alarms);
        }
    });
    rx
}

/// macOS keeps its network configuration (services, the Thunderbolt
/// Bridge's enabled state) in this directory's preferences.plist.
const NETWORK_PREFERENCES: &str = "/Library/Preferences/SystemConfiguration";

fn watch_network_config(
    changed: tokio::sync::mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            // Full means a sample is already due: this one adds nothing.
            let _ = changed.try_send(());
        }
    });
    let mut watcher = match watcher {
        Ok(watcher) => watcher,
        Err(err) => {
            tracing::warn!(
                "cannot watch the network configuration, bridges are sampled on the interval only: {err}"
            );
            return None;
        }
    };
    match watcher.watch(
        Path::new(NETWORK_PREFERENCES),
        notify::RecursiveMode::NonRecursive,
    ) {
        Ok(()) => Some(watcher),
        Err(err) => {
            tracing::warn!(
                "cannot watch {NETWORK_PREFERENCES}, bridges are sampled on the interval only: {err}"
            );
            None
        }
    }
}

async fn sample(os: Os, mesh: &BTreeSet<String>) -> Result<Vec<BridgeObservation>, String> {
    match os {
        // sysfs files live in memory: reading a handful is microseconds, so
        // it runs inline like the load sampler.
        Os::Linux => linux_bridges(&LiveSource),
        Os::MacOs => {
            let mut bridges = macos_bridges(&capture(HostCommand::Ifconfig).await?);
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
            name: r.bridge.name,
            active: r.bridge.active,
            members: r.bridge.members,
            packets: r.packets,
            member_packets: r.member_packets,
            service: None,
        })
        .collect())
}

/// The bridges in `ifconfig -a` output. `ifconfig` shows members and
/// `status:` but no packet counters, so these carry none.
fn macos_bridges(text: &str) -> Vec<BridgeObservation> {
    ifconfig::parse_ifconfig(text)
        .into_iter()
        .filter(ifconfig::Interface::is_bridge)
        .map(|i| BridgeObservation {
            active: i.forwarding(),
            name: i.name,
            members: i.members,
            ..BridgeObservation::default()
        })
        .collect()
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
            "/../../shared/fixtures/macos/ifconfig_a_IntelMac_bridge0-inactive_plus-bridge100-vmnet.txt"
        ));
        let seen: Vec<(String, bool, Vec<String>, Option<u64>)> = macos_bridges(text)
            .into_iter()
            .map(|b| (b.name, b.active, b.members, b.packets))
            .collect();
        let members = |list: &[&str]| list.iter().map(|m| (*m).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            seen,
            [
                // `status: inactive` wins over UP,RUNNING.
                (
                    "bridge0".to_owned(),
                    false,
                    members(&["en1", "en2", "en3", "en4"]),
                    None
                ),
                // No status line: UP,RUNNING decides.
                ("bridge100".to_owned(), true, members(&["en10"]), None),
            ]
        );
    }

    #[tokio::test]
    async fn linux_sample_reads_this_machine() {
        if cfg!(target_os = "linux") {
            assert!(sample(Os::Linux, &BTreeSet::new()).await.is_ok());
        }
    }
}
