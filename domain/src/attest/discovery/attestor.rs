//! The `discovery` attestor (spec 000 "discovery") on the attestor contract: a PXE-booted
//! ramdisk joins on its single-use discovery token and its site agent's signed assertion.
//!
//! [`Attestor::plan`] decodes the evidence (`malformed`), needs the opened token
//! (`token-does-not-open`) and names the token row, the signer node, the `node_certs` row of the
//! signer certificate's serial, the site's boot lease, the boot entry the assertion names (when
//! it names one) and the assertion's earlier use. [`Attestor::verify`] checks, each with its own
//! reason ([`DiscoveryRefusal`]): the token's secret, then the assertion's single use (so a
//! replayed command line is refused `assertion-reused`, not by the token it spent), the token (not
//! revoked, not expired, role discovery, exactly one use left, the assertion's site, its
//! `expect.mac`), the signer (a node, a site node of that site, active, presenting its current
//! stored certificate, whose key signed the assertion, holding the boot lease at exactly the
//! asserted epoch), freshness (until the earlier of `not_after` and 15 minutes after
//! `issued_at`, issued at most 60 s ahead of the clock), the machine (it claims the asserted MAC,
//! and the asserted product UUID when there is one).
//!
//! The result joins the token's tenant, site and pool as a `ramdisk`, spends the token, records
//! the assertion as used until its validity ends, limits the certificate to the configured
//! command kinds, and asks an operator's approval as configured.

use super::config::{DiscoveryApproval, DiscoveryConfig};
use super::refusal::DiscoveryRefusal;
use super::wire::{
    assertion_signed_input, normalize_mac, AssertionStatement, DiscoveryAssertion,
    SignedDiscoveryAssertion, DISCOVERY_ATTESTOR, MAX_ASSERTION_AGE_MS,
};
use crate::attest::contract::{
    ApprovalAsk, AttestRequest, AttestationResult, Attestor, AttestorRefusal, FactKey, Facts,
    NodeKeyStatement, Planned, SingleUse, Verdict,
};
use crate::identity::{sha256, unix_us, NodeStatus, TokenRole, TokenState};
use crate::pki::statement::verify;
use crate::pki::{NodeIdentity, NodeRole, Signature, TrustDomain};

/// How far ahead of the JoinService clock an assertion's `issued_at` may be.
pub const MAX_CLOCK_AHEAD_MS: i64 = 60_000;

const ROLES: &[NodeRole] = &[NodeRole::Ramdisk];

/// Evidence that decoded.
#[derive(Debug, Clone)]
pub struct Parsed {
    signed: SignedDiscoveryAssertion,
    assertion: DiscoveryAssertion,
    signature: Signature,
    /// The asserted MAC, normalized.
    mac: String,
}

/// SHA-256 of the assertion's signed input: the `attestation_uses` subject (attestor
/// `discovery`) that lets one signed assertion admit one join, and the approval's key.
pub fn assertion_subject(signed: &SignedDiscoveryAssertion) -> [u8; 32] {
    sha256(&assertion_signed_input(&signed.assertion))
}

/// Until when (unix ms) an assertion vouches: the earlier of its `not_after` and 15 minutes
/// after its `issued_at`.
pub fn assertion_valid_until_ms(assertion: &DiscoveryAssertion) -> i64 {
    assertion
        .not_after_ms
        .min(assertion.issued_at_ms.saturating_add(MAX_ASSERTION_AGE_MS))
}

fn parse(evidence: &[u8]) -> Result<Parsed, DiscoveryRefusal> {
    let malformed = |_| DiscoveryRefusal::Malformed;
    let signed = SignedDiscoveryAssertion::from_bytes(evidence).map_err(malformed)?;
    let assertion = signed.decode_assertion().map_err(malformed)?;
    let signature = signed.signature().map_err(malformed)?;
    let mac = normalize_mac(&assertion.mac).ok_or(DiscoveryRefusal::Malformed)?;
    if assertion.site_id.is_empty()
        || assertion.signer_node_id.is_empty()
        || signed.signer_certificate.is_empty()
    {
        return Err(DiscoveryRefusal::Malformed);
    }
    Ok(Parsed {
        signed,
        assertion,
        signature,
        mac,
    })
}

