//! The cloud-iid producer (spec 000 "cloud-iid"): `bcd join --attestor cloud-iid --provider P`
//! sends no token; it fetches the instance's identity document from the provider's metadata
//! service and sends it as `domain::attest::cloud_iid::CloudIidEvidence`.
//!
//! | provider | what is fetched |
//! | --- | --- |
//! | `aws` | IMDSv2: `PUT /latest/api/token` (`X-aws-ec2-metadata-token-ttl-seconds`), then `GET /latest/dynamic/instance-identity/document` and `.../signature` with `X-aws-ec2-metadata-token` |
//! | `gcp` | `GET /computeMetadata/v1/instance/service-accounts/default/identity?audience=A&format=full` with `Metadata-Flavor: Google` |
//! | `azure` | `GET /metadata/attested/document?api-version=2020-09-01` with `Metadata: true`; its JSON's `signature` |
//! | `oidc` | the token in `[cloud] token_file` (no request) |
//!
//! The base URL is `BCD_CLOUD_METADATA_URL`, else `[cloud] metadata_url`, else
//! `http://169.254.169.254` (GCP: `http://metadata.google.internal`), plain HTTP only (the
//! services are link-local). Each request has a timeout and every error names the URL.

use std::path::PathBuf;
use std::time::Duration;

use domain::attest::cloud_iid::{CloudIidEvidence, CloudProvider, CLOUD_IID_ATTESTOR};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Bytes;

use super::{EvidenceError, EvidenceProducer};
use crate::config::CloudSettings;

/// The attestor id (`bcd join --attestor cloud-iid`).
pub const CLOUD_IID: &str = CLOUD_IID_ATTESTOR;

