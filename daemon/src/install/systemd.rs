//! The Linux systemd unit. Pure: paths in, unit text out.

use std::path::{Path, PathBuf};

use crate::transport::tls::TLS_CREDENTIALS;

/// The unit's name; `systemctl reload meshd` sends SIGHUP.
pub const UNIT: &str = "meshd.service";
/// Units installed by the administrator (not a package) live here.
pub const UNITS_DIR: &str = "/etc/systemd/system";
pub const DEFAULT_CONFIG: &str = meshd_platform::paths::LINUX_CONFIG;
/// Seconds before a restart after meshd exits, so a broken config does not
/// spin (it is retried forever: `StartLimitIntervalSec=0`).
pub const RESTART_SECONDS: u32 = 5;
pub const LIMIT_NOFILE: u64 = 8192;

/// The mesh's TLS files as the config names them (absolute), for the unit
/// to pass on as credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// A path `LoadCredential=` cannot carry as it is: relative, or with
    /// whitespace or a control character (the value would be split, or a
    /// line break would start a directive of its own).
    pub fn unfit(&self) -> Option<(&'static str, &Path)> {
        [
            ("tls.ca", &self.ca),
            ("tls.cert", &self.cert),
            ("tls.key", &self.key),
        ]
        .into_iter()
        .find(|(_, path)| {
            !path.is_absolute()
                || path
                    .to_string_lossy()
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control())
        })
        .map(|(key, path)| (key, path.as_path()))
    }
}

/// Directories `ProtectHome=yes` and `PrivateTmp=yes` hide from the
/// service: a binary or config there is not found when the unit starts.
pub const HIDDEN_FROM_SERVICE: &[&str] = &["/home", "/root", "/run/user", "/tmp", "/var/tmp"];

pub fn unit_path() -> PathBuf {
    Path::new(UNITS_DIR).join(UNIT)
}

/// Whether `path` lies in a directory the unit's sandbox hides.
pub fn hidden_from_service(path: &Path) -> Option<&'static str> {
    HIDDEN_FROM_SERVICE
        .iter()
        .copied()
        .find(|dir| path.starts_with(dir))
}

/// Quotes a path for an `ExecStart=` line when it needs it (systemd splits
/// on whitespace and treats `\`, `"`, `'`, `$` and `%` specially).
fn exec_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@,=".contains(c));
    if plain {
        return text;
    }
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            '%' => quoted.push_str("%%"),
            '$' => quoted.push_str("$$"),
            _ => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// meshd's unit: `<binary> run --config <config> --log-format json`, logs
