//! Mutual TLS between nodes (rustls with graviola's pure-Rust crypto): the
//! mesh's CA vouches for every node, a node certificate names its node (as
//! common name and DNS name), and each end checks the other. The listeners'
//! accept loop lives here too, with its limits: a cap on connections, a
//! deadline on the handshake, and a pause when the process runs out of
//! file descriptors instead of a loop that spins on the error.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use meshd_domain::NodeId;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;

use crate::config::{Config, TlsConfig};

/// A TLS handshake that takes longer than this is abandoned: a stranger
/// cannot hold a connection open by never finishing one.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A plain connection must send its first bytes within this: a local
/// client (meshctl) speaks at once.
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(1);

/// Connections one listener holds at once. A mesh of 8 has 7 peers with a
/// few streams each, plus tools: far fewer.
pub const MAX_CONNECTIONS: usize = 128;

/// After the process ran out of file descriptors (or the kernel of
/// memory), accepting pauses this long rather than spinning on the error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file that cannot be read, named in the message.
    #[error("{0}")]
    File(String),
    #[error(
        "the mesh's TLS files are not configured: set tls.ca, tls.cert and tls.key (see `meshctl certs`), or tls.insecure = true"
    )]
    Missing,
    #[error("{0}")]
    Config(String),
}

fn config_error(e: impl std::fmt::Display) -> TlsError {
    TlsError::Config(e.to_string())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls_graviola::default_provider())
}

/// Both sides of mutual TLS for one node.
#[derive(Debug, Clone)]
pub struct MeshTls {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
}

/// The file of config key `key` (`tls.ca`, ...), its error naming both and
/// what writes the mesh's files.
fn read_pem(key: &str, path: &Path, node: &NodeId) -> Result<String, TlsError> {
    meshd_pki::store::read_pem(path).map_err(|e| {
        TlsError::File(format!(
            "{key}: {e} (`meshctl certs init` makes the mesh's CA, `meshctl certs issue {node}` this node's certificate)"
        ))
    })
}

impl MeshTls {
    /// What `config` needs: nothing for a node alone, else its TLS
    /// (`None` for a mesh configured as insecure).
    pub fn for_config(config: &Config) -> Result<Option<MeshTls>, TlsError> {
        if config.peers.is_empty() && config.listen.mesh.is_none() {
            return Ok(None);
        }
        Self::load(&config.tls, &config.node.id)
    }

    /// The TLS of node `node` from its config; `None` for a mesh configured
    /// as insecure.
    pub fn load(tls: &TlsConfig, node: &NodeId) -> Result<Option<MeshTls>, TlsError> {
        if tls.insecure {
            return Ok(None);
        }
        let (Some(ca), Some(cert), Some(key)) = (&tls.ca, &tls.cert, &tls.key) else {
            return Err(TlsError::Missing);
        };
        Self::from_pem(
            &read_pem("tls.ca", ca, node)?,
            &read_pem("tls.cert", cert, node)?,
            &read_pem("tls.key", key, node)?,
            node,
        )
        .map(Some)
    }

