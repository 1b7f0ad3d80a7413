//! The `provisioned` attestor (spec 000 "provisioned"): an installed system joins with the
//! single-use token its deploy rendered into the machine's user data.
//!
//! [`ProvisionedAttestor::plan`] needs the opened token (none: `provisioned:token-does-not-open`)
//! and asks for its row and the CSR key's earlier use. The node the token was minted for
//! (`for_node_id`) is only known once the row is loaded: the shell loads the nodes a loaded
//! token names into [`Facts::nodes`] (see `load_facts` in `commands::identity`).
//!
//! [`ProvisionedAttestor::verify`] checks, each with its own reason: the secret
//! (`unknown-token`), `revoked`, `expired`, the CSR key's earlier use (`csr-key-used`), the
//! token's role (`wrong-token-role`: only a provisioned token), exactly one use left
//! (`not-single-use`: a token minted for several machines is never a machine credential), a
//! product UUID claim (`no-product-uuid`), a binding to one machine (`unbound`: the token's
//! `expect.product_uuid` or its target node), the claim against that binding
//! (`product-uuid-mismatch`), and the target itself (`unknown-target`: missing, deleted or
//! retired). With a target the result re-keys that node in place (`reclaim_node_id`); without
//! one the machine joins as a new node. The token use is spent by the admission step.

use super::contract::{
    ApprovalAsk, AttestRequest, AttestationResult, Attestor, AttestorRefusal, FactKey, Facts,
    NodeKeyStatement, Planned, SingleUse, Verdict,
};
use crate::identity::{sha256, unix_us, NodeStatus, TokenRole, TokenState};
use crate::pki::NodeRole;

/// The attestor id.
pub const PROVISIONED_ATTESTOR: &str = events::schema::attestor_ids::PROVISIONED;

/// The reason a second join with the same CSR key is refused with.
pub const PROVISIONED_CSR_KEY_USED: &str = "csr-key-used";

/// Why a provisioned join was refused: one variant per reason, [`ProvisionedRefusal::reason`]
/// is the text after `provisioned:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProvisionedRefusal {
    /// The request carried no sealed token, or it did not open for this CSR.
    TokenDoesNotOpen,
    /// No token has this secret.
    UnknownToken,
    /// The token was revoked.
    Revoked,
    /// The token expired.
    Expired,
    /// The CSR's key already joined with this attestor while the token lives.
    CsrKeyUsed,
    /// The token is not of role provisioned.
    WrongTokenRole,
    /// The token does not have exactly one use left.
    NotSingleUse,
    /// The machine claimed no product UUID.
    NoProductUuid,
    /// The token names neither an expected product UUID nor a target node.
    Unbound,
    /// The claimed product UUID is not the token's, or not the target node's.
    ProductUuidMismatch,
    /// The target node does not exist, or is deleted or retired.
    UnknownTarget,
}

impl ProvisionedRefusal {
    /// Every reason, for tests and documentation.
    pub const ALL: [ProvisionedRefusal; 11] = [
        ProvisionedRefusal::TokenDoesNotOpen,
        ProvisionedRefusal::UnknownToken,
        ProvisionedRefusal::Revoked,
        ProvisionedRefusal::Expired,
        ProvisionedRefusal::CsrKeyUsed,
        ProvisionedRefusal::WrongTokenRole,
        ProvisionedRefusal::NotSingleUse,
        ProvisionedRefusal::NoProductUuid,
        ProvisionedRefusal::Unbound,
        ProvisionedRefusal::ProductUuidMismatch,
        ProvisionedRefusal::UnknownTarget,
    ];

    /// The reason, kebab-case.
    pub fn reason(self) -> &'static str {
        match self {
            ProvisionedRefusal::TokenDoesNotOpen => "token-does-not-open",
            ProvisionedRefusal::UnknownToken => "unknown-token",
            ProvisionedRefusal::Revoked => "revoked",
            ProvisionedRefusal::Expired => "expired",
            ProvisionedRefusal::CsrKeyUsed => PROVISIONED_CSR_KEY_USED,
            ProvisionedRefusal::WrongTokenRole => "wrong-token-role",
            ProvisionedRefusal::NotSingleUse => "not-single-use",
            ProvisionedRefusal::NoProductUuid => "no-product-uuid",
            ProvisionedRefusal::Unbound => "unbound",
            ProvisionedRefusal::ProductUuidMismatch => "product-uuid-mismatch",
            ProvisionedRefusal::UnknownTarget => "unknown-target",
        }
    }

    /// `provisioned:<reason>`, as the `security.join.refused` event records it.
    pub fn text(self) -> String {
        format!("{PROVISIONED_ATTESTOR}:{}", self.reason())
    }

    fn refusal(self) -> AttestorRefusal {
        AttestorRefusal::new(PROVISIONED_ATTESTOR, self.reason())
    }
}

/// The `provisioned` attestor: admits `node` with a single-use provisioned token bound to one
/// machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProvisionedAttestor;

const ROLES: &[NodeRole] = &[NodeRole::Node];

/// SHA-256 of the CSR key's DER SubjectPublicKeyInfo: the `attestation_uses` subject (attestor
/// `provisioned`) that lets one key join once while the token lives.
pub fn provisioned_csr_key_subject(request: &AttestRequest<'_>) -> [u8; 32] {
    sha256(request.csr.spki_der())
}

