//! `[attestors.cloud-iid]` of `bcctl serve`'s configuration: the `cloud-iid` attestor registers
//! only when the table is present, file only. Each provider section is optional; a provider
//! without one is refused `cloud-iid:unknown-provider`.
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
//! The files are read once at start and checked by [`CloudIidConfig::check`] (a JWKS that
//! does not parse or a certificate without an RSA key stops the server, naming the key).

use std::path::{Path, PathBuf};

use domain::attest::cloud_iid::{
    AwsConfig, AzureConfig, CloudIidConfig, GcpConfig, OidcIssuerConfig, DEFAULT_MAX_AGE,
};
use serde::Deserialize;

/// `[attestors.cloud-iid]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCloudIid {
    pub max_age: Option<String>,
    pub aws: Option<FileCertificates>,
    pub gcp: Option<FileJwks>,
    pub azure: Option<FileCertificates>,
    #[serde(default)]
    pub oidc: Vec<FileOidcIssuer>,
}

/// `[attestors.cloud-iid.aws]` or `.azure` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCertificates {
    #[serde(default)]
    pub certificates: Vec<PathBuf>,
}

/// `[attestors.cloud-iid.gcp]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileJwks {
    pub jwks_file: PathBuf,
    pub audience: String,
}

/// `[[attestors.cloud-iid.oidc]]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileOidcIssuer {
    pub issuer: String,
    pub jwks_file: PathBuf,
    pub audience: String,
}

/// Why `[attestors.cloud-iid]` was refused: the key it names and the message.
pub type CloudIidSettingError = (&'static str, String);

fn certificates(
    key: &'static str,
    paths: &[PathBuf],
) -> Result<Vec<Vec<u8>>, CloudIidSettingError> {
    if paths.is_empty() {
        return Err((key, "names no certificate file".into()));
    }
    let mut out = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|e| {
            (
                key,
                format!("{}: cannot read the certificate: {e}", path.display()),
            )
        })?;
        let blocks = crate::pem::pem_blocks(&text, "CERTIFICATE")
            .map_err(|m| (key, format!("{}: {m}", path.display())))?;
        if blocks.is_empty() {
            return Err((
                key,
                format!("{}: holds no PEM CERTIFICATE block", path.display()),
            ));
        }
        out.extend(blocks);
    }
    Ok(out)
}

fn jwks(key: &'static str, path: &Path) -> Result<Vec<u8>, CloudIidSettingError> {
    std::fs::read(path).map_err(|e| {
        (
            key,
            format!("{}: cannot read the JWKS: {e}", path.display()),
        )
    })
}

/// `[attestors.cloud-iid]`, checked, its files read (`None` without the table).
pub fn cloud_iid_settings(
    file: Option<&FileCloudIid>,
    parse: fn(&str) -> Result<std::time::Duration, String>,
) -> Result<Option<CloudIidConfig>, CloudIidSettingError> {
    let Some(c) = file else {
        return Ok(None);
    };
    let max_age = match &c.max_age {
        None => DEFAULT_MAX_AGE,
        Some(t) => parse(t).map_err(|m| ("attestors.cloud-iid.max_age", m))?,
    };
    if max_age.is_zero() {
        return Err(("attestors.cloud-iid.max_age", "must be more than 0".into()));
    }
    let aws = match &c.aws {
        None => None,
        Some(a) => Some(AwsConfig {
            certificates: certificates("attestors.cloud-iid.aws.certificates", &a.certificates)?,
        }),
    };
    let azure = match &c.azure {
        None => None,
        Some(a) => Some(AzureConfig {
            certificates: certificates("attestors.cloud-iid.azure.certificates", &a.certificates)?,
        }),
    };
    let gcp = match &c.gcp {
        None => None,
        Some(g) => Some(GcpConfig {
            jwks: jwks("attestors.cloud-iid.gcp.jwks_file", &g.jwks_file)?,
            audience: g.audience.clone(),
        }),
    };
    let mut oidc = Vec::new();
    for o in &c.oidc {
        oidc.push(OidcIssuerConfig {
            issuer: o.issuer.clone(),
            jwks: jwks("attestors.cloud-iid.oidc.jwks_file", &o.jwks_file)?,
            audience: o.audience.clone(),
        });
    }
    let config = CloudIidConfig {
        max_age,
        aws,
        gcp,
        azure,
        oidc,
    };
    config
        .check()
        .map_err(|e| ("attestors.cloud-iid", e.to_string()))?;
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
        crate::serve::config::parse_duration(text)
    }

    #[test]
    fn absent_means_no_attestor_and_an_empty_table_runs_with_no_provider() {
        assert!(cloud_iid_settings(None, parse_duration).unwrap().is_none());
        let file: FileCloudIid = toml::from_str("").unwrap();
        let c = cloud_iid_settings(Some(&file), parse_duration)
            .unwrap()
            .unwrap();
        assert_eq!(c.max_age, DEFAULT_MAX_AGE);
        assert!(c.aws.is_none() && c.gcp.is_none() && c.azure.is_none() && c.oidc.is_empty());
    }

    #[test]
    fn a_missing_file_or_bad_jwks_names_its_key() {
        let file: FileCloudIid =
            toml::from_str("[gcp]\njwks_file = \"/nonexistent/jwks.json\"\naudience = \"a\"\n")
                .unwrap();
        let (key, message) = cloud_iid_settings(Some(&file), parse_duration).unwrap_err();
        assert_eq!(key, "attestors.cloud-iid.gcp.jwks_file");
        assert!(message.contains("/nonexistent/jwks.json"), "{message}");
        let dir = std::env::temp_dir().join(format!("bc-cloud-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jwks.json");
        std::fs::write(&path, "{\"keys\": []}").unwrap();
        let file: FileCloudIid = toml::from_str(&format!(
            "max_age = \"5m\"\n[gcp]\njwks_file = {:?}\naudience = \"a\"\n",
            path.display().to_string()
        ))
        .unwrap();
        let (key, message) = cloud_iid_settings(Some(&file), parse_duration).unwrap_err();
        assert_eq!(key, "attestors.cloud-iid");
        assert!(message.contains("gcp JWKS"), "{message}");
        let file: FileCloudIid = toml::from_str("[aws]\ncertificates = []\n").unwrap();
        let (key, _) = cloud_iid_settings(Some(&file), parse_duration).unwrap_err();
        assert_eq!(key, "attestors.cloud-iid.aws.certificates");
        std::fs::remove_dir_all(&dir).ok();
    }
}
