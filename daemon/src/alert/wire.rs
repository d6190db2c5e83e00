//! Alertmanager's API v2 as the pusher speaks it: posting alerts
//! (`POST /api/v2/alerts`) and reading back what it holds (`GET`), over
//! http or https, each exchange under a timeout; and Alertmanager's clock,
//! from the `Date` header of every answer, so the pages' times are its own.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use meshd_model::alerts::{Alert, Held, POSTED_BY, Post, on_alertmanager_clock, on_clock};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::target::Target;

/// One exchange (connect, send, answer) may take this long.
pub(super) const POST_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer read from Alertmanager.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Alertmanager API v2 `postableAlert`. A firing alert has no end:
/// Alertmanager's `resolve_timeout` ends it if no poster re-sends it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Postable<'a> {
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    starts_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    ends_at: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub(super) enum PostError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("bad request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("cannot encode the alerts: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("Alertmanager answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("no answer within {POST_TIMEOUT:?}")]
    Timeout,
    #[error("cannot read the answer: {0}")]
    Answer(String),
}

/// An answer: its body, and Alertmanager's clock when it answered (the
/// `Date` header; `None` when it sent none or one that does not parse).
#[derive(Debug)]
pub(super) struct Answer {
    pub body: Bytes,
    pub date: Option<SystemTime>,
}

/// Alertmanager's clock against this node's, from the latest answer.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RemoteClock {
    /// This node's clock and Alertmanager's at the same moment.
    reading: Option<(SystemTime, SystemTime)>,
}

impl RemoteClock {
    pub fn note(&mut self, local: SystemTime, answer: &Answer) {
        if let Some(remote) = answer.date {
            self.reading = Some((local, remote));
        }
    }

    /// Alertmanager's clock when this node's reads `now`; `None` before the
    /// first answer with a `Date`.
    pub fn remote_at(&self, now: SystemTime) -> Option<SystemTime> {
        let (local, remote) = self.reading?;
        Some(on_clock(now, local, remote))
    }
}

/// The JSON body of a post, on Alertmanager's clock as `clock` knows it,
/// and how many alerts were left out because a time of theirs cannot be
/// written (outside 1970-9999: the wire refuses such times, so only a
/// broken clock makes one).
pub(super) fn body(
    posts: &[Post],
    now: SystemTime,
    clock: &RemoteClock,
) -> Result<(Vec<u8>, usize), serde_json::Error> {
    let remote = clock.remote_at(now);
    let postable: Vec<Postable<'_>> = posts
        .iter()
        .filter_map(|p| {
            let (starts_at, ends_at) = on_alertmanager_clock(p, now, remote);
            Some(Postable {
                labels: &p.alert.labels,
                annotations: &p.alert.annotations,
                starts_at: meshd_domain::time::rfc3339_millis(starts_at)?,
                ends_at: match ends_at {
                    Some(end) => Some(meshd_domain::time::rfc3339_millis(end)?),
                    None => None,
                },
            })
        })
        .collect();
    let left_out = posts.len() - postable.len();
    Ok((serde_json::to_vec(&postable)?, left_out))
}

/// Posts `payload` (a [`body`]).
pub(super) async fn post(target: &Target, payload: Vec<u8>) -> Result<Answer, PostError> {
    let path = target.url.path.clone();
    send(target, &path, Some(Bytes::from(payload))).await
}

/// Alertmanager API v2 `gettableAlert`, the parts reading back needs.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Gettable {
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    starts_at: String,
    /// When it was last posted, on Alertmanager's clock.
    #[serde(default)]
    updated_at: Option<String>,
}

/// What Alertmanager holds active of what meshd posted, its times on this
/// node's clock (`now` when it was asked): every alert with meshd's
/// annotation (a Prometheus rule's alert of the same labels, posted last by
/// Prometheus, is not meshd's to judge).
pub(super) async fn held(
    target: &Target,
    now: SystemTime,
) -> Result<(Vec<Held>, Answer), PostError> {
    let path = format!(
        "{}?active=true&silenced=true&inhibited=true",
        target.url.path
    );
    let answer = send(target, &path, None).await?;
    let found: Vec<Gettable> = serde_json::from_slice(&answer.body)?;
    let remote_now = answer.date.unwrap_or(now);
    let parse = |t: &str| humantime::parse_rfc3339_weak(t).ok();
    let held = found
        .into_iter()
        .filter(|g| g.annotations.contains_key(POSTED_BY))
        .map(|g| {
            let starts_at = parse(&g.starts_at).unwrap_or(SystemTime::UNIX_EPOCH);
            let since_update = g
                .updated_at
                .as_deref()
                .and_then(parse)
                .and_then(|updated| remote_now.duration_since(updated).ok())
                .unwrap_or_default();
            Held {
                posted_by: g.annotations.get(POSTED_BY).cloned(),
                alert: Alert {
                    starts_at: on_clock(starts_at, remote_now, now),
                    labels: g.labels,
                    annotations: g.annotations,
                },
                firing: true,
                since_update,
            }
        })
        .collect();
    Ok((held, answer))
}

/// One HTTP/1.1 exchange with Alertmanager, plain or TLS, under
/// [`POST_TIMEOUT`]: `POST` alerts, or `GET` (`payload` None).
async fn send(target: &Target, path: &str, payload: Option<Bytes>) -> Result<Answer, PostError> {
    let exchange = async {
        let stream = TcpStream::connect(&target.authority)
            .await
            .map_err(PostError::Connect)?;
        match &target.tls {
            None => exchange(stream, target, path, payload).await,
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), stream)
                    .await
                    .map_err(PostError::Tls)?;
                exchange(stream, target, path, payload).await
            }
        }
    };
    tokio::time::timeout(POST_TIMEOUT, exchange)
        .await
        .map_err(|_| PostError::Timeout)?
}

/// One request over an open connection, plain or TLS.
async fn exchange<S>(
    stream: S,
    target: &Target,
    path: &str,
    payload: Option<Bytes>,
) -> Result<Answer, PostError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // The connection is driven beside the request and ends with it.
    let driver = tokio::spawn(connection);
    let mut request = match payload {
        Some(_) => {
            hyper::Request::post(path).header(hyper::header::CONTENT_TYPE, "application/json")
        }
        None => hyper::Request::get(path),
    }
    .header(hyper::header::HOST, target.authority.as_str());
    if let Some(authorization) = &target.authorization {
        request = request.header(hyper::header::AUTHORIZATION, authorization.clone());
    }
    let response = sender
        .send_request(request.body(Full::new(payload.unwrap_or_default()))?)
        .await?;
    let status = response.status();
    let date = response
        .headers()
        .get(hyper::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| PostError::Answer(e.to_string()))?
        .to_bytes();
    driver.abort();
    if status.is_success() {
        Ok(Answer { body, date })
    } else {
        Err(PostError::Status {
            status: status.as_u16(),
            body: String::from_utf8_lossy(&body).chars().take(200).collect(),
        })
    }
}
