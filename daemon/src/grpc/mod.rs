//! The gRPC surface: thin handlers over what the aggregator publishes
//! (`Mesh`, `Topology`), the intake of peer reports (`Peer`), standard
//! health and reflection. Handlers never wait on probes or verdicts.

mod mesh;
mod peer;
mod topology;

use meshd_proto::wire::mesh_server::MeshServer;
use meshd_proto::wire::peer_server::PeerServer;
use meshd_proto::wire::topology_server::TopologyServer;
use meshd_proto::{FILE_DESCRIPTOR_SET, service_names};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;

pub use mesh::{MAX_EVENT_STREAMS, MeshService};
pub use peer::PeerService;
pub use topology::TopologyService;

use crate::node::{ServeError, StartError};

/// The meshd.v1 services this node serves.
#[derive(Debug)]
pub struct Services {
    pub mesh: MeshService,
    pub peer: PeerService,
    pub topology: TopologyService,
}

/// Serves the meshd.v1 services, health and reflection on `listener` until
/// `shutdown`.
pub fn serve(
    listener: TcpListener,
    services: Services,
    shutdown: CancellationToken,
) -> Result<impl Future<Output = Result<(), ServeError>>, StartError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    let advertised = [
        service_names::MESH,
        service_names::PEER,
        service_names::TOPOLOGY,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ];
    // Every advertised service must be describable: clients that load all of
    // them (grpc_requests, grpcui) stop at the first NOT_FOUND. Each `build_*`
    // adds only its own reflection version's file, and both versions are
    // advertised by both, so both files are registered here.
    let reflection = || {
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
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    Ok(async move {
        for name in [
            service_names::MESH,
            service_names::PEER,
            service_names::TOPOLOGY,
        ] {
            health
                .set_service_status(name, tonic_health::ServingStatus::Serving)
                .await;
        }
        tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(MeshServer::new(services.mesh))
            .add_service(PeerServer::new(services.peer))
            .add_service(TopologyServer::new(services.topology))
            .serve_with_incoming_shutdown(
                TcpListenerStream::new(listener),
                shutdown.cancelled_owned(),
            )
            .await?;
        Ok(())
    })
}
