//! Error and traffic counters of RDMA ports and network interfaces, turned
//! into totals that stay honest when a hardware counter saturates, wraps or
//! is cleared.
//!
//! The hardware keeps cumulative counts; meshd reports totals "since it
//! started watching the port" (`Counter` in `observation.proto`), built from
//! the deltas between successive samples. The narrow InfiniBand PortCounters
//! stop at their maximum instead of wrapping, so a counter sitting at its
//! maximum has counted an unknown amount: it is reported as saturated, never
//! as "no change" and never as a wrap.

use std::collections::{BTreeMap, BTreeSet};

use meshd_domain::Counter;

/// Where a counter is read; it decides how the counter behaves at its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CounterGroup {
    /// `/sys/class/infiniband/<dev>/ports/<n>/counters/*`: the InfiniBand
    /// PortCounters (PMA), read by the kernel through management datagrams.
    PortCounters,
    /// `/sys/class/infiniband/<dev>/ports/<n>/hw_counters/*`: driver
    /// counters, printed by the kernel as 64-bit values.
    HwCounters,
    /// `/sys/class/net/<iface>/statistics/*`: the kernel's `unsigned long`
    /// interface statistics.
    NetStatistics,
}

/// What a counter does at its largest value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterLimit {
    /// Stops at 2^bits − 1 and stays there until it is cleared.
    Saturates { bits: u32 },
    /// Goes back to 0 after 2^bits − 1.
    Wraps { bits: u32 },
}

impl CounterLimit {
    pub fn max(self) -> u64 {
        let bits = match self {
            CounterLimit::Saturates { bits } | CounterLimit::Wraps { bits } => bits,
        };
        if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        }
    }
}

/// How `name` in `group` behaves at its limit.
///
/// The PortCounters widths are those of the kernel's table
/// (`drivers/infiniband/core/sysfs.c`, `PORT_PMA_ATTR`), which follow the
/// IBA PortCounters attribute. For `port_{xmit,rcv}_{data,packets}` the
/// kernel shows the 64-bit PortCountersExtended instead when the HCA has
/// them, and sysfs does not say which; they are taken as 32-bit, which is
/// safe: a 64-bit counter passes 2^32 − 1 on the next sample and so is seen
/// to keep counting. The extended-only counters (`unicast_*`,
/// `multicast_*`) are 64-bit.
pub fn counter_limit(group: CounterGroup, name: &str) -> CounterLimit {
    match group {
        CounterGroup::PortCounters => match name {
            "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => {
                CounterLimit::Saturates { bits: 4 }
            }
            "link_error_recovery"
            | "link_downed"
            | "port_xmit_constraint_errors"
            | "port_rcv_constraint_errors" => CounterLimit::Saturates { bits: 8 },
            "symbol_error"
            | "port_rcv_errors"
            | "port_rcv_remote_physical_errors"
            | "port_rcv_switch_relay_errors"
            | "port_xmit_discards"
            | "VL15_dropped" => CounterLimit::Saturates { bits: 16 },
            "port_xmit_data" | "port_rcv_data" | "port_xmit_packets" | "port_rcv_packets"
            | "port_xmit_wait" => CounterLimit::Saturates { bits: 32 },
            _ => CounterLimit::Saturates { bits: 64 },
        },
        CounterGroup::HwCounters => CounterLimit::Wraps { bits: 64 },
        // `unsigned long` is as wide as a pointer on every Linux ABI meshd
        // runs on.
        CounterGroup::NetStatistics => CounterLimit::Wraps { bits: usize::BITS },
    }
}

/// One cumulative counter value as read from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSample {
    pub group: CounterGroup,
    /// The file name in its group ("symbol_error", "rx_errors").
    pub name: String,
    pub value: u64,
}

impl CounterSample {
    /// The name it is reported under. Driver counters get a `hw_` prefix
    /// because drivers reuse PortCounters names (rxe has its own
    /// `hw_counters/link_downed`).
    pub fn report_name(&self) -> String {
        match self.group {
            CounterGroup::HwCounters => format!("hw_{}", self.name),
            CounterGroup::PortCounters | CounterGroup::NetStatistics => self.name.clone(),
        }
    }
}

