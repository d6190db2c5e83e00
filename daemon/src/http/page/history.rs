//! The page's timeline of the last 24 hours, from this node's incident
//! history: one bar per incident on a day-long axis (an SVG, so no inline
//! style is needed under the page's content security policy), and each
//! incident's timeline below it. Drawn when the page loads; pure.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use meshd_domain::history::Incident;

use super::text::{esc, utc};

/// What the page shows of the history.
#[derive(Debug, Clone, Copy)]
pub enum Timeline<'a> {
    /// The incidents of the last day, newest first.
    Incidents(&'a [Incident]),
    /// Why there is none to show.
    Unavailable(&'a str),
}

/// The window the timeline spans.
pub const WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Incidents drawn as bars; the rest are counted.
const MAX_BARS: usize = 40;
/// Entries listed under one incident; the rest are counted.
const MAX_LISTED_ENTRIES: usize = 12;

const WIDTH: f64 = 1000.0;
const ROW: f64 = 14.0;
const AXIS: f64 = 18.0;

pub fn section(timeline: Timeline<'_>, now: SystemTime, out: &mut String) {
    out.push_str(r#"<section id="history"><h2>Last 24 hours</h2>"#);
    let incidents = match timeline {
        Timeline::Unavailable(why) => {
            let _ = write!(out, r#"<p class="hint">{}</p></section>"#, esc(why));
            return;
        }
        Timeline::Incidents(incidents) => incidents,
    };
    let start = now.checked_sub(WINDOW).unwrap_or(SystemTime::UNIX_EPOCH);
    let _ = write!(
        out,
        r#"<p class="hint">Incidents this node recorded from {} to {} (when this page loaded; <code>meshctl history</code> tells the same, and <code>--mesh</code> every node's).</p>"#,
        utc(start),
        utc(now)
    );
    if incidents.is_empty() {
        out.push_str(r#"<p class="quiet">Nothing went wrong.</p></section>"#);
        return;
    }
    let drawn = &incidents[..incidents.len().min(MAX_BARS)];
    let height = AXIS + ROW * drawn.len() as f64;
    let _ = write!(
        out,
        r#"<svg class="timeline" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{} incidents over the last 24 hours">"#,
        incidents.len()
    );
    for hours in [0u64, 6, 12, 18, 24] {
        let x = WIDTH * hours as f64 / 24.0;
        let label = match 24 - hours {
            0 => "now".to_owned(),
            ago => format!("-{ago}h"),
        };
        let _ = write!(
            out,
            r#"<line class="tick" x1="{x:.1}" x2="{x:.1}" y1="0" y2="{height}"/><text class="tick" x="{:.1}" y="12">{label}</text>"#,
            x.min(WIDTH - 30.0)
        );
    }
    for (row, incident) in drawn.iter().enumerate() {
        let from = position(incident.started_at, start);
        let to = position(incident.ended_at.unwrap_or(now), start);
        // Minutes are a sliver of a day: every incident stays visible.
        let width = (to - from).max(3.0);
        let from = from.min(WIDTH - width);
        let y = AXIS + ROW * row as f64 + 2.0;
        let class = if incident.ended_at.is_none() {
            "bar open"
        } else {
            "bar"
        };
        let _ = write!(
            out,
            r##"<a href="#incident-{id}"><rect class="{class}" x="{from:.1}" y="{y:.1}" width="{width:.1}" height="{h:.1}"><title>{what}</title></rect></a>"##,
            id = incident.id,
            h = ROW - 4.0,
            what = esc(&headline(incident, now)),
        );
    }
    out.push_str("</svg>");
    if incidents.len() > drawn.len() {
        let _ = write!(
            out,
            r#"<p class="hint">The {} newest are drawn; {} more are listed below.</p>"#,
            drawn.len(),
            incidents.len() - drawn.len()
        );
    }
    out.push_str(r#"<ol class="incidents">"#);
    for incident in incidents {
        let _ = write!(
            out,
            r#"<li id="incident-{}"><details><summary>{}</summary><ul>"#,
            incident.id,
            esc(&headline(incident, now))
        );
        for entry in incident.entries.iter().take(MAX_LISTED_ENTRIES) {
            let _ = write!(
                out,
                r#"<li><time>{}</time> <code>{}</code> {}</li>"#,
                utc(entry.at),
                entry.kind.as_str(),
                esc(&entry.summary)
            );
        }
        let more = incident.entries.len().saturating_sub(MAX_LISTED_ENTRIES) as u64
            + incident.entries_left_out;
        if more > 0 {
            let _ = write!(
                out,
                r#"<li class="hint">… and {more} more (<code>meshctl history</code>)</li>"#
            );
        }
        out.push_str("</ul></details></li>");
    }
    out.push_str("</ol></section>");
}

/// Where `t` falls on the axis that starts at `start`.
fn position(t: SystemTime, start: SystemTime) -> f64 {
    let offset = t.duration_since(start).unwrap_or_default();
    (WIDTH * offset.as_secs_f64() / WINDOW.as_secs_f64()).clamp(0.0, WIDTH)
}

/// "a#3 08:00:10 for 6.0s: link a/en2 <-> b/en3 is down (OPEN)".
fn headline(incident: &Incident, now: SystemTime) -> String {
    let first = incident.entries.first().map_or("", |e| e.summary.as_str());
    let open = if incident.ended_at.is_none() {
        " (still open)"
    } else {
        ""
    };
    format!(
        "{}#{} from {} for {}: {first}{open}",
        incident.observer,
        incident.id,
        utc(incident.started_at),
        meshd_domain::human::duration(incident.duration(now)),
    )
}

#[cfg(test)]
mod tests {
    use meshd_domain::EventKind;
    use meshd_domain::fixtures::{id, wall};
    use meshd_domain::history::{Entry, EntryKind};

    use super::*;

    fn incident(id_: u64, start: SystemTime, end: Option<SystemTime>) -> Incident {
        Incident {
            id: id_,
            observer: id("a"),
            started_at: start,
            ended_at: end,
            entries: vec![Entry {
                at: start,
                kind: EntryKind::Event(EventKind::LinkDown),
                subject: "a <-> b".into(),
                summary: "link a <-> b is down: <no reply>".into(),
                nodes: vec![id("a"), id("b")],
            }],
            entries_left_out: 0,
            open_problems: vec![],
        }
    }

    #[test]
    fn each_incident_is_a_bar_where_it_happened_and_a_timeline_below() {
        let now = wall(100_000);
        let noon = now - Duration::from_secs(12 * 3600);
        let incidents = [
            incident(2, now - Duration::from_secs(60), None),
            incident(1, noon, Some(noon + Duration::from_secs(3600))),
        ];
        let mut out = String::new();
        section(Timeline::Incidents(&incidents), now, &mut out);
        assert!(out.contains(r#"<rect class="bar" x="500.0""#), "{out}");
        assert!(
            out.contains(r#"width="41.7""#),
            "an hour is 1/24 of the axis: {out}"
        );
        assert!(out.contains(r#"<rect class="bar open""#), "{out}");
        assert!(
            out.contains(r#"x="997.0""#),
            "a recent one stays on the axis: {out}"
        );
        assert!(out.contains(">now</text>"));
        assert!(out.contains(r#"<li id="incident-1">"#));
        assert!(out.contains("&lt;no reply&gt;"), "escaped: {out}");
        assert!(!out.contains("<no reply>"));
    }

    #[test]
    fn a_quiet_day_and_a_node_without_history_say_so() {
        let mut quiet = String::new();
        section(Timeline::Incidents(&[]), wall(100_000), &mut quiet);
        assert!(quiet.contains("Nothing went wrong."));
        let mut off = String::new();
        section(
            Timeline::Unavailable("this node keeps no incident history"),
            wall(100_000),
            &mut off,
        );
        assert!(off.contains("keeps no incident history"));
        assert!(!off.contains("<svg"));
    }

    #[test]
    fn an_incident_before_the_window_is_clamped_to_its_start() {
        let now = wall(200_000);
        assert_eq!(position(now - 2 * WINDOW, now - WINDOW), 0.0);
        assert_eq!(position(now + WINDOW, now - WINDOW), WIDTH);
    }
}
