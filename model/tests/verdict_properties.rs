//! Property tests for the verdict engine (ARCHITECTURE.md, "How we know it works"): random faults injected
//! into simulated full meshes of 2 to 16 nodes, and the engine's verdicts,
//! seen from a random live node, compared with the injected truth.
//!
//! Faults: cables cut, nodes dead, nodes with a saturated CPU, and a
//! partition of the management network. The simulation builds `MeshInputs`
//! directly, as the aggregator would: the evaluating node's own link
//! observations, plus the latest report of each peer it has heard from.
//!
//! How the engine is driven, and why: the engine keeps hysteresis (down at
//! once, recovery only after a clean second, flapping counted over a minute)
//! and learns links only from what it is told. So each case evaluates the
//! faults at a fixed `now` on an engine that either
//! - first saw a healthy, fully heard mesh at `now − WARM_UP_BEFORE` (the
//!   usual life of a daemon: the faults happened after it had learned every
//!   link and called it up), or
//! - is fresh (a daemon that starts in the middle of the faults: links
//!   between two dead nodes it never heard of are then unknown to it).
//!
//! Either way there is exactly one transition per link (up → fault), so the
//! hysteresis can never legitimately hold a verdict back and flapping (four
//! changes) cannot be reached: every difference from the truth is a finding.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd_model::intake::Received;
use meshd_model::link::{LinkRules, MEDIUM_WINDOW, SHORT_WINDOW};
use meshd_model::verdict::{Engine, EngineSettings, ExpectedLink, LocalObservation, MeshInputs};
use meshd_proto::domain::{
    Blame, Incarnation, InterfaceState, LinkEnd, LinkObservation, LinkState, LinkVerdict,
    LossWindow, MeshStatus, NodeId, NodeIdentity, NodeLoad, NodeState, PeerReport, RdmaPortState,
    RttHistogram, RttSummary,
};
use proptest::prelude::*;
use proptest::sample::subsequence;

// ---------------------------------------------------------------------------
// The engine's settings and the simulation's timing, in milliseconds.

/// Reports every 200 ms; a report older than 1 s is stale. Suspicion starts
/// after two missed reports (400 ms).
const REPORT_INTERVAL_MS: u64 = 200;
const STALE_AFTER_MS: u64 = 1_000;
const SUSPECT_AFTER_MS: u64 = 2 * REPORT_INTERVAL_MS;
/// A link end silent this long says the link is down; a saturated end needs
/// `SATURATED_SLOWDOWN` times as long (Lifeguard).
const DOWN_AFTER_MS: u64 = 600;
const SATURATED_SLOWDOWN: u32 = 2;

/// Probes go out 10 times a second: a healthy end has heard a reply within
/// the last 100 ms.
const HEALTHY_SILENCE_MAX_MS: u64 = 100;
/// A saturated node's timers run late: its healthy links look silent for up
/// to this much longer.
const SATURATED_LAG_MAX_MS: u64 = 800;
/// How old a live peer's latest report is when the evaluation runs: a
/// missed report at most, never long enough to make the peer suspect.
const REPORT_AGE_MAX_MS: u64 = 250;
/// Cables were cut this long ago: past even a saturated end's threshold.
const CUT_AGO_MIN_MS: u64 = 1_300;
const CUT_AGO_MAX_MS: u64 = 5_000;
/// Dead nodes (and nodes partitioned away) were last heard this long ago:
/// well over `STALE_AFTER_MS`.
const GONE_AGO_MIN_MS: u64 = 3 * STALE_AFTER_MS;
const GONE_AGO_MAX_MS: u64 = 10_000;
/// The healthy warm-up evaluation runs this long before `now`, before any
/// fault.
const WARM_UP_BEFORE_MS: u64 = 20_000;

