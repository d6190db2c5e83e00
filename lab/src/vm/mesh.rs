//! meshd running in a pair of VMs: the mesh's certificates and each
//! node's config (made on the host, then packed into the image), starting
//! and stopping meshd in a guest, and reading its status, metrics and
//! queue pairs there. Shared by the RDMA probe's test and its benchmark.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{CABLE_ADDRESSES, CABLE_IFACE, MGMT_ADDRESSES, Vm, VmError, image::IPROUTE2_DIR};
use crate::command::{self, QUICK};
use crate::status::{LinkView, Status};
use crate::{Binaries, LabError};

/// Where the configs and certificates are in the guests.
pub const CONFIG_DIR: &str = "/etc/meshd";
/// The mesh listener on the management network.
pub const MESH_PORT: u16 = 7430;
/// meshd's default metrics listener (127.0.0.1).
pub const METRICS_URL: &str = "http://127.0.0.1:9420/metrics";
pub const NODES: [&str; 2] = ["a", "b"];
/// The RDMA modes each node has a config for: `{id}-{mode}.toml`.
pub const RDMA_MODES: [&str; 2] = ["always", "idle"];

/// The mesh's CA and both nodes' certificates, made with `meshctl certs`
/// as an operator would, and a config per node and RDMA mode (the peer on
/// the management network, the cable a link), written under `dir`; the
/// image's extra files (guest path, host path).
pub fn mesh_files(binaries: &Binaries, dir: &Path) -> Result<Vec<(String, PathBuf)>, LabError> {
    let tls = dir.join("tls");
    let tls_text = tls.to_string_lossy().into_owned();
    let meshctl = binaries.meshctl.to_string_lossy().into_owned();
    command::run(
        &meshctl,
        &["certs", "--dir", &tls_text, "init", "--name", "meshvm CA"],
        QUICK,
    )?;
    command::run(
        &meshctl,
        &["certs", "--dir", &tls_text, "issue", NODES[0], NODES[1]],
        QUICK,
    )?;
    let mut files = vec![(format!("{CONFIG_DIR}/tls/ca.pem"), tls.join("ca.pem"))];
    for (index, id) in NODES.iter().enumerate() {
        for file in [format!("{id}.pem"), format!("{id}-key.pem")] {
            files.push((format!("{CONFIG_DIR}/tls/{file}"), tls.join(&file)));
        }
        for mode in RDMA_MODES {
            let name = format!("{id}-{mode}.toml");
            let path = dir.join(&name);
            std::fs::write(&path, config(index, mode)).map_err(|source| LabError::File {
                path: path.clone(),
                source,
            })?;
            check_config(binaries, id, &path)?;
            files.push((format!("{CONFIG_DIR}/{name}"), path));
        }
    }
    Ok(files)
}

/// `meshd check-config` on the host, before any VM boots: the guests'
/// paths (relative to the config) exist beside it here too.
fn check_config(binaries: &Binaries, id: &str, path: &Path) -> Result<(), LabError> {
    let meshd = binaries.meshd.to_string_lossy();
    let checked = command::run_any(&meshd, &["check-config", &path.to_string_lossy()], QUICK)?;
    if checked.success {
        Ok(())
    } else {
        Err(LabError::BadConfig {
            node: id.to_owned(),
            problems: format!("{}{}", checked.stdout, checked.stderr),
        })
    }
}

/// The guests emulate every instruction (TCG) on shared cores, where a
/// debug meshd probing 10 times a second takes most of its VM's CPU and
/// runs its timers late (which holds link verdicts). Probes at 2 Hz and
/// a 3 s silence for down keep it well clear of that; the RDMA probe's
/// pace (once a second) is its own.
const EMULATED_PACE: &str = "interval = \"500ms\"\nmtu_interval = \"5s\"\ntimeout = \"1s\"\n\n\
                             [thresholds]\ndown_after = \"3s\"\n";

/// Node `NODES[index]`'s config with `probe.rdma = mode`.
fn config(index: usize, mode: &str) -> String {
    let other = 1 - index;
    format!(
        "# meshd in test VM {id}, written by the lab.\n\
         [node]\nid = \"{id}\"\n\n\
         [listen]\nmesh = \"{mine}:{MESH_PORT}\"\n\n\
         [tls]\nca = \"tls/ca.pem\"\ncert = \"tls/{id}.pem\"\nkey = \"tls/{id}-key.pem\"\n\n\
         [[peers]]\nid = \"{peer}\"\naddress = \"{peer_mgmt}:{MESH_PORT}\"\n\n\
         [[links]]\npeer = \"{peer}\"\nlocal_iface = \"{CABLE_IFACE}\"\n\
         local_address = \"{local}\"\npeer_address = \"{remote}\"\n\n\
         [probe]\nrdma = \"{mode}\"\n{EMULATED_PACE}",
        id = NODES[index],
        mine = MGMT_ADDRESSES[index],
        peer = NODES[other],
        peer_mgmt = MGMT_ADDRESSES[other],
        local = CABLE_ADDRESSES[index],
        remote = CABLE_ADDRESSES[other],
    )
}

