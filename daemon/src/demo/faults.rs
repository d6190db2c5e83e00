//! The demo's fault state, shared by the command loop (which changes it) and
//! the proxies (which consult it for every datagram and connection). Cables
//! have a fault per unordered node pair (it applies to the probes and to
//! the report streams over the cable); the management network has
//! partition groups. meshd itself never sees this: it only sees what the
//! proxies let through.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::plan::Gate;

/// What is wrong with one cable. The fields combine: a cable can be slow
/// and lossy at once; a cut cable drops everything whatever the rest says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkFault {
    pub cut: bool,
    /// Added to every round trip.
    pub delay: Duration,
    /// Share of probes lost, 0–100.
    pub loss_percent: u8,
}

impl LinkFault {
    pub fn is_clear(&self) -> bool {
        *self == LinkFault::default()
    }
}

/// What a proxy does with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Forward { delay: Duration },
    Drop,
}

/// Shared, cheap to consult. Cloned as `Arc<Faults>` into every proxy.
#[derive(Debug)]
pub struct Faults {
    state: Mutex<State>,
    /// Bumped on every change, so open connections can re-check whether
    /// they may live.
    version: watch::Sender<u64>,
}

#[derive(Debug)]
struct State {
    links: BTreeMap<(usize, usize), LinkFault>,
    /// Partition group per node; a node in no group reaches everyone.
    groups: BTreeMap<usize, usize>,
    rng: XorShift,
}

impl Faults {
    /// Loss decisions follow `seed`, so a test can count them.
    pub fn with_seed(seed: u64) -> Faults {
        Faults {
            state: Mutex::new(State {
                links: BTreeMap::new(),
                groups: BTreeMap::new(),
                rng: XorShift::new(seed),
            }),
            version: watch::Sender::new(0),
        }
    }

