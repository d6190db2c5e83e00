//! `meshctl plan --write`: each node's complete meshd config, and with
//! `--certs` the mesh's CA and each node's certificate, in one directory:
//!
//! | path | what |
//! |---|---|
//! | `DIR/<node>/meshd.toml` | the node's config, copied as it is |
//! | `DIR/<node>/tls/` | `ca.pem`, `<node>.pem`, `<node>-key.pem` (`--certs`) |
//! | `DIR/ca/` | `ca.pem` and `ca-key.pem`: stays on the admin machine |
//!
//! A node's directory is what goes into its config directory: `[tls]`
//! names `tls/…` relative to meshd.toml, which meshd resolves from the
//! file's own directory, so the pair works wherever it is copied to.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use meshctl::cli::{DEFAULT_CA_DAYS, DEFAULT_CA_NAME, DEFAULT_CERT_DAYS};
use meshd_domain::NodeId;
use meshd_domain::facts::Ipv4Cidr;
use meshd_mesh::plan::CablingPlan;
use meshd_pki::store::{CertDir, Pair};

use crate::certs;
use crate::outcome::Failure;

/// meshd's gRPC port: its `listen.grpc` default, and the port of a
/// management address given without one (the daemon's
/// `config::DEFAULT_GRPC_PORT`; a unit test holds the two equal).
pub const DEFAULT_MESH_PORT: u16 = 7420;
/// meshd's `listen.grpc` default (`config::DEFAULT_LISTEN_GRPC`).
pub const DEFAULT_LISTEN_GRPC: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_MESH_PORT);
/// meshd's `listen.metrics` default (`config::DEFAULT_LISTEN_METRICS`).
pub const DEFAULT_LISTEN_METRICS: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9420);

/// The config's name in each node's directory, as `meshd install` names it.
pub const CONFIG_FILE: &str = "meshd.toml";
/// The certificates' directory beside it.
pub const TLS_DIR: &str = "tls";
/// Where the CA and its key go, beside the nodes' directories.
pub const CA_DIR: &str = "ca";
/// Longest DNS label and name (RFC 1035).
const DNS_LABEL_MAX_LEN: usize = 63;
const DNS_NAME_MAX_LEN: usize = 253;

/// What `--write` was asked for.
#[derive(Debug, Default)]
pub struct WriteRequest {
    pub dir: PathBuf,
    pub force: bool,
    pub certs: bool,
    /// `NODE=HOST[:PORT]`.
    pub management: Vec<String>,
    /// `NODE=IP:PORT`.
    pub grpc: Vec<String>,
    /// `NODE=IP:PORT`.
    pub metrics: Vec<String>,
    pub alertmanagers: Vec<String>,
}

/// The host of a management address: an IP meshd can listen on, or a name
/// its peers resolve when they connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    Name(String),
}

/// A node's address on the management network, as its peers dial it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Management {
    pub host: Host,
    pub port: u16,
}

impl fmt::Display for Management {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}:{}", self.port),
            Host::Name(name) => write!(f, "{name}:{}", self.port),
        }
    }
}

/// One node's listeners and how its peers reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub management: Management,
    pub grpc: SocketAddr,
    pub metrics: SocketAddr,
    /// `listen.mesh`: the management IP, or every interface for a name.
    pub mesh: SocketAddr,
}