/// Starts meshd in `vm` with its config for `mode`, in the background and
/// its own session (the command channel's `timeout` must not take it
/// along), iproute2's `ip` first on its PATH; its log in
/// `/var/log/meshd.log`.
pub fn start_meshd(vm: &mut Vm, mode: &str) -> Result<(), VmError> {
    let id = vm.name.clone();
    vm.run(&format!(
        "PATH={IPROUTE2_DIR}:$PATH setsid meshd run --config {CONFIG_DIR}/{id}-{mode}.toml \
         </dev/null >>/var/log/meshd.log 2>&1 & echo $! >/run/meshd.pid"
    ))
    .map(drop)
}

/// Stops meshd in `vm` (SIGTERM: it closes its queue pairs) and waits
/// for it to end.
pub fn stop_meshd(vm: &mut Vm) -> Result<(), VmError> {
    vm.exec(
        "pid=$(cat /run/meshd.pid); kill -TERM $pid; \
         while kill -0 $pid 2>/dev/null; do sleep 0.2; done",
        Duration::from_secs(60),
    )
    .map(drop)
}

/// `vm`'s status, when meshctl answers with one.
pub fn status(vm: &mut Vm) -> Result<Option<Status>, VmError> {
    let out = vm.exec("meshctl status --json", Duration::from_secs(60))?;
    Ok(Status::parse(&out.text).ok())
}

/// `vm`'s view of the cable, when it has one.
pub fn cable(vm: &mut Vm) -> Result<Option<LinkView>, VmError> {
    Ok(status(vm)?.and_then(|s| s.link(NODES[0], NODES[1]).cloned()))
}

/// `vm`'s metrics text.
pub fn metrics(vm: &mut Vm) -> Result<String, VmError> {
    vm.run(&format!("wget -q -O - {METRICS_URL}"))
}

/// The value of `name` for the cable (the only peer) in a metrics text.
pub fn cable_metric(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|line| line.starts_with(&format!("{name}{{peer=")))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// The numbers of the queue pairs meshd's threads hold in `vm`, as the
/// kernel's resource tracking shows them (`comm` is the creating thread's
/// name: `meshd-rdma-prob…`).
pub fn meshd_queue_pairs(vm: &mut Vm) -> Result<Vec<String>, VmError> {
    Ok(vm
        .run("rdma resource show qp")?
        .lines()
        .filter(|line| line.contains("comm meshd"))
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "lqpn")?;
            words.next().map(str::to_owned)
        })
        .collect())
}

/// The last lines of meshd's log in `vm`, for failure messages.
pub fn log_tail(vm: &mut Vm) -> String {
    vm.exec("tail -n 40 /var/log/meshd.log", Duration::from_secs(30))
        .map(|o| o.text)
        .unwrap_or_else(|err| format!("(no log: {err})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_probes_the_other_over_the_cable_with_its_mode() {
        let a = config(0, "idle");
        assert!(a.contains("id = \"a\""));
        assert!(a.contains("local_address = \"10.0.0.1\"\npeer_address = \"10.0.0.2\""));
        assert!(a.contains("address = \"10.0.1.2:7430\""));
        assert!(a.contains("rdma = \"idle\""));
        let b = config(1, "always");
        assert!(b.contains("local_address = \"10.0.0.2\"\npeer_address = \"10.0.0.1\""));
        assert!(b.contains("mesh = \"10.0.1.2:7430\""));
    }

    #[test]
    fn the_cable_metric_is_read_from_the_exposition() {
        let text = "# HELP x\nmeshd_link_rdma_probes_total{peer=\"b\",iface=\"eth0\"} 42\n\
                    meshd_link_rdma_probes_total_other 1\n";
        assert_eq!(
            cable_metric(text, "meshd_link_rdma_probes_total"),
            Some(42.0)
        );
        assert_eq!(
            cable_metric(text, "meshd_link_rdma_probe_rtt_seconds"),
            None
        );
    }
}
