//! Live reload of a running node: a valid edit applies without a restart,
//! keeping what did not change; an invalid edit is refused, announced, and
//! the running config stays in force.

mod common;

use std::time::Duration;

use common::{HOSTNAME, stop};
use meshd::config::Config;
use meshd::node::RunningNode;
use meshd_domain::EventKind;

/// The mesh listener's port, the same in every edit (changing it needs a
/// restart).
fn mesh_port() -> u16 {
    static PORT: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *PORT.get_or_init(common::free_port)
}

/// Certificates beside the config, named relative to it as an operator
/// would.
fn write_certificates(dir: &std::path::Path) {
    common::issue_certificates(dir, "reload-test");
}

fn config_text(peers: &[&str]) -> String {
    let mut text = format!(
        "[node]\nid = \"reload-test\"\n\n[listen]\ngrpc = \"127.0.0.1:0\"\nmetrics = \"127.0.0.1:0\"\nmesh = \"127.0.0.1:{}\"\n\n[tls]\nca = \"ca.pem\"\ncert = \"reload-test.pem\"\nkey = \"reload-test-key.pem\"\n",
        mesh_port()
    );
    for (i, peer) in peers.iter().enumerate() {
        text.push_str(&format!(
            "\n[[peers]]\nid = \"{peer}\"\naddress = \"127.0.0.1:{}\"\n",
            1 + i
        ));
    }
    text
}

/// Writes like an editor: a new file renamed over the old one.
fn save(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("swp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

async fn wait_for(
    node: &RunningNode,
    what: &str,
    check: impl Fn(&meshd_domain::MeshStatus) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check(&node.state.current()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A node started from a config (one peer, certificates beside it) in
/// `dir` that it watches: the config's path and the node.
async fn start_watched(dir: &std::path::Path) -> (std::path::PathBuf, RunningNode) {
    let path = dir.join("meshd.toml");
    write_certificates(dir);
    std::fs::write(&path, config_text(&["b"])).expect("write");
    let config = Config::load(&path, HOSTNAME).expect("valid config");
    let mut node = RunningNode::start(&config, HOSTNAME).await.expect("start");
    node.watch_config(
        path.clone(),
        HOSTNAME.to_owned(),
        meshd::config::reload::Hangups::install(),
    );
    // The watch is in place once the task has run; give it a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    (path, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_apply_without_restart_and_bad_edits_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, node) = start_watched(dir.path()).await;
    let incarnation = node.identity.incarnation;
    let mut events = node.state.subscribe_events();

    save(&path, &config_text(&["b", "c", "d"]));
    wait_for(&node, "4 members", |s| s.quorum.configured.len() == 4).await;
    let reloaded = loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("an event")
            .expect("stream open")
            .event;
        if event.kind == EventKind::ConfigReloaded {
            break event;
        }
    };
    assert_eq!(reloaded.summary, "config reloaded: 4 members, 0 links");
    assert_eq!(
        node.state.current().node.incarnation,
        incarnation,
        "no restart"
    );

    // An unknown key: refused with the problem, the 4-member config stays.
    save(
        &path,
        &format!("{}\ncolour = \"blue\"\n", config_text(&["b"])),
    );
    let refused = loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("an event")
            .expect("stream open")
            .event;
        if event.kind == EventKind::ConfigRejected {
            break event;
        }
    };
    assert!(
        refused.summary.contains("unknown key `colour`"),
        "{}",
        refused.summary
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(node.state.current().quorum.configured.len(), 4);

    // Fixed again: applies.
    save(&path, &config_text(&[]));
    wait_for(&node, "back to one member", |s| {
        s.quorum.configured.len() == 1
    })
    .await;
    assert!(node.state.current().quorum.has_quorum);
    stop(node).await;
}

/// A config swapped for a link to `/dev/zero` or for a FIFO with no
/// writer used to exhaust memory or hang the reload (and the runtime
/// thread it ran on). Each is refused at once by name, announced, and the
/// running config stays in force; a good file afterwards applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_replaced_by_a_device_or_a_fifo_is_refused_without_hanging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, node) = start_watched(dir.path()).await;
    let mut events = node.state.subscribe_events();

    let swap = dir.path().join("swap");
    for (make, named) in [
        (
            Box::new(|at: &std::path::Path| std::os::unix::fs::symlink("/dev/zero", at))
                as Box<dyn Fn(&std::path::Path) -> std::io::Result<()>>,
            "is a character device, not a regular file",
        ),
        (
            Box::new(|at: &std::path::Path| {
                std::process::Command::new("mkfifo")
                    .arg(at)
                    .status()
                    .map(|_| ())
            }),
            "is a FIFO, not a regular file",
        ),
    ] {
        make(&swap).expect("made");
        std::fs::rename(&swap, &path).expect("swapped in");
        let refused = loop {
            let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
                .await
                .expect("refused within 10 s, not hung")
                .expect("stream open")
                .event;
            if event.kind == EventKind::ConfigRejected {
                break event;
            }
        };
        assert!(refused.summary.contains(named), "{}", refused.summary);
        assert_eq!(node.state.current().quorum.configured.len(), 2);
    }

    save(&path, &config_text(&[]));
    wait_for(&node, "back to one member", |s| {
        s.quorum.configured.len() == 1
    })
    .await;
    stop(node).await;
}
