//! The listeners and TLS: addresses that must not collide on one port, and
//! the certificate, key and CA files mutual TLS needs.

use std::net::SocketAddr;

use super::super::error::Problem;
use super::super::{Config, DEFAULT_GRPC_PORT};
use super::{MAX_CONNECTION_AGE_RANGE, check_duration};

/// Two listeners collide on one port when their addresses overlap: equal,
/// or either one every interface. Port 0 asks the OS for any free port, so
/// two of those never collide.
fn collide(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.port() != 0
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

pub(super) fn check_listeners(c: &Config, p: &mut Vec<Problem>) {
    let l = &c.listen;
    let mut listeners = vec![("listen.grpc", l.grpc), ("listen.metrics", l.metrics)];
    if let Some(mesh) = l.mesh {
        listeners.push(("listen.mesh", mesh));
    }
    for (i, &(key, addr)) in listeners.iter().enumerate() {
        if let Some(&(first, _)) = listeners
            .get(..i)
            .unwrap_or_default()
            .iter()
            .find(|(_, earlier)| collide(*earlier, addr))
        {
            p.push(
                Problem::new(
                    key,
                    format!("{addr} is also {first}; every listener needs its own port"),
                )
                .with_first(first),
            );
        }
    }
    match l.mesh {
        None if !c.peers.is_empty() => p.push(Problem::new(
            "listen.mesh",
            format!(
                "a node with peers needs listen.mesh: this node's address on the management \
                 network, which its peers' addresses point at, like \"10.0.0.1:{DEFAULT_GRPC_PORT}\""
            ),
        )),
        Some(mesh) if mesh.port() == 0 && !c.peers.is_empty() => p.push(Problem::new(
            "listen.mesh",
            "port 0 would change at every start, and peers could not find this node; use a fixed port",
        )),
        Some(mesh) => {
            // Each cable's report listener is TCP on the cable end's probe
            // address and port.
            for (i, link) in c.links.iter().enumerate() {
                let cable = link.local_probe_addr(&c.probe);
                if collide(mesh, cable) {
                    p.push(Problem::new(
                        "listen.mesh",
                        format!(
                            "{mesh} overlaps links[{i}]'s report listener on {cable}; use another port for the mesh"
                        ),
                    ));
                }
            }
        }
        None => {}
    }
}

pub(super) fn check_tls(c: &Config, p: &mut Vec<Problem>) {
    let tls = &c.tls;
    check_duration(
        p,
        "tls.max_connection_age",
        tls.max_connection_age,
        MAX_CONNECTION_AGE_RANGE,
    );
    for (i, serial) in tls.revoked_serials.iter().enumerate() {
        if meshd_pki::serial_key(serial).is_none() {
            p.push(Problem::new(
                format!("tls.revoked_serials[{i}]"),
                format!(
                    "{serial:?} is not a certificate serial number: write the hex bytes \
                     `openssl x509 -noout -serial` prints (such as \"4F1A…\" or \"4f:1a:…\")"
                ),
            ));
        }
    }
    let files = [
        ("tls.ca", &tls.ca),
        ("tls.cert", &tls.cert),
        ("tls.key", &tls.key),
    ];
    if tls.insecure {
        for (key, path) in files {
            if path.is_some() {
                p.push(
                    Problem::new(
                        key,
                        "tls.insecure = true sends reports in the clear and would ignore this file; \
                         remove one of the two",
                    )
                    .see("tls.insecure"),
                );
            }
        }
        return;
    }
    let needed = !c.peers.is_empty() || c.listen.mesh.is_some();
    let any = files.iter().any(|(_, path)| path.is_some());
    // The files themselves are read at start (and by `meshd check-config`),
    // which names what is wrong with them.
    for (key, path) in files {
        if path.is_none() && (needed || any) {
            p.push(Problem::new(
                key,
                "required: nodes talk mutual TLS with the mesh's certificates; \
                 `meshctl certs init` and `meshctl certs issue` write them \
                 (or set tls.insecure = true on a lab network)",
            ));
        }
    }
}
