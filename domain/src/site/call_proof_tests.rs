//! One test per call-proof refusal, the admitted proof, and a proof of one call not verifying
//! as another.

use time::{Duration, OffsetDateTime};

use super::*;
use crate::pki::statement::sign;
use crate::pki::{KeyRole, NodeRole, PrivateKey, Serial, SiteId, SpiffeId, TrustDomain};

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

fn ms(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap()
}

fn agent(key: &PrivateKey) -> NodeIdentity {
    NodeIdentity {
        spiffe_id: SpiffeId::new(
            TrustDomain::new("compute.example.com").unwrap(),
            SiteId::new("site-1").unwrap(),
            NodeId::new("node_site").unwrap(),
        ),
        role: NodeRole::Site,
        statements: Vec::new(),
        serial: Serial::generate().unwrap(),
        not_before: t0() - Duration::hours(1),
        not_after: t0() + Duration::hours(23),
        public_key: key.public_key().clone(),
    }
}

/// The agent's signature on `call` at `at`.
fn signed(key: &PrivateKey, call: SiteCall, at: OffsetDateTime) -> (i64, Vec<u8>) {
    let statement = SiteCallStatement {
        node_id: NodeId::new("node_site").unwrap(),
        call,
        client_time_ms: u64::try_from(ms(at)).unwrap(),
    };
    let sig = sign(key, &statement).unwrap();
    (ms(at), sig.as_bytes().to_vec())
}

fn check(
    identity: &NodeIdentity,
    call: SiteCall,
    (time_ms, sig): &(i64, Vec<u8>),
) -> Result<(), SiteCallProofRefusal> {
    let proof = SiteCallProof {
        client_time_ms: *time_ms,
        signature: sig,
    };
    check_site_call(identity, call, proof, t0())
}

#[test]
fn the_agents_own_proof_admits_each_call() {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let id = agent(&key);
    for call in [
        SiteCall::LeaseAcquire,
        SiteCall::LeaseRenew { epoch: 3 },
        SiteCall::LeaseRelease { epoch: 3 },
        SiteCall::boot_token("52:54:00:12:34:56", 3),
    ] {
        let proof = signed(&key, call.clone(), t0());
        assert_eq!(check(&id, call, &proof), Ok(()));
    }
}

#[test]
fn no_proof_is_missing() {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let id = agent(&key);
    assert_eq!(
        check(&id, SiteCall::LeaseAcquire, &(0, Vec::new())),
        Err(SiteCallProofRefusal::Missing)
    );
    assert_eq!(
        check(&id, SiteCall::LeaseAcquire, &(ms(t0()), Vec::new())),
        Err(SiteCallProofRefusal::Missing)
    );
    let (_, sig) = signed(&key, SiteCall::LeaseAcquire, t0());
    assert_eq!(
        check(&id, SiteCall::LeaseAcquire, &(-5, sig)),
        Err(SiteCallProofRefusal::Missing)
    );
}

#[test]
fn another_key_is_a_bad_signature() {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let other = PrivateKey::generate(KeyRole::Node).unwrap();
    let id = agent(&key);
    let proof = signed(&other, SiteCall::LeaseAcquire, t0());
    assert_eq!(
        check(&id, SiteCall::LeaseAcquire, &proof),
        Err(SiteCallProofRefusal::BadSignature)
    );
    assert_eq!(
        check(&id, SiteCall::LeaseAcquire, &(ms(t0()), vec![1, 2, 3])),
        Err(SiteCallProofRefusal::BadSignature)
    );
}

#[test]
fn a_proof_of_one_call_does_not_verify_as_another() {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let id = agent(&key);
    let renew = signed(&key, SiteCall::LeaseRenew { epoch: 3 }, t0());
    let boot = signed(&key, SiteCall::boot_token("52:54:00:12:34:56", 3), t0());
    for (proof, other) in [
        (&renew, SiteCall::LeaseRelease { epoch: 3 }),
        (&renew, SiteCall::LeaseRenew { epoch: 4 }),
        (&renew, SiteCall::LeaseAcquire),
        (&boot, SiteCall::boot_token("52:54:00:12:34:57", 3)),
        (&boot, SiteCall::boot_token("52:54:00:12:34:56", 4)),
    ] {
        assert_eq!(
            check(&id, other, proof),
            Err(SiteCallProofRefusal::BadSignature)
        );
    }
    // The MAC is signed normalized: iPXE's upper case with dashes is the same call.
    assert_eq!(
        check(&id, SiteCall::boot_token("52-54-00-12-34-56", 3), &boot),
        Ok(())
    );
}

#[test]
fn a_proof_outside_the_window_is_refused_for_its_clock() {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let id = agent(&key);
    let edge = signed(&key, SiteCall::LeaseAcquire, t0() - Duration::seconds(60));
    assert_eq!(check(&id, SiteCall::LeaseAcquire, &edge), Ok(()));
    let old = signed(&key, SiteCall::LeaseAcquire, t0() - Duration::seconds(61));
    assert!(matches!(
        check(&id, SiteCall::LeaseAcquire, &old),
        Err(SiteCallProofRefusal::Clock(ClockWindowError::TooOld { .. }))
    ));
    let ahead = signed(&key, SiteCall::LeaseAcquire, t0() + Duration::seconds(61));
    assert!(matches!(
        check(&id, SiteCall::LeaseAcquire, &ahead),
        Err(SiteCallProofRefusal::Clock(
            ClockWindowError::InFuture { .. }
        ))
    ));
}
