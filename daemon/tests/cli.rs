//! The `meshd` binary as an operator meets it: `check-config` verdicts with
//! lines, and `run` serving until SIGTERM, with JSON logs on request.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, free_ports};

fn meshd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshd"))
        .args(args)
        .env_remove("MESHD_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("meshd runs")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path.to_string_lossy().into_owned()
}

fn check_config(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "meshd.toml", text);
    let out = meshd(&["check-config", &path]);
    let stderr = String::from_utf8_lossy(&out.stderr).replace(&path, "meshd.toml");
    (out.status.code(), stderr)
}

const EXAMPLE: &str = include_str!("../../meshd.example.toml");

/// Lets the examples' peers (elsewhere on a management network) be checked
/// alone: a mesh listener and plain TCP, which no rule under test involves.
const MESH_TAIL: &str = "\n[listen]\nmesh = \"10.0.0.1:7421\"\n\n[tls]\ninsecure = true\n";

#[test]
fn check_config_accepts_the_example_once_its_certificates_are_issued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "meshd.toml", EXAMPLE);
    common::issue_certificates(&dir.path().join("tls"), "studio-1");

    let out = meshd(&["check-config", &path]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(": ok (node studio-1, 3 members"));
}

#[test]
fn check_config_names_missing_certificates_and_how_to_make_them() {
    let (code, stderr) = check_config(EXAMPLE);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("tls/ca.pem"), "{stderr}");
    assert!(stderr.contains("meshctl certs"), "{stderr}");
    assert!(
        stderr.contains("`meshd check-config --template "),
        "{stderr}"
    );
}

/// The example as shipped, in a fresh checkout: a template, valid by every
/// rule but the TLS files it names.
#[test]
fn the_example_config_as_shipped_passes_as_a_template() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../meshd.example.toml");
    let out = meshd(&["check-config", "--template", example]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            ": ok as a template: the TLS files it names are not checked (node studio-1, 3 members"
        ),
        "{stdout}"
    );
    // A template is still checked by every other rule.
    let (code, stderr) =
        check_config_template(&EXAMPLE.replacen("\n[tls]\n", "\n[tls]\nbogus = 1\n", 1));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("bogus"), "{stderr}");
}

fn check_config_template(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "meshd.toml", text);
    let out = meshd(&["check-config", "--template", &path]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The example config with its CA in `tls/` and studio-1's certificate
/// issued by `issue` (from that CA, or another): check-config's exit code
/// and stderr (the config's directory shown as `<dir>`).
fn check_example_with(
    issue: impl FnOnce(&meshd_pki::Ca, &Path) -> meshd_pki::Issued,
) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "meshd.toml", EXAMPLE);
    let tls = dir.path().join("tls");
    let store = meshd_pki::store::CertDir::new(&tls);
    let ca = store
        .init("meshd test CA", std::time::SystemTime::now(), 3650 * DAY)
        .expect("CA");
    let issued = issue(&ca, dir.path());
    let pair = store.node("studio-1");
    std::fs::write(&pair.cert, issued.cert_pem).expect("cert");
    std::fs::write(&pair.key, issued.key_pem).expect("key");
    std::fs::set_permissions(
        &pair.key,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    let out = meshd(&["check-config", &path]);
    let stderr =
        String::from_utf8_lossy(&out.stderr).replace(&dir.path().display().to_string(), "<dir>");
    (out.status.code(), stderr)
}

#[test]
fn check_config_refuses_an_expired_certificate_naming_the_file_and_dates() {
    let now = std::time::SystemTime::now();
    let (code, stderr) = check_example_with(|ca, _| {
        ca.issue("studio-1", &[], now - 400 * DAY, 365 * DAY)
            .expect("issue")
    });
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("tls.cert (<dir>/tls/studio-1.pem) expired at "),
        "{stderr}"
    );
    assert!(stderr.contains("; now "), "{stderr}");
    assert!(stderr.contains("meshctl certs issue studio-1"), "{stderr}");
}

#[test]
fn check_config_refuses_a_certificate_not_valid_yet_naming_the_file_and_dates() {
    let now = std::time::SystemTime::now();
    let (code, stderr) = check_example_with(|ca, _| {
        ca.issue("studio-1", &[], now + 2 * DAY, 365 * DAY)
            .expect("issue")
    });
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("tls.cert (<dir>/tls/studio-1.pem) is not valid yet (valid "),
        "{stderr}"
    );
    assert!(stderr.contains("check this host's clock"), "{stderr}");
}

