//! P-256 key pairs: graviola's ECDSA key behind rcgen's signing traits, so
//! rcgen builds certificates without its own crypto backend (ring or
//! aws-lc-rs, which need a C toolchain to build for macOS from Linux).

use graviola::hashing::{Hash, Sha256};
use graviola::signing::ecdsa::{P256, SigningKey};

use crate::PkiError;

/// PEM label of a PKCS#8 private key, as `openssl genpkey` writes it and
/// rustls reads it.
pub(crate) const PRIVATE_KEY_LABEL: &str = "PRIVATE KEY";

/// The DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey,
/// prime256v1, a 66-byte bit string), followed by the uncompressed point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A PKCS#8 P-256 key is about 140 bytes; this leaves room for any encoder's
/// optional fields.
const PKCS8_MAX_LEN: usize = 256;
/// An ASN.1 ECDSA P-256 signature is at most 72 bytes.
const SIGNATURE_MAX_LEN: usize = 80;

/// An ECDSA P-256 key pair.
pub struct KeyPair {
    key: SigningKey<P256>,
    /// The uncompressed public point (65 bytes), what rcgen calls the key's
    /// DER bytes.
    public: Vec<u8>,
}

impl std::fmt::Debug for KeyPair {
    /// The public half only: a private key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl KeyPair {
    /// A new random key from the operating system's random source.
    pub fn generate() -> Result<KeyPair, PkiError> {
        let key = SigningKey::<P256>::generate().map_err(|e| PkiError::Crypto(format!("{e:?}")))?;
        Ok(KeyPair::from_key(key))
    }

    /// Reads a PKCS#8 P-256 key (`-----BEGIN PRIVATE KEY-----`).
    pub fn from_pem(text: &str) -> Result<KeyPair, PkiError> {
        let block = pem::parse(text).map_err(|e| PkiError::Pem(e.to_string()))?;
        if block.tag() != PRIVATE_KEY_LABEL {
            return Err(PkiError::Pem(format!(
                "expected a {PRIVATE_KEY_LABEL} (PKCS#8) block, found {}",
                block.tag()
            )));
        }
        let key = SigningKey::<P256>::from_pkcs8_der(block.contents())
            .map_err(|e| PkiError::Pem(format!("not a PKCS#8 ECDSA P-256 private key: {e:?}")))?;
        Ok(KeyPair::from_key(key))
    }

    fn from_key(key: SigningKey<P256>) -> KeyPair {
        let public = key.private_key.public_key_uncompressed().to_vec();
        KeyPair { key, public }
    }

    /// The private key as PKCS#8 PEM.
    pub fn to_pem(&self) -> Result<String, PkiError> {
        let mut buffer = [0u8; PKCS8_MAX_LEN];
        let der = self
            .key
            .to_pkcs8_der(&mut buffer)
            .map_err(|e| PkiError::Crypto(format!("{e:?}")))?;
        Ok(pem::encode(&pem::Pem::new(PRIVATE_KEY_LABEL, der.to_vec())))
    }

    /// The public key as a DER SubjectPublicKeyInfo.
    pub fn public_key_der(&self) -> Vec<u8> {
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(&self.public);
        spki
    }

    /// The key identifier of RFC 7093 method 1 (the leftmost 160 bits of the
    /// SHA-256 of the SubjectPublicKeyInfo), what rcgen's own backends use.
    pub(crate) fn key_identifier(&self) -> Vec<u8> {
        let digest = Sha256::hash(&self.public_key_der());
        digest.as_ref().iter().take(20).copied().collect()
    }
}

impl rcgen::PublicKeyData for KeyPair {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

impl rcgen::SigningKey for KeyPair {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        let mut signature = [0u8; SIGNATURE_MAX_LEN];
        self.key
            .sign_asn1::<Sha256>(&[message], &mut signature)
            .map(<[u8]>::to_vec)
            .map_err(|_| rcgen::Error::RemoteKeyError)
    }
}

/// The uncompressed P-256 point inside a SubjectPublicKeyInfo, if it is one.
pub(crate) fn p256_point(spki: &[u8]) -> Option<&[u8]> {
    spki.strip_prefix(P256_SPKI_PREFIX.as_slice())
        .filter(|point| point.len() == 65)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::SigningKey as _;

    #[test]
    fn a_key_survives_pem_and_keeps_its_public_half() {
        let key = KeyPair::generate().expect("key");
        let pem = key.to_pem().expect("pem");
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
        let back = KeyPair::from_pem(&pem).expect("parsed");
        assert_eq!(back.public, key.public);
        assert_eq!(
            p256_point(&key.public_key_der()),
            Some(key.public.as_slice())
        );
        assert_eq!(key.key_identifier().len(), 20);
    }

    #[test]
    fn signatures_verify_with_the_public_key() {
        use graviola::signing::ecdsa::VerifyingKey;
        let key = KeyPair::generate().expect("key");
        let signature = key.sign(b"tbs").expect("signed");
        let verifier = VerifyingKey::<P256>::from_x962_uncompressed(&key.public).expect("public");
        verifier
            .verify_asn1::<Sha256>(&[b"tbs"], &signature)
            .expect("verifies");
        assert!(
            verifier
                .verify_asn1::<Sha256>(&[b"other"], &signature)
                .is_err()
        );
    }

    #[test]
    fn other_pem_is_refused_by_name() {
        let err =
            KeyPair::from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
                .expect_err("not a key");
        assert!(err.to_string().contains("found CERTIFICATE"), "{err}");
        let err =
            KeyPair::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
                .expect_err("not PKCS#8");
        assert!(err.to_string().contains("PKCS#8"), "{err}");
        assert!(KeyPair::from_pem("garbage").is_err());
    }
}
