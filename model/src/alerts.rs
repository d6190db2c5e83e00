//! What meshd tells Alertmanager: alerts derived from the verdicts and
//! alarms of a node's status, and the state machine that decides what to
//! send when — firing alerts at once and again every resend interval,
//! resolved alerts explicitly — and who sends: the leader of the quorum
//! everything, a follower what the leader has not posted within a grace, a
//! node without quorum only what it alone can still vouch for (the lost
//! quorum; in a mesh of two, the silent peer). See [`AlertState`].
//!
//! An alert's labels are exactly those of the shipped Prometheus rule for
//! the same fault (dashboards/prometheus/meshd.rules.yml), so when both are
//! wired to one Alertmanager it sees one alert, not two. promtool holds them
//! equal (daemon/tests/prometheus.rs: the rules run on what a node exports
//! for each fault), and names the alerts only one side raises.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::{
    AlarmKind, Blame, LinkState, LinkVerdict, MeshStatus, NodeId, NodeState, Severity,
};

pub type Labels = BTreeMap<String, String>;

/// Where the runbook sections live; the alert name, lowercased, is the anchor.
pub const RUNBOOK: &str = "https://github.com/meshd/meshd/blob/main/docs/RUNBOOK.md";

/// The annotation that marks an alert as one meshd posted, naming the node
/// that posted it: a new leader finds the alerts to reconcile by it.
pub const POSTED_BY: &str = "meshd_posted_by";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    pub labels: Labels,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: SystemTime,
}

/// What a node posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The leader of the quorum: every alert of its status.
    Leader,
    /// Without quorum: only what it can vouch for alone.
    Minority,
    /// A member of the quorum that does not lead it: nothing.
    Follower,
}

impl Role {
    pub fn of(status: &MeshStatus) -> Self {
        match (&status.quorum.leader, status.quorum.has_quorum) {
            (_, false) => Role::Minority,
            (Some(leader), true) if *leader == status.node.id => Role::Leader,
            _ => Role::Follower,
        }
    }
}

/// The alert an alarm kind becomes, and whether it is about one node (its
/// `node` label) or the whole mesh (no node label: every node raises the
/// same one).
fn alert_of_kind(kind: AlarmKind) -> Option<(&'static str, bool)> {
    Some(match kind {
        // Only a node without quorum raises it, and then as MeshNoQuorum.
        AlarmKind::NoQuorum => return None,
        // A notice: a rolling upgrade is no fault, and pages nobody.
        AlarmKind::VersionSkew => return None,
        AlarmKind::BridgeLoop => ("MeshBridgeLoop", true),
        AlarmKind::BroadcastStorm => ("MeshBroadcastStorm", true),
        AlarmKind::CpuSpike => ("MeshCpuSpike", true),
        AlarmKind::RdmaDisabled => ("MeshRdmaDisabled", true),
        AlarmKind::LinkSpeedLow => ("MeshLinkSpeedLow", true),
        AlarmKind::JobHung => ("MeshJobHung", true),
        AlarmKind::ManagementUnreachable => ("MeshManagementUnreachable", true),
        AlarmKind::ManagementSplit => ("MeshManagementSplit", false),
        AlarmKind::ClockSkew => ("MeshClockSkew", true),
        AlarmKind::DuplicateNodeId => ("MeshDuplicateNodeId", true),
        AlarmKind::MeshSaturated => ("MeshSaturated", false),
        AlarmKind::MemoryPressure => ("MeshMemoryPressure", true),
        AlarmKind::WiredMemoryLeak => ("MeshWiredMemoryLeak", true),
        AlarmKind::NodeRebooted => ("MeshNodeRebooted", true),
        AlarmKind::KernelPanic => ("MeshKernelPanic", true),
        AlarmKind::JobOrphaned => ("MeshJobOrphaned", true),
        AlarmKind::JobStalled => ("MeshJobStalled", true),
        AlarmKind::JobOffMesh => ("MeshJobOffMesh", true),
        AlarmKind::CertificateExpiring => ("MeshCertificateExpiring", true),
        AlarmKind::CertificateRefused => ("MeshCertificateRefused", true),
    })
}

fn alert(
    name: &str,
    severity: Severity,
    labels: &[(&str, &str)],
    summary: String,
    description: String,
    starts_at: SystemTime,
    posted_by: &NodeId,
) -> Alert {
    let mut all: Labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    all.insert("alertname".to_owned(), name.to_owned());
    all.insert("severity".to_owned(), severity.as_str().to_owned());
    let annotations = [
        ("summary".to_owned(), summary),
        ("description".to_owned(), description),
        (
            "runbook_url".to_owned(),
            format!("{RUNBOOK}#{}", name.to_lowercase()),
        ),
        (POSTED_BY.to_owned(), posted_by.to_string()),
    ]
    .into_iter()
    .collect();
    Alert {
        labels: all,
        annotations,
        starts_at,
    }
}

/// An alert's description: the evidence, then what to do about it.
fn described(evidence: &[String], fix: Option<&str>) -> String {
    let mut description = evidence.join("; ");
    if let Some(fix) = fix {
        description.push_str(&format!(" Fix: {fix}"));
    }
    description
}