/// `bcd join`'s producer for `attestor`: the cloud-iid producer of `--provider` with
/// `[cloud]` and `BCD_CLOUD_METADATA_URL`, `None` for any other attestor (which takes no
/// `--provider`). The error is a usage error's message.
pub fn cloud_producer(
    attestor: &str,
    provider: Option<&str>,
    settings: &CloudSettings,
) -> Result<Option<CloudIidProducer>, String> {
    if attestor != CLOUD_IID_ATTESTOR {
        return match provider {
            Some(_) => Err("--provider is for --attestor cloud-iid".into()),
            None => Ok(None),
        };
    }
    let env_url = std::env::var(METADATA_URL_ENV).ok();
    CloudIidProducer::new(provider, settings, env_url)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Environment override of `[cloud] metadata_url`.
pub const METADATA_URL_ENV: &str = "BCD_CLOUD_METADATA_URL";
/// The metadata service's address on AWS and Azure.
pub const DEFAULT_METADATA_URL: &str = "http://169.254.169.254";
/// GCP's.
pub const GCP_METADATA_URL: &str = "http://metadata.google.internal";
/// One request, connecting included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest response read.
const MAX_BODY: usize = 256 * 1024;
/// The IMDSv2 session token's lifetime asked for, seconds.
const AWS_TOKEN_TTL: &str = "300";

/// Why the producer could not be set up or the document fetched.
#[derive(Debug, thiserror::Error)]
pub enum CloudIidError {
    /// `--provider` is not one of the four.
    #[error("--provider {0:?}: give aws, gcp, azure or oidc")]
    Provider(String),
    /// `--attestor cloud-iid` without `--provider`.
    #[error("--attestor cloud-iid needs --provider aws|gcp|azure|oidc")]
    NoProvider,
    /// The base URL is not `http://host[:port][/path]`.
    #[error("metadata URL {0:?} is not http://host[:port] (set [cloud] metadata_url or {METADATA_URL_ENV})")]
    Url(String),
    /// GCP without an audience.
    #[error("--provider gcp needs [cloud] audience in config.toml (the control plane's [attestors.cloud-iid.gcp] audience)")]
    NoAudience,
    /// OIDC without a token file.
    #[error("--provider oidc needs [cloud] token_file in config.toml")]
    NoTokenFile,
    /// The token file could not be read.
    #[error("{path}: cannot read the OIDC token: {source}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A request failed (connect, timeout, protocol).
    #[error("{method} {url}: {reason}")]
    Request {
        /// `GET` or `PUT`.
        method: &'static str,
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// A response other than 200.
    #[error("{method} {url}: the metadata service answered HTTP {status}")]
    Status {
        /// `GET` or `PUT`.
        method: &'static str,
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// A response that is not what the provider sends.
    #[error("{url}: {reason}")]
    Body {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
}

/// A metadata service's base: host, port and path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Base {
    host: String,
    port: u16,
    prefix: String,
}

impl Base {
    fn parse(url: &str) -> Result<Base, CloudIidError> {
        let bad = || CloudIidError::Url(url.to_owned());
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad())?),
            None => (authority, 80),
        };
        if host.is_empty() || host.contains('@') {
            return Err(bad());
        }
        Ok(Base {
            host: host.to_owned(),
            port,
            prefix: path.to_owned(),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}:{}{}{}", self.host, self.port, self.prefix, path)
    }
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
fn encode_query(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The cloud-iid producer for one provider.
#[derive(Debug, Clone)]
pub struct CloudIidProducer {
    provider: CloudProvider,
    base: Base,
    audience: Option<String>,
    token_file: Option<PathBuf>,
    timeout: Duration,
}

impl CloudIidProducer {
    /// For `--provider provider`, from `[cloud]` and `env_url` (`BCD_CLOUD_METADATA_URL`).
    pub fn new(
        provider: Option<&str>,
        settings: &CloudSettings,
        env_url: Option<String>,
    ) -> Result<CloudIidProducer, CloudIidError> {
        let name = provider.ok_or(CloudIidError::NoProvider)?;
        let provider =
            CloudProvider::parse(name).ok_or_else(|| CloudIidError::Provider(name.into()))?;
        let default = match provider {
            CloudProvider::Gcp => GCP_METADATA_URL,
            _ => DEFAULT_METADATA_URL,
        };
        let url = env_url
            .filter(|u| !u.trim().is_empty())
            .or_else(|| settings.metadata_url.clone())
            .unwrap_or_else(|| default.to_owned());
        let base = Base::parse(url.trim())?;
        let audience = settings.audience.clone().filter(|a| !a.is_empty());
        if provider == CloudProvider::Gcp && audience.is_none() {
            return Err(CloudIidError::NoAudience);
        }
        if provider == CloudProvider::Oidc && settings.token_file.is_none() {
            return Err(CloudIidError::NoTokenFile);
        }
        Ok(CloudIidProducer {
            provider,
            base,
            audience,
            token_file: settings.token_file.clone(),
            timeout: REQUEST_TIMEOUT,
        })
    }

    /// The provider.
    pub fn provider(&self) -> CloudProvider {
        self.provider
    }

    /// Fetches the document and builds the evidence.
    pub fn fetch(&self) -> Result<CloudIidEvidence, CloudIidError> {
        let evidence = |document: String, signature: Option<String>| CloudIidEvidence {
            provider: self.provider.as_str().to_owned(),
            document,
            signature,
        };
        if self.provider == CloudProvider::Oidc {
            let path = self.token_file.clone().ok_or(CloudIidError::NoTokenFile)?;
            let token = std::fs::read_to_string(&path)
                .map_err(|source| CloudIidError::TokenFile { path, source })?;
            return Ok(evidence(token.trim().to_owned(), None));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CloudIidError::Request {
                method: "GET",
                url: self.base.url("/"),
                reason: format!("cannot start an async runtime: {e}"),
            })?;
        runtime.block_on(async {
            match self.provider {
                CloudProvider::Aws => {
                    let token = self
                        .call(
                            "PUT",
                            "/latest/api/token",
                            &[("X-aws-ec2-metadata-token-ttl-seconds", AWS_TOKEN_TTL)],
                        )
                        .await?;
                    let token = text(&self.base.url("/latest/api/token"), token)?;
                    let header = [("X-aws-ec2-metadata-token", token.trim())];
                    let doc_path = "/latest/dynamic/instance-identity/document";
                    let sig_path = "/latest/dynamic/instance-identity/signature";
                    let document = self.call("GET", doc_path, &header).await?;
                    let signature = self.call("GET", sig_path, &header).await?;
                    Ok(evidence(
                        text(&self.base.url(doc_path), document)?,
                        Some(text(&self.base.url(sig_path), signature)?.trim().to_owned()),
                    ))
                }
                CloudProvider::Gcp => {
                    let audience = self.audience.as_deref().ok_or(CloudIidError::NoAudience)?;
                    let path = format!(
                        "/computeMetadata/v1/instance/service-accounts/default/identity?\
                         audience={}&format=full",
                        encode_query(audience)
                    );
                    let body = self
                        .call("GET", &path, &[("Metadata-Flavor", "Google")])
                        .await?;
                    Ok(evidence(
                        text(&self.base.url(&path), body)?.trim().to_owned(),
                        None,
                    ))
                }
                CloudProvider::Azure => {
                    let path = "/metadata/attested/document?api-version=2020-09-01";
                    let body = self.call("GET", path, &[("Metadata", "true")]).await?;
                    let url = self.base.url(path);
                    let json: serde_json::Value =
                        serde_json::from_slice(&body).map_err(|e| CloudIidError::Body {
                            url: url.clone(),
                            reason: format!("not JSON: {e}"),
                        })?;
                    let signature = json
                        .get("signature")
                        .and_then(serde_json::Value::as_str)
                        .ok_or_else(|| CloudIidError::Body {
                            url,
                            reason: "no \"signature\" string in the attested document".into(),
                        })?;
                    Ok(evidence(signature.to_owned(), None))
                }
                CloudProvider::Oidc => Err(CloudIidError::NoTokenFile),
            }
        })
    }

    /// One request; the body of a 200 answer.
    async fn call(
        &self,
        method: &'static str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Vec<u8>, CloudIidError> {
        let url = self.base.url(path);
        let failed = |reason: String| CloudIidError::Request {
            method,
            url: url.clone(),
            reason,
        };
        let exchange = async {
            let stream = tokio::net::TcpStream::connect((self.base.host.as_str(), self.base.port))
                .await
                .map_err(|e| failed(format!("cannot connect: {e}")))?;
            let io = hyper_util::rt::TokioIo::new(stream);
            let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| failed(format!("HTTP handshake: {e}")))?;
            let driver = tokio::spawn(connection);
            let mut request = hyper::Request::builder()
                .method(method)
                .uri(format!("{}{}", self.base.prefix, path))
                .header(hyper::header::HOST, self.base.host.as_str());
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let request = request
                .body(Full::new(Bytes::new()))
                .map_err(|e| failed(format!("cannot build the request: {e}")))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| failed(format!("reading the answer: {e}")))?
                .to_bytes();
            driver.abort();
            if status != 200 {
                return Err(CloudIidError::Status {
                    method,
                    url: url.clone(),
                    status,
                });
            }
            Ok(body.to_vec())
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(failed(format!(
                "no answer within {} s",
                self.timeout.as_secs()
            ))),
        }
    }
}

fn text(url: &str, body: Vec<u8>) -> Result<String, CloudIidError> {
    String::from_utf8(body).map_err(|_| CloudIidError::Body {
        url: url.to_owned(),
        reason: "the answer is not UTF-8".into(),
    })
}

impl EvidenceProducer for CloudIidProducer {
    fn id(&self) -> &str {
        CLOUD_IID_ATTESTOR
    }

    fn produce(
        &self,
        _round: u32,
        _csr_sha256: &[u8; 32],
        challenge: Option<&[u8]>,
    ) -> Result<Vec<u8>, EvidenceError> {
        if challenge.is_some() {
            return Err(EvidenceError::NoChallenges(CLOUD_IID_ATTESTOR.into()));
        }
        self.fetch()
            .map(|e| e.to_bytes())
            .map_err(|e| EvidenceError::Failed {
                attestor: CLOUD_IID_ATTESTOR.into(),
                reason: e.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_parse_and_bad_ones_name_the_key() {
        let b = Base::parse("http://127.0.0.1:8169/prefix/").unwrap();
        assert_eq!(b.url("/x"), "http://127.0.0.1:8169/prefix/x");
        assert_eq!(Base::parse("http://169.254.169.254").unwrap().port, 80);
        for bad in ["https://x", "x:80", "http://:80", "http://h:port"] {
            let e = Base::parse(bad).unwrap_err().to_string();
            assert!(e.contains("[cloud] metadata_url"), "{e}");
        }
        assert_eq!(
            encode_query("https://bc.example/a b"),
            "https%3A%2F%2Fbc.example%2Fa%20b"
        );
    }

    #[test]
    fn gcp_needs_an_audience_and_oidc_a_token_file() {
        let none = CloudSettings::default();
        assert!(matches!(
            CloudIidProducer::new(Some("gcp"), &none, None),
            Err(CloudIidError::NoAudience)
        ));
        assert!(matches!(
            CloudIidProducer::new(Some("oidc"), &none, None),
            Err(CloudIidError::NoTokenFile)
        ));
        assert!(matches!(
            CloudIidProducer::new(Some("ibm"), &none, None),
            Err(CloudIidError::Provider(_))
        ));
        let aws = CloudIidProducer::new(Some("aws"), &none, None).unwrap();
        assert_eq!(aws.base, Base::parse(DEFAULT_METADATA_URL).unwrap());
    }

    #[test]
    fn an_unreachable_service_is_an_error_naming_the_url() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let settings = CloudSettings {
            metadata_url: Some(format!("http://127.0.0.1:{port}")),
            ..CloudSettings::default()
        };
        let e = CloudIidProducer::new(Some("azure"), &settings, None)
            .unwrap()
            .fetch()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "GET http://127.0.0.1:{port}/metadata/attested/document"
            )),
            "{e}"
        );
    }
}
