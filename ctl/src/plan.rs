//! `meshctl plan`: how to cable and address a new cluster, from the model
//! data alone (no daemon, no Mac needed).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Read as _;

use meshctl::cli::BackendArg;
use meshd_domain::NodeId;
use meshd_domain::facts::{HardwarePort, Ipv4Cidr};
use meshd_mesh::models::{Model, ModelTable, PortRdma};
use meshd_mesh::plan::{
    CablingPlan, DEFAULT_LINK_RANGE, LINK_PREFIX, SetupStep, default_names, plan_in_range,
};
use meshd_platform::macos::networksetup::parse_hardware_ports;
use meshd_platform::paths::MACOS_CONFIG;
use serde_json::{Value, json};

use crate::node_config::{self, CONFIG_FILE, TLS_DIR, WriteRequest, Written};
use crate::outcome::{Failure, emit};

/// `networksetup -listallhardwareports` prints a few hundred bytes per
/// port; a file far larger than this is not its output.
const MAX_HARDWARE_PORTS_BYTES: u64 = 1 << 20;

/// What `meshctl plan` was asked for.
#[derive(Debug)]
pub struct Request {
    pub nodes: Option<usize>,
    pub names: Vec<String>,
    pub models: Vec<String>,
    pub backend: BackendArg,
    /// `NODE=FILE` (see the `--hardware-ports` flag).
    pub hardware_ports: Vec<String>,
    /// `--link-range`; default [`DEFAULT_LINK_RANGE`].
    pub link_range: Option<String>,
    /// `--write DIR` and what goes with it.
    pub write: Option<WriteRequest>,
    pub json: bool,
}

/// Prints the plan; `Ok(false)` when the ports cannot make the mesh (the
/// refusal is printed with its reason).
pub fn run(request: &Request) -> Result<bool, Failure> {
    let table = ModelTable::builtin();
    let names = names_for(request.nodes, &request.names)?;
    let models = models_for(&table, names.len(), &request.models)?;
    let range = match &request.link_range {
        Some(arg) => parse_link_range(arg)?,
        None => DEFAULT_LINK_RANGE,
    };
    let given = request
        .hardware_ports
        .iter()
        .map(|arg| read_hardware_ports(arg))
        .collect::<Result<Vec<_>, Failure>>()?;
    // Every flag of --write is checked before the plan is made, so that a
    // refused plan and a wrong flag are never confused.
    let endpoints = request
        .write
        .as_ref()
        .map(|write| {
            for url in &write.alertmanagers {
                node_config::check_alertmanager(url)?;
            }
            let endpoints = node_config::endpoints(&names, write)?;
            node_config::check_range_clear_of(range, &endpoints)?;
            Ok::<_, Failure>(endpoints)
        })
        .transpose()?;
    match plan_in_range(&names, &models, request.backend.into(), range) {
        Ok(mut plan) => {
            for (node, ports) in &given {
                let missing = plan
                    .name_interfaces(node, ports)
                    .map_err(|unknown| Failure::Usage(format!("--hardware-ports: {unknown}")))?;
                for port in missing {
                    plan.warnings.push(format!(
                        "{node}: the hardware ports given have no {port:?} with a device; its \
                         local_iface is left as a comment"
                    ));
                }
            }
            plan.warnings.extend(range_warning(range));
            let written = match (&request.write, &endpoints) {
                (Some(write), Some(endpoints)) => Some(write_configs(&plan, write, endpoints)?),
                _ => None,
            };
            let certs = request.write.as_ref().is_some_and(|w| w.certs);
            if request.json {
                let mut doc = to_json(&plan);
                if let Some(written) = &written {
                    doc["written"] = json!(
                        written
                            .files(certs)
                            .iter()
                            .map(|f| f.display().to_string())
                            .collect::<Vec<_>>()
                    );
                }
                emit(&format!("{doc:#}\n"))?;
            } else {
                emit(&render(&plan, written.as_ref().map(|w| (w, certs))))?;
            }
            Ok(true)
        }
        Err(refusal) if request.json => {
            emit(&format!(
                "{:#}\n",
                json!({ "refused": refusal.to_string() })
            ))?;
            Ok(false)
        }
        Err(refusal) => Err(Failure::Refused(format!(
            "cannot plan this cluster: {refusal}"
        ))),
    }
}

