//! The active RDMA probe's queue pair: one UC (unreliable connected)
//! queue pair per link, as JACCL uses on macOS, exchanging a 16-byte
//! message with the peer's (ARCHITECTURE.md, "The RDMA probe"). Opt-in
//! (`probe.rdma`): everything else in meshd is read-only on verbs.
//!
//! Every verbs call runs on the endpoint's own thread, which owns the
//! device context, protection domain, memory region, completion queue (and
//! channel, where one is used) and queue; the daemon only sends it commands
//! and waits for each answer with a deadline, as [`crate::verbs`] does for
//! the read-only calls. A thread that does not answer in time is given up
//! on: no new endpoint or enumeration calls into that library until it
//! returns. Dropping the endpoint ends the thread, which frees everything
//! it allocated.
//!
//! Each OS has its [`Recipe`]: macOS follows MLX's JACCL (no completion
//! channel, the completion queue polled, path MTU 1024, hop limit 1),
//! Linux the recipe that ran on Soft-RoCE. Both register page-aligned
//! buffers. What goes wrong is sorted by what it says ([`ProbeError`]):
//! a library, call or allocation this node's stack does not offer is a
//! blind spot, never evidence against a link.
//!
//! `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and `ibv_req_notify_cq`
//! are inline functions in rdma-core's `verbs.h`, calling through the
//! context's operation table; the offsets in `abi` are that header's
//! (rdma-core 44 to 50, checked with `offsetof` on x86-64). Apple's
//! librdma is assumed to follow the same header (JACCL reaches the same
//! three data-path calls through it): built and type-checked for macOS,
//! never run on a Mac (experimental there).

#![allow(unsafe_code)]

use std::borrow::Borrow;
use std::ffi::c_int;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use meshd_domain::facts::OsKind;

use self::queue::{Loaded, Queue, QueueVerbs};
use crate::verbs::{self, VerbsError};

mod abi;
mod buffer;
#[cfg(test)]
mod fake;
mod queue;

/// What one end tells the other over the exchange channel to connect
/// their queue pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointAddress {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// First packet sequence number this end sends with (24 bits).
    pub psn: u32,
    /// The GID the end sends from: the IPv4-mapped address of its link.
    pub gid: Ipv6Addr,
}

/// Where this end's queue pair lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEndpoint {
    pub address: EndpointAddress,
    /// "rxe0", "rdma_en2".
    pub device: String,
    pub port: u8,
    pub gid_index: u8,
}

/// Why the probe could not go on, by what it says about the link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// This node's RDMA stack does not offer what the probe needs: the
    /// library cannot be loaded, a required call is missing, or it refused
    /// to make the device context, protection domain, memory region,
    /// completion queue or queue pair, or to take the queue pair's
    /// attributes, before any packet was sent. A blind spot: it says
    /// nothing about the link, and is never counted against it.
    #[error("the RDMA probe cannot run here: {0}")]
    Unsupported(VerbsError),
    /// The link's RDMA side failed: its device is gone, no port carries
    /// its address, the stack hangs, or a probe could not be sent. Evidence
    /// against the link.
    #[error("{0}")]
    Failed(VerbsError),
}

impl ProbeError {
    /// A setup step that did not finish: a hang (a wedged stack) is the
    /// link's failure; anything else refused it.
    fn of_setup(err: VerbsError) -> Self {
        match err {
            VerbsError::TimedOut { .. } | VerbsError::StillHung { .. } => Self::Failed(err),
            _ => Self::Unsupported(err),
        }
    }
}

/// How the probe's queue pair is set up and waited on, per OS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Recipe {
    waiting: Waiting,
    /// The path MTU in bytes; `None`: the port's active MTU.
    path_mtu: Option<u32>,
    /// The GRH hop limit of the probe's packets, which cross one cable.
    hop_limit: u8,
}

/// How the endpoint's thread learns of completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// Sleeps on a completion channel until one comes, when the library
    /// has the channel's calls (else polls).
    Channel,
    /// Polls the completion queue, pausing between polls.
    Polling,
}

impl Recipe {
    fn for_os(os: OsKind) -> Self {
        match os {
            // JACCL's recipe, the only one known to work with Apple's
            // stack: no completion channel (it never makes one, so the
            // library need not have it), the completion queue polled,
            // path MTU 1024 whatever the port reports, hop limit 1.
            OsKind::Macos => Self {
                waiting: Waiting::Polling,
                path_mtu: Some(1024),
                hop_limit: 1,
            },
            // The recipe that ran on Soft-RoCE (lab/tests/vm_rdma_probe.rs)
            // stays: rdma-core has completion channels, and sleeping on
            // one until a completion comes gives RTTs of the wire rather
            // than of a polling pause, at ten wakeups a second when idle.
            OsKind::Linux | OsKind::Other => Self {
                waiting: Waiting::Channel,
                path_mtu: None,
                hop_limit: 64,
            },
        }
    }
}

