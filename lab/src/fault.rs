//! Faults, injected the way they happen: a cable pulled (`ip link … down`),
//! a slow cable (`tc tbf`), a lossy one (nftables), a bridge over mesh
//! ports (a real loop and storm), a storm on a port outside the mesh, a
//! CPU hog named like macOS's Universal Control, a split management
//! network, a node isolated from everything (its management cable and every
//! mesh cable pulled), and a daemon stalled or made late by SIGSTOP/SIGCONT
//! cycles (`stall.rs`). Each has its undo; `down` removes whatever is left.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::command::{CommandError, QUICK, run};
use crate::lab::{Lab, LabError};
use crate::plan::{MGMT_BRIDGE, mesh_iface};
use crate::stall::{Stall, StallPattern, StallReport};

/// The bridge a bridge-loop fault puts over a node's mesh ports.
pub const LOOP_BRIDGE: &str = "meshbr";
/// The nftables table of the loss fault.
const LOSS_TABLE: &str = "meshlab";
/// A storm outside the mesh: two bridges joined by two veth pairs.
const CHAOS_BRIDGES: [&str; 2] = ["chaosbr0", "chaosbr1"];
const CHAOS_PAIRS: [(&str, &str); 2] = [("chaos0a", "chaos0b"), ("chaos1a", "chaos1b")];
/// The hog's process name: the offender meshd knows from macOS.
pub const HOG_NAME: &str = "UniversalControl";

/// The throttle's bucket, in bytes: below a full-size (1500-byte) frame.
pub const TBF_BURST: &str = "1000";

impl Lab {
    pub(crate) fn ip_in(&self, id: &str, args: &[&str]) -> Result<(), LabError> {
        let mut full = vec!["-n", self.namespace(id)?];
        full.extend_from_slice(args);
        run("ip", &full, QUICK)?;
        Ok(())
    }

    /// Pulls the cable `node`–`peer` out of `node`'s port: `node`'s end
    /// goes down, and the far end loses its carrier with it (a veth pair's
    /// ends share their link), so neither end has a carrier, as after a
    /// real unplug.
    pub fn pull_cable(&self, node: &str, peer: &str) -> Result<(), LabError> {
        self.plan.cable(node, peer)?;
        self.ip_in(node, &["link", "set", &mesh_iface(peer), "down"])
    }

    pub fn plug_cable(&self, node: &str, peer: &str) -> Result<(), LabError> {
        self.plan.cable(node, peer)?;
        self.ip_in(node, &["link", "set", &mesh_iface(peer), "up"])
    }

    /// Cuts what `node` sends on the cable to `peer` to `kbit` kbit/s (a
    /// token bucket; what waits longer than 200 ms is dropped).
    /// Cuts what `node` sends to `peer` to `kbit` through a token bucket of
    /// [`TBF_BURST`] bytes: a frame larger than the bucket never passes, as
    /// on a cable that negotiated down and drops full-size frames, so the
    /// MTU-sized probes are lost while the small ones get through.
    pub fn throttle(&self, node: &str, peer: &str, kbit: u32) -> Result<(), LabError> {
        self.plan.cable(node, peer)?;
        let ns = self.namespace(node)?;
        let rate = format!("{kbit}kbit");
        let iface = mesh_iface(peer);
        run(
            "tc",
            &[
                "-n", ns, "qdisc", "replace", "dev", &iface, "root", "tbf", "rate", &rate, "burst",
                TBF_BURST, "latency", "200ms",
            ],
            QUICK,
        )?;
        Ok(())
    }

    pub fn unthrottle(&self, node: &str, peer: &str) -> Result<(), LabError> {
        self.plan.cable(node, peer)?;
        let ns = self.namespace(node)?;
        let iface = mesh_iface(peer);
        run(
            "tc",
            &["-n", ns, "qdisc", "del", "dev", &iface, "root"],
            QUICK,
        )?;
        Ok(())
    }

    /// Drops `percent` of the packets `node` sends and receives on the
    /// cable to `peer`, at random (nftables `numgen random`).
    pub fn lose(&self, node: &str, peer: &str, percent: u8) -> Result<(), LabError> {
        self.plan.cable(node, peer)?;
        let iface = mesh_iface(peer);
        // nftables' `numgen random mod 100` reaches 99 at most: every
        // packet is a rule without it.
        let which = if percent >= 100 {
            String::new()
        } else {
            format!("numgen random mod 100 < {percent} ")
        };
        let ruleset = format!(
            "table inet {LOSS_TABLE} {{\n\
             chain in {{ type filter hook input priority 0; iifname \"{iface}\" {which}counter drop; }}\n\
             chain out {{ type filter hook output priority 0; oifname \"{iface}\" {which}counter drop; }}\n\
             }}\n"
        );
        let file = self.state_dir().join(format!("loss-{node}.nft"));
        std::fs::write(&file, ruleset).map_err(|source| LabError::File {
            path: file.clone(),
            source,
        })?;
        self.clear_loss(node)?;
        self.exec(node, "nft", &["-f", &file.to_string_lossy()])?;
        Ok(())
    }