fn node_down(node: &meshd_domain::NodeVerdict, posted_by: &NodeId) -> Alert {
    alert(
        "MeshNodeDown",
        Severity::Critical,
        &[("node", node.id.as_str())],
        format!("Node {} is down", node.id),
        described(&node.evidence, node.fix.as_deref()),
        node.since,
        posted_by,
    )
}

/// The alerts a status calls for, as `role` posts them. Link alerts only
/// for faults blamed on the link (a dead node is its own one alert), node
/// alerts only for nodes that are down.
pub fn alerts(status: &MeshStatus, role: Role) -> Vec<Alert> {
    let me = &status.node.id;
    let mut out: Vec<Alert> = match role {
        Role::Follower => Vec::new(),
        Role::Minority => minority_alerts(status, me),
        Role::Leader => link_alerts(status, me)
            .chain(node_down_alerts(status, me))
            .chain(alarm_alerts(status, me))
            .collect(),
    };
    // One alert per label set: two alarms of a kind about one node (a
    // bridge loop on two bridges) are one page.
    let mut seen = BTreeSet::new();
    out.retain(|a| seen.insert(a.labels.clone()));
    out
}

/// What a node without quorum can vouch for alone: the lost quorum itself,
/// and in a mesh of two, a peer silent on every path (a two-node mesh that
/// lost a node must still page; it cannot tell a dead peer from being cut
/// off itself). In a larger mesh a node without quorum is more likely cut
/// off than surrounded by the dead, so it pages only that.
fn minority_alerts(status: &MeshStatus, me: &NodeId) -> Vec<Alert> {
    if status.quorum.configured.len() > 2 {
        return no_quorum_alert(status, me).into_iter().collect();
    }
    let seen_by = format!(
        "seen by {me} alone, without quorum ({} of {} members heard)",
        status.quorum.members.len(),
        status.quorum.configured.len()
    );
    let mut out: Vec<Alert> = node_down_alerts(status, me)
        .map(|mut down| {
            down.annotations
                .insert("seen_by".to_owned(), seen_by.clone());
            down
        })
        .collect();
    out.extend(no_quorum_alert(status, me));
    out
}

/// `MeshNoQuorum`, once the engine raised no_quorum on this node: it does
/// so only once the condition settled, since a node that starts, or
/// restarts, is without quorum for a moment.
fn no_quorum_alert(status: &MeshStatus, me: &NodeId) -> Option<Alert> {
    let no_quorum = status
        .alarms
        .iter()
        .find(|a| a.kind == AlarmKind::NoQuorum && a.node == *me)?;
    let unheard: Vec<&str> = status
        .quorum
        .configured
        .iter()
        .filter(|id| !status.quorum.members.contains(id))
        .map(NodeId::as_str)
        .collect();
    Some(alert(
        "MeshNoQuorum",
        Severity::Warning,
        &[],
        "A part of the mesh has no quorum: link verdicts are held".to_owned(),
        format!(
            "{me} hears {} of {} members; not heard: {}.{}",
            status.quorum.members.len(),
            status.quorum.configured.len(),
            unheard.join(", "),
            no_quorum
                .fix
                .as_deref()
                .map(|fix| format!(" Fix: {fix}"))
                .unwrap_or_default()
        ),
        no_quorum.since,
        me,
    ))
}

/// An alert for each link that is down, degraded or flapping by its own
/// fault.
fn link_alerts<'a>(status: &'a MeshStatus, me: &'a NodeId) -> impl Iterator<Item = Alert> + 'a {
    // A flapping link that stays dark is down, and still flapping: its
    // flapping page holds instead of resolving and firing again.
    let flapping_and_down = status
        .links
        .iter()
        .filter(|l| l.flapping && l.state == LinkState::Down && l.blame == Blame::Link)
        .map(|l| LinkVerdict {
            state: LinkState::Flapping,
            ..l.clone()
        });
    let links: Vec<LinkVerdict> = status
        .links
        .iter()
        .cloned()
        .chain(flapping_and_down)
        .collect();
    links.into_iter().filter_map(move |link| {
        let (name, severity, what) = match (link.state, link.blame) {
            (LinkState::Down, Blame::Link) => ("MeshLinkDown", Severity::Critical, "down"),
            (LinkState::Degraded, Blame::Link) => {
                ("MeshLinkDegraded", Severity::Warning, "degraded")
            }
            (LinkState::Flapping, Blame::Link) => {
                ("MeshLinkFlapping", Severity::Warning, "flapping")
            }
            _ => return None,
        };
        let (a, b) = (link.a.node.as_str(), link.b.node.as_str());
        Some(alert(
            name,
            severity,
            &[("a", a), ("b", b)],
            format!("Link {a} <-> {b} is {what}"),
            described(&link.evidence, link.fix.as_deref()),
            link.since,
            me,
        ))
    })
}

/// `MeshNodeDown` for each node that is down.
fn node_down_alerts<'a>(
    status: &'a MeshStatus,
    me: &'a NodeId,
) -> impl Iterator<Item = Alert> + 'a {
    status
        .nodes
        .iter()
        .filter(|n| n.state == NodeState::Down)
        .map(move |node| node_down(node, me))
}

