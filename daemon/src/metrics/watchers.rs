//! The local watchers' latest samples: bridges and broadcast rates, CPU by
//! process, job processes, and the last read of the platform facts.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::catalogue as c;
use super::exposition::{Exposition, LabelValues, Vanishing, count, flag};
use super::lock;

#[derive(Debug, Default)]
pub struct WatcherSeries {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Bridge name → (forwarding, mesh members).
    bridges: BTreeMap<String, (bool, usize)>,
    /// Interface → broadcast+multicast packets per second.
    rates: BTreeMap<String, f64>,
    /// Process name (already a bounded set) → cores.
    processes: BTreeMap<String, f64>,
    jobs: Option<(usize, usize)>,
    facts: Option<(Duration, usize)>,
    vanished_bridges: Vanishing,
    vanished_rates: Vanishing,
    vanished_processes: Vanishing,
}

impl WatcherSeries {
    /// One sample of the bridge watcher: each bridge's state and mesh
    /// members, and the broadcast+multicast rate of each watched interface.
    pub fn record_bridges<'a>(
        &self,
        bridges: impl Iterator<Item = (&'a str, bool, usize)>,
        rates: impl Iterator<Item = (&'a str, f64)>,
    ) {
        let mut state = lock(&self.state);
        state.bridges = bridges
            .map(|(name, active, members)| (name.to_owned(), (active, members)))
            .collect();
        state.rates = rates
            .map(|(iface, rate)| (iface.to_owned(), rate))
            .collect();
    }

    /// CPU per process name, already reduced to a bounded set of names
    /// (`meshd_model::cpu::reduce_for_metrics`).
    pub fn record_process_cpu(&self, cores: &BTreeMap<String, f64>) {
        lock(&self.state).processes.clone_from(cores);
    }

    pub fn record_job_processes(&self, busy: usize, idle: usize) {
        lock(&self.state).jobs = Some((busy, idle));
    }

    /// After each read of this node's platform facts.
    pub fn record_facts(&self, took: Duration, blind_spots: usize) {
        lock(&self.state).facts = Some((took, blind_spots));
    }

    pub fn write(&self, out: &mut Exposition, now: Instant) {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let bridges: Vec<(LabelValues, f64)> = state
            .bridges
            .keys()
            .map(|name| (vec![name.clone()], 1.0))
            .collect();
        // A bridge that is gone reads inactive, with no members, for a while.
        let bridges = state.vanished_bridges.update(bridges, now);
        let mut active = out.family(&c::BRIDGE_ACTIVE);
        for (labels, present) in &bridges {
            let name = labels.first().map(String::as_str).unwrap_or_default();
            let forwarding = *present > 0.0 && state.bridges.get(name).is_some_and(|b| b.0);
            active.sample(&[name], flag(forwarding));
        }
        let mut members = out.family(&c::BRIDGE_MESH_MEMBERS);
        for (labels, _) in &bridges {
            let name = labels.first().map(String::as_str).unwrap_or_default();
            members.sample(&[name], count(state.bridges.get(name).map_or(0, |b| b.1)));
        }
        let rates = state.vanished_rates.update(
            state
                .rates
                .iter()
                .map(|(iface, rate)| (vec![iface.clone()], *rate))
                .collect(),
            now,
        );
        out.family(&c::BRIDGE_BROADCAST_PACKETS_PER_SECOND)
            .samples(&rates);
        let processes = state.vanished_processes.update(
            state
                .processes
                .iter()
                .map(|(name, cores)| (vec![name.clone()], *cores))
                .collect(),
            now,
        );
        out.family(&c::PROCESS_CPU_CORES).samples(&processes);
        if let Some((busy, idle)) = state.jobs {
            out.family(&c::JOB_PROCESSES)
                .sample(&["busy"], count(busy))
                .sample(&["idle"], count(idle));
        }
        if let Some((took, blind_spots)) = state.facts {
            out.family(&c::FACTS_READ_DURATION_SECONDS)
                .sample(&[], took.as_secs_f64());
            out.family(&c::FACTS_BLIND_SPOTS)
                .sample(&[], count(blind_spots));
        }
    }
}
