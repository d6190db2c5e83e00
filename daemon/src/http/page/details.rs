//! The details behind the picture, as plain HTML: one article per cable
//! and per node, each fault with its evidence and its fix. Without
//! JavaScript they are the page's own lists (the picture links to them);
//! with it, hovering or focusing an element of the picture shows its
//! article beside it. The inspector beside the picture opens on the
//! article of the worst current fault, rendered here too.

use std::fmt::Write as _;
use std::time::SystemTime;

use meshd_domain::facts::{Cable, CableEnd};
use meshd_domain::{Alarm, Blame, LinkMeasurement, LinkState};

use super::picture::{MAX_DETAILED_LINES, link_state_label, node_state_label, node_state_name};
use super::scene::{Checks, MESH_ANCHOR, Pair, Scene, SceneNode};
use super::text::{age, clip, esc, percent, prose, speed, utc};
use meshd_model::link::fmt_duration;

/// Where an article goes: the lists give it its id, which the picture
/// links to; its copy in the inspector has none, ids being unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    List,
    Inspector,
}

impl Place {
    fn id(self, anchor: &str) -> String {
        match self {
            Place::List => format!(r#" id="{}""#, esc(anchor)),
            Place::Inspector => String::new(),
        }
    }
}

/// The article `anchor` names, without its id, for the inspector; nothing
/// when no article has that id.
pub fn inspected(scene: &Scene<'_>, anchor: &str, now: SystemTime, out: &mut String) {
    if let Some(pair) = scene.pairs.iter().find(|p| p.anchor() == anchor) {
        cable(pair, now, Place::Inspector, out);
    } else if let Some(node) = scene.nodes.iter().find(|n| n.anchor() == anchor) {
        node_article(scene, node, now, Place::Inspector, out);
    } else if anchor == MESH_ANCHOR {
        mesh_article(scene, Place::Inspector, out);
    }
}

/// One evidence line, alarm summary or fix is cut at this many characters,
/// and a list at this many entries: reports come from peers, and a broken
/// or hostile one must not blow up everyone's page.
const MAX_TEXT: usize = 500;
const MAX_ITEMS: usize = 20;

pub fn cables(scene: &Scene<'_>, now: SystemTime, out: &mut String) {
    let _ = write!(
        out,
        r#"<section class="list" aria-labelledby="cables-heading"><h2 id="cables-heading">Cables ({})</h2>"#,
        scene.pairs.len()
    );
    if scene.pairs.is_empty() {
        out.push_str("<p>No cables or links are known yet.</p>");
    }
    let detailed = scene.pairs.len() <= MAX_DETAILED_LINES;
    let healthy = scene
        .pairs
        .iter()
        .filter(|p| p.state() == LinkState::Up)
        .count();
    if !detailed && healthy > 0 {
        let _ = write!(
            out,
            "<p>{healthy} healthy cables are neither drawn nor listed: the mesh has more than \
             {MAX_DETAILED_LINES}, so this page shows only the ones in trouble. Every cable is \
             in <code>meshctl status</code> and the metrics.</p>"
        );
    }
    // Trouble first: it is what the reader came for.
    let mut pairs: Vec<&Pair<'_>> = scene
        .pairs
        .iter()
        .filter(|p| detailed || p.state() != LinkState::Up)
        .collect();
    pairs.sort_by_key(|p| p.state() == LinkState::Up);
    for pair in pairs {
        cable(pair, now, Place::List, out);
    }
    out.push_str("</section>");
}

fn cable(pair: &Pair<'_>, now: SystemTime, place: Place, out: &mut String) {
    let state = pair.state();
    let _ = write!(
        out,
        r#"<article class="detail"{} data-state="{state}"><h3><span class="badge" data-state="{state}">{}</span> {} – {}</h3>"#,
        place.id(&pair.anchor()),
        link_state_label(state),
        esc(pair.a.as_str()),
        esc(pair.b.as_str())
    );
    match pair.verdict {
        Some(v) => {
            let _ = write!(
                out,
                "<p>{} since {} ({})",
                state,
                utc(v.since),
                age(v.since, now)
            );
            match (v.blame, &v.blamed_node) {
                (Blame::Node, Some(node)) => {
                    let _ = write!(
                        out,
                        " · <strong>blamed on node {}, not the cable</strong>",
                        esc(node.as_str())
                    );
                }
                (Blame::Node, None) => out.push_str(" · blamed on a node, not the cable"),
                (Blame::Link, _) => {
                    out.push_str(" · blamed on the cable or its ports: both ends are alive");
                }
                (Blame::None, _) => {}
            }
            if v.recent_changes > 0 {
                let _ = write!(
                    out,
                    " · {} change{} in the flap window",
                    v.recent_changes,
                    if v.recent_changes == 1 { "" } else { "s" }
                );
            }
            out.push_str("</p>");
        }
        None => out.push_str(
            "<p>A cable of the cable map with no link verdict: this node is not configured to \
             probe it.</p>",
        ),
    }
    for c in &pair.cables {
        cable_ends(c, out);
    }
    if let Some(v) = pair.verdict {
        // What is wrong and what to do first; the figures after them.
        evidence(&v.evidence, out);
        fix(v.fix.as_deref(), out);
    }
    figures(&pair.measurements, now, out);
    out.push_str("</article>");
}

fn cable_ends(cable: &Cable, out: &mut String) {
    let end = |e: &CableEnd| {
        let mut parts: Vec<&str> = Vec::new();
        for part in [&e.port, &e.iface, &e.rdma_device] {
            if !part.is_empty() {
                parts.push(part);
            }
        }
        if parts.is_empty() {
            esc(e.node.as_str()).to_string()
        } else {
            format!("{} {}", esc(e.node.as_str()), esc(&parts.join(" · ")))
        }
    };
    let _ = write!(
        out,
        r#"<p class="ports">Cable: {} ↔ {} · {} · {}</p>"#,
        end(&cable.a),
        end(&cable.b),
        if cable.speed_bps == 0 {
            "speed unknown".to_owned()
        } else {
            speed(cable.speed_bps)
        },
        if cable.discovered {
            "found from the ports"
        } else {
            "from the config"
        }
    );
}

/// The figures each end reported, one row per end.
fn figures(measurements: &[&LinkMeasurement], now: SystemTime, out: &mut String) {
    if measurements.is_empty() {
        out.push_str("<p>No figures from either end yet.</p>");
        return;
    }
    out.push_str(
        r#"<table class="figures"><thead><tr><th scope="col">measured by</th><th scope="col">RTT p50</th><th scope="col">RTT p99</th><th scope="col">loss</th><th scope="col">speed</th><th scope="col">RDMA port</th><th scope="col">interface</th><th scope="col">as of</th></tr></thead><tbody>"#,
    );
    for m in measurements {
        let rtt = |d| {
            if m.figures.rtt.samples == 0 {
                "–".to_owned()
            } else {
                fmt_duration(d)
            }
        };
        let loss: Vec<String> = m
            .figures
            .loss
            .iter()
            .filter(|w| w.sent > 0)
            .map(|w| {
                format!(
                    "{} over {}",
                    percent(w.ratio()),
                    humantime::format_duration(w.window)
                )
            })
            .collect();
        let link_speed = match (m.figures.negotiated_speed_bps, m.figures.expected_speed_bps) {
            (Some(have), Some(want)) if have < want => {
                format!("{} (expected {})", speed(have), speed(want))
            }
            (Some(have), _) => speed(have),
            (None, Some(want)) => format!("unknown (expected {})", speed(want)),
            (None, None) => "unknown".to_owned(),
        };
        let mut silence = String::new();
        if m.figures.silence.as_secs() >= 1 {
            silence = format!(" · silent for {}", fmt_duration(m.figures.silence));
        }
        let _ = write!(
            out,
            r#"<tr><th scope="row">{} → {}</th><td data-label="RTT p50">{}</td><td data-label="RTT p99">{}</td><td data-label="loss">{}</td><td data-label="speed">{}</td><td data-label="RDMA port">{}</td><td data-label="interface">{}</td><td data-label="as of">{}{}</td></tr>"#,
            esc(m.node.as_str()),
            esc(m.peer.as_str()),
            rtt(m.figures.rtt.p50),
            rtt(m.figures.rtt.p99),
            if loss.is_empty() {
                "no probes yet".to_owned()
            } else {
                loss.join(", ")
            },
            esc(&link_speed),
            m.figures.rdma_port_state,
            m.figures.interface_state,
            age(m.at, now),
            esc(&silence)
        );
    }
    out.push_str("</tbody></table>");
}

fn evidence(lines: &[String], out: &mut String) {
    if lines.is_empty() {
        return;
    }
    out.push_str(r#"<ul class="evidence">"#);
    for line in lines.iter().take(MAX_ITEMS) {
        let _ = write!(out, "<li>{}</li>", esc(&clip(line, MAX_TEXT)));
    }
    more(lines.len(), out);
    out.push_str("</ul>");
}

/// A verdict's fix: prose, its commands as code.
fn fix(text: Option<&str>, out: &mut String) {
    if let Some(text) = text.filter(|t| !t.is_empty()) {
        let _ = write!(
            out,
            r#"<p class="fix"><strong>Fix:</strong> {}</p>"#,
            prose(&clip(text, MAX_TEXT))
        );
    }
}

fn more(total: usize, out: &mut String) {
    if total > MAX_ITEMS {
        let _ = write!(out, "<li>… and {} more</li>", total - MAX_ITEMS);
    }
}

pub fn nodes(scene: &Scene<'_>, now: SystemTime, out: &mut String) {
    let _ = write!(
        out,
        r#"<section class="list" aria-labelledby="nodes-heading"><h2 id="nodes-heading">Nodes ({})</h2>"#,
        scene.nodes.len()
    );
    for node in &scene.nodes {
        node_article(scene, node, now, Place::List, out);
    }
    out.push_str("</section>");
}

fn node_article(
    scene: &Scene<'_>,
    node: &SceneNode<'_>,
    now: SystemTime,
    place: Place,
    out: &mut String,
) {
    let state = node.verdict.map(|v| v.state);
    let _ = write!(
        out,
        r#"<article class="detail"{} data-state="{}"><h3><span class="badge" data-state="{}">{}</span> {}"#,
        place.id(&node.anchor()),
        node_state_name(state),
        node_state_name(state),
        node_state_label(state),
        esc(node.id.as_str())
    );
    if node.is_self(scene.status) {
        out.push_str(" <small>(this node: the view on this page is its own)</small>");
    }
    if scene.status.quorum.leader.as_ref() == Some(node.id) {
        out.push_str(" <small>(quorum leader)</small>");
    }
    out.push_str("</h3>");
    match node.verdict {
        Some(v) => {
            let _ = write!(
                out,
                "<p>{} since {} ({})",
                v.state,
                utc(v.since),
                age(v.since, now)
            );
            match v.last_report_at {
                Some(at) if !node.is_self(scene.status) => {
                    let _ = write!(out, " · last report {}", age(at, now));
                }
                None if !node.is_self(scene.status) => out.push_str(" · never heard from"),
                _ => {}
            }
            if let Some(identity) = &v.identity {
                let _ = write!(
                    out,
                    " · meshd {} on {}",
                    esc(&identity.version),
                    esc(&identity.hostname)
                );
            }
            if v.cpu_saturated {
                out.push_str(" · <strong>CPU saturated</strong>: its own timeouts weigh less");
            }
            out.push_str("</p>");
            evidence(&v.evidence, out);
            fix(v.fix.as_deref(), out);
        }
        None => out.push_str("<p>No verdict on this node: it is not a configured member.</p>"),
    }
    alarms(&node.alarms, out);
    checks(&node.checks, out);
    out.push_str("</article>");
}

/// An alarm or a check that did not pass, as listed: a badge, a line, the evidence
/// and the fix.
struct Finding<'a> {
    /// The badge's data attribute, which colours it: `severity` or `check`.
    attribute: &'static str,
    level: &'static str,
    /// Already escaped.
    line: String,
    evidence: &'a [String],
    fix: Option<&'a str>,
}

fn alarms(list: &[&Alarm], out: &mut String) {
    let findings = list.iter().map(|alarm| Finding {
        attribute: "severity",
        level: alarm.severity.as_str(),
        line: format!(
            "{} <small>({} on {}, since {})</small>",
            esc(&clip(&alarm.summary, MAX_TEXT)),
            alarm.kind,
            esc(&clip(&alarm.subject, MAX_TEXT)),
            utc(alarm.since)
        ),
        evidence: &alarm.evidence,
        fix: alarm.fix.as_deref(),
    });
    findings_list("Alarms", "alarms", list.len(), findings, out);
}

/// Failing checks, then warnings, each under its own heading: a warning
/// is never called a failure.
fn checks(checks: &Checks<'_>, out: &mut String) {
    for (title, list) in [
        ("Failing checks", &checks.failing),
        ("Warnings", &checks.warnings),
    ] {
        let findings = list.iter().map(|check| Finding {
            attribute: "check",
            level: check.status.as_str(),
            line: esc(&clip(&check.name, MAX_TEXT)).to_string(),
            evidence: &check.evidence,
            fix: Some(check.fix.as_str()).filter(|fix| !fix.is_empty()),
        });
        findings_list(title, "checks", list.len(), findings, out);
    }
}

fn findings_list<'a>(
    title: &str,
    class: &str,
    total: usize,
    findings: impl Iterator<Item = Finding<'a>>,
    out: &mut String,
) {
    if total == 0 {
        return;
    }
    let _ = write!(out, r#"<h4>{title} ({total})</h4><ul class="{class}">"#);
    for finding in findings.take(MAX_ITEMS) {
        let _ = write!(
            out,
            r#"<li><span class="badge" data-{attribute}="{level}">{}</span> {}"#,
            finding.level.to_uppercase(),
            finding.line,
            attribute = finding.attribute,
            level = finding.level
        );
        evidence(finding.evidence, out);
        if let Some(fix) = finding.fix {
            let fix = clip(fix, MAX_TEXT);
            // A fix is either one command, or prose with its commands in
            // backticks (as the checks write theirs).
            let _ = if fix.contains('`') {
                write!(out, r#"<p class="fix">Fix: {}</p>"#, prose(&fix))
            } else {
                write!(out, r#"<p class="fix">Fix: <code>{}</code></p>"#, esc(&fix))
            };
        }
        out.push_str("</li>");
    }
    more(total, out);
    out.push_str("</ul>");
}

/// Alarms of nodes without a verdict and checks of the whole mesh.
pub fn mesh_wide(scene: &Scene<'_>, out: &mut String) {
    if scene.mesh_alarms.is_empty() && scene.mesh_checks.is_empty() {
        return;
    }
    out.push_str(
        r#"<section class="list" aria-labelledby="mesh-heading"><h2 id="mesh-heading">Whole mesh</h2>"#,
    );
    mesh_article(scene, Place::List, out);
    out.push_str("</section>");
}

fn mesh_article(scene: &Scene<'_>, place: Place, out: &mut String) {
    let _ = write!(
        out,
        r#"<article class="detail"{}><h3>Whole mesh</h3>"#,
        place.id(MESH_ANCHOR)
    );
    alarms(&scene.mesh_alarms, out);
    checks(&scene.mesh_checks, out);
    out.push_str("</article>");
}
