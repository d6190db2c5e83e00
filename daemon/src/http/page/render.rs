//! The page from one status: pure, the status and the time in, markup out.
//! [`view`] is the part that changes (sent again on every verdict change);
//! [`document`] wraps it in the page.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use meshd_domain::{AlarmKind, MeshStatus};

use super::history::{self, Timeline};
use super::scene::{Scene, scene};
use super::text::{age, esc, prose, utc};
use super::{details, picture};

/// The whole page: the view, the legend, and where the style and the
/// script come from (this node; never anywhere else). Without the
/// history's timeline: what the tests of the view read.
#[cfg(test)]
pub fn document(status: &MeshStatus, now: SystemTime, stall_after: Duration) -> String {
    document_with(status, now, stall_after, None)
}

/// [`document`], with the last day's incidents under the view when given.
pub fn document_with(
    status: &MeshStatus,
    now: SystemTime,
    stall_after: Duration,
    timeline: Option<Timeline<'_>>,
) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let _ = write!(
        out,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta name="color-scheme" content="light dark"><title>meshd · {node}</title><link rel="stylesheet" href="page/style.css"><script src="page/script.js" defer></script></head><body data-contact="static"><p id="contact" role="status">Static view of {when}. Reload for a fresh one; with JavaScript on, this page keeps itself up to date.</p><main id="view">"#,
        node = esc(status.node.id.as_str()),
        when = utc(now)
    );
    out.push_str(&view(status, now, stall_after));
    out.push_str("</main>");
    if let Some(timeline) = timeline {
        history::section(timeline, now, &mut out);
    }
    legend(&mut out);
    out.push_str("</body></html>\n");
    out
}

