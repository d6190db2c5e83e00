//! `meshctl bundle`: every platform command's raw output, the host files
//! the platform layer read, this node's facts and checks, and the daemon's
//! status when it answers, in one `.tar.gz` that `meshctl doctor --from`
//! (or `meshd` with `platform.replay_dir`) reads on any machine.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use meshd_domain::NodeId;
use meshd_mesh::checks::node_checks;
use meshd_mesh::models::ModelTable;
use meshd_platform::bundle;
use meshd_platform::source::{LiveSource, Recorder};

use crate::client::{self, Target};
use crate::outcome::{Failure, emit};
use crate::status;

/// Writes the bundle to `out` (default: `meshd-bundle-<node>-<time>.tar.gz`
/// here) and prints where it went.
pub async fn run(target: &Target, node: NodeId, out: Option<PathBuf>) -> Result<(), Failure> {
    let now = SystemTime::now();
    let created = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let top = format!("meshd-bundle-{node}-{created}");
    let out = out.unwrap_or_else(|| PathBuf::from(format!("{top}.tar.gz")));

    let (facts, recorded) = {
        let node = node.clone();
        tokio::task::spawn_blocking(move || {
            let recorder = Recorder::new(LiveSource);
            let mut facts = meshd_platform::collect(&recorder, meshd_platform::this_os());
            facts.checks = node_checks(&node, &facts, &ModelTable::builtin());
            (facts, recorder.into_recorded())
        })
        .await
        .map_err(|e| Failure::Refused(format!("reading this host's facts failed: {e}")))?
    };
    // The daemon's view is useful but optional: a bundle is most needed
    // when the daemon is down.
    let daemon = match client::status(target).await {
        Ok(s) => status::to_json(&s)
            .map(|json| ("status.json", json))
            .unwrap_or_else(|e| ("status.error", format!("cannot encode the status: {e}\n"))),
        Err(why) => ("status.error", format!("{}\n", why.message())),
    };

    let with_status = daemon.0 == "status.json";
    // A private directory with a random name (mode 0700), removed on drop:
    // nobody can guess it to plant a link before it is written.
    let staging = tempfile::Builder::new()
        .prefix("meshctl-bundle-")
        .tempdir()
        .map_err(|e| Failure::Refused(format!("cannot make a staging directory: {e}")))?;
    let manifest = write_and_pack(
        staging.path(),
        &node,
        created,
        &recorded,
        &facts,
        daemon,
        &top,
        &out,
    )?;
    let failed = manifest.commands.iter().filter(|c| !c.ok).count();
    emit(&format!(
        "wrote {} ({} commands, {} failed or missing; {} host files; {})\n\
         read it anywhere with: meshctl doctor --from {}\n",
        out.display(),
        manifest.commands.len(),
        failed,
        manifest.files.len(),
        if with_status {
            "with the daemon's status"
        } else {
            "without the daemon's status"
        },
        out.display()
    ))
}

#[allow(clippy::too_many_arguments)]
fn write_and_pack(
    staging: &Path,
    node: &NodeId,
    created: u64,
    recorded: &[meshd_platform::source::Recorded],
    facts: &meshd_domain::facts::NodeFacts,
    daemon: (&str, String),
    top: &str,
    out: &Path,
) -> Result<bundle::Manifest, Failure> {
    let failed = |e: bundle::BundleError| Failure::Refused(format!("cannot write the bundle: {e}"));
    let manifest = bundle::write_dir(staging, node.as_str(), created, recorded, facts, &[daemon])
        .map_err(failed)?;
    bundle::pack(staging, top, out).map_err(failed)?;
    Ok(manifest)
}