/// to the journal, restarted whenever it exits, reloaded with SIGHUP.
///
/// Least privilege, from what meshd was measured to need (run as `nobody`
/// with every capability dropped, it reads the same facts, sees the same
/// processes' CPU and serves the same ports as under root):
///
/// - **No root, no capability.** A user of its own that systemd allocates
///   at start (`DynamicUser`, so install creates no account) with an empty
///   capability set. Its ports (7420, 9420, 7421) are above 1024; the CPU
///   and job watchers read `/proc/<pid>/stat` and `cmdline`, which every
///   user may read; interface state, counters and RDMA ports come from
///   sysfs (`/sys/class/net`, `/sys/class/infiniband`), readable by all;
///   it creates no network namespace and writes no file.
/// - **Kept, and why.** The network (peers and probes), with IP, Unix (name
///   resolution) and netlink sockets (`getifaddrs` asks the kernel over
///   netlink; so may the verbs library). `/proc` whole: the watchers must
///   see other users' processes (`ProtectProc`/`ProcSubset` would hide them
///   and `/proc/stat`). The verbs devices, `/dev/infiniband/uverbsN`, which
///   the read-only verbs queries open: `DevicePolicy=closed` with only
///   them allowed (`char-infiniband_verbs`); rdma-core usually makes them
///   world read-write, and a site that limits them to a group adds it with
///   `SupplementaryGroups=` in a drop-in.
/// - **Hidden.** The whole file system is read-only, `/home`, `/root` and
///   `/tmp` are hidden, other users map to `nobody`, system calls are
///   limited to what a service uses, and no memory is both writable and
///   executable. `systemd-analyze security` rates the unit 1.6 ("OK"; a
///   test holds it at or below 3.0).
///
/// With `tls`, the mesh's TLS files are passed as systemd credentials
/// (`LoadCredential=`, names in [`TLS_CREDENTIALS`]): systemd reads them as
/// root before the sandbox starts, so a key only root may read (0600, as
/// `meshctl certs` writes it) reaches the service user, wherever it lies.
pub fn unit(binary: &Path, config: &Path, tls: Option<&TlsFiles>) -> String {
    let credentials: String = tls
        .map(|files| {
            let mut lines = String::from(
                "# The mesh's TLS files, read by systemd as root and passed to meshd\n\
                 # (the key is root's alone; meshd reads $CREDENTIALS_DIRECTORY).\n",
            );
            for ((_, name), path) in
                TLS_CREDENTIALS
                    .iter()
                    .zip([&files.ca, &files.cert, &files.key])
            {
                lines.push_str(&format!(
                    "LoadCredential={name}:{}\n",
                    path.display().to_string().replace('%', "%%")
                ));
            }
            lines
        })
        .unwrap_or_default();
    format!(
        "\
# meshd: watches the RDMA / Thunderbolt mesh with its peers.
# Written by `meshd install`; `meshd uninstall` removes it.
[Unit]
Description=meshd mesh link monitor
Wants=network-online.target
After=network-online.target
# Keep restarting however often it fails; RestartSec spaces the attempts.
StartLimitIntervalSec=0

[Service]
Type=exec
ExecStart={binary} run --config {config} --log-format json
# meshd reloads its config on SIGHUP (`systemctl reload meshd`).
ExecReload=/bin/kill -HUP $MAINPID
Restart=always
RestartSec={RESTART_SECONDS}
LimitNOFILE={LIMIT_NOFILE}
{credentials}
# A user of its own with no capabilities: meshd needs no root (ports above
# 1024; /proc, sysfs and the verbs devices are readable without it).
DynamicUser=yes
CapabilityBoundingSet=
AmbientCapabilities=
NoNewPrivileges=yes
PrivateUsers=yes
UMask=0077
RemoveIPC=yes

ProtectSystem=strict
# The incident history (`meshctl history`): /var/lib/meshd, writable by the
# dynamic user alone and kept across restarts; meshd finds it through
# $STATE_DIRECTORY.
StateDirectory=meshd
StateDirectoryMode=0700
ProtectHome=yes
PrivateTmp=yes
PrivateMounts=yes
# Only the RDMA verbs devices, for the read-only verbs queries.
DevicePolicy=closed
DeviceAllow=char-infiniband_verbs rw
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
# IP for peers and probes, Unix for name resolution, netlink for interface
# addresses (getifaddrs) and RDMA queries.
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target
",
        binary = exec_word(binary),
        config = exec_word(config),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Key=value` lines of the unit, by section, in order.
    fn directives(text: &str) -> Vec<(String, String, String)> {
        let mut section = String::new();
        let mut out = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
                continue;
            }
            let (key, value) = line.split_once('=').expect("Key=value");
            out.push((section.clone(), key.to_owned(), value.to_owned()));
        }
        out
    }

    fn value(text: &str, section: &str, key: &str) -> Vec<String> {
        directives(text)
            .into_iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v)
            .collect()
    }

    #[test]
    fn the_unit_has_the_expected_directives() {
        let text = unit(
            Path::new("/usr/local/bin/meshd"),
            Path::new("/etc/meshd/meshd.toml"),
            None,
        );
        assert!(
            value(&text, "Service", "LoadCredential").is_empty(),
            "no TLS files, no credentials"
        );
        let one = |section: &str, key: &str| {
            let values = value(&text, section, key);
            assert_eq!(values.len(), 1, "{section}.{key}: {values:?}");
            values[0].clone()
        };
        assert_eq!(
            one("Service", "ExecStart"),
            "/usr/local/bin/meshd run --config /etc/meshd/meshd.toml --log-format json"
        );
        assert_eq!(one("Service", "ExecReload"), "/bin/kill -HUP $MAINPID");
        assert_eq!(one("Service", "Restart"), "always");
        assert_eq!(one("Service", "RestartSec"), "5");
        assert_eq!(one("Service", "Type"), "exec");
        assert_eq!(one("Service", "LimitNOFILE"), "8192");
        assert_eq!(one("Service", "NoNewPrivileges"), "yes");
        assert_eq!(one("Service", "DynamicUser"), "yes");
        assert_eq!(one("Service", "CapabilityBoundingSet"), "");
        assert_eq!(one("Service", "AmbientCapabilities"), "");
        assert!(value(&text, "Service", "User").is_empty(), "not root");
        assert_eq!(one("Service", "ProtectSystem"), "strict");
        assert_eq!(one("Service", "ProtectHome"), "yes");
        assert_eq!(one("Service", "PrivateTmp"), "yes");
        assert!(value(&text, "Service", "ReadWritePaths").is_empty());
        assert_eq!(one("Service", "StateDirectory"), "meshd");
        assert_eq!(one("Service", "StateDirectoryMode"), "0700");
        assert!(value(&text, "Service", "PrivateDevices").is_empty());
        assert_eq!(
            one("Service", "RestrictAddressFamilies"),
            "AF_UNIX AF_INET AF_INET6 AF_NETLINK"
        );
        assert_eq!(one("Unit", "StartLimitIntervalSec"), "0");
        assert_eq!(one("Install", "WantedBy"), "multi-user.target");
    }

    #[test]
    fn odd_paths_are_quoted_for_exec_start() {
        let text = unit(
            Path::new("/opt/mesh d/meshd"),
            Path::new("/etc/meshd/100%.toml"),
            None,
        );
        assert_eq!(
            value(&text, "Service", "ExecStart"),
            ["\"/opt/mesh d/meshd\" run --config \"/etc/meshd/100%%.toml\" --log-format json"]
        );
    }

    #[test]
    fn home_and_tmp_are_hidden_from_the_service() {
        assert_eq!(
            hidden_from_service(Path::new("/home/ops/meshd")),
            Some("/home")
        );
        assert_eq!(hidden_from_service(Path::new("/tmp/x/meshd")), Some("/tmp"));
        assert_eq!(hidden_from_service(Path::new("/usr/local/bin/meshd")), None);
        assert_eq!(hidden_from_service(Path::new("/homestead/meshd")), None);
    }

    /// `systemd-analyze verify` on the unit, with a real executable at the
    /// ExecStart path. Skipped (with a reason) where systemd-analyze is
    /// missing, except in CI.
    #[test]
    fn the_unit_passes_systemd_analyze_verify() {
        let Some(analyze) = systemd_analyze() else {
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let binary = dir.path().join("meshd");
        std::fs::write(&binary, "#!/bin/sh\nexit 0\n").expect("write binary");
        set_executable(&binary);
        let config = dir.path().join("meshd.toml");
        std::fs::write(&config, "").expect("write config");
        // With credentials: systemd-analyze checks LoadCredential= too.
        let tls = TlsFiles {
            ca: dir.path().join("ca.pem"),
            cert: dir.path().join("node.pem"),
            key: dir.path().join("node-key.pem"),
        };
        for file in [&tls.ca, &tls.cert, &tls.key] {
            std::fs::write(file, "").expect("write tls file");
        }
        let unit_file = dir.path().join(UNIT);
        std::fs::write(&unit_file, unit(&binary, &config, Some(&tls))).expect("write unit");
        let out = verify(analyze, &unit_file);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "systemd-analyze verify {}: {}\n{}",
            unit_file.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `systemd-analyze security --offline=yes`: the unit's exposure, 0
    /// (locked down) to 10 (unprotected), is at most 3.0. Skipped (with a
    /// reason) where systemd-analyze is missing, except in CI.
    #[test]
    fn the_unit_exposure_is_at_most_three() {
        let Some(analyze) = systemd_analyze() else {
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let unit_file = dir.path().join(UNIT);
        std::fs::write(
            &unit_file,
            unit(
                Path::new("/bin/true"),
                Path::new("/etc/meshd/meshd.toml"),
                Some(&TlsFiles {
                    ca: "/etc/meshd/tls/ca.pem".into(),
                    cert: "/etc/meshd/tls/a.pem".into(),
                    key: "/etc/meshd/tls/a-key.pem".into(),
                }),
            ),
        )
        .expect("write unit");
        let out = std::process::Command::new(analyze)
            .args(["security", "--offline=yes", "--no-pager"])
            .arg(&unit_file)
            .env("SYSTEMD_LOG_LEVEL", "warning")
            .output()
            .expect("systemd-analyze runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let exposure = text
            .lines()
            .find_map(|l| l.split_once("Overall exposure level for "))
            .and_then(|(_, rest)| rest.split_once(": "))
            .and_then(|(_, level)| level.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or_else(|| {
                panic!(
                    "no exposure level in:\n{text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        eprintln!("systemd-analyze security: exposure {exposure}");
        assert!(exposure <= 3.0, "exposure {exposure} above 3.0:\n{text}");
    }

    /// systemd-analyze, or `None` (the caller skips, saying why) where it is
    /// not installed — which fails under `CI=true`.
    fn systemd_analyze() -> Option<&'static Path> {
        let found = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists());
        if found.is_none() {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "systemd-analyze is missing in CI"
            );
            eprintln!("skipped: systemd-analyze is not installed");
        }
        found
    }

    fn verify(analyze: &Path, unit_file: &Path) -> std::process::Output {
        std::process::Command::new(analyze)
            .arg("verify")
            .arg(unit_file)
            // No user manager in a container or CI: verify against the
            // system manager's settings only.
            .env("SYSTEMD_LOG_LEVEL", "warning")
            .output()
            .expect("systemd-analyze runs")
    }

    fn set_executable(path: &Path) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        #[cfg(not(unix))]
        let _ = path;
    }
}