/// Every node's config, and with `--certs` the certificates, into
/// `--write`'s directory.
fn write_configs(
    plan: &CablingPlan,
    write: &WriteRequest,
    endpoints: &BTreeMap<String, node_config::Endpoints>,
) -> Result<Written, Failure> {
    let configs = plan
        .nodes
        .iter()
        .map(|n| {
            let toml = node_config::render(&n.name, plan, endpoints, &write.alertmanagers);
            (n.name.clone(), toml)
        })
        .collect();
    node_config::write(
        &write.dir,
        &configs,
        write.certs,
        write.force,
        std::time::SystemTime::now(),
    )
}

/// `--link-range`: an IPv4 network, written from its first address, that
/// holds at least one /30 and can carry unicast cable addresses. Whether
/// it holds every cable is the plan's to say.
fn parse_link_range(arg: &str) -> Result<Ipv4Cidr, Failure> {
    let usage = |why: String| Failure::Usage(format!("--link-range {arg}: {why}"));
    let range: Ipv4Cidr = arg.parse().map_err(|e| usage(format!("{e}")))?;
    if range.prefix > LINK_PREFIX {
        return Err(usage(format!(
            "a /{} is smaller than one cable's /{LINK_PREFIX}; give a range of /{LINK_PREFIX} or \
             larger, like 10.254.0.0/24",
            range.prefix
        )));
    }
    if range.address != range.network() {
        return Err(usage(format!(
            "{} is inside the network, not its start; did you mean {}/{}?",
            range.address,
            range.network(),
            range.prefix
        )));
    }
    let first = range.network().octets()[0];
    let last = u32::from(range.network()) | !range.mask();
    let last = std::net::Ipv4Addr::from(last).octets()[0];
    // 0/8 is "this network", 224/4 multicast and 240/4 reserved (with the
    // broadcast address): no interface takes an address there.
    if first == 0 || last >= 224 {
        return Err(usage(
            "it reaches into 0.0.0.0/8, multicast or reserved addresses, which no cable can \
             carry; use a private range such as 10.254.0.0/24"
                .to_owned(),
        ));
    }
    let loopback = Ipv4Cidr {
        address: std::net::Ipv4Addr::new(127, 0, 0, 0),
        prefix: 8,
    };
    if range.overlaps(loopback) && range.prefix < loopback.prefix {
        return Err(usage(
            "it spans loopback (127.0.0.0/8) and other addresses; keep a range inside one or \
             the other"
                .to_owned(),
        ));
    }
    Ok(range)
}

/// What works but needs saying about the cables' range.
fn range_warning(range: Ipv4Cidr) -> Option<String> {
    let loopback = Ipv4Cidr {
        address: std::net::Ipv4Addr::new(127, 0, 0, 0),
        prefix: 8,
    };
    let link_local = Ipv4Cidr {
        address: std::net::Ipv4Addr::new(169, 254, 0, 0),
        prefix: 16,
    };
    if range.overlaps(loopback) {
        Some(format!(
            "{range} is loopback: every address in it is this host's own (on Linux), so the \
             plan suits meshd processes on one host for tests, not cables between Macs"
        ))
    } else if range.overlaps(link_local) {
        Some(format!(
            "{range} is IPv4 link-local (169.254/16): the kernel ties no interface to it, and \
             traffic to a peer may leave by the wrong port; prefer a private range"
        ))
    } else {
        None
    }
}

/// The node names: as given (each a valid, distinct node id), else
/// node1…N.
fn names_for(nodes: Option<usize>, names: &[String]) -> Result<Vec<String>, Failure> {
    if names.is_empty() {
        return Ok(default_names(nodes.unwrap_or(0)));
    }
    if let Some(n) = nodes.filter(|n| *n != names.len()) {
        return Err(Failure::Usage(format!(
            "--nodes {n} but {} --names; give one name per node, or leave out --nodes",
            names.len()
        )));
    }
    let mut seen = BTreeSet::new();
    for name in names {
        NodeId::new(name).map_err(|e| Failure::Usage(format!("--names: {e}")))?;
        if !seen.insert(name) {
            return Err(Failure::Usage(format!("--names: {name} is named twice")));
        }
    }
    Ok(names.to_vec())
}