// The simulation is only fair to the engine if these hold: a healthy end,
// even a saturated one, never looks silent, a cut or dead end always does,
// and a live peer is never suspect.
const _: () = {
    let healthy_worst = HEALTHY_SILENCE_MAX_MS + REPORT_AGE_MAX_MS;
    assert!(healthy_worst < DOWN_AFTER_MS);
    let saturated_threshold = DOWN_AFTER_MS * SATURATED_SLOWDOWN as u64;
    assert!(healthy_worst + SATURATED_LAG_MAX_MS < saturated_threshold);
    assert!(CUT_AGO_MIN_MS >= saturated_threshold);
    assert!(REPORT_AGE_MAX_MS < SUSPECT_AFTER_MS);
    assert!(GONE_AGO_MIN_MS > STALE_AFTER_MS);
    assert!(WARM_UP_BEFORE_MS > GONE_AGO_MAX_MS && WARM_UP_BEFORE_MS > CUT_AGO_MAX_MS);
};

fn settings() -> EngineSettings {
    EngineSettings::new(
        Duration::from_millis(REPORT_INTERVAL_MS),
        Duration::from_millis(STALE_AFTER_MS),
        LinkRules {
            down_after: Duration::from_millis(DOWN_AFTER_MS),
            loss_degraded: 0.02,
            loss_down: 0.5,
            rtt_p99_factor: 3.0,
            rtt_min_increase: Duration::from_millis(1),
            flap_window: Duration::from_secs(60),
            flap_changes: 4,
            saturated_slowdown: SATURATED_SLOWDOWN,
        },
    )
}

/// The fixed evaluation time; far from the epoch so `now − anything` is fine.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn ago(ms: u64) -> SystemTime {
    now() - Duration::from_millis(ms)
}

fn node_id(i: usize) -> NodeId {
    NodeId::new(format!("n{i:02}")).expect("n00..n15 are valid ids")
}

fn identity(i: usize) -> NodeIdentity {
    NodeIdentity {
        id: node_id(i),
        incarnation: Incarnation(1),
        version: "proptest".into(),
        hostname: format!("n{i:02}.local"),
    }
}

// ---------------------------------------------------------------------------
// The injected truth.

#[derive(Debug, Clone)]
struct Scenario {
    n: usize,
    /// The live node whose engine is evaluated.
    evaluator: usize,
    dead: Vec<bool>,
    saturated: Vec<bool>,
    /// Management-network group of each node: nodes in different groups do
    /// not hear each other. All zero without a partition.
    group: Vec<u8>,
    /// `cut[i * n + j]`, read with `i < j`.
    cut: Vec<bool>,
    /// `cut_ago[i * n + j]`, read with `i < j`.
    cut_ago: Vec<u64>,
    /// When a dead node died, or a partitioned-away node was last heard.
    gone_ago: Vec<u64>,
    /// Whether the evaluator still holds that last (stale) report, or never
    /// had one since it started.
    kept_last_report: Vec<bool>,
    report_age: Vec<u64>,
    /// `silence[i * n + j]`: i's silence on its cable to j while healthy.
    silence: Vec<u64>,
    lag: Vec<u64>,
    warm_up: bool,
}

impl Scenario {
    fn live(&self, i: usize) -> bool {
        !self.dead[i]
    }

    /// The evaluator receives this node's reports now.
    fn reachable(&self, i: usize) -> bool {
        self.live(i) && self.group[i] == self.group[self.evaluator]
    }

    fn is_cut(&self, i: usize, j: usize) -> bool {
        let (x, y) = (i.min(j), i.max(j));
        self.cut[x * self.n + y]
    }

    /// Live nodes the evaluator cannot hear because of the partition: their
    /// side of the story is hidden from it.
    fn hidden(&self) -> Vec<usize> {
        (0..self.n)
            .filter(|i| self.live(*i) && !self.reachable(*i))
            .collect()
    }

    fn expect_quorum(&self) -> bool {
        (0..self.n).filter(|i| self.reachable(*i)).count() * 2 > self.n
    }

