//! The attestors the server runs: every built-in of `commands::identity::attestors::FACTORIES`
//! that its configuration runs (each read from its `[attestors.<id>]` when the configuration was
//! read, built here with what the deployment gives it: the trust domain, the node CA, a key
//! derived for it, and the files its table names, read from disk by this process), then every
//! `[[attestors.external]]` as a [`gateway::join::external_attestor::ExternalAttestor`] (the
//! JoinService holds it as an `Arc<dyn RemoteAttestor>`; `commands` has no network client of
//! its own).

use std::path::Path;
use std::sync::Arc;

use commands::identity::attestors::{AttestorRegistry, RegisteredAttestor, RemoteAttestor};
use domain::pki::KeySet;
use gateway::external_attestor::ExternalAttestor;

use crate::serve::config::Settings;
use crate::serve::error::ServeError;

/// A file an attestor's table names, read; the error says why not.
fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| e.to_string())
}

/// The registry the JoinService runs: the configured built-ins, built with the deployment of
/// `keys`, then every configured external attestor (whose ids configuration already kept apart
/// from the built-ins').
pub(crate) fn registry(settings: &Settings, keys: &KeySet) -> Result<AttestorRegistry, ServeError> {
    let mut registry = AttestorRegistry::configured(&settings.attestors, keys, &read_file)
        .map_err(ServeError::Attestor)?;
    for configured in &settings.attestors {
        tracing::info!(attestor = configured.id(), config = ?configured, "attestor registered");
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
