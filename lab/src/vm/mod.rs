//! Test VMs with a real RDMA device: Debian's kernel booted under
//! `qemu-system-x86_64` with a busybox initramfs, Soft-RoCE (`rdma_rxe`)
//! on the "cable" NIC, and this build's meshd and meshctl inside. One VM,
//! or two joined by a cable and a management network (qemu `dgram`
//! netdevs over unix sockets, so no frame leaves qemu); `set_link`
//! through the qemu monitor pulls the cable.
//!
//! Everything comes from Debian packages fetched at test time into a
//! cache (`packages`); the tests talk to a VM only through qemu's own
//! channels: its monitor and a command channel on a serial port
//! (`agent`). Every step has a deadline, and every VM is killed and its
//! files removed when its [`Vms`] is dropped, also when a test fails.

pub mod agent;
pub mod cpio;
pub mod image;
pub mod mesh;
pub mod packages;
pub mod qemu;
pub mod rtt;

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use agent::Agent;
pub use agent::Output;
use packages::Packages;
use qemu::Qemu;

use crate::Binaries;
use crate::command::CommandError;

/// The cable's addresses: VM `a` is .1, `b` is .2.
pub const CABLE_ADDRESSES: [&str; 2] = ["10.0.0.1", "10.0.0.2"];
pub const CABLE_PREFIX: u8 = 30;
/// The management network's (meshd's gRPC between the VMs).
pub const MGMT_ADDRESSES: [&str; 2] = ["10.0.1.1", "10.0.1.2"];
/// The guest's cable interface, which carries rxe0.
pub const CABLE_IFACE: &str = "eth0";
pub const MGMT_IFACE: &str = "mgmt0";
/// The monitor's names of the two NICs (for [`Vm::set_link`]).
pub const CABLE_NIC: &str = "cable";
pub const MGMT_NIC: &str = "mgmt";

/// A TCG boot takes about 12 s on an idle core; CI's cores are shared.
const BOOT_LIMIT: Duration = Duration::from_secs(240);
/// A KVM guest boots in a second or two; one that has not answered by
/// then never will (nested virtualisation that stalls).
const KVM_BOOT_LIMIT: Duration = Duration::from_secs(30);
/// The tail of the console log quoted when a VM does not come up.
const CONSOLE_TAIL: usize = 3000;
const MEMORY: &str = "768M";

#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error(transparent)]
    Command(CommandError),
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("VM packages: {0}")]
    Packages(String),
    #[error("VM {vm}: cannot start qemu-system-x86_64: {source}")]
    Start { vm: String, source: std::io::Error },
    #[error("VM {vm}: monitor: {what}")]
    Monitor { vm: String, what: String },
    #[error("VM {vm}: command channel: {what}")]
    Agent { vm: String, what: String },
    #[error("VM {vm}: no answer in time to: {script}")]
    AgentTimeout { vm: String, script: String },
    #[error("VM {vm} did not boot: {what}\n--- console (tail) ---\n{console}")]
    Boot {
        vm: String,
        what: String,
        console: String,
    },
    #[error("VM {vm}: `{script}` failed ({code}):\n{output}")]
    Failed {
        vm: String,
        script: String,
        code: i32,
        output: String,
    },
}

impl VmError {
    fn file(path: &Path) -> impl FnOnce(std::io::Error) -> VmError + '_ {
        move |source| VmError::File {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Why VMs cannot run on this host, if they cannot: qemu and the Debian
/// package tools must be there (root is not needed).
pub fn missing_prerequisite() -> Option<String> {
    let missing: Vec<&str> = [
        "qemu-system-x86_64",
        "apt-get",
        "apt-cache",
        "dpkg-deb",
        "ldd",
    ]
    .into_iter()
    .filter(|tool| !on_path(tool))
    .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "not installed: {} (Debian: apt-get install qemu-system-x86)",
            missing.join(", ")
        )
    })
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// The package cache beside a cargo profile directory: `target/debug`
/// → `target/vm-cache`.
pub fn cache_beside(profile_dir: &Path) -> PathBuf {
    profile_dir.parent().unwrap_or(profile_dir).join("vm-cache")
}

