//! The page rendered from hand-made statuses: what a reader must find in it.

use std::time::Duration;

use meshd_domain::facts::{Cable, CableEnd, CheckResult, CheckStatus};
use meshd_domain::fixtures::{id, wall};
use meshd_domain::{
    Alarm, AlarmKind, Blame, Incarnation, InterfaceState, LinkEnd, LinkFigures, LinkMeasurement,
    LinkState, LinkVerdict, LossWindow, MeshStatus, NodeIdentity, NodeState, NodeVerdict, Quorum,
    RdmaPortState, RttSummary, Severity,
};

use super::picture::MAX_DETAILED_LINES;
use super::render::{document, view};
use super::{SCRIPT, STYLE};

const STALL: Duration = Duration::from_secs(5);

fn names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            if n <= 26 {
                char::from(b'a' + u8::try_from(i).expect("small")).to_string()
            } else {
                format!("node-{i:03}")
            }
        })
        .collect()
}

fn cable_end(node: &str, peer: usize) -> CableEnd {
    CableEnd {
        node: id(node),
        port: format!("Thunderbolt {}", peer + 1),
        iface: format!("en{}", peer + 1),
        rdma_device: format!("rdma_en{}", peer + 1),
        address: None,
    }
}

fn measurement(node: &str, peer: &str) -> LinkMeasurement {
    LinkMeasurement {
        figures: LinkFigures {
            interface_state: InterfaceState::Up,
            negotiated_speed_bps: Some(80_000_000_000),
            expected_speed_bps: Some(80_000_000_000),
            rdma_port_state: RdmaPortState::Active,
            rtt: RttSummary {
                p50: Duration::from_micros(85),
                p99: Duration::from_micros(140),
                samples: 1_000,
                ..RttSummary::default()
            },
            loss: vec![LossWindow {
                window: Duration::from_secs(1),
                sent: 100,
                lost: 0,
            }],
            silence: Duration::from_millis(10),
        },
        node: id(node),
        peer: id(peer),
        at: wall(99),
    }
}

/// A healthy full mesh of `n` nodes seen by the first, every cable up,
/// figures from both ends of each.
fn healthy(n: usize) -> MeshStatus {
    let names = names(n);
    let identity = |name: &str| NodeIdentity {
        id: id(name),
        incarnation: Incarnation(7),
        version: "0.1.0".into(),
        hostname: format!("{name}.local"),
    };
    let mut links = Vec::new();
    let mut cables = Vec::new();
    let mut measurements = Vec::new();
    for (i, x) in names.iter().enumerate() {
        for (j, y) in names.iter().enumerate().skip(i + 1) {
            links.push(LinkVerdict {
                a: LinkEnd::node_only(id(x)),
                b: LinkEnd::node_only(id(y)),
                state: LinkState::Up,
                since: wall(10),
                evidence: vec![],
                blame: Blame::None,
                blamed_node: None,
                recent_changes: 0,
                flapping: false,
                fix: None,
            });
            cables.push(Cable {
                a: cable_end(x, j),
                b: cable_end(y, i),
                speed_bps: 80_000_000_000,
                discovered: true,
            });
            measurements.push(measurement(x, y));
            measurements.push(measurement(y, x));
        }
    }
    MeshStatus {
        node: identity(&names[0]),
        evaluated_at: wall(100),
        quorum: Quorum {
            configured: names.iter().map(|s| id(s)).collect(),
            members: names.iter().map(|s| id(s)).collect(),
            has_quorum: true,
            leader: Some(id(&names[0])),
        },
        nodes: names
            .iter()
            .map(|name| NodeVerdict {
                id: id(name),
                state: NodeState::Up,
                since: wall(10),
                evidence: vec![format!("heard directly {name}")],
                identity: Some(identity(name)),
                last_report_at: Some(wall(99)),
                cpu_saturated: false,
                boot: Default::default(),
                fix: None,
            })
            .collect(),
        links,
        alarms: vec![],
        cables,
        checks: vec![],
        measurements,
        jobs: vec![],
    }
}

fn link_mut<'a>(status: &'a mut MeshStatus, x: &str, y: &str) -> &'a mut LinkVerdict {
    status
        .links
        .iter_mut()
        .find(|l| l.a.node.as_str() == x && l.b.node.as_str() == y)
        .expect("link")
}

