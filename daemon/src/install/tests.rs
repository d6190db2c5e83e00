//! Install and uninstall under a temporary root, with recorded commands.

use std::path::Path;

use super::*;
use crate::config::Config;

fn options(platform: Platform) -> InstallOptions {
    InstallOptions {
        binary: PathBuf::from("/usr/local/bin/meshd"),
        config: platform.default_config().to_owned(),
        node_id: NodeId::from_hostname("studio-1.local"),
    }
}

fn install(platform: Platform) -> Plan {
    Plan::install(platform, &options(platform)).expect("plan")
}

fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(under(root, Path::new(path))).expect("file is there")
}

#[test]
fn linux_install_writes_the_unit_and_config_and_runs_systemctl() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut runner = RecordingRunner::default();
    let done = install(Platform::Linux)
        .apply(root.path(), &mut runner)
        .expect("applies");
    let unit = read(root.path(), "/etc/systemd/system/meshd.service");
    assert_eq!(
        unit,
        systemd::unit(
            Path::new("/usr/local/bin/meshd"),
            Path::new("/etc/meshd/meshd.toml")
        )
    );
    let config = read(root.path(), "/etc/meshd/meshd.toml");
    let parsed = Config::parse(&config, "meshd.toml", "elsewhere").expect("valid config");
    assert_eq!(parsed.node.id.as_str(), "studio-1");
    assert_eq!(
        runner.commands,
        [
            "systemctl daemon-reload",
            "systemctl enable meshd.service",
            "systemctl restart meshd.service",
        ]
    );
    assert!(
        done.iter()
            .any(|line| line == "created the config /etc/meshd/meshd.toml (a one-node mesh: add the peers and links)"),
        "{done:?}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for path in ["/etc/systemd/system/meshd.service", "/etc/meshd/meshd.toml"] {
            let mode = std::fs::metadata(under(root.path(), Path::new(path)))
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o644, "{path}");
        }
    }
}

#[test]
fn macos_install_writes_the_plist_log_dir_and_config_and_runs_launchctl() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut runner = RecordingRunner::default();
    install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect("applies");
    let xml = read(root.path(), "/Library/LaunchDaemons/io.meshd.agent.plist");
    let daemon: launchd::LaunchDaemon = plist::from_bytes(xml.as_bytes()).expect("plist");
    assert_eq!(
        daemon,
        launchd::LaunchDaemon::new(
            Path::new("/usr/local/bin/meshd"),
            Path::new("/usr/local/etc/meshd/meshd.toml")
        )
    );
    assert!(under(root.path(), Path::new("/Library/Logs/meshd")).is_dir());
    let config = read(root.path(), "/usr/local/etc/meshd/meshd.toml");
    Config::parse(&config, "meshd.toml", "x").expect("valid config");
    assert_eq!(
        runner.commands,
        [
            "launchctl bootout system/io.meshd.agent",
            "launchctl enable system/io.meshd.agent",
            "launchctl bootstrap system /Library/LaunchDaemons/io.meshd.agent.plist",
        ]
    );
}

#[test]
fn a_second_install_keeps_the_existing_config_byte_for_byte() {
    for platform in [Platform::Linux, Platform::MacOs] {
        let root = tempfile::tempdir().expect("tempdir");
        let config = under(root.path(), platform.default_config());
        std::fs::create_dir_all(config.parent().expect("parent")).expect("mkdir");
        let mine = b"[node]\nid = \"mine\"\n# hand-edited\n\xff not even utf-8\n";
        std::fs::write(&config, mine).expect("write");
        let plan = install(platform);
        let done = plan
            .apply(root.path(), &mut RecordingRunner::default())
            .expect("applies");
        assert_eq!(std::fs::read(&config).expect("read"), mine);
        assert!(
            done.iter()
                .any(|l| l.contains("it exists, and install never overwrites it")),
            "{done:?}"
        );
        // And again, as a reinstall: the service file is replaced, the
        // config still kept.
        plan.apply(root.path(), &mut RecordingRunner::default())
            .expect("applies again");
        assert_eq!(std::fs::read(&config).expect("read"), mine);
        assert!(under(root.path(), &platform.service_file()).is_file());
    }
}

