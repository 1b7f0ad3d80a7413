//! PKI: the key set, certificate profiles, CSR checks, SPIFFE IDs, sealed join tokens and
//! purpose-bound signatures.
//!
//! Everything here is pure: bytes and values in, bytes and values out. No file or network IO,
//! no clock (every `now` is an argument), no async. The one outside input is randomness for
//! keys, serials, salts and nonces, drawn from ring's `SystemRandom`.
//!
//! All keys are ECDSA P-256 with SHA-256 but the SSH CA (Ed25519, [`ssh_ca`]), and no key does
//! two jobs ([`keys::KeyRole`]).
//!
//! | module | job |
//! | --- | --- |
//! | [`keys`] | P-256 keys bound to a role; public keys; ES256 signatures |
//! | [`pin`] | `sha256/<base64>` pins |
//! | [`spiffe`] | trust domains, SPIFFE IDs, roles |
//! | [`ca`] | node, serving, operator and command-signing CAs |
//! | [`crl`] | the node CA's revocation list (RFC 5280 v2 CRL) and its rising number |
//! | [`crl_url`] | where node certificates say the list is (the CRL distribution point) |
//! | [`root`] | the root CA, online or offline (`pki init --offline-root`) |
//! | [`keyset`] | the deployment's seven keys and its operator CA (`pki init`) |
//! | [`secret`] | the deployment secret (`BC_DEPLOYMENT_SECRET`) |
//! | [`bundle`] | the JSON bundle, sealed or plaintext |
//! | [`bundle_kdf`] | the seal's key derivation (Argon2id; HKDF-only for older bundles) |
//! | [`csr`] | PKCS#10 verification ([`csr::VerifiedCsr`]) |
//! | [`leaf`] | agent and serving certificate issuance |
//! | [`operator_cert`] | operator certificates (admin API clients) and reading them back |
//! | [`serving_grant`] | which serving certificates a split gateway may get |
//! | [`signer`] | node keys held elsewhere (a TPM): CSRs and statements through [`signer::NodeSigner`] |
//! | [`identity`] | reading a node identity from an agent certificate |
//! | [`token`] | join-token secrets and their stored hashes |
//! | [`token_seal`] | sealing a token to the JoinService, bound to the CSR |
//! | [`statement`] | purpose-bound signatures and the proof time window |
//! | [`ssh_ca`] | the SSH CA (Ed25519): signs OpenSSH certificates only (`crate::ssh`) |

pub mod backdate;
pub mod bundle;
pub mod bundle_kdf;
pub mod ca;
pub mod crl;
pub mod crl_url;
pub mod csr;
pub(crate) mod encoding;
pub mod identity;
pub mod keys;
pub mod keyset;
pub mod leaf;
pub mod operator_cert;
pub mod pin;
pub mod root;
pub mod secret;
pub mod serving_grant;
pub mod signer;
pub mod spiffe;
pub mod ssh_ca;
pub mod statement;
pub mod token;
pub mod token_seal;

pub use bundle::{
    open_bundle, plaintext_bundle, seal_bundle, seal_bundle_with, BundleError, LoadedBundle,
    Protection, PublicBundle,
};
pub use bundle_kdf::{Argon2idParams, BundleKdf, KdfError};
pub use ca::{
    CaError, CaKind, CertificateAuthority, CommandSigningRoot, NodeCa, OperatorCa, ServingCa,
};
pub use crl::{
    crl_number_of, sign_crl, verify_crl, CrlCheckError, CrlError, CrlFacts, CrlNumber, CrlRequest,
    RevokedEntry, SignedCrl,
};
pub use crl_url::{CrlDistributionPoint, CrlUrlError};
pub use csr::{build_csr, BuildCsrError, CsrError, VerifiedCsr};
pub use encoding::{pem_blocks, pem_encode, read_pem_blocks};
pub use identity::{issued_by, same_ca, IdentityError, NodeIdentity};
pub use keys::{KeyError, KeyRole, PrivateKey, PublicKey, Signature};
pub use keyset::{KeySet, KeySetError, KeySetLifetimes, KeySetPins, RenewableCa};
pub use leaf::{
    issue_internal_client_certificate, issue_node_certificate, issue_serving_certificate,
    issue_worker_certificate, IssueError, IssuedCertificate, NodeCertificateDecision,
    NodeKeyStatement, Serial, ServingCertificateRequest, ServingRole, BACKDATE,
    GATEWAY_SERVING_MAX_LIFETIME, SERVING_MAX_LIFETIME, WORKER_CERT_MAX_LIFETIME,
};
pub use operator_cert::{
    issue_operator_certificate, OperatorCertError, OperatorIdentity, OperatorIdentityError,
    OPERATOR_CERT_MAX_LIFETIME,
};
pub use pin::{Pin, PinError};
pub use root::RootCa;
pub use secret::{DeploymentSecret, SecretError, DEPLOYMENT_SECRET_ENV};
pub use serving_grant::{
    decide_serving_issued, plan_gateway_serving, read_grant, GatewayGrant, GrantError,
    ServingRefusal,
};
pub use signer::{build_csr_with, ecdsa_der, sign_with, NodeSigner, SignerError};
pub use spiffe::{NodeId, NodeRole, Role, SiteId, SpiffeError, SpiffeId, TrustDomain};
pub use ssh_ca::{NotACertificate, SshCa};
pub use statement::{
    check_clock_window, signed_input, verify, ClockWindowError, Purpose, Statement, StatementError,
};
pub use token::{TokenHash, TokenSecret};
pub use token_seal::{seal_token, JoinEncryptionKey, SealError, SealedToken};
