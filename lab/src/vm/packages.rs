//! The Debian packages a test VM is made of, fetched with `apt-get
//! download` from this host's own apt sources (so the guest runs the
//! host's Debian release) and unpacked with `dpkg-deb -x` into a cache
//! that later runs reuse: the kernel with only the modules the VM loads,
//! busybox, rdma-core's verbs library, the rxe provider and the tools
//! the tests compare meshd with.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::VmError;
use crate::command;

/// The kernel's meta package, whose dependency names this release's kernel.
const KERNEL_META: &str = "linux-image-amd64";

/// The user-space packages, unpacked side by side.
pub const USER_PACKAGES: &[&str] = &[
    // PID 1, the shell and every small tool (ip without -j, on purpose).
    "busybox-static",
    // rdma-core's verbs library, which meshd loads at run time.
    "libibverbs1",
    // The rxe (Soft-RoCE) provider and /etc/libibverbs.d/rxe.driver.
    "ibverbs-providers",
    // ibv_devinfo, the reference the tests compare the verbs reader with.
    "ibverbs-utils",
    // `rdma` (links, resource tracking) and the full `ip`.
    "iproute2",
];

/// The modules the guest needs, by name; their dependencies are added
/// from each module's own `depends=`. crc32_generic is no dependency of
/// rdma_rxe (rxe asks the crypto API for "crc32" at run time), but
/// without it `rdma link add` fails with ENOENT.
pub const ROOT_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "crc32_generic",
    "ib_uverbs",
    "rdma_rxe",
];

/// apt-get download fetches about 75 MB; the rest are local.
const DOWNLOAD_LIMIT: Duration = Duration::from_secs(600);
const LOCAL_LIMIT: Duration = Duration::from_secs(120);
/// Marks a complete cache entry.
const READY: &str = "ready";

/// A complete cache entry: everything a VM image is built from.
#[derive(Debug, Clone)]
pub struct Packages {
    pub dir: PathBuf,
    /// "6.1.0-57-amd64".
    pub kernel_release: String,
}

impl Packages {
    /// The kernel image.
    pub fn kernel(&self) -> PathBuf {
        self.dir.join("kernel/vmlinuz")
    }

    /// The modules to load, in an order that loads each after its
    /// dependencies, with their files.
    pub fn modules(&self) -> Result<Vec<(String, PathBuf)>, VmError> {
        let order = self.dir.join("kernel/modules.order");
        let text = fs::read_to_string(&order).map_err(VmError::file(&order))?;
        Ok(text
            .lines()
            .filter(|l| !l.is_empty())
            .map(|name| {
                (
                    name.to_owned(),
                    self.dir.join(format!("kernel/modules/{name}.ko")),
                )
            })
            .collect())
    }

    /// Where package `name` was unpacked (its files below, as in `/`).
    pub fn root(&self, name: &str) -> PathBuf {
        self.dir.join("root").join(name)
    }
}

/// The cache entry for this host's current kernel package, fetched and
/// unpacked first when it is not complete yet.
pub fn prepare(cache: &Path) -> Result<Packages, VmError> {
    let kernel_package = kernel_package()?;
    let kernel_release = kernel_package
        .strip_prefix("linux-image-")
        .unwrap_or(&kernel_package)
        .to_owned();
    let dir = cache.join(&kernel_package);
    if !dir.join(READY).is_file() {
        fetch(&dir, &kernel_package, &kernel_release)?;
    }
    Ok(Packages {
        dir,
        kernel_release,
    })
}

/// `linux-image-6.1.0-57-amd64`, from the meta package's dependency in
/// this host's package lists.
fn kernel_package() -> Result<String, VmError> {
    let text = command::run(
        "apt-cache",
        &["depends", "--important", KERNEL_META],
        LOCAL_LIMIT,
    )?;
    parse_kernel_dependency(&text).ok_or_else(|| {
        VmError::Packages(format!(
            "apt-cache depends {KERNEL_META} names no kernel package (are the package lists there? \
         run `apt-get update`): {}",
            text.trim()
        ))
    })
}

fn parse_kernel_dependency(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let name = line.trim().strip_prefix("Depends:")?.trim();
        (name.starts_with("linux-image-") && name != KERNEL_META).then(|| name.to_owned())
    })
}

