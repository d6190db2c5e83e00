//! HTTP on the metrics port: `/metrics` for Prometheus, `/healthz` for
//! supervisors and load balancers, and the mesh page at `/` for people.
//! Served through hyper's HTTP/1 connection builder rather than
//! `axum::serve`, for the bounds `axum::serve` has no place for: the
//! connection cap and descriptor reserve of [`crate::ports::Gate`], a
//! deadline on a request's headers, and quiet connections closed.

mod page;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::ports::{Admitted, Gate, HTTP_HEADER_READ_TIMEOUT, HTTP_IDLE_TIMEOUT};
use crate::state::{MAX_LOOK_INTERVAL, MeshState};

/// A verdict older than this many evaluation periods means the aggregator
/// is stuck, and the node should not call itself healthy.
const STALL_PERIODS: u32 = 5;

#[derive(Debug, Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    mesh: MeshState,
}

/// `shutdown` ends the mesh page's live streams, which would otherwise
/// hold a graceful stop open. `grpc` is where this node serves gRPC, named
/// to a gRPC client that knocked here instead.
pub fn router(
    metrics: Arc<Metrics>,
    mesh: MeshState,
    shutdown: CancellationToken,
    grpc: SocketAddr,
    history: crate::history::HistoryHandle,
) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(healthz))
        .with_state(HttpState {
            metrics,
            mesh: mesh.clone(),
        })
        .merge(page::router(mesh, shutdown, stall_after(), history))
        .fallback(move |request: Request| async move { elsewhere(&request, grpc) })
}

/// After a stop, connections still open this long (a client that does not
/// read its response) are cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves `router` on the connections `gate` admits until `shutdown`,
/// then lets the requests in flight finish (the page's live streams end
/// with `shutdown`) for at most [`SHUTDOWN_GRACE`].
pub async fn serve(mut gate: Gate, router: Router, shutdown: CancellationToken) {
    let mut connections = JoinSet::new();
    while let Some(admitted) = gate.next(&shutdown).await {
        while connections.try_join_next().is_some() {}
        connections.spawn(serve_connection(admitted, router.clone(), shutdown.clone()));
    }
    let finished = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, finished)
        .await
        .is_err()
    {
        tracing::debug!(
            open = connections.len(),
            "HTTP connections still open after the grace are cut"
        );
    }
}

/// Streams at once on one HTTP/2 connection to the HTTP port.
const HTTP2_MAX_STREAMS: u32 = 8;

/// One HTTP connection: HTTP/1 headers within [`HTTP_HEADER_READ_TIMEOUT`]
/// (hyper restarts that deadline after every response, which bounds an
/// idle keep-alive too), closed when no byte moved for
/// [`HTTP_IDLE_TIMEOUT`] (a client that stopped reading).
async fn serve_connection(admitted: Admitted, router: Router, shutdown: CancellationToken) {
    let remote = admitted.remote;
    let io = TokioIo::new(admitted.quiet_after(HTTP_IDLE_TIMEOUT, None));
    // HTTP/2 too: meshctl pointed here by mistake speaks gRPC, and is
    // answered which port it wants (see `elsewhere`).
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HTTP_HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(HTTP2_MAX_STREAMS);
    let connection = builder.serve_connection(io, TowerToHyperService::new(router));
    tokio::pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = served {
        tracing::debug!(%remote, %error, "HTTP connection ended");
    }
}

/// Anything not served here: a 404, except that a gRPC client (meshctl
/// given the metrics port) gets a gRPC error it shows as is, naming the
/// port it wanted.
fn elsewhere(request: &Request, grpc: SocketAddr) -> Response {
    let is_grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if !is_grpc {
        return StatusCode::NOT_FOUND.into_response();
    }
    let message = grpc_wrong_port(grpc);
    // A trailers-only gRPC response: the status travels in the headers.
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", HeaderValue::from_static("12"));
    if let Ok(value) = HeaderValue::from_str(&percent_encode(&message)) {
        headers.insert("grpc-message", value);
    }
    response
}

/// What a gRPC client on the metrics port is told.
/// The mesh page's URL on an HTTP listener at `addr`, as a person on this
/// host opens it: an unspecified address (all interfaces) is `localhost`.
pub fn page_url(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("http://localhost:{}/", addr.port())
    } else {
        format!("http://{addr}/")
    }
}

pub fn grpc_wrong_port(grpc: SocketAddr) -> String {
    format!(
        "that is meshd's HTTP port (metrics and the mesh page); gRPC is on {grpc} \
         (listen.grpc): use --addr HOST:{}",
        grpc.port()
    )
}

/// gRPC's percent-encoding of `grpc-message`: printable ASCII but `%` as
/// is, every other byte as `%XX`.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b' '..=b'~' if b != b'%' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn stall_after() -> Duration {
    MAX_LOOK_INTERVAL * STALL_PERIODS
}

async fn render_metrics(State(state): State<HttpState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(&state.mesh.published.borrow().clone()),
    )
        .into_response()
}

/// 200 while the verdict engine keeps evaluating (with or without quorum:
/// a partitioned node is still a working daemon), 503 when it has stalled.
async fn healthz(State(state): State<HttpState>) -> Response {
    let status = state.mesh.current();
    let age = SystemTime::now()
        .duration_since(status.evaluated_at)
        .unwrap_or(Duration::ZERO);
    let stalled = age > stall_after();
    let body = serde_json::json!({
        "status": if stalled { "stalled" } else { "ok" },
        "node": status.node.id.as_str(),
        "has_quorum": status.quorum.has_quorum,
        "last_evaluation_age_seconds": age.as_secs_f64(),
    });
    let code = if stalled {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_url_is_one_a_person_on_this_host_can_open() {
        assert_eq!(
            page_url("0.0.0.0:9420".parse().expect("addr")),
            "http://localhost:9420/"
        );
        assert_eq!(
            page_url("[::]:9420".parse().expect("addr")),
            "http://localhost:9420/"
        );
        assert_eq!(
            page_url("10.0.0.1:9420".parse().expect("addr")),
            "http://10.0.0.1:9420/"
        );
        assert_eq!(
            page_url("[fe80::1]:9420".parse().expect("addr")),
            "http://[fe80::1]:9420/"
        );
    }
}
