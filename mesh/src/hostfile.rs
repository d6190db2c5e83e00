//! JACCL hostfiles for `mlx.launch --hostfile`, built from the cable map.
//!
//! The format is MLX's (`python/mlx/_distributed_utils/common.py`,
//! `Hostfile.from_file`, and `launch.py::launch_jaccl`): a JSON list of
//! hosts, or an object `{"backend", "envs", "hosts"}`; each host has `ssh`,
//! `ips` and `rdma`, where `rdma[j]` is this host's device for the cable to
//! rank j (a name, or a list of names for several cables) and `null` on
//! the diagonal. `launch_jaccl` refuses a file whose `rdma` rows are not
//! one cell per rank with a null diagonal, and needs an IP for rank 0 (the
//! coordinator); the TCP `ring` backend needs an IP for every host.
//! MLX reads only those keys (`backend`, `envs`, `hosts`; `ssh`, `ips`,
//! `rdma` per host), so the `meshd` key a hostfile built over links that
//! are not up carries is ignored by `mlx.launch`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use meshd_domain::facts::Cable;
use meshd_domain::{LinkState, LinkVerdict, NodeId};
use serde_json::{Value, json};

use super::cables::{cable_label, link_of};
use super::{Backend, JACCL_MAX_RANKS, TB5_LINK_BPS, gbps};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostfile {
    pub backend: Backend,
    /// One host per rank, in rank order.
    pub hosts: Vec<HostfileHost>,
    /// What makes the topology less than healthy (a slow or undiscovered
    /// cable), though the hostfile is usable.
    pub warnings: Vec<String>,
    /// The rank pairs whose link is not up, in a hostfile built only
    /// because the caller allowed them; empty otherwise.
    pub links_not_up: Vec<LinkNotUp>,
}

/// A pair of ranks the hostfile joins over a link the mesh does not call up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkNotUp {
    /// The two ranks, the lower first.
    pub ranks: (usize, usize),
    /// `Unknown` for a cable no link verdict covers.
    pub state: LinkState,
    /// What to do about it, as the link verdict says.
    pub fix: Option<String>,
}

/// Whether a hostfile may join ranks over links that are not up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinksNotUp {
    /// Refuse: a job launched over a dead cable hangs.
    Refuse,
    /// Build it, and mark those pairs.
    Allow,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostfileHost {
    pub node: NodeId,
    pub ssh: String,
    /// Rank 0's address every rank can reach; empty for the others.
    pub ips: Vec<String>,
    /// `rdma[j]`: this node's device on the cable to rank j; None on the
    /// diagonal and for pairs the backend does not use.
    pub rdma: Vec<Option<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostfileError {
    #[error("a hostfile needs at least one rank")]
    NoRanks,
    #[error("{0} is listed twice among the ranks")]
    DuplicateRank(NodeId),
    #[error("{ranks} ranks: a JACCL mesh has at most {JACCL_MAX_RANKS}")]
    TooManyRanks { ranks: usize },
    #[error("rank 0 ({0}) needs an IP address every rank can reach; pass its management address")]
    NoRank0Ip(NodeId),
    #[error("{backend} needs an RDMA device at both ends of {}; missing: {}",
        match backend { Backend::Jaccl => "every pair of ranks", Backend::JacclRing => "each pair of ring neighbours" },
        missing.join("; "))]
    MissingLinks {
        backend: Backend,
        missing: Vec<String>,
    },
    #[error("a job launched from this hostfile would hang or crawl: {}; fix them, or build it anyway (meshctl hostfile --allow-degraded; GetHostfile allow_links_not_up)", pairs.join("; "))]
    LinksNotUp { pairs: Vec<String> },
}

/// Ranks j that rank i must be cabled to.
fn required_peers(backend: Backend, n: usize, i: usize) -> BTreeSet<usize> {
    match backend {
        Backend::Jaccl => (0..n).filter(|&j| j != i).collect(),
        Backend::JacclRing => [(i + n - 1) % n, (i + 1) % n]
            .into_iter()
            .filter(|&j| j != i)
            .collect(),
    }
}

