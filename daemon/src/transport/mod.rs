//! How this node talks to its peers: mutual TLS ([`tls`]) and its report
//! streams to every peer on every path ([`streams`]). The intake of the
//! peers' streams is the gRPC `Peer` service (`crate::grpc`).

pub mod cables;
pub mod streams;
pub mod tls;

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

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
