//! Install and uninstall under a temporary root, with recorded commands.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::config::Config;

fn options(platform: Platform) -> InstallOptions {
    InstallOptions {
        binary: PathBuf::from("/usr/local/bin/meshd"),
        config: platform.default_config().to_owned(),
        node_id: NodeId::from_hostname("studio-1.local"),
        tls: None,
    }
}

fn install(platform: Platform) -> Plan {
    Plan::install(platform, &options(platform)).expect("plan")
}

fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(under(root, Path::new(path))).expect("file is there")
}

/// launchctl's and socketfilterfw's answers as recorded on Macs: the
/// texts are theirs (public issue threads quote them: `Bootstrap failed: 5:
/// Input/output error` with exit status 5 from `launchctl bootstrap system
/// …` in DeterminateSystems/nix-installer#1157, `Could not find service
/// "<label>" in domain for system` with status 113 from `launchctl print`,
/// `Boot-out failed: 3: No such process`), with meshd's label.
mod recorded {
    use super::CommandOutput;

    pub const PRINT: &str = "launchctl print system/io.meshd.agent";
    pub const BOOTOUT: &str = "launchctl bootout system/io.meshd.agent";
    pub const ENABLE: &str = "launchctl enable system/io.meshd.agent";
    pub const BOOTSTRAP: &str =
        "launchctl bootstrap system /Library/LaunchDaemons/io.meshd.agent.plist";
    pub const FIREWALL_STATE: &str =
        "/usr/libexec/ApplicationFirewall/socketfilterfw --getglobalstate";
    pub const FIREWALL_ADD: &str =
        "/usr/libexec/ApplicationFirewall/socketfilterfw --add /usr/local/bin/meshd";
    pub const FIREWALL_UNBLOCK: &str =
        "/usr/libexec/ApplicationFirewall/socketfilterfw --unblockapp /usr/local/bin/meshd";

    /// The head of `launchctl print` for a loaded system job; only its
    /// exit status is read.
    pub fn loaded() -> CommandOutput {
        CommandOutput::ok(
            "system/io.meshd.agent = {\n\tactive count = 1\n\tpath = \
             /Library/LaunchDaemons/io.meshd.agent.plist\n\tstate = running\n",
        )
    }

    pub fn gone() -> CommandOutput {
        CommandOutput::failed(
            113,
            "Could not find service \"io.meshd.agent\" in domain for system\n",
        )
    }

    pub fn busy() -> CommandOutput {
        CommandOutput::failed(5, "Bootstrap failed: 5: Input/output error\n")
    }

    pub fn firewall(state: u8) -> CommandOutput {
        let text = match state {
            0 => "Firewall is disabled. (State = 0)\n",
            1 => "Firewall is enabled. (State = 1)\n",
            _ => "Firewall is blocking all non-essential incoming connections. (State = 2)\n",
        };
        CommandOutput::ok(text)
    }
}

/// A Mac with the firewall off and, unless `loaded`, no meshd job.
fn mac(loaded: bool) -> RecordingRunner {
    let mut runner = RecordingRunner::default();
    runner.respond(recorded::FIREWALL_STATE, [recorded::firewall(0)]);
    if loaded {
        runner.respond(recorded::PRINT, [recorded::loaded(), recorded::gone()]);
    } else {
        runner.respond(recorded::PRINT, [recorded::gone()]);
    }
    runner
}

const OLD_PLIST: &str = "<?xml version=\"1.0\"?>\n<!-- the previous install -->\n";

/// A root with a previous install's plist in place.
fn previously_installed() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    let plist = under(root.path(), &launchd::plist_path());
    std::fs::create_dir_all(plist.parent().expect("parent")).expect("mkdir");
    std::fs::write(&plist, OLD_PLIST).expect("old plist");
    root
}

