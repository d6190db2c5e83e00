//! Thunderbolt Bridge, judged by membership and the bridge's own state,
//! never by the user-editable service name nor by whether the service is
//! enabled: after the service is made inactive `bridge0` can stay up with
//! its members (and macOS re-creates it on hotplug), while after `sudo
//! ifconfig bridge0 down` it forwards nothing whatever the service says.
//!
//! XNU's bridge forwards only while UP and RUNNING; its `status:` line says
//! whether a member has link, even while the bridge itself is down.

use std::collections::BTreeSet;

use meshd_domain::facts::{BridgeFact, CheckResult, NodeFacts};

use super::{Check, NodeView, port_label};

/// The device of macOS's Thunderbolt Bridge service: when the Thunderbolt
/// interfaces are not all known, its members are still taken as
/// Thunderbolt ports.
const THUNDERBOLT_BRIDGE_DEVICE: &str = "bridge0";

fn bridge_fix(bridge: &BridgeFact) -> String {
    let down = format!("sudo ifconfig {} down", bridge.name);
    match &bridge.service {
        Some(service) if bridge.service_enabled != Some(false) => {
            format!("sudo networksetup -setnetworkserviceenabled \"{service}\" off\n{down}")
        }
        Some(_) => format!(
            "{down}  # its service is already off; macOS can bring it up again on hotplug, \
             so re-check after replugging"
        ),
        None => format!(
            "{down}\nfind the service whose device is {name} with \
             `networksetup -listnetworkserviceorder` and run \
             `sudo networksetup -setnetworkserviceenabled \"<service>\" off`",
            name = bridge.name
        ),
    }
}

/// The service, as context for the evidence.
fn service_context(bridge: &BridgeFact) -> String {
    match (&bridge.service, bridge.service_enabled) {
        (Some(s), Some(true)) => format!("service \"{s}\" enabled"),
        (Some(s), Some(false)) => format!("service \"{s}\" disabled"),
        (Some(s), None) => format!("service \"{s}\", enabled state unknown"),
        (None, _) => "no network service known for it".to_owned(),
    }
}

/// Which of a bridge's members are Thunderbolt ports, and which might be.
struct Membership<'b> {
    thunderbolt: Vec<&'b str>,
    unknown: Vec<&'b str>,
}

fn membership<'b>(facts: &NodeFacts, bridge: &'b BridgeFact) -> Membership<'b> {
    let known: BTreeSet<&str> = facts
        .ports
        .iter()
        .map(|p| p.iface.as_str())
        .filter(|i| !i.is_empty())
        .collect();
    // Every Thunderbolt interface is known only with every port known and
    // paired with its interface.
    let complete = facts.ports_complete && facts.ports.iter().all(|p| !p.iface.is_empty());
    let mut found = Membership {
        thunderbolt: Vec::new(),
        unknown: Vec::new(),
    };
    for member in &bridge.members {
        if known.contains(member.as_str())
            || (!complete && bridge.name == THUNDERBOLT_BRIDGE_DEVICE)
        {
            found.thunderbolt.push(member);
        } else if !complete {
            found.unknown.push(member);
        }
    }
    found
}

/// Whether a member is cabled to a Mac, from the Thunderbolt report of the
/// port whose interface it is; `None` without one.
fn member_cabled(facts: &NodeFacts, member: &str) -> Option<bool> {
    facts
        .ports
        .iter()
        .find(|p| p.iface == member)
        .and_then(|p| p.cabled_to_mac())
}

/// Fails when an up bridge has a Thunderbolt member with link or cabled to
/// a Mac; passes when every such bridge is down; skipped where the bridges,
/// the bridge state or the cabling that decide it are unknown.
pub(super) fn thunderbolt_bridge_inactive(mut check: Check, node: &NodeView) -> CheckResult {
    let facts = node.facts;
    let Some(bridges) = &facts.bridges else {
        check.blind("the bridges are unknown (ifconfig could not be read)");
        return check.finish_on(facts);
    };
    let mut other_bridges = Vec::new();
    for bridge in bridges {
        let members = membership(facts, bridge);
        if !members.thunderbolt.is_empty() {
            judge_thunderbolt_bridge(&mut check, facts, bridge, &members.thunderbolt);
        } else if members.unknown.is_empty() {
            other_bridges.push(bridge.name.as_str());
        } else {
            check.blind(format!(
                "{}: whether its members {} are Thunderbolt ports is unknown (the \
                 Thunderbolt ports and their interfaces are not all known)",
                bridge.name,
                members.unknown.join(", ")
            ));
        }
    }
    if check.findings.is_empty() {
        let others = if other_bridges.is_empty() {
            String::new()
        } else {
            format!(" (other bridges: {})", other_bridges.join(", "))
        };
        check.pass(format!("no bridge has a Thunderbolt member{others}"));
    }
    check.finish_on(facts)
}

