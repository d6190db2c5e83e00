//! Read-only verbs through the system library, loaded at run time
//! (`libibverbs.so.1` from rdma-core on Linux, `/usr/lib/librdma.dylib` on
//! macOS 26.2+), so meshd builds and runs where neither exists.
//!
//! Only these calls are made: `ibv_get_device_list`, `ibv_get_device_name`,
//! `ibv_get_device_guid`, `ibv_open_device`, `ibv_query_device`,
//! `ibv_query_port`, `ibv_query_gid`, `ibv_close_device`,
//! `ibv_free_device_list`. `ibv_get_device_guid` and `ibv_query_device`
//! are optional: MLX's JACCL never calls them, so a library may lack them;
//! without them the node GUIDs are unknown, and only port 1 of each device
//! is read (JACCL uses port 1, and every verbs device has one), with the
//! reason in [`VerbsReading::unknown`]. Nothing allocates protection domains, queue
//! pairs, memory regions or completion queues: Apple's RDMA budget is tiny
//! and failed allocations have wedged ports (ARCHITECTURE.md, Field facts).
//!
//! Verbs calls hang when RDMA is wedged, so the enumeration runs on its own
//! thread and is given up after a deadline. A thread that never returns
//! cannot be killed; instead no new call goes into that library until it
//! does, so hung threads never pile up.
//!
//! Struct layouts follow rdma-core's `libibverbs/verbs.h`.
//! `ibv_query_port` there is an inline wrapper; the exported symbol is the
//! compatibility entry point, which fills only the legacy prefix of
//! `struct ibv_port_attr` (through `flags`, 48 bytes). It is given a zeroed
//! buffer of the whole current struct plus slack, so a library whose struct
//! grew cannot write past it, and fields it does not fill stay zero.

#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::io::ErrorKind;
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libloading::Library;
use meshd_domain::RdmaPortState;
use meshd_domain::facts::OsKind;

use crate::ibv::{RdmaDevice, RdmaPort};

/// How long an enumeration may take before it is given up: healthy
/// hardware answers in milliseconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The verbs library of `os`; `None` where there is none.
pub fn library_for(os: OsKind) -> Option<&'static str> {
    match os {
        OsKind::Macos => Some("/usr/lib/librdma.dylib"),
        OsKind::Linux => Some("libibverbs.so.1"),
        OsKind::Other => None,
    }
}

/// Why the verbs library could not list its devices, or one device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    #[error("cannot load the verbs library {library}: {reason}")]
    Load { library: String, reason: String },
    #[error("the verbs library {library} has no {symbol}: {reason}")]
    Symbol {
        library: String,
        symbol: &'static str,
        reason: String,
    },
    /// rdma-core reports ENOSYS when the kernel's verbs interface
    /// (`/sys/class/infiniband_verbs`, module ib_uverbs) is missing.
    #[error(
        "{library}: the kernel has no verbs interface (ibv_get_device_list: {reason}); \
         is ib_uverbs loaded?"
    )]
    NoKernelVerbs { library: String, reason: String },
    #[error("{library}: {call}{} failed: {reason}", on_device(.device))]
    Call {
        library: String,
        call: &'static str,
        device: Option<String>,
        reason: String,
    },
    #[error(
        "{library}: the device enumeration did not finish within {after:?}; RDMA may be wedged"
    )]
    TimedOut { library: String, after: Duration },
    #[error(
        "{library}: an earlier device enumeration timed out and has still not returned; \
         not calling into the library again until it does"
    )]
    StillHung { library: String },
    #[error("{library}: the verbs thread {what}")]
    Thread { library: String, what: String },
}

fn on_device(device: &Option<String>) -> String {
    device
        .as_ref()
        .map(|name| format!(" on {name}"))
        .unwrap_or_default()
}

/// The devices found, and the devices or ports that could not be read
/// (a device that cannot be opened still appears, without ports).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerbsReading {
    pub devices: Vec<RdmaDevice>,
    pub problems: Vec<VerbsError>,
    /// What this library cannot tell, because an optional call is missing
    /// from it (one line per call, naming what stays unknown).
    pub unknown: Vec<String>,
}

/// Lists the RDMA devices of `library` with their ports and GIDs, giving
/// up after `timeout`.
pub fn read_devices(library: &str, timeout: Duration) -> Result<VerbsReading, VerbsError> {
    let owned = library.to_owned();
    run_with_deadline(library, timeout, move || enumerate(&owned))
}

