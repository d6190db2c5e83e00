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
//! context's operation table; the offsets below are that header's
//! (rdma-core 44 to 50, checked with `offsetof` on x86-64). Apple's
//! librdma is assumed to follow the same header: built and type-checked
//! for macOS, never run on a Mac (experimental there).

#![allow(unsafe_code)]

use std::ffi::{c_int, c_uint, c_void};
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use libloading::Library;

use crate::verbs::{self, IbvDeviceHead, Padded, VerbsError, failure_reason};

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

// --- rdma-core's structures (libibverbs/verbs.h) -------------------------

const QPT_UC: c_int = 3;
const QPS_RESET: c_int = 0;
const QPS_INIT: c_int = 1;
const QPS_RTR: c_int = 2;
const QPS_RTS: c_int = 3;
const QP_STATE: c_int = 1;
const QP_ACCESS_FLAGS: c_int = 8;
const QP_PKEY_INDEX: c_int = 16;
const QP_PORT: c_int = 32;
const QP_AV: c_int = 128;
const QP_PATH_MTU: c_int = 256;
const QP_RQ_PSN: c_int = 4096;
const QP_SQ_PSN: c_int = 65536;
const QP_DEST_QPN: c_int = 1_048_576;
const ACCESS_LOCAL_WRITE: c_int = 1;
const WR_SEND: c_int = 2;
const SEND_SIGNALED: c_uint = 2;
const WC_SUCCESS: c_int = 0;
const WC_RECV: c_int = 128;

/// `struct ibv_context`: the device, then the operation table.
#[repr(C)]
struct IbvContext {
    _device: *mut c_void,
    ops: IbvContextOps,
}

/// `struct ibv_context_ops`, up to `post_recv`: 27 function pointers, of
/// which these four are called.
#[repr(C)]
struct IbvContextOps {
    _before_poll_cq: [*mut c_void; 11],
    poll_cq: unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int,
    req_notify_cq: unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int,
    _before_post_send: [*mut c_void; 12],
    post_send: unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int,
    post_recv: unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int,
}

/// `struct ibv_cq`: its context first.
#[repr(C)]
struct IbvCq {
    context: *mut IbvContext,
}

/// `struct ibv_qp`, up to `qp_num`.
#[repr(C)]
struct IbvQp {
    context: *mut IbvContext,
    _qp_context: *mut c_void,
    _pd: *mut c_void,
    _send_cq: *mut c_void,
    _recv_cq: *mut c_void,
    _srq: *mut c_void,
    _handle: u32,
    qp_num: u32,
}

/// `struct ibv_mr`, up to `lkey`.
#[repr(C)]
struct IbvMr {
    _context: *mut c_void,
    _pd: *mut c_void,
    _addr: *mut c_void,
    _length: usize,
    _handle: u32,
    lkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
struct IbvCompChannel {
    _context: *mut c_void,
    fd: c_int,
    _refcnt: c_int,
}

#[repr(C)]
struct IbvQpCap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
}

#[repr(C)]
struct IbvQpInitAttr {
    _qp_context: *mut c_void,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    _srq: *mut c_void,
    cap: IbvQpCap,
    qp_type: c_int,
    sq_sig_all: c_int,
}

/// `union ibv_gid` holds two `u64`s, hence the alignment.
#[repr(C, align(8))]
struct IbvGlobalRoute {
    dgid: [u8; 16],
    _flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    _traffic_class: u8,
}

#[repr(C)]
struct IbvAhAttr {
    grh: IbvGlobalRoute,
    _dlid: u16,
    _sl: u8,
    _src_path_bits: u8,
    _static_rate: u8,
    is_global: u8,
    port_num: u8,
}

#[repr(C)]
struct IbvQpAttr {
    qp_state: c_int,
    _cur_qp_state: c_int,
    path_mtu: u32,
    _path_mig_state: c_int,
    _qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: c_uint,
    _cap: IbvQpCap,
    ah_attr: IbvAhAttr,
    _alt_ah_attr: IbvAhAttr,
    pkey_index: u16,
    _alt_pkey_index: u16,
    _en_sqd_async_notify: u8,
    _sq_draining: u8,
    _max_rd_atomic: u8,
    _max_dest_rd_atomic: u8,
    _min_rnr_timer: u8,
    port_num: u8,
    _timeout: u8,
    _retry_cnt: u8,
    _rnr_retry: u8,
    _alt_port_num: u8,
    _alt_timeout: u8,
    _rate_limit: u32,
}

