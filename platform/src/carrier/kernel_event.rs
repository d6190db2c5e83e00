//! macOS kernel events (`PF_SYSTEM` / `SYSPROTO_EVENT`), as XNU lays them
//! out (xnu-11417.101.15, github.com/apple-oss-distributions/xnu), in the
//! host's byte order (little-endian on every Mac).
//!
//! `bsd/sys/kern_event.h`:
//!
//! ```text
//! struct kern_event_msg {
//!     u_int32_t total_size;    //  0: size of the whole message, header included
//!     u_int32_t vendor_code;   //  4: KEV_VENDOR_APPLE = 1
//!     u_int32_t kev_class;     //  8: KEV_NETWORK_CLASS = 1
//!     u_int32_t kev_subclass;  // 12: KEV_DL_SUBCLASS = 2 (bsd/net/net_kev.h)
//!     u_int32_t id;            // 16: monotonically increasing
//!     u_int32_t event_code;    // 20
//!     u_int32_t event_data[];  // 24: KEV_MSG_HEADER_SIZE = offsetof(event_data)
//! };
//! ```
//!
//! Every data-link event's data starts with `struct net_event_data`
//! (`bsd/net/if_var.h`; `dlil_post_msg` in `bsd/net/dlil.c` fills it):
//!
//! ```text
//! struct net_event_data {
//!     u_int32_t if_family;         // 24
//!     u_int32_t if_unit;           // 28
//!     char      if_name[IFNAMSIZ]; // 32..48, IFNAMSIZ = IF_NAMESIZE = 16 (bsd/net/if.h)
//! };
//! ```
//!
//! The interface is `if_name` followed by `if_unit`: "en" and 2 are "en2".
//! Event codes (`bsd/net/net_kev.h`): KEV_DL_SIFFLAGS = 1,
//! KEV_DL_IF_DETACHING = 10, KEV_DL_IF_DETACHED = 11, KEV_DL_LINK_OFF = 12,
//! KEV_DL_LINK_ON = 13.
//!
//! No message captured on a real Mac was available: the tests build them
//! from these layouts.

use super::{CarrierChange, CarrierError, c_name, read_u32};

pub(crate) const KEV_VENDOR_APPLE: u32 = 1;
pub(crate) const KEV_NETWORK_CLASS: u32 = 1;
pub(crate) const KEV_DL_SUBCLASS: u32 = 2;

const KEV_DL_SIFFLAGS: u32 = 1;
const KEV_DL_IF_DETACHING: u32 = 10;
const KEV_DL_IF_DETACHED: u32 = 11;
const KEV_DL_LINK_OFF: u32 = 12;
const KEV_DL_LINK_ON: u32 = 13;

const KEV_MSG_HEADER_SIZE: usize = 24;
const IFNAMSIZ: usize = 16;
/// `sizeof(struct net_event_data)`.
const NET_EVENT_DATA_SIZE: usize = 4 + 4 + IFNAMSIZ;
/// One recv returns one event record; a few back to back are walked, more
/// than this is not the kernel.
const MAX_EVENTS: usize = 1024;

/// What a data-link kernel event says of an interface's carrier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelEvent {
    /// KEV_DL_LINK_ON / KEV_DL_LINK_OFF, or the interface detaching (no
    /// carrier).
    Carrier(CarrierChange),
    /// KEV_DL_SIFFLAGS: the flags were set (`ifconfig en2 down`), but the
    /// event does not carry them: the carrier must be read again.
    FlagsChanged { iface: String },
}

