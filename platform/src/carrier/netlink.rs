//! Linux rtnetlink link messages (linux/netlink.h, linux/rtnetlink.h,
//! linux/if_link.h), in the byte order of the host that received them.
//!
//! ```text
//! struct nlmsghdr  { u32 nlmsg_len; u16 nlmsg_type; u16 nlmsg_flags;
//!                    u32 nlmsg_seq; u32 nlmsg_pid; }              // 16 bytes
//! struct ifinfomsg { u8 ifi_family; u8 pad; u16 ifi_type; i32 ifi_index;
//!                    u32 ifi_flags; u32 ifi_change; }             // 16 bytes
//! struct rtattr    { u16 rta_len; u16 rta_type; }                 // 4 bytes
//! ```
//!
//! Messages and attributes are padded to 4 bytes (NLMSG_ALIGN, RTA_ALIGN).

use super::{CarrierChange, CarrierError, c_name, read_u16, read_u32};

const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;
const RTA_HDRLEN: usize = 4;

const NLMSG_OVERRUN: u16 = 4;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;

const IFLA_IFNAME: u16 = 3;

const IFF_UP: u32 = 0x1;
const IFF_RUNNING: u32 = 0x40;
const IFF_LOWER_UP: u32 = 0x1_0000;

/// More messages than this in one read is not the kernel's link group
/// (a 32-KiB read holds at most 2048 headers): refused, not walked.
const MAX_MESSAGES: usize = 4096;
/// An rtnetlink link message has a few dozen attributes.
const MAX_ATTRIBUTES: usize = 1024;

fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

/// The carrier changes in one netlink read: `RTM_NEWLINK` gives
/// `IFF_UP && (IFF_LOWER_UP || IFF_RUNNING)`, `RTM_DELLINK` no carrier
/// (the interface is gone); other message types are skipped. A malformed
/// header, length or attribute fails the whole read, naming where.
pub fn parse_netlink(buf: &[u8]) -> Result<Vec<CarrierChange>, CarrierError> {
    let mut changes = Vec::new();
    let mut offset = 0;
    let mut messages = 0;
    while offset < buf.len() {
        messages += 1;
        if messages > MAX_MESSAGES {
            return Err(CarrierError::malformed(
                "netlink read",
                offset,
                format!("more than {MAX_MESSAGES} messages"),
            ));
        }
        let rest = &buf[offset..];
        if rest.len() < NLMSG_HDRLEN {
            return Err(CarrierError::malformed(
                "nlmsghdr",
                offset,
                format!(
                    "truncated header: {} bytes left, {NLMSG_HDRLEN} needed",
                    rest.len()
                ),
            ));
        }
        let (Some(len), Some(kind)) = (read_u32(rest, 0), read_u16(rest, 4)) else {
            return Err(CarrierError::malformed("nlmsghdr", offset, "unreadable"));
        };
        let len = len as usize;
        if len < NLMSG_HDRLEN {
            return Err(CarrierError::malformed(
                "nlmsghdr",
                offset,
                format!("nlmsg_len {len} is shorter than the header"),
            ));
        }
        if len > rest.len() {
            return Err(CarrierError::malformed(
                "nlmsghdr",
                offset,
                format!(
                    "nlmsg_len {len} runs past the read ({} bytes left)",
                    rest.len()
                ),
            ));
        }
        let payload = &rest[NLMSG_HDRLEN..len];
        match kind {
            RTM_NEWLINK | RTM_DELLINK => {
                changes.push(link_message(payload, kind, offset + NLMSG_HDRLEN)?);
            }
            NLMSG_OVERRUN => {
                return Err(CarrierError::Lost {
                    why: "NLMSG_OVERRUN".to_owned(),
                });
            }
            // NLMSG_ERROR answers a request, which this socket never
            // sends; NOOP, DONE and the other rtnetlink types say nothing
            // of carriers.
            _ => {}
        }
        // The last message need not carry its padding.
        offset = offset.saturating_add(align4(len)).min(buf.len());
    }
    Ok(changes)
}

