//! Shell completions (bash, zsh, fish) and man pages of `meshd` and
//! `meshctl`, rendered from their command lines with clap_complete and
//! clap_mangen. Pure: what `meshd install` writes, path and text.

use std::path::{Path, PathBuf};

use clap_complete::Shell;

/// Where software installed outside a package manager puts shared files,
/// on macOS and Linux alike. bash-completion, zsh (`fpath` holds
/// `/usr/local/share/zsh/site-functions` on macOS and Debian) and fish
/// look here, and `man` finds `share/man` next to `/usr/local/bin`.
pub const SHARE_DIR: &str = "/usr/local/share";

/// One file to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocFile {
    pub path: PathBuf,
    pub contents: String,
}

/// Every completion script and man page of both commands.
pub fn files() -> Vec<DocFile> {
    [crate::cli::command(), meshctl::cli::command()]
        .into_iter()
        .flat_map(|command| {
            let mut files = completions(command.clone());
            files.extend(man_pages(command));
            files
        })
        .collect()
}

/// Where each shell looks for `name`'s completions, under [`SHARE_DIR`].
fn completion_path(shell: Shell, name: &str) -> PathBuf {
    let relative = match shell {
        Shell::Bash => format!("bash-completion/completions/{name}"),
        Shell::Zsh => format!("zsh/site-functions/_{name}"),
        Shell::Fish => format!("fish/vendor_completions.d/{name}.fish"),
        other => format!("{other}/{name}"),
    };
    Path::new(SHARE_DIR).join(relative)
}

fn completions(mut command: clap::Command) -> Vec<DocFile> {
    let name = command.get_name().to_owned();
    [Shell::Bash, Shell::Zsh, Shell::Fish]
        .into_iter()
        .map(|shell| {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, &name, &mut script);
            DocFile {
                path: completion_path(shell, &name),
                contents: String::from_utf8_lossy(&script).into_owned(),
            }
        })
        .collect()
}

/// `name.1` and one page per subcommand (`meshd-run.1`, `meshctl-status.1`
/// …), as `clap_mangen::generate_to` names them.
fn man_pages(command: clap::Command) -> Vec<DocFile> {
    fn pages(command: clap::Command, into: &mut Vec<DocFile>) {
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages(sub.clone(), into);
        }
        let man = clap_mangen::Man::new(command);
        let mut roff = Vec::new();
        // Rendering into memory cannot fail.
        if man.render(&mut roff).is_ok() {
            into.push(DocFile {
                path: Path::new(SHARE_DIR)
                    .join("man/man1")
                    .join(man.get_filename()),
                contents: String::from_utf8_lossy(&roff).into_owned(),
            });
        }
    }
    let mut command = command.disable_help_subcommand(true);
    command.build();
    let mut files = Vec::new();
    pages(command, &mut files);
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(files: &[DocFile]) -> Vec<String> {
        files.iter().map(|f| f.path.display().to_string()).collect()
    }

    #[test]
    fn both_commands_get_completions_for_three_shells_and_man_pages() {
        let files = files();
        let paths = names(&files);
        for want in [
            "/usr/local/share/bash-completion/completions/meshd",
            "/usr/local/share/zsh/site-functions/_meshctl",
            "/usr/local/share/fish/vendor_completions.d/meshctl.fish",
            "/usr/local/share/man/man1/meshd.1",
            "/usr/local/share/man/man1/meshd-install.1",
            "/usr/local/share/man/man1/meshctl.1",
            "/usr/local/share/man/man1/meshctl-status.1",
            "/usr/local/share/man/man1/meshctl-plan.1",
        ] {
            assert!(paths.iter().any(|p| p == want), "{want} missing: {paths:?}");
        }
        let bash = files
            .iter()
            .find(|f| f.path.ends_with("completions/meshctl"))
            .expect("bash completion");
        assert!(bash.contents.contains("--list-models"), "{}", bash.contents);
        let page = files
            .iter()
            .find(|f| f.path.ends_with("man1/meshctl.1"))
            .expect("man page");
        assert!(
            page.contents.starts_with(".ie \\n(.g"),
            "roff: {}",
            page.contents
        );
        assert!(page.contents.contains("Exit codes"), "{}", page.contents);
    }
}
