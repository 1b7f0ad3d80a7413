//! Why a `cloud-iid` join was refused: `cloud-iid:<reason>` (the COMMON contract's list), one
//! variant per check.

use super::instance::CLOUD_IID_ATTESTOR;
use crate::attest::contract::AttestorRefusal;

/// Why a `cloud-iid` join was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum CloudIidRefusal {
    /// The evidence is not the JSON shape, or its document does not parse as the provider's.
    #[error("cloud-iid:malformed")]
    Malformed,
    /// The provider is unknown, or this control plane has no configuration for it.
    #[error("cloud-iid:unknown-provider")]
    UnknownProvider,
    /// The document or token does not verify against the configured keys or certificates.
    #[error("cloud-iid:signature")]
    Signature,
    /// The token's issuer is not the provider's (GCP) or no configured issuer (OIDC).
    #[error("cloud-iid:wrong-issuer")]
    WrongIssuer,
    /// The token's audience is not the configured one.
    #[error("cloud-iid:wrong-audience")]
    WrongAudience,
    /// The token or document was issued longer than `max_age` ago (GCP, OIDC, Azure; never
    /// AWS, whose time is the instance's launch), or the token expired.
    #[error("cloud-iid:document-too-old")]
    DocumentTooOld,
    /// The document was issued, or the token is valid only from (`nbf`), more than a minute in
    /// the future.
    #[error("cloud-iid:document-from-future")]
    DocumentFromFuture,
    /// No registered account (`bcctl cloud account add`) for the instance's account.
    #[error("cloud-iid:unknown-instance")]
    UnknownInstance,
    /// This (provider, account, instance) already joined (by the admission step).
    #[error("cloud-iid:instance-reused")]
    InstanceReused,
    /// The account's role is not the role asked for.
    #[error("cloud-iid:wrong-role")]
    WrongRole,
}

impl CloudIidRefusal {
    /// Every reason.
    pub const ALL: [CloudIidRefusal; 10] = [
        CloudIidRefusal::Malformed,
        CloudIidRefusal::UnknownProvider,
        CloudIidRefusal::Signature,
        CloudIidRefusal::WrongIssuer,
        CloudIidRefusal::WrongAudience,
        CloudIidRefusal::DocumentTooOld,
        CloudIidRefusal::DocumentFromFuture,
        CloudIidRefusal::UnknownInstance,
        CloudIidRefusal::InstanceReused,
        CloudIidRefusal::WrongRole,
    ];

    /// The reason without the attestor prefix (`document-too-old`).
    pub fn reason(self) -> String {
        let text = self.to_string();
        text.strip_prefix("cloud-iid:").unwrap_or(&text).to_owned()
    }

    /// The contract's refusal, attributed to nobody (a document authenticates no tenant).
    pub fn refusal(self) -> AttestorRefusal {
        AttestorRefusal::new(CLOUD_IID_ATTESTOR, &self.reason())
    }
}