    /// The same mesh before anything went wrong.
    fn healthy(&self) -> Self {
        Self {
            dead: vec![false; self.n],
            group: vec![0; self.n],
            cut: vec![false; self.n * self.n],
            ..self.clone()
        }
    }

    /// How long ago the cable from `from` to `to` stopped answering, if it
    /// has: cut, or the far end died.
    fn fault_ago(&self, from: usize, to: usize) -> Option<u64> {
        let (x, y) = (from.min(to), from.max(to));
        let cut = self.is_cut(from, to).then(|| self.cut_ago[x * self.n + y]);
        let died = self.dead[to].then(|| self.gone_ago[to]);
        cut.into_iter().chain(died).max()
    }

    /// What `from` measured on its cable to `to`, `observed_ago` ms before
    /// `now`.
    fn observation(&self, from: usize, to: usize, observed_ago: u64) -> LinkObservation {
        let at = ago(observed_ago);
        match self.fault_ago(from, to) {
            // Every probe sent since the fault is lost.
            Some(fault) if fault > observed_ago => {
                let silence_ms = fault - observed_ago;
                observation(from, to, silence_ms, silence_ms / 100, at)
            }
            _ => {
                let lag = if self.saturated[from] {
                    self.lag[from]
                } else {
                    0
                };
                observation(from, to, self.silence[from * self.n + to] + lag, 0, at)
            }
        }
    }

    /// `p`'s report as received `received_ago` ms before `now`.
    fn report(&self, p: usize, received_ago: u64, hears: Vec<NodeId>) -> Received {
        let links = (0..self.n)
            .filter(|o| *o != p)
            .map(|o| self.observation(p, o, received_ago))
            .collect();
        Received {
            report: PeerReport {
                sender: identity(p),
                sequence: 1,
                sent_at: ago(received_ago),
                links,
                alarms: vec![],
                hears,
                load: load(self.saturated[p]),
                facts: None,
            },
            at: ago(received_ago),
        }
    }

    /// The evaluator's inputs at `now`.
    fn inputs(&self) -> MeshInputs {
        let e = self.evaluator;
        let mut reports = BTreeMap::new();
        for p in (0..self.n).filter(|p| *p != e) {
            if self.reachable(p) {
                // A live peer on this side hears the live nodes on this side.
                let hears = (0..self.n)
                    .filter(|q| *q != p && self.reachable(*q))
                    .map(node_id)
                    .collect();
                reports.insert(
                    node_id(p),
                    Arc::new(self.report(p, self.report_age[p], hears)),
                );
            } else if self.kept_last_report[p] {
                // The last report before it died or was cut off: it heard
                // everyone alive then. Stale, so it carries no vote.
                let gone = self.gone_ago[p];
                let hears = (0..self.n)
                    .filter(|q| *q != p && (self.live(*q) || self.gone_ago[*q] > gone))
                    .map(node_id)
                    .collect();
                reports.insert(node_id(p), Arc::new(self.report(p, gone, hears)));
            }
        }
        MeshInputs {
            local: identity(e),
            configured: (0..self.n).map(node_id).collect(),
            local_load: load(self.saturated[e]),
            local_links: (0..self.n)
                .filter(|o| *o != e)
                .map(|o| LocalObservation {
                    observation: self.observation(e, o, 0),
                    at: now(),
                })
                .collect(),
            expected_links: (0..self.n)
                .filter(|o| *o != e)
                .map(|o| ExpectedLink {
                    local: LinkEnd::node_only(node_id(e)),
                    remote: LinkEnd::node_only(node_id(o)),
                    expected_speed_bps: None,
                })
                .collect(),
            reports,
            local_alarms: vec![],
        }
    }

    /// A fresh engine, warmed up on the healthy mesh if the case says so.
    fn engine(&self) -> Engine {
        let mut engine = Engine::new(settings());
        if self.warm_up {
            let before = Duration::from_millis(WARM_UP_BEFORE_MS);
            engine.evaluate(&shifted(&self.healthy().inputs(), before), now() - before);
        }
        engine
    }

