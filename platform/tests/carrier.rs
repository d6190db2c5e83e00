//! The carrier readers: the parsers on any bytes, a captured Linux
//! RTM_NEWLINK, and (Linux, root) the live reader inside a network
//! namespace this test makes, with a veth pair set down and up.

use meshd_platform::carrier::{CarrierChange, parse_kernel_event, parse_netlink};
use proptest::prelude::*;

/// One RTM_NEWLINK read from the kernel by `veth_pair_carriers_arrive`
/// (x86_64, little-endian): veth `cb` up, its peer `ca` down, so `cb` has
/// no carrier. Regenerate with MESHD_WRITE_CARRIER_FIXTURE=1.
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/carrier/rtm_newlink_no_carrier.hex"
);

fn from_hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn to_hex(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .map(|line| {
            line.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
                + "\n"
        })
        .collect()
}

#[cfg(target_endian = "little")]
#[test]
fn a_captured_rtm_newlink_parses() {
    let buf = from_hex(&std::fs::read_to_string(FIXTURE).expect("fixture"));
    assert_eq!(
        parse_netlink(&buf).unwrap(),
        vec![CarrierChange {
            iface: "cb".to_owned(),
            carrier: false,
        }]
    );
    // Every prefix is a clean error or the same answer, never a panic.
    for cut in 0..buf.len() {
        let _ = parse_netlink(&buf[..cut]);
    }
}

proptest! {
    #[test]
    fn netlink_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = parse_netlink(&bytes);
    }

    #[test]
    fn kernel_event_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = parse_kernel_event(&bytes);
    }

    /// Plausible headers with arbitrary lengths and bodies reach the
    /// deeper checks that random bytes rarely do.
    #[test]
    fn netlink_shaped_bytes_never_panic(
        len in 0u32..600,
        kind in prop_oneof![Just(16u16), Just(17u16), Just(4u16), any::<u16>()],
        body in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut buf = len.to_ne_bytes().to_vec();
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&[0; 10]);
        buf.extend_from_slice(&body);
        let _ = parse_netlink(&buf);
    }

    #[test]
    fn kernel_event_shaped_bytes_never_panic(
        total in 0u32..200,
        code in 0u32..30,
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut buf = Vec::new();
        for word in [total, 1, 1, 2, 0, code] {
            buf.extend_from_slice(&word.to_ne_bytes());
        }
        buf.extend_from_slice(&body);
        let _ = parse_kernel_event(&buf);
    }
}

#[cfg(target_os = "linux")]
mod live {
    use std::collections::BTreeMap;
    use std::os::fd::{AsFd, OwnedFd};
    use std::process::Command;
    use std::time::{Duration, Instant};

    use meshd_platform::carrier::{self, CarrierError, CarrierEvents, parse_netlink};
    use rustix::net::netlink::SocketAddrNetlink;
    use rustix::net::{AddressFamily, RecvFlags, SocketType};

    use super::{FIXTURE, to_hex};

    /// Deletes the namespace (and with it the veths) however the test ends.
    struct Namespace(String);

    impl Drop for Namespace {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }

    fn ip(args: &[&str]) {
        let out = Command::new("ip").args(args).output().expect("run ip");
        assert!(
            out.status.success(),
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn missing_prerequisite() -> Option<String> {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let euid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1));
        if euid != Some("0") {
            return Some("not root".into());
        }
        match Command::new("ip").arg("-V").output() {
            Ok(out) if out.status.success() => None,
            _ => Some("`ip` (iproute2) is missing".into()),
        }
    }

