//! The mesh as an SVG: nodes on a circle, one line per pair of nodes.
//! State is drawn three ways at once (colour, line pattern, and a text tag
//! on every line that is not up), so colour is never the only signal. Every
//! node and line is a link to its details below, which makes it focusable
//! with Tab and usable without JavaScript; its `<title>` is the tooltip.

use std::f64::consts::PI;
use std::fmt::Write as _;

use meshd_domain::{Blame, LinkState, NodeState};

use super::scene::{Pair, Scene, SceneNode};
use super::text::{clip, esc, percent};
use meshd_model::link::fmt_duration;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 600.0;
const CENTRE: (f64, f64) = (WIDTH / 2.0, HEIGHT / 2.0);
/// Leaves room outside the ring for names and state lines.
const RING: f64 = 205.0;
/// Names longer than this are cut in the picture (never in the lists).
const NAME_CHARS: usize = 16;
/// Where along a line its state tag sits, from the lower id's end: off the
/// middle, so the tags of crossing diagonals do not cover each other.
const TAG_AT: f64 = 0.36;
/// Beyond this many cables, only those that are not up are drawn and
/// detailed: a ring of thousands of lines is a solid disc, and its page
/// megabytes every 2 s.
pub const MAX_DETAILED_LINES: usize = 400;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    x: f64,
    y: f64,
}

/// `n` places on the ring, the first at the top, going clockwise; one
/// node sits in the middle.
fn places(n: usize) -> Vec<Point> {
    if n == 1 {
        return vec![Point {
            x: CENTRE.0,
            y: CENTRE.1,
        }];
    }
    (0..n)
        .map(|i| {
            #[allow(clippy::cast_precision_loss)]
            let angle = -PI / 2.0 + 2.0 * PI * i as f64 / n as f64;
            Point {
                x: CENTRE.0 + RING * angle.cos(),
                y: CENTRE.1 + RING * angle.sin(),
            }
        })
        .collect()
}

/// Node discs shrink as the ring fills up, so neighbours do not overlap.
fn disc_radius(n: usize) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let room = PI * RING / n.max(1) as f64;
    (room * 0.45).clamp(6.0, 26.0)
}

pub fn link_state_label(state: LinkState) -> &'static str {
    match state {
        LinkState::Up => "up",
        LinkState::Degraded => "DEGRADED",
        LinkState::Flapping => "FLAPPING",
        LinkState::Down => "DOWN",
        LinkState::Unknown => "UNKNOWN",
    }
}

pub fn node_state_label(state: Option<NodeState>) -> &'static str {
    match state {
        Some(NodeState::Up) => "up",
        Some(NodeState::Suspect) => "SUSPECT",
        Some(NodeState::Down) => "DOWN",
        None => "NO VERDICT",
    }
}

/// The data attribute value of a node's state.
pub fn node_state_name(state: Option<NodeState>) -> &'static str {
    state.map_or("unknown", NodeState::as_str)
}

/// The tag on a line: its state, and whom it is blamed on when that is a
/// node rather than the cable.
fn line_tag(pair: &Pair<'_>) -> Option<String> {
    let verdict = pair.verdict;
    match verdict {
        None => Some("NO VERDICT".to_owned()),
        Some(v) if v.blame == Blame::Node => Some(match &v.blamed_node {
            Some(node) => format!("{} DOWN (node)", clip(node.as_str(), NAME_CHARS)),
            None => "NODE DOWN".to_owned(),
        }),
        Some(v) if v.state == LinkState::Up => None,
        Some(v) => Some(link_state_label(v.state).to_owned()),
    }
}