/// Enumerations that timed out, by library, with a flag set when the call
/// finally returns.
static ABANDONED: Mutex<Vec<(String, Arc<AtomicBool>)>> = Mutex::new(Vec::new());

/// Refuses a new call into `library` while an earlier one that was given
/// up on has not returned.
pub(crate) fn refuse_if_hung(library: &str) -> Result<(), VerbsError> {
    let mut abandoned = ABANDONED.lock().unwrap_or_else(|e| e.into_inner());
    abandoned.retain(|(_, returned)| !returned.load(Ordering::Acquire));
    if abandoned.iter().any(|(held, _)| held == library) {
        return Err(VerbsError::StillHung {
            library: library.to_owned(),
        });
    }
    Ok(())
}

/// Records a thread inside `library` that was given up on; `returned` is
/// set when it comes back.
pub(crate) fn abandon(library: &str, returned: Arc<AtomicBool>) {
    ABANDONED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((library.to_owned(), returned));
}

fn run_with_deadline<T: Send + 'static>(
    library: &str,
    timeout: Duration,
    work: impl FnOnce() -> Result<T, VerbsError> + Send + 'static,
) -> Result<T, VerbsError> {
    refuse_if_hung(library)?;
    let returned = Arc::new(AtomicBool::new(false));
    let (answer, answered) = mpsc::sync_channel(1);
    let flag = Arc::clone(&returned);
    std::thread::Builder::new()
        .name("meshd-verbs".to_owned())
        .spawn(move || {
            let result = work();
            flag.store(true, Ordering::Release);
            let _ = answer.send(result);
        })
        .map_err(|err| VerbsError::Thread {
            library: library.to_owned(),
            what: format!("cannot start: {err}"),
        })?;
    match answered.recv_timeout(timeout) {
        Ok(result) => result,
        Err(RecvTimeoutError::Timeout) => {
            abandon(library, returned);
            Err(VerbsError::TimedOut {
                library: library.to_owned(),
                after: timeout,
            })
        }
        Err(RecvTimeoutError::Disconnected) => Err(VerbsError::Thread {
            library: library.to_owned(),
            what: "ended without an answer".to_owned(),
        }),
    }
}

/// `struct ibv_device`: only its leading fields are read.
#[repr(C)]
pub(crate) struct IbvDeviceHead {
    _ops: [*mut c_void; 2],
    _node_type: c_int,
    transport_type: c_int,
}

/// `struct ibv_device_attr`; only the port count is read.
#[repr(C)]
struct IbvDeviceAttr {
    _fw_ver: [c_char; 64],
    /// `node_guid`, `sys_image_guid`, `max_mr_size`, `page_size_cap`.
    _guids_and_sizes: [u64; 4],
    /// `vendor_id`, `vendor_part_id`, `hw_ver`.
    _ids: [u32; 3],
    /// `max_qp` through `max_srq_sge`: 29 ints and enums.
    _limits: [c_int; 29],
    _max_pkeys: u16,
    _local_ca_ack_delay: u8,
    phys_port_cnt: u8,
}

/// `struct ibv_port_attr` as of rdma-core 50 (with `port_cap_flags2` and
/// `active_speed_ex` after the legacy prefix).
#[repr(C)]
struct IbvPortAttr {
    state: u32,
    /// `enum ibv_mtu` codes.
    max_mtu: u32,
    active_mtu: u32,
    gid_tbl_len: c_int,
    /// `port_cap_flags`, `max_msg_sz`, `bad_pkey_cntr`, `qkey_viol_cntr`.
    _flags_and_counters: [u32; 4],
    /// `pkey_tbl_len`, `lid`, `sm_lid`.
    _table_and_lids: [u16; 3],
    /// `lmc`, `max_vl_num`, `sm_sl`, `subnet_timeout`, `init_type_reply`.
    _subnet: [u8; 5],
    active_width: u8,
    active_speed: u8,
    _phys_state: u8,
    link_layer: u8,
    _flags: u8,
    _port_cap_flags2: u16,
    _active_speed_ex: u32,
}