/// A bridge over the `thunderbolt` member ports: down passes, up with a
/// member that has link fails, and up without one is judged by the cabling.
fn judge_thunderbolt_bridge(
    check: &mut Check,
    facts: &NodeFacts,
    bridge: &BridgeFact,
    thunderbolt: &[&str],
) {
    let subject = format!(
        "{} (Thunderbolt members {}; {})",
        bridge.name,
        thunderbolt.join(", "),
        service_context(bridge)
    );
    match bridge.up {
        None => check.blind(format!(
            "{subject}: whether it is up is unknown (its flags were not shown)"
        )),
        Some(false) => check.pass(down_evidence(&subject, bridge)),
        Some(true) if bridge.member_link == Some(true) => check.fail(
            format!(
                "{subject} is up and a member has link: broadcast frames loop through the mesh"
            ),
            bridge_fix(bridge),
        ),
        Some(true) => judge_up_without_link(check, facts, bridge, thunderbolt, &subject),
    }
}

/// Why a bridge that is down passes, and what could bring it back up.
fn down_evidence(subject: &str, bridge: &BridgeFact) -> String {
    let link = if bridge.member_link == Some(true) {
        " (its status says active: a member has link, but a bridge that is down \
         forwards nothing)"
    } else {
        ""
    };
    let comeback = if bridge.service_enabled == Some(true) {
        "; its service is enabled, so a restart or a network change can bring it \
         back up, and the bridge watcher raises bridge_loop if it does"
    } else {
        ""
    };
    format!("{subject} is down (no UP/RUNNING): it forwards nothing{link}{comeback}")
}

/// An up bridge with no member link shown forwards as soon as its members
/// get link: it fails when a member is cabled to a Mac, warns when none is,
/// and is skipped when a member's cabling is unknown.
fn judge_up_without_link(
    check: &mut Check,
    facts: &NodeFacts,
    bridge: &BridgeFact,
    thunderbolt: &[&str],
    subject: &str,
) {
    let status = match bridge.member_link {
        Some(false) => "no member has link now",
        _ => "its status is not shown",
    };
    let cabled: Vec<&str> = thunderbolt
        .iter()
        .copied()
        .filter(|m| member_cabled(facts, m) == Some(true))
        .collect();
    let unknown: Vec<&str> = thunderbolt
        .iter()
        .copied()
        .filter(|m| member_cabled(facts, m).is_none())
        .collect();
    if !cabled.is_empty() {
        let ports: Vec<String> = facts
            .ports
            .iter()
            .filter(|p| cabled.contains(&p.iface.as_str()))
            .map(port_label)
            .collect();
        check.fail(
            format!(
                "{subject} is up ({status}) with {} cabled to a Mac: it forwards \
                 broadcast frames between cables whenever their links are up",
                ports.join(", ")
            ),
            bridge_fix(bridge),
        );
    } else if unknown.is_empty() {
        check.warn(
            format!(
                "{subject} is up ({status}); no member is cabled to a Mac now, but \
                 it forwards between them as soon as they are"
            ),
            bridge_fix(bridge),
        );
    } else {
        check.blind(format!(
            "{subject} is up ({status}); whether {} {} cabled to a Mac is unknown \
             (not in a Thunderbolt report)",
            unknown.join(", "),
            if unknown.len() == 1 { "is" } else { "are" }
        ));
    }
}

/// macOS re-creates the Thunderbolt Bridge and its network service when a
/// Thunderbolt device is plugged in; an operator who turned it off then
/// finds it enabled again. While its service is enabled, `bridge0` comes
/// back up on the next network change, whatever state it is in now
/// (`thunderbolt_bridge_inactive` judges that state). Warns when a bridge
/// over Thunderbolt ports has its service enabled; skipped where the
/// bridges, their members or their service are unknown.
pub(super) fn thunderbolt_bridge_service_off(mut check: Check, node: &NodeView) -> CheckResult {
    let facts = node.facts;
    let Some(bridges) = &facts.bridges else {
        check.blind("the bridges are unknown (ifconfig could not be read)");
        return check.finish_on(facts);
    };
    for bridge in bridges {
        let members = membership(facts, bridge);
        if members.thunderbolt.is_empty() {
            if !members.unknown.is_empty() {
                check.blind(format!(
                    "{}: whether its members {} are Thunderbolt ports is unknown",
                    bridge.name,
                    members.unknown.join(", ")
                ));
            }
            continue;
        }
        let subject = format!(
            "{} (Thunderbolt members {})",
            bridge.name,
            members.thunderbolt.join(", ")
        );
        match (&bridge.service, bridge.service_enabled) {
            (Some(service), Some(true)) => check.warn(
                format!(
                    "{subject}: its service \"{service}\" is enabled (macOS re-creates and \
                     enables it when a Thunderbolt device is plugged in), so the bridge comes back \
                     up on the next network change"
                ),
                format!("sudo networksetup -setnetworkserviceenabled \"{service}\" off"),
            ),
            (Some(service), Some(false)) => {
                check.pass(format!("{subject}: its service \"{service}\" is off"));
            }
            (Some(service), None) => check.blind(format!(
                "{subject}: whether its service \"{service}\" is enabled is unknown"
            )),
            (None, _) => check.blind(format!(
                "{subject}: no network service is known for it (the service order was not read)"
            )),
        }
    }
    if check.findings.is_empty() {
        check.pass("no bridge has a Thunderbolt member");
    }
    check.finish_on(facts)
}