fn fetch(dir: &Path, kernel_package: &str, release: &str) -> Result<(), VmError> {
    let staging = dir.with_extension(format!("fetch-{}", std::process::id()));
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(VmError::file(&staging))?;
    }
    let debs = staging.join("debs");
    fs::create_dir_all(&debs).map_err(VmError::file(&debs))?;
    let result = fetch_into(&staging, &debs, kernel_package, release);
    // The .debs (75 MB) and the full kernel tree (400 MB) are not kept.
    let _ = fs::remove_dir_all(&debs);
    let _ = fs::remove_dir_all(staging.join("kernel-full"));
    if let Err(err) = result {
        let _ = fs::remove_dir_all(&staging);
        return Err(err);
    }
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(VmError::file(dir))?;
    }
    fs::rename(&staging, dir).map_err(VmError::file(dir))?;
    Ok(())
}

fn fetch_into(
    staging: &Path,
    debs: &Path,
    kernel_package: &str,
    release: &str,
) -> Result<(), VmError> {
    let mut wanted: Vec<&str> = USER_PACKAGES.to_vec();
    wanted.push(kernel_package);
    let mut args = vec!["download"];
    args.extend(&wanted);
    command::run_in(debs, "apt-get", &args, DOWNLOAD_LIMIT)?;
    let files = deb_files(debs)?;
    for package in USER_PACKAGES {
        let deb = files.get(*package).ok_or_else(|| {
            VmError::Packages(format!("apt-get download left no .deb of {package}"))
        })?;
        let root = staging.join("root").join(package);
        unpack(deb, &root)?;
    }
    let deb = files.get(kernel_package).ok_or_else(|| {
        VmError::Packages(format!("apt-get download left no .deb of {kernel_package}"))
    })?;
    let full = staging.join("kernel-full");
    unpack(deb, &full)?;
    keep_kernel(&full, &staging.join("kernel"), release)?;
    let ready = staging.join(READY);
    fs::write(&ready, format!("{kernel_package}\n")).map_err(VmError::file(&ready))
}

/// Package name → its .deb ("busybox-static_1%3a1.35.0-4_amd64.deb").
fn deb_files(dir: &Path) -> Result<BTreeMap<String, PathBuf>, VmError> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(VmError::file(dir))? {
        let path = entry.map_err(VmError::file(dir))?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if let Some((package, _)) = name.split_once('_')
            && name.ends_with(".deb")
        {
            files.insert(package.to_owned(), path.clone());
        }
    }
    Ok(files)
}

fn unpack(deb: &Path, into: &Path) -> Result<(), VmError> {
    fs::create_dir_all(into).map_err(VmError::file(into))?;
    let deb = deb.to_string_lossy();
    let into_text = into.to_string_lossy();
    command::run("dpkg-deb", &["-x", &deb, &into_text], LOCAL_LIMIT)?;
    Ok(())
}

/// Copies the kernel image and the modules the VM loads out of the
/// unpacked kernel package, with the order to load them in.
fn keep_kernel(full: &Path, kept: &Path, release: &str) -> Result<(), VmError> {
    let modules_dir = kept.join("modules");
    fs::create_dir_all(&modules_dir).map_err(VmError::file(&modules_dir))?;
    let image = full.join(format!("boot/vmlinuz-{release}"));
    let kernel = kept.join("vmlinuz");
    fs::copy(&image, &kernel).map_err(VmError::file(&image))?;
    let tree = full.join(format!("lib/modules/{release}/kernel"));
    let mut files = BTreeMap::new();
    index_modules(&tree, &mut files)?;
    let order = load_order(ROOT_MODULES, |name| {
        let path = files
            .get(name)
            .ok_or_else(|| VmError::Packages(format!("the kernel package has no module {name}")))?;
        let bytes = fs::read(path).map_err(VmError::file(path))?;
        Ok(module_depends(&bytes))
    })?;
    for name in &order {
        let from = &files[name];
        let to = modules_dir.join(format!("{name}.ko"));
        fs::copy(from, &to).map_err(VmError::file(from))?;
    }
    let listed = kept.join("modules.order");
    fs::write(&listed, order.join("\n") + "\n").map_err(VmError::file(&listed))
}