    /// The engine's verdicts at `now`, and the engine for further looks.
    fn evaluate(&self) -> (MeshStatus, Engine) {
        let mut engine = self.engine();
        let status = engine.evaluate(&self.inputs(), now());
        (status, engine)
    }
}

/// Moves every time in `inputs` back by `by`: the healthy warm-up mesh as it
/// was then.
fn shifted(inputs: &MeshInputs, by: Duration) -> MeshInputs {
    let mut inputs = inputs.clone();
    let shift_obs = |o: &mut LinkObservation| {
        o.last_reply_at = o.last_reply_at.map(|t| t - by);
    };
    for l in &mut inputs.local_links {
        l.at -= by;
        shift_obs(&mut l.observation);
    }
    for r in inputs.reports.values_mut() {
        let r = Arc::make_mut(r);
        r.at -= by;
        r.report.sent_at -= by;
        r.report.links.iter_mut().for_each(shift_obs);
    }
    inputs
}

fn load(saturated: bool) -> NodeLoad {
    NodeLoad {
        cpu_busy_ratio: if saturated { 1.0 } else { 0.3 },
        cpu_saturated: saturated,
    }
}

/// One end's observation with `silence_ms` since the last reply and the
/// last `lost` probes (at 10 a second) unanswered; the others were answered
/// with a healthy RTT. A saturated node's late timers show as silence, not
/// as loss: its probes are answered, it just looks late.
fn observation(
    from: usize,
    to: usize,
    silence_ms: u64,
    lost: u64,
    at: SystemTime,
) -> LinkObservation {
    let window = |window: Duration, sent: u64| LossWindow {
        window,
        sent,
        lost: lost.min(sent),
    };
    LinkObservation {
        local: LinkEnd::node_only(node_id(from)),
        remote: LinkEnd::node_only(node_id(to)),
        interface_state: InterfaceState::Up,
        negotiated_speed_bps: Some(80_000_000_000),
        expected_speed_bps: Some(80_000_000_000),
        rdma_port_state: RdmaPortState::Active,
        gid_matches_address: Some(true),
        rtt: RttSummary {
            p50: Duration::from_micros(40),
            p90: Duration::from_micros(60),
            p99: Duration::from_micros(90),
            max: Duration::from_micros(200),
            host_delay_p50: Duration::from_micros(8),
            baseline_p50: Duration::from_micros(40),
            baseline_p99: Duration::from_micros(100),
            samples: 1_000,
        },
        rtt_histogram: RttHistogram::default(),
        loss: vec![window(SHORT_WINDOW, 10), window(MEDIUM_WINDOW, 100)],
        mtu_loss: vec![],
        probes_sent_total: 10_000,
        probes_lost_total: lost,
        last_reply_at: Some(at - Duration::from_millis(silence_ms)),
        error_counters: vec![],
        silence: Duration::from_millis(silence_ms),
        consecutive_lost: u32::try_from(lost).unwrap_or(u32::MAX),
        rdma_probe: None,
    }
}

