//! The `join-token` attestor (spec 000 "join-token") on the attestor contract.
//!
//! The shell opened the sealed token for the CSR before `plan` (a sealed token that does not open
//! is refused `join-token:token-does-not-open` there). [`JoinTokenAttestor::plan`] asks for the
//! token row whose hash is the secret's, the CSR key's earlier use, and the node the token
//! reclaims; [`JoinTokenAttestor::verify`] matches the secret in constant time and checks, in
//! this order: unknown-token, revoked, expired, csr-key-used, no-use-left, wrong-role. Whatever
//! else a token implies (its expect binding, its reclaim rule, the use it spends, an approval) is
//! named in the result and checked by the admission step ([`super::admission`]).

use super::contract::{
    ApprovalAsk, AttestRequest, AttestationResult, Attestor, AttestorRefusal, FactKey, Facts,
    NodeKeyStatement, Planned, SingleUse, Verdict,
};
use crate::identity::{sha256, unix_us, TokenRole, JOIN_TOKEN_ATTESTOR};
use crate::pki::NodeRole;

/// The reason a second use of a CSR key is refused with.
pub const CSR_KEY_USED: &str = "csr-key-used";

/// The `join-token` attestor: admits `node` and `site` with a join token.
#[derive(Debug, Clone, Copy, Default)]
pub struct JoinTokenAttestor;

const ROLES: &[NodeRole] = &[NodeRole::Node, NodeRole::Site];

/// SHA-256 of the CSR key's DER SubjectPublicKeyInfo: the `attestation_uses` subject (attestor
/// `join-token`) that lets one key join once while the token that admitted it lives.
pub fn csr_key_subject(request: &AttestRequest<'_>) -> [u8; 32] {
    sha256(request.csr.spki_der())
}

fn refuse(reason: &str) -> AttestorRefusal {
    AttestorRefusal::new(JOIN_TOKEN_ATTESTOR, reason)
}

impl Attestor for JoinTokenAttestor {
    type Plan = ();

    fn id(&self) -> &str {
        JOIN_TOKEN_ATTESTOR
    }

    fn roles(&self) -> &[NodeRole] {
        ROLES
    }

    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<()>, AttestorRefusal> {
        let secret = request.token.ok_or_else(|| refuse("token-does-not-open"))?;
        let keys = vec![
            FactKey::TokenByHash(secret.hash()),
            FactKey::Use {
                attestor: JOIN_TOKEN_ATTESTOR.to_owned(),
                subject: csr_key_subject(request),
            },
        ];
        Ok(Planned::new(keys, ()))
    }

    fn verify(&self, request: &AttestRequest<'_>, _plan: &(), facts: &Facts) -> Verdict {
        match verify_token(request, facts) {
            Ok(result) => Verdict::Admit(Box::new(result)),
            Err(refusal) => Verdict::Refuse(refusal),
        }
    }
}

fn verify_token(
    request: &AttestRequest<'_>,
    facts: &Facts,
) -> Result<AttestationResult, AttestorRefusal> {
    let secret = request.token.ok_or_else(|| refuse("token-does-not-open"))?;
    let token = facts
        .token_by_hash(&secret.hash())
        .filter(|t| t.secret_hash.matches(secret))
        .ok_or_else(|| refuse("unknown-token"))?;
    // From here the secret matched: the refusal is the token's tenant's.
    let refuse = |reason: &str| {
        refuse(reason)
            .in_tenant(&token.tenant_id)
            .with_token(&token.token_id)
    };
    if token.revoked {
        return Err(refuse("revoked"));
    }
    if unix_us(request.now) >= token.expires_at_us {
        return Err(refuse("expired"));
    }
    // One key joins once while its use is kept (the token's lifetime): a replayed request spends
    // no use and makes no node, whoever relays it.
    let key_subject = csr_key_subject(request);
    if facts.used(JOIN_TOKEN_ATTESTOR, &key_subject) {
        return Err(refuse(CSR_KEY_USED).spent(JOIN_TOKEN_ATTESTOR, &key_subject));
    }
    if token.uses_left == 0 {
        return Err(refuse("no-use-left"));
    }
    // A provisioned token admits through the `provisioned` attestor only, a discovery token
    // through `discovery` only.
    if matches!(token.role, TokenRole::Provisioned | TokenRole::Discovery)
        || request.role != token.role.node_role()
    {
        return Err(refuse("wrong-role"));
    }
    let csr_sha256 = *request.csr.sha256();
    Ok(AttestationResult {
        tenant_id: token.tenant_id.clone(),
        role: request.role,
        site_id: token.site_id.clone(),
        pool_id: token.pool_id.clone(),
        reclaim_node_id: token.reclaim_node_id.clone(),
        token: Some(token.clone()),
        bind: Vec::new(),
        single_use: vec![SingleUse {
            attestor: JOIN_TOKEN_ATTESTOR.to_owned(),
            subject: key_subject,
            expires_at_us: Some(token.expires_at_us),
            reason_if_used: CSR_KEY_USED.to_owned(),
        }],
        node_key: NodeKeyStatement::Unattested,
        allowed_kinds: Vec::new(),
        approval: token.require_approval.then(|| ApprovalAsk {
            subject: csr_sha256,
            summary: format!(
                "join-token {} asks to join {} in site {} pool {}",
                token.token_id,
                request.role.as_str(),
                token.site_id,
                token.pool_id
            ),
        }),
    })
}