fn link_message(payload: &[u8], kind: u16, at: usize) -> Result<CarrierChange, CarrierError> {
    if payload.len() < IFINFOMSG_LEN {
        return Err(CarrierError::malformed(
            "ifinfomsg",
            at,
            format!("truncated: {} bytes, {IFINFOMSG_LEN} needed", payload.len()),
        ));
    }
    let index = read_u32(payload, 4).unwrap_or_default() as i32;
    let flags = read_u32(payload, 8).unwrap_or_default();
    let name = ifname(&payload[IFINFOMSG_LEN..], at + IFINFOMSG_LEN)?.ok_or_else(|| {
        CarrierError::malformed(
            "ifinfomsg",
            at,
            format!("no IFLA_IFNAME attribute for interface index {index}"),
        )
    })?;
    let carrier =
        kind == RTM_NEWLINK && flags & IFF_UP != 0 && flags & (IFF_LOWER_UP | IFF_RUNNING) != 0;
    Ok(CarrierChange {
        iface: name,
        carrier,
    })
}

/// The IFLA_IFNAME attribute among `attrs`, if present.
fn ifname(attrs: &[u8], at: usize) -> Result<Option<String>, CarrierError> {
    let mut offset = 0;
    let mut count = 0;
    let mut name = None;
    while offset < attrs.len() {
        count += 1;
        if count > MAX_ATTRIBUTES {
            return Err(CarrierError::malformed(
                "rtattr",
                at + offset,
                format!("more than {MAX_ATTRIBUTES} attributes"),
            ));
        }
        let rest = &attrs[offset..];
        let (Some(len), Some(kind)) = (read_u16(rest, 0), read_u16(rest, 2)) else {
            return Err(CarrierError::malformed(
                "rtattr",
                at + offset,
                format!("truncated header: {} bytes left", rest.len()),
            ));
        };
        let len = usize::from(len);
        if len < RTA_HDRLEN || len > rest.len() {
            return Err(CarrierError::malformed(
                "rtattr",
                at + offset,
                format!(
                    "rta_len {len} outside {RTA_HDRLEN}..={} (type {kind})",
                    rest.len()
                ),
            ));
        }
        // The type's top bits are NLA_F_NESTED / NLA_F_NET_BYTEORDER.
        if kind & 0x3fff == IFLA_IFNAME && name.is_none() {
            name = Some(c_name(&rest[RTA_HDRLEN..len], "IFLA_IFNAME", at + offset)?);
        }
        offset = offset.saturating_add(align4(len)).min(attrs.len());
    }
    Ok(name)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An rtnetlink link message as the kernel lays it out.
    pub(crate) fn link_msg(kind: u16, index: i32, flags: u32, name: &str) -> Vec<u8> {
        let mut attrs = Vec::new();
        // IFLA_MTU first, so the name is not the first attribute.
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&4u16.to_ne_bytes());
        attrs.extend_from_slice(&1500u32.to_ne_bytes());
        let rta_len = (RTA_HDRLEN + name.len() + 1) as u16;
        attrs.extend_from_slice(&rta_len.to_ne_bytes());
        attrs.extend_from_slice(&IFLA_IFNAME.to_ne_bytes());
        attrs.extend_from_slice(name.as_bytes());
        attrs.push(0);
        while attrs.len() % 4 != 0 {
            attrs.push(0);
        }
        let mut msg = Vec::new();
        let len = (NLMSG_HDRLEN + IFINFOMSG_LEN + attrs.len()) as u32;
        msg.extend_from_slice(&len.to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&[0, 0]);
        msg.extend_from_slice(&1u16.to_ne_bytes()); // ARPHRD_ETHER
        msg.extend_from_slice(&index.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&attrs);
        msg
    }

    fn change(iface: &str, carrier: bool) -> CarrierChange {
        CarrierChange {
            iface: iface.to_owned(),
            carrier,
        }
    }

    #[test]
    fn up_with_lower_up_is_carrier_and_up_alone_is_not() {
        let mut buf = link_msg(RTM_NEWLINK, 4, IFF_UP | IFF_RUNNING | IFF_LOWER_UP, "veth0");
        buf.extend(link_msg(RTM_NEWLINK, 5, IFF_UP, "veth1"));
        buf.extend(link_msg(RTM_NEWLINK, 6, IFF_LOWER_UP, "veth2"));
        buf.extend(link_msg(RTM_NEWLINK, 7, IFF_UP | IFF_RUNNING, "veth3"));
        buf.extend(link_msg(RTM_DELLINK, 8, IFF_UP | IFF_LOWER_UP, "veth4"));
        assert_eq!(
            parse_netlink(&buf).unwrap(),
            vec![
                change("veth0", true),
                change("veth1", false),
                // Lower layer up, but the interface is down.
                change("veth2", false),
                // IFF_RUNNING as the fallback for IFF_LOWER_UP.
                change("veth3", true),
                change("veth4", false),
            ]
        );
    }

    #[test]
    fn other_types_are_skipped_and_empty_reads_are_nothing() {
        let mut buf = link_msg(20, 1, IFF_UP, "addr"); // RTM_NEWADDR
        buf.extend(link_msg(RTM_NEWLINK, 2, IFF_UP | IFF_LOWER_UP, "en2"));
        assert_eq!(parse_netlink(&buf).unwrap(), vec![change("en2", true)]);
        assert_eq!(parse_netlink(&[]).unwrap(), vec![]);
    }

    #[test]
    fn overrun_says_events_were_lost() {
        let mut msg = link_msg(NLMSG_OVERRUN, 0, 0, "x");
        msg.truncate(NLMSG_HDRLEN);
        msg[..4].copy_from_slice(&16u32.to_ne_bytes());
        assert!(matches!(
            parse_netlink(&msg),
            Err(CarrierError::Lost { .. })
        ));
    }

    fn error_of(buf: &[u8]) -> String {
        parse_netlink(buf).unwrap_err().to_string()
    }

    #[test]
    fn malformed_reads_say_what_was_wrong() {
        let good = link_msg(RTM_NEWLINK, 2, IFF_UP, "en2");
        assert!(error_of(&good[..10]).contains("truncated header"));

        let mut short = good.clone();
        short[..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(error_of(&short).contains("shorter than the header"));

        let mut long = good.clone();
        long[..4].copy_from_slice(&4000u32.to_ne_bytes());
        assert!(error_of(&long).contains("runs past the read"));

        let mut no_info = good[..NLMSG_HDRLEN + 8].to_vec();
        no_info[..4].copy_from_slice(&((NLMSG_HDRLEN + 8) as u32).to_ne_bytes());
        assert!(error_of(&no_info).contains("ifinfomsg"));

        // The name attribute's length runs past the message.
        let mut bad_attr = good.clone();
        let name_at = NLMSG_HDRLEN + IFINFOMSG_LEN + 8;
        bad_attr[name_at..name_at + 2].copy_from_slice(&200u16.to_ne_bytes());
        assert!(error_of(&bad_attr).contains("rta_len 200"));

        let mut not_utf8 = good.clone();
        not_utf8[name_at + RTA_HDRLEN] = 0xff;
        assert!(error_of(&not_utf8).contains("not UTF-8"));

        let mut nameless = good.clone();
        nameless[name_at + 2..name_at + 4].copy_from_slice(&99u16.to_ne_bytes());
        assert!(error_of(&nameless).contains("no IFLA_IFNAME"));
    }

    #[test]
    fn absurd_message_counts_are_refused() {
        let mut noop = [0u8; NLMSG_HDRLEN];
        noop[..4].copy_from_slice(&16u32.to_ne_bytes());
        noop[4..6].copy_from_slice(&1u16.to_ne_bytes());
        let buf = noop.repeat(MAX_MESSAGES + 1);
        assert!(error_of(&buf).contains("more than 4096 messages"));
        assert_eq!(parse_netlink(&noop.repeat(MAX_MESSAGES)).unwrap(), vec![]);
    }
}
