//! The set of probed links follows the config: on a reload, links that did
//! not change keep their prober (and its history), removed ones stop, new
//! ones start.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{ProberSettings, supervise_link};
use crate::metrics::Metrics;
use crate::model::verdict::{ExpectedLink, LocalObservation};

/// What makes a prober: a change of any of it restarts that link's prober.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct LinkSpec {
    local: meshd_proto::domain::LinkEnd,
    remote: meshd_proto::domain::LinkEnd,
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
        links: &[ExpectedLink],
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
    pub fn apply(&mut self, links: &[ExpectedLink], settings: ProberSettings) {
        if settings != self.settings {
            self.stop_all();
            self.settings = settings;
        }
        let wanted: BTreeMap<LinkSpec, &ExpectedLink> = links
            .iter()
            .map(|l| {
                let spec = LinkSpec {
                    local: l.local.clone(),
                    remote: l.remote.clone(),
                    expected_speed_bps: l.expected_speed_bps,
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
                link.local.clone(),
                link.remote.clone(),
                link.expected_speed_bps,
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

    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }
}
