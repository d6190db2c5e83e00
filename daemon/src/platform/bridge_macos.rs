//! macOS bridges: `ifconfig -a` (or `ifconfig bridgeN`) and
//! `networksetup -listnetworkserviceorder` / `-listallnetworkservices`.
//!
//! `ifconfig` shows members and `status:` but no packet counters, so the
//! bridges parsed here carry none.

use crate::model::bridge::BridgeObservation;

/// One interface stanza of `ifconfig` output, as far as bridges need it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Stanza {
    name: String,
    flags_up_running: bool,
    status: Option<bool>,
    members: Vec<String>,
    configuration: bool,
}

/// The bridges in `ifconfig` output: interfaces named `bridgeN` or that
/// list members. Field lines are tab-indented in real output and
/// space-indented in Apple's TN3205 rendering; both are accepted, and
/// `...` elision lines are skipped.
pub fn parse_ifconfig_bridges(text: &str) -> Vec<BridgeObservation> {
    let mut stanzas: Vec<Stanza> = Vec::new();
    for line in text.lines() {
        let indented = line.starts_with([' ', '\t']);
        if !indented {
            if let Some(stanza) = header(line) {
                stanzas.push(stanza);
            }
            continue;
        }
        let Some(current) = stanzas.last_mut() else {
            continue;
        };
        let field = line.trim();
        if let Some(rest) = field.strip_prefix("member:") {
            if let Some(member) = rest.split_whitespace().next() {
                current.members.push(member.to_owned());
            }
        } else if let Some(rest) = field.strip_prefix("status:") {
            // Older macOS appends a trailing space after values.
            current.status = Some(rest.trim() == "active");
        } else if field == "Configuration:" {
            current.configuration = true;
        }
    }
    stanzas
        .into_iter()
        .filter(|s| s.name.starts_with("bridge") || !s.members.is_empty() || s.configuration)
        .map(|s| BridgeObservation {
            // A bridge can say `inactive` while its flags still read
            // UP,RUNNING, so the status line wins; without one, the flags.
            active: s.status.unwrap_or(s.flags_up_running),
            name: s.name,
            members: s.members,
            ..BridgeObservation::default()
        })
        .collect()
}

/// `bridge0: flags=8863<UP,BROADCAST,...> mtu 1500`
fn header(line: &str) -> Option<Stanza> {
    let (name, rest) = line.split_once(':')?;
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains('.') {
        return None;
    }
    let flags = rest
        .trim_start()
        .strip_prefix("flags=")
        .and_then(|f| f.split_once('<'))
        .and_then(|(_, f)| f.split_once('>'))
        .map_or("", |(f, _)| f);
    let has = |flag: &str| flags.split(',').any(|f| f == flag);
    Some(Stanza {
        name: name.to_owned(),
        flags_up_running: has("UP") && has("RUNNING"),
        ..Stanza::default()
    })
}

/// A network service as `networksetup -listnetworkserviceorder` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkService {
    /// User-editable: never match on it, only show it and pass it back.
    pub name: String,
    pub hardware_port: Option<String>,
    pub device: Option<String>,
    pub enabled: bool,
}

/// `(1) Name` lines (`(*) Name` when disabled), each followed by
/// `(Hardware Port: X, Device: Y)`.
pub fn parse_service_order(text: &str) -> Vec<NetworkService> {
    let mut services: Vec<NetworkService> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(detail) = line.strip_prefix("(Hardware Port:") {
            let Some(service) = services.last_mut() else {
                continue;
            };
            let detail = detail.strip_suffix(')').unwrap_or(detail);
            // A port name may itself contain ", ", so split at the last
            // `, Device:`.
            match detail.rsplit_once(", Device:") {
                Some((port, device)) => {
                    service.hardware_port = Some(port.trim().to_owned());
                    let device = device.trim();
                    if !device.is_empty() {
                        service.device = Some(device.to_owned());
                    }
                }
                None => service.hardware_port = Some(detail.trim().to_owned()),
            }
            continue;
        }
        let Some(rest) = line.strip_prefix('(') else {
            continue;
        };
        let Some((tag, name)) = rest.split_once(')') else {
            continue;
        };
        let name = name.trim();
        let numbered = !tag.is_empty() && tag.chars().all(|c| c.is_ascii_digit());
        if (numbered || tag == "*") && !name.is_empty() {
            services.push(NetworkService {
                name: name.to_owned(),
                hardware_port: None,
                device: None,
                enabled: tag != "*",
            });
        }
    }
    services
}

/// `networksetup -listallnetworkservices`: (name, enabled); a leading `*`
/// marks a disabled service, and the first line explains that.
pub fn parse_all_services(text: &str) -> Vec<(String, bool)> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with("An asterisk (*)"))
        .map(|l| match l.strip_prefix('*') {
            Some(name) => (name.to_owned(), false),
            None => (l.to_owned(), true),
        })
        .collect()
}

