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
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

#[test]
fn uninstall_dry_run_lists_the_steps() {
    let out = meshd(&["uninstall", "--dry-run"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
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
