//! The opt-in active RDMA probe (`probe.rdma`): one task per cable, each
//! with one UC queue pair on the cable's RDMA port
//! (`meshd_platform::verbs_probe`), sending the peer's queue pair a small
//! message once a second and timing the reply. The two ends swap their
//! queue pairs in their link observations, over the authenticated report
//! streams; the decisions are `meshd_model::rdma`'s.
//!
//! Every verbs call runs on the endpoint's own thread with a deadline; this
//! task only waits for the answers, on the blocking pool. Stopping the task
//! closes the queue pair: nothing stays allocated on the device after
//! meshd stops.
//!
//! Only the link's own failures count against it: probes unanswered or
//! not sendable once the queue pair is up, a device that went away, no
//! port with the link's address, a stack that hangs. A stack that does not
//! offer what the probe needs (no library, a missing call, a refused
//! allocation or attribute) is a blind spot: the link is not probed over
//! RDMA, nothing is counted, and the reason is one of this node's facts'
//! blind spots ([`blind_spots`]) until the probe runs.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{NodeId, RdmaEndpoint};
use meshd_model::rdma::{Partner, ProbeOutcome, RdmaProbeEnd, RdmaProbeStats, partner};
use meshd_model::verdict::ExpectedLink;
use meshd_platform::linux::queue_pairs;
use meshd_platform::verbs::{self, VerbsError};
use meshd_platform::verbs_probe::{EndpointAddress, ProbeEndpoint, ProbeError};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, RdmaProbeMode};
use crate::state::SharedBook;

/// One probe a second per cable: the bound, and plenty to see a
/// path that stopped working within the verdicts' debounce.
const PROBE_PERIOD: Duration = Duration::from_secs(1);
/// A reply later than this is a failure; RDMA round trips are microseconds.
const REPLY_WAIT: Duration = Duration::from_millis(500);
/// A peer whose report streams carried nothing for this long is not
/// probed: its queue pair may be gone with it.
const PEER_HEARD_WITHIN: Duration = Duration::from_secs(3);
/// How often "idle" asks the kernel who holds queue pairs (a command run).
const IDLE_CHECK_PERIOD: Duration = Duration::from_secs(5);
/// How often an open queue pair's device is looked for in the library's
/// device list. A device being removed leaves the list first, then the
/// kernel waits for every program to close it (drivers that cannot take it
/// away from them, such as rxe): meshd must let go within this.
const DEVICE_CHECK_PERIOD: Duration = Duration::from_secs(2);
/// How long a stack that would not run the probe is left alone before the
/// next try: every try allocates on the device, failed allocations have
/// wedged ports (ARCHITECTURE.md, Field facts), and a refusal stays until
/// something changes (an update, RDMA switched on, a job's queue pairs
/// released).
const UNSUPPORTED_RETRY: Duration = Duration::from_secs(60);

/// What the probe runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaSettings {
    pub mode: RdmaProbeMode,
    /// The verbs library; `None` where the OS has none.
    pub library: Option<&'static str>,
}

/// The active RDMA probe's mode by `config`, and this OS's verbs library.
pub fn settings(config: &Config) -> RdmaSettings {
    RdmaSettings {
        mode: config.probe.rdma,
        library: meshd_platform::verbs::library_for(meshd_platform::this_os()),
    }
}

/// Every cable's RDMA probe, by the far end's node.
pub type RdmaEnds = Arc<BTreeMap<NodeId, RdmaProbeEnd>>;

/// Why this node's stack does not run the RDMA probe of each cable that it
/// does not, by the far end's node.
pub type RdmaUnsupported = Arc<BTreeMap<NodeId, String>>;

/// The blind spots of `unsupported`: one line per reason, naming the
/// cables it keeps from being probed.
pub fn blind_spots(unsupported: &RdmaUnsupported) -> Vec<String> {
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (peer, reason) in unsupported.iter() {
        by_reason.entry(reason).or_default().push(peer.as_str());
    }
    by_reason
        .into_iter()
        .map(|(reason, peers)| {
            format!(
                "the RDMA probe cannot run here (links to {}), so their RDMA paths are not probed: {reason}",
                peers.join(", ")
            )
        })
        .collect()
}