/// `NODE=FILE`: the node and its parsed hardware ports; FILE `-` is
/// standard input.
fn read_hardware_ports(arg: &str) -> Result<(String, Vec<HardwarePort>), Failure> {
    let (node, file) = arg
        .split_once('=')
        .filter(|(node, file)| !node.is_empty() && !file.is_empty())
        .ok_or_else(|| {
            Failure::Usage(format!(
                "--hardware-ports {arg:?}: write NODE=FILE, like node2=ports-node2.txt"
            ))
        })?;
    let mut text = String::new();
    let read = if file == "-" {
        std::io::stdin()
            .take(MAX_HARDWARE_PORTS_BYTES)
            .read_to_string(&mut text)
    } else {
        std::fs::File::open(file)
            .and_then(|f| f.take(MAX_HARDWARE_PORTS_BYTES).read_to_string(&mut text))
    };
    read.map_err(|e| {
        Failure::Usage(format!(
            "--hardware-ports {node}={file}: cannot read it: {e}"
        ))
    })?;
    let ports = parse_hardware_ports(&text);
    if ports.is_empty() {
        return Err(Failure::Usage(format!(
            "--hardware-ports {node}={file}: no \"Hardware Port:\" blocks in it; give the \
             output of `networksetup -listallhardwareports` on that Mac"
        )));
    }
    Ok((node.to_owned(), ports))
}

