//! The mesh as an SVG: nodes on a circle, one line per pair of nodes.
//! State is drawn three ways at once (colour, line pattern, and a text tag
//! on every line that is not up), so colour is never the only signal. Every
//! node and line is a link to its details below, which makes it focusable
//! with Tab and usable without JavaScript; its `<title>` is the tooltip,
//! with the evidence and the fix of a fault. The canvas grows to hold
//! every label, so none is ever cut at the picture's edge.

use std::f64::consts::PI;
use std::fmt::Write as _;

use meshd_domain::{Blame, LinkState, LinkVerdict, NodeState, Severity, with_their_nodes};

use super::scene::{Pair, Scene, SceneNode};
use super::text::{clip, esc, percent};
use meshd_model::link::fmt_duration;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 600.0;
const CENTRE: (f64, f64) = (WIDTH / 2.0, HEIGHT / 2.0);
/// Leaves room outside the ring for names and state lines; where they
/// need more, the canvas grows (see [`Bounds`]).
const RING: f64 = 205.0;
/// Room kept between the outermost text and the canvas's edge.
const MARGIN: f64 = 8.0;
/// A node's text lines, baseline to baseline.
const LINE: f64 = 16.0;
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
        Some(v) if v.down_with_node() => Some(match &v.blamed_node {
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
        tooltip_fault(&v.evidence, v.fix.as_deref(), &mut text);
    }
    text
}

/// A fault's evidence (the first lines) and its fix, for a tooltip.
fn tooltip_fault(evidence: &[String], fix: Option<&str>, text: &mut String) {
    for line in evidence.iter().take(5) {
        let _ = write!(text, "\n{line}");
    }
    if let Some(fix) = fix {
        let _ = write!(text, "\nFix: {fix}");
    }
}

/// Where a line of text hangs from its `x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn as_str(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// One line of text drawn in the picture: a node's name, state or counts,
/// or a line's tag.
#[derive(Debug, Clone, PartialEq)]
struct Text {
    class: &'static str,
    text: String,
    x: f64,
    /// The baseline; a tag's middle (the style centres tags on it).
    y: f64,
    anchor: Anchor,
}

impl Text {
    /// Font size in px and whether bold, as the style sets them.
    fn font(&self) -> (f64, bool) {
        match self.class {
            "name" => (15.0, true),
            "tag" => (12.0, true),
            // fail, warn (semi-bold) and sub.
            _ => (12.0, self.class != "sub"),
        }
    }

    /// A box the drawn text surely fits in, whatever the font: the page
    /// uses the system's, which the server cannot measure, so every
    /// character is taken at least as wide as it is in the common sans
    /// fonts (DejaVu Sans Bold is the widest of them).
    fn extent(&self) -> (f64, f64, f64, f64) {
        let (px, bold) = self.font();
        let ems: f64 = self.text.chars().map(em_width).sum();
        let width = ems * px * if bold { 1.0 } else { 0.92 };
        let left = match self.anchor {
            Anchor::Start => self.x,
            Anchor::Middle => self.x - width / 2.0,
            Anchor::End => self.x - width,
        };
        let (top, bottom) = if self.class == "tag" {
            (self.y - 0.7 * px, self.y + 0.7 * px)
        } else {
            // Ascenders and descenders of DejaVu Sans, rounded up.
            (self.y - 0.95 * px, self.y + 0.3 * px)
        };
        (left, top, left + width, bottom)
    }

    fn write(&self, out: &mut String) {
        let _ = write!(
            out,
            r#"<text class="{}" x="{:.1}" y="{:.1}" text-anchor="{}">{}</text>"#,
            self.class,
            self.x,
            self.y,
            self.anchor.as_str(),
            esc(&self.text)
        );
    }
}

/// The advance of `c` in em, rounded up from the widest common sans font.
fn em_width(c: char) -> f64 {
    match c {
        'm' | 'w' | 'M' | 'W' | '@' | '%' | '&' => 1.12,
        'A'..='Z' => 0.88,
        _ if c.is_ascii() => 0.74,
        // Symbols (⚠, ✖, ·, …) and other scripts: a full em and some.
        _ => 1.25,
    }
}

