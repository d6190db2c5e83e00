//! The Alertmanager push: while this node leads the quorum, it posts the
//! alerts its status calls for to every configured Alertmanager
//! (`POST /api/v2/alerts`), re-sends firing ones every resend interval and
//! resolves cleared ones explicitly. One task per node, reading the
//! published status: it never holds up probing or the verdicts, and a slow
//! or dead Alertmanager only delays its own posts (with backoff).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use meshd_proto::domain::{MeshStatus, NodeId};
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::metrics::{AlertPostOutcome, Metrics};
use meshd_model::alerts::{AlertState, Post, alerts};

/// One post (connect, send, answer) may take this long.
const POST_TIMEOUT: Duration = Duration::from_secs(5);
/// Backoff after failed posts doubles up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// An Alertmanager base URL, split for a plain HTTP/1.1 client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// "host:port", also the metrics label.
    authority: String,
    path: String,
}

impl Target {
    /// Accepts `http://host[:port][/prefix]`; config validation has already
    /// refused anything else.
    pub fn parse(url: &str) -> Option<Self> {
        let rest = url.strip_prefix("http://")?;
        let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let authority = if authority.contains(':') && !authority.ends_with(']') {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let prefix = prefix.trim_end_matches('/');
        let path = if prefix.is_empty() {
            "/api/v2/alerts".to_owned()
        } else {
            format!("/{prefix}/api/v2/alerts")
        };
        Some(Self { authority, path })
    }
}

/// Alertmanager API v2 `postableAlert`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Postable<'a> {
    labels: &'a std::collections::BTreeMap<String, String>,
    annotations: &'a std::collections::BTreeMap<String, String>,
    starts_at: String,
    ends_at: String,
}

/// The JSON body of a post, and how many alerts were left out because a
/// time of theirs cannot be written (outside 1970-9999: the wire refuses
/// such times, so only a broken clock makes one).
fn body(posts: &[Post]) -> Result<(Vec<u8>, usize), serde_json::Error> {
    let postable: Vec<Postable<'_>> = posts
        .iter()
        .filter_map(|p| {
            Some(Postable {
                labels: &p.alert.labels,
                annotations: &p.alert.annotations,
                starts_at: meshd_proto::time::rfc3339_millis(p.alert.starts_at)?,
                ends_at: meshd_proto::time::rfc3339_millis(p.ends_at)?,
            })
        })
        .collect();
    let left_out = posts.len() - postable.len();
    Ok((serde_json::to_vec(&postable)?, left_out))
}

#[derive(Debug, thiserror::Error)]
enum PostError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
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
}

async fn post(target: &Target, posts: &[Post]) -> Result<(), PostError> {
    let (payload, left_out) = body(posts)?;
    if left_out > 0 {
        tracing::warn!(
            alertmanager = %target.authority,
            left_out,
            "alerts with a time outside 1970-9999 left out of the post"
        );
    }
    let exchange = async {
        let stream = TcpStream::connect(&target.authority)
            .await
            .map_err(PostError::Connect)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        // The connection is driven beside the request and ends with it.
        let driver = tokio::spawn(connection);
        let request = hyper::Request::post(target.path.as_str())
            .header(hyper::header::HOST, target.authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(payload)))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let text = response.into_body().collect().await?.to_bytes();
        driver.abort();
        if status.is_success() {
            Ok(())
        } else {
            Err(PostError::Status {
                status: status.as_u16(),
                body: String::from_utf8_lossy(&text).chars().take(200).collect(),
            })
        }
    };
    tokio::time::timeout(POST_TIMEOUT, exchange)
        .await
        .map_err(|_| PostError::Timeout)?
}

/// One Alertmanager's delivery state: posts that failed are retried after
/// a backoff, and an Alertmanager that missed posts gets every firing alert
/// (plus the resolves it missed) once it answers again.
#[derive(Debug)]
struct Destination {
    target: Target,
    missed_resolves: Vec<Post>,
    behind: bool,
    retry_at: Option<tokio::time::Instant>,
    backoff: Duration,
}

/// Resolves kept for an Alertmanager that does not answer; beyond this the
/// oldest are dropped (Alertmanager resolves them itself when their lease ends).
const MAX_MISSED_RESOLVES: usize = 1000;

pub struct AlertPusher {
    node: NodeId,
    destinations: Vec<Destination>,
    resend_every: Duration,
    state: AlertState,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for AlertPusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertPusher")
            .field("node", &self.node)
            .field("destinations", &self.destinations.len())
            .finish_non_exhaustive()
    }
}

impl AlertPusher {
    pub fn new(
        node: NodeId,
        urls: &[String],
        resend_every: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        let destinations = urls
            .iter()
            .filter_map(|url| {
                let target = Target::parse(url);
                if target.is_none() {
                    tracing::error!(%url, "cannot post alerts to this URL (only http:// is supported)");
                }
                target
            })
            .map(|target| Destination {
                target,
                missed_resolves: Vec::new(),
                behind: false,
                retry_at: None,
                backoff: FIRST_BACKOFF,
            })
            .collect();
        Self {
            node,
            destinations,
            resend_every,
            state: AlertState::default(),
            metrics,
        }
    }

