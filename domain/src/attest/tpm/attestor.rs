//! [`TpmAttestor`]: the `tpm` attestor on the attestor contract. (Placeholder: refuses every
//! join with `tpm:not-built` until the verifier lands.)

use super::config::TpmConfig;
use super::wire::TPM_ATTESTOR;
use crate::attest::contract::{AttestRequest, Attestor, AttestorRefusal, FactKey, Facts, Verdict};
use crate::pki::NodeRole;

/// The `tpm` attestor.
#[derive(Debug, Clone)]
pub struct TpmAttestor {
    config: TpmConfig,
}

impl TpmAttestor {
    /// With the operator's configuration.
    pub fn new(config: TpmConfig) -> TpmAttestor {
        TpmAttestor { config }
    }

    /// Its configuration.
    pub fn config(&self) -> &TpmConfig {
        &self.config
    }
}

impl Attestor for TpmAttestor {
    fn id(&self) -> &str {
        TPM_ATTESTOR
    }

    fn roles(&self) -> &[NodeRole] {
        &[NodeRole::Node, NodeRole::Site]
    }

    fn plan(&self, _request: &AttestRequest<'_>) -> Result<Vec<FactKey>, AttestorRefusal> {
        Err(AttestorRefusal::new(TPM_ATTESTOR, "not-built"))
    }

    fn verify(&self, _request: &AttestRequest<'_>, _facts: &Facts) -> Verdict {
        Verdict::Refuse(AttestorRefusal::new(TPM_ATTESTOR, "not-built"))
    }
}