fn plist_text(root: &Path) -> String {
    read(root, "/Library/LaunchDaemons/io.meshd.agent.plist")
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
            Path::new("/etc/meshd/meshd.toml"),
            None
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
    let mut runner = mac(false);
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
    // A first install: nothing to boot out, nothing to wait for.
    assert_eq!(
        runner.commands,
        [
            recorded::FIREWALL_STATE,
            recorded::PRINT,
            recorded::ENABLE,
            recorded::BOOTSTRAP,
        ]
    );
    assert!(runner.pauses.is_empty());
}

#[test]
fn a_reinstall_waits_for_the_old_job_to_go_and_retries_a_busy_bootstrap() {
    let root = previously_installed();
    let mut runner = mac(true);
    // Loaded before; still there on the first three polls after bootout.
    runner.respond(
        recorded::PRINT,
        [
            recorded::loaded(),
            recorded::loaded(),
            recorded::loaded(),
            recorded::loaded(),
            recorded::gone(),
        ],
    );
    runner.respond(
        recorded::BOOTSTRAP,
        [recorded::busy(), recorded::busy(), CommandOutput::ok("")],
    );
    let done = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect("applies");
    assert_eq!(
        runner.commands,
        [
            recorded::FIREWALL_STATE,
            recorded::PRINT,
            recorded::BOOTOUT,
            recorded::PRINT,
            recorded::PRINT,
            recorded::PRINT,
            recorded::PRINT,
            recorded::ENABLE,
            recorded::BOOTSTRAP,
            recorded::BOOTSTRAP,
            recorded::BOOTSTRAP,
        ]
    );
    let half = Duration::from_millis(500);
    let second = Duration::from_secs(1);
    assert_eq!(runner.pauses, [half, half, half, second, second]);
    assert!(
        done.contains(
            &"the old job is gone (`launchctl print system/io.meshd.agent` no longer finds it)"
                .to_owned()
        ),
        "{done:#?}"
    );
    assert!(
        done.contains(&format!(
            "ran {} (loaded on try 3: launchd was still removing the old job)",
            recorded::BOOTSTRAP
        )),
        "{done:#?}"
    );
    assert_ne!(
        plist_text(root.path()),
        OLD_PLIST,
        "the new plist is in place"
    );
}

#[test]
fn a_bootstrap_that_keeps_failing_puts_the_previous_meshd_back() {
    let root = previously_installed();
    let mut runner = mac(true);
    // Busy for all 30 tries of the new plist; the previous one then loads.
    runner.respond(
        recorded::BOOTSTRAP,
        std::iter::repeat_n(recorded::busy(), 30).chain([CommandOutput::ok("")]),
    );
    let err = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert_eq!(
        err.to_string(),
        "install failed: `launchctl bootstrap system \
         /Library/LaunchDaemons/io.meshd.agent.plist` failed (exit status: 5): Bootstrap \
         failed: 5: Input/output error on each of 30 tries over 30s; the previous \
         /Library/LaunchDaemons/io.meshd.agent.plist is back and the previous meshd is loaded \
         and running again"
    );
    assert_eq!(plist_text(root.path()), OLD_PLIST);
    assert_eq!(runner.count(recorded::BOOTSTRAP), 31);
    assert_eq!(
        runner.commands.last().map(String::as_str),
        Some(recorded::BOOTSTRAP)
    );
    // Bounded: 29 pauses of a second between the 30 tries of the new plist.
    assert_eq!(
        runner.pauses.iter().sum::<Duration>(),
        Duration::from_secs(29)
    );
}

#[test]
fn another_bootstrap_error_is_not_retried_and_the_previous_meshd_is_restored() {
    let root = previously_installed();
    let mut runner = mac(true);
    let bad = CommandOutput::failed(
        122,
        "Bootstrap failed: 122: Path had bad ownership/permissions\n",
    );
    runner.respond(recorded::BOOTSTRAP, [bad, CommandOutput::ok("")]);
    let err = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert!(
        err.to_string().starts_with(
            "install failed: `launchctl bootstrap system \
             /Library/LaunchDaemons/io.meshd.agent.plist` failed (exit status: 122): \
             Bootstrap failed: 122: Path had bad ownership/permissions; the previous"
        ),
        "{err}"
    );
    assert!(err.to_string().ends_with("running again"), "{err}");
    assert_eq!(runner.count(recorded::BOOTSTRAP), 2, "one try, one restore");
    assert_eq!(plist_text(root.path()), OLD_PLIST);
}