/// Meshes of 2 to 16 nodes with a random evaluator (always alive), a death
/// rate and a cut rate drawn per case so that both quorate and minority
/// views come up often, saturated nodes, and a partition in about a third of
/// the cases.
fn scenario() -> impl Strategy<Value = Scenario> {
    let rates = (
        2usize..=16,
        prop_oneof![Just(0.05), Just(0.2), Just(0.45), Just(0.7)],
        prop_oneof![Just(0.05), Just(0.15), Just(0.4)],
        prop::bool::weighted(0.35),
        any::<bool>(),
    );
    rates.prop_flat_map(|(n, dead_rate, cut_rate, partitioned, warm_up)| {
        // Group 0 is the larger side and the evaluator is put in it below,
        // so that partitions seen from a quorate majority come up often
        // (minority views come up anyway, from the dead).
        let groups = if partitioned {
            let group = prop_oneof![3 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
            prop::collection::vec(group, n).boxed()
        } else {
            Just(vec![0; n]).boxed()
        };
        let faults = (
            0..n,
            prop::collection::vec(prop::bool::weighted(dead_rate), n),
            prop::collection::vec(prop::bool::weighted(0.3), n),
            groups,
            prop::collection::vec(prop::bool::weighted(cut_rate), n * n),
            prop::collection::vec(CUT_AGO_MIN_MS..=CUT_AGO_MAX_MS, n * n),
            prop::collection::vec(GONE_AGO_MIN_MS..=GONE_AGO_MAX_MS, n),
            prop::collection::vec(any::<bool>(), n),
        );
        let timing = (
            prop::collection::vec(0..=REPORT_AGE_MAX_MS, n),
            prop::collection::vec(0..=HEALTHY_SILENCE_MAX_MS, n * n),
            prop::collection::vec(0..=SATURATED_LAG_MAX_MS, n),
        );
        (faults, timing).prop_map(
            move |(
                (evaluator, mut dead, saturated, mut group, cut, cut_ago, gone_ago, kept),
                (report_age, silence, lag),
            )| {
                dead[evaluator] = false;
                group[evaluator] = 0;
                Scenario {
                    n,
                    evaluator,
                    dead,
                    saturated,
                    group,
                    cut,
                    cut_ago,
                    gone_ago,
                    kept_last_report: kept,
                    report_age,
                    silence,
                    lag,
                    warm_up,
                }
            },
        )
    })
}

// ---------------------------------------------------------------------------
// Reading the verdicts.

fn index_of(id: &NodeId) -> usize {
    id.as_str()[1..].parse().expect("ids are n00..n15")
}

fn links_by_pair(status: &MeshStatus) -> BTreeMap<(usize, usize), &LinkVerdict> {
    status
        .links
        .iter()
        .map(|l| ((index_of(&l.a.node), index_of(&l.b.node)), l))
        .collect()
}

fn node_states(status: &MeshStatus) -> BTreeMap<usize, NodeState> {
    status
        .nodes
        .iter()
        .map(|v| (index_of(&v.id), v.state))
        .collect()
}

fn pairs(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |i| (i + 1..n).map(move |j| (i, j)))
}

/// Every link the engine must judge: all of them after a warm-up; from a
/// cold start, all but those between two dead nodes it never heard of.
fn must_be_judged(s: &Scenario, (i, j): (usize, usize)) -> bool {
    s.warm_up
        || s.live(i)
        || s.live(j)
        || (s.dead[i] && s.kept_last_report[i])
        || (s.dead[j] && s.kept_last_report[j])
}

fn verdict_of<'s>(
    s: &Scenario,
    links: &BTreeMap<(usize, usize), &'s LinkVerdict>,
    pair: (usize, usize),
) -> Result<Option<&'s LinkVerdict>, TestCaseError> {
    let verdict = links.get(&pair).copied();
    prop_assert!(
        verdict.is_some() || !must_be_judged(s, pair),
        "link n{:02}–n{:02} missing from the verdicts",
        pair.0,
        pair.1
    );
    Ok(verdict)
}

