//! A fake verbs library for the probe's tests: `extern "C"` functions with
//! the library's prototypes, found by symbol name as a loaded library's
//! would be, over one device ("fake0") whose peer answers every request
//! at once (or never). It records what the probe asked of it, and counts
//! the objects alive, so a test can see that everything made was freed.
//!
//! The functions reach their state through a global (a C function pointer
//! carries none), so the tests that use it take [`exclusive`] first.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::abi::{
    IbvCompChannel, IbvContext, IbvContextOps, IbvCq, IbvMr, IbvQp, IbvQpAttr, IbvQpInitAttr,
    IbvRecvWr, IbvSendWr, IbvWc, QPS_RTR, WC_RECV, WC_SUCCESS,
};
use super::{KIND_REPLY, KIND_REQUEST, MESSAGE_BYTES, decode, encode};
use crate::verbs::IbvDeviceHead;

/// A call the fake refuses, as a stack that does not offer it would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refuse {
    OpenDevice,
    CreateQp,
    /// `ibv_modify_qp` to ready-to-receive (the path MTU, the hop limit).
    Rtr,
}

/// How the fake behaves, and what it saw.
#[derive(Debug, Default)]
pub(super) struct State {
    refuse: Option<Refuse>,
    /// The peer answers requests.
    answering: bool,
    /// Objects made and not yet destroyed (contexts, domains, regions,
    /// channels, queues, queue pairs).
    pub(super) alive: i64,
    pub(super) channels_made: u32,
    /// Whether a completion queue was made with a channel.
    pub(super) cq_channel: Option<bool>,
    /// Address and length of each registration.
    pub(super) registered: Vec<(usize, usize)>,
    /// `path_mtu` and hop limit asked for at ready-to-receive.
    pub(super) rtr: Option<(u32, u8)>,
    /// Posted receive buffers: work request id, address, length.
    receives: VecDeque<(u64, u64, u32)>,
    /// Completions to be polled: id, status, opcode, length.
    completions: VecDeque<(u64, c_int, c_int, u32)>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// Holds the fake for one test.
pub(super) struct Exclusive {
    _held: MutexGuard<'static, ()>,
}

impl Exclusive {
    /// What the fake saw so far (read through `look`).
    pub(super) fn look<T>(&self, look: impl FnOnce(&State) -> T) -> T {
        with(|state| look(state))
    }
}

/// The fake for one test, afresh: refusing `refuse`, its peer answering
/// or not.
pub(super) fn exclusive(refuse: Option<Refuse>, answering: bool) -> Exclusive {
    let held = EXCLUSIVE.lock().unwrap_or_else(PoisonError::into_inner);
    *STATE.lock().unwrap_or_else(PoisonError::into_inner) = Some(State {
        refuse,
        answering,
        ..State::default()
    });
    Exclusive { _held: held }
}

fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut guard = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    f(guard.get_or_insert_with(State::default))
}

fn refuses(call: Refuse) -> bool {
    with(|state| state.refuse == Some(call))
}

/// A new object of the library, counted alive.
fn make<T>(value: T) -> *mut T {
    with(|state| state.alive += 1);
    Box::into_raw(Box::new(value))
}

/// Frees an object made by [`make`].
///
/// # Safety
///
/// `object` came from [`make`] with the same `T` and is freed once.
unsafe fn free<T>(object: *mut T) -> c_int {
    with(|state| state.alive -= 1);
    // SAFETY: by the caller.
    drop(unsafe { Box::from_raw(object) });
    0
}

/// The one device, never read: the fake's functions know it.
static DEVICE: [u64; 4] = [0; 4];

unsafe extern "C" fn get_device_list(count: *mut c_int) -> *mut *mut IbvDeviceHead {
    // SAFETY: the caller's out pointer.
    unsafe { *count = 1 };
    let device = std::ptr::addr_of!(DEVICE)
        .cast::<IbvDeviceHead>()
        .cast_mut();
    Box::into_raw(Box::new([device, std::ptr::null_mut()])).cast()
}

unsafe extern "C" fn free_device_list(list: *mut *mut IbvDeviceHead) {
    // SAFETY: made by `get_device_list` as this array.
    drop(unsafe { Box::from_raw(list.cast::<[*mut IbvDeviceHead; 2]>()) });
}

