//! What one sample of this host's process table costs the CPU watcher
//! (Linux: a listing of `/proc`, and one `pread` through the fds it keeps
//! per process that is due: the busy ones every sample, the idle ones one
//! sample in four). Samples are taken back to back, as at a steady tick.
//!
//! `cargo bench -p meshd --bench process_scan` (option: `--runs N`, 1000 by
//! default). Prints a table; asserts nothing.

use std::time::{Duration, Instant};

use meshd::watch::processes::ProcessTable;

fn runs() -> Result<u32, String> {
    let mut args = std::env::args().skip(1);
    let mut runs = 1000;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => {
                runs = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--runs takes a positive number")?;
            }
            // cargo bench passes `--bench`.
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(runs)
}

fn run(runs: u32) -> Result<(), String> {
    let mut table = ProcessTable::new().map_err(|e| format!("no process table: {e}"))?;
    // The first sample resolves every process's name and command line.
    let processes = table
        .sample(std::time::Instant::now())
        .map_err(|e| e.to_string())?
        .len();
    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        table
            .sample(std::time::Instant::now())
            .map_err(|e| e.to_string())?;
        times.push(start.elapsed());
    }
    times.sort_unstable();
    let mean = times.iter().sum::<Duration>() / runs;
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    println!("| processes | samples | mean | p50 | p99 | max |\n|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {processes} | {runs} | {mean:?} | {:?} | {:?} | {:?} |",
        at(0.5),
        at(0.99),
        at(1.0)
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    match runs().and_then(run) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("process_scan bench: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
