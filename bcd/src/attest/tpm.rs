//! The tpm producer (spec 000 "tpm", "bcd with its TPM"): round 1 sends who the TPM is (its EK,
//! the EK certificate from NV, the intermediates bcd was configured with) and its AK; a
//! challenge is answered by ActivateCredential, a quote bound to the secret and the CSR, and the
//! AK's certification of the node key made in the same TPM. The messages are
//! `domain::attest::tpm::wire`'s.

use domain::attest::tpm::{TpmAttestation, TpmChallenge, TPM_ATTESTOR};

use super::{EvidenceError, EvidenceProducer};
use crate::tpm::{Tpm, TpmNodeKey};

/// The tpm producer over one TPM.
#[derive(Debug, Clone)]
pub struct TpmProducer {
    tpm: Tpm,
    intermediates: Vec<Vec<u8>>,
    node_key: Option<TpmNodeKey>,
}

impl TpmProducer {
    /// For `tpm`, sending `intermediates` (DER, `[tpm] ek_intermediates`) with the EK
    /// certificate, and having the AK certify `node_key` (the join's key, made in `tpm`; `None`
    /// claims nothing about the key).
    pub fn new(tpm: Tpm, intermediates: Vec<Vec<u8>>, node_key: Option<TpmNodeKey>) -> TpmProducer {
        TpmProducer {
            tpm,
            intermediates,
            node_key,
        }
    }

    /// The node key the answer certifies.
    pub fn node_key(&self) -> Option<&TpmNodeKey> {
        self.node_key.as_ref()
    }

    /// The TPM.
    pub fn tpm(&self) -> &Tpm {
        &self.tpm
    }

    fn failed(reason: impl std::fmt::Display) -> EvidenceError {
        EvidenceError::Failed {
            attestor: TPM_ATTESTOR.to_owned(),
            reason: reason.to_string(),
        }
    }
}

impl EvidenceProducer for TpmProducer {
    fn id(&self) -> &str {
        TPM_ATTESTOR
    }

    fn produce(
        &self,
        _round: u32,
        csr_sha256: &[u8; 32],
        challenge: Option<&[u8]>,
    ) -> Result<Vec<u8>, EvidenceError> {
        match challenge {
            None => {
                let evidence = self
                    .tpm
                    .join_evidence(&self.intermediates)
                    .map_err(Self::failed)?;
                Ok(TpmAttestation::evidence(evidence).to_bytes())
            }
            Some(payload) => {
                let challenge: TpmChallenge = serde_json::from_slice(payload).map_err(|e| {
                    Self::failed(format!(
                        "the control plane's challenge is not a tpm challenge: {e}"
                    ))
                })?;
                let answer = self
                    .tpm
                    .answer_challenge(&challenge, csr_sha256, self.node_key.as_ref())
                    .map_err(Self::failed)?;
                Ok(TpmAttestation::answer(answer).to_bytes())
            }
        }
    }
}
