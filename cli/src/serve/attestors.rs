//! The attestors the server registers besides the built-ins: the `tpm` attestor when
//! `[attestors.tpm]` is configured (its challenge key derived from the deployment's keys), the
//! `cloud-iid` attestor when `[attestors.cloud-iid]` is, and
//! every `[[attestors.external]]` as a [`gateway::join::external_attestor::ExternalAttestor`] (the
//! JoinService holds it as an `Arc<dyn RemoteAttestor>`; `commands` has no network client of
//! its own).

use std::sync::Arc;

use commands::identity::attestors::{
    tpm_challenge_key, AttestorRegistry, RegisteredAttestor, RemoteAttestor,
};
use domain::pki::KeySet;
use gateway::external_attestor::ExternalAttestor;

use crate::serve::config::Settings;
use crate::serve::error::ServeError;

/// The registry the JoinService runs: its built-ins (`builtin`, the JoinService's own: they
/// include those built from the deployment's keys, such as x509pop), the `tpm` attestor when
/// configured, then every configured external attestor (whose ids configuration already kept
/// apart from the built-ins').
pub(crate) fn registry(
    builtin: &AttestorRegistry,
    settings: &Settings,
    keys: &KeySet,
) -> Result<AttestorRegistry, ServeError> {
    let mut registry = builtin.clone();
    if let Some(tpm) = &settings.tpm {
        registry.register_tpm(tpm.config(tpm_challenge_key(keys)));
        tracing::info!(
            ek_roots = tpm.ek_roots.len(),
            pcr_policy = tpm.pcr_policy.len(),
            node_key = ?tpm.node_key,
            enrollment = tpm.enrollment.is_some(),
            "tpm attestor registered"
        );
    }
    if let Some(cloud) = &settings.cloud_iid {
        let attestor =
            domain::attest::cloud_iid::CloudIidAttestor::new(cloud.clone()).map_err(|e| {
                ServeError::Invalid {
                    key: "attestors.cloud-iid",
                    message: e.to_string(),
                }
            })?;
        registry.register_in_process(Arc::new(attestor));
        tracing::info!(
            max_age_s = cloud.max_age.as_secs(),
            aws = cloud.aws.is_some(),
            gcp = cloud.gcp.is_some(),
            azure = cloud.azure.is_some(),
            oidc_issuers = cloud.oidc.len(),
            "cloud-iid attestor registered"
        );
    }
    for attestor in external_attestors(settings)? {
        registry.register(attestor);
    }
    Ok(registry)
}

/// The configured external attestors, ready to register (they connect on their first call, so
/// the server starts while an attestor is not up yet).
pub(crate) fn external_attestors(
    settings: &Settings,
) -> Result<Vec<RegisteredAttestor>, ServeError> {
    let mut out = Vec::new();
    for config in &settings.external_attestors {
        let external = ExternalAttestor::new(config.clone()).map_err(|e| ServeError::Invalid {
            key: "attestors.external",
            message: e.to_string(),
        })?;
        tracing::info!(
            attestor = %config.id,
            socket = %config.socket.display(),
            roles = ?config.roles,
            "external attestor registered"
        );
        let remote: Arc<dyn RemoteAttestor> = Arc::new(external);
        out.push(RegisteredAttestor::Remote(remote));
    }
    Ok(out)
}