    /// Seeded from the clock: each demo run loses different probes.
    pub fn from_clock() -> Faults {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(1);
        // The low bits change fastest; folding keeps them.
        Faults::with_seed((nanos as u64) ^ ((nanos >> 64) as u64))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent after any panic (every update is one
        // assignment), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn link(&self, a: usize, b: usize) -> LinkFault {
        self.lock()
            .links
            .get(&pair(a, b))
            .copied()
            .unwrap_or_default()
    }

    /// Changes the fault of cable `a`–`b` (either order).
    pub fn update_link(&self, a: usize, b: usize, change: impl FnOnce(&mut LinkFault)) {
        {
            let mut state = self.lock();
            let fault = state.links.entry(pair(a, b)).or_default();
            change(fault);
            if fault.is_clear() {
                state.links.remove(&pair(a, b));
            }
        }
        self.changed();
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Whether a TCP connection behind `gate` may open, or stay open.
    pub fn open(&self, gate: Gate) -> bool {
        match gate {
            Gate::Management { from, to } => self.connected(from, to),
            Gate::Cable { a, b } => !self.link(a, b).cut,
        }
    }

    /// What happens to one datagram crossing cable `a`–`b`, either way. A
    /// round trip crosses twice, and a datagram may carry a probe one way
    /// and answers the other (see `probe::packet`), so each crossing gets
    /// half the delay and the loss that makes two crossings lose the asked
    /// share: `slow 100` adds 100 ms to a round trip and `lossy 10` loses
    /// 10 % of probes. A cut drops both ways.
    pub fn fate(&self, a: usize, b: usize) -> Fate {
        let mut state = self.lock();
        let fault = state.links.get(&pair(a, b)).copied().unwrap_or_default();
        if fault.cut {
            return Fate::Drop;
        }
        if fault.loss_percent > 0 && state.rng.chance(crossing_loss(fault.loss_percent)) {
            return Fate::Drop;
        }
        Fate::Forward {
            delay: fault.delay / 2,
        }
    }

    /// Splits the management network: nodes in different groups cannot
    /// reach each other; nodes in no group reach everyone. Replaces any
    /// earlier partition.
    pub fn partition(&self, groups: &[Vec<usize>]) {
        {
            let mut state = self.lock();
            state.groups = groups
                .iter()
                .enumerate()
                .flat_map(|(g, nodes)| nodes.iter().map(move |&n| (n, g)))
                .collect();
        }
        self.changed();
    }

    /// Whether node `a` can reach node `b` over the management network.
    pub fn connected(&self, a: usize, b: usize) -> bool {
        let state = self.lock();
        match (state.groups.get(&a), state.groups.get(&b)) {
            (Some(ga), Some(gb)) => ga == gb,
            _ => true,
        }
    }

    /// Changes whenever a cable's fault or the partition does.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Every cable and the management network back to normal.
    pub fn heal_all(&self) {
        self.lock().links.clear();
        self.partition(&[]);
    }

    /// Cables that currently have a fault, for the status line.
    pub fn faulty_links(&self) -> Vec<((usize, usize), LinkFault)> {
        self.lock().links.iter().map(|(k, v)| (*k, *v)).collect()
    }
}

fn pair(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

/// The chance that one crossing loses a datagram, so that a round trip
/// (two independent crossings) is lost with `percent` / 100.
fn crossing_loss(percent: u8) -> f64 {
    let round_trip = (f64::from(percent) / 100.0).min(1.0);
    1.0 - (1.0 - round_trip).sqrt()
}

/// xorshift64: a tiny, fast, good-enough PRNG for dropping datagrams. Not
/// for anything that needs unpredictability.
#[derive(Debug, Clone)]
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        // Zero is the one state xorshift never leaves.
        XorShift(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        // The top 53 bits: a uniform float in [0, 1).
        let uniform = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        uniform < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_belong_to_the_unordered_pair() {
        let faults = Faults::with_seed(1);
        faults.update_link(2, 0, |f| f.cut = true);
        assert!(faults.link(0, 2).cut);
        assert_eq!(faults.fate(0, 2), Fate::Drop);
        assert_eq!(faults.fate(2, 0), Fate::Drop);
        assert!(faults.link(0, 1).is_clear());
        faults.update_link(0, 2, |f| *f = LinkFault::default());
        assert!(faults.faulty_links().is_empty());
    }

    #[test]
    fn each_way_gets_half_the_delay_of_a_round_trip() {
        let faults = Faults::with_seed(1);
        faults.update_link(0, 1, |f| f.delay = Duration::from_millis(40));
        let half = Fate::Forward {
            delay: Duration::from_millis(20),
        };
        assert_eq!(faults.fate(1, 0), half);
        assert_eq!(faults.fate(0, 1), half);
    }

    #[test]
    fn lossy_loses_about_the_asked_share_of_round_trips() {
        let faults = Faults::with_seed(42);
        faults.update_link(0, 1, |f| f.loss_percent = 25);
        let lost = (0..10_000)
            .filter(|_| faults.fate(0, 1) == Fate::Drop || faults.fate(1, 0) == Fate::Drop)
            .count();
        assert!((2_200..=2_800).contains(&lost), "lost {lost}");
        faults.update_link(0, 1, |f| f.loss_percent = 100);
        assert!((0..100).all(|_| faults.fate(1, 0) == Fate::Drop));
    }

    #[test]
    fn partition_separates_groups_and_spares_the_rest() {
        let faults = Faults::with_seed(1);
        let mut changes = faults.watch();
        faults.partition(&[vec![0, 1], vec![2]]);
        assert!(changes.has_changed().unwrap_or(false));
        changes.mark_unchanged();
        assert!(faults.connected(0, 1));
        assert!(!faults.connected(0, 2));
        assert!(!faults.connected(2, 1));
        assert!(faults.connected(3, 0), "node 3 is in no group");
        assert!(faults.connected(2, 3));
        faults.heal_all();
        assert!(changes.has_changed().unwrap_or(false));
        assert!(faults.connected(0, 2));
    }

    #[test]
    fn a_cut_closes_the_cables_gate_and_a_partition_the_networks() {
        let faults = Faults::with_seed(1);
        let mut changes = faults.watch();
        let cable = Gate::Cable { a: 1, b: 0 };
        let network = Gate::Management { from: 0, to: 1 };
        faults.update_link(0, 1, |f| f.cut = true);
        assert!(changes.has_changed().unwrap_or(false));
        changes.mark_unchanged();
        assert!(!faults.open(cable));
        assert!(faults.open(network), "a cut cable leaves the network alone");
        faults.update_link(0, 1, |f| f.loss_percent = 50);
        assert!(!faults.open(cable), "still cut");
        faults.partition(&[vec![0], vec![1]]);
        assert!(!faults.open(network));
        faults.heal_all();
        assert!(faults.open(cable) && faults.open(network));
    }

    #[test]
    fn xorshift_never_sticks_at_zero() {
        let mut rng = XorShift::new(0);
        assert!((0..100).map(|_| rng.next()).all(|x| x != 0));
    }
}