/// The data-link events in one kernel-event read; events of other vendors,
/// classes, subclasses or codes are skipped. A malformed header or size
/// fails the whole read, naming where.
pub fn parse_kernel_event(buf: &[u8]) -> Result<Vec<KernelEvent>, CarrierError> {
    let mut events = Vec::new();
    let mut offset = 0;
    let mut count = 0;
    while offset < buf.len() {
        count += 1;
        if count > MAX_EVENTS {
            return Err(CarrierError::malformed(
                "kern_event_msg",
                offset,
                format!("more than {MAX_EVENTS} events in one read"),
            ));
        }
        let rest = &buf[offset..];
        if rest.len() < KEV_MSG_HEADER_SIZE {
            return Err(CarrierError::malformed(
                "kern_event_msg",
                offset,
                format!(
                    "truncated header: {} bytes left, {KEV_MSG_HEADER_SIZE} needed",
                    rest.len()
                ),
            ));
        }
        let field = |at: usize| read_u32(rest, at).unwrap_or_default();
        let total = field(0) as usize;
        if total < KEV_MSG_HEADER_SIZE {
            return Err(CarrierError::malformed(
                "kern_event_msg",
                offset,
                format!("total_size {total} is shorter than the header"),
            ));
        }
        if total > rest.len() {
            return Err(CarrierError::malformed(
                "kern_event_msg",
                offset,
                format!(
                    "total_size {total} runs past the read ({} bytes left)",
                    rest.len()
                ),
            ));
        }
        let (vendor, class, subclass, code) = (field(4), field(8), field(12), field(20));
        if (vendor, class, subclass) == (KEV_VENDOR_APPLE, KEV_NETWORK_CLASS, KEV_DL_SUBCLASS) {
            let data = &rest[KEV_MSG_HEADER_SIZE..total];
            let event = match code {
                KEV_DL_LINK_ON | KEV_DL_LINK_OFF | KEV_DL_IF_DETACHING | KEV_DL_IF_DETACHED => {
                    Some(KernelEvent::Carrier(CarrierChange {
                        iface: iface(data, offset + KEV_MSG_HEADER_SIZE)?,
                        carrier: code == KEV_DL_LINK_ON,
                    }))
                }
                KEV_DL_SIFFLAGS => Some(KernelEvent::FlagsChanged {
                    iface: iface(data, offset + KEV_MSG_HEADER_SIZE)?,
                }),
                _ => None,
            };
            events.extend(event);
        }
        offset += total;
    }
    Ok(events)
}

