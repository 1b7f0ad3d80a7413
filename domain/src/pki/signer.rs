//! Node keys whose private half may live outside this process (spec 000 "The node key in the
//! TPM"): a [`NodeSigner`] signs ES256 and says its public key; whatever holds the key (a PKCS#8
//! file key here, a TPM-resident key in bcd), CSRs and purpose-bound statements come out the same,
//! so the wire does not change.

use super::csr::BuildCsrError;
use super::keys::{KeyRole, PrivateKey, PublicKey, Signature};
use super::statement::{Statement, StatementError};

pub use super::keys::SignerError;

/// A node key (role [`KeyRole::Node`]): ES256, ECDSA P-256 over SHA-256 of the message.
pub trait NodeSigner {
    /// The key's public half.
    fn public_key(&self) -> &PublicKey;

    /// ES256 over `message` (the signer hashes it), as r || s.
    fn sign_es256(&self, message: &[u8]) -> Result<Signature, SignerError>;
}

impl NodeSigner for PrivateKey {
    fn public_key(&self) -> &PublicKey {
        PrivateKey::public_key(self)
    }

    fn sign_es256(&self, message: &[u8]) -> Result<Signature, SignerError> {
        self.require_role(KeyRole::Node)
            .map_err(|e| SignerError(e.to_string()))?;
        self.sign_raw(message)
            .map_err(|e| SignerError(e.to_string()))
    }
}

/// Signs a node statement (its purpose must be one a node key signs) with `signer`.
pub fn sign_with(
    signer: &dyn NodeSigner,
    statement: &impl Statement,
) -> Result<Signature, StatementError> {
    let purpose = statement.purpose();
    if purpose.signer() != KeyRole::Node {
        return Err(StatementError::WrongSigner {
            purpose: purpose.label(),
            role: KeyRole::Node,
            allowed: purpose.signer(),
        });
    }
    Ok(signer.sign_es256(&statement.signed_input())?)
}

/// A CSR (empty subject, no attributes) for the key `signer` holds, signed by it.
/// A signer's own error is kept and returned ([`BuildCsrError::Signer`]), not rcgen's.
pub fn build_csr_with(signer: &dyn NodeSigner) -> Result<Vec<u8>, BuildCsrError> {
    let key = RcgenSigner(signer, std::cell::RefCell::new(None));
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params
        .serialize_request(&key)
        .map_err(|e| match key.1.borrow_mut().take() {
            Some(signer) => BuildCsrError::Signer(signer),
            None => BuildCsrError::Build(e.to_string()),
        })?;
    Ok(csr.der().to_vec())
}

/// rcgen's view of a [`NodeSigner`], keeping the signer's error (rcgen's own error type cannot
/// carry it).
struct RcgenSigner<'a>(&'a dyn NodeSigner, std::cell::RefCell<Option<SignerError>>);

impl rcgen::PublicKeyData for RcgenSigner<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0.public_key().uncompressed_point()
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

impl rcgen::SigningKey for RcgenSigner<'_> {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        let sig = self.0.sign_es256(msg).map_err(|e| {
            *self.1.borrow_mut() = Some(e);
            rcgen::Error::RingUnspecified
        })?;
        Ok(ecdsa_der(sig.as_bytes()))
    }
}

/// An r || s P-256 signature as the DER `Ecdsa-Sig-Value` (RFC 3279 §2.2.3) X.509 carries.
pub fn ecdsa_der(rs: &[u8; 64]) -> Vec<u8> {
    fn integer(out: &mut Vec<u8>, bytes: &[u8]) {
        let mut v: &[u8] = bytes;
        while v.len() > 1 && v[0] == 0 {
            v = &v[1..];
        }
        let pad = v[0] & 0x80 != 0;
        out.push(0x02);
        out.push((v.len() + usize::from(pad)) as u8);
        if pad {
            out.push(0);
        }
        out.extend_from_slice(v);
    }
    let mut body = Vec::with_capacity(72);
    integer(&mut body, &rs[..32]);
    integer(&mut body, &rs[32..]);
    let mut out = Vec::with_capacity(body.len() + 2);
    out.push(0x30);
    out.push(body.len() as u8);
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::csr::VerifiedCsr;

    /// A signer that is not a `PrivateKey`, as a TPM key is not.
    struct Outside(PrivateKey);

    impl NodeSigner for Outside {
        fn public_key(&self) -> &PublicKey {
            self.0.public_key()
        }
        fn sign_es256(&self, message: &[u8]) -> Result<Signature, SignerError> {
            self.0.sign_es256(message)
        }
    }

    #[test]
    fn a_csr_built_by_an_outside_signer_verifies_with_its_key() {
        let key = PrivateKey::generate(KeyRole::Node).unwrap();
        let outside = Outside(key);
        let der = build_csr_with(&outside).unwrap();
        let csr = VerifiedCsr::verify(&der).unwrap();
        assert_eq!(csr.public_key(), outside.public_key());
    }

    #[test]
    fn der_integers_are_minimal_and_positive() {
        let mut rs = [0u8; 64];
        rs[31] = 1; // r = 1
        rs[32] = 0x80; // s has its top bit set: a leading zero byte
        let der = ecdsa_der(&rs);
        assert_eq!(&der[..5], &[0x30, 38, 0x02, 1, 1]);
        assert_eq!(&der[5..8], &[0x02, 33, 0x00]);
    }
}
