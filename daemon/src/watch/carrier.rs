//! The kernel's carrier of the cable interfaces (issue #38): a pulled
//! Thunderbolt cable is seen by both kernels at once, before any probe
//! times out. Reads [`CarrierEvents`] (Linux rtnetlink, macOS kernel
//! events) on its own thread, since the reads block, and publishes each
//! watched interface's carrier and since when. Where the events cannot be
//! read it says why once and publishes an empty map: the link is then
//! judged by its probes alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::NodeId;
use meshd_model::time::Moment;
use meshd_platform::carrier::{self, CarrierChange, CarrierError, CarrierEvents};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// How long one read waits: the thread sees shutdown within this.
const WAIT: Duration = Duration::from_millis(500);
/// After a failed read, before the next: a broken socket must not spin.
const RETRY_AFTER: Duration = Duration::from_millis(500);
/// Every carrier is read again this often: macOS drops a kernel event
/// silently when the socket's 32-KiB buffer is full (`kev_post_msg`,
/// bsd/kern/kern_event.c), so a lost change is found within this.
const RESYNC_EVERY: Duration = Duration::from_secs(60);

/// A watched interface's carrier, and when the watcher saw it become so
/// (for an interface read at start, when it was read: the kernel does not
/// say since when).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarrierState {
    pub carrier: bool,
    pub changed_at: Instant,
    pub changed_wall: SystemTime,
}

/// The watched interfaces' carriers by name; an interface whose carrier is
/// not known (absent, unreadable, or no reader on this OS) is not in it.
pub type CarrierMap = BTreeMap<String, CarrierState>;

/// Starts the reader thread for the cable interfaces of `node` in the
/// config in force (a reload that changes them is followed); it ends at
/// `shutdown`, when every receiver is gone, or at once when the events
/// cannot be read here (then the map stays empty). Panics only where the
/// OS cannot start a thread, as `std::thread::spawn` does.
pub fn spawn(
    node: NodeId,
    mut configs: watch::Receiver<Arc<Config>>,
    shutdown: CancellationToken,
) -> (watch::Receiver<CarrierMap>, JoinHandle<()>) {
    let (tx, rx) = watch::channel(CarrierMap::new());
    let thread = std::thread::Builder::new()
        .name("meshd-carrier".to_owned())
        .spawn(move || {
            // The config at start, then each one that changed.
            let mut started = false;
            let ifaces_now = move || {
                let changed = configs.has_changed().unwrap_or(false);
                (!std::mem::replace(&mut started, true) || changed)
                    .then(|| cable_interfaces(&configs.borrow_and_update(), &node))
            };
            run(ifaces_now, &shutdown, &tx);
        })
        .expect("the OS starts the carrier thread");
    (rx, thread)
}

/// The interfaces of `node`'s cables in `config`.
pub fn cable_interfaces(config: &Config, node: &NodeId) -> BTreeSet<String> {
    crate::config::settings::expected_links(config, node)
        .into_iter()
        .filter_map(|link| link.local.iface)
        .collect()
}

fn moment() -> Moment {
    Moment {
        now: Instant::now(),
        wall: SystemTime::now(),
    }
}

/// `ifaces_now` gives the interfaces to watch at its first call, and after
/// that the new set whenever the config changed it.
fn run(
    mut ifaces_now: impl FnMut() -> Option<BTreeSet<String>>,
    shutdown: &CancellationToken,
    tx: &watch::Sender<CarrierMap>,
) {
    // Opened before the carriers are read: a change in between is then an
    // event, not lost.
    let mut events = match CarrierEvents::open() {
        Ok(events) => events,
        Err(err) => {
            tracing::warn!(
                "the kernel's link-state events are not read, links are judged by their probes alone: {err}"
            );
            tx.send_replace(CarrierMap::new());
            return;
        }
    };
    follow(
        |timeout| events.next(timeout),
        carrier::current,
        RESYNC_EVERY,
        &mut ifaces_now,
        shutdown,
        tx,
    );
}

