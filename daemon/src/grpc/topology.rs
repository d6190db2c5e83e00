//! `meshd.v1.Topology`: JACCL hostfiles from the live cable map and the
//! mesh's verdict on each cable (a pair over a link that is not up is
//! refused unless the request allows it). The handler
//! reads the aggregator's published status and the config in force; it
//! never runs a command or waits on a probe.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use meshd_domain::NodeId;
use meshd_mesh::Backend;
use meshd_mesh::hostfile::{LinksNotUp, build_hostfile};
use meshd_proto::wire;
use meshd_proto::wire::topology_server::Topology;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::config::Config;
use crate::config::Host;
use crate::state::MeshState;

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
        let config = self.config.borrow().clone();
        let members = config.members();
        let ranks = if request.ranks.is_empty() {
            members.clone()
        } else {
            member_ranks(request.ranks, &members)?
        };
        let ssh = request
            .ssh
            .into_iter()
            .map(|(node, host)| Ok((member("ssh", node, &members)?, host)))
            .collect::<Result<BTreeMap<NodeId, String>, Status>>()?;
        let status = self.state.current();
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
        let links_not_up = if request.allow_links_not_up {
            LinksNotUp::Allow
        } else {
            LinksNotUp::Refuse
        };
        let hostfile = build_hostfile(
            &ranks,
            &status.cables,
            &status.links,
            backend,
            &ssh,
            rank0_ip,
            links_not_up,
        )
        .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new((&hostfile).into()))
    }
}

/// The requested ranks, each a configured member and none twice. Checked
/// rank by rank before the hostfile is built, whose work grows with the
/// square of the ranks: the first stranger or repeat ends the check, so a
/// request for thousands of made-up ranks costs at most one check per
/// member and one more, not a matrix.
fn member_ranks(requested: Vec<String>, members: &[NodeId]) -> Result<Vec<NodeId>, Status> {
    let mut seen = BTreeSet::new();
    requested
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let rank = member(&format!("ranks[{i}]"), id, members)?;
            if !seen.insert(rank.clone()) {
                return Err(Status::invalid_argument(format!(
                    "ranks[{i}]: {rank} is listed twice"
                )));
            }
            Ok(rank)
        })
        .collect()
}

/// `id` as a configured member's node id, or why not.
fn member(field: &str, id: String, members: &[NodeId]) -> Result<NodeId, Status> {
    let id = NodeId::new(id).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))?;
    if members.binary_search(&id).is_err() {
        return Err(Status::invalid_argument(format!(
            "{field}: {id} is not a member of the mesh; its members are {}",
            members
                .iter()
                .map(NodeId::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(id)
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

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::id;

    use super::*;

    fn members() -> Vec<NodeId> {
        ["a", "b", "c"].into_iter().map(id).collect()
    }

    #[test]
    fn ranks_must_be_configured_members_listed_once() {
        let ok = member_ranks(vec!["c".into(), "a".into()], &members()).expect("members");
        assert_eq!(ok, vec![id("c"), id("a")]);

        let err = member_ranks(vec!["a".into(), "zz".into()], &members()).expect_err("stranger");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            err.message(),
            "ranks[1]: zz is not a member of the mesh; its members are a, b, c"
        );

        let err = member_ranks(vec!["a".into(), "a".into()], &members()).expect_err("twice");
        assert_eq!(err.message(), "ranks[1]: a is listed twice");
    }

    /// 8000 made-up ranks used to be laid out in an 8000 x 8000 matrix
    /// (1.5 GB) before anything checked them.
    #[test]
    fn thousands_of_ranks_are_refused_before_any_matrix() {
        let made_up: Vec<String> = (0..8000).map(|i| format!("n{i}")).collect();
        let err = member_ranks(made_up, &members()).expect_err("strangers");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            err.message(),
            "ranks[0]: n0 is not a member of the mesh; its members are a, b, c"
        );
        let repeated: Vec<String> = ["a", "b", "c"]
            .iter()
            .cycle()
            .take(8000)
            .map(|n| (*n).to_owned())
            .collect();
        let err = member_ranks(repeated, &members()).expect_err("repeats");
        assert_eq!(err.message(), "ranks[3]: a is listed twice");
    }
}