// The offsets rdma-core's headers give these fields.
const _: () = {
    assert!(
        std::mem::offset_of!(IbvDeviceHead, transport_type) == 2 * size_of::<*mut c_void>() + 4
    );
    assert!(std::mem::offset_of!(IbvDeviceAttr, _guids_and_sizes) == 64);
    assert!(std::mem::offset_of!(IbvDeviceAttr, _ids) == 96);
    assert!(std::mem::offset_of!(IbvDeviceAttr, _max_pkeys) == 224);
    assert!(std::mem::offset_of!(IbvDeviceAttr, phys_port_cnt) == 227);
    assert!(std::mem::offset_of!(IbvPortAttr, gid_tbl_len) == 12);
    assert!(std::mem::offset_of!(IbvPortAttr, _table_and_lids) == 32);
    assert!(std::mem::offset_of!(IbvPortAttr, active_width) == 43);
    assert!(std::mem::offset_of!(IbvPortAttr, link_layer) == 46);
    assert!(std::mem::offset_of!(IbvPortAttr, _port_cap_flags2) == 48);
    assert!(std::mem::offset_of!(IbvPortAttr, _active_speed_ex) == 52);
    assert!(size_of::<IbvPortAttr>() == 56);
};

/// An output buffer with room to spare after `T` (see the module doc).
#[repr(C)]
pub(crate) struct Padded<T> {
    pub(crate) value: T,
    slack: [u8; 256],
}

impl<T> Padded<T> {
    pub(crate) fn zeroed() -> Self {
        // SAFETY: only instantiated with `repr(C)` structs of integers and
        // raw pointers (here and in `verbs_probe`), for which all-zero
        // bytes are a valid value.
        unsafe { std::mem::zeroed() }
    }
}

type Context = *mut c_void;
type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDeviceHead;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut IbvDeviceHead);
type GetDeviceName = unsafe extern "C" fn(*mut IbvDeviceHead) -> *const c_char;
type GetDeviceGuid = unsafe extern "C" fn(*mut IbvDeviceHead) -> u64;
type OpenDevice = unsafe extern "C" fn(*mut IbvDeviceHead) -> Context;
type CloseDevice = unsafe extern "C" fn(Context) -> c_int;
type QueryDevice = unsafe extern "C" fn(Context, *mut IbvDeviceAttr) -> c_int;
type QueryPort = unsafe extern "C" fn(Context, u8, *mut IbvPortAttr) -> c_int;
type QueryGid = unsafe extern "C" fn(Context, u8, c_int, *mut [u8; 16]) -> c_int;

/// GID tables are 16–256 entries on real hardware; a larger length is
/// garbage and is not walked further.
const MAX_GID_ENTRIES: c_int = 1024;

/// The loaded library and the functions taken from it. The function
/// pointers are valid while `_library` is loaded, which is as long as this
/// struct lives.
struct Verbs {
    name: String,
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    /// Optional: see the module doc.
    get_device_guid: Option<GetDeviceGuid>,
    open_device: OpenDevice,
    close_device: CloseDevice,
    /// Optional: see the module doc.
    query_device: Option<QueryDevice>,
    query_port: QueryPort,
    query_gid: QueryGid,
    _library: Library,
}

/// What stays unknown without each optional call.
const WITHOUT_GET_DEVICE_GUID: &str = "node GUIDs unknown";
const WITHOUT_QUERY_DEVICE: &str = "port counts unknown; only port 1 of each device was read";

impl Verbs {
    fn load(name: &str) -> Result<Verbs, VerbsError> {
        // SAFETY: loading runs the library's initialisers; rdma-core's and
        // Apple's only set up their own state.
        let library = unsafe { Library::new(name) }.map_err(|err| VerbsError::Load {
            library: name.to_owned(),
            reason: err.to_string(),
        })?;
        macro_rules! optional {
            ($symbol:literal) => {
                // SAFETY: the type is the function's prototype in
                // rdma-core's verbs.h; the pointer is copied out and used
                // only while `library` is kept in the returned struct.
                unsafe { library.get(concat!($symbol, "\0").as_bytes()) }
                    .map(|f| *f)
                    .map_err(|err| VerbsError::Symbol {
                        library: name.to_owned(),
                        symbol: $symbol,
                        reason: err.to_string(),
                    })
            };
        }
        macro_rules! symbol {
            ($symbol:literal) => {
                optional!($symbol)?
            };
        }
        Ok(Verbs {
            name: name.to_owned(),
            get_device_list: symbol!("ibv_get_device_list"),
            free_device_list: symbol!("ibv_free_device_list"),
            get_device_name: symbol!("ibv_get_device_name"),
            get_device_guid: optional!("ibv_get_device_guid").ok(),
            open_device: symbol!("ibv_open_device"),
            close_device: symbol!("ibv_close_device"),
            query_device: optional!("ibv_query_device").ok(),
            query_port: symbol!("ibv_query_port"),
            query_gid: symbol!("ibv_query_gid"),
            _library: library,
        })
    }

