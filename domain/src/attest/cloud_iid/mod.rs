//! The `cloud-iid` attestor (spec 000 "cloud-iid"): a cloud VM proves itself with the identity
//! document its cloud signed (AWS's instance identity document, GCP's instance identity token,
//! Azure's attested data, any OIDC issuer's token), and joins where the operator registered its
//! account (`bcctl cloud account add`). Each (provider, account, instance) admits one join ever.
//!
//! | module | job |
//! | --- | --- |
//! | [`wire`] | the evidence bcd sends: provider, document, (AWS) signature |
//! | [`config`] | what the operator configures: max age, each provider's keys and audience |
//! | [`factory`] | how it registers: its [`FACTORY`] |
//! | [`refusal`] | `cloud-iid:<reason>` |
//! | [`jwt`] | JWT + JWKS verification shared by GCP and OIDC (jsonwebtoken) |
//! | [`aws`] | the instance identity document and its RSA-SHA256 signature |
//! | [`gcp`] | the instance identity token (Google's claims) |
//! | [`certs`] | the RSA key of a configured certificate |
//! | [`azure`] | the attested data: PKCS#7 SignedData (cms, x509-cert, rsa) |
//! | [`oidc`] | any configured OIDC issuer's token |
//! | [`attestor`] | [`CloudIidAttestor`]: verify, find the account, name the single use |

pub mod accounts;
pub mod attestor;
pub mod aws;
pub mod azure;
pub mod certs;
pub mod config;
pub mod factory;
pub mod gcp;
mod instance;
pub mod jwt;
pub mod oidc;
pub mod refusal;
pub mod wire;

pub use accounts::{cloud_account_key, CLOUD_ACCOUNT_LIST};
pub use attestor::{cloud_iid_subject, CloudIidAttestor, INSTANCE_REUSED};
pub use config::{
    AwsConfig, AzureConfig, CloudIidConfig, CloudIidConfigError, CloudIidSettings, GcpConfig,
    OidcIssuerConfig, DEFAULT_MAX_AGE,
};
pub use factory::FACTORY;
pub use instance::{CloudIdentity, CLOUD_IID_ATTESTOR};
pub use jwt::MAX_FUTURE_SKEW;
pub use refusal::CloudIidRefusal;
pub use wire::{CloudIidEvidence, CloudProvider};