/// The hostfile for `ranks` (rank order) over `cables`, whose health
/// `links` (the mesh's link verdicts) tell. `ssh` maps a node to its ssh
/// destination (the node id where absent); `rank0_ip` is rank 0's
/// management address. jaccl needs every pair cabled with a device at both
/// ends, jaccl-ring only ring neighbours; cells the backend does not use
/// stay null. A pair whose link is not up (down, degraded, flapping, or
/// not judged) is refused unless `links_not_up` allows it.
pub fn build_hostfile(
    ranks: &[NodeId],
    cables: &[Cable],
    links: &[LinkVerdict],
    backend: Backend,
    ssh: &BTreeMap<NodeId, String>,
    rank0_ip: Option<Ipv4Addr>,
    links_not_up: LinksNotUp,
) -> Result<Hostfile, HostfileError> {
    let n = ranks.len();
    let first = ranks.first().ok_or(HostfileError::NoRanks)?;
    let mut seen = BTreeSet::new();
    if let Some(dup) = ranks.iter().find(|r| !seen.insert(*r)) {
        return Err(HostfileError::DuplicateRank(dup.clone()));
    }
    if backend == Backend::Jaccl && n > JACCL_MAX_RANKS {
        return Err(HostfileError::TooManyRanks { ranks: n });
    }
    let ip = rank0_ip.ok_or_else(|| HostfileError::NoRank0Ip(first.clone()))?;

    let mut rdma = vec![vec![None; n]; n];
    let mut missing = Vec::new();
    let mut warnings = Vec::new();
    let mut not_up = Vec::new();
    for i in 0..n {
        for j in required_peers(backend, n, i).into_iter().filter(|&j| j > i) {
            let (x, y) = (&ranks[i], &ranks[j]);
            let between: Vec<&Cable> = cables
                .iter()
                .filter(|c| c.end_at(x).is_some() && c.end_at(y).is_some())
                .collect();
            let device_at = |c: &Cable, node: &NodeId| {
                c.end_at(node)
                    .map(|e| e.rdma_device.clone())
                    .filter(|d| !d.is_empty())
            };
            let usable = between
                .iter()
                .find_map(|c| Some((*c, device_at(c, x)?, device_at(c, y)?)));
            let pair = format!("rank {i} ({x}) ↔ rank {j} ({y})");
            match (usable, between.first()) {
                (Some((cable, dx, dy)), _) => {
                    if cable.speed_bps != 0 && cable.speed_bps < TB5_LINK_BPS {
                        warnings.push(format!(
                            "{} negotiated {}",
                            cable_label(cable),
                            gbps(cable.speed_bps)
                        ));
                    }
                    if !cable.discovered {
                        warnings.push(format!(
                            "{} is known only from config, not seen by discovery",
                            cable_label(cable)
                        ));
                    }
                    let link = link_of(cable, links);
                    let state = link.map_or(LinkState::Unknown, |l| l.state);
                    if state != LinkState::Up {
                        not_up.push((
                            pair.clone(),
                            LinkNotUp {
                                ranks: (i, j),
                                state,
                                fix: link.and_then(|l| l.fix.clone()),
                            },
                        ));
                    }
                    rdma[i][j] = Some(dx);
                    rdma[j][i] = Some(dy);
                }
                (None, Some(cable)) => missing.push(format!(
                    "{pair}: cable {} has no RDMA device at {}",
                    cable_label(cable),
                    [x, y]
                        .into_iter()
                        .filter(|node| device_at(cable, node).is_none())
                        .map(NodeId::as_str)
                        .collect::<Vec<_>>()
                        .join(" and ")
                )),
                (None, None) => missing.push(format!("{pair}: no cable")),
            }
        }
    }
    if !missing.is_empty() {
        return Err(HostfileError::MissingLinks { backend, missing });
    }
    if links_not_up == LinksNotUp::Refuse && !not_up.is_empty() {
        let pairs = not_up
            .iter()
            .map(|(pair, link)| match link.state {
                LinkState::Unknown => format!("{pair}: link not judged yet"),
                state => match &link.fix {
                    Some(fix) => format!("{pair}: link {state} ({fix})"),
                    None => format!("{pair}: link {state}"),
                },
            })
            .collect();
        return Err(HostfileError::LinksNotUp { pairs });
    }
    let hosts = ranks
        .iter()
        .zip(rdma)
        .enumerate()
        .map(|(rank, (node, rdma))| HostfileHost {
            node: node.clone(),
            ssh: ssh.get(node).cloned().unwrap_or_else(|| node.to_string()),
            ips: if rank == 0 {
                vec![ip.to_string()]
            } else {
                Vec::new()
            },
            rdma,
        })
        .collect();
    Ok(Hostfile {
        backend,
        hosts,
        warnings,
        links_not_up: not_up.into_iter().map(|(_, link)| link).collect(),
    })
}

