//! Round trips over one Soft-RoCE cable between two VMs, side by side:
//! meshd's RDMA probe and its UDP probe (both ends of meshd running, the
//! RDMA probe on), rdma-core's own UC ping-pong and BusyBox's ping on
//! the same cable. For `lab-bench rdma`; figures only.

use std::path::Path;
use std::time::{Duration, Instant};

use super::mesh::{self, NODES};
use super::{CABLE_ADDRESSES, CABLE_IFACE, Image, Vm, VmError, Vms, cache_beside};
use crate::{Binaries, LabError};

/// How long the probes run before sampling starts: the UDP probe's RTT
/// window (10 s) full and the RDMA probe connected.
const WARMUP: Duration = Duration::from_secs(15);
const SETTLE: Duration = Duration::from_secs(180);
/// ibv_uc_pingpong's exchanges per run (16-byte messages).
const PINGPONG_ITERATIONS: u32 = 1000;

#[derive(Debug, thiserror::Error)]
pub enum RttError {
    #[error(transparent)]
    Vm(#[from] VmError),
    #[error(transparent)]
    Lab(#[from] LabError),
    #[error("{0}")]
    Run(String),
}

/// One way of measuring the round trip and its samples, in microseconds.
#[derive(Debug, Clone)]
pub struct RttRow {
    pub path: &'static str,
    pub how: String,
    pub samples_us: Vec<f64>,
}

/// Boots the pair, starts meshd on both with the RDMA probe on, and
/// samples for `seconds`: meshd's last RDMA round trip and its UDP p50
/// once a second (from VM a's metrics), then ibv_uc_pingpong and ping.
pub fn rdma_beside_udp(binaries: &Binaries, seconds: u64) -> Result<Vec<RttRow>, RttError> {
    let files_dir = tempfile::tempdir().map_err(|err| RttError::Run(err.to_string()))?;
    let profile = binaries.meshd.parent().unwrap_or(Path::new("."));
    let files = mesh::mesh_files(binaries, files_dir.path())?;
    let image = Image::build(&cache_beside(profile), binaries, &files)?;
    let mut vms = Vms::pair(&image)?;
    for id in NODES {
        let vm = vms.vm(id);
        vm.run(&format!("rdma link add rxe0 type rxe netdev {CABLE_IFACE}"))?;
        mesh::start_meshd(vm, "always")?;
    }
    let a = vms.vm("a");
    wait_for_rdma_answers(a)?;
    std::thread::sleep(WARMUP);
    let mut rdma = Vec::new();
    let mut udp = Vec::new();
    let mut sent_before = None;
    for _ in 0..seconds {
        let text = mesh::metrics(a)?;
        let figure = |name| mesh::cable_metric(&text, name);
        rdma.extend(figure("meshd_link_rdma_probe_rtt_seconds").map(|s| s * 1e6));
        udp.extend(figure("meshd_link_rtt_p50_seconds").map(|s| s * 1e6));
        let sent = figure("meshd_link_rdma_probes_total");
        sent_before = sent_before.or(sent);
        std::thread::sleep(Duration::from_secs(1));
    }
    // The RDMA figure is the last answered probe: samples count only if
    // probes kept being answered meanwhile.
    let text = mesh::metrics(a)?;
    let sent_after = mesh::cable_metric(&text, "meshd_link_rdma_probes_total");
    if sent_after <= sent_before {
        return Err(RttError::Run(format!(
            "the RDMA probe did not run while sampling ({sent_before:?} → {sent_after:?} probes)"
        )));
    }
    let pingpong = uc_pingpong(&mut vms)?;
    let ping = ping(vms.vm("a"), seconds)?;
    Ok(vec![
        RttRow {
            path: "RDMA (UC, rxe)",
            how: "meshd RDMA probe, last round trip, sampled once a second".to_owned(),
            samples_us: rdma,
        },
        RttRow {
            path: "IP (UDP)",
            how: "meshd UDP probe, p50 over 10 s, sampled once a second".to_owned(),
            samples_us: udp,
        },
        RttRow {
            path: "RDMA (UC, rxe)",
            how: format!(
                "ibv_uc_pingpong -s 16 -n {PINGPONG_ITERATIONS}, mean (rdma-core's reference)"
            ),
            samples_us: pingpong,
        },
        RttRow {
            path: "IP (ICMP)",
            how: format!("BusyBox ping -c {seconds}, each reply"),
            samples_us: ping,
        },
    ])
}

fn wait_for_rdma_answers(vm: &mut Vm) -> Result<(), RttError> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let text = mesh::metrics(vm).unwrap_or_default();
        if mesh::cable_metric(&text, "meshd_link_rdma_probe_rtt_seconds").is_some() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(RttError::Run(format!(
                "no answered RDMA probe within {SETTLE:?}; meshd's log:\n{}",
                mesh::log_tail(vm)
            )));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// rdma-core's UC ping-pong over the cable: b serves, a connects; the
/// mean round trip of three runs ("… usec/iter" is one way there and back).
fn uc_pingpong(vms: &mut Vms) -> Result<Vec<f64>, RttError> {
    let args = format!("-d rxe0 -g 1 -s 16 -n {PINGPONG_ITERATIONS}");
    let mut means = Vec::new();
    for _ in 0..3 {
        vms.vm("b").run(&format!(
            "setsid ibv_uc_pingpong {args} </dev/null >/tmp/pingpong.log 2>&1 &"
        ))?;
        std::thread::sleep(Duration::from_secs(2));
        let out = vms.vm("a").exec(
            &format!("ibv_uc_pingpong {args} {}", CABLE_ADDRESSES[1]),
            Duration::from_secs(120),
        )?;
        let mean = parse_usec_per_iter(&out.text).ok_or_else(|| {
            RttError::Run(format!(
                "ibv_uc_pingpong printed no usec/iter:\n{}",
                out.text
            ))
        })?;
        means.push(mean);
    }
    Ok(means)
}

/// "8192000 bytes in 0.05 seconds = 1310.72 Mbit/sec\n1000 iters in 0.05
/// seconds = 50.00 usec/iter" → 50.0.
pub fn parse_usec_per_iter(text: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.strip_suffix(" usec/iter"))
        .filter_map(|line| line.rsplit(' ').next())
        .find_map(|value| value.parse().ok())
}

fn ping(vm: &mut Vm, count: u64) -> Result<Vec<f64>, RttError> {
    let out = vm.run(&format!("ping -c {count} {}", CABLE_ADDRESSES[1]))?;
    Ok(parse_ping_ms(&out).into_iter().map(|ms| ms * 1e3).collect())
}

/// The `time=… ms` of every reply line.
pub fn parse_ping_ms(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|line| line.split("time=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|value| value.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_tools_outputs_are_read() {
        let pingpong = "  local address:  LID 0x0000, QPN 0x000011, PSN 0x3c2d, GID ::ffff:10.0.0.1\n\
                        8192000 bytes in 0.05 seconds = 1310.72 Mbit/sec\n\
                        1000 iters in 0.05 seconds = 50.00 usec/iter\n";
        assert_eq!(parse_usec_per_iter(pingpong), Some(50.0));
        assert_eq!(parse_usec_per_iter("Failed to modify QP to RTR"), None);
        let ping = "PING 10.0.0.2 (10.0.0.2): 56 data bytes\n\
                    64 bytes from 10.0.0.2: seq=0 ttl=64 time=1.234 ms\n\
                    64 bytes from 10.0.0.2: seq=1 ttl=64 time=0.900 ms\n\
                    --- 10.0.0.2 ping statistics ---\n";
        assert_eq!(parse_ping_ms(ping), vec![1.234, 0.9]);
    }
}