// ---------------------------------------------------------------------------
// The properties. A few hundred cases each keep the whole file well under a
// minute on two shared cores.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// With quorum and nothing hidden by a partition, the verdicts are the
    /// truth: dead nodes down, live nodes up, cut cables down and blamed on
    /// the link, a dead node's links down and blamed on it, all else up.
    #[test]
    fn with_quorum_and_nothing_hidden_the_verdicts_are_the_injected_faults(s in scenario()) {
        prop_assume!(s.expect_quorum() && s.hidden().is_empty());
        let (status, _) = s.evaluate();
        prop_assert!(status.quorum.has_quorum);

        let nodes = node_states(&status);
        for i in 0..s.n {
            let want = if s.live(i) { NodeState::Up } else { NodeState::Down };
            prop_assert_eq!(nodes.get(&i), Some(&want), "node n{:02}", i);
        }

        let links = links_by_pair(&status);
        for pair @ (i, j) in pairs(s.n) {
            let Some(l) = verdict_of(&s, &links, pair)? else { continue };
            if s.dead[i] || s.dead[j] {
                prop_assert_eq!(l.state, LinkState::Down, "{:?}", l);
                prop_assert_eq!(l.blame, Blame::Node, "{:?}", l);
                let blamed = l.blamed_node.as_ref().map(index_of);
                prop_assert!(
                    blamed.is_some_and(|b| (b == i || b == j) && s.dead[b]),
                    "blamed {:?} for {:?}", blamed, l
                );
            } else if s.is_cut(i, j) {
                prop_assert_eq!(l.state, LinkState::Down, "{:?}", l);
                prop_assert_eq!(l.blame, Blame::Link, "{:?}", l);
                prop_assert_eq!(&l.blamed_node, &None);
            } else {
                prop_assert_eq!(l.state, LinkState::Up, "{:?}", l);
                prop_assert_eq!(l.blame, Blame::None, "{:?}", l);
            }
        }
    }

    /// The promise that matters most to an operator: a cable whose two ends
    /// are alive, heard by the evaluator and not cut is never called down
    /// and never blamed, whatever else is broken, with or without quorum,
    /// with saturated CPUs or not. With quorum it is up.
    #[test]
    fn a_healthy_cable_between_heard_live_nodes_is_never_down_or_blamed(s in scenario()) {
        let (status, _) = s.evaluate();
        let links = links_by_pair(&status);
        for pair @ (i, j) in pairs(s.n) {
            if !s.reachable(i) || !s.reachable(j) || s.is_cut(i, j) {
                continue;
            }
            let Some(l) = verdict_of(&s, &links, pair)? else { continue };
            prop_assert_ne!(l.state, LinkState::Down, "{:?}", l);
            prop_assert_eq!(l.blame, Blame::None, "{:?}", l);
            if status.quorum.has_quorum {
                prop_assert_eq!(l.state, LinkState::Up, "{:?}", l);
            }
        }
    }

    /// With quorum, a link is blamed only for a cut cable, and a node only
    /// when it is dead or cut off from the evaluator's side of a partition
    /// (the majority cannot tell those apart, and says so by blaming the
    /// node rather than its cables).
    #[test]
    fn only_cut_cables_are_blamed_on_the_link_and_only_unheard_nodes_on_the_node(
        s in scenario()
    ) {
        let (status, _) = s.evaluate();
        prop_assume!(status.quorum.has_quorum);
        let nodes = node_states(&status);
        for i in 0..s.n {
            let want = if s.reachable(i) { NodeState::Up } else { NodeState::Down };
            prop_assert_eq!(nodes.get(&i), Some(&want), "node n{:02}", i);
        }
        for l in &status.links {
            let (i, j) = (index_of(&l.a.node), index_of(&l.b.node));
            match l.blame {
                Blame::Link => {
                    prop_assert!(s.is_cut(i, j), "link blamed without a cut: {:?}", l);
                    prop_assert!(s.reachable(i) && s.reachable(j), "{:?}", l);
                }
                Blame::Node => {
                    let blamed = l.blamed_node.as_ref().map(index_of);
                    prop_assert!(
                        blamed.is_some_and(|b| (b == i || b == j) && !s.reachable(b)),
                        "blamed {:?} for {:?}", blamed, l
                    );
                }
                Blame::None => prop_assert_eq!(l.state, LinkState::Up, "{:?}", l),
            }
        }
    }

    /// A minority raises nothing: every link is held as unknown and the one
    /// alarm says there is no quorum.
    #[test]
    fn without_quorum_every_link_is_unknown_and_the_only_alarm_is_no_quorum(s in scenario()) {
        prop_assume!(!s.expect_quorum());
        let (status, _) = s.evaluate();
        prop_assert!(!status.quorum.has_quorum);
        for l in &status.links {
            prop_assert_eq!(l.state, LinkState::Unknown, "{:?}", l);
            prop_assert_eq!(l.blame, Blame::None, "{:?}", l);
        }
        let kinds: Vec<&str> = status.alarms.iter().map(|a| a.kind.as_str()).collect();
        prop_assert_eq!(kinds, vec!["no_quorum"]);
    }

    /// The members are the evaluator and the peers it hears; quorum is a
    /// strict majority of the configured nodes; the leader is the lowest
    /// member id, and there is none without quorum.
    #[test]
    fn the_leader_is_the_lowest_quorum_member_and_there_is_none_without_quorum(
        s in scenario()
    ) {
        let (status, _) = s.evaluate();
        let q = &status.quorum;
        let heard: Vec<NodeId> = (0..s.n).filter(|i| s.reachable(*i)).map(node_id).collect();
        prop_assert_eq!(&q.members, &heard);
        prop_assert_eq!(q.has_quorum, s.expect_quorum());
        if q.has_quorum {
            prop_assert_eq!(q.leader.as_ref(), q.members.iter().min());
        } else {
            prop_assert_eq!(&q.leader, &None);
        }
    }

    /// Same history and same inputs, same verdicts: two engines agree, and
    /// evaluating the same inputs again at the same instant changes nothing.
    #[test]
    fn the_same_inputs_give_the_same_verdicts(s in scenario()) {
        let inputs = s.inputs();
        let (first, mut engine) = s.evaluate();
        let (second, _) = s.evaluate();
        prop_assert_eq!(&first, &second);
        let again = engine.evaluate(&inputs, now());
        prop_assert_eq!(&first, &again);
    }
}