/// An alert for each alarm of a kind that has one, its fix appended to
/// the description.
fn alarm_alerts<'a>(status: &'a MeshStatus, me: &'a NodeId) -> impl Iterator<Item = Alert> + 'a {
    status.alarms.iter().filter_map(move |alarm| {
        let (name, about_a_node) = alert_of_kind(alarm.kind)?;
        let description = described(&alarm.evidence, alarm.fix.as_deref());
        let node = [("node", alarm.node.as_str())];
        let labels: &[(&str, &str)] = if about_a_node { &node } else { &[] };
        Some(alert(
            name,
            alarm.severity,
            labels,
            alarm.summary.clone(),
            description,
            alarm.since,
            me,
        ))
    })
}

/// A follower posts an alert itself only once it held it this long and
/// Alertmanager lacked it this long: an honest leader posts within a look,
/// and the nodes' views of a fault that ends differ for about a heartbeat,
/// so only a leader that is gone, deaf or lying leaves an alert missing
/// this long.
pub const BACKUP_GRACE: Duration = Duration::from_secs(5);

/// How often a node reads back what Alertmanager holds: the leader to
/// resolve what nobody holds true any more, a follower to post what the
/// leader has not. With [`BACKUP_GRACE`] this bounds how long one lying
/// member can keep a page from Alertmanager; and a follower must see a page
/// the leader fired and resolved while their views differed (a second or
/// two, at the end of a fault), or it would take the gap for a leader that
/// posts nothing.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A run of meshd that just started has not judged yet: it holds its
/// links until it knows how late their ends run (2 s) and their ends had
/// `down_after` to answer. What it finds at Alertmanager meanwhile (its
/// previous run's pages among them) it does not resolve: a restart during
/// a fault must not resolve the fault's page and fire it again.
pub const JUDGING_AFTER_START: Duration = Duration::from_secs(5);

/// An alert nobody re-posted for this many resend intervals has no live
/// poster: any leader that does not hold it true resolves it.
const ABANDONED_AFTER_RESENDS: u32 = 2;

/// What Alertmanager holds of one alert meshd posted, as a poster reads it
/// back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its labels, annotations (of the last post) and start.
    pub alert: Alert,
    /// Who posted it last (the [`POSTED_BY`] annotation of the last post).
    pub posted_by: Option<String>,
    /// Firing now (not resolved).
    pub firing: bool,
    /// How long ago it was last posted, by Alertmanager's own clock.
    pub since_update: Duration,
}

/// One post: an alert firing, or its explicit resolve. Times are this
/// node's wall clock; the pusher converts them to Alertmanager's (the
/// poster's clock must not decide when a page starts or ends), and posts
/// a firing alert without an end: Alertmanager's own `resolve_timeout`
/// ends it if every poster dies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub alert: Alert,
    /// Resolved at this time; `None`: firing.
    pub resolved_at: Option<SystemTime>,
}

/// An alert this node posted firing and has not resolved.
#[derive(Debug, Clone)]
struct Posted {
    alert: Alert,
    /// When it was last posted.
    at: Instant,
    /// In which role: a node without quorum resolves only what it posted
    /// without quorum (the rest it can no longer judge).
    role: Role,
}

/// The posting state machine of one node. Every node runs it after each
/// look ([`AlertState::after_look`]) and, every [`CHECK_EVERY`], with what
/// Alertmanager holds ([`AlertState::check`]):
///
/// - the leader posts every alert of its status at once and again every
///   resend interval, resolves its own posts explicitly when they clear,
///   and resolves what Alertmanager still fires that nobody holds true: a
///   former leader's or a minority's leftovers, never an alert a live
///   member re-posts (two leaders in a one-sided partition do not resolve
///   each other's pages);
/// - a follower posts what it held for [`BACKUP_GRACE`] that Alertmanager
///   lacked as long (a leader that is gone or lies cannot silence a page),
///   and resolves its own posts when they clear;
/// - a node without quorum posts only what it alone can vouch for (the lost
///   quorum; in a mesh of two, the silent peer) and never resolves what it
///   posted with quorum: it cannot judge it any more.
///
/// All posters use the same labels, so Alertmanager merges their posts
/// into one alert.
#[derive(Debug, Default)]
pub struct AlertState {
    posted: BTreeMap<Labels, Posted>,
    /// What this node holds true now (as the leader would post it), and
    /// since when.
    held_since: BTreeMap<Labels, (Alert, Instant)>,
    /// Alerts this node holds that Alertmanager lacked at every check
    /// since then.
    lacking_since: BTreeMap<Labels, Instant>,
    role: Option<Role>,
    checked_at: Option<Instant>,
    /// What this node resolved lately: what Alertmanager was read to hold
    /// before that is not resolved again.
    resolved: BTreeMap<Labels, Instant>,
    /// This run's first look.
    started: Option<Instant>,
}

