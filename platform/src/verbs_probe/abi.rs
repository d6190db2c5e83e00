//! rdma-core's structures, constants and inline-function table offsets
//! (libibverbs/verbs.h) that the probe's queue pair needs, checked at compile
//! time against the header's offsets and sizes, and `poll(2)` for waiting on
//! the completion channel.

use std::ffi::{c_int, c_uint, c_void};

pub(super) const QPT_UC: c_int = 3;
pub(super) const QPS_RESET: c_int = 0;
pub(super) const QPS_INIT: c_int = 1;
pub(super) const QPS_RTR: c_int = 2;
pub(super) const QPS_RTS: c_int = 3;
pub(super) const QP_STATE: c_int = 1;
pub(super) const QP_ACCESS_FLAGS: c_int = 8;
pub(super) const QP_PKEY_INDEX: c_int = 16;
pub(super) const QP_PORT: c_int = 32;
pub(super) const QP_AV: c_int = 128;
pub(super) const QP_PATH_MTU: c_int = 256;
pub(super) const QP_RQ_PSN: c_int = 4096;
pub(super) const QP_SQ_PSN: c_int = 65536;
pub(super) const QP_DEST_QPN: c_int = 1_048_576;
pub(super) const ACCESS_LOCAL_WRITE: c_int = 1;
pub(super) const WR_SEND: c_int = 2;
pub(super) const SEND_SIGNALED: c_uint = 2;
pub(super) const WC_SUCCESS: c_int = 0;
pub(super) const WC_RECV: c_int = 128;

/// `struct ibv_context`: the device, then the operation table.
#[repr(C)]
pub(super) struct IbvContext {
    pub(super) _device: *mut c_void,
    pub(super) ops: IbvContextOps,
}

/// `struct ibv_context_ops`, up to `post_recv`: 27 function pointers, of
/// which these four are called.
#[repr(C)]
pub(super) struct IbvContextOps {
    pub(super) _before_poll_cq: [*mut c_void; 11],
    pub(super) poll_cq: unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int,
    pub(super) req_notify_cq: unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int,
    pub(super) _before_post_send: [*mut c_void; 12],
    pub(super) post_send:
        unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int,
    pub(super) post_recv:
        unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int,
}

/// `struct ibv_cq`: its context first.
#[repr(C)]
pub(super) struct IbvCq {
    pub(super) context: *mut IbvContext,
}

/// `struct ibv_qp`, up to `qp_num`.
#[repr(C)]
pub(super) struct IbvQp {
    pub(super) context: *mut IbvContext,
    pub(super) _qp_context: *mut c_void,
    pub(super) _pd: *mut c_void,
    pub(super) _send_cq: *mut c_void,
    pub(super) _recv_cq: *mut c_void,
    pub(super) _srq: *mut c_void,
    pub(super) _handle: u32,
    pub(super) qp_num: u32,
}