// ---------------------------------------------------------------------------
// Robustness: whatever a peer sends (the wire conversion checks ids and
// durations, nothing else), the engine must not panic.

fn any_node() -> impl Strategy<Value = NodeId> {
    // Mostly configured members, sometimes a stranger.
    prop_oneof![
        8 => (0usize..6).prop_map(node_id),
        1 => Just(NodeId::new("stranger").expect("valid id")),
    ]
}

fn any_observation() -> impl Strategy<Value = LinkObservation> {
    let window = (
        prop_oneof![
            Just(SHORT_WINDOW),
            Just(MEDIUM_WINDOW),
            any::<u64>().prop_map(Duration::from_nanos)
        ],
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(window, sent, lost)| LossWindow { window, sent, lost });
    let nanos = || any::<u64>().prop_map(Duration::from_nanos);
    let rtt = (
        (nanos(), nanos(), nanos(), nanos()),
        (nanos(), nanos(), nanos(), any::<u64>()),
    )
        .prop_map(
            |((p50, p90, p99, max), (host_delay_p50, baseline_p50, baseline_p99, samples))| {
                RttSummary {
                    p50,
                    p90,
                    p99,
                    max,
                    host_delay_p50,
                    baseline_p50,
                    baseline_p99,
                    samples,
                }
            },
        );
    (
        (
            any_node(),
            any_node(),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>()),
        ),
        (
            prop::sample::select(RdmaPortState::ALL),
            rtt,
            prop::collection::vec(window.clone(), 0..4),
            prop::collection::vec(window, 0..3),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            prop::option::of(0u64..4_000_000),
            nanos(),
            any::<u32>(),
        ),
    )
        .prop_map(
            |(
                (local, remote, negotiated, expected),
                (rdma_port_state, rtt, loss, mtu_loss),
                (sent, lost, replied_ms, silence, consecutive_lost),
            )| LinkObservation {
                local: LinkEnd::node_only(local),
                remote: LinkEnd::node_only(remote),
                interface_state: InterfaceState::Unknown,
                negotiated_speed_bps: negotiated,
                expected_speed_bps: expected,
                rdma_port_state,
                gid_matches_address: None,
                rtt,
                rtt_histogram: RttHistogram::default(),
                loss,
                mtu_loss,
                probes_sent_total: sent,
                probes_lost_total: lost,
                last_reply_at: replied_ms.map(ago),
                error_counters: vec![],
                silence,
                consecutive_lost,
                rdma_probe: None,
            },
        )
}

