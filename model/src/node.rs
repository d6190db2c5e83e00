//! One node, without I/O: what it decides each time it looks. Probe
//! statistics, what its book holds of the peers, its own alarms, facts and
//! latest process sample, and the two clocks come in; its whole status
//! (verdicts, alarms, boots, the cable map and checks), the events, the
//! update to send its peers, the figures behind its metrics and when to look
//! again come out. The daemon's aggregator drives it with real sockets and
//! timers; the whole-cluster simulation (model/tests/cluster.rs) drives many
//! of them with simulated ones, so what is tested is what runs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use meshd_domain::facts::NodeFacts;
use meshd_domain::jobs::JobRank;
use meshd_domain::{
    Alarm, AlarmKind, ClockOffset, Counter, Event, Incarnation, Lateness, LinkObservation,
    MeshStatus, NodeId, NodeIdentity, NodeLoad, PeerReply, RejectReason, ReportUpdate,
};

use crate::advice;
use crate::boot::{self, BootRules, BootTracker, Sighting};
use crate::clock::ClockBook;
use crate::events::{self, Verdicts};
use crate::job_mesh::{MeshJobs, Reported, local_ranks};
use crate::job_watch::{JobFigures, JobSettings, JobWatch, Sampled};
use crate::jobs::{MeshFault, mesh_fault};
use crate::linkstats::ProbeStats;
use crate::load::node_load;
use crate::observation::link_observation;
use crate::outbox::{Outbox, OutboxSettings, Snapshot};
use crate::peers::{BookSnapshot, PathLiveness, PeerView};
use crate::rdma::RdmaProbeEnd;
use crate::time::Moment;
use crate::topology::{Declared, TopologyCache, declared_cables};
use crate::verdict::{Engine, EngineSettings, ExpectedLink, LocalObservation, MeshInputs};

#[derive(Debug, Clone, PartialEq)]
pub struct NodeSettings {
    pub engine: EngineSettings,
    pub outbox: OutboxSettings,
    pub boot: BootRules,
    pub jobs: JobSettings,
    /// `thresholds.cpu_saturated`: a CPU busier than this saturates the node
    /// at a smaller lateness ([`crate::load`]).
    pub cpu_saturated_above: f64,
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
    /// What the book holds of the peers.
    pub book: BookSnapshot,
    pub facts: Option<&'a Arc<NodeFacts>>,
    /// The ports' error counters, by port name.
    pub counters: &'a BTreeMap<String, Vec<Counter>>,
    /// Whether each cable's interface has a carrier, by interface name,
    /// as the kernel's link-state events say (empty where they cannot be
    /// read).
    pub carriers: &'a BTreeMap<String, bool>,
    /// The local watchers' active alarms.
    pub local_alarms: Vec<Alarm>,
    /// The latest sample of this node's CPU, processes and RDMA data
    /// counters; `None` until the first (or where the CPU cannot be read).
    pub sampled: Option<&'a Sampled>,
    /// How late this node's timers ran lately, or run now: a probe tick
    /// overdue at the look counts as late as it is overdue.
    pub lateness: Lateness,
    /// Ask for an update to the peers even if only figures moved.
    pub urgent: bool,
}

/// What one look decided.
#[derive(Debug)]
pub struct Decision {
    /// Everything the status shows: verdicts, alarms, each node's boot,
    /// the cable map and the checks (not the figures, which readers ask
    /// for: [`crate::verdict::link_measurements`]).
    pub status: MeshStatus,
    pub events: Vec<Event>,
    /// This node's links as observed now.
    pub links: Vec<LinkObservation>,
    /// This node's load as judged.
    pub load: NodeLoad,
    /// What the book held of each peer, as judged.
    pub peers: BTreeMap<NodeId, PeerView>,
    /// Each peer's paths and whether they are up.
    pub paths: Vec<PathLiveness>,
    /// Links at least one end probes, by this node's probes and the peers'.
    pub links_observed: usize,
    /// What the job processes amount to, as of the latest sample; `None`
    /// before the first.
    pub jobs: Option<JobFigures>,
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
    boots: BootTracker,
    jobs: JobWatch,
    /// This node's job ranks as of its latest sample.
    ranks: Vec<JobRank>,
    /// Every job the mesh's nodes run.
    mesh_jobs: MeshJobs,
    /// The mesh fault involving this node as the last look saw it: what a
    /// busy job rank may be waiting on.
    fault: Option<MeshFault>,
    topology: TopologyCache,
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
            boots: BootTracker::new(settings.boot),
            jobs: JobWatch::new(identity.id.clone(), &settings.jobs),
            ranks: Vec::new(),
            mesh_jobs: MeshJobs::new(settings.jobs.mesh),
            fault: None,
            topology: TopologyCache::default(),
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

