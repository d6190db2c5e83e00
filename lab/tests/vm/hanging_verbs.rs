//! A verbs library with one device whose `ibv_query_port` never returns:
//! what a wedged RDMA stack looks like to meshd. Not part of the
//! workspace; `lab/tests/vm_verbs.rs` compiles it with `rustc` into a
//! `libibverbs.so.1` that the test VM puts first on the library path.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_void};
use std::time::Duration;

/// Room for `struct ibv_device` and `struct ibv_context`: zeroed, which
/// reads as transport 0 (InfiniBand).
fn zeroed_block() -> *mut c_void {
    Box::leak(Box::new([0u8; 4096])).as_mut_ptr().cast()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_list(count: *mut c_int) -> *mut *mut c_void {
    let list: &mut [*mut c_void; 2] = Box::leak(Box::new([zeroed_block(), std::ptr::null_mut()]));
    if !count.is_null() {
        unsafe { *count = 1 };
    }
    list.as_mut_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn ibv_free_device_list(_list: *mut *mut c_void) {}

#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_name(_device: *mut c_void) -> *const c_char {
    c"hung0".as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_guid(_device: *mut c_void) -> u64 {
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn ibv_open_device(_device: *mut c_void) -> *mut c_void {
    zeroed_block()
}

#[unsafe(no_mangle)]
pub extern "C" fn ibv_close_device(_context: *mut c_void) -> c_int {
    0
}

/// One port: `phys_port_cnt` is byte 227 of `struct ibv_device_attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_device(_context: *mut c_void, attr: *mut u8) -> c_int {
    unsafe { *attr.add(227) = 1 };
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_port(_context: *mut c_void, _port: u8, _attr: *mut c_void) -> c_int {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_gid(
    _context: *mut c_void,
    _port: u8,
    _index: c_int,
    _gid: *mut c_void,
) -> c_int {
    0
}
