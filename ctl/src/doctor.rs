//! `meshctl doctor`: the platform checks as a checklist with evidence and
//! fixes, for this node (read here, no daemon needed), for a bundle or a
//! directory of bundles (`--from`, on any machine), or for the whole mesh
//! as the daemon sees it (`--mesh`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use meshd_domain::facts::{Cable, CheckResult, NodeFacts};
use meshd_domain::{LinkState, LinkVerdict, NodeId};
use meshd_mesh::cables::link_of;
use meshd_mesh::checks::diagnose;
use meshd_mesh::models::ModelTable;
use meshd_platform::bundle::{self, BundleError};
use meshd_platform::source::LiveSource;
use serde::Serialize;

use crate::checklist::{self, Show};
use crate::client::{self, Target};
use crate::outcome::{Failure, emit};

/// Where the facts come from.
#[derive(Debug, Clone)]
pub enum Scope {
    /// This host, read now.
    Local { node: NodeId },
    /// A bundle (directory or `.tar.gz`) or a directory of bundles.
    Replay { path: PathBuf, node: Option<NodeId> },
    /// The daemon's view of every node.
    Mesh,
}

/// One node's facts and checks.
#[derive(Debug, Serialize)]
struct NodeReport {
    node: NodeId,
    facts: NodeFacts,
}

/// A cable, and (for the mesh's view) the state of its link.
#[derive(Debug, Serialize)]
struct CableReport {
    #[serde(flatten)]
    cable: Cable,
    /// The mesh's verdict on its link; absent where no daemon judged it
    /// (this host, a bundle), `unknown` where the daemon has no verdict.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "link_state_name"
    )]
    link: Option<LinkState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

impl CableReport {
    /// A cable the mesh cannot carry a job over: its link down or flapping.
    fn is_dead(&self) -> bool {
        matches!(self.link, Some(LinkState::Down | LinkState::Flapping))
    }
}

fn link_state_name<S: serde::Serializer>(
    state: &Option<LinkState>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(state.map_or("unknown", LinkState::as_str))
}

fn judged(cables: Vec<Cable>, links: Option<&[LinkVerdict]>) -> Vec<CableReport> {
    cables
        .into_iter()
        .map(|cable| {
            let verdict = links.map(|links| link_of(&cable, links));
            CableReport {
                link: verdict.map(|v| v.map_or(LinkState::Unknown, |v| v.state)),
                fix: verdict.flatten().and_then(|v| v.fix.clone()),
                cable,
            }
        })
        .collect()
}

/// What a doctor run found, as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Outcome {
    /// A check was judged, none failed, and no cable's link is down or
    /// flapping.
    Pass,
    /// A check failed, or a cable's link is down or flapping.
    Fail,
    /// No check was judged (every one skipped, or none ran), and no cable
    /// is dead: nothing is known, which is no pass.
    Unknown,
}

impl Outcome {
    fn of(checks: &[CheckResult], cables: &[CableReport]) -> Outcome {
        if checklist::any_failed(checks) || cables.iter().any(CableReport::is_dead) {
            Outcome::Fail
        } else if checklist::any_judged(checks) {
            Outcome::Pass
        } else {
            Outcome::Unknown
        }
    }
}

/// The JSON document of `meshctl doctor --json`.
#[derive(Debug, Serialize)]
struct DoctorJson<'a> {
    /// `outcome` is `pass`: false for an unknown outcome too.
    passed: bool,
    outcome: Outcome,
    nodes: &'a [NodeReport],
    cables: &'a [CableReport],
    checks: &'a [CheckResult],
}