impl Attestor for ProvisionedAttestor {
    type Plan = ();

    fn id(&self) -> &str {
        PROVISIONED_ATTESTOR
    }

    fn roles(&self) -> &[NodeRole] {
        ROLES
    }

    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<()>, AttestorRefusal> {
        let secret = request
            .token
            .ok_or_else(|| ProvisionedRefusal::TokenDoesNotOpen.refusal())?;
        let keys = vec![
            FactKey::TokenByHash(secret.hash()),
            FactKey::Use {
                attestor: PROVISIONED_ATTESTOR.to_owned(),
                subject: provisioned_csr_key_subject(request),
            },
        ];
        Ok(Planned::new(keys, ()))
    }

    fn verify(&self, request: &AttestRequest<'_>, _plan: &(), facts: &Facts) -> Verdict {
        match verify_provisioned(request, facts) {
            Ok(result) => Verdict::Admit(Box::new(result)),
            Err(refusal) => Verdict::Refuse(refusal),
        }
    }
}

/// The token's target node: the one it was minted for, when it names one (`for_node_id`).
pub fn provisioned_target(token: &TokenState) -> Option<&str> {
    token.for_node_id.as_deref()
}

fn verify_provisioned(
    request: &AttestRequest<'_>,
    facts: &Facts,
) -> Result<AttestationResult, AttestorRefusal> {
    use ProvisionedRefusal as R;
    let secret = request.token.ok_or_else(|| R::TokenDoesNotOpen.refusal())?;
    let token = facts
        .token_by_hash(&secret.hash())
        .filter(|t| t.secret_hash.matches(secret))
        .ok_or_else(|| R::UnknownToken.refusal())?;
    // From here the secret matched: the refusal is the token's tenant's.
    let refuse = |r: ProvisionedRefusal| {
        let refusal = r
            .refusal()
            .in_tenant(&token.tenant_id)
            .with_token(&token.token_id);
        match provisioned_target(token) {
            Some(node) => refusal.with_node(node),
            None => refusal,
        }
    };
    if token.revoked {
        return Err(refuse(R::Revoked));
    }
    if unix_us(request.now) >= token.expires_at_us {
        return Err(refuse(R::Expired));
    }
    let key_subject = provisioned_csr_key_subject(request);
    if facts.used(PROVISIONED_ATTESTOR, &key_subject) {
        return Err(refuse(R::CsrKeyUsed).spent(PROVISIONED_ATTESTOR, &key_subject));
    }
    if token.role != TokenRole::Provisioned {
        return Err(refuse(R::WrongTokenRole));
    }
    if token.uses_left != 1 {
        return Err(refuse(R::NotSingleUse));
    }
    let (Some(claimed), Some(claimed_digest)) = (
        request.claims.product_uuid.as_deref(),
        request.digests.product_uuid,
    ) else {
        return Err(refuse(R::NoProductUuid));
    };
    let target = provisioned_target(token);
    if token.expect.product_uuid.is_none() && target.is_none() {
        return Err(refuse(R::Unbound));
    }
    if let Some(want) = &token.expect.product_uuid {
        if !claimed.trim().eq_ignore_ascii_case(want.trim()) {
            return Err(refuse(R::ProductUuidMismatch));
        }
    }
    if let Some(target) = target {
        let node = facts
            .nodes
            .get(target)
            .filter(|n| n.status == NodeStatus::Active)
            .ok_or_else(|| refuse(R::UnknownTarget))?;
        match node.product_uuid_sha256 {
            Some(recorded) if recorded == claimed_digest => {}
            // A target that recorded no product UUID is bound by the token's expect alone
            // (checked above); with neither, nothing ties the machine to the node.
            None if token.expect.product_uuid.is_some() => {}
            _ => return Err(refuse(R::ProductUuidMismatch)),
        }
    }
    Ok(AttestationResult {
        tenant_id: token.tenant_id.clone(),
        role: request.role,
        site_id: token.site_id.clone(),
        pool_id: token.pool_id.clone(),
        reclaim_node_id: target.map(str::to_owned),
        token: Some(token.clone()),
        bind: Vec::new(),
        single_use: vec![SingleUse {
            attestor: PROVISIONED_ATTESTOR.to_owned(),
            subject: key_subject,
            expires_at_us: Some(token.expires_at_us),
            reason_if_used: PROVISIONED_CSR_KEY_USED.to_owned(),
        }],
        node_key: NodeKeyStatement::Unattested,
        allowed_kinds: Vec::new(),
        approval: token.require_approval.then(|| ApprovalAsk {
            subject: *request.csr.sha256(),
            summary: format!(
                "provisioned token {} asks to join {} in site {} pool {}",
                token.token_id,
                target.map_or_else(|| "a new node".to_owned(), |n| format!("as node {n}")),
                token.site_id,
                token.pool_id
            ),
        }),
    })
}

/// How `provisioned` registers: no configuration (a table for it is refused), no list.
pub const FACTORY: crate::attest::factory::AttestorFactory =
    crate::attest::factory::AttestorFactory {
        id: PROVISIONED_ATTESTOR,
        lists: &[],
        build: |setup| {
            crate::attest::factory::no_table(PROVISIONED_ATTESTOR, setup)?;
            crate::attest::factory::built(ProvisionedAttestor)
        },
    };

#[cfg(test)]
#[path = "provisioned_tests.rs"]
mod tests;
