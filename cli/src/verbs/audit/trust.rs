//! The key a trail or proof is verified with: a pinned key (`--pin`), or the audit key of a PKI
//! bundle's public half (`--pki`, opened the one way of [`crate::deployment`]).

use domain::audit::checkpoint::audit_origin;
use domain::audit::{AuditPublicKey, KeyPin};
use domain::pki::DEPLOYMENT_SECRET_ENV;

use crate::deployment::Deployment;

use super::error::{pki_usage, AuditCmdError};

/// The key to verify with, and the origin it must sign under (when known from a PKI bundle or
/// --trust-domain).
pub(super) struct Trust {
    pub(super) key: Option<AuditPublicKey>,
    pub(super) pin: Option<KeyPin>,
    pub(super) trust_domain: Option<String>,
}

pub(super) fn trust(
    pin: Option<&str>,
    pki: Option<&Deployment>,
    trust_domain: Option<&str>,
) -> Result<Trust, AuditCmdError> {
    if let (Some(deployment), None) = (pki, pin) {
        // With the deployment secret set, the bundle's public half (the audit key among it) is
        // authenticated by the seal; a wrong secret is an error, not a silent fallback.
        let bundle = deployment.open().map_err(pki_usage)?;
        if !bundle.authenticated {
            crate::errln!(
                "warning: the PKI bundle's public half is not authenticated (no {DEPLOYMENT_SECRET_ENV}); whoever can write {} chooses the audit key",
                deployment.bundle.display()
            );
        }
        let key = AuditPublicKey::from_spki_der(bundle.public.audit_signing.spki_der())
            .map_err(|e| AuditCmdError::Usage(format!("--pki: audit key: {e}")))?;
        return Ok(Trust {
            pin: Some(key.pin()),
            key: Some(key),
            trust_domain: Some(bundle.public.trust_domain.as_str().to_string()),
        });
    }
    let pin = match pin {
        Some(p) => Some(
            p.parse::<KeyPin>()
                .map_err(|e| AuditCmdError::Usage(format!("--pin: {e}")))?,
        ),
        None => None,
    };
    Ok(Trust {
        key: None,
        pin,
        trust_domain: trust_domain.map(str::to_string),
    })
}

impl Trust {
    /// The key a trail carries (`verifier_key`), checked against the pin; or the pinned key.
    pub(super) fn key_for(
        &self,
        carried: Option<&str>,
    ) -> Result<Option<AuditPublicKey>, AuditCmdError> {
        if let Some(key) = &self.key {
            return Ok(Some(key.clone()));
        }
        let Some(text) = carried else {
            return Ok(None);
        };
        let key = AuditPublicKey::parse_verifier_key(text).map_err(|e| {
            AuditCmdError::Tampered(format!("the trail's verifier key is malformed: {e}"))
        })?;
        if let Some(pin) = &self.pin {
            key.check_pin(pin).map_err(|e| {
                AuditCmdError::Tampered(format!(
                    "checkpoints are not signed by the pinned audit key: {e}"
                ))
            })?;
        }
        Ok(Some(key))
    }

    /// The origin to verify under: from the trust domain when known, else the one the trail
    /// states, which must at least name the tenant.
    pub(super) fn origin_for(
        &self,
        tenant: &str,
        stated: Option<&str>,
    ) -> Result<String, AuditCmdError> {
        match &self.trust_domain {
            Some(td) => audit_origin(td, tenant).map_err(|e| AuditCmdError::Usage(e.to_string())),
            None => {
                let suffix = format!("/audit/{tenant}");
                match stated {
                    Some(o) if o.ends_with(&suffix) && o.len() > suffix.len() => Ok(o.to_string()),
                    Some(o) => Err(AuditCmdError::Tampered(format!(
                        "the trail's origin {o:?} is not a log of tenant {tenant}"
                    ))),
                    None => Ok(format!("unknown{suffix}")),
                }
            }
        }
    }
}