#[derive(Debug)]
struct Running {
    links: Vec<ExpectedLink>,
    settings: RdmaSettings,
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

/// The RDMA probe tasks of this node.
#[derive(Debug)]
pub struct RdmaProbes {
    ends: watch::Sender<RdmaEnds>,
    unsupported: watch::Sender<RdmaUnsupported>,
    book: SharedBook,
    shutdown: CancellationToken,
    running: Option<Running>,
}

impl RdmaProbes {
    /// Starts probing `links` when `settings` ask for it; stops with
    /// `shutdown`. The peers' queue pairs are read from `book`.
    pub fn start(
        links: Vec<ExpectedLink>,
        settings: RdmaSettings,
        book: SharedBook,
        shutdown: CancellationToken,
    ) -> Self {
        let (ends, _) = watch::channel(RdmaEnds::default());
        let (unsupported, _) = watch::channel(RdmaUnsupported::default());
        let mut probes = Self {
            ends,
            unsupported,
            book,
            shutdown,
            running: None,
        };
        probes.apply(links, settings);
        probes
    }

    /// Follows a new config: any change to the cables or the mode starts
    /// every probe again (a queue pair is cheap; its history is a streak).
    pub fn apply(&mut self, links: Vec<ExpectedLink>, settings: RdmaSettings) {
        if let Some(running) = &self.running
            && running.links == links
            && running.settings == settings
        {
            return;
        }
        if let Some(mut old) = self.running.take() {
            old.stop.cancel();
            // The old tasks close their queue pairs on their own; new ones
            // open new queue pairs, which the peers connect to afresh.
            old.tasks.detach_all();
        }
        self.ends.send_replace(RdmaEnds::default());
        self.unsupported.send_if_modified(|current| {
            let had = !current.is_empty();
            *current = RdmaUnsupported::default();
            had
        });
        let stop = self.shutdown.child_token();
        let mut tasks = JoinSet::new();
        if settings.mode != RdmaProbeMode::Off {
            match settings.library {
                Some(library) => {
                    for link in &links {
                        tasks.spawn(probe_link(LinkProbe {
                            link: link.clone(),
                            mode: settings.mode,
                            library,
                            book: self.book.clone(),
                            ends: self.ends.clone(),
                            unsupported: self.unsupported.clone(),
                            stop: stop.clone(),
                        }));
                    }
                }
                None => tracing::warn!(
                    mode = settings.mode.as_str(),
                    "probe.rdma is on, but this OS has no verbs library; the RDMA probe does not run"
                ),
            }
        }
        self.running = Some(Running {
            links,
            settings,
            stop,
            tasks,
        });
    }

    /// Every cable's RDMA probe; receivers are woken when what the verdicts
    /// or the peers read changed (a queue pair, a failing streak), not
    /// for every probe.
    pub fn subscribe(&self) -> watch::Receiver<RdmaEnds> {
        self.ends.subscribe()
    }

    /// Why the probe does not run on some cables, for this node's facts.
    pub fn unsupported(&self) -> watch::Receiver<RdmaUnsupported> {
        self.unsupported.subscribe()
    }

    /// Waits until every task has closed its queue pair (after shutdown).
    pub async fn stopped(self) {
        if let Some(mut running) = self.running {
            running.stop.cancel();
            while let Some(ended) = running.tasks.join_next().await {
                if let Err(error) = ended {
                    tracing::warn!(%error, "an RDMA probe task ended abnormally");
                }
            }
        }
    }
}

/// One cable's probe and what it needs.
struct LinkProbe {
    link: ExpectedLink,
    mode: RdmaProbeMode,
    library: &'static str,
    book: SharedBook,
    ends: watch::Sender<RdmaEnds>,
    unsupported: watch::Sender<RdmaUnsupported>,
    stop: CancellationToken,
}

/// This end's queue pair and the peer's it is connected to.
struct Queue {
    endpoint: ProbeEndpoint,
    connected_to: Option<RdmaEndpoint>,
}

impl Queue {
    fn own(&self) -> RdmaEndpoint {
        let EndpointAddress { qpn, psn, gid } = self.endpoint.local().address;
        RdmaEndpoint {
            qpn,
            psn,
            gid,
            connected_qpn: self.connected_to.map(|peer| peer.qpn),
        }
    }
}

/// The IPv4-mapped GID of a link end's address: what RoCE v2 sends from.
fn gid_of(address: Option<IpAddr>) -> Option<Ipv6Addr> {
    match address? {
        IpAddr::V4(v4) => Some(v4.to_ipv6_mapped()),
        IpAddr::V6(_) => None,
    }
}

/// Runs `call` on the blocking pool; `None` when the pool is gone
/// (shutdown) or the call panicked.
async fn blocking<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(call).await.ok()
}