#[repr(C)]
struct IbvSge {
    addr: u64,
    length: u32,
    lkey: u32,
}

#[repr(C)]
struct IbvSendWr {
    wr_id: u64,
    next: *mut IbvSendWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
    opcode: c_int,
    send_flags: c_uint,
    _imm_data: u32,
    _rest: [u64; 11],
}

#[repr(C)]
struct IbvRecvWr {
    wr_id: u64,
    next: *mut IbvRecvWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
}

#[repr(C)]
struct IbvWc {
    wr_id: u64,
    status: c_int,
    opcode: c_int,
    _vendor_err: u32,
    byte_len: u32,
    _imm_data: u32,
    _qp_num: u32,
    _src_qp: u32,
    _wc_flags: c_uint,
    _pkey_index: u16,
    _slid: u16,
    _sl: u8,
    _dlid_path_bits: u8,
}

// The offsets and sizes rdma-core's headers give these structures.
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(IbvContext, ops) == 8 || size_of::<*mut c_void>() != 8);
    assert!(offset_of!(IbvContextOps, poll_cq) == 11 * size_of::<*mut c_void>());
    assert!(offset_of!(IbvContextOps, post_send) == 25 * size_of::<*mut c_void>());
    assert!(offset_of!(IbvContextOps, post_recv) == 26 * size_of::<*mut c_void>());
    assert!(offset_of!(IbvQp, qp_num) == 6 * size_of::<*mut c_void>() + 4);
    assert!(offset_of!(IbvMr, lkey) == 4 * size_of::<*mut c_void>() + 4);
    assert!(offset_of!(IbvCompChannel, fd) == size_of::<*mut c_void>());
    assert!(size_of::<IbvGlobalRoute>() == 24);
    assert!(size_of::<IbvAhAttr>() == 32);
    assert!(offset_of!(IbvAhAttr, is_global) == 29);
    assert!(offset_of!(IbvQpAttr, dest_qp_num) == 28);
    assert!(offset_of!(IbvQpAttr, ah_attr) == 56);
    assert!(offset_of!(IbvQpAttr, pkey_index) == 120);
    assert!(offset_of!(IbvQpAttr, port_num) == 129);
    assert!(size_of::<IbvQpAttr>() == 144);
    assert!(offset_of!(IbvQpInitAttr, cap) == 32);
    assert!(offset_of!(IbvQpInitAttr, qp_type) == 52);
    assert!(size_of::<IbvQpInitAttr>() == 64);
    assert!(offset_of!(IbvSendWr, opcode) == 28);
    assert!(size_of::<IbvSendWr>() == 128);
    assert!(size_of::<IbvRecvWr>() == 32);
    assert!(size_of::<IbvSge>() == 16);
    assert!(offset_of!(IbvWc, byte_len) == 20);
    assert!(size_of::<IbvWc>() == 48);
};

type Context = *mut IbvContext;
type Pd = *mut c_void;

/// `poll(2)`'s descriptor; `nfds_t` is `unsigned long` on Linux and
/// `unsigned int` on macOS.
#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}
#[cfg(target_os = "macos")]
type Nfds = c_uint;
#[cfg(not(target_os = "macos"))]
type Nfds = std::ffi::c_ulong;
const POLLIN: i16 = 1;

unsafe extern "C" {
    fn poll(fds: *mut PollFd, nfds: Nfds, timeout: c_int) -> c_int;
}

