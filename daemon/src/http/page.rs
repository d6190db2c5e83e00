//! The mesh page: `/` on the HTTP port draws this node's view of the mesh
//! (server-rendered, complete without JavaScript), and `/page/live` pushes
//! a fresh rendering of it as server-sent events, at once on every
//! verdict change (the same event stream `meshctl watch` follows) and every
//! [`REFRESH`] besides. Style and script are compiled into the binary and
//! served from this node: nothing is fetched from anywhere else, since
//! nodes often have no internet. Read-only, like `/metrics`.

mod details;
mod history;
mod picture;
mod render;
mod scene;
#[cfg(test)]
mod tests;
mod text;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::history::{HistoryHandle, QueryError};
use crate::state::MeshState;
use meshd_domain::history::HistoryQuery;

pub const STYLE: &str = include_str!("page/assets/style.css");
pub const SCRIPT: &str = include_str!("page/assets/script.js");

/// A live page gets a fresh view at least this often, so its figures and
/// ages move and its silence means lost contact (the script gives up
/// waiting after 5 s).
pub const REFRESH: Duration = Duration::from_secs(2);
/// How soon a browser reconnects after the stream drops (a restart).
const RETRY: Duration = Duration::from_secs(1);
/// Open live pages per node: each costs a rendering per change, so a
/// runaway client cannot make the node render without end.
const MAX_LIVE_PAGES: usize = 32;

/// Nothing but this node: no other origin for scripts, styles, images or
/// connections, no framing, no forms.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

#[derive(Debug, Clone)]
struct PageState {
    mesh: MeshState,
    shutdown: CancellationToken,
    live_pages: Arc<Semaphore>,
    stall_after: Duration,
    history: HistoryHandle,
}

/// The page's routes. Live streams end when `shutdown` fires, so a
/// graceful stop never waits on an open browser tab.
pub fn router(
    mesh: MeshState,
    shutdown: CancellationToken,
    stall_after: Duration,
    history: HistoryHandle,
) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/page/style.css", get(style))
        .route("/page/script.js", get(script))
        .route("/page/live", get(live))
        .with_state(PageState {
            mesh,
            shutdown,
            live_pages: Arc::new(Semaphore::new(MAX_LIVE_PAGES)),
            stall_after,
            history,
        })
}

fn with_headers(content_type: &'static str, body: impl IntoResponse) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Always the node's current state and, after an upgrade, its own assets.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

async fn index(State(page): State<PageState>) -> Response {
    let now = SystemTime::now();
    // The store answers from its own thread, within its timeout; a page
    // without the timeline is better than no page.
    let incidents = page
        .history
        .query(HistoryQuery {
            since: now.checked_sub(history::WINDOW),
            limit: 200,
            ..HistoryQuery::default()
        })
        .await;
    let why;
    let timeline = match &incidents {
        Ok(incidents) => history::Timeline::Incidents(incidents),
        Err(error) => {
            why = match error {
                QueryError::Off => error.to_string(),
                _ => format!("The incident history cannot be shown now: {error}"),
            };
            history::Timeline::Unavailable(&why)
        }
    };
    let html = render::document_with(
        &page.mesh.current_with_measurements(),
        now,
        page.stall_after,
        Some(timeline),
    );
    with_headers("text/html; charset=utf-8", html)
}

async fn style() -> Response {
    with_headers("text/css; charset=utf-8", STYLE)
}

async fn script() -> Response {
    with_headers("text/javascript; charset=utf-8", SCRIPT)
}

async fn live(State(page): State<PageState>) -> Response {
    let Ok(permit) = page.live_pages.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("more than {MAX_LIVE_PAGES} live pages are open on this node; close some"),
        )
            .into_response();
    };
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(push_views(page, tx, permit));
    let mut response = Sse::new(ReceiverStream::new(rx)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Renders this node's view for one live page: at once, after every burst
/// of events, and every [`REFRESH`] without one; until the page goes away
/// or the node stops.
async fn push_views(
    page: PageState,
    client: mpsc::Sender<Result<Event, Infallible>>,
    _permit: OwnedSemaphorePermit,
) {
    let mut events = page.mesh.subscribe_events();
    // On the timer grid, so the page's refreshes share the node's wake-ups.
    let mut refresh = crate::cadence::every(REFRESH);
    let mut first = true;
    loop {
        // The status is published before its events are sent, so this is
        // already the view the events describe.
        let view = render::view(
            &page.mesh.current_with_measurements(),
            SystemTime::now(),
            page.stall_after,
        );
        let mut event = Event::default().event("view").data(view);
        if first {
            event = event.retry(RETRY);
            first = false;
        }
        tokio::select! {
            () = page.shutdown.cancelled() => return,
            sent = client.send(Ok(event)) => if sent.is_err() {
                return;
            },
        }
        tokio::select! {
            () = page.shutdown.cancelled() => return,
            () = client.closed() => return,
            _ = refresh.tick() => {}
            received = events.recv() => {
                if matches!(received, Err(RecvError::Closed)) {
                    return;
                }
                // A node going down takes its links with it: one view for
                // the whole burst. Falling behind loses nothing either: the
                // view is always the whole current status.
                while matches!(events.try_recv(), Ok(_) | Err(TryRecvError::Lagged(_))) {}
            }
        }
    }
}