/// Closes the queue pair on the blocking pool: the endpoint waits for its
/// thread to free everything.
async fn close(queue: Option<Queue>) {
    if let Some(queue) = queue {
        let _ = blocking(move || drop(queue)).await;
    }
}

async fn probe_link(probe: LinkProbe) {
    let peer = probe.link.remote.node.clone();
    let (Some(gid), Some(peer_gid)) = (
        gid_of(probe.link.local.address),
        gid_of(probe.link.remote.address),
    ) else {
        tracing::warn!(
            %peer,
            "the RDMA probe needs an IPv4 address on both ends of the cable (RoCE v2 GIDs are \
             IPv4-mapped); this cable is not probed over RDMA"
        );
        return;
    };
    let mut state = LinkState::default();
    let mut ticks = crate::cadence::every(PROBE_PERIOD);
    loop {
        tokio::select! {
            () = probe.stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        state.step(&probe, gid, peer_gid).await;
        // A task stopped by a new config while it stepped must not write
        // over what its successor for the same peer publishes; the ends
        // start afresh with every new config (`RdmaProbes::apply`).
        if probe.stop.is_cancelled() {
            break;
        }
        publish(&probe.ends, &peer, state.end());
        publish_unsupported(&probe.unsupported, &peer, state.unsupported_reason());
    }
    close(state.queue.take()).await;
}

/// Stores this cable's end; wakes the readers only when what the verdicts
/// or the peer read changed, not for every probe's figures.
fn publish(ends: &watch::Sender<RdmaEnds>, peer: &NodeId, end: RdmaProbeEnd) {
    ends.send_if_modified(|current| {
        let before = current.get(peer);
        if before == Some(&end) {
            return false;
        }
        let news = end.is_news_against(before);
        let mut changed = (**current).clone();
        changed.insert(peer.clone(), end);
        *current = Arc::new(changed);
        news
    });
}

/// Stores why this cable is not probed (or that it is), waking the facts
/// only when that changed.
fn publish_unsupported(
    unsupported: &watch::Sender<RdmaUnsupported>,
    peer: &NodeId,
    reason: Option<&str>,
) {
    unsupported.send_if_modified(|current| {
        if current.get(peer).map(String::as_str) == reason {
            return false;
        }
        let mut changed = (**current).clone();
        match reason {
            Some(reason) => changed.insert(peer.clone(), reason.to_owned()),
            None => changed.remove(peer),
        };
        *current = Arc::new(changed);
        true
    });
}

/// What this end's probe is doing, or why it is not probing, as last
/// logged (each is logged once when it starts, not every second).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    Probing,
    Busy(usize),
    IdleUnknown(String),
    CannotOpen(String),
    Unsupported(String),
    PeerAbsent,
    WrongGid(Ipv6Addr),
}

#[derive(Default)]
struct LinkState {
    queue: Option<Queue>,
    stats: RdmaProbeStats,
    /// Whether the last probe step probed: figures are shown only then.
    probing: bool,
    sequence: u64,
    /// "idle": when the queue pairs were last counted, and the answer.
    idle_checked: Option<(Instant, Result<usize, String>)>,
    /// When the open queue pair's device was last looked for.
    device_checked: Option<Instant>,
    condition: Option<Condition>,
    unsupported: Option<Unsupported>,
}

/// This node's stack would not run the probe.
#[derive(Debug, Clone)]
struct Unsupported {
    reason: String,
    /// Refused when connecting (else when opening): opening again does not
    /// show it is gone.
    at_connect: bool,
    retry_at: Instant,
}

impl LinkState {
    /// The device of the open queue pair.
    fn device(&self) -> Option<String> {
        self.queue
            .as_ref()
            .map(|q| q.endpoint.local().device.clone())
    }

    fn end(&self) -> RdmaProbeEnd {
        RdmaProbeEnd {
            endpoint: self.queue.as_ref().map(Queue::own),
            probe: if self.probing {
                self.stats.figures()
            } else {
                None
            },
        }
    }

