//! Reaching a meshd node, with a hard deadline so a dead address is named
//! within seconds instead of hanging a script.

use std::fmt;
use std::time::Duration;

use meshd_proto::domain::MeshStatus;
use meshd_proto::wire;
use meshd_proto::wire::mesh_client::MeshClient;
use meshd_proto::wire::topology_client::TopologyClient;
use tonic::transport::{Channel, Endpoint};

pub const DEFAULT_ADDR: &str = "127.0.0.1:7420";

/// Connecting plus one call must finish within this, so an unreachable
/// daemon is reported in under 3 seconds.
const DEADLINE: Duration = Duration::from_millis(2500);

/// Why a command could not get an answer; the message names the address.
#[derive(Debug)]
pub struct Unreachable(pub String);

/// A meshd gRPC address as the user wrote it and as tonic needs it.
#[derive(Debug, Clone)]
pub struct Target {
    shown: String,
    uri: String,
}

impl Target {
    pub fn parse(addr: &str) -> Result<Self, String> {
        let addr = addr.trim();
        let uri = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("http://{addr}")
        };
        let parsed: tonic::codegen::http::Uri = uri
            .parse()
            .map_err(|e| format!("--addr {addr:?} is not HOST:PORT: {e}"))?;
        if parsed.port_u16().is_none() || parsed.host().is_none_or(str::is_empty) {
            return Err(format!(
                "--addr {addr:?} needs a host and a port, e.g. 127.0.0.1:7420"
            ));
        }
        Ok(Self {
            shown: addr.to_owned(),
            uri,
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// `per_call`: a deadline for each call, or none for streams that are
/// meant to run until the user stops them.
async fn connect(target: &Target, per_call: Option<Duration>) -> Result<Channel, Unreachable> {
    let mut endpoint = Endpoint::from_shared(target.uri.clone())
        .map_err(|e| Unreachable(format!("bad address {target}: {e}")))?
        .connect_timeout(DEADLINE);
    if let Some(deadline) = per_call {
        endpoint = endpoint.timeout(deadline);
    }
    endpoint.connect().await.map_err(|e| {
        Unreachable(format!(
            "cannot reach meshd at {target}: {}",
            root_cause(&e)
        ))
    })
}

/// Runs one call under [`DEADLINE`], connecting included.
async fn bounded<T>(
    target: &Target,
    call: impl Future<Output = Result<T, Unreachable>>,
) -> Result<T, Unreachable> {
    tokio::time::timeout(DEADLINE, call).await.map_err(|_| {
        Unreachable(format!(
            "meshd at {target} did not answer within {DEADLINE:?}"
        ))
    })?
}

/// Asks for a JACCL hostfile; a refusal (no cable map yet, a missing
/// cable) comes back with the daemon's reason.
pub async fn hostfile(
    target: &Target,
    request: wire::GetHostfileRequest,
) -> Result<wire::Hostfile, Unreachable> {
    bounded(target, async {
        let mut client = TopologyClient::new(connect(target, Some(DEADLINE)).await?);
        client
            .get_hostfile(request)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| {
                Unreachable(format!(
                    "meshd at {target} cannot build a hostfile: {}",
                    s.message()
                ))
            })
    })
    .await
}

/// Fetches and checks the status; everything within [`DEADLINE`].
pub async fn status(target: &Target) -> Result<MeshStatus, Unreachable> {
    bounded(target, async {
        let mut client = MeshClient::new(connect(target, Some(DEADLINE)).await?);
        let reply = client
            .get_status(wire::GetStatusRequest {})
            .await
            .map_err(|s| {
                Unreachable(format!(
                    "meshd at {target} answered with an error: {}",
                    s.message()
                ))
            })?;
        MeshStatus::try_from(reply.into_inner())
            .map_err(|e| Unreachable(format!("meshd at {target} sent a malformed status: {e}")))
    })
    .await
}

/// Opens the event stream; connecting is bounded by [`DEADLINE`], the
/// stream itself runs until meshd or the user ends it.
pub async fn events(target: &Target) -> Result<tonic::Streaming<wire::Event>, Unreachable> {
    bounded(target, async {
        let mut client = MeshClient::new(connect(target, None).await?);
        client
            .watch_events(wire::WatchEventsRequest {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| {
                Unreachable(format!(
                    "meshd at {target} refused the event stream: {}",
                    s.message()
                ))
            })
    })
    .await
}

/// tonic wraps the OS error ("connection refused") a few layers down.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