/// Seeds the map with `read`, then applies what `next` reports until
/// shutdown or until no one receives. When events were lost, or a read
/// failed (its batch is gone with it), and every `resync_every`, every
/// carrier is read again.
fn follow(
    mut next: impl FnMut(Duration) -> Result<Vec<CarrierChange>, CarrierError>,
    mut read: impl FnMut(&str) -> Result<Option<bool>, CarrierError>,
    resync_every: Duration,
    ifaces_now: &mut dyn FnMut() -> Option<BTreeSet<String>>,
    shutdown: &CancellationToken,
    tx: &watch::Sender<CarrierMap>,
) {
    let mut ifaces = ifaces_now().unwrap_or_default();
    let mut map = CarrierMap::new();
    let seed = read_all(&ifaces, &map, &mut read);
    apply(&mut map, &ifaces, &seed, moment());
    tx.send_replace(map.clone());
    let mut failing = false;
    let mut last_read = Instant::now();
    while !shutdown.is_cancelled() && !tx.is_closed() {
        let mut changes = match next(WAIT) {
            Ok(changes) => {
                failing = false;
                changes
            }
            Err(CarrierError::Lost { why }) => {
                tracing::warn!("link-state events were lost ({why}): reading the carriers again");
                read_all(&ifaces, &map, &mut read)
            }
            Err(err) => {
                // Once per run of failures: a broken socket must not fill
                // the log.
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(
                        "reading link-state events failed, reading the carriers instead until it works: {err}"
                    );
                }
                std::thread::sleep(RETRY_AFTER);
                read_all(&ifaces, &map, &mut read)
            }
        };
        let mut dropped = false;
        if let Some(new) = ifaces_now() {
            // A reload changed the cables: forget the interfaces gone,
            // read the new ones.
            let before = map.len();
            map.retain(|iface, _| new.contains(iface));
            dropped = map.len() != before;
            ifaces = new;
            changes.extend(read_all(&ifaces, &map, &mut read));
        }
        if last_read.elapsed() >= resync_every {
            last_read = Instant::now();
            // After the events: what is read now is the newer.
            changes.extend(read_all(&ifaces, &map, &mut read));
        }
        if apply(&mut map, &ifaces, &changes, moment()) || dropped {
            tx.send_replace(map.clone());
        }
    }
}

/// The carriers of `ifaces` as `read` gives them now, as changes: an
/// interface that no longer reads and was in `map` has lost its carrier
/// (as RTM_DELLINK says); one whose read failed is left as it is.
fn read_all(
    ifaces: &BTreeSet<String>,
    map: &CarrierMap,
    mut read: impl FnMut(&str) -> Result<Option<bool>, CarrierError>,
) -> Vec<CarrierChange> {
    ifaces
        .iter()
        .filter_map(|iface| {
            let carrier = match read(iface) {
                Ok(Some(carrier)) => carrier,
                Ok(None) if map.contains_key(iface) => false,
                Ok(None) => return None,
                Err(err) => {
                    tracing::debug!("the carrier of {iface} is not read: {err}");
                    return None;
                }
            };
            Some(CarrierChange {
                iface: iface.clone(),
                carrier,
            })
        })
        .collect()
}

