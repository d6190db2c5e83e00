//! The report streams' way in over each cable: a listener on this end's
//! address and port (TCP, beside the UDP probe socket on the same number)
//! that serves only `meshd.v1.Peer`, with mutual TLS, pinned to the
//! cable's interface (see `probe::pin`) so that it takes only connections
//! that came by that cable. Listeners follow the config; one whose address
//! is not up yet (a port without its address at boot) is retried.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use meshd_model::peers::Path;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{PeerService, serve_cable};
use crate::config::Config;
use crate::probe::pin::pin_to_cable;
use crate::transport::path_label;
use crate::transport::tls::{MeshTls, incoming};

/// How long to wait before trying to bind a cable's listener again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Connections a cable's listener keeps waiting to be accepted: the peer
/// at the other end opens one.
const BACKLOG: i32 = 64;

/// One cable's listener: where, and how its streams are labelled.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CableEnd {
    pub addr: SocketAddr,
    /// The cable's interface on this end, when the config names it (else
    /// the interface that holds `addr` is the one).
    pub iface: Option<String>,
    /// This end of the cable: its interface, or its address.
    pub label: String,
}

impl CableEnd {
    /// Every cable of `config`, as this end sees it.
    pub fn all(config: &Config) -> Vec<CableEnd> {
        config
            .links
            .iter()
            .map(|link| CableEnd {
                addr: link.local_probe_addr(&config.probe),
                iface: link.local_iface.clone(),
                label: path_label(link.local_iface.as_deref(), link.local_address),
            })
            .collect()
    }
}

/// The running cable listeners.
#[derive(Debug)]
pub struct CableListeners {
    tls: Option<MeshTls>,
    /// Each cable's `Peer` service is this one on the cable's path.
    service: PeerService,
    shutdown: CancellationToken,
    running: BTreeMap<CableEnd, CancellationToken>,
    tasks: JoinSet<()>,
}

impl CableListeners {
    pub fn new(tls: Option<MeshTls>, service: PeerService, shutdown: CancellationToken) -> Self {
        Self {
            tls,
            service,
            shutdown,
            running: BTreeMap::new(),
            tasks: JoinSet::new(),
        }
    }

    /// Stops every listener and waits until their ports are closed: a
    /// node started again at once finds them free.
    pub async fn stopped(mut self) {
        for stop in self.running.values() {
            stop.cancel();
        }
        while self.tasks.join_next().await.is_some() {}
    }

    /// Listens on each of `ends`: unchanged ones keep their listener.
    pub fn follow(&mut self, ends: Vec<CableEnd>) {
        self.running.retain(|end, stop| {
            let keep = ends.contains(end);
            if !keep {
                stop.cancel();
            }
            keep
        });
        for end in ends {
            if self.running.contains_key(&end) {
                continue;
            }
            let stop = self.shutdown.child_token();
            let tls = self.tls.clone();
            let service = self.service.on(Path::Cable(end.label.clone()));
            self.tasks
                .spawn(listen(end.clone(), tls, service, stop.clone()));
            // Listeners that ended (a removed cable) are reaped as we go.
            while self.tasks.try_join_next().is_some() {}
            self.running.insert(end, stop);
        }
    }
}

/// A listener on `end`'s address, pinned to its interface before it
/// listens: from the first connection on, only the cable's are taken. Not
/// pinned (logged once) where the kernel refuses; loopback ends (the demo,
/// the tests) need no pinning.
fn bind(end: &CableEnd) -> io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(end.addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    // As tokio's own bind does: a restarted node takes its port back at once.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&end.addr.into())?;
    pin_to_cable(
        &socket,
        end.iface.as_deref(),
        end.addr.ip(),
        "report listener",
    );
    socket.listen(BACKLOG)?;
    TcpListener::from_std(socket.into())
}

async fn listen(
    end: CableEnd,
    tls: Option<MeshTls>,
    service: PeerService,
    stop: CancellationToken,
) {
    let mut last_error = String::new();
    let listener = loop {
        match bind(&end) {
            Ok(listener) => break listener,
            Err(error) => {
                let error = error.to_string();
                if error != last_error {
                    tracing::warn!(addr = %end.addr, cable = %end.label, %error, "cannot listen for report streams on this cable yet; retrying every {RETRY_AFTER:?}");
                    last_error = error;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RETRY_AFTER) => {}
        }
    };
    let incoming = incoming(listener, tls, stop.clone());
    if let Err(error) = serve_cable(incoming, service, stop).await {
        tracing::warn!(addr = %end.addr, %error, "the cable's report listener stopped");
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, UdpSocket};

    use super::*;
    use crate::probe::pin::pin_to_interface;

    /// This host's first interface with a routable IPv4 address.
    fn routable_address() -> Option<(String, IpAddr)> {
        nix::ifaddrs::getifaddrs().ok()?.find_map(|entry| {
            let ip = IpAddr::V4(entry.address?.as_sockaddr_in()?.ip());
            (!ip.is_loopback()).then_some((entry.interface_name, ip))
        })
    }

    /// A cable's report listener takes its address's interface as its
    /// own, as the cable's probe socket does: the kernel then refuses it
    /// connections that came by another interface.
    #[tokio::test]
    async fn a_cable_listener_is_pinned_to_the_interface_holding_its_address() {
        let skip = |reason: &str| {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "the cable listener's pinning must be tested under CI: {reason}"
            );
            eprintln!("skipped: {reason}");
        };
        let Some((iface, ip)) = routable_address() else {
            return skip("this host has no routable IPv4 address to bind a cable listener to");
        };
        let probe = UdpSocket::bind((ip, 0)).expect("bind a probe socket");
        if let Err(error) = pin_to_interface(&probe, &iface) {
            return skip(&format!("this kernel does not pin sockets here: {error}"));
        }
        let end = CableEnd {
            addr: SocketAddr::new(ip, 0),
            iface: None,
            label: iface.clone(),
        };
        let listener = bind(&end).expect("the cable listener binds");
        let index = nix::net::if_::if_nametoindex(iface.as_str()).expect("index");
        let pinned = socket2::SockRef::from(&listener)
            .device_index_v4()
            .expect("read back");
        assert_eq!(
            pinned.map(std::num::NonZeroU32::get),
            Some(index),
            "{iface}"
        );
    }
}
