//! The release before this one, built from its tag in a git worktree, so
//! the lab can run a mesh of mixed builds (a rolling upgrade, and a
//! downgrade) against the compatibility rule of ARCHITECTURE.md,
//! "Upgrades": every release talks to the previous one both ways.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::command::{self, CommandError, QUICK};
use crate::lab::{Binaries, LabError};

/// A published release: its tag, and the commit the tag names (a clone
/// made without tags still has the commit on main).
#[derive(Debug, Clone, Copy)]
pub struct Release {
    pub tag: &'static str,
    pub commit: &'static str,
}

impl Release {
    /// The version its `meshd --version` prints.
    pub fn version(&self) -> &'static str {
        self.tag.trim_start_matches('v')
    }
}

/// The release this one must interoperate with; moves on at every release.
pub const PREVIOUS: Release = Release {
    tag: "v0.1.0",
    commit: "83c6067dc1b83adc043e377c5df009ff1f35b957",
};

/// A debug build of the workspace's two binaries from scratch takes a few
/// minutes on two cores; a wedged build must still end.
const BUILD_LIMIT: Duration = Duration::from_secs(40 * 60);

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tag {tag} names commit {found}, but release {tag} is {expected}: was the tag moved?")]
    TagMoved {
        tag: &'static str,
        found: String,
        expected: &'static str,
    },
    #[error("the meshd built from {tag} says `{said}`, not version {version}")]
    WrongVersion {
        tag: &'static str,
        version: &'static str,
        said: String,
    },
    #[error(transparent)]
    Lab(#[from] LabError),
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> ReleaseError + '_ {
    move |source| ReleaseError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// Where the binaries of `release` are kept under a target directory.
pub fn binaries_dir(target: &Path, release: &Release) -> PathBuf {
    target.join("releases").join(release.tag)
}

/// meshd and meshctl of `release`, built once from the repository at
/// `workspace` into `target/releases/TAG/` and reused after that.
/// `build_target` is the cargo target directory the build uses: by
/// default one of its own, so a build beside a running test suite never
/// replaces the suite's `target/debug/meshd`; CI passes the workspace's
/// own before it builds anything else, so the dependencies are compiled
/// once for both builds.
pub fn binaries(
    workspace: &Path,
    target: &Path,
    release: &Release,
    build_target: Option<&Path>,
) -> Result<Binaries, ReleaseError> {
    let dir = binaries_dir(target, release);
    if let Ok(found) = Binaries::find(&dir)
        && says_version(&found.meshd, release).is_ok()
    {
        return Ok(found);
    }
    let commit = commit_of(workspace, release)?;
    let checkout = target
        .join("releases")
        .join(format!("{}.worktree", release.tag));
    let git = |args: &[&str]| {
        let mut full = vec!["-C".to_owned(), workspace.to_string_lossy().into_owned()];
        full.extend(args.iter().map(|a| (*a).to_owned()));
        let full: Vec<&str> = full.iter().map(String::as_str).collect();
        command::run("git", &full, QUICK)
    };
    let checkout_dir = checkout.to_string_lossy().into_owned();
    let remove_checkout = || git(&["worktree", "remove", "--force", &checkout_dir]);
    // A worktree left by a build that was killed.
    let _ = remove_checkout();
    let _ = fs::remove_dir_all(&checkout);
    git(&["worktree", "prune"])?;
    git(&["worktree", "add", "--detach", &checkout_dir, &commit])?;
    // Absolute: the build runs in the checkout, where a relative
    // directory would land inside it (and go with it).
    let build_target = match build_target {
        Some(dir) => std::path::absolute(dir).map_err(file_error(dir))?,
        None => target.join("releases/build"),
    };
    let built = build(&checkout, &build_target);
    let removed = remove_checkout();
    let profile_dir = built?;
    removed?;
    fs::create_dir_all(&dir).map_err(file_error(&dir))?;
    for name in ["meshd", "meshctl"] {
        // Copied, then renamed into place: a reader never finds half a file.
        let staged = dir.join(format!(".{name}.partial"));
        let made = profile_dir.join(name);
        fs::copy(&made, &staged).map_err(file_error(&made))?;
        fs::rename(&staged, dir.join(name)).map_err(file_error(&dir))?;
    }
    let found = Binaries::find(&dir)?;
    says_version(&found.meshd, release)?;
    Ok(found)
}

/// The commit `release` is: its tag where the clone has it (which must
/// not have moved), else the recorded commit.
fn commit_of(workspace: &Path, release: &Release) -> Result<String, ReleaseError> {
    let spec = format!("{}^{{commit}}", release.tag);
    let workspace = workspace.to_string_lossy();
    let resolved = command::run_any(
        "git",
        &["-C", &workspace, "rev-parse", "--verify", "--quiet", &spec],
        QUICK,
    )?;
    let found = resolved.stdout.trim();
    if !resolved.success || found.is_empty() {
        return Ok(release.commit.to_owned());
    }
    if found != release.commit {
        return Err(ReleaseError::TagMoved {
            tag: release.tag,
            found: found.to_owned(),
            expected: release.commit,
        });
    }
    Ok(found.to_owned())
}

/// Builds meshd and meshctl in `checkout`; the directory they are in.
fn build(checkout: &Path, target: &Path) -> Result<PathBuf, ReleaseError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let target_env = format!("CARGO_TARGET_DIR={}", target.to_string_lossy());
    command::run_in(
        checkout,
        "env",
        &[
            &target_env,
            &cargo,
            "build",
            "--locked",
            "--quiet",
            "-p",
            "meshd",
            "-p",
            "meshctl",
            "--bin",
            "meshd",
            "--bin",
            "meshctl",
        ],
        BUILD_LIMIT,
    )?;
    Ok(target.join("debug"))
}

/// Checks that `meshd --version` names `release`'s version.
fn says_version(meshd: &Path, release: &Release) -> Result<(), ReleaseError> {
    let said = command::run(&meshd.to_string_lossy(), &["--version"], QUICK)?;
    let said = said.trim();
    if said
        .split_whitespace()
        .any(|word| word == release.version())
    {
        Ok(())
    } else {
        Err(ReleaseError::WrongVersion {
            tag: release.tag,
            version: release.version(),
            said: said.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_release_is_the_tagged_commit_of_this_repository() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        // A tagless clone falls back on the recorded commit; a clone with
        // the tag must agree with it. Either way the commit is in history.
        let commit = commit_of(&workspace, &PREVIOUS).unwrap_or_else(|err| panic!("{err}"));
        let workspace = workspace.to_string_lossy();
        let kind = command::run("git", &["-C", &workspace, "cat-file", "-t", &commit], QUICK);
        match kind {
            Ok(kind) => assert_eq!(kind.trim(), "commit"),
            // A source archive without .git has nothing to check; CI
            // always has its clone.
            Err(err) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "no git history under CI=true: {err}"
                );
                eprintln!("skipped: no git history here ({err})");
            }
        }
        assert_eq!(PREVIOUS.version(), "0.1.0");
    }
}
