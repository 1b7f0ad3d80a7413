//! How `discovery` registers ([`FACTORY`], decision 0078): its configuration read from
//! `[attestors.discovery]` ([`DiscoveryConfig::from_table`]; the defaults without it), built
//! with the trust domain its site agents' certificates name.

use std::sync::Arc;

use super::attestor::DiscoveryAttestor;
use super::config::DiscoveryConfig;
use super::wire::DISCOVERY_ATTESTOR;
use crate::attest::contract::AnyAttestor;
use crate::attest::factory::{configured, AttestorConfig, AttestorFactory, FromDeployment};

impl AttestorConfig for DiscoveryConfig {
    fn id(&self) -> &str {
        DISCOVERY_ATTESTOR
    }

    fn attestor(&self, from: &FromDeployment<'_>) -> Result<Arc<dyn AnyAttestor>, String> {
        let attestor = DiscoveryAttestor::new(from.trust_domain.clone(), self.clone());
        Ok(Arc::new(attestor))
    }
}

/// How `discovery` registers: no list of its own (its sites and boot entries have verbs of
/// their own); its configuration from `[attestors.discovery]` (or the defaults), built with the
/// trust domain its site agents' certificates name.
pub const FACTORY: AttestorFactory = AttestorFactory {
    id: DISCOVERY_ATTESTOR,
    lists: &[],
    build: |setup| configured(DiscoveryConfig::from_table(setup.table)?),
};
