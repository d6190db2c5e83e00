//! `meshd.v1.Topology`: JACCL hostfiles from the live cable map. The handler
//! reads the aggregator's published status and the config in force; it
//! never runs a command or waits on a probe.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use meshd_platform::mesh::Backend;
use meshd_platform::mesh::hostfile::build_hostfile;
use meshd_proto::domain::NodeId;
use meshd_proto::wire;
use meshd_proto::wire::topology_server::Topology;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::aggregator::MeshState;
use crate::config::Config;
use crate::config::address::Host;

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
        let ssh = request
            .ssh
            .into_iter()
            .map(|(node, host)| Ok((node_id("ssh", node)?, host)))
            .collect::<Result<BTreeMap<NodeId, String>, Status>>()?;
        let rank0_ip = if request.rank0_ip.is_empty() {
            ranks
                .first()
                .and_then(|rank0| management_ip(&config, rank0))
        } else {
            Some(request.rank0_ip)
        };
        let hostfile = build_hostfile(&ranks, &status.cables, backend, &ssh, rank0_ip)
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new(hostfile.into()))
    }
}

fn node_id(field: &str, id: String) -> Result<NodeId, Status> {
    NodeId::new(id).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
}

fn node_ids(field: &str, ids: Vec<String>) -> Result<Vec<NodeId>, Status> {
    ids.into_iter().map(|id| node_id(field, id)).collect()
}

/// Where `node` is reached on the management network, as this node's config
/// says: a peer's configured address, or this node's own gRPC listen
/// address unless it listens on every interface.
fn management_ip(config: &Config, node: &NodeId) -> Option<String> {
    if *node == config.node.id {
        let ip = config.listen.grpc.ip();
        return (!ip.is_unspecified()).then(|| ip.to_string());
    }
    let peer = config.peers.iter().find(|p| &p.id == node)?;
    match peer.endpoint().ok()?.host {
        Host::Ip(IpAddr::V4(ip)) => Some(ip.to_string()),
        Host::Ip(IpAddr::V6(ip)) => Some(ip.to_string()),
        Host::Name(name) => Some(name),
    }
}