#[test]
fn uninstall_removes_the_service_file_but_never_the_config() {
    for platform in [Platform::Linux, Platform::MacOs] {
        let root = tempfile::tempdir().expect("tempdir");
        install(platform)
            .apply(root.path(), &mut RecordingRunner::default())
            .expect("install");
        let config_before =
            std::fs::read(under(root.path(), platform.default_config())).expect("config written");
        let mut runner = RecordingRunner::default();
        let done = Plan::uninstall(platform)
            .apply(root.path(), &mut runner)
            .expect("uninstall");
        assert!(!under(root.path(), &platform.service_file()).exists());
        assert_eq!(
            std::fs::read(under(root.path(), platform.default_config())).expect("config kept"),
            config_before
        );
        let expected: &[&str] = match platform {
            Platform::Linux => &[
                "systemctl disable --now meshd.service",
                "systemctl daemon-reload",
            ],
            Platform::MacOs => &["launchctl bootout system/io.meshd.agent"],
        };
        assert_eq!(runner.commands, expected);
        assert!(
            done.last()
                .is_some_and(|l| l.starts_with("kept the config")),
            "{done:?}"
        );
        // Uninstalling again: nothing to remove, nothing fails.
        Plan::uninstall(platform)
            .apply(root.path(), &mut RecordingRunner::default())
            .expect("second uninstall");
    }
}

#[test]
fn dry_run_writes_nothing_and_prints_the_plan() {
    let root = tempfile::tempdir().expect("tempdir");
    let plan = install(Platform::Linux);
    let text = plan.describe(root.path());
    assert_eq!(
        std::fs::read_dir(root.path()).expect("read_dir").count(),
        0,
        "describe wrote something"
    );
    assert!(text.contains("dry run: nothing is changed"), "{text}");
    assert!(
        text.contains("config /etc/meshd/meshd.toml: would be created"),
        "{text}"
    );
    let unit = systemd::unit(
        Path::new("/usr/local/bin/meshd"),
        Path::new("/etc/meshd/meshd.toml"),
    );
    assert!(
        text.contains(&format!(
            "--- /etc/systemd/system/meshd.service ---\n{unit}--- end of /etc/systemd/system/meshd.service ---\n"
        )),
        "{text}"
    );
    for command in [
        "run: systemctl daemon-reload",
        "run: systemctl enable meshd.service",
        "run: systemctl restart meshd.service",
    ] {
        assert!(text.contains(command), "{command}: {text}");
    }

    // With a config in place, it says so and does not print a new one.
    let config = under(root.path(), Path::new("/etc/meshd/meshd.toml"));
    std::fs::create_dir_all(config.parent().expect("parent")).expect("mkdir");
    std::fs::write(&config, "").expect("write");
    let text = plan.describe(root.path());
    assert!(
        text.contains("config /etc/meshd/meshd.toml: exists, kept"),
        "{text}"
    );
    assert!(!text.contains("--- /etc/meshd/meshd.toml ---"), "{text}");

    let macos = install(Platform::MacOs).describe(root.path());
    assert!(macos.contains("<key>ProgramArguments</key>"), "{macos}");
    assert!(
        macos.contains(
            "run: launchctl bootout system/io.meshd.agent   (may fail: meshd was not loaded)"
        ),
        "{macos}"
    );
    let uninstall = Plan::uninstall(Platform::MacOs).describe(root.path());
    assert!(
        uninstall.contains("remove /Library/LaunchDaemons/io.meshd.agent.plist: not there"),
        "{uninstall}"
    );
}

#[test]
fn a_failing_command_stops_the_plan_and_is_reported_with_its_stderr() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut runner = RecordingRunner::default();
    runner.failures.insert(
        "systemctl enable meshd.service".to_owned(),
        "Failed to enable unit: Access denied\n".to_owned(),
    );
    let err = install(Platform::Linux)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert_eq!(
        err.to_string(),
        "`systemctl enable meshd.service` failed (exit status: 1): Failed to enable unit: Access denied"
    );
    assert_eq!(
        runner.commands,
        ["systemctl daemon-reload", "systemctl enable meshd.service"],
        "stops at the failure"
    );
}

#[test]
fn an_expected_failure_is_reported_and_the_plan_goes_on() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut runner = RecordingRunner::default();
    runner.failures.insert(
        "launchctl bootout system/io.meshd.agent".to_owned(),
        "Boot-out failed: 3: No such process\n".to_owned(),
    );
    let done = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect("applies");
    assert!(
        done.contains(&"ran launchctl bootout system/io.meshd.agent: failed (exit status: 1), fine: meshd was not loaded (Boot-out failed: 3: No such process)".to_owned()),
        "{done:?}"
    );
    assert_eq!(runner.commands.len(), 3);
}

