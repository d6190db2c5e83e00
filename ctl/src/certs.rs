//! `meshctl certs`: the mesh's CA and its nodes' certificates, written to a
//! directory an operator copies from (see `meshd_pki::store` for its files).
//! Run it on an admin machine, not on the nodes: the CA's key signs every
//! node the mesh will trust.

use std::path::Path;
use std::time::{Duration, SystemTime};

use meshd_domain::NodeId;
use meshd_pki::Ca;
use meshd_pki::store::{CertDir, Pair, StoreError};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// What to do in the certificate directory.
#[derive(Debug)]
pub enum Action {
    /// Create the mesh's CA, valid `days`.
    Init { name: String, days: u32 },
    /// Issue a certificate for each of `nodes`, valid `days`.
    Issue { nodes: Vec<String>, days: u32 },
}

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("node id {id:?}: {reason}")]
    NodeId { id: String, reason: String },
    #[error("--days must be at least 1")]
    NoDays,
    #[error(
        "{dir} has no CA to issue with: run `meshctl certs init --dir {dir}` first, or point --dir at the directory that holds ca.pem and ca-key.pem"
    )]
    NoCa { dir: String },
}

/// Runs `action` in `dir`, printing what was written; `now` is when the
/// certificates start to be valid.
pub fn run(dir: &Path, action: Action, now: SystemTime) -> Result<(), CertsError> {
    let store = CertDir::new(dir);
    match action {
        Action::Init { name, days } => {
            create_ca(&store, &name, days, now)?;
            let ca = store.ca();
            say(&format!(
                "wrote the mesh's CA {:?}, valid {days} days:\n  {}  (copy to every node: tls.ca)\n  {}  (keep here, off the nodes: it signs certificates)\n",
                name,
                ca.cert.display(),
                ca.key.display(),
            ));
        }
        Action::Issue { nodes, days } => {
            validity(days)?;
            let ids = nodes
                .iter()
                .map(|id| node_id(id))
                .collect::<Result<Vec<_>, _>>()?;
            if !store.ca().key.exists() {
                return Err(CertsError::NoCa {
                    dir: dir.display().to_string(),
                });
            }
            let ca = store.load_ca()?;
            for id in &ids {
                let pair = issue_node(&store, &ca, id, days, now)?;
                say(&format!(
                    "wrote node {id}'s certificate, valid {days} days:\n  {}  (tls.cert on {id})\n  {}  (tls.key on {id}, mode 0600)\n",
                    pair.cert.display(),
                    pair.key.display(),
                ));
            }
        }
    }
    Ok(())
}

/// Creates the mesh's CA `name` in `store`, valid `days` from `now`
/// (`meshctl certs init`, and `meshctl plan --certs`).
pub fn create_ca(
    store: &CertDir,
    name: &str,
    days: u32,
    now: SystemTime,
) -> Result<Ca, CertsError> {
    Ok(store.init(name, now, validity(days)?)?)
}

/// Issues node `id`'s certificate and key into `store`, signed by `ca`,
/// valid `days` from `now` (`meshctl certs issue`, and `meshctl plan
/// --certs`); the key is written owner-only.
pub fn issue_node(
    store: &CertDir,
    ca: &Ca,
    id: &NodeId,
    days: u32,
    now: SystemTime,
) -> Result<Pair, CertsError> {
    Ok(store.issue(ca, id.as_str(), &[], now, validity(days)?)?)
}

fn node_id(id: &str) -> Result<NodeId, CertsError> {
    NodeId::new(id.to_owned()).map_err(|e| CertsError::NodeId {
        id: id.to_owned(),
        reason: e.to_string(),
    })
}

/// What was written, for the operator: the files exist whether or not
/// anyone reads this (a closed pipe is not a failure).
fn say(text: &str) {
    let _ = crate::outcome::emit(text);
}

fn validity(days: u32) -> Result<Duration, CertsError> {
    if days == 0 {
        return Err(CertsError::NoDays);
    }
    Ok(DAY * days)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(dir: &Path, nodes: &[&str]) -> Result<(), CertsError> {
        run(
            dir,
            Action::Issue {
                nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
                days: 30,
            },
            SystemTime::now(),
        )
    }

    #[test]
    fn init_then_issue_writes_a_ca_and_each_nodes_pair() {
        let dir = tempfile::tempdir().expect("tempdir");
        let init = Action::Init {
            name: "test mesh".to_owned(),
            days: 365,
        };
        run(dir.path(), init, SystemTime::now()).expect("init");
        issue(dir.path(), &["studio-1", "studio-2"]).expect("issue");
        for file in [
            "ca.pem",
            "ca-key.pem",
            "studio-1.pem",
            "studio-1-key.pem",
            "studio-2.pem",
            "studio-2-key.pem",
        ] {
            assert!(dir.path().join(file).is_file(), "{file}");
        }
        let cert = meshd_pki::store::read_pem(&dir.path().join("studio-2.pem")).expect("read");
        let der = meshd_pki::certificate_der(&cert).expect("der");
        assert_eq!(meshd_pki::common_name(&der).expect("cn"), "studio-2");
    }

    #[test]
    fn issue_without_a_ca_says_to_init_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = issue(dir.path(), &["studio-1"]).expect_err("no CA");
        assert!(err.to_string().contains("meshctl certs init"), "{err}");
        assert!(!dir.path().join("studio-1.pem").exists());
    }

    #[test]
    fn a_bad_node_id_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let init = Action::Init {
            name: "m".to_owned(),
            days: 1,
        };
        run(dir.path(), init, SystemTime::now()).expect("init");
        let err = issue(dir.path(), &["good", "../etc/passwd"]).expect_err("bad id");
        assert!(err.to_string().contains("../etc/passwd"), "{err}");
        assert!(!dir.path().join("good.pem").exists());
    }

    #[test]
    fn nothing_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let init = || Action::Init {
            name: "m".to_owned(),
            days: 1,
        };
        run(dir.path(), init(), SystemTime::now()).expect("init");
        let ca = std::fs::read(dir.path().join("ca.pem")).expect("read");
        assert!(matches!(
            run(dir.path(), init(), SystemTime::now()),
            Err(CertsError::Store(StoreError::Exists { .. }))
        ));
        assert_eq!(std::fs::read(dir.path().join("ca.pem")).expect("read"), ca);
        issue(dir.path(), &["a"]).expect("issue");
        assert!(issue(dir.path(), &["a"]).is_err(), "a is issued already");
    }

    #[test]
    fn zero_days_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let init = Action::Init {
            name: "m".to_owned(),
            days: 0,
        };
        assert!(matches!(
            run(dir.path(), init, SystemTime::now()),
            Err(CertsError::NoDays)
        ));
    }
}
