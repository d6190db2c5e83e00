//! The Alertmanager push. Every node runs it on its published status: the
//! leader of the quorum posts every alert at once and again every resend
//! interval and resolves cleared ones explicitly; a follower posts what
//! the leader has not within a grace; a node without quorum posts only what
//! it alone vouches for (`meshd_model::alerts::AlertState` decides). Every
//! few seconds it reads back what Alertmanager holds (`GET`), and every
//! post's times are on Alertmanager's clock (from its `Date` header), so a
//! poster's clock can neither end a page early nor start one late.
//!
//! One task per node: it never holds up probing or the verdicts, and a slow
//! or dead Alertmanager only delays its own posts (with backoff). Posts go
//! over http, or https through rustls ([`target`]), with the configured
//! credentials as an `Authorization` header; an Alertmanager is named by
//! `host:port` alone in logs and metrics.

mod target;
mod wire;

pub use target::{Target, TargetError};

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{MeshStatus, NodeId};
use meshd_model::history::{Happening, page_of};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::AlertmanagerConfig;
use crate::logging::{REPEAT_INTERVAL, Throttle};
use crate::metrics::{AlertPostOutcome, Metrics};
use meshd_model::alerts::{AlertState, Post, Role};
use wire::RemoteClock;

/// Backoff after failed posts doubles up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// How long a node without quorum holds its firing alerts (its lost quorum)
/// back after an Alertmanager first answered it since it lost quorum. Cut
/// off from Alertmanager too (an isolation), it reaches it again most often
/// as the network that cut it off comes back, and its peers' streams
/// (retried every second at most) give it quorum again within a heartbeat
/// or two: posting then, or a post sent while cut off that gets through
/// then, would page a fault that just ended.
const REJOIN_GRACE: Duration = Duration::from_secs(3);

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
    /// Its clock, from its latest answer.
    clock: RemoteClock,
    /// When it first answered this node since it lost quorum (see
    /// `REJOIN_GRACE`).
    answered_in_minority: Option<Instant>,
}

impl Destination {
    fn waiting(&self) -> bool {
        self.retry_at
            .is_some_and(|at| tokio::time::Instant::now() < at)
    }
}

/// Resolves kept for an Alertmanager that does not answer; beyond this the
/// oldest are dropped (a firing alert nobody re-sends ends by Alertmanager's
/// `resolve_timeout`).
const MAX_MISSED_RESOLVES: usize = 1000;

