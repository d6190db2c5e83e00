//! The active RDMA probe's queue pair: one UC (unreliable connected)
//! queue pair per link, as JACCL uses on macOS, exchanging a 16-byte
//! message with the peer's (ARCHITECTURE.md, "The RDMA probe"). Opt-in
//! (`probe.rdma`): everything else in meshd is read-only on verbs.
//!
//! Every verbs call runs on the endpoint's own thread, which owns the
//! device context, protection domain, memory region, completion channel
//! and queue; the daemon only sends it commands and waits for each answer
//! with a deadline, as [`crate::verbs`] does for the read-only calls. A
//! thread that does not answer in time is given up on: no new endpoint or
//! enumeration calls into that library until it returns. Dropping the
//! endpoint ends the thread, which frees everything it allocated.
//!
//! `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and `ibv_req_notify_cq`
//! are inline functions in rdma-core's `verbs.h`, calling through the
//! context's operation table; the offsets in `abi` are that header's
//! (rdma-core 44 to 50, checked with `offsetof` on x86-64). Apple's
//! librdma is assumed to follow the same header: built and type-checked
//! for macOS, never run on a Mac (experimental there).

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use self::queue::Queue;
use crate::verbs::{self, VerbsError};

mod abi;
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
/// How long the endpoint's thread waits for a completion before it looks
/// for commands again: commands (one probe a second) wait at most this
/// long, and an idle endpoint wakes ten times a second.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// RoCE v2 packets cross one link; any hop limit above 1 will do.
const HOP_LIMIT: u8 = 64;

/// One end of an RDMA probe, driven from the daemon; the queue pair and
/// everything under it live on the endpoint's thread.
#[derive(Debug)]
pub struct ProbeEndpoint {
    library: String,
    local: LocalEndpoint,
    timeout: Duration,
    commands: Option<Sender<Command>>,
    acks: Receiver<Result<Ack, VerbsError>>,
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
    /// address) in `library` and creates a UC queue pair on it, giving up
    /// after `timeout`.
    pub fn open(library: &str, gid: Ipv6Addr, timeout: Duration) -> Result<Self, VerbsError> {
        let reading = verbs::read_devices(library, timeout)?;
        let found = reading.devices.iter().find_map(|device| {
            device.ports.iter().find_map(|port| {
                let index = port.gids.iter().find(|(_, g)| *g == gid)?.0;
                Some((device.name.clone(), port, index))
            })
        });
        let Some((device, port, gid_index)) = found else {
            return Err(VerbsError::Call {
                library: library.to_owned(),
                call: "ibv_query_gid",
                device: None,
                reason: format!("no RDMA port has the GID {gid}"),
            });
        };
        let place = Place {
            device,
            port: u8::try_from(port.port).map_err(|_| VerbsError::Call {
                library: library.to_owned(),
                call: "ibv_query_port",
                device: None,
                reason: format!("port number {} is out of range", port.port),
            })?,
            gid_index: u8::try_from(gid_index).map_err(|_| VerbsError::Call {
                library: library.to_owned(),
                call: "ibv_query_gid",
                device: None,
                reason: format!("GID index {gid_index} is out of range"),
            })?,
            gid,
            mtu: mtu_code(port.active_mtu.unwrap_or(1024)),
        };
        Self::start(library, place, timeout)
    }

    fn start(library: &str, place: Place, timeout: Duration) -> Result<Self, VerbsError> {
        verbs::refuse_if_hung(library)?;
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
                serve(&owned, &place, &opened_tx, &channels);
                flag.store(true, Ordering::Release);
                let _ = finished_tx.send(());
            })
            .map_err(|err| VerbsError::Thread {
                library: library.to_owned(),
                what: format!("cannot start: {err}"),
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
                Err(VerbsError::TimedOut {
                    library: library.to_owned(),
                    after: timeout,
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(VerbsError::Thread {
                library: library.to_owned(),
                what: "ended without opening the device".to_owned(),
            }),
        }
    }

    /// This end's queue pair, to tell the peer.
    pub fn local(&self) -> &LocalEndpoint {
        &self.local
    }

    /// Connects the queue pair to the peer's (again, when the peer's
    /// changed: a restarted peer has a new one).
    pub fn connect(&mut self, peer: EndpointAddress) -> Result<(), VerbsError> {
        self.call(Command::Connect(peer)).map(drop)
    }

    /// Sends probe `seq` and waits up to `wait` for the peer's reply: its
    /// round trip, or `None` when none came in time.
    pub fn probe(&mut self, seq: u64, wait: Duration) -> Result<Option<Duration>, VerbsError> {
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
    fn call(&mut self, command: Command) -> Result<Ack, VerbsError> {
        if self.hung {
            return Err(VerbsError::StillHung {
                library: self.library.clone(),
            });
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
                Err(VerbsError::TimedOut {
                    library: self.library.clone(),
                    after: self.timeout,
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.thread_error("ended")),
        }
    }

    fn thread_error(&self, what: &str) -> VerbsError {
        VerbsError::Thread {
            library: self.library.clone(),
            what: format!("of the RDMA probe on {} {what}", self.local.device),
        }
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

/// Where the endpoint's thread opens its queue pair.
#[derive(Debug, Clone)]
struct Place {
    device: String,
    port: u8,
    gid_index: u8,
    gid: Ipv6Addr,
    mtu: u32,
}

struct Channels {
    commands: Receiver<Command>,
    acks: Sender<Result<Ack, VerbsError>>,
    answers: Sender<Answer>,
}

/// The endpoint's thread: opens everything, then serves commands and
/// completions until the daemon drops its end.
fn serve(
    library: &str,
    place: &Place,
    opened: &mpsc::SyncSender<Result<LocalEndpoint, VerbsError>>,
    channels: &Channels,
) {
    let mut queue = match Queue::open(library, place) {
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
                let result = queue.send(KIND_REQUEST, seq).map(|()| {
                    outstanding = Some((seq, Instant::now()));
                    Ack::Posted
                });
                let _ = channels.acks.send(result);
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => return,
        }
        // A failed wait or poll shows as an unanswered probe; the next
        // command reports what keeps failing.
        let _ = queue.wait(POLL_SLICE);
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
    fn without_a_library_there_is_no_endpoint() {
        let err = ProbeEndpoint::open(
            "libmeshd-no-such-verbs.so.1",
            "::ffff:10.0.0.1".parse().unwrap(),
            verbs::DEFAULT_TIMEOUT,
        )
        .expect_err("no library");
        assert!(matches!(err, VerbsError::Load { .. }), "{err}");
    }
}
