//! `meshd.v1.Mesh`: status and events for meshctl and other tools. Handlers
//! read the aggregator's published state and never wait on probes.

use std::pin::Pin;

use meshd_proto::wire;
use meshd_proto::wire::mesh_server::Mesh;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::aggregator::MeshState;

#[derive(Debug, Clone)]
pub struct MeshService {
    state: MeshState,
    shutdown: CancellationToken,
}

/// Events buffered per client between the forwarding task and the wire.
const CLIENT_BUFFER: usize = 64;

impl MeshService {
    /// Event streams end when `shutdown` fires, so a graceful stop never
    /// waits on a watching client.
    pub fn new(state: MeshState, shutdown: CancellationToken) -> Self {
        Self { state, shutdown }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<wire::Event, Status>> + Send>>;

#[tonic::async_trait]
impl Mesh for MeshService {
    async fn get_status(
        &self,
        _request: Request<wire::GetStatusRequest>,
    ) -> Result<Response<wire::MeshStatus>, Status> {
        Ok(Response::new(self.state.current_with_measurements().into()))
    }

    type WatchEventsStream = EventStream;

    async fn watch_events(
        &self,
        _request: Request<wire::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        let events = self.state.subscribe_events();
        let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
        tokio::spawn(forward_events(events, tx, self.shutdown.clone()));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Copies events to one client until the client leaves or the node stops.
/// A client that falls more than the buffer behind is told so and cut off
/// (tonic ends the stream at the first error) rather than shown a history
/// with silent holes.
async fn forward_events(
    mut events: broadcast::Receiver<meshd_proto::domain::Event>,
    client: mpsc::Sender<Result<wire::Event, Status>>,
    shutdown: CancellationToken,
) {
    loop {
        let item = tokio::select! {
            () = shutdown.cancelled() => return,
            () = client.closed() => return,
            received = events.recv() => match received {
                Ok(event) => Ok(event.into()),
                Err(broadcast::error::RecvError::Lagged(missed)) => Err(Status::resource_exhausted(
                    format!("event stream fell {missed} events behind; reconnect to resume"),
                )),
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        let last = item.is_err();
        if client.send(item).await.is_err() || last {
            return;
        }
    }
}