unsafe extern "C" fn get_device_name(_: *mut IbvDeviceHead) -> *const c_char {
    c"fake0".as_ptr()
}

unsafe extern "C" fn open_device(_: *mut IbvDeviceHead) -> *mut IbvContext {
    if refuses(Refuse::OpenDevice) {
        return std::ptr::null_mut();
    }
    make(IbvContext {
        _device: std::ptr::null_mut(),
        ops: IbvContextOps {
            _before_poll_cq: [std::ptr::null_mut(); 11],
            poll_cq,
            req_notify_cq,
            _before_post_send: [std::ptr::null_mut(); 12],
            post_send,
            post_recv,
        },
    })
}

unsafe extern "C" fn close_device(context: *mut IbvContext) -> c_int {
    // SAFETY: made by `open_device`, closed once.
    unsafe { free(context) }
}

unsafe extern "C" fn alloc_pd(_: *mut IbvContext) -> *mut c_void {
    make(0u64).cast()
}

unsafe extern "C" fn dealloc_pd(pd: *mut c_void) -> c_int {
    // SAFETY: made by `alloc_pd`, freed once.
    unsafe { free(pd.cast::<u64>()) }
}

unsafe extern "C" fn reg_mr(
    _: *mut c_void,
    addr: *mut c_void,
    length: usize,
    _: c_int,
) -> *mut IbvMr {
    with(|state| state.registered.push((addr as usize, length)));
    make(IbvMr {
        _context: std::ptr::null_mut(),
        _pd: std::ptr::null_mut(),
        _addr: addr,
        _length: length,
        _handle: 0,
        lkey: 5,
    })
}

unsafe extern "C" fn dereg_mr(mr: *mut IbvMr) -> c_int {
    // SAFETY: made by `reg_mr`, freed once.
    unsafe { free(mr) }
}

unsafe extern "C" fn create_comp_channel(_: *mut IbvContext) -> *mut IbvCompChannel {
    with(|state| state.channels_made += 1);
    make(IbvCompChannel {
        _context: std::ptr::null_mut(),
        fd: -1,
        _refcnt: 0,
    })
}

unsafe extern "C" fn destroy_comp_channel(channel: *mut IbvCompChannel) -> c_int {
    // SAFETY: made by `create_comp_channel`, freed once.
    unsafe { free(channel) }
}

unsafe extern "C" fn get_cq_event(
    _: *mut IbvCompChannel,
    _: *mut *mut IbvCq,
    _: *mut *mut c_void,
) -> c_int {
    -1
}

unsafe extern "C" fn ack_cq_events(_: *mut IbvCq, _: c_uint) {}

unsafe extern "C" fn create_cq(
    context: *mut IbvContext,
    _: c_int,
    _: *mut c_void,
    channel: *mut IbvCompChannel,
    _: c_int,
) -> *mut IbvCq {
    with(|state| state.cq_channel = Some(!channel.is_null()));
    make(IbvCq { context })
}

unsafe extern "C" fn destroy_cq(cq: *mut IbvCq) -> c_int {
    // SAFETY: made by `create_cq`, freed once.
    unsafe { free(cq) }
}

unsafe extern "C" fn create_qp(_: *mut c_void, _: *mut IbvQpInitAttr) -> *mut IbvQp {
    if refuses(Refuse::CreateQp) {
        return std::ptr::null_mut();
    }
    make(IbvQp {
        context: std::ptr::null_mut(),
        _qp_context: std::ptr::null_mut(),
        _pd: std::ptr::null_mut(),
        _send_cq: std::ptr::null_mut(),
        _recv_cq: std::ptr::null_mut(),
        _srq: std::ptr::null_mut(),
        _handle: 0,
        qp_num: 77,
    })
}

unsafe extern "C" fn modify_qp(_: *mut IbvQp, attr: *mut IbvQpAttr, _: c_int) -> c_int {
    // SAFETY: the caller's attributes, read during the call.
    let attr = unsafe { &*attr };
    if attr.qp_state != QPS_RTR {
        return 0;
    }
    with(|state| state.rtr = Some((attr.path_mtu, attr.ah_attr.grh.hop_limit)));
    if refuses(Refuse::Rtr) {
        // EINVAL: the attributes are not taken.
        return 22;
    }
    0
}

