//! The initramfs a test VM boots: busybox as PID 1 (guest/init.sh), the
//! kernel modules, rdma-core's verbs library with the rxe provider,
//! `rdma`, `ibv_devinfo`, and this build's meshd and meshctl, each with
//! the shared libraries `ldd` names.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::VmError;
use super::cpio;
use super::packages::Packages;
use crate::Binaries;
use crate::command;

const INIT: &str = include_str!("guest/init.sh");
const AGENT: &str = include_str!("guest/agent.sh");
const LIMIT: Duration = Duration::from_secs(60);

/// Where the full iproute2 `ip` lives in the guest: off the PATH, so the
/// guest's `ip` is busybox's (no `-j`), and a test puts it first on the
/// PATH when it wants the real one.
pub const IPROUTE2_DIR: &str = "/opt/iproute2/bin";

/// Writes the initramfs of `packages` with `binaries` and `extra` (guest
/// path, host file) to `path`.
pub fn build(
    packages: &Packages,
    binaries: &Binaries,
    extra: &[(String, PathBuf)],
    path: &Path,
) -> Result<(), VmError> {
    let mut files = Files::default();
    let busybox = packages.root("busybox-static").join("bin/busybox");
    files.add("/bin/busybox", &busybox, 0o755);
    files.text("/init", INIT, 0o755);
    files.text("/etc/meshvm/agent.sh", AGENT, 0o644);
    let modules = packages.modules()?;
    let order: Vec<&str> = modules.iter().map(|(name, _)| name.as_str()).collect();
    files.text("/etc/meshvm/modules", &(order.join("\n") + "\n"), 0o644);
    for (name, file) in &modules {
        files.add(&format!("/lib/modules/{name}.ko"), file, 0o644);
    }

    let verbs = packages.root("libibverbs1");
    let providers = packages.root("ibverbs-providers");
    let utils = packages.root("ibverbs-utils");
    let iproute2 = packages.root("iproute2");
    let library_dir = "usr/lib/x86_64-linux-gnu";
    let provider = find_rxe_provider(&providers.join(library_dir).join("libibverbs"))?;
    let mut elves: Vec<(String, PathBuf)> = vec![
        (
            format!("/{library_dir}/libibverbs.so.1"),
            verbs.join(library_dir).join("libibverbs.so.1"),
        ),
        (
            format!("/{library_dir}/libibverbs/{}", file_name(&provider)),
            provider.clone(),
        ),
        ("/usr/bin/rdma".into(), iproute2.join("usr/bin/rdma")),
        (format!("{IPROUTE2_DIR}/ip"), iproute2.join("bin/ip")),
    ];
    // The references meshd is compared with: the device reports, and
    // rdma-core's own UC and RC ping-pong.
    for tool in [
        "ibv_devinfo",
        "ibv_devices",
        "ibv_uc_pingpong",
        "ibv_rc_pingpong",
    ] {
        elves.push((format!("/usr/bin/{tool}"), utils.join("usr/bin").join(tool)));
    }
    let stripped = tempfile::tempdir().map_err(VmError::file(Path::new("/tmp")))?;
    for (name, binary) in [("meshd", &binaries.meshd), ("meshctl", &binaries.meshctl)] {
        elves.push((
            format!("/usr/local/bin/{name}"),
            without_debug_info(binary, &stripped.path().join(name))?,
        ));
    }
    for (guest, host) in extra {
        files.add(guest, host, 0o755);
    }
    let driver = providers.join("etc/libibverbs.d/rxe.driver");
    files.add("/etc/libibverbs.d/rxe.driver", &driver, 0o644);

    let search = verbs.join(library_dir).to_string_lossy().into_owned();
    for (guest, host) in &elves {
        files.add(guest, host, 0o755);
        for library in shared_libraries(host, &search)? {
            // Libraries of the unpacked packages keep their place in the
            // package; the host's (same Debian release) keep theirs.
            let guest_path = if library.starts_with(&verbs) {
                format!("/{library_dir}/{}", file_name(&library))
            } else {
                library.to_string_lossy().into_owned()
            };
            files.add(&guest_path, &library, 0o755);
        }
    }
    files.write(path)
}

/// Guest path → what goes there.
#[derive(Default)]
struct Files {
    entries: BTreeMap<String, Source>,
}

