//! Mutual TLS between nodes (rustls with graviola's pure-Rust crypto): the
//! mesh's CA vouches for every node, a node certificate names its node (as
//! common name and DNS name), and each end checks the other, and refuses a
//! certificate whose serial is revoked (`tls.revoked_serials`). A
//! connection lasts no longer than the certificate at its other end, nor
//! past a revocation of it, nor (accepted ones) twice
//! `tls.max_connection_age` (the dialling end opens a new one after once).
//! The listeners' accept loop lives here too, with its limits: a cap on
//! connections, handshakes per source address, a deadline on the
//! handshake, and a pause when the process runs out of file descriptors
//! instead of a loop that spins on the error.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use meshd_domain::NodeId;
use meshd_pki::CertificateFacts;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName,
    OtherError, RootCertStore, ServerConfig, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;

use CertificateError as C;

use crate::certificates::{Certificates, EXPIRY_WARNING, RefusalReason, date};
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

/// TLS handshakes one source address may start: a burst, then a steady
/// rate. A mesh of 8 reconnecting every stream after a restart (a
/// management and a few cable streams per peer, each backing off from
/// 100 ms) stays far below; a stranger looping handshakes (each costs the
/// node a signature and a chain check) is held to the rate.
const HANDSHAKE_BURST: f64 = 64.0;
const HANDSHAKES_PER_SECOND: f64 = 16.0;
/// Source addresses whose handshake budget is remembered; past this, the
/// ones full again are forgotten (a full budget is what a new one gets).
const MAX_TRACKED_SOURCES: usize = 4096;

/// The largest TLS file read: certificates and keys are a few hundred
/// bytes, a CA bundle a few KiB.
const MAX_TLS_FILE_BYTES: u64 = 64 * 1024;

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

/// Both sides of mutual TLS for one node, and what it knows of the mesh's
/// certificates.
#[derive(Debug, Clone)]
pub struct MeshTls {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
    certificates: Arc<Certificates>,
    max_connection_age: Duration,
    warnings: Vec<String>,
}

/// The systemd credentials a Linux unit passes the TLS files as
/// (`LoadCredential=NAME:PATH`): systemd reads them as root and hands them
/// to the sandboxed service user, so a key only root may read (mode 0600)
/// still reaches meshd. Config key, credential name.
pub const TLS_CREDENTIALS: [(&str, &str); 3] = [
    ("tls.ca", "meshd-tls-ca"),
    ("tls.cert", "meshd-tls-cert"),
    ("tls.key", "meshd-tls-key"),
];

/// Where config key `key`'s file is read from: the systemd credential that
/// stands for it when the service manager passed one
/// (`$CREDENTIALS_DIRECTORY/<name>`), else the configured path.
fn tls_source(key: &str, configured: &Path, credentials: Option<&Path>) -> PathBuf {
    TLS_CREDENTIALS
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, name)| Some(credentials?.join(name)))
        .filter(|passed| passed.is_file())
        .unwrap_or_else(|| configured.to_owned())
}

/// The file of config key `key` (`tls.ca`, ...), read like every other
/// input: a regular file (a FIFO is refused by name, not waited on), at
/// most [`MAX_TLS_FILE_BYTES`]; its error names both and what writes the
/// mesh's files.
fn read_pem(key: &str, path: &Path, node: &NodeId) -> Result<String, TlsError> {
    meshd_platform::file::read_regular_text(path, MAX_TLS_FILE_BYTES)
        .map_err(|e| TlsError::File(format!("{key}: {e} ({})", unread_advice(&e, node))))
}

/// What to do about a TLS file that could not be read. One that is there
/// but not readable by meshd's user needs no new certificate.
fn unread_advice(e: &meshd_platform::file::FileError, node: &NodeId) -> String {
    use meshd_platform::file::FileProblem;
    match &e.problem {
        FileProblem::Io(io) if io.kind() == io::ErrorKind::PermissionDenied => {
            "meshd's user may not read it: under the systemd unit, run `sudo meshd install` \
             again, which passes the config's TLS files to meshd as credentials; elsewhere let \
             meshd's user read it (the key stays mode 0600)"
                .to_owned()
        }
        _ => format!(
            "`meshctl certs init` makes the mesh's CA, `meshctl certs issue {node}` this node's \
             certificate"
        ),
    }
}