    /// A new config: membership, links and settings. Links that did not
    /// change keep their verdict history, members their boots, job ranks
    /// what their detectors held.
    pub fn reconfigure(
        &mut self,
        configured: BTreeSet<NodeId>,
        expected: Vec<ExpectedLink>,
        settings: NodeSettings,
    ) {
        self.engine.set_settings(settings.engine);
        self.outbox.set_settings(settings.outbox);
        self.clocks.retain(|peer| configured.contains(peer));
        self.boots.set_rules(settings.boot);
        self.boots.retain(&configured);
        self.jobs.reconfigure(&settings.jobs);
        self.mesh_jobs.set_rules(settings.jobs.mesh);
        self.topology.forget();
        self.configured = configured;
        self.expected = expected;
        self.settings = settings;
    }

    /// Looks once: builds this node's link observations, follows the
    /// members' boots and its own job ranks, judges, decides what to send
    /// and post.
    pub fn look(&mut self, mut look: Look<'_>) -> Decision {
        let moment = look.moment;
        let (inputs, boot_events) = self.inputs(&mut look);
        let evaluation = self.engine.evaluate(&inputs, moment);
        let mut status = evaluation.status;
        self.fault = mesh_fault(&status, &self.identity.id);
        boot::annotate(&mut status, &self.boots.view(moment.wall));
        self.map_cables(&mut status, &look, &inputs.peers);
        // Advice reads the checks (is RDMA enabled at both ends of a link
        // whose port is down?), and a hung job's fix quotes its link's.
        let mut status = advice::advised(status);
        self.judge_jobs(&mut status, look.sampled, &inputs.peers, moment);
        let mut events = events::diff(self.last.as_ref(), &status);
        self.last.get_or_insert_default().remember(&status);
        events.extend(boot_events);
        let paths = self.engine.path_liveness(&inputs.peers, moment.now);
        let links_observed = inputs.links_observed();
        let MeshInputs {
            local_links,
            local_alarms,
            local_load: load,
            clock_offsets,
            peers,
            ..
        } = inputs;
        // The observations are judged; now they go out as they are.
        let links: Vec<LinkObservation> = local_links.into_iter().map(|l| l.observation).collect();
        // Only this node can see that its own clock is off the mesh's: its
        // peers learn it from its reports (the alert leader posts it).
        let reported_alarms: Vec<Alarm> = local_alarms
            .into_iter()
            .chain(
                status
                    .alarms
                    .iter()
                    .filter(|a| a.kind == AlarmKind::ClockSkew && a.node == self.identity.id)
                    .cloned(),
            )
            .collect();
        let snapshot = Snapshot {
            links: &links,
            alarms: &reported_alarms,
            hears: &evaluation.hears,
            heard_on_management: &evaluation.heard_on_management,
            has_quorum: status.quorum.has_quorum,
            leader: status.quorum.leader.as_ref(),
            clock_offsets: &clock_offsets,
            facts: look.facts,
            jobs: &self.ranks,
            load,
            lateness: look.lateness,
        };
        let update = self
            .outbox
            .next(&snapshot, moment, look.urgent || !events.is_empty());
        Decision {
            status,
            events,
            links,
            load,
            peers,
            paths,
            links_observed,
            jobs: self.jobs.figures(),
            update,
            clock_offsets,
            next_look: self.next_look(evaluation.next_deadline),
        }
    }

    /// What the engine judges this look: this node's links and load, the
    /// peers' reports, the local watchers' alarms with the boots' and the
    /// job ranks' (both followed here first); and the boots' events.
    fn inputs(&mut self, look: &mut Look<'_>) -> (MeshInputs, Vec<Event>) {
        let moment = look.moment;
        let local_links = self.local_links(look, moment);
        let load = node_load(
            look.sampled.map(|s| s.sample.busy_ratio),
            look.lateness.worst,
            self.settings.cpu_saturated_above,
        );
        let boot_events = self.follow_boots(&look.book, look.facts, moment.wall);
        let mut local_alarms = std::mem::take(&mut look.local_alarms);
        local_alarms.extend(self.boots.alarms(moment.wall));
        local_alarms.extend_from_slice(self.jobs.judge(look.sampled, self.fault.as_ref()));
        let inputs = MeshInputs {
            local: self.identity.clone(),
            configured: self.configured.clone(),
            local_load: load,
            local_lateness: look.lateness,
            local_links,
            expected_links: self.expected.clone(),
            peers: std::mem::take(&mut look.book.views),
            local_alarms,
            clock_offsets: self.clocks.offsets(moment.now),
            refused_releases: std::mem::take(&mut look.book.refused_releases),
        };
        (inputs, boot_events)
    }

