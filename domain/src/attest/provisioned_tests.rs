//! The `provisioned` attestor's unit tests: one per refusal reason, and what an admit names.

use time::OffsetDateTime;

use super::*;
use crate::identity::{
    claims_digests, ClaimsDigests, ExpectBinding, HardwareClaims, NodeState, NodeStatus,
};
use crate::pki::{build_csr, KeyRole, PrivateKey, TokenSecret, VerifiedCsr};

const UUID: &str = "4C4C4544-0042-3510-8052-B4C04F4E3332";
const NODE: &str = "node_target";

struct Fixture {
    csr: VerifiedCsr,
    secret: TokenSecret,
    claims: HardwareClaims,
    digests: ClaimsDigests,
    now: OffsetDateTime,
    token: TokenState,
    node: NodeState,
    with_token: bool,
}

impl Fixture {
    fn new() -> Fixture {
        let key = PrivateKey::generate(KeyRole::Node).expect("key");
        let csr = VerifiedCsr::verify(&build_csr(&key).expect("csr")).expect("verify");
        let secret = TokenSecret::generate().expect("secret");
        let claims = HardwareClaims {
            product_uuid: Some(UUID.to_owned()),
            macs: vec!["52:54:00:12:34:56".into()],
            hardware_key: None,
        };
        let digests = claims_digests(&claims);
        let now = OffsetDateTime::from_unix_timestamp(1_790_000_000).expect("time");
        let token = TokenState {
            token_id: "tok_p".into(),
            tenant_id: "acme".into(),
            site_id: "fra1".into(),
            pool_id: "default".into(),
            role: TokenRole::Provisioned,
            uses_total: 1,
            uses_left: 1,
            expires_at_us: unix_us(now) + 3_600_000_000,
            secret_hash: secret.hash(),
            expect: ExpectBinding::default(),
            allow_reclaim: false,
            reclaim_node_id: None,
            for_node_id: Some(NODE.into()),
            require_approval: false,
            revoked: false,
        };
        let node = NodeState {
            node_id: NODE.into(),
            tenant_id: "acme".into(),
            site_id: "fra1".into(),
            pool_id: "default".into(),
            role: NodeRole::Node,
            status: NodeStatus::Active,
            identity_generation: 3,
            hardware_key_sha256: None,
            product_uuid_sha256: digests.product_uuid,
        };
        Fixture {
            csr,
            secret,
            claims,
            digests,
            now,
            token,
            node,
            with_token: true,
        }
    }

    fn claim(mut self, uuid: Option<&str>) -> Fixture {
        self.claims.product_uuid = uuid.map(str::to_owned);
        self.digests = claims_digests(&self.claims);
        self
    }

    fn facts(&self) -> Facts {
        let mut facts = Facts {
            tokens: vec![self.token.clone()],
            ..Facts::default()
        };
        facts
            .nodes
            .insert(self.node.node_id.clone(), self.node.clone());
        facts
    }

    fn request(&self) -> AttestRequest<'_> {
        AttestRequest {
            role: NodeRole::Node,
            csr: &self.csr,
            claims: &self.claims,
            digests: &self.digests,
            evidence: &[],
            token: self.with_token.then_some(&self.secret),
            now: self.now,
            entropy: &const { crate::attest::Entropy::from_seed([7; 32]) },
        }
    }

    fn verdict_with(&self, facts: &Facts) -> Verdict {
        ProvisionedAttestor.verify(&self.request(), &(), facts)
    }

    fn verdict(&self) -> Verdict {
        self.verdict_with(&self.facts())
    }
}

