//! `ifconfig -a` / `ifconfig <iface>`: interface stanzas with flags,
//! `status:`, addresses and bridge members.
//!
//! Field lines are tab-indented in real output and space-indented in
//! Apple's TN3205 rendering; older macOS leaves a trailing space after
//! values; TN3205 elides lines with `...`. All are accepted.

use std::net::{Ipv4Addr, Ipv6Addr};

use meshd_domain::facts::{BridgeFact, Ipv4Cidr};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    pub name: String,
    /// `flags=8863<UP,BROADCAST,…>`: the names between the brackets;
    /// `None` when the header line has no readable flags.
    pub flags: Option<Vec<String>>,
    pub mtu: Option<u32>,
    /// `status: active` → `Some(true)`, `status: inactive` →
    /// `Some(false)`; `None` without a status line or with another word.
    pub active: Option<bool>,
    pub ipv4: Vec<Ipv4Cidr>,
    /// Without the `%iface` scope.
    pub ipv6: Vec<Ipv6Addr>,
    /// `member: en2 flags=3<…>` lines of a bridge.
    pub members: Vec<String>,
    /// Has a bridge `Configuration:` block.
    pub bridge_configuration: bool,
}

impl Interface {
    /// `None` when the flags are unknown.
    pub fn has_flag(&self, flag: &str) -> Option<bool> {
        Some(self.flags.as_ref()?.iter().any(|f| f == flag))
    }

    /// UP and RUNNING both set: `ifconfig bridge0 down` clears them, and
    /// XNU's bridge forwards nothing without RUNNING. `None` when the flags
    /// are unknown.
    pub fn up_and_running(&self) -> Option<bool> {
        Some(self.has_flag("UP")? && self.has_flag("RUNNING")?)
    }

    /// This interface as a bridge, its service not yet known.
    pub fn bridge_fact(&self) -> BridgeFact {
        BridgeFact {
            name: self.name.clone(),
            up: self.up_and_running(),
            member_link: self.active,
            members: self.members.clone(),
            service: None,
            service_enabled: None,
        }
    }

    /// `bridgeN`, or anything with members or a bridge configuration (not
    /// every bridge is Thunderbolt's: `bridge100` is for VMs and Internet
    /// Sharing).
    pub fn is_bridge(&self) -> bool {
        self.name.starts_with("bridge") || !self.members.is_empty() || self.bridge_configuration
    }
}

pub fn parse_ifconfig(text: &str) -> Vec<Interface> {
    let mut interfaces: Vec<Interface> = Vec::new();
    for line in text.lines() {
        if !line.starts_with([' ', '\t']) {
            if let Some(interface) = stanza_header(line) {
                interfaces.push(interface);
            }
            continue;
        }
        let Some(current) = interfaces.last_mut() else {
            continue;
        };
        let mut words = line.split_whitespace();
        match words.next() {
            Some("member:") => {
                if let Some(member) = words.next() {
                    current.members.push(member.to_owned());
                }
            }
            Some("status:") => {
                current.active = match words.next() {
                    Some("active") => Some(true),
                    Some("inactive") => Some(false),
                    _ => None,
                }
            }
            Some("Configuration:") => current.bridge_configuration = true,
            Some("inet") => current.ipv4.extend(ipv4_line(words)),
            Some("inet6") => current.ipv6.extend(
                words
                    .next()
                    .and_then(|a| a.split('%').next())
                    .and_then(|a| a.parse::<Ipv6Addr>().ok()),
            ),
            _ => {}
        }
    }
    interfaces
}

/// `bridge0: flags=8863<UP,BROADCAST,…> mtu 1500`
fn stanza_header(line: &str) -> Option<Interface> {
    let (name, rest) = line.split_once(':')?;
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains('.') {
        return None;
    }
    let rest = rest.trim_start();
    let flags = rest
        .strip_prefix("flags=")
        .and_then(|f| f.split_once('<'))
        .and_then(|(_, f)| f.split_once('>'))
        .map(|(f, _)| {
            f.split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_owned)
                .collect()
        });
    let mut words = rest.split_whitespace();
    let mtu = words
        .by_ref()
        .find(|w| *w == "mtu")
        .and_then(|_| words.next())
        .and_then(|m| m.parse().ok());
    Some(Interface {
        name: name.to_owned(),
        flags,
        mtu,
        ..Interface::default()
    })
}

