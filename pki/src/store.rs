//! A directory of a mesh's certificates, as `meshctl certs` writes it and
//! meshd's config names it:
//!
//! | file | what |
//! |---|---|
//! | `ca.pem` | the mesh's CA certificate: every node trusts it |
//! | `ca-key.pem` | the CA's key: signs node certificates; keep it off the nodes |
//! | `<node>.pem` | node `<node>`'s certificate |
//! | `<node>-key.pem` | its key |
//!
//! Keys are written owner-only (0600) and never over an existing file, so a
//! second `init` cannot replace the CA a mesh already trusts.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::{Ca, Issued, PkiError};

/// Largest PEM file read back: certificates and keys are a few hundred bytes.
const MAX_PEM_BYTES: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} exists already; remove it first to replace it")]
    Exists { path: PathBuf },
    #[error("{path}: {source}")]
    Pki { path: PathBuf, source: PkiError },
    #[error("{path} is larger than {MAX_PEM_BYTES} bytes")]
    TooLarge { path: PathBuf },
}

/// The certificate directory at `dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertDir {
    dir: PathBuf,
}

/// Where one party's certificate and key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertDir {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn ca(&self) -> Pair {
        self.pair("ca")
    }

    /// Node `node`'s files. Node ids are file-name safe (letters, digits,
    /// '.', '_', '-'; never "." or "..").
    pub fn node(&self, node: &str) -> Pair {
        self.pair(node)
    }

    fn pair(&self, name: &str) -> Pair {
        Pair {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}-key.pem")),
        }
    }

    /// Creates a CA named `name` and writes it; refuses to replace one.
    pub fn init(&self, name: &str, now: SystemTime, valid_for: Duration) -> Result<Ca, StoreError> {
        let pair = self.ca();
        refuse_existing(&pair)?;
        let ca = Ca::create(name, now, valid_for).map_err(|source| StoreError::Pki {
            path: pair.cert.clone(),
            source,
        })?;
        let key = ca.key_pem().map_err(|source| StoreError::Pki {
            path: pair.key.clone(),
            source,
        })?;
        self.write(&pair, ca.cert_pem(), &key)?;
        Ok(ca)
    }

    /// The CA written by [`CertDir::init`].
    pub fn load_ca(&self) -> Result<Ca, StoreError> {
        let pair = self.ca();
        let cert = read_pem(&pair.cert)?;
        let key = read_pem(&pair.key)?;
        Ca::load(&cert, &key).map_err(|source| StoreError::Pki {
            path: pair.cert,
            source,
        })
    }

    /// Issues node `node`'s certificate with `ca` and writes it; refuses to
    /// replace one.
    pub fn issue(
        &self,
        ca: &Ca,
        node: &str,
        other_names: &[String],
        now: SystemTime,
        valid_for: Duration,
    ) -> Result<Pair, StoreError> {
        let pair = self.node(node);
        refuse_existing(&pair)?;
        let Issued { cert_pem, key_pem } =
            ca.issue(node, other_names, now, valid_for)
                .map_err(|source| StoreError::Pki {
                    path: pair.cert.clone(),
                    source,
                })?;
        self.write(&pair, &cert_pem, &key_pem)?;
        Ok(pair)
    }

    /// Writes `ca`'s certificate alone (no key) as this directory's
    /// `ca.pem`: a node's own directory trusts the mesh's CA without being
    /// able to sign. Refuses to replace one.
    pub fn trust(&self, ca: &Ca) -> Result<PathBuf, StoreError> {
        let cert = self.ca().cert;
        if cert.exists() {
            return Err(StoreError::Exists { path: cert });
        }
        create_dir(&self.dir)?;
        write_new(&cert, ca.cert_pem(), 0o644)?;
        Ok(cert)
    }

    fn write(&self, pair: &Pair, cert: &str, key: &str) -> Result<(), StoreError> {
        create_dir(&self.dir)?;
        write_new(&pair.key, key, 0o600)?;
        write_new(&pair.cert, cert, 0o644)
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

fn refuse_existing(pair: &Pair) -> Result<(), StoreError> {
    for path in [&pair.cert, &pair.key] {
        if path.exists() {
            return Err(StoreError::Exists { path: path.clone() });
        }
    }
    Ok(())
}

fn create_dir(dir: &Path) -> Result<(), StoreError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o755);
    builder.create(dir).map_err(io_error(dir))
}

/// Writes a file that must not exist yet, with `mode` from the start (a key
/// is never readable by others, not even for a moment).
fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), StoreError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(|source| match source.kind() {
        io::ErrorKind::AlreadyExists => StoreError::Exists {
            path: path.to_owned(),
        },
        _ => StoreError::Io {
            path: path.to_owned(),
            source,
        },
    })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_error(path))
}

/// Reads a PEM file of at most [`MAX_PEM_BYTES`].
pub fn read_pem(path: &Path) -> Result<String, StoreError> {
    use std::io::Read;
    let file = fs::File::open(path).map_err(io_error(path))?;
    let mut text = String::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io_error(path))?;
    if text.len() as u64 > MAX_PEM_BYTES {
        return Err(StoreError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

    #[test]
    fn init_and_issue_write_the_documented_files_and_never_replace_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = CertDir::new(dir.path().join("tls"));
        let now = SystemTime::now();
        let ca = store.init("test mesh", now, YEAR).expect("init");
        let again = store.init("test mesh", now, YEAR).expect_err("second init");
        assert!(matches!(again, StoreError::Exists { .. }), "{again}");
        let pair = store.issue(&ca, "studio-1", &[], now, YEAR).expect("issue");
        assert_eq!(pair.cert, dir.path().join("tls/studio-1.pem"));
        assert_eq!(pair.key, dir.path().join("tls/studio-1-key.pem"));
        assert!(store.issue(&ca, "studio-1", &[], now, YEAR).is_err());

        let loaded = store.load_ca().expect("the CA loads back");
        let cert = read_pem(&pair.cert).expect("cert");
        let der = crate::certificate_der(&cert).expect("der");
        assert_eq!(crate::common_name(&der).expect("cn"), "studio-1");
        assert_eq!(loaded.cert_pem(), ca.cert_pem());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for key in [&pair.key, &store.ca().key] {
                let mode = fs::metadata(key).expect("meta").permissions().mode();
                assert_eq!(mode & 0o077, 0, "{} is readable by others", key.display());
            }
        }
    }

    #[test]
    fn trust_writes_the_ca_certificate_without_its_key_and_never_replaces_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let now = SystemTime::now();
        let ca = CertDir::new(dir.path().join("ca"))
            .init("test mesh", now, YEAR)
            .expect("init");
        let node = CertDir::new(dir.path().join("node-1"));
        let cert = node.trust(&ca).expect("trust");
        assert_eq!(read_pem(&cert).expect("read"), ca.cert_pem());
        assert!(
            !node.ca().key.exists(),
            "the CA key stays where it was made"
        );
        assert!(matches!(node.trust(&ca), Err(StoreError::Exists { .. })));
    }

    #[test]
    fn a_missing_or_oversized_file_names_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = CertDir::new(dir.path());
        let err = store.load_ca().expect_err("no CA");
        assert!(err.to_string().contains("ca.pem"), "{err}");
        let big = dir.path().join("big.pem");
        fs::write(&big, vec![b'A'; 70_000]).expect("write");
        assert!(matches!(read_pem(&big), Err(StoreError::TooLarge { .. })));
    }
}
