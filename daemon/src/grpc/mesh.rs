//! `meshd.v1.Mesh`: status and events for meshctl and other tools. Handlers
//! read the aggregator's published state and never wait on probes.

use std::pin::Pin;
use std::sync::Arc;

use meshd_proto::wire;
use meshd_proto::wire::mesh_server::Mesh;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, mpsc};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::LocalClient;
use super::history::{self, MeshReach};
use crate::history::HistoryHandle;
use crate::ports::{EVENT_STREAMS_PER_CONNECTION, StreamPlace};
use crate::state::{MeshState, Numbered};

#[derive(Debug, Clone)]
pub struct MeshService {
    state: MeshState,
    shutdown: CancellationToken,
    /// One permit per open event stream.
    event_streams: Arc<Semaphore>,
    history: HistoryHandle,
    /// How to ask the peers for theirs; `None` on a node without a mesh
    /// listener.
    reach: Option<MeshReach>,
}

/// Events buffered per client between the forwarding task and the wire.
const CLIENT_BUFFER: usize = 64;
/// Event streams this node serves at once, from every client together:
/// each holds a task and a buffer, and a handful of watchers is normal
/// (meshctl watch, a dashboard), so more is a leak or an attack. On the
/// local listener one connection holds at most
/// [`EVENT_STREAMS_PER_CONNECTION`] of them.
pub const MAX_EVENT_STREAMS: usize = 64;

impl MeshService {
    /// Event streams end when `shutdown` fires, so a graceful stop never
    /// waits on a watching client.
    pub fn new(
        state: MeshState,
        shutdown: CancellationToken,
        history: HistoryHandle,
        reach: Option<MeshReach>,
    ) -> Self {
        Self {
            state,
            shutdown,
            event_streams: Arc::new(Semaphore::new(MAX_EVENT_STREAMS)),
            history,
            reach,
        }
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

    async fn get_history(
        &self,
        request: Request<wire::GetHistoryRequest>,
    ) -> Result<Response<wire::History>, Status> {
        let query = meshd_domain::history::HistoryQuery::try_from(request.into_inner())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let answer =
            history::answer(&self.history, &self.state, self.reach.as_ref(), query).await?;
        Ok(Response::new(answer.into()))
    }

    type WatchEventsStream = EventStream;

    async fn watch_events(
        &self,
        request: Request<wire::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        // The connection's share first, so that a client over it is told
        // so, not that the node is full.
        let place = match request.extensions().get::<LocalClient>() {
            Some(client) => Some(
                client
                    .streams
                    .try_open(EVENT_STREAMS_PER_CONNECTION)
                    .ok_or_else(|| {
                        Status::resource_exhausted(format!(
                            "this connection already holds {EVENT_STREAMS_PER_CONNECTION} event \
                             streams, the most one connection may; close one first"
                        ))
                    })?,
            ),
            None => None,
        };
        let permit = self
            .event_streams
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "this node already serves {MAX_EVENT_STREAMS} event streams; close one first"
                ))
            })?;
        // Subscribed before the snapshot is read, so that no event falls
        // between them; those both have are skipped by their number.
        let events = self.state.subscribe_events();
        let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
        tokio::spawn(forward_events(
            self.state.clone(),
            events,
            tx,
            self.shutdown.clone(),
            (permit, place),
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Copies events to one client until the client leaves or the node stops:
/// first the status as a snapshot, then every event after it. A client that
/// falls more than the buffer behind gets a fresh snapshot in place of the
/// events it missed, never a history with silent holes. The stream's places
/// (the node's, and the local connection's) are given back when this ends.
async fn forward_events(
    state: MeshState,
    mut events: broadcast::Receiver<Numbered>,
    client: mpsc::Sender<Result<wire::Event, Status>>,
    shutdown: CancellationToken,
    _places: (OwnedSemaphorePermit, Option<StreamPlace>),
) {
    let mut next = Some(state.snapshot());
    let mut through = 0;
    loop {
        let numbered = match next.take() {
            Some(snapshot) => snapshot,
            None => tokio::select! {
                () = shutdown.cancelled() => return,
                () = client.closed() => return,
                received = events.recv() => match received {
                    Ok(numbered) if numbered.sequence <= through => continue,
                    Ok(numbered) => numbered,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "an event stream fell behind; sending a snapshot");
                        state.snapshot()
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            },
        };
        through = through.max(numbered.sequence);
        if client.send(Ok(numbered.into())).await.is_err() {
            return;
        }
    }
}
