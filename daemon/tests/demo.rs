//! `meshd demo`: real nodes in one process behind the demo's proxies, driven
//! by the same command lines a person types. Loopback only; each test has
//! its own base port so tests can run side by side.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Child, bases, spawn_demo, start_demo as start, status};
use meshd::demo::{Demo, DemoError, plan};

async fn reply(demo: &mut Demo, line: &str) -> String {
    demo.execute(line).await.reply.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_answer_and_kill_revive_gives_a_new_incarnation() {
    let _serial = meshd_test_lock::exclusive();
    let (mut demo, plan) = start(3).await;

    for (i, node) in plan.nodes.iter().enumerate() {
        let running = demo.node(i).expect("running");
        assert_eq!(running.grpc_addr, node.grpc());
        assert_eq!(running.state.current().node.id, node.id);
        let answer = status(node.grpc()).await;
        assert_eq!(answer.node.id, node.id);
        assert_eq!(answer.quorum.configured.len(), 3);
    }

    // Peers' addresses lead through the management proxies to the peer's
    // mesh listener, which proves with the mesh's certificate that it is b.
    let a = &plan.nodes[0].config;
    let a_to_b = a.peers[0].address.parse().expect("addr");
    let tls = meshd::transport::tls::MeshTls::load(&a.tls, &a.node.id)
        .expect("a's certificates")
        .expect("the demo runs mutual TLS");
    let b = &plan.nodes[1].id;
    assert!(tls.connect(b, a_to_b).await.is_ok(), "a reaches b as b");
    assert!(
        tls.connect(&plan.nodes[2].id, a_to_b).await.is_err(),
        "b's certificate does not pass for c"
    );

    let before = demo.node(1).expect("b").identity.incarnation;
    assert_eq!(reply(&mut demo, "kill b").await, "ok: b killed");
    assert!(demo.node(1).is_none());
    let gone = tokio::net::TcpStream::connect(plan.nodes[1].grpc()).await;
    assert!(gone.is_err(), "b's gRPC port is closed");
    assert!(
        reply(&mut demo, "kill b")
            .await
            .starts_with("error: node b is not running")
    );

    let revived = reply(&mut demo, "revive b").await;
    assert!(revived.starts_with("ok: b revived"), "{revived}");
    let after = demo.node(1).expect("b again").identity.incarnation;
    assert!(after > before, "{after:?} > {before:?}");
    assert_eq!(status(plan.nodes[1].grpc()).await.node.incarnation, after);
    assert!(
        reply(&mut demo, "revive b")
            .await
            .starts_with("error: node b is already running")
    );

    assert_eq!(reply(&mut demo, "cut a c").await, "ok: cable a-c cut");
    assert!(demo.faults().link(2, 0).cut);
    assert!(reply(&mut demo, "slow b c 20").await.starts_with("ok"));
    assert!(reply(&mut demo, "partition a b,c").await.starts_with("ok"));
    assert!(!demo.faults().connected(0, 1));
    assert!(
        reply(&mut demo, "lossy a q 5")
            .await
            .starts_with("error: unknown node \"q\"")
    );
    assert!(reply(&mut demo, "kill c").await.starts_with("ok"));

    let healed = reply(&mut demo, "heal").await;
    assert!(healed.starts_with("ok"), "{healed}");
    assert!(demo.faults().faulty_links().is_empty());
    assert!(demo.faults().connected(0, 1));
    assert!(demo.node(2).is_some(), "heal revives killed nodes");
    assert_eq!(status(plan.nodes[2].grpc()).await.node.id.as_str(), "c");

    assert_eq!(demo.execute("").await.reply, None);
    assert!(reply(&mut demo, "help").await.contains("partition"));
    let quit = demo.execute("quit").await;
    assert!(quit.quit);

    tokio::time::timeout(Duration::from_secs(30), demo.stop())
        .await
        .expect("the demo stops");
    let closed = tokio::net::TcpStream::connect(plan.nodes[0].grpc()).await;
    assert!(closed.is_err(), "a is stopped");
    let proxy_closed = tokio::net::TcpStream::connect(a_to_b).await;
    assert!(proxy_closed.is_err(), "the proxies are stopped");
}

#[test]
fn the_cli_prints_where_to_look_answers_commands_and_quits() {
    let _serial = meshd_test_lock::exclusive();
    let Child {
        process,
        mut stdin,
        mut lines,
        banner,
        base,
    } = spawn_demo(env!("CARGO_BIN_EXE_meshd"), &["--nodes", "2"]);
    let grpc_b = format!("meshctl --addr 127.0.0.1:{} status", base + 2);
    assert!(banner.contains(&grpc_b), "{banner}");
    let metrics_a = format!("http://127.0.0.1:{}/metrics", base + 11);
    assert!(banner.contains(&metrics_a), "{banner}");
    let page_a = format!("node a: page http://127.0.0.1:{}/ ", base + 11);
    assert!(banner.contains(&page_a), "{banner}");
    assert!(banner.contains("partition A,B C,D"), "{banner}");

    writeln!(stdin, "cut a b").expect("write");
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("ok: cable a-b cut")
    );
    writeln!(stdin, "slow a b many").expect("write");
    let error = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(
        error.starts_with("error: \"many\" is not a delay"),
        "{error}"
    );
    writeln!(stdin, "quit").expect("write");
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("ok: stopping")
    );
    let output = process.wait_with_output().expect("exit");
    assert!(output.status.success(), "{:?}", output.status);
    // Every node's ports are bound before any starts: no node warns about a
    // peer that is still starting, before the banner or after.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("WARN"), "warnings:\n{stderr}");
}

