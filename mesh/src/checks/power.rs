//! Power settings that take a node out of the mesh: system sleep (a
//! sleeping Mac drops its cables and its jobs), disk sleep (the first read
//! of model weights after idle stalls), and restart after a power failure
//! (without it a node stays off until someone presses its button). macOS
//! updates have been seen to turn sleep back on, so these are re-read with
//! the platform facts.

use meshd_domain::facts::CheckResult;

use super::{Check, NodeView};

const FIX: &str = "sudo pmset -a sleep 0 disksleep 0 autorestart 1";

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
    match power.disk_sleep_minutes {
        Some(0) => check.pass("disksleep 0: disks never sleep"),
        Some(minutes) => check.warn(
            format!(
                "disksleep {minutes}: disks sleep after {minutes} min idle, so the first read of \
                 model weights after a pause stalls"
            ),
            FIX,
        ),
        None => check.blind("`pmset -g` shows no disksleep setting"),
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
