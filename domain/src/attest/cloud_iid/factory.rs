//! How `cloud-iid` registers ([`FACTORY`], decision 0078): its registry of accounts, and its
//! configuration read from `[attestors.cloud-iid]` ([`CloudIidSettings::from_table`]; not
//! registered without the table), built with the deployment's reader (its certificates and JWKS
//! are files).

use std::sync::Arc;

use super::accounts::CLOUD_ACCOUNT_LIST;
use super::attestor::CloudIidAttestor;
use super::config::CloudIidSettings;
use super::instance::CLOUD_IID_ATTESTOR;
use crate::attest::contract::AnyAttestor;
use crate::attest::factory::{
    configured, AttestorConfig, AttestorFactory, FromDeployment, SettingError,
};

impl AttestorConfig for CloudIidSettings {
    fn id(&self) -> &str {
        CLOUD_IID_ATTESTOR
    }

    fn attestor(&self, from: &FromDeployment<'_>) -> Result<Arc<dyn AnyAttestor>, String> {
        let attestor = CloudIidAttestor::new(self.config(from)?)
            .map_err(|e| SettingError::new("attestors.cloud-iid", e.to_string()))?;
        Ok(Arc::new(attestor))
    }
}

/// How `cloud-iid` registers: its registry of accounts, and its configuration from
/// `[attestors.cloud-iid]` (not registered without the table), built with the deployment's
/// reader (its certificates and JWKS are files).
pub const FACTORY: AttestorFactory = AttestorFactory {
    id: CLOUD_IID_ATTESTOR,
    lists: &[CLOUD_ACCOUNT_LIST],
    build: |setup| match CloudIidSettings::from_table(setup.table)? {
        Some(settings) => configured(settings),
        None => Ok(None),
    },
};
