//! The join's node key and, for `bcd join --attestor tpm`, the TPM's producer (spec 000 "bcd
//! with its TPM", spec 002 "Joining").
//!
//! [`join_key`] decides where the join's key is made:
//!
//! - `--attestor tpm`: in the TPM of `[tpm] tcti` (`BCD_TPM_TCTI`), with no fallback: a TPM
//!   that does not open or cannot make the key stops the join. The same TPM connection produces
//!   the evidence (EK, EK certificate, `[tpm] ek_intermediates`, AK) and answers each challenge,
//!   the AK certifying the key over `sha256(csr)` ([`TpmProducer`]);
//! - any other attestor: in the host's TPM when it has one, else a file key with a warning
//!   ([`crate::node_key::new_node_key`]).

use std::path::PathBuf;

use domain::attest::tpm::TPM_ATTESTOR;

use crate::attest::tpm::TpmProducer;
use crate::attest::EvidenceProducer;
use crate::config::Config;
use crate::node_key::{new_node_key, NodeKey};
use crate::tpm::{Tpm, TpmError, TpmNodeKey};

/// Why a tpm join could not start (nothing was sent).
#[derive(Debug, thiserror::Error)]
pub enum TpmJoinError {
    /// The TPM does not open.
    #[error("bcd join --attestor tpm: {0}; the TPM is the credential of a tpm join (check [tpm] tcti in config.toml, or BCD_TPM_TCTI)")]
    Open(TpmError),
    /// The TPM could not make the node key.
    #[error("bcd join --attestor tpm: the node key in the TPM: {0}")]
    Key(TpmError),
    /// An `[tpm] ek_intermediates` file does not read.
    #[error("bcd join --attestor tpm: [tpm] ek_intermediates: {path}: {reason}")]
    Intermediate {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file key could not be made (no randomness).
    #[error("bcd join: the node key: {0}")]
    FileKey(String),
}

/// The join's key, the producer a tpm join uses, and a warning to print.
pub struct JoinKey {
    /// The node key.
    pub key: NodeKey,
    /// The tpm attestor's producer (`--attestor tpm` only).
    pub producer: Option<Box<dyn EvidenceProducer>>,
    /// Why the key is a file although a TPM was tried.
    pub warning: Option<String>,
}

impl std::fmt::Debug for JoinKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinKey")
            .field("key", &self.key.kind())
            .field("warning", &self.warning)
            .finish_non_exhaustive()
    }
}

/// The DER certificates of the PEM files `paths` (each may hold several).
pub fn read_ek_intermediates(paths: &[PathBuf]) -> Result<Vec<Vec<u8>>, TpmJoinError> {
    let mut out = Vec::new();
    for path in paths {
        let bad = |reason: String| TpmJoinError::Intermediate {
            path: path.clone(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let before = out.len();
        for pem in x509_parser::pem::Pem::iter_from_buffer(&bytes) {
            let pem = pem.map_err(|e| bad(format!("not PEM: {e}")))?;
            if pem.label == "CERTIFICATE" {
                out.push(pem.contents);
            }
        }
        if out.len() == before {
            return Err(bad("no CERTIFICATE block".into()));
        }
    }
    Ok(out)
}

/// Where the join of `attestor` makes its key (see the module documentation).
pub fn join_key(config: &Config, attestor: &str) -> Result<JoinKey, TpmJoinError> {
    if attestor != TPM_ATTESTOR {
        let made = new_node_key(&config.tpm_host()).map_err(TpmJoinError::FileKey)?;
        return Ok(JoinKey {
            key: made.key,
            producer: None,
            warning: made.warning,
        });
    }
    let intermediates = read_ek_intermediates(&config.tpm.ek_intermediates)?;
    let tpm = config.tpm_host().open().map_err(TpmJoinError::Open)?;
    let key = tpm.create_node_key().map_err(TpmJoinError::Key)?;
    Ok(JoinKey {
        key: key.clone().into(),
        producer: Some(tpm_producer(tpm, intermediates, key)),
        warning: None,
    })
}

/// The tpm attestor's producer over `tpm`, certifying `key` in its answers.
pub fn tpm_producer(
    tpm: Tpm,
    intermediates: Vec<Vec<u8>>,
    key: TpmNodeKey,
) -> Box<dyn EvidenceProducer> {
    Box::new(TpmProducer::new(tpm, intermediates, Some(key)))
}