/// Prints the checklist; `Ok(true)` when a check was judged, none failed,
/// and no cable's link is down or flapping (see [`Outcome`]).
pub async fn run(target: &Target, scope: Scope, json: bool) -> Result<bool, Failure> {
    let models = ModelTable::builtin();
    let (nodes, cables, checks) = match scope {
        Scope::Mesh => {
            let status = client::status(target).await?;
            let cables = judged(status.cables, Some(&status.links));
            (Vec::new(), cables, status.checks)
        }
        Scope::Local { node } => {
            let facts = tokio::task::spawn_blocking(move || {
                meshd_platform::collect(&LiveSource, meshd_platform::this_os())
            })
            .await
            .map_err(|e| Failure::Refused(format!("reading this host's facts failed: {e}")))?;
            offline(vec![(node, facts)], &models)
        }
        Scope::Replay { path, node } => {
            let bundles = open_bundles(&path, node)?;
            offline(bundles, &models)
        }
    };
    let outcome = Outcome::of(&checks, &cables);
    let passed = outcome == Outcome::Pass;
    if json {
        let doc = DoctorJson {
            passed,
            outcome,
            nodes: &nodes,
            cables: &cables,
            checks: &checks,
        };
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| Failure::Refused(format!("cannot encode the checks as JSON: {e}")))?;
        emit(&format!("{text}\n"))?;
    } else {
        emit(&render(&nodes, &cables, &checks, outcome))?;
    }
    Ok(passed)
}

/// Checks over facts read without a daemon: each node's own checks (with
/// what the far ends of its cables see of it), and the mesh-wide ones when
/// there is more than one node.
fn offline(
    facts: Vec<(NodeId, NodeFacts)>,
    models: &ModelTable,
) -> (Vec<NodeReport>, Vec<CableReport>, Vec<CheckResult>) {
    let by_node: BTreeMap<NodeId, NodeFacts> = facts.into_iter().collect();
    let mut diagnosis = diagnose(&by_node, models);
    let checks: Vec<CheckResult> = diagnosis.all_checks().cloned().collect();
    let nodes = by_node
        .into_iter()
        .map(|(node, mut facts)| {
            facts.checks = diagnosis.node_checks.remove(&node).unwrap_or_default();
            NodeReport { node, facts }
        })
        .collect();
    (nodes, judged(diagnosis.cables, None), checks)
}