/// How `join-token` registers: no configuration (a table for it is refused), no list.
pub const FACTORY: crate::attest::factory::AttestorFactory =
    crate::attest::factory::AttestorFactory {
        id: JOIN_TOKEN_ATTESTOR,
        lists: &[],
        build: |setup| {
            crate::attest::factory::no_table(JOIN_TOKEN_ATTESTOR, setup)?;
            crate::attest::factory::built(JoinTokenAttestor)
        },
    };

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{claims_digests, ExpectBinding, HardwareClaims, TokenState};
    use crate::pki::{build_csr, KeyRole, PrivateKey, TokenSecret, VerifiedCsr};
    use time::OffsetDateTime;

    fn token(secret: &TokenSecret) -> TokenState {
        TokenState {
            token_id: "tok_1".into(),
            tenant_id: "t1".into(),
            site_id: "site-1".into(),
            pool_id: "pool-1".into(),
            role: TokenRole::Node,
            uses_total: 2,
            uses_left: 2,
            expires_at_us: 2_000_000_000_000_000,
            secret_hash: secret.hash(),
            expect: ExpectBinding::default(),
            allow_reclaim: false,
            reclaim_node_id: Some("node_r".into()),
            for_node_id: None,
            require_approval: true,
            revoked: false,
        }
    }

    fn verdict(
        secret: Option<&TokenSecret>,
        role: NodeRole,
        facts: &Facts,
    ) -> Result<Box<AttestationResult>, String> {
        let key = PrivateKey::generate(KeyRole::Node).unwrap();
        let csr = VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap();
        let claims = HardwareClaims::default();
        let digests = claims_digests(&claims);
        let request = AttestRequest {
            role,
            csr: &csr,
            claims: &claims,
            digests: &digests,
            evidence: &[],
            token: secret,
            now: OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap(),
            entropy: &const { crate::attest::Entropy::from_seed([7; 32]) },
        };
        if let Err(r) = JoinTokenAttestor.plan(&request) {
            return Err(r.text());
        }
        let mut facts = facts.clone();
        // The CSR key subject depends on the CSR drawn here: mark it used when asked to.
        let marked = facts
            .uses
            .remove(&(JOIN_TOKEN_ATTESTOR.to_owned(), [0; 32]));
        if marked {
            facts
                .uses
                .insert((JOIN_TOKEN_ATTESTOR.to_owned(), csr_key_subject(&request)));
        }
        match JoinTokenAttestor.verify(&request, &(), &facts) {
            Verdict::Admit(r) => Ok(r),
            Verdict::Refuse(r) => {
                // Only the spent key's refusal names it (a lost answer is answered from it).
                let spent = r.spent.as_ref().map(|s| (s.attestor.as_str(), s.subject));
                let key = (JOIN_TOKEN_ATTESTOR, csr_key_subject(&request));
                assert_eq!(spent, (r.reason == CSR_KEY_USED).then_some(key));
                Err(r.text())
            }
            Verdict::Challenge(_) => Err("challenge".into()),
        }
    }

    #[test]
    fn each_refusal_in_order() {
        let secret = TokenSecret::generate().unwrap();
        let with = |t: TokenState| Facts {
            tokens: vec![t],
            ..Facts::default()
        };
        assert_eq!(
            verdict(None, NodeRole::Node, &Facts::default()).unwrap_err(),
            "join-token:token-does-not-open"
        );
        assert_eq!(
            verdict(Some(&secret), NodeRole::Node, &Facts::default()).unwrap_err(),
            "join-token:unknown-token"
        );
        let mut t = token(&secret);
        t.revoked = true;
        t.expires_at_us = 0;
        assert_eq!(
            verdict(Some(&secret), NodeRole::Node, &with(t.clone())).unwrap_err(),
            "join-token:revoked"
        );
        t.revoked = false;
        assert_eq!(
            verdict(Some(&secret), NodeRole::Node, &with(t)).unwrap_err(),
            "join-token:expired"
        );
        let mut used = with(token(&secret));
        used.uses.insert((JOIN_TOKEN_ATTESTOR.to_owned(), [0; 32]));
        used.tokens[0].uses_left = 0;
        assert_eq!(
            verdict(Some(&secret), NodeRole::Node, &used).unwrap_err(),
            "join-token:csr-key-used"
        );
        let mut t = token(&secret);
        t.uses_left = 0;
        assert_eq!(
            verdict(Some(&secret), NodeRole::Site, &with(t)).unwrap_err(),
            "join-token:no-use-left"
        );
        assert_eq!(
            verdict(Some(&secret), NodeRole::Site, &with(token(&secret))).unwrap_err(),
            "join-token:wrong-role"
        );
        let mut t = token(&secret);
        t.role = TokenRole::Provisioned;
        assert_eq!(
            verdict(Some(&secret), NodeRole::Node, &with(t)).unwrap_err(),
            "join-token:wrong-role"
        );
    }

    #[test]
    fn an_admitted_token_names_its_use_reclaim_and_approval() {
        let secret = TokenSecret::generate().unwrap();
        let facts = Facts {
            tokens: vec![token(&secret)],
            ..Facts::default()
        };
        let r = verdict(Some(&secret), NodeRole::Node, &facts).unwrap();
        assert_eq!(r.tenant_id, "t1");
        assert_eq!(r.reclaim_node_id.as_deref(), Some("node_r"));
        assert_eq!(r.token.as_ref().map(|t| t.token_id.as_str()), Some("tok_1"));
        assert_eq!(r.single_use.len(), 1);
        assert_eq!(r.single_use[0].attestor, "join-token");
        assert_eq!(r.single_use[0].reason_if_used, "csr-key-used");
        assert_eq!(r.single_use[0].expires_at_us, Some(2_000_000_000_000_000));
        assert!(r.approval.is_some());
        assert_eq!(r.node_key, NodeKeyStatement::Unattested);
    }
}