pub struct AlertPusher {
    node: NodeId,
    destinations: Vec<Destination>,
    resend_every: Duration,
    rejoin_grace: Duration,
    state: AlertState,
    metrics: Arc<Metrics>,
    /// Repeated warnings, by Alertmanager.
    warnings: Throttle<String>,
    /// Where each post that went through is told, for the incident
    /// history (which ignores resends); never waited on.
    pages: Option<mpsc::Sender<Happening>>,
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
    /// Reads every Alertmanager's credential and CA files now, so that a
    /// missing or unreadable one stops the start instead of the first page.
    pub fn new(
        node: NodeId,
        alertmanagers: &[AlertmanagerConfig],
        resend_every: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Self, TargetError> {
        let destinations = alertmanagers
            .iter()
            .map(|config| {
                Ok(Destination {
                    target: Target::open(config)?,
                    missed_resolves: Vec::new(),
                    behind: false,
                    retry_at: None,
                    backoff: FIRST_BACKOFF,
                    clock: RemoteClock::default(),
                    answered_in_minority: None,
                })
            })
            .collect::<Result<_, TargetError>>()?;
        Ok(Self {
            node,
            destinations,
            resend_every,
            rejoin_grace: REJOIN_GRACE,
            state: AlertState::default(),
            metrics,
            warnings: Throttle::new(REPEAT_INTERVAL),
            pages: None,
        })
    }

    /// Tells the incident history every page that went through.
    pub fn with_pages(mut self, pages: mpsc::Sender<Happening>) -> Self {
        self.pages = Some(pages);
        self
    }

    pub async fn run(
        mut self,
        mut status: watch::Receiver<Arc<MeshStatus>>,
        shutdown: CancellationToken,
    ) {
        if self.destinations.is_empty() {
            return;
        }
        // Re-sends, read-backs and retries are due even when the status does
        // not change.
        let mut tick = crate::cadence::every(FIRST_BACKOFF);
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

    async fn push(&mut self, status: &MeshStatus, wall: SystemTime) {
        let now = Instant::now();
        let mut posts = self.state.after_look(status, now, wall, self.resend_every);
        if self.state.check_due(now) {
            posts.extend(self.read_back(status, now, wall).await);
        }
        self.metrics.delivery.set_alerts_firing(self.state.firing());
        let resolves: Vec<Post> = posts
            .iter()
            .filter(|p| p.resolved_at.is_some())
            .cloned()
            .collect();
        let minority = Role::of(status) == Role::Minority;
        for index in 0..self.destinations.len() {
            self.deliver(index, &posts, &resolves, minority, wall).await;
        }
    }

    /// Reads back what the first Alertmanager that answers holds (several
    /// configured are usually one cluster that shares what it holds), and
    /// what the state machine makes of it.
    async fn read_back(
        &mut self,
        status: &MeshStatus,
        now: Instant,
        wall: SystemTime,
    ) -> Vec<Post> {
        for destination in &mut self.destinations {
            if destination.waiting() {
                continue;
            }
            match wire::held(&destination.target, wall).await {
                Ok((found, answer)) => {
                    destination.clock.note(wall, &answer);
                    return self
                        .state
                        .check(status, &found, now, wall, self.resend_every);
                }
                Err(err) => {
                    tracing::debug!(alertmanager = %destination.target.authority, "cannot read back the alerts: {err}")
                }
            }
        }
        Vec::new()
    }

    /// Sends `posts` to one Alertmanager, or everything it missed when it
    /// answers again; keeps the resolves while it does not. A `minority`
    /// node sends only resolves (an empty post when there are none: it
    /// learns that Alertmanager answers) until `rejoin_grace` after the
    /// first answer since it lost quorum, and its firing alerts then.
    async fn deliver(
        &mut self,
        index: usize,
        posts: &[Post],
        resolves: &[Post],
        minority: bool,
        wall: SystemTime,
    ) {
        let all_firing = self.state.all_firing();
        let rejoin_grace = self.rejoin_grace;
        let destination = &mut self.destinations[index];
        if destination.waiting() {
            destination.missed_resolves.extend(resolves.iter().cloned());
            let excess = destination
                .missed_resolves
                .len()
                .saturating_sub(MAX_MISSED_RESOLVES);
            destination.missed_resolves.drain(..excess);
            return;
        }
        if !minority {
            destination.answered_in_minority = None;
        }
        let holding = minority
            && destination
                .answered_in_minority
                .is_none_or(|at| at.elapsed() < rejoin_grace);
        let batch: Vec<Post> = if holding {
            // The firing ones go with everything else once the grace passed.
            destination.behind |= posts.iter().any(|p| p.resolved_at.is_none());
            let mut sent = std::mem::take(&mut destination.missed_resolves);
            sent.extend(resolves.iter().cloned());
            sent
        } else if destination.behind {
            let mut all = std::mem::take(&mut destination.missed_resolves);
            all.extend(resolves.iter().cloned());
            all.extend(all_firing);
            all
        } else {
            posts.to_vec()
        };
        // Without quorum, an empty post learns that Alertmanager answers.
        let probing = holding && destination.answered_in_minority.is_none();
        if batch.is_empty() && !probing {
            return;
        }
        let sent = match wire::body(&batch, wall, &destination.clock) {
            Ok((payload, left_out)) => wire::post(&destination.target, payload)
                .await
                .map(|answer| (answer, left_out)),
            Err(err) => Err(wire::PostError::Encode(err)),
        };
        let authority = destination.target.authority.clone();
        match sent {
            Ok((answer, left_out)) => {
                destination.clock.note(wall, &answer);
                // Never expected (the wire refuses such times): one line per
                // interval however often a broken clock posts.
                if left_out > 0
                    && let Some(suppressed) = self.warnings.admit(authority.clone(), Instant::now())
                {
                    tracing::warn!(
                        alertmanager = %authority,
                        left_out,
                        suppressed,
                        "alerts with a time outside 1970-9999 left out of the post"
                    );
                }
                if destination.behind && !holding {
                    tracing::info!(alertmanager = %authority, "alerts reach Alertmanager again");
                }
                self.metrics
                    .delivery
                    .count_alert_post(&authority, AlertPostOutcome::Ok);
                if minority {
                    destination
                        .answered_in_minority
                        .get_or_insert_with(Instant::now);
                }
                if !holding {
                    destination.behind = false;
                }
                if let Some(pages) = &self.pages {
                    for post in &batch {
                        // A full queue loses a page line of the history, never a page.
                        let _ =
                            pages.try_send(page_of(&post.alert, wall, post.resolved_at.is_none()));
                    }
                }
                destination.retry_at = None;
                destination.backoff = FIRST_BACKOFF;
            }
            Err(err) => {
                if !destination.behind {
                    tracing::warn!(alertmanager = %authority, "cannot post alerts, retrying with backoff: {err}");
                }
                self.metrics
                    .delivery
                    .count_alert_post(&authority, AlertPostOutcome::Failed);
                destination.behind = true;
                destination.answered_in_minority = None;
                destination
                    .missed_resolves
                    .extend(batch.into_iter().filter(|p| p.resolved_at.is_some()));
                destination.retry_at = Some(tokio::time::Instant::now() + destination.backoff);
                destination.backoff = (destination.backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::wall;

    use super::*;

    fn post_starting(starts_at: SystemTime) -> Post {
        Post {
            alert: meshd_model::alerts::Alert {
                labels: [("alertname".to_owned(), "MeshCpuSpike".to_owned())].into(),
                annotations: Default::default(),
                starts_at,
            },
            resolved_at: Some(wall(0)),
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
            let (payload, left_out) =
                wire::body(&posts, wall(0), &wire::RemoteClock::default()).expect("encoded");
            let sent: serde_json::Value = serde_json::from_slice(&payload).expect("json");
            assert_eq!(sent.as_array().map(Vec::len), Some(1));
            assert_eq!(sent[0]["startsAt"], "2023-11-14T22:13:20.000Z");
            assert_eq!(left_out, 1);
        }
    }
}

/// Posts to fake Alertmanagers on loopback, over TLS with certificates from
/// a test CA (meshd-pki), and a check that no credential reaches a log
/// line or a metric.
#[cfg(test)]
mod wire_tests {
    use std::net::SocketAddr;
    use std::sync::Mutex;

    use meshd_domain::fixtures::identity;
    use meshd_domain::{Alarm, AlarmKind, Quorum, Severity};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    use super::*;
    use crate::config::BasicAuth;

    const DAY: Duration = Duration::from_secs(86_400);

    type Requests = Arc<Mutex<Vec<String>>>;

    fn tls_server(ca: &meshd_pki::Ca, names: &[String]) -> Arc<rustls::ServerConfig> {
        let issued = ca
            .issue("alertmanager", names, SystemTime::now(), DAY)
            .expect("server certificate");
        let cert = CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).expect("cert");
        let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).expect("key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls_graviola::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("server config");
        Arc::new(config)
    }

    /// An HTTP/1.1 server on loopback (TLS when given a config) that keeps
    /// each request it reads and answers `status`.
    async fn fake_alertmanager(
        tls: Option<Arc<rustls::ServerConfig>>,
        status: u16,
    ) -> (SocketAddr, Requests) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = Requests::default();
        let kept = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                match &tls {
                    None => answer(stream, kept, status).await,
                    Some(config) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
                        if let Ok(stream) = acceptor.accept(stream).await {
                            answer(stream, kept, status).await;
                        }
                    }
                }
            }
        });
        (addr, requests)
    }