/// The message both ends exchange: magic, kind, sequence number.
const MAGIC: [u8; 4] = *b"MRP1";
const MESSAGE_BYTES: usize = 16;
const KIND_REQUEST: u32 = 1;
const KIND_REPLY: u32 = 2;

/// Receive buffers kept posted, and send buffers used in turn. At one
/// probe a second each way, a handful of each is plenty; a peer that
/// sends faster only runs this end out of receive buffers, which drops
/// its messages (UC), nothing else.
const RECV_SLOTS: usize = 8;
const SEND_SLOTS: usize = 4;
const SLOT_BYTES: usize = 64;
const CQ_ENTRIES: c_int = 32;
/// How long the endpoint's thread waits on the completion channel before
/// it looks for commands again: commands (one probe a second) wait at most
/// this long, and an idle endpoint wakes ten times a second.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// The pause between two polls of the completion queue without a channel:
/// the thread sleeps rather than spins (JACCL's ranks spin, a probe must
/// not), so a reply is seen within about this long, and round trips are
/// measured to about this.
const POLL_PAUSE: Duration = Duration::from_millis(1);

/// One end of an RDMA probe, driven from the daemon; the queue pair and
/// everything under it live on the endpoint's thread.
#[derive(Debug)]
pub struct ProbeEndpoint {
    library: String,
    local: LocalEndpoint,
    timeout: Duration,
    commands: Option<Sender<Command>>,
    acks: Receiver<Result<Ack, ProbeError>>,
    answers: Receiver<Answer>,
    returned: Arc<AtomicBool>,
    finished: Receiver<()>,
    /// A call timed out: the thread is stuck in the library.
    hung: bool,
}

#[derive(Debug)]
enum Command {
    Connect(EndpointAddress),
    Probe(u64),
}

#[derive(Debug)]
enum Ack {
    Connected,
    Posted,
}

/// A reply to one of this end's probes.
#[derive(Debug, Clone, Copy)]
struct Answer {
    seq: u64,
    rtt: Duration,
}

impl ProbeEndpoint {
    /// Opens the device whose port has `gid` (this end's IPv4-mapped link
    /// address) in `library` and creates a UC queue pair on it with this
    /// OS's recipe, giving up after `timeout`.
    pub fn open(library: &str, gid: Ipv6Addr, timeout: Duration) -> Result<Self, ProbeError> {
        let reading = verbs::read_devices(library, timeout).map_err(ProbeError::of_setup)?;
        let found = reading.devices.iter().find_map(|device| {
            device.ports.iter().find_map(|port| {
                let index = port.gids.iter().find(|(_, g)| *g == gid)?.0;
                Some((device.name.clone(), port, index))
            })
        });
        // No port with the link's address: RDMA is off on this node, or
        // the port has no address; either way the link's RDMA side cannot
        // work, as JACCL would find.
        let Some((device, port, gid_index)) = found else {
            return Err(ProbeError::Failed(VerbsError::Call {
                library: library.to_owned(),
                call: "ibv_query_gid",
                device: None,
                reason: format!("no RDMA port has the GID {gid}"),
            }));
        };
        let out_of_range = |call, reason| {
            ProbeError::Unsupported(VerbsError::Call {
                library: library.to_owned(),
                call,
                device: Some(device.clone()),
                reason,
            })
        };
        let place = Place {
            port: u8::try_from(port.port).map_err(|_| {
                out_of_range(
                    "ibv_query_port",
                    format!("port number {} is out of range", port.port),
                )
            })?,
            gid_index: u8::try_from(gid_index).map_err(|_| {
                out_of_range(
                    "ibv_query_gid",
                    format!("GID index {gid_index} is out of range"),
                )
            })?,
            device,
            gid,
            port_mtu: port.active_mtu,
            recipe: Recipe::for_os(crate::this_os()),
        };
        let owned = library.to_owned();
        Self::start(library, place, timeout, move || Loaded::load(&owned))
    }

