//! `meshctl hostfile`: an MLX hostfile (`mlx.launch --hostfile`) built by the
//! daemon from the live cable map, checked against MLX's rules before it is
//! printed.

use std::collections::HashMap;
use std::path::PathBuf;

use meshd_mesh::hostfile::{Hostfile, to_mlx_json, validate_mlx_hostfile};
use meshd_proto::wire;

use meshctl::cli::BackendArg;

use crate::client::{self, Target};
use crate::outcome::{Failure, emit, note};

#[derive(Debug)]
pub struct Request {
    pub backend: BackendArg,
    /// NAME=HOST pairs.
    pub ssh: Vec<String>,
    pub ranks: Vec<String>,
    pub rank0_ip: Option<String>,
    /// Build it over links that are not up, and say which.
    pub allow_degraded: bool,
}

/// Prints (or writes to `out`) the hostfile.
pub async fn run(target: &Target, request: Request, out: Option<PathBuf>) -> Result<(), Failure> {
    let ssh = request
        .ssh
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, host)) if !name.is_empty() && !host.is_empty() => {
                Ok((name.to_owned(), host.to_owned()))
            }
            _ => Err(Failure::Usage(format!(
                "--ssh {pair:?}: use NAME=HOST, like studio-1=admin@10.0.0.1"
            ))),
        })
        .collect::<Result<HashMap<_, _>, _>>()?;
    let wire_request = wire::GetHostfileRequest {
        backend: match request.backend {
            BackendArg::Jaccl => wire::HostfileBackend::Jaccl,
            BackendArg::JacclRing => wire::HostfileBackend::JacclRing,
        } as i32,
        ssh,
        ranks: request.ranks,
        rank0_ip: request.rank0_ip.unwrap_or_default(),
        allow_links_not_up: request.allow_degraded,
    };
    let reply = client::hostfile(target, wire_request).await?;
    let hostfile = Hostfile::try_from(reply).map_err(|e| {
        Failure::Unreachable(format!("meshd at {target} sent a malformed hostfile: {e}"))
    })?;
    let json = to_mlx_json(&hostfile);
    let problems = validate_mlx_hostfile(&json);
    if !problems.is_empty() {
        return Err(Failure::Unreachable(format!(
            "meshd at {target} built a hostfile mlx.launch would reject: {}",
            problems.join("; ")
        )));
    }
    for warning in &hostfile.warnings {
        note(&format!("hostfile: warning: {warning}"));
    }
    for link in &hostfile.links_not_up {
        let node = |rank: usize| hostfile.hosts.get(rank).map_or("?", |h| h.node.as_str());
        let (i, j) = link.ranks;
        note(&format!(
            "hostfile: warning: rank {i} ({}) ↔ rank {j} ({}) is joined over a link that is {}{}",
            node(i),
            node(j),
            link.state,
            link.fix
                .as_deref()
                .map(|fix| format!(" ({fix})"))
                .unwrap_or_default()
        ));
    }
    let text = format!("{json:#}\n");
    match out {
        Some(path) => {
            std::fs::write(&path, text)
                .map_err(|e| Failure::Refused(format!("cannot write {}: {e}", path.display())))?;
            note(&format!("wrote {}", path.display()));
            Ok(())
        }
        None => emit(&text),
    }
}
