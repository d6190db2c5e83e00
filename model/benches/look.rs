//! One whole look of a node core (`NodeCore::look`: its link observations,
//! the verdict engine, the events and the outbox) on a 7-node full mesh in
//! its steady state: every daemon running, every peer heard on every path,
//! all 21 cables healthy. The mesh is the cluster simulation's
//! (`tests/cluster/sim.rs`), so the inputs are what a running core gets:
//! the probe task's snapshot and the peer book's views, built the way the
//! daemon builds them.
//!
//! After a warm-up the simulation runs on in steps; after each step node 0
//! looks once more, timed, and then acts on its decision as it would (so
//! its peers see every update it sends). Timed apart: the probe statistics
//! of its six links, which the daemon's aggregator reads on every look
//! (`ProbeBoard::read`), and the core's look itself, with the peer book's
//! views it is handed. Allocations are counted over the same spans by a
//! counting global allocator (`stats_alloc`).
//!
//! `cargo bench -p meshd-model --bench look` (options: `--looks N`,
//! `--seed S`). Prints a table; asserts nothing.

// The simulation serves the cluster tests too; this uses only part of it.
#![allow(dead_code)]
// The simulation's events and wire messages are moved one at a time
// (tests/cluster.rs says why they are not boxed).
#![allow(clippy::large_enum_variant)]

#[path = "../tests/cluster/sim.rs"]
mod sim;

use std::alloc::System;
use std::time::{Duration, Instant};

use meshd_domain::LinkState;
use sim::Sim;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

/// Counts the allocations (and reallocations) the process makes, so a
/// span's count is the difference of two reads. The bench runs on one
/// thread, so the count in a span is that span's own.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations and reallocations so far.
fn allocations() -> u64 {
    let stats = GLOBAL.stats();
    u64::try_from(stats.allocations + stats.reallocations).unwrap_or(u64::MAX)
}

const NODES: usize = 7;
/// Long enough for every daemon to start, every stream to open and every
/// link verdict to settle up.
const WARMUP: Duration = Duration::from_secs(20);
/// Simulated time between two timed looks: the lab's daemons look about
/// once a second, and a heartbeat update is due about as often.
const STEP: Duration = Duration::from_millis(500);

struct Options {
    looks: usize,
    seed: u64,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        looks: 2_000,
        seed: 7,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match arg.as_str() {
            "--looks" => {
                options.looks = usize::try_from(value("--looks")?).map_err(|e| e.to_string())?;
            }
            "--seed" => options.seed = value("--seed")?,
            // cargo bench passes --bench; anything else is a mistake.
            "--bench" => {}
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

/// One part of a look, timed over every measured look.
#[derive(Default)]
struct Part {
    times: Vec<Duration>,
    allocations: Vec<u64>,
}

impl Part {
    /// Runs `f`, noting its time and allocations.
    // A benchmark reads the clock to time the model; the model itself never does.
    #[allow(clippy::disallowed_methods)]
    fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let allocated = allocations();
        let started = Instant::now();
        let result = f();
        self.times.push(started.elapsed());
        self.allocations.push(allocations() - allocated);
        result
    }

    fn print(mut self, name: &str) {
        self.times.sort_unstable();
        self.allocations.sort_unstable();
        let n = self.times.len();
        let mean = self.times.iter().sum::<Duration>() / u32::try_from(n).unwrap_or(u32::MAX);
        let mean_allocations = self.allocations.iter().sum::<u64>() as f64 / n as f64;
        println!(
            "{name:<24} {:>10} {:>10} {:>10} {:>10} | {mean_allocations:>12.1} {:>10} {:>10}",
            format!("{mean:.1?}"),
            format!("{:.1?}", percentile(&self.times, 50)),
            format!("{:.1?}", percentile(&self.times, 99)),
            format!("{:.1?}", self.times[n - 1]),
            percentile(&self.allocations, 50),
            percentile(&self.allocations, 99),
        );
    }
}

fn percentile<T: Copy>(sorted: &[T], p: usize) -> T {
    sorted[(sorted.len() - 1) * p / 100]
}

fn main() -> Result<(), String> {
    let options = options()?;
    let mut sim = Sim::new(NODES, options.seed);
    sim.run_until(WARMUP, &mut |_, _| {});
    let mut probe_stats = Part::default();
    let mut core_look = Part::default();
    let mut updates = 0usize;
    let mut events = 0usize;
    for _ in 0..options.looks {
        sim.run_until(sim.elapsed() + STEP, &mut |_, _| {});
        probe_stats.time(|| sim.probe_stats(0));
        let (moment, decision) = core_look
            .time(|| sim.core_look(0, false))
            .ok_or("node 0 is not running")?;
        updates += usize::from(decision.update.is_some());
        events += decision.events.len();
        let links = &decision.status.links;
        if links.len() != NODES * (NODES - 1) / 2 || links.iter().any(|l| l.state != LinkState::Up)
        {
            return Err(format!(
                "not the steady state: {} links, not all up",
                links.len()
            ));
        }
        sim.apply_decision(0, moment, decision);
    }
    println!(
        "node 0 of a {NODES}-node full mesh, steady state: {} looks (seed {}), {updates} with an update, {events} events",
        options.looks, options.seed
    );
    println!(
        "{:<24} {:>10} {:>10} {:>10} {:>10} | {:>12} {:>10} {:>10}",
        "per look", "mean", "p50", "p99", "max", "allocs mean", "p50", "p99"
    );
    probe_stats.print("probe statistics read");
    core_look.print("NodeCore::look");
    Ok(())
}