    fn note(&mut self, peer: &NodeId, condition: Condition) {
        if self.condition.as_ref() == Some(&condition) {
            return;
        }
        match &condition {
            Condition::Probing => {
                tracing::info!(%peer, "RDMA probe: probing the peer's queue pair")
            }
            Condition::Busy(pairs) => tracing::info!(
                %peer,
                pairs,
                "RDMA probe paused (probe.rdma = \"idle\"): other programs hold queue pairs"
            ),
            Condition::IdleUnknown(reason) => tracing::warn!(
                %peer,
                "RDMA probe paused (probe.rdma = \"idle\"): cannot tell who holds queue pairs: {reason}"
            ),
            Condition::CannotOpen(reason) => {
                tracing::warn!(%peer, "RDMA probe: cannot open a queue pair: {reason}");
            }
            Condition::Unsupported(reason) => tracing::warn!(
                %peer,
                retry_in = ?UNSUPPORTED_RETRY,
                "RDMA probe: not run on this link, a blind spot and not a failure: {reason}"
            ),
            Condition::PeerAbsent => tracing::info!(
                %peer,
                "RDMA probe: waiting for the peer's queue pair (its probe is off, paused, or not heard)"
            ),
            Condition::WrongGid(gid) => tracing::warn!(
                %peer,
                %gid,
                "RDMA probe: the peer's queue pair claims a GID that is not its address on this cable; not connecting"
            ),
        }
        self.condition = Some(condition);
    }

    /// Stops probing for a reason that is not the path's.
    fn pause(&mut self) {
        self.probing = false;
        self.stats.interrupt();
    }

    fn record(&mut self, outcome: ProbeOutcome) {
        self.probing = true;
        self.stats.record(outcome, SystemTime::now());
    }

    /// Why this node's stack does not run the probe on this link, while
    /// that holds.
    fn unsupported_reason(&self) -> Option<&str> {
        self.unsupported.as_ref().map(|u| u.reason.as_str())
    }

    /// The stack would not run the probe (`reason`): nothing is counted,
    /// the probe pauses, and it is tried again after a while.
    fn refused(&mut self, peer: &NodeId, reason: String, at_connect: bool, now: Instant) {
        self.pause();
        self.note(peer, Condition::Unsupported(reason.clone()));
        self.unsupported = Some(Unsupported {
            reason,
            at_connect,
            retry_at: now + UNSUPPORTED_RETRY,
        });
    }

    /// Whether a refusal still keeps the probe from trying again at `now`.
    fn refusal_holds(&self, now: Instant) -> bool {
        self.unsupported.as_ref().is_some_and(|u| now < u.retry_at)
    }

    /// The outcome of opening a queue pair, when it did not open: a failure
    /// counts against the link, a refusal is a blind spot.
    fn open_failed(&mut self, peer: &NodeId, err: ProbeError, now: Instant) {
        match err {
            ProbeError::Failed(err) => {
                // Asked to probe and the link's RDMA side cannot be used.
                self.record(ProbeOutcome::Failed);
                self.note(peer, Condition::CannotOpen(err.to_string()));
            }
            ProbeError::Unsupported(err) => self.refused(peer, err.to_string(), false, now),
        }
    }

    /// "idle": whether other programs hold queue pairs, counted at most
    /// every few seconds.
    async fn others_hold_queue_pairs(&mut self) -> Result<usize, String> {
        let now = Instant::now();
        if let Some((at, answer)) = &self.idle_checked
            && now.saturating_duration_since(*at) < IDLE_CHECK_PERIOD
        {
            return answer.clone();
        }
        let device = self.device();
        let answer = blocking(move || {
            queue_pairs::foreign_queue_pairs(device.as_deref()).map_err(|err| err.to_string())
        })
        .await
        .unwrap_or_else(|| Err("the count did not finish".to_owned()));
        self.idle_checked = Some((now, answer.clone()));
        answer
    }

