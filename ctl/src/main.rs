//! `meshctl`: ask a meshd node what is broken in the mesh.
//!
//! Exit codes are a contract for scripts: 0 when what was asked about is
//! healthy, 1 when something is degraded or down, 2 when the daemon could
//! not be reached or gave an answer that makes no sense.

mod client;
mod status;
mod watch;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::client::{Target, Unreachable};

#[derive(Debug, Parser)]
#[command(
    name = "meshctl",
    version,
    about = "Ask a meshd node what is broken in the mesh"
)]
struct Cli {
    /// meshd gRPC address, HOST:PORT or http://HOST:PORT.
    #[arg(long, global = true, env = "MESHCTL_ADDR", default_value = client::DEFAULT_ADDR)]
    addr: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The mesh as the answering node sees it: quorum, nodes, a matrix of
    /// link states, active alarms.
    Status {
        /// Print the stable JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Stream verdict changes (links down, degraded, flapping, recovered;
    /// nodes down and up; quorum lost and regained; alarms) until Ctrl-C.
    Watch {
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The answer was obtained and says the mesh is not healthy.
const EXIT_UNHEALTHY: u8 = 1;
/// The daemon could not be reached or its answer was unusable.
const EXIT_UNREACHABLE: u8 = 2;

#[allow(clippy::print_stderr)]
fn main() -> ExitCode {
    let cli = Cli::parse();
    let target = match Target::parse(&cli.addr) {
        Ok(target) => target,
        Err(err) => {
            eprintln!("meshctl: {err}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("meshctl: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Status { json } => status::run(&target, json).await,
            Command::Watch { json } => watch::run(&target, json).await.map(|()| true),
        }
    });
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_UNHEALTHY),
        Err(Unreachable(message)) => {
            eprintln!("meshctl: {message}");
            ExitCode::from(EXIT_UNREACHABLE)
        }
    }
}
