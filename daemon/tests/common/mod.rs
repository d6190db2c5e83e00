//! Helpers shared by the daemon's integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use meshd::config::Config;
use meshd::node::RunningNode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const HOSTNAME: &str = "test-host.local";

/// The embedded default, moved to loopback on ports the OS picks.
pub fn loopback_config() -> Config {
    let mut config = Config::embedded_default(HOSTNAME);
    config.listen.grpc = "127.0.0.1:0".parse().expect("addr");
    config.listen.metrics = "127.0.0.1:0".parse().expect("addr");
    config
}

pub async fn start(config: &Config) -> RunningNode {
    RunningNode::start(config, HOSTNAME)
        .await
        .expect("node starts")
}

pub async fn stop(node: RunningNode) {
    node.shutdown();
    tokio::time::timeout(Duration::from_secs(10), node.wait())
        .await
        .expect("node stops within 10 s")
        .expect("node stops cleanly");
}

/// A plain HTTP/1.0 GET: status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("http response");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (code, body.to_owned())
}

pub async fn channel(addr: SocketAddr) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("grpc connect")
}