impl AlertState {
    /// What to post after a look that produced `status`: new alerts of this
    /// node's role at once, its own posts again every `resend_every`, and
    /// the resolves of its own posts that cleared.
    pub fn after_look(
        &mut self,
        status: &MeshStatus,
        now: Instant,
        wall: SystemTime,
        resend_every: Duration,
    ) -> Vec<Post> {
        self.started.get_or_insert(now);
        let role = Role::of(status);
        let took_over = role == Role::Leader && self.role != Some(Role::Leader);
        if took_over {
            // A new leader reads back at once what it inherits.
            self.checked_at = None;
        }
        self.role = Some(role);
        self.follow_held(status, now);
        self.resolved
            .retain(|_, at| now.saturating_duration_since(*at) < CHECK_EVERY * 2);
        let current = alerts(status, role);
        let mut posts = self.resolve_cleared(role, &current, wall);
        for post in &posts {
            self.resolved.insert(post.alert.labels.clone(), now);
        }
        for alert in current {
            posts.extend(self.post_firing(alert, role, now, resend_every));
        }
        // What a follower posted as a backup stays alive while it holds.
        let refresh: Vec<(Alert, Role)> = self
            .posted
            .values()
            .filter(|p| p.role == Role::Follower && role == Role::Follower)
            .map(|p| (p.alert.clone(), p.role))
            .collect();
        for (alert, posted_as) in refresh {
            let alert = self
                .held_since
                .get(&alert.labels)
                .map_or(alert, |(current, _)| current.clone());
            posts.extend(self.post_firing(alert, posted_as, now, resend_every));
        }
        posts
    }

    /// Whether it is time to read back what Alertmanager holds.
    pub fn check_due(&self, now: Instant) -> bool {
        self.checked_at
            .is_none_or(|at| now.saturating_duration_since(at) >= CHECK_EVERY)
    }

    /// What to post given what Alertmanager holds (`found`, every alert
    /// meshd posted there that is still known to it): the leader resolves
    /// what is abandoned and untrue, a follower posts what the leader has
    /// not, and every node resolves its own posts that Alertmanager still
    /// fires but it no longer holds (left from before a restart of this
    /// node's pusher, or from another role).
    pub fn check(
        &mut self,
        status: &MeshStatus,
        found: &[Held],
        now: Instant,
        wall: SystemTime,
        resend_every: Duration,
    ) -> Vec<Post> {
        self.checked_at = Some(now);
        let role = Role::of(status);
        let me = status.node.id.as_str();
        let firing: BTreeMap<&Labels, &Held> = found
            .iter()
            .filter(|h| h.firing)
            .map(|h| (&h.alert.labels, h))
            .collect();
        let mut posts = Vec::new();
        if role == Role::Follower {
            posts.extend(self.back_up(&firing, now, resend_every));
        }
        let judging = self
            .started
            .is_none_or(|started| now.saturating_duration_since(started) < JUDGING_AFTER_START);
        if role == Role::Minority || judging {
            return posts;
        }
        let live: BTreeSet<&str> = status.quorum.members.iter().map(NodeId::as_str).collect();
        let abandoned_after = resend_every.saturating_mul(ABANDONED_AFTER_RESENDS);
        for held in firing.values() {
            if self.held_since.contains_key(&held.alert.labels)
                || self.resolved.contains_key(&held.alert.labels)
            {
                continue;
            }
            let mine = held.posted_by.as_deref() == Some(me);
            // A member cut off from the quorum may still be posting what it
            // alone vouches for (its lost quorum): that is its own to
            // resolve, unless nobody refreshed it for long.
            // Nor is a node ever the judge of its own death: it never holds
            // that true, and about to be cut off it still leads a moment.
            let no_live_poster = (held
                .posted_by
                .as_deref()
                .is_none_or(|by| !live.contains(by))
                && !vouched_alone(&held.alert.labels, status)
                && !about_me(&held.alert.labels, me))
                || held.since_update >= abandoned_after;
            if mine || (role == Role::Leader && no_live_poster) {
                self.posted.remove(&held.alert.labels);
                self.resolved.insert(held.alert.labels.clone(), now);
                posts.push(resolve(held, me, wall));
            }
        }
        posts
    }

    /// Every alert this node posted firing and has not resolved, for an
    /// Alertmanager that missed earlier posts.
    pub fn all_firing(&self) -> Vec<Post> {
        self.posted
            .values()
            .map(|p| Post {
                alert: p.alert.clone(),
                resolved_at: None,
            })
            .collect()
    }

    /// How many alerts this node has posted firing.
    pub fn firing(&self) -> usize {
        self.posted.len()
    }

    /// Follows what this node holds true as the leader would post it (with
    /// quorum; nothing without).
    fn follow_held(&mut self, status: &MeshStatus, now: Instant) {
        let holds: Vec<Alert> = if status.quorum.has_quorum {
            alerts(status, Role::Leader)
        } else {
            Vec::new()
        };
        let labels: BTreeSet<Labels> = holds.iter().map(|a| a.labels.clone()).collect();
        self.held_since.retain(|l, _| labels.contains(l));
        self.lacking_since.retain(|l, _| labels.contains(l));
        for alert in holds {
            match self.held_since.get_mut(&alert.labels) {
                Some((current, _)) => *current = alert,
                None => {
                    self.held_since.insert(alert.labels.clone(), (alert, now));
                }
            }
        }
    }

