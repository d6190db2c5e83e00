//! The docs' samples of what the `meshd` binary itself prints, produced by
//! it (see `doc_samples`): `meshd check-config` on a bad file
//! (docs/CONFIGURATION.md) and `meshd demo` finding a port taken
//! (docs/LAB.md). `MESHD_UPDATE_SAMPLES=1` rewrites them.

#[path = "doc_samples/mod.rs"]
mod doc_samples;

use std::process::{Command, Output};

const MESHD: &str = env!("CARGO_BIN_EXE_meshd");

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `meshd check-config bad.toml` on a file with a value of the wrong type
/// on lines 2, 5 and 14: every one is listed, with its line.
fn check_config_bad() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = "\
[listen]
grpc = \"7420\"

[probe]
port = \"x\"

[[links]]
peer = \"studio-2\"
local_address = \"10.254.0.1\"
peer_address = \"10.254.0.2\"

[[links]]
peer = \"studio-3\"
local_address = 7
peer_address = \"10.254.0.6\"
";
    std::fs::write(dir.path().join("bad.toml"), bad).expect("write");
    let out = Command::new(MESHD)
        .args(["check-config", "bad.toml"])
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .output()
        .expect("meshd runs");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    doc_samples::check("check-config-bad", &stderr(&out));
}

/// `meshd demo` on the default ports with node b's metrics port taken. Is
/// skipped, saying so, when something else holds that port or one the
/// demo checks before it (a demo someone runs by hand), since the message
/// then names another holder or port; the test's own demos use other
/// ports (`common::bases`).
fn demo_port_taken() {
    if !cfg!(target_os = "linux") {
        // The sample shows Linux's errno (98; macOS's is 48).
        eprintln!("skipped demo-port-taken: the sample shows a Linux host");
        return;
    }
    let Ok(taken) = std::net::TcpListener::bind("127.0.0.1:17412") else {
        eprintln!("skipped demo-port-taken: 127.0.0.1:17412 is held by something else");
        return;
    };
    let out = Command::new(MESHD)
        .arg("demo")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("meshd runs");
    drop(taken);
    let message = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    if !message.contains("127.0.0.1:17412/tcp") {
        eprintln!("skipped demo-port-taken: the default demo ports are in use: {message}");
        return;
    }
    doc_samples::check("demo-port-taken", &message);
}

#[test]
fn meshds_own_samples_are_what_it_prints() {
    check_config_bad();
    demo_port_taken();
}
