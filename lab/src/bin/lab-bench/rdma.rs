//! `lab-bench rdma`: the RDMA probe's round trip beside the UDP probe's,
//! between two VMs.

use anyhow::bail;
use meshd_lab::Binaries;

use crate::percentile;

#[allow(clippy::print_stdout)]
pub(crate) fn run(seconds: u64) -> anyhow::Result<()> {
    if let Some(reason) = meshd_lab::vm::missing_prerequisite() {
        bail!("VMs cannot run here: {reason}");
    }
    let rows = meshd_lab::vm::rtt::rdma_beside_udp(&Binaries::beside_current_exe()?, seconds)?;
    println!("| path | measured by | samples | min | median | max |");
    println!("|---|---|---:|---:|---:|---:|");
    for row in rows {
        let mut sorted = row.samples_us.clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "| {} | {} | {} | {:.0} µs | {:.0} µs | {:.0} µs |",
            row.path,
            row.how,
            sorted.len(),
            sorted.first().copied().unwrap_or(f64::NAN),
            percentile(&sorted, 50.0),
            sorted.last().copied().unwrap_or(f64::NAN),
        );
    }
    Ok(())
}
