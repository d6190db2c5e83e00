//! The verbs reader on a real RDMA device: Soft-RoCE (rxe0) in a Debian
//! VM, read by `meshctl doctor` through rdma-core's libibverbs, and
//! compared with `ibv_devinfo -v` and sysfs; a pulled cable, a library
//! whose query hangs, and a deleted device. One VM for every step (a
//! boot is the expensive part).

mod vm;

use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::time::Duration;

use meshd_domain::RdmaPortState;
use meshd_lab::vm::{CABLE_ADDRESSES, CABLE_IFACE, CABLE_NIC, Vm, Vms};
use meshd_platform::ibv::parse_ibv_devinfo;
use meshd_platform::linux::values::{parse_gid, parse_port_state, parse_rate_bps};
use serde_json::Value;

/// Carrier changes reach rxe within a second; TCG on shared cores is slow.
const SETTLE: Duration = Duration::from_secs(60);
const HANG_DIR: &str = "/opt/hang";

/// `meshctl doctor --json` (with `env` before it), which must end as
/// doctor does (0 or 1), never by a crash.
fn doctor(vm: &mut Vm, env: &str) -> Value {
    let out = vm
        .exec(
            &format!("{env} meshctl doctor --json"),
            Duration::from_secs(120),
        )
        .unwrap_or_else(|err| panic!("{err}"));
    assert!(
        out.code == 0 || out.code == 1,
        "meshctl doctor ended with {}:\n{}",
        out.code,
        out.text
    );
    serde_json::from_str(&out.text)
        .unwrap_or_else(|err| panic!("doctor --json is not JSON ({err}):\n{}", out.text))
}

fn facts(doctor: &Value) -> &Value {
    &doctor["nodes"][0]["facts"]
}