    /// From PEM text: the CA certificate(s) to trust (several while a CA is
    /// rotated), the certificate of node `node` and its key. A certificate
    /// issued for another node is refused: peers would refuse its streams.
    pub fn from_pem(
        ca_pem: &str,
        cert_pem: &str,
        key_pem: &str,
        node: &NodeId,
    ) -> Result<MeshTls, TlsError> {
        let mut roots = RootCertStore::empty();
        for block in pem::parse_many(ca_pem).map_err(config_error)? {
            if block.tag() == "CERTIFICATE" {
                roots
                    .add(CertificateDer::from(block.into_contents()))
                    .map_err(|e| TlsError::Config(format!("tls.ca: {e}")))?;
            }
        }
        if roots.is_empty() {
            return Err(TlsError::Config("tls.ca holds no certificate".to_owned()));
        }
        let roots = Arc::new(roots);
        let certs: Vec<CertificateDer<'static>> = pem::parse_many(cert_pem)
            .map_err(config_error)?
            .into_iter()
            .filter(|b| b.tag() == "CERTIFICATE")
            .map(|b| CertificateDer::from(b.into_contents()))
            .collect();
        let Some(leaf) = certs.first() else {
            return Err(TlsError::Config("tls.cert holds no certificate".to_owned()));
        };
        let named =
            meshd_pki::common_name(leaf).map_err(|e| TlsError::Config(format!("tls.cert: {e}")))?;
        if named != node.as_str() {
            return Err(TlsError::Config(format!(
                "tls.cert is node {named:?}'s certificate, not this node's ({node}); \
                 issue one with `meshctl certs issue {node}`"
            )));
        }
        let key = pem::parse(key_pem).map_err(|e| TlsError::Config(format!("tls.key: {e}")))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.into_contents()));
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                .build()
                .map_err(config_error)?;
        let mut server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| TlsError::Config(format!("tls.cert and tls.key: {e}")))?;
        server.alpn_protocols = vec![b"h2".to_vec()];
        let server_verifier = WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(config_error)?;
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_webpki_verifier(server_verifier)
            .with_client_auth_cert(certs, key)
            .map_err(|e| TlsError::Config(format!("tls.cert and tls.key: {e}")))?;
        client.alpn_protocols = vec![b"h2".to_vec()];
        Ok(MeshTls {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// Opens a TLS connection to `peer` at `addr`, checking that its
    /// certificate names `peer`.
    pub async fn connect(
        &self,
        peer: &NodeId,
        addr: SocketAddr,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(addr).await?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(peer.as_str().to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        TlsConnector::from(self.client.clone())
            .connect(name, tcp)
            .await
    }
}

/// Who is on the other end of an accepted connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    pub remote: Option<SocketAddr>,
    /// The node its client certificate names; `None` without TLS.
    pub node: Option<NodeId>,
}

/// An accepted connection: TLS on a secure mesh, plain otherwise. It holds
/// its listener's connection permit until it closes.
#[derive(Debug)]
pub struct Accepted {
    io: AcceptedIo,
    info: PeerInfo,
    _permit: OwnedSemaphorePermit,
}

#[derive(Debug)]
enum AcceptedIo {
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    Plain(TcpStream),
}

impl Connected for Accepted {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            AcceptedIo::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            AcceptedIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            AcceptedIo::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            AcceptedIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            AcceptedIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            AcceptedIo::Plain(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            AcceptedIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            AcceptedIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

fn node_of(stream: &tokio_rustls::server::TlsStream<TcpStream>) -> Option<NodeId> {
    let (_, connection) = stream.get_ref();
    let leaf = connection.peer_certificates()?.first()?;
    let name = meshd_pki::common_name(leaf).ok()?;
    NodeId::new(name).ok()
}

/// The connections `listener` accepts, handshaken (`tls`) or plain, as a
/// stream for a tonic server. Ends with `shutdown`.
///
/// A TLS connection takes its place among [`MAX_CONNECTIONS`] before it is
/// accepted and has [`HANDSHAKE_TIMEOUT`] to finish its handshake. A plain
/// connection (the loopback read-only listener) is accepted at once and
/// takes its place only once it has spoken, within [`FIRST_BYTES_TIMEOUT`]:
/// connections that never speak are closed within that time however many
/// there are, so they cannot keep a local `meshctl status` waiting behind
/// them in the kernel's queue.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    shutdown: CancellationToken,
) -> ReceiverStream<io::Result<Accepted>> {
    let (tx, rx) = mpsc::channel(16);
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let acceptor = tls.map(TlsAcceptor::from);
    tokio::spawn(async move {
        loop {
            let permit = match acceptor {
                Some(_) => tokio::select! {
                    () = shutdown.cancelled() => return,
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => Some(permit),
                        Err(_) => return,
                    },
                },
                None => None,
            };
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, remote) = match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    // Out of descriptors or memory, a connection reset
                    // before it was taken: wait, then go on.
                    tracing::debug!(%error, "accept failed; pausing");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let tx = tx.clone();
            let acceptor = acceptor.clone();
            let (permits, shutdown) = (permits.clone(), shutdown.clone());
            tokio::spawn(async move {
                let accepted = match (acceptor, permit) {
                    (Some(acceptor), Some(permit)) => {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(stream)) => Accepted {
                                info: PeerInfo {
                                    remote: Some(remote),
                                    node: node_of(&stream),
                                },
                                io: AcceptedIo::Tls(Box::new(stream)),
                                _permit: permit,
                            },
                            Ok(Err(error)) => {
                                tracing::debug!(%remote, %error, "TLS handshake refused");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%remote, "TLS handshake timed out");
                                return;
                            }
                        }
                    }
                    _ => {
                        let mut first = [0u8; 1];
                        let spoke =
                            tokio::time::timeout(FIRST_BYTES_TIMEOUT, tcp.peek(&mut first)).await;
                        if !matches!(spoke, Ok(Ok(1..))) {
                            tracing::debug!(%remote, "closed a connection that did not speak");
                            return;
                        }
                        let permit = tokio::select! {
                            () = shutdown.cancelled() => return,
                            permit = permits.acquire_owned() => match permit {
                                Ok(permit) => permit,
                                Err(_) => return,
                            },
                        };
                        Accepted {
                            io: AcceptedIo::Plain(tcp),
                            info: PeerInfo {
                                remote: Some(remote),
                                node: None,
                            },
                            _permit: permit,
                        }
                    }
                };
                let _ = tx.send(Ok(accepted)).await;
            });
        }
    });
    ReceiverStream::new(rx)
}