    /// The packets `node`'s loss rules dropped so far (both ways); 0 with
    /// no rules.
    pub fn dropped_packets(&self, node: &str) -> Result<u64, LabError> {
        let tables = self.exec(node, "nft", &["list", "tables"])?;
        if !tables
            .lines()
            .any(|l| l.trim() == format!("table inet {LOSS_TABLE}"))
        {
            return Ok(0);
        }
        let listing = self.exec(node, "nft", &["list", "table", "inet", LOSS_TABLE])?;
        Ok(listing
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "packets")
            .filter_map(|w| w[1].parse::<u64>().ok())
            .sum())
    }

    /// Whether `node`'s port on the cable to `peer` has a carrier (it is
    /// up and its lower layer is): what the kernel tells meshd's carrier
    /// watcher.
    pub fn carrier(&self, node: &str, peer: &str) -> Result<bool, LabError> {
        self.plan.cable(node, peer)?;
        let shown = self.exec(
            node,
            "ip",
            &["-o", "link", "show", "dev", &mesh_iface(peer)],
        )?;
        let flags = shown
            .split_once('<')
            .and_then(|(_, rest)| rest.split_once('>'))
            .map_or("", |(flags, _)| flags);
        let has = |flag: &str| flags.split(',').any(|f| f == flag);
        Ok(has("UP") && has("LOWER_UP"))
    }

    /// Removes the loss rules of `node` (every cable), if any.
    pub fn clear_loss(&self, node: &str) -> Result<(), LabError> {
        let tables = self.exec(node, "nft", &["list", "tables"])?;
        if tables
            .lines()
            .any(|l| l.trim() == format!("table inet {LOSS_TABLE}"))
        {
            self.exec(node, "nft", &["delete", "table", "inet", LOSS_TABLE])?;
        }
        Ok(())
    }

    /// Bridges, in each of `nodes`, its mesh ports to the others: with
    /// three or more nodes the cables between them form a loop with no
    /// spanning tree, and any broadcast circles it forever. Undo with
    /// `unbridge` soon: this is a real storm.
    pub fn bridge_loop(&self, nodes: &[&str]) -> Result<(), LabError> {
        for &node in nodes {
            self.ip_in(node, &["link", "add", LOOP_BRIDGE, "type", "bridge"])?;
            for &peer in nodes.iter().filter(|&&p| p != node) {
                self.plan.cable(node, peer)?;
                self.ip_in(
                    node,
                    &["link", "set", &mesh_iface(peer), "master", LOOP_BRIDGE],
                )?;
            }
            self.ip_in(node, &["link", "set", LOOP_BRIDGE, "up"])?;
        }
        // A bridge that just came up sends its own IPv6 router and listener
        // solicitations, but do not rely on it: one broadcast is enough.
        if let Some(&first) = nodes.first() {
            self.seed_broadcast(first, LOOP_BRIDGE)?;
        }
        Ok(())
    }

    /// Deletes the loop bridges (their ports go back to plain cables, with
    /// their addresses).
    pub fn unbridge(&self, nodes: &[&str]) -> Result<(), LabError> {
        for &node in nodes {
            let links = self.exec(node, "ip", &["-o", "link", "show", "type", "bridge"])?;
            if links.contains(&format!(": {LOOP_BRIDGE}:")) {
                self.ip_in(node, &["link", "del", LOOP_BRIDGE])?;
            }
        }
        Ok(())
    }

    /// A loop of two bridges and two veth pairs inside `node`, on no mesh
    /// port: a storm the bridge watcher may report, and that must not be
    /// taken for a broken link or node.
    pub fn storm_outside_mesh(&self, node: &str) -> Result<(), LabError> {
        for bridge in CHAOS_BRIDGES {
            self.ip_in(node, &["link", "add", bridge, "type", "bridge"])?;
        }
        for (x, y) in CHAOS_PAIRS {
            self.ip_in(node, &["link", "add", x, "type", "veth", "peer", "name", y])?;
            self.ip_in(node, &["link", "set", x, "master", CHAOS_BRIDGES[0], "up"])?;
            self.ip_in(node, &["link", "set", y, "master", CHAOS_BRIDGES[1], "up"])?;
        }
        for bridge in CHAOS_BRIDGES {
            self.ip_in(node, &["link", "set", bridge, "up"])?;
        }
        self.seed_broadcast(node, CHAOS_BRIDGES[0])
    }

    /// Packets the storm outside the mesh in `node` has carried so far:
    /// what the first of its bridges received (`ip -s link`), to prove a
    /// storm runs. An error while there is no storm.
    pub fn storm_packets(&self, node: &str) -> Result<u64, LabError> {
        let iface = CHAOS_BRIDGES[0];
        let text = self.exec(node, "ip", &["-j", "-s", "link", "show", "dev", iface])?;
        let bad = |detail: String| LabError::BadCounters {
            node: node.to_owned(),
            iface: iface.to_owned(),
            detail,
        };
        let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        doc[0]["stats64"]["rx"]["packets"]
            .as_u64()
            .ok_or_else(|| bad(format!("no stats64.rx.packets in {text}")))
    }

    /// Starts the storm outside the mesh again from a fresh broadcast: a
    /// seed sent before the bridges forwarded starts nothing.
    pub fn reseed_storm_outside_mesh(&self, node: &str) -> Result<(), LabError> {
        self.calm_storm_outside_mesh(node)?;
        self.storm_outside_mesh(node)
    }

    /// The process ids of the hogs this process runs (`ip netns exec`
    /// execs the hog, so they are the hogs themselves).
    pub fn hog_pids(&self) -> Vec<u32> {
        self.hogs.iter().map(Child::id).collect()
    }

    pub fn calm_storm_outside_mesh(&self, node: &str) -> Result<(), LabError> {
        let links = self.exec(node, "ip", &["-o", "link", "show"])?;
        for name in CHAOS_BRIDGES
            .iter()
            .chain(CHAOS_PAIRS.iter().map(|(x, _)| x))
        {
            if links.contains(&format!(": {name}:")) || links.contains(&format!(": {name}@")) {
                self.ip_in(node, &["link", "del", name])?;
            }
        }
        Ok(())
    }

    /// One broadcast ping out of `iface` (iputils `ping -b`): the first
    /// frame of a storm when the bridges form a loop.
    fn seed_broadcast(&self, node: &str, iface: &str) -> Result<(), LabError> {
        // An address on the bridge lets ping send from it; 10.79.0.0/24 is
        // used nowhere else in the lab.
        self.ip_in(node, &["addr", "add", "10.79.0.1/24", "dev", iface])?;
        let ns = self.namespace(node)?;
        // Replies never come (nobody has an address there): -c 1 -w 1
        // sends one broadcast and gives up after a second.
        let sent = run(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                "ping",
                "-b",
                "-c",
                "1",
                "-w",
                "1",
                "-I",
                iface,
                "10.79.0.255",
            ],
            QUICK,
        );
        match sent {
            Ok(_) | Err(CommandError::Failed { .. }) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// Starts `count` busy processes named `UniversalControl` in `node`'s
    /// namespace (copies of `yes` writing to /dev/null); they run until
    /// `stop_hogs` or teardown.
    pub fn start_hogs(&mut self, node: &str, count: usize) -> Result<(), LabError> {
        let hog = self.hog_binary()?;
        let ns = self.namespace(node)?.to_owned();
        for _ in 0..count {
            let child = Command::new("ip")
                .args(["netns", "exec", &ns])
                .arg(&hog)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|source| CommandError::Spawn {
                    command: format!("ip netns exec {ns} {HOG_NAME}"),
                    source,
                })?;
            self.hogs.push(child);
        }
        Ok(())
    }

    /// Ends every hog this process started.
    pub fn stop_hogs(&mut self) {
        for mut child in self.hogs.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn hog_binary(&self) -> Result<PathBuf, LabError> {
        let path = self.state_dir().join(HOG_NAME);
        if !path.exists() {
            let yes = ["/usr/bin/yes", "/bin/yes"]
                .into_iter()
                .find(|p| std::path::Path::new(p).exists())
                .unwrap_or("/usr/bin/yes");
            std::fs::copy(yes, &path).map_err(|source| LabError::File {
                path: path.clone(),
                source,
            })?;
        }
        Ok(path)
    }

    /// Splits the management network: each group after the first moves to
    /// a bridge of its own, so it hears only itself. Nodes not named stay
    /// with the first group (and with Prometheus and Alertmanager).
    pub fn partition(&self, groups: &[Vec<&str>]) -> Result<(), LabError> {
        let mgmt = self.plan.mgmt_namespace();
        for (k, group) in groups.iter().enumerate().skip(1) {
            let bridge = format!("{MGMT_BRIDGE}-p{k}");
            run(
                "ip",
                &["-n", &mgmt, "link", "add", &bridge, "type", "bridge"],
                QUICK,
            )?;
            run("ip", &["-n", &mgmt, "link", "set", &bridge, "up"], QUICK)?;
            for &id in group {
                let port = &self.plan.node(id)?.mgmt_port;
                run(
                    "ip",
                    &["-n", &mgmt, "link", "set", port, "master", &bridge],
                    QUICK,
                )?;
            }
        }
        Ok(())
    }

    /// Cuts `node` off from everything: its port on the management bridge
    /// goes down (the node's `mgmt0` loses its carrier, as when its
    /// management cable is pulled or its switch port dies) and every mesh
    /// cable is pulled out of its ports. Its meshd keeps running, alone.
    pub fn isolate(&self, node: &str) -> Result<(), LabError> {
        // Every port of the node at once (one `ip -batch`, microseconds):
        // one by one, its meshd would see its first cables go while it
        // still reaches the mesh, and report them as cable faults of a
        // live node, which they would then be.
        self.set_all_ports(node, "down")?;
        let mgmt = self.plan.mgmt_namespace();
        let port = &self.plan.node(node)?.mgmt_port;
        run("ip", &["-n", &mgmt, "link", "set", port, "down"], QUICK)?;
        Ok(())
    }

    /// `ip link set … STATE` on `node`'s management port and every mesh
    /// port, in one batch inside its namespace.
    fn set_all_ports(&self, node: &str, state: &str) -> Result<(), LabError> {
        let batch: String = std::iter::once(crate::plan::MGMT_IFACE.to_owned())
            .chain(self.peers_of(node).into_iter().map(mesh_iface))
            .map(|iface| format!("link set {iface} {state}\n"))
            .collect();
        let file = self.state_dir().join(format!("ports-{node}.batch"));
        std::fs::write(&file, batch).map_err(|source| LabError::File {
            path: file.clone(),
            source,
        })?;
        self.ip_in(node, &["-batch", &file.to_string_lossy()])
    }

    /// Undoes [`Lab::isolate`]: the management port and every cable of
    /// `node` up again.
    pub fn rejoin(&self, node: &str) -> Result<(), LabError> {
        let mgmt = self.plan.mgmt_namespace();
        let port = &self.plan.node(node)?.mgmt_port;
        run("ip", &["-n", &mgmt, "link", "set", port, "up"], QUICK)?;
        self.set_all_ports(node, "up")
    }

    /// Every other node (the lab is a full mesh: one cable to each).
    fn peers_of(&self, node: &str) -> Vec<&'static str> {
        self.ids().into_iter().filter(|&id| id != node).collect()
    }

    /// Joins the management network again.
    pub fn heal_partition(&self) -> Result<(), LabError> {
        let mgmt = self.plan.mgmt_namespace();
        for node in &self.plan.nodes {
            run(
                "ip",
                &[
                    "-n",
                    &mgmt,
                    "link",
                    "set",
                    &node.mgmt_port,
                    "master",
                    MGMT_BRIDGE,
                ],
                QUICK,
            )?;
        }
        let bridges = run(
            "ip",
            &["-n", &mgmt, "-o", "link", "show", "type", "bridge"],
            QUICK,
        )?;
        let prefix = format!("{MGMT_BRIDGE}-p");
        for line in bridges.lines() {
            let name = line.split(": ").nth(1).unwrap_or_default();
            if name.starts_with(&prefix) {
                run("ip", &["-n", &mgmt, "link", "del", name], QUICK)?;
            }
        }
        Ok(())
    }
}

impl Lab {
    /// Stops `node`'s meshd for `pattern.stopped` out of every
    /// `pattern.every` (SIGSTOP, SIGCONT) from a thread of this process
    /// until [`Lab::end_stalls`], teardown or drop, which leave it running.
    /// A long stop every second or so is a stalling host; a short one every
    /// 100 ms makes its timers run that late.
    pub fn start_stalls(&mut self, node: &str, pattern: StallPattern) -> Result<(), LabError> {
        let id = self.plan.node(node)?.id;
        if self.stalls.contains_key(id) {
            return Err(LabError::AlreadyStalled(id.to_owned()));
        }
        let pid = self.daemon_pid(id)?;
        self.stalls.insert(id, Stall::start(pid, pattern)?);
        Ok(())
    }

    /// Ends the stalls of `node`'s meshd (it runs on); what the driver did.
    /// Nothing to end is no error.
    pub fn end_stalls(&mut self, node: &str) -> Result<StallReport, LabError> {
        let id = self.plan.node(node)?.id;
        match self.stalls.remove(id) {
            Some(stall) => Ok(stall.end()?),
            None => Ok(StallReport::default()),
        }
    }
}
