//! Certificates in a running mesh, over loopback with real mutual TLS: a
//! certificate that expires while its node runs, a serial revoked by a
//! config reload, a peer of another CA and a daemon with an id the mesh
//! does not know on a member's address. Each is named, with its reason, as
//! `certificate_refused` (and the expiry as `certificate_expiring` before),
//! never blamed on the management network.
//!
//! The mesh tests hold the machine-wide test lock (`meshd_test_lock`);
//! deadlines are generous bounds on behaviour, never speed measurements.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{HOSTNAME, start_demo_with, stop};
use meshd::config::{Config, PeerConfig};
use meshd::demo::Demo;
use meshd::node::RunningNode;
use meshd_domain::{Alarm, AlarmKind, MeshStatus, NodeId};

const DAY: Duration = Duration::from_secs(24 * 3600);
/// Far above what any step here takes on a quiet host; the lock keeps the
/// host quiet.
const WITHIN: Duration = Duration::from_secs(30);

fn alarms_of(status: &MeshStatus, kind: AlarmKind, node: &str) -> Vec<Alarm> {
    status
        .alarms
        .iter()
        .filter(|a| a.kind == kind && a.node.as_str() == node)
        .cloned()
        .collect()
}

fn brief(status: &MeshStatus) -> String {
    let alarms: Vec<String> = status
        .alarms
        .iter()
        .map(|a| format!("{} on {}: {}", a.kind, a.node, a.summary))
        .collect();
    format!("{}: [{}]", status.node.id, alarms.join("; "))
}