/// A sysfs counter file's text ("1234\n") as a value; `None` when it is not
/// a plain unsigned decimal.
pub fn parse_counter_value(text: &str) -> Option<u64> {
    let digits = text.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What one counter did between two samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterChange {
    /// Seen for the first time: its value is the baseline, nothing counted.
    New,
    /// Counted this much (0 when unchanged).
    Increased(u64),
    /// Went past its maximum and back through 0, counting this much.
    Wrapped(u64),
    /// Went down without being able to wrap: it was cleared (driver reload,
    /// `perfquery -R`) and has counted this much since.
    Reset(u64),
    /// At its maximum, where it stops: it counted at least this much and
    /// possibly far more.
    Saturated { at_least: u64 },
    /// Present before, missing from this sample.
    Vanished,
}

impl CounterChange {
    /// What it adds to the total (a lower bound when saturated).
    fn counted(self) -> u64 {
        match self {
            CounterChange::Increased(n)
            | CounterChange::Wrapped(n)
            | CounterChange::Reset(n)
            | CounterChange::Saturated { at_least: n } => n,
            CounterChange::New | CounterChange::Vanished => 0,
        }
    }
}

/// The change from `previous` to `current` of a counter with `limit`.
pub fn counter_change(limit: CounterLimit, previous: u64, current: u64) -> CounterChange {
    let max = limit.max();
    match limit {
        CounterLimit::Saturates { .. } if current == max => CounterChange::Saturated {
            at_least: max.saturating_sub(previous),
        },
        _ if current >= previous => CounterChange::Increased(current - previous),
        // A 64-bit counter takes centuries to wrap: going down is a clear.
        CounterLimit::Wraps { bits } if bits < 64 && previous <= max => {
            CounterChange::Wrapped(max - previous + current + 1)
        }
        CounterLimit::Saturates { .. } | CounterLimit::Wraps { .. } => {
            CounterChange::Reset(current)
        }
    }
}

#[derive(Debug, Clone)]
struct Tracked {
    last: u64,
    total: u64,
    saturated: bool,
}

/// Turns successive cumulative samples of one port's counters into per
/// counter changes and running totals.
#[derive(Debug, Clone, Default)]
pub struct CounterTracker {
    counters: BTreeMap<String, Tracked>,
}

impl CounterTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one sample of every counter of the port; returns each
    /// counter's change by report name, including those that vanished
    /// (which are then forgotten: should they come back, they start anew).
    pub fn observe(&mut self, samples: &[CounterSample]) -> BTreeMap<String, CounterChange> {
        let mut changes = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for sample in samples {
            let name = sample.report_name();
            let limit = counter_limit(sample.group, &sample.name);
            let change = match self.counters.get_mut(&name) {
                Some(tracked) => {
                    let change = counter_change(limit, tracked.last, sample.value);
                    tracked.total = tracked.total.saturating_add(change.counted());
                    tracked.last = sample.value;
                    tracked.saturated = matches!(change, CounterChange::Saturated { .. });
                    change
                }
                None => {
                    self.counters.insert(
                        name.clone(),
                        Tracked {
                            last: sample.value,
                            total: 0,
                            saturated: matches!(limit, CounterLimit::Saturates { .. })
                                && sample.value == limit.max(),
                        },
                    );
                    CounterChange::New
                }
            };
            seen.insert(name.clone());
            changes.insert(name, change);
        }
        self.counters.retain(|name, _| {
            let present = seen.contains(name);
            if !present {
                changes.insert(name.clone(), CounterChange::Vanished);
            }
            present
        });
        changes
    }

    /// Every present counter's total since it was first seen, `saturated`
    /// when the hardware counter is stopped at its maximum (the total is
    /// then a lower bound).
    pub fn totals(&self) -> Vec<Counter> {
        self.counters
            .iter()
            .map(|(name, tracked)| Counter {
                name: name.clone(),
                value: tracked.total,
                saturated: tracked.saturated,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn port(name: &str, value: u64) -> CounterSample {
        CounterSample {
            group: CounterGroup::PortCounters,
            name: name.to_owned(),
            value,
        }
    }

    fn net(name: &str, value: u64) -> CounterSample {
        CounterSample {
            group: CounterGroup::NetStatistics,
            name: name.to_owned(),
            value,
        }
    }

    fn total(tracker: &CounterTracker, name: &str) -> Option<Counter> {
        tracker.totals().into_iter().find(|c| c.name == name)
    }

    fn assert_total(tracker: &CounterTracker, name: &str, value: u64, saturated: bool) {
        assert_eq!(
            total(tracker, name),
            Some(Counter {
                name: name.to_owned(),
                value,
                saturated
            })
        );
    }

    #[test]
    fn widths_follow_the_kernel_table() {
        let width = |name| counter_limit(CounterGroup::PortCounters, name).max();
        assert_eq!(width("symbol_error"), 0xffff);
        assert_eq!(width("link_error_recovery"), 0xff);
        assert_eq!(width("link_downed"), 0xff);
        assert_eq!(width("port_rcv_errors"), 0xffff);
        assert_eq!(width("port_rcv_remote_physical_errors"), 0xffff);
        assert_eq!(width("port_rcv_switch_relay_errors"), 0xffff);
        assert_eq!(width("port_xmit_discards"), 0xffff);
        assert_eq!(width("port_xmit_constraint_errors"), 0xff);
        assert_eq!(width("port_rcv_constraint_errors"), 0xff);
        assert_eq!(width("local_link_integrity_errors"), 0xf);
        assert_eq!(width("excessive_buffer_overrun_errors"), 0xf);
        assert_eq!(width("VL15_dropped"), 0xffff);
        assert_eq!(width("port_xmit_data"), u64::from(u32::MAX));
        assert_eq!(width("port_rcv_packets"), u64::from(u32::MAX));
        assert_eq!(width("unicast_rcv_packets"), u64::MAX);
        assert_eq!(
            counter_limit(CounterGroup::HwCounters, "rx_write_requests"),
            CounterLimit::Wraps { bits: 64 }
        );
        assert!(matches!(
            counter_limit(CounterGroup::NetStatistics, "rx_errors"),
            CounterLimit::Wraps { .. }
        ));
    }

    #[test]
    fn increments_are_summed_from_the_first_sample_on() {
        let mut tracker = CounterTracker::new();
        let first = tracker.observe(&[port("symbol_error", 100), net("rx_errors", 7)]);
        assert_eq!(first["symbol_error"], CounterChange::New);
        assert_eq!(first["rx_errors"], CounterChange::New);
        assert_eq!(total(&tracker, "symbol_error").map(|c| c.value), Some(0));

        let second = tracker.observe(&[port("symbol_error", 103), net("rx_errors", 7)]);
        assert_eq!(second["symbol_error"], CounterChange::Increased(3));
        assert_eq!(second["rx_errors"], CounterChange::Increased(0));
        tracker.observe(&[port("symbol_error", 110), net("rx_errors", 9)]);
        assert_total(&tracker, "symbol_error", 10, false);
        assert_eq!(total(&tracker, "rx_errors").map(|c| c.value), Some(2));
    }

    #[test]
    fn a_narrow_counter_at_its_maximum_is_saturated_not_a_wrap_nor_zero() {
        let mut tracker = CounterTracker::new();
        tracker.observe(&[port("link_downed", 250)]);
        let change = tracker.observe(&[port("link_downed", 255)]);
        assert_eq!(
            change["link_downed"],
            CounterChange::Saturated { at_least: 5 }
        );
        let stuck = tracker.observe(&[port("link_downed", 255)]);
        assert_eq!(
            stuck["link_downed"],
            CounterChange::Saturated { at_least: 0 }
        );
        assert_total(&tracker, "link_downed", 5, true);
        // Cleared by the operator: counting again, no longer saturated.
        let cleared = tracker.observe(&[port("link_downed", 2)]);
        assert_eq!(cleared["link_downed"], CounterChange::Reset(2));
        assert_total(&tracker, "link_downed", 7, false);
    }

    #[test]
    fn a_counter_already_saturated_when_first_seen_says_so() {
        let mut tracker = CounterTracker::new();
        tracker.observe(&[port("local_link_integrity_errors", 15)]);
        assert_total(&tracker, "local_link_integrity_errors", 0, true);
    }

    #[test]
    fn a_data_counter_that_passes_32_bits_is_64_bit_and_keeps_counting() {
        let max32 = u64::from(u32::MAX);
        let mut tracker = CounterTracker::new();
        tracker.observe(&[port("port_xmit_data", max32 - 10)]);
        let at = tracker.observe(&[port("port_xmit_data", max32)]);
        assert_eq!(
            at["port_xmit_data"],
            CounterChange::Saturated { at_least: 10 }
        );
        let past = tracker.observe(&[port("port_xmit_data", max32 + 90)]);
        assert_eq!(past["port_xmit_data"], CounterChange::Increased(90));
        assert_total(&tracker, "port_xmit_data", 100, false);
    }

    #[test]
    fn a_drop_is_a_reset_for_wide_counters_and_a_wrap_for_narrow_wrapping_ones() {
        let mut tracker = CounterTracker::new();
        tracker.observe(&[net("rx_errors", 1_000)]);
        let reset = tracker.observe(&[net("rx_errors", 4)]);
        if usize::BITS == 64 {
            assert_eq!(reset["rx_errors"], CounterChange::Reset(4));
            assert_eq!(total(&tracker, "rx_errors").map(|c| c.value), Some(4));
        }
        assert_eq!(
            counter_change(CounterLimit::Wraps { bits: 32 }, u64::from(u32::MAX) - 1, 3),
            CounterChange::Wrapped(5)
        );
        assert_eq!(
            counter_change(CounterLimit::Wraps { bits: 64 }, 10, 3),
            CounterChange::Reset(3)
        );
        assert_eq!(
            counter_change(CounterLimit::Saturates { bits: 16 }, 500, 3),
            CounterChange::Reset(3)
        );
    }

    #[test]
    fn new_and_vanished_counters() {
        let mut tracker = CounterTracker::new();
        tracker.observe(&[port("symbol_error", 1), port("link_downed", 0)]);
        let hw = CounterSample {
            group: CounterGroup::HwCounters,
            name: "link_downed".into(),
            value: 3,
        };
        let changes = tracker.observe(&[port("symbol_error", 2), hw.clone()]);
        assert_eq!(changes["symbol_error"], CounterChange::Increased(1));
        assert_eq!(changes["link_downed"], CounterChange::Vanished);
        assert_eq!(changes["hw_link_downed"], CounterChange::New);
        let names: Vec<String> = tracker.totals().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["hw_link_downed", "symbol_error"]);
        // Back again: a new baseline, not a jump from the old value.
        let back = tracker.observe(&[port("symbol_error", 2), port("link_downed", 9), hw]);
        assert_eq!(back["link_downed"], CounterChange::New);
        assert_eq!(total(&tracker, "link_downed").map(|c| c.value), Some(0));
    }

    #[test]
    fn counter_values_parse_strictly() {
        assert_eq!(parse_counter_value("1234\n"), Some(1234));
        assert_eq!(parse_counter_value(" 0 "), Some(0));
        assert_eq!(
            parse_counter_value("18446744073709551615\n"),
            Some(u64::MAX)
        );
        for bad in [
            "",
            "\n",
            "-5",
            "+5",
            "12 34",
            "0x10",
            "18446744073709551616",
            "N/A",
        ] {
            assert_eq!(parse_counter_value(bad), None, "{bad:?}");
        }
    }

    fn any_limit() -> impl Strategy<Value = CounterLimit> {
        prop_oneof![
            (1u32..=64).prop_map(|bits| CounterLimit::Saturates { bits }),
            (1u32..=64).prop_map(|bits| CounterLimit::Wraps { bits }),
        ]
    }

    proptest! {
        #[test]
        fn parsing_never_panics(text in any::<String>()) {
            let _ = parse_counter_value(&text);
        }

        #[test]
        fn changes_never_panic_and_never_invent_counts_below_the_maximum(
            limit in any_limit(), previous in any::<u64>(), current in any::<u64>()
        ) {
            let change = counter_change(limit, previous, current);
            if current >= previous && current < limit.max() {
                prop_assert_eq!(change, CounterChange::Increased(current - previous));
            }
        }

        #[test]
        fn the_tracker_never_panics_and_totals_never_go_down(
            values in proptest::collection::vec(any::<u64>(), 1..20)
        ) {
            let mut tracker = CounterTracker::new();
            let mut last_total = 0;
            for value in values {
                tracker.observe(&[port("symbol_error", value), net("rx_errors", value)]);
                let now = total(&tracker, "symbol_error").map_or(0, |c| c.value);
                prop_assert!(now >= last_total);
                last_total = now;
            }
        }
    }
}