fn rxe_port(doctor: &Value) -> Option<&Value> {
    facts(doctor)["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == "rxe0/1")
}

fn blind_spots(doctor: &Value) -> Vec<String> {
    facts(doctor)["blind_spots"]
        .as_array()
        .map(|spots| {
            spots
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn check_status<'a>(doctor: &'a Value, name: &str) -> &'a str {
    doctor["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name))
        .and_then(|c| c["status"].as_str())
        .unwrap_or_else(|| panic!("no check {name}: {doctor:#}"))
}

fn failed_checks(doctor: &Value) -> Vec<String> {
    doctor["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "fail")
        .map(|c| c.to_string())
        .collect()
}

fn gids_of(port: &Value) -> Vec<(u32, Ipv6Addr)> {
    port["rdma"]["gids"]
        .as_array()
        .expect("gids")
        .iter()
        .map(|g| {
            let index = u32::try_from(g["index"].as_u64().expect("index")).expect("u32");
            (
                index,
                g["address"]
                    .as_str()
                    .expect("address")
                    .parse()
                    .expect("gid"),
            )
        })
        .collect()
}

/// The used GID entries of rxe0 port 1 in sysfs.
fn sysfs_gids(vm: &mut Vm) -> Vec<(u32, Ipv6Addr)> {
    let text = vm::run(
        vm,
        "cd /sys/class/infiniband/rxe0/ports/1/gids && for i in *; do echo \"$i $(cat $i)\"; done",
    );
    let mut gids: Vec<(u32, Ipv6Addr)> = text
        .lines()
        .filter_map(|line| {
            let (index, gid) = line.split_once(' ')?;
            Some((index.parse().ok()?, parse_gid(gid)?))
        })
        .collect();
    gids.sort_unstable();
    gids
}

fn sysfs_state(vm: &mut Vm) -> Option<RdmaPortState> {
    parse_port_state(&vm::run(vm, "cat /sys/class/infiniband/rxe0/ports/1/state"))
}

/// The hanging library, compiled for the guest with this toolchain.
fn hanging_library(dir: &std::path::Path) -> PathBuf {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vm/hanging_verbs.rs");
    let out = dir.join("libibverbs.so.1");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let status = std::process::Command::new(rustc)
        .args(["--edition", "2024", "--crate-type", "cdylib", "-O", "-o"])
        .arg(&out)
        .arg(source)
        .status()
        .expect("rustc runs");
    assert!(status.success(), "rustc {source}: {status}");
    out
}

#[test]
fn the_verbs_reader_reads_soft_roce_as_ibv_devinfo_and_sysfs_do() {
    let _serial = meshd_test_lock::exclusive();
    if !vm::can_run() {
        return;
    }
    let build = tempfile::tempdir().expect("tempdir");
    let hanging = hanging_library(build.path());
    let image = vm::image(&[(format!("{HANG_DIR}/libibverbs.so.1"), hanging)]);
    let mut vms = Vms::one(&image).unwrap_or_else(|err| panic!("{err}"));
    let a = vms.vm("a");
    vm::run(
        a,
        &format!("rdma link add rxe0 type rxe netdev {CABLE_IFACE}"),
    );

    // The verbs library reads the port; sysfs agrees; no tool missing
    // (BusyBox's `ip` has no -j) fails a check.
    let seen = doctor(a, "");
    let port = rxe_port(&seen).unwrap_or_else(|| panic!("no rxe0/1: {seen:#}"));
    assert_eq!(port["rdma"]["reader"], "verbs", "{port:#}");
    assert_eq!(port["rdma"]["state"], "active");
    assert_eq!(port["iface"], CABLE_IFACE);
    let mapped: Ipv6Addr = format!("::ffff:{}", CABLE_ADDRESSES[0]).parse().unwrap();
    let gids = gids_of(port);
    assert!(gids.contains(&(1, mapped)), "GID[1] is {mapped}: {gids:?}");
    let spots = blind_spots(&seen);
    assert!(
        spots
            .iter()
            .all(|s| !s.contains("disagree") && !s.starts_with("verbs:")),
        "{spots:?}"
    );
    assert!(
        spots.iter().any(|s| s.contains("BusyBox")),
        "the missing JSON output is a blind spot: {spots:?}"
    );
    assert_eq!(failed_checks(&seen), Vec::<String>::new());
    assert_eq!(check_status(&seen, "rdma_port_active"), "pass");
    assert_eq!(check_status(&seen, "gid_matches_address"), "skipped");

    // The same as ibv_devinfo -v and sysfs: state, speed and width, GIDs.
    let devinfo = parse_ibv_devinfo(&vm::run(a, "ibv_devinfo -v -d rxe0"));
    let reference = &devinfo[0].ports[0];
    assert_eq!(reference.state, RdmaPortState::Active);
    assert_eq!(reference.gids, gids, "ibv_devinfo -v and meshd's GIDs");
    assert_eq!(sysfs_gids(a), gids, "sysfs and meshd's GIDs");
    assert_eq!(
        reference.active_speed_bps(),
        port["rdma"]["active_speed_bps"].as_u64(),
        "width × lane speed"
    );
    let rate = parse_rate_bps(&vm::run(a, "cat /sys/class/infiniband/rxe0/ports/1/rate"));
    assert_eq!(rate, port["rdma"]["active_speed_bps"].as_u64());
    assert_eq!(
        port["rdma_node_guid"].as_str(),
        Some(devinfo[0].node_guid.as_str())
    );

    // With iproute2's `ip` the addresses are known, and the GID check passes.
    let full = doctor(
        a,
        &format!("PATH={}:$PATH", meshd_lab::vm::image::IPROUTE2_DIR),
    );
    assert_eq!(check_status(&full, "link_addressed"), "pass", "{full:#}");
    assert_eq!(check_status(&full, "gid_matches_address"), "pass");
    assert_eq!(failed_checks(&full), Vec::<String>::new());

    // A pulled cable is PORT_DOWN through both readers.
    a.set_link(CABLE_NIC, false)
        .unwrap_or_else(|err| panic!("{err}"));
    vm::wait_for(
        a,
        "cat /sys/class/infiniband/rxe0/ports/1/state",
        "rxe0 down in sysfs",
        SETTLE,
        |text| parse_port_state(text) == Some(RdmaPortState::Down),
    );
    let pulled = doctor(a, "");
    let port = rxe_port(&pulled).expect("rxe0/1");
    assert_eq!(port["rdma"]["reader"], "verbs");
    assert_eq!(port["rdma"]["state"], "down", "{port:#}");
    assert!(blind_spots(&pulled).iter().all(|s| !s.contains("disagree")));
    let devinfo = parse_ibv_devinfo(&vm::run(a, "ibv_devinfo -d rxe0"));
    assert_eq!(devinfo[0].ports[0].state, RdmaPortState::Down);
    assert_eq!(check_status(&pulled, "rdma_port_active"), "fail");
    a.set_link(CABLE_NIC, true)
        .unwrap_or_else(|err| panic!("{err}"));
    vm::wait_for(
        a,
        "cat /sys/class/infiniband/rxe0/ports/1/state",
        "rxe0 active again",
        SETTLE,
        |text| parse_port_state(text) == Some(RdmaPortState::Active),
    );
    assert_eq!(sysfs_state(a), Some(RdmaPortState::Active));

    // A library whose port query hangs: doctor still answers, from sysfs,
    // and says why.
    let hung = doctor(a, &format!("LD_LIBRARY_PATH={HANG_DIR}"));
    let port = rxe_port(&hung).expect("rxe0/1 from sysfs");
    assert_eq!(port["rdma"]["reader"], "sysfs", "{port:#}");
    assert_eq!(port["rdma"]["state"], "active");
    let spots = blind_spots(&hung);
    assert!(
        spots
            .iter()
            .any(|s| s.starts_with("verbs:") && s.contains("did not finish within")),
        "{spots:?}"
    );

    // A deleted device disappears, and nothing crashes.
    vm::run(a, "rdma link delete rxe0");
    let deleted = doctor(a, "");
    assert!(rxe_port(&deleted).is_none(), "{deleted:#}");
    assert_eq!(facts(&deleted)["rdma_enabled"], false);
}