/// Four nodes: a–b cut, d dead (its links blamed on it), an alarm and a
/// failing check on c.
fn troubled() -> MeshStatus {
    let mut status = healthy(4);
    let cut = link_mut(&mut status, "a", "b");
    cut.state = LinkState::Down;
    cut.blame = Blame::Link;
    cut.evidence = vec!["a: no reply for 3.0s (30 probes lost in a row)".into()];
    for x in ["a", "b", "c"] {
        let l = link_mut(&mut status, x, "d");
        l.state = LinkState::Down;
        l.blame = Blame::Node;
        l.blamed_node = Some(id("d"));
        l.evidence = vec!["d is down: the node is blamed, not the link".into()];
    }
    status.nodes[3].state = NodeState::Down;
    status.nodes[3].evidence = vec!["not heard: a, b, c".into()];
    status.alarms.push(Alarm {
        kind: AlarmKind::BridgeLoop,
        severity: Severity::Critical,
        node: id("c"),
        subject: "bridge0".into(),
        summary: "Thunderbolt Bridge is active over mesh ports".into(),
        evidence: vec!["members: en1, en2".into()],
        fix: Some("networksetup -setnetworkserviceenabled 'Thunderbolt Bridge' off".into()),
        since: wall(60),
        updated: wall(90),
    });
    status.checks.push(CheckResult {
        name: "rdma_enabled".into(),
        node: Some(id("c")),
        status: CheckStatus::Fail,
        evidence: vec!["rdma_ctl status: disabled".into()],
        fix: "boot to recoveryOS and run: rdma_ctl enable".into(),
    });
    status.checks.push(CheckResult {
        name: "full_mesh_cabled".into(),
        node: None,
        status: CheckStatus::Warn,
        evidence: vec!["a–b has no cable in the map".into()],
        fix: "connect a Thunderbolt 5 cable between a and b".into(),
    });
    status
}

