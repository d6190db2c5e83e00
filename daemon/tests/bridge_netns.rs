//! A real Linux bridge over two "mesh ports" in a network namespace: the
//! sysfs sampling and the detector must raise `bridge_loop`, then
//! `broadcast_storm` under broadcast traffic, and clear both when the
//! bridge is deleted.
//!
//! Layout, all inside two namespaces this test creates and always deletes
//! (so no packet touches the host's own interfaces):
//!
//! ```text
//!   meshd-peer-PID (the "other node")      meshd-br-PID (this node)
//!   p1 10.77.0.2/24  <==== veth ====>  m1 --+
//!   p2               <==== veth ====>  m2 --+-- br0
//! ```
//!
//! Reading the namespace's sysfs: `/sys/class/net` shows the network
//! namespace of whoever mounted sysfs, and `ip netns exec` mounts a fresh
//! one for the command it runs. So each sample runs one `ip netns exec NS
//! sh -c` that prints the few files the reader uses, the test lays them out
//! in a temporary tree, and the real bridge reader (replaying that tree) and
//! detector run on it.
//!
//! Traffic: UDP broadcasts to 255.255.255.255 sent from p1 enter the bridge
//! through m1. No tool for that is on every machine (no ping here), and the
//! test may not `setns` itself (no unsafe code), so it runs its own binary
//! under `ip netns exec PEER` with only the ignored `blast_helper` test
//! selected; that helper sends a bounded burst and exits.

mod netns;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use meshd::watch::bridge::linux_bridges;
use meshd_domain::{Alarm, AlarmKind, NodeId};
use meshd_model::bridge::{BridgeDetector, Os, StormSettings};
use meshd_platform::source::ReplaySource;
use netns::{Cleanup, ip, missing_prerequisite};

const BLAST_ENV: &str = "MESHD_TEST_BLAST_FROM";
/// 20 packets every 10 ms for 4 s: about 2,000 packets/s, 8,000 at most.
const BLAST_BURST: usize = 20;
const BLAST_PAUSE: Duration = Duration::from_millis(10);
const BLAST_FOR: Duration = Duration::from_secs(4);
const STORM: StormSettings = StormSettings {
    packets_per_second: 300,
    window: Duration::from_secs(1),
};
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// Sends the bounded burst from the address in `MESHD_TEST_BLAST_FROM`;
/// does nothing when run without it (a plain `--ignored` run).
#[test]
#[ignore = "helper: run by bridge_loop_and_storm_in_a_namespace inside its namespace"]
fn blast_helper() {
    let Ok(from) = std::env::var(BLAST_ENV) else {
        return;
    };
    let socket = UdpSocket::bind((from.as_str(), 0)).expect("bind");
    socket.set_broadcast(true).expect("SO_BROADCAST");
    let started = Instant::now();
    while started.elapsed() < BLAST_FOR {
        for _ in 0..BLAST_BURST {
            // Discard port; a full socket buffer only drops a packet.
            let _ = socket.send_to(b"meshd bridge test", ("255.255.255.255", 9));
        }
        std::thread::sleep(BLAST_PAUSE);
    }
}

