//! HTTP on the metrics port: `/metrics` for Prometheus, `/healthz` for
//! supervisors and load balancers, and the mesh page at `/` for people.

mod page;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::aggregator::{MAX_LOOK_INTERVAL, MeshState};
use crate::metrics::Metrics;

/// A verdict older than this many evaluation periods means the aggregator
/// is stuck, and the node should not call itself healthy.
const STALL_PERIODS: u32 = 5;

#[derive(Debug, Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    mesh: MeshState,
}

/// `shutdown` ends the mesh page's live streams, which would otherwise
/// hold a graceful stop open.
pub fn router(metrics: Arc<Metrics>, mesh: MeshState, shutdown: CancellationToken) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(healthz))
        .with_state(HttpState {
            metrics,
            mesh: mesh.clone(),
        })
        .merge(page::router(mesh, shutdown, stall_after()))
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