#[test]
fn a_bootstrap_that_times_out_is_rolled_back_and_the_job_it_may_have_loaded_unloaded() {
    let root = previously_installed();
    let mut runner = mac(true);
    // Loaded before; gone after the bootout; the killed bootstrap left the
    // new job loaded, which the rollback boots out before loading the
    // previous plist again.
    runner.respond(
        recorded::PRINT,
        [
            recorded::loaded(),
            recorded::gone(),
            recorded::loaded(),
            recorded::gone(),
        ],
    );
    runner.respond(
        recorded::BOOTSTRAP,
        [Reply::TimedOut, Reply::Output(CommandOutput::ok(""))],
    );
    let err = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert_eq!(
        err.to_string(),
        "install failed: `launchctl bootstrap system \
         /Library/LaunchDaemons/io.meshd.agent.plist` did not finish within 10s and was killed; \
         the previous /Library/LaunchDaemons/io.meshd.agent.plist is back and the previous \
         meshd is loaded and running again"
    );
    assert_eq!(
        runner.commands[1..],
        [
            recorded::PRINT,
            recorded::BOOTOUT,
            recorded::PRINT,
            recorded::ENABLE,
            recorded::BOOTSTRAP,
            recorded::PRINT,
            recorded::BOOTOUT,
            recorded::PRINT,
            recorded::BOOTSTRAP,
        ]
    );
    assert_eq!(plist_text(root.path()), OLD_PLIST);
}

#[test]
fn an_enable_that_times_out_is_rolled_back_like_a_failed_one() {
    let root = previously_installed();
    let mut runner = mac(true);
    runner.respond(recorded::ENABLE, [Reply::TimedOut]);
    let err = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert_eq!(
        err.to_string(),
        "install failed: `launchctl enable system/io.meshd.agent` did not finish within 10s \
         and was killed; the previous /Library/LaunchDaemons/io.meshd.agent.plist is back and \
         the previous meshd is loaded and running again"
    );
    assert_eq!(plist_text(root.path()), OLD_PLIST);
    assert_eq!(
        runner.commands.last().map(String::as_str),
        Some(recorded::BOOTSTRAP)
    );
    // Nothing was loaded by the new plist: no second bootout.
    assert_eq!(runner.count(recorded::BOOTOUT), 1);
}

#[test]
fn a_bootout_that_times_out_is_waited_out_like_a_failed_one() {
    let root = previously_installed();
    let mut runner = mac(true);
    runner.respond(recorded::BOOTOUT, [Reply::TimedOut]);
    let done = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect("the old job went all the same");
    assert!(
        done.contains(
            &"`launchctl bootout system/io.meshd.agent` did not finish within 10s and was \
              killed; waiting for the job to go anyway"
                .to_owned()
        ),
        "{done:#?}"
    );
    assert_ne!(plist_text(root.path()), OLD_PLIST);
}

#[test]
fn a_first_install_whose_bootstrap_times_out_unloads_the_new_job_and_removes_its_plist() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut runner = mac(false);
    // Nothing before; the killed bootstrap loaded the new job.
    runner.respond(
        recorded::PRINT,
        [recorded::gone(), recorded::loaded(), recorded::gone()],
    );
    runner.respond(recorded::BOOTSTRAP, [Reply::TimedOut]);
    let err = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert!(
        err.to_string().ends_with(
            "did not finish within 10s and was killed; there was no previous plist; the new \
             /Library/LaunchDaemons/io.meshd.agent.plist was removed; no meshd was loaded \
             before, and none is now"
        ),
        "{err}"
    );
    assert_eq!(runner.count(recorded::BOOTOUT), 1, "the new job unloaded");
    assert!(!under(root.path(), &launchd::plist_path()).exists());
}