/// One sample of the namespace's `/sys/class/net`, laid out under `root`.
const SNAPSHOT: &str = r#"cd /sys/class/net || exit 1
for i in *; do
  for f in operstate statistics/rx_packets statistics/multicast; do
    [ -r "$i/$f" ] && printf 'F\t%s\t%s\n' "$i/$f" "$(cat "$i/$f")"
  done
  [ -d "$i/bridge" ] && printf 'D\t%s\n' "$i/bridge"
  if [ -d "$i/brif" ]; then
    printf 'D\t%s\n' "$i/brif"
    for m in "$i"/brif/*; do [ -e "$m" ] && printf 'D\t%s\n' "$m"; done
  fi
done
"#;

fn snapshot(ns: &str, root: &Path) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", SNAPSHOT])
        .output()
        .expect("run ip netns exec");
    assert!(
        out.status.success(),
        "snapshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if root.exists() {
        fs::remove_dir_all(root).expect("clear snapshot");
    }
    fs::create_dir_all(root).expect("snapshot root");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut fields = line.splitn(3, '\t');
        match (fields.next(), fields.next(), fields.next()) {
            (Some("F"), Some(path), Some(value)) => {
                let path = root.join(path);
                fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
                fs::write(path, value).expect("write");
            }
            (Some("D"), Some(path), None) => fs::create_dir_all(root.join(path)).expect("mkdir"),
            _ => panic!("unexpected snapshot line {line:?}"),
        }
    }
}

struct Sampler<'a> {
    ns: &'a str,
    dir: tempfile::TempDir,
    detector: BridgeDetector,
    mesh: BTreeSet<String>,
    started: Instant,
}

impl Sampler<'_> {
    fn sample(&mut self) -> Vec<Alarm> {
        // Laid out where a replayed `/sys/class/net` is read from.
        let root = self.dir.path().join("sys/class/net");
        snapshot(self.ns, &root);
        let source = ReplaySource::open(self.dir.path()).expect("snapshot dir");
        let bridges = linux_bridges(&source).expect("read snapshot");
        self.detector
            .observe(&bridges, &self.mesh, Instant::now(), SystemTime::now())
    }

    /// Samples until `done` holds for the alarms, or fails after `limit`.
    fn until(
        &mut self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[Alarm]) -> bool,
    ) -> Vec<Alarm> {
        let deadline = Instant::now() + limit;
        loop {
            let alarms = self.sample();
            if done(&alarms) {
                return alarms;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} after {:?}; last alarms {alarms:#?}, rates {:?}",
                self.started.elapsed(),
                self.detector.rates().collect::<BTreeMap<_, _>>()
            );
            std::thread::sleep(SAMPLE_EVERY);
        }
    }
}

fn has(kind: AlarmKind) -> impl Fn(&[Alarm]) -> bool {
    move |alarms| alarms.iter().any(|a| a.kind == kind)
}

#[test]
fn bridge_loop_and_storm_in_a_namespace() {
    if let Some(reason) = missing_prerequisite() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "bridge_netns must run in CI: {reason}"
        );
        eprintln!("skipping bridge_netns: {reason}");
        return;
    }
    let pid = std::process::id();
    let (ns, peer) = (format!("meshd-br-{pid}"), format!("meshd-peer-{pid}"));
    let mut cleanup = Cleanup {
        namespaces: Vec::new(),
        children: Vec::new(),
    };
    for name in [&ns, &peer] {
        ip(&["netns", "add", name]);
        cleanup.namespaces.push(name.clone());
    }
    for (m, p) in [("m1", "p1"), ("m2", "p2")] {
        ip(&[
            "-n", &ns, "link", "add", m, "type", "veth", "peer", "name", p, "netns", &peer,
        ]);
    }
    // No STP (the default) and no forward delay: ports forward at once,
    // as macOS's bridge0 does.
    ip(&[
        "-n",
        &ns,
        "link",
        "add",
        "br0",
        "type",
        "bridge",
        "forward_delay",
        "0",
    ]);
    for dev in ["m1", "m2"] {
        ip(&["-n", &ns, "link", "set", dev, "master", "br0"]);
        ip(&["-n", &ns, "link", "set", dev, "up"]);
    }
    ip(&["-n", &ns, "link", "set", "br0", "up"]);
    ip(&["-n", &peer, "addr", "add", "10.77.0.2/24", "dev", "p1"]);
    for dev in ["p1", "p2"] {
        ip(&["-n", &peer, "link", "set", dev, "up"]);
    }

    let mut sampler = Sampler {
        ns: &ns,
        dir: tempfile::tempdir().expect("tempdir"),
        detector: BridgeDetector::new(NodeId::new("lab").expect("id"), Os::Linux, STORM),
        mesh: ["m1", "m2"].into_iter().map(String::from).collect(),
        started: Instant::now(),
    };

    // The bridge comes up once a port has carrier.
    let alarms = sampler.until(
        "bridge_loop",
        Duration::from_secs(10),
        has(AlarmKind::BridgeLoop),
    );
    let bridge_loop = alarms
        .iter()
        .find(|a| a.kind == AlarmKind::BridgeLoop)
        .expect("loop");
    assert_eq!(bridge_loop.subject, "br0");
    assert!(
        bridge_loop.summary.contains("m1, m2"),
        "{}",
        bridge_loop.summary
    );
    assert!(
        bridge_loop
            .fix
            .as_deref()
            .is_some_and(|f| f.contains("ip link set m1 nomaster")),
        "{:?}",
        bridge_loop.fix
    );
    assert!(
        !has(AlarmKind::BroadcastStorm)(&alarms),
        "storm before any traffic: {alarms:#?}"
    );

    let exe = std::env::current_exe().expect("test binary");
    let exe = exe.to_str().expect("utf-8 path");
    cleanup.children.push(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &peer,
                exe,
                "blast_helper",
                "--exact",
                "--ignored",
            ])
            .env(BLAST_ENV, "10.77.0.2")
            .stdout(Stdio::null())
            .spawn()
            .expect("start the helper"),
    );
    let alarms = sampler.until(
        "broadcast_storm",
        Duration::from_secs(8),
        has(AlarmKind::BroadcastStorm),
    );
    let storm = alarms
        .iter()
        .find(|a| a.kind == AlarmKind::BroadcastStorm)
        .expect("storm");
    assert_eq!(storm.subject, "br0");
    assert!(storm.summary.contains("br0 "), "{}", storm.summary);
    assert!(has(AlarmKind::BridgeLoop)(&alarms));
    if let Some(mut child) = cleanup.children.pop() {
        let status = child.wait().expect("helper");
        assert!(status.success(), "helper failed: {status}");
    }

    ip(&["-n", &ns, "link", "del", "br0"]);
    let alarms = sampler.sample();
    assert!(
        alarms.is_empty(),
        "alarms after deleting the bridge: {alarms:#?}"
    );
}
