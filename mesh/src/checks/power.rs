//! Power settings that take a node out of the mesh: system sleep (a
//! sleeping Mac drops its cables and its jobs) and restart after a power
//! failure (without it a node stays off until someone presses its button).
//! macOS updates have been seen to turn sleep back on, so these are re-read
//! with the platform facts.
//!
//! Disk sleep (`disksleep`, 10 min on a stock Mac) spins hard disks down;
//! a Mac's internal SSD has none to spin, and meshd cannot see whether a
//! node reads model weights from a spinning disk (a Thunderbolt device may
//! be a drive, a dock or a hub; USB disks are not read at all). So it is
//! shown, never judged: warning on it would warn on every stock Mac.

use meshd_domain::facts::{CheckResult, NodeFacts};

use super::{Check, NodeView, port_label};

const FIX: &str = "sudo pmset -a sleep 0 autorestart 1";

pub(super) fn power_settings(mut check: Check, node: &NodeView) -> CheckResult {
    let facts = node.facts;
    let Some(power) = &facts.power else {
        return check.skipped("power settings unknown: `pmset -g` was not read", facts);
    };
    match (power.sleep_disabled, power.sleep_minutes) {
        (Some(true), _) => check.pass("SleepDisabled 1: the system never sleeps"),
        (_, Some(0)) => check.pass("sleep 0: the system never sleeps"),
        (_, Some(minutes)) => {
            let held = if power.sleep_prevented_by.is_empty() {
                String::new()
            } else {
                format!(
                    "; only {} hold it off right now, and only while they run",
                    power.sleep_prevented_by.join(", ")
                )
            };
            check.fail(
                format!(
                    "sleep {minutes}: the system sleeps after {minutes} min idle{held}: a \
                     sleeping node drops its cables and its jobs"
                ),
                FIX,
            );
        }
        (_, None) => check.blind("`pmset -g` shows no sleep setting"),
    }
    // Context, not a finding: see the module doc.
    match power.disk_sleep_minutes {
        Some(0) => check.pass("disksleep 0: disks never spin down"),
        Some(minutes) => check.pass(format!(
            "disksleep {minutes}: not judged: it spins hard disks down after {minutes} min idle, \
             and the internal SSD has none to spin; meshd cannot see whether this node reads \
             from a spinning disk{}; if it does (model weights on an external hard disk), \
             `sudo pmset -a disksleep 0` spares the first read after a pause its spin-up",
            thunderbolt_devices(facts)
        )),
        None => {}
    }
    match power.auto_restart {
        Some(true) => check.pass("autorestart 1: starts again by itself after a power failure"),
        Some(false) => check.warn(
            "autorestart 0: after a power failure this node stays off until someone presses \
             its power button",
            FIX,
        ),
        None => check.blind(
            "`pmset -g` shows no autorestart setting (Macs without it, such as laptops, show none)",
        ),
    }
    check.finish_on(facts)
}

/// The devices other than Macs on the node's Thunderbolt ports, any of
/// which may be a disk: "; on its Thunderbolt ports: Envoy Ultra
/// (Thunderbolt 4)", or nothing.
fn thunderbolt_devices(facts: &NodeFacts) -> String {
    let devices: Vec<String> = facts
        .ports
        .iter()
        .filter_map(|p| {
            Some(format!(
                "{} ({})",
                p.other_device.as_deref()?,
                port_label(p)
            ))
        })
        .collect();
    if devices.is_empty() {
        String::new()
    } else {
        format!(
            " (its Thunderbolt ports carry {}: a drive, a dock or a hub)",
            devices.join(", ")
        )
    }
}
