//! The macOS LaunchDaemon: a property list generated from a serde struct
//! whose field names are launchd's keys exactly (see `launchd.plist(5)`).
//! Pure: paths in, XML text out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The job's label, and the plist's name under `/Library/LaunchDaemons`.
/// `launchctl kickstart -k system/io.meshd.agent` restarts it.
pub const LABEL: &str = "io.meshd.agent";
/// System daemons live here; launchd loads them at boot.
///
/// meshd's LaunchDaemon has no `UserName`, so it runs as root, unlike the
/// systemd unit (a dynamic user without capabilities). The reason is the
/// CPU and job watchers: they must see the CPU time of every process
/// (`screensharingd` runs as root, `sharingd` and the JACCL ranks as the
/// logged-in user), and macOS gives a process the task information of
/// another user's processes only when it runs as root (`proc_pidinfo`
/// answers EPERM; `top` and `ps` get it by being setuid root, and tools
/// running as an ordinary user read 0 % for those processes). Running as a
/// dedicated user would blind the watchers that name what loads a node.
/// Everything else meshd does on a Mac (`system_profiler`, `networksetup
/// -list…`, `ifconfig`, `netstat`, `rdma_ctl status`, the read-only verbs
/// queries, ports above 1024) is a read that an ordinary user may do as
/// far as is known; that has not been run on a Mac yet.
pub const DAEMONS_DIR: &str = "/Library/LaunchDaemons";
/// Where Console.app looks for system logs; launchd does not create the
/// directory, so install does.
pub const LOG_DIR: &str = "/Library/Logs/meshd";
/// meshd's log, which meshd writes and rotates itself (`--log-file`):
/// launchd never reopens its output files, so newsyslog cannot rotate them
/// (see `logging/rotate.rs`).
pub const LOG_FILE: &str = "/Library/Logs/meshd/meshd.log";
/// launchd's capture of stdout and stderr: only what comes before logging
/// starts (a bad argument) or bypasses it (a panic), a line or two per
/// start, throttled by [`THROTTLE_SECONDS`].
pub const STDERR_FILE: &str = "/Library/Logs/meshd/meshd.stderr.log";
pub const DEFAULT_CONFIG: &str = meshd_platform::paths::MACOS_CONFIG;
/// Seconds launchd waits before starting meshd again after it exits, so a
/// broken config does not spin.
pub const THROTTLE_SECONDS: u32 = 10;
/// Sockets to peers and links plus the files meshd reads stay far below
/// this; macOS's default soft limit for daemons is 256.
pub const NUMBER_OF_FILES: u64 = 8192;
/// launchd's default for daemons, spelled out so the tools meshd runs
/// (`system_profiler`, `networksetup`, `ifconfig`, `rdma_ctl`) are found
/// however launchd is configured.
pub const PATH: &str = "/usr/bin:/bin:/usr/sbin:/sbin";

/// Folders of a user's home that macOS guards with TCC (privacy
/// consent): a LaunchDaemon reading a file there fails with "Operation not
/// permitted", since launchd's jobs hold no consent for them.
const PROTECTED_FOLDERS: [&str; 3] = ["Documents", "Desktop", "Downloads"];

/// The protected home folder (`Documents`, `Desktop`, `Downloads`) that
/// `path` lies under, as `/Users/<name>/<folder>/…`; `None` elsewhere.
pub fn protected_folder(path: &Path) -> Option<&'static str> {
    let mut parts = path.components().map(|c| c.as_os_str());
    let (Some(root), Some(users), Some(_user), Some(folder), Some(_inside)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    if root != "/" || users != "Users" {
        return None;
    }
    PROTECTED_FOLDERS.into_iter().find(|f| folder == *f)
}