/// How qemu runs the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    fn arg(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    /// meshd's TLS (graviola) needs AVX2, AES-NI, ADX, BMI and PCLMULQDQ:
    /// the host's CPU under KVM, and under TCG the "max" model, which
    /// emulates them (QEMU 7.2 and later), not the default qemu64.
    fn cpu_model(self) -> &'static str {
        match self {
            Accel::Kvm => "host",
            Accel::Tcg => "max",
        }
    }

    fn boot_limit(self) -> Duration {
        match self {
            Accel::Kvm => KVM_BOOT_LIMIT,
            Accel::Tcg => BOOT_LIMIT,
        }
    }
}

/// `MESHD_VM_ACCEL`: `kvm`, `tcg`, or `auto` (the default): KVM when
/// `/dev/kvm` can be opened and it has not failed to boot a guest on this
/// host kernel before (recorded in the cache), else TCG.
fn chosen_accel(cache: &Path) -> Result<(Accel, bool), VmError> {
    match std::env::var("MESHD_VM_ACCEL").as_deref() {
        Ok("kvm") => Ok((Accel::Kvm, false)),
        Ok("tcg") => Ok((Accel::Tcg, false)),
        Ok("auto") | Err(_) => {
            let usable = OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/kvm")
                .is_ok()
                && !kvm_failed_before(cache);
            Ok((if usable { Accel::Kvm } else { Accel::Tcg }, true))
        }
        Ok(other) => Err(VmError::Packages(format!(
            "MESHD_VM_ACCEL={other:?}: use kvm, tcg or auto"
        ))),
    }
}

fn kvm_record(cache: &Path) -> PathBuf {
    cache.join("kvm-does-not-boot")
}

fn host_kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn kvm_failed_before(cache: &Path) -> bool {
    std::fs::read_to_string(kvm_record(cache)).is_ok_and(|text| text.trim() == host_kernel())
}

/// The kernel and initramfs VMs boot, built for one set of binaries.
#[derive(Debug)]
pub struct Image {
    pub packages: Packages,
    cache: PathBuf,
    initramfs: PathBuf,
    _dir: tempfile::TempDir,
}

impl Image {
    /// Fetches the packages into `cache` (unless there already) and writes
    /// the initramfs with `binaries`, and each host file of `extra` at its
    /// guest path, to a temporary file.
    pub fn build(
        cache: &Path,
        binaries: &Binaries,
        extra: &[(String, PathBuf)],
    ) -> Result<Self, VmError> {
        std::fs::create_dir_all(cache).map_err(VmError::file(cache))?;
        let packages = packages::prepare(cache)?;
        let dir = tempfile::Builder::new()
            .prefix("meshvm-image")
            .tempdir()
            .map_err(VmError::file(Path::new("/tmp")))?;
        let initramfs = dir.path().join("initramfs.cpio");
        image::build(&packages, binaries, extra, &initramfs)?;
        Ok(Self {
            packages,
            cache: cache.to_path_buf(),
            initramfs,
            _dir: dir,
        })
    }
}

/// One NIC: its name and address in the guest, and the two unix sockets
/// of its qemu `dgram` netdev (this end's and the far end's).
#[derive(Debug, Clone)]
struct Nic {
    id: &'static str,
    iface: &'static str,
    mac: String,
    cidr: String,
    local: PathBuf,
    remote: PathBuf,
}

impl Nic {
    /// The qemu netdev over the two sockets, and the virtio NIC on it.
    fn qemu_args(&self) -> [String; 4] {
        [
            "-netdev".to_owned(),
            format!(
                "dgram,id={id}-net,local.type=unix,local.path={},remote.type=unix,remote.path={}",
                self.local.display(),
                self.remote.display(),
                id = self.id
            ),
            "-device".to_owned(),
            format!(
                "virtio-net-pci,netdev={id}-net,id={id},mac={},romfile=",
                self.mac,
                id = self.id
            ),
        ]
    }

