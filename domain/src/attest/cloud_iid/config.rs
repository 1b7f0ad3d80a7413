//! What the operator configures for the `cloud-iid` attestor (`[attestors.cloud-iid]` in
//! `bcctl serve`'s configuration) and how the table is read ([`CloudIidSettings`]; the attestor
//! registers in [`super::factory`]). The attestor runs only when the table is present; each
//! provider section is optional, and a provider without one is refused
//! `cloud-iid:unknown-provider`.
//!
//! ```toml
//! [attestors.cloud-iid]
//! max_age = "10m"                                    # optional (default 10m; GCP, OIDC, Azure)
//! [attestors.cloud-iid.aws]
//! certificates = ["/etc/bc/aws-us-east-1.pem"]       # the regions' AWS public certificates
//! [attestors.cloud-iid.gcp]
//! jwks_file = "/etc/bc/google-jwks.json"             # Google's oauth2/v3/certs
//! audience = "https://bc.example.com"                # what bcd asks its token for
//! [attestors.cloud-iid.azure]
//! certificates = ["/etc/bc/azure-attested.pem"]      # the signing certificate or its issuers
//! [[attestors.cloud-iid.oidc]]
//! issuer = "https://issuer.example"
//! jwks_file = "/etc/bc/issuer-jwks.json"
//! audience = "bc"
//! ```
//!
//! The files are read with the deployment's reader when the attestor is built (at start); this
//! holds their bytes, and [`CloudIidConfig::check`] parses them once so a bad file (a JWKS that
//! does not parse, a certificate without an RSA key) stops the server, naming the key, rather
//! than failing a join.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::instance::CLOUD_IID_ATTESTOR;
use crate::attest::factory::{parse_table, ConfigTable, FromDeployment, SettingError};

/// The default `max_age`: documents issued longer ago are refused.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(600);

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

/// `[attestors.cloud-iid]`, read: the files it names, not read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudIidSettings {
    /// As [`CloudIidConfig::max_age`].
    pub max_age: Duration,
    /// AWS: its certificates' PEM files.
    pub aws: Option<Vec<PathBuf>>,
    /// GCP: its JWKS file and audience.
    pub gcp: Option<JwksFile>,
    /// Azure: its certificates' PEM files.
    pub azure: Option<Vec<PathBuf>>,
    /// `[[attestors.cloud-iid.oidc]]`.
    pub oidc: Vec<OidcIssuerFile>,
}

/// `[attestors.cloud-iid.gcp]` as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwksFile {
    /// Google's `oauth2/v3/certs`, as a file.
    pub jwks_file: PathBuf,
    /// The `aud` the token must carry.
    pub audience: String,
}

/// One `[[attestors.cloud-iid.oidc]]` as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcIssuerFile {
    /// The `iss` its tokens carry.
    pub issuer: String,
    /// Its JWKS, as a file.
    pub jwks_file: PathBuf,
    /// The `aud` its tokens must carry.
    pub audience: String,
}

/// `[attestors.cloud-iid]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CloudIidTable {
    max_age: Option<String>,
    aws: Option<CertificatesTable>,
    gcp: Option<JwksFile>,
    azure: Option<CertificatesTable>,
    #[serde(default)]
    oidc: Vec<OidcIssuerFile>,
}

/// `[attestors.cloud-iid.aws]` or `.azure` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CertificatesTable {
    #[serde(default)]
    certificates: Vec<PathBuf>,
}

/// The certificate files of a provider section, at least one.
fn certificate_files(
    key: &'static str,
    section: Option<CertificatesTable>,
) -> Result<Option<Vec<PathBuf>>, SettingError> {
    match section {
        None => Ok(None),
        Some(s) if s.certificates.is_empty() => {
            Err(SettingError::new(key, "names no certificate file"))
        }
        Some(s) => Ok(Some(s.certificates)),
    }
}

fn jwks(from: &FromDeployment<'_>, key: &str, path: &Path) -> Result<Vec<u8>, SettingError> {
    (from.read_file)(path).map_err(|e| {
        SettingError::new(
            key,
            format!("{}: cannot read the JWKS: {e}", path.display()),
        )
    })
}

const AWS_CERTIFICATES: &str = "attestors.cloud-iid.aws.certificates";
const AZURE_CERTIFICATES: &str = "attestors.cloud-iid.azure.certificates";

impl CloudIidSettings {
    /// Reads `[attestors.cloud-iid]`; `None` without the table (the attestor does not run). A
    /// refusal names its key.
    pub fn from_table(table: Option<&ConfigTable>) -> Result<Option<Self>, String> {
        if table.is_none() {
            return Ok(None);
        }
        let written: CloudIidTable = parse_table(CLOUD_IID_ATTESTOR, table)?;
        let max_age = match &written.max_age {
            None => DEFAULT_MAX_AGE,
            Some(t) => crate::duration::parse_duration(t)
                .map_err(|m| SettingError::new("attestors.cloud-iid.max_age", m))?,
        };
        if max_age.is_zero() {
            let e = SettingError::new("attestors.cloud-iid.max_age", "must be more than 0");
            return Err(e.into());
        }
        Ok(Some(CloudIidSettings {
            max_age,
            aws: certificate_files(AWS_CERTIFICATES, written.aws)?,
            gcp: written.gcp,
            azure: certificate_files(AZURE_CERTIFICATES, written.azure)?,
            oidc: written.oidc,
        }))
    }

