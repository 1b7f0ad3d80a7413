//! [`CloudIidAttestor`] (spec 000 "cloud-iid"): the `cloud-iid` attestor on the attestor
//! contract, in one round.
//!
//! [`Attestor::plan`] parses the evidence (`malformed`), finds the provider's configuration
//! (`unknown-provider`), verifies the document with that provider's verifier (`signature`,
//! `wrong-issuer`, `wrong-audience`, `malformed`) and its age against the request's clock
//! (`document-too-old`, `document-from-future`), then names the registered account
//! ([`FactKey::CloudAccount`]) and the instance's single use ([`FactKey::Use`]).
//! [`Attestor::verify`] repeats the checks (it is pure: nothing carries over from `plan`),
//! then refuses an unregistered account (`unknown-instance`), an account registered for
//! another role (`wrong-role`) and an instance that already joined (`instance-reused`), and
//! admits into the account's tenant, site and pool, naming the instance as a [`SingleUse`]
//! kept forever, so the admission step refuses a second join under concurrency too.

use super::accounts::{cloud_account_key, CLOUD_ACCOUNT_LIST};
use super::config::{CloudIidConfig, CloudIidConfigError};
use super::instance::{CloudIdentity, CLOUD_IID_ATTESTOR};
use super::jwt::MAX_FUTURE_SKEW;
use super::refusal::CloudIidRefusal;
use super::wire::{CloudIidEvidence, CloudProvider};
use super::{aws, azure, gcp, oidc};
use crate::attest::contract::{
    AttestRequest, AttestationResult, Attestor, AttestorRefusal, FactKey, Facts, NodeKeyStatement,
    Planned, SingleUse, Verdict,
};
use crate::identity::{sha256, unix_us};
use crate::pki::encoding::put_lp;
use crate::pki::NodeRole;

/// The reason a second join of one instance is refused with.
pub const INSTANCE_REUSED: &str = "instance-reused";

const ROLES: &[NodeRole] = &[NodeRole::Node];

/// The `attestation_uses` subject of an instance:
/// `sha256(lp(provider) || lp(account) || lp(instance))`.
pub fn cloud_iid_subject(provider: CloudProvider, account: &str, instance: &str) -> [u8; 32] {
    let mut input = Vec::new();
    put_lp(&mut input, provider.as_str().as_bytes());
    put_lp(&mut input, account.as_bytes());
    put_lp(&mut input, instance.as_bytes());
    sha256(&input)
}

/// The `cloud-iid` attestor.
#[derive(Debug, Clone)]
pub struct CloudIidAttestor {
    config: CloudIidConfig,
}

impl CloudIidAttestor {
    /// With the operator's configuration, checked once ([`CloudIidConfig::check`]).
    pub fn new(config: CloudIidConfig) -> Result<CloudIidAttestor, CloudIidConfigError> {
        config.check()?;
        Ok(CloudIidAttestor { config })
    }

    /// Its configuration.
    pub fn config(&self) -> &CloudIidConfig {
        &self.config
    }