/// Each node's endpoints from the flags, every node given a management
/// address; refuses (usage) a flag naming a node the plan lacks, a node
/// given twice, two nodes on one address, and a mesh listener that would
/// take listen.grpc's or listen.metrics' port.
pub fn endpoints(
    nodes: &[String],
    request: &WriteRequest,
) -> Result<BTreeMap<String, Endpoints>, Failure> {
    let management = per_node("--management", &request.management, nodes, parse_management)?;
    let grpc = per_node("--grpc", &request.grpc, nodes, parse_socket)?;
    let metrics = per_node("--metrics", &request.metrics, nodes, parse_socket)?;
    let missing: Vec<&str> = nodes
        .iter()
        .filter(|n| !management.contains_key(*n))
        .map(String::as_str)
        .collect();
    if let Some(first) = missing.first() {
        return Err(Failure::Usage(format!(
            "--write needs every node's management address; missing for {}: give \
             --management NODE=HOST[:PORT] for each, like --management {first}=10.0.0.1",
            missing.join(", ")
        )));
    }
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    let mut all = BTreeMap::new();
    for node in nodes {
        let management = management[node].clone();
        if let Some(other) = seen.insert(management.to_string(), node) {
            return Err(Failure::Usage(format!(
                "--management: {other} and {node} are both {management}; each node needs its \
                 own address"
            )));
        }
        let grpc = grpc.get(node).copied().unwrap_or(DEFAULT_LISTEN_GRPC);
        let metrics = metrics.get(node).copied().unwrap_or(DEFAULT_LISTEN_METRICS);
        let mesh = match management.host {
            Host::Ip(ip) => SocketAddr::new(ip, management.port),
            // meshd listens on an address, never a name.
            Host::Name(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), management.port),
        };
        for (key, taken) in [("listen.grpc", grpc), ("listen.metrics", metrics)] {
            if overlap(mesh, taken) {
                let hint = match management.host {
                    Host::Name(_) => format!(
                        "meshd cannot listen on a name, so it would listen on every interface \
                         ({mesh}); give {node}'s management IP (--management {node}=10.0.0.1) \
                         or another port"
                    ),
                    Host::Ip(_) => "give one of them another port".to_owned(),
                };
                return Err(Failure::Usage(format!(
                    "--management {node}={management}: listen.mesh {mesh} would take the port of \
                     {node}'s {key} {taken}; {hint}"
                )));
            }
        }
        if overlap(grpc, metrics) {
            return Err(Failure::Usage(format!(
                "{node}: listen.grpc {grpc} and listen.metrics {metrics} share a port; give one \
                 of them another with --grpc or --metrics"
            )));
        }
        all.insert(
            node.clone(),
            Endpoints {
                management,
                grpc,
                metrics,
                mesh,
            },
        );
    }
    Ok(all)
}

/// Two listeners on one host cannot share a port when their addresses are
/// equal or either is every interface.
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The cables' range must hold no management address: a cable subnet over
/// the management network would route the mesh's reports into a cable.
pub fn check_range_clear_of(
    range: Ipv4Cidr,
    endpoints: &BTreeMap<String, Endpoints>,
) -> Result<(), Failure> {
    for (node, e) in endpoints {
        if let Host::Ip(IpAddr::V4(ip)) = e.management.host
            && range.contains(ip)
        {
            return Err(Failure::Usage(format!(
                "--link-range {range} holds {node}'s management address {ip}; the cables' \
                 subnets must not overlap the management network: pick another range"
            )));
        }
    }
    Ok(())
}

/// `FLAG NODE=VALUE` arguments by node: each node the plan's, once.
fn per_node<T>(
    flag: &str,
    args: &[String],
    nodes: &[String],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<BTreeMap<String, T>, Failure> {
    let mut found = BTreeMap::new();
    for arg in args {
        let (node, value) = arg
            .split_once('=')
            .filter(|(node, value)| !node.is_empty() && !value.is_empty())
            .ok_or_else(|| Failure::Usage(format!("{flag} {arg:?}: write NODE=VALUE")))?;
        if !nodes.iter().any(|n| n == node) {
            return Err(Failure::Usage(format!(
                "{flag} {arg}: the plan has no node {node}; its nodes are {}",
                nodes.join(", ")
            )));
        }
        let parsed = parse(value).map_err(|why| Failure::Usage(format!("{flag} {arg}: {why}")))?;
        if found.insert(node.to_owned(), parsed).is_some() {
            return Err(Failure::Usage(format!("{flag}: {node} is given twice")));
        }
    }
    Ok(found)
}

/// `HOST[:PORT]`: an IPv4 address, `[IPv6]`, or a DNS name; port default
/// [`DEFAULT_MESH_PORT`].
fn parse_management(value: &str) -> Result<Management, String> {
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or("the '[' of the IPv6 address is not closed by ']'")?;
        let ip: Ipv6Addr = inside
            .parse()
            .map_err(|_| format!("{inside:?} is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or(format!("unexpected {after:?} after ']'"))?,
            ),
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        let (host, port) = match value.matches(':').count() {
            0 => (value, None),
            1 => value
                .split_once(':')
                .map(|(h, p)| (h, Some(p)))
                .unwrap_or((value, None)),
            _ => return Err("write an IPv6 address in brackets, like [fd00::1]:7420".to_owned()),
        };
        (parse_host(host)?, port)
    };
    let port = match port {
        None => DEFAULT_MESH_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(0) => return Err("port 0 cannot be connected to".to_owned()),
            Ok(port) => port,
            Err(_) => return Err(format!("{port:?} is not a port (1-65535)")),
        },
    };
    if let Host::Ip(ip) = host
        && (ip.is_unspecified() || ip.is_multicast())
    {
        return Err(format!(
            "{ip} is no node's address; give the node's own address on the management network"
        ));
    }
    Ok(Management { host, port })
}

