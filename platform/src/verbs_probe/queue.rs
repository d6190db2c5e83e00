//! The endpoint thread's verbs resources: the library's allocation calls,
//! and the UC queue pair with its memory region, completion queue and (in
//! the channel recipe) completion channel, taken from reset to
//! ready-to-send, posting and polling the probe messages, and freed in
//! order when dropped.

use std::borrow::Borrow;
use std::ffi::{c_char, c_int, c_uint, c_void};

use libloading::Library;

use super::abi::{
    ACCESS_LOCAL_WRITE, Context, IbvCompChannel, IbvContextOps, IbvCq, IbvMr, IbvQp, IbvQpAttr,
    IbvQpCap, IbvQpInitAttr, IbvRecvWr, IbvSendWr, IbvSge, IbvWc, POLLIN, Pd, PollFd,
    QP_ACCESS_FLAGS, QP_AV, QP_DEST_QPN, QP_PATH_MTU, QP_PKEY_INDEX, QP_PORT, QP_RQ_PSN, QP_SQ_PSN,
    QP_STATE, QPS_INIT, QPS_RESET, QPS_RTR, QPS_RTS, QPT_UC, SEND_SIGNALED, WC_RECV, WC_SUCCESS,
    WR_SEND, poll,
};
use super::buffer::PageBuffer;
use super::{
    CQ_ENTRIES, EndpointAddress, MESSAGE_BYTES, POLL_PAUSE, POLL_SLICE, Place, ProbeError,
    RECV_SLOTS, SEND_SLOTS, SLOT_BYTES, Waiting, decode, encode,
};
use crate::verbs::{IbvDeviceHead, Padded, VerbsError, failure_reason};

/// The library's calls the queue pair needs (exported functions, unlike
/// the data-path calls the context's table holds). The required ones are
/// those MLX's JACCL resolves from Apple's librdma, so a library JACCL
/// works with has them all.
#[derive(Clone, Copy)]
pub(super) struct QueueVerbs {
    pub(super) get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDeviceHead,
    pub(super) free_device_list: unsafe extern "C" fn(*mut *mut IbvDeviceHead),
    pub(super) get_device_name: unsafe extern "C" fn(*mut IbvDeviceHead) -> *const c_char,
    pub(super) open_device: unsafe extern "C" fn(*mut IbvDeviceHead) -> Context,
    pub(super) close_device: unsafe extern "C" fn(Context) -> c_int,
    pub(super) alloc_pd: unsafe extern "C" fn(Context) -> Pd,
    pub(super) dealloc_pd: unsafe extern "C" fn(Pd) -> c_int,
    pub(super) reg_mr: unsafe extern "C" fn(Pd, *mut c_void, usize, c_int) -> *mut IbvMr,
    pub(super) dereg_mr: unsafe extern "C" fn(*mut IbvMr) -> c_int,
    pub(super) create_cq:
        unsafe extern "C" fn(Context, c_int, *mut c_void, *mut IbvCompChannel, c_int) -> *mut IbvCq,
    pub(super) destroy_cq: unsafe extern "C" fn(*mut IbvCq) -> c_int,
    pub(super) create_qp: unsafe extern "C" fn(Pd, *mut IbvQpInitAttr) -> *mut IbvQp,
    pub(super) modify_qp: unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int,
    pub(super) destroy_qp: unsafe extern "C" fn(*mut IbvQp) -> c_int,
    /// Optional: only the channel recipe waits on a completion channel, and
    /// JACCL never makes one, so Apple's library may well lack these.
    pub(super) channel: Option<ChannelVerbs>,
}

/// The completion channel's calls.
#[derive(Clone, Copy)]
pub(super) struct ChannelVerbs {
    pub(super) create: unsafe extern "C" fn(Context) -> *mut IbvCompChannel,
    pub(super) destroy: unsafe extern "C" fn(*mut IbvCompChannel) -> c_int,
    pub(super) get_cq_event:
        unsafe extern "C" fn(*mut IbvCompChannel, *mut *mut IbvCq, *mut *mut c_void) -> c_int,
    pub(super) ack_cq_events: unsafe extern "C" fn(*mut IbvCq, c_uint),
}