/// The markup from just after `start` to the next `end`.
fn section<'a>(html: &'a str, start: &str, end: &str) -> &'a str {
    html.split(start)
        .nth(1)
        .and_then(|rest| rest.split(end).next())
        .unwrap_or_else(|| panic!("no {start} in the page"))
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn every_node_and_every_cable_is_drawn_and_detailed() {
    let html = document(&healthy(5), wall(100), STALL);
    for name in ["a", "b", "c", "d", "e"] {
        assert_eq!(count(&html, &format!(r#"data-node="{name}""#)), 1, "{name}");
        assert_eq!(count(&html, &format!(r#"id="node~{name}""#)), 1, "{name}");
    }
    assert_eq!(
        count(&html, "<a class=\"cable\""),
        10,
        "none shown: nothing is wrong"
    );
    assert_eq!(count(&html, r#"id="cable~"#), 10);
    assert!(html.contains(r#"data-cable="a~b""#));
    assert!(html.contains("Mesh as seen by"));
    assert!(html.contains("yes: 5 of 5 members"));
    assert!(html.contains(r#"<div><dt>Leader</dt><dd>a</dd></div>"#));
    assert!(
        html.contains("2027-01-15T08:01:40Z"),
        "evaluated at, in UTC"
    );
    assert!(html.contains(">healthy<"));
}

#[test]
fn cable_details_carry_both_ends_figures() {
    let html = view(&healthy(2), wall(100), STALL);
    let article = section(
        &html,
        r#"<article class="detail" id="cable~a~b""#,
        "</article>",
    );
    assert!(article.contains("a → b") && article.contains("b → a"));
    assert!(
        article
            .contains(r#"<td data-label="RTT p50">85µs</td><td data-label="RTT p99">140µs</td>"#)
    );
    assert!(article.contains("0 % over 1s"));
    assert!(article.contains(
        r#"<td data-label="speed">80 Gb/s</td><td data-label="RDMA port">active</td><td data-label="interface">up</td>"#
    ));
    assert!(article.contains("1.0s ago"), "age of the figures");
    assert!(article.contains("Thunderbolt 2 · en2 · rdma_en2"), "ports");
}

#[test]
fn state_is_spoken_not_only_coloured() {
    let html = view(&troubled(), wall(100), STALL);
    // The cut cable: a DOWN tag on the line, blamed on the link.
    let cut = section(&html, r#"data-cable="a~b""#, "</a>");
    assert!(
        cut.starts_with(r#" data-state="down" data-blame="link">"#),
        "{cut}"
    );
    assert!(cut.contains(r#"<text class="tag""#) && cut.contains(">DOWN</text>"));
    // A dead node's cables: marked as blamed on the node, which is named.
    for x in ["a", "b", "c"] {
        let line = section(&html, &format!(r#"data-cable="{x}~d""#), "</a>");
        assert!(line.contains(r#"data-blame="node""#), "{line}");
        assert!(line.contains(">d DOWN (node)</text>"), "{line}");
    }
    assert!(html.contains("blamed on node d, not the cable"));
    // Healthy cables carry no tag; the dead node is crossed out and says so.
    let healthy_line = section(&html, r#"data-cable="b~c""#, "</a>");
    assert!(!healthy_line.contains("class=\"tag\""));
    let dead = section(&html, r#"data-node="d""#, "</a>");
    assert!(dead.contains(r#"class="cross""#) && dead.contains(">DOWN</text>"));
    assert!(
        html.contains("not healthy: 1 node down, 3 links down with node d, 1 link down, 1 alarm")
    );
}

#[test]
fn nodes_show_their_alarms_and_failing_checks_with_fixes() {
    let html = view(&troubled(), wall(100), STALL);
    let c = section(&html, r#"id="node~c""#, "</article>");
    assert!(c.contains("Thunderbolt Bridge is active over mesh ports"));
    assert!(c.contains(
        "Fix: <code>networksetup -setnetworkserviceenabled &#39;Thunderbolt Bridge&#39; off</code>"
    ));
    assert!(c.contains(">FAIL</span> rdma_enabled"));
    assert!(c.contains("Fix: <code>boot to recoveryOS and run: rdma_ctl enable</code>"));
    assert!(
        html.contains(r#"<text class="fail" x="#) && html.contains(">✖ 1 alarm, 1 failing check<"),
        "the picture counts them, in red"
    );
    let mesh = html.split(r#"id="mesh~wide""#).nth(1).expect("whole mesh");
    assert!(mesh.contains(">WARN</span> full_mesh_cabled"));
}

#[test]
fn without_quorum_the_page_says_so_instead_of_looking_certain() {
    let mut status = healthy(3);
    status.quorum.members = vec![id("a")];
    status.quorum.has_quorum = false;
    status.quorum.leader = None;
    for link in &mut status.links {
        link.state = LinkState::Unknown;
        link.evidence = vec!["no quorum: link verdicts are held back".into()];
    }
    status.alarms.push(meshd_domain::Alarm {
        kind: meshd_domain::AlarmKind::NoQuorum,
        severity: meshd_domain::Severity::Warning,
        node: id("a"),
        subject: "quorum".into(),
        summary: "no quorum: hears 1 of 3 members; link verdicts are held back".into(),
        evidence: vec!["not heard: b, c".into()],
        fix: Some("either a is cut off (`meshctl --addr NODE:7420 status`) or …".into()),
        since: wall(0),
        updated: wall(0),
    });
    let html = view(&status, wall(100), STALL);
    assert!(html.contains(r#"<dd data-quorum="no"><strong>NO</strong>: 1 of 3 members</dd>"#));
    assert!(html.contains("<strong>No quorum.</strong> a hears only 1 of 3 members (a)."));
    assert!(
        html.contains(
            "<strong>Fix:</strong> either a is cut off (<code>meshctl --addr NODE:7420 status</code>) or …"
        ),
        "the banner carries the no_quorum alarm's fix"
    );
    assert!(html.contains(">NO QUORUM</text>"));
    assert!(html.contains("<dd>none (no quorum)</dd>"));
    assert_eq!(count(&html, ">UNKNOWN</text>"), 3);
}

#[test]
fn a_stalled_evaluation_is_called_out() {
    let status = healthy(2);
    let fresh = view(&status, wall(101), STALL);
    assert!(!fresh.contains("Stalled."));
    let stale = view(&status, wall(160), STALL);
    assert!(stale.contains("<strong>Stalled.</strong> The last evaluation is 1m00s ago"));
}

#[test]
fn text_from_peers_cannot_inject_markup() {
    let mut status = troubled();
    status.alarms[0].summary = r#"<script>alert("x")</script>"#.into();
    status.alarms[0].evidence = vec!["<img src=x onerror=alert(1)>".into()];
    status.links[0].evidence = vec!["\"><svg onload=alert(1)>".into()];
    status.alarms[0].fix = Some("x".repeat(10_000));
    let html = document(&status, wall(100), STALL);
    assert!(!html.contains("<script>alert"));
    assert!(!html.contains("<img"));
    assert!(!html.contains("\"><svg onload"));
    assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"));
    assert!(!html.contains(&"x".repeat(600)), "long text is clipped");
}

#[test]
fn the_page_names_no_other_origin() {
    let html = document(&troubled(), wall(100), STALL);
    for (what, text) in [
        ("page", html.as_str()),
        ("style", STYLE),
        ("script", SCRIPT),
    ] {
        assert!(!text.contains("://"), "{what} names a URL");
        assert!(!text.contains("@import"), "{what} imports");
        assert!(!text.contains("url("), "{what} loads a resource");
    }
    // Only this node's own style, script and in-page anchors.
    let references: Vec<&str> = html
        .split(" src=\"")
        .skip(1)
        .chain(html.split(" href=\"").skip(1))
        .map(|rest| rest.split('"').next().unwrap_or_default())
        .collect();
    assert!(!references.is_empty());
    for reference in references {
        assert!(
            reference.starts_with('#') || reference.starts_with("page/"),
            "{reference}"
        );
    }
}

#[test]
fn the_largest_thunderbolt_mesh_fits_the_size_budget() {
    // Seven Macs is the largest Thunderbolt 5 full mesh (six ports each).
    let mut status = healthy(7);
    for link in status.links.iter_mut().take(3) {
        link.state = LinkState::Degraded;
        link.evidence = vec!["a: 4 % of probes lost over 10s (40 of 1000)".into(); 3];
    }
    let html = document(&status, wall(100), STALL);
    let total = html.len() + STYLE.len() + SCRIPT.len();
    eprintln!(
        "7-node page {} + style {} + script {} = {total} bytes",
        html.len(),
        STYLE.len(),
        SCRIPT.len()
    );
    assert!(
        total <= 100 * 1024,
        "page {} + style {} + script {} = {total} bytes, over 100 KB",
        html.len(),
        STYLE.len(),
        SCRIPT.len()
    );
}

#[test]
fn a_big_lab_shows_every_node_but_only_the_cables_in_trouble() {
    let mut status = healthy(30);
    assert!(status.links.len() > MAX_DETAILED_LINES);
    status.links[0].state = LinkState::Down;
    status.links[1].state = LinkState::Degraded;
    let html = view(&status, wall(100), STALL);
    assert_eq!(
        count(&html, "<a class=\"cable"),
        2,
        "only the cables in trouble"
    );
    assert_eq!(count(&html, r#"id="cable~"#), 2);
    assert!(html.contains("433 healthy cables are neither drawn nor listed"));
    assert!(html.contains("435 cables: 433 up, 1 degraded, 1 down"));
    assert_eq!(count(&html, r#"<article class="detail" id="node~"#), 30);
    assert_eq!(count(&html, "<a class=\"node\""), 30);
}

#[test]
fn a_cable_without_a_verdict_is_drawn_as_such() {
    let mut status = healthy(3);
    status
        .links
        .retain(|l| l.b.node.as_str() != "c" || l.a.node.as_str() != "b");
    let html = view(&status, wall(100), STALL);
    let line = section(&html, r#"data-cable="b~c""#, "</a>");
    assert!(line.contains(r#"data-state="unknown""#) && line.contains(">NO VERDICT</text>"));
    assert!(html.contains("this node is not configured to probe it"));
}

#[test]
fn rendering_is_a_function_of_the_status_and_the_time() {
    let status = troubled();
    assert_eq!(
        document(&status, wall(100), STALL),
        document(&status, wall(100), STALL)
    );
    assert_ne!(
        view(&status, wall(100), STALL),
        view(&status, wall(130), STALL)
    );
}

#[test]
fn a_lone_node_and_an_empty_status_render() {
    let mut status = healthy(1);
    let html = view(&status, wall(100), STALL);
    assert_eq!(count(&html, "<a class=\"node\""), 1);
    status.nodes.clear();
    let html = view(&status, wall(100), STALL);
    assert_eq!(
        count(&html, "<a class=\"node\""),
        1,
        "the answering node itself"
    );
    assert!(html.contains("No cables or links are known yet."));
}

/// A cable cut, a node dead: each fault carries its evidence and its fix,
/// in its article and in the tooltip of what is drawn for it.
#[test]
fn a_down_cable_and_a_dead_node_show_their_fix_and_evidence() {
    let mut status = troubled();
    link_mut(&mut status, "a", "b").fix =
        Some("reseat or replace the cable a <-> b, then check both ports (`ifconfig` on a)".into());
    for x in ["a", "b", "c"] {
        link_mut(&mut status, x, "d").fix =
            Some("bring d back (see its line under nodes); the cable needs nothing".into());
    }
    status.nodes[3].fix =
        Some("bring d back: check that meshd runs there (`systemctl status meshd`)".into());
    let html = view(&status, wall(100), STALL);
    let cut = section(
        &html,
        r#"<article class="detail" id="cable~a~b""#,
        "</article>",
    );
    assert!(
        cut.contains("<li>a: no reply for 3.0s (30 probes lost in a row)</li>"),
        "{cut}"
    );
    assert!(
        cut.contains(r#"<p class="fix"><strong>Fix:</strong> reseat or replace the cable a &lt;-&gt; b, then check both ports (<code>ifconfig</code> on a)</p>"#),
        "{cut}"
    );
    let dead = section(
        &html,
        r#"<article class="detail" id="node~d""#,
        "</article>",
    );
    assert!(dead.contains("<li>not heard: a, b, c</li>"), "{dead}");
    assert!(
        dead.contains("<strong>Fix:</strong> bring d back: check that meshd runs there (<code>systemctl status meshd</code>)"),
        "{dead}"
    );
    let with_d = section(
        &html,
        r#"<article class="detail" id="cable~b~d""#,
        "</article>",
    );
    assert!(with_d.contains("<strong>Fix:</strong> bring d back (see its line under nodes)"));
    // The tooltips of the drawn line and disc say it too.
    let line = section(&html, r#"data-cable="a~b""#, "</title>");
    assert!(
        line.contains("a: no reply for 3.0s") && line.contains("Fix: reseat or replace"),
        "{line}"
    );
    let disc = section(&html, r#"data-node="d""#, "</title>");
    assert!(
        disc.contains("not heard: a, b, c") && disc.contains("Fix: bring d back"),
        "{disc}"
    );
    // A cable that is up has nothing to fix.
    let up = section(
        &html,
        r#"<article class="detail" id="cable~b~c""#,
        "</article>",
    );
    assert!(!up.contains("Fix:"), "{up}");
}

/// A check that warns is a warning: counted and styled as one, never as a
/// failure, in the picture and in the details.
#[test]
fn a_warning_is_a_warning_not_a_failure() {
    let mut status = healthy(3);
    for name in ["a", "b", "c"] {
        status.checks.push(CheckResult {
            name: "rdma_enabled".into(),
            node: Some(id(name)),
            status: CheckStatus::Warn,
            evidence: vec!["/sys/class/infiniband: no RDMA device on this host".into()],
            fix: "load the NIC's RDMA driver (`modprobe mlx5_ib`)".into(),
        });
    }
    let html = document(&status, wall(100), STALL);
    let picture = section(&html, "<svg class=\"picture\"", "</svg>");
    assert!(!picture.contains("failing"), "{picture}");
    assert!(!picture.contains(r#"class="fail""#), "{picture}");
    assert_eq!(count(picture, r#"<text class="warn""#), 3);
    assert_eq!(count(picture, ">⚠ 1 warning</text>"), 3);
    let b = section(&html, r#"id="node~b""#, "</article>");
    assert!(b.contains("<h4>Warnings (1)</h4>"), "{b}");
    assert!(
        b.contains("Fix: load the NIC&#39;s RDMA driver (<code>modprobe mlx5_ib</code>)"),
        "commands of a fix in prose are code: {b}"
    );
    assert!(b.contains(r#"<span class="badge" data-check="warn">WARN</span> rdma_enabled"#));
    assert!(!b.contains("Failing"), "{b}");
    assert!(
        html.contains(">healthy<"),
        "warnings leave the mesh healthy"
    );
    assert!(
        STYLE.contains(".node .warn { fill: var(--degraded);")
            && STYLE.contains(".node .fail { fill: var(--down);"),
        "warnings amber, failures red"
    );
    // A failed check next to it is a failure, apart.
    status.checks[1].status = CheckStatus::Fail;
    let html = view(&status, wall(100), STALL);
    let b = section(&html, r#"data-node="b""#, "</a>");
    assert!(
        b.contains(r#"<text class="fail""#) && b.contains(">✖ 1 failing check<"),
        "{b}"
    );
    assert!(!b.contains("⚠"), "{b}");
}

/// The article the inspector opens on, and the element the picture marks
/// as shown.
fn inspected(status: &MeshStatus) -> Option<String> {
    let html = view(status, wall(100), STALL);
    let aside = section(&html, r#"<aside id="inspector""#, "</aside>");
    let shows = aside
        .strip_prefix(r#" data-shows=""#)
        .map(|rest| rest.split('"').next().unwrap_or_default().to_owned());
    match &shows {
        Some(anchor) => {
            assert!(aside.contains("<article class=\"detail\""), "{aside}");
            assert!(!aside.contains(" id=\""), "ids stay unique: {aside}");
            assert_eq!(
                count(&html, " shown\" href=\""),
                1,
                "one element marked shown"
            );
            assert!(
                html.contains(&format!(r##" shown" href="#{anchor}""##)),
                "{anchor}"
            );
        }
        None => {
            assert!(aside.contains("Nothing is wrong"), "{aside}");
            assert_eq!(count(&html, " shown\""), 0);
        }
    }
    shows
}

#[test]
fn the_inspector_opens_on_the_worst_current_fault() {
    let mut status = healthy(4);
    assert_eq!(inspected(&status), None, "nothing wrong, nothing opened");
    status.checks.push(CheckResult {
        name: "rdma_enabled".into(),
        node: Some(id("b")),
        status: CheckStatus::Warn,
        evidence: vec![],
        fix: String::new(),
    });
    assert_eq!(inspected(&status), None, "a warning is not a fault");
    status.checks[0].status = CheckStatus::Fail;
    assert_eq!(inspected(&status).as_deref(), Some("node~b"));
    status.alarms.push(Alarm {
        kind: AlarmKind::CpuSpike,
        severity: Severity::Warning,
        node: id("c"),
        subject: "cpu".into(),
        summary: "CPU 97% for 30s".into(),
        evidence: vec![],
        fix: None,
        since: wall(60),
        updated: wall(90),
    });
    assert_eq!(
        inspected(&status).as_deref(),
        Some("node~c"),
        "an alarm before a failing check"
    );
    status.alarms[0].severity = Severity::Critical;
    status.alarms.push(Alarm {
        node: id("b"),
        ..status.alarms[0].clone()
    });
    assert_eq!(
        inspected(&status).as_deref(),
        Some("node~b"),
        "equals in drawing order"
    );
    link_mut(&mut status, "c", "d").state = LinkState::Degraded;
    assert_eq!(inspected(&status).as_deref(), Some("cable~c~d"));
    link_mut(&mut status, "b", "d").state = LinkState::Flapping;
    assert_eq!(inspected(&status).as_deref(), Some("cable~b~d"));
    let cut = link_mut(&mut status, "b", "c");
    cut.state = LinkState::Down;
    cut.blame = Blame::Link;
    assert_eq!(
        inspected(&status).as_deref(),
        Some("cable~b~c"),
        "the cut cable"
    );
    // A dead node before everything else, its links included.
    for x in ["a", "b", "c"] {
        let l = link_mut(&mut status, x, "d");
        l.state = LinkState::Down;
        l.blame = Blame::Node;
        l.blamed_node = Some(id("d"));
    }
    assert_eq!(
        inspected(&status).as_deref(),
        Some("cable~b~c"),
        "a cut cable before links blamed on a node still up"
    );
    status.nodes[2].state = NodeState::Suspect;
    assert_eq!(inspected(&status).as_deref(), Some("node~c"));
    status.nodes[3].state = NodeState::Down;
    assert_eq!(inspected(&status).as_deref(), Some("node~d"));
    // And no quorum before all: this node's view, whose alarm says why.
    status.quorum.has_quorum = false;
    assert_eq!(inspected(&status).as_deref(), Some("node~a"));
}

/// The links a dead node takes with it are counted with it, everywhere
/// the page counts links.
#[test]
fn a_dead_nodes_links_are_counted_apart_from_cable_faults() {
    let html = view(&troubled(), wall(100), STALL);
    assert!(
        html.contains("4 nodes, 6 cables: 2 up, 1 down, 3 down with node d</title>"),
        "{}",
        section(&html, "<title id=\"picture-title\">", "</title>")
    );
    assert!(html.contains("1 node down, 3 links down with node d, 1 link down"));
}

/// 12-character ids on every ring from 2 to 8 nodes, each node with every
/// line a label can have: every text drawn lies inside the viewBox, even
/// taken as wide as the widest common font draws it.
#[test]
fn no_label_reaches_past_the_picture() {
    for n in 2..=8 {
        let mut status = healthy(n);
        let long = |name: &str| id(&format!("mac-studio-{name}"));
        for node in &mut status.nodes {
            node.id = long(node.id.as_str());
        }
        for link in &mut status.links {
            link.a.node = long(link.a.node.as_str());
            link.b.node = long(link.b.node.as_str());
            link.state = LinkState::Down;
            link.blame = Blame::Node;
            link.blamed_node = Some(link.b.node.clone());
        }
        status.cables.clear();
        status.measurements.clear();
        status.node.id = long("a");
        status.quorum.leader = Some(long("a"));
        let ids: Vec<_> = status.nodes.iter().map(|v| v.id.clone()).collect();
        for node in &ids {
            assert_eq!(node.as_str().chars().count(), 12);
            for (severity, check) in [
                (Severity::Critical, CheckStatus::Fail),
                (Severity::Warning, CheckStatus::Warn),
            ] {
                for _ in 0..2 {
                    status.alarms.push(Alarm {
                        kind: AlarmKind::CpuSpike,
                        severity,
                        node: node.clone(),
                        subject: "cpu".into(),
                        summary: "CPU".into(),
                        evidence: vec![],
                        fix: None,
                        since: wall(60),
                        updated: wall(90),
                    });
                    status.checks.push(CheckResult {
                        name: "check".into(),
                        node: Some(node.clone()),
                        status: check,
                        evidence: vec![],
                        fix: String::new(),
                    });
                }
            }
        }
        let html = view(&status, wall(100), STALL);
        let picture = section(&html, "<svg class=\"picture\"", "</svg>");
        let numbers = |text: &str| -> Vec<f64> {
            text.split_whitespace()
                .map(|v| v.parse().expect("number"))
                .collect()
        };
        let vb = numbers(section(picture, "viewBox=\"", "\""));
        let (left, top, right, bottom) = (vb[0], vb[1], vb[0] + vb[2], vb[1] + vb[3]);
        let texts: Vec<&str> = picture.split("<text ").skip(1).collect();
        assert!(texts.len() >= 4 * n, "{n} nodes: {} texts", texts.len());
        for text in texts {
            if text.starts_with(r#"class="watermark""#) {
                continue;
            }
            let attr = |name: &str| section(text, &format!(" {name}=\""), "\"").to_owned();
            let x: f64 = attr("x").parse().expect("x");
            let y: f64 = attr("y").parse().expect("y");
            let content = text
                .split_once('>')
                .and_then(|(_, rest)| rest.split_once("</text>"))
                .expect("a text element")
                .0;
            // DejaVu Sans Bold, the widest of the common fonts, averages
            // under 0.72 em a character over these texts; symbols 1 em.
            let ems: f64 = content
                .chars()
                .map(|c| if c.is_ascii() { 0.72 } else { 1.0 })
                .sum();
            let px = if text.starts_with(r#"class="name""#) {
                15.0
            } else {
                12.0
            };
            let width = ems * px;
            let (from, to) = match text.contains(r#"text-anchor="start""#) {
                true => (x, x + width),
                false if text.contains(r#"text-anchor="end""#) => (x - width, x),
                false => (x - width / 2.0, x + width / 2.0),
            };
            assert!(
                from >= left && to <= right && y - px >= top && y + px / 2.0 <= bottom,
                "{n} nodes: {content:?} spans x {from:.0}..{to:.0}, y {y:.0}, \
                 outside the viewBox {left:.0} {top:.0} {right:.0} {bottom:.0}"
            );
        }
    }
}