/// Module name (underscores) → file, for every `.ko` below `dir`.
fn index_modules(dir: &Path, files: &mut BTreeMap<String, PathBuf>) -> Result<(), VmError> {
    for entry in fs::read_dir(dir).map_err(VmError::file(dir))? {
        let path = entry.map_err(VmError::file(dir))?.path();
        if path.is_dir() {
            index_modules(&path, files)?;
        } else if let Some(stem) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".ko"))
        {
            files.insert(stem.replace('-', "_"), path);
        }
    }
    Ok(())
}

/// The `depends=` of a module file's `.modinfo` strings.
fn module_depends(bytes: &[u8]) -> Vec<String> {
    const KEY: &[u8] = b"\0depends=";
    let Some(at) = bytes.windows(KEY.len()).position(|w| w == KEY) else {
        return Vec::new();
    };
    let value = &bytes[at + KEY.len()..];
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end])
        .split(',')
        .filter(|name| !name.is_empty())
        .map(|name| name.replace('-', "_"))
        .collect()
}

/// `roots` and everything they depend on, each after its dependencies.
fn load_order(
    roots: &[&str],
    mut depends: impl FnMut(&str) -> Result<Vec<String>, VmError>,
) -> Result<Vec<String>, VmError> {
    let mut order = Vec::new();
    let mut placed = BTreeSet::new();
    let mut visiting = BTreeSet::new();
    fn visit(
        name: &str,
        depends: &mut dyn FnMut(&str) -> Result<Vec<String>, VmError>,
        order: &mut Vec<String>,
        placed: &mut BTreeSet<String>,
        visiting: &mut BTreeSet<String>,
    ) -> Result<(), VmError> {
        if placed.contains(name) {
            return Ok(());
        }
        if !visiting.insert(name.to_owned()) {
            return Err(VmError::Packages(format!(
                "modules depend on each other in a circle through {name}"
            )));
        }
        for dependency in depends(name)? {
            visit(&dependency, depends, order, placed, visiting)?;
        }
        placed.insert(name.to_owned());
        order.push(name.to_owned());
        Ok(())
    }
    for root in roots {
        visit(root, &mut depends, &mut order, &mut placed, &mut visiting)?;
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_package_is_the_meta_package_dependency() {
        let text = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n";
        assert_eq!(
            parse_kernel_dependency(text).as_deref(),
            Some("linux-image-6.1.0-57-amd64")
        );
        assert_eq!(parse_kernel_dependency("linux-image-amd64\n"), None);
    }

    #[test]
    fn depends_are_read_from_the_modinfo_strings() {
        let bytes =
            b"\x7fELF...\0license=GPL\0depends=ib_uverbs,ib_core,udp-tunnel\0name=rdma_rxe\0";
        assert_eq!(
            module_depends(bytes),
            ["ib_uverbs", "ib_core", "udp_tunnel"]
        );
        assert_eq!(
            module_depends(b"\0depends=\0name=ib_core\0"),
            Vec::<String>::new()
        );
        assert_eq!(module_depends(b"no modinfo"), Vec::<String>::new());
    }

    #[test]
    fn each_module_loads_after_its_dependencies() {
        let graph: BTreeMap<&str, Vec<&str>> = BTreeMap::from([
            ("rdma_rxe", vec!["ib_uverbs", "ib_core", "udp_tunnel"]),
            ("ib_uverbs", vec!["ib_core"]),
            ("ib_core", vec![]),
            ("udp_tunnel", vec![]),
            ("virtio_net", vec!["virtio", "net_failover"]),
            ("net_failover", vec!["failover"]),
            ("failover", vec![]),
            ("virtio", vec![]),
        ]);
        let order = load_order(&["virtio_net", "rdma_rxe", "ib_uverbs"], |name| {
            Ok(graph[name].iter().map(|d| (*d).to_owned()).collect())
        })
        .unwrap();
        assert_eq!(
            order,
            [
                "virtio",
                "failover",
                "net_failover",
                "virtio_net",
                "ib_core",
                "ib_uverbs",
                "udp_tunnel",
                "rdma_rxe"
            ]
        );
        let circular = load_order(&["a"], |name| {
            Ok(vec![if name == "a" { "b" } else { "a" }.to_owned()])
        });
        assert!(circular.is_err());
    }
}
