//! What this node knows about the mesh's certificates while it runs: its
//! own certificate's expiry, the expiry of each peer's as its handshakes
//! show it, the serials revoked (`tls.revoked_serials`, reloadable), and
//! the peers whose daemon it cannot talk to for a certificate reason. From
//! these come the `certificate_expiring` and `certificate_refused` alarms
//! (this node's report carries them to every member) and the
//! `meshd_tls_certificate_expiry_timestamp_seconds` series.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use meshd_domain::{Alarm, AlarmKind, NodeId, Severity};
use meshd_pki::CertificateFacts;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// A certificate with less left than this is warned about: at start, by
/// `check-config`, and as a `certificate_expiring` alarm.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

/// Why a peer's daemon could not be talked to, as its handshake said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalReason {
    /// Its certificate expired (`not_after` when the handshake said).
    Expired { not_after: Option<SystemTime> },
    /// Its certificate is not valid yet.
    NotYetValid { not_before: Option<SystemTime> },
    /// Its certificate is not signed by a CA this node trusts.
    UnknownCa,
    /// Its certificate names another node (`presented`, when it names one):
    /// another daemon, or a new node with an id this mesh does not know,
    /// answers on the peer's address.
    WrongNode { presented: Option<String> },
    /// Its certificate's serial is in `tls.revoked_serials`.
    Revoked,
    /// It refused this node's certificate, with the TLS alert it sent.
    RefusesOurs(String),
    /// Any other certificate problem, as rustls words it.
    Other(String),
}

impl RefusalReason {
    /// The refusal is about this node's own certificate, not the peer's.
    fn about_this_node(&self) -> bool {
        matches!(self, RefusalReason::RefusesOurs(_))
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalReason::Expired {
                not_after: Some(at),
            } => write!(f, "its certificate expired at {}", date(*at)),
            RefusalReason::Expired { not_after: None } => write!(f, "its certificate expired"),
            RefusalReason::NotYetValid {
                not_before: Some(at),
            } => write!(f, "its certificate is not valid before {}", date(*at)),
            RefusalReason::NotYetValid { not_before: None } => {
                write!(f, "its certificate is not valid yet")
            }
            RefusalReason::UnknownCa => {
                write!(
                    f,
                    "its certificate is not signed by this mesh's CA (unknown CA)"
                )
            }
            RefusalReason::WrongNode {
                presented: Some(name),
            } => write!(
                f,
                "the daemon on its address has the certificate of {name:?} (wrong name, or an id this mesh does not know)"
            ),
            RefusalReason::WrongNode { presented: None } => {
                write!(f, "its certificate names another node (wrong name)")
            }
            RefusalReason::Revoked => {
                write!(f, "its certificate is revoked (tls.revoked_serials)")
            }
            RefusalReason::RefusesOurs(alert) => {
                write!(f, "it refuses this node's certificate ({alert})")
            }
            RefusalReason::Other(detail) => write!(f, "its certificate is refused: {detail}"),
        }
    }
}

/// A time as the alarms and messages write it.
pub fn date(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    reason: RefusalReason,
    since: SystemTime,
}

#[derive(Debug, Default)]
struct Seen {
    /// The expiry of each peer's certificate, from its last handshake.
    expiries: BTreeMap<NodeId, SystemTime>,
    refusals: BTreeMap<NodeId, Refusal>,
}

/// The certificate state of one node, shared by its listeners, its
/// streams, its metrics and its alarm watcher.
#[derive(Debug)]
pub struct Certificates {
    node: NodeId,
    own: CertificateFacts,
    revoked: RwLock<BTreeSet<String>>,
    seen: Mutex<Seen>,
    changed: Notify,
}

impl Certificates {
    /// The state of node `node`, whose certificate is `own`.
    pub fn new(node: NodeId, own: CertificateFacts) -> Self {
        Self {
            node,
            own,
            revoked: RwLock::new(BTreeSet::new()),
            seen: Mutex::new(Seen::default()),
            changed: Notify::new(),
        }
    }

    /// Refuses the certificates with these serials from now on (as
    /// written in the config; [`meshd_pki::serial_key`] reads them).
    pub fn revoke(&self, serials: &[String]) {
        let keys: BTreeSet<String> = serials
            .iter()
            .filter_map(|s| meshd_pki::serial_key(s))
            .collect();
        *self.revoked.write().unwrap_or_else(PoisonError::into_inner) = keys;
    }

    /// Whether the certificate with serial `serial` (as
    /// [`CertificateFacts::serial`] writes it) is revoked.
    pub fn is_revoked(&self, serial: &str) -> bool {
        self.revoked
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(serial)
    }

    /// Peer `peer`'s handshake showed a certificate valid until `not_after`.
    pub fn peer_expiry(&self, peer: &NodeId, not_after: SystemTime) {
        self.seen().expiries.insert(peer.clone(), not_after);
    }

