//! The verdict engine: from this node's own link observations and the
//! freshest report of every peer to verdicts on every node and link, with
//! the evidence behind each and the time it started. Every node runs the same
//! engine over (nearly) the same reports, so they agree without a leader.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd_proto::domain::{
    Alarm, AlarmKind, Blame, LinkEnd, LinkMeasurement, LinkObservation, LinkState, LinkVerdict,
    MeshStatus, NodeId, NodeIdentity, NodeLoad, NodeState, NodeVerdict, Quorum, Severity,
};

use super::intake::Received;
use super::link::{EndView, LinkRules, LinkTracker, assess};
use super::quorum;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineSettings {
    /// A peer whose latest report is older than this is suspect: its links'
    /// verdicts are held until it is known to be up or down. Shorter than
    /// `LinkRules::down_after`, so a dead node is suspected before its
    /// silent links could be blamed.
    pub suspect_after: Duration,
    /// A report older than this is not fresh: its sender is no quorum member.
    pub stale_after: Duration,
    /// A peer's silence on a link is assumed to go on growing for at most
    /// this long after its report (one report interval): that lets every
    /// node reach a verdict as soon as the ends do, without letting a late
    /// report turn a healthy link silent.
    pub max_extrapolation: Duration,
    pub link: LinkRules,
}

impl EngineSettings {
    /// Two missed reports make a peer suspect.
    pub fn new(report_interval: Duration, stale_after: Duration, link: LinkRules) -> Self {
        Self {
            suspect_after: report_interval.saturating_mul(2).min(stale_after),
            stale_after,
            max_extrapolation: report_interval,
            link,
        }
    }
}

/// One of this node's own link observations and when it was made.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalObservation {
    pub observation: LinkObservation,
    pub at: SystemTime,
}

/// A cable this node is configured to have, so it is judged even before
/// (or without) any observation of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedLink {
    pub local: LinkEnd,
    pub remote: LinkEnd,
    /// What the cable should negotiate, when the config says.
    pub expected_speed_bps: Option<u64>,
}

/// Everything the engine looks at in one evaluation.
#[derive(Debug, Clone)]
pub struct MeshInputs {
    pub local: NodeIdentity,
    /// This node and its configured peers.
    pub configured: BTreeSet<NodeId>,
    pub local_load: NodeLoad,
    pub local_links: Vec<LocalObservation>,
    pub expected_links: Vec<ExpectedLink>,
    /// The latest accepted report of each peer.
    pub reports: BTreeMap<NodeId, Arc<Received>>,
    pub local_alarms: Vec<Alarm>,
}

impl MeshInputs {
    /// Links that at least one end currently probes, by this node's own
    /// observations and the peers' latest reports.
    pub fn links_observed(&self) -> usize {
        let observed: BTreeSet<(&NodeId, &NodeId)> = self
            .local_links
            .iter()
            .map(|l| &l.observation)
            .chain(self.reports.values().flat_map(|r| r.report.links.iter()))
            .filter(|o| o.probes_sent_total > 0)
            .map(|o| {
                let (x, y) = (&o.local.node, &o.remote.node);
                if x <= y { (x, y) } else { (y, x) }
            })
            .collect();
        observed.len()
    }

    /// Each end's latest figures: this node's own probes, then every peer
    /// report held, each with when this node got it.
    pub fn measurements(&self) -> Vec<LinkMeasurement> {
        link_measurements(
            self.local_links.iter().map(|l| (&l.observation, l.at)),
            &self.reports,
        )
    }
}

/// Each end's latest figures: this node's own observations (with when they
/// were made), then every peer report held (with when it arrived).
pub fn link_measurements<'a>(
    own: impl Iterator<Item = (&'a LinkObservation, SystemTime)>,
    reports: &BTreeMap<NodeId, Arc<Received>>,
) -> Vec<LinkMeasurement> {
    let own = own.map(|(o, at)| LinkMeasurement::of(o, at));
    let peers = reports
        .values()
        .flat_map(|r| r.report.links.iter().map(|o| LinkMeasurement::of(o, r.at)));
    own.chain(peers).collect()
}

/// A member's position in the sorted configured set. Links and node states
/// are looked up by these small numbers rather than by comparing names:
/// at 256 nodes an evaluation touches 65 000 observations.
type Member = u16;

/// Links are one cable per pair of nodes (a full mesh or a ring), keyed by
/// the pair of member positions, lower first.
type LinkKey = (Member, Member);

fn link_key(x: Member, y: Member) -> LinkKey {
    (x.min(y), x.max(y))
}