/// Where a file can vanish from under launchd, which runs meshd at boot
/// and again whenever it exits (`KeepAlive`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VanishingPlace {
    /// `/Volumes/<name>`: a removable or external volume (or a disk image),
    /// mounted only while attached, and at boot only after launchd may
    /// already have started its jobs.
    Volume(String),
    /// A folder macOS keeps in sync with a cloud (`~/Library/Mobile
    /// Documents`, iCloud Drive, its `com~apple~CloudDocs` included; or
    /// `~/Library/CloudStorage`, the File Provider folders of iCloud,
    /// Dropbox, OneDrive, Google Drive): its files can be evicted to the
    /// cloud to free space, and replaced by another Mac's copy.
    CloudSynced(&'static str),
}

impl VanishingPlace {
    /// "the volume /Volumes/Backup", "iCloud Drive (~/Library/Mobile Documents)".
    pub fn name(&self) -> String {
        match self {
            VanishingPlace::Volume(volume) => format!("the volume /Volumes/{volume}"),
            VanishingPlace::CloudSynced("Mobile Documents") => {
                "iCloud Drive (~/Library/Mobile Documents)".to_owned()
            }
            VanishingPlace::CloudSynced(folder) => {
                format!("a cloud-synced folder (~/Library/{folder})")
            }
        }
    }

    /// Why launchd can lose the file there.
    pub fn why(&self) -> &'static str {
        match self {
            VanishingPlace::Volume(_) => {
                "a volume under /Volumes is there only while it is attached and mounted, which at \
                 boot can be after launchd starts meshd, so launchd finds no file to run or read \
                 (and loses it when the volume is ejected)"
            }
            VanishingPlace::CloudSynced(_) => {
                "macOS may evict its files to the cloud to free space (Optimize Mac Storage), and \
                 launchd cannot run or read an evicted file; another Mac's change also syncs \
                 into it"
            }
        }
    }
}

/// The removable volume or cloud-synced folder `path` lies in; `None`
/// elsewhere. Judged on the path as given, like [`protected_folder`].
pub fn vanishing_place(path: &Path) -> Option<VanishingPlace> {
    let parts: Vec<&std::ffi::OsStr> = path.components().map(|c| c.as_os_str()).collect();
    match parts.as_slice() {
        [root, volumes, volume, _inside, ..] if *root == "/" && *volumes == "Volumes" => Some(
            VanishingPlace::Volume(volume.to_string_lossy().into_owned()),
        ),
        [root, users, _user, library, folder, _inside, ..]
            if *root == "/" && *users == "Users" && *library == "Library" =>
        {
            CLOUD_SYNCED_FOLDERS
                .into_iter()
                .find(|f| folder == f)
                .map(VanishingPlace::CloudSynced)
        }
        _ => None,
    }
}

/// The folders of `~/Library` that macOS syncs with a cloud: iCloud Drive,
/// and the File Provider folders of every cloud service.
const CLOUD_SYNCED_FOLDERS: [&str; 2] = ["Mobile Documents", "CloudStorage"];

/// The plist path for [`LABEL`].
pub fn plist_path() -> PathBuf {
    Path::new(DAEMONS_DIR).join(format!("{LABEL}.plist"))
}

/// A LaunchDaemon's property list, with launchd's exact key names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct LaunchDaemon {
    pub label: String,
    pub program_arguments: Vec<String>,
    pub run_at_load: bool,
    /// `true`: launchd restarts meshd whenever it exits, crash or not; it is
    /// stopped only by `launchctl bootout`.
    pub keep_alive: bool,
    pub throttle_interval: u32,
    pub standard_out_path: String,
    pub standard_error_path: String,
    pub soft_resource_limits: ResourceLimits,
    pub hard_resource_limits: ResourceLimits,
    /// `Interactive`: see [`LaunchDaemon::new`].
    pub process_type: String,
    pub environment_variables: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ResourceLimits {
    pub number_of_files: u64,
}