    pub async fn run(
        mut self,
        mut status: watch::Receiver<Arc<MeshStatus>>,
        shutdown: CancellationToken,
    ) {
        if self.destinations.is_empty() {
            return;
        }
        // Re-sends and retries are due even when the status does not change.
        let mut tick = tokio::time::interval(FIRST_BACKOFF);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = status.changed() => if changed.is_err() { return },
                _ = tick.tick() => {}
            }
            let current = status.borrow_and_update().clone();
            self.push(&current, SystemTime::now()).await;
        }
    }

    async fn push(&mut self, status: &MeshStatus, now: SystemTime) {
        let leader = status.quorum.has_quorum && status.quorum.leader.as_ref() == Some(&self.node);
        let posts = self
            .state
            .step(alerts(status), leader, now, self.resend_every);
        self.metrics.delivery.set_alerts_firing(self.state.firing());
        let resolves: Vec<Post> = posts.iter().filter(|p| p.ends_at <= now).cloned().collect();
        for destination in &mut self.destinations {
            let waiting = destination
                .retry_at
                .is_some_and(|at| tokio::time::Instant::now() < at);
            if waiting {
                destination.missed_resolves.extend(resolves.iter().cloned());
                let excess = destination
                    .missed_resolves
                    .len()
                    .saturating_sub(MAX_MISSED_RESOLVES);
                destination.missed_resolves.drain(..excess);
                continue;
            }
            let batch: Vec<Post> = if destination.behind {
                let mut all = std::mem::take(&mut destination.missed_resolves);
                all.extend(resolves.iter().cloned());
                all.extend(self.state.all_firing(now, self.resend_every));
                all
            } else {
                posts.clone()
            };
            if batch.is_empty() {
                continue;
            }
            match post(&destination.target, &batch).await {
                Ok(()) => {
                    if destination.behind {
                        tracing::info!(alertmanager = %destination.target.authority, "alerts reach Alertmanager again");
                    }
                    self.metrics
                        .delivery
                        .count_alert_post(&destination.target.authority, AlertPostOutcome::Ok);
                    destination.behind = false;
                    destination.retry_at = None;
                    destination.backoff = FIRST_BACKOFF;
                }
                Err(err) => {
                    if !destination.behind {
                        tracing::warn!(alertmanager = %destination.target.authority, "cannot post alerts, retrying with backoff: {err}");
                    }
                    self.metrics
                        .delivery
                        .count_alert_post(&destination.target.authority, AlertPostOutcome::Failed);
                    destination.behind = true;
                    destination
                        .missed_resolves
                        .extend(batch.into_iter().filter(|p| p.ends_at <= now));
                    destination.retry_at = Some(tokio::time::Instant::now() + destination.backoff);
                    destination.backoff = (destination.backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post_starting(starts_at: SystemTime) -> Post {
        Post {
            alert: meshd_model::alerts::Alert {
                labels: [("alertname".to_owned(), "MeshCpuSpike".to_owned())].into(),
                annotations: Default::default(),
                starts_at,
            },
            ends_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        }
    }

    /// An alarm `since` of -1 s or the year 10000 used to panic the alert
    /// task; such an alert is left out of the post instead, and the rest go.
    #[test]
    fn an_alert_time_outside_1970_to_9999_is_left_out_not_a_panic() {
        let fine = post_starting(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        for bad in [
            SystemTime::UNIX_EPOCH - Duration::from_secs(1),
            SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_800),
        ] {
            let posts = [post_starting(bad), fine.clone()];
            let (payload, left_out) = body(&posts).expect("encoded");
            let sent: serde_json::Value = serde_json::from_slice(&payload).expect("json");
            assert_eq!(sent.as_array().map(Vec::len), Some(1));
            assert_eq!(sent[0]["startsAt"], "2023-11-14T22:13:20.000Z");
            assert_eq!(left_out, 1);
        }
    }

    #[test]
    fn targets_take_host_port_and_prefix() {
        let t = Target::parse("http://am.local:9093").expect("url");
        assert_eq!(
            (t.authority.as_str(), t.path.as_str()),
            ("am.local:9093", "/api/v2/alerts")
        );
        let t = Target::parse("http://10.0.0.5/alertmanager/").expect("url");
        assert_eq!(
            (t.authority.as_str(), t.path.as_str()),
            ("10.0.0.5:80", "/alertmanager/api/v2/alerts")
        );
        let t = Target::parse("http://[::1]:9093").expect("url");
        assert_eq!(t.authority, "[::1]:9093");
        assert_eq!(Target::parse("https://am:9093"), None);
    }
}
