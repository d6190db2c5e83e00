//! Network interfaces from `/sys/class/net`: whether one is up, and the
//! bridges with their members and the counters the bridge storm watcher
//! samples.
//!
//! Linux has no broadcast counter in sysfs (nor in `/proc/net/dev` or `ip -s
//! link`, which show the same `multicast`), so
//! - for a bridge the counter is `statistics/rx_packets`: the bridge device
//!   receives only what the bridge hands up to this host, which is every
//!   flooded broadcast and multicast frame plus unicast to the bridge's own
//!   address. In a loop every circulating broadcast is handed up again on
//!   each pass, so this tracks the storm; the bridge driver does not count
//!   `multicast` at all.
//! - for a member the counter is `statistics/multicast` (received multicast;
//!   whether broadcast is included depends on the driver, and veth counts
//!   none). Its `rx_packets` is not used: it includes the unicast job traffic
//!   on the cable, millions of packets per second on a busy link, which
//!   would read as a storm.

use std::collections::BTreeMap;

use meshd_domain::facts::BridgeFact;

use super::values::{bridge_member_link, bridge_up, interface_up};
use crate::counters::parse_counter_value;
use crate::source::Source;

pub const SYS_CLASS_NET: &str = "/sys/class/net";

/// Whether `iface` is up; `None` when sysfs does not say.
pub fn read_interface_up(source: &dyn Source, iface: &str) -> Option<bool> {
    let operstate = source
        .read_file(&format!("{SYS_CLASS_NET}/{iface}/operstate"))
        .ok();
    let carrier = source
        .read_file(&format!("{SYS_CLASS_NET}/{iface}/carrier"))
        .ok();
    interface_up(operstate.as_deref(), carrier.as_deref())
}

/// Every interface's MTU from `/sys/class/net/<name>/mtu`; an interface
/// whose file cannot be read or parsed is left out (its MTU is unknown).
pub fn read_mtus(source: &dyn Source) -> BTreeMap<String, u32> {
    let Ok(names) = source.list_dir(SYS_CLASS_NET) else {
        return BTreeMap::new();
    };
    names
        .into_iter()
        .filter_map(|name| {
            let text = source
                .read_file(&format!("{SYS_CLASS_NET}/{name}/mtu"))
                .ok()?;
            let mtu = text.trim().parse().ok()?;
            Some((name, mtu))
        })
        .collect()
}

/// One bridge and the packet counters its storm watcher samples.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BridgeReading {
    pub bridge: BridgeFact,
    /// The bridge's own `statistics/rx_packets`; `None` when unreadable.
    pub packets: Option<u64>,
    /// Each member's `statistics/multicast`; a member without a readable
    /// one is absent.
    pub member_packets: BTreeMap<String, u64>,
}

/// Every bridge, and what could not be read about them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bridges {
    pub bridges: Vec<BridgeReading>,
    /// One line per unreadable piece, naming the path.
    pub problems: Vec<String>,
}

/// The bridges under `/sys/class/net` (an interface with a `bridge/`
/// directory), sorted by name. Fails only when `/sys/class/net` cannot be
/// listed; an interface that vanishes while being read loses the piece.
pub fn read_bridges(source: &dyn Source) -> std::io::Result<Bridges> {
    let mut found = Bridges::default();
    for name in source.list_dir(SYS_CLASS_NET)? {
        let dir = format!("{SYS_CLASS_NET}/{name}");
        if source.list_dir(&format!("{dir}/bridge")).is_err() {
            continue;
        }
        let members = match source.list_dir(&format!("{dir}/brif")) {
            Ok(members) => members,
            Err(err) => {
                found
                    .problems
                    .push(format!("{name}: cannot list members in {dir}/brif: {err}"));
                Vec::new()
            }
        };
        let member_packets = members
            .iter()
            .filter_map(|member| Some((member.clone(), statistic(source, member, "multicast")?)))
            .collect();
        let operstate = source.read_file(&format!("{dir}/operstate"));
        if let Err(err) = &operstate {
            found.problems.push(format!(
                "{name}: cannot read {dir}/operstate ({err}); whether a member has link is unknown"
            ));
        }
        let operstate = operstate.ok();
        let flags = source.read_file(&format!("{dir}/flags")).ok();
        found.bridges.push(BridgeReading {
            bridge: BridgeFact {
                name: name.clone(),
                up: bridge_up(flags.as_deref(), operstate.as_deref()),
                member_link: bridge_member_link(operstate.as_deref()),
                members,
                service: None,
                service_enabled: None,
            },
            packets: statistic(source, &name, "rx_packets"),
            member_packets,
        });
    }
    Ok(found)
}

fn statistic(source: &dyn Source, iface: &str, name: &str) -> Option<u64> {
    parse_counter_value(
        &source
            .read_file(&format!("{SYS_CLASS_NET}/{iface}/statistics/{name}"))
            .ok()?,
    )
}
