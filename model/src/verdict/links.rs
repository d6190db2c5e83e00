//! Link verdicts: gathering both ends' views of every cable, remembering the
//! links seen so far, and judging each one (a link is blamed only when both
//! its ends were heard since its fault began).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use meshd_domain::{
    Blame, Lateness, LinkEnd, LinkState, LinkVerdict, NodeId, NodeState, NodeVerdict, Quorum,
};

use super::{
    End, Engine, EngineSettings, FnvBuild, KnownLink, Life, LinkKey, LinkViews, Member, MeshInputs,
    Positions, link_key,
};
use crate::excuse::LateMemory;
use crate::lateness::LATENESS_MEMORY;
use crate::link::{EndClass, EndView, LinkTracker, assess, fmt_duration};
use crate::link_rules::{LinkRules, MEDIUM_WINDOW};
use crate::time::Moment;

impl Engine {
    /// The verdict on every link seen so far (learning those not seen
    /// before), from both ends' views and the states of the nodes at them.
    pub(super) fn link_verdicts(
        &mut self,
        inputs: &MeshInputs,
        lives: &BTreeMap<&NodeId, Life<'_>>,
        quorum: &Quorum,
        nodes: &[NodeVerdict],
        moment: Moment,
    ) -> Vec<LinkVerdict> {
        let now = moment.now;
        let roster = std::mem::take(&mut self.roster);
        let positions = Positions::new(&roster);
        let ends = self.gather_link_ends(inputs, &positions, now);
        let settings = self.settings;
        let slow_hosts = slow_hosts(&ends, &roster, &settings);
        self.rdma_hosts = rdma_failing_hosts(&ends, &roster, &settings);
        let node_states: Vec<NodeState> = nodes.iter().map(|n| n.state).collect();
        let judge = Judge {
            quorum,
            settings: &settings,
            lives,
            local: &inputs.local.id,
            local_lateness: inputs.local_lateness,
            local_started: self.started,
            watching_since: self.watching_since,
            slow_hosts: &slow_hosts,
            rdma_hosts: &self.rdma_hosts,
            now,
        };
        let links = self
            .links
            .iter_mut()
            .map(|(key, link)| {
                let views = ends.get(key).copied().unwrap_or_default();
                let states = [key.0, key.1].map(|m| {
                    node_states
                        .get(usize::from(m))
                        .copied()
                        .unwrap_or(NodeState::Down)
                });
                let ends_since =
                    [&link.a.node, &link.b.node].map(|n| inputs.peers.get(n).map(|p| p.since));
                judge.link(link, views, states, ends_since, moment)
            })
            .collect();
        drop(positions);
        self.roster = roster;
        links
    }