    /// Runs `open` on a thread moved into namespace `ns`: a socket keeps
    /// the namespace it was made in, whichever thread reads it later.
    fn in_namespace<T: Send + 'static>(ns: &str, open: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{ns}");
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("namespace file");
            rustix::thread::move_into_link_name_space(
                file.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("setns");
            open()
        })
        .join()
        .expect("namespace thread")
    }

    /// A second, raw subscriber to the same events, for the captured bytes.
    fn raw_link_socket() -> OwnedFd {
        let fd = rustix::net::socket(AddressFamily::NETLINK, SocketType::RAW, None).unwrap();
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 1)).unwrap();
        fd
    }

    /// Reads until every interface in `want` last showed its wanted
    /// carrier; what arrived, in order, for the failure message.
    fn until(events: &mut CarrierEvents, want: &[(&str, bool)]) -> Vec<(String, bool)> {
        let mut seen = Vec::new();
        let mut last = BTreeMap::new();
        // Generous: this asserts what arrives, not how fast.
        let deadline = Instant::now() + Duration::from_secs(20);
        while want
            .iter()
            .any(|(iface, carrier)| last.get(*iface) != Some(carrier))
        {
            assert!(
                Instant::now() < deadline,
                "wanted {want:?}; the reader gave {seen:?}"
            );
            for change in events.next(Duration::from_millis(500)).expect("next") {
                seen.push((change.iface.clone(), change.carrier));
                last.insert(change.iface, change.carrier);
            }
        }
        seen
    }

    #[test]
    fn veth_pair_carriers_arrive() {
        if let Some(reason) = missing_prerequisite() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "the carrier namespace test must run in CI: {reason}"
            );
            eprintln!("skipping veth_pair_carriers_arrive: {reason}");
            return;
        }
        let ns = Namespace(format!("meshd-carrier-{}", std::process::id()));
        ip(&["netns", "add", &ns.0]);
        let mut events = in_namespace(&ns.0, || CarrierEvents::open().expect("open"));
        ip(&[
            "-n", &ns.0, "link", "add", "ca", "type", "veth", "peer", "name", "cb",
        ]);

        ip(&["-n", &ns.0, "link", "set", "ca", "up"]);
        ip(&["-n", &ns.0, "link", "set", "cb", "up"]);
        until(&mut events, &[("ca", true), ("cb", true)]);

        // One end down: it is down, and its peer loses its carrier. A
        // second subscriber keeps the kernel's bytes for the fixture.
        let raw = in_namespace(&ns.0, raw_link_socket);
        ip(&["-n", &ns.0, "link", "set", "ca", "down"]);
        until(&mut events, &[("ca", false), ("cb", false)]);

        ip(&["-n", &ns.0, "link", "set", "ca", "up"]);
        until(&mut events, &[("ca", true), ("cb", true)]);

        // The veth going away is no carrier on both ends (RTM_DELLINK).
        ip(&["-n", &ns.0, "link", "del", "ca"]);
        until(&mut events, &[("ca", false), ("cb", false)]);

        // The raw socket saw the same: its first read where cb alone lost
        // its carrier is the fixture.
        let mut buf = vec![0u8; 32 * 1024];
        let mut captured = None;
        while let Ok(len) = rustix::net::recv(&raw, &mut buf[..], RecvFlags::DONTWAIT) {
            let read = &buf[..len.0];
            let changes = parse_netlink(read).expect("the kernel's own bytes parse");
            if captured.is_none()
                && changes.len() == 1
                && changes[0].iface == "cb"
                && !changes[0].carrier
            {
                captured = Some(read.to_vec());
            }
        }
        let captured = captured.expect("a read with cb's carrier lost");
        if std::env::var_os("MESHD_WRITE_CARRIER_FIXTURE").is_some() {
            std::fs::write(FIXTURE, to_hex(&captured)).expect("write the fixture");
        }
    }

    #[test]
    fn current_reads_sysfs() {
        // lo: always there, up, and its carrier file says 1.
        assert_eq!(carrier::current("lo").unwrap(), Some(true));
        assert_eq!(carrier::current("meshd-none0").unwrap(), None);
        assert!(matches!(
            carrier::current("../lo"),
            Err(CarrierError::BadName(..))
        ));
    }
}
