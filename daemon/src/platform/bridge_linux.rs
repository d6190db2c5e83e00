//! Linux bridges from sysfs: `<root>/<iface>/bridge/` marks a bridge,
//! `<root>/<bridge>/brif/*` are its members, `operstate` says whether it
//! forwards. `root` is `/sys/class/net` in the daemon and a temporary tree
//! in tests.
//!
//! Counters: Linux has no broadcast counter in sysfs (nor in
//! `/proc/net/dev` or `ip -s link`, which show the same `multicast`), so
//! - for a bridge device the counter is `statistics/rx_packets`: the bridge
//!   device receives only what the bridge hands up to this host, which is
//!   every flooded broadcast and multicast frame plus unicast to the
//!   bridge's own address. In a loop every circulating broadcast is handed
//!   up again on each pass, so this tracks the storm; the bridge driver
//!   does not count `multicast` at all.
//! - for a member port the counter is `statistics/multicast` (received
//!   multicast; whether broadcast is included depends on the driver, and
//!   veth counts none). Its `rx_packets` is not used: it includes the unicast
//!   job traffic on the cable, millions of packets per second on a busy
//!   link, which would read as a storm.

use std::fs;
use std::path::Path;

use crate::model::bridge::BridgeObservation;

/// The bridges under `root`. Fails only when `root` cannot be listed;
/// interfaces that vanish while being read are skipped or lose the field.
pub fn read_bridges(root: &Path) -> std::io::Result<Vec<BridgeObservation>> {
    let mut bridges = Vec::new();
    for entry in fs::read_dir(root)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = root.join(&name);
        if !dir.join("bridge").is_dir() {
            continue;
        }
        let mut members: Vec<String> = fs::read_dir(dir.join("brif"))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        members.sort();
        let member_packets = members
            .iter()
            .filter_map(|m| Some((m.clone(), counter(&root.join(m), "multicast")?)))
            .collect();
        bridges.push(BridgeObservation {
            active: is_active(read_trimmed(&dir.join("operstate")).as_deref()),
            packets: counter(&dir, "rx_packets"),
            member_packets,
            members,
            name,
            service: None,
        });
    }
    bridges.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(bridges)
}

/// `up` forwards; `unknown` is what drivers without carrier reporting say
/// while up, so it counts as forwarding too. `down`, `lowerlayerdown` and
/// the rest do not forward.
fn is_active(operstate: Option<&str>) -> bool {
    matches!(operstate, Some("up" | "unknown"))
}

fn counter(iface: &Path, name: &str) -> Option<u64> {
    read_trimmed(&iface.join("statistics").join(name))?
        .parse()
        .ok()
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree(tempfile::TempDir);

    impl Tree {
        fn new() -> Self {
            Self(tempfile::tempdir().expect("tempdir"))
        }
        fn file(&self, path: &str, content: &str) -> &Self {
            let path = self.0.path().join(path);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(path, content).expect("write");
            self
        }
        fn dir(&self, path: &str) -> &Self {
            fs::create_dir_all(self.0.path().join(path)).expect("mkdir");
            self
        }
    }

    #[test]
    fn reads_a_bridge_its_members_and_counters() {
        let tree = Tree::new();
        tree.dir("br0/bridge")
            .dir("br0/brif/eth1")
            .dir("br0/brif/eth2")
            .file("br0/operstate", "up\n")
            .file("br0/statistics/rx_packets", "1234\n")
            .file("br0/statistics/multicast", "0\n")
            .file("eth1/operstate", "up\n")
            .file("eth1/statistics/multicast", "77\n")
            .file("eth1/statistics/rx_packets", "999999\n")
            .file("eth2/operstate", "up\n")
            .file("eth2/statistics/multicast", "garbage\n")
            .file("eth3/operstate", "up\n")
            .dir("docker0/bridge")
            .file("docker0/operstate", "down\n");
        let bridges = read_bridges(tree.0.path()).expect("read");
        assert_eq!(bridges.len(), 2);
        let br0 = &bridges[0];
        assert_eq!(br0.name, "br0");
        assert!(br0.active);
        assert_eq!(br0.members, ["eth1", "eth2"]);
        assert_eq!(br0.packets, Some(1234));
        assert_eq!(br0.member_packets.get("eth1"), Some(&77));
        assert_eq!(br0.member_packets.get("eth2"), None, "unparsable counter");
        let docker = &bridges[1];
        assert_eq!(docker.name, "docker0");
        assert!(!docker.active);
        assert!(docker.members.is_empty());
        assert_eq!(docker.packets, None);
    }

    #[test]
    fn operstates() {
        assert!(is_active(Some("up")));
        assert!(is_active(Some("unknown")));
        assert!(!is_active(Some("down")));
        assert!(!is_active(Some("lowerlayerdown")));
        assert!(!is_active(None));
    }

    #[test]
    fn missing_root_is_an_error_and_odd_trees_do_not_panic() {
        assert!(read_bridges(Path::new("/nonexistent/meshd/sys/class/net")).is_err());
        let tree = Tree::new();
        // `bridge` as a file, `brif` as a file, empty counters.
        tree.file("x/bridge", "")
            .dir("y/bridge")
            .file("y/brif", "")
            .file("y/operstate", "")
            .file("y/statistics/rx_packets", "-5");
        let bridges = read_bridges(tree.0.path()).expect("read");
        assert_eq!(bridges.len(), 1);
        assert_eq!(bridges[0].packets, None);
        assert!(!bridges[0].active);
    }

    #[test]
    fn the_real_sysfs_reads_without_error() {
        let root = Path::new("/sys/class/net");
        if root.is_dir() {
            assert!(read_bridges(root).is_ok());
        }
    }
}
