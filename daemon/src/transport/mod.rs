//! How this node talks to its peers: mutual TLS ([`tls`]), following the
//! certificates' life (`crate::certificates`: expiry, refusals,
//! revocation), and its report
//! streams to every peer on every path ([`streams`]). The intake of the
//! peers' streams is the gRPC `Peer` service (`crate::grpc`), on the mesh
//! listener and on each cable's (`crate::grpc::cables`).

pub mod streams;
pub mod tls;

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// How a cable is named in paths: its interface, else its address.
pub fn path_label(iface: Option<&str>, address: std::net::IpAddr) -> String {
    iface.map_or_else(|| address.to_string(), str::to_owned)
}

/// This process's instance number: random, the same on every stream it
/// opens, different after a restart. Two live daemons claiming one node id
/// differ here.
pub fn instance() -> u64 {
    static INSTANCE: OnceLock<u64> = OnceLock::new();
    *INSTANCE.get_or_init(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish()
    })
}