    /// Resolves this node's own posts that no longer hold: with quorum,
    /// what it no longer holds true; without, only what it posted without
    /// quorum and no longer vouches for (`current`: what it posts now).
    fn resolve_cleared(&mut self, role: Role, current: &[Alert], wall: SystemTime) -> Vec<Post> {
        let held = &self.held_since;
        let vouched: BTreeSet<&Labels> = current.iter().map(|a| &a.labels).collect();
        let cleared: Vec<Labels> = self
            .posted
            .iter()
            .filter(|(labels, posted)| match role {
                Role::Minority => posted.role == Role::Minority && !vouched.contains(labels),
                Role::Leader | Role::Follower => !held.contains_key(*labels),
            })
            .map(|(labels, _)| labels.clone())
            .collect();
        cleared
            .into_iter()
            .filter_map(|labels| self.posted.remove(&labels))
            .map(|p| Post {
                alert: p.alert,
                resolved_at: Some(wall),
            })
            .collect()
    }

    /// Posts `alert` firing if this node has not, or not within
    /// `resend_every`.
    fn post_firing(
        &mut self,
        alert: Alert,
        role: Role,
        now: Instant,
        resend_every: Duration,
    ) -> Option<Post> {
        let due = self
            .posted
            .get(&alert.labels)
            .is_none_or(|p| now.saturating_duration_since(p.at) >= resend_every || p.role != role);
        if !due {
            return None;
        }
        self.posted.insert(
            alert.labels.clone(),
            Posted {
                alert: alert.clone(),
                at: now,
                role,
            },
        );
        Some(Post {
            alert,
            resolved_at: None,
        })
    }

    /// A follower's backup: what it held for [`BACKUP_GRACE`] that
    /// Alertmanager lacked at every check for as long.
    fn back_up(
        &mut self,
        firing: &BTreeMap<&Labels, &Held>,
        now: Instant,
        resend_every: Duration,
    ) -> Vec<Post> {
        let mut due = Vec::new();
        for (labels, (alert, since)) in &self.held_since {
            if firing.contains_key(labels) {
                self.lacking_since.remove(labels);
                continue;
            }
            let lacking = *self.lacking_since.entry(labels.clone()).or_insert(now);
            let long = |at: Instant| now.saturating_duration_since(at) >= BACKUP_GRACE;
            if long(*since) && long(lacking) && !self.posted.contains_key(labels) {
                due.push(alert.clone());
            }
        }
        due.into_iter()
            .filter_map(|alert| self.post_firing(alert, Role::Follower, now, resend_every))
            .collect()
    }
}

/// How precisely a poster knows Alertmanager's clock: its `Date` header
/// has whole seconds.
pub const DATE_RESOLUTION: Duration = Duration::from_secs(1);

/// `t` of a clock that read `local` when another read `remote`, on that
/// other clock, to the whole second (what an HTTP `Date` header tells).
pub fn on_clock(t: SystemTime, local: SystemTime, remote: SystemTime) -> SystemTime {
    match remote.duration_since(local) {
        Ok(ahead) => t + Duration::from_secs(ahead.as_secs()),
        Err(behind) => t
            .checked_sub(Duration::from_secs(behind.duration().as_secs()))
            .unwrap_or(t),
    }
}

/// A post's start and end on Alertmanager's clock, which read `remote` when
/// this node's read `local` (unknown before its first answer: taken as
/// this node's). A resolve ends a `Date` second early, never before its
/// start, so Alertmanager never holds it firing a moment longer: a resolve
/// whose end is still ahead of Alertmanager's clock fires again.
pub fn on_alertmanager_clock(
    post: &Post,
    local: SystemTime,
    remote: Option<SystemTime>,
) -> (SystemTime, Option<SystemTime>) {
    let shift = |t: SystemTime| remote.map_or(t, |remote| on_clock(t, local, remote));
    let starts_at = shift(post.alert.starts_at);
    let ends_at = post.resolved_at.map(|t| {
        shift(t)
            .checked_sub(DATE_RESOLUTION)
            .map_or(starts_at, |end| end.max(starts_at))
    });
    (starts_at, ends_at)
}

/// Whether `labels` name an alert a node without quorum posts of its own
/// (see [`minority_alerts`]).
fn vouched_alone(labels: &Labels, status: &MeshStatus) -> bool {
    match labels.get("alertname").map(String::as_str) {
        Some("MeshNoQuorum") => true,
        Some("MeshNodeDown") => status.quorum.configured.len() <= 2,
        _ => false,
    }
}

/// Whether `labels` say that node `me` is down.
fn about_me(labels: &Labels, me: &str) -> bool {
    labels.get("alertname").map(String::as_str) == Some("MeshNodeDown")
        && labels.get("node").map(String::as_str) == Some(me)
}