enum Source {
    Host(PathBuf, u32),
    Text(String, u32),
}

impl Files {
    fn add(&mut self, guest: &str, host: &Path, mode: u32) {
        self.entries
            .insert(guest.to_owned(), Source::Host(host.to_path_buf(), mode));
    }

    fn text(&mut self, guest: &str, text: &str, mode: u32) {
        self.entries
            .insert(guest.to_owned(), Source::Text(text.to_owned(), mode));
    }

    fn write(self, path: &Path) -> Result<(), VmError> {
        let file = fs::File::create(path).map_err(VmError::file(path))?;
        let mut archive = cpio::Writer::new(std::io::BufWriter::new(file));
        for (guest, source) in self.entries {
            match source {
                Source::Host(host, mode) => {
                    let bytes = fs::read(&host).map_err(VmError::file(&host))?;
                    archive.file(&guest, mode, &bytes)
                }
                Source::Text(text, mode) => archive.file(&guest, mode, text.as_bytes()),
            }
            .map_err(VmError::file(path))?;
        }
        for directory in ["/proc", "/sys", "/dev", "/tmp", "/run", "/var/log"] {
            archive.directory(directory).map_err(VmError::file(path))?;
        }
        use std::io::Write;
        archive
            .finish()
            .and_then(|mut out| out.flush())
            .map_err(VmError::file(path))
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// `librxe-rdmav34.so`: the ABI number is part of the name.
fn find_rxe_provider(dir: &Path) -> Result<PathBuf, VmError> {
    let entries = fs::read_dir(dir).map_err(VmError::file(dir))?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            let name = file_name(p);
            name.starts_with("librxe-") && name.ends_with(".so")
        })
        .ok_or_else(|| VmError::Packages(format!("no librxe-*.so in {}", dir.display())))
}

/// A copy of `binary` without its debug sections (a debug meshd is
/// mostly DWARF, which only makes the guest's memory fuller), or the
/// binary itself where `strip` is missing.
fn without_debug_info(binary: &Path, copy: &Path) -> Result<PathBuf, VmError> {
    let from = binary.to_string_lossy();
    let to = copy.to_string_lossy();
    match command::run("strip", &["--strip-debug", "-o", &to, &from], LIMIT) {
        Ok(_) => Ok(copy.to_path_buf()),
        Err(command::CommandError::Spawn { .. }) => Ok(binary.to_path_buf()),
        Err(err) => Err(err.into()),
    }
}

/// The shared libraries `ldd` resolves for `elf` (with the unpacked
/// verbs library first on the search path), the program interpreter
/// included; none for a static binary.
fn shared_libraries(elf: &Path, search: &str) -> Result<Vec<PathBuf>, VmError> {
    let path = format!("LD_LIBRARY_PATH={search}");
    let elf_text = elf.to_string_lossy();
    let out = command::run_any("env", &[&path, "ldd", &elf_text], LIMIT)?;
    if !out.success {
        if out.stdout.contains("not a dynamic executable")
            || out.stderr.contains("not a dynamic executable")
        {
            return Ok(Vec::new());
        }
        return Err(VmError::Packages(format!(
            "ldd {elf_text} failed: {}",
            out.stderr.trim()
        )));
    }
    parse_ldd(&out.stdout).map_err(|missing| {
        VmError::Packages(format!(
            "{elf_text} needs {missing}, which is not installed on this host"
        ))
    })
}

/// The paths in `ldd` output; the first library not found is an error.
fn parse_ldd(text: &str) -> Result<Vec<PathBuf>, String> {
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some((name, target)) = line.split_once(" => ") {
            if target.starts_with("not found") {
                return Err(name.to_owned());
            }
            if let Some(path) = target
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/'))
            {
                found.push(PathBuf::from(path));
            }
        } else if let Some(path) = line
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        {
            found.push(PathBuf::from(path));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_every_library_and_the_interpreter() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibibverbs.so.1 => /tmp/x/libibverbs.so.1 (0x00007f14)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f14)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f14)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            [
                PathBuf::from("/tmp/x/libibverbs.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert_eq!(
            parse_ldd("\tlibmnl.so.0 => not found\n"),
            Err("libmnl.so.0".to_owned())
        );
    }
}