/// A warning when the key file at `path` can be read by its group or
/// everyone: anyone who can read it can be this node.
fn key_permission_warning(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        (mode & 0o077 != 0).then(|| {
            format!(
                "tls.key: {} can be read by its group or everyone (mode {:o}); \
                 `chmod 600` it: whoever reads it can be this node",
                path.display(),
                mode & 0o777
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
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
    /// as insecure. Refuses a certificate that expired, is not valid yet or
    /// is not signed by `tls.ca`, naming the file and the dates; one that
    /// ends within 30 days, and a key others can read, are warnings
    /// ([`MeshTls::warnings`]).
    ///
    /// Under systemd, a file passed as a credential ([`TLS_CREDENTIALS`]) is
    /// read from `$CREDENTIALS_DIRECTORY` instead of its configured path.
    pub fn load(tls: &TlsConfig, node: &NodeId) -> Result<Option<MeshTls>, TlsError> {
        let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
        Self::load_from(tls, node, credentials.as_deref())
    }

    /// [`MeshTls::load`], the service manager's credentials (if any) in
    /// `credentials`.
    pub fn load_from(
        tls: &TlsConfig,
        node: &NodeId,
        credentials: Option<&Path>,
    ) -> Result<Option<MeshTls>, TlsError> {
        if tls.insecure {
            return Ok(None);
        }
        let (Some(ca), Some(cert), Some(key)) = (&tls.ca, &tls.cert, &tls.key) else {
            return Err(TlsError::Missing);
        };
        let ca = tls_source("tls.ca", ca, credentials);
        let cert = tls_source("tls.cert", cert, credentials);
        let key = tls_source("tls.key", key, credentials);
        let (ca, cert, key) = (&ca, &cert, &key);
        let files = Files {
            ca: format!("tls.ca ({})", ca.display()),
            cert: format!("tls.cert ({})", cert.display()),
        };
        let mut loaded = Self::build(
            &read_pem("tls.ca", ca, node)?,
            &read_pem("tls.cert", cert, node)?,
            &read_pem("tls.key", key, node)?,
            node,
            &files,
            SystemTime::now(),
        )?;
        loaded.warnings.extend(key_permission_warning(key));
        loaded.max_connection_age = tls.max_connection_age;
        loaded.certificates.revoke(&tls.revoked_serials);
        Ok(Some(loaded))
    }

    /// From PEM text: the CA certificate(s) to trust (several while a CA is
    /// rotated), the certificate of node `node` and its key. A certificate
    /// issued for another node is refused: peers would refuse its streams;
    /// so is one they would refuse for its dates or its CA.
    pub fn from_pem(
        ca_pem: &str,
        cert_pem: &str,
        key_pem: &str,
        node: &NodeId,
    ) -> Result<MeshTls, TlsError> {
        let files = Files {
            ca: "tls.ca".to_owned(),
            cert: "tls.cert".to_owned(),
        };
        Self::build(ca_pem, cert_pem, key_pem, node, &files, SystemTime::now())
    }

    fn build(
        ca_pem: &str,
        cert_pem: &str,
        key_pem: &str,
        node: &NodeId,
        files: &Files,
        now: SystemTime,
    ) -> Result<MeshTls, TlsError> {
        let Files {
            ca: ca_file,
            cert: cert_file,
        } = files;
        let mut roots = RootCertStore::empty();
        for block in
            pem::parse_many(ca_pem).map_err(|e| TlsError::Config(format!("{ca_file}: {e}")))?
        {
            if block.tag() == "CERTIFICATE" {
                roots
                    .add(CertificateDer::from(block.into_contents()))
                    .map_err(|e| TlsError::Config(format!("{ca_file}: {e}")))?;
            }
        }
        if roots.is_empty() {
            return Err(TlsError::Config(format!("{ca_file} holds no certificate")));
        }
        let roots = Arc::new(roots);
        let certs: Vec<CertificateDer<'static>> = pem::parse_many(cert_pem)
            .map_err(|e| TlsError::Config(format!("{cert_file}: {e}")))?
            .into_iter()
            .filter(|b| b.tag() == "CERTIFICATE")
            .map(|b| CertificateDer::from(b.into_contents()))
            .collect();
        let Some(leaf) = certs.first() else {
            return Err(TlsError::Config(format!(
                "{cert_file} holds no certificate"
            )));
        };
        let named = meshd_pki::common_name(leaf)
            .map_err(|e| TlsError::Config(format!("{cert_file}: {e}")))?;
        if named != node.as_str() {
            return Err(TlsError::Config(format!(
                "{cert_file} is node {named:?}'s certificate, not this node's ({node}); \
                 issue one with `meshctl certs issue {node}`"
            )));
        }
        let own = meshd_pki::certificate_facts(leaf)
            .map_err(|e| TlsError::Config(format!("{cert_file}: {e}")))?;
        let warnings = check_validity(&own, cert_file, node, now)?;
        let key = pem::parse(key_pem).map_err(|e| TlsError::Config(format!("tls.key: {e}")))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.into_contents()));
        let certificates = Arc::new(Certificates::new(node.clone(), own.clone()));
        let webpki_server = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(config_error)?;
        check_chain(webpki_server.as_ref(), &certs, node, &own, files, now)?;
        let client_verifier = Arc::new(CheckedClients {
            webpki: WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(config_error)?,
            certificates: certificates.clone(),
        });
        let mut server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| TlsError::Config(format!("tls.cert and tls.key: {e}")))?;
        server.alpn_protocols = vec![b"h2".to_vec()];
        // No resumption, either way: a resumed handshake skips the
        // certificate checks, so an expired or revoked certificate would
        // keep resuming the sessions it opened while it was good.
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
        let server_verifier = Arc::new(CheckedServers {
            webpki: webpki_server,
            certificates: certificates.clone(),
        });
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .dangerous()
            .with_custom_certificate_verifier(server_verifier)
            .with_client_auth_cert(certs, key)
            .map_err(|e| TlsError::Config(format!("tls.cert and tls.key: {e}")))?;
        client.alpn_protocols = vec![b"h2".to_vec()];
        client.resumption = rustls::client::Resumption::disabled();
        Ok(MeshTls {
            server: Arc::new(server),
            client: Arc::new(client),
            certificates,
            max_connection_age: crate::config::DEFAULT_MAX_CONNECTION_AGE,
            warnings,
        })
    }

    /// The same node with another client side: a tool (the red-team
    /// tests) that dials with an identity of its own.
    #[must_use]
    pub fn with_client(self, client: Arc<ClientConfig>) -> MeshTls {
        MeshTls { client, ..self }
    }

    /// What works but should be fixed: a certificate ending within 30
    /// days, a key others can read.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The certificates this node's connections follow.
    pub fn certificates(&self) -> &Arc<Certificates> {
        &self.certificates
    }

    /// How long a report stream may use one connection.
    pub fn max_connection_age(&self) -> Duration {
        self.max_connection_age
    }

    /// Opens a TLS connection to `peer` at `addr`, checking that its
    /// certificate names `peer`. A refusal for a certificate reason is
    /// recorded against `peer` (see [`Certificates::refused`]), and so is
    /// the peer refusing this node's certificate once the connection reads
    /// its alert.
    pub async fn connect(
        &self,
        peer: &NodeId,
        addr: SocketAddr,
    ) -> io::Result<Guarded<tokio_rustls::client::TlsStream<TcpStream>>> {
        let tcp = TcpStream::connect(addr).await?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(peer.as_str().to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        match TlsConnector::from(self.client.clone())
            .connect(name, tcp)
            .await
        {
            Ok(stream) => {
                let facts = peer_facts(stream.get_ref().1);
                if let Some(facts) = &facts {
                    self.certificates.peer_expiry(peer, facts.not_after);
                }
                Ok(Guarded {
                    io: stream,
                    certificates: self.certificates.clone(),
                    peer: facts,
                    dialled: Some(peer.clone()),
                    cut_at: None,
                })
            }
            Err(error) => {
                if let Some(reason) = refusal_in(&error) {
                    self.certificates.refused(peer, reason);
                }
                Err(error)
            }
        }
    }
}

/// How a certificate file is named in messages.
struct Files {
    ca: String,
    cert: String,
}

/// Refuses a certificate out of its dates, naming the file and the
/// dates; warns of one within [`EXPIRY_WARNING`] of its end.
fn check_validity(
    own: &CertificateFacts,
    cert_file: &str,
    node: &NodeId,
    now: SystemTime,
) -> Result<Vec<String>, TlsError> {
    let valid = format!("valid {} to {}", date(own.not_before), date(own.not_after));
    if now < own.not_before {
        return Err(TlsError::Config(format!(
            "{cert_file} is not valid yet ({valid}; now {}): check this host's clock, or issue one valid now with `meshctl certs issue {node}`",
            date(now)
        )));
    }
    match own.not_after.duration_since(now) {
        Err(_) | Ok(Duration::ZERO) => Err(TlsError::Config(format!(
            "{cert_file} expired at {} ({valid}; now {}): issue a new one with `meshctl certs issue {node}`",
            date(own.not_after),
            date(now)
        ))),
        Ok(left) if left < EXPIRY_WARNING => Ok(vec![format!(
            "{cert_file} expires at {} (in {} days; {valid}): issue a new one with `meshctl certs issue {node}` before then",
            date(own.not_after),
            left.as_secs() / 86_400
        )]),
        Ok(_) => Ok(Vec::new()),
    }
}

/// Refuses a certificate that does not chain to the trusted CA(s): its
/// peers would refuse it.
fn check_chain(
    verifier: &WebPkiServerVerifier,
    certs: &[CertificateDer<'static>],
    node: &NodeId,
    own: &CertificateFacts,
    files: &Files,
    now: SystemTime,
) -> Result<(), TlsError> {
    let (Some(leaf), Some(intermediates)) = (certs.first(), certs.get(1..)) else {
        return Err(TlsError::Config(format!(
            "{} holds no certificate",
            files.cert
        )));
    };
    let name = ServerName::try_from(node.as_str().to_owned()).map_err(config_error)?;
    let seconds = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    verifier
        .verify_server_cert(leaf, intermediates, &name, &[], UnixTime::since_unix_epoch(seconds))
        .map(|_| ())
        .map_err(|e| {
            TlsError::Config(format!(
                "{} (valid {} to {}) is not accepted by the CA in {}: {e}; issue it from the mesh's CA with `meshctl certs issue {node}`",
                files.cert,
                date(own.not_before),
                date(own.not_after),
                files.ca
            ))
        })
}

/// The serial and dates of the certificate at the other end of `connection`.
fn peer_facts(connection: &rustls::CommonState) -> Option<CertificateFacts> {
    let leaf = connection.peer_certificates()?.first()?;
    meshd_pki::certificate_facts(leaf).ok()
}

fn system_time(at: UnixTime) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(at.as_secs())
}

/// The certificate reason inside an I/O error of a TLS connection, if it
/// has one.
fn refusal_in(error: &io::Error) -> Option<RefusalReason> {
    let tls = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    refusal_of(tls)
}

/// Why rustls refused a handshake, when the reason is a certificate: one
/// this node checked, or one its peer refused (the alert it sent).
fn refusal_of(error: &rustls::Error) -> Option<RefusalReason> {
    match error {
        rustls::Error::InvalidCertificate(problem) => Some(match problem {
            C::Expired => RefusalReason::Expired { not_after: None },
            C::ExpiredContext { not_after, .. } => RefusalReason::Expired {
                not_after: Some(system_time(*not_after)),
            },
            C::NotValidYet => RefusalReason::NotYetValid { not_before: None },
            C::NotValidYetContext { not_before, .. } => RefusalReason::NotYetValid {
                not_before: Some(system_time(*not_before)),
            },
            C::UnknownIssuer | C::BadSignature => RefusalReason::UnknownCa,
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                RefusalReason::WrongNode { presented: None }
            }
            C::Revoked => RefusalReason::Revoked,
            C::Other(OtherError(other)) => match other.downcast_ref::<WrongNode>() {
                Some(wrong) => RefusalReason::WrongNode {
                    presented: wrong.presented.clone(),
                },
                None => RefusalReason::Other(other.to_string()),
            },
            other => RefusalReason::Other(format!("{other:?}")),
        }),
        rustls::Error::AlertReceived(alert) => {
            certificate_alert(*alert).map(|words| RefusalReason::RefusesOurs(words.to_owned()))
        }
        _ => None,
    }
}

