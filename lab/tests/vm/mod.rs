//! Shared by the VM tests: whether VMs can run here (under `CI=true` they
//! must), and the image they boot, built from this workspace's meshd and
//! meshctl. Every VM test holds the machine-wide test lock: a TCG guest
//! keeps a core busy, and timing-sensitive tests must not share the host
//! with it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use meshd_lab::Binaries;
use meshd_lab::vm::{self, Image, Vm};

/// Whether VMs can run; under `CI=true` they must, so a missing
/// prerequisite fails the test instead of skipping it.
pub fn can_run() -> bool {
    let Some(reason) = vm::missing_prerequisite() else {
        return true;
    };
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "the VM tests must run under CI=true, but: {reason}"
    );
    eprintln!("skipped: {reason}");
    false
}

/// The cargo profile directory of this build (`target/debug`).
pub fn profile_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_lab"))
        .parent()
        .expect("the lab binary is in a directory")
        .to_path_buf()
}

/// The image with this build's meshd and meshctl, and `extra` files.
pub fn image(extra: &[(String, PathBuf)]) -> Image {
    let dir = profile_dir();
    let binaries = Binaries::find(&dir).unwrap_or_else(|err| panic!("{err}"));
    Image::build(&vm::cache_beside(&dir), &binaries, extra)
        .unwrap_or_else(|err| panic!("VM image: {err}"))
}

/// Runs `script` in `vm`, which must succeed.
pub fn run(vm: &mut Vm, script: &str) -> String {
    vm.run(script).unwrap_or_else(|err| panic!("{err}"))
}

/// Runs `script` in `vm` until `holds` accepts its output, for at most
/// `limit` (generous: TCG guests on shared cores); the last output.
pub fn wait_for(
    vm: &mut Vm,
    script: &str,
    what: &str,
    limit: Duration,
    holds: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let output = vm
            .exec(script, Duration::from_secs(60))
            .unwrap_or_else(|err| panic!("{err}"));
        if holds(&output.text) {
            return output.text;
        }
        assert!(
            Instant::now() < deadline,
            "VM {}: waited {limit:?} for {what}; last output of `{script}`:\n{}\n--- console ---\n{}",
            vm.name,
            output.text,
            vm.console_tail()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
