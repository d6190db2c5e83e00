//! meshd's command line: what the binary parses, and what `meshd install`
//! renders into shell completions and man pages.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::demo;
use crate::logging::LogFormat;

/// Exit codes of `meshd`: done (a graceful stop, a valid config, an
/// install carried out).
pub const EXIT_OK: u8 = 0;
/// Failed: an invalid config, a node that could not start or run, an
/// install refused.
pub const EXIT_FAILED: u8 = 1;
/// The command line is wrong (sysexits' EX_USAGE), as for meshctl.
pub const EXIT_USAGE: u8 = 64;

const EXIT_CODES: &str = "\
Exit codes:
  0   done (stopped gracefully, config valid, installed)
  1   failed (invalid config, could not start, install refused)
  64  wrong usage (unknown flag, bad value)";

#[derive(Debug, Parser)]
#[command(
    name = "meshd",
    version,
    about = "Watches an RDMA / Thunderbolt mesh with its peers",
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent until SIGINT or SIGTERM.
    Run {
        /// TOML config file; without it, a single-node mesh named after this
        /// host on the default ports.
        #[arg(long, short, env = "MESHD_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "human")]
        log_format: LogFormat,
        /// Log level when RUST_LOG is unset.
        #[arg(long, default_value = "info")]
        log_level: String,
        /// Write the log to this file instead of stderr, rotated past 10 MiB
        /// with four older files kept (the launchd service uses it).
        #[arg(long)]
        log_file: Option<PathBuf>,
    },
    /// Check a config file without starting; exits 1 and names every problem
    /// with its line when it is not valid.
    CheckConfig {
        file: PathBuf,
        /// Check a template (such as meshd.example.toml): every rule, but not
        /// that the TLS files it names exist here.
        #[arg(long)]
        template: bool,
    },
    /// Run a whole mesh of N nodes in this process on loopback, and inject
    /// faults with commands on standard input (type `help`).
    Demo {
        /// Nodes in the mesh, 2 to 8; named a, b, c, ...
        #[arg(long, default_value_t = demo::plan::DEFAULT_NODES)]
        nodes: usize,
        /// Name the nodes instead: 2 to 8 comma-separated ids, which set the
        /// node count (e.g. --ids mac-studio-1,mac-studio-2,mac-studio-3).
        #[arg(long, value_delimiter = ',', conflicts_with = "nodes")]
        ids: Vec<String>,
        /// First of the ports the demo uses on 127.0.0.1 (up to base + 387):
        /// node k's gRPC is base+k, its metrics base+10+k.
        #[arg(long, default_value_t = demo::plan::DEFAULT_BASE_PORT)]
        base_port: u16,
        #[arg(long, value_enum, default_value = "human")]
        log_format: LogFormat,
        /// Log level when RUST_LOG is unset; logs go to stderr, the demo's
        /// own lines to stdout.
        #[arg(long, default_value = "warn")]
        log_level: String,
    },
    /// Install meshd as a system service (a LaunchDaemon on macOS, a
    /// systemd unit on Linux), write a default config if there is none
    /// (never overwriting one), and start it. Needs root.
    Install {
        /// Print the files and commands, change nothing (no root needed).
        #[arg(long)]
        dry_run: bool,
        /// Config file the service reads [default: /usr/local/etc/meshd/meshd.toml
        /// on macOS, /etc/meshd/meshd.toml on Linux].
        #[arg(long)]
        config: Option<PathBuf>,
        /// The meshd executable the service runs [default: this one].
        #[arg(long)]
        binary: Option<PathBuf>,
    },
    /// Stop the service and remove its plist or unit; the config and the
    /// logs are kept. Needs root.
    Uninstall {
        /// Print the steps, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// The command line as clap describes it, for completions and man pages.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        super::command().debug_assert();
    }
}
