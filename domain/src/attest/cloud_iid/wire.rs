//! The `cloud-iid` evidence (`JoinRequest.attestation`): UTF-8 JSON naming the provider and
//! carrying its document as the metadata service returned it.
//!
//! ```text
//! {"provider":"gcp","document":"<JWT>"}
//! {"provider":"aws","document":"<identity document JSON>","signature":"<base64 RSA-SHA256>"}
//! {"provider":"azure","document":"<base64 PKCS#7 SignedData>"}
//! {"provider":"oidc","document":"<JWT>"}
//! ```

use serde::{Deserialize, Serialize};

/// A cloud provider the attestor knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CloudProvider {
    /// Amazon EC2: the instance identity document and its signature.
    Aws,
    /// Google Compute Engine: the instance identity token.
    Gcp,
    /// Azure: the attested data document.
    Azure,
    /// Any OIDC issuer the operator configured.
    Oidc,
}

impl CloudProvider {
    /// Every provider.
    pub const ALL: [CloudProvider; 4] = [
        CloudProvider::Aws,
        CloudProvider::Gcp,
        CloudProvider::Azure,
        CloudProvider::Oidc,
    ];

    /// `aws`, `gcp`, `azure`, `oidc`.
    pub fn as_str(self) -> &'static str {
        match self {
            CloudProvider::Aws => "aws",
            CloudProvider::Gcp => "gcp",
            CloudProvider::Azure => "azure",
            CloudProvider::Oidc => "oidc",
        }
    }

    /// Whether its issue time is when the document was made for this request, so `max_age`
    /// applies: GCP and OIDC tokens and Azure's attested data are minted on each read. An AWS
    /// document's `pendingTime` is when the instance launched; its age says nothing about a
    /// replay, which the one join per instance already stops (spec: `maxAgeMs` for OIDC and
    /// GCP).
    pub fn ages(self) -> bool {
        !matches!(self, CloudProvider::Aws)
    }

    /// The provider named `text` (exactly, lower-case).
    pub fn parse(text: &str) -> Option<CloudProvider> {
        CloudProvider::ALL.into_iter().find(|p| p.as_str() == text)
    }
}

impl std::fmt::Display for CloudProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The evidence as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudIidEvidence {
    /// `aws`, `gcp`, `azure` or `oidc`.
    pub provider: String,
    /// The document: a JWT, AWS's identity document text, or Azure's base64 PKCS#7.
    pub document: String,
    /// AWS only: the base64 signature of the document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl CloudIidEvidence {
    /// The evidence bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses the evidence; `None` when it is not this JSON shape.
    pub fn from_bytes(bytes: &[u8]) -> Option<CloudIidEvidence> {
        serde_json::from_slice(bytes).ok()
    }
}
