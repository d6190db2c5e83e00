//! The local watchers' latest samples: bridges and broadcast rates, CPU by
//! process, memory, and the last read of the platform facts; and what the
//! node core made of the job processes (from the latest publication).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use meshd_domain::facts::MemoryFacts;
use meshd_model::job_watch::JobFigures;

use super::catalogue as c;
use super::exposition::{Exposition, LabelValues, Vanishing, as_f64, count, flag};
use super::lock;

#[derive(Debug, Default)]
pub struct WatcherSeries {
    state: Mutex<State>,
}

/// Process names that left the top and still read 0: the latest to leave.
/// A busy host whose top changes every sample would otherwise hold every
/// name it saw in the last five minutes.
const MAX_VANISHED_PROCESSES: usize = 20;

/// What the last read of the platform facts left for the metrics.
#[derive(Debug, Clone, Copy)]
struct FactsRead {
    took: Duration,
    blind_spots: usize,
    booted_at_unix: Option<u64>,
}

#[derive(Debug)]
struct State {
    /// Bridge name → (forwarding, mesh members).
    bridges: BTreeMap<String, (bool, usize)>,
    /// Interface → broadcast+multicast packets per second.
    rates: BTreeMap<String, f64>,
    /// Process name (already a bounded set) → cores.
    processes: BTreeMap<String, f64>,
    facts: Option<FactsRead>,
    /// The latest memory reading; `None` until one was made, or when the
    /// last read saw nothing.
    memory: Option<MemoryFacts>,
    vanished_bridges: Vanishing,
    vanished_rates: Vanishing,
    vanished_processes: Vanishing,
    pressure_levels: Vanishing,
}

impl Default for State {
    fn default() -> Self {
        Self {
            bridges: BTreeMap::new(),
            rates: BTreeMap::new(),
            processes: BTreeMap::new(),
            facts: None,
            memory: None,
            vanished_bridges: Vanishing::default(),
            vanished_rates: Vanishing::default(),
            vanished_processes: Vanishing::with_gone_limit(MAX_VANISHED_PROCESSES),
            pressure_levels: Vanishing::default(),
        }
    }
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

    /// After each read of this node's platform facts.
    pub fn record_facts(&self, took: Duration, blind_spots: usize, booted_at_unix: Option<u64>) {
        lock(&self.state).facts = Some(FactsRead {
            took,
            blind_spots,
            booted_at_unix,
        });
    }

    /// After each read of this node's memory; a figure that was not read
    /// has no series.
    pub fn record_memory(&self, memory: Option<&MemoryFacts>) {
        lock(&self.state).memory = memory.cloned();
    }

    /// The watchers' series, and `jobs`, the job processes as the core
    /// judged them last (none before the first process sample).
    pub fn write(&self, out: &mut Exposition, jobs: Option<JobFigures>, now: Instant) {
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
        if let Some(JobFigures { counts, orphans }) = jobs {
            out.family(&c::JOB_PROCESSES)
                .sample(&["busy"], count(counts.busy))
                .sample(&["idle"], count(counts.idle));
            out.family(&c::JOB_ORPHANED_PROCESSES)
                .sample(&[], count(orphans.processes));
            out.family(&c::JOB_ORPHANED_MEMORY_BYTES)
                .sample(&[], as_f64(orphans.memory_bytes));
        }
        if let Some(read) = state.facts {
            out.family(&c::FACTS_READ_DURATION_SECONDS)
                .sample(&[], read.took.as_secs_f64());
            out.family(&c::FACTS_BLIND_SPOTS)
                .sample(&[], count(read.blind_spots));
            if let Some(at) = read.booted_at_unix {
                out.family(&c::BOOT_TIME_SECONDS).sample(&[], as_f64(at));
            }
        }
        if let Some(memory) = &state.memory {
            write_memory(out, memory, &mut state.pressure_levels, now);
        }
    }
}

/// One series per figure the reading has; the pressure level is a state
/// set (the current level, and one it left within the hold at 0).
fn write_memory(
    out: &mut Exposition,
    memory: &MemoryFacts,
    pressure_levels: &mut Vanishing,
    now: Instant,
) {
    for (spec, value) in [
        (&c::MEMORY_TOTAL_BYTES, memory.total_bytes),
        (&c::MEMORY_WIRED_BYTES, memory.wired_bytes),
        (&c::MEMORY_LOCKED_BYTES, memory.locked_bytes),
        (&c::MEMORY_SWAP_USED_BYTES, memory.swap_used_bytes),
        (&c::MEMORY_SWAP_TOTAL_BYTES, memory.swap_total_bytes),
        (
            &c::MEMORY_GPU_WIRED_LIMIT_BYTES,
            memory.gpu_wired_limit_bytes,
        ),
    ] {
        if let Some(value) = value {
            out.family(spec).sample(&[], as_f64(value));
        }
    }
    if let Some(level) = memory.pressure {
        let current = vec![(vec![level.as_str().to_owned()], 1.0)];
        let levels = pressure_levels.update(current, now);
        out.family(&c::MEMORY_PRESSURE_LEVEL).samples(&levels);
    }
    let stalls = [
        ("some", memory.stall_some_bp),
        ("full", memory.stall_full_bp),
    ];
    if stalls.iter().any(|(_, bp)| bp.is_some()) {
        let mut family = out.family(&c::MEMORY_STALL_RATIO);
        for (scope, bp) in stalls {
            if let Some(bp) = bp {
                family.sample(&[scope], f64::from(bp) / 10_000.0);
            }
        }
    }
}