#[test]
fn the_cli_refuses_a_mesh_size_out_of_range() {
    let out = Command::new(env!("CARGO_BIN_EXE_meshd"))
        .args(["demo", "--nodes", "9"])
        .output()
        .expect("meshd demo runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("9 nodes is out of range"), "{stderr}");
}

#[test]
fn the_cli_names_a_taken_port_and_suggests_another_base() {
    for base in bases() {
        // Node b's end of its cable to a, as a stranger holding one port.
        let taken = std::net::SocketAddr::from(([127, 0, 0, 1], plan::cable_port(base, 1, 0)));
        let Ok(_holder) = std::net::UdpSocket::bind(taken) else {
            continue;
        };
        let out = Command::new(env!("CARGO_BIN_EXE_meshd"))
            .args(["demo", "--nodes", "2", "--base-port", &base.to_string()])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("meshd demo runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !stderr.contains(&taken.to_string()) && stderr.contains("is taken") {
            // Another test holds another port of this base.
            continue;
        }
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            out.stdout.is_empty(),
            "no banner for a demo that did not start"
        );
        let expected = format!(
            "{taken}/udp (node b's end of the cable to a) is taken: Address already in use"
        );
        assert!(stderr.contains(&expected), "{stderr}");
        let suggested = format!("--base-port {}", plan::suggested_base(base));
        assert!(stderr.contains(&suggested), "{stderr}");
        return;
    }
    panic!("no base port whose cable port could be held");
}

#[tokio::test]
async fn a_taken_port_stops_the_start_before_anything_binds() {
    let _serial = meshd_test_lock::exclusive();
    for base in bases() {
        let plan = plan::Plan::new(3, base, &common::demo_certs(base)).expect("plan");
        let metrics_b = plan.nodes[1].metrics();
        let Ok(holder) = std::net::TcpListener::bind(metrics_b) else {
            continue;
        };
        let err = Demo::start(plan.clone(), common::HOSTNAME)
            .await
            .expect_err("a port is taken");
        match &err {
            DemoError::PortTaken {
                transport, addr, ..
            } if *addr == metrics_b => {
                assert_eq!(*transport, plan::Transport::Tcp);
                let message = err.to_string();
                assert!(message.contains("(metrics of node b)"), "{message}");
                assert!(message.contains("--base-port"), "{message}");
            }
            // Another test holds another port of this base.
            DemoError::PortTaken { .. } => continue,
            other => panic!("unexpected error: {other}"),
        }
        // Nothing started: with the port back, the same plan starts.
        drop(holder);
        let Ok(demo) = Demo::start(plan, common::HOSTNAME).await else {
            continue;
        };
        tokio::time::timeout(Duration::from_secs(30), demo.stop())
            .await
            .expect("the demo stops");
        return;
    }
    panic!("no base port whose metrics port could be held");
}