/// `struct ibv_mr`, up to `lkey`.
#[repr(C)]
pub(super) struct IbvMr {
    pub(super) _context: *mut c_void,
    pub(super) _pd: *mut c_void,
    pub(super) _addr: *mut c_void,
    pub(super) _length: usize,
    pub(super) _handle: u32,
    pub(super) lkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub(super) struct IbvCompChannel {
    pub(super) _context: *mut c_void,
    pub(super) fd: c_int,
    pub(super) _refcnt: c_int,
}

#[repr(C)]
pub(super) struct IbvQpCap {
    pub(super) max_send_wr: u32,
    pub(super) max_recv_wr: u32,
    pub(super) max_send_sge: u32,
    pub(super) max_recv_sge: u32,
    pub(super) max_inline_data: u32,
}

#[repr(C)]
pub(super) struct IbvQpInitAttr {
    pub(super) _qp_context: *mut c_void,
    pub(super) send_cq: *mut IbvCq,
    pub(super) recv_cq: *mut IbvCq,
    pub(super) _srq: *mut c_void,
    pub(super) cap: IbvQpCap,
    pub(super) qp_type: c_int,
    pub(super) sq_sig_all: c_int,
}

/// `union ibv_gid` holds two `u64`s, hence the alignment.
#[repr(C, align(8))]
pub(super) struct IbvGlobalRoute {
    pub(super) dgid: [u8; 16],
    pub(super) _flow_label: u32,
    pub(super) sgid_index: u8,
    pub(super) hop_limit: u8,
    pub(super) _traffic_class: u8,
}

#[repr(C)]
pub(super) struct IbvAhAttr {
    pub(super) grh: IbvGlobalRoute,
    pub(super) _dlid: u16,
    pub(super) _sl: u8,
    pub(super) _src_path_bits: u8,
    pub(super) _static_rate: u8,
    pub(super) is_global: u8,
    pub(super) port_num: u8,
}

#[repr(C)]
pub(super) struct IbvQpAttr {
    pub(super) qp_state: c_int,
    pub(super) _cur_qp_state: c_int,
    pub(super) path_mtu: u32,
    pub(super) _path_mig_state: c_int,
    pub(super) _qkey: u32,
    pub(super) rq_psn: u32,
    pub(super) sq_psn: u32,
    pub(super) dest_qp_num: u32,
    pub(super) qp_access_flags: c_uint,
    pub(super) _cap: IbvQpCap,
    pub(super) ah_attr: IbvAhAttr,
    pub(super) _alt_ah_attr: IbvAhAttr,
    pub(super) pkey_index: u16,
    pub(super) _alt_pkey_index: u16,
    pub(super) _en_sqd_async_notify: u8,
    pub(super) _sq_draining: u8,
    pub(super) _max_rd_atomic: u8,
    pub(super) _max_dest_rd_atomic: u8,
    pub(super) _min_rnr_timer: u8,
    pub(super) port_num: u8,
    pub(super) _timeout: u8,
    pub(super) _retry_cnt: u8,
    pub(super) _rnr_retry: u8,
    pub(super) _alt_port_num: u8,
    pub(super) _alt_timeout: u8,
    pub(super) _rate_limit: u32,
}

#[repr(C)]
pub(super) struct IbvSge {
    pub(super) addr: u64,
    pub(super) length: u32,
    pub(super) lkey: u32,
}

#[repr(C)]
pub(super) struct IbvSendWr {
    pub(super) wr_id: u64,
    pub(super) next: *mut IbvSendWr,
    pub(super) sg_list: *mut IbvSge,
    pub(super) num_sge: c_int,
    pub(super) opcode: c_int,
    pub(super) send_flags: c_uint,
    pub(super) _imm_data: u32,
    pub(super) _rest: [u64; 11],
}

#[repr(C)]
pub(super) struct IbvRecvWr {
    pub(super) wr_id: u64,
    pub(super) next: *mut IbvRecvWr,
    pub(super) sg_list: *mut IbvSge,
    pub(super) num_sge: c_int,
}

#[repr(C)]
pub(super) struct IbvWc {
    pub(super) wr_id: u64,
    pub(super) status: c_int,
    pub(super) opcode: c_int,
    pub(super) _vendor_err: u32,
    pub(super) byte_len: u32,
    pub(super) _imm_data: u32,
    pub(super) _qp_num: u32,
    pub(super) _src_qp: u32,
    pub(super) _wc_flags: c_uint,
    pub(super) _pkey_index: u16,
    pub(super) _slid: u16,
    pub(super) _sl: u8,
    pub(super) _dlid_path_bits: u8,
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

pub(super) type Context = *mut IbvContext;
pub(super) type Pd = *mut c_void;

/// `poll(2)`'s descriptor; `nfds_t` is `unsigned long` on Linux and
/// `unsigned int` on macOS.
#[repr(C)]
pub(super) struct PollFd {
    pub(super) fd: c_int,
    pub(super) events: i16,
    pub(super) revents: i16,
}
#[cfg(target_os = "macos")]
pub(super) type Nfds = c_uint;
#[cfg(not(target_os = "macos"))]
pub(super) type Nfds = std::ffi::c_ulong;
pub(super) const POLLIN: i16 = 1;

unsafe extern "C" {
    pub(super) fn poll(fds: *mut PollFd, nfds: Nfds, timeout: c_int) -> c_int;
}