#[test]
fn an_old_job_that_never_goes_is_left_running_with_its_plist() {
    let root = previously_installed();
    let mut runner = mac(true);
    runner.respond(recorded::PRINT, [recorded::loaded()]);
    let err = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert_eq!(
        err.to_string(),
        "install failed: the old meshd job was not removed within 30s of `launchctl \
         bootout system/io.meshd.agent` (it is still loaded); the previous \
         /Library/LaunchDaemons/io.meshd.agent.plist is back; the old job was left as it was, \
         so run install again"
    );
    assert_eq!(plist_text(root.path()), OLD_PLIST);
    assert_eq!(runner.count(recorded::ENABLE), 0);
    assert_eq!(runner.count(recorded::BOOTSTRAP), 0);
    // 1 look before, 61 polls 500 ms apart: 30 s.
    assert_eq!(runner.count(recorded::PRINT), 62);
    assert_eq!(
        runner.pauses.iter().sum::<Duration>(),
        Duration::from_secs(30)
    );
}

#[test]
fn a_failed_first_install_leaves_nothing_loaded_and_no_plist() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut runner = mac(false);
    runner.failures.insert(
        recorded::ENABLE.to_owned(),
        "Could not enable service: 1: Operation not permitted\n".to_owned(),
    );
    let err = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert_eq!(
        err.to_string(),
        "install failed: `launchctl enable system/io.meshd.agent` failed (exit status: \
         1): Could not enable service: 1: Operation not permitted; there was no previous \
         plist; the new /Library/LaunchDaemons/io.meshd.agent.plist was removed; no meshd was \
         loaded before, and none is now"
    );
    assert!(!under(root.path(), &launchd::plist_path()).exists());
}

#[test]
fn with_the_firewall_on_install_allows_meshd_before_touching_the_service() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut runner = mac(false);
    runner.respond(recorded::FIREWALL_STATE, [recorded::firewall(1)]);
    let done = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect("applies");
    assert_eq!(
        runner.commands[..4],
        [
            recorded::FIREWALL_STATE,
            recorded::FIREWALL_ADD,
            recorded::FIREWALL_UNBLOCK,
            recorded::PRINT
        ]
    );
    assert!(done.contains(&"the Application Firewall is on".to_owned()));

    // Blocking everything: the rule is added, and the operator told.
    let mut runner = mac(false);
    runner.respond(recorded::FIREWALL_STATE, [recorded::firewall(2)]);
    let done = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect("applies");
    assert_eq!(runner.count(recorded::FIREWALL_UNBLOCK), 1);
    assert!(
        done.iter()
            .any(|l| l.contains("blocks ALL incoming connections")),
        "{done:#?}"
    );
}

#[test]
fn a_firewall_rule_that_cannot_be_added_stops_install_before_the_service() {
    let root = previously_installed();
    let mut runner = mac(true);
    runner.respond(recorded::FIREWALL_STATE, [recorded::firewall(1)]);
    runner.failures.insert(
        recorded::FIREWALL_ADD.to_owned(),
        "socketfilterfw: operation failed\n".to_owned(),
    );
    let err = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect_err("fails");
    assert!(
        err.to_string().starts_with(&format!(
            "`{}` failed (exit status: 1): socketfilterfw: operation failed; meshd would not be \
             reachable",
            recorded::FIREWALL_ADD
        )),
        "{err}"
    );
    assert!(
        !runner.commands.iter().any(|c| c.starts_with("launchctl")),
        "{:?}",
        runner.commands
    );
    assert_eq!(plist_text(root.path()), OLD_PLIST);
}