    /// The word of the kernel command line (with its leading space) that
    /// tells the guest which interface to give this NIC, and its address.
    fn kernel_arg(&self) -> String {
        format!(" meshvm.nic={},{},{}", self.mac, self.iface, self.cidr)
    }
}

/// A running VM.
#[derive(Debug)]
pub struct Vm {
    pub name: String,
    qemu: Qemu,
    agent: Agent,
    console: PathBuf,
}

impl Vm {
    fn boot(image: &Image, name: &str, nics: &[Nic], dir: &Path) -> Result<Self, VmError> {
        let (accel, automatic) = chosen_accel(&image.cache)?;
        match Self::boot_with(image, name, nics, dir, accel) {
            Err(VmError::Boot { .. }) if accel == Accel::Kvm && automatic => {
                // Recorded so that later runs on this host go to TCG at once.
                let _ = std::fs::write(kvm_record(&image.cache), host_kernel());
                Self::boot_with(image, name, nics, dir, Accel::Tcg)
            }
            other => other,
        }
    }

    fn boot_with(
        image: &Image,
        name: &str,
        nics: &[Nic],
        dir: &Path,
        accel: Accel,
    ) -> Result<Self, VmError> {
        let console = dir.join(format!("{name}-console.log"));
        let agent_socket = dir.join(format!("{name}-agent.sock"));
        let qmp = dir.join(format!("{name}-qmp.sock"));
        let args = qemu_args(image, name, nics, accel, &console, &agent_socket);
        let stderr_log = dir.join(format!("{name}-qemu.log"));
        let mut qemu = Qemu::start(name, &args, &qmp, &stderr_log)?;
        let limit = accel.boot_limit();
        let deadline = Instant::now() + limit;
        let booted = Agent::connect(name, &agent_socket, deadline)
            .and_then(|mut agent| agent.wait_ready(deadline).map(|()| agent));
        match booted {
            Ok(agent) => Ok(Self {
                name: name.to_owned(),
                qemu,
                agent,
                console,
            }),
            Err(err) => {
                let what = match qemu.exited() {
                    Some(status) => format!(
                        "qemu exited ({status}): {}",
                        std::fs::read_to_string(&stderr_log)
                            .unwrap_or_default()
                            .trim()
                    ),
                    None => format!("{err} (accel {}, {limit:?})", accel.arg()),
                };
                Err(VmError::Boot {
                    vm: name.to_owned(),
                    what,
                    console: tail(&std::fs::read_to_string(&console).unwrap_or_default()),
                })
            }
        }
    }

    /// Runs `script` in the guest; any exit code is returned.
    pub fn exec(&mut self, script: &str, limit: Duration) -> Result<Output, VmError> {
        self.agent.exec(script, limit)
    }

    /// Runs `script` in the guest (60 s at most), which must succeed; its
    /// output.
    pub fn run(&mut self, script: &str) -> Result<String, VmError> {
        let output = self.exec(script, Duration::from_secs(60))?;
        if output.success() {
            Ok(output.text)
        } else {
            Err(VmError::Failed {
                vm: self.name.clone(),
                script: script.to_owned(),
                code: output.code,
                output: output.text,
            })
        }
    }

    /// Plugs (`up`) or pulls the cable of NIC `nic` ([`CABLE_NIC`],
    /// [`MGMT_NIC`]): the guest sees its carrier come and go.
    pub fn set_link(&self, nic: &str, up: bool) -> Result<(), VmError> {
        self.qemu
            .command("set_link", json!({"name": nic, "up": up}))
            .map(drop)
    }

    /// The end of the guest's console (kernel messages), for failure
    /// messages.
    pub fn console_tail(&self) -> String {
        tail(&std::fs::read_to_string(&self.console).unwrap_or_default())
    }

    /// Stops the VM now (the monitor's `quit`, then a kill).
    pub fn stop(&mut self) {
        self.qemu.stop();
    }
}