/// An IPv4 address, or a DNS name of letters, digits, '-' and '.'.
fn parse_host(host: &str) -> Result<Host, String> {
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(Host::Ip(IpAddr::V4(ip)));
    }
    if host.is_empty() {
        return Err("the host is empty".to_owned());
    }
    if host.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!("{host:?} is not an IPv4 address"));
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    let labels_ok = name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= DNS_LABEL_MAX_LEN
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    });
    if !labels_ok || name.len() > DNS_NAME_MAX_LEN {
        return Err(format!(
            "{host:?} is neither an IP address nor a host name (letters, digits, '-' and '.')"
        ));
    }
    Ok(Host::Name(name.to_ascii_lowercase()))
}

fn parse_socket(value: &str) -> Result<SocketAddr, String> {
    value.parse().map_err(|_| {
        format!("{value:?} is not IP:PORT, like 127.0.0.1:7420 (or [::1]:7420 for IPv6)")
    })
}

/// An Alertmanager base URL: http:// or https://, a host, nothing meshd
/// would have to guess at. The daemon checks the rest when it reads it.
pub fn check_alertmanager(url: &str) -> Result<(), Failure> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest)
            if !rest.is_empty() && !url.chars().any(|c| c.is_whitespace() || c.is_control()) =>
        {
            Ok(())
        }
        _ => Err(Failure::Usage(format!(
            "--alertmanager {url:?}: give a base URL like http://10.0.0.9:9093"
        ))),
    }
}

/// A TOML basic string holding `text`.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// Node `node`'s meshd.toml: every section the plan knows, the rest left at
/// meshd's defaults.
pub fn render(
    node: &str,
    plan: &CablingPlan,
    endpoints: &BTreeMap<String, Endpoints>,
    alertmanagers: &[String],
) -> String {
    let mut toml = String::new();
    let own = &endpoints[node];
    let _ = writeln!(
        toml,
        "# meshd config of {node}, written by `meshctl plan --write` ({} mesh of {} nodes).\n\
         # Copy it, with the tls/ directory beside it, to {node}: {} on macOS,\n\
         # {} on Linux. Keys not written here are at their defaults\n\
         # (meshd.example.toml lists them all).\n",
        plan.backend,
        plan.nodes.len(),
        meshd_platform::paths::MACOS_CONFIG,
        meshd_platform::paths::LINUX_CONFIG,
    );
    let _ = writeln!(toml, "[node]\nid = {}\n", quoted(node));
    let _ = writeln!(
        toml,
        "[listen]\n\
         # meshctl on this node: loopback, read-only, no certificate.\n\
         grpc = {}\n\
         # The mesh page, /metrics and /healthz.\n\
         metrics = {}\n\
         # Where the peers' report streams connect, with mutual TLS.\n\
         mesh = {}\n",
        quoted(&own.grpc.to_string()),
        quoted(&own.metrics.to_string()),
        quoted(&own.mesh.to_string()),
    );
    let _ = writeln!(
        toml,
        "# The mesh's certificates, relative to this file (`meshctl plan --certs` or\n\
         # `meshctl certs` writes them).\n\
         [tls]\n\
         ca = {}\n\
         cert = {}\n\
         key = {}\n",
        quoted(&format!("{TLS_DIR}/ca.pem")),
        quoted(&format!("{TLS_DIR}/{node}.pem")),
        quoted(&format!("{TLS_DIR}/{node}-key.pem")),
    );
    for peer in plan.nodes.iter().filter(|n| n.name != node) {
        let _ = writeln!(
            toml,
            "[[peers]]\nid = {}\naddress = {}\n",
            quoted(&peer.name),
            quoted(&endpoints[&peer.name].management.to_string()),
        );
    }
    if !alertmanagers.is_empty() {
        let urls: Vec<String> = alertmanagers.iter().map(|u| quoted(u)).collect();
        let _ = writeln!(toml, "[alerting]\nalertmanagers = [{}]\n", urls.join(", "));
    }
    if let Some(links) = plan.nodes.iter().find(|n| n.name == node) {
        toml.push_str(links.links_config.trim_end());
        toml.push('\n');
    }
    toml
}