#[test]
fn bootstrap_is_retried_before_it_counts_as_failed() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut runner = RecordingRunner::default();
    let bootstrap = "launchctl bootstrap system /Library/LaunchDaemons/io.meshd.agent.plist";
    runner.failures.insert(
        bootstrap.to_owned(),
        "Bootstrap failed: 5: Input/output error".to_owned(),
    );
    let err = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert!(err.to_string().contains("Bootstrap failed: 5"), "{err}");
    assert_eq!(
        runner.commands.iter().filter(|c| *c == bootstrap).count(),
        3
    );
}

#[test]
fn root_is_required_and_named_before_anything_is_touched() {
    let plan = install(Platform::Linux);
    let mut runner = RecordingRunner {
        uid: Some(1000),
        ..RecordingRunner::default()
    };
    let err = require_root(&plan, &mut runner).expect_err("not root");
    assert_eq!(
        err.to_string(),
        "meshd install must run as root: it writes /etc/systemd/system/meshd.service and runs \
         systemctl. Run it with sudo; `meshd install --dry-run` shows what it would do without root"
    );
    let mut root = RecordingRunner::default();
    require_root(&plan, &mut root).expect("root");
}

#[test]
fn paths_must_be_absolute_and_visible_to_the_linux_service() {
    let mut opts = options(Platform::Linux);
    opts.binary = PathBuf::from("target/release/meshd");
    let err = Plan::install(Platform::Linux, &opts).expect_err("relative");
    assert_eq!(
        err.to_string(),
        "the binary path must be absolute, not target/release/meshd"
    );
    opts.binary = PathBuf::from("/home/ops/meshd/target/release/meshd");
    let err = Plan::install(Platform::Linux, &opts).expect_err("hidden");
    assert!(
        err.to_string()
            .starts_with("the binary /home/ops/meshd/target/release/meshd is under /home"),
        "{err}"
    );
    // launchd has no such sandbox.
    let mut opts = options(Platform::MacOs);
    opts.binary = PathBuf::from("/Users/ops/bin/meshd");
    Plan::install(Platform::MacOs, &opts).expect("fine on macOS");
}

#[test]
fn the_platform_comes_from_the_os_name() {
    assert_eq!(Platform::from_os("macos").expect("macos"), Platform::MacOs);
    assert_eq!(Platform::from_os("linux").expect("linux"), Platform::Linux);
    assert_eq!(
        Platform::from_os("windows").expect_err("no").to_string(),
        "meshd install knows macOS (launchd) and Linux (systemd), not windows"
    );
}

#[test]
fn linux_needs_systemd_running() {
    let root = tempfile::tempdir().expect("tempdir");
    let plan = install(Platform::Linux);
    let err = require_service_manager(&plan, root.path()).expect_err("no systemd");
    assert!(
        err.to_string()
            .starts_with("meshd install needs systemd, and this host was not booted with it"),
        "{err}"
    );
    std::fs::create_dir_all(root.path().join("run/systemd/system")).expect("mkdir");
    require_service_manager(&plan, root.path()).expect("systemd runs");
    require_service_manager(
        &install(Platform::MacOs),
        tempfile::tempdir().expect("t").path(),
    )
    .expect("launchd always runs");
}

#[test]
fn install_writes_completions_and_man_pages_and_uninstall_removes_them() {
    for platform in [Platform::Linux, Platform::MacOs] {
        let root = tempfile::tempdir().expect("tempdir");
        let plan = install(platform);
        assert!(
            plan.describe(root.path())
                .contains("   /usr/local/share/man/man1/meshctl.1\n"),
            "the dry run lists the pages"
        );
        plan.apply(root.path(), &mut RecordingRunner::default())
            .expect("install");
        for path in [
            "/usr/local/share/bash-completion/completions/meshctl",
            "/usr/local/share/zsh/site-functions/_meshd",
            "/usr/local/share/man/man1/meshctl-status.1",
        ] {
            assert!(!read(root.path(), path).is_empty(), "{path}");
        }
        Plan::uninstall(platform)
            .apply(root.path(), &mut RecordingRunner::default())
            .expect("uninstall");
        for file in docs::files() {
            assert!(
                !under(root.path(), &file.path).exists(),
                "{} left behind",
                file.path.display()
            );
        }
    }
}
