//! The config file `meshd install` writes when none exists: a one-node mesh
//! named after this host, with the peers and links to fill in shown as
//! comments. `meshd check-config` accepts it as written.

use meshd_domain::NodeId;

use crate::config::{
    DEFAULT_GRPC_PORT, DEFAULT_LISTEN_GRPC, DEFAULT_LISTEN_METRICS, DEFAULT_PROBE_PORT,
};

/// The text of the default config for node `id`, read from `path`.
pub fn text(id: &NodeId, path: &str) -> String {
    let id_text = id.as_str();
    let id = toml::Value::String(id_text.to_owned());
    format!(
        r#"# meshd configuration, written by `meshd install` (which never overwrites it).
#
# As written, meshd monitors a one-node mesh: this node alone. Add the other
# nodes as [[peers]] and this node's cables as [[links]] below; every node
# should list the same mesh. Every key not shown keeps its default; all keys,
# with their defaults and limits, are in meshd.example.toml in the sources.
#
# meshd picks up a saved edit (or SIGHUP) without restarting; an edit that is
# not valid is refused and logged, and the running config stays. Check first:
#   meshd check-config {path}
# Durations are written like "100ms", "1s", "2m".

[node]
# This node's id in the mesh: 1-63 letters, digits, '.', '_' or '-'.
id = {id}

[listen]
# gRPC for meshctl on this node: read-only, no certificate.
grpc = "{grpc}"
# HTTP: the mesh page at /, /metrics (Prometheus) and /healthz.
metrics = "{metrics}"
# With peers: this node on the management network, for its peers (mutual TLS).
# mesh = "10.0.0.1:{grpc_port}"

# With peers: the mesh's certificates, from `meshctl certs init` (once per
# mesh) and `meshctl certs issue <node>`; relative to this file's directory.
# [tls]
# ca = "tls/ca.pem"
# cert = "tls/{file_id}.pem"
# key = "tls/{file_id}-key.pem"

[probe]
# UDP port of the probe responder on every cable address (same on all nodes).
port = {probe_port}

# One block per other node of the mesh: its id and its listen.mesh address on
# the management network (not on a Thunderbolt cable).
# [[peers]]
# id = "studio-2"
# address = "10.0.0.2:7420"

# One block per cable from this node, each cable on its own /30 network as
# `meshctl plan` prints them (not 169.254/16, which macOS self-assigns).
# [[links]]
# peer = "studio-2"
# local_iface = "en2"
# local_address = "10.254.0.1"
# peer_address = "10.254.0.2"
# expected_speed_gbps = 80

# Where the alert leader sends alerts. Default: none (metrics only).
# [alerting]
# alertmanagers = ["http://10.0.0.1:9093"]
"#,
        grpc = DEFAULT_LISTEN_GRPC,
        grpc_port = DEFAULT_GRPC_PORT,
        file_id = id_text,
        metrics = DEFAULT_LISTEN_METRICS,
        probe_port = DEFAULT_PROBE_PORT,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_default_config_is_valid_and_names_this_node() {
        let id = NodeId::from_hostname("studio-7.local");
        let source = text(&id, "/etc/meshd/meshd.toml");
        let config = Config::parse(&source, "meshd.toml", "other-host").expect("valid");
        assert_eq!(config.node.id.as_str(), "studio-7");
        assert!(config.peers.is_empty());
        assert!(config.links.is_empty());
        let mut expected = Config::embedded_default("studio-7");
        expected.node.id = id;
        assert_eq!(config, expected, "only the defaults, spelled out");
    }

    #[test]
    fn the_commented_examples_are_valid_once_uncommented() {
        let id = NodeId::from_hostname("studio-1");
        let source = text(&id, "/etc/meshd/meshd.toml")
            .lines()
            .map(|line| {
                let code = line.strip_prefix("# ").unwrap_or(line);
                // Uncomment the TOML lines, keep the prose comments.
                let is_toml = code.starts_with('[')
                    || code.split_once(" = ").is_some_and(|(key, _)| {
                        key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    });
                if is_toml { code } else { line }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let config = Config::parse(&source, "meshd.toml", "studio-1").expect("valid");
        assert_eq!(config.peers.len(), 1);
        assert_eq!(config.links.len(), 1);
        assert_eq!(config.alerting.alertmanagers.len(), 1);
    }
}