impl LaunchDaemon {
    /// meshd's LaunchDaemon: `<binary> run --config <config> --log-format json`.
    ///
    /// ProcessType is `Interactive`, not `Adaptive` or `Background`: meshd
    /// holds no XPC transactions, so an `Adaptive` job is treated as
    /// `Background`, which macOS runs with timer coalescing, low CPU and I/O
    /// priority and on efficiency cores. That skews probe send and reply
    /// times by milliseconds against microsecond RTTs and delays the 600 ms
    /// down verdict. `Interactive` only lifts those throttles; it does not
    /// raise meshd above the jobs (same default priority), and meshd's work
    /// is a few small packets per link per 100 ms — well under 1 % of a
    /// core — so the jobs lose nothing.
    pub fn new(binary: &Path, config: &Path) -> LaunchDaemon {
        LaunchDaemon {
            label: LABEL.to_owned(),
            program_arguments: vec![
                binary.display().to_string(),
                "run".to_owned(),
                "--config".to_owned(),
                config.display().to_string(),
                "--log-format".to_owned(),
                "json".to_owned(),
                "--log-file".to_owned(),
                LOG_FILE.to_owned(),
            ],
            run_at_load: true,
            keep_alive: true,
            throttle_interval: THROTTLE_SECONDS,
            standard_out_path: STDERR_FILE.to_owned(),
            standard_error_path: STDERR_FILE.to_owned(),
            soft_resource_limits: ResourceLimits {
                number_of_files: NUMBER_OF_FILES,
            },
            hard_resource_limits: ResourceLimits {
                number_of_files: NUMBER_OF_FILES,
            },
            process_type: "Interactive".to_owned(),
            environment_variables: BTreeMap::from([("PATH".to_owned(), PATH.to_owned())]),
        }
    }