    /// Peer `peer`'s daemon could not be talked to, for `reason`.
    pub fn refused(&self, peer: &NodeId, reason: RefusalReason) {
        let changed = {
            let mut seen = self.seen();
            let same = seen.refusals.get(peer).is_some_and(|r| r.reason == reason);
            if !same {
                tracing::warn!(%peer, "TLS with {peer} refused: {reason}");
                seen.refusals.insert(
                    peer.clone(),
                    Refusal {
                        reason,
                        since: SystemTime::now(),
                    },
                );
            }
            !same
        };
        if changed {
            self.changed.notify_one();
        }
    }

    /// A stream to `peer` opened: whatever refused it before is over.
    pub fn accepted(&self, peer: &NodeId) {
        if self.seen().refusals.remove(peer).is_some() {
            tracing::info!(%peer, "TLS with {peer} works again");
            self.changed.notify_one();
        }
    }

    /// Forgets what it knew of nodes no longer among `members` (a reload
    /// removed them): their expiry series and refusals would otherwise
    /// stay, since nothing dials them any more.
    pub fn keep_only(&self, members: &[NodeId]) {
        let forgot = {
            let mut seen = self.seen();
            seen.expiries.retain(|id, _| members.contains(id));
            let before = seen.refusals.len();
            seen.refusals.retain(|id, _| members.contains(id));
            seen.refusals.len() != before
        };
        if forgot {
            self.changed.notify_one();
        }
    }

    /// The expiry of this node's certificate and of each peer's seen, by
    /// node id (peers are configured members: only they are dialled).
    pub fn expiries(&self) -> Vec<(NodeId, SystemTime)> {
        std::iter::once((self.node.clone(), self.own.not_after))
            .chain(
                self.seen()
                    .expiries
                    .iter()
                    .map(|(id, at)| (id.clone(), *at)),
            )
            .collect()
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The certificate alarms at `now`: `certificate_expiring` on this
    /// node within [`EXPIRY_WARNING`] of its certificate's end (critical
    /// once it ended), and `certificate_refused` on every node whose
    /// certificate a handshake refused: the peer's, or this node's own
    /// when peers refuse it.
    pub fn alarms(&self, now: SystemTime) -> Vec<Alarm> {
        let mut alarms: Vec<Alarm> = self.expiring_alarm(now).into_iter().collect();
        let seen = self.seen();
        let mut refused_ours: Vec<(&NodeId, &Refusal)> = Vec::new();
        for (peer, refusal) in &seen.refusals {
            if refusal.reason.about_this_node() {
                refused_ours.push((peer, refusal));
                continue;
            }
            alarms.push(refused_alarm(
                peer,
                format!(
                    "the daemon of {peer} is refused by {}: {}",
                    self.node, refusal.reason
                ),
                vec![format!("{}: {}", self.node, refusal.reason)],
                refusal.since,
            ));
        }
        if let Some(since) = refused_ours.iter().map(|(_, r)| r.since).min() {
            let by: Vec<&str> = refused_ours.iter().map(|(p, _)| p.as_str()).collect();
            let mut alerts: Vec<&str> = refused_ours
                .iter()
                .filter_map(|(_, r)| match &r.reason {
                    RefusalReason::RefusesOurs(alert) => Some(alert.as_str()),
                    _ => None,
                })
                .collect();
            alerts.sort_unstable();
            alerts.dedup();
            alarms.push(refused_alarm(
                &self.node,
                format!(
                    "the certificate of {} is refused by {}: {}",
                    self.node,
                    by.join(", "),
                    alerts.join("; ")
                ),
                refused_ours
                    .iter()
                    .map(|(peer, r)| format!("{peer}: {}", r.reason))
                    .collect(),
                since,
            ));
        }
        alarms
    }

    fn expiring_alarm(&self, now: SystemTime) -> Option<Alarm> {
        let not_after = self.own.not_after;
        let (severity, summary) = match not_after.duration_since(now) {
            Err(_) => (
                Severity::Critical,
                format!(
                    "the certificate of {} expired at {}: its peers refuse it",
                    self.node,
                    date(not_after)
                ),
            ),
            // The date only: the alarm is published again when it changes,
            // not as time passes, so a count of days left would go stale.
            Ok(left) if left < EXPIRY_WARNING => (
                Severity::Warning,
                format!(
                    "the certificate of {} expires at {}",
                    self.node,
                    date(not_after)
                ),
            ),
            Ok(_) => return None,
        };
        let since = not_after.checked_sub(EXPIRY_WARNING).unwrap_or(not_after);
        Some(Alarm {
            kind: AlarmKind::CertificateExpiring,
            severity,
            node: self.node.clone(),
            subject: "certificate".to_owned(),
            summary,
            evidence: vec![format!("serial {}", self.own.serial)],
            fix: Some(format!(
                "issue a new certificate (`meshctl certs issue {}`), put it and its key where \
                 tls.cert and tls.key point, and restart meshd on {}",
                self.node, self.node
            )),
            since,
            updated: since,
        })
    }

    /// When the alarms change next without a handshake changing them: the
    /// own certificate entering its warning, or ending.
    fn next_change(&self, now: SystemTime) -> Option<Duration> {
        let not_after = self.own.not_after;
        let warning = not_after.checked_sub(EXPIRY_WARNING).unwrap_or(not_after);
        [warning, not_after]
            .into_iter()
            .filter_map(|at| at.duration_since(now).ok())
            .find(|wait| !wait.is_zero())
    }

    /// Publishes [`Certificates::alarms`] on `alarms` whenever they change,
    /// until `shutdown`.
    pub async fn publish(&self, alarms: watch::Sender<Vec<Alarm>>, shutdown: CancellationToken) {
        loop {
            let now = SystemTime::now();
            let current = self.alarms(now);
            alarms.send_if_modified(|published| {
                let changed = *published != current;
                if changed {
                    published.clone_from(&current);
                }
                changed
            });
            // A second past the moment, so the clock has surely passed it.
            let wake = self
                .next_change(now)
                .map(|wait| wait + Duration::from_secs(1));
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.changed.notified() => {}
                () = sleep_or_never(wake) => {}
            }
        }
    }
}