/// Evidence names at most this many nodes ("heard by a, b, c and 250 more").
const MAX_NAMED: usize = 5;

fn name_some(names: &[&str]) -> String {
    if names.len() <= MAX_NAMED {
        names.join(", ")
    } else {
        format!(
            "{} and {} more",
            names[..MAX_NAMED].join(", "),
            names.len() - MAX_NAMED
        )
    }
}

#[derive(Debug)]
struct KnownLink {
    a: LinkEnd,
    b: LinkEnd,
    tracker: LinkTracker,
    /// Set while the link is held down because an end node is down.
    node_blamed: Option<NodeId>,
}

/// Keeps what must outlive one evaluation: the links seen so far (a dead
/// node's links stay judged), their hysteresis, and since when each node
/// verdict holds.
#[derive(Debug)]
pub struct Engine {
    settings: EngineSettings,
    /// The configured members, sorted: `links` is keyed by positions in it.
    roster: Vec<NodeId>,
    node_since: BTreeMap<NodeId, (NodeState, SystemTime)>,
    links: BTreeMap<LinkKey, KnownLink>,
    no_quorum_since: Option<SystemTime>,
}

fn age(now: SystemTime, then: SystemTime) -> Duration {
    // A time in the future (clock skew) counts as just now.
    now.duration_since(then).unwrap_or_default()
}

fn fmt_age(d: Duration) -> String {
    meshd_proto::human::duration(d)
}

/// FNV-1a: node ids are a few bytes, where SipHash's setup costs more than
/// the hashing; and the ids are configured, not attacker-chosen.
#[derive(Debug, Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        const PRIME: u64 = 0x0100_0000_01b3;
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for byte in bytes {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(PRIME);
        }
        self.0 = hash;
    }
}

type FnvBuild = std::hash::BuildHasherDefault<Fnv>;

/// Positions of the members, for one evaluation.
struct Positions<'a>(HashMap<&'a NodeId, Member, FnvBuild>);

impl<'a> Positions<'a> {
    fn new(roster: &'a [NodeId]) -> Self {
        Self(
            roster
                .iter()
                .zip(0..)
                .map(|(id, i): (&NodeId, Member)| (id, i))
                .collect(),
        )
    }

    fn of(&self, id: &NodeId) -> Option<Member> {
        self.0.get(id).copied()
    }
}

/// Both ends' views of one link: slot 0 for the lower member.
type LinkViews<'a> = [Option<EndView<'a>>; 2];

impl Engine {
    pub fn new(settings: EngineSettings) -> Self {
        Self {
            settings,
            roster: Vec::new(),
            node_since: BTreeMap::new(),
            links: BTreeMap::new(),
            no_quorum_since: None,
        }
    }

    pub fn set_settings(&mut self, settings: EngineSettings) {
        self.settings = settings;
    }

