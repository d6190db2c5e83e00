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
//! - [`certificate_der`], [`common_name`], [`CertificateFacts`]: reading
//!   certificates back (who, which serial, valid when).
//! - [`store::CertDir`]: the directory `meshctl certs` writes and meshd's
//!   config names, the one part that touches files.
//!
//! Times are passed in; nothing here reads a clock.

mod ca;
mod key;
pub mod store;

pub use ca::{Ca, Issued};
pub use key::KeyPair;

use std::time::{Duration, SystemTime};

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

/// What a certificate says about itself that expiry and revocation need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFacts {
    /// Its serial number, lowercase hex without separators: how
    /// `tls.revoked_serials` names it (see [`serial_key`]).
    pub serial: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

/// The serial and validity of a DER certificate.
pub fn certificate_facts(der: &[u8]) -> Result<CertificateFacts, PkiError> {
    let cert = parse_certificate(der)?;
    let validity = cert.validity();
    let time = |t: x509_parser::time::ASN1Time| {
        let seconds = t.timestamp();
        u64::try_from(seconds)
            .ok()
            .and_then(|s| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(s)))
            .ok_or_else(|| PkiError::Validity(format!("a time before 1970: {t}")))
    };
    Ok(CertificateFacts {
        serial: hex(cert.raw_serial()),
        not_before: time(validity.not_before)?,
        not_after: time(validity.not_after)?,
    })
}

/// A serial number as written by an operator (`01:AB:…`, `01ab…`, with or
/// without a `0x`) in the form [`CertificateFacts::serial`] has; `None`
/// for anything but 1 to 20 bytes of hex (RFC 5280's limit).
pub fn serial_key(written: &str) -> Option<String> {
    let digits: String = written
        .trim()
        .trim_start_matches("0x")
        .chars()
        .filter(|c| *c != ':')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let valid = !digits.is_empty()
        && digits.len() <= 40
        && digits.len().is_multiple_of(2)
        && digits.chars().all(|c| c.is_ascii_hexdigit());
    valid.then_some(digits)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn facts_read_back_the_validity_and_the_serial_revocation_names() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ca = Ca::create("mesh", now, 10 * DAY).expect("ca");
        let issued = ca.issue("a", &[], now, DAY).expect("issue");
        let der = certificate_der(&issued.cert_pem).expect("der");
        let facts = certificate_facts(&der).expect("facts");
        assert_eq!(facts.not_after, now + DAY);
        assert!(facts.not_before < now, "backdated");
        assert_eq!(facts.serial.len(), 32, "{}", facts.serial);
        let colons: Vec<String> = facts
            .serial
            .as_bytes()
            .chunks(2)
            .map(|pair| String::from_utf8_lossy(pair).to_uppercase())
            .collect();
        assert_eq!(serial_key(&colons.join(":")), Some(facts.serial.clone()));
    }

    #[test]
    fn a_serial_that_is_not_hex_bytes_is_no_key() {
        for bad in ["", "0x", "abc", "zz", &"ab".repeat(21)] {
            assert_eq!(serial_key(bad), None, "{bad:?}");
        }
        assert_eq!(serial_key("0x0A:bC"), Some("0abc".to_owned()));
    }
}