/// The interface a `net_event_data` names: `if_name` then `if_unit`.
fn iface(data: &[u8], at: usize) -> Result<String, CarrierError> {
    if data.len() < NET_EVENT_DATA_SIZE {
        return Err(CarrierError::malformed(
            "net_event_data",
            at,
            format!(
                "truncated: {} bytes, {NET_EVENT_DATA_SIZE} needed",
                data.len()
            ),
        ));
    }
    let unit = read_u32(data, 4).unwrap_or_default();
    let name = c_name(&data[8..NET_EVENT_DATA_SIZE], "net_event_data", at + 8)?;
    Ok(format!("{name}{unit}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A data-link kernel event as `dlil_post_msg` posts it: the header,
    /// then a `net_event_data` (48 bytes in all).
    pub(crate) fn kev(
        vendor: u32,
        class: u32,
        subclass: u32,
        code: u32,
        name: &[u8],
        unit: u32,
    ) -> Vec<u8> {
        let mut msg = Vec::new();
        let total = (KEV_MSG_HEADER_SIZE + NET_EVENT_DATA_SIZE) as u32;
        for word in [
            total, vendor, class, subclass, 7, code, 1, /* if_family */
            unit,
        ] {
            msg.extend_from_slice(&word.to_ne_bytes());
        }
        let mut if_name = [0u8; IFNAMSIZ];
        if_name[..name.len()].copy_from_slice(name);
        msg.extend_from_slice(&if_name);
        assert_eq!(msg.len(), 48);
        msg
    }

    fn dl(code: u32, name: &str, unit: u32) -> Vec<u8> {
        kev(
            KEV_VENDOR_APPLE,
            KEV_NETWORK_CLASS,
            KEV_DL_SUBCLASS,
            code,
            name.as_bytes(),
            unit,
        )
    }

    fn carrier(iface: &str, carrier: bool) -> KernelEvent {
        KernelEvent::Carrier(CarrierChange {
            iface: iface.to_owned(),
            carrier,
        })
    }

    #[test]
    fn link_off_and_on_name_the_interface_with_its_unit() {
        let mut buf = dl(KEV_DL_LINK_OFF, "en", 2);
        buf.extend(dl(KEV_DL_LINK_ON, "en", 12));
        buf.extend(dl(KEV_DL_SIFFLAGS, "bridge", 0));
        buf.extend(dl(KEV_DL_IF_DETACHING, "en", 5));
        assert_eq!(
            parse_kernel_event(&buf).unwrap(),
            vec![
                carrier("en2", false),
                carrier("en12", true),
                KernelEvent::FlagsChanged {
                    iface: "bridge0".to_owned()
                },
                carrier("en5", false),
            ]
        );
    }

    #[test]
    fn the_byte_offsets_are_xnus() {
        let buf = dl(KEV_DL_LINK_ON, "en", 3);
        assert_eq!(&buf[0..4], &48u32.to_ne_bytes(), "total_size at 0");
        assert_eq!(&buf[20..24], &13u32.to_ne_bytes(), "event_code at 20");
        assert_eq!(&buf[28..32], &3u32.to_ne_bytes(), "if_unit at 28");
        assert_eq!(&buf[32..34], b"en", "if_name at 32");
    }

    #[test]
    fn other_events_are_skipped() {
        let mut buf = dl(20, "en", 2); // KEV_DL_LINK_QUALITY_METRIC_CHANGED
        buf.extend(kev(KEV_VENDOR_APPLE, KEV_NETWORK_CLASS, 1, 12, b"en", 2)); // KEV_INET_SUBCLASS
        buf.extend(kev(KEV_VENDOR_APPLE, 2, KEV_DL_SUBCLASS, 12, b"en", 2));
        buf.extend(kev(1000, KEV_NETWORK_CLASS, KEV_DL_SUBCLASS, 12, b"en", 2));
        // Another subclass's event may be shorter than a net_event_data.
        let mut short = vec![0u8; KEV_MSG_HEADER_SIZE];
        for (i, word) in [24u32, 1, 1, 6, 1, 1].into_iter().enumerate() {
            short[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
        }
        buf.extend(short);
        assert_eq!(parse_kernel_event(&buf).unwrap(), vec![]);
    }

    fn error_of(buf: &[u8]) -> String {
        parse_kernel_event(buf).unwrap_err().to_string()
    }

    #[test]
    fn malformed_events_say_what_was_wrong() {
        let good = dl(KEV_DL_LINK_OFF, "en", 2);
        assert!(error_of(&good[..20]).contains("truncated header"));

        let mut short = good.clone();
        short[..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(error_of(&short).contains("shorter than the header"));

        let mut long = good.clone();
        long[..4].copy_from_slice(&4096u32.to_ne_bytes());
        assert!(error_of(&long).contains("runs past the read"));

        let mut no_data = good[..30].to_vec();
        no_data[..4].copy_from_slice(&30u32.to_ne_bytes());
        assert!(error_of(&no_data).contains("net_event_data"));

        let mut not_utf8 = good.clone();
        not_utf8[32] = 0xc3;
        not_utf8[33] = 0x28;
        assert!(error_of(&not_utf8).contains("not UTF-8"));

        let nameless = dl(KEV_DL_LINK_OFF, "", 2);
        assert!(error_of(&nameless).contains("empty interface name"));

        // A name filling IFNAMSIZ without a NUL stays within the field.
        let full = dl(KEV_DL_LINK_ON, "abcdefghijklmnop", 1);
        assert_eq!(
            parse_kernel_event(&full).unwrap(),
            vec![carrier("abcdefghijklmnop1", true)]
        );
    }

    #[test]
    fn absurd_event_counts_are_refused() {
        let mut header = [0u8; KEV_MSG_HEADER_SIZE];
        header[..4].copy_from_slice(&24u32.to_ne_bytes());
        assert!(error_of(&header.repeat(MAX_EVENTS + 1)).contains("more than 1024 events"));
    }
}