/// The canvas: the base one, grown to hold every text.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bounds {
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

impl Bounds {
    fn holding<'t>(texts: impl IntoIterator<Item = &'t Text>) -> Bounds {
        let mut b = Bounds {
            left: 0.0,
            top: 0.0,
            right: WIDTH,
            bottom: HEIGHT,
        };
        for text in texts {
            let (left, top, right, bottom) = text.extent();
            b.left = b.left.min(left - MARGIN);
            b.top = b.top.min(top - MARGIN);
            b.right = b.right.max(right + MARGIN);
            b.bottom = b.bottom.max(bottom + MARGIN);
        }
        b
    }

    fn view_box(&self) -> String {
        format!(
            "{:.1} {:.1} {:.1} {:.1}",
            self.left,
            self.top,
            self.right - self.left,
            self.bottom - self.top
        )
    }
}

/// The picture; `shown` is the article the inspector shows, whose element
/// is marked as such.
pub fn svg(scene: &Scene<'_>, shown: Option<&str>, out: &mut String) {
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
    let r = disc_radius(n);
    let lines: Vec<(&Pair<'_>, Point, Point, Option<Text>)> = scene
        .pairs
        .iter()
        .filter(|pair| detailed || pair.state() != LinkState::Up)
        .filter_map(|pair| {
            let (from, to) = (at(pair.a)?, at(pair.b)?);
            Some((pair, from, to, tag(pair, from, to)))
        })
        .collect();
    let labels: Vec<Vec<Text>> = scene
        .nodes
        .iter()
        .zip(&places)
        .map(|(node, place)| label(&label_lines(scene, node), *place, r, n == 1))
        .collect();
    let bounds = Bounds::holding(
        labels
            .iter()
            .flatten()
            .chain(lines.iter().filter_map(|(_, _, _, tag)| tag.as_ref())),
    );
    let counts = line_counts(scene);
    let _ = write!(
        out,
        r#"<svg class="picture" viewBox="{}" role="img" aria-labelledby="picture-title"><title id="picture-title">{} nodes, {} cables: {}</title>"#,
        bounds.view_box(),
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
    for (pair, from, to, tag) in &lines {
        line(pair, *from, *to, tag.as_ref(), shown, out);
    }
    out.push_str(r#"</g><g class="nodes">"#);
    for ((node, place), label) in scene.nodes.iter().zip(&places).zip(&labels) {
        disc(scene, node, *place, r, label, shown, out);
    }
    out.push_str("</g></svg>");
}

/// "5 up, 1 down, 3 down with node d" over the drawn lines: the lines a
/// down node takes with it are counted apart, as `meshctl status` counts
/// them.
pub fn line_counts(scene: &Scene<'_>) -> String {
    let mut parts: Vec<String> = LinkState::ALL
        .iter()
        .filter_map(|state| {
            let count = scene
                .pairs
                .iter()
                .filter(|p| p.state() == *state && !p.down_with_node())
                .count();
            (count > 0).then(|| format!("{count} {state}"))
        })
        .collect();
    let with_nodes: Vec<&LinkVerdict> = scene
        .pairs
        .iter()
        .filter(|p| p.down_with_node())
        .filter_map(|p| p.verdict)
        .collect();
    if !with_nodes.is_empty() {
        parts.push(format!(
            "{} down {}",
            with_nodes.len(),
            with_their_nodes(&with_nodes)
        ));
    }
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// A line's tag, off its middle.
fn tag(pair: &Pair<'_>, from: Point, to: Point) -> Option<Text> {
    line_tag(pair).map(|text| Text {
        class: "tag",
        text,
        x: from.x + (to.x - from.x) * TAG_AT,
        y: from.y + (to.y - from.y) * TAG_AT,
        anchor: Anchor::Middle,
    })
}

/// ` shown` when `anchor` is the one the inspector shows.
fn shown_class(anchor: &str, shown: Option<&str>) -> &'static str {
    if shown == Some(anchor) { " shown" } else { "" }
}

fn line(
    pair: &Pair<'_>,
    from: Point,
    to: Point,
    tag: Option<&Text>,
    shown: Option<&str>,
    out: &mut String,
) {
    let state = pair.state();
    let blame = pair.verdict.map_or(Blame::None, |v| v.blame);
    let anchor = pair.anchor();
    let _ = write!(
        out,
        r##"<a class="cable{}" href="#{}" data-cable="{}" data-state="{state}" data-blame="{blame}">"##,
        shown_class(&anchor, shown),
        esc(&anchor),
        esc(&pair.key())
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
    if let Some(tag) = tag {
        tag.write(out);
    }
    out.push_str("</a>");
}

/// A node's text lines beside its disc: its name; its state; in red, its
/// critical alarms and failing checks; in amber, its other alarms and its
/// warnings. A warning is never counted as a failure.
fn label_lines(scene: &Scene<'_>, node: &SceneNode<'_>) -> Vec<(&'static str, String)> {
    let state = node.verdict.map(|v| v.state);
    let mut lines = vec![("name", clip(node.id.as_str(), NAME_CHARS))];
    let mut sub = node_state_label(state).to_owned();
    if node.is_self(scene.status) {
        sub.push_str(" · this node");
    }
    if scene.status.quorum.leader.as_ref() == Some(node.id) {
        sub.push_str(" · leader");
    }
    lines.push(("sub", sub));
    let critical = node
        .alarms
        .iter()
        .filter(|a| a.severity == Severity::Critical)
        .count();
    let other_alarms = node.alarms.len() - critical;
    for (class, mark, counts) in [
        (
            "fail",
            "✖",
            [
                (critical, "alarm"),
                (node.checks.failing.len(), "failing check"),
            ],
        ),
        (
            "warn",
            "⚠",
            [
                (other_alarms, "alarm"),
                (node.checks.warnings.len(), "warning"),
            ],
        ),
    ] {
        let counted: Vec<String> = counts
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}{}", if n == 1 { "" } else { "s" }))
            .collect();
        if !counted.is_empty() {
            lines.push((class, format!("{mark} {}", counted.join(", "))));
        }
    }
    lines
}

fn disc(
    scene: &Scene<'_>,
    node: &SceneNode<'_>,
    at: Point,
    r: f64,
    label: &[Text],
    shown: Option<&str>,
    out: &mut String,
) {
    let state = node.verdict.map(|v| v.state);
    let this = node.is_self(scene.status);
    let leader = scene.status.quorum.leader.as_ref() == Some(node.id);
    let anchor = node.anchor();
    let _ = write!(
        out,
        r##"<a class="node{}" href="#{}" data-node="{}" data-state="{}"{}>"##,
        shown_class(&anchor, shown),
        esc(&anchor),
        esc(node.id.as_str()),
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
        tooltip_fault(&v.evidence, v.fix.as_deref(), &mut title);
    }
    // The same counts as the label's red and amber lines.
    for text in label.iter().filter(|t| matches!(t.class, "fail" | "warn")) {
        let _ = write!(title, "\n{}", text.text);
    }
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
    for text in label {
        text.write(out);
    }
    out.push_str("</a>");
}

/// Places a node's text lines just outside its disc, on the side facing
/// away from the ring's centre.
fn label(lines: &[(&'static str, String)], at: Point, r: f64, alone: bool) -> Vec<Text> {
    let (dx, dy) = if alone {
        (0.0, 1.0)
    } else {
        let (vx, vy) = (at.x - CENTRE.0, at.y - CENTRE.1);
        let len = vx.hypot(vy).max(f64::EPSILON);
        (vx / len, vy / len)
    };
    let gap = r + 8.0;
    let anchor = if dx > 0.35 {
        Anchor::Start
    } else if dx < -0.35 {
        Anchor::End
    } else {
        Anchor::Middle
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
    lines
        .iter()
        .enumerate()
        .map(|(i, (class, text))| {
            #[allow(clippy::cast_precision_loss)]
            let y = first + LINE * i as f64;
            Text {
                class,
                text: text.clone(),
                x,
                y,
                anchor,
            }
        })
        .collect()
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