    /// One line per optional call this library lacks, naming it and what
    /// stays unknown.
    fn unknown(&self) -> Vec<String> {
        let mut unknown = Vec::new();
        if self.get_device_guid.is_none() {
            unknown.push(format!(
                "{}: no ibv_get_device_guid; {WITHOUT_GET_DEVICE_GUID}",
                self.name
            ));
        }
        if self.query_device.is_none() {
            unknown.push(format!(
                "{}: no ibv_query_device; {WITHOUT_QUERY_DEVICE}",
                self.name
            ));
        }
        unknown
    }

    fn call_failed(&self, call: &'static str, device: &str, code: c_int) -> VerbsError {
        VerbsError::Call {
            library: self.name.clone(),
            call,
            device: Some(device.to_owned()),
            reason: failure_reason(code),
        }
    }
}

/// rdma-core returns an errno value from the query calls and -1 with
/// `errno` set from the others.
pub(crate) fn failure_reason(code: c_int) -> String {
    if code > 0 {
        std::io::Error::from_raw_os_error(code).to_string()
    } else {
        format!("{} ({code})", std::io::Error::last_os_error())
    }
}

fn enumerate(library: &str) -> Result<VerbsReading, VerbsError> {
    let verbs = Verbs::load(library)?;
    let list = DeviceList::get(&verbs)?;
    let mut reading = VerbsReading {
        unknown: verbs.unknown(),
        ..VerbsReading::default()
    };
    for device in list.devices() {
        reading
            .devices
            .push(read_device(&verbs, device, &mut reading.problems));
    }
    drop(list);
    Ok(reading)
}

/// The names of the devices `library` lists now, without opening any:
/// how the RDMA probe notices a device being removed (its verbs device
/// leaves the list before the kernel waits for programs to close it),
/// giving up after `timeout`.
pub fn device_names(library: &str, timeout: Duration) -> Result<Vec<String>, VerbsError> {
    let owned = library.to_owned();
    run_with_deadline(library, timeout, move || {
        let verbs = Verbs::load(&owned)?;
        let list = DeviceList::get(&verbs)?;
        Ok(list
            .devices()
            .into_iter()
            .map(|device| device_name(&verbs, device))
            .collect())
    })
}

/// Frees the device list however the enumeration ends.
struct DeviceList<'a> {
    verbs: &'a Verbs,
    list: *mut *mut IbvDeviceHead,
    count: usize,
}

impl<'a> DeviceList<'a> {
    fn get(verbs: &'a Verbs) -> Result<Self, VerbsError> {
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid out pointer for the call.
        let list = unsafe { (verbs.get_device_list)(&mut count) };
        if list.is_null() {
            let err = std::io::Error::last_os_error();
            let reason = err.to_string();
            return Err(if err.kind() == ErrorKind::Unsupported {
                VerbsError::NoKernelVerbs {
                    library: verbs.name.clone(),
                    reason,
                }
            } else {
                VerbsError::Call {
                    library: verbs.name.clone(),
                    call: "ibv_get_device_list",
                    device: None,
                    reason,
                }
            });
        }
        Ok(Self {
            verbs,
            list,
            count: usize::try_from(count).unwrap_or(0),
        })
    }

    /// The listed devices, without the NULL entries.
    fn devices(&self) -> Vec<*mut IbvDeviceHead> {
        // SAFETY: the library returned an array of `count` device pointers
        // (NULL-terminated), alive until `ibv_free_device_list` in `drop`;
        // the pointers copied out are used only while `self` lives.
        let devices = unsafe { std::slice::from_raw_parts(self.list, self.count) };
        devices.iter().copied().filter(|d| !d.is_null()).collect()
    }
}

impl Drop for DeviceList<'_> {
    fn drop(&mut self) {
        // SAFETY: `list` came from `ibv_get_device_list` of this library
        // and is freed exactly once, here.
        unsafe { (self.verbs.free_device_list)(self.list) }
    }
}