/// The library's allocation calls (exported functions, unlike the
/// data-path calls the context's table holds).
struct QueueVerbs {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDeviceHead,
    free_device_list: unsafe extern "C" fn(*mut *mut IbvDeviceHead),
    get_device_name: unsafe extern "C" fn(*mut IbvDeviceHead) -> *const std::ffi::c_char,
    open_device: unsafe extern "C" fn(*mut IbvDeviceHead) -> Context,
    close_device: unsafe extern "C" fn(Context) -> c_int,
    alloc_pd: unsafe extern "C" fn(Context) -> Pd,
    dealloc_pd: unsafe extern "C" fn(Pd) -> c_int,
    reg_mr: unsafe extern "C" fn(Pd, *mut c_void, usize, c_int) -> *mut IbvMr,
    dereg_mr: unsafe extern "C" fn(*mut IbvMr) -> c_int,
    create_comp_channel: unsafe extern "C" fn(Context) -> *mut IbvCompChannel,
    destroy_comp_channel: unsafe extern "C" fn(*mut IbvCompChannel) -> c_int,
    create_cq:
        unsafe extern "C" fn(Context, c_int, *mut c_void, *mut IbvCompChannel, c_int) -> *mut IbvCq,
    destroy_cq: unsafe extern "C" fn(*mut IbvCq) -> c_int,
    get_cq_event:
        unsafe extern "C" fn(*mut IbvCompChannel, *mut *mut IbvCq, *mut *mut c_void) -> c_int,
    ack_cq_events: unsafe extern "C" fn(*mut IbvCq, c_uint),
    create_qp: unsafe extern "C" fn(Pd, *mut IbvQpInitAttr) -> *mut IbvQp,
    modify_qp: unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int,
    destroy_qp: unsafe extern "C" fn(*mut IbvQp) -> c_int,
    _library: Library,
}

impl QueueVerbs {
    fn load(name: &str) -> Result<Self, VerbsError> {
        // SAFETY: as in `verbs::Verbs::load`: the library's initialisers
        // only set up its own state.
        let library = unsafe { Library::new(name) }.map_err(|err| VerbsError::Load {
            library: name.to_owned(),
            reason: err.to_string(),
        })?;
        macro_rules! symbol {
            ($symbol:literal) => {
                // SAFETY: the type is the function's prototype in
                // rdma-core's verbs.h; the pointer is used only while
                // `library` is kept in the returned struct.
                *unsafe { library.get(concat!($symbol, "\0").as_bytes()) }.map_err(|err| {
                    VerbsError::Symbol {
                        library: name.to_owned(),
                        symbol: $symbol,
                        reason: err.to_string(),
                    }
                })?
            };
        }
        Ok(Self {
            get_device_list: symbol!("ibv_get_device_list"),
            free_device_list: symbol!("ibv_free_device_list"),
            get_device_name: symbol!("ibv_get_device_name"),
            open_device: symbol!("ibv_open_device"),
            close_device: symbol!("ibv_close_device"),
            alloc_pd: symbol!("ibv_alloc_pd"),
            dealloc_pd: symbol!("ibv_dealloc_pd"),
            reg_mr: symbol!("ibv_reg_mr"),
            dereg_mr: symbol!("ibv_dereg_mr"),
            create_comp_channel: symbol!("ibv_create_comp_channel"),
            destroy_comp_channel: symbol!("ibv_destroy_comp_channel"),
            create_cq: symbol!("ibv_create_cq"),
            destroy_cq: symbol!("ibv_destroy_cq"),
            get_cq_event: symbol!("ibv_get_cq_event"),
            ack_cq_events: symbol!("ibv_ack_cq_events"),
            create_qp: symbol!("ibv_create_qp"),
            modify_qp: symbol!("ibv_modify_qp"),
            destroy_qp: symbol!("ibv_destroy_qp"),
            _library: library,
        })
    }
}

/// The queue pair with everything under it, freed in reverse order of
/// creation when dropped. Only ever touched on the endpoint's thread.
struct Queue {
    library: String,
    device: String,
    verbs: QueueVerbs,
    context: Context,
    pd: Pd,
    buffer: Box<[u8; (RECV_SLOTS + SEND_SLOTS) * SLOT_BYTES]>,
    mr: *mut IbvMr,
    channel: *mut IbvCompChannel,
    cq: *mut IbvCq,
    qp: *mut IbvQp,
    psn: u32,
    next_send: usize,
    /// The peer the queue pair is connected to.
    peer: Option<EndpointAddress>,
}