/// qemu's command line for VM `name`: the machine, the kernel and
/// initramfs, the console and the command channel on serial ports, and the
/// NICs, which the kernel command line names to the guest.
fn qemu_args(
    image: &Image,
    name: &str,
    nics: &[Nic],
    accel: Accel,
    console: &Path,
    agent_socket: &Path,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "-accel",
        accel.arg(),
        "-m",
        MEMORY,
        "-smp",
        "1",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-cpu",
        accel.cpu_model(),
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend([
        "-kernel".to_owned(),
        image.packages.kernel().display().to_string(),
        "-initrd".to_owned(),
        image.initramfs.display().to_string(),
        "-serial".to_owned(),
        format!("file:{}", console.display()),
        "-chardev".to_owned(),
        format!(
            "socket,id=agent,path={},server=on,wait=off",
            agent_socket.display()
        ),
        "-serial".to_owned(),
        "chardev:agent".to_owned(),
    ]);
    let mut append = format!("console=ttyS0 panic=-1 quiet meshvm.hostname={name}");
    for nic in nics {
        args.extend(nic.qemu_args());
        append.push_str(&nic.kernel_arg());
    }
    args.extend(["-append".to_owned(), append]);
    args
}

fn tail(text: &str) -> String {
    let start = text.len().saturating_sub(CONSOLE_TAIL);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_owned()
}

/// Running VMs and their sockets and logs; dropping it kills every VM and
/// removes the files.
#[derive(Debug)]
pub struct Vms {
    // Before `dir`: the VMs are killed before their files go.
    vms: Vec<Vm>,
    dir: tempfile::TempDir,
}

impl Vms {
    /// VM `a` alone; its cable leads nowhere (a socket nobody binds), so
    /// its carrier is up and nothing answers on it.
    pub fn one(image: &Image) -> Result<Self, VmError> {
        Self::boot(image, 1)
    }

    /// VMs `a` and `b`, joined by a cable (`eth0`, 10.0.0.1–2/30, with
    /// rxe0 once a test adds it) and a management network (`mgmt0`,
    /// 10.0.1.1–2/24).
    pub fn pair(image: &Image) -> Result<Self, VmError> {
        Self::boot(image, 2)
    }

    fn boot(image: &Image, count: usize) -> Result<Self, VmError> {
        let dir = tempfile::Builder::new()
            .prefix("meshvm")
            .tempdir()
            .map_err(VmError::file(Path::new("/tmp")))?;
        let mut vms = Self {
            vms: Vec::new(),
            dir,
        };
        for index in 0..count {
            let name = ["a", "b"][index];
            let other = ["a", "b"][1 - index];
            let socket = |vm: &str, net: &str| vms.dir.path().join(format!("{vm}-{net}.sock"));
            let nics = [
                Nic {
                    id: CABLE_NIC,
                    iface: CABLE_IFACE,
                    mac: format!("52:54:00:6d:00:0{}", index + 1),
                    cidr: format!("{}/{CABLE_PREFIX}", CABLE_ADDRESSES[index]),
                    local: socket(name, CABLE_NIC),
                    remote: socket(other, CABLE_NIC),
                },
                Nic {
                    id: MGMT_NIC,
                    iface: MGMT_IFACE,
                    mac: format!("52:54:00:6d:01:0{}", index + 1),
                    cidr: format!("{}/24", MGMT_ADDRESSES[index]),
                    local: socket(name, MGMT_NIC),
                    remote: socket(other, MGMT_NIC),
                },
            ];
            let vm = Vm::boot(image, name, &nics, vms.dir.path())?;
            vms.vms.push(vm);
        }
        Ok(vms)
    }

    /// VM `name` ("a", "b").
    pub fn vm(&mut self, name: &str) -> &mut Vm {
        self.vms
            .iter_mut()
            .find(|vm| vm.name == name)
            .unwrap_or_else(|| panic!("no VM {name}"))
    }

    /// Where the VMs' console logs and sockets are.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl From<CommandError> for VmError {
    fn from(err: CommandError) -> Self {
        VmError::Command(err)
    }
}