#[test]
fn a_managed_firewall_is_left_to_its_profile() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut runner = mac(false);
    runner.respond(recorded::FIREWALL_STATE, [recorded::firewall(1)]);
    runner.respond(
        recorded::FIREWALL_ADD,
        [CommandOutput::ok(
            "Firewall settings cannot be modified from command line on managed Mac computers.\n",
        )],
    );
    let done = install(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect("applies");
    assert!(
        done.iter().any(|l| l.contains("managed by a profile")),
        "{done:#?}"
    );
    assert_eq!(runner.count(recorded::FIREWALL_UNBLOCK), 0);
    assert_eq!(runner.count(recorded::BOOTSTRAP), 1);
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
        let done = plan.apply(root.path(), &mut mac(false)).expect("applies");
        assert_eq!(std::fs::read(&config).expect("read"), mine);
        assert!(
            done.iter()
                .any(|l| l.contains("it exists, and install never overwrites it")),
            "{done:?}"
        );
        // And again, as a reinstall: the service file is replaced, the
        // config still kept.
        plan.apply(root.path(), &mut mac(true))
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
            .apply(root.path(), &mut mac(false))
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
        None,
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
    for step in [
        "3. if the Application Firewall is on (`/usr/libexec/ApplicationFirewall/socketfilterfw \
         --getglobalstate`): run /usr/libexec/ApplicationFirewall/socketfilterfw --add \
         /usr/local/bin/meshd, then /usr/libexec/ApplicationFirewall/socketfilterfw \
         --unblockapp /usr/local/bin/meshd\n",
        "4. replace the LaunchDaemon /Library/LaunchDaemons/io.meshd.agent.plist (mode 0644), \
         keeping the previous one to put back:\n",
        "run: launchctl bootout system/io.meshd.agent   (skipped when `launchctl print \
         system/io.meshd.agent` does not find the job)",
        "wait until `launchctl print system/io.meshd.agent` no longer finds it (up to 30s)",
        "run: launchctl bootstrap system /Library/LaunchDaemons/io.meshd.agent.plist   \
         (retried for up to 30s while it fails with \"5: Input/output error\")",
        "if any of these fails or does not finish in time, the previous plist is put back and its job loaded again",
    ] {
        assert!(macos.contains(step), "{step}\n{macos}");
    }
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
        recorded::BOOTOUT.to_owned(),
        "Boot-out failed: 3: No such process\n".to_owned(),
    );
    let done = Plan::uninstall(Platform::MacOs)
        .apply(root.path(), &mut runner)
        .expect("applies");
    assert!(
        done.contains(&"ran launchctl bootout system/io.meshd.agent: failed (exit status: 1), fine: meshd was not loaded (Boot-out failed: 3: No such process)".to_owned()),
        "{done:?}"
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
    // launchd has no such sandbox...
    let mut opts = options(Platform::MacOs);
    opts.binary = PathBuf::from("/Users/ops/bin/meshd");
    Plan::install(Platform::MacOs, &opts).expect("fine on macOS");
    // ...but macOS guards some home folders from it (TCC).
    opts.binary = PathBuf::from("/Users/ops/Downloads/meshd");
    let err = Plan::install(Platform::MacOs, &opts).expect_err("protected");
    assert!(
        err.to_string().starts_with(
            "the binary /Users/ops/Downloads/meshd is under ~/Downloads, which macOS protects \
             (TCC): launchd cannot read it and meshd would fail with \"Operation not permitted\""
        ),
        "{err}"
    );
    let mut opts = options(Platform::MacOs);
    opts.config = PathBuf::from("/Users/ops/Desktop/meshd.toml");
    let err = Plan::install(Platform::MacOs, &opts).expect_err("protected");
    assert!(
        err.to_string()
            .starts_with("the config /Users/ops/Desktop/meshd.toml is under ~/Desktop"),
        "{err}"
    );
    // Nor can it keep a file that an ejected volume or iCloud takes away.
    let mut opts = options(Platform::MacOs);
    opts.binary = PathBuf::from("/Volumes/Backup/meshd");
    let err = Plan::install(Platform::MacOs, &opts).expect_err("removable");
    assert!(
        err.to_string().starts_with(
            "the binary /Volumes/Backup/meshd is on the volume /Volumes/Backup: a volume under \
             /Volumes is there only while it is attached and mounted"
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("copy it to the startup disk first"),
        "{err}"
    );
    let mut opts = options(Platform::MacOs);
    opts.config =
        PathBuf::from("/Users/ops/Library/Mobile Documents/com~apple~CloudDocs/meshd.toml");
    let err = Plan::install(Platform::MacOs, &opts).expect_err("iCloud Drive");
    assert!(
        err.to_string().starts_with(
            "the config /Users/ops/Library/Mobile Documents/com~apple~CloudDocs/meshd.toml is on \
             iCloud Drive (~/Library/Mobile Documents): macOS may evict its files to the cloud"
        ),
        "{err}"
    );
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

/// Files made here are owned by whoever runs the test; judging them as
/// root's needs root (to own them, and to hand them to another user).
fn running_as_root(test: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let probe = tempfile::NamedTempFile::new().expect("tempfile");
    let root = probe.as_file().metadata().expect("metadata").uid() == 0;
    if !root {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test} must run as root under CI"
        );
        eprintln!("skipped {test}: needs root to own and chown its files");
    }
    root
}