/// The hostfile as `mlx.launch --hostfile` reads it (the object form, so
/// the backend travels with it). Pairs over links that are not up are
/// listed under `meshd.links_not_up`, which `mlx.launch` ignores.
pub fn to_mlx_json(hostfile: &Hostfile) -> Value {
    let mut value = json!({
        "backend": hostfile.backend.as_str(),
        "envs": [],
        "hosts": hostfile.hosts.iter().map(|h| json!({
            "ssh": h.ssh,
            "ips": h.ips,
            "rdma": h.rdma,
        })).collect::<Vec<_>>(),
    });
    if !hostfile.links_not_up.is_empty() {
        value["meshd"] = json!({
            "links_not_up": hostfile.links_not_up.iter().map(|l| {
                let node = |rank: usize| hostfile.hosts.get(rank).map(|h| h.node.as_str());
                json!({
                    "ranks": [l.ranks.0, l.ranks.1],
                    "nodes": [node(l.ranks.0), node(l.ranks.1)],
                    "state": l.state.as_str(),
                    "fix": l.fix,
                })
            }).collect::<Vec<_>>(),
        });
    }
    value
}

/// Which rules a hostfile is held to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Mesh,
    Ring,
    /// A list-form JACCL file: the backend comes from the command line, so
    /// either a full mesh or a ring is acceptable.
    MeshOrRing,
    /// MLX's TCP `ring` backend: no devices, an IP for every host.
    TcpRing,
}

/// Everything `mlx.launch` would reject or misread in `value`; empty when
/// it is a valid hostfile. Accepts both MLX documentation examples.
pub fn validate_mlx_hostfile(value: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let (backend, hosts) = match value {
        Value::Array(hosts) => (None, hosts),
        Value::Object(map) => {
            let backend = match map.get("backend") {
                None => None,
                Some(Value::String(b)) if b.is_empty() => None,
                Some(Value::String(b)) => Some(b.as_str()),
                Some(other) => {
                    problems.push(format!("backend: {other} is not a string"));
                    None
                }
            };
            match map.get("envs") {
                None => {}
                Some(Value::Array(envs)) if envs.iter().all(Value::is_string) => {}
                Some(other) => problems.push(format!("envs: {other} is not a list of strings")),
            }
            match map.get("hosts") {
                Some(Value::Array(hosts)) => (backend, hosts),
                _ => {
                    problems.push("hosts: missing or not a list".to_owned());
                    return problems;
                }
            }
        }
        _ => {
            problems
                .push("a hostfile is a JSON list of hosts or an object with \"hosts\"".to_owned());
            return problems;
        }
    };
    if hosts.is_empty() {
        problems.push("hosts: empty".to_owned());
        return problems;
    }
    let rows: Vec<HostRow> = hosts
        .iter()
        .enumerate()
        .map(|(i, host)| HostRow::read(i, host, &mut problems))
        .collect();
    let any_rdma = rows.iter().any(|r| r.rdma.is_some());
    let layout = match backend {
        Some("jaccl") => Layout::Mesh,
        Some("jaccl-ring") => Layout::Ring,
        Some("ring") => Layout::TcpRing,
        None if any_rdma => Layout::MeshOrRing,
        None => Layout::TcpRing,
        Some(other) => {
            problems.push(format!(
                "backend: {other:?} is not one of \"jaccl\", \"jaccl-ring\", \"ring\""
            ));
            return problems;
        }
    };
    if layout == Layout::TcpRing {
        for (i, row) in rows.iter().enumerate() {
            if row.ips == 0 {
                problems.push(format!(
                    "hosts[{i}].ips: the ring backend needs an IP for every host"
                ));
            }
        }
        return problems;
    }
    check_jaccl_rows(&rows, layout, &mut problems);
    problems
}

/// One host as read: how many IPs it has, and its `rdma` row (`true` where
/// a cell names a device).
struct HostRow {
    ips: usize,
    rdma: Option<Vec<bool>>,
}