    /// Every end's view of every link, from this node's own observations and
    /// from each peer's report; also learns links not seen before.
    pub(super) fn gather_link_ends<'a>(
        &mut self,
        inputs: &'a MeshInputs,
        positions: &Positions<'_>,
        now: Instant,
    ) -> HashMap<LinkKey, LinkViews<'a>, FnvBuild> {
        let rules = self.settings.link;
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
        let local = inputs
            .local_links
            .iter()
            .map(|l| (&inputs.local.id, &l.observation, l.at, Duration::ZERO));
        // A far end's view that is stale says nothing of the link now: the
        // peer was last heard `stale_after` ago or more (cut off from this
        // node, or dead), and what it measured then would hold a cut
        // cable degraded, or up, for as long as it stays unheard.
        let stale_after = self.settings.stale_after;
        let heartbeat = self.settings.heartbeat;
        let fresh = move |view: &crate::peers::PeerView| {
            now.saturating_duration_since(view.received_at) < stale_after
        };
        let remote = inputs
            .peers
            .iter()
            .filter(move |(_, view)| fresh(view))
            .flat_map(|(id, view)| {
                view.report.links.iter().map(move |o| {
                    let received = view
                        .links_received
                        .get(&o.remote.node)
                        .copied()
                        .unwrap_or(view.received_at);
                    // The end resends a link whenever it stops or starts being
                    // silent: while its later messages arrive, a silent link
                    // stayed silent; and until its next message is due (a
                    // heartbeat after its last), it still is. (A late end's
                    // silence needs longer to count; without this its peers
                    // would wait for its next heartbeat to see it.)
                    let confirmed =
                        if o.figures.silence >= rules.silence_counts_after(o.silence_confirmed) {
                            let due = view.received_at.checked_add(heartbeat).unwrap_or(now);
                            due.min(now).saturating_duration_since(received)
                        } else {
                            Duration::ZERO
                        };
                    (id, o, received, confirmed)
                })
            });
        for (observer, observation, observed_at, confirmed_silence) in local.chain(remote) {
            let Some(x) = positions.of(observer) else {
                continue;
            };
            // An end speaks only for itself, and only about the mesh.
            if observation.local.node != *observer {
                continue;
            }
            let Some(y) = positions.of(&observation.remote.node).filter(|y| *y != x) else {
                continue;
            };
            self.learn(x, &observation.local, y, &observation.remote, now);
            let slot = usize::from(x > y);
            if let Some(end) = ends.entry(link_key(x, y)).or_default().get_mut(slot) {
                *end = Some(End {
                    view: EndView {
                        node: observer.as_str(),
                        observation,
                        confirmed_silence,
                        previous_life: Duration::ZERO,
                        far_life: None,
                        late: EndView::ran_late(observation),
                        excuse: crate::excuse::Excuse::default(),
                        rtt_shared: false,
                        rdma_shared: false,
                        carrier_stale: false,
                    },
                    observed_at,
                });
            }
        }
        ends
    }

    /// Remembers a link, filling in what each end says about itself.
    fn learn(&mut self, x: Member, local: &LinkEnd, y: Member, remote: &LinkEnd, now: Instant) {
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
                unheard_end: None,
                ends_since: [None, None],
                restarted_at: [None, None],
                late: [LateMemory::default(); 2],
                remembered_since: now,
                degraded_seen: None,
                recheck_at: None,
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
}

/// How much of its loss window end `e`'s prober has probed through: the
/// whole window, or since it started (so few probes sent).
fn probing(e: &End<'_>, rules: &LinkRules) -> Duration {
    e.view
        .observation
        .loss_over(MEDIUM_WINDOW)
        .filter(|_| !rules.probe_interval.is_zero())
        .map_or(MEDIUM_WINDOW, |w| {
            let sent = u32::try_from(w.sent).unwrap_or(u32::MAX);
            rules.probe_interval.saturating_mul(sent).min(MEDIUM_WINDOW)
        })
}

/// Nodes whose links are mostly slow at once (an RTT p99 above its
/// baseline rule on more than half of them, and at least two): a starved
/// host answers and forwards late on every cable, while a bad cable slows
/// one. With a single link nothing can be told apart, and it stays
/// evidence.
/// Members whose own ends fail RDMA (port not active, RDMA probes failing
/// while IP works) on more than half of their links, and at least two: the
/// host's RDMA, not its cables. With a single link nothing can be told
/// apart, and it stays the link's.
pub(super) fn rdma_failing_hosts(
    ends: &HashMap<LinkKey, LinkViews<'_>, FnvBuild>,
    roster: &[NodeId],
    settings: &EngineSettings,
) -> BTreeSet<NodeId> {
    let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for end in ends.values().flat_map(|views| views.iter().flatten()) {
        let class = EndClass::of(end.view.observation, &settings.link);
        let (links, failing) = counts.entry(end.view.node).or_default();
        *links += 1;
        *failing += usize::from(class.rdma_down || class.rdma_probe_failing);
    }
    roster
        .iter()
        .filter(|id| {
            counts
                .get(id.as_str())
                .is_some_and(|(links, failing)| *links >= 2 && failing * 2 > *links)
        })
        .cloned()
        .collect()
}

