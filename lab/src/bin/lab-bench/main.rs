//! The lab's benchmarks (ARCHITECTURE.md, Targets), each printing a table for
//! BENCHMARKS.md. Figures only: nothing here is asserted by a test.
//!
//! Run as root from a release build, so meshd and meshctl are found beside
//! this binary:
//!
//! ```sh
//! cargo build --release -p meshd -p meshctl -p meshd-lab
//! sudo target/release/lab-bench detection
//! ```
//!
//! One module per benchmark; `cpu`, `latency` and `metrics` hold the
//! measurements and tables more than one of them takes.

mod accuracy;
mod chaos;
mod cost;
mod cpu;
mod detection;
mod hostile;
mod job;
mod latency;
mod metrics;
mod rdma;

use std::time::Duration;

use anyhow::bail;
use clap::{Parser, Subcommand};
use meshd_lab::{Binaries, Lab, Options, Plan, Status};

const SETTLE: Duration = Duration::from_secs(60);

#[derive(Debug, Parser)]
#[command(name = "lab-bench", about = "Benchmarks on the Linux mesh lab (root)")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Cable pulled → link-down verdict on every node, and → the alert
    /// received by Alertmanager (4 nodes, cables in turn).
    Detection {
        #[arg(long, default_value_t = 24)]
        trials: usize,
    },
    /// Link or node verdicts not caused by an injected fault while CPU
    /// hogs, daemon restarts and storms outside the mesh come and go.
    Chaos {
        #[arg(long, default_value_t = 300)]
        seconds: u64,
        /// Run the rank emulator on every node throughout, and count any
        /// job alarm (job_hung, job_off_mesh, …) as false too.
        #[arg(long)]
        job: bool,
    },
    /// CPU (% of one core), main-thread wake-ups, engine looks and resident
    /// memory of every daemon, beside smokeping_prober pinging the same
    /// peers every 100 ms where it is installed, and the series count of
    /// one node.
    Cost {
        #[arg(long, default_value_t = 7)]
        nodes: usize,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long, default_value_t = 10)]
        warmup: u64,
    },
    /// meshd's RTT p50 on one cable against iputils ping on the same cable,
    /// side by side.
    Accuracy {
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// What hostile clients cost one meshd on loopback (issue 14): an
    /// 8000-rank GetHostfile, 1100 idle connections at 1024 open files, and
    /// `doctor --from` a bundle linked to /dev/zero. No root, no lab.
    Hostile {
        /// The scenario bundle the /dev/zero link is planted in.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../platform/tests/scenarios/macbook-m5-max-rdma-disabled"))]
        scenario: std::path::PathBuf,
    },
    /// The RDMA probe's round trip beside the UDP probe's on one Soft-RoCE
    /// cable between two VMs (qemu, no root), with rdma-core's UC
    /// ping-pong and ping on the same cable for reference.
    Rdma {
        #[arg(long, default_value_t = 30)]
        seconds: u64,
    },
    /// An emulated MLX job on 3 nodes: a rank stopped or killed (in turn,
    /// node by node) → `job_hung` about its node on the first node and on
    /// every node; then meshd's CPU with no job and with the job running.
    Job {
        #[arg(long, default_value_t = 12)]
        trials: usize,
        /// Each CPU window, without and with the job.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long, default_value_t = 10)]
        warmup: u64,
    },
    /// Helper run inside a namespace: print the body of GET /metrics at ADDR.
    #[command(hide = true)]
    FetchMetrics { addr: String },
    /// Helper: run a command as the only child and print its peak RSS.
    #[command(hide = true)]
    PeakRss {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
}

/// A lab called `name` of `nodes` nodes, once its whole mesh is up.
fn lab(name: &str, nodes: usize, options: &Options) -> anyhow::Result<Lab> {
    if let Some(reason) = meshd_lab::missing_prerequisite() {
        bail!("the lab cannot run here: {reason}");
    }
    let lab = Lab::up(
        Plan::new(name, nodes)?,
        Binaries::beside_current_exe()?,
        options,
    )?;
    lab.wait_all("the whole mesh up", SETTLE, Status::all_up)?;
    Ok(lab)
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().bench {
        Bench::Detection { trials } => detection::run(trials),
        Bench::Chaos { seconds, job } => chaos::run(seconds, job),
        Bench::Cost {
            nodes,
            seconds,
            warmup,
        } => cost::run(nodes, seconds, warmup),
        Bench::Accuracy { seconds } => accuracy::run(seconds),
        Bench::Hostile { scenario } => hostile::run(&scenario),
        Bench::Rdma { seconds } => rdma::run(seconds),
        Bench::Job {
            trials,
            seconds,
            warmup,
        } => job::run(trials, seconds, warmup),
        Bench::FetchMetrics { addr } => metrics::fetch(&addr),
        Bench::PeakRss { command } => {
            std::process::exit(meshd_lab::hostile::peak_rss(&command)?);
        }
    }
}
