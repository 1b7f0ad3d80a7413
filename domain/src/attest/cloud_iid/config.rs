//! What the operator configures for the `cloud-iid` attestor (`[attestors.cloud-iid]` in
//! `bcctl serve`'s configuration). The shell reads the files; this holds their bytes, and
//! [`CloudIidConfig::check`] parses them once so a bad file fails at start, not at a join.

use std::time::Duration;

/// The default `max_age`: documents issued longer ago are refused.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(600);
/// How far in the future a document's issue time may be (clock skew).
pub const MAX_FUTURE_SKEW: Duration = Duration::from_secs(60);

/// AWS: the regions' public certificates (DER) the signature may verify under.
#[derive(Debug, Clone, Default)]
pub struct AwsConfig {
    /// DER certificates (RSA).
    pub certificates: Vec<Vec<u8>>,
}

/// GCP: Google's keys and the audience bcd asks its token for.
#[derive(Debug, Clone)]
pub struct GcpConfig {
    /// The JWKS JSON (Google's `oauth2/v3/certs`).
    pub jwks: Vec<u8>,
    /// The `aud` the token must carry.
    pub audience: String,
}

/// Azure: the attested data's signing certificate(s) or the certificates that issue it (DER).
#[derive(Debug, Clone, Default)]
pub struct AzureConfig {
    /// DER certificates.
    pub certificates: Vec<Vec<u8>>,
}

/// One OIDC issuer.
#[derive(Debug, Clone)]
pub struct OidcIssuerConfig {
    /// The `iss` its tokens carry (also the account they are registered under).
    pub issuer: String,
    /// Its JWKS JSON.
    pub jwks: Vec<u8>,
    /// The `aud` its tokens must carry.
    pub audience: String,
}

/// The `cloud-iid` attestor's configuration. A provider without a section is
/// `unknown-provider`.
#[derive(Debug, Clone)]
pub struct CloudIidConfig {
    /// Documents issued longer ago are `document-too-old`.
    pub max_age: Duration,
    /// AWS, when configured.
    pub aws: Option<AwsConfig>,
    /// GCP, when configured.
    pub gcp: Option<GcpConfig>,
    /// Azure, when configured.
    pub azure: Option<AzureConfig>,
    /// OIDC issuers (none: `oidc` is unknown).
    pub oidc: Vec<OidcIssuerConfig>,
}

impl Default for CloudIidConfig {
    fn default() -> Self {
        CloudIidConfig {
            max_age: DEFAULT_MAX_AGE,
            aws: None,
            gcp: None,
            azure: None,
            oidc: Vec::new(),
        }
    }
}

/// A configuration that cannot verify anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudIidConfigError {
    /// A certificate does not parse as X.509 DER.
    #[error("{provider} certificate {index} is not an X.509 certificate")]
    Certificate {
        /// `aws` or `azure`.
        provider: &'static str,
        /// Its position in the list (0-based).
        index: usize,
    },
    /// An AWS certificate's key is not RSA.
    #[error("aws certificate {0} has no RSA public key (the signature endpoint signs with RSA)")]
    NotRsa(usize),
    /// A JWKS does not parse, or holds no key.
    #[error("the {0} JWKS is not a JSON Web Key Set with at least one key")]
    Jwks(String),
    /// A section names no certificate.
    #[error("[attestors.cloud-iid.{0}] names no certificate")]
    NoCertificate(&'static str),
    /// Two OIDC issuers have the same `issuer`.
    #[error("OIDC issuer {0} is configured twice")]
    DuplicateIssuer(String),
    /// An empty audience or issuer.
    #[error("{0} must not be empty")]
    Empty(String),
}

impl CloudIidConfig {
    /// Parses every key and certificate once.
    pub fn check(&self) -> Result<(), CloudIidConfigError> {
        if let Some(aws) = &self.aws {
            if aws.certificates.is_empty() {
                return Err(CloudIidConfigError::NoCertificate("aws"));
            }
            for (index, der) in aws.certificates.iter().enumerate() {
                super::certs::rsa_key_of(der).map_err(|e| match e {
                    super::certs::CertKeyError::NotCertificate => {
                        CloudIidConfigError::Certificate {
                            provider: "aws",
                            index,
                        }
                    }
                    super::certs::CertKeyError::NotRsa => CloudIidConfigError::NotRsa(index),
                })?;
            }
        }
        if let Some(gcp) = &self.gcp {
            if gcp.audience.is_empty() {
                return Err(CloudIidConfigError::Empty("gcp audience".into()));
            }
            super::jwt::parse_jwks(&gcp.jwks)
                .ok_or_else(|| CloudIidConfigError::Jwks("gcp".into()))?;
        }
        if let Some(azure) = &self.azure {
            if azure.certificates.is_empty() {
                return Err(CloudIidConfigError::NoCertificate("azure"));
            }
            for (index, der) in azure.certificates.iter().enumerate() {
                if x509_parser::parse_x509_certificate(der).is_err() {
                    return Err(CloudIidConfigError::Certificate {
                        provider: "azure",
                        index,
                    });
                }
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for issuer in &self.oidc {
            if issuer.issuer.is_empty() || issuer.audience.is_empty() {
                return Err(CloudIidConfigError::Empty(
                    "an OIDC issuer's issuer and audience".into(),
                ));
            }
            if !seen.insert(issuer.issuer.as_str()) {
                return Err(CloudIidConfigError::DuplicateIssuer(issuer.issuer.clone()));
            }
            super::jwt::parse_jwks(&issuer.jwks)
                .ok_or_else(|| CloudIidConfigError::Jwks(issuer.issuer.clone()))?;
        }
        Ok(())
    }
}