impl HostRow {
    fn read(i: usize, host: &Value, problems: &mut Vec<String>) -> HostRow {
        let Value::Object(host) = host else {
            problems.push(format!("hosts[{i}]: {host} is not an object"));
            return HostRow { ips: 0, rdma: None };
        };
        match host.get("ssh") {
            Some(Value::String(s)) if !s.trim().is_empty() => {}
            Some(other) => problems.push(format!("hosts[{i}].ssh: {other} is not a host name")),
            None => problems.push(format!("hosts[{i}].ssh: missing")),
        }
        let ips = match host.get("ips") {
            None => 0,
            Some(Value::Array(ips)) => {
                for (k, ip) in ips.iter().enumerate() {
                    if ip.as_str().is_none_or(|s| s.parse::<IpAddr>().is_err()) {
                        problems.push(format!("hosts[{i}].ips[{k}]: {ip} is not an IP address"));
                    }
                }
                ips.len()
            }
            Some(other) => {
                problems.push(format!("hosts[{i}].ips: {other} is not a list"));
                0
            }
        };
        let rdma = match host.get("rdma") {
            None => None,
            Some(Value::Array(cells)) => Some(
                cells
                    .iter()
                    .enumerate()
                    .map(|(j, cell)| match cell {
                        Value::Null => false,
                        Value::String(d) if !d.is_empty() => true,
                        Value::Array(ds)
                            if !ds.is_empty()
                                && ds.iter().all(|d| d.as_str().is_some_and(|d| !d.is_empty())) =>
                        {
                            true
                        }
                        other => {
                            problems.push(format!(
                                "hosts[{i}].rdma[{j}]: {other} is not null, a device name or a list of names"
                            ));
                            false
                        }
                    })
                    .collect(),
            ),
            Some(other) => {
                problems.push(format!("hosts[{i}].rdma: {other} is not a list"));
                None
            }
        };
        HostRow { ips, rdma }
    }
}

fn check_jaccl_rows(rows: &[HostRow], layout: Layout, problems: &mut Vec<String>) {
    let n = rows.len();
    if rows[0].ips == 0 {
        problems.push("hosts[0].ips: rank 0 needs an IP every rank can reach".to_owned());
    }
    if layout == Layout::Mesh && n > JACCL_MAX_RANKS {
        problems.push(format!(
            "hosts: {n} ranks; a JACCL mesh has at most {JACCL_MAX_RANKS}"
        ));
    }
    let mut matrix = Vec::with_capacity(n);
    for (i, row) in rows.iter().enumerate() {
        match &row.rdma {
            Some(cells) if cells.len() == n => matrix.push(cells.clone()),
            Some(cells) => problems.push(format!(
                "hosts[{i}].rdma: {} cells; needs one per rank ({n})",
                cells.len()
            )),
            None => problems.push(format!(
                "hosts[{i}].rdma: missing; jaccl needs one cell per rank"
            )),
        }
    }
    if matrix.len() != n {
        return;
    }
    for (i, row) in matrix.iter().enumerate() {
        if row[i] {
            problems.push(format!("hosts[{i}].rdma[{i}]: the diagonal must be null"));
        }
        for j in i + 1..n {
            if row[j] != matrix[j][i] {
                problems.push(format!(
                    "hosts[{i}].rdma[{j}] and hosts[{j}].rdma[{i}]: a cable has a device at both ends, but only one is named"
                ));
            }
        }
    }
    let matrix = &matrix;
    let gaps = |backend: Backend| -> Vec<String> {
        (0..n)
            .flat_map(|i| {
                required_peers(backend, n, i)
                    .into_iter()
                    .filter(move |&j| !matrix[i][j])
                    .map(move |j| (i, j))
            })
            .map(|(i, j)| format!("hosts[{i}].rdma[{j}]: {backend} needs a device for rank {j}"))
            .collect()
    };
    match layout {
        Layout::Mesh => problems.extend(gaps(Backend::Jaccl)),
        Layout::Ring => problems.extend(gaps(Backend::JacclRing)),
        Layout::MeshOrRing => {
            let mesh = gaps(Backend::Jaccl);
            let ring = gaps(Backend::JacclRing);
            if !mesh.is_empty() && !ring.is_empty() {
                problems.push("rdma: neither a full mesh nor a ring".to_owned());
                problems.extend(ring);
            }
        }
        Layout::TcpRing => {}
    }
}
