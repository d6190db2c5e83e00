//! One node, without I/O: what it decides each time it looks. Probe
//! statistics, what its book holds of the peers, its own alarms and facts,
//! and the two clocks come in; its status, the events, the update to send
//! its peers, the alerts to post and when to look again come out. The
//! daemon's aggregator drives it with real sockets and timers; the
//! whole-cluster simulation (model/tests/cluster.rs) drives many of them
//! with simulated ones, so what is tested is what runs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::facts::NodeFacts;
use meshd_domain::{
    Alarm, AlarmKind, ClockOffset, Counter, Event, Incarnation, LinkObservation, MeshStatus,
    NodeId, NodeIdentity, NodeLoad, PeerReply, RejectReason, ReportUpdate,
};

use crate::clock::ClockBook;
use crate::events::{self, Verdicts};
use crate::linkstats::ProbeStats;
use crate::observation::link_observation;
use crate::outbox::{Outbox, OutboxSettings, Snapshot};
use crate::peers::PeerView;
use crate::rdma::RdmaProbeEnd;
use crate::time::Moment;
use crate::verdict::{Engine, EngineSettings, ExpectedLink, LocalObservation, MeshInputs};

#[derive(Debug, Clone, PartialEq)]
pub struct NodeSettings {
    pub engine: EngineSettings,
    pub outbox: OutboxSettings,
}

/// What the node looks at, once.
#[derive(Debug)]
pub struct Look<'a> {
    pub moment: Moment,
    /// Each configured link's probe statistics, by the far end's node; a
    /// link whose prober does not run yet has none.
    pub probes: &'a BTreeMap<NodeId, ProbeStats>,
    /// Each link's active RDMA probe, by the far end's node; none when the
    /// probe is off.
    pub rdma: &'a BTreeMap<NodeId, RdmaProbeEnd>,
    /// What the book holds of each peer.
    pub peers: BTreeMap<NodeId, PeerView>,
    pub facts: Option<&'a Arc<NodeFacts>>,
    /// The ports' error counters, by port name.
    pub counters: &'a BTreeMap<String, Vec<Counter>>,
    /// The local watchers' active alarms.
    pub local_alarms: Vec<Alarm>,
    pub load: NodeLoad,
    /// How late this node's timers ran lately, or run now: a probe tick
    /// overdue at the look counts as late as it is overdue.
    pub lateness: Duration,
    /// Ask for an update to the peers even if only figures moved.
    pub urgent: bool,
}

/// What one look decided.
#[derive(Debug)]
pub struct Decision {
    pub status: MeshStatus,
    pub events: Vec<Event>,
    /// This node's links as observed now.
    pub links: Vec<LinkObservation>,
    /// The update to send on every stream, if one is due.
    pub update: Option<ReportUpdate>,
    /// Each peer's clock against this node's.
    pub clock_offsets: Vec<ClockOffset>,
    /// When to look again at the latest.
    pub next_look: Instant,
}

/// What a peer's reply asks of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyAction {
    Nothing,
    /// The peer knows a newer incarnation of this node than this one: take
    /// a larger one and reopen every stream.
    Reincarnate(Incarnation),
    /// The peer missed an update: send it everything on that stream.
    Resync,
    /// The peer refused for another reason (logged and counted by the
    /// caller).
    Refused(RejectReason, String),
}

#[derive(Debug)]
pub struct NodeCore {
    identity: NodeIdentity,
    configured: BTreeSet<NodeId>,
    expected: Vec<ExpectedLink>,
    settings: NodeSettings,
    engine: Engine,
    outbox: Outbox,
    clocks: ClockBook,
    /// What the next look's events are the changes from.
    last: Option<Verdicts>,
}

impl NodeCore {
    pub fn new(
        identity: NodeIdentity,
        configured: BTreeSet<NodeId>,
        expected: Vec<ExpectedLink>,
        settings: NodeSettings,
    ) -> Self {
        Self {
            engine: Engine::new(settings.engine),
            outbox: Outbox::new(settings.outbox),
            clocks: ClockBook::default(),
            last: None,
            identity,
            configured,
            expected,
            settings,
        }
    }

    pub fn identity(&self) -> &NodeIdentity {
        &self.identity
    }

    pub fn settings(&self) -> &NodeSettings {
        &self.settings
    }

    pub fn expected_links(&self) -> &[ExpectedLink] {
        &self.expected
    }