/// A file at `path` (absolute, as on the real system) under `root`.
fn file_with_mode(root: &Path, path: &str, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let real = under(root, Path::new(path));
    std::fs::create_dir_all(real.parent().expect("parent")).expect("mkdir");
    std::fs::write(&real, "x").expect("write");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(mode)).expect("chmod");
    real
}

const BINARY: &str = "/usr/local/bin/meshd";
const CONFIG: &str = "/etc/meshd/meshd.toml";

#[test]
fn install_refuses_a_binary_or_config_root_does_not_own_alone() {
    if !running_as_root("install_refuses_a_binary_or_config_root_does_not_own_alone") {
        return;
    }
    let root = tempfile::tempdir().expect("tempdir");
    let root = root.path();
    let plan = install(Platform::Linux);
    let binary = Path::new(BINARY);
    let real_binary = file_with_mode(root, BINARY, 0o755);
    require_strict_modes(&plan, root, Some(binary)).expect("root's binary, config to be written");

    file_with_mode(root, CONFIG, 0o666);
    let err = require_strict_modes(&plan, root, Some(binary)).expect_err("world-writable");
    assert_eq!(
        err.to_string(),
        "the config /etc/meshd/meshd.toml is writable by group and others (mode 0666): \
         the service runs or reads it (as root on macOS), so whoever can change it controls \
         the service. Fix it with `sudo chmod go-w /etc/meshd/meshd.toml`, then install again"
    );

    file_with_mode(root, CONFIG, 0o644);
    std::os::unix::fs::chown(&real_binary, Some(65534), None).expect("chown");
    let err = require_strict_modes(&plan, root, Some(binary)).expect_err("not root's");
    assert_eq!(
        err.to_string(),
        "the binary /usr/local/bin/meshd is owned by uid 65534, not root: the service runs \
         or reads it (as root on macOS), so whoever can change it controls the service. Fix \
         it with `sudo chown root /usr/local/bin/meshd`, then install again"
    );
}

