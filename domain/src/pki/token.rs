//! Join-token secrets: how they look, how they are stored, how they are compared.
//!
//! A secret is `bcjt_` followed by the unpadded base64url of 32 random bytes (48 characters in
//! all). The control plane stores only its [`TokenHash`], the SHA-256 of the whole secret string
//! in UTF-8, and compares hashes in constant time ([`TokenHash::matches`]). The secret itself
//! exists only in the operator's hands and, sealed ([`super::token_seal`]), on the wire.

use std::fmt;

use ring::rand::{SecureRandom, SystemRandom};
use subtle::ConstantTimeEq;

use super::encoding::{b64url, b64url_decode, sha256};

/// The prefix of every join-token secret.
pub const TOKEN_PREFIX: &str = "bcjt_";
/// Random bytes in a secret.
pub const TOKEN_RANDOM_BYTES: usize = 32;

/// Why a token secret was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not `bcjt_<base64url of 32 bytes>`.
    #[error("not a join token (expected bcjt_ followed by 43 base64url characters)")]
    Malformed,
    /// The system random generator failed.
    #[error("the system random generator failed")]
    Random,
}

/// A join-token secret. Its `Debug` output is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(String);

impl TokenSecret {
    /// Draws a new secret from the system random generator.
    pub fn generate() -> Result<TokenSecret, TokenError> {
        let mut bytes = [0u8; TOKEN_RANDOM_BYTES];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| TokenError::Random)?;
        Ok(TokenSecret(format!("{TOKEN_PREFIX}{}", b64url(&bytes))))
    }

    /// Parses a secret as an operator or agent gives it (surrounding whitespace is trimmed).
    pub fn parse(text: &str) -> Result<TokenSecret, TokenError> {
        let text = text.trim();
        let body = text
            .strip_prefix(TOKEN_PREFIX)
            .ok_or(TokenError::Malformed)?;
        let bytes = b64url_decode(body).ok_or(TokenError::Malformed)?;
        if bytes.len() != TOKEN_RANDOM_BYTES || b64url(&bytes) != body {
            return Err(TokenError::Malformed);
        }
        Ok(TokenSecret(text.to_owned()))
    }

    /// The secret text; show it once, to the operator who created it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What the control plane stores.
    pub fn hash(&self) -> TokenHash {
        TokenHash(sha256(self.0.as_bytes()))
    }
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(<redacted>)")
    }
}

/// SHA-256 of a token secret: the only form the control plane keeps.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// From stored bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> TokenHash {
        TokenHash(bytes)
    }

    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Whether `secret` hashes to this value, compared in constant time.
    pub fn matches(&self, secret: &TokenSecret) -> bool {
        constant_time_eq(&self.0, &secret.hash().0)
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({})", hex::encode(self.0))
    }
}

/// Constant-time equality of two byte strings (the length is not secret).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_parse_hash() {
        let s = TokenSecret::generate().unwrap();
        assert_eq!(s.expose().len(), 48);
        let parsed = TokenSecret::parse(&format!(" {}\n", s.expose())).unwrap();
        assert_eq!(parsed, s);
        assert!(s.hash().matches(&parsed));
        let other = TokenSecret::generate().unwrap();
        assert!(!s.hash().matches(&other));
        assert!(!format!("{s:?}").contains(&s.expose()[5..]));
    }

    #[test]
    fn malformed_refused() {
        for bad in [
            "",
            "bcjt_",
            "bcjx_AAAA",
            "bcjt_AAAA",
            &format!("bcjt_{}", "A".repeat(44)),
        ] {
            assert_eq!(TokenSecret::parse(bad), Err(TokenError::Malformed), "{bad}");
        }
    }
}
