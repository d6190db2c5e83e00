//! Parsers of single sysfs values, in the formats the kernel prints them
//! (`drivers/infiniband/core/sysfs.c`, `net/core/net-sysfs.c`). Each takes
//! the file's text as read, trailing newline included, and returns `None`
//! for anything it does not recognise.

use std::net::Ipv6Addr;

use meshd_domain::RdmaPortState;

/// `ports/<n>/state`: "4: ACTIVE". The number is what the kernel means;
/// the name is only checked when there is no number.
pub fn parse_port_state(text: &str) -> Option<RdmaPortState> {
    let (code, name) = split_numbered(text)?;
    match code {
        Some(0) => Some(RdmaPortState::None),
        Some(1) => Some(RdmaPortState::Down),
        Some(2) => Some(RdmaPortState::Init),
        Some(3) => Some(RdmaPortState::Armed),
        Some(4) => Some(RdmaPortState::Active),
        Some(5) => Some(RdmaPortState::ActiveDefer),
        Some(_) => None,
        None => match name {
            "NOP" => Some(RdmaPortState::None),
            "DOWN" => Some(RdmaPortState::Down),
            "INIT" => Some(RdmaPortState::Init),
            "ARMED" => Some(RdmaPortState::Armed),
            "ACTIVE" => Some(RdmaPortState::Active),
            "ACTIVE_DEFER" => Some(RdmaPortState::ActiveDefer),
            _ => None,
        },
    }
}

/// `ports/<n>/phys_state`: "5: LinkUp" → whether the physical link is up
/// (the only state with a negotiated speed); the other states are Sleep,
/// Polling, Disabled, PortConfigurationTraining, LinkErrorRecovery and
/// Phy Test.
pub fn parse_phys_link_up(text: &str) -> Option<bool> {
    match split_numbered(text)? {
        (Some(code), _) => Some(code == 5),
        (None, name) => Some(name == "LinkUp"),
    }
}

/// "4: ACTIVE" → (Some(4), "ACTIVE"); "ACTIVE" → (None, "ACTIVE").
fn split_numbered(text: &str) -> Option<(Option<u32>, &str)> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(match text.split_once(':') {
        Some((code, name)) => (Some(code.trim().parse().ok()?), name.trim()),
        None => (None, text),
    })
}

/// `ports/<n>/rate`: "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)" → bits
/// per second. The kernel prints whole Gb/s with an optional ".5".
pub fn parse_rate_bps(text: &str) -> Option<u64> {
    let (number, rest) = text.trim().split_once(' ')?;
    if !rest.starts_with("Gb/sec") {
        return None;
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    // Nanobits: "2.5" → 2 Gb + 500_000_000 b.
    let fraction_bps: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse::<u64>().ok()? * 10u64.pow(9 - u32::try_from(fraction.len()).ok()?)
    };
    whole.checked_mul(1_000_000_000)?.checked_add(fraction_bps)
}

/// `ports/<n>/gids/<i>`: "fe80:0000:0000:0000:0e42:a1ff:fe65:4d2e". An
/// unused table entry reads as all zeros and is `None`, like text that is
/// not a GID.
pub fn parse_gid(text: &str) -> Option<Ipv6Addr> {
    let gid: Ipv6Addr = text.trim().parse().ok()?;
    (!gid.is_unspecified()).then_some(gid)
}

/// A one-line sysfs value ("mlx5_0\n") without its newline; `None` when
/// empty.
pub fn parse_word(text: &str) -> Option<&str> {
    let word = text.trim();
    (!word.is_empty()).then_some(word)
}

/// Whether a network interface is up, from `operstate` and, when the
/// driver does not report it ("unknown", as loopback and many virtual
/// drivers do), `carrier` ("1"/"0"; unreadable while the interface is
/// administratively down). `None` when neither says.
pub fn interface_up(operstate: Option<&str>, carrier: Option<&str>) -> Option<bool> {
    match operstate.map(str::trim) {
        Some("up") => Some(true),
        Some("down" | "lowerlayerdown" | "dormant" | "notpresent" | "testing") => Some(false),
        _ => match carrier.map(str::trim) {
            Some("1") => Some(true),
            Some("0") => Some(false),
            _ => None,
        },
    }
}

/// Whether a bridge is administratively up: IFF_UP (0x1) in its `flags`
/// file ("0x1003"); when that is unreadable, an operstate of "up" proves
/// it too. `None` when neither tells.
pub fn bridge_up(flags: Option<&str>, operstate: Option<&str>) -> Option<bool> {
    const IFF_UP: u32 = 0x1;
    let parsed = flags
        .map(str::trim)
        .and_then(|f| f.strip_prefix("0x"))
        .and_then(|hex| u32::from_str_radix(hex, 16).ok());
    match parsed {
        Some(flags) => Some(flags & IFF_UP != 0),
        None => (operstate.map(str::trim) == Some("up")).then_some(true),
    }
}

