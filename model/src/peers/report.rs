//! What an update does to a peer's report: whether it speaks only for its
//! sender, and applying it.

use std::collections::BTreeSet;
use std::sync::Arc;

use meshd_domain::facts::NodeFacts;
use meshd_domain::{LinkEnd, LinkObservation, NodeId, PeerReport, RejectReason, ReportUpdate};

/// A node speaks only for itself: its links start at it, its alarms are
/// about it (except those its peers raise about it: a reboot, a panic).
pub(super) fn check_update(
    sender: &NodeId,
    update: &ReportUpdate,
) -> Result<(), (RejectReason, String)> {
    if let Some(link) = update.links.iter().find(|l| l.local.node != *sender) {
        return Err((
            RejectReason::Malformed,
            format!("links: {sender} reports a link of {}", link.local.node),
        ));
    }
    let mut far_ends = BTreeSet::new();
    if let Some(link) = update
        .links
        .iter()
        .find(|l| !far_ends.insert(&l.remote.node))
    {
        return Err((
            RejectReason::Malformed,
            format!("links: the link to {} is reported twice", link.remote.node),
        ));
    }
    if let Some((index, alarm)) = update.foreign_alarm(sender) {
        return Err((
            RejectReason::ForeignAlarm,
            format!(
                "alarms[{index}]: {sender} raises an alarm about {}",
                alarm.node
            ),
        ));
    }
    Ok(())
}

/// Applies `update` to `report`; returns the facts it carried.
pub(super) fn apply(report: &mut PeerReport, update: ReportUpdate) -> Option<NodeFacts> {
    if update.full {
        report.links = update.links.into();
        report.alarms = update.alarms.unwrap_or_default().into();
        report.hears = update.hears.unwrap_or_default().into();
        report.heard_on_management = update.heard_on_management.unwrap_or_default().into();
        report.has_quorum = update.has_quorum.unwrap_or_default();
        report.leader = update.leader.flatten();
        report.clock_offsets = update.clock_offsets.unwrap_or_default().into();
        report.jobs = update.jobs.unwrap_or_default().into();
    } else {
        if !update.links.is_empty() || !update.removed_links.is_empty() {
            report.links = merged_links(&report.links, update.links, &update.removed_links);
        }
        if let Some(alarms) = update.alarms {
            report.alarms = alarms.into();
        }
        if let Some(hears) = update.hears {
            report.hears = hears.into();
        }
        if let Some(heard) = update.heard_on_management {
            report.heard_on_management = heard.into();
        }
        if let Some(has_quorum) = update.has_quorum {
            report.has_quorum = has_quorum;
        }
        if let Some(leader) = update.leader {
            report.leader = leader;
        }
        if let Some(offsets) = update.clock_offsets {
            report.clock_offsets = offsets.into();
        }
        if let Some(jobs) = update.jobs {
            report.jobs = jobs.into();
        }
    }
    report.sequence = update.sequence;
    report.sent_at = update.sent_at;
    report.load = update.load;
    report.lateness = update.lateness;
    update.facts
}

/// `known` with each link of `sent` in its far end's place (new far ends
/// after the known ones) and the `removed` far ends left out. Only the
/// observations kept as they were are cloned.
fn merged_links(
    known: &[LinkObservation],
    mut sent: Vec<LinkObservation>,
    removed: &[LinkEnd],
) -> Arc<[LinkObservation]> {
    let mut links = Vec::with_capacity(known.len() + sent.len());
    for old in known {
        match sent.iter().position(|l| l.remote.node == old.remote.node) {
            Some(i) => links.push(sent.remove(i)),
            None => links.push(old.clone()),
        }
    }
    links.append(&mut sent);
    links.retain(|l| !removed.iter().any(|r| r.node == l.remote.node));
    links.into()
}
