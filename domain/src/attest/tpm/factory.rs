//! How `tpm` registers ([`FACTORY`], decision 0078): its allow-list, and its configuration read
//! from `[attestors.tpm]` ([`TpmSettings::from_table`]; not registered without the table),
//! built with the deployment's reader (the EK roots are files) and a key the shell derives for
//! it under [`super::config::TPM_CHALLENGE_INFO`].

use std::sync::Arc;

use super::allow_list::TPM_ALLOW_LIST;
use super::attestor::TpmAttestor;
use super::config::TpmSettings;
use super::wire::TPM_ATTESTOR;
use crate::attest::contract::AnyAttestor;
use crate::attest::factory::{configured, AttestorConfig, AttestorFactory, FromDeployment};

impl AttestorConfig for TpmSettings {
    fn id(&self) -> &str {
        TPM_ATTESTOR
    }

    fn attestor(&self, from: &FromDeployment<'_>) -> Result<Arc<dyn AnyAttestor>, String> {
        Ok(Arc::new(TpmAttestor::new(self.config(from)?)))
    }
}

/// How `tpm` registers: its allow-list, and its configuration from `[attestors.tpm]` (not
/// registered without the table), built with the deployment's reader and a key derived for it.
pub const FACTORY: AttestorFactory = AttestorFactory {
    id: TPM_ATTESTOR,
    lists: &[TPM_ALLOW_LIST],
    build: |setup| match TpmSettings::from_table(setup.table)? {
        Some(settings) => configured(settings),
        None => Ok(None),
    },
};