/// A function of type `F` at `address`.
///
/// # Safety
///
/// `address` is a function whose prototype is `F`, alive while `F` is
/// called.
unsafe fn function<F: Copy>(address: *mut c_void) -> F {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    // SAFETY: same size (checked above); by the caller, the bits are a
    // function of type `F`.
    unsafe { std::mem::transmute_copy(&address) }
}

impl QueueVerbs {
    /// The calls of `library`, from `lookup` (a symbol's address, or why it
    /// has none): a required call missing is an error naming it; the
    /// channel's calls are taken only when all of them are there.
    pub(super) fn resolve(
        library: &str,
        mut lookup: impl FnMut(&'static str) -> Result<*mut c_void, String>,
    ) -> Result<Self, VerbsError> {
        let mut find = |symbol: &'static str| match lookup(symbol) {
            Ok(address) if !address.is_null() => Ok(address),
            found => Err(VerbsError::Symbol {
                library: library.to_owned(),
                symbol,
                reason: found
                    .err()
                    .unwrap_or_else(|| "its address is null".to_owned()),
            }),
        };
        macro_rules! call {
            ($symbol:literal) => {
                // SAFETY: the library's function of that name; the field's
                // type is its prototype in rdma-core's verbs.h (JACCL
                // declares the same ones for Apple's). The caller keeps
                // the library loaded while the table is used.
                unsafe { function(find($symbol)?) }
            };
        }
        let mut channel = || -> Result<ChannelVerbs, VerbsError> {
            Ok(ChannelVerbs {
                create: call!("ibv_create_comp_channel"),
                destroy: call!("ibv_destroy_comp_channel"),
                get_cq_event: call!("ibv_get_cq_event"),
                ack_cq_events: call!("ibv_ack_cq_events"),
            })
        };
        let channel = channel().ok();
        Ok(Self {
            get_device_list: call!("ibv_get_device_list"),
            free_device_list: call!("ibv_free_device_list"),
            get_device_name: call!("ibv_get_device_name"),
            open_device: call!("ibv_open_device"),
            close_device: call!("ibv_close_device"),
            alloc_pd: call!("ibv_alloc_pd"),
            dealloc_pd: call!("ibv_dealloc_pd"),
            reg_mr: call!("ibv_reg_mr"),
            dereg_mr: call!("ibv_dereg_mr"),
            create_cq: call!("ibv_create_cq"),
            destroy_cq: call!("ibv_destroy_cq"),
            create_qp: call!("ibv_create_qp"),
            modify_qp: call!("ibv_modify_qp"),
            destroy_qp: call!("ibv_destroy_qp"),
            channel,
        })
    }
}

/// The calls of a loaded library, valid while it stays loaded with them.
pub(super) struct Loaded {
    verbs: QueueVerbs,
    _library: Library,
}

impl Loaded {
    pub(super) fn load(name: &str) -> Result<Self, VerbsError> {
        // SAFETY: as in `verbs::Verbs::load`: the library's initialisers
        // only set up its own state.
        let library = unsafe { Library::new(name) }.map_err(|err| VerbsError::Load {
            library: name.to_owned(),
            reason: err.to_string(),
        })?;
        let verbs = QueueVerbs::resolve(name, |symbol| {
            // SAFETY: only the symbol's address is read here; `resolve`
            // gives it its function type.
            unsafe { library.get::<*mut c_void>(symbol) }
                .map(|address| *address)
                .map_err(|err| err.to_string())
        })?;
        Ok(Self {
            verbs,
            _library: library,
        })
    }
}

impl Borrow<QueueVerbs> for Loaded {
    fn borrow(&self) -> &QueueVerbs {
        &self.verbs
    }
}

/// A completion channel and its calls.
struct Channel {
    verbs: ChannelVerbs,
    channel: *mut IbvCompChannel,
}

/// Bytes of the probe's slots; the registered buffer is this rounded up
/// to whole pages.
const SLOTS_BYTES: usize = (RECV_SLOTS + SEND_SLOTS) * SLOT_BYTES;

/// The queue pair with everything under it, freed in reverse order of
/// creation when dropped. Only ever touched on the endpoint's thread.
pub(super) struct Queue<'v> {
    library: String,
    device: String,
    verbs: &'v QueueVerbs,
    context: Context,
    pd: Pd,
    buffer: PageBuffer,
    mr: *mut IbvMr,
    /// `None` while polling (the recipe's or for want of the calls).
    channel: Option<Channel>,
    cq: *mut IbvCq,
    qp: *mut IbvQp,
    pub(super) psn: u32,
    next_send: usize,
    /// The peer the queue pair is connected to.
    peer: Option<EndpointAddress>,
}