/// One model for every node, or one per node.
fn models_for<'a>(
    table: &'a ModelTable,
    nodes: usize,
    ids: &[String],
) -> Result<Vec<&'a Model>, Failure> {
    let models = ids
        .iter()
        .map(|id| table.by_id(id).map_err(|e| Failure::Usage(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    match models.len() {
        1 => Ok(vec![models[0]; nodes]),
        n if n == nodes => Ok(models),
        n => Err(Failure::Usage(format!(
            "{n} --model values for {nodes} nodes; give one model for all nodes, or one per node"
        ))),
    }
}

/// `meshctl plan --list-models`.
pub fn list_models() -> Result<(), Failure> {
    let mut out = String::new();
    for model in ModelTable::builtin().models() {
        let _ = writeln!(
            out,
            "{}  {} ({}), {} Thunderbolt 5 ports, {} usable for RDMA",
            model.id,
            model.name,
            model.identifiers.join(", "),
            model.ports.len(),
            model.usable_port_count()
        );
        for port in &model.ports {
            if let PortRdma::Unreliable { reason } = &port.rdma {
                let _ = writeln!(out, "    {} is unreliable for RDMA: {reason}", port.name);
            }
        }
    }
    emit(&out)
}

/// The plan as text; `written` is what `--write` wrote and whether it
/// made the certificates.
fn render(plan: &CablingPlan, written: Option<(&Written, bool)>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} plan for {} nodes: {} cables, one /30 each from {}",
        plan.backend,
        plan.nodes.len(),
        plan.cables.len(),
        plan.address_range
    );
    for warning in &plan.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    let _ = writeln!(out, "\nnodes");
    for node in &plan.nodes {
        let _ = writeln!(
            out,
            "  {}  {} ({})",
            node.name, node.model_name, node.model_id
        );
    }
    let _ = writeln!(out, "\ncabling");
    let rows: Vec<[String; 4]> = plan
        .cables
        .iter()
        .map(|c| {
            [
                format!("{}/{}", c.a.node, c.a.port),
                format!("{}/{}", c.b.node, c.b.port),
                c.subnet.to_string(),
                format!("{} <-> {}", c.a.address, c.b.address),
            ]
        })
        .collect();
    let header = [
        "END A".to_owned(),
        "END B".to_owned(),
        "SUBNET".to_owned(),
        "ADDRESSES".to_owned(),
    ];
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        let _ = writeln!(out, "  {}", line.join("  ").trim_end());
    }
    for node in &plan.nodes {
        let _ = writeln!(out, "\non {} ({}):", node.name, node.model_name);
        for step in &node.steps {
            let line = match step {
                SetupStep::Manual(text) => format!("  by hand: {text}"),
                SetupStep::Run(command) => format!("  run:     {command}"),
                SetupStep::Verify(command) => format!("  check:   {command}"),
            };
            let _ = writeln!(out, "{line}");
        }
        match written {
            Some((written, certs)) => install_steps(&mut out, &node.name, written, certs),
            None => {
                let _ = writeln!(
                    out,
                    "  meshd config ([[links]] in {MACOS_CONFIG}, where `meshd install` puts it on a Mac):"
                );
                for line in node.links_config.lines() {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
    }
    if let Some((written, _)) = written {
        let _ = writeln!(
            out,
            "\nwrote every node's {CONFIG_FILE} under {}",
            written.dir.display()
        );
        if let Some(ca) = &written.ca {
            let _ = writeln!(
                out,
                "{} signs the mesh's certificates: keep it on this machine, never on a node",
                ca.key.display()
            );
        }
    }
    out
}

/// Which written file goes where on `node`, and how to check it there.
fn install_steps(out: &mut String, node: &str, written: &Written, certs: bool) {
    let Some(files) = written.nodes.get(node) else {
        return;
    };
    let config_dir = std::path::Path::new(MACOS_CONFIG)
        .parent()
        .map_or_else(String::new, |p| p.display().to_string());
    let _ = writeln!(
        out,
        "  meshd config: {} (complete: [node], [listen], [tls], [[peers]], [[links]])",
        files.config.display()
    );
    if certs {
        let _ = writeln!(
            out,
            "  by hand: copy {}/ (ca.pem, {node}.pem, {node}-key.pem), then {}, into \
             {config_dir}/ on {node}, owned by root, {node}-key.pem mode 0600",
            files.tls.display(),
            files.config.display(),
        );
    } else {
        let _ = writeln!(
            out,
            "  by hand: copy {} into {config_dir}/ on {node}, and into {config_dir}/{TLS_DIR}/ \
             the mesh's ca.pem and {node}.pem, {node}-key.pem from `meshctl certs` (or plan \
             again with --certs)",
            files.config.display(),
        );
    }
    let _ = writeln!(out, "  check:   sudo meshd check-config {MACOS_CONFIG}");
    let _ = writeln!(out, "  run:     sudo meshd install");
}

fn to_json(plan: &CablingPlan) -> Value {
    json!({
        "backend": plan.backend.as_str(),
        "address_range": plan.address_range.to_string(),
        "warnings": plan.warnings,
        "nodes": plan.nodes.iter().map(|n| json!({
            "name": n.name,
            "model": n.model_id,
            "steps": n.steps.iter().map(|s| match s {
                SetupStep::Manual(text) => json!({ "manual": text }),
                SetupStep::Run(command) => json!({ "run": command }),
                SetupStep::Verify(command) => json!({ "verify": command }),
            }).collect::<Vec<_>>(),
            "links_config": n.links_config,
        })).collect::<Vec<_>>(),
        "cables": plan.cables.iter().map(|c| json!({
            "a": { "node": c.a.node, "port": c.a.port, "iface": c.a.iface, "address": c.a.address.to_string() },
            "b": { "node": c.b.node, "port": c.b.port, "iface": c.b.iface, "address": c.b.address.to_string() },
            "subnet": c.subnet.to_string(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_range(arg: &str) -> String {
        match parse_link_range(arg) {
            Err(Failure::Usage(message)) => message,
            other => panic!("{arg}: a usage error, not {other:?}"),
        }
    }

    #[test]
    fn a_link_range_is_an_ipv4_network_from_its_start_holding_a_cable() {
        for ok in [
            "10.254.0.0/24",
            "10.77.0.0/16",
            "127.64.0.0/16",
            "192.168.200.0/30",
        ] {
            assert_eq!(
                parse_link_range(ok).map(|r| r.to_string()),
                Ok(ok.to_owned())
            );
        }
        for (arg, says) in [
            ("10.254.0.0", "not an IPv4 address with a prefix"),
            ("fd00::/64", "not an IPv4 address with a prefix"),
            ("10.254.0.0/33", "not an IPv4 address with a prefix"),
            ("10.254.0.0/31", "smaller than one cable's /30"),
            ("10.254.0.5/24", "did you mean 10.254.0.0/24?"),
            ("0.0.0.0/0", "0.0.0.0/8"),
            ("224.0.0.0/24", "multicast"),
            ("240.0.0.0/8", "reserved"),
            ("126.0.0.0/7", "spans loopback"),
        ] {
            let message = refused_range(arg);
            assert!(
                message.starts_with(&format!("--link-range {arg}: ")),
                "{message}"
            );
            assert!(message.contains(says), "{arg}: {message}");
        }
    }

    #[test]
    fn loopback_and_link_local_ranges_are_allowed_with_a_warning() {
        let loopback = parse_link_range("127.64.0.0/16").expect("loopback");
        assert!(range_warning(loopback).is_some_and(|w| w.contains("one host")));
        let link_local = parse_link_range("169.254.10.0/24").expect("link-local");
        assert!(range_warning(link_local).is_some_and(|w| w.contains("link-local")));
        assert_eq!(range_warning(DEFAULT_LINK_RANGE), None);
    }
}