#[test]
fn check_config_refuses_a_certificate_of_another_ca() {
    let now = std::time::SystemTime::now();
    let (code, stderr) = check_example_with(|_, _| {
        let other = meshd_pki::Ca::create("another mesh", now, 3650 * DAY).expect("CA");
        other.issue("studio-1", &[], now, 365 * DAY).expect("issue")
    });
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("tls.cert (<dir>/tls/studio-1.pem) (valid ")
            && stderr.contains("is not accepted by the CA in tls.ca (<dir>/tls/ca.pem)")
            && stderr.contains("UnknownIssuer"),
        "{stderr}"
    );
}

#[test]
fn check_config_warns_of_a_certificate_with_ten_days_left_and_accepts_it() {
    let now = std::time::SystemTime::now();
    let (code, stderr) =
        check_example_with(|ca, _| ca.issue("studio-1", &[], now, 10 * DAY).expect("issue"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: ")
            && stderr.contains("tls.cert (<dir>/tls/studio-1.pem) expires at ")
            && stderr.contains("(in 9 days;"),
        "{stderr}"
    );
}

#[test]
fn check_config_refuses_a_key_that_is_a_fifo_at_once_and_warns_of_a_readable_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "meshd.toml", EXAMPLE);
    let (_, pair) = common::issue_certificates(&dir.path().join("tls"), "studio-1");
    std::fs::set_permissions(
        &pair.key,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    let out = meshd(&["check-config", &path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("can be read by its group or everyone (mode 644)"),
        "{stderr}"
    );

    std::fs::remove_file(&pair.key).expect("remove the key");
    assert!(
        Command::new("mkfifo")
            .arg(&pair.key)
            .status()
            .expect("mkfifo runs")
            .success()
    );
    // Nobody ever writes the FIFO: a blocking open would wait forever.
    let mut child = Command::new(env!("CARGO_BIN_EXE_meshd"))
        .args(["check-config", &path])
        .env_remove("MESHD_CONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("meshd runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("check-config hung on a FIFO key");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tls.key: ") && stderr.contains("is a FIFO, not a regular file"),
        "{stderr}"
    );
}

#[test]
fn check_config_refuses_a_certificate_issued_for_another_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "meshd.toml", EXAMPLE);
    let (_, other) = common::issue_certificates(&dir.path().join("tls"), "studio-2");
    std::fs::rename(&other.cert, dir.path().join("tls/studio-1.pem")).expect("rename");
    std::fs::rename(&other.key, dir.path().join("tls/studio-1-key.pem")).expect("rename");

    let out = meshd(&["check-config", &path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("studio-2") && stderr.contains("studio-1"),
        "{stderr}"
    );
}

#[test]
fn check_config_names_an_unknown_key_and_its_line() {
    let (code, stderr) = check_config("[node]\nid = \"a\"\ncolour = \"blue\"\n");
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim(),
        "meshd.toml:3: node.colour: unknown key `colour`, expected `id`"
    );
}

#[test]
fn check_config_names_a_duplicate_peer_and_both_lines() {
    let (code, stderr) = check_config(&format!(
        "[[peers]]\nid = \"b\"\naddress = \"10.0.0.2:7420\"\n\n[[peers]]\nid = \"b\"\naddress = \"10.0.0.3:7420\"\n{MESH_TAIL}"
    ));
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim(),
        "meshd.toml:6: peers[1].id: duplicate peer id \"b\" (first at line 2)"
    );
}

#[test]
fn check_config_names_a_malformed_address_and_its_line() {
    let (code, stderr) = check_config(
        "[listen]\ngrpc = \"0.0.0.0:7420\"\nmesh = \"10.0.0.1:7421\"\n\n[tls]\ninsecure = true\n\n[[peers]]\nid = \"b\"\naddress = \"10.0.0.2:99999\"\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.starts_with("meshd.toml:10: peers[0].address: "),
        "{stderr}"
    );
    assert!(stderr.contains("99999"), "{stderr}");
}

