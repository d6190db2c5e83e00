//! One Alertmanager made ready to post to: its checked URL, the
//! `Authorization` header built from the credential files, and for https
//! a rustls client (graviola's pure-Rust crypto) that trusts the
//! configured CA file or the system's roots.
//!
//! Secrets live only in the header value, marked sensitive; nothing here
//! or in the pusher formats it, and [`Target`]'s `Debug` leaves it out.
//! Logs and the metric label name the Alertmanager by `host:port` alone.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use hyper::header::HeaderValue;
use meshd_platform::file::{FileError, read_regular, read_regular_text};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::config::{AlertmanagerConfig, AlertmanagerUrl, parse_url};

/// A password or token file: secrets are short.
const MAX_SECRET_BYTES: u64 = 4096;
/// A CA file: a few certificates.
const MAX_CA_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{url:?}: {problem}")]
    Url { url: String, problem: String },
    #[error("cannot read an Alertmanager credential: {0}")]
    Credential(FileError),
    #[error("{}: is empty", path.display())]
    EmptyCredential { path: PathBuf },
    #[error("{}: the credential is not a valid HTTP header value (a control character?)", path.display())]
    BadCredential { path: PathBuf },
    #[error("cannot read the Alertmanager CA file: {0}")]
    CaFile(FileError),
    #[error("{}: {problem}", path.display())]
    BadCa { path: PathBuf, problem: String },
    #[error(
        "no trusted root certificates found on this system for https Alertmanagers; set ca_file"
    )]
    NoSystemRoots,
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// What a post needs to reach one Alertmanager.
#[derive(Clone)]
pub struct Target {
    pub url: AlertmanagerUrl,
    /// `host:port`: the log field and the metric label.
    pub authority: String,
    /// `Authorization`, marked sensitive; `None` without credentials.
    pub authorization: Option<HeaderValue>,
    /// For https: the TLS client and the name the certificate must carry.
    pub tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

impl std::fmt::Debug for Target {
    /// The authority only: the credentials never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("authority", &self.authority)
            .field("tls", &self.tls.is_some())
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "[set]"),
            )
            .finish()
    }
}

impl Target {
    /// Reads the credential and CA files of `config` (regular files only,
    /// bounded) and builds the TLS client for an https URL.
    pub fn open(config: &AlertmanagerConfig) -> Result<Target, TargetError> {
        let url = parse_url(&config.url).map_err(|e| TargetError::Url {
            url: config.url.clone(),
            problem: e.to_string(),
        })?;
        let authorization = match (&config.basic_auth, &config.bearer_token_file) {
            (Some(basic), _) => {
                let password = secret(&basic.password_file)?;
                let pair = format!("{}:{password}", basic.username);
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                Some(header(&format!("Basic {encoded}"), &basic.password_file)?)
            }
            (None, Some(token_file)) => {
                let token = secret(token_file)?;
                Some(header(&format!("Bearer {token}"), token_file)?)
            }
            (None, None) => None,
        };
        let tls = if url.tls {
            let client = client_config(config.ca_file.as_deref())?;
            let name = ServerName::try_from(url.host.clone()).map_err(|e| TargetError::Url {
                url: config.url.clone(),
                problem: format!("not a TLS server name: {e}"),
            })?;
            Some((tokio_rustls::TlsConnector::from(client), name))
        } else {
            None
        };
        Ok(Target {
            authority: url.authority(),
            url,
            authorization,
            tls,
        })
    }
}

/// A credential file's text without its trailing newline.
fn secret(path: &Path) -> Result<String, TargetError> {
    let text = read_regular_text(path, MAX_SECRET_BYTES).map_err(TargetError::Credential)?;
    let text = text.trim_end_matches(['\n', '\r']);
    if text.is_empty() {
        return Err(TargetError::EmptyCredential {
            path: path.to_owned(),
        });
    }
    Ok(text.to_owned())
}

fn header(value: &str, path: &Path) -> Result<HeaderValue, TargetError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| TargetError::BadCredential {
        path: path.to_owned(),
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// A rustls client with graviola's crypto that trusts `ca_file`'s
/// certificates, or the system's roots without one.
fn client_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TargetError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let pem = read_regular(path, MAX_CA_BYTES).map_err(TargetError::CaFile)?;
            let bad = |problem: String| TargetError::BadCa {
                path: path.to_owned(),
                problem,
            };
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad(format!("not PEM certificates: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| bad(format!("a certificate rustls refuses: {e}")))?;
            }
            if roots.is_empty() {
                return Err(bad("holds no certificate".to_owned()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for err in &found.errors {
                tracing::debug!("a system root certificate could not be read: {err}");
            }
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(TargetError::NoSystemRoots);
            }
        }
    }
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls_graviola::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BasicAuth;

    fn with_file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn credentials_come_from_files_as_sensitive_headers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = AlertmanagerConfig::url("http://am:9093");
        config.bearer_token_file = Some(with_file(dir.path(), "token", "t0ken-XYZ\n"));
        let target = Target::open(&config).expect("target");
        let auth = target.authorization.as_ref().expect("header");
        assert_eq!(auth, "Bearer t0ken-XYZ");
        assert!(auth.is_sensitive());
        assert!(!format!("{target:?}").contains("t0ken"), "{target:?}");

        config.bearer_token_file = None;
        config.basic_auth = Some(BasicAuth {
            username: "meshd".into(),
            password_file: with_file(dir.path(), "password", "s3cret\n"),
        });
        let target = Target::open(&config).expect("target");
        // base64("meshd:s3cret")
        assert_eq!(
            target.authorization.as_ref().expect("header"),
            "Basic bWVzaGQ6czNjcmV0"
        );
        assert_eq!(target.authority, "am:9093");
        assert!(target.tls.is_none());
    }

    #[test]
    fn a_credential_that_is_not_a_small_regular_file_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
        let mut config = AlertmanagerConfig::url("http://am:9093");
        config.bearer_token_file = Some(zero.clone());
        let err = Target::open(&config).expect_err("a device");
        assert_eq!(
            err.to_string(),
            format!(
                "cannot read an Alertmanager credential: {}: is a character device, not a regular file",
                zero.display()
            )
        );
        config.bearer_token_file = Some(with_file(dir.path(), "empty", "\n"));
        assert!(matches!(
            Target::open(&config),
            Err(TargetError::EmptyCredential { .. })
        ));
        config.bearer_token_file = Some(with_file(dir.path(), "ctl", "a\u{7}b"));
        assert!(matches!(
            Target::open(&config),
            Err(TargetError::BadCredential { .. })
        ));
    }

    #[test]
    fn https_needs_a_readable_ca_file_with_certificates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = AlertmanagerConfig::url("https://am:9093");
        config.ca_file = Some(with_file(dir.path(), "ca.pem", "not a certificate\n"));
        let err = Target::open(&config).expect_err("no certificate");
        assert!(err.to_string().ends_with("holds no certificate"), "{err}");
        let ca = meshd_pki::Ca::create(
            "test",
            std::time::SystemTime::now(),
            std::time::Duration::from_secs(3600),
        )
        .expect("ca");
        config.ca_file = Some(with_file(dir.path(), "ca.pem", ca.cert_pem()));
        let target = Target::open(&config).expect("target");
        assert!(target.tls.is_some());
        assert_eq!(target.authority, "am:9093");
    }
}