/// The service whose device is `device` (e.g. `bridge0`): found by device
/// because users rename services.
pub fn service_for_device<'a>(
    services: &'a [NetworkService],
    device: &str,
) -> Option<&'a NetworkService> {
    services
        .iter()
        .find(|s| s.device.as_deref() == Some(device))
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! fixture {
        ($name:literal) => {
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/fixtures/macos/",
                $name
            ))
        };
    }

    fn names(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    #[test]
    fn inactive_bridge_with_four_members() {
        let bridges =
            parse_ifconfig_bridges(fixture!("ifconfig_bridge0_inactive_4members_IntelMac.txt"));
        assert_eq!(bridges.len(), 1);
        assert_eq!(bridges[0].name, "bridge0");
        assert!(!bridges[0].active, "status: inactive wins over UP,RUNNING");
        assert_eq!(names(&bridges[0].members), ["en1", "en2", "en3", "en4"]);
        assert_eq!(bridges[0].packets, None);
    }

    #[test]
    fn active_bridge_from_tn3205_with_spaces_and_elisions() {
        let bridges =
            parse_ifconfig_bridges(fixture!("ifconfig_bridge0_active_TN3205_excerpt.txt"));
        assert_eq!(bridges.len(), 1);
        assert!(bridges[0].active);
        assert_eq!(names(&bridges[0].members), ["en2", "en3", "en4"]);
    }

    #[test]
    fn ifconfig_a_has_two_bridges_and_no_others() {
        let bridges = parse_ifconfig_bridges(fixture!(
            "ifconfig_a_IntelMac_bridge0-inactive_plus-bridge100-vmnet.txt"
        ));
        let seen: Vec<(&str, bool, Vec<&str>)> = bridges
            .iter()
            .map(|b| (b.name.as_str(), b.active, names(&b.members)))
            .collect();
        assert_eq!(
            seen,
            [
                ("bridge0", false, vec!["en1", "en2", "en3", "en4"]),
                // No status line: UP,RUNNING decides.
                ("bridge100", true, vec!["en10"]),
            ]
        );
    }

    #[test]
    fn a_member_port_alone_is_not_a_bridge() {
        assert!(
            parse_ifconfig_bridges(fixture!(
                "ifconfig_en1_TB-port_bridge-member_no-ip_AppleSilicon.txt"
            ))
            .is_empty()
        );
    }

    #[test]
    fn service_order_finds_the_bridge_by_device() {
        let services = parse_service_order(fixture!("networksetup_listnetworkserviceorder.txt"));
        assert_eq!(services.len(), 6);
        let bridge = service_for_device(&services, "bridge0").expect("bridge0");
        assert_eq!(bridge.name, "Thunderbolt Bridge");
        assert!(bridge.enabled);
        let lan2 = service_for_device(&services, "en11").expect("en11");
        assert_eq!(lan2.name, "USB 10/100/1000 LAN 2");
        assert_eq!(lan2.hardware_port.as_deref(), Some("USB 10/100/1000 LAN"));
    }

    #[test]
    fn renamed_and_disabled_service_is_still_found_by_device() {
        // No capture of `(*)` exists (SOURCES.md); the form is exo's.
        let text = "An asterisk (*) denotes that a network service is disabled.\n\
                    (1) Wi-Fi\n(Hardware Port: Wi-Fi, Device: en0)\n\n\
                    (*) My \"TB\" mesh\n(Hardware Port: Thunderbolt Bridge, Device: bridge0)\n";
        let services = parse_service_order(text);
        let bridge = service_for_device(&services, "bridge0").expect("bridge0");
        assert_eq!(bridge.name, "My \"TB\" mesh");
        assert!(!bridge.enabled);
    }

    #[test]
    fn all_services_with_asterisks() {
        let disabled = parse_all_services(fixture!(
            "networksetup_listallnetworkservices_bridge_disabled.txt"
        ));
        assert!(disabled.contains(&("Thunderbolt Bridge".to_owned(), false)));
        assert!(disabled.contains(&("Ethernet 1".to_owned(), true)));
        assert_eq!(disabled.len(), 5);
        let enabled = parse_all_services(fixture!(
            "networksetup_listallnetworkservices_bridge_enabled.txt"
        ));
        assert!(enabled.contains(&("Thunderbolt Bridge".to_owned(), true)));
        assert_eq!(enabled.len(), 7);
    }

    #[test]
    fn garbage_never_panics() {
        let samples = [
            "",
            ":",
            "\t",
            "\tmember:",
            "\tstatus:",
            "bridge0:",
            "bridge0: flags=",
            "bridge0: flags=<",
            "bridge0: flags=>UP<",
            "(",
            ")",
            "()",
            "(*)",
            "(Hardware Port:",
            "(Hardware Port: , Device: )",
            "(1)\n(Hardware Port: x, Device:",
            "*",
            "\u{0}\u{feff}é\t:member: ((",
        ];
        for s in samples {
            let _ = parse_ifconfig_bridges(s);
            let _ = parse_service_order(s);
            let _ = parse_all_services(s);
        }
        // Every split of every fixture, including mid-character.
        let all = [
            fixture!("ifconfig_a_IntelMac_bridge0-inactive_plus-bridge100-vmnet.txt"),
            fixture!("networksetup_listnetworkserviceorder.txt"),
        ];
        for text in all {
            for (i, _) in text.char_indices() {
                let _ = parse_ifconfig_bridges(&text[i..]);
                let _ = parse_service_order(&text[..i]);
            }
        }
        let bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let lossy = String::from_utf8_lossy(&bytes);
        let _ = parse_ifconfig_bridges(&lossy);
        let _ = parse_service_order(&lossy);
        let _ = parse_all_services(&lossy);
    }
}