/// One line of plain text about a pair: the tooltip and the picture's
/// accessible summary use it.
pub fn pair_summary(pair: &Pair<'_>) -> String {
    let mut text = format!("{}–{}: {}", pair.a, pair.b, pair.state());
    if let Some(v) = pair.verdict
        && v.blame == Blame::Node
        && let Some(node) = &v.blamed_node
    {
        let _ = write!(text, ", node {node} blamed, not the cable");
    }
    if pair.verdict.is_none() {
        text.push_str(", cable with no verdict");
    }
    for m in &pair.measurements {
        let _ = write!(
            text,
            "\n{} → {}: RTT p50 {} p99 {}",
            m.node,
            m.peer,
            fmt_duration(m.figures.rtt.p50),
            fmt_duration(m.figures.rtt.p99)
        );
        if let Some(w) = m.figures.loss.first() {
            let _ = write!(text, ", loss {}", percent(w.ratio()));
        }
        if let Some(bps) = m.figures.negotiated_speed_bps {
            let _ = write!(text, ", {}", super::text::speed(bps));
        }
        let _ = write!(text, ", RDMA {}", m.figures.rdma_port_state);
    }
    if let Some(v) = pair.verdict {
        for line in v.evidence.iter().take(5) {
            let _ = write!(text, "\n{line}");
        }
    }
    text
}

