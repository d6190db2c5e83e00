//! The set of probed links follows the config: on a reload, links that did
//! not change keep their prober (and its history), removed ones stop, new
//! ones start.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{LinkPorts, ProbedLink, ProberSettings, supervise_link};
use crate::metrics::Metrics;
use meshd_model::verdict::LocalObservation;

/// What makes a prober: a change of any of it restarts that link's prober.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct LinkSpec {
    local: meshd_proto::domain::LinkEnd,
    remote: meshd_proto::domain::LinkEnd,
    ports: LinkPorts,
    expected_speed_bps: Option<u64>,
}

#[derive(Debug)]
struct Running {
    stop: CancellationToken,
    observations: watch::Receiver<Option<LocalObservation>>,
}

#[derive(Debug)]
pub struct ProbeManager {
    settings: ProberSettings,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    links: BTreeMap<LinkSpec, Running>,
}

impl ProbeManager {
    pub fn new(
        links: &[ProbedLink],
        settings: ProberSettings,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Self {
        let mut manager = Self {
            settings,
            metrics,
            shutdown,
            links: BTreeMap::new(),
        };
        manager.apply(links, settings);
        manager
    }

    /// Brings the running probers in line with `links`; new probe settings
    /// restart every prober, since they change what a probe is.
    pub fn apply(&mut self, links: &[ProbedLink], settings: ProberSettings) {
        if settings != self.settings {
            self.stop_all();
            self.settings = settings;
        }
        let wanted: BTreeMap<LinkSpec, &ProbedLink> = links
            .iter()
            .map(|l| {
                let spec = LinkSpec {
                    local: l.link.local.clone(),
                    remote: l.link.remote.clone(),
                    ports: l.ports,
                    expected_speed_bps: l.link.expected_speed_bps,
                };
                (spec, l)
            })
            .collect();
        self.links.retain(|spec, running| {
            let keep = wanted.contains_key(spec);
            if !keep {
                running.stop.cancel();
            }
            keep
        });
        for (spec, link) in wanted {
            if self.links.contains_key(&spec) {
                continue;
            }
            let stop = self.shutdown.child_token();
            let observations = supervise_link(
                link.link.local.clone(),
                link.link.remote.clone(),
                link.ports,
                link.link.expected_speed_bps,
                self.settings,
                self.metrics.clone(),
                stop.clone(),
            );
            self.links.insert(spec, Running { stop, observations });
        }
    }

    fn stop_all(&mut self) {
        for running in self.links.values() {
            running.stop.cancel();
        }
        self.links.clear();
    }

    /// The latest observation of every link whose prober runs.
    pub fn observations(&self) -> Vec<LocalObservation> {
        self.links
            .values()
            .filter_map(|r| r.observations.borrow().clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    use meshd_proto::domain::{Incarnation, LinkEnd, NodeId, NodeIdentity};

    use super::*;
    use crate::config::ProbeConfig;
    use meshd_model::verdict::ExpectedLink;

    fn link(peer: &str, local: u8, remote: u8) -> ProbedLink {
        let end = |node: &str, host: u8| LinkEnd {
            address: Some(IpAddr::V4(Ipv4Addr::new(127, 78, 0, host))),
            ..LinkEnd::node_only(NodeId::new(node).expect("id"))
        };
        ProbedLink {
            link: ExpectedLink {
                local: end("a", local),
                remote: end(peer, remote),
                expected_speed_bps: None,
            },
            ports: LinkPorts {
                local: 7421,
                peer: 7421,
            },
        }
    }

    fn channels(manager: &ProbeManager) -> Vec<watch::Receiver<Option<LocalObservation>>> {
        manager
            .links
            .values()
            .map(|r| r.observations.clone())
            .collect()
    }

    #[tokio::test]
    async fn a_reload_keeps_unchanged_probers_and_restarts_only_what_changed() {
        let identity = NodeIdentity {
            id: NodeId::new("a").expect("id"),
            incarnation: Incarnation(1),
            version: "t".into(),
            hostname: "a".into(),
        };
        let metrics = Arc::new(Metrics::new(&identity));
        let shutdown = CancellationToken::new();
        let settings = crate::config::settings::prober(&ProbeConfig::default());
        let (ab, ac) = (link("b", 1, 2), link("c", 3, 4));
        let mut manager = ProbeManager::new(
            &[ab.clone(), ac.clone()],
            settings,
            metrics,
            shutdown.clone(),
        );
        let before = channels(&manager);
        assert_eq!(before.len(), 2);

        // The same links: the very same probers go on.
        manager.apply(&[ab.clone(), ac.clone()], settings);
        let same = channels(&manager);
        assert!(before.iter().zip(&same).all(|(x, y)| x.same_channel(y)));

        // One link gone: its prober stops, the other one stays.
        manager.apply(std::slice::from_ref(&ab), settings);
        let kept = channels(&manager);
        assert_eq!(kept.len(), 1);
        assert!(kept[0].same_channel(&before[0]));

        // The peer's responder moved to another port: that prober restarts.
        let moved = ProbedLink {
            ports: LinkPorts {
                peer: 7500,
                ..ab.ports
            },
            ..ab.clone()
        };
        manager.apply(std::slice::from_ref(&moved), settings);
        let restarted = channels(&manager);
        assert_eq!(restarted.len(), 1);
        assert!(!restarted[0].same_channel(&before[0]));

        // New probe settings change what a probe is: every prober restarts.
        let slower = ProberSettings {
            interval: Duration::from_millis(200),
            ..settings
        };
        manager.apply(std::slice::from_ref(&moved), slower);
        let again = channels(&manager);
        assert_eq!(again.len(), 1);
        assert!(!again[0].same_channel(&restarted[0]));
        shutdown.cancel();
    }
}
