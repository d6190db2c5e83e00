//! Reads one RDMA port's counters (and its network interface's statistics)
//! as raw cumulative samples for [`crate::counters::CounterTracker`].

use std::io::ErrorKind;

use super::infiniband::SYS_CLASS_INFINIBAND;
use super::net::SYS_CLASS_NET;
use crate::counters::{CounterGroup, CounterSample, parse_counter_value};
use crate::source::Source;

/// One reading of a port's counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CounterReading {
    pub samples: Vec<CounterSample>,
    /// One line per unreadable directory or counter, naming its path.
    pub problems: Vec<String>,
}

/// `counters/*` and `hw_counters/*` of `device` port `port`, and
/// `statistics/*` of its interface when it has one. A group that does not
/// exist is not a problem: rxe has no PortCounters, many drivers no
/// `hw_counters`.
pub fn read_port_counters(
    source: &dyn Source,
    device: &str,
    port: u32,
    iface: Option<&str>,
) -> CounterReading {
    let mut reading = CounterReading::default();
    let port_dir = format!("{SYS_CLASS_INFINIBAND}/{device}/ports/{port}");
    read_group(
        source,
        &format!("{port_dir}/counters"),
        CounterGroup::PortCounters,
        &mut reading,
    );
    read_group(
        source,
        &format!("{port_dir}/hw_counters"),
        CounterGroup::HwCounters,
        &mut reading,
    );
    if let Some(iface) = iface {
        read_group(
            source,
            &format!("{SYS_CLASS_NET}/{iface}/statistics"),
            CounterGroup::NetStatistics,
            &mut reading,
        );
    }
    reading
}

/// The counters that move with RDMA traffic: the PortCounters' data (in
/// 4-octet words), and the driver's packet counts for devices without
/// PortCounters (rxe).
const DATA_COUNTERS: [(CounterGroup, &str, &str); 4] = [
    (CounterGroup::PortCounters, "counters", "port_xmit_data"),
    (CounterGroup::PortCounters, "counters", "port_rcv_data"),
    (CounterGroup::HwCounters, "hw_counters", "sent_pkts"),
    (CounterGroup::HwCounters, "hw_counters", "rcvd_pkts"),
];

/// The sum of `device` port `port`'s data counters, a figure that changes
/// whenever the port moves data; `None` when none can be read, or one sits
/// at the maximum where it stops counting (then a still figure proves
/// nothing).
pub fn read_data_counters(source: &dyn Source, device: &str, port: u32) -> Option<u64> {
    let port_dir = format!("{SYS_CLASS_INFINIBAND}/{device}/ports/{port}");
    let mut total: Option<u64> = None;
    for (group, dir, name) in DATA_COUNTERS {
        let Ok(text) = source.read_file(&format!("{port_dir}/{dir}/{name}")) else {
            continue;
        };
        let value = parse_counter_value(&text)?;
        if value == crate::counters::counter_limit(group, name).max() {
            return None;
        }
        total = Some(total.unwrap_or(0).wrapping_add(value));
    }
    total
}

fn read_group(source: &dyn Source, dir: &str, group: CounterGroup, reading: &mut CounterReading) {
    let names = match source.list_dir(dir) {
        Ok(names) => names,
        Err(err) if err.kind() == ErrorKind::NotFound => return,
        Err(err) => {
            reading.problems.push(format!("cannot list {dir}: {err}"));
            return;
        }
    };
    for name in names {
        // `hw_counters/lifespan` is how long the driver caches the values
        // (ms), a setting rather than a count.
        if group == CounterGroup::HwCounters && name == "lifespan" {
            continue;
        }
        let path = format!("{dir}/{name}");
        match source.read_file(&path) {
            Ok(text) => match parse_counter_value(&text) {
                Some(value) => reading.samples.push(CounterSample { group, name, value }),
                None => reading
                    .problems
                    .push(format!("{path}: not a counter value: {:?}", text.trim())),
            },
            // A PortCounters file whose MAD fails reads as an error (EINVAL).
            Err(err) => reading.problems.push(format!("cannot read {path}: {err}")),
        }
    }
}