    async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, kept: Requests, status: u16) {
        let mut seen = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let Ok(n) = stream.read(&mut buffer).await else {
                return;
            };
            if n == 0 {
                return;
            }
            seen.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&seen).into_owned();
            if let Some(head_end) = text.find("\r\n\r\n") {
                let length = text[..head_end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .and_then(|v| v.trim().parse::<usize>().ok())
                    })
                    .unwrap_or(0);
                if seen.len() >= head_end + 4 + length {
                    kept.lock().expect("requests").push(text);
                    break;
                }
            }
        }
        let reply =
            format!("HTTP/1.1 {status} Fake\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
    }

    fn firing() -> Post {
        let now = SystemTime::now();
        Post {
            alert: meshd_model::alerts::Alert {
                labels: [("alertname".to_owned(), "MeshCpuSpike".to_owned())].into(),
                annotations: Default::default(),
                starts_at: now,
            },
            resolved_at: None,
        }
    }

    fn write_file(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    #[tokio::test]
    async fn https_posts_reach_an_alertmanager_the_ca_file_vouches_for_with_the_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = meshd_pki::Ca::create("test alerting CA", SystemTime::now(), DAY).expect("ca");
        let (addr, requests) =
            fake_alertmanager(Some(tls_server(&ca, &["127.0.0.1".to_owned()])), 200).await;
        let mut config = AlertmanagerConfig::url(format!("https://{addr}/prefix"));
        config.ca_file = Some(write_file(dir.path(), "ca.pem", ca.cert_pem()));
        config.bearer_token_file = Some(write_file(dir.path(), "token", "tok-123\n"));
        let target = Target::open(&config).expect("target");
        let (payload, _) = wire::body(
            &[firing()],
            SystemTime::now(),
            &wire::RemoteClock::default(),
        )
        .expect("body");
        wire::post(&target, payload).await.expect("posted over TLS");
        let seen = requests.lock().expect("requests").clone();
        assert_eq!(seen.len(), 1);
        let request = seen[0].to_ascii_lowercase();
        assert!(
            request.starts_with("post /prefix/api/v2/alerts http/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains("\r\nauthorization: bearer tok-123\r\n"),
            "{request}"
        );
        assert!(
            request.contains("\"alertname\":\"meshcpuspike\""),
            "{request}"
        );
    }

    #[tokio::test]
    async fn https_refuses_an_alertmanager_from_another_ca_or_for_another_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = meshd_pki::Ca::create("test alerting CA", SystemTime::now(), DAY).expect("ca");
        let stranger = meshd_pki::Ca::create("stranger", SystemTime::now(), DAY).expect("ca");
        let trusted = write_file(dir.path(), "ca.pem", ca.cert_pem());
        for (server_ca, names, why) in [
            (&stranger, vec!["127.0.0.1".to_owned()], "UnknownIssuer"),
            (&ca, vec!["elsewhere.test".to_owned()], "not valid for name"),
        ] {
            let (addr, requests) =
                fake_alertmanager(Some(tls_server(server_ca, &names)), 200).await;
            let mut config = AlertmanagerConfig::url(format!("https://{addr}"));
            config.ca_file = Some(trusted.clone());
            let target = Target::open(&config).expect("target");
            let (payload, _) = wire::body(
                &[firing()],
                SystemTime::now(),
                &wire::RemoteClock::default(),
            )
            .expect("body");
            let err = wire::post(&target, payload).await.expect_err("refused");
            assert!(matches!(err, wire::PostError::Tls(_)), "{err}");
            assert!(err.to_string().contains(why), "{why}: {err}");
            assert!(requests.lock().expect("requests").is_empty());
        }
    }

    /// A buffer the log lines of one test go to.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("log").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn credentials_never_reach_a_log_line_or_a_metric() {
        let dir = tempfile::tempdir().expect("tempdir");
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        let _logs = tracing::subscriber::set_default(subscriber);

        // One refuses with 401, one is not there at all.
        let (refusing, _) = fake_alertmanager(None, 401).await;
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr")
        };
        let mut basic = AlertmanagerConfig::url(format!("http://{refusing}"));
        basic.basic_auth = Some(BasicAuth {
            username: "meshd-user".into(),
            password_file: write_file(dir.path(), "password", "pa55-SECRET\n"),
        });
        let mut bearer = AlertmanagerConfig::url(format!("http://{closed}"));
        bearer.bearer_token_file = Some(write_file(dir.path(), "token", "tok-SECRET\n"));

        let identity = identity("a", 1);
        let metrics = Arc::new(Metrics::new(&identity));
        let mut pusher = AlertPusher::new(
            identity.id.clone(),
            &[basic, bearer],
            Duration::from_secs(30),
            metrics.clone(),
        )
        .expect("pusher");
        tracing::info!(?pusher, destinations = ?pusher.destinations, "set up");
        let now = SystemTime::now();
        let status = MeshStatus {
            node: identity.clone(),
            evaluated_at: now,
            quorum: Quorum {
                configured: vec![identity.id.clone()],
                members: vec![identity.id.clone()],
                has_quorum: true,
                leader: Some(identity.id.clone()),
            },
            nodes: vec![],
            links: vec![],
            alarms: vec![Alarm {
                kind: AlarmKind::CpuSpike,
                severity: Severity::Warning,
                node: identity.id.clone(),
                subject: "cpu".into(),
                summary: "busy".into(),
                evidence: vec![],
                fix: None,
                since: now,
                updated: now,
            }],
            cables: vec![],
            checks: vec![],
            measurements: vec![],
            jobs: Vec::new(),
        };
        pusher.push(&status, now).await;

        let logs = String::from_utf8_lossy(&captured.0.lock().expect("log")).into_owned();
        let scrape = metrics.render(&crate::state::Published::placeholder(&identity));
        let basic_header = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            "meshd-user:pa55-SECRET",
        );
        for secret in ["pa55-SECRET", "tok-SECRET", basic_header.as_str()] {
            assert!(!logs.contains(secret), "{secret} in the logs:\n{logs}");
            assert!(!scrape.contains(secret), "{secret} in /metrics:\n{scrape}");
        }
        for authority in [refusing.to_string(), closed.to_string()] {
            assert!(
                logs.contains(&authority),
                "{authority} not named in:\n{logs}"
            );
            assert!(
                scrape.contains(&format!(
                    "meshd_alert_posts_total{{alertmanager=\"{authority}\",outcome=\"failed\"}} 1"
                )),
                "{scrape}"
            );
        }
        assert!(logs.contains("Alertmanager answered 401"), "{logs}");
    }

    /// A node cut off from Alertmanager and from its peers at once (an
    /// isolation) reaches Alertmanager again most often as the isolation
    /// ends: it holds its lost quorum back for the grace, and posts it only
    /// if it is still without quorum then.
    #[tokio::test]
    async fn a_minority_that_reaches_alertmanager_again_holds_its_lost_quorum_for_a_grace() {
        let (addr, requests) = fake_alertmanager(None, 200).await;
        let identity = identity("a", 1);
        let metrics = Arc::new(Metrics::new(&identity));
        let mut pusher = AlertPusher::new(
            identity.id.clone(),
            &[AlertmanagerConfig::url(format!("http://{addr}"))],
            Duration::from_secs(30),
            metrics,
        )
        .expect("pusher");
        pusher.rejoin_grace = Duration::from_millis(300);
        pusher.destinations[0].behind = true;
        let now = SystemTime::now();
        let configured: Vec<NodeId> = ["a", "b", "c"]
            .into_iter()
            .map(|id| NodeId::new(id).expect("id"))
            .collect();
        let status = MeshStatus {
            node: identity.clone(),
            evaluated_at: now,
            quorum: Quorum {
                configured,
                members: vec![identity.id.clone()],
                has_quorum: false,
                leader: None,
            },
            nodes: vec![],
            links: vec![],
            alarms: vec![Alarm {
                kind: AlarmKind::NoQuorum,
                severity: Severity::Critical,
                node: identity.id.clone(),
                subject: "quorum".into(),
                summary: "no quorum".into(),
                evidence: vec![],
                fix: None,
                since: now,
                updated: now,
            }],
            cables: vec![],
            checks: vec![],
            measurements: vec![],
            jobs: Vec::new(),
        };
        // Read-backs (GET) come and go as they are due; the posts matter.
        let posted = || -> Vec<String> {
            let seen = requests.lock().expect("requests");
            seen.iter()
                .filter(|r| r.starts_with("POST "))
                .cloned()
                .collect()
        };
        pusher.push(&status, SystemTime::now()).await;
        pusher.push(&status, SystemTime::now()).await;
        let early = posted();
        assert_eq!(early.len(), 1, "one post to learn it answers: {early:?}");
        assert!(early[0].ends_with("\r\n\r\n[]"), "{early:?}");

        tokio::time::sleep(Duration::from_millis(350)).await;
        pusher.push(&status, SystemTime::now()).await;
        let late = posted();
        assert_eq!(late.len(), 2, "{late:?}");
        assert!(late[1].contains("MeshNoQuorum"), "{late:?}");
        assert!(!pusher.destinations[0].behind);
    }
}
