//! HTTP on the metrics port: `/metrics` for Prometheus, `/healthz` for
//! supervisors and load balancers, and the mesh page at `/` for people.

mod page;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
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
) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(healthz))
        .with_state(HttpState {
            metrics,
            mesh: mesh.clone(),
        })
        .merge(page::router(mesh, shutdown, stall_after()))
        .fallback(move |request: Request| async move { elsewhere(&request, grpc) })
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