impl<'v> Queue<'v> {
    /// Opens the device and makes everything under the queue pair, up to
    /// INIT with its receive buffers posted. Anything the stack refuses
    /// here is [`ProbeError::Unsupported`]: no packet has left yet, so it
    /// says nothing about the link. Only a device no longer listed (being
    /// removed) is a failure of the link's RDMA side.
    pub(super) fn open(
        verbs: &'v QueueVerbs,
        library: &str,
        place: &Place,
    ) -> Result<Self, ProbeError> {
        let page_size = PageBuffer::host_page_size();
        let buffer = PageBuffer::new(SLOTS_BYTES, page_size).ok_or_else(|| {
            ProbeError::Unsupported(VerbsError::Call {
                library: library.to_owned(),
                call: "ibv_reg_mr",
                device: Some(place.device.clone()),
                reason: format!(
                    "cannot allocate {SLOTS_BYTES} bytes aligned to the {page_size}-byte page"
                ),
            })
        })?;
        let context = open_by_name(verbs, library, &place.device)?;
        let mut queue = Self {
            library: library.to_owned(),
            device: place.device.clone(),
            verbs,
            context,
            pd: std::ptr::null_mut(),
            buffer,
            mr: std::ptr::null_mut(),
            channel: None,
            cq: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            psn: initial_psn(),
            next_send: 0,
            peer: None,
        };
        // From here on, `Drop` frees whatever was made if a step fails.
        queue.make(place).map_err(ProbeError::Unsupported)?;
        Ok(queue)
    }