    /// Verifies the evidence: the document, its issuer and audience, its age.
    pub fn identify(
        &self,
        evidence: &[u8],
        now: time::OffsetDateTime,
    ) -> Result<CloudIdentity, CloudIidRefusal> {
        let evidence = CloudIidEvidence::from_bytes(evidence).ok_or(CloudIidRefusal::Malformed)?;
        let provider =
            CloudProvider::parse(&evidence.provider).ok_or(CloudIidRefusal::UnknownProvider)?;
        if provider != CloudProvider::Aws && evidence.signature.is_some() {
            return Err(CloudIidRefusal::Malformed);
        }
        let now_us = unix_us(now);
        let unknown = CloudIidRefusal::UnknownProvider;
        let identity = match provider {
            CloudProvider::Aws => {
                let config = self.config.aws.as_ref().ok_or(unknown)?;
                aws::verify(&evidence.document, evidence.signature.as_deref(), config)?
            }
            CloudProvider::Gcp => {
                let config = self.config.gcp.as_ref().ok_or(unknown)?;
                gcp::verify(&evidence.document, config, now_us)?
            }
            CloudProvider::Azure => {
                let config = self.config.azure.as_ref().ok_or(unknown)?;
                azure::verify(&evidence.document, config, now)?
            }
            CloudProvider::Oidc => {
                if self.config.oidc.is_empty() {
                    return Err(unknown);
                }
                oidc::verify(&evidence.document, &self.config.oidc, now_us)?
            }
        };
        let skew_us = i64::try_from(MAX_FUTURE_SKEW.as_micros()).unwrap_or(i64::MAX);
        let max_age_us = i64::try_from(self.config.max_age.as_micros()).unwrap_or(i64::MAX);
        if identity.issued_at_us > now_us.saturating_add(skew_us) {
            return Err(CloudIidRefusal::DocumentFromFuture);
        }
        if provider.ages() && now_us.saturating_sub(identity.issued_at_us) > max_age_us {
            return Err(CloudIidRefusal::DocumentTooOld);
        }
        Ok(identity)
    }

    fn decide(
        &self,
        request: &AttestRequest<'_>,
        id: &CloudIdentity,
        facts: &Facts,
    ) -> Result<AttestationResult, CloudIidRefusal> {
        let key = cloud_account_key(id.provider, &id.account);
        let account = facts
            .entry(&CLOUD_ACCOUNT_LIST, &key)
            .ok_or(CloudIidRefusal::UnknownInstance)?;
        if account.role != Some(request.role) {
            return Err(CloudIidRefusal::WrongRole);
        }
        let subject = cloud_iid_subject(id.provider, &id.account, &id.instance);
        if facts.used(CLOUD_IID_ATTESTOR, &subject) {
            return Err(CloudIidRefusal::InstanceReused);
        }
        Ok(AttestationResult {
            tenant_id: account.tenant_id.clone(),
            role: request.role,
            site_id: account.site_id.clone(),
            pool_id: account.pool_id.clone(),
            reclaim_node_id: None,
            token: None,
            bind: Vec::new(),
            single_use: vec![SingleUse {
                attestor: CLOUD_IID_ATTESTOR.to_owned(),
                subject,
                expires_at_us: None,
                reason_if_used: INSTANCE_REUSED.to_owned(),
            }],
            node_key: NodeKeyStatement::Unattested,
            allowed_kinds: Vec::new(),
            approval: None,
        })
    }
}

impl Attestor for CloudIidAttestor {
    type Plan = CloudIdentity;

    fn id(&self) -> &str {
        CLOUD_IID_ATTESTOR
    }

    fn roles(&self) -> &[NodeRole] {
        ROLES
    }

    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<CloudIdentity>, AttestorRefusal> {
        let id = self
            .identify(request.evidence, request.now)
            .map_err(CloudIidRefusal::refusal)?;
        let keys = vec![
            FactKey::entry(
                &CLOUD_ACCOUNT_LIST,
                &cloud_account_key(id.provider, &id.account),
            ),
            FactKey::Use {
                attestor: CLOUD_IID_ATTESTOR.to_owned(),
                subject: cloud_iid_subject(id.provider, &id.account, &id.instance),
            },
        ];
        Ok(Planned::new(keys, id))
    }

    fn verify(&self, request: &AttestRequest<'_>, plan: &CloudIdentity, facts: &Facts) -> Verdict {
        match self.decide(request, plan, facts) {
            Ok(result) => Verdict::Admit(Box::new(result)),
            // The instance's one join spent: by this request, if its answer was lost.
            Err(refusal @ CloudIidRefusal::InstanceReused) => {
                let subject = cloud_iid_subject(plan.provider, &plan.account, &plan.instance);
                Verdict::Refuse(refusal.refusal().spent(CLOUD_IID_ATTESTOR, &subject))
            }
            Err(refusal) => Verdict::Refuse(refusal.refusal()),
        }
    }
}
