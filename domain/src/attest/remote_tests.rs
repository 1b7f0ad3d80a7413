//! A remote attestor's verdict at the join's time: expiries, deadlines, tenants, each with its
//! exact error or refusal.

use super::*;
use crate::attest::{AttestationResult, Challenge, NodeKeyStatement, SingleUse};
use crate::identity::{ExpectBinding, TokenRole, TokenState};
use crate::pki::{NodeRole, TokenSecret};

const NOW: i64 = 1_800_000_000_000_000;
const S: i64 = 1_000_000;
const RESERVED: [&str; 2] = [DEPLOYMENT_TENANT, "root"];

fn admit(tenant: &str, expires: Option<i64>) -> Verdict {
    Verdict::Admit(Box::new(AttestationResult {
        tenant_id: tenant.into(),
        role: NodeRole::Node,
        site_id: "site-7".into(),
        pool_id: "racks".into(),
        reclaim_node_id: None,
        token: None,
        bind: Vec::new(),
        single_use: vec![SingleUse {
            attestor: "py".into(),
            subject: [9; 32],
            expires_at_us: expires,
            reason_if_used: "reused".into(),
        }],
        node_key: NodeKeyStatement::Unattested,
        allowed_kinds: Vec::new(),
        approval: None,
    }))
}

fn check(verdict: Verdict) -> Result<Verdict, InvalidRemoteAnswer> {
    check_remote_verdict("py", verdict, NOW, &RESERVED)
}

fn challenge(not_after_us: i64) -> Verdict {
    Verdict::Challenge(Challenge {
        payload: b"n".to_vec(),
        not_after_us,
    })
}

#[test]
fn a_single_use_record_must_expire_after_the_join_and_within_366_days() {
    let now_ms = NOW / 1000;
    assert_eq!(
        check(admit("acme", Some(NOW - S))),
        Err(InvalidRemoteAnswer::UseExpired {
            expires_at_ms: now_ms - 1000,
            now_ms
        })
    );
    assert_eq!(
        check(admit("acme", Some(NOW))),
        Err(InvalidRemoteAnswer::UseExpired {
            expires_at_ms: now_ms,
            now_ms
        })
    );
    let far = NOW + MAX_REMOTE_USE_LIFE_US + 1000;
    assert_eq!(
        check(admit("acme", Some(far))),
        Err(InvalidRemoteAnswer::UseTooFar {
            expires_at_ms: far / 1000,
            now_ms
        })
    );
    for ok in [
        Some(NOW + 1),
        Some(NOW + MAX_REMOTE_USE_LIFE_US),
        None, // kept for good
    ] {
        let v = admit("acme", ok);
        assert_eq!(check(v.clone()), Ok(v));
    }
    let err = check(admit("acme", Some(NOW - S))).unwrap_err().to_string();
    assert!(err.contains("is not after the join's time"), "{err}");
}

#[test]
fn a_challenge_must_end_after_the_join_and_within_15_minutes() {
    let now_ms = NOW / 1000;
    assert_eq!(
        check(challenge(NOW - S)),
        Err(InvalidRemoteAnswer::ChallengeExpired {
            not_after_ms: now_ms - 1000,
            now_ms
        })
    );
    assert!(matches!(
        check(challenge(NOW)),
        Err(InvalidRemoteAnswer::ChallengeExpired { .. })
    ));
    assert!(matches!(
        check(challenge(NOW + MAX_REMOTE_CHALLENGE_LIFE_US + 1)),
        Err(InvalidRemoteAnswer::ChallengeTooFar { .. })
    ));
    assert!(matches!(
        check(challenge(i64::MAX)),
        Err(InvalidRemoteAnswer::ChallengeTooFar { .. })
    ));
    for ok in [NOW + 1, NOW + 60 * S, NOW + MAX_REMOTE_CHALLENGE_LIFE_US] {
        assert_eq!(check(challenge(ok)), Ok(challenge(ok)));
    }
}

#[test]
fn reserved_tenants_are_refused_in_the_root_tenant() {
    for tenant in ["deployment", "root"] {
        let Ok(Verdict::Refuse(r)) = check(admit(tenant, None)) else {
            panic!("{tenant} admitted")
        };
        assert_eq!(r.text(), "join:reserved-tenant");
        assert_eq!(r.tenant_id, None);
    }
    // The configured root tenant is the reserved one.
    assert_eq!(reserved_tenants("ops"), ["deployment", "ops"]);
    let v = admit("root", None);
    assert_eq!(
        check_remote_verdict("py", v.clone(), NOW, &reserved_tenants("ops")),
        Ok(v)
    );
    // Other names, however close, are tenants like any.
    for tenant in ["Deployment", "root2", "acme"] {
        assert!(matches!(check(admit(tenant, None)), Ok(Verdict::Admit(_))));
    }
}

#[test]
fn a_remote_refusal_is_recorded_in_the_root_tenant() {
    let r = AttestorRefusal::new("join", "node-key-statement").in_tenant("deployment");
    assert_eq!(
        check(Verdict::Refuse(r)),
        Ok(Verdict::Refuse(AttestorRefusal::new(
            "join",
            "node-key-statement"
        )))
    );
}

#[test]
fn a_token_or_another_attestors_record_is_invalid() {
    let Verdict::Admit(mut r) = admit("acme", None) else {
        unreachable!()
    };
    r.single_use[0].attestor = "join-token".into();
    assert_eq!(
        check(Verdict::Admit(r.clone())),
        Err(InvalidRemoteAnswer::ForeignUse {
            found: "join-token".into(),
            expected: "py".into()
        })
    );
    r.single_use.clear();
    r.token = Some(TokenState {
        token_id: "tok_1".into(),
        tenant_id: "acme".into(),
        site_id: "site-7".into(),
        pool_id: "racks".into(),
        role: TokenRole::Node,
        uses_total: 1,
        uses_left: 1,
        expires_at_us: NOW + S,
        secret_hash: TokenSecret::generate().unwrap().hash(),
        expect: ExpectBinding::default(),
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
        revoked: false,
    });
    assert_eq!(
        check(Verdict::Admit(r)),
        Err(InvalidRemoteAnswer::NamesToken)
    );
}
