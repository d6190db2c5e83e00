//! Reaching a meshd node, with a hard deadline so a dead address is named
//! within seconds instead of hanging a script.

use std::fmt;
use std::time::Duration;

use meshd_domain::MeshStatus;
use meshd_proto::wire;
use meshd_proto::wire::mesh_client::MeshClient;
use meshd_proto::wire::topology_client::TopologyClient;
use tonic::transport::{Channel, Endpoint};

use crate::outcome::Failure;

/// Connecting plus one call must finish within this, so an unreachable
/// daemon is reported in under 3 seconds.
const DEADLINE: Duration = Duration::from_millis(2500);

/// A meshd gRPC address as the user wrote it and as tonic needs it.
#[derive(Debug, Clone)]
pub struct Target {
    shown: String,
    uri: String,
}

impl Target {
    /// meshd's gRPC port when `listen.grpc` is not set.
    pub const DEFAULT_GRPC_PORT: u16 = 7420;

    /// The URI of meshctl's default address, [`meshctl::cli::DEFAULT_ADDR`].
    fn default_uri() -> String {
        format!("http://{}", meshctl::cli::DEFAULT_ADDR)
    }

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
async fn connect(target: &Target, per_call: Option<Duration>) -> Result<Channel, Failure> {
    let mut endpoint = Endpoint::from_shared(target.uri.clone())
        .map_err(|e| Failure::Usage(format!("bad address {target}: {e}")))?
        .connect_timeout(DEADLINE);
    if let Some(deadline) = per_call {
        endpoint = endpoint.timeout(deadline);
    }
    match endpoint.connect().await {
        Ok(channel) => Ok(channel),
        Err(e) => {
            let hint = if target.uri == Target::default_uri() {
                let demo_a = ([127, 0, 0, 1], meshd_domain::DEMO_BASE_PORT + 1).into();
                nobody_at_the_default_hint(demo_a).await
            } else {
                String::new()
            };
            Err(Failure::Unreachable(format!(
                "cannot reach meshd at {target}: {}{hint}",
                root_cause(&e)
            )))
        }
    }
}

/// Where a bare meshctl that found no meshd on this host should look: a
/// running demo's node `a` at `demo` (its default port), else how to start
/// one.
async fn nobody_at_the_default_hint(demo: std::net::SocketAddr) -> String {
    let answers = tokio::time::timeout(
        Duration::from_millis(300),
        tokio::net::TcpStream::connect(demo),
    )
    .await
    .is_ok_and(|connected| connected.is_ok());
    if answers {
        format!(
            "; a demo answers at {demo} (its node a): `meshctl --addr {demo} status`, or set \
             MESHCTL_ADDR={demo}"
        )
    } else {
        format!(
            "; is meshd running on this host? (`meshd run`, or `meshd demo`, whose node a \
             answers at {demo}); --addr HOST:PORT asks another"
        )
    }
}

/// Runs one call under [`DEADLINE`], connecting included.
async fn bounded<T>(
    target: &Target,
    call: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    tokio::time::timeout(DEADLINE, call).await.map_err(|_| {
        Failure::Unreachable(format!(
            "meshd at {target} did not answer within {DEADLINE:?}"
        ))
    })?
}

/// Asks for a JACCL hostfile; a refusal (no cable map yet, a missing
/// cable, a rank that is not a member) comes back with the daemon's reason.
pub async fn hostfile(
    target: &Target,
    request: wire::GetHostfileRequest,
) -> Result<wire::Hostfile, Failure> {
    bounded(target, async {
        let mut client = TopologyClient::new(connect(target, Some(DEADLINE)).await?);
        client
            .get_hostfile(request)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| match s.code() {
                tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition => Failure::Refused(
                    format!("meshd at {target} cannot build a hostfile: {}", s.message()),
                ),
                _ => call_failed(target, &s, "cannot build a hostfile"),
            })
    })
    .await
}