    /// A new config: membership, links and settings. Links that did not
    /// change keep their verdict history.
    pub fn reconfigure(
        &mut self,
        configured: BTreeSet<NodeId>,
        expected: Vec<ExpectedLink>,
        settings: NodeSettings,
    ) {
        self.engine.set_settings(settings.engine);
        self.outbox.set_settings(settings.outbox);
        self.clocks.retain(|peer| configured.contains(peer));
        self.configured = configured;
        self.expected = expected;
        self.settings = settings;
    }

    /// Looks once: builds this node's link observations, judges, decides
    /// what to send and post.
    pub fn look(&mut self, look: Look<'_>) -> Decision {
        let moment = look.moment;
        let local_links: Vec<LocalObservation> = self
            .expected
            .iter()
            .filter_map(|link| {
                let probes = look.probes.get(&link.remote.node)?;
                let mut observation = link_observation(
                    link,
                    probes,
                    look.rdma.get(&link.remote.node),
                    look.facts.map(Arc::as_ref),
                    look.counters,
                    moment,
                );
                // A probe tick that is overdue has not noted its lateness
                // yet, but the peers must learn it with the figures it
                // distorts: its peers' probes wait unanswered meanwhile.
                observation.lateness = observation.lateness.max(look.lateness);
                Some(LocalObservation {
                    observation,
                    at: probes.at,
                })
            })
            .collect();
        let clock_offsets = self.clocks.offsets(moment.now);
        let inputs = MeshInputs {
            local: self.identity.clone(),
            configured: self.configured.clone(),
            local_load: look.load,
            local_lateness: look.lateness,
            local_links,
            expected_links: self.expected.clone(),
            peers: look.peers,
            local_alarms: look.local_alarms,
            clock_offsets,
        };
        let evaluation = self.engine.evaluate(&inputs, moment);
        let status = evaluation.status;
        let events = events::diff(self.last.as_ref(), &status);
        self.last.get_or_insert_default().remember(&status);
        // The observations are judged; now they go out as they are.
        let links: Vec<LinkObservation> = inputs
            .local_links
            .into_iter()
            .map(|l| l.observation)
            .collect();
        let urgent = look.urgent || !events.is_empty();
        // Only this node can see that its own clock is off the mesh's: its
        // peers learn it from its reports (the alert leader posts it).
        let reported_alarms: Vec<Alarm> = inputs
            .local_alarms
            .iter()
            .chain(
                status
                    .alarms
                    .iter()
                    .filter(|a| a.kind == AlarmKind::ClockSkew && a.node == self.identity.id),
            )
            .cloned()
            .collect();
        let snapshot = Snapshot {
            links: &links,
            alarms: &reported_alarms,
            hears: &evaluation.hears,
            heard_on_management: &evaluation.heard_on_management,
            has_quorum: status.quorum.has_quorum,
            clock_offsets: &inputs.clock_offsets,
            facts: look.facts,
            load: look.load,
            lateness: look.lateness,
        };
        let update = self.outbox.next(&snapshot, moment, urgent);
        let next_look = [Some(evaluation.next_deadline), self.outbox.next_due()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(evaluation.next_deadline);
        Decision {
            status,
            events,
            links,
            update,
            clock_offsets: inputs.clock_offsets,
            next_look,
        }
    }

    /// Everything sent so far, for a stream that just opened.
    pub fn full_update(&self, moment: Moment) -> Option<ReportUpdate> {
        self.outbox.full(moment)
    }

    /// A peer's reply to one of this node's streams, arrived at `arrived`
    /// (wall) and `now` (monotonic).
    pub fn on_reply(
        &mut self,
        peer: &NodeId,
        reply: &PeerReply,
        arrived: SystemTime,
        now: Instant,
    ) -> ReplyAction {
        if let Some(sample) = reply.clock {
            self.clocks.on_sample(peer, sample, arrived, now);
        }
        match &reply.refusal {
            None if reply.resync => ReplyAction::Resync,
            None => ReplyAction::Nothing,
            Some(refusal) => match (refusal.reason, refusal.known_incarnation) {
                (RejectReason::OldIncarnation, Some(known))
                    if known >= self.identity.incarnation =>
                {
                    ReplyAction::Reincarnate(known)
                }
                (reason, _) => ReplyAction::Refused(reason, refusal.detail.clone()),
            },
        }
    }

    /// Takes an incarnation larger than `known`: the node restarted after
    /// its clock stepped back, and a peer still remembers the run before.
    /// What was sent so far starts over with the new incarnation.
    pub fn reincarnate(&mut self, known: Incarnation) {
        self.identity.incarnation =
            Incarnation(known.0.saturating_add(1).max(self.identity.incarnation.0));
        self.outbox = Outbox::new(self.settings.outbox);
    }
}
