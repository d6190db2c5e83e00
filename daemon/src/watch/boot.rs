//! Follows every member's run and boot, from the reports and facts this
//! node takes (and its own), and tells restarts from reboots and reboots
//! from kernel panics ([`meshd_model::boot`]): it announces the events,
//! raises `node_rebooted` / `kernel_panic` about the member, and publishes
//! each member's boot for the status.

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use meshd_domain::{Alarm, NodeId, NodeIdentity};
use meshd_model::boot::{BootTracker, BootView, Sighting, event};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::aggregator::{MeshState, SharedBook};
use crate::cadence;
use crate::config::{Config, settings};
use crate::watch::facts::FactsFeed;
use crate::watch::{Wake, next_wake, publish};

/// Reports arrive several times a second and facts every few seconds; a
/// look every second catches each change within a second of its arrival.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The channels the boot watcher publishes on; the aggregator takes their
/// receivers before the watcher can start (it needs the aggregator's
/// state to announce events).
#[derive(Debug)]
pub struct BootOutputs {
    pub alarms: watch::Sender<Vec<Alarm>>,
    pub view: watch::Sender<Arc<BootView>>,
}

/// What the boot watcher reads.
#[derive(Debug)]
pub struct BootInputs {
    pub identity: NodeIdentity,
    pub book: SharedBook,
    pub local_facts: FactsFeed,
    pub state: MeshState,
}

pub fn spawn(
    mut configs: watch::Receiver<Arc<Config>>,
    inputs: BootInputs,
    outputs: BootOutputs,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        let mut tracker = BootTracker::new(settings::boot_rules(
            &configs.borrow_and_update().watch.boot,
        ));
        let mut tick = cadence::every(LOOK_EVERY);
        while let Some(wake) = next_wake(&mut tick, &mut configs, &shutdown).await {
            if let Wake::Reconfigured(config) = wake {
                tracker.set_rules(settings::boot_rules(&config.watch.boot));
                continue;
            }
            let members: BTreeSet<NodeId> = configs.borrow().members().into_iter().collect();
            tracker.retain(&members);
            let now = SystemTime::now();
            let changes = look(&mut tracker, &inputs, &members, now);
            for change in &changes {
                inputs
                    .state
                    .announce(event(change, &inputs.identity.id, now));
            }
            publish(&outputs.alarms, tracker.alarms(now));
            let view = tracker.view(now);
            if **outputs.view.borrow() != view {
                outputs.view.send_replace(Arc::new(view));
            }
        }
    });
}

/// Feeds the tracker this node's own run and facts and every peer's latest
/// report and facts; returns what changed.
fn look(
    tracker: &mut BootTracker,
    inputs: &BootInputs,
    members: &BTreeSet<NodeId>,
    now: SystemTime,
) -> Vec<meshd_model::boot::BootChange> {
    let (reports, facts) = {
        let book = inputs.book.lock().unwrap_or_else(PoisonError::into_inner);
        (
            book.views(std::time::Instant::now()),
            book.facts().0.clone(),
        )
    };
    let own_facts = inputs.local_facts.borrow().clone();
    let mut changes = Vec::new();
    for member in members {
        let sighting = if *member == inputs.identity.id {
            Sighting {
                node: member,
                incarnation: Some(inputs.identity.incarnation),
                facts: own_facts.as_deref(),
            }
        } else {
            Sighting {
                node: member,
                incarnation: reports.get(member).map(|r| r.report.sender.incarnation),
                facts: facts.get(member).map(AsRef::as_ref),
            }
        };
        changes.extend(tracker.observe(sighting, now));
    }
    changes
}