async fn sleep_or_never(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

fn refused_alarm(
    node: &NodeId,
    summary: String,
    evidence: Vec<String>,
    since: SystemTime,
) -> Alarm {
    Alarm {
        kind: AlarmKind::CertificateRefused,
        severity: Severity::Critical,
        node: node.clone(),
        subject: "certificate".to_owned(),
        summary,
        evidence,
        fix: Some(
            "see the reason: renew an expired certificate, issue one from the mesh's CA \
             (`meshctl certs issue <node>`), or add the node to peers on every member"
                .to_owned(),
        ),
        since,
        updated: since,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshd_domain::fixtures::id;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn certificates(not_after: SystemTime) -> Certificates {
        Certificates::new(
            id("a"),
            CertificateFacts {
                serial: "01".to_owned(),
                not_before: SystemTime::UNIX_EPOCH,
                not_after,
            },
        )
    }

    #[test]
    fn the_own_certificate_is_expiring_within_thirty_days_and_critical_once_ended() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let kinds = |c: &Certificates, at| {
            c.alarms(at)
                .iter()
                .map(|a| (a.kind, a.severity))
                .collect::<Vec<_>>()
        };
        let far = certificates(now + 31 * DAY);
        assert_eq!(kinds(&far, now), []);
        assert_eq!(far.next_change(now), Some(DAY));
        let soon = certificates(now + 10 * DAY);
        assert_eq!(
            kinds(&soon, now),
            [(AlarmKind::CertificateExpiring, Severity::Warning)]
        );
        assert_eq!(
            kinds(&soon, now + 11 * DAY),
            [(AlarmKind::CertificateExpiring, Severity::Critical)]
        );
        assert_eq!(soon.next_change(now + 11 * DAY), None);
    }

    #[test]
    fn a_refused_peer_is_alarmed_about_by_name_and_reason_until_a_stream_opens() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let certs = certificates(now + 365 * DAY);
        certs.refused(&id("c"), RefusalReason::UnknownCa);
        certs.refused(
            &id("b"),
            RefusalReason::RefusesOurs("certificate expired".to_owned()),
        );
        let alarms = certs.alarms(now);
        let about_c = alarms.iter().find(|a| a.node == id("c")).expect("about c");
        assert_eq!(about_c.kind, AlarmKind::CertificateRefused);
        assert!(
            about_c.summary.contains("unknown CA"),
            "{}",
            about_c.summary
        );
        let about_a = alarms.iter().find(|a| a.node == id("a")).expect("about a");
        assert_eq!(
            about_a.summary,
            "the certificate of a is refused by b: certificate expired"
        );
        certs.accepted(&id("c"));
        assert_eq!(certs.alarms(now).len(), 1, "b's refusal stays");
        certs.peer_expiry(&id("b"), now);
        certs.keep_only(&[id("a"), id("c")]);
        assert_eq!(certs.alarms(now), [], "b left the mesh");
        assert_eq!(certs.expiries(), [(id("a"), now + 365 * DAY)]);
    }

    #[test]
    fn revocation_follows_the_last_list_in_either_spelling() {
        let certs = certificates(SystemTime::UNIX_EPOCH);
        certs.revoke(&["0A:BC".to_owned()]);
        assert!(certs.is_revoked("0abc"));
        certs.revoke(&[]);
        assert!(!certs.is_revoked("0abc"));
    }
}