/// Waits until `check` holds on every status `statuses` returns, failing
/// with the ones it does not hold on. Every status on the way is given to
/// `never` too, which must not hold on any.
async fn wait_until(
    what: &str,
    statuses: impl Fn() -> Vec<Arc<MeshStatus>>,
    check: impl Fn(&MeshStatus) -> bool,
    never: impl Fn(&MeshStatus) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let all = statuses();
        if let Some(bad) = all.iter().find(|s| never(s)) {
            panic!("while waiting for {what}: {}", brief(bad));
        }
        if all.iter().all(|s| check(s)) {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let failing: Vec<String> = all.iter().filter(|s| !check(s)).map(|s| brief(s)).collect();
            panic!("{what} not seen within {WITHIN:?}: {}", failing.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn running(demo: &Demo) -> Vec<Arc<MeshStatus>> {
    (0..demo.plan().nodes.len())
        .filter_map(|i| demo.node(i))
        .map(|n| n.state.current())
        .collect()
}

fn management_unreachable(status: &MeshStatus) -> bool {
    status
        .alarms
        .iter()
        .any(|a| a.kind == AlarmKind::ManagementUnreachable)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_expiring_while_its_node_runs_is_expiring_then_refused_by_name() {
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, plan) = start_demo_with(3, |plan| {
        for node in &mut plan.nodes {
            node.config.tls.max_connection_age = Duration::from_secs(2);
        }
    })
    .await;
    // Node c restarts with a certificate of the mesh's CA that ends soon.
    demo.kill(2).await.expect("c stops");
    let store = meshd_pki::store::CertDir::new(&plan.certs);
    let ca = store.load_ca().expect("the demo's CA");
    let lifetime = Duration::from_secs(40);
    let issued = ca
        .issue("c", &[], SystemTime::now(), lifetime)
        .expect("a short certificate");
    let ends =
        meshd_pki::certificate_facts(&meshd_pki::certificate_der(&issued.cert_pem).expect("der"))
            .expect("facts")
            .not_after;
    let pair = store.node("c");
    std::fs::write(&pair.cert, &issued.cert_pem).expect("cert");
    std::fs::write(&pair.key, &issued.key_pem).expect("key");
    demo.revive(2).await.expect("c starts with it");

    // Before it ends: every node shows c's certificate_expiring.
    wait_until(
        "certificate_expiring about c on every node",
        || running(&demo),
        |s| !alarms_of(s, AlarmKind::CertificateExpiring, "c").is_empty(),
        management_unreachable,
    )
    .await;
    assert!(
        SystemTime::now() < ends,
        "the certificate ended before the mesh showed it expiring: run on a quieter host"
    );
    // a learns c's new certificate from its next handshake with c, which
    // may come a moment after c's own alarm reached a's status.
    let series = format!(
        "meshd_tls_certificate_expiry_timestamp_seconds{{node=\"c\"}} {}",
        ends.duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    );
    let mut metrics = String::new();
    for _ in 0..50 {
        metrics = common::http_get(plan.nodes[0].metrics(), "/metrics")
            .await
            .1;
        if metrics.contains(&series) || SystemTime::now() >= ends {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(metrics.contains(&series), "{series} not in {metrics}");

    // Once it ended: a and b refuse c by name and reason, c knows its own
    // is refused, and nobody blames the management network.
    let refused_as_expired = |s: &MeshStatus| {
        alarms_of(s, AlarmKind::CertificateRefused, "c")
            .iter()
            .any(|a| a.summary.contains("expired"))
    };
    tokio::time::sleep(ends.duration_since(SystemTime::now()).unwrap_or_default()).await;
    wait_until(
        "certificate_refused about c, expired, on every node",
        || running(&demo),
        refused_as_expired,
        management_unreachable,
    )
    .await;
    // The refusal holds, and still nothing says management_unreachable
    // after the alarms had time to settle.
    let settle = plan.nodes[0].config.report.stale_after * 3;
    let until = tokio::time::Instant::now() + settle;
    while tokio::time::Instant::now() < until {
        for status in running(&demo) {
            assert!(refused_as_expired(&status), "{}", brief(&status));
            assert!(!management_unreachable(&status), "{}", brief(&status));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    demo.stop().await;
}

/// Two nodes, each from its own certificate directory: `a` and a node with
/// id `b_id` that `a` knows as `b`. Their configs, `a`'s written to `dir`
/// so a reload can change it.
struct Pair {
    a: Config,
    b: Config,
}

fn pair(a_certs: &Path, b_certs: &Path, b_id: &str) -> Pair {
    let member = |id: &str, certs: &Path| {
        let mut config = common::loopback_config();
        config.node.id = NodeId::new(id).expect("id");
        config.listen.mesh = Some(
            format!("127.0.0.1:{}", common::free_port())
                .parse()
                .expect("addr"),
        );
        let store = meshd_pki::store::CertDir::new(certs);
        let own = store.node(id);
        config.tls.ca = Some(store.ca().cert);
        config.tls.cert = Some(own.cert);
        config.tls.key = Some(own.key);
        config.tls.max_connection_age = Duration::from_secs(2);
        config
    };
    let mut a = member("a", a_certs);
    let mut b = member(b_id, b_certs);
    a.peers = vec![PeerConfig {
        id: NodeId::new("b").expect("id"),
        address: b.listen.mesh.expect("mesh").to_string(),
    }];
    b.peers = vec![PeerConfig {
        id: a.node.id.clone(),
        address: a.listen.mesh.expect("mesh").to_string(),
    }];
    Pair { a, b }
}

fn issue(store: &meshd_pki::store::CertDir, ca: &meshd_pki::Ca, node: &str) {
    store
        .issue(ca, node, &[], SystemTime::now(), 365 * DAY)
        .expect("certificate");
}

fn new_ca(store: &meshd_pki::store::CertDir) -> meshd_pki::Ca {
    store
        .init("meshd test CA", SystemTime::now(), 3650 * DAY)
        .expect("CA")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_ca_is_shown_refused_with_the_reason_on_both_sides() {
    let _serial = meshd_test_lock::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ours, theirs) = (dir.path().join("ours"), dir.path().join("theirs"));
    let ours_store = meshd_pki::store::CertDir::new(&ours);
    issue(&ours_store, &new_ca(&ours_store), "a");
    let theirs_store = meshd_pki::store::CertDir::new(&theirs);
    issue(&theirs_store, &new_ca(&theirs_store), "b");
    let Pair { a, b } = pair(&ours, &theirs, "b");
    let a = common::start(&a).await;
    let b = common::start(&b).await;
    let current = || vec![a.state.current(), b.state.current()];
    wait_until(
        "b refused by a (unknown CA), and a by b",
        current,
        |s| {
            let other = if s.node.id.as_str() == "a" { "b" } else { "a" };
            alarms_of(s, AlarmKind::CertificateRefused, other)
                .iter()
                .any(|a| a.summary.contains("unknown CA"))
        },
        management_unreachable,
    )
    .await;
    stop(a).await;
    stop(b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_with_an_unknown_id_on_a_members_address_is_named() {
    let _serial = meshd_test_lock::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = meshd_pki::store::CertDir::new(dir.path());
    let ca = new_ca(&store);
    issue(&store, &ca, "a");
    issue(&store, &ca, "newcomer");
    let Pair { a, b } = pair(dir.path(), dir.path(), "newcomer");
    let a = common::start(&a).await;
    let b = common::start(&b).await;
    wait_until(
        "b refused by a, naming the newcomer's id",
        || vec![a.state.current()],
        |s| {
            alarms_of(s, AlarmKind::CertificateRefused, "b")
                .iter()
                .any(|a| a.summary.contains("the certificate of \"newcomer\""))
        },
        management_unreachable,
    )
    .await;
    stop(a).await;
    stop(b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serial_revoked_by_a_reload_is_refused_and_its_connections_end() {
    let _serial = meshd_test_lock::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = meshd_pki::store::CertDir::new(dir.path());
    let ca = new_ca(&store);
    issue(&store, &ca, "a");
    issue(&store, &ca, "b");
    let Pair { a, b } = pair(dir.path(), dir.path(), "b");
    let config_path = dir.path().join("a.toml");
    let config_text = |revoked: &str| {
        format!(
            "[node]\nid = \"a\"\n\n[listen]\ngrpc = \"127.0.0.1:0\"\nmetrics = \"127.0.0.1:0\"\nmesh = \"{}\"\n\n\
             [tls]\nca = \"ca.pem\"\ncert = \"a.pem\"\nkey = \"a-key.pem\"\nmax_connection_age = \"2s\"\nrevoked_serials = [{revoked}]\n\n\
             [[peers]]\nid = \"b\"\naddress = \"{}\"\n",
            a.listen.mesh.expect("mesh"),
            b.listen.mesh.expect("mesh"),
        )
    };
    std::fs::write(&config_path, config_text("")).expect("write");
    let loaded = Config::load(&config_path, HOSTNAME).expect("a's config");
    assert_eq!(loaded.peers, a.peers);
    let mut a = RunningNode::start(&loaded, HOSTNAME)
        .await
        .expect("a starts");
    a.watch_config(
        config_path.clone(),
        HOSTNAME.to_owned(),
        meshd::config::reload::Hangups::install(),
    );
    let b = common::start(&b).await;
    let heard = |s: &MeshStatus| s.quorum.members.len() == 2;
    wait_until(
        "a and b hear each other",
        || vec![a.state.current(), b.state.current()],
        heard,
        |_| false,
    )
    .await;

    let b_pem = std::fs::read_to_string(store.node("b").cert).expect("b's certificate");
    let serial = meshd_pki::certificate_facts(&meshd_pki::certificate_der(&b_pem).expect("der"))
        .expect("facts")
        .serial;
    let tmp = config_path.with_extension("swp");
    std::fs::write(&tmp, config_text(&format!("\"{serial}\""))).expect("write");
    std::fs::rename(&tmp, &config_path).expect("save");

    // a refuses b as revoked; b learns that a refuses its certificate;
    // and a stops hearing b (the open connections ended).
    wait_until(
        "b refused as revoked by a, and told so",
        || vec![a.state.current(), b.state.current()],
        |s| {
            let alarms = alarms_of(s, AlarmKind::CertificateRefused, "b");
            match s.node.id.as_str() {
                "a" => alarms.iter().any(|a| a.summary.contains("revoked")) && !heard(s),
                _ => alarms
                    .iter()
                    .any(|a| a.evidence.iter().any(|e| e.contains("revoked"))),
            }
        },
        management_unreachable,
    )
    .await;
    stop(a).await;
    stop(b).await;
}
