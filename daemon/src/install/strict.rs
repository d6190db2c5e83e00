//! The files the service runs and reads must be root's alone, as sshd's
//! StrictModes demands of its keys: a binary or config that another user
//! owns, or that group or others may write, lets that user control the
//! service at its next start (and run anything as root on macOS, where it
//! runs as root; the systemd unit runs it as a user of its own). Install refuses them, naming the path and the
//! command that fixes it.
//!
//! Only the files themselves are judged, not their directories: Homebrew
//! on Intel Macs makes `/usr/local/bin` writable by the admin group, and
//! refusing that would refuse the documented layout (docs/INSTALL-macOS.md). The runbook says
//! to keep the directories root's too.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{InstallError, Plan, Step, under};

/// Group and others may not write.
const GROUP_OTHER_WRITE: u32 = 0o022;

/// What is wrong with a file owned by `uid` with permission bits `mode`,
/// and the commands that fix it; `None` when root owns it and only root
/// may write it.
pub fn problem(path: &Path, uid: u32, mode: u32) -> Option<(String, String)> {
    let foreign = uid != 0;
    let writable = mode & GROUP_OTHER_WRITE != 0;
    let shown = path.display();
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    if foreign {
        problems.push(format!("owned by uid {uid}, not root"));
        fixes.push(format!("sudo chown root {shown}"));
    }
    if writable {
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "group and others",
            (true, false) => "its group",
            _ => "others",
        };
        problems.push(format!("writable by {who} (mode {:04o})", mode & 0o7777));
        fixes.push(format!("sudo chmod go-w {shown}"));
    }
    (foreign || writable).then(|| (problems.join(" and "), fixes.join(" && ")))
}

/// Refuses an install whose binary, or whose existing config (a missing
/// one is written by install, as root), is not root's alone. Paths are
/// looked up under `root`, as the plan applies them.
pub fn require_strict_modes(
    plan: &Plan,
    root: &Path,
    binary: Option<&Path>,
) -> Result<(), InstallError> {
    let config = plan.steps.iter().find_map(|step| match step {
        Step::WriteConfig { path, .. } => Some(path.as_path()),
        _ => None,
    });
    let files = binary
        .map(|path| ("binary", path, true))
        .into_iter()
        .chain(config.map(|path| ("config", path, false)));
    for (what, path, required) in files {
        // Followed: the service runs (or reads) what a link points at.
        let meta = match std::fs::metadata(under(root, path)) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !required => continue,
            Err(source) => {
                return Err(InstallError::Io {
                    action: "check",
                    path: path.to_owned(),
                    source,
                });
            }
        };
        if let Some((problem, fix)) = problem(path, meta.uid(), meta.mode()) {
            return Err(InstallError::NotRootsAlone {
                what,
                path: path.to_owned(),
                problem,
                fix,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_owned_files_nobody_else_can_write_pass() {
        let path = Path::new("/usr/local/bin/meshd");
        assert_eq!(problem(path, 0, 0o100755), None);
        assert_eq!(problem(path, 0, 0o100644), None);
        assert_eq!(
            problem(path, 501, 0o100755),
            Some((
                "owned by uid 501, not root".to_owned(),
                "sudo chown root /usr/local/bin/meshd".to_owned()
            ))
        );
        assert_eq!(
            problem(path, 0, 0o100777),
            Some((
                "writable by group and others (mode 0777)".to_owned(),
                "sudo chmod go-w /usr/local/bin/meshd".to_owned()
            ))
        );
        assert_eq!(
            problem(path, 0, 0o100664).map(|p| p.0).as_deref(),
            Some("writable by its group (mode 0664)")
        );
        assert_eq!(
            problem(path, 20, 0o100646),
            Some((
                "owned by uid 20, not root and writable by others (mode 0646)".to_owned(),
                "sudo chown root /usr/local/bin/meshd && sudo chmod go-w /usr/local/bin/meshd"
                    .to_owned()
            ))
        );
    }
}