fn same_uuid(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// The `discovery` attestor: admits `ramdisk` on a discovery token and a site agent's signed
/// assertion.
#[derive(Debug, Clone)]
pub struct DiscoveryAttestor {
    trust_domain: TrustDomain,
    config: DiscoveryConfig,
}

impl DiscoveryAttestor {
    /// The attestor for site agents of `trust_domain`, configured by `config`.
    pub fn new(trust_domain: TrustDomain, config: DiscoveryConfig) -> Self {
        DiscoveryAttestor {
            trust_domain,
            config,
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &DiscoveryConfig {
        &self.config
    }

    fn verify_parsed(
        &self,
        request: &AttestRequest<'_>,
        facts: &Facts,
        p: &Parsed,
    ) -> Result<AttestationResult, AttestorRefusal> {
        use DiscoveryRefusal as R;
        let secret = request.token.ok_or_else(|| R::TokenDoesNotOpen.refusal())?;
        let token = facts
            .token_by_hash(&secret.hash())
            .filter(|t| t.secret_hash.matches(secret))
            .ok_or_else(|| R::UnknownToken.refusal())?;
        // From here the secret matched: the refusal is the token's tenant's.
        let refuse = |r: DiscoveryRefusal| {
            r.refusal()
                .in_tenant(&token.tenant_id)
                .with_token(&token.token_id)
        };
        // A replayed command line is named as what it is before the token it spent says so
        // (`not-single-use`): each signed assertion admits one join.
        let subject = assertion_subject(&p.signed);
        if facts.used(DISCOVERY_ATTESTOR, &subject) {
            return Err(refuse(R::AssertionReused).spent(DISCOVERY_ATTESTOR, &subject));
        }
        check_token(token, p, request).map_err(refuse)?;
        self.check_signer(request, facts, p).map_err(refuse)?;
        let now_ms = unix_us(request.now).div_euclid(1000);
        let valid_until_ms = assertion_valid_until_ms(&p.assertion);
        if now_ms >= valid_until_ms {
            return Err(refuse(R::AssertionExpired));
        }
        if p.assertion.issued_at_ms > now_ms.saturating_add(MAX_CLOCK_AHEAD_MS) {
            return Err(refuse(R::AssertionNotYetValid));
        }
        let claims = request.claims;
        if !claims
            .macs
            .iter()
            .any(|m| normalize_mac(m).as_deref() == Some(p.mac.as_str()))
        {
            return Err(refuse(R::MacNotClaimed));
        }
        if !p.assertion.product_uuid.is_empty() {
            let ok = claims
                .product_uuid
                .as_deref()
                .is_some_and(|got| same_uuid(got, &p.assertion.product_uuid));
            if !ok {
                return Err(refuse(R::ProductUuidMismatch));
            }
        }
        Ok(AttestationResult {
            tenant_id: token.tenant_id.clone(),
            role: NodeRole::Ramdisk,
            site_id: token.site_id.clone(),
            pool_id: token.pool_id.clone(),
            reclaim_node_id: None,
            token: Some(token.clone()),
            bind: Vec::new(),
            single_use: vec![SingleUse {
                attestor: DISCOVERY_ATTESTOR.to_owned(),
                subject,
                expires_at_us: Some(valid_until_ms.saturating_mul(1000)),
                reason_if_used: R::AssertionReused.reason(),
            }],
            node_key: NodeKeyStatement::Unattested,
            allowed_kinds: self.config.allowed_kinds.clone(),
            approval: self.approval(request, facts, p, token, subject),
        })
    }

    /// The signer: a site node of the assertion's site, active, presenting its current stored
    /// certificate, whose key signed the assertion, holding the boot lease at the epoch.
    fn check_signer(
        &self,
        request: &AttestRequest<'_>,
        facts: &Facts,
        p: &Parsed,
    ) -> Result<(), DiscoveryRefusal> {
        use DiscoveryRefusal as R;
        let a = &p.assertion;
        let node = facts.nodes.get(&a.signer_node_id).ok_or(R::UnknownSigner)?;
        if node.role != NodeRole::Site || node.site_id != a.site_id {
            return Err(R::SignerNotSite);
        }
        if node.status != NodeStatus::Active {
            return Err(R::SignerRetired);
        }
        let identity =
            NodeIdentity::from_leaf_der(&p.signed.signer_certificate, &self.trust_domain)
                .map_err(|_| R::SignerCertificate)?;
        let now_us = unix_us(request.now);
        let stored = facts
            .certificates
            .get(&identity.serial.to_hex())
            .filter(|c| {
                c.der == p.signed.signer_certificate
                    && c.node_id == node.node_id
                    && identity.spiffe_id.node.as_str() == node.node_id
                    && !c.revoked
                    && now_us < c.not_after_us
                    && c.identity_generation == node.identity_generation
            });
        if stored.is_none() {
            return Err(R::SignerCertificate);
        }
        let statement = AssertionStatement {
            assertion: &p.signed.assertion,
        };
        verify(&identity.public_key, &statement, &p.signature).map_err(|_| R::Signature)?;
        let held = facts
            .site_leases
            .get(&a.site_id)
            .is_some_and(|l| l.held_by(&node.node_id, a.lease_epoch, now_us));
        if !held {
            return Err(R::NotLeaseHolder);
        }
        Ok(())
    }

    /// The approval the configuration asks for, keyed by the assertion.
    fn approval(
        &self,
        request: &AttestRequest<'_>,
        facts: &Facts,
        p: &Parsed,
        token: &TokenState,
        subject: [u8; 32],
    ) -> Option<ApprovalAsk> {
        let ask = match self.config.approval {
            DiscoveryApproval::Never => false,
            DiscoveryApproval::Always => true,
            DiscoveryApproval::UnknownMachines => !known_machine(request, facts, p),
        };
        let entry = if p.assertion.workflow_id.is_empty() {
            "no boot entry".to_owned()
        } else {
            format!("boot entry {}", p.assertion.workflow_id)
        };
        ask.then(|| ApprovalAsk {
            subject,
            summary: format!(
                "discovery: a ramdisk vouched for by site agent {} ({entry}) asks to join site {} \
                 pool {} with token {}",
                p.assertion.signer_node_id, token.site_id, token.pool_id, token.token_id
            ),
        })
    }
}

/// A machine is known when the assertion's boot entry (of the assertion's site, not removed)
/// names a product UUID and the machine claims exactly it.
fn known_machine(request: &AttestRequest<'_>, facts: &Facts, p: &Parsed) -> bool {
    let Some(entry) = facts.boot_entries.get(&p.assertion.workflow_id) else {
        return false;
    };
    let (Some(want), Some(got)) = (&entry.product_uuid, &request.claims.product_uuid) else {
        return false;
    };
    !entry.removed && entry.site_id == p.assertion.site_id && same_uuid(want, got)
}

/// The token's own checks, after its secret matched.
fn check_token(
    token: &TokenState,
    p: &Parsed,
    request: &AttestRequest<'_>,
) -> Result<(), DiscoveryRefusal> {
    use DiscoveryRefusal as R;
    if token.revoked {
        return Err(R::Revoked);
    }
    if unix_us(request.now) >= token.expires_at_us {
        return Err(R::Expired);
    }
    if token.role != TokenRole::Discovery {
        return Err(R::WrongTokenRole);
    }
    if token.uses_left != 1 {
        return Err(R::NotSingleUse);
    }
    if token.site_id != p.assertion.site_id {
        return Err(R::WrongSite);
    }
    if let Some(want) = &token.expect.mac {
        if normalize_mac(want).as_deref() != Some(p.mac.as_str()) {
            return Err(R::MacMismatch);
        }
    }
    Ok(())
}

impl Attestor for DiscoveryAttestor {
    type Plan = Parsed;

    fn id(&self) -> &str {
        DISCOVERY_ATTESTOR
    }

    fn roles(&self) -> &[NodeRole] {
        ROLES
    }

    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<Parsed>, AttestorRefusal> {
        let p = parse(request.evidence).map_err(DiscoveryRefusal::refusal)?;
        let secret = request
            .token
            .ok_or_else(|| DiscoveryRefusal::TokenDoesNotOpen.refusal())?;
        let mut keys = vec![
            FactKey::TokenByHash(secret.hash()),
            FactKey::Node(p.assertion.signer_node_id.clone()),
        ];
        // A certificate that carries no identity of this trust domain names no row: verify
        // refuses it `signer-certificate`.
        if let Ok(identity) =
            NodeIdentity::from_leaf_der(&p.signed.signer_certificate, &self.trust_domain)
        {
            keys.push(FactKey::Certificate(identity.serial.to_hex()));
        }
        keys.push(FactKey::SiteLease(p.assertion.site_id.clone()));
        if !p.assertion.workflow_id.is_empty() {
            keys.push(FactKey::BootEntry(p.assertion.workflow_id.clone()));
        }
        keys.push(FactKey::Use {
            attestor: DISCOVERY_ATTESTOR.to_owned(),
            subject: assertion_subject(&p.signed),
        });
        Ok(Planned::new(keys, p))
    }

    fn verify(&self, request: &AttestRequest<'_>, plan: &Parsed, facts: &Facts) -> Verdict {
        match self.verify_parsed(request, facts, plan) {
            Ok(result) => Verdict::Admit(Box::new(result)),
            Err(refusal) => Verdict::Refuse(refusal),
        }
    }
}