    /// The XML property list, as launchd reads it.
    pub fn to_xml(&self) -> Result<String, plist::Error> {
        let mut out = Vec::new();
        plist::to_writer_xml(&mut out, self)?;
        let mut text = String::from_utf8_lossy(&out).into_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated() -> String {
        LaunchDaemon::new(
            Path::new("/usr/local/bin/meshd"),
            Path::new("/usr/local/etc/meshd/meshd.toml"),
        )
        .to_xml()
        .expect("plist serializes")
    }

    #[test]
    fn the_plist_has_exactly_launchds_keys_and_values() {
        let xml = generated();
        assert!(xml.starts_with("<?xml"), "{xml}");
        assert!(xml.contains("<!DOCTYPE plist"), "{xml}");
        let value = plist::Value::from_reader_xml(xml.as_bytes()).expect("parses back");
        let dict = value.as_dictionary().expect("a dictionary");
        let mut keys: Vec<&str> = dict.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "EnvironmentVariables",
                "HardResourceLimits",
                "KeepAlive",
                "Label",
                "ProcessType",
                "ProgramArguments",
                "RunAtLoad",
                "SoftResourceLimits",
                "StandardErrorPath",
                "StandardOutPath",
                "ThrottleInterval",
            ]
        );
        let string = |key: &str| dict.get(key).and_then(plist::Value::as_string);
        assert_eq!(string("Label"), Some("io.meshd.agent"));
        assert_eq!(string("ProcessType"), Some("Interactive"));
        assert_eq!(
            string("StandardOutPath"),
            Some("/Library/Logs/meshd/meshd.stderr.log")
        );
        assert_eq!(
            string("StandardErrorPath"),
            Some("/Library/Logs/meshd/meshd.stderr.log")
        );
        let args: Vec<&str> = dict
            .get("ProgramArguments")
            .and_then(plist::Value::as_array)
            .expect("ProgramArguments is an array")
            .iter()
            .map(|v| v.as_string().expect("strings"))
            .collect();
        assert_eq!(
            args,
            [
                "/usr/local/bin/meshd",
                "run",
                "--config",
                "/usr/local/etc/meshd/meshd.toml",
                "--log-format",
                "json",
                "--log-file",
                "/Library/Logs/meshd/meshd.log"
            ]
        );
        assert_eq!(dict.get("RunAtLoad"), Some(&plist::Value::Boolean(true)));
        assert_eq!(dict.get("KeepAlive"), Some(&plist::Value::Boolean(true)));
        assert_eq!(
            dict.get("ThrottleInterval")
                .and_then(plist::Value::as_unsigned_integer),
            Some(10)
        );
        for key in ["SoftResourceLimits", "HardResourceLimits"] {
            let limits = dict
                .get(key)
                .and_then(plist::Value::as_dictionary)
                .expect("limits are a dictionary");
            assert_eq!(limits.len(), 1, "{key}");
            assert_eq!(
                limits
                    .get("NumberOfFiles")
                    .and_then(plist::Value::as_unsigned_integer),
                Some(8192),
                "{key}"
            );
        }
        let env = dict
            .get("EnvironmentVariables")
            .and_then(plist::Value::as_dictionary)
            .expect("environment is a dictionary");
        assert_eq!(env.len(), 1);
        assert_eq!(
            env.get("PATH").and_then(plist::Value::as_string),
            Some("/usr/bin:/bin:/usr/sbin:/sbin")
        );
    }

    #[test]
    fn the_plist_round_trips_through_the_struct() {
        let daemon = LaunchDaemon::new(
            Path::new("/opt/meshd/bin/meshd"),
            Path::new("/etc/meshd.toml"),
        );
        let xml = daemon.to_xml().expect("serializes");
        let back: LaunchDaemon = plist::from_bytes(xml.as_bytes()).expect("deserializes");
        assert_eq!(back, daemon);
    }

    #[test]
    fn files_in_tcc_protected_home_folders_are_found() {
        for (path, folder) in [
            ("/Users/ops/Downloads/meshd", Some("Downloads")),
            (
                "/Users/ops/Desktop/meshd/target/release/meshd",
                Some("Desktop"),
            ),
            ("/Users/ops/Documents/meshd.toml", Some("Documents")),
            ("/Users/ops/bin/meshd", None),
            ("/Users/ops/Downloads", None),
            ("/usr/local/bin/meshd", None),
            ("/Volumes/x/Users/ops/Downloads/meshd", None),
            ("/Users/ops/src/Downloads/meshd", None),
        ] {
            assert_eq!(protected_folder(Path::new(path)), folder, "{path}");
        }
    }

    #[test]
    fn removable_volumes_and_cloud_synced_folders_are_found() {
        let volume = |name: &str| Some(VanishingPlace::Volume(name.to_owned()));
        let cloud = |folder| Some(VanishingPlace::CloudSynced(folder));
        for (path, place) in [
            ("/Volumes/Backup/meshd", volume("Backup")),
            (
                "/Volumes/Macintosh HD 2/usr/local/bin/meshd",
                volume("Macintosh HD 2"),
            ),
            (
                "/Users/ops/Library/Mobile Documents/com~apple~CloudDocs/meshd.toml",
                cloud("Mobile Documents"),
            ),
            (
                "/Users/ops/Library/Mobile Documents/iCloud~com~example/meshd",
                cloud("Mobile Documents"),
            ),
            (
                "/Users/ops/Library/CloudStorage/Dropbox/meshd",
                cloud("CloudStorage"),
            ),
            ("/Volumes/meshd", None),
            ("/System/Volumes/Data/usr/local/bin/meshd", None),
            ("/usr/local/bin/meshd", None),
            ("/Users/ops/Library/Application Support/meshd", None),
            ("/Users/ops/Library/Mobile Documents", None),
            ("/Users/ops/src/Volumes/x/meshd", None),
        ] {
            assert_eq!(vanishing_place(Path::new(path)), place, "{path}");
        }
        assert_eq!(
            VanishingPlace::CloudSynced("Mobile Documents").name(),
            "iCloud Drive (~/Library/Mobile Documents)"
        );
    }

    #[test]
    fn the_plist_is_named_after_the_label() {
        assert_eq!(
            plist_path(),
            Path::new("/Library/LaunchDaemons/io.meshd.agent.plist")
        );
    }
}