    /// The protection domain, memory region, channel (when waited on),
    /// completion queue and queue pair, then INIT.
    fn make(&mut self, place: &Place) -> Result<(), VerbsError> {
        let verbs = self.verbs;
        // SAFETY (each call below): arguments are live objects this queue
        // created on this thread, or buffers it owns for its lifetime.
        self.pd = unsafe { (verbs.alloc_pd)(self.context) };
        self.check_created(self.pd.is_null(), "ibv_alloc_pd")?;
        let length = self.buffer.len();
        self.mr = unsafe {
            (verbs.reg_mr)(
                self.pd,
                self.buffer.as_mut_ptr().cast(),
                length,
                ACCESS_LOCAL_WRITE,
            )
        };
        self.check_created(self.mr.is_null(), "ibv_reg_mr")?;
        if let (Waiting::Channel, Some(channel_verbs)) = (place.recipe.waiting, verbs.channel) {
            let channel = unsafe { (channel_verbs.create)(self.context) };
            self.check_created(channel.is_null(), "ibv_create_comp_channel")?;
            self.channel = Some(Channel {
                verbs: channel_verbs,
                channel,
            });
        }
        let channel = self
            .channel
            .as_ref()
            .map_or(std::ptr::null_mut(), |c| c.channel);
        self.cq = unsafe {
            (verbs.create_cq)(self.context, CQ_ENTRIES, std::ptr::null_mut(), channel, 0)
        };
        self.check_created(self.cq.is_null(), "ibv_create_cq")?;
        let mut init = Padded::<IbvQpInitAttr>::zeroed();
        init.value.send_cq = self.cq;
        init.value.recv_cq = self.cq;
        init.value.cap = IbvQpCap {
            max_send_wr: SEND_SLOTS as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        init.value.qp_type = QPT_UC;
        init.value.sq_sig_all = 1;
        self.qp = unsafe { (verbs.create_qp)(self.pd, &mut init.value) };
        self.check_created(self.qp.is_null(), "ibv_create_qp")?;
        self.enter_init(place)?;
        if self.channel.is_some() {
            self.arm()?;
        }
        Ok(())
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
    ///
    /// A refusal is [`ProbeError::Unsupported`]: nothing has been sent, and
    /// a stack that will not take the recipe's attributes (path MTU, hop
    /// limit) says nothing about the cable.
    pub(super) fn connect(
        &mut self,
        place: &Place,
        peer: EndpointAddress,
    ) -> Result<(), ProbeError> {
        self.connect_to(place, peer)
            .map_err(ProbeError::Unsupported)
    }

    fn connect_to(&mut self, place: &Place, peer: EndpointAddress) -> Result<(), VerbsError> {
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
        rtr.value.path_mtu = place.path_mtu();
        rtr.value.dest_qp_num = peer.qpn;
        rtr.value.rq_psn = peer.psn;
        rtr.value.ah_attr.is_global = 1;
        rtr.value.ah_attr.port_num = place.port;
        rtr.value.ah_attr.grh.dgid = peer.gid.octets();
        rtr.value.ah_attr.grh.sgid_index = place.gid_index;
        rtr.value.ah_attr.grh.hop_limit = place.recipe.hop_limit;
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
            addr: self.buffer.bytes_mut()[slot * SLOT_BYTES..].as_mut_ptr() as u64,
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
        self.buffer.bytes_mut()[slot * SLOT_BYTES..slot * SLOT_BYTES + MESSAGE_BYTES]
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

    /// Waits for completions before the next poll: on the channel for up
    /// to [`POLL_SLICE`], taking its event; without one (polling, as JACCL
    /// does), a pause of [`POLL_PAUSE`], so the thread never spins.
    pub(super) fn wait(&mut self) -> Result<(), VerbsError> {
        let Some(channel) = &self.channel else {
            std::thread::sleep(POLL_PAUSE);
            return Ok(());
        };
        let (verbs, channel) = (channel.verbs, channel.channel);
        // SAFETY: a live completion channel.
        let fd = unsafe { (*channel).fd };
        let mut poll_fd = PollFd {
            fd,
            events: POLLIN,
            revents: 0,
        };
        let millis = c_int::try_from(POLL_SLICE.as_millis()).unwrap_or(c_int::MAX);
        // SAFETY: one valid descriptor entry.
        let ready = unsafe { poll(&mut poll_fd, 1, millis) };
        if ready <= 0 {
            return Ok(());
        }
        let mut cq = std::ptr::null_mut();
        let mut cq_context = std::ptr::null_mut();
        // SAFETY: the channel is readable, so this does not block; the
        // event is acknowledged at once, before the queue can be destroyed.
        let code = unsafe { (verbs.get_cq_event)(channel, &mut cq, &mut cq_context) };
        if code != 0 {
            return Err(self.failed("ibv_get_cq_event", code));
        }
        // SAFETY: `cq` is this queue's, named by the event just taken.
        unsafe { (verbs.ack_cq_events)(cq, 1) };
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
                    if let Some(message) = decode(&self.buffer.bytes()[start..start + length]) {
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

impl Drop for Queue<'_> {
    fn drop(&mut self) {
        // SAFETY: each object was created by this queue on this thread and
        // is destroyed exactly once, children before parents; every
        // completion event was acknowledged when it was taken. The memory
        // region is deregistered here, before the buffer under it is freed
        // with the fields.
        unsafe {
            if !self.qp.is_null() {
                (self.verbs.destroy_qp)(self.qp);
            }
            if !self.cq.is_null() {
                (self.verbs.destroy_cq)(self.cq);
            }
            if let Some(channel) = &self.channel {
                (channel.verbs.destroy)(channel.channel);
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

/// Opens device `name`: a device no longer listed is a failure (it is
/// being removed); a library that will not list or open it is a refusal.
fn open_by_name(verbs: &QueueVerbs, library: &str, name: &str) -> Result<Context, ProbeError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid out pointer.
    let list = unsafe { (verbs.get_device_list)(&mut count) };
    if list.is_null() {
        return Err(ProbeError::Unsupported(VerbsError::Call {
            library: library.to_owned(),
            call: "ibv_get_device_list",
            device: None,
            reason: std::io::Error::last_os_error().to_string(),
        }));
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
    let failed = |reason: String| VerbsError::Call {
        library: library.to_owned(),
        call: "ibv_open_device",
        device: Some(name.to_owned()),
        reason,
    };
    match context {
        Some(context) if !context.is_null() => Ok(context),
        Some(_) => Err(ProbeError::Unsupported(failed(reason))),
        None => Err(ProbeError::Failed(failed(
            "no such device (was it removed?)".to_owned(),
        ))),
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
