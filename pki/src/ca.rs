//! A mesh's certificate authority and the node certificates it issues.
//!
//! A node certificate names the node in its subject common name and as a
//! DNS subject alternative name, so a TLS client that expects node `b`
//! verifies the server with the server name `b`, whatever address it dialled,
//! and a server reads its client's node id from the certificate. Every node
//! certificate is good for both ends of a connection (server and client
//! authentication), since every node both serves and calls its peers.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyUsagePurpose, SanType, SerialNumber,
};
use time::OffsetDateTime;
use x509_parser::asn1_rs::Tag;
use x509_parser::extensions::ParsedExtension;
use x509_parser::x509::X509Name;

use crate::key::{KeyPair, p256_point};
use crate::{PkiError, parse_certificate};

/// Certificates are valid from this long before they were made, so a peer
/// whose clock is a little behind accepts a fresh one.
const BACKDATE: Duration = Duration::from_secs(60 * 60);
/// 9999-12-31T23:59:59Z.
const LATEST_SINCE_EPOCH: Duration = Duration::from_secs(253_402_300_799);
/// Random serial numbers: 16 bytes, under RFC 5280's 20-byte limit.
const SERIAL_BYTES: usize = 16;

/// A PEM certificate and its PEM private key.
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    /// The certificate only: a private key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// A certificate authority: its certificate and the key that signs with it.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// A new self-signed CA named `name`, valid from `now` for `valid_for`.
    /// It may sign node certificates only (path length 0).
    pub fn create(name: &str, now: SystemTime, valid_for: Duration) -> Result<Ca, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, now, valid_for)?;
        params.serial_number = Some(serial()?);
        params.key_identifier_method = KeyIdMethod::PreSpecified(key.key_identifier());
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA from its PEM certificate and PEM private key, as [`Ca::cert_pem`]
    /// and [`Ca::key_pem`] wrote them. Refuses a key that is not the
    /// certificate's, a certificate that is not a CA allowed to sign
    /// certificates, and a subject name this crate cannot reproduce exactly
    /// (the issuer name of every certificate it signs must equal it byte for
    /// byte, or no chain is ever built).
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Ca, PkiError> {
        let key = KeyPair::from_pem(key_pem)?;
        let der = crate::certificate_der(cert_pem)?;
        let cert = parse_certificate(&der)?;
        let signs_certificates = cert
            .key_usage()
            .map_err(|e| PkiError::Certificate(e.to_string()))?
            .is_none_or(|usage| usage.value.key_cert_sign());
        if !cert.is_ca() || !signs_certificates {
            return Err(PkiError::NotCa);
        }
        if p256_point(cert.public_key().raw) != Some(rcgen::PublicKeyData::der_bytes(&key)) {
            return Err(PkiError::KeyMismatch);
        }
        let key_id = cert
            .iter_extensions()
            .find_map(|ext| match ext.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
                _ => None,
            })
            .unwrap_or_else(|| key.key_identifier());
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(cert.subject())?;
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        params.key_identifier_method = KeyIdMethod::PreSpecified(key_id);
        let subject = cert.subject().as_raw().to_vec();
        let ca = Ca {
            issuer: Issuer::new(params, key),
            cert_pem: cert_pem.to_owned(),
        };
        // Sign one certificate to see the issuer name as it will be written.
        let probe = ca.issue("probe", &[], SystemTime::UNIX_EPOCH + BACKDATE, BACKDATE)?;
        let probe_der = crate::certificate_der(&probe.cert_pem)?;
        if parse_certificate(&probe_der)?.issuer().as_raw() != subject.as_slice() {
            return Err(PkiError::Certificate(
                "its subject name uses an encoding this tool does not write; \
                 use a CA made by `meshctl certs init`"
                    .to_owned(),
            ));
        }
        Ok(ca)
    }

    /// The CA certificate, PEM: what every node trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key, PEM: what issues certificates; keep it off the nodes.
    pub fn key_pem(&self) -> Result<String, PkiError> {
        self.issuer.key().to_pem()
    }

    /// A certificate for node `name` with a new key, valid from `now` for
    /// `valid_for`, for both server and client authentication. `name` is its
    /// common name and first DNS name; `other_names` (host names or IP
    /// addresses) are added as further alternative names.
    pub fn issue(
        &self,
        name: &str,
        other_names: &[String],
        now: SystemTime,
        valid_for: Duration,
    ) -> Result<Issued, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(name);
        params.subject_alt_names = std::iter::once(name)
            .chain(other_names.iter().map(String::as_str))
            .map(alternative_name)
            .collect::<Result<_, _>>()?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, now, valid_for)?;
        params.serial_number = Some(serial()?);
        params.key_identifier_method = KeyIdMethod::PreSpecified(key.key_identifier());
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.to_pem()?,
        })
    }
}