    /// Starts the endpoint's thread, which takes its calls from `load`
    /// and opens the queue pair at `place`.
    fn start<V: Borrow<QueueVerbs>>(
        library: &str,
        place: Place,
        timeout: Duration,
        load: impl FnOnce() -> Result<V, VerbsError> + Send + 'static,
    ) -> Result<Self, ProbeError> {
        verbs::refuse_if_hung(library).map_err(ProbeError::of_setup)?;
        let (commands, command_rx) = mpsc::channel();
        let (ack_tx, acks) = mpsc::channel();
        let (answer_tx, answers) = mpsc::channel();
        let (opened_tx, opened) = mpsc::sync_channel(1);
        let (finished_tx, finished) = mpsc::sync_channel(1);
        let returned = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&returned);
        let owned = library.to_owned();
        std::thread::Builder::new()
            .name("meshd-rdma-probe".to_owned())
            .spawn(move || {
                let channels = Channels {
                    commands: command_rx,
                    acks: ack_tx,
                    answers: answer_tx,
                };
                match load() {
                    // The calls outlive the queue, which `serve` drops.
                    Ok(verbs) => serve(verbs.borrow(), &owned, &place, &opened_tx, &channels),
                    Err(err) => {
                        let _ = opened_tx.send(Err(ProbeError::Unsupported(err)));
                    }
                }
                flag.store(true, Ordering::Release);
                let _ = finished_tx.send(());
            })
            .map_err(|err| {
                ProbeError::Unsupported(VerbsError::Thread {
                    library: library.to_owned(),
                    what: format!("cannot start: {err}"),
                })
            })?;
        match opened.recv_timeout(timeout) {
            Ok(Ok(local)) => Ok(Self {
                library: library.to_owned(),
                local,
                timeout,
                commands: Some(commands),
                acks,
                answers,
                returned,
                finished,
                hung: false,
            }),
            Ok(Err(err)) => Err(err),
            Err(RecvTimeoutError::Timeout) => {
                verbs::abandon(library, returned);
                Err(ProbeError::Failed(VerbsError::TimedOut {
                    library: library.to_owned(),
                    after: timeout,
                }))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(ProbeError::Unsupported(VerbsError::Thread {
                    library: library.to_owned(),
                    what: "ended without opening the device".to_owned(),
                }))
            }
        }
    }

    /// This end's queue pair, to tell the peer.
    pub fn local(&self) -> &LocalEndpoint {
        &self.local
    }

    /// Connects the queue pair to the peer's (again, when the peer's
    /// changed: a restarted peer has a new one).
    pub fn connect(&mut self, peer: EndpointAddress) -> Result<(), ProbeError> {
        self.call(Command::Connect(peer)).map(drop)
    }

    /// Sends probe `seq` and waits up to `wait` for the peer's reply: its
    /// round trip, or `None` when none came in time (evidence against the
    /// link, as is a probe that could not be sent).
    pub fn probe(&mut self, seq: u64, wait: Duration) -> Result<Option<Duration>, ProbeError> {
        // Replies to earlier probes that came too late are dropped.
        while self.answers.try_recv().is_ok() {}
        self.call(Command::Probe(seq))?;
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.answers.recv_timeout(left) {
                Ok(answer) if answer.seq == seq => return Ok(Some(answer.rtt)),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.thread_error("ended while a probe was out"));
                }
            }
        }
    }

    /// One command and its acknowledgement, within the deadline.
    fn call(&mut self, command: Command) -> Result<Ack, ProbeError> {
        if self.hung {
            return Err(ProbeError::Failed(VerbsError::StillHung {
                library: self.library.clone(),
            }));
        }
        let sent = self.commands.as_ref().map(|c| c.send(command));
        if !matches!(sent, Some(Ok(()))) {
            return Err(self.thread_error("is gone"));
        }
        // The thread looks for commands between waits for completions.
        match self.acks.recv_timeout(self.timeout + POLL_SLICE) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                self.hung = true;
                verbs::abandon(&self.library, Arc::clone(&self.returned));
                Err(ProbeError::Failed(VerbsError::TimedOut {
                    library: self.library.clone(),
                    after: self.timeout,
                }))
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.thread_error("ended")),
        }
    }

    /// The endpoint's thread ended on its own, which only a bug in meshd
    /// makes happen: nothing about the link.
    fn thread_error(&self, what: &str) -> ProbeError {
        ProbeError::Unsupported(VerbsError::Thread {
            library: self.library.clone(),
            what: format!("of the RDMA probe on {} {what}", self.local.device),
        })
    }
}