/// The bundles at `path`: one bundle (a directory or a `.tar.gz`), or a
/// directory holding bundles (directories or `.tar.gz` archives, one per
/// node).
fn open_bundles(path: &Path, node: Option<NodeId>) -> Result<Vec<(NodeId, NodeFacts)>, Failure> {
    if path.is_file() {
        return Ok(vec![read_archive(path, node)?]);
    }
    if !path.is_dir() {
        return Err(Failure::Usage(format!(
            "{} is neither a bundle directory nor a .tar.gz from `meshctl bundle`",
            path.display()
        )));
    }
    if is_bundle(path) {
        return Ok(vec![read_bundle(path, node)?]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Failure::Refused(format!("cannot list {}: {e}", path.display())))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    let members: Vec<&PathBuf> = entries
        .iter()
        .filter(|p| (p.is_dir() && is_bundle(p)) || is_archive(p))
        .collect();
    if members.is_empty() {
        // A capture whose commands say nothing about its OS is still one
        // node's capture; a directory with nothing in it is no bundle.
        if entries.iter().any(|p| p.is_file()) {
            return Ok(vec![read_bundle(path, node)?]);
        }
        return Err(Failure::Refused(format!(
            "{} holds no bundle: neither bundle directories nor .tar.gz archives from \
             `meshctl bundle`",
            path.display()
        )));
    }
    let mut bundles = members
        .iter()
        .map(|member| {
            if member.is_dir() {
                read_bundle(member, None)
            } else {
                read_archive(member, None)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    bundles.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(twice) = bundles.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Failure::Refused(format!(
            "{}: two bundles of node {}; keep one per node",
            path.display(),
            twice[0].0
        )));
    }
    Ok(bundles)
}

fn is_archive(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    path.is_file() && name.is_some_and(|n| n.ends_with(".tar.gz") || n.ends_with(".tgz"))
}

/// A `.tar.gz` from `meshctl bundle`, unpacked into a private temporary
/// directory that is removed however reading ends.
fn read_archive(path: &Path, node: Option<NodeId>) -> Result<(NodeId, NodeFacts), Failure> {
    let unpacked = bundle::unpack(path).map_err(refused_bundle)?;
    read_bundle(unpacked.dir(), node)
}

fn refused_bundle(err: BundleError) -> Failure {
    Failure::Refused(format!("cannot read the bundle: {err}"))
}

fn is_bundle(dir: &Path) -> bool {
    bundle::os_of(dir) != meshd_domain::facts::OsKind::Other
}

/// One bundle's facts, re-read from its raw outputs (so a newer meshctl
/// applies its newer parsers), under the node id of its manifest, `node`,
/// or the directory's name.
fn read_bundle(dir: &Path, node: Option<NodeId>) -> Result<(NodeId, NodeFacts), Failure> {
    bundle::check_dir(dir).map_err(refused_bundle)?;
    let named = bundle::read_manifest(dir).ok().map(|m| m.node);
    let fallback = || {
        dir.file_name()
            .map(|n| {
                n.to_string_lossy()
                    .trim_start_matches("meshd-bundle-")
                    .to_owned()
            })
            .unwrap_or_default()
    };
    let node = match node {
        Some(node) => node,
        None => {
            let name = named.unwrap_or_else(fallback);
            NodeId::new(&name).unwrap_or_else(|_| NodeId::from_hostname(&name))
        }
    };
    let facts = bundle::replay_facts(dir)
        .map_err(|e| Failure::Refused(format!("cannot open {}: {e}", dir.display())))?;
    Ok((node, facts))
}

fn render(
    nodes: &[NodeReport],
    cables: &[CableReport],
    checks: &[CheckResult],
    outcome: Outcome,
) -> String {
    let mut out = String::new();
    for n in nodes {
        let f = &n.facts;
        let _ = writeln!(
            out,
            "{}: {} {}{}{}, facts from {}",
            n.node,
            f.os,
            if f.os_version.is_empty() {
                "(version unknown)"
            } else {
                &f.os_version
            },
            if f.os_build.is_empty() {
                String::new()
            } else {
                format!(" ({})", f.os_build)
            },
            if f.model.is_empty() {
                String::new()
            } else {
                format!(", {}", f.model)
            },
            f.source
        );
        if !f.blind_spots.is_empty() {
            let _ = writeln!(out, "  not seen here:");
            for spot in &f.blind_spots {
                let _ = writeln!(out, "    - {spot}");
            }
        }
    }
    if !cables.is_empty() {
        let _ = writeln!(out, "\ncables");
        for CableReport { cable, link, fix } in cables {
            let end = |e: &meshd_domain::facts::CableEnd| {
                let port = [e.port.as_str(), e.iface.as_str()]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                if port.is_empty() {
                    e.node.to_string()
                } else {
                    format!("{}/{port}", e.node)
                }
            };
            let speed = if cable.speed_bps == 0 {
                String::new()
            } else {
                format!(" at {} Gb/s", cable.speed_bps / 1_000_000_000)
            };
            let health = match (link, fix) {
                (None, _) => String::new(),
                (Some(LinkState::Unknown), _) => ", link not judged yet".to_owned(),
                (Some(LinkState::Up), _) => ", link up".to_owned(),
                (Some(state), Some(fix)) => format!(", link {state}: {fix}"),
                (Some(state), None) => format!(", link {state}"),
            };
            let _ = writeln!(
                out,
                "  {} <-> {}{speed} ({}{health})",
                end(&cable.a),
                end(&cable.b),
                if cable.discovered {
                    "discovered"
                } else {
                    "configured"
                }
            );
        }
    }
    let _ = writeln!(out, "\nchecks: {}", checklist::summary(checks));
    if outcome == Outcome::Unknown {
        let why = if checks.is_empty() {
            "no check ran"
        } else {
            "every check was skipped, each for the reason under it"
        };
        let _ = writeln!(
            out,
            "  nothing was judged ({why}): that is no pass (exit 1)"
        );
    }
    checklist::render(&mut out, checks, Show::All);
    out
}
