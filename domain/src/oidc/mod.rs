//! Workload identity's OIDC issuer (issue 43; spec 003 "Workload identity"; docs
//! `WORKLOAD-IDENTITY.md`): P-256 keys of its own, never in the PKI bundle, rotated in three
//! logged steps; short-lived ES256 tokens; the discovery document and JWK Set relying parties
//! read. Pure: the shell loads the keys, passes the time and a signer, and appends the events.
//!
//! | module | job |
//! | --- | --- |
//! | [`keys`] | a key's life (add, promote, retire) and its refusals |
//! | [`seal`] | generating a key, sealing its private half under the deployment secret |
//! | [`jwk`] | public keys as JWKs, RFC 7638 thumbprints (the key ids) |
//! | [`token`] | the claims rules and ES256 signing with an injected signer |
//! | [`discovery`] | the issuer URL, the discovery document, the JWK Set |

pub mod discovery;
pub mod jwk;
pub mod keys;
pub mod seal;
pub mod token;

pub use discovery::{discovery_document, jwks_document, IssuerUrl};
pub use keys::{
    decide_add_key, decide_promote_key, decide_retire_key, overdue_keys, signing_key, AddKey,
    IssuerKey, KeyState, OidcKeyEvent, OidcKeyRefusal,
};
pub use seal::{OidcKeyError, OidcSigningKey};
pub use token::{
    decide_token, sign_token, IssuerFacts, JwsSigner, SignError, TokenClaims, TokenRefusal,
    TokenRequest,
};

#[cfg(test)]
mod tests;