/// The live part: header, picture, inspector and the lists. The
/// inspector opens on the worst current fault, its evidence and its fix:
/// what to do first, without a search (the script keeps a reader's own
/// choice across updates instead).
pub fn view(status: &MeshStatus, now: SystemTime, stall_after: Duration) -> String {
    let scene = scene(status);
    let worst = scene.worst_fault();
    let mut out = String::with_capacity(16 * 1024);
    header(&scene, now, stall_after, &mut out);
    out.push_str(r#"<div class="stage"><figure>"#);
    picture::svg(&scene, worst.as_deref(), &mut out);
    out.push_str("</figure>");
    match &worst {
        Some(anchor) => {
            let _ = write!(
                out,
                r#"<aside id="inspector" data-shows="{}"><p class="hint">The worst fault now, and what to do about it. Point at or Tab to a cable or a node to see it here instead; everything is also listed below.</p>"#,
                esc(anchor)
            );
            details::inspected(&scene, anchor, now, &mut out);
            out.push_str("</aside></div>");
        }
        None => out.push_str(
            r#"<aside id="inspector"><p class="hint">Nothing is wrong. Point at or Tab to a cable or a node to see its figures and evidence here. Everything is also listed below.</p></aside></div>"#,
        ),
    }
    details::cables(&scene, now, &mut out);
    details::nodes(&scene, now, &mut out);
    details::mesh_wide(&scene, &mut out);
    out
}

fn header(scene: &Scene<'_>, now: SystemTime, stall_after: Duration, out: &mut String) {
    let status = scene.status;
    let q = &status.quorum;
    let _ = write!(
        out,
        r#"<header><h1>Mesh as seen by <span class="me">{}</span></h1><p class="who">{} · meshd {} · incarnation {}</p><dl class="facts">"#,
        esc(status.node.id.as_str()),
        esc(&status.node.hostname),
        esc(&status.node.version),
        status.node.incarnation.0
    );
    let members = format!("{} of {} members", q.members.len(), q.configured.len());
    if q.has_quorum {
        let _ = write!(
            out,
            r#"<div><dt>Quorum</dt><dd data-quorum="yes">yes: {members}</dd></div>"#
        );
    } else {
        let _ = write!(
            out,
            r#"<div><dt>Quorum</dt><dd data-quorum="no"><strong>NO</strong>: {members}</dd></div>"#
        );
    }
    let _ = write!(
        out,
        "<div><dt>Leader</dt><dd>{}</dd></div>",
        q.leader.as_ref().map_or_else(
            || "none (no quorum)".to_owned(),
            |l| esc(l.as_str()).to_string()
        )
    );
    let _ = write!(
        out,
        r#"<div><dt>Evaluated</dt><dd><time datetime="{at}">{at}</time> ({})</dd></div>"#,
        age(status.evaluated_at, now),
        at = utc(status.evaluated_at)
    );
    let _ = write!(
        out,
        r#"<div><dt>Health</dt><dd data-healthy="{}">{}</dd></div></dl>"#,
        status.is_healthy(),
        esc(&health(scene))
    );
    if !q.has_quorum {
        let heard: Vec<&str> = q.members.iter().map(|m| m.as_str()).collect();
        // The no_quorum alarm's fix reads the whole picture: members to
        // bring back, or this node's own paths.
        let fix = status
            .alarms
            .iter()
            .find(|a| a.kind == AlarmKind::NoQuorum && a.node == status.node.id)
            .and_then(|a| a.fix.as_deref())
            .map(|fix| format!(" <strong>Fix:</strong> {}", prose(fix)))
            .unwrap_or_default();
        let _ = write!(
            out,
            r#"<p class="banner" role="alert"><strong>No quorum.</strong> {} hears only {} ({}). Without a majority link verdicts are held back as unknown, and node states are this node's own guess.{fix}</p>"#,
            esc(status.node.id.as_str()),
            members,
            esc(&heard.join(", "))
        );
    }
    let stale = now
        .duration_since(status.evaluated_at)
        .is_ok_and(|d| d > stall_after);
    if stale {
        let _ = write!(
            out,
            r#"<p class="banner" role="alert"><strong>Stalled.</strong> The last evaluation is {}: meshd on {} has stopped judging the mesh, and this view is out of date.</p>"#,
            age(status.evaluated_at, now),
            esc(status.node.id.as_str())
        );
    }
    out.push_str("</header>");
}

/// "healthy", or what keeps the status from being healthy, counted.
fn health(scene: &Scene<'_>) -> String {
    let status = scene.status;
    if status.is_healthy() {
        return "healthy".to_owned();
    }
    format!("not healthy: {}", status.troubles().join(", "))
}

/// What the lines and discs mean, in words beside a sample of each.
fn legend(out: &mut String) {
    out.push_str(r#"<footer><h2>Legend</h2><ul class="legend">"#);
    let lines: [(&str, &str, &str); 6] = [
        ("up", "none", "up: solid line, no tag"),
        (
            "degraded",
            "link",
            "DEGRADED: long dashes (loss, RTT, speed or RDMA port)",
        ),
        ("flapping", "link", "FLAPPING: dash-dot, changing too often"),
        (
            "down",
            "link",
            "DOWN: heavy line, the cable or its ports are at fault",
        ),
        (
            "down",
            "node",
            "node DOWN: dotted, the node at one end is blamed, not the cable",
        ),
        (
            "unknown",
            "none",
            "UNKNOWN: faint dots, no verdict (no quorum or no probes yet)",
        ),
    ];
    for (state, blame, text) in lines {
        let _ = write!(
            out,
            r#"<li><svg class="swatch" viewBox="0 0 48 12" aria-hidden="true"><g class="cable" data-state="{state}" data-blame="{blame}"><line class="wire" x1="2" y1="6" x2="46" y2="6"/></g></svg>{text}</li>"#
        );
    }
    for (state, text) in [
        ("up", "node up"),
        ("suspect", "node SUSPECT: late reports, dashed ring"),
        ("down", "node DOWN: crossed out"),
    ] {
        let _ = write!(
            out,
            r#"<li><svg class="swatch" viewBox="0 0 48 24" aria-hidden="true"><g class="node" data-state="{state}"><circle class="disc" cx="24" cy="12" r="9"/></g></svg>{text}</li>"#
        );
    }
    for (class, mark, text) in [
        (
            "fail",
            "✖",
            "red beside a node: its critical alarms and failing checks",
        ),
        (
            "warn",
            "⚠",
            "amber beside a node: its other alarms and its warnings",
        ),
    ] {
        let _ = write!(
            out,
            r#"<li><svg class="swatch" viewBox="0 0 48 24" aria-hidden="true"><g class="node"><text class="{class}" x="24" y="17" text-anchor="middle">{mark}</text></g></svg>{mark} {text}</li>"#
        );
    }
    out.push_str("</ul><p>Every fault's details give its evidence and what to do about it; a node's also list its alarms, failing checks and warnings with the command that fixes each. Read-only: this page changes nothing.</p></footer>");
}