pub(super) fn slow_hosts(
    ends: &HashMap<LinkKey, LinkViews<'_>, FnvBuild>,
    roster: &[NodeId],
    settings: &EngineSettings,
) -> BTreeSet<NodeId> {
    let mut counts: BTreeMap<Member, (usize, usize)> = BTreeMap::new();
    for ((x, y), views) in ends {
        let slow = views
            .iter()
            .flatten()
            .any(|e| EndClass::of(e.view.observation, &settings.link).slow);
        for member in [*x, *y] {
            let (links, slow_links) = counts.entry(member).or_default();
            *links += 1;
            *slow_links += usize::from(slow);
        }
    }
    counts
        .into_iter()
        .filter(|(_, (links, slow))| *links >= 2 && slow * 2 > *links)
        .filter_map(|(member, _)| roster.get(usize::from(member)).cloned())
        .collect()
}

/// The context one link is judged in.
pub(super) struct Judge<'a> {
    pub(super) quorum: &'a Quorum,
    pub(super) settings: &'a EngineSettings,
    pub(super) lives: &'a BTreeMap<&'a NodeId, Life<'a>>,
    pub(super) local: &'a NodeId,
    pub(super) local_lateness: Lateness,
    /// This node's first evaluation: nothing it did before answered.
    pub(super) local_started: Option<Instant>,
    /// Since when this node looked often enough to know how late its peers
    /// ran (its start, or the end of its own last stall).
    pub(super) watching_since: Option<Instant>,
    /// Nodes most of whose links are slow at once (see `slow_hosts`).
    pub(super) slow_hosts: &'a BTreeSet<NodeId>,
    /// Nodes failing RDMA on most of their links (see `rdma_failing_hosts`).
    pub(super) rdma_hosts: &'a BTreeSet<NodeId>,
    pub(super) now: Instant,
}

