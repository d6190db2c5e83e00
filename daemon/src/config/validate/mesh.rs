//! The `[mesh]` section: the configured members, their ids and addresses,
//! and this node's own place among them.

use std::collections::HashMap;
use std::net::SocketAddr;

use meshd_domain::NodeId;

use super::super::Config;
use super::super::address::{Host, PeerAddress};
use super::super::error::Problem;
use super::MAX_MESH_SIZE;

pub(super) fn check_mesh(c: &Config, p: &mut Vec<Problem>) {
    let members = c.peers.len() + 1;
    if members > MAX_MESH_SIZE {
        p.push(Problem::new(
            "peers",
            format!(
                "the mesh has {members} members (this node and {} peers); at most {MAX_MESH_SIZE} are supported",
                c.peers.len()
            ),
        ));
    }

    let mut ids: HashMap<&NodeId, usize> = HashMap::new();
    let mut addresses: HashMap<PeerAddress, usize> = HashMap::new();
    for (i, peer) in c.peers.iter().enumerate() {
        let id_key = format!("peers[{i}].id");
        if peer.id == c.node.id {
            p.push(Problem::new(
                &id_key,
                format!(
                    "{:?} is this node's own id (node.id); list only the other members of the mesh",
                    peer.id.as_str()
                ),
            ));
        }
        match ids.get(&peer.id) {
            Some(first) => p.push(
                Problem::new(&id_key, format!("duplicate peer id {:?}", peer.id.as_str()))
                    .with_first(format!("peers[{first}].id")),
            ),
            None => {
                ids.insert(&peer.id, i);
            }
        }

        let address_key = format!("peers[{i}].address");
        match peer.address.parse::<PeerAddress>() {
            Ok(address) => match addresses.get(&address) {
                _ if own_address(c, &address).is_some() => p.push(
                    Problem::new(
                        &address_key,
                        format!(
                            "{:?} is this node's own listener; give the peer's address on the management network",
                            peer.address
                        ),
                    )
                    .see(own_address(c, &address).unwrap_or_default()),
                ),
                Some(first) => p.push(
                    Problem::new(
                        &address_key,
                        format!("duplicate peer address {:?}", peer.address),
                    )
                    .with_first(format!("peers[{first}].address")),
                ),
                None => {
                    addresses.insert(address, i);
                }
            },
            Err(e) => p.push(Problem::new(
                &address_key,
                format!(
                    "{:?} is not a valid address: {e}; use host:port with an IPv4 address, \
                     [IPv6] or DNS name, e.g. \"10.0.0.2:7420\"",
                    peer.address
                ),
            )),
        }
    }
}

/// The key of this node's own listener or cable end at `address`, if any.
fn own_address(c: &Config, address: &PeerAddress) -> Option<String> {
    let Host::Ip(ip) = address.host else {
        return None;
    };
    let at = SocketAddr::new(ip, address.port);
    if c.listen.mesh == Some(at) || c.listen.grpc == at {
        return Some(
            if c.listen.grpc == at {
                "listen.grpc"
            } else {
                "listen.mesh"
            }
            .to_owned(),
        );
    }
    c.links
        .iter()
        .position(|link| link.local_probe_addr(&c.probe) == at)
        .map(|i| format!("links[{i}].local_address"))
}