/// The alerts a TLS end sends about the other's certificate, in words.
fn certificate_alert(alert: AlertDescription) -> Option<&'static str> {
    Some(match alert {
        AlertDescription::CertificateExpired => "certificate expired",
        AlertDescription::CertificateRevoked => "certificate revoked",
        AlertDescription::UnknownCA => "unknown CA",
        AlertDescription::BadCertificate => "bad certificate",
        AlertDescription::UnsupportedCertificate => "unsupported certificate",
        AlertDescription::CertificateUnknown => "certificate unknown",
        AlertDescription::CertificateRequired => "certificate required",
        _ => return None,
    })
}

/// A server certificate that names another node than the one dialled.
#[derive(Debug, thiserror::Error)]
#[error("the certificate names {presented:?}, not the node dialled")]
struct WrongNode {
    presented: Option<String>,
}

/// The server verifier: the web PKI's checks, then the serial against the
/// revoked ones. A certificate for the wrong name says which name it has.
#[derive(Debug)]
struct CheckedServers {
    webpki: Arc<WebPkiServerVerifier>,
    certificates: Arc<Certificates>,
}

impl ServerCertVerifier for CheckedServers {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                C::NotValidForName | C::NotValidForNameContext { .. },
            )) => Err(rustls::Error::InvalidCertificate(C::Other(OtherError(
                Arc::new(WrongNode {
                    presented: meshd_pki::common_name(end_entity).ok(),
                }),
            )))),
            Err(error) => Err(error),
            Ok(verified) => {
                not_revoked(&self.certificates, end_entity)?;
                Ok(verified)
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// The client verifier: the web PKI's checks, then the serial against the
/// revoked ones.
#[derive(Debug)]
struct CheckedClients {
    webpki: Arc<dyn ClientCertVerifier>,
    certificates: Arc<Certificates>,
}

impl ClientCertVerifier for CheckedClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .webpki
            .verify_client_cert(end_entity, intermediates, now)?;
        not_revoked(&self.certificates, end_entity)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

fn not_revoked(
    certificates: &Certificates,
    end_entity: &CertificateDer<'_>,
) -> Result<(), rustls::Error> {
    let facts = meshd_pki::certificate_facts(end_entity)
        .map_err(|_| rustls::Error::InvalidCertificate(C::BadEncoding))?;
    if certificates.is_revoked(&facts.serial) {
        return Err(rustls::Error::InvalidCertificate(C::Revoked));
    }
    Ok(())
}

/// A TLS connection that ends when the certificate at its other end
/// expires or is revoked, or at `cut_at`: checked on every read and write,
/// which a report stream does at least every heartbeat.
#[derive(Debug)]
pub struct Guarded<S> {
    io: S,
    certificates: Arc<Certificates>,
    /// The other end's certificate.
    peer: Option<CertificateFacts>,
    /// The node this end dialled: a certificate alert read from it is its
    /// refusal of this node's certificate.
    dialled: Option<NodeId>,
    cut_at: Option<Instant>,
}

impl<S> Guarded<S> {
    /// Why the connection must end now, if it must.
    fn ended(&self) -> Option<io::Error> {
        let why = if let Some(peer) = &self.peer {
            if self.certificates.is_revoked(&peer.serial) {
                Some("the certificate at the other end was revoked")
            } else if SystemTime::now() >= peer.not_after {
                Some("the certificate at the other end expired")
            } else {
                None
            }
        } else {
            None
        };
        why.or_else(|| {
            self.cut_at
                .is_some_and(|at| Instant::now() >= at)
                .then_some("the connection reached its maximum age")
        })
        .map(|why| io::Error::new(io::ErrorKind::ConnectionAborted, why))
    }

    fn note(&self, result: &io::Result<()>) {
        if let (Err(error), Some(peer)) = (result, &self.dialled)
            && let Some(reason) = refusal_in(error)
        {
            self.certificates.refused(peer, reason);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(ended) = this.ended() {
            return Poll::Ready(Err(ended));
        }
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(result) = &polled {
            this.note(result);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(ended) = this.ended() {
            return Poll::Ready(Err(ended));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// How long a refused connection is drained before it closes.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Closes a connection whose handshake this end refused so that the
/// refusal (the TLS alert just written) reaches the client: closing with
/// unread bytes (its first HTTP/2 frames, sent right after its half of the
/// handshake) would send a reset, which can discard the alert before the
/// client reads it, and the client would know only "connection reset".
/// So the write side is shut and what still arrives is read and dropped,
/// for at most [`REFUSAL_LINGER`] (the connection's permit is held
/// meanwhile, so this stays bounded).
async fn close_after_refusal(mut tcp: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 1024];
    let drain = async { while matches!(tcp.read(&mut sink).await, Ok(1..)) {} };
    let _ = tokio::time::timeout(REFUSAL_LINGER, drain).await;
}

/// Handshake budgets by source address (a token bucket each).
#[derive(Debug, Default)]
struct HandshakeBudgets {
    sources: HashMap<IpAddr, (f64, Instant)>,
}

impl HandshakeBudgets {
    /// Whether `source` may start a handshake at `now`; takes one from its
    /// budget when it may.
    fn admit(&mut self, source: IpAddr, now: Instant) -> bool {
        if self.sources.len() >= MAX_TRACKED_SOURCES && !self.sources.contains_key(&source) {
            self.sources
                .retain(|_, (tokens, at)| refilled(*tokens, *at, now) < HANDSHAKE_BURST);
        }
        if self.sources.len() >= MAX_TRACKED_SOURCES && !self.sources.contains_key(&source) {
            return false;
        }
        let (tokens, at) = self.sources.entry(source).or_insert((HANDSHAKE_BURST, now));
        let available = refilled(*tokens, *at, now);
        *at = now;
        if available >= 1.0 {
            *tokens = available - 1.0;
            true
        } else {
            *tokens = available;
            false
        }
    }
}

fn refilled(tokens: f64, since: Instant, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(since).as_secs_f64();
    (tokens + elapsed * HANDSHAKES_PER_SECOND).min(HANDSHAKE_BURST)
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
    Tls(Box<Guarded<tokio_rustls::server::TlsStream<TcpStream>>>),
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
/// accepted, is dropped unhandshaken when its source address is over its
/// handshake budget ([`HANDSHAKES_PER_SECOND`]), and has
/// [`HANDSHAKE_TIMEOUT`] to finish its handshake. It lasts at most twice
/// `tls.max_connection_age`: an honest peer opens a new one after once. A plain
/// connection (the loopback read-only listener) is accepted at once and
/// takes its place only once it has spoken, within [`FIRST_BYTES_TIMEOUT`]:
/// connections that never speak are closed within that time however many
/// there are, so they cannot keep a local `meshctl status` waiting behind
/// them in the kernel's queue.
pub fn incoming(
    listener: TcpListener,
    tls: Option<MeshTls>,
    shutdown: CancellationToken,
) -> ReceiverStream<io::Result<Accepted>> {
    let (tx, rx) = mpsc::channel(16);
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let acceptor = tls
        .as_ref()
        .map(|tls| TlsAcceptor::from(tls.server.clone()));
    let guard = tls.map(|tls| (tls.certificates, tls.max_connection_age.saturating_mul(2)));
    let mut budgets = HandshakeBudgets::default();
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
            if acceptor.is_some() && !budgets.admit(remote.ip(), Instant::now()) {
                tracing::debug!(%remote, "TLS handshake refused: too many from this address");
                continue;
            }
            let _ = tcp.set_nodelay(true);
            let tx = tx.clone();
            let acceptor = acceptor.clone();
            let guard = guard.clone();
            let (permits, shutdown) = (permits.clone(), shutdown.clone());
            tokio::spawn(async move {
                let accepted = match (acceptor, permit, guard) {
                    (Some(acceptor), Some(permit), Some((certificates, max_age))) => {
                        let handshake = acceptor.accept(tcp).into_fallible();
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                            Ok(Ok(stream)) => Accepted {
                                info: PeerInfo {
                                    remote: Some(remote),
                                    node: node_of(&stream),
                                },
                                io: AcceptedIo::Tls(Box::new(Guarded {
                                    peer: peer_facts(stream.get_ref().1),
                                    io: stream,
                                    certificates,
                                    dialled: None,
                                    cut_at: Instant::now().checked_add(max_age),
                                })),
                                _permit: permit,
                            },
                            Ok(Err((error, tcp))) => {
                                match refusal_in(&error) {
                                    Some(reason) => {
                                        tracing::info!(%remote, "TLS handshake from {remote} refused: {reason}")
                                    }
                                    None => {
                                        tracing::debug!(%remote, %error, "TLS handshake refused")
                                    }
                                }
                                close_after_refusal(tcp).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    /// A node's TLS files, issued by a fresh CA in `dir`.
    fn issued(dir: &Path, node: &str) -> TlsConfig {
        let store = meshd_pki::store::CertDir::new(dir);
        let now = SystemTime::now();
        let year = Duration::from_secs(365 * 24 * 3600);
        let ca = store.init("test CA", now, year).expect("CA");
        let pair = store.issue(&ca, node, &[], now, year).expect("pair");
        TlsConfig {
            ca: Some(store.ca().cert),
            cert: Some(pair.cert),
            key: Some(pair.key),
            ..TlsConfig::default()
        }
    }

    #[test]
    fn a_tls_file_meshd_may_not_read_is_not_told_to_make_new_certificates() {
        use meshd_platform::file::{FileError, FileProblem};
        let node = NodeId::new("a").expect("id");
        let error = |kind: io::ErrorKind| FileError {
            path: "/etc/meshd/tls/a-key.pem".into(),
            problem: FileProblem::Io(io::Error::from(kind)),
        };
        let denied = unread_advice(&error(io::ErrorKind::PermissionDenied), &node);
        assert!(
            denied.contains("run `sudo meshd install` again"),
            "{denied}"
        );
        assert!(!denied.contains("meshctl certs"), "{denied}");
        let missing = unread_advice(&error(io::ErrorKind::NotFound), &node);
        assert!(missing.contains("`meshctl certs issue a`"), "{missing}");
    }

    #[test]
    fn files_passed_as_systemd_credentials_are_read_in_place_of_the_configured_paths() {
        let node = NodeId::new("a").expect("id");
        let issued_dir = tempfile::tempdir().expect("tempdir");
        let files = issued(issued_dir.path(), "a");
        // The configured paths exist nowhere: as under the unit's sandbox,
        // where only root may read them and systemd passes them on.
        let unreadable = TlsConfig {
            ca: Some("/nonexistent/ca.pem".into()),
            cert: Some("/nonexistent/a.pem".into()),
            key: Some("/nonexistent/a-key.pem".into()),
            ..TlsConfig::default()
        };
        let refused = MeshTls::load_from(&unreadable, &node, None)
            .expect_err("no file at the configured paths")
            .to_string();
        assert!(refused.contains("tls.ca"), "{refused}");

        let credentials = tempfile::tempdir().expect("tempdir");
        for ((_, name), from) in TLS_CREDENTIALS
            .iter()
            .zip([&files.ca, &files.cert, &files.key])
        {
            let from = from.as_ref().expect("issued");
            std::fs::copy(from, credentials.path().join(name)).expect("copy");
        }
        let loaded = MeshTls::load_from(&unreadable, &node, Some(credentials.path()))
            .expect("read from the credentials")
            .expect("mutual TLS");
        assert!(loaded.warnings.iter().all(|w| !w.contains("tls.ca")));

        // A credential the unit did not pass: its configured path is read.
        std::fs::remove_file(credentials.path().join("meshd-tls-key")).expect("rm");
        let key_missing = MeshTls::load_from(&unreadable, &node, Some(credentials.path()))
            .expect_err("the key's configured path does not exist")
            .to_string();
        assert!(key_missing.contains("tls.key"), "{key_missing}");
        let key_configured = TlsConfig {
            key: files.key.clone(),
            ..unreadable
        };
        assert!(
            MeshTls::load_from(&key_configured, &node, Some(credentials.path()))
                .expect("the key from its path, the rest from the credentials")
                .is_some()
        );
    }

    #[test]
    fn handshakes_are_budgeted_per_source_address() {
        let mut budgets = HandshakeBudgets::default();
        let now = Instant::now();
        let burst = HANDSHAKE_BURST as usize;
        assert_eq!(
            (0..burst + 10)
                .filter(|_| budgets.admit(ip("10.0.0.1"), now))
                .count(),
            burst
        );
        assert!(
            budgets.admit(ip("10.0.0.2"), now),
            "another address has its own budget"
        );
        let later = now + Duration::from_secs(1);
        let refilled = (0..100)
            .filter(|_| budgets.admit(ip("10.0.0.1"), later))
            .count();
        assert_eq!(refilled, HANDSHAKES_PER_SECOND as usize);
    }

    #[test]
    fn the_sources_remembered_are_bounded_and_full_budgets_forgotten_first() {
        let mut budgets = HandshakeBudgets::default();
        let now = Instant::now();
        for i in 0..MAX_TRACKED_SOURCES {
            let [_, _, hi, lo] = u32::try_from(i).expect("small").to_be_bytes();
            assert!(budgets.admit(IpAddr::from([10, 1, hi, lo]), now));
        }
        assert!(
            !budgets.admit(ip("10.2.0.1"), now),
            "every remembered source is still spending"
        );
        let later = now + Duration::from_secs(1);
        assert!(budgets.admit(ip("10.2.0.1"), later));
        assert!(budgets.sources.len() < MAX_TRACKED_SOURCES);
    }

    #[test]
    fn certificate_refusals_are_told_apart_from_other_failures() {
        assert_eq!(
            refusal_of(&rustls::Error::InvalidCertificate(C::UnknownIssuer)),
            Some(RefusalReason::UnknownCa)
        );
        assert_eq!(
            refusal_of(&rustls::Error::InvalidCertificate(C::Revoked)),
            Some(RefusalReason::Revoked)
        );
        assert_eq!(
            refusal_of(&rustls::Error::AlertReceived(
                AlertDescription::CertificateExpired
            )),
            Some(RefusalReason::RefusesOurs("certificate expired".to_owned()))
        );
        assert_eq!(
            refusal_of(&rustls::Error::AlertReceived(
                AlertDescription::HandshakeFailure
            )),
            None
        );
        assert_eq!(refusal_of(&rustls::Error::DecryptError), None);
    }
}