impl Judge<'_> {
    /// The latest evidence of life of `node`, or `now` for this node.
    fn evidence_of(&self, node: &NodeId) -> Option<Instant> {
        if node == self.local {
            return Some(self.now);
        }
        self.lives.get(node).and_then(|l| l.latest_evidence)
    }

    /// The verdict on one link: held back without quorum, blamed on a node
    /// that is down, held while it is not known that both ends lived
    /// through the fault, and otherwise what its ends say.
    pub(super) fn link(
        &self,
        link: &mut KnownLink,
        views: LinkViews<'_>,
        end_states: [NodeState; 2],
        ends_since: [Option<Instant>; 2],
        moment: Moment,
    ) -> LinkVerdict {
        let now = self.now;
        if ends_since != link.ends_since {
            // An end restarted: what came before is not the link's, unless
            // the link was down before: a restart does not plug a cable
            // back, and the holds below keep that verdict until the new
            // run's end has had its time to answer.
            if link.ends_since.iter().any(Option::is_some) && !link.down_on_the_cable() {
                link.tracker.restart(now);
            }
            for ((restarted, before), after) in link
                .restarted_at
                .iter_mut()
                .zip(link.ends_since)
                .zip(ends_since)
            {
                if before.is_some() && after != before {
                    *restarted = after;
                }
            }
            link.ends_since = ends_since;
        }
        let down_end = [&link.a.node, &link.b.node]
            .into_iter()
            .zip(end_states)
            .find(|(_, s)| *s == NodeState::Down)
            .map(|(n, _)| n.clone());
        // Every message says how late its node runs; a link's figures, its
        // lateness among them, go out only now and then.
        for (memory, node) in link.late.iter_mut().zip([&link.a.node, &link.b.node]) {
            if let Some((lateness, at)) = self.latest_lateness(node) {
                memory.note(lateness, at, &self.settings.link);
            }
        }
        let present: Vec<End<'_>> = views.into_iter().flatten().collect();
        let rtt_shared =
            self.slow_hosts.contains(&link.a.node) || self.slow_hosts.contains(&link.b.node);
        let [late_a, late_b] = link.late;
        let end_views: Vec<EndView<'_>> = present
            .iter()
            .map(|e| EndView {
                // An end's loss window ends when it made the observation.
                excuse: {
                    let (rules, probing) = (&self.settings.link, probing(e, &self.settings.link));
                    late_a
                        .excuse(e.observed_at, probing, now, rules)
                        .and(late_b.excuse(e.observed_at, probing, now, rules))
                },
                rtt_shared,
                rdma_shared: self.rdma_hosts.iter().any(|h| h.as_str() == e.view.node),
                ..self.far_restart(link, e)
            })
            .collect();

        let (state, blame, evidence) = if !self.quorum.has_quorum {
            link.tracker.hold_unknown(now);
            // Remembered, so an end that comes back is a return (below),
            // whether this node had quorum meanwhile or not.
            if down_end.is_some() {
                link.node_blamed = down_end;
            }
            link.degraded_seen = None;
            (
                LinkState::Unknown,
                Blame::None,
                vec!["no quorum: link verdicts are held back".to_owned()],
            )
        } else if let Some(node) = down_end.clone().filter(|_| !link.down_on_the_cable()) {
            // A dead node's links are not link faults; and its return must
            // not count as the link flapping, so the link starts afresh.
            // A link already down on its cable stays the cable's (below):
            // the death plugs nothing back, and its page holds through it.
            if link.node_blamed.as_ref() != Some(&node) {
                link.tracker.hold_unknown(now);
                link.node_blamed = Some(node.clone());
            }
            link.degraded_seen = None;
            let evidence = vec![format!("{node} is down: the node is blamed, not the link")];
            (LinkState::Down, Blame::Node, evidence)
        } else {
            let unheard = [&link.a.node, &link.b.node]
                .into_iter()
                .zip(end_states)
                .find(|(_, s)| *s == NodeState::Suspect)
                .map(|(n, _)| n.clone());
            if unheard.is_some() {
                if link.unheard_end.is_none() && !link.down_on_the_cable() {
                    link.unheard_end = unheard;
                }
            } else if [link.node_blamed.take(), link.unheard_end.take()]
                .iter()
                .any(Option::is_some)
            {
                // The node is back (thawed, reachable again): the silence
                // its ends measured while it was down, or heard on no path,
                // is its own, as a restart's is, on both ends. What they
                // measure from now on is the link's.
                link.tracker.restart(now);
                link.restarted_at = [Some(now); 2];
                return self.link(link, views, end_states, ends_since, moment);
            }
            let mut assessment = assess(&end_views, &self.settings.link);
            // A link already degraded by loss that loses half its probes
            // for a second is the same lossy cable having a bad second:
            // it stays degraded (a page that turns down and back would be
            // three pages for one fault). Silence at both ends is down.
            if assessment.state == LinkState::Down
                && !assessment.every_end_silent
                && link.tracker.state() == LinkState::Degraded
            {
                assessment.state = LinkState::Degraded;
            }
            let bad = matches!(assessment.state, LinkState::Down | LinkState::Degraded);
            let unproven = bad
                .then(|| self.unproven_end(link, &present, end_states))
                .flatten()
                .or_else(|| self.unspoken_end(link, &present, assessment.state))
                .or_else(|| self.unremembered_lateness(link, &present, assessment.state));
            // A growing silence counts once it lasts what this end needs
            // (more while it runs late), with no message to say so.
            let rules = &self.settings.link;
            let silent_at = end_views
                .iter()
                .filter(|e| {
                    e.silence() >= rules.silence_counts_after(e.observation.silence_confirmed)
                        && !e.silent(rules)
                })
                .filter_map(|e| now.checked_add(e.silent_after(rules).saturating_sub(e.silence())));
            link.recheck_at = silent_at.min();
            let mut verdict = if let Some(reason) = unproven {
                let state = link.tracker.state();
                (state, blame_for(state), vec![reason])
            } else if link.down_on_the_cable()
                && (assessment.state == LinkState::Unknown
                    || (assessment.state == LinkState::Up
                        && !new_run_answered(link, &present, moment)))
            {
                // Down before, and no probe of its ends' new runs answered
                // yet: nothing was plugged back (a cut never answers a new
                // prober), so it stays down until their silence or their
                // answers say.
                let state = link
                    .tracker
                    .update(LinkState::Down, now, &self.settings.link);
                (
                    state,
                    blame_for(state),
                    vec![
                        "held: down before an end restarted; no probe of the new run answered yet"
                            .to_owned(),
                    ],
                )
            } else {
                let state = link
                    .tracker
                    .update(assessment.state, now, &self.settings.link);
                let mut evidence = assessment.evidence;
                evidence.extend(link.tracker.holding(now, &self.settings.link));
                (state, blame_for(state), evidence)
            };
            if let Some(node) = &down_end {
                verdict.2.push(format!(
                    "{node} is down too: the cable was down before it went, and stays so until a \
                     probe of its new run answers"
                ));
            }
            verdict
        };
        LinkVerdict {
            a: link.a.clone(),
            b: link.b.clone(),
            state,
            since: moment.wall_of(link.tracker.since()),
            evidence,
            blamed_node: (blame == Blame::Node)
                .then(|| link.node_blamed.clone())
                .flatten(),
            blame,
            recent_changes: link.tracker.recent_changes(),
            flapping: link.tracker.flapping() && blame == Blame::Link,
            fix: None,
        }
    }

    /// End `e`'s view with what the far end's last restart makes of it: the
    /// part of its silence from before the restart, and how long the far
    /// end had lived when the view was made (loss windows reaching back
    /// before that count its previous life). The far end was dead or
    /// starting then, which its own node verdict covers; a restart and a
    /// stall right after it would otherwise read as both ends silent (or
    /// losing every probe) at once, each about a different moment. This
    /// node's own restart is its start: what it did before is unknown here.
    fn far_restart<'v>(&self, link: &KnownLink, e: &End<'v>) -> EndView<'v> {
        let far = usize::from(e.view.node == link.a.node.as_str());
        let far_node = if far == 0 { &link.a.node } else { &link.b.node };
        let restarted = if far_node == self.local {
            self.local_started.max(link.restarted_at[far])
        } else {
            link.restarted_at[far]
        };
        let carrier_stale = link
            .restarted_at
            .iter()
            .flatten()
            .any(|at| e.observed_at < *at);
        let Some(restarted) = restarted else {
            return EndView {
                carrier_stale,
                ..e.view
            };
        };
        let silence_onset = e
            .observed_at
            .checked_sub(e.view.observation.figures.silence)
            .unwrap_or(e.observed_at);
        EndView {
            previous_life: restarted.saturating_duration_since(silence_onset),
            far_life: Some(e.observed_at.saturating_duration_since(restarted)),
            carrier_stale,
            ..e.view
        }
    }

    /// Why a degradation cannot be blamed on the link yet: the loss or RTT
    /// it rests on was gathered over a window that began before this node
    /// knew how late the ends ran (it started, first heard of the link, or
    /// stalled itself since), so what of it a late end explains is not known
    /// here. The peers that watched the whole window judge meanwhile; a
    /// window's length later this node does too.
    fn unremembered_lateness(
        &self,
        link: &KnownLink,
        present: &[End<'_>],
        state: LinkState,
    ) -> Option<String> {
        if state != LinkState::Degraded {
            return None;
        }
        let since = self
            .watching_since
            .map_or(link.remembered_since, |w| w.max(link.remembered_since));
        let oldest = present.iter().map(|e| e.observed_at).min()?;
        let known_from = since.checked_add(MEDIUM_WINDOW)?;
        (oldest < known_from).then(|| {
            format!(
                "held: its loss and RTT were gathered over {} from before this node knew how late \
                 the ends ran (it started, first heard of the link or stalled since)",
                fmt_duration(MEDIUM_WINDOW)
            )
        })
    }

    /// How late `node` said it ran in its latest message, and when that
    /// came; for this node, its lateness now.
    fn latest_lateness(&self, node: &NodeId) -> Option<(Lateness, Instant)> {
        if node == self.local {
            return Some((self.local_lateness, self.now));
        }
        let life = self.lives.get(node)?;
        Some((life.lateness, life.last_message?))
    }

    /// When was `node`'s latest message, or `now` for this node.
    fn spoke_at(&self, node: &NodeId) -> Option<Instant> {
        if node == self.local {
            return Some(self.now);
        }
        self.lives.get(node).and_then(|l| l.last_message)
    }

    /// Why a degradation cannot be blamed on the link yet: an end that has
    /// not spoken since the degraded views arrived. A node whose timers run
    /// late answers its peers' probes late, so their loss reaches this node
    /// before its own report of the lateness that explains it, which comes
    /// late too; its next message settles it. `None` when both ends spoke
    /// after the newest view that the degradation was first seen in, or
    /// once an end silent that long is stale: then the views at hand
    /// decide (its other paths may be what is broken).
    fn unspoken_end(
        &self,
        link: &mut KnownLink,
        present: &[End<'_>],
        state: LinkState,
    ) -> Option<String> {
        if state != LinkState::Degraded {
            link.degraded_seen = None;
            return None;
        }
        let newest = present.iter().map(|e| e.observed_at).max()?;
        let seen = *link.degraded_seen.get_or_insert(newest);
        if seen
            .checked_add(self.settings.stale_after)
            .is_none_or(|until| self.now >= until)
        {
            return None;
        }
        // Messages read in one batch (this node stalled, then read its
        // sockets) arrive at one instant in an unknown order: an end heard
        // then spoke after the views only if the one view seen then is its
        // own (its lateness travels with it).
        let seen_then: Vec<&str> = present
            .iter()
            .filter(|e| e.observed_at == seen)
            .map(|e| e.view.node)
            .collect();
        let spoke_after = |node: &NodeId| {
            self.spoke_at(node).is_some_and(|at| {
                at > seen || (at == seen && seen_then.as_slice() == [node.as_str()])
            })
        };
        let node = [&link.a.node, &link.b.node]
            .into_iter()
            .find(|node| !spoke_after(node))?;
        Some(format!(
            "held: {node} has not spoken since the degradation was reported; \
             its own report may explain it (a node whose timers run late answers late)"
        ))
    }

    /// Why a fault cannot be blamed on the link yet: an end that has not
    /// been heard from since the fault began may be a dead node, not a dead
    /// cable. `None` when both ends are known to have lived through it.
    fn unproven_end(
        &self,
        link: &KnownLink,
        present: &[End<'_>],
        end_states: [NodeState; 2],
    ) -> Option<String> {
        let rules = &self.settings.link;
        let silent_onsets = present.iter().filter(|e| e.view.silent(rules)).map(|e| {
            e.observed_at
                .checked_sub(e.view.observation.figures.silence)
                .unwrap_or(e.observed_at)
        });
        // The fault began no later than the earliest silence; a fault that
        // is loss or delay, not silence, began within the evidence window.
        let silence_onset = silent_onsets.min();
        let onset = silence_onset
            .unwrap_or_else(|| self.now.checked_sub(rules.down_after).unwrap_or(self.now));
        // A silence starts at the last reply, but the fault may strike a
        // probe period later, and a message sent just before a node froze
        // can arrive after that reply: an end proves it outlived a silence
        // only by speaking once the silence was long enough to be a fault
        // (the message that carries its own view of that silence does; one
        // saying a burst into it went unanswered was sent that much sooner).
        let proof_after = |node: &NodeId| {
            let confirmed = present
                .iter()
                .any(|e| e.view.node == node.as_str() && e.view.observation.silence_confirmed);
            silence_onset.map_or(onset, |at| {
                at.checked_add(rules.silence_counts_after(confirmed))
                    .unwrap_or(at)
            })
        };
        // An end that reports its own carrier lost (since its last run or
        // return) lived to see the fault: nothing else proves it sooner.
        // One that does not (its node isolated or switched off as the
        // cable went, or it cannot read its carrier) proves it by speaking
        // after the silence, as above.
        let saw_its_carrier_go = |node: &NodeId| {
            present
                .iter()
                .any(|e| e.view.node == node.as_str() && self.far_restart(link, e).carrier_lost())
        };
        for (node, state) in [&link.a.node, &link.b.node].into_iter().zip(end_states) {
            let heard = self.evidence_of(node);
            let proven = state == NodeState::Up
                && (saw_its_carrier_go(node) || heard.is_some_and(|at| at >= proof_after(node)));
            if !proven {
                let ago = heard.map_or_else(
                    || "never".to_owned(),
                    |at| {
                        format!(
                            "{} ago",
                            fmt_duration(self.now.saturating_duration_since(at))
                        )
                    },
                );
                return Some(format!(
                    "held: {node} not heard since the fault began (last heard {ago}); \
                     its node may be down rather than the cable"
                ));
            }
        }
        // An end whose daemon closed every stream and has not opened one
        // since is restarting (or dead, which its node verdict will say):
        // what its peers measured meanwhile is its daemon's, not the
        // cable's, and its new run is not known here yet.
        for node in [&link.a.node, &link.b.node] {
            let closed = node != self.local
                && self
                    .lives
                    .get(node)
                    .is_some_and(|l| l.last_message.is_some() && !l.any_open);
            if closed {
                return Some(format!(
                    "held: {node} closed its streams (a restart?) and has not spoken since"
                ));
            }
        }
        // A silence is judged against how late its ends run, which every
        // message says: an end heard for less than that memory (this node
        // or it just started) may be running late unknown to this node,
        // and answering on its late ticks. The peers that know judge
        // meanwhile.
        for (node, since) in [&link.a.node, &link.b.node]
            .into_iter()
            .zip(link.ends_since)
        {
            let heard_for = since.map(|s| self.now.saturating_duration_since(s));
            if node != self.local && heard_for.is_some_and(|d| d < LATENESS_MEMORY) {
                return Some(format!(
                    "held: {node} heard for only {}; how late it runs is not known yet",
                    fmt_duration(heard_for.unwrap_or_default())
                ));
            }
        }
        // An end whose daemon (re)started after the silence began was not
        // there to answer: the silence is its start, not the cable, until
        // its end had `down_after` to answer.
        let down_after = rules.down_after;
        for (node, since) in [&link.a.node, &link.b.node]
            .into_iter()
            .zip(link.ends_since)
        {
            if let Some(since) = since
                && since > onset
                && since
                    .checked_add(down_after)
                    .is_some_and(|until| self.now < until)
            {
                return Some(format!(
                    "held: {node} started {} ago, after the silence began; its end has {} to answer",
                    fmt_duration(self.now.saturating_duration_since(since)),
                    fmt_duration(down_after)
                ));
            }
        }
        None
    }
}

fn blame_for(state: LinkState) -> Blame {
    match state {
        LinkState::Up | LinkState::Unknown => Blame::None,
        LinkState::Degraded | LinkState::Flapping | LinkState::Down => Blame::Link,
    }
}

/// Whether a probe has been answered since an end of `link` restarted,
/// by the ends' last replies: on the restarted end's own new prober (an
/// observation made after the restart, by a process that had no reply
/// before it), or on the other end after the restart. The silence from
/// before a restart is excused as the far end's previous life, and a
/// prober started afresh has counted little silence yet, so without an
/// answer an end that restarted reads as a quiet link: for a link down on
/// its cable that is no evidence it was plugged back. With no restart,
/// true.
fn new_run_answered(link: &KnownLink, present: &[End<'_>], moment: Moment) -> bool {
    let restarts: Vec<Instant> = link.restarted_at.iter().flatten().copied().collect();
    let Some(latest) = restarts.iter().max().copied() else {
        return true;
    };
    // On this node's clock; an end's reply times are on its own, which
    // the clock-skew bound keeps close.
    let restart_wall = moment.wall - moment.now.saturating_duration_since(latest);
    let restarted = |node: &str| {
        [&link.a.node, &link.b.node]
            .into_iter()
            .zip(link.restarted_at)
            .any(|(n, at)| n.as_str() == node && at.is_some())
    };
    present.iter().any(|end| {
        let observation = end.view.observation;
        if restarted(end.view.node) {
            end.observed_at >= latest && observation.last_reply_at.is_some()
        } else {
            observation
                .last_reply_at
                .is_some_and(|reply| reply >= restart_wall)
        }
    })
}
