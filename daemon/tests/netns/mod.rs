//! Network namespaces the root-only daemon tests create for themselves:
//! running `ip`, deleting what a test made however it ends, and why a test
//! cannot run here.
#![allow(dead_code)]

use std::process::{Child, Command};

/// Stops the processes and deletes the namespaces (and with them their
/// veths and bridges), whatever way the test ends.
#[derive(Default)]
pub struct Cleanup {
    pub namespaces: Vec<String>,
    pub children: Vec<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs `ip` with `args`; a failure fails the test, naming the command.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Why a namespace test cannot run here, if it cannot.
pub fn missing_prerequisite() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    if euid != Some("0") {
        return Some("not root".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("`ip` (iproute2) is missing".into()),
    }
}