#[test]
fn install_checks_the_binary_that_a_link_points_at() {
    if !running_as_root("install_checks_the_binary_that_a_link_points_at") {
        return;
    }
    let root = tempfile::tempdir().expect("tempdir");
    let root = root.path();
    let target = file_with_mode(root, "/opt/meshd/meshd", 0o777);
    let link = under(root, Path::new(BINARY));
    std::fs::create_dir_all(link.parent().expect("parent")).expect("mkdir");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let err = require_strict_modes(&install(Platform::Linux), root, Some(Path::new(BINARY)))
        .expect_err("target writable");
    assert!(
        err.to_string()
            .contains("writable by group and others (mode 0777)"),
        "{err}"
    );
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
        // A Mac with no meshd job yet, and the firewall off.
        let runner = || match platform {
            Platform::MacOs => mac(false),
            Platform::Linux => RecordingRunner::default(),
        };
        plan.apply(root.path(), &mut runner()).expect("install");
        for path in [
            "/usr/local/share/bash-completion/completions/meshctl",
            "/usr/local/share/zsh/site-functions/_meshd",
            "/usr/local/share/man/man1/meshctl-status.1",
        ] {
            assert!(!read(root.path(), path).is_empty(), "{path}");
        }
        Plan::uninstall(platform)
            .apply(root.path(), &mut runner())
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

/// The mesh's TLS files under /etc/meshd/tls, as `meshctl certs` names them.
fn tls_files() -> systemd::TlsFiles {
    systemd::TlsFiles {
        ca: PathBuf::from("/etc/meshd/tls/ca.pem"),
        cert: PathBuf::from("/etc/meshd/tls/studio-1.pem"),
        key: PathBuf::from("/etc/meshd/tls/studio-1-key.pem"),
    }
}

#[test]
fn a_linux_unit_passes_the_configs_tls_files_as_credentials() {
    let with_tls = InstallOptions {
        tls: Some(tls_files()),
        ..options(Platform::Linux)
    };
    let plan = Plan::install(Platform::Linux, &with_tls).expect("plan");
    let unit = plan
        .steps
        .iter()
        .find_map(|step| match step {
            Step::WriteFile { contents, .. } => Some(contents.clone()),
            _ => None,
        })
        .expect("a unit");
    for line in [
        "LoadCredential=meshd-tls-ca:/etc/meshd/tls/ca.pem\n",
        "LoadCredential=meshd-tls-cert:/etc/meshd/tls/studio-1.pem\n",
        "LoadCredential=meshd-tls-key:/etc/meshd/tls/studio-1-key.pem\n",
    ] {
        assert!(unit.contains(line), "{line}: {unit}");
    }
    // launchd runs meshd as root, who reads the files where they are.
    let mac = Plan::install(
        Platform::MacOs,
        &InstallOptions {
            tls: Some(tls_files()),
            ..options(Platform::MacOs)
        },
    )
    .expect("plan");
    assert!(
        !mac.describe(Path::new("/nonexistent"))
            .contains("LoadCredential")
    );
}

#[test]
fn a_tls_path_a_credential_cannot_carry_is_refused_by_name() {
    for key in [
        "/etc/meshd/tls/my key.pem",
        "/etc/meshd/tls/k.pem\nExecStartPre=/bin/evil",
        "tls/k.pem",
    ] {
        let options = InstallOptions {
            tls: Some(systemd::TlsFiles {
                key: PathBuf::from(key),
                ..tls_files()
            }),
            ..options(Platform::Linux)
        };
        let err = Plan::install(Platform::Linux, &options).expect_err(key);
        assert!(
            err.to_string().starts_with("the config's tls.key "),
            "{key}: {err}"
        );
    }
}

#[test]
fn preflight_reports_every_refusal_and_the_real_run_stops_at_the_first() {
    let root = tempfile::tempdir().expect("tempdir");
    let plan = install(Platform::Linux);
    let mut not_root = RecordingRunner {
        uid: Some(1000),
        ..RecordingRunner::default()
    };
    // No /run/systemd/system and no binary under this root.
    let preflight = Preflight::check(
        &plan,
        root.path(),
        Some(Path::new("/usr/local/bin/meshd")),
        &mut not_root,
    );
    assert!(matches!(
        preflight.not_root,
        Some(InstallError::NotRoot { .. })
    ));
    let refusals: Vec<String> = preflight.refusals.iter().map(ToString::to_string).collect();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    assert!(refusals[0].contains("needs systemd"), "{refusals:?}");
    assert!(refusals[1].contains("is not a file"), "{refusals:?}");
    assert!(matches!(
        preflight.first(),
        Err(InstallError::NotRoot { .. })
    ));
}