fn refused(verdict: Verdict) -> AttestorRefusal {
    match verdict {
        Verdict::Refuse(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn admitted(verdict: Verdict) -> AttestationResult {
    match verdict {
        Verdict::Admit(r) => *r,
        other => panic!("expected an admit, got {other:?}"),
    }
}

fn assert_refused(fixture: &Fixture, want: ProvisionedRefusal) {
    let r = refused(fixture.verdict());
    assert_eq!(r.text(), want.text());
    assert_eq!(&*r.attestor, PROVISIONED_ATTESTOR);
    // The secret matched for every reason after unknown-token: the token's tenant's refusal.
    assert_eq!(r.tenant_id.as_deref(), Some("acme"));
    assert_eq!(r.token_id.as_deref(), Some("tok_p"));
}

#[test]
fn id_and_roles() {
    assert_eq!(ProvisionedAttestor.id(), "provisioned");
    assert_eq!(ProvisionedAttestor.roles(), &[NodeRole::Node]);
    let texts: Vec<String> = ProvisionedRefusal::ALL.iter().map(|r| r.text()).collect();
    let mut unique = texts.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), texts.len(), "{texts:?}");
}

#[test]
fn plan_asks_for_the_token_and_the_key_use() {
    let f = Fixture::new();
    let keys = ProvisionedAttestor.plan(&f.request()).expect("plan").facts;
    assert_eq!(
        keys,
        vec![
            FactKey::TokenByHash(f.secret.hash()),
            FactKey::Use {
                attestor: "provisioned".into(),
                subject: sha256(f.csr.spki_der()),
            },
        ]
    );
}

#[test]
fn token_does_not_open() {
    let mut f = Fixture::new();
    f.with_token = false;
    let r = ProvisionedAttestor
        .plan(&f.request())
        .expect_err("no token: refused");
    assert_eq!(r.text(), "provisioned:token-does-not-open");
    assert_eq!(r.tenant_id, None);
    let r = refused(f.verdict());
    assert_eq!(r.text(), "provisioned:token-does-not-open");
}

#[test]
fn unknown_token() {
    let f = Fixture::new();
    let r = refused(f.verdict_with(&Facts::default()));
    assert_eq!(r.text(), "provisioned:unknown-token");
    assert_eq!(r.tenant_id, None, "no secret matched: the root tenant's");
    // A row under the hash whose stored hash does not match the secret is unknown too.
    let mut facts = f.facts();
    facts.tokens[0].secret_hash = TokenSecret::generate().expect("secret").hash();
    assert_eq!(
        refused(f.verdict_with(&facts)).text(),
        "provisioned:unknown-token"
    );
}

#[test]
fn revoked() {
    let mut f = Fixture::new();
    f.token.revoked = true;
    assert_refused(&f, ProvisionedRefusal::Revoked);
}

#[test]
fn expired() {
    let mut f = Fixture::new();
    f.token.expires_at_us = unix_us(f.now);
    assert_refused(&f, ProvisionedRefusal::Expired);
}

#[test]
fn csr_key_used() {
    let f = Fixture::new();
    let mut facts = f.facts();
    facts
        .uses
        .insert(("provisioned".into(), sha256(f.csr.spki_der())));
    let r = refused(f.verdict_with(&facts));
    assert_eq!(r.text(), "provisioned:csr-key-used");
    // A use recorded by another attestor is not this one's.
    let mut facts = f.facts();
    facts
        .uses
        .insert(("join-token".into(), sha256(f.csr.spki_der())));
    admitted(f.verdict_with(&facts));
}

#[test]
fn wrong_token_role() {
    for role in [TokenRole::Node, TokenRole::Site] {
        let mut f = Fixture::new();
        f.token.role = role;
        assert_refused(&f, ProvisionedRefusal::WrongTokenRole);
    }
}

#[test]
fn not_single_use() {
    for (total, left) in [(2, 2), (3, 1), (1, 0)] {
        let mut f = Fixture::new();
        f.token.uses_total = total;
        f.token.uses_left = left;
        if left == 2 {
            assert_refused(&f, ProvisionedRefusal::NotSingleUse);
        } else if left == 0 {
            // The second join with a spent token.
            assert_refused(&f, ProvisionedRefusal::NotSingleUse);
        } else {
            // One use left of several: still exactly one machine's credential.
            admitted(f.verdict());
        }
    }
}

#[test]
fn no_product_uuid() {
    let f = Fixture::new().claim(None);
    assert_refused(&f, ProvisionedRefusal::NoProductUuid);
}

#[test]
fn unbound() {
    let mut f = Fixture::new();
    f.token.for_node_id = None;
    let r = refused(f.verdict());
    assert_eq!(r.text(), "provisioned:unbound");
    assert_eq!(r.tenant_id.as_deref(), Some("acme"));
}

#[test]
fn product_uuid_mismatch_against_the_target() {
    let f = Fixture::new().claim(Some("00000000-0000-0000-0000-000000000001"));
    let r = refused(f.verdict());
    assert_eq!(r.text(), "provisioned:product-uuid-mismatch");
    assert_eq!(r.node_id.as_deref(), Some(NODE));
}

#[test]
fn product_uuid_mismatch_against_the_expect_binding() {
    let mut f = Fixture::new();
    f.token.for_node_id = None;
    f.token.expect.product_uuid = Some("00000000-0000-0000-0000-000000000001".into());
    assert_refused(&f, ProvisionedRefusal::ProductUuidMismatch);
    // Both bindings: each must hold.
    let mut f = Fixture::new();
    f.token.expect.product_uuid = Some("00000000-0000-0000-0000-000000000001".into());
    assert_refused(&f, ProvisionedRefusal::ProductUuidMismatch);
}

#[test]
fn a_target_that_recorded_no_product_uuid() {
    // Nothing ties the machine to the node: refused.
    let mut f = Fixture::new();
    f.node.product_uuid_sha256 = None;
    assert_refused(&f, ProvisionedRefusal::ProductUuidMismatch);
    // The token's expect binding ties it.
    f.token.expect.product_uuid = Some(UUID.to_lowercase());
    let result = admitted(f.verdict());
    assert_eq!(result.reclaim_node_id.as_deref(), Some(NODE));
}

#[test]
fn unknown_target() {
    let f = Fixture::new();
    let mut facts = f.facts();
    facts.nodes.clear();
    let r = refused(f.verdict_with(&facts));
    assert_eq!(r.text(), "provisioned:unknown-target");
    assert_eq!(r.node_id.as_deref(), Some(NODE));
    for status in [NodeStatus::Retired, NodeStatus::Deleted] {
        let mut f = Fixture::new();
        f.node.status = status;
        assert_refused(&f, ProvisionedRefusal::UnknownTarget);
    }
}

#[test]
fn a_token_for_a_node_rekeys_it() {
    let f = Fixture::new();
    let result = admitted(f.verdict());
    assert_eq!(result.tenant_id, "acme");
    assert_eq!(result.site_id, "fra1");
    assert_eq!(result.pool_id, "default");
    assert_eq!(result.role, NodeRole::Node);
    assert_eq!(result.reclaim_node_id.as_deref(), Some(NODE));
    assert_eq!(result.token.as_ref(), Some(&f.token));
    assert_eq!(
        result.single_use,
        vec![SingleUse {
            attestor: "provisioned".into(),
            subject: sha256(f.csr.spki_der()),
            expires_at_us: Some(f.token.expires_at_us),
            reason_if_used: "csr-key-used".into(),
        }]
    );
    assert!(result.bind.is_empty());
    assert_eq!(result.node_key, NodeKeyStatement::Unattested);
    assert_eq!(result.approval, None);
}

#[test]
fn a_token_with_an_expected_uuid_makes_a_new_node() {
    let mut f = Fixture::new();
    f.token.for_node_id = None;
    f.token.expect.product_uuid = Some(format!(" {} ", UUID.to_lowercase()));
    let result = admitted(f.verdict_with(&Facts {
        tokens: vec![f.token.clone()],
        ..Facts::default()
    }));
    assert_eq!(result.reclaim_node_id, None);
    assert_eq!(result.token.map(|t| t.token_id), Some("tok_p".into()));
}

#[test]
fn an_approval_token_asks_for_approval() {
    let mut f = Fixture::new();
    f.token.require_approval = true;
    let result = admitted(f.verdict());
    let ask = result.approval.expect("approval asked");
    assert_eq!(&ask.subject, f.csr.sha256());
    assert!(ask.summary.contains("tok_p"), "{}", ask.summary);
}
