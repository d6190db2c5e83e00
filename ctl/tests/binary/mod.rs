//! This build's meshctl binary, run from async tests.

use std::process::Output;

/// Runs meshctl on a blocking thread, so that a node served by the same
/// test keeps serving meanwhile.
pub async fn meshctl(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_meshctl"))
            .args(&args)
            .env_remove("MESHCTL_ADDR")
            .output()
            .expect("meshctl runs")
    })
    .await
    .expect("join")
}

#[allow(
    dead_code,
    reason = "each test binary uses what it needs of this module"
)]
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