/// A report received up to 20 s ago or, with clock skew, up to 5 s ahead.
fn any_received() -> impl Strategy<Value = (NodeId, Received)> {
    (
        any_node(),
        any_node(),
        -5_000i64..20_000,
        prop::collection::vec(any_observation(), 0..8),
        prop::collection::vec(any_node(), 0..8),
        any::<bool>(),
    )
        .prop_map(|(key, sender, age_ms, links, hears, saturated)| {
            let at = if age_ms >= 0 {
                ago(age_ms.unsigned_abs())
            } else {
                now() + Duration::from_millis(age_ms.unsigned_abs())
            };
            let report = PeerReport {
                sender: NodeIdentity {
                    id: sender,
                    incarnation: Incarnation(1),
                    version: "fuzz".into(),
                    hostname: "fuzz".into(),
                },
                sequence: 1,
                sent_at: at,
                links,
                alarms: vec![],
                hears,
                load: load(saturated),
                facts: None,
            };
            (key, Received { report, at })
        })
}

fn any_inputs() -> impl Strategy<Value = MeshInputs> {
    (
        any_node(),
        subsequence((0usize..6).map(node_id).collect::<Vec<_>>(), 0..=6),
        any::<bool>(),
        prop::collection::vec(any_observation(), 0..8),
        prop::collection::vec((any_node(), any_node()), 0..4),
        prop::collection::vec(any_received(), 0..8),
    )
        .prop_map(
            |(local, configured, saturated, local_links, expected, reports)| MeshInputs {
                local: NodeIdentity {
                    id: local,
                    incarnation: Incarnation(1),
                    version: "fuzz".into(),
                    hostname: "fuzz".into(),
                },
                configured: configured.into_iter().collect::<BTreeSet<_>>(),
                local_load: load(saturated),
                local_links: local_links
                    .into_iter()
                    .map(|observation| LocalObservation {
                        observation,
                        at: now(),
                    })
                    .collect(),
                expected_links: expected
                    .into_iter()
                    .map(|(l, r)| ExpectedLink {
                        local: LinkEnd::node_only(l),
                        remote: LinkEnd::node_only(r),
                        expected_speed_bps: None,
                    })
                    .collect(),
                reports: reports
                    .into_iter()
                    .map(|(id, r)| (id, Arc::new(r)))
                    .collect(),
                local_alarms: vec![],
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Garbage in (lost > sent, absurd durations, strangers, ends speaking
    /// for others, reports from the future, a clock going back) is judged
    /// without a panic, deterministically, and only about configured nodes.
    #[test]
    fn arbitrary_inputs_never_panic_and_are_judged_deterministically(
        steps in prop::collection::vec((any_inputs(), -3_000i64..3_000), 1..4)
    ) {
        let run = || {
            let mut engine = Engine::new(settings());
            steps
                .iter()
                .map(|(inputs, shift_ms)| {
                    let at = if *shift_ms >= 0 {
                        now() + Duration::from_millis(shift_ms.unsigned_abs())
                    } else {
                        now() - Duration::from_millis(shift_ms.unsigned_abs())
                    };
                    engine.evaluate(inputs, at)
                })
                .collect::<Vec<_>>()
        };
        let first = run();
        prop_assert_eq!(&first, &run());
        for (status, (inputs, _)) in first.iter().zip(&steps) {
            for l in &status.links {
                prop_assert!(inputs.configured.contains(&l.a.node), "{:?}", l);
                prop_assert!(inputs.configured.contains(&l.b.node), "{:?}", l);
            }
            prop_assert_eq!(status.quorum.leader.is_some(), status.quorum.has_quorum);
        }
    }
}
