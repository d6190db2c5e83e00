//! The endpoint thread's verbs resources: the library's allocation calls,
//! and the UC queue pair with its memory region, completion queue and
//! channel, taken from reset to ready-to-send, posting and polling the
//! probe messages, and freed in order when dropped.

use std::ffi::{c_int, c_uint, c_void};
use std::time::Duration;

use libloading::Library;

use super::abi::{
    ACCESS_LOCAL_WRITE, Context, IbvCompChannel, IbvContextOps, IbvCq, IbvMr, IbvQp, IbvQpAttr,
    IbvQpCap, IbvQpInitAttr, IbvRecvWr, IbvSendWr, IbvSge, IbvWc, POLLIN, Pd, PollFd,
    QP_ACCESS_FLAGS, QP_AV, QP_DEST_QPN, QP_PATH_MTU, QP_PKEY_INDEX, QP_PORT, QP_RQ_PSN, QP_SQ_PSN,
    QP_STATE, QPS_INIT, QPS_RESET, QPS_RTR, QPS_RTS, QPT_UC, SEND_SIGNALED, WC_RECV, WC_SUCCESS,
    WR_SEND, poll,
};
use super::{
    CQ_ENTRIES, EndpointAddress, HOP_LIMIT, MESSAGE_BYTES, Place, RECV_SLOTS, SEND_SLOTS,
    SLOT_BYTES, decode, encode,
};
use crate::verbs::{IbvDeviceHead, Padded, VerbsError, failure_reason};

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
pub(super) struct Queue {
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
    pub(super) psn: u32,
    next_send: usize,
    /// The peer the queue pair is connected to.
    peer: Option<EndpointAddress>,
}

impl Queue {
    pub(super) fn open(library: &str, place: &Place) -> Result<Self, VerbsError> {
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

    pub(super) fn qpn(&self) -> u32 {
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
    pub(super) fn connect(
        &mut self,
        place: &Place,
        peer: EndpointAddress,
    ) -> Result<(), VerbsError> {
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

    pub(super) fn send(&mut self, kind: u32, seq: u64) -> Result<(), VerbsError> {
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
    pub(super) fn wait(&mut self, limit: Duration) -> Result<(), VerbsError> {
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
    pub(super) fn drain(&mut self) -> Result<Vec<(u32, u64)>, VerbsError> {
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
    fn psns_fit_in_24_bits() {
        assert!(initial_psn() <= 0x00ff_ffff);
    }
}
