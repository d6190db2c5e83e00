//! The gRPC surface: thin handlers over what the aggregator publishes
//! (`Mesh`, `Topology`), the intake of peer reports (`Peer`), standard
//! health and reflection. Handlers never wait on probes or verdicts.

pub mod cables;
pub mod history;
mod local;
mod mesh;
mod peer;
mod topology;

use meshd_proto::wire::mesh_server::MeshServer;
use meshd_proto::wire::peer_server::PeerServer;
use meshd_proto::wire::topology_server::TopologyServer;
use std::time::Duration;

use meshd_proto::{FILE_DESCRIPTOR_SET, service_names};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;

pub use local::LocalClient;
pub use mesh::{MAX_EVENT_STREAMS, MeshService};
pub use peer::PeerService;
pub use topology::TopologyService;

use crate::ports::{Gate, LOCAL_GRPC_MAX_CONNECTION_AGE};
use crate::transport::tls::Accepted;

/// What can stop the gRPC services: setting them up, or serving.
#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    #[error("cannot set up gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// The read-only meshd.v1 services, served on every listener but the
/// cables'.
#[derive(Debug, Clone)]
pub struct ReadOnly {
    pub mesh: MeshService,
    pub topology: TopologyService,
}

/// HTTP/2 limits of every listener: a bounded number of streams per
/// connection, and pings so a peer that vanished is noticed.
fn server() -> Server {
    Server::builder()
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE))
        .tcp_nodelay(true)
}

/// HTTP/2 streams one connection may hold open; a peer needs one per path.
const MAX_STREAMS_PER_CONNECTION: u32 = 32;

/// HTTP/2 pings on a quiet connection.
const KEEPALIVE: Duration = Duration::from_secs(10);

/// A reflection builder that can describe every advertised service.
fn reflection(
    advertised: &[&'static str],
) -> impl Fn() -> tonic_reflection::server::Builder<'static> {
    let advertised = advertised.to_vec();
    // Every advertised service must be describable: clients that load all of
    // them (grpc_requests, grpcui) stop at the first NOT_FOUND. Each `build_*`
    // adds only its own reflection version's file, and both versions are
    // advertised by both, so both files are registered here.
    move || {
        advertised.iter().fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(
                    tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
                ),
            |builder, name| builder.with_service_name(*name),
        )
    }
}

const READ_ONLY: [&str; 2] = [service_names::MESH, service_names::TOPOLOGY];
const STANDARD: [&str; 3] = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// Serves the read-only services (status, events, hostfiles), health and
/// reflection on the connections `gate` admits (loopback, no certificate)
/// until `shutdown`: within its cap and the descriptor reserve, quiet
/// connections closed, none older than [`LOCAL_GRPC_MAX_CONNECTION_AGE`]
/// taking new calls. No HTTP/2 pings here: their answers would keep a
/// quiet connection from ever closing, and on loopback a client that
/// vanished closes its socket with it.
pub fn serve_local(
    gate: Gate,
    services: ReadOnly,
    shutdown: CancellationToken,
) -> Result<impl Future<Output = Result<(), GrpcError>>, GrpcError> {
    let advertised: Vec<&'static str> = READ_ONLY.iter().chain(&STANDARD).copied().collect();
    let reflection = reflection(&advertised);
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let (health, health_service) = tonic_health::server::health_reporter();
    Ok(async move {
        for name in READ_ONLY {
            health
                .set_service_status(name, tonic_health::ServingStatus::Serving)
                .await;
        }
        server()
            .http2_keepalive_interval(None)
            .max_connection_age(LOCAL_GRPC_MAX_CONNECTION_AGE)
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(MeshServer::new(services.mesh))
            .add_service(TopologyServer::new(services.topology))
            .serve_with_incoming_shutdown(
                local::incoming(gate, shutdown.clone()),
                shutdown.cancelled_owned(),
            )
            .await?;
        Ok(())
    })
}

/// Serves everything, the peers' report streams included, on the mesh
/// listener (mutual TLS) until `shutdown`.
pub fn serve_mesh(
    incoming: ReceiverStream<std::io::Result<Accepted>>,
    services: ReadOnly,
    peer: PeerService,
    shutdown: CancellationToken,
) -> Result<impl Future<Output = Result<(), GrpcError>>, GrpcError> {
    let advertised: Vec<&'static str> = READ_ONLY
        .iter()
        .chain(&[service_names::PEER])
        .chain(&STANDARD)
        .copied()
        .collect();
    let reflection = reflection(&advertised);
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let (health, health_service) = tonic_health::server::health_reporter();
    Ok(async move {
        for name in READ_ONLY.iter().chain(&[service_names::PEER]) {
            health
                .set_service_status(*name, tonic_health::ServingStatus::Serving)
                .await;
        }
        server()
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(MeshServer::new(services.mesh))
            .add_service(TopologyServer::new(services.topology))
            .add_service(peer_server(peer))
            .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
            .await?;
        Ok(())
    })
}

/// Serves only the peers' report streams on one cable's address (mutual
/// TLS) until `shutdown`.
pub async fn serve_cable(
    incoming: ReceiverStream<std::io::Result<Accepted>>,
    peer: PeerService,
    shutdown: CancellationToken,
) -> Result<(), GrpcError> {
    server()
        .add_service(peer_server(peer))
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await?;
    Ok(())
}

fn peer_server(peer: PeerService) -> PeerServer<PeerService> {
    PeerServer::new(peer)
        .max_decoding_message_size(peer::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(peer::MAX_MESSAGE_BYTES)
}