    /// The peers this node hears: those with a fresh report.
    pub fn hears(&self, inputs: &MeshInputs, now: SystemTime) -> Vec<NodeId> {
        inputs
            .reports
            .iter()
            .filter(|(_, r)| age(now, r.at) <= self.settings.stale_after)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Follows a change of membership: links keep their history under their
    /// members' new positions; links of departed members are forgotten.
    fn sync_roster(&mut self, configured: &BTreeSet<NodeId>) {
        if self.roster.len() == configured.len() && self.roster.iter().eq(configured.iter()) {
            return;
        }
        let roster: Vec<NodeId> = configured.iter().cloned().collect();
        let positions = Positions::new(&roster);
        let old = std::mem::take(&mut self.links);
        for ((x, y), link) in old {
            let moved = (
                self.roster
                    .get(usize::from(x))
                    .and_then(|id| positions.of(id)),
                self.roster
                    .get(usize::from(y))
                    .and_then(|id| positions.of(id)),
            );
            if let (Some(x), Some(y)) = moved {
                self.links.insert(link_key(x, y), link);
            }
        }
        self.node_since.retain(|id, _| configured.contains(id));
        self.roster = roster;
    }

    pub fn evaluate(&mut self, inputs: &MeshInputs, now: SystemTime) -> MeshStatus {
        self.sync_roster(&inputs.configured);
        let roster = std::mem::take(&mut self.roster);
        let positions = Positions::new(&roster);

        let mut fresh: BTreeSet<NodeId> = self.hears(inputs, now).into_iter().collect();
        // This node is evaluating, so it is alive by construction.
        fresh.insert(inputs.local.id.clone());
        let quorum = quorum::evaluate(&inputs.configured, &fresh);

        let hearers = hearers(inputs, &quorum, &positions, roster.len());
        let nodes: Vec<NodeVerdict> = roster
            .iter()
            .zip(&hearers)
            .map(|(id, heard_by)| self.node_verdict(id, heard_by, inputs, &quorum, now))
            .collect();
        let node_states: Vec<NodeState> = nodes.iter().map(|n| n.state).collect();

        let ends = self.gather_link_ends(inputs, &positions, now);
        let links = self
            .links
            .iter_mut()
            .map(|(key, link)| {
                let (both, one);
                let views: &[EndView<'_>] = match ends.get(key).copied().unwrap_or_default() {
                    [Some(a), Some(b)] => {
                        both = [a, b];
                        &both
                    }
                    [Some(a), None] | [None, Some(a)] => {
                        one = [a];
                        &one
                    }
                    [None, None] => &[],
                };
                let states = [key.0, key.1].map(|m| {
                    node_states
                        .get(usize::from(m))
                        .copied()
                        .unwrap_or(NodeState::Down)
                });
                judge_link(link, views, &quorum, states, &self.settings.link, now)
            })
            .collect();
        drop(positions);
        self.roster = roster;

        let mut alarms = inputs.local_alarms.clone();
        for (id, received) in &inputs.reports {
            if fresh.contains(id) {
                alarms.extend(received.report.alarms.iter().cloned());
            }
        }
        // Bridges on two nodes make a cycle in the mesh: only the merged
        // view of every node's alarms can tell.
        let mut alarms = super::bridge::escalate_bridge_loops(alarms);
        alarms.extend(self.no_quorum_alarm(inputs, &quorum, now));

        super::advice::advised(MeshStatus {
            node: inputs.local.clone(),
            evaluated_at: now,
            quorum,
            nodes,
            links,
            alarms,
            cables: Vec::new(),
            checks: Vec::new(),
            measurements: Vec::new(),
        })
    }

    /// Up when this node hears the peer directly or most of the quorum does;
    /// down when nobody in the quorum has heard it for `stale_after`;
    /// suspect in between.
    fn node_verdict(
        &mut self,
        id: &NodeId,
        heard_by: &[&NodeId],
        inputs: &MeshInputs,
        quorum: &Quorum,
        now: SystemTime,
    ) -> NodeVerdict {
        let received = inputs.reports.get(id);
        let (state, evidence) = if *id == inputs.local.id {
            (NodeState::Up, vec!["this node".to_owned()])
        } else {
            let direct_age = received.map(|r| age(now, r.at));
            let mut evidence = vec![match direct_age {
                Some(a) => format!("last report {} ago", fmt_age(a)),
                None => format!("no report from {id} since this node started"),
            }];
            if !heard_by.is_empty() {
                let names: Vec<&str> = heard_by.iter().map(|n| n.as_str()).collect();
                evidence.push(format!("heard by {}", name_some(&names)));
            }
            let heard_directly = direct_age.is_some_and(|a| a <= self.settings.suspect_after);
            let fresh_directly = direct_age.is_some_and(|a| a <= self.settings.stale_after);
            let votes = heard_by.len() + usize::from(fresh_directly);
            let state = if heard_directly || votes * 2 > quorum.members.len() {
                NodeState::Up
            } else if votes > 0 {
                NodeState::Suspect
            } else {
                NodeState::Down
            };
            (state, evidence)
        };
        let since = match self.node_since.get_mut(id) {
            Some(entry) => {
                if entry.0 != state {
                    *entry = (state, now);
                }
                entry.1
            }
            None => {
                self.node_since.insert(id.clone(), (state, now));
                now
            }
        };
        NodeVerdict {
            id: id.clone(),
            state,
            since,
            evidence,
            identity: if *id == inputs.local.id {
                Some(inputs.local.clone())
            } else {
                received.map(|r| r.report.sender.clone())
            },
            last_report_at: received.map(|r| r.at),
            cpu_saturated: if *id == inputs.local.id {
                inputs.local_load.cpu_saturated
            } else {
                received.is_some_and(|r| r.report.load.cpu_saturated)
            },
            // From the facts, which the engine does not see:
            // `crate::boot::annotate` fills it in.
            boot: Default::default(),
            fix: None,
        }
    }

    /// Every end's view of every link, from this node's own observations and
    /// from each peer's latest report; also learns links not seen before.
    fn gather_link_ends<'a>(
        &mut self,
        inputs: &'a MeshInputs,
        positions: &Positions<'_>,
        now: SystemTime,
    ) -> HashMap<LinkKey, LinkViews<'a>, FnvBuild> {
        let mut ends: HashMap<LinkKey, LinkViews<'a>, FnvBuild> =
            HashMap::with_capacity_and_hasher(self.links.len(), FnvBuild::default());
        for expected in &inputs.expected_links {
            if let (Some(x), Some(y)) = (
                positions.of(&expected.local.node),
                positions.of(&expected.remote.node),
            ) && x != y
            {
                self.learn(x, &expected.local, y, &expected.remote, now);
            }
        }
        let local = std::iter::once((
            &inputs.local.id,
            inputs
                .local_links
                .iter()
                .map(|l| (&l.observation, age(now, l.at)))
                .collect::<Vec<_>>(),
            inputs.local_load.cpu_saturated,
        ));
        let extrapolation = self.settings.max_extrapolation;
        let remote = inputs.reports.iter().map(|(id, r)| {
            let report_age = age(now, r.at).min(extrapolation);
            (
                id,
                r.report
                    .links
                    .iter()
                    .map(|o| (o, report_age))
                    .collect::<Vec<_>>(),
                r.report.load.cpu_saturated,
            )
        });
        for (observer, observations, saturated) in local.chain(remote) {
            let Some(x) = positions.of(observer) else {
                continue;
            };
            for (observation, age) in observations {
                // An end speaks only for itself, and only about the mesh.
                if observation.local.node != *observer {
                    continue;
                }
                let Some(y) = positions.of(&observation.remote.node).filter(|y| *y != x) else {
                    continue;
                };
                self.learn(x, &observation.local, y, &observation.remote, now);
                let slot = usize::from(x > y);
                ends.entry(link_key(x, y)).or_default()[slot] = Some(EndView {
                    node: observer.as_str(),
                    observation,
                    age,
                    saturated,
                });
            }
        }
        ends
    }

    /// Remembers a link, filling in what each end says about itself.
    fn learn(&mut self, x: Member, local: &LinkEnd, y: Member, remote: &LinkEnd, now: SystemTime) {
        let link = self.links.entry(link_key(x, y)).or_insert_with(|| {
            let (a, b) = if x < y {
                (local.clone(), remote.clone())
            } else {
                (remote.clone(), local.clone())
            };
            KnownLink {
                a,
                b,
                tracker: LinkTracker::new(now),
                node_blamed: None,
            }
        });
        // A node's description of its own end beats its peer's. The node is
        // the same by construction; compare the rest before cloning, since
        // it rarely changes.
        let own = if x < y { &mut link.a } else { &mut link.b };
        let same = own.iface == local.iface
            && own.address == local.address
            && own.rdma_device == local.rdma_device
            && own.rdma_port == local.rdma_port;
        if !same {
            own.clone_from(local);
        }
    }
    /// Without quorum this node raises no link or node alarm; it says so
    /// instead, once, with the members it cannot hear.
    fn no_quorum_alarm(
        &mut self,
        inputs: &MeshInputs,
        quorum: &Quorum,
        now: SystemTime,
    ) -> Option<Alarm> {
        if quorum.has_quorum {
            self.no_quorum_since = None;
            return None;
        }
        let since = *self.no_quorum_since.get_or_insert(now);
        let unheard: Vec<&str> = quorum
            .configured
            .iter()
            .filter(|id| !quorum.members.contains(id))
            .map(NodeId::as_str)
            .collect();
        Some(Alarm {
            kind: AlarmKind::NoQuorum,
            severity: Severity::Warning,
            node: inputs.local.id.clone(),
            subject: "quorum".to_owned(),
            summary: format!(
                "no quorum: hears {} of {} members; link and node alarms are held back",
                quorum.members.len(),
                quorum.configured.len()
            ),
            evidence: vec![format!("not heard: {}", unheard.join(", "))],
            fix: Some(
                "check the management network and that meshd runs on the unheard nodes".to_owned(),
            ),
            since,
            updated: now,
        })
    }
}