    async fn step(&mut self, probe: &LinkProbe, gid: Ipv6Addr, peer_gid: Ipv6Addr) {
        let peer = &probe.link.remote.node;
        if probe.mode == RdmaProbeMode::Idle {
            let busy = match self.others_hold_queue_pairs().await {
                Ok(0) => None,
                Ok(pairs) => Some(Condition::Busy(pairs)),
                // Unknown is not idle: a job may be running.
                Err(reason) => Some(Condition::IdleUnknown(reason)),
            };
            if let Some(condition) = busy {
                close(self.queue.take()).await;
                self.pause();
                self.note(peer, condition);
                return;
            }
        }
        if self.queue.is_none() {
            if self.refusal_holds(Instant::now()) {
                self.pause();
                return;
            }
            let library = probe.library;
            match blocking(move || ProbeEndpoint::open(library, gid, verbs::DEFAULT_TIMEOUT)).await
            {
                Some(Ok(endpoint)) => {
                    self.queue = Some(Queue {
                        endpoint,
                        connected_to: None,
                    });
                    if self.unsupported.as_ref().is_some_and(|u| !u.at_connect) {
                        self.unsupported = None;
                    }
                }
                Some(Err(err)) => {
                    self.open_failed(peer, err, Instant::now());
                    return;
                }
                None => return,
            }
        }
        if self.device_removed(probe.library).await {
            return;
        }
        let peer_endpoint = self.peer_endpoint(probe);
        let Some(queue) = self.queue.as_mut() else {
            return;
        };
        match partner(
            &queue.own(),
            queue.connected_to.as_ref(),
            peer_gid,
            peer_endpoint.as_ref(),
        ) {
            Partner::Absent => {
                self.pause();
                self.note(peer, Condition::PeerAbsent);
            }
            Partner::WrongGid(claimed) => {
                self.pause();
                self.note(peer, Condition::WrongGid(claimed));
            }
            Partner::Connect(target) => self.connect(peer, target).await,
            // Only the peer can move this on; the streak waits with it.
            Partner::Waiting => self.probing = false,
            Partner::Ready => self.probe_once(peer).await,
        }
    }

    /// Whether the open queue pair's device left the library's device list
    /// (checked every few seconds); if so the queue pair is closed, so the
    /// removal can finish, and this step is a failed probe.
    async fn device_removed(&mut self, library: &'static str) -> bool {
        let now = Instant::now();
        if self
            .device_checked
            .is_some_and(|at| now.saturating_duration_since(at) < DEVICE_CHECK_PERIOD)
        {
            return false;
        }
        self.device_checked = Some(now);
        let Some(device) = self.device() else {
            return false;
        };
        let listed = blocking(move || verbs::device_names(library, verbs::DEFAULT_TIMEOUT)).await;
        // A list that cannot be read says nothing; the probes will.
        let Some(Ok(names)) = listed else {
            return false;
        };
        if names.contains(&device) {
            return false;
        }
        close(self.queue.take()).await;
        self.record(ProbeOutcome::Failed);
        self.condition = Some(Condition::CannotOpen(format!("{device} is being removed")));
        tracing::warn!(
            %device,
            "RDMA probe: the device left the verbs device list (being removed); its queue pair is closed"
        );
        true
    }

    /// The peer's queue pair on this cable, as the peer last reported it,
    /// while the peer is heard.
    fn peer_endpoint(&self, probe: &LinkProbe) -> Option<RdmaEndpoint> {
        let report = probe
            .book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .current_report(&probe.link.remote.node, Instant::now(), PEER_HEARD_WITHIN)?;
        report
            .links
            .iter()
            .find(|o| {
                o.remote.node == probe.link.local.node
                    && o.local.address == probe.link.remote.address
            })?
            .rdma_endpoint
    }

    async fn connect(&mut self, peer: &NodeId, target: RdmaEndpoint) {
        let Some(mut queue) = self.queue.take() else {
            return;
        };
        let address = EndpointAddress {
            qpn: target.qpn,
            psn: target.psn,
            gid: target.gid,
        };
        let Some((queue, result)) = blocking(move || {
            let result = queue.endpoint.connect(address);
            if result.is_ok() {
                queue.connected_to = Some(target);
            }
            (queue, result)
        })
        .await
        else {
            return;
        };
        match result {
            Ok(()) => {
                self.unsupported = None;
                self.queue = Some(queue);
            }
            Err(ProbeError::Unsupported(err)) => {
                close(Some(queue)).await;
                self.refused(peer, err.to_string(), true, Instant::now());
            }
            Err(ProbeError::Failed(err)) => {
                // Asked to probe and the queue pair cannot be connected
                // (the stack hangs): the RDMA side of this cable does not
                // work.
                self.record(ProbeOutcome::Failed);
                self.close_after(queue, &err).await;
            }
        }
    }

