//! Alertmanager as the tests read it: what it holds active (`amtool`),
//! what it received in order (its debug log), and a watch that samples
//! the active alerts again and again over a fault, since a page that comes
//! and goes between two looks is still a page.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use meshd_lab::Lab;

/// Prometheus needs a few scrapes and the rule's `for: 3s`; Alertmanager
/// answers at once. Generous for a loaded two-core host.
pub const ALERT: Duration = Duration::from_secs(60);

/// Alerts about the host the whole lab runs on, left out of a watch's
/// comparisons (and noted in its timeline). Every node's namespace shares
/// the host's two CPUs: anything that keeps them busy for 10 s (a build
/// beside the tests, the daemons' own debug builds under a fault) is a real
/// `cpu_spike` on every node; and a busy host makes every node's timers run
/// a few ms late above 90 % CPU, which is saturation, so "most of the mesh
/// runs late" (`mesh_saturated`) is then the host's state, not the fault's
/// (seen once beside a single node 200 ms late, its condition held since
/// before that node was made late). Neither is about a cable or a node.
pub const HOST_ALERTS: [&str; 2] = ["MeshCpuSpike", "MeshSaturated"];

/// Whether `labels` name one of the [`HOST_ALERTS`].
pub fn is_host_alert(labels: &Labels) -> bool {
    labels
        .get("alertname")
        .is_some_and(|n| HOST_ALERTS.contains(&n.as_str()))
}

/// How often a watch asks Alertmanager: each ask runs `amtool` (a Go
/// binary starting) beside four daemons on two cores.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Whether the observed lab can run (root, Prometheus and Alertmanager
/// with their clients); see `common::can_run`.
pub fn can_observe() -> bool {
    super::can_run(&[
        "prometheus",
        "promtool",
        "prometheus-alertmanager",
        "amtool",
    ])
}

/// Asks `probe` every half second until it finds something, for at most
/// `limit`.
pub fn poll<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(started.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `(alertname, node)` of every active, non-inhibited, non-silenced
/// critical alert Alertmanager holds.
pub fn critical_pages(lab: &Lab) -> Option<Vec<(String, String)>> {
    let alerts = lab.alertmanager_alerts(&["severity=critical"]).ok()?;
    Some(
        alerts
            .iter()
            .map(|a| {
                let label = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_owned();
                (label("alertname"), label("node"))
            })
            .collect(),
    )
}

/// An alert's labels: what tells one page from another (Alertmanager's
/// fingerprint is a hash of them).
pub type Labels = BTreeMap<String, String>;

/// The labels of alert `name` with `pairs`, and the severity meshd gives
/// that alert.
pub fn page(name: &str, pairs: &[(&str, &str)]) -> Labels {
    let severity = match name {
        "MeshLinkDown" | "MeshNodeDown" => "critical",
        _ => "warning",
    };
    let mut labels: Labels = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.insert("alertname".to_owned(), name.to_owned());
    labels.insert("severity".to_owned(), severity.to_owned());
    labels
}

/// A link page about cable `a`–`b` (`a` before `b`, as meshd names it).
pub fn link_page(name: &str, a: &str, b: &str) -> Labels {
    page(name, &[("a", a), ("b", b)])
}

/// One active alert at Alertmanager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Active {
    /// As Alertmanager holds it: a page that was resolved and fired again
    /// starts anew (while it stays firing, every post merges into the
    /// start Alertmanager already has).
    pub starts_at: String,
    /// The hash of its labels, as Alertmanager shows it (16 hex digits).
    pub fingerprint: String,
    /// The node that posted it last (meshd's annotation).
    pub posted_by: String,
}

/// Every active (not inhibited, not silenced) alert Alertmanager holds.
pub fn active(lab: &Lab) -> BTreeMap<Labels, Active> {
    let alerts = lab
        .alertmanager_alerts(&[])
        .unwrap_or_else(|err| panic!("amtool answers: {err}"));
    alerts
        .iter()
        .map(|a| {
            let labels: Labels = a["labels"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                        .collect()
                })
                .unwrap_or_default();
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            let active = Active {
                starts_at: text(&a["startsAt"]),
                fingerprint: text(&a["fingerprint"]),
                posted_by: text(&a["annotations"]["meshd_posted_by"]),
            };
            (labels, active)
        })
        .collect()
}

/// Short text for a set of label sets: `MeshLinkDown{a=a,b=b}`, ….
pub fn describe<'a>(pages: impl IntoIterator<Item = &'a Labels>) -> String {
    let mut out = String::from("[");
    for (i, labels) in pages.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(labels.get("alertname").map_or("?", String::as_str));
        let rest: Vec<String> = labels
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "alertname" | "severity"))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = write!(out, "{{{}}}", rest.join(","));
    }
    out.push(']');
    out
}

/// What Alertmanager holds, watched over the phases of a fault. Every
/// sample is checked, and every page keeps the start it was first seen
/// with: a new start is a page that was resolved and fired again.
pub struct PageWatch {
    started: Instant,
    first_seen: BTreeMap<Labels, Active>,
    /// What changed when, for the failure messages.
    timeline: Vec<String>,
    last: Option<BTreeMap<Labels, Active>>,
    /// The host's alerts seen (left out of every comparison).
    host_seen: BTreeSet<Labels>,
}