/// The subject of a CA certificate as rcgen's name, for the attributes
/// whose values are UTF-8, printable or IA5 strings.
fn distinguished_name(subject: &X509Name<'_>) -> Result<DistinguishedName, PkiError> {
    let mut dn = DistinguishedName::new();
    for attribute in subject.iter_attributes() {
        let oid: Vec<u64> = attribute
            .attr_type()
            .iter()
            .ok_or_else(|| PkiError::Certificate("an attribute type too long".to_owned()))?
            .collect();
        let text = attribute
            .as_str()
            .map_err(|e| PkiError::Certificate(format!("subject attribute: {e}")))?;
        let value = match attribute.attr_value().tag() {
            Tag::PrintableString => DnValue::PrintableString(
                text.try_into()
                    .map_err(|e| PkiError::Certificate(format!("subject attribute: {e}")))?,
            ),
            Tag::Ia5String => DnValue::Ia5String(
                text.try_into()
                    .map_err(|e| PkiError::Certificate(format!("subject attribute: {e}")))?,
            ),
            _ => DnValue::Utf8String(text.to_owned()),
        };
        dn.push(DnType::from_oid(&oid), value);
    }
    Ok(dn)
}

fn common_name(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}

fn alternative_name(name: &str) -> Result<SanType, PkiError> {
    match name.parse::<IpAddr>() {
        Ok(ip) => Ok(SanType::IpAddress(ip)),
        Err(_) => Ok(SanType::DnsName(name.try_into().map_err(|_| {
            PkiError::Name(format!(
                "{name:?} is neither an IP address nor a DNS name (ASCII only)"
            ))
        })?)),
    }
}

fn validity(
    params: &mut CertificateParams,
    now: SystemTime,
    valid_for: Duration,
) -> Result<(), PkiError> {
    let out_of_range = || PkiError::Validity(format!("{valid_for:?} from {now:?}"));
    // X.509 times (and `time`'s dates) end with the year 9999.
    let latest = SystemTime::UNIX_EPOCH + LATEST_SINCE_EPOCH;
    let start = now
        .checked_sub(BACKDATE)
        .filter(|t| *t >= SystemTime::UNIX_EPOCH);
    let end = now.checked_add(valid_for).filter(|t| *t <= latest);
    let (Some(start), Some(end)) = (start, end) else {
        return Err(out_of_range());
    };
    params.not_before = OffsetDateTime::from(start);
    params.not_after = OffsetDateTime::from(end);
    Ok(())
}

fn serial() -> Result<SerialNumber, PkiError> {
    let mut bytes = [0u8; SERIAL_BYTES];
    graviola::random::fill(&mut bytes).map_err(|e| PkiError::Crypto(format!("{e:?}")))?;
    // Positive, and never a leading zero byte that DER would strip.
    if let Some(first) = bytes.first_mut() {
        *first = (*first & 0x7f) | 0x01;
    }
    Ok(SerialNumber::from_slice(&bytes))
}