    /// Puts the cable map and the checks in `status`: from the members'
    /// facts and the cables this node and its peers declare.
    fn map_cables(
        &mut self,
        status: &mut MeshStatus,
        look: &Look<'_>,
        peers: &BTreeMap<NodeId, PeerView>,
    ) {
        let declared = declared_cables(
            self.expected
                .iter()
                .map(|l| Declared {
                    local: &l.local,
                    remote: &l.remote,
                })
                .chain(peers.values().flat_map(|p| {
                    p.report.links.iter().map(|o| Declared {
                        local: &o.local,
                        remote: &o.remote,
                    })
                })),
        );
        let topology = self.topology.refresh(
            &self.configured,
            &self.identity.id,
            look.facts,
            &look.book,
            declared,
        );
        status.cables.clone_from(&topology.cables);
        status.checks.clone_from(&topology.checks);
    }

    /// Puts every job the mesh runs in `status`, with a `job_hung` alarm
    /// for each that cannot go on: from this node's ranks in `sampled` and
    /// the ranks its peers report.
    fn judge_jobs(
        &mut self,
        status: &mut MeshStatus,
        sampled: Option<&Sampled>,
        peers: &BTreeMap<NodeId, PeerView>,
        moment: Moment,
    ) {
        if let Some(sampled) = sampled {
            let jobs = &self.settings.jobs;
            self.ranks = local_ranks(
                &sampled.sample.processes,
                jobs.hung.busy_cores,
                jobs.network_namespace,
            );
        }
        let reports: Vec<Reported<'_>> = std::iter::once(Reported {
            node: &self.identity.id,
            ranks: &self.ranks,
        })
        // A peer's report before its first update says nothing yet.
        .chain(
            peers
                .iter()
                .filter(|(_, view)| view.report.sequence > 0)
                .map(|(node, view)| Reported {
                    node,
                    ranks: &view.report.jobs,
                }),
        )
        .collect();
        let (jobs, alarms) = self.mesh_jobs.judge(&reports, status, moment);
        status.jobs = jobs;
        status.alarms.extend(alarms);
    }

    /// The engine's deadline, or the next heartbeat if it comes sooner.
    fn next_look(&self, deadline: Instant) -> Instant {
        self.outbox
            .next_due()
            .map_or(deadline, |due| due.min(deadline))
    }

    /// This node's observation of each configured link it has probe
    /// statistics for.
    fn local_links(&self, look: &Look<'_>, moment: Moment) -> Vec<LocalObservation> {
        self.expected
            .iter()
            .filter_map(|link| {
                let probes = look.probes.get(&link.remote.node)?;
                let mut observation = link_observation(
                    link,
                    probes,
                    look.rdma.get(&link.remote.node),
                    look.facts.map(Arc::as_ref),
                    look.counters,
                    link.local
                        .iface
                        .as_ref()
                        .and_then(|iface| look.carriers.get(iface).copied()),
                    moment,
                );
                // A probe tick that is overdue has not noted its lateness
                // yet, but the peers must learn it with the figures it
                // distorts: its peers' probes wait unanswered meanwhile.
                observation.lateness = observation.lateness.max(look.lateness.worst);
                Some(LocalObservation {
                    observation,
                    at: probes.at,
                })
            })
            .collect()
    }

    /// Takes every member's run and boot as this look sees them (this
    /// node's own, and each peer's from its latest report and facts);
    /// returns the events of what changed: restarts, reboots, panics.
    fn follow_boots(
        &mut self,
        book: &BookSnapshot,
        own_facts: Option<&Arc<NodeFacts>>,
        wall: SystemTime,
    ) -> Vec<Event> {
        let mut changes = Vec::new();
        for member in &self.configured {
            let sighting = if *member == self.identity.id {
                Sighting {
                    node: member,
                    incarnation: Some(self.identity.incarnation),
                    facts: own_facts.map(Arc::as_ref),
                }
            } else {
                Sighting {
                    node: member,
                    incarnation: book.views.get(member).map(|v| v.report.sender.incarnation),
                    facts: book.facts.get(member).map(Arc::as_ref),
                }
            };
            changes.extend(self.boots.observe(sighting, wall));
        }
        changes
            .iter()
            .map(|change| boot::event(change, &self.identity.id, wall))
            .collect()
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
