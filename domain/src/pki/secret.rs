//! The deployment secret that seals the bundle's private keys.
//!
//! Every process of a deployment reads the same secret from the environment variable named by
//! [`DEPLOYMENT_SECRET_ENV`]; this crate never reads the environment itself; the CLI passes the
//! value to [`DeploymentSecret::from_env_value`]. A secret shorter than
//! [`MIN_SECRET_CHARS`] characters is refused, and so is a missing one, with a message that names
//! the variable to set.

use std::fmt;

/// The environment variable the CLI reads the deployment secret from.
pub const DEPLOYMENT_SECRET_ENV: &str = "BC_DEPLOYMENT_SECRET";
/// The shortest secret accepted, in characters.
pub const MIN_SECRET_CHARS: usize = 32;

/// Why no usable deployment secret was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The variable is not set (MISSING_ENV).
    #[error("MISSING_ENV: set {DEPLOYMENT_SECRET_ENV} to the deployment secret (at least {MIN_SECRET_CHARS} characters, the same for every process; e.g. `export {DEPLOYMENT_SECRET_ENV}=$(openssl rand -base64 48)`), or use --plaintext for development")]
    Missing,
    /// The variable is set but too short (MISSING_ENV).
    #[error("MISSING_ENV: {DEPLOYMENT_SECRET_ENV} holds {chars} characters; the deployment secret must be at least {MIN_SECRET_CHARS} (e.g. `openssl rand -base64 48`)")]
    TooShort {
        /// Characters given.
        chars: usize,
    },
}

/// A deployment secret of at least [`MIN_SECRET_CHARS`] characters. `Debug` is redacted and the
/// bytes are wiped on drop.
pub struct DeploymentSecret(Vec<u8>);

impl DeploymentSecret {
    /// Validates a secret.
    pub fn new(value: &str) -> Result<DeploymentSecret, SecretError> {
        let chars = value.chars().count();
        if chars < MIN_SECRET_CHARS {
            return Err(SecretError::TooShort { chars });
        }
        Ok(DeploymentSecret(value.as_bytes().to_vec()))
    }

    /// From the environment variable's value as the CLI read it (`None` when unset; an empty
    /// value counts as unset).
    pub fn from_env_value(value: Option<&str>) -> Result<DeploymentSecret, SecretError> {
        match value {
            None | Some("") => Err(SecretError::Missing),
            Some(v) => DeploymentSecret::new(v),
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for DeploymentSecret {
    fn drop(&mut self) {
        for byte in self.0.iter_mut() {
            *byte = std::hint::black_box(0);
        }
    }
}

impl fmt::Debug for DeploymentSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeploymentSecret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_missing_name_the_variable() {
        let short = DeploymentSecret::new("too short").unwrap_err();
        assert_eq!(short, SecretError::TooShort { chars: 9 });
        assert!(short.to_string().contains(DEPLOYMENT_SECRET_ENV));
        let missing = DeploymentSecret::from_env_value(None).unwrap_err();
        assert!(missing.to_string().contains(DEPLOYMENT_SECRET_ENV));
        assert!(DeploymentSecret::new(&"x".repeat(32)).is_ok());
        // characters, not bytes
        assert!(DeploymentSecret::new(&"é".repeat(31)).is_err());
    }
}
