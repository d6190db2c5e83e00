//! Where this node runs a rank of a job with ranks on other nodes, asks
//! the OS every few seconds which interface it sends to those nodes' cable
//! addresses by (macOS `route -n get`, Linux `ip -j route get`, each with
//! its timeout), and raises `job_off_mesh` when a route leaves by another
//! interface than the cable's ([`meshd_model::off_mesh`]). No job, no
//! command run.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{Alarm, MeshStatus, NodeId};
use meshd_model::off_mesh::{OffMeshWatch, RouteCheck, RouteSeen, job_peers};
use meshd_model::time::Moment;
use meshd_platform::route::{Lookup, route_interfaces};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cadence;
use crate::config::Config;
use crate::watch::facts::with_source;
use crate::watch::{Wake, next_wake, publish};

/// How often the routes are asked: two checks in a row raise the alarm,
/// well within the 10 s a user waits to learn why a job crawls.
const CHECK_EVERY: Duration = Duration::from_secs(3);

/// Runs until shutdown, publishing the active `job_off_mesh` alarms into
/// `alarms`; `status` is the node's published status (its jobs).
pub fn spawn(
    node: NodeId,
    mut configs: watch::Receiver<Arc<Config>>,
    status: watch::Receiver<Arc<MeshStatus>>,
    alarms: watch::Sender<Vec<Alarm>>,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        let mut config = configs.borrow_and_update().clone();
        // A check and the next: the window is a little under the interval.
        let mut judge = OffMeshWatch::new(node.clone(), CHECK_EVERY - Duration::from_millis(500));
        let mut tick = cadence::every(CHECK_EVERY);
        while let Some(wake) = next_wake(&mut tick, &mut configs, &shutdown).await {
            if let Wake::Reconfigured(new) = wake {
                config = new;
                continue;
            }
            let peers = job_peers(&status.borrow(), &node);
            let cables: Vec<(NodeId, std::net::IpAddr, String)> = config
                .links
                .iter()
                .filter(|link| peers.contains(&link.peer))
                .filter_map(|link| {
                    // Without the cable's interface there is nothing to
                    // tell the route from.
                    Some((
                        link.peer.clone(),
                        link.peer_address,
                        link.local_iface.clone()?,
                    ))
                })
                .collect();
            let checks = if cables.is_empty() {
                Vec::new()
            } else {
                check(&config, cables).await
            };
            let moment = Moment {
                now: Instant::now(),
                wall: SystemTime::now(),
            };
            publish(&alarms, judge.update(&checks, moment));
        }
    });
}

/// Asks the OS for the route to each cable's far address.
async fn check(
    config: &Config,
    cables: Vec<(NodeId, std::net::IpAddr, String)>,
) -> Vec<RouteCheck> {
    let platform = config.platform.clone();
    let addresses: Vec<std::net::IpAddr> = cables.iter().map(|(_, address, _)| *address).collect();
    // The lookups are processes: off the runtime.
    let answers = tokio::task::spawn_blocking(move || {
        with_source(&platform, |source, os| {
            route_interfaces(source, os, &addresses)
        })
    })
    .await;
    let answers = match answers {
        Ok(Ok(answers)) => answers,
        Ok(Err(why)) => {
            tracing::debug!("routes not read: {why}");
            return Vec::new();
        }
        Err(err) => {
            tracing::warn!("reading routes failed: {err}");
            return Vec::new();
        }
    };
    cables
        .into_iter()
        .map(|(peer, address, cable_iface)| {
            let seen = match answers.get(&address) {
                Some(Ok(Lookup::Route(egress))) => RouteSeen::Via {
                    interface: egress.interface.clone(),
                    route: egress.to_string(),
                },
                Some(Ok(Lookup::NoRoute { reason })) => RouteSeen::NoRoute(reason.clone()),
                Some(Err(err)) => RouteSeen::Unknown(err.to_string()),
                None => RouteSeen::Unknown("not asked".to_owned()),
            };
            RouteCheck {
                peer,
                address,
                cable_iface,
                seen,
            }
        })
        .collect()
}