#[test]
fn check_config_warns_about_link_local_cable_addresses_and_still_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(
        dir.path(),
        "meshd.toml",
        &format!(
            "[[peers]]\nid = \"b\"\naddress = \"10.0.0.2:7420\"\n\n[[links]]\npeer = \"b\"\n\
         local_address = \"169.254.12.1\"\npeer_address = \"10.254.0.2\"\n{MESH_TAIL}"
        ),
    );
    let out = meshd(&["check-config", &path]);
    let stderr = String::from_utf8_lossy(&out.stderr).replace(&path, "meshd.toml");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].starts_with(
            "warning: meshd.toml:7: links[0].local_address: 169.254.12.1 is IPv4 link-local"
        ),
        "{stderr}"
    );
    assert!(warnings[0].contains("`meshctl plan`"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 static links, 1 warning)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn check_config_reports_a_missing_file() {
    let out = meshd(&["check-config", "/nonexistent/meshd.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/meshd.toml"));
}

#[test]
fn run_serves_until_sigterm_and_logs_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [grpc, metrics] = free_ports();
    let config = write(
        dir.path(),
        "meshd.toml",
        &format!(
            "[node]\nid = \"cli-test\"\n\n[listen]\ngrpc = \"127.0.0.1:{grpc}\"\nmetrics = \"127.0.0.1:{metrics}\"\n"
        ),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_meshd"))
        .args(["run", "--config", &config, "--log-format", "json"])
        .env_remove("RUST_LOG")
        // Its incident history beside its config, not in the machine's.
        .env("STATE_DIRECTORY", dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .expect("meshd starts");
    let mut logs = BufReader::new(child.stderr.take().expect("stderr"));

    // The start line carries the bound addresses as structured fields.
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = loop {
        line.clear();
        assert!(
            logs.read_line(&mut line).expect("read log") > 0,
            "meshd exited early"
        );
        let entry: serde_json::Value = serde_json::from_str(&line).expect("every log line is JSON");
        if entry["message"] == "meshd started" {
            break entry;
        }
        assert!(Instant::now() < deadline, "no start line");
    };
    assert_eq!(started["node"], "cli-test");
    assert_eq!(started["grpc"], format!("127.0.0.1:{grpc}"));
    assert_eq!(started["level"], "INFO");

    // SIGHUP re-reads the config and says so.
    let status = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    loop {
        line.clear();
        assert!(
            logs.read_line(&mut line).expect("read log") > 0,
            "meshd exited on SIGHUP"
        );
        let entry: serde_json::Value = serde_json::from_str(&line).expect("every log line is JSON");
        if entry["message"] == "config read on SIGHUP: unchanged" {
            break;
        }
        assert!(Instant::now() < deadline, "no reload line");
    }

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let exit = child.wait().expect("meshd exits");
    assert_eq!(exit.code(), Some(0), "graceful stop exits 0");
    let mut rest = String::new();
    logs.read_to_string(&mut rest).expect("read rest");
    assert!(rest.contains("\"signal\":\"SIGTERM\""), "{rest}");
    assert!(rest.contains("\"message\":\"stopped\""), "{rest}");
}

/// Values of the wrong type or shape all show at once, each with its line:
/// an address that is no address, a port that is no number, a bad entry
/// among the links.
#[test]
fn check_config_lists_every_wrong_value_with_its_line() {
    let (code, stderr) = check_config(
        "[listen]\ngrpc = \"not-an-address\"\n\n[probe]\nport = \"x\"\n\n\
         [[links]]\npeer = \"b\"\nlocal_address = \"10.0.0.1\"\npeer_address = \"nowhere\"\n\n\
         [[links]]\npeer = \"c\"\nlocal_address = 7\npeer_address = \"10.0.0.6\"\n",
    );
    assert_eq!(code, Some(1));
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    assert!(
        lines[0].starts_with("meshd.toml:2: listen.grpc: "),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with("meshd.toml:5: probe.port: "),
        "{stderr}"
    );
    assert!(
        lines[2].starts_with("meshd.toml:10: links[0].peer_address: "),
        "{stderr}"
    );
    assert!(
        lines[3].starts_with("meshd.toml:14: links[1].local_address: "),
        "{stderr}"
    );
}

#[test]
fn usage_errors_exit_64_and_help_exits_0() {
    let out = meshd(&["run", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(64));
    let out = meshd(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("64  wrong usage"));
}

/// A second meshd on a taken port says so once, with what to do.
#[test]
fn a_port_in_use_is_named_once_with_the_way_out() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write(
        dir.path(),
        "meshd.toml",
        &format!(
            "[node]\nid = \"busy\"\n\n[listen]\ngrpc = \"127.0.0.1:{port}\"\nmetrics = \"127.0.0.1:{}\"\n",
            free_port()
        ),
    );
    let out = meshd(&["run", "--config", &config]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.contains("cannot listen"))
        .unwrap_or_else(|| panic!("no error line in {stderr}"));
    assert_eq!(
        error.matches("Address already in use").count(),
        1,
        "said once: {error}"
    );
    assert!(
        error.contains("another meshd (or another program) holds the port"),
        "{error}"
    );
    assert!(error.contains("listen.grpc"), "{error}");
    drop(taken);
}