    /// The attestor's configuration, its files read through the deployment's reader and
    /// checked ([`CloudIidConfig::check`], refused as `attestors.cloud-iid`).
    pub fn config(&self, from: &FromDeployment<'_>) -> Result<CloudIidConfig, SettingError> {
        let certificates = |key: &str, paths: &Option<Vec<PathBuf>>| {
            paths
                .as_ref()
                .map(|p| from.pem_certificates(key, p, "certificate"))
                .transpose()
        };
        let aws = certificates(AWS_CERTIFICATES, &self.aws)?;
        let azure = certificates(AZURE_CERTIFICATES, &self.azure)?;
        let gcp = match &self.gcp {
            None => None,
            Some(g) => Some(GcpConfig {
                jwks: jwks(from, "attestors.cloud-iid.gcp.jwks_file", &g.jwks_file)?,
                audience: g.audience.clone(),
            }),
        };
        let mut oidc = Vec::new();
        for o in &self.oidc {
            oidc.push(OidcIssuerConfig {
                issuer: o.issuer.clone(),
                jwks: jwks(from, "attestors.cloud-iid.oidc.jwks_file", &o.jwks_file)?,
                audience: o.audience.clone(),
            });
        }
        let config = CloudIidConfig {
            max_age: self.max_age,
            aws: aws.map(|certificates| AwsConfig { certificates }),
            gcp,
            azure: azure.map(|certificates| AzureConfig { certificates }),
            oidc,
        };
        config
            .check()
            .map_err(|e| SettingError::new("attestors.cloud-iid", e.to_string()))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attest::factory::toml_table;
    use crate::pki::TrustDomain;

    /// The configuration, its files served by `files`.
    fn config_with(
        settings: &CloudIidSettings,
        files: &[(&str, &[u8])],
    ) -> Result<CloudIidConfig, SettingError> {
        let td = TrustDomain::new("example.org").unwrap();
        let read = |p: &Path| {
            files
                .iter()
                .find(|(name, _)| Path::new(name) == p)
                .map(|(_, bytes)| bytes.to_vec())
                .ok_or_else(|| "No such file or directory (os error 2)".to_owned())
        };
        settings.config(&FromDeployment {
            trust_domain: &td,
            node_ca_der: &[],
            derive_key: &|_| [0; 32],
            read_file: &read,
        })
    }

    fn settings(text: &str) -> Result<Option<CloudIidSettings>, String> {
        CloudIidSettings::from_table(toml_table(text, "cloud-iid")?.as_ref())
    }

    #[test]
    fn absent_means_no_attestor_and_an_empty_table_runs_with_no_provider() {
        assert!(CloudIidSettings::from_table(None).unwrap().is_none());
        let file = settings("[cloud-iid]\n").unwrap().unwrap();
        let c = config_with(&file, &[]).unwrap();
        assert_eq!(c.max_age, DEFAULT_MAX_AGE);
        assert!(c.aws.is_none() && c.gcp.is_none() && c.azure.is_none() && c.oidc.is_empty());
    }

    #[test]
    fn a_missing_file_or_bad_jwks_names_its_key() {
        let file =
            settings("[cloud-iid.gcp]\njwks_file = \"/nonexistent/jwks.json\"\naudience = \"a\"\n")
                .unwrap()
                .unwrap();
        let SettingError { key, message } = config_with(&file, &[]).unwrap_err();
        assert_eq!(key, "attestors.cloud-iid.gcp.jwks_file");
        assert!(message.contains("/nonexistent/jwks.json"), "{message}");
        let file = settings(
            "[cloud-iid]\nmax_age = \"5m\"\n[cloud-iid.gcp]\njwks_file = \"/jwks.json\"\n\
             audience = \"a\"\n",
        )
        .unwrap()
        .unwrap();
        let SettingError { key, message } =
            config_with(&file, &[("/jwks.json", b"{\"keys\": []}")]).unwrap_err();
        assert_eq!(key, "attestors.cloud-iid");
        assert!(message.contains("gcp JWKS"), "{message}");
        let err = settings("[cloud-iid.aws]\ncertificates = []\n").unwrap_err();
        assert!(
            err.starts_with("attestors.cloud-iid.aws.certificates: names no certificate file"),
            "{err}"
        );
    }

    #[test]
    fn max_age_is_read_and_must_be_above_zero() {
        let s = settings("[cloud-iid]\nmax_age = \"5m\"\n")
            .unwrap()
            .unwrap();
        assert_eq!(s.max_age, Duration::from_secs(300));
        for (bad, want) in [
            (
                "max_age = \"0s\"",
                "attestors.cloud-iid.max_age: must be more than 0",
            ),
            (
                "max_age = \"soon\"",
                "attestors.cloud-iid.max_age: \"soon\"",
            ),
            (
                "maxage = \"5m\"",
                "[attestors.cloud-iid]: unknown field `maxage`",
            ),
        ] {
            let err = settings(&format!("[cloud-iid]\n{bad}\n")).unwrap_err();
            assert!(err.starts_with(want), "{bad}: {err}");
        }
    }
}