/// Applies the kernel's `changes` of the watched `ifaces` at `at`; whether
/// the map changed. A change that repeats an interface's carrier (the
/// kernel announces MTU and address changes the same way) keeps its date.
pub fn apply(
    map: &mut CarrierMap,
    ifaces: &BTreeSet<String>,
    changes: &[CarrierChange],
    at: Moment,
) -> bool {
    let mut changed = false;
    for change in changes {
        if !ifaces.contains(&change.iface) {
            continue;
        }
        if map
            .get(&change.iface)
            .is_some_and(|state| state.carrier == change.carrier)
        {
            continue;
        }
        map.insert(
            change.iface.clone(),
            CarrierState {
                carrier: change.carrier,
                changed_at: at.now,
                changed_wall: at.wall,
            },
        );
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(iface: &str, carrier: bool) -> CarrierChange {
        CarrierChange {
            iface: iface.to_owned(),
            carrier,
        }
    }

    fn watched() -> BTreeSet<String> {
        ["en2", "en3"].into_iter().map(str::to_owned).collect()
    }

    fn at(seconds: u64) -> Moment {
        let start = Moment {
            now: Instant::now(),
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000),
        };
        Moment {
            now: start.now + Duration::from_secs(seconds),
            wall: start.wall + Duration::from_secs(seconds),
        }
    }

    #[test]
    fn a_change_is_dated_and_a_repeat_keeps_its_date() {
        let mut map = CarrierMap::new();
        let (t0, t1, t2) = (at(0), at(5), at(9));
        assert!(apply(&mut map, &watched(), &[change("en2", true)], t0));
        assert!(!apply(&mut map, &watched(), &[change("en2", true)], t1));
        assert_eq!(map["en2"].changed_at, t0.now);

        assert!(apply(&mut map, &watched(), &[change("en2", false)], t2));
        assert_eq!(
            map["en2"],
            CarrierState {
                carrier: false,
                changed_at: t2.now,
                changed_wall: t2.wall,
            }
        );
    }

    #[test]
    fn unwatched_interfaces_are_ignored_and_the_last_change_wins() {
        let mut map = CarrierMap::new();
        let changes = [
            change("lo", true),
            change("en3", true),
            change("en3", false),
            change("en9", false),
        ];
        assert!(apply(&mut map, &watched(), &changes, at(0)));
        assert_eq!(map.keys().collect::<Vec<_>>(), ["en3"]);
        assert!(!map["en3"].carrier);
    }

    #[test]
    fn reading_again_loses_a_gone_interface_and_keeps_an_unreadable_one() {
        let mut map = CarrierMap::new();
        apply(
            &mut map,
            &watched(),
            &[change("en2", true), change("en3", true)],
            at(0),
        );
        let reads = read_all(&watched(), &map, |iface| match iface {
            "en2" => Ok(None),
            _ => Err(CarrierError::Read {
                iface: iface.to_owned(),
                why: "ifconfig timed out".to_owned(),
            }),
        });
        assert_eq!(reads, [change("en2", false)]);
        // Never seen and not there: still unknown.
        assert_eq!(read_all(&watched(), &CarrierMap::new(), |_| Ok(None)), []);
        assert_eq!(
            read_all(&watched(), &CarrierMap::new(), |i| Ok(Some(i == "en3"))),
            [change("en2", false), change("en3", true)]
        );
    }

    /// A scripted reader: each call of `next` takes the next answer, and
    /// the last one stops the loop.
    #[test]
    fn lost_events_and_failed_reads_read_the_carriers_again() {
        let shutdown = CancellationToken::new();
        let (tx, rx) = watch::channel(CarrierMap::new());
        let mut script = vec![
            Ok(vec![change("en2", false), change("lo", false)]),
            Err(CarrierError::Lost {
                why: "ENOBUFS".to_owned(),
            }),
            Err(CarrierError::Receive(std::io::Error::other("socket gone"))),
            Ok(vec![change("en3", false)]),
        ]
        .into_iter();
        let mut reads = Vec::new();
        // en2 reads as up each time; en3 is absent at start, then up.
        let mut round = 0;
        follow(
            |_| {
                let answer = script.next().expect("stopped after the script");
                if script.len() == 0 {
                    shutdown.cancel();
                }
                answer
            },
            |iface| {
                reads.push(iface.to_owned());
                if iface == "en2" {
                    round += 1;
                }
                Ok(match iface {
                    "en2" => Some(true),
                    _ => (round >= 2).then_some(true),
                })
            },
            Duration::MAX,
            &mut fixed(watched()),
            &shutdown,
            &tx,
        );
        // At start, after the loss, after the failed read: both each time.
        assert_eq!(reads, ["en2", "en3", "en2", "en3", "en2", "en3"]);
        let map = rx.borrow();
        assert!(map["en2"].carrier, "read up again after the loss");
        assert!(!map["en3"].carrier, "the last event wins");
    }

    #[test]
    fn a_lost_change_is_found_at_the_next_resync() {
        let shutdown = CancellationToken::new();
        let (tx, rx) = watch::channel(CarrierMap::new());
        let mut reads = 0;
        follow(
            |_| {
                shutdown.cancel();
                Ok(Vec::new())
            },
            |_| {
                reads += 1;
                // Up at start; the kernel's event of its loss never came.
                Ok(Some(reads <= 2))
            },
            Duration::ZERO,
            &mut fixed(watched()),
            &shutdown,
            &tx,
        );
        assert_eq!(reads, 4, "both read at start and at the resync");
        assert!(rx.borrow().values().all(|state| !state.carrier));
    }

    /// The interfaces to watch: `set` at the first call, unchanged after.
    fn fixed(set: BTreeSet<String>) -> impl FnMut() -> Option<BTreeSet<String>> {
        let mut first = Some(set);
        move || first.take()
    }

    #[test]
    fn a_reload_forgets_the_cables_gone_and_reads_the_new_ones() {
        let shutdown = CancellationToken::new();
        let (tx, rx) = watch::channel(CarrierMap::new());
        let sets = [
            Some(["en2".to_owned()].into()),
            None,
            Some(["en3".to_owned()].into()),
        ];
        let mut sets = sets.into_iter();
        let mut looks = 0;
        follow(
            |_| {
                looks += 1;
                if looks == 2 {
                    shutdown.cancel();
                }
                Ok(Vec::new())
            },
            |_| Ok(Some(true)),
            Duration::MAX,
            &mut || sets.next().flatten(),
            &shutdown,
            &tx,
        );
        assert_eq!(rx.borrow().keys().collect::<Vec<_>>(), ["en3"]);
    }

    #[test]
    fn the_cable_interfaces_are_the_nodes_own_ends() {
        let example = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../meshd.example.toml"
        ));
        let config = Config::parse(example, "meshd.example.toml", "studio-1").unwrap();
        let ifaces = cable_interfaces(&config, &config.node.id);
        assert_eq!(ifaces, ["en2".to_owned(), "en3".to_owned()].into());
    }

    /// On Linux the socket opens anywhere (netlink needs no privilege):
    /// the thread seeds `lo` from sysfs and stops at shutdown.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_thread_seeds_and_stops_at_shutdown() {
        let shutdown = CancellationToken::new();
        let (tx, mut rx) = watch::channel(CarrierMap::new());
        let stop = shutdown.clone();
        let thread = std::thread::spawn(move || {
            run(fixed(["lo".to_owned()].into()), &stop, &tx);
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // A bound so a broken reader fails the test instead of hanging
        // it; not a speed asserted.
        runtime.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(60),
                rx.wait_for(|map| map.contains_key("lo")),
            )
            .await
            .expect("lo seeded")
            .unwrap();
        });
        assert!(rx.borrow()["lo"].carrier);
        shutdown.cancel();
        thread.join().unwrap();
    }
}