unsafe extern "C" fn destroy_qp(qp: *mut IbvQp) -> c_int {
    // SAFETY: made by `create_qp`, freed once.
    unsafe { free(qp) }
}

unsafe extern "C" fn req_notify_cq(_: *mut IbvCq, _: c_int) -> c_int {
    0
}

unsafe extern "C" fn post_recv(_: *mut IbvQp, wr: *mut IbvRecvWr, _: *mut *mut IbvRecvWr) -> c_int {
    // SAFETY: the caller's request and its one scatter entry.
    let (id, sge) = unsafe { ((*wr).wr_id, &*(*wr).sg_list) };
    with(|state| state.receives.push_back((id, sge.addr, sge.length)));
    0
}

/// Completes the send; a request is answered at once into the first
/// posted receive buffer when the peer answers.
unsafe extern "C" fn post_send(_: *mut IbvQp, wr: *mut IbvSendWr, _: *mut *mut IbvSendWr) -> c_int {
    // SAFETY: the caller's request, its one scatter entry and the
    // registered bytes it names.
    let (id, message) = unsafe {
        let sge = &*(*wr).sg_list;
        let bytes = std::slice::from_raw_parts(sge.addr as *const u8, sge.length as usize);
        ((*wr).wr_id, decode(bytes))
    };
    with(|state| {
        state.completions.push_back((id, WC_SUCCESS, 0, 0));
        let Some((KIND_REQUEST, seq)) = message else {
            return;
        };
        if !state.answering {
            return;
        }
        let Some((slot, addr, length)) = state.receives.pop_front() else {
            return;
        };
        let reply = encode(KIND_REPLY, seq);
        let length = (length as usize).min(MESSAGE_BYTES);
        // SAFETY: a receive buffer the probe posted, registered and
        // owned by it until this completion is polled.
        unsafe { std::ptr::copy_nonoverlapping(reply.as_ptr(), addr as *mut u8, length) };
        state
            .completions
            .push_back((slot, WC_SUCCESS, WC_RECV, length as u32));
    });
    0
}

unsafe extern "C" fn poll_cq(_: *mut IbvCq, entries: c_int, wc: *mut IbvWc) -> c_int {
    with(|state| {
        let mut count = 0;
        while count < entries {
            let Some((id, status, opcode, length)) = state.completions.pop_front() else {
                break;
            };
            // SAFETY: the caller's room for `entries` completions.
            let entry = unsafe { &mut *wc.add(count as usize) };
            entry.wr_id = id;
            entry.status = status;
            entry.opcode = opcode;
            entry.byte_len = length;
            count += 1;
        }
        count
    })
}

/// The address of the fake's function `symbol`, as `dlsym` would give
/// it; `missing` are left out.
pub(super) fn lookup(symbol: &str, missing: &[&str]) -> Result<*mut c_void, String> {
    if missing.contains(&symbol) {
        return Err(format!("{symbol}: symbol not found"));
    }
    let address = match symbol {
        "ibv_get_device_list" => get_device_list as *mut c_void,
        "ibv_free_device_list" => free_device_list as *mut c_void,
        "ibv_get_device_name" => get_device_name as *mut c_void,
        "ibv_open_device" => open_device as *mut c_void,
        "ibv_close_device" => close_device as *mut c_void,
        "ibv_alloc_pd" => alloc_pd as *mut c_void,
        "ibv_dealloc_pd" => dealloc_pd as *mut c_void,
        "ibv_reg_mr" => reg_mr as *mut c_void,
        "ibv_dereg_mr" => dereg_mr as *mut c_void,
        "ibv_create_comp_channel" => create_comp_channel as *mut c_void,
        "ibv_destroy_comp_channel" => destroy_comp_channel as *mut c_void,
        "ibv_get_cq_event" => get_cq_event as *mut c_void,
        "ibv_ack_cq_events" => ack_cq_events as *mut c_void,
        "ibv_create_cq" => create_cq as *mut c_void,
        "ibv_destroy_cq" => destroy_cq as *mut c_void,
        "ibv_create_qp" => create_qp as *mut c_void,
        "ibv_modify_qp" => modify_qp as *mut c_void,
        "ibv_destroy_qp" => destroy_qp as *mut c_void,
        _ => return Err(format!("{symbol}: symbol not found")),
    };
    Ok(address)
}