impl PageWatch {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            first_seen: BTreeMap::new(),
            timeline: Vec::new(),
            last: None,
            host_seen: BTreeSet::new(),
        }
    }

    /// The seconds since the watch began, for messages.
    pub fn at(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Notes a step of the test in the timeline.
    pub fn note(&mut self, what: &str) {
        let line = format!("{:7.2} s  -- {what}", self.at());
        eprintln!("{line}");
        self.timeline.push(line);
    }

    fn fail(&self, message: String) -> ! {
        panic!(
            "{message}\nwhat Alertmanager held, as it changed:\n{}",
            self.timeline.join("\n")
        )
    }

    /// One look at Alertmanager, checked for refires; the host's own
    /// alerts are left out (see [`HOST_ALERTS`]).
    fn sample(&mut self, lab: &Lab) -> BTreeMap<Labels, Active> {
        let mut now = active(lab);
        let host: Vec<Labels> = now.keys().filter(|l| is_host_alert(l)).cloned().collect();
        if !host.is_empty() && self.host_seen.is_empty() {
            let line = format!(
                "{:7.2} s  (the host's, left out: {})",
                self.at(),
                describe(&host)
            );
            eprintln!("{line}");
            self.timeline.push(line);
        }
        for labels in host {
            now.remove(&labels);
            self.host_seen.insert(labels);
        }
        if self.last.as_ref() != Some(&now) {
            let line = format!(
                "{:7.2} s  {} {:?}",
                self.at(),
                describe(now.keys()),
                now.values()
                    .map(|a| (a.starts_at.as_str(), a.posted_by.as_str()))
                    .collect::<Vec<_>>()
            );
            eprintln!("{line}");
            self.timeline.push(line);
        }
        for (labels, seen) in &now {
            match self.first_seen.get(labels) {
                None => {
                    self.first_seen.insert(labels.clone(), seen.clone());
                }
                Some(first) if first.starts_at != seen.starts_at => self.fail(format!(
                    "{} fired again: it started at {}, now at {}",
                    describe([labels]),
                    first.starts_at,
                    seen.starts_at
                )),
                Some(_) => {}
            }
        }
        self.last = Some(now.clone());
        now
    }

    /// Waits up to `limit` until Alertmanager holds exactly `expected`;
    /// meanwhile it may hold nothing outside `allowed` (`expected` is
    /// allowed). How long it took.
    pub fn wait_for_exactly(
        &mut self,
        lab: &Lab,
        what: &str,
        expected: &[&Labels],
        allowed: &[&Labels],
        limit: Duration,
    ) -> Duration {
        let began = Instant::now();
        loop {
            let now = self.sample(lab);
            if let Some(stray) = now
                .keys()
                .find(|l| !expected.contains(l) && !allowed.contains(l))
            {
                self.fail(format!(
                    "waiting for {what}: {} is not allowed (expected {}, allowed {})",
                    describe([stray]),
                    describe(expected.iter().copied()),
                    describe(allowed.iter().copied())
                ));
            }
            if now.len() == expected.len() && expected.iter().all(|l| now.contains_key(*l)) {
                let took = began.elapsed();
                self.note(&format!("{what} after {:.1} s", took.as_secs_f64()));
                return took;
            }
            if began.elapsed() >= limit {
                self.fail(format!(
                    "waited {limit:?} for {what}: expected {}",
                    describe(expected.iter().copied())
                ));
            }
            std::thread::sleep(SAMPLE_EVERY);
        }
    }

    /// Asserts that Alertmanager holds exactly `expected` at every look for
    /// `span`, each page with the start it was first seen with.
    pub fn hold_exactly(&mut self, lab: &Lab, what: &str, expected: &[&Labels], span: Duration) {
        let began = Instant::now();
        let mut looks = 0;
        while began.elapsed() < span || looks == 0 {
            self.look_exactly(lab, what, expected);
            looks += 1;
            std::thread::sleep(SAMPLE_EVERY);
        }
        self.note(&format!("{what}: held for {looks} looks"));
    }

    /// Asserts that Alertmanager holds exactly `expected` now (one look,
    /// for a test that watches something else between looks).
    pub fn look_exactly(&mut self, lab: &Lab, what: &str, expected: &[&Labels]) {
        let now = self.sample(lab);
        let same = now.len() == expected.len() && expected.iter().all(|l| now.contains_key(*l));
        if !same {
            self.fail(format!(
                "{what}: at {:.1} s Alertmanager holds {}, expected exactly {}",
                self.at(),
                describe(now.keys()),
                describe(expected.iter().copied())
            ));
        }
    }

    /// Asserts that Alertmanager received no resolve of `page` from when it
    /// was first seen active until now: a page resolved and fired again
    /// between two looks shows only here (Alertmanager's debug log).
    pub fn never_resolved(&mut self, lab: &Lab, what: &str, page: &Labels) {
        let Some(first) = self.first_seen.get(page).cloned() else {
            self.fail(format!("{what}: {} was never seen", describe([page])));
        };
        let received = lab
            .received_alerts()
            .unwrap_or_else(|err| panic!("Alertmanager's log: {err}"));
        let short = &first.fingerprint[..first.fingerprint.len().min(7)];
        let of_page: Vec<_> = received
            .iter()
            .filter(|r| first.fingerprint.starts_with(&r.fingerprint) && !r.fingerprint.is_empty())
            .collect();
        let resolves: Vec<&str> = of_page
            .iter()
            .filter(|r| r.resolved)
            .map(|r| r.at.as_str())
            .collect();
        if !resolves.is_empty() {
            self.fail(format!(
                "{what}: Alertmanager received resolves of {} ({short}) while its fault lasted, at {resolves:?}",
                describe([page])
            ));
        }
        self.note(&format!(
            "{what}: {} posts of {}, none a resolve",
            of_page.len(),
            describe([page])
        ));
    }
}
