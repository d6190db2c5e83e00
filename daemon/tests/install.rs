//! `meshd install --dry-run` and `meshd uninstall --dry-run` as an operator
//! runs them: the full unit text, the config path, the commands, exit 0,
//! and nothing changed. Linux only: the macOS plan is covered by the unit
//! tests under a temporary root.
#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Output};

fn meshd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshd"))
        .args(args)
        .output()
        .expect("meshd runs")
}

/// The text between `--- PATH ---` and `--- end of PATH ---`.
fn block<'a>(stdout: &'a str, path: &str) -> &'a str {
    let start = format!("--- {path} ---\n");
    let end = format!("--- end of {path} ---\n");
    let from = stdout.find(&start).expect("block start") + start.len();
    let to = stdout[from..].find(&end).expect("block end") + from;
    &stdout[from..to]
}

#[test]
fn install_dry_run_prints_a_valid_unit_on_linux() {
    // /bin/sh stands in for the meshd binary: systemd-analyze checks that
    // ExecStart names an executable, and the test binary's own path may lie
    // under /home or /root, which install refuses (ProtectHome).
    let out = meshd(&[
        "install",
        "--dry-run",
        "--binary",
        "/bin/sh",
        "--config",
        "/etc/meshd/test-install.toml",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The dry run makes every check the real run makes, and exits as it
    // would: on a host without systemd (a container, this CI), it refuses.
    if systemd_booted() {
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        assert!(
            stdout.contains("every check the real run makes passes"),
            "{stdout}"
        );
    } else {
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert_eq!(
            stderr.lines().collect::<Vec<_>>(),
            [
                "meshd: the real run would refuse: meshd install needs systemd, and this host was \
              not booted with it (/run/systemd/system is missing); run `meshd run --config \
              FILE` under this host's own service manager instead"
            ],
            "{stderr}"
        );
    }
    assert!(!Path::new("/etc/meshd/test-install.toml").exists());
    assert!(
        stdout.contains("config /etc/meshd/test-install.toml: would be created"),
        "{stdout}"
    );
    assert!(
        stdout.contains("3. run: systemctl daemon-reload\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("4. run: systemctl enable meshd.service\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("5. run: systemctl restart meshd.service\n"),
        "{stdout}"
    );
    let unit = block(&stdout, "/etc/systemd/system/meshd.service");
    assert!(
        unit.contains(
            "\nExecStart=/bin/sh run --config /etc/meshd/test-install.toml --log-format json\n"
        ),
        "{unit}"
    );

    let analyze = Path::new("/usr/bin/systemd-analyze");
    if !analyze.exists() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "systemd-analyze is missing in CI"
        );
        eprintln!("skipped systemd-analyze verify: it is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let unit_file = dir.path().join("meshd.service");
    std::fs::write(&unit_file, unit).expect("write unit");
    let verify = Command::new(analyze)
        .arg("verify")
        .arg(&unit_file)
        .output()
        .expect("systemd-analyze runs");
    assert!(
        verify.status.success() && verify.stderr.is_empty(),
        "systemd-analyze verify: {}\n{}",
        verify.status,
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// What `sd_booted(3)` tests: the real install's and the dry run's check.
fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

#[test]
fn uninstall_dry_run_lists_the_steps() {
    let out = meshd(&["uninstall", "--dry-run"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let expected = if systemd_booted() { 0 } else { 1 };
    assert_eq!(out.status.code(), Some(expected), "{stdout}");
    assert!(
        stdout.contains("1. run: systemctl disable --now meshd.service"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2. remove /etc/systemd/system/meshd.service: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("3. run: systemctl daemon-reload"),
        "{stdout}"
    );
    assert!(stdout.contains("and the logs are kept"), "{stdout}");
}

#[test]
fn install_refuses_a_binary_the_unit_would_hide() {
    let out = meshd(&["install", "--dry-run", "--binary", "/home/ops/meshd"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("meshd: the binary /home/ops/meshd is under /home"),
        "{stderr}"
    );
}

#[test]
fn install_dry_run_names_a_binary_that_is_not_there() {
    let out = meshd(&[
        "install",
        "--dry-run",
        "--binary",
        "/usr/local/bin/meshd-not-installed",
        "--config",
        "/etc/meshd/test-install.toml",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "meshd: the real run would refuse: the binary /usr/local/bin/meshd-not-installed is not a file"
        ),
        "{stderr}"
    );
}

/// `meshd install --dry-run` with `text` as the existing config at
/// `config` (under /etc/meshd, where install accepts it), removed after;
/// `None`, with the reason, where writing there needs root (never in CI).
fn dry_run_with_config(config: &Path, text: &str) -> Option<Output> {
    let written = config
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(config, text));
    if written.is_err() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI runs as root"
        );
        eprintln!("skipped: writing {} needs root", config.display());
        return None;
    }
    let out = meshd(&[
        "install",
        "--dry-run",
        "--binary",
        "/bin/sh",
        "--config",
        config.to_str().expect("utf-8"),
    ]);
    std::fs::remove_file(config).expect("remove the test config");
    Some(out)
}

#[test]
fn install_refuses_a_config_meshd_would_refuse() {
    let config = Path::new("/etc/meshd/test-install-invalid.toml");
    let Some(out) = dry_run_with_config(config, "[node]\nid = \"a\"\nbogus = 1\n") else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "meshd: the config {} is not valid, and the service would not start with it: ",
            config.display()
        )) && stderr.contains("bogus"),
        "{stderr}"
    );
}

#[test]
fn install_passes_the_configs_tls_files_to_the_unit_as_credentials() {
    let config = Path::new("/etc/meshd/test-install-tls.toml");
    let text = "[node]\nid = \"a\"\n[listen]\nmesh = \"127.0.0.1:7430\"\n\
                [[peers]]\nid = \"b\"\naddress = \"127.0.0.1:7520\"\n\
                [tls]\nca = \"tls/ca.pem\"\ncert = \"tls/a.pem\"\nkey = \"tls/a-key.pem\"\n";
    let Some(out) = dry_run_with_config(config, text) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let unit = block(&stdout, "/etc/systemd/system/meshd.service");
    for line in [
        "\nLoadCredential=meshd-tls-ca:/etc/meshd/tls/ca.pem\n",
        "\nLoadCredential=meshd-tls-cert:/etc/meshd/tls/a.pem\n",
        "\nLoadCredential=meshd-tls-key:/etc/meshd/tls/a-key.pem\n",
    ] {
        assert!(unit.contains(line), "{line}: {unit}");
    }
}
