//! The trust domain every quorum signature ends with.
//!
//! Spec ("The destructive-batch quorum"): "the signed parts end with the deployment's trust domain,
//! which every verifier takes from its own configuration: an approval signed for staging never
//! admits a command in production"; "Changing the approver set": "The trust domain is the
//! verifier's own". Verifiers therefore take a [`TrustDomain`] from their configuration, never from
//! the message they check.
//!
//! The syntax is SPIFFE's: 1 to 255 characters of lowercase letters, digits, `.`, `-` and `_`.

use std::fmt;

/// A validated SPIFFE trust domain name (for example `prod.example.org`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct TrustDomain(String);

/// A trust domain that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustDomainError {
    /// Empty.
    #[error("the trust domain is empty: set the deployment's trust domain (pki.join) before configuring approvers")]
    Empty,
    /// Longer than 255 characters.
    #[error("the trust domain is {0} characters long; SPIFFE allows at most 255")]
    TooLong(usize),
    /// A character SPIFFE does not allow.
    #[error("the trust domain {name:?} contains {found:?}; only lowercase letters, digits, '.', '-' and '_' are allowed")]
    BadCharacter {
        /// The rejected name.
        name: String,
        /// The first offending character.
        found: char,
    },
}

impl TrustDomain {
    /// Validates a trust domain name.
    pub fn new(name: impl Into<String>) -> Result<Self, TrustDomainError> {
        let name = name.into();
        if name.is_empty() {
            return Err(TrustDomainError::Empty);
        }
        if name.len() > 255 {
            return Err(TrustDomainError::TooLong(name.len()));
        }
        if let Some(found) = name.chars().find(|c| {
            !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_'))
        }) {
            return Err(TrustDomainError::BadCharacter { name, found });
        }
        Ok(TrustDomain(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TrustDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TrustDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TrustDomain({})", self.0)
    }
}

impl<'de> serde::Deserialize<'de> for TrustDomain {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        TrustDomain::new(name).map_err(serde::de::Error::custom)
    }
}
