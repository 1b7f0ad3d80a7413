//! bcd's TPM (spec 000 "bcd with its TPM", "The node key in the TPM"; facts measured on this
//! machine: `../shared/research/tpm.md`): the endorsement key and its certificate, the
//! attestation key, credential activation, quotes, node keys that never leave the TPM, and the
//! AK's certification of them, over tss-esapi 7.7 and the TCTI of `config.toml`'s `[tpm] tcti`
//! (`device:/dev/tpmrm0` by default, `swtpm:host=…,port=…` for tests).
//!
//! TPM calls block (1–45 ms each on swtpm): a [`Tpm`] owns one TPM connection on a thread of its
//! own and every method sends that thread a request and waits for its answer, so no TPM call
//! ever runs on the async runtime. `Tpm` is cheap to clone; the thread ends with the last clone.
//!
//! Nothing is persisted in the TPM:
//! - the AK is a primary of the endorsement hierarchy from a fixed template (a restricted P-256
//!   ECDSA-SHA256 signing key), so the same TPM derives the same AK at every load and a renewal
//!   needs no stored handle;
//! - a node key is a primary of the owner hierarchy: an unrestricted P-256 signing key
//!   (fixedTPM, fixedParent, sensitiveDataOrigin, userWithAuth, noDA, sign) derived from a
//!   32-byte unique that `node.key` keeps (PEM block `BCD TPM NODE KEY`).
//!
//! (Placeholder API: every call answers [`TpmError::Unavailable`] until the implementation
//! lands; the signatures are the contract the rest of bcd is written against.)

use domain::attest::tpm::{CertifiedKey, TpmAnswer, TpmChallenge, TpmEvidence};
use domain::pki::{NodeSigner, PublicKey, Signature, SignerError};

/// The TCTI bcd opens when `config.toml` names none.
pub const DEFAULT_TCTI: &str = "device:/dev/tpmrm0";

/// Why a TPM operation failed. Messages name the operation and the TPM's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TpmError {
    /// The TPM could not be opened (no device, no swtpm listening, a bad TCTI string).
    #[error("the TPM ({tcti}) is unavailable: {reason}")]
    Unavailable {
        /// The TCTI tried.
        tcti: String,
        /// Why.
        reason: String,
    },
    /// A TPM command failed.
    #[error("the TPM's {operation} failed: {reason}")]
    Command {
        /// The operation (`create_primary`, `certify`, `activate_credential`...).
        operation: &'static str,
        /// The TPM's answer or the local error.
        reason: String,
    },
    /// The TPM holds no EK certificate at a known NV index.
    #[error("the TPM holds no EK certificate (looked at NV {0})")]
    NoEkCertificate(String),
    /// A challenge this TPM cannot answer (malformed, another AK).
    #[error("the tpm challenge cannot be answered: {0}")]
    BadChallenge(String),
    /// The TPM thread is gone (it panicked or the connection broke).
    #[error("the TPM thread stopped")]
    Stopped,
}

/// The AK: its TPMT_PUBLIC and its TPM name (`nameAlg || H(public)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestationKey {
    /// TPMT_PUBLIC, marshalled.
    pub public_area: Vec<u8>,
    /// The TPM name: 0x000B followed by SHA-256 of `public_area`.
    pub name: Vec<u8>,
}

impl AttestationKey {
    /// The certificate statement naming it: `urn:bc:tpm-ak:<nameAlg hex>:<digest hex>`, e.g.
    /// `urn:bc:tpm-ak:000b:<64 hex>`.
    pub fn statement(&self) -> String {
        let (alg, digest) = self.name.split_at(self.name.len().min(2));
        format!("urn:bc:tpm-ak:{}:{}", hex(alg), hex(digest))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A connection to one TPM, served by its own thread.
#[derive(Debug, Clone)]
pub struct Tpm {
    tcti: String,
}

impl Tpm {
    /// Opens the TPM at `tcti` (`device:/dev/tpmrm0`, `swtpm:host=127.0.0.1,port=2321`) and
    /// starts its thread.
    pub fn open(tcti: &str) -> Result<Tpm, TpmError> {
        Err(TpmError::Unavailable {
            tcti: tcti.to_owned(),
            reason: "not built yet".into(),
        })
    }

    /// The TCTI it was opened with.
    pub fn tcti(&self) -> &str {
        &self.tcti
    }

    /// Makes a new node key in the TPM (a fresh random unique).
    pub fn create_node_key(&self) -> Result<TpmNodeKey, TpmError> {
        Err(self.unavailable())
    }

    /// Derives again the node key of `unique` (what `node.key` keeps). After TPM2_Clear the
    /// owner hierarchy derives another key from the same unique: the caller sees a public key
    /// that does not match its certificate.
    pub fn load_node_key(&self, _unique: &[u8; 32]) -> Result<TpmNodeKey, TpmError> {
        Err(self.unavailable())
    }

    /// The AK (derived, not stored).
    pub fn attestation_key(&self) -> Result<AttestationKey, TpmError> {
        Err(self.unavailable())
    }

    /// The AK's TPM2_Certify of `key`, qualified by `qualifying` (`sha256(csr)`).
    pub fn certify(
        &self,
        _key: &TpmNodeKey,
        _qualifying: &[u8; 32],
    ) -> Result<CertifiedKey, TpmError> {
        Err(self.unavailable())
    }

    /// Round 1's evidence: the EK's public area, its certificate from NV (RSA-2048 at
    /// 0x01C00002; else P-256 at 0x01C0000A; else P-384 at 0x01C00016), `ek_intermediates`
    /// as given (DER), and the AK's public area.
    pub fn join_evidence(&self, _ek_intermediates: &[Vec<u8>]) -> Result<TpmEvidence, TpmError> {
        Err(self.unavailable())
    }

    /// Round 2's answer to `challenge` for the CSR `csr_sha256`: ActivateCredential with the
    /// EK and AK of the evidence, a quote of the challenge's PCRs with extraData
    /// `sha256(secret || csr_sha256)`, and, when `node_key` is given, the AK's certification of
    /// it qualified by `csr_sha256`.
    pub fn answer_challenge(
        &self,
        _challenge: &TpmChallenge,
        _csr_sha256: &[u8; 32],
        _node_key: Option<&TpmNodeKey>,
    ) -> Result<TpmAnswer, TpmError> {
        Err(self.unavailable())
    }

    fn unavailable(&self) -> TpmError {
        TpmError::Unavailable {
            tcti: self.tcti.clone(),
            reason: "not built yet".into(),
        }
    }
}

/// A node key in the TPM: its unique, its public halves, and the TPM that derives it.
#[derive(Debug, Clone)]
pub struct TpmNodeKey {
    unique: [u8; 32],
    public: PublicKey,
    public_area: Vec<u8>,
    tpm: Tpm,
}

impl TpmNodeKey {
    /// The 32-byte unique it is derived from (`node.key`'s record).
    pub fn unique(&self) -> &[u8; 32] {
        &self.unique
    }

    /// Its TPMT_PUBLIC, marshalled (what a certification names).
    pub fn public_area(&self) -> &[u8] {
        &self.public_area
    }

    /// The TPM holding it.
    pub fn tpm(&self) -> &Tpm {
        &self.tpm
    }
}

impl NodeSigner for TpmNodeKey {
    fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// TPM2_Sign (ECDSA) over SHA-256 of `message`, hashed here.
    fn sign_es256(&self, _message: &[u8]) -> Result<Signature, SignerError> {
        Err(SignerError(self.tpm.unavailable().to_string()))
    }
}
