//! The node's TPM under `[helper]` ([`HelperTpm`]): the node keys, the AK and its
//! certifications, all reached through `bcd helper`'s five operations and every answer checked
//! (`checks`). A key it derives is a [`TpmNodeKey`] held remotely, so `node.key` keeps the same
//! `BCD TPM NODE KEY` record and everything that signs (CSRs, proofs, TLS) signs through it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::attest::tpm::CertifiedKey;
use domain::pki::{PublicKey, Signature, SignerError};
use sha2::{Digest as _, Sha256};

use super::checks::{check_announced_ak, check_certification, check_node_key, check_signature};
use super::client::{HelperClient, HelperError};
use super::protocol::{Answer, Bytes32, Request};
use crate::tpm::{AttestationKey, RemoteKeys, TpmNodeKey};

/// The most keys [`HelperTpm::load_node_key`] remembers (a node has its key and, during a
/// renewal, the next one).
const REMEMBERED_KEYS: usize = 16;

/// A checked `tpm.nodekey` answer: the public half and the TPMT_PUBLIC.
type Checked = (PublicKey, Vec<u8>);

/// The helper's key operations, checked. Cheap to clone (one shared connection).
#[derive(Debug, Clone)]
pub struct HelperTpm {
    client: Arc<HelperClient>,
    /// The keys already derived and checked, by unique.
    known: Arc<Mutex<HashMap<[u8; 32], Checked>>>,
}

fn unexpected(op: &'static str, answer: &Answer) -> HelperError {
    HelperError::Malformed {
        op,
        reason: format!("{answer:?} is not an answer to {op}"),
    }
}

impl HelperTpm {
    /// The helper at `socket`.
    pub fn new(socket: &std::path::Path) -> HelperTpm {
        HelperTpm {
            client: Arc::new(HelperClient::new(socket)),
            known: Arc::default(),
        }
    }

    /// The socket.
    pub fn socket(&self) -> &std::path::Path {
        self.client.socket()
    }

    /// `tpm.nodekey`: the key of `unique`, its TPMT_PUBLIC checked for the node-key attributes.
    pub fn node_key(&self, unique: &[u8; 32]) -> Result<TpmNodeKey, HelperError> {
        let request = Request::NodeKey {
            unique: Bytes32(*unique),
        };
        let public_area = match self.client.call(&request)? {
            Answer::NodeKey { public_area } => public_area.0,
            other => return Err(unexpected(request.op(), &other)),
        };
        let public = check_node_key(&public_area)?;
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= REMEMBERED_KEYS {
            known.clear();
        }
        known.insert(*unique, (public.clone(), public_area.clone()));
        drop(known);
        Ok(self.remote(*unique, public, public_area))
    }

    fn remote(&self, unique: [u8; 32], public: PublicKey, public_area: Vec<u8>) -> TpmNodeKey {
        TpmNodeKey::remote(unique, public, public_area, Arc::new(self.clone()))
    }

    /// The key of `unique` as this process already derived and checked it, else
    /// [`HelperTpm::node_key`]: `bcd node` reloads its identity at every renewal, and a helper
    /// restarting must fail that renewal (logged, retried), not the node. Every signature is
    /// still checked against this public half, so a TPM that now derives another key is seen.
    pub fn load_node_key(&self, unique: &[u8; 32]) -> Result<TpmNodeKey, HelperError> {
        let known = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(unique)
            .cloned();
        match known {
            Some((public, public_area)) => Ok(self.remote(*unique, public, public_area)),
            None => self.node_key(unique),
        }
    }

    /// A new key: 32 random bytes of this machine's kernel, derived by the helper.
    pub fn create_node_key(&self) -> Result<TpmNodeKey, HelperError> {
        let unique = crate::tpm::system_random().map_err(|e| HelperError::Malformed {
            op: "tpm.nodekey",
            reason: format!("no unique for the new key: {e}"),
        })?;
        self.node_key(&unique)
    }

    /// `tpm.sign` of SHA-256(`message`), verified against `public`.
    pub fn sign(
        &self,
        unique: &[u8; 32],
        public: &PublicKey,
        message: &[u8],
    ) -> Result<Signature, HelperError> {
        let digest: [u8; 32] = Sha256::digest(message).into();
        let request = Request::Sign {
            unique: Bytes32(*unique),
            digest: Bytes32(digest),
        };
        match self.client.call(&request)? {
            Answer::Signature { signature } => check_signature(public, message, &signature.0),
            other => Err(unexpected(request.op(), &other)),
        }
    }

    /// `tpm.ak`: the AK, checked to be one.
    pub fn attestation_key(&self) -> Result<AttestationKey, HelperError> {
        let request = Request::Ak {};
        match self.client.call(&request)? {
            Answer::Ak { public_area } => {
                check_announced_ak(&public_area.0)?;
                Ok(AttestationKey::from_public_area(public_area.0))
            }
            other => Err(unexpected(request.op(), &other)),
        }
    }

    /// `tpm.certify` of `key` qualified by `qualifying`, verified under `ak` (what `tpm.ak`
    /// announced): the AK signed it, for this key's name and this qualifying data.
    pub fn certify(
        &self,
        ak: &AttestationKey,
        key: &TpmNodeKey,
        qualifying: &[u8; 32],
    ) -> Result<CertifiedKey, HelperError> {
        let checked_ak = check_announced_ak(&ak.public_area)?;
        let request = Request::Certify {
            unique: Bytes32(*key.unique()),
            qualifying: Bytes32(*qualifying),
        };
        let (attest, signature) = match self.client.call(&request)? {
            Answer::Certification { attest, signature } => (attest.0, signature.0),
            other => return Err(unexpected(request.op(), &other)),
        };
        let point = domain::pki::NodeSigner::public_key(key).uncompressed_point();
        check_certification(
            &checked_ak,
            key.public_area(),
            point,
            qualifying,
            &attest,
            &signature,
        )?;
        Ok(CertifiedKey {
            public: key.public_area().to_vec(),
            certify_info: attest,
            signature,
        })
    }

    /// `tpm.release`: the helper unloads the key of `unique`.
    pub fn release(&self, unique: &[u8; 32]) -> Result<(), HelperError> {
        let request = Request::Release {
            unique: Bytes32(*unique),
        };
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(unique);
        match self.client.call(&request)? {
            Answer::Released => Ok(()),
            other => Err(unexpected(request.op(), &other)),
        }
    }
}

impl RemoteKeys for HelperTpm {
    fn sign_message(
        &self,
        unique: &[u8; 32],
        public: &PublicKey,
        message: &[u8],
    ) -> Result<Signature, SignerError> {
        self.sign(unique, public, message)
            .map_err(|e| SignerError(e.to_string()))
    }

    fn release_after(&self, unique: [u8; 32], delay: Duration) {
        let helper = self.clone();
        let spawned = std::thread::Builder::new()
            .name("bcd-helper-release".into())
            .spawn(move || {
                std::thread::sleep(delay);
                if let Err(e) = helper.release(&unique) {
                    eprintln!("bcd node: releasing the replaced node key: {e}");
                }
            });
        if let Err(e) = spawned {
            eprintln!("bcd node: releasing the replaced node key: no thread for it: {e}");
        }
    }
}
