//! `meshd.v1.Topology`: JACCL hostfiles from the live cable map. The handler
//! reads the aggregator's published status and the config in force; it
//! never runs a command or waits on a probe.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use meshd_platform::mesh::Backend;
use meshd_platform::mesh::hostfile::build_hostfile;
use meshd_proto::domain::NodeId;
use meshd_proto::wire;
use meshd_proto::wire::topology_server::Topology;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::aggregator::MeshState;
use crate::config::Config;
use crate::config::Host;

#[derive(Debug, Clone)]
pub struct TopologyService {
    state: MeshState,
    config: watch::Receiver<Arc<Config>>,
}

impl TopologyService {
    pub fn new(state: MeshState, config: watch::Receiver<Arc<Config>>) -> Self {
        Self { state, config }
    }
}

#[tonic::async_trait]
impl Topology for TopologyService {
    async fn get_hostfile(
        &self,
        request: Request<wire::GetHostfileRequest>,
    ) -> Result<Response<wire::Hostfile>, Status> {
        let request = request.into_inner();
        let backend = match wire::HostfileBackend::try_from(request.backend) {
            Ok(wire::HostfileBackend::Jaccl | wire::HostfileBackend::Unspecified) => Backend::Jaccl,
            Ok(wire::HostfileBackend::JacclRing) => Backend::JacclRing,
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "backend: unknown value {}",
                    request.backend
                )));
            }
        };
        let status = self.state.current();
        let config = self.config.borrow().clone();
        let ranks = if request.ranks.is_empty() {
            status.quorum.configured.clone()
        } else {
            node_ids("ranks", request.ranks)?
        };
        let strangers: Vec<&str> = ranks
            .iter()
            .filter(|rank| !status.quorum.configured.contains(rank))
            .map(NodeId::as_str)
            .collect();
        if !strangers.is_empty() {
            return Err(Status::invalid_argument(format!(
                "ranks: {} {} not a member of the mesh; its members are {}",
                strangers.join(", "),
                if strangers.len() == 1 { "is" } else { "are" },
                status
                    .quorum
                    .configured
                    .iter()
                    .map(NodeId::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let ssh = request
            .ssh
            .into_iter()
            .map(|(node, host)| Ok((node_id("ssh", node)?, host)))
            .collect::<Result<BTreeMap<NodeId, String>, Status>>()?;
        let rank0_ip = if request.rank0_ip.is_empty() {
            match ranks.first() {
                Some(rank0) => management_ip(&config, rank0).await,
                None => None,
            }
        } else {
            Some(request.rank0_ip.parse::<Ipv4Addr>().map_err(|_| {
                Status::invalid_argument(format!(
                    "rank0_ip: {:?} is not an IPv4 address",
                    request.rank0_ip
                ))
            })?)
        };
        let hostfile = build_hostfile(&ranks, &status.cables, backend, &ssh, rank0_ip)
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new((&hostfile).into()))
    }
}

fn node_id(field: &str, id: String) -> Result<NodeId, Status> {
    NodeId::new(id).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
}

fn node_ids(field: &str, ids: Vec<String>) -> Result<Vec<NodeId>, Status> {
    ids.into_iter().map(|id| node_id(field, id)).collect()
}

/// A peer's DNS name must resolve within this, or the caller is asked for
/// `rank0_ip`.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(1);

/// Where `node` is reached on the management network, as this node's config
/// says: a peer's configured address (a name resolved to IPv4), or this
/// node's own gRPC listen address unless it listens on every interface.
async fn management_ip(config: &Config, node: &NodeId) -> Option<Ipv4Addr> {
    let v4 = |ip: IpAddr| match ip {
        IpAddr::V4(ip) if !ip.is_unspecified() => Some(ip),
        _ => None,
    };
    if *node == config.node.id {
        return v4(config.listen.grpc.ip());
    }
    let peer = config.peers.iter().find(|p| &p.id == node)?;
    match peer.endpoint().ok()?.host {
        Host::Ip(ip) => v4(ip),
        Host::Name(name) => {
            let lookup = tokio::net::lookup_host((name.as_str(), 0));
            let addrs = tokio::time::timeout(RESOLVE_TIMEOUT, lookup)
                .await
                .ok()?
                .ok()?;
            addrs.map(|a| a.ip()).find_map(v4)
        }
    }
}