/// Whether a bridge has a member with link, from its `operstate` (the
/// bridge has carrier while a member port forwards); `None` for
/// "unknown" and anything unreadable.
pub fn bridge_member_link(operstate: Option<&str>) -> Option<bool> {
    match operstate.map(str::trim) {
        Some("up") => Some(true),
        Some("down" | "lowerlayerdown" | "dormant" | "notpresent") => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn port_states_as_the_kernel_prints_them() {
        assert_eq!(parse_port_state("4: ACTIVE\n"), Some(RdmaPortState::Active));
        assert_eq!(parse_port_state("1: DOWN\n"), Some(RdmaPortState::Down));
        assert_eq!(parse_port_state("2: INIT\n"), Some(RdmaPortState::Init));
        assert_eq!(parse_port_state("3: ARMED\n"), Some(RdmaPortState::Armed));
        assert_eq!(
            parse_port_state("5: ACTIVE_DEFER\n"),
            Some(RdmaPortState::ActiveDefer)
        );
        assert_eq!(parse_port_state("0: NOP\n"), Some(RdmaPortState::None));
        assert_eq!(parse_port_state("ACTIVE"), Some(RdmaPortState::Active));
        for bad in ["", "\n", "9: UNKNOWN\n", "x: ACTIVE", "active"] {
            assert_eq!(parse_port_state(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn physical_states() {
        assert_eq!(parse_phys_link_up("5: LinkUp\n"), Some(true));
        assert_eq!(parse_phys_link_up("3: Disabled\n"), Some(false));
        assert_eq!(parse_phys_link_up("2: Polling\n"), Some(false));
        assert_eq!(parse_phys_link_up("LinkUp"), Some(true));
        assert_eq!(parse_phys_link_up(""), None);
        assert_eq!(parse_phys_link_up("five: LinkUp"), None);
    }

    #[test]
    fn rates_in_every_kernel_form() {
        assert_eq!(
            parse_rate_bps("100 Gb/sec (4X EDR)\n"),
            Some(100_000_000_000)
        );
        assert_eq!(parse_rate_bps("2.5 Gb/sec (1X SDR)\n"), Some(2_500_000_000));
        assert_eq!(parse_rate_bps("56 Gb/sec (4X FDR)\n"), Some(56_000_000_000));
        assert_eq!(
            parse_rate_bps("400 Gb/sec (4X NDR)\n"),
            Some(400_000_000_000)
        );
        assert_eq!(parse_rate_bps("10 Gb/sec (4X SDR)"), Some(10_000_000_000));
        for bad in [
            "",
            "100",
            "100 Mb/sec (4X)",
            ".5 Gb/sec",
            "-1 Gb/sec",
            "1.2.3 Gb/sec",
            "1.0000000001 Gb/sec",
            "99999999999999999999 Gb/sec",
        ] {
            assert_eq!(parse_rate_bps(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn gids_and_unused_entries() {
        assert_eq!(
            parse_gid("fe80:0000:0000:0000:0e42:a1ff:fe65:4d2e\n"),
            Some("fe80::e42:a1ff:fe65:4d2e".parse().expect("v6"))
        );
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:c0a8:0a01\n"),
            Some("::ffff:192.168.10.1".parse().expect("v6"))
        );
        assert_eq!(parse_gid("0000:0000:0000:0000:0000:0000:0000:0000\n"), None);
        assert_eq!(parse_gid("garbage"), None);
    }

    #[test]
    fn interface_and_bridge_states() {
        assert_eq!(interface_up(Some("up\n"), None), Some(true));
        assert_eq!(interface_up(Some("down\n"), Some("1")), Some(false));
        assert_eq!(interface_up(Some("lowerlayerdown"), None), Some(false));
        assert_eq!(interface_up(Some("unknown\n"), Some("1\n")), Some(true));
        assert_eq!(interface_up(Some("unknown\n"), Some("0\n")), Some(false));
        assert_eq!(interface_up(Some("unknown\n"), None), None);
        assert_eq!(interface_up(None, None), None);
        assert_eq!(bridge_up(Some("0x1003\n"), None), Some(true));
        assert_eq!(bridge_up(Some("0x1002"), Some("up")), Some(false));
        assert_eq!(bridge_up(None, Some("up")), Some(true));
        assert_eq!(
            bridge_up(None, Some("down")),
            None,
            "down says nothing of IFF_UP"
        );
        assert_eq!(bridge_up(Some("garbage"), None), None);
        assert_eq!(bridge_member_link(Some("up\n")), Some(true));
        assert_eq!(bridge_member_link(Some("down")), Some(false));
        assert_eq!(bridge_member_link(Some("unknown")), None);
        assert_eq!(bridge_member_link(None), None);
        assert_eq!(parse_word(" mlx5_0\n"), Some("mlx5_0"));
        assert_eq!(parse_word("\n"), None);
    }

    proptest! {
        #[test]
        fn no_parser_panics(text in any::<String>()) {
            let _ = parse_port_state(&text);
            let _ = parse_phys_link_up(&text);
            let _ = parse_rate_bps(&text);
            let _ = parse_gid(&text);
            let _ = parse_word(&text);
            let _ = interface_up(Some(&text), Some(&text));
            let _ = bridge_up(Some(&text), Some(&text));
            let _ = bridge_member_link(Some(&text));
        }

        #[test]
        fn every_kernel_rate_parses_to_its_value(whole in 0u64..100_000, half in any::<bool>()) {
            let text = format!("{whole}{} Gb/sec (4X EDR)\n", if half { ".5" } else { "" });
            let expected = whole * 1_000_000_000 + if half { 500_000_000 } else { 0 };
            prop_assert_eq!(parse_rate_bps(&text), Some(expected));
        }

        #[test]
        fn mutated_sysfs_values_do_not_panic(
            index in 0usize..40, byte in any::<u8>(), which in 0usize..4
        ) {
            let real = ["4: ACTIVE\n", "5: LinkUp\n", "100 Gb/sec (4X EDR)\n",
                "fe80:0000:0000:0000:0e42:a1ff:fe65:4d2e\n"][which];
            let mut bytes = real.as_bytes().to_vec();
            let at = index % bytes.len();
            bytes[at] = byte;
            let text = String::from_utf8_lossy(&bytes);
            let _ = parse_port_state(&text);
            let _ = parse_phys_link_up(&text);
            let _ = parse_rate_bps(&text);
            let _ = parse_gid(&text);
        }
    }
}
