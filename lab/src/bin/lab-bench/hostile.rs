//! `lab-bench hostile`: what hostile clients cost one meshd on loopback.

use meshd_lab::Binaries;

#[allow(clippy::print_stdout)]
pub(crate) fn run(scenario: &std::path::Path) -> anyhow::Result<()> {
    use meshd_lab::hostile;
    let bin = Binaries::beside_current_exe()?;
    let mut rows = hostile::dev_zero_bundle(&bin, scenario)?;
    rows.extend(hostile::hostfile(&bin)?);
    rows.extend(hostile::idle_flood(&bin)?);
    println!("| what | measured | target |");
    println!("|---|---|---|");
    for row in rows {
        println!("| {} | {} | {} |", row.what, row.figure, row.target);
    }
    Ok(())
}