pub fn svg(scene: &Scene<'_>, out: &mut String) {
    let n = scene.nodes.len();
    let places = places(n);
    let at = |id| {
        scene
            .nodes
            .iter()
            .position(|node| node.id == id)
            .and_then(|i| places.get(i).copied())
    };
    let detailed = scene.pairs.len() <= MAX_DETAILED_LINES;
    let counts = line_counts(scene);
    let _ = write!(
        out,
        r#"<svg class="picture" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="picture-title"><title id="picture-title">{} nodes, {} cables: {}</title>"#,
        n,
        scene.pairs.len(),
        esc(&counts)
    );
    if !scene.status.quorum.has_quorum {
        let _ = write!(
            out,
            r#"<text class="watermark" x="{}" y="{}">NO QUORUM</text>"#,
            CENTRE.0, CENTRE.1
        );
    }
    out.push_str(r#"<g class="lines">"#);
    for pair in &scene.pairs {
        if !detailed && pair.state() == LinkState::Up {
            continue;
        }
        if let (Some(from), Some(to)) = (at(pair.a), at(pair.b)) {
            line(pair, from, to, out);
        }
    }
    out.push_str(r#"</g><g class="nodes">"#);
    let r = disc_radius(n);
    for (node, place) in scene.nodes.iter().zip(&places) {
        disc(scene, node, *place, r, n == 1, out);
    }
    out.push_str("</g></svg>");
}

/// "5 up, 1 down" over the drawn lines.
pub fn line_counts(scene: &Scene<'_>) -> String {
    let parts: Vec<String> = LinkState::ALL
        .iter()
        .filter_map(|state| {
            let count = scene.pairs.iter().filter(|p| p.state() == *state).count();
            (count > 0).then(|| format!("{count} {state}"))
        })
        .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

fn line(pair: &Pair<'_>, from: Point, to: Point, out: &mut String) {
    let state = pair.state();
    let blame = pair.verdict.map_or(Blame::None, |v| v.blame);
    let key = pair.key();
    let _ = write!(
        out,
        r##"<a class="cable" href="#cable~{key}" data-cable="{key}" data-state="{state}" data-blame="{blame}">"##,
        key = esc(&key)
    );
    let _ = write!(out, "<title>{}</title>", esc(&pair_summary(pair)));
    let coords = format!(
        r#"x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}""#,
        from.x, from.y, to.x, to.y
    );
    let _ = write!(
        out,
        r#"<line class="hit" {coords}/><line class="wire" {coords}/>"#
    );
    if let Some(tag) = line_tag(pair) {
        let x = from.x + (to.x - from.x) * TAG_AT;
        let y = from.y + (to.y - from.y) * TAG_AT;
        let _ = write!(
            out,
            r#"<text class="tag" x="{x:.1}" y="{y:.1}">{}</text>"#,
            esc(&tag)
        );
    }
    out.push_str("</a>");
}

fn disc(scene: &Scene<'_>, node: &SceneNode<'_>, at: Point, r: f64, alone: bool, out: &mut String) {
    let state = node.verdict.map(|v| v.state);
    let this = node.is_self(scene.status);
    let leader = scene.status.quorum.leader.as_ref() == Some(node.id);
    let id = esc(node.id.as_str());
    let _ = write!(
        out,
        r##"<a class="node" href="#node~{id}" data-node="{id}" data-state="{}"{}>"##,
        node_state_name(state),
        if this { r#" data-self="true""# } else { "" }
    );
    let mut title = format!("{}: {}", node.id, node_state_name(state));
    if this {
        title.push_str(" (this node's view)");
    }
    if leader {
        title.push_str(", quorum leader");
    }
    if let Some(v) = node.verdict {
        for line in v.evidence.iter().take(5) {
            let _ = write!(title, "\n{line}");
        }
    }
    let _ = write!(
        title,
        "\n{} alarm(s), {} failing check(s)",
        node.alarms.len(),
        node.failing_checks.len()
    );
    let _ = write!(
        out,
        r#"<title>{}</title><circle class="disc" cx="{:.1}" cy="{:.1}" r="{r:.1}"/>"#,
        esc(&title),
        at.x,
        at.y
    );
    if state == Some(NodeState::Down) {
        let d = r * 0.55;
        let _ = write!(
            out,
            r#"<path class="cross" d="M{:.1} {:.1}L{:.1} {:.1}M{:.1} {:.1}L{:.1} {:.1}"/>"#,
            at.x - d,
            at.y - d,
            at.x + d,
            at.y + d,
            at.x - d,
            at.y + d,
            at.x + d,
            at.y - d
        );
    }
    let mut lines = vec![("name", clip(node.id.as_str(), NAME_CHARS))];
    let mut sub = node_state_label(state).to_owned();
    if this {
        sub.push_str(" · this node");
    }
    if leader {
        sub.push_str(" · leader");
    }
    lines.push(("sub", sub));
    let trouble: Vec<String> = [
        (node.alarms.len(), "alarm"),
        (node.failing_checks.len(), "failing check"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}{}", if n == 1 { "" } else { "s" }))
    .collect();
    if !trouble.is_empty() {
        lines.push(("warn", format!("⚠ {}", trouble.join(", "))));
    }
    label(at, r, alone, &lines, out);
    out.push_str("</a>");
}

/// Writes a node's text lines just outside its disc, on the side facing
/// away from the ring's centre.
fn label(at: Point, r: f64, alone: bool, lines: &[(&str, String)], out: &mut String) {
    const LINE: f64 = 16.0;
    let (dx, dy) = if alone {
        (0.0, 1.0)
    } else {
        let (vx, vy) = (at.x - CENTRE.0, at.y - CENTRE.1);
        let len = vx.hypot(vy).max(f64::EPSILON);
        (vx / len, vy / len)
    };
    let gap = r + 8.0;
    let anchor = if dx > 0.35 {
        "start"
    } else if dx < -0.35 {
        "end"
    } else {
        "middle"
    };
    #[allow(clippy::cast_precision_loss)]
    let block = LINE * lines.len() as f64;
    let x = at.x + dx * gap;
    // Baseline of the first line: below the disc, above it, or centred
    // beside it.
    let first = if dy > 0.35 {
        at.y + gap + LINE * 0.8
    } else if dy < -0.35 {
        at.y - gap - block + LINE * 0.8
    } else {
        at.y + dy * gap - block / 2.0 + LINE * 0.8
    };
    for (i, (class, text)) in lines.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let y = first + LINE * i as f64;
        let _ = write!(
            out,
            r#"<text class="{class}" x="{x:.1}" y="{y:.1}" text-anchor="{anchor}">{}</text>"#,
            esc(text)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_start_at_the_top_and_stay_on_the_ring() {
        let p = places(4);
        assert!((p[0].x - CENTRE.0).abs() < 1e-9 && (p[0].y - (CENTRE.1 - RING)).abs() < 1e-9);
        assert!(p[1].x > CENTRE.0, "clockwise: the second is on the right");
        for q in &p {
            let r = (q.x - CENTRE.0).hypot(q.y - CENTRE.1);
            assert!((r - RING).abs() < 1e-9);
        }
        assert_eq!(
            places(1),
            vec![Point {
                x: CENTRE.0,
                y: CENTRE.1
            }]
        );
        assert!(places(0).is_empty());
    }

    #[test]
    fn discs_of_a_crowded_ring_do_not_overlap() {
        for n in [2, 7, 16, 64] {
            let p = places(n);
            let r = disc_radius(n);
            let gap = (p[0].x - p[1].x).hypot(p[0].y - p[1].y);
            assert!(
                gap > 2.0 * r || r == 6.0,
                "{n} nodes: gap {gap}, radius {r}"
            );
        }
    }
}