impl Queue {
    fn open(library: &str, place: &Place) -> Result<Self, VerbsError> {
        let verbs = QueueVerbs::load(library)?;
        let context = open_by_name(&verbs, library, &place.device)?;
        let mut queue = Self {
            library: library.to_owned(),
            device: place.device.clone(),
            verbs,
            context,
            pd: std::ptr::null_mut(),
            buffer: Box::new([0; (RECV_SLOTS + SEND_SLOTS) * SLOT_BYTES]),
            mr: std::ptr::null_mut(),
            channel: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            psn: initial_psn(),
            next_send: 0,
            peer: None,
        };
        // From here on, `Drop` frees whatever was made if a step fails.
        // SAFETY (each call below): arguments are live objects this queue
        // created on this thread, or buffers it owns for its lifetime.
        queue.pd = unsafe { (queue.verbs.alloc_pd)(queue.context) };
        queue.check_created(queue.pd.is_null(), "ibv_alloc_pd")?;
        let length = queue.buffer.len();
        queue.mr = unsafe {
            (queue.verbs.reg_mr)(
                queue.pd,
                queue.buffer.as_mut_ptr().cast(),
                length,
                ACCESS_LOCAL_WRITE,
            )
        };
        queue.check_created(queue.mr.is_null(), "ibv_reg_mr")?;
        queue.channel = unsafe { (queue.verbs.create_comp_channel)(queue.context) };
        queue.check_created(queue.channel.is_null(), "ibv_create_comp_channel")?;
        queue.cq = unsafe {
            (queue.verbs.create_cq)(
                queue.context,
                CQ_ENTRIES,
                std::ptr::null_mut(),
                queue.channel,
                0,
            )
        };
        queue.check_created(queue.cq.is_null(), "ibv_create_cq")?;
        let mut init = Padded::<IbvQpInitAttr>::zeroed();
        init.value.send_cq = queue.cq;
        init.value.recv_cq = queue.cq;
        init.value.cap = IbvQpCap {
            max_send_wr: SEND_SLOTS as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        init.value.qp_type = QPT_UC;
        init.value.sq_sig_all = 1;
        queue.qp = unsafe { (queue.verbs.create_qp)(queue.pd, &mut init.value) };
        queue.check_created(queue.qp.is_null(), "ibv_create_qp")?;
        queue.enter_init(place)?;
        queue.arm()?;
        Ok(queue)
    }

    fn qpn(&self) -> u32 {
        // SAFETY: a live queue pair created by this queue.
        unsafe { (*self.qp).qp_num }
    }

    fn failed(&self, call: &'static str, code: c_int) -> VerbsError {
        VerbsError::Call {
            library: self.library.clone(),
            call,
            device: Some(self.device.clone()),
            reason: failure_reason(code),
        }
    }

    fn check_created(&self, null: bool, call: &'static str) -> Result<(), VerbsError> {
        if null {
            Err(VerbsError::Call {
                library: self.library.clone(),
                call,
                device: Some(self.device.clone()),
                reason: std::io::Error::last_os_error().to_string(),
            })
        } else {
            Ok(())
        }
    }

    fn modify(&mut self, attr: &mut Padded<IbvQpAttr>, mask: c_int) -> Result<(), VerbsError> {
        // SAFETY: a live queue pair and a zeroed attribute buffer.
        let code = unsafe { (self.verbs.modify_qp)(self.qp, &mut attr.value, mask) };
        if code == 0 {
            Ok(())
        } else {
            Err(self.failed("ibv_modify_qp", code))
        }
    }

    /// RESET → INIT, with every receive buffer posted.
    fn enter_init(&mut self, place: &Place) -> Result<(), VerbsError> {
        let mut attr = Padded::<IbvQpAttr>::zeroed();
        attr.value.qp_state = QPS_INIT;
        attr.value.pkey_index = 0;
        attr.value.port_num = place.port;
        attr.value.qp_access_flags = 0;
        self.modify(
            &mut attr,
            QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
        )?;
        for slot in 0..RECV_SLOTS {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    /// Connects to `peer`: back to RESET (and INIT) when connected to
    /// another queue pair before, then RTR and RTS.
    fn connect(&mut self, place: &Place, peer: EndpointAddress) -> Result<(), VerbsError> {
        if self.peer == Some(peer) {
            return Ok(());
        }
        if self.peer.is_some() {
            let mut reset = Padded::<IbvQpAttr>::zeroed();
            reset.value.qp_state = QPS_RESET;
            self.modify(&mut reset, QP_STATE)?;
            self.peer = None;
            self.enter_init(place)?;
        }
        let mut rtr = Padded::<IbvQpAttr>::zeroed();
        rtr.value.qp_state = QPS_RTR;
        rtr.value.path_mtu = place.mtu;
        rtr.value.dest_qp_num = peer.qpn;
        rtr.value.rq_psn = peer.psn;
        rtr.value.ah_attr.is_global = 1;
        rtr.value.ah_attr.port_num = place.port;
        rtr.value.ah_attr.grh.dgid = peer.gid.octets();
        rtr.value.ah_attr.grh.sgid_index = place.gid_index;
        rtr.value.ah_attr.grh.hop_limit = HOP_LIMIT;
        self.modify(
            &mut rtr,
            QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN,
        )?;
        let mut rts = Padded::<IbvQpAttr>::zeroed();
        rts.value.qp_state = QPS_RTS;
        rts.value.sq_psn = self.psn;
        self.modify(&mut rts, QP_STATE | QP_SQ_PSN)?;
        self.peer = Some(peer);
        Ok(())
    }

    fn slot_sge(&mut self, slot: usize, length: u32) -> IbvSge {
        IbvSge {
            addr: self.buffer[slot * SLOT_BYTES..].as_mut_ptr() as u64,
            length,
            // SAFETY: a live memory region created by this queue.
            lkey: unsafe { (*self.mr).lkey },
        }
    }

    fn ops(&self) -> &IbvContextOps {
        // SAFETY: the context stays open while this queue lives.
        unsafe { &(*self.context).ops }
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), VerbsError> {
        let mut sge = self.slot_sge(slot, SLOT_BYTES as u32);
        let mut wr = IbvRecvWr {
            wr_id: slot as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live queue pair; the work request and its scatter
        // entry are read during the call, the slot stays registered.
        let code = unsafe { (self.ops().post_recv)(self.qp, &mut wr, &mut bad) };
        if code == 0 {
            Ok(())
        } else {
            Err(self.failed("ibv_post_recv", code))
        }
    }

    fn send(&mut self, kind: u32, seq: u64) -> Result<(), VerbsError> {
        if self.peer.is_none() {
            return Err(VerbsError::Call {
                library: self.library.clone(),
                call: "ibv_post_send",
                device: Some(self.device.clone()),
                reason: "not connected to the peer's queue pair yet".to_owned(),
            });
        }
        let slot = RECV_SLOTS + self.next_send;
        self.next_send = (self.next_send + 1) % SEND_SLOTS;
        self.buffer[slot * SLOT_BYTES..slot * SLOT_BYTES + MESSAGE_BYTES]
            .copy_from_slice(&encode(kind, seq));
        let mut sge = self.slot_sge(slot, MESSAGE_BYTES as u32);
        let mut wr = Padded::<IbvSendWr>::zeroed();
        wr.value.wr_id = slot as u64;
        wr.value.sg_list = &mut sge;
        wr.value.num_sge = 1;
        wr.value.opcode = WR_SEND;
        wr.value.send_flags = SEND_SIGNALED;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live, connected queue pair; the request is read during
        // the call and the slot stays registered until its completion.
        let code = unsafe { (self.ops().post_send)(self.qp, &mut wr.value, &mut bad) };
        if code == 0 {
            Ok(())
        } else {
            Err(self.failed("ibv_post_send", code))
        }
    }

    /// Asks for an event on the next completion.
    fn arm(&mut self) -> Result<(), VerbsError> {
        // SAFETY: a live completion queue.
        let code = unsafe { (self.ops().req_notify_cq)(self.cq, 0) };
        if code == 0 {
            Ok(())
        } else {
            Err(self.failed("ibv_req_notify_cq", code))
        }
    }

    /// Waits up to `limit` for a completion event, and takes it.
    fn wait(&mut self, limit: Duration) -> Result<(), VerbsError> {
        // SAFETY: a live completion channel.
        let fd = unsafe { (*self.channel).fd };
        let mut poll_fd = PollFd {
            fd,
            events: POLLIN,
            revents: 0,
        };
        let millis = c_int::try_from(limit.as_millis()).unwrap_or(c_int::MAX);
        // SAFETY: one valid descriptor entry.
        let ready = unsafe { poll(&mut poll_fd, 1, millis) };
        if ready <= 0 {
            return Ok(());
        }
        let mut cq = std::ptr::null_mut();
        let mut cq_context = std::ptr::null_mut();
        // SAFETY: the channel is readable, so this does not block; the
        // event is acknowledged at once, before the queue can be destroyed.
        let code = unsafe { (self.verbs.get_cq_event)(self.channel, &mut cq, &mut cq_context) };
        if code != 0 {
            return Err(self.failed("ibv_get_cq_event", code));
        }
        // SAFETY: `cq` is this queue's, named by the event just taken.
        unsafe { (self.verbs.ack_cq_events)(cq, 1) };
        self.arm()
    }

    /// Every completion so far: the messages received (their buffers
    /// posted again); send completions only free their slot.
    fn drain(&mut self) -> Result<Vec<(u32, u64)>, VerbsError> {
        let mut received = Vec::new();
        loop {
            let mut completions = Padded::<[IbvWc; 8]>::zeroed();
            // SAFETY: a live completion queue and room for 8 entries.
            let count = unsafe { (self.ops().poll_cq)(self.cq, 8, completions.value.as_mut_ptr()) };
            if count < 0 {
                return Err(self.failed("ibv_poll_cq", count));
            }
            let count = usize::try_from(count).unwrap_or(0).min(8);
            for wc in &completions.value[..count] {
                if wc.opcode & WC_RECV == 0 {
                    continue;
                }
                let slot = usize::try_from(wc.wr_id).unwrap_or(usize::MAX);
                if slot >= RECV_SLOTS {
                    continue;
                }
                if wc.status == WC_SUCCESS {
                    let length = (wc.byte_len as usize).min(SLOT_BYTES);
                    let start = slot * SLOT_BYTES;
                    if let Some(message) = decode(&self.buffer[start..start + length]) {
                        received.push(message);
                    }
                }
                // A flushed buffer (queue pair reset) is posted again by
                // `to_init`; a received one here.
                if wc.status == WC_SUCCESS {
                    self.post_recv(slot)?;
                }
            }
            if count < 8 {
                return Ok(received);
            }
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: each object was created by this queue on this thread and
        // is destroyed exactly once, children before parents; every
        // completion event was acknowledged when it was taken.
        unsafe {
            if !self.qp.is_null() {
                (self.verbs.destroy_qp)(self.qp);
            }
            if !self.cq.is_null() {
                (self.verbs.destroy_cq)(self.cq);
            }
            if !self.channel.is_null() {
                (self.verbs.destroy_comp_channel)(self.channel);
            }
            if !self.mr.is_null() {
                (self.verbs.dereg_mr)(self.mr);
            }
            if !self.pd.is_null() {
                (self.verbs.dealloc_pd)(self.pd);
            }
            (self.verbs.close_device)(self.context);
        }
    }
}

/// Opens device `name`.
fn open_by_name(verbs: &QueueVerbs, library: &str, name: &str) -> Result<Context, VerbsError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid out pointer.
    let list = unsafe { (verbs.get_device_list)(&mut count) };
    if list.is_null() {
        return Err(VerbsError::Call {
            library: library.to_owned(),
            call: "ibv_get_device_list",
            device: None,
            reason: std::io::Error::last_os_error().to_string(),
        });
    }
    let count = usize::try_from(count).unwrap_or(0);
    // SAFETY: the library returned `count` device pointers, valid until
    // the list is freed below.
    let devices = unsafe { std::slice::from_raw_parts(list, count) };
    let device = devices.iter().copied().find(|&device| {
        // SAFETY: a live entry of the list; its name is NUL-terminated.
        let found = unsafe { (verbs.get_device_name)(device) };
        // SAFETY: as above.
        !found.is_null() && unsafe { std::ffi::CStr::from_ptr(found) }.to_bytes() == name.as_bytes()
    });
    // SAFETY: opening a listed device before the list is freed.
    let context = device.map(|device| unsafe { (verbs.open_device)(device) });
    let reason = std::io::Error::last_os_error().to_string();
    // SAFETY: the list came from this library and is freed once.
    unsafe { (verbs.free_device_list)(list) };
    match context {
        Some(context) if !context.is_null() => Ok(context),
        found => Err(VerbsError::Call {
            library: library.to_owned(),
            call: "ibv_open_device",
            device: Some(name.to_owned()),
            reason: if found.is_none() {
                "no such device (was it removed?)".to_owned()
            } else {
                reason
            },
        }),
    }
}

/// A 24-bit starting sequence number that differs between runs.
fn initial_psn() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos ^ std::process::id().rotate_left(12)) & 0x00ff_ffff
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
    fn psns_fit_in_24_bits() {
        assert!(initial_psn() <= 0x00ff_ffff);
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
