//! `meshctl plan`: how to cable and address a new cluster, from the model
//! data alone (no daemon, no Mac needed).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Read as _;

use meshctl::cli::BackendArg;
use meshd_domain::NodeId;
use meshd_domain::facts::HardwarePort;
use meshd_mesh::models::{Model, ModelTable, PortRdma};
use meshd_mesh::plan::{CablingPlan, DEFAULT_LINK_RANGE, SetupStep, default_names, plan_in_range};
use meshd_platform::macos::networksetup::parse_hardware_ports;
use meshd_platform::paths::MACOS_CONFIG;
use serde_json::{Value, json};

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
    pub json: bool,
}

/// Prints the plan; `Ok(false)` when the ports cannot make the mesh (the
/// refusal is printed with its reason).
pub fn run(request: &Request) -> Result<bool, Failure> {
    let table = ModelTable::builtin();
    let names = names_for(request.nodes, &request.names)?;
    let models = models_for(&table, names.len(), &request.models)?;
    let given = request
        .hardware_ports
        .iter()
        .map(|arg| read_hardware_ports(arg))
        .collect::<Result<Vec<_>, Failure>>()?;
    match plan_in_range(&names, &models, request.backend.into(), DEFAULT_LINK_RANGE) {
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
            if request.json {
                emit(&format!("{:#}\n", to_json(&plan)))?;
            } else {
                emit(&render(&plan))?;
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

fn render(plan: &CablingPlan) -> String {
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
        let _ = writeln!(
            out,
            "  meshd config ([[links]] in {MACOS_CONFIG}, where `meshd install` puts it on a Mac):"
        );
        for line in node.links_config.lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    out
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
