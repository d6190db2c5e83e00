//! Alertmanager as the simulated nodes' pushes reach it: one alert per
//! label set, merged the way Alertmanager merges posts (the younger post
//! wins, the earliest start is kept, a firing post without an end fires
//! until `resolve_timeout` passes without another), on a clock of its own.
//! What a pager would see is each label set's notifications: the moments
//! it turns firing or resolved.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use meshd_model::alerts::{Alert, Held, Labels, POSTED_BY};

/// Alertmanager's default `resolve_timeout`.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
struct Stored {
    alert: Alert,
    ends_at: Option<SystemTime>,
    /// When it was last posted, on the simulation's clock.
    updated: Instant,
    /// Whether the last notification said firing.
    notified_firing: bool,
}

/// A notification: a label set turned firing or resolved.
#[derive(Debug, Clone)]
pub struct Notification {
    pub at: Instant,
    pub labels: Labels,
    pub firing: bool,
}

#[derive(Debug, Default)]
pub struct Alertmanager {
    /// Alertmanager's clock minus the simulation's wall clock.
    pub offset: Duration,
    /// Whether Alertmanager's clock is behind (else ahead).
    pub behind: bool,
    alerts: BTreeMap<Labels, Stored>,
    pub notifications: Vec<Notification>,
}

impl Alertmanager {
    /// Alertmanager's clock when the simulation's wall clock reads `wall`.
    pub fn clock(&self, wall: SystemTime) -> SystemTime {
        if self.behind {
            wall.checked_sub(self.offset).unwrap_or(wall)
        } else {
            wall + self.offset
        }
    }

    /// Takes a post made at `now` (simulation) / `am_now` (its own clock);
    /// times in the post are already on its clock.
    pub fn post(
        &mut self,
        now: Instant,
        am_now: SystemTime,
        alert: Alert,
        ends_at: Option<SystemTime>,
    ) {
        let labels = alert.labels.clone();
        let stored = match self.alerts.remove(&labels) {
            Some(old) => Stored {
                alert: Alert {
                    starts_at: old.alert.starts_at.min(alert.starts_at),
                    ..alert
                },
                ends_at,
                updated: now,
                notified_firing: old.notified_firing,
            },
            None => Stored {
                alert,
                ends_at,
                updated: now,
                notified_firing: false,
            },
        };
        self.alerts.insert(labels, stored);
        self.notify(now, am_now);
    }

    fn firing(stored: &Stored, now: Instant, am_now: SystemTime) -> bool {
        match stored.ends_at {
            Some(end) => end > am_now,
            None => now.saturating_duration_since(stored.updated) < RESOLVE_TIMEOUT,
        }
    }

    /// Notes every label set whose state changed since its last
    /// notification.
    pub fn notify(&mut self, now: Instant, am_now: SystemTime) {
        for (labels, stored) in &mut self.alerts {
            let firing = Self::firing(stored, now, am_now);
            if firing != stored.notified_firing {
                stored.notified_firing = firing;
                self.notifications.push(Notification {
                    at: now,
                    labels: labels.clone(),
                    firing,
                });
            }
        }
    }

    /// What a GET of the alerts returns: every alert meshd posted, with
    /// its last poster and how long ago that was by Alertmanager's clock.
    pub fn held(&self, now: Instant, am_now: SystemTime) -> Vec<Held> {
        self.alerts
            .values()
            .filter(|s| s.alert.annotations.contains_key(POSTED_BY))
            .map(|s| Held {
                alert: s.alert.clone(),
                posted_by: s.alert.annotations.get(POSTED_BY).cloned(),
                firing: Self::firing(s, now, am_now),
                since_update: now.saturating_duration_since(s.updated),
            })
            .collect()
    }

    /// The label sets firing now.
    pub fn firing_now(&self, now: Instant, am_now: SystemTime) -> Vec<Labels> {
        self.alerts
            .iter()
            .filter(|(_, s)| Self::firing(s, now, am_now))
            .map(|(l, _)| l.clone())
            .collect()
    }
}