/// Closes an opened device however the reading ends.
struct OpenedDevice<'a> {
    verbs: &'a Verbs,
    context: Context,
}

impl Drop for OpenedDevice<'_> {
    fn drop(&mut self) {
        // SAFETY: `context` came from `ibv_open_device` and is closed
        // exactly once, here.
        unsafe { (self.verbs.close_device)(self.context) };
    }
}

/// The name of a device of a live device list.
fn device_name(verbs: &Verbs, device: *mut IbvDeviceHead) -> String {
    // SAFETY: `device` is a live entry of the device list; the name is a
    // NUL-terminated string inside it, copied before the list is freed.
    unsafe {
        let name = (verbs.get_device_name)(device);
        if name.is_null() {
            String::new()
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}

fn read_device(
    verbs: &Verbs,
    device: *mut IbvDeviceHead,
    problems: &mut Vec<VerbsError>,
) -> RdmaDevice {
    let name = device_name(verbs, device);
    let node_guid = match verbs.get_device_guid {
        // SAFETY: as above; the GUID is returned by value, in network order.
        Some(get_device_guid) => {
            format!("{:016x}", u64::from_be(unsafe { get_device_guid(device) }))
        }
        None => String::new(),
    };
    // SAFETY: every entry of the list is a `struct ibv_device`, whose
    // leading fields `IbvDeviceHead` mirrors.
    let transport_type = unsafe { (*device).transport_type };
    let mut found = RdmaDevice {
        name,
        node_guid,
        transport: transport_name(transport_type),
        ports: Vec::new(),
    };
    // SAFETY: opening a listed device; the context is closed by the guard.
    let context = unsafe { (verbs.open_device)(device) };
    if context.is_null() {
        problems.push(VerbsError::Call {
            library: verbs.name.clone(),
            call: "ibv_open_device",
            device: Some(found.name.clone()),
            reason: std::io::Error::last_os_error().to_string(),
        });
        return found;
    }
    let opened = OpenedDevice { verbs, context };
    let ports = match verbs.query_device {
        Some(query_device) => {
            let mut attr = Padded::<IbvDeviceAttr>::zeroed();
            // SAFETY: an open context and a zeroed buffer larger than the
            // struct.
            let code = unsafe { query_device(opened.context, &mut attr.value) };
            if code != 0 {
                problems.push(verbs.call_failed("ibv_query_device", &found.name, code));
                return found;
            }
            attr.value.phys_port_cnt
        }
        // Port 1 exists on every device (see the module doc).
        None => 1,
    };
    for port in 1..=ports {
        match read_port(&opened, port, &found.name) {
            Ok(read) => found.ports.push(read),
            Err(err) => problems.push(err),
        }
    }
    found
}

fn read_port(opened: &OpenedDevice<'_>, port: u8, device: &str) -> Result<RdmaPort, VerbsError> {
    let verbs = opened.verbs;
    let mut attr = Padded::<IbvPortAttr>::zeroed();
    // SAFETY: an open context and a zeroed buffer larger than the struct
    // the exported symbol fills (see the module doc).
    let code = unsafe { (verbs.query_port)(opened.context, port, &mut attr.value) };
    if code != 0 {
        return Err(verbs.call_failed("ibv_query_port", device, code));
    }
    let attr = &attr.value;
    let mut gids = Vec::new();
    for index in 0..attr.gid_tbl_len.clamp(0, MAX_GID_ENTRIES) {
        let mut raw = [0u8; 16];
        // SAFETY: an open context and a 16-byte `union ibv_gid` buffer.
        let code = unsafe { (verbs.query_gid)(opened.context, port, index, &mut raw) };
        if code != 0 {
            return Err(verbs.call_failed("ibv_query_gid", device, code));
        }
        let address = Ipv6Addr::from(raw);
        if !address.is_unspecified() {
            gids.push((index.unsigned_abs(), address));
        }
    }
    Ok(RdmaPort {
        port: u32::from(port),
        state: port_state(attr.state),
        active_width_lanes: width_lanes(attr.active_width),
        active_lane_speed_bps: lane_speed_bps(attr.active_speed),
        link_layer: link_layer_name(attr.link_layer),
        active_mtu: mtu_bytes(attr.active_mtu),
        max_mtu: mtu_bytes(attr.max_mtu),
        gids,
    })
}

/// `enum ibv_mtu` → bytes.
fn mtu_bytes(code: u32) -> Option<u32> {
    match code {
        1..=5 => Some(128 << code),
        _ => None,
    }
}

/// `enum ibv_port_state`; a value the header does not define reads as no
/// state.
fn port_state(code: u32) -> RdmaPortState {
    match code {
        1 => RdmaPortState::Down,
        2 => RdmaPortState::Init,
        3 => RdmaPortState::Armed,
        4 => RdmaPortState::Active,
        5 => RdmaPortState::ActiveDefer,
        _ => RdmaPortState::None,
    }
}

/// `active_width` codes (as `ibv_devinfo` decodes them) → lanes.
fn width_lanes(code: u8) -> Option<u32> {
    match code {
        1 => Some(1),
        2 => Some(4),
        4 => Some(8),
        8 => Some(12),
        16 => Some(2),
        _ => None,
    }
}

/// `active_speed` codes → per-lane speed, with `ibv_devinfo`'s values
/// (FDR10 and QDR both 10.0 Gbps, FDR 14.0).
fn lane_speed_bps(code: u8) -> Option<u64> {
    const GBPS: u64 = 1_000_000_000;
    match code {
        1 => Some(GBPS * 5 / 2),
        2 => Some(5 * GBPS),
        4 | 8 => Some(10 * GBPS),
        16 => Some(14 * GBPS),
        32 => Some(25 * GBPS),
        64 => Some(50 * GBPS),
        128 => Some(100 * GBPS),
        _ => None,
    }
}

/// `link_layer`: rdma-core defines 1 and 2; 0 is "unspecified", which is
/// empty here rather than `ibv_devinfo`'s guess of InfiniBand.
fn link_layer_name(code: u8) -> String {
    match code {
        0 => String::new(),
        1 => "InfiniBand".to_owned(),
        2 => "Ethernet".to_owned(),
        other => format!("unknown ({other})"),
    }
}

/// `transport_type` as `ibv_devinfo` prints it: "InfiniBand (0)"; Apple's
/// library reports Thunderbolt as 100.
fn transport_name(code: c_int) -> String {
    let name = match code {
        0 => "InfiniBand",
        1 => "iWARP",
        2 => "usNIC",
        3 => "usNIC UDP",
        4 => "unspecified",
        100 => "Thunderbolt",
        _ => "invalid transport",
    };
    format!("{name} ({code})")
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn without_a_library_no_device_names_are_listed() {
        let err =
            device_names("libmeshd-no-such-verbs.so.1", DEFAULT_TIMEOUT).expect_err("no library");
        assert!(matches!(err, VerbsError::Load { .. }), "{err}");
    }

    #[test]
    fn each_os_has_its_library() {
        assert_eq!(library_for(OsKind::Linux), Some("libibverbs.so.1"));
        assert_eq!(library_for(OsKind::Macos), Some("/usr/lib/librdma.dylib"));
        assert_eq!(library_for(OsKind::Other), None);
    }

    #[test]
    fn an_absent_library_is_an_error_naming_it() {
        let err = read_devices("libmeshd-no-such-verbs.so.1", DEFAULT_TIMEOUT)
            .expect_err("no such library");
        assert!(
            matches!(&err, VerbsError::Load { library, .. } if library == "libmeshd-no-such-verbs.so.1"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("cannot load the verbs library libmeshd-no-such-verbs.so.1: "),
            "{err}"
        );
    }

    /// A library without the optional calls is kept, and says what stays
    /// unknown; rdma-core's has them all.
    #[cfg(target_os = "linux")]
    #[test]
    fn optional_calls_missing_are_named_not_fatal() {
        let library = match Verbs::load("libibverbs.so.1") {
            Ok(library) => library,
            Err(err) => {
                assert_ne!(
                    std::env::var("CI").as_deref(),
                    Ok("true"),
                    "CI installs libibverbs1: {err}"
                );
                println!("skipped: {err}");
                return;
            }
        };
        assert!(library.get_device_guid.is_some() && library.query_device.is_some());
        assert_eq!(library.unknown(), Vec::<String>::new());
        let lacking = Verbs {
            get_device_guid: None,
            query_device: None,
            ..library
        };
        assert_eq!(
            lacking.unknown(),
            [
                "libibverbs.so.1: no ibv_get_device_guid; node GUIDs unknown",
                "libibverbs.so.1: no ibv_query_device; port counts unknown; only port 1 of each \
                 device was read",
            ]
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_library_without_verbs_is_an_error_naming_the_symbol() {
        let err = read_devices("libc.so.6", DEFAULT_TIMEOUT).expect_err("libc has no verbs");
        assert!(
            matches!(
                &err,
                VerbsError::Symbol { library, symbol: "ibv_get_device_list", .. }
                    if library == "libc.so.6"
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("the verbs library libc.so.6 has no ibv_get_device_list: "),
            "{err}"
        );
    }

    #[test]
    fn a_hanging_call_times_out_and_blocks_further_calls_until_it_returns() {
        let library = "meshd-test-hanging-library";
        let (release, released) = mpsc::channel::<()>();
        // The call never returns until released: getting an error at all
        // means the deadline, not the call, ended the wait.
        let err = run_with_deadline(library, Duration::from_millis(50), move || {
            let _ = released.recv();
            Ok(())
        })
        .expect_err("times out");
        assert_eq!(
            err,
            VerbsError::TimedOut {
                library: library.to_owned(),
                after: Duration::from_millis(50)
            }
        );
        let refused =
            run_with_deadline(library, Duration::from_secs(5), || Ok(())).expect_err("refused");
        assert_eq!(
            refused,
            VerbsError::StillHung {
                library: library.to_owned()
            }
        );
        // Other libraries are not held up by it.
        assert_eq!(
            run_with_deadline("meshd-test-other-library", Duration::from_secs(5), || Ok(7)),
            Ok(7)
        );
        release.send(()).expect("the hung call still waits");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match run_with_deadline(library, Duration::from_secs(5), || Ok(1)) {
                Ok(value) => break assert_eq!(value, 1),
                Err(VerbsError::StillHung { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(err) => panic!("not released: {err}"),
            }
        }
    }

    #[test]
    fn errors_from_the_work_are_passed_on() {
        let failed = VerbsError::Call {
            library: "lib".into(),
            call: "ibv_query_port",
            device: Some("mlx5_0".into()),
            reason: "Invalid argument (os error 22)".into(),
        };
        let expected = failed.clone();
        assert_eq!(
            run_with_deadline::<()>("meshd-test-failing-library", DEFAULT_TIMEOUT, move || {
                Err(failed)
            }),
            Err(expected.clone())
        );
        assert_eq!(
            expected.to_string(),
            "lib: ibv_query_port on mlx5_0 failed: Invalid argument (os error 22)"
        );
    }

    #[test]
    fn failure_codes_become_os_error_text() {
        assert_eq!(
            failure_reason(22),
            std::io::Error::from_raw_os_error(22).to_string()
        );
        assert!(failure_reason(-1).ends_with("(-1)"));
    }

    #[test]
    fn attribute_codes_decode_as_ibv_devinfo_prints_them() {
        assert_eq!(port_state(4), RdmaPortState::Active);
        assert_eq!(port_state(1), RdmaPortState::Down);
        assert_eq!(port_state(0), RdmaPortState::None);
        assert_eq!(port_state(99), RdmaPortState::None);
        // `active_width: 4X (2)`, `8X (4)`; `active_speed: 10.0 Gbps (4)`.
        assert_eq!(width_lanes(2), Some(4));
        assert_eq!(width_lanes(4), Some(8));
        assert_eq!(width_lanes(1), Some(1));
        assert_eq!(width_lanes(16), Some(2));
        assert_eq!(width_lanes(3), None);
        assert_eq!(lane_speed_bps(4), Some(10_000_000_000));
        assert_eq!(lane_speed_bps(1), Some(2_500_000_000));
        assert_eq!(lane_speed_bps(32), Some(25_000_000_000));
        assert_eq!(lane_speed_bps(0), None);
        assert_eq!(link_layer_name(2), "Ethernet");
        assert_eq!(mtu_bytes(1), Some(256));
        assert_eq!(mtu_bytes(5), Some(4096));
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_bytes(6), None);
        assert_eq!(link_layer_name(0), "");
        assert_eq!(link_layer_name(9), "unknown (9)");
        assert_eq!(transport_name(100), "Thunderbolt (100)");
        assert_eq!(transport_name(0), "InfiniBand (0)");
        assert_eq!(transport_name(-1), "invalid transport (-1)");
    }
}