/// Where one node's files went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFiles {
    pub config: PathBuf,
    /// `tls/`, holding the node's certificates when `--certs` made them.
    pub tls: PathBuf,
}

/// What `--write` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub dir: PathBuf,
    pub nodes: BTreeMap<String, NodeFiles>,
    /// `DIR/ca/ca.pem` and `ca-key.pem`, with `--certs`.
    pub ca: Option<Pair>,
}

impl Written {
    /// Every file written, for `--json`.
    pub fn files(&self, certs: bool) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for (node, f) in &self.nodes {
            files.push(f.config.clone());
            if certs {
                let store = CertDir::new(&f.tls);
                let pair = store.node(node);
                files.extend([store.ca().cert, pair.cert, pair.key]);
            }
        }
        if let Some(ca) = &self.ca {
            files.extend([ca.cert.clone(), ca.key.clone()]);
        }
        files
    }
}

/// Writes every node's config (`configs`, by node) and with `certs` the
/// CA and the nodes' certificates into `dir`; refuses when any of those
/// files exists unless `force`, before writing anything.
pub fn write(
    dir: &Path,
    configs: &BTreeMap<String, String>,
    certs: bool,
    force: bool,
    now: SystemTime,
) -> Result<Written, Failure> {
    let nodes: BTreeMap<String, NodeFiles> = configs
        .keys()
        .map(|node| {
            let home = dir.join(node);
            let files = NodeFiles {
                config: home.join(CONFIG_FILE),
                tls: home.join(TLS_DIR),
            };
            (node.clone(), files)
        })
        .collect();
    let written = Written {
        dir: dir.to_owned(),
        nodes,
        ca: certs.then(|| CertDir::new(dir.join(CA_DIR)).ca()),
    };
    clear_the_way(&written.files(certs), force)?;
    for (node, files) in &written.nodes {
        write_new(&files.config, &configs[node])?;
    }
    if certs {
        let ids = configs
            .keys()
            .map(|node| NodeId::new(node.clone()).map_err(|e| Failure::Usage(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let refused = |err: certs::CertsError| Failure::Refused(format!("--certs: {err}"));
        let ca = certs::create_ca(
            &CertDir::new(dir.join(CA_DIR)),
            DEFAULT_CA_NAME,
            DEFAULT_CA_DAYS,
            now,
        )
        .map_err(refused)?;
        for id in &ids {
            let store = CertDir::new(&written.nodes[id.as_str()].tls);
            store
                .trust(&ca)
                .map_err(|err| refused(certs::CertsError::Store(err)))?;
            certs::issue_node(&store, &ca, id, DEFAULT_CERT_DAYS, now).map_err(refused)?;
        }
    }
    Ok(written)
}

/// Refuses (exit 1) when any of `files` exists, naming them, unless
/// `force`: then removes them, so that each is written afresh.
fn clear_the_way(files: &[PathBuf], force: bool) -> Result<(), Failure> {
    let existing: Vec<&PathBuf> = files
        .iter()
        .filter(|f| fs::symlink_metadata(f).is_ok())
        .collect();
    if existing.is_empty() {
        return Ok(());
    }
    if !force {
        let shown: Vec<String> = existing
            .iter()
            .take(3)
            .map(|f| f.display().to_string())
            .collect();
        let more = match existing.len() {
            n if n > 3 => format!(" and {} more", n - 3),
            _ => String::new(),
        };
        return Err(Failure::Refused(format!(
            "--write would replace {}{more}; remove them, pick another directory, or give \
             --force to replace them",
            shown.join(", ")
        )));
    }
    for file in existing {
        if fs::symlink_metadata(file).is_ok_and(|m| m.is_dir()) {
            return Err(Failure::Refused(format!(
                "{} is a directory where a file belongs; remove it",
                file.display()
            )));
        }
        fs::remove_file(file)
            .map_err(|err| Failure::Refused(format!("cannot replace {}: {err}", file.display())))?;
    }
    Ok(())
}

/// Writes a config that must not exist yet: readable by all (it holds no
/// secret; keys are in files of their own), its directory made if needed.
fn write_new(path: &Path, text: &str) -> Result<(), Failure> {
    let failed =
        |err: std::io::Error| Failure::Refused(format!("cannot write {}: {err}", path.display()));
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(failed)?;
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
    let mut file = options.open(path).map_err(failed)?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(failed)
}

#[cfg(test)]
mod tests {
    use meshd_mesh::Backend;
    use meshd_mesh::models::ModelTable;
    use meshd_mesh::plan::{DEFAULT_LINK_RANGE, plan_in_range};

    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    fn plan_of(nodes: &[&str]) -> CablingPlan {
        let table = ModelTable::builtin();
        let model = table.by_id("m4-max-studio").expect("model");
        plan_in_range(
            &names(nodes),
            &vec![model; nodes.len()],
            Backend::Jaccl,
            DEFAULT_LINK_RANGE,
        )
        .expect("plan")
    }

    fn node_names(plan: &CablingPlan) -> Vec<String> {
        plan.nodes.iter().map(|n| n.name.clone()).collect()
    }

    fn request(management: &[&str]) -> WriteRequest {
        WriteRequest {
            management: names(management),
            ..WriteRequest::default()
        }
    }

    fn usage(result: Result<BTreeMap<String, Endpoints>, Failure>) -> String {
        match result {
            Err(Failure::Usage(message)) => message,
            other => panic!("a usage error, not {other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_the_daemons() {
        assert_eq!(DEFAULT_MESH_PORT, meshd::config::DEFAULT_GRPC_PORT);
        assert_eq!(DEFAULT_LISTEN_GRPC, meshd::config::DEFAULT_LISTEN_GRPC);
        assert_eq!(
            DEFAULT_LISTEN_METRICS,
            meshd::config::DEFAULT_LISTEN_METRICS
        );
    }

    #[test]
    fn management_addresses_take_ips_names_and_the_default_port() {
        let nodes = names(&["a", "b", "c"]);
        let all = endpoints(
            &nodes,
            &WriteRequest {
                management: names(&["a=10.0.0.1", "b=[fd00::2]:7500", "c=c.lab:7422"]),
                ..WriteRequest::default()
            },
        )
        .expect("endpoints");
        assert_eq!(all["a"].management.to_string(), "10.0.0.1:7420");
        assert_eq!(all["a"].mesh.to_string(), "10.0.0.1:7420");
        assert_eq!(all["b"].management.to_string(), "[fd00::2]:7500");
        assert_eq!(all["c"].management.to_string(), "c.lab:7422");
        assert_eq!(
            all["c"].mesh.to_string(),
            "0.0.0.0:7422",
            "a name: every interface"
        );
        assert_eq!(all["a"].grpc, DEFAULT_LISTEN_GRPC);
        assert_eq!(all["a"].metrics, DEFAULT_LISTEN_METRICS);
    }

    #[test]
    fn a_bad_management_address_is_named_with_what_is_wrong() {
        let nodes = names(&["a", "b"]);
        for (arg, says) in [
            ("a", "NODE=VALUE"),
            ("a=", "NODE=VALUE"),
            ("a=10.0.0.1:0", "port 0"),
            ("a=10.0.0.1:http", "not a port"),
            ("a=10.0.0.1:70000", "not a port"),
            ("a=fd00::1", "brackets"),
            ("a=[fd00::1", "not closed"),
            ("a=10.0.0.300", "not an IPv4 address"),
            ("a=bad_name", "neither an IP address nor a host name"),
            ("a=0.0.0.0", "no node's address"),
        ] {
            let message = usage(endpoints(&nodes, &request(&[arg, "b=10.0.0.2"])));
            assert!(message.contains(says), "{arg}: {message}");
            assert!(message.starts_with("--management"), "{arg}: {message}");
        }
    }

    #[test]
    fn flags_for_unknown_or_repeated_nodes_and_missing_ones_are_refused() {
        let nodes = names(&["a", "b"]);
        let message = usage(endpoints(&nodes, &request(&["a=10.0.0.1", "zz=10.0.0.2"])));
        assert!(
            message.contains("the plan has no node zz; its nodes are a, b"),
            "{message}"
        );
        let message = usage(endpoints(
            &nodes,
            &WriteRequest {
                management: names(&["a=10.0.0.1", "b=10.0.0.2"]),
                metrics: names(&["c=127.0.0.1:9500"]),
                ..WriteRequest::default()
            },
        ));
        assert!(
            message.starts_with("--metrics c=127.0.0.1:9500: the plan has no node c"),
            "{message}"
        );
        let message = usage(endpoints(&nodes, &request(&["a=10.0.0.1", "a=10.0.0.3"])));
        assert!(message.contains("a is given twice"), "{message}");
        let message = usage(endpoints(&nodes, &request(&["a=10.0.0.1"])));
        assert!(message.contains("missing for b"), "{message}");
        let message = usage(endpoints(
            &nodes,
            &request(&["a=10.0.0.1", "b=10.0.0.1:7420"]),
        ));
        assert!(
            message.contains("a and b are both 10.0.0.1:7420"),
            "{message}"
        );
        let message = usage(endpoints(
            &nodes,
            &WriteRequest {
                management: names(&["a=10.0.0.1", "b=10.0.0.2"]),
                grpc: names(&["a=localhost:7420"]),
                ..WriteRequest::default()
            },
        ));
        assert!(message.contains("is not IP:PORT"), "{message}");
    }

    #[test]
    fn a_listener_that_would_take_another_ones_port_is_refused() {
        let nodes = names(&["a", "b"]);
        // A name is listened for on every interface: 0.0.0.0:7420 would
        // take listen.grpc's 127.0.0.1:7420.
        let message = usage(endpoints(&nodes, &request(&["a=a.local", "b=10.0.0.2"])));
        assert!(message.contains("cannot listen on a name"), "{message}");
        assert!(message.contains("listen.grpc 127.0.0.1:7420"), "{message}");
        let message = usage(endpoints(
            &nodes,
            &WriteRequest {
                management: names(&["a=127.0.0.1:7500", "b=127.0.0.1:7501"]),
                metrics: names(&["b=127.0.0.1:7501"]),
                ..WriteRequest::default()
            },
        ));
        assert!(
            message.contains("listen.metrics 127.0.0.1:7501"),
            "{message}"
        );
    }

    #[test]
    fn a_link_range_over_a_management_address_is_refused() {
        let nodes = names(&["a", "b"]);
        let all = endpoints(&nodes, &request(&["a=10.254.0.9", "b=10.0.0.2"])).expect("endpoints");
        let Err(Failure::Usage(message)) = check_range_clear_of(DEFAULT_LINK_RANGE, &all) else {
            panic!("refused");
        };
        assert!(
            message.contains("holds a's management address 10.254.0.9"),
            "{message}"
        );
        let other: Ipv4Cidr = "10.77.0.0/24".parse().expect("cidr");
        assert!(check_range_clear_of(other, &all).is_ok());
    }

    #[test]
    fn alertmanager_urls_need_a_scheme_and_a_host() {
        assert!(check_alertmanager("http://10.0.0.9:9093").is_ok());
        assert!(check_alertmanager("https://am.lab").is_ok());
        for bad in ["10.0.0.9:9093", "http://", "ftp://x", "http://a b"] {
            assert!(
                matches!(check_alertmanager(bad), Err(Failure::Usage(m)) if m.contains(bad)),
                "{bad}"
            );
        }
    }

    /// Each config as written reads back through the daemon's own parser
    /// and rules, saying what the plan says.
    #[test]
    fn every_config_round_trips_through_the_daemons_parser() {
        let plan = plan_of(&["studio-1", "studio-2", "studio-3"]);
        let all = endpoints(
            &node_names(&plan),
            &WriteRequest {
                management: names(&[
                    "studio-1=10.0.0.1",
                    "studio-2=[fd00::2]",
                    "studio-3=studio-3.lab:7422",
                ]),
                metrics: names(&["studio-1=10.0.0.1:9420"]),
                ..WriteRequest::default()
            },
        )
        .expect("endpoints");
        let urls = names(&["http://10.0.0.9:9093"]);
        for node in &plan.nodes {
            let toml = render(&node.name, &plan, &all, &urls);
            let config = meshd::config::Config::parse(&toml, "meshd.toml", "elsewhere")
                .unwrap_or_else(|e| panic!("{}: {e}\n{toml}", node.name));
            assert_eq!(config.node.id.as_str(), node.name);
            let own = &all[&node.name];
            assert_eq!(config.listen.grpc, own.grpc);
            assert_eq!(config.listen.metrics, own.metrics);
            assert_eq!(config.listen.mesh, Some(own.mesh));
            let peers: Vec<(String, String)> = config
                .peers
                .iter()
                .map(|p| (p.id.to_string(), p.address.clone()))
                .collect();
            let expected: Vec<(String, String)> = plan
                .nodes
                .iter()
                .filter(|n| n.name != node.name)
                .map(|n| (n.name.clone(), all[&n.name].management.to_string()))
                .collect();
            assert_eq!(peers, expected);
            assert_eq!(config.links.len(), 2, "a full mesh of 3: two cables each");
            for link in &config.links {
                let cable = plan
                    .cables
                    .iter()
                    .find(|c| {
                        (c.a.node == node.name && c.b.node == link.peer.as_str())
                            || (c.b.node == node.name && c.a.node == link.peer.as_str())
                    })
                    .expect("a planned cable");
                let (local, far) = if cable.a.node == node.name {
                    (&cable.a, &cable.b)
                } else {
                    (&cable.b, &cable.a)
                };
                assert_eq!(link.local_address, IpAddr::V4(local.address));
                assert_eq!(link.peer_address, IpAddr::V4(far.address));
            }
            assert_eq!(
                config.tls.key.as_deref(),
                Some(Path::new(&format!("tls/{}-key.pem", node.name)))
            );
            assert_eq!(config.alerting.alertmanagers.len(), 1);
        }
    }

    fn configs(plan: &CablingPlan, all: &BTreeMap<String, Endpoints>) -> BTreeMap<String, String> {
        plan.nodes
            .iter()
            .map(|n| (n.name.clone(), render(&n.name, plan, all, &[])))
            .collect()
    }

    #[test]
    fn files_are_never_replaced_without_force_and_the_ca_key_stays_off_the_nodes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plan = plan_of(&["a", "b"]);
        let all = endpoints(&node_names(&plan), &request(&["a=10.0.0.1", "b=10.0.0.2"]))
            .expect("endpoints");
        let configs = configs(&plan, &all);
        let now = SystemTime::now();
        let written = write(dir.path(), &configs, true, false, now).expect("write");
        let files = written.files(true);
        for file in &files {
            assert!(file.is_file(), "{}", file.display());
        }
        assert!(dir.path().join("a/tls/ca.pem").is_file());
        assert!(!dir.path().join("a/tls/ca-key.pem").exists());
        assert!(dir.path().join("ca/ca-key.pem").is_file());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &str| {
                fs::metadata(dir.path().join(p))
                    .expect("meta")
                    .permissions()
                    .mode()
                    & 0o777
            };
            assert_eq!(mode("a/tls/a-key.pem"), 0o600);
            assert_eq!(mode("ca/ca-key.pem"), 0o600);
            assert_eq!(mode("a/meshd.toml"), 0o644);
        }
        let config =
            meshd::config::Config::load(&dir.path().join("b/meshd.toml"), "x").expect("loads");
        assert_eq!(
            config.tls.cert,
            Some(dir.path().join("b/tls/b.pem")),
            "beside the file"
        );

        fs::write(dir.path().join("b/meshd.toml"), "# edited by hand\n").expect("edit");
        let Err(Failure::Refused(message)) = write(dir.path(), &configs, true, false, now) else {
            panic!("refused");
        };
        assert!(message.contains("a/meshd.toml"), "{message}");
        assert!(message.contains("--force"), "{message}");
        assert_eq!(
            fs::read_to_string(dir.path().join("b/meshd.toml")).expect("read"),
            "# edited by hand\n",
            "nothing written when refused"
        );
        let ca = fs::read_to_string(dir.path().join("ca/ca.pem")).expect("ca");
        write(dir.path(), &configs, true, true, now).expect("--force");
        assert_eq!(
            fs::read_to_string(dir.path().join("b/meshd.toml")).expect("read"),
            configs["b"]
        );
        assert_ne!(
            fs::read_to_string(dir.path().join("ca/ca.pem")).expect("ca"),
            ca,
            "a new CA"
        );
    }

    #[test]
    fn without_certs_only_the_configs_are_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plan = plan_of(&["a", "b"]);
        let all = endpoints(&node_names(&plan), &request(&["a=10.0.0.1", "b=10.0.0.2"]))
            .expect("endpoints");
        let written = write(
            dir.path(),
            &configs(&plan, &all),
            false,
            false,
            SystemTime::now(),
        )
        .expect("write");
        assert_eq!(written.files(false).len(), 2);
        assert!(!dir.path().join("ca").exists());
        assert!(!dir.path().join("a/tls").exists());
    }
}