/// The resolve of an alert found at Alertmanager, posted by `me`: its own
/// labels, summary and start, so the resolved notification reads as the
/// firing one did.
fn resolve(held: &Held, me: &str, wall: SystemTime) -> Post {
    let mut alert = held.alert.clone();
    alert
        .annotations
        .insert(POSTED_BY.to_owned(), me.to_owned());
    Post {
        alert,
        resolved_at: Some(wall),
    }
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{id, wall};
    use meshd_domain::{
        Alarm, Incarnation, LinkEnd, LinkVerdict, NodeIdentity, NodeVerdict, Quorum,
    };

    use super::*;
    use crate::fixtures::instant;

    fn status(link: LinkState, blame: Blame, c: NodeState, alarms: Vec<Alarm>) -> MeshStatus {
        MeshStatus {
            node: NodeIdentity {
                id: id("a"),
                incarnation: Incarnation(1),
                version: "t".into(),
                hostname: "a".into(),
            },
            evaluated_at: wall(10),
            quorum: Quorum {
                configured: vec![id("a"), id("b"), id("c")],
                members: vec![id("a"), id("b")],
                has_quorum: true,
                leader: Some(id("a")),
            },
            nodes: vec![NodeVerdict {
                id: id("c"),
                state: c,
                since: wall(3),
                evidence: vec!["last report 5s ago".into()],
                identity: None,
                last_report_at: None,
                cpu_saturated: false,
                boot: Default::default(),
                fix: None,
            }],
            links: vec![LinkVerdict {
                a: LinkEnd::node_only(id("a")),
                b: LinkEnd::node_only(id("b")),
                state: link,
                since: wall(5),
                evidence: vec!["a: no reply for 700ms".into()],
                blame,
                blamed_node: None,
                recent_changes: 1,
                flapping: false,
                fix: None,
            }],
            alarms,
            cables: vec![],
            checks: vec![],
            measurements: vec![],
            jobs: Vec::new(),
        }
    }

    fn names(alerts: &[Alert]) -> Vec<&str> {
        alerts
            .iter()
            .map(|a| a.labels["alertname"].as_str())
            .collect()
    }

    #[test]
    fn verdicts_and_alarms_become_alerts_with_the_rules_labels_and_runbooks() {
        let bridge = Alarm {
            kind: AlarmKind::BridgeLoop,
            severity: Severity::Critical,
            node: id("b"),
            subject: "bridge0".into(),
            summary: "Thunderbolt Bridge over mesh ports".into(),
            evidence: vec!["members: en1, en2".into()],
            fix: Some("networksetup -setnetworkserviceenabled 'Thunderbolt Bridge' off".into()),
            since: wall(1),
            updated: wall(9),
        };
        let out = alerts(
            &status(LinkState::Down, Blame::Link, NodeState::Down, vec![bridge]),
            Role::Leader,
        );
        assert_eq!(
            names(&out),
            ["MeshLinkDown", "MeshNodeDown", "MeshBridgeLoop"]
        );
        let link = &out[0];
        let labels: Vec<(&str, &str)> = link
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("a", "a"),
                ("alertname", "MeshLinkDown"),
                ("b", "b"),
                ("severity", "critical")
            ],
            "exactly the labels of the Prometheus rule"
        );
        assert_eq!(link.starts_at, wall(5));
        assert_eq!(
            link.annotations["runbook_url"],
            format!("{RUNBOOK}#meshlinkdown")
        );
        assert_eq!(link.annotations[POSTED_BY], "a");
        let loop_alert = &out[2];
        assert_eq!(loop_alert.labels.get("node").map(String::as_str), Some("b"));
        assert!(!loop_alert.labels.contains_key("subject"));
        assert!(
            loop_alert.annotations["description"]
                .ends_with("Fix: networksetup -setnetworkserviceenabled 'Thunderbolt Bridge' off")
        );
    }

    #[test]
    fn a_link_down_because_its_node_is_down_is_the_node_alert_only() {
        let out = alerts(
            &status(LinkState::Down, Blame::Node, NodeState::Down, vec![]),
            Role::Leader,
        );
        assert_eq!(names(&out), ["MeshNodeDown"]);
    }

    #[test]
    fn without_quorum_a_mesh_of_two_pages_its_silent_peer_and_a_larger_one_only_the_lost_quorum() {
        let mut s = status(LinkState::Down, Blame::Link, NodeState::Down, vec![]);
        s.quorum.has_quorum = false;
        s.quorum.leader = None;
        s.quorum.configured = vec![id("a"), id("c")];
        assert_eq!(Role::of(&s), Role::Minority);
        // Without quorum but before the engine raised no_quorum (a start):
        // no quorum page yet.
        assert_eq!(names(&alerts(&s, Role::Minority)), ["MeshNodeDown"]);
        s.alarms.push(Alarm {
            kind: AlarmKind::NoQuorum,
            severity: Severity::Warning,
            node: id("a"),
            subject: "quorum".into(),
            summary: "no quorum".into(),
            evidence: vec!["not heard: c".into()],
            fix: None,
            since: wall(3),
            updated: wall(9),
        });
        let out = alerts(&s, Role::Minority);
        assert_eq!(names(&out), ["MeshNodeDown", "MeshNoQuorum"]);
        assert_eq!(out[1].starts_at, wall(3), "since the alarm");
        assert!(out[0].annotations["seen_by"].contains("without quorum"));
        assert_eq!(
            out[0].labels,
            alerts(
                &status(LinkState::Up, Blame::None, NodeState::Down, vec![]),
                Role::Leader
            )[0]
            .labels,
            "the same labels as the leader's page, so Alertmanager sees one"
        );
        assert!(
            !out[1].labels.contains_key("node"),
            "one for the whole mesh"
        );
        // In a mesh of three, a node without quorum is more likely cut off
        // than alone among the dead: it pages only that.
        s.quorum.configured = vec![id("a"), id("b"), id("c")];
        assert_eq!(names(&alerts(&s, Role::Minority)), ["MeshNoQuorum"]);
    }

    const RESEND: Duration = Duration::from_secs(30);

    /// `status` as node `me` sees it, leading or following `leader`, or
    /// without quorum.
    fn as_seen(mut status: MeshStatus, me: &str, leader: Option<&str>) -> MeshStatus {
        status.node.id = id(me);
        status.quorum.has_quorum = leader.is_some();
        status.quorum.leader = leader.map(id);
        status
    }

    fn link_down() -> MeshStatus {
        status(LinkState::Down, Blame::Link, NodeState::Up, vec![])
    }

    fn healthy() -> MeshStatus {
        status(LinkState::Up, Blame::None, NodeState::Up, vec![])
    }

    /// What Alertmanager would hold after `posts`, by `by`, `ago` ago.
    fn found(posts: &[Post], ago: Duration) -> Vec<Held> {
        posts
            .iter()
            .map(|p| Held {
                alert: p.alert.clone(),
                posted_by: p.alert.annotations.get(POSTED_BY).cloned(),
                firing: p.resolved_at.is_none(),
                since_update: ago,
            })
            .collect()
    }

    #[test]
    fn the_leader_posts_at_once_then_every_resend_interval_and_resolves_explicitly() {
        let mut state = AlertState::default();
        let down = as_seen(link_down(), "a", Some("a"));
        let posts = state.after_look(&down, instant(10), wall(10), RESEND);
        assert_eq!(posts.len(), 1);
        assert_eq!(posts[0].resolved_at, None, "firing, with no end of ours");
        assert!(
            state.check_due(instant(10)),
            "a new leader reads back at once"
        );
        assert!(
            state
                .after_look(&down, instant(20), wall(20), RESEND)
                .is_empty()
        );
        assert_eq!(
            state.after_look(&down, instant(40), wall(40), RESEND).len(),
            1
        );
        let posts = state.after_look(
            &as_seen(healthy(), "a", Some("a")),
            instant(41),
            wall(41),
            RESEND,
        );
        assert_eq!(posts.len(), 1);
        assert_eq!(posts[0].resolved_at, Some(wall(41)), "resolved now");
        assert_eq!(state.firing(), 0);
        assert!(
            state
                .after_look(
                    &as_seen(healthy(), "a", Some("a")),
                    instant(42),
                    wall(42),
                    RESEND
                )
                .is_empty()
        );
    }

    #[test]
    fn a_follower_posts_what_the_leader_has_not_after_the_grace_and_resolves_it_after() {
        let mut b = AlertState::default();
        let down = as_seen(link_down(), "b", Some("a"));
        assert!(b.after_look(&down, instant(0), wall(0), RESEND).is_empty());
        // The leader posts nothing (gone, deaf or lying).
        assert!(b.check(&down, &[], instant(0), wall(0), RESEND).is_empty());
        assert!(b.after_look(&down, instant(3), wall(3), RESEND).is_empty());
        assert!(
            b.check(&down, &[], instant(3), wall(3), RESEND).is_empty(),
            "held and lacking for less than the grace"
        );
        let posts = b.check(&down, &[], instant(6), wall(6), RESEND);
        assert_eq!(posts.len(), 1, "posted itself");
        assert_eq!(posts[0].resolved_at, None);
        assert_eq!(
            b.after_look(&down, instant(36), wall(36), RESEND).len(),
            1,
            "and kept alive while it holds"
        );
        let healed = as_seen(healthy(), "b", Some("a"));
        let posts = b.after_look(&healed, instant(40), wall(40), RESEND);
        assert_eq!(posts.len(), 1);
        assert_eq!(posts[0].resolved_at, Some(wall(40)));
    }

    #[test]
    fn a_follower_posts_nothing_while_the_leader_does_or_their_views_differ_a_moment() {
        let mut a = AlertState::default();
        let mut b = AlertState::default();
        let down_a = as_seen(link_down(), "a", Some("a"));
        let down_b = as_seen(link_down(), "b", Some("a"));
        let leader_posts = a.after_look(&down_a, instant(0), wall(0), RESEND);
        b.after_look(&down_b, instant(0), wall(0), RESEND);
        for t in [0, 3, 6, 9] {
            assert!(
                b.check(
                    &down_b,
                    &found(&leader_posts, Duration::ZERO),
                    instant(t),
                    wall(t),
                    RESEND
                )
                .is_empty()
            );
        }
        // The leader saw the link come back a moment before b did.
        let resolved = a.after_look(
            &as_seen(healthy(), "a", Some("a")),
            instant(10),
            wall(10),
            RESEND,
        );
        for t in [10, 12] {
            assert!(
                b.check(
                    &down_b,
                    &found(&resolved, Duration::ZERO),
                    instant(t),
                    wall(t),
                    RESEND
                )
                .is_empty(),
                "b still sees it down for a moment, and waits"
            );
        }
        let healed = as_seen(healthy(), "b", Some("a"));
        assert!(
            b.after_look(&healed, instant(13), wall(13), RESEND)
                .is_empty()
        );
        assert!(
            b.check(
                &healed,
                &found(&resolved, Duration::ZERO),
                instant(16),
                wall(16),
                RESEND
            )
            .is_empty()
        );
    }

    #[test]
    fn the_leader_resolves_what_nobody_holds_true_but_not_a_live_members_page() {
        let down = alerts(&link_down(), Role::Leader);
        let node_down = alerts(
            &status(LinkState::Up, Blame::None, NodeState::Down, vec![]),
            Role::Leader,
        );
        let as_by = |alerts: &[Alert], by: &str| -> Vec<Post> {
            alerts
                .iter()
                .map(|a| {
                    let mut alert = a.clone();
                    alert
                        .annotations
                        .insert(POSTED_BY.to_owned(), by.to_owned());
                    Post {
                        alert,
                        resolved_at: None,
                    }
                })
                .collect()
        };
        let mut a = AlertState::default();
        let healthy_a = as_seen(healthy(), "a", Some("a"));
        a.after_look(&healthy_a, instant(0), wall(0), RESEND);
        // b is a live member: its page stands (two leaders in a one-sided
        // partition must not resolve each other's).
        assert!(
            a.check(
                &healthy_a,
                &found(&as_by(&down, "b"), Duration::ZERO),
                instant(0),
                wall(0),
                RESEND
            )
            .is_empty()
        );
        // c is not a member of a's quorum (dead, or cut off): its leftover
        // is resolved once a's run has judged for a while; so is one nobody
        // refreshed for two resend intervals.
        let resolves = a.check(
            &healthy_a,
            &found(&as_by(&node_down, "c"), Duration::ZERO),
            instant(8),
            wall(8),
            RESEND,
        );
        assert_eq!(resolves.len(), 1);
        assert_eq!(resolves[0].resolved_at, Some(wall(8)));
        assert_eq!(
            resolves[0].alert.annotations["summary"],
            node_down[0].annotations["summary"]
        );
        let abandoned = a.check(
            &healthy_a,
            &found(&as_by(&down, "b"), RESEND * 2),
            instant(11),
            wall(11),
            RESEND,
        );
        assert_eq!(abandoned.len(), 1);
        // An alert a holds true is never resolved.
        let down_a = as_seen(link_down(), "a", Some("a"));
        a.after_look(&down_a, instant(12), wall(12), RESEND);
        assert!(
            a.check(
                &down_a,
                &found(&as_by(&down, "c"), RESEND * 3),
                instant(14),
                wall(14),
                RESEND
            )
            .is_empty()
        );
    }

    #[test]
    fn a_run_that_just_started_resolves_nothing_it_finds_until_it_judged() {
        // a's previous run paged the cut; the new one has not judged the
        // link yet (its status shows it up, held).
        let mut previous_run = AlertState::default();
        let paged = previous_run.after_look(
            &as_seen(link_down(), "a", Some("a")),
            instant(0),
            wall(0),
            RESEND,
        );
        let before = found(&paged, Duration::ZERO);
        let mut a = AlertState::default();
        let healthy_a = as_seen(healthy(), "a", Some("a"));
        a.after_look(&healthy_a, instant(0), wall(0), RESEND);
        let early = instant(0) + JUDGING_AFTER_START - Duration::from_millis(1);
        assert!(
            a.check(&healthy_a, &before, early, wall(4), RESEND)
                .is_empty()
        );
        let judged = instant(0) + JUDGING_AFTER_START;
        assert_eq!(
            a.check(&healthy_a, &before, judged, wall(5), RESEND).len(),
            1
        );
    }

    #[test]
    fn without_quorum_a_node_of_three_posts_only_its_lost_quorum_and_resolves_nothing_it_posted_before()
     {
        let mut a = AlertState::default();
        let posted = a.after_look(
            &as_seen(link_down(), "a", Some("a")),
            instant(0),
            wall(0),
            RESEND,
        );
        assert_eq!(posted.len(), 1);
        let mut cut_off = as_seen(link_down(), "a", None);
        cut_off.nodes[0].state = NodeState::Down;
        cut_off.alarms.push(Alarm {
            kind: AlarmKind::NoQuorum,
            severity: Severity::Warning,
            node: id("a"),
            subject: "quorum".into(),
            summary: "no quorum".into(),
            evidence: vec![],
            fix: None,
            since: wall(2),
            updated: wall(2),
        });
        let posts = a.after_look(&cut_off, instant(3), wall(3), RESEND);
        assert_eq!(
            names(&posts.iter().map(|p| p.alert.clone()).collect::<Vec<_>>()),
            vec!["MeshNoQuorum"]
        );
        assert!(
            posts.iter().all(|p| p.resolved_at.is_none()),
            "nothing resolved: {posts:?}"
        );
        assert!(
            a.check(
                &cut_off,
                &found(&posted, RESEND * 3),
                instant(4),
                wall(4),
                RESEND
            )
            .is_empty(),
            "and nothing of anyone's when it reads back"
        );
        // Back with quorum: its lost quorum is resolved, the link it still
        // holds down is not.
        let back = as_seen(link_down(), "a", Some("a"));
        let posts = a.after_look(&back, instant(10), wall(10), RESEND);
        let resolved: Vec<&str> = posts
            .iter()
            .filter(|p| p.resolved_at.is_some())
            .map(|p| p.alert.labels["alertname"].as_str())
            .collect();
        assert_eq!(resolved, vec!["MeshNoQuorum"]);
    }
}
