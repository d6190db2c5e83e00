//! `meshctl`: ask a meshd node what is broken in the mesh.
//!
//! Exit codes are a contract for scripts, one table for every command
//! (`meshctl::cli`, and `meshctl --help`): 0 healthy or done, 1 unhealthy
//! or refused, 2 meshd unreachable, 64 wrong usage.

mod bundle;
mod certs;
mod checklist;
mod client;
mod doctor;
mod history;
mod hostfile;
mod jobs;
mod layout;
mod node_config;
mod outcome;
mod plan;
mod status;
mod watch;

use std::process::ExitCode;

use clap::Parser;
use meshctl::cli::{CertsCommand, Cli, Command, EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE};
use meshd_domain::NodeId;

use crate::client::Target;
use crate::outcome::{Failure, note};

/// The node id for this host: as given, else from the host name.
fn local_node(given: Option<String>) -> Result<NodeId, Failure> {
    match given {
        Some(name) => NodeId::new(name).map_err(|e| Failure::Usage(format!("--node: {e}"))),
        None => Ok(NodeId::from_hostname(
            &gethostname::gethostname().to_string_lossy(),
        )),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version are answers, not mistakes.
            let code = if err.use_stderr() {
                EXIT_USAGE
            } else {
                EXIT_OK
            };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    let outcome = Target::parse(&cli.addr)
        .map_err(Failure::Usage)
        .and_then(|target| run(cli.command, &target));
    match outcome {
        Ok(true) => ExitCode::from(EXIT_OK),
        Ok(false) => ExitCode::from(EXIT_UNHEALTHY),
        Err(failure) => {
            note(failure.message());
            ExitCode::from(failure.exit_code())
        }
    }
}

/// Runs one command; `Ok(healthy)`.
fn run(command: Command, target: &Target) -> Result<bool, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| Failure::Unreachable(format!("cannot start the async runtime: {err}")))?;
    runtime.block_on(async {
        match command {
            Command::Status { json } => status::run(target, json).await,
            Command::Jobs { json } => jobs::run(target, json).await,
            Command::Watch { json } => watch::run(target, json).await.map(|()| true),
            Command::History {
                since,
                node,
                link,
                mesh,
                limit,
                json,
            } => history::run(
                target,
                history::Request {
                    since,
                    node,
                    link,
                    mesh,
                    limit,
                },
                json,
            )
            .await
            .map(|()| true),
            Command::Doctor {
                from,
                mesh,
                node,
                json,
            } => {
                let scope = match (from, mesh) {
                    (_, true) => doctor::Scope::Mesh,
                    (Some(path), false) => doctor::Scope::Replay {
                        path,
                        node: node.map(|n| local_node(Some(n))).transpose()?,
                    },
                    (None, false) => doctor::Scope::Local {
                        node: local_node(node)?,
                    },
                };
                doctor::run(target, scope, json).await
            }
            Command::Hostfile {
                backend,
                ssh,
                ranks,
                rank0_ip,
                allow_degraded,
                out,
            } => hostfile::run(
                target,
                hostfile::Request {
                    backend,
                    ssh,
                    ranks,
                    rank0_ip,
                    allow_degraded,
                },
                out,
            )
            .await
            .map(|()| true),
            Command::Bundle { out, node } => bundle::run(target, local_node(node)?, out)
                .await
                .map(|()| true),
            Command::Certs { dir, action } => {
                let action = match action {
                    CertsCommand::Init { name, days } => certs::Action::Init { name, days },
                    CertsCommand::Issue { nodes, days } => certs::Action::Issue { nodes, days },
                };
                certs::run(&dir, action, std::time::SystemTime::now())
                    .map_err(|err| Failure::Refused(format!("certs: {err}")))?;
                Ok(true)
            }
            Command::Plan {
                nodes,
                names,
                models,
                backend,
                json,
                list_models,
                hardware_ports,
                link_range,
                write,
                force,
                certs,
                management,
                grpc,
                metrics,
                alertmanager,
            } => {
                if list_models {
                    plan::list_models().map(|()| true)
                } else {
                    plan::run(&plan::Request {
                        nodes,
                        names,
                        models,
                        backend,
                        hardware_ports,
                        link_range,
                        write: write.map(|dir| node_config::WriteRequest {
                            dir,
                            force,
                            certs,
                            management,
                            grpc,
                            metrics,
                            alertmanagers: alertmanager,
                        }),
                        json,
                    })
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use meshctl::cli::EXIT_UNREACHABLE;

    use super::*;

    #[test]
    fn the_exit_code_table_is_the_one_documented() {
        assert_eq!(
            [EXIT_OK, EXIT_UNHEALTHY, EXIT_UNREACHABLE, EXIT_USAGE],
            [0, 1, 2, 64]
        );
        for (failure, code) in [
            (Failure::Usage(String::new()), 64),
            (Failure::Refused(String::new()), 1),
            (Failure::Unreachable(String::new()), 2),
        ] {
            assert_eq!(failure.exit_code(), code);
        }
    }
}
