//! The meshd.v1 wire protocol.
//!
//! `wire` is generated from `meshd/v1/*.proto`; the `meshd-domain` crate
//! holds the same facts with their invariants checked (node ids valid, enums
//! known, times present), and `convert` turns one into the other.
//! Everything that reads a message from the network goes through `convert`,
//! so a malformed message becomes a [`convert::WireError`] naming the field
//! instead of a silent misreading.

pub mod convert;
pub mod limits;

/// Generated protobuf types and gRPC stubs of package `meshd.v1`.
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod wire {
    tonic::include_proto!("meshd.v1");
}

/// The encoded `FileDescriptorSet` of `meshd.v1`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/meshd_v1_descriptor.bin"));

/// Fully qualified names of the gRPC services, as reflection lists them.
pub mod service_names {
    pub const MESH: &str = "meshd.v1.Mesh";
    pub const PEER: &str = "meshd.v1.Peer";
    pub const TOPOLOGY: &str = "meshd.v1.Topology";
}