/// For each member (by position), the quorum members other than this node
/// whose latest report says they hear it: one pass over every `hears` list.
fn hearers<'a>(
    inputs: &'a MeshInputs,
    quorum: &Quorum,
    positions: &Positions<'_>,
    members: usize,
) -> Vec<Vec<&'a NodeId>> {
    let mut in_quorum = vec![false; members];
    for m in &quorum.members {
        if let Some(slot) = positions
            .of(m)
            .and_then(|i| in_quorum.get_mut(usize::from(i)))
        {
            *slot = true;
        }
    }
    let mut hearers: Vec<Vec<&NodeId>> = vec![Vec::new(); members];
    for (member, received) in &inputs.reports {
        let Some(me) = positions.of(member) else {
            continue;
        };
        if *member == inputs.local.id || in_quorum.get(usize::from(me)) != Some(&true) {
            continue;
        }
        for heard in &received.report.hears {
            if heard != member
                && let Some(list) = positions
                    .of(heard)
                    .and_then(|i| hearers.get_mut(usize::from(i)))
            {
                list.push(member);
            }
        }
    }
    hearers
}

/// The verdict on one link: held back without quorum, blamed on a node that
/// is down, held while an end is suspect, and otherwise what its ends say.
fn judge_link(
    link: &mut KnownLink,
    views: &[EndView<'_>],
    quorum: &Quorum,
    end_states: [NodeState; 2],
    rules: &LinkRules,
    now: SystemTime,
) -> LinkVerdict {
    let end_in = |state: NodeState| {
        [&link.a.node, &link.b.node]
            .into_iter()
            .zip(end_states)
            .find(|(_, s)| *s == state)
            .map(|(n, _)| n.clone())
    };
    let down_end = end_in(NodeState::Down);
    let suspect_end = end_in(NodeState::Suspect);

    let (state, since, blame, evidence) = if !quorum.has_quorum {
        link.tracker.hold_unknown(now);
        link.node_blamed = None;
        let evidence = vec!["no quorum: link verdicts are held back".to_owned()];
        (
            LinkState::Unknown,
            link.tracker.since(),
            Blame::None,
            evidence,
        )
    } else if let Some(node) = down_end {
        // A dead node's links are not link faults; and its restart must not
        // count as the link flapping, so the link starts afresh afterwards.
        if link.node_blamed.as_ref() != Some(&node) {
            link.tracker.hold_unknown(now);
            link.node_blamed = Some(node.clone());
        }
        let evidence = vec![format!("{node} is down: the node is blamed, not the link")];
        (LinkState::Down, link.tracker.since(), Blame::Node, evidence)
    } else if let Some(node) = suspect_end {
        let state = link.tracker.state();
        let evidence = vec![format!(
            "{node} is suspect: verdict held until it is up or down"
        )];
        (state, link.tracker.since(), blame_for(state), evidence)
    } else {
        link.node_blamed = None;
        let assessment = assess(views, rules);
        let state = link.tracker.update(assessment.state, now, rules);
        (
            state,
            link.tracker.since(),
            blame_for(state),
            assessment.evidence,
        )
    };
    LinkVerdict {
        a: link.a.clone(),
        b: link.b.clone(),
        state,
        since,
        evidence,
        blamed_node: (blame == Blame::Node)
            .then(|| link.node_blamed.clone())
            .flatten(),
        blame,
        recent_changes: link.tracker.recent_changes(),
        fix: None,
    }
}

fn blame_for(state: LinkState) -> Blame {
    match state {
        LinkState::Up | LinkState::Unknown => Blame::None,
        LinkState::Degraded | LinkState::Flapping | LinkState::Down => Blame::Link,
    }
}

#[cfg(test)]
mod tests {
    use meshd_proto::domain::{Incarnation, PeerReport};

    use super::*;

    fn id(s: &str) -> NodeId {
        NodeId::new(s).expect("valid id")
    }

    fn identity(s: &str) -> NodeIdentity {
        NodeIdentity {
            id: id(s),
            incarnation: Incarnation(1),
            version: "test".into(),
            hostname: s.into(),
        }
    }

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + ms)
    }

    /// The settings of a config that sets nothing (a daemon test pins them to
    /// the config's defaults).
    fn settings() -> EngineSettings {
        crate::fixtures::default_engine_settings()
    }

    /// `from` observing its cable to `to`, silent for `silence_ms`.
    fn obs(from: &str, to: &str, silence_ms: u64) -> LinkObservation {
        LinkObservation {
            silence: Duration::from_millis(silence_ms),
            ..crate::fixtures::healthy_observation(from, to)
        }
    }

    /// A full mesh seen from `a`, every node heard and every link quiet
    /// except as the silences say: silences[(x, y)] is x's view of x–y.
    struct Mesh {
        nodes: Vec<&'static str>,
        silences: BTreeMap<(&'static str, &'static str), u64>,
        report_age_ms: BTreeMap<&'static str, u64>,
        saturated: BTreeSet<&'static str>,
        hears: BTreeMap<&'static str, Vec<&'static str>>,
    }

    impl Mesh {
        fn new(nodes: &[&'static str]) -> Self {
            Self {
                nodes: nodes.to_vec(),
                silences: BTreeMap::new(),
                report_age_ms: BTreeMap::new(),
                saturated: BTreeSet::new(),
                hears: BTreeMap::new(),
            }
        }

        fn silence(&mut self, x: &'static str, y: &'static str, ms: u64) -> &mut Self {
            self.silences.insert((x, y), ms);
            self.silences.insert((y, x), ms);
            self
        }

        fn observations(&self, node: &str) -> Vec<LinkObservation> {
            self.nodes
                .iter()
                .filter(|o| **o != node)
                .map(|o| obs(node, o, *self.silences.get(&(node, *o)).unwrap_or(&50)))
                .collect()
        }

        fn inputs(&self, now: SystemTime) -> MeshInputs {
            let local = self.nodes[0];
            let reports = self.nodes[1..]
                .iter()
                .filter(|n| self.report_age_ms.get(*n) != Some(&u64::MAX))
                .map(|n| {
                    let age = Duration::from_millis(*self.report_age_ms.get(n).unwrap_or(&50));
                    let hears =
                        self.hears.get(n).cloned().unwrap_or_else(|| {
                            self.nodes.iter().copied().filter(|m| m != n).collect()
                        });
                    let report = PeerReport {
                        sender: identity(n),
                        sequence: 1,
                        sent_at: now - age,
                        links: self.observations(n),
                        alarms: vec![],
                        hears: hears.iter().map(|h| id(h)).collect(),
                        load: NodeLoad {
                            cpu_busy_ratio: 0.5,
                            cpu_saturated: self.saturated.contains(n),
                        },
                        facts: None,
                    };
                    (
                        id(n),
                        Arc::new(Received {
                            report,
                            at: now - age,
                        }),
                    )
                })
                .collect();
            MeshInputs {
                local: identity(local),
                configured: self.nodes.iter().map(|n| id(n)).collect(),
                local_load: NodeLoad::default(),
                local_links: self
                    .observations(local)
                    .into_iter()
                    .map(|observation| LocalObservation {
                        observation,
                        at: now,
                    })
                    .collect(),
                expected_links: vec![],
                reports,
                local_alarms: vec![],
            }
        }
    }

    fn link<'s>(status: &'s MeshStatus, x: &str, y: &str) -> &'s LinkVerdict {
        status
            .links
            .iter()
            .find(|l| {
                (l.a.node.as_str(), l.b.node.as_str()) == (x, y)
                    || (l.a.node.as_str(), l.b.node.as_str()) == (y, x)
            })
            .expect("link in status")
    }

    fn node_state(status: &MeshStatus, n: &str) -> NodeState {
        status
            .nodes
            .iter()
            .find(|v| v.id.as_str() == n)
            .map(|v| v.state)
            .expect("node in status")
    }

    #[test]
    fn a_healthy_mesh_is_all_up() {
        let mesh = Mesh::new(&["a", "b", "c", "d"]);
        let status = Engine::new(settings()).evaluate(&mesh.inputs(t(0)), t(0));
        assert!(status.quorum.has_quorum);
        assert_eq!(status.links.len(), 6);
        assert!(
            status.links.iter().all(|l| l.state == LinkState::Up),
            "{status:#?}"
        );
        assert!(status.is_healthy());
    }

    #[test]
    fn a_cut_cable_is_that_link_down_and_nothing_else() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(settings());
        engine.evaluate(&mesh.inputs(t(0)), t(0));
        mesh.silence("b", "c", 700);
        let status = engine.evaluate(&mesh.inputs(t(100)), t(100));
        let cut = link(&status, "b", "c");
        assert_eq!(cut.state, LinkState::Down);
        assert_eq!(cut.blame, Blame::Link);
        assert_eq!(cut.evidence.len(), 2, "both ends speak: {cut:?}");
        assert_eq!(
            status
                .links
                .iter()
                .filter(|l| l.state != LinkState::Up)
                .count(),
            1
        );
        assert!(status.nodes.iter().all(|n| n.state == NodeState::Up));
    }

    #[test]
    fn a_dead_node_is_blamed_for_its_links() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(settings());
        engine.evaluate(&mesh.inputs(t(0)), t(0));
        // c stopped 1.5 s ago: its last report is that old, nobody hears it,
        // and every link to it is silent.
        mesh.report_age_ms.insert("c", 1_500);
        for n in ["a", "b", "d"] {
            mesh.silence(n, "c", 1_500);
            mesh.hears.insert(n, vec!["a", "b", "d"]);
        }
        let status = engine.evaluate(&mesh.inputs(t(100)), t(100));
        assert_eq!(node_state(&status, "c"), NodeState::Down);
        for n in ["a", "b", "d"] {
            let l = link(&status, n, "c");
            assert_eq!(l.state, LinkState::Down);
            assert_eq!(l.blame, Blame::Node);
            assert_eq!(l.blamed_node.as_ref().map(NodeId::as_str), Some("c"));
        }
        assert!(
            status
                .links
                .iter()
                .filter(|l| l.blame == Blame::Link)
                .count()
                == 0
        );

        // c comes back: its links are up again, and that is not a flap.
        let mesh = Mesh::new(&["a", "b", "c", "d"]);
        let status = engine.evaluate(&mesh.inputs(t(200)), t(200));
        assert_eq!(node_state(&status, "c"), NodeState::Up);
        assert!(status.links.iter().all(|l| l.state == LinkState::Up));
        assert!(status.links.iter().all(|l| l.recent_changes == 0));
    }

    #[test]
    fn a_membership_change_keeps_the_history_of_remaining_links() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        let mut engine = Engine::new(settings());
        engine.evaluate(&mesh.inputs(t(0)), t(0));
        mesh.silence("b", "c", 700);
        let before = engine.evaluate(&mesh.inputs(t(100)), t(100));
        assert_eq!(link(&before, "b", "c").state, LinkState::Down);
        // "ab" sorts between a and b: every later member moves up one place.
        let mut grown = Mesh::new(&["a", "ab", "b", "c"]);
        grown.silence("b", "c", 800);
        let after = engine.evaluate(&grown.inputs(t(200)), t(200));
        let bc = after
            .links
            .iter()
            .find(|l| l.a.node.as_str() == "b" && l.b.node.as_str() == "c")
            .expect("b-c");
        assert_eq!(
            (bc.state, bc.since),
            (LinkState::Down, t(100)),
            "history kept"
        );
        assert_eq!(after.links.len(), 6);
        // Dropping a member forgets its links.
        let shrunk = Mesh::new(&["a", "b"]);
        let after = engine.evaluate(&shrunk.inputs(t(300)), t(300));
        assert_eq!(after.links.len(), 1);
    }

    #[test]
    fn a_late_report_does_not_make_a_link_silent() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        // b and c each saw 300 ms of silence on b-c, and their reports are
        // 350 ms old (late, not yet suspect): only one report interval of
        // that age may be added to the silence.
        mesh.silence("b", "c", 300);
        mesh.report_age_ms.insert("b", 350);
        mesh.report_age_ms.insert("c", 350);
        let status = Engine::new(settings()).evaluate(&mesh.inputs(t(0)), t(0));
        assert_eq!(link(&status, "b", "c").state, LinkState::Up);
        // With 450 ms reported, the 200 ms allowed bring both ends to 650 ms.
        mesh.silence("b", "c", 450);
        let status = Engine::new(settings()).evaluate(&mesh.inputs(t(0)), t(0));
        assert_eq!(link(&status, "b", "c").state, LinkState::Down);
    }

    #[test]
    fn a_suspect_node_holds_its_links_verdicts() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        let mut engine = Engine::new(settings());
        engine.evaluate(&mesh.inputs(t(0)), t(0));
        mesh.report_age_ms.insert("c", 450);
        for n in ["a", "b", "d"] {
            mesh.silence(n, "c", 700);
            mesh.hears.insert(n, vec!["a", "b", "c", "d"]);
        }
        mesh.hears.insert("b", vec!["a", "d"]);
        mesh.hears.insert("d", vec!["a", "b"]);
        let status = engine.evaluate(&mesh.inputs(t(100)), t(100));
        assert_eq!(node_state(&status, "c"), NodeState::Suspect);
        let l = link(&status, "a", "c");
        assert_eq!(l.state, LinkState::Up, "held: {l:?}");
        assert!(l.evidence[0].starts_with("c is suspect"));
    }

    #[test]
    fn a_peer_heard_by_the_majority_is_up_even_if_not_heard_here() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d", "e"]);
        mesh.report_age_ms.insert("e", 800);
        let status = Engine::new(settings()).evaluate(&mesh.inputs(t(0)), t(0));
        assert_eq!(node_state(&status, "e"), NodeState::Up);
        let e = status
            .nodes
            .iter()
            .find(|n| n.id.as_str() == "e")
            .expect("e");
        assert_eq!(e.evidence[1], "heard by b, c, d");
    }

    #[test]
    fn a_minority_partition_raises_nothing_but_no_quorum() {
        let mut mesh = Mesh::new(&["a", "b", "c", "d"]);
        mesh.report_age_ms.insert("c", u64::MAX);
        mesh.report_age_ms.insert("d", u64::MAX);
        mesh.silence("a", "c", 5_000);
        let status = Engine::new(settings()).evaluate(&mesh.inputs(t(0)), t(0));
        assert!(!status.quorum.has_quorum);
        assert!(status.links.iter().all(|l| l.state == LinkState::Unknown));
        assert_eq!(status.alarms.len(), 1);
        assert_eq!(status.alarms[0].kind, AlarmKind::NoQuorum);
        assert_eq!(
            status.alarms[0].evidence,
            vec!["not heard: c, d".to_owned()]
        );
    }

    #[test]
    fn a_busy_node_does_not_accuse_a_healthy_link_alone() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        mesh.saturated.insert("b");
        mesh.silences.insert(("b", "c"), 900);
        let status = Engine::new(settings()).evaluate(&mesh.inputs(t(0)), t(0));
        assert_ne!(link(&status, "b", "c").state, LinkState::Down);
    }

    #[test]
    fn ends_speak_only_for_themselves() {
        let mesh = Mesh::new(&["a", "b", "c"]);
        let mut inputs = mesh.inputs(t(0));
        let liar = Arc::make_mut(inputs.reports.get_mut(&id("b")).expect("b"));
        // b claims to be c's end of c–a, and reports a link to a stranger.
        liar.report.links.push(obs("c", "a", 9_000));
        liar.report.links.push(obs("b", "zz", 9_000));
        let status = Engine::new(settings()).evaluate(&inputs, t(0));
        assert_eq!(link(&status, "a", "c").state, LinkState::Up);
        assert_eq!(status.links.len(), 3);
    }

    #[test]
    fn expected_links_appear_before_any_observation() {
        let mut inputs = Mesh::new(&["a", "b"]).inputs(t(0));
        inputs.local_links.clear();
        inputs
            .reports
            .values_mut()
            .for_each(|r| Arc::make_mut(r).report.links.clear());
        inputs.expected_links.push(ExpectedLink {
            local: LinkEnd {
                iface: Some("en2".into()),
                ..LinkEnd::node_only(id("a"))
            },
            remote: LinkEnd::node_only(id("b")),
            expected_speed_bps: None,
        });
        let status = Engine::new(settings()).evaluate(&inputs, t(0));
        assert_eq!(status.links.len(), 1);
        assert_eq!(status.links[0].state, LinkState::Unknown);
        assert_eq!(status.links[0].a.iface.as_deref(), Some("en2"));
    }

    #[test]
    fn peers_alarms_are_shown_while_they_are_fresh() {
        let mesh = Mesh::new(&["a", "b", "c"]);
        let mut inputs = mesh.inputs(t(0));
        let alarm = Alarm {
            kind: AlarmKind::BridgeLoop,
            severity: Severity::Critical,
            node: id("b"),
            subject: "bridge0".into(),
            summary: "bridge over mesh ports".into(),
            evidence: vec![],
            fix: None,
            since: t(0),
            updated: t(0),
        };
        Arc::make_mut(inputs.reports.get_mut(&id("b")).expect("b"))
            .report
            .alarms
            .push(alarm.clone());
        let mut engine = Engine::new(settings());
        assert_eq!(engine.evaluate(&inputs, t(0)).alarms, vec![alarm]);
        assert!(
            engine
                .evaluate(&inputs, t(2_000))
                .alarms
                .iter()
                .all(|a| a.kind != AlarmKind::BridgeLoop)
        );
    }

    #[test]
    fn never_heard_peer_is_down_with_evidence() {
        let mut mesh = Mesh::new(&["a", "b", "c"]);
        mesh.report_age_ms.insert("c", u64::MAX);
        mesh.hears.insert("b", vec!["a"]);
        let status = Engine::new(settings()).evaluate(&mesh.inputs(t(0)), t(0));
        let c = status
            .nodes
            .iter()
            .find(|n| n.id.as_str() == "c")
            .expect("c");
        assert_eq!(c.state, NodeState::Down);
        assert_eq!(
            c.evidence,
            vec!["no report from c since this node started".to_owned()]
        );
    }
}
