//! meshd's small PKI: the keys and certificates a mesh needs for mutual
//! TLS, in pure Rust.
//!
//! - [`KeyPair`]: an ECDSA P-256 key (graviola), PKCS#8 PEM in and out. It
//!   implements rcgen's signing traits, so rcgen builds certificates
//!   without ring or aws-lc-rs (neither builds for aarch64-apple-darwin
//!   without a C cross toolchain).
//! - [`Ca`]: a self-signed mesh CA, or one loaded from its PEM files, that
//!   issues node certificates ([`Ca::issue`]) naming the node as common
//!   name and DNS name, for server and client authentication.
//! - [`certificate_der`], [`common_name`]: reading certificates back.
//!
//! Times are passed in; nothing here reads a clock or a file.

mod ca;
mod key;

pub use ca::{Ca, Issued};
pub use key::KeyPair;

use x509_parser::certificate::X509Certificate;

/// PEM label of a certificate.
const CERTIFICATE_LABEL: &str = "CERTIFICATE";

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("PEM: {0}")]
    Pem(String),
    #[error("not an X.509 certificate: {0}")]
    Certificate(String),
    #[error("the certificate is not a CA certificate (no basic constraints with cA true)")]
    NotCa,
    #[error("the private key does not belong to the certificate")]
    KeyMismatch,
    #[error("bad name: {0}")]
    Name(String),
    #[error("validity out of range (X.509 times run from 1970 to 9999 here): {0}")]
    Validity(String),
    #[error("cannot build the certificate: {0}")]
    Build(#[from] rcgen::Error),
    #[error("crypto: {0}")]
    Crypto(String),
}

/// The DER of the first certificate in `pem_text`.
pub fn certificate_der(pem_text: &str) -> Result<Vec<u8>, PkiError> {
    let block = pem::parse(pem_text).map_err(|e| PkiError::Pem(e.to_string()))?;
    if block.tag() != CERTIFICATE_LABEL {
        return Err(PkiError::Pem(format!(
            "expected a {CERTIFICATE_LABEL} block, found {}",
            block.tag()
        )));
    }
    Ok(block.into_contents())
}

/// The subject common name of a DER certificate: the node id of a node
/// certificate, the mesh name of a CA.
pub fn common_name(der: &[u8]) -> Result<String, PkiError> {
    let cert = parse_certificate(der)?;
    let mut names = cert.subject().iter_common_name();
    let name = names
        .next()
        .ok_or_else(|| PkiError::Certificate("no common name".to_owned()))?;
    if names.next().is_some() {
        return Err(PkiError::Certificate(
            "more than one common name".to_owned(),
        ));
    }
    name.as_str()
        .map(str::to_owned)
        .map_err(|e| PkiError::Certificate(format!("common name: {e}")))
}

fn parse_certificate(der: &[u8]) -> Result<X509Certificate<'_>, PkiError> {
    match x509_parser::parse_x509_certificate(der) {
        Ok(([], cert)) => Ok(cert),
        Ok(_) => Err(PkiError::Certificate(
            "trailing bytes after the certificate".to_owned(),
        )),
        Err(e) => Err(PkiError::Certificate(e.to_string())),
    }
}