/// A call that failed on the way, not on its merits: meshd unreachable, or
/// not meshd's gRPC port at all.
fn call_failed(target: &Target, status: &tonic::Status, doing: &str) -> Failure {
    // meshd's own HTTP port says so, naming the node's gRPC address.
    if status.message().starts_with("that is meshd's HTTP port") {
        return Failure::Unreachable(format!("{target}: {}", status.message()));
    }
    // tonic turns an HTTP answer without gRPC into an error "grpc-status
    // header missing, mapped from HTTP status code 404": a web server (such
    // as meshd's own metrics port) answered instead of gRPC.
    if status.message().contains("mapped from HTTP status code") {
        return Failure::Unreachable(format!(
            "{target} answers plain HTTP, not gRPC: that is an HTTP port (meshd's metrics \
             port, 9420 by default, serves /metrics and the mesh page); meshctl needs meshd's \
             gRPC port, {} by default (listen.grpc): --addr HOST:{}",
            Target::DEFAULT_GRPC_PORT,
            Target::DEFAULT_GRPC_PORT
        ));
    }
    Failure::Unreachable(format!("meshd at {target} {doing}: {}", status.message()))
}

/// Fetches and checks the status; everything within [`DEADLINE`].
pub async fn status(target: &Target) -> Result<MeshStatus, Failure> {
    bounded(target, async {
        let mut client = MeshClient::new(connect(target, Some(DEADLINE)).await?);
        let reply = client
            .get_status(wire::GetStatusRequest {})
            .await
            .map_err(|s| call_failed(target, &s, "answered with an error"))?;
        MeshStatus::try_from(reply.into_inner()).map_err(|e| {
            Failure::Unreachable(format!("meshd at {target} sent a malformed status: {e}"))
        })
    })
    .await
}

/// A mesh-wide history waits for every peer (each bounded by the daemon
/// at 3 s), so it gets longer than [`DEADLINE`].
const MESH_HISTORY_DEADLINE: Duration = Duration::from_secs(6);

/// Fetches and checks the incident history.
pub async fn history(
    target: &Target,
    request: wire::GetHistoryRequest,
) -> Result<meshd_proto::convert::History, Failure> {
    let deadline = if request.mesh {
        MESH_HISTORY_DEADLINE
    } else {
        DEADLINE
    };
    let call = async {
        let mut client = MeshClient::new(connect(target, Some(deadline)).await?);
        let reply = client
            .get_history(request)
            .await
            .map_err(|s| match s.code() {
                tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument => {
                    Failure::Refused(format!("meshd at {target}: {}", s.message()))
                }
                _ => call_failed(target, &s, "cannot give its history"),
            })?;
        meshd_proto::convert::History::try_from(reply.into_inner()).map_err(|e| {
            Failure::Unreachable(format!("meshd at {target} sent a malformed history: {e}"))
        })
    };
    tokio::time::timeout(deadline, call).await.map_err(|_| {
        Failure::Unreachable(format!(
            "meshd at {target} did not answer within {deadline:?}"
        ))
    })?
}

/// Opens the event stream; connecting is bounded by [`DEADLINE`], the
/// stream itself runs until meshd or the user ends it.
pub async fn events(target: &Target) -> Result<tonic::Streaming<wire::Event>, Failure> {
    bounded(target, async {
        let mut client = MeshClient::new(connect(target, None).await?);
        client
            .watch_events(wire::WatchEventsRequest {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| call_failed(target, &s, "refused the event stream"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bare_meshctl_is_pointed_at_a_running_demo_or_told_how_to_start_one() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let demo = listener.local_addr().expect("addr");
        let answering = nobody_at_the_default_hint(demo).await;
        assert_eq!(
            answering,
            format!(
                "; a demo answers at {demo} (its node a): `meshctl --addr {demo} status`, or set \
                 MESHCTL_ADDR={demo}"
            )
        );
        drop(listener);
        let silent = nobody_at_the_default_hint(demo).await;
        assert!(
            silent.starts_with("; is meshd running on this host? (`meshd run`, or `meshd demo`"),
            "{silent}"
        );
    }
}
