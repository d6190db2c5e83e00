//! Certificates from meshd-pki carry a real mutual TLS handshake through
//! rustls with the graviola provider (in memory, no sockets): each side
//! verifies the other against the mesh CA, the server reads the client's
//! node id from its certificate, and anything from another CA or for
//! another name is refused.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshd_pki::{Ca, Issued, KeyPair, PkiError, certificate_der, common_name};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

fn now() -> SystemTime {
    SystemTime::now()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls_graviola::default_provider())
}

fn chain(issued: &Issued) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let cert = CertificateDer::from(certificate_der(&issued.cert_pem).expect("cert pem"));
    let key_block = pem::parse(&issued.key_pem).expect("key pem");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_block.into_contents()));
    (vec![cert], key)
}

fn roots(ca: &Ca) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(
            certificate_der(ca.cert_pem()).expect("ca pem"),
        ))
        .expect("root");
    Arc::new(roots)
}

fn server(ca: &Ca, identity: &Issued) -> ServerConnection {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca), provider())
        .build()
        .expect("client verifier");
    let (certs, key) = chain(identity);
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .expect("server config");
    ServerConnection::new(Arc::new(config)).expect("server")
}

fn client(ca: &Ca, identity: &Issued, server_name: &str) -> ClientConnection {
    let verifier = WebPkiServerVerifier::builder_with_provider(roots(ca), provider())
        .build()
        .expect("server verifier");
    let (certs, key) = chain(identity);
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(certs, key)
        .expect("client config");
    let name = ServerName::try_from(server_name.to_owned()).expect("server name");
    ClientConnection::new(Arc::new(config), name).expect("client")
}

/// Moves bytes between the two ends until both finish the handshake or one
/// refuses; the error names who refused.
fn handshake(client: &mut ClientConnection, server: &mut ServerConnection) -> Result<(), String> {
    for _ in 0..20 {
        if !client.is_handshaking() && !server.is_handshaking() {
            return Ok(());
        }
        let mut wire = Vec::new();
        client.write_tls(&mut wire).expect("client writes");
        server.read_tls(&mut wire.as_slice()).expect("server reads");
        server
            .process_new_packets()
            .map_err(|e| format!("server refused: {e}"))?;
        let mut wire = Vec::new();
        server.write_tls(&mut wire).expect("server writes");
        client.read_tls(&mut wire.as_slice()).expect("client reads");
        client
            .process_new_packets()
            .map_err(|e| format!("client refused: {e}"))?;
    }
    Err("handshake did not finish".to_owned())
}

fn mesh_ca() -> Ca {
    Ca::create("meshd mesh test", now(), 365 * DAY).expect("ca")
}

#[test]
fn node_certificates_authenticate_both_ends_and_name_the_client() {
    let ca = mesh_ca();
    let a = ca
        .issue("node-a", &["10.0.0.1".to_owned()], now(), 30 * DAY)
        .expect("a");
    let b = ca
        .issue("node-b", &["studio-2.local".to_owned()], now(), 30 * DAY)
        .expect("b");
    let mut server = server(&ca, &b);
    let mut client = client(&ca, &a, "node-b");
    handshake(&mut client, &mut server).expect("mutual TLS");

    let presented = server.peer_certificates().expect("client certificate");
    assert_eq!(common_name(&presented[0]).expect("cn"), "node-a");
    let served = client.peer_certificates().expect("server certificate");
    assert_eq!(common_name(&served[0]).expect("cn"), "node-b");
}

#[test]
fn a_certificate_from_another_ca_is_refused_by_the_server() {
    let ca = mesh_ca();
    let stranger_ca = mesh_ca();
    let b = ca.issue("node-b", &[], now(), DAY).expect("b");
    let forged = stranger_ca
        .issue("node-a", &[], now(), DAY)
        .expect("forged");
    let mut server = server(&ca, &b);
    let mut client = client(&ca, &forged, "node-b");
    let err = handshake(&mut client, &mut server).expect_err("refused");
    assert!(err.starts_with("server refused"), "{err}");
    assert!(server.peer_certificates().is_none());
}

#[test]
fn a_server_with_another_nodes_name_is_refused_by_the_client() {
    let ca = mesh_ca();
    let a = ca.issue("node-a", &[], now(), DAY).expect("a");
    let c = ca.issue("node-c", &[], now(), DAY).expect("c");
    let mut server = server(&ca, &c);
    let mut client = client(&ca, &a, "node-b");
    let err = handshake(&mut client, &mut server).expect_err("refused");
    assert!(err.starts_with("client refused"), "{err}");
    assert!(err.contains("not valid for name \"node-b\""), "{err}");
}

#[test]
fn an_expired_certificate_is_refused() {
    let ca = mesh_ca();
    let b = ca.issue("node-b", &[], now(), DAY).expect("b");
    let long_ago = now() - 10 * DAY;
    let old = ca.issue("node-a", &[], long_ago, DAY).expect("old");
    let mut server = server(&ca, &b);
    let mut client = client(&ca, &old, "node-b");
    let err = handshake(&mut client, &mut server).expect_err("refused");
    assert!(err.contains("certificate expired"), "{err}");
}

#[test]
fn a_ca_written_to_pem_and_loaded_again_issues_certificates_the_old_one_trusts() {
    let ca = mesh_ca();
    let loaded = Ca::load(ca.cert_pem(), &ca.key_pem().expect("key pem")).expect("loaded");
    assert_eq!(loaded.cert_pem(), ca.cert_pem());
    let a = loaded.issue("node-a", &[], now(), DAY).expect("a");
    let b = ca.issue("node-b", &[], now(), DAY).expect("b");
    let mut server = server(&ca, &b);
    let mut client = client(&ca, &a, "node-b");
    handshake(&mut client, &mut server).expect("mutual TLS across a reload of the CA");
}

#[test]
fn loading_refuses_a_foreign_key_and_a_leaf_certificate() {
    let ca = mesh_ca();
    let other_key = KeyPair::generate().expect("key").to_pem().expect("pem");
    assert!(matches!(
        Ca::load(ca.cert_pem(), &other_key),
        Err(PkiError::KeyMismatch)
    ));
    let leaf = ca.issue("node-a", &[], now(), DAY).expect("leaf");
    assert!(matches!(
        Ca::load(&leaf.cert_pem, &leaf.key_pem),
        Err(PkiError::NotCa)
    ));
    assert!(matches!(
        Ca::load("not pem", &other_key),
        Err(PkiError::Pem(_))
    ));
}

#[test]
fn names_and_validity_are_checked_before_signing() {
    let ca = mesh_ca();
    let err = ca
        .issue("node-a", &["bad name ü".to_owned()], now(), DAY)
        .expect_err("bad name");
    assert!(err.to_string().contains("bad name ü"), "{err}");
    let err = ca
        .issue(
            "node-a",
            &[],
            now(),
            Duration::from_secs(9000 * 365 * 86_400),
        )
        .expect_err("past 9999");
    assert!(matches!(err, PkiError::Validity(_)), "{err}");
    assert!(Ca::create("x", SystemTime::UNIX_EPOCH, DAY).is_err());
}