/// `inet 169.254.205.255 netmask 0xffff0000 broadcast …` (also with
/// `--> peer`). Without a netmask the prefix is unknown, so the address is
/// left out rather than guessed.
fn ipv4_line<'a>(mut words: impl Iterator<Item = &'a str>) -> Option<Ipv4Cidr> {
    let address: Ipv4Addr = words.next()?.parse().ok()?;
    let netmask = words.skip_while(|w| *w != "netmask").nth(1)?;
    Ipv4Cidr::new(address, prefix_of(netmask)?)
}

/// `0xfffffffc` (as macOS prints it) or `255.255.255.252` → 30; `None` for
/// a mask that is not a contiguous prefix.
fn prefix_of(netmask: &str) -> Option<u8> {
    let mask = match netmask
        .strip_prefix("0x")
        .or_else(|| netmask.strip_prefix("0X"))
    {
        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
        None => u32::from(netmask.parse::<Ipv4Addr>().ok()?),
    };
    let prefix = mask.leading_ones();
    if mask.checked_shl(prefix).unwrap_or(0) != 0 {
        return None;
    }
    u8::try_from(prefix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netmasks_hex_and_dotted() {
        for (mask, prefix) in [
            ("0xffff0000", Some(16)),
            ("0xfffffffc", Some(30)),
            ("0xffffffff", Some(32)),
            ("0x00000000", Some(0)),
            ("255.255.255.252", Some(30)),
            ("0xff00ff00", None),
            ("0x1ffffffff", None),
            ("banana", None),
        ] {
            assert_eq!(prefix_of(mask), prefix, "{mask}");
        }
    }

    #[test]
    fn a_30_point_to_point_and_maskless_addresses() {
        let interfaces = parse_ifconfig(
            "en3: flags=8863<UP,RUNNING> mtu 9000\n\
             \tinet 192.168.7.1 netmask 0xfffffffc broadcast 192.168.7.3\n\
             \tinet 10.0.0.1 --> 10.0.0.2 netmask 0xff000000\n\
             \tinet 172.16.0.1\n\
             \tinet6 nonsense prefixlen 64\n\
             \tstatus:\n",
        );
        assert_eq!(interfaces.len(), 1);
        let en3 = &interfaces[0];
        assert_eq!(en3.mtu, Some(9000));
        let addresses: Vec<String> = en3.ipv4.iter().map(ToString::to_string).collect();
        assert_eq!(addresses, ["192.168.7.1/30", "10.0.0.1/8"]);
        assert!(en3.ipv6.is_empty());
        assert_eq!(en3.active, None);
        assert!(!en3.is_bridge());
        assert_eq!(en3.up_and_running(), Some(true));
    }

    #[test]
    fn a_bridge_keeps_flags_status_and_their_absence_apart() {
        let interfaces = parse_ifconfig(
            "bridge0: flags=8822<BROADCAST,SMART,SIMPLEX,MULTICAST> mtu 1500\n\
             \tmember: en2 flags=3<LEARNING,DISCOVER>\n\tstatus: active\n\
             bridge1: mtu 1500\n\tmember: en3 flags=3<LEARNING,DISCOVER>\n\tstatus: odd\n\
             bridge2: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500\n\
             \tmember: en4 flags=3<LEARNING,DISCOVER>\n",
        );
        let facts: Vec<BridgeFact> = interfaces.iter().map(Interface::bridge_fact).collect();
        // Taken down with `ifconfig bridge0 down`: XNU still says active.
        assert_eq!(
            (facts[0].up, facts[0].member_link),
            (Some(false), Some(true))
        );
        assert_eq!(facts[0].forwarding(), Some(false));
        assert_eq!((facts[1].up, facts[1].member_link), (None, None));
        assert_eq!(facts[1].forwarding(), None, "no flags: unknown");
        assert_eq!((facts[2].up, facts[2].member_link), (Some(true), None));
        assert_eq!(facts[2].members, ["en4"]);
    }
}