impl Drop for ProbeEndpoint {
    /// Ends the thread, which frees the queue pair and everything under
    /// it; waits for that unless the thread is stuck in the library.
    fn drop(&mut self) {
        self.commands = None;
        if !self.hung
            && self
                .finished
                .recv_timeout(self.timeout + POLL_SLICE)
                .is_err()
        {
            verbs::abandon(&self.library, Arc::clone(&self.returned));
        }
    }
}

/// Where the endpoint's thread opens its queue pair, and how.
#[derive(Debug, Clone)]
struct Place {
    device: String,
    port: u8,
    gid_index: u8,
    gid: Ipv6Addr,
    /// The port's active MTU in bytes, when known.
    port_mtu: Option<u32>,
    recipe: Recipe,
}

impl Place {
    /// The path MTU the queue pair is connected with, as `enum ibv_mtu`:
    /// the recipe's, else the port's (1024 when unknown).
    fn path_mtu(&self) -> u32 {
        mtu_code(self.recipe.path_mtu.or(self.port_mtu).unwrap_or(1024))
    }
}

struct Channels {
    commands: Receiver<Command>,
    acks: Sender<Result<Ack, ProbeError>>,
    answers: Sender<Answer>,
}

/// The endpoint's thread: opens everything, then serves commands and
/// completions until the daemon drops its end.
fn serve(
    verbs: &QueueVerbs,
    library: &str,
    place: &Place,
    opened: &mpsc::SyncSender<Result<LocalEndpoint, ProbeError>>,
    channels: &Channels,
) {
    let mut queue = match Queue::open(verbs, library, place) {
        Ok(queue) => queue,
        Err(err) => {
            let _ = opened.send(Err(err));
            return;
        }
    };
    let local = LocalEndpoint {
        address: EndpointAddress {
            qpn: queue.qpn(),
            psn: queue.psn,
            gid: place.gid,
        },
        device: place.device.clone(),
        port: place.port,
        gid_index: place.gid_index,
    };
    if opened.send(Ok(local)).is_err() {
        return;
    }
    let mut outstanding: Option<(u64, Instant)> = None;
    loop {
        match channels.commands.try_recv() {
            Ok(Command::Connect(peer)) => {
                let result = queue.connect(place, peer).map(|()| Ack::Connected);
                let _ = channels.acks.send(result);
            }
            Ok(Command::Probe(seq)) => {
                // The queue pair is up: a probe that cannot go out is the
                // link's failure.
                let result = queue
                    .send(KIND_REQUEST, seq)
                    .map(|()| {
                        outstanding = Some((seq, Instant::now()));
                        Ack::Posted
                    })
                    .map_err(ProbeError::Failed);
                let _ = channels.acks.send(result);
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => return,
        }
        // A failed wait or poll shows as an unanswered probe; the next
        // command reports what keeps failing.
        let _ = queue.wait();
        let Ok(received) = queue.drain() else {
            continue;
        };
        for (kind, seq) in received {
            match kind {
                KIND_REQUEST => {
                    let _ = queue.send(KIND_REPLY, seq);
                }
                KIND_REPLY => {
                    if let Some((sent, at)) = outstanding
                        && sent == seq
                    {
                        outstanding = None;
                        let _ = channels.answers.send(Answer {
                            seq,
                            rtt: at.elapsed(),
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

/// `enum ibv_mtu` for an MTU in bytes (256 → 1 … 4096 → 5).
fn mtu_code(bytes: u32) -> u32 {
    match bytes {
        0..=256 => 1,
        257..=512 => 2,
        513..=1024 => 3,
        1025..=2048 => 4,
        _ => 5,
    }
}

/// An encoded message.
fn encode(kind: u32, seq: u64) -> [u8; MESSAGE_BYTES] {
    let mut bytes = [0u8; MESSAGE_BYTES];
    bytes[..4].copy_from_slice(&MAGIC);
    bytes[4..8].copy_from_slice(&kind.to_le_bytes());
    bytes[8..].copy_from_slice(&seq.to_le_bytes());
    bytes
}

/// A received message, or `None` for anything else (a peer's bytes are
/// not trusted).
fn decode(bytes: &[u8]) -> Option<(u32, u64)> {
    if bytes.len() != MESSAGE_BYTES || bytes[..4] != MAGIC {
        return None;
    }
    let kind = u32::from_le_bytes(bytes[4..8].try_into().ok()?);
    let seq = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    Some((kind, seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_anything_else_is_refused() {
        assert_eq!(decode(&encode(KIND_REQUEST, 42)), Some((KIND_REQUEST, 42)));
        assert_eq!(
            decode(&encode(KIND_REPLY, u64::MAX)),
            Some((KIND_REPLY, u64::MAX))
        );
        let mut bad = encode(KIND_REQUEST, 1);
        bad[0] = b'X';
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&encode(KIND_REQUEST, 1)[..15]), None);
        assert_eq!(decode(&[0; 64]), None);
    }

    #[test]
    fn mtus_map_to_the_verbs_codes() {
        assert_eq!(mtu_code(1024), 3);
        assert_eq!(mtu_code(4096), 5);
        assert_eq!(mtu_code(256), 1);
        assert_eq!(mtu_code(1500), 4);
        assert_eq!(mtu_code(9000), 5);
    }

    #[test]
    fn without_a_library_the_probe_is_unsupported_not_failed() {
        let err = ProbeEndpoint::open(
            "libmeshd-no-such-verbs.so.1",
            "::ffff:10.0.0.1".parse().unwrap(),
            verbs::DEFAULT_TIMEOUT,
        )
        .expect_err("no library");
        assert!(
            matches!(&err, ProbeError::Unsupported(VerbsError::Load { library, .. })
                if library == "libmeshd-no-such-verbs.so.1"),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with(
                "the RDMA probe cannot run here: cannot load the verbs library \
                 libmeshd-no-such-verbs.so.1: "
            ),
            "{err}"
        );
    }

    #[test]
    fn macos_follows_jaccl_and_linux_keeps_its_channel() {
        let macos = Recipe::for_os(OsKind::Macos);
        assert_eq!(macos.waiting, Waiting::Polling);
        assert_eq!(macos.hop_limit, 1);
        let linux = Recipe::for_os(OsKind::Linux);
        assert_eq!(linux.waiting, Waiting::Channel);
        assert_eq!(linux.hop_limit, 64);
        // A port reporting 4096: JACCL's 1024 on macOS, the port's on Linux.
        let on = |recipe| place(recipe, Some(4096)).path_mtu();
        assert_eq!(on(macos), mtu_code(1024));
        assert_eq!(on(linux), mtu_code(4096));
        assert_eq!(place(linux, None).path_mtu(), mtu_code(1024));
    }

    fn place(recipe: Recipe, port_mtu: Option<u32>) -> Place {
        Place {
            device: "fake0".to_owned(),
            port: 1,
            gid_index: 1,
            gid: "::ffff:10.0.0.1".parse().unwrap(),
            port_mtu,
            recipe,
        }
    }

    const CHANNEL_CALLS: [&str; 4] = [
        "ibv_create_comp_channel",
        "ibv_destroy_comp_channel",
        "ibv_get_cq_event",
        "ibv_ack_cq_events",
    ];

    /// The fake library's calls, without `missing`.
    fn fake_verbs(missing: &'static [&'static str]) -> Result<QueueVerbs, VerbsError> {
        QueueVerbs::resolve("fake-librdma", |symbol| fake::lookup(symbol, missing))
    }

    /// An endpoint on the fake library with the macOS recipe.
    fn macos_endpoint(missing: &'static [&'static str]) -> Result<ProbeEndpoint, ProbeError> {
        ProbeEndpoint::start(
            "fake-librdma",
            place(Recipe::for_os(OsKind::Macos), Some(4096)),
            verbs::DEFAULT_TIMEOUT,
            move || fake_verbs(missing),
        )
    }

    const PEER: EndpointAddress = EndpointAddress {
        qpn: 40,
        psn: 9,
        gid: Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0002),
    };

    #[test]
    fn the_macos_recipe_probes_without_the_channel_calls() {
        let fake = fake::exclusive(None, true);
        let verbs = fake_verbs(&CHANNEL_CALLS).expect("the channel's calls are optional");
        assert!(verbs.channel.is_none());
        let mut endpoint = macos_endpoint(&CHANNEL_CALLS).expect("opens");
        assert_eq!(endpoint.local().address.qpn, 77);
        endpoint.connect(PEER).expect("connects");
        let rtt = endpoint
            .probe(1, verbs::DEFAULT_TIMEOUT)
            .expect("sent")
            .expect("the fake peer answers");
        assert!(rtt < verbs::DEFAULT_TIMEOUT);
        assert_eq!(
            endpoint
                .probe(2, verbs::DEFAULT_TIMEOUT)
                .map(|r| r.is_some()),
            Ok(true)
        );
        drop(endpoint);
        fake.look(|state| {
            assert_eq!(state.channels_made, 0);
            assert_eq!(state.cq_channel, Some(false), "the queue is polled");
            assert_eq!(
                state.rtr,
                Some((mtu_code(1024), 1)),
                "JACCL's MTU and hop limit"
            );
            let page = buffer::PageBuffer::host_page_size();
            let &[(address, length)] = state.registered.as_slice() else {
                panic!("one registration: {:?}", state.registered);
            };
            assert_eq!(address % page, 0, "page-aligned");
            assert_eq!(length % page, 0, "whole pages");
            assert_eq!(state.alive, 0, "everything made was freed");
        });
    }

    #[test]
    fn the_macos_recipe_never_makes_a_channel_even_when_offered() {
        let fake = fake::exclusive(None, true);
        let mut endpoint = macos_endpoint(&[]).expect("opens");
        endpoint.connect(PEER).expect("connects");
        assert!(matches!(
            endpoint.probe(1, verbs::DEFAULT_TIMEOUT),
            Ok(Some(_))
        ));
        drop(endpoint);
        fake.look(|state| {
            assert_eq!((state.channels_made, state.cq_channel), (0, Some(false)));
            assert_eq!(state.alive, 0);
        });
    }

    #[test]
    fn a_missing_required_call_is_unsupported_naming_it() {
        let _fake = fake::exclusive(None, false);
        let err = macos_endpoint(&["ibv_create_qp"]).expect_err("no queue pair without it");
        assert!(
            matches!(
                &err,
                ProbeError::Unsupported(VerbsError::Symbol {
                    symbol: "ibv_create_qp",
                    ..
                })
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("the RDMA probe cannot run here: the verbs library fake-librdma has no ibv_create_qp"),
            "{err}"
        );
    }

    #[test]
    fn a_refused_creation_is_unsupported_and_frees_what_was_made() {
        for (refuse, call) in [
            (fake::Refuse::OpenDevice, "ibv_open_device"),
            (fake::Refuse::CreateQp, "ibv_create_qp"),
        ] {
            let fake = fake::exclusive(Some(refuse), false);
            let err = macos_endpoint(&[]).expect_err("refused");
            assert!(
                matches!(&err, ProbeError::Unsupported(VerbsError::Call { call: c, .. }) if *c == call),
                "{refuse:?}: {err:?}"
            );
            fake.look(|state| assert_eq!(state.alive, 0, "{refuse:?}"));
        }
    }

    #[test]
    fn attributes_refused_at_connect_are_unsupported() {
        let fake = fake::exclusive(Some(fake::Refuse::Rtr), false);
        let mut endpoint = macos_endpoint(&[]).expect("opens");
        let err = endpoint.connect(PEER).expect_err("refused");
        assert!(
            matches!(
                &err,
                ProbeError::Unsupported(VerbsError::Call {
                    call: "ibv_modify_qp",
                    ..
                })
            ),
            "{err:?}"
        );
        drop(endpoint);
        fake.look(|state| assert_eq!(state.alive, 0));
    }

    #[test]
    fn no_answer_after_setup_is_an_unanswered_probe() {
        let _fake = fake::exclusive(None, false);
        let mut endpoint = macos_endpoint(&CHANNEL_CALLS).expect("opens");
        endpoint.connect(PEER).expect("connects");
        // Sent, and no reply within the wait: the link's failure.
        assert_eq!(endpoint.probe(1, Duration::from_millis(20)), Ok(None));
    }

    #[test]
    fn a_probe_before_connecting_cannot_be_sent_and_is_a_failure() {
        let _fake = fake::exclusive(None, false);
        let mut endpoint = macos_endpoint(&[]).expect("opens");
        let err = endpoint
            .probe(1, Duration::from_millis(20))
            .expect_err("not connected");
        assert!(
            matches!(
                err,
                ProbeError::Failed(VerbsError::Call {
                    call: "ibv_post_send",
                    ..
                })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn hangs_are_failures_and_refusals_are_not() {
        let hung = VerbsError::TimedOut {
            library: "lib".into(),
            after: Duration::from_secs(5),
        };
        assert!(matches!(ProbeError::of_setup(hung), ProbeError::Failed(_)));
        let still = VerbsError::StillHung {
            library: "lib".into(),
        };
        assert!(matches!(ProbeError::of_setup(still), ProbeError::Failed(_)));
        let kernel = VerbsError::NoKernelVerbs {
            library: "lib".into(),
            reason: "Function not implemented".into(),
        };
        assert!(matches!(
            ProbeError::of_setup(kernel),
            ProbeError::Unsupported(_)
        ));
    }
}
