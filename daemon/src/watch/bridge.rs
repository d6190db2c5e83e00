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
use tokio::process::Command;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::model::bridge::{BridgeDetector, BridgeObservation, Os, StormSettings};
use crate::platform::{bridge_linux, bridge_macos};

/// `ifconfig` answers in milliseconds and `networksetup` in well under a
/// second; anything slower is a wedged system, and the sample is skipped.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

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

/// The one place the platform is chosen.
fn this_os() -> Os {
    if cfg!(target_os = "macos") {
        Os::MacOs
    } else {
        Os::Linux
    }
}

pub fn spawn(
    config: &Config,
    node: NodeId,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> watch::Receiver<Vec<Alarm>> {
    let (tx, rx) = watch::channel(Vec::new());
    let settings = &config.watch.bridge;
    let os = this_os();
    let mut detector = BridgeDetector::new(
        node,
        os,
        StormSettings {
            packets_per_second: settings.storm_packets_per_second,
            window: settings.storm_window,
        },
    );
    let mesh = mesh_ifaces(config);
    let interval = settings.interval.max(Duration::from_millis(100));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
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
            metrics.record_bridges(
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

async fn sample(os: Os, mesh: &BTreeSet<String>) -> Result<Vec<BridgeObservation>, String> {
    match os {
        // sysfs files live in memory: reading a handful is microseconds, so
        // it runs inline like the load sampler.
        Os::Linux => bridge_linux::read_bridges(Path::new(SYS_CLASS_NET))
            .map_err(|e| format!("{SYS_CLASS_NET}: {e}")),
        Os::MacOs => {
            let mut bridges =
                bridge_macos::parse_ifconfig_bridges(&run("ifconfig", &["-a"]).await?);
            // The service name is only needed for a fix, so networksetup
            // runs only when a bridge holds a mesh port.
            if bridges
                .iter()
                .any(|b| b.members.iter().any(|m| mesh.contains(m)))
            {
                match run("networksetup", &["-listnetworkserviceorder"]).await {
                    Ok(text) => {
                        let services = bridge_macos::parse_service_order(&text);
                        for bridge in &mut bridges {
                            bridge.service =
                                bridge_macos::service_for_device(&services, &bridge.name)
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

/// Runs a command under [`COMMAND_TIMEOUT`]; the child is killed when the
/// timeout drops it.
async fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(COMMAND_TIMEOUT, output).await {
        Err(_) => Err(format!(
            "{program} did not answer within {}",
            humantime::format_duration(COMMAND_TIMEOUT)
        )),
        Ok(Err(err)) => Err(format!("cannot run {program}: {err}")),
        Ok(Ok(out)) if !out.status.success() => Err(format!(
            "{program} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(Ok(out)) => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn commands_fail_and_succeed() {
        assert_eq!(run("sh", &["-c", "echo hi"]).await.as_deref(), Ok("hi\n"));
        assert!(run("sh", &["-c", "exit 3"]).await.is_err());
        assert!(
            run("/nonexistent/meshd-no-such-program", &[])
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn linux_sample_reads_this_machine() {
        if cfg!(target_os = "linux") {
            assert!(sample(Os::Linux, &BTreeSet::new()).await.is_ok());
        }
    }
}