    async fn probe_once(&mut self, peer: &NodeId) {
        let Some(mut queue) = self.queue.take() else {
            return;
        };
        self.sequence += 1;
        let sequence = self.sequence;
        let Some((queue, result)) = blocking(move || {
            let result = queue.endpoint.probe(sequence, REPLY_WAIT);
            (queue, result)
        })
        .await
        else {
            return;
        };
        match result {
            Ok(answer) => {
                self.record(answer.map_or(ProbeOutcome::Unanswered, ProbeOutcome::Answered));
                self.queue = Some(queue);
                self.note(peer, Condition::Probing);
            }
            // The endpoint's thread ended on its own: meshd's fault, not
            // the link's.
            Err(ProbeError::Unsupported(err)) => {
                close(Some(queue)).await;
                self.refused(peer, err.to_string(), true, Instant::now());
            }
            Err(ProbeError::Failed(err)) => {
                self.record(ProbeOutcome::Failed);
                self.close_after(queue, &err).await;
            }
        }
    }

    /// Closes the queue pair after a failure, so the next step opens a new
    /// one (a deleted device, a queue pair in error).
    async fn close_after(&mut self, queue: Queue, err: &VerbsError) {
        tracing::warn!("RDMA probe: {err}; the queue pair is closed and opened again");
        self.condition = None;
        close(Some(queue)).await;
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::id;

    use super::*;

    fn missing_call() -> ProbeError {
        ProbeError::Unsupported(VerbsError::Symbol {
            library: "/usr/lib/librdma.dylib".into(),
            symbol: "ibv_create_qp",
            reason: "symbol not found".into(),
        })
    }

    #[test]
    fn an_unsupported_stack_counts_nothing_and_is_left_alone_for_a_while() {
        let mut state = LinkState::default();
        let now = Instant::now();
        state.open_failed(&id("b"), missing_call(), now);
        let end = state.end();
        assert_eq!(end.probe, None, "no figures: nothing counted");
        assert_eq!(state.stats.figures(), None);
        assert_eq!(
            state.unsupported_reason(),
            Some("the verbs library /usr/lib/librdma.dylib has no ibv_create_qp: symbol not found")
        );
        assert!(state.refusal_holds(now));
        assert!(!state.refusal_holds(now + UNSUPPORTED_RETRY));
    }

    #[test]
    fn a_failure_to_open_counts_against_the_link() {
        let mut state = LinkState::default();
        let failed = ProbeError::Failed(VerbsError::Call {
            library: "libibverbs.so.1".into(),
            call: "ibv_query_gid",
            device: None,
            reason: "no RDMA port has the GID ::ffff:10.0.0.1".into(),
        });
        state.open_failed(&id("b"), failed, Instant::now());
        let figures = state.end().probe.expect("counted");
        assert_eq!(figures.consecutive_failures, 1);
        assert_eq!(state.unsupported_reason(), None);
    }

    #[test]
    fn a_refusal_ends_a_failing_streak_so_it_never_degrades_the_link() {
        let mut state = LinkState::default();
        for _ in 0..2 {
            state.record(ProbeOutcome::Unanswered);
        }
        state.refused(&id("b"), "refused".into(), true, Instant::now());
        assert_eq!(state.end().probe, None);
        assert_eq!(
            state.stats.figures().map(|f| f.consecutive_failures),
            Some(0)
        );
    }

    #[test]
    fn blind_spots_name_each_reason_once_with_its_links() {
        let unsupported: RdmaUnsupported = Arc::new(
            [
                (id("b"), "no ibv_create_qp".to_owned()),
                (id("c"), "no ibv_create_qp".to_owned()),
                (id("d"), "ibv_alloc_pd refused".to_owned()),
            ]
            .into_iter()
            .collect(),
        );
        assert_eq!(
            blind_spots(&unsupported),
            [
                "the RDMA probe cannot run here (links to d), so their RDMA paths are not \
                 probed: ibv_alloc_pd refused",
                "the RDMA probe cannot run here (links to b, c), so their RDMA paths are not \
                 probed: no ibv_create_qp",
            ]
        );
        assert!(blind_spots(&RdmaUnsupported::default()).is_empty());
    }

    #[test]
    fn unsupported_is_published_only_when_it_changes() {
        let (sender, mut seen) = watch::channel(RdmaUnsupported::default());
        seen.mark_unchanged();
        publish_unsupported(&sender, &id("b"), None);
        assert!(!seen.has_changed().unwrap());
        publish_unsupported(&sender, &id("b"), Some("no ibv_create_qp"));
        assert!(seen.has_changed().unwrap());
        seen.mark_unchanged();
        publish_unsupported(&sender, &id("b"), Some("no ibv_create_qp"));
        assert!(!seen.has_changed().unwrap());
        publish_unsupported(&sender, &id("b"), None);
        assert!(seen.borrow_and_update().is_empty());
    }
}
