//! The `discovery` attestor, pure (spec 000 "discovery"): one test per refusal reason, in the
//! attestor's order, each with its exact reason (and, once the token matched, its tenant).

use domain::attest::discovery::{assertion_subject, DiscoveryRefusal, MAX_ASSERTION_AGE_MS};
use domain::identity::{unix_us, NodeStatus, TokenRole};
use domain::pki::{KeyRole, NodeRole, PrivateKey};

use crate::discovery_support::*;

#[test]
fn discovery_refuses_malformed_evidence() {
    let w = world();
    let want = text(DiscoveryRefusal::Malformed);
    assert_eq!(
        w.run_with(b"\xff\xff", Some(&w.secret)).unwrap_err().text(),
        want
    );
    let mut short = w.signed();
    short.signature.truncate(10);
    assert_eq!(
        w.run_with(&short.to_bytes(), Some(&w.secret))
            .unwrap_err()
            .text(),
        want
    );
    let mut w2 = world();
    w2.assertion.mac = "not a mac".into();
    assert_eq!(w2.refused(), want);
    let mut w3 = world();
    w3.assertion.signer_node_id.clear();
    assert_eq!(w3.refused(), want);
    // Malformed goes before the token, and to the root tenant.
    let r = w.run_with(b"junk", None).unwrap_err();
    assert_eq!((r.text(), r.tenant_id), (want, None));
}

#[test]
fn discovery_refuses_without_an_opened_token() {
    let w = world();
    let r = w.run_with(&w.signed().to_bytes(), None).unwrap_err();
    assert_eq!(r.text(), text(DiscoveryRefusal::TokenDoesNotOpen));
    assert_eq!(r.tenant_id, None);
}

#[test]
fn discovery_refuses_an_unknown_token() {
    let mut w = world();
    w.facts.tokens.clear();
    let r = w.run().unwrap_err();
    assert_eq!(r.text(), text(DiscoveryRefusal::UnknownToken));
    assert_eq!(r.tenant_id, None);
}

#[test]
fn discovery_refuses_a_revoked_token_in_its_tenant() {
    let mut w = world();
    w.token().revoked = true;
    let r = w.run().unwrap_err();
    assert_eq!(r.text(), text(DiscoveryRefusal::Revoked));
    assert_eq!(r.tenant_id.as_deref(), Some("acme"));
    assert_eq!(r.token_id.as_deref(), Some("tok_d1"));
}

#[test]
fn discovery_refuses_an_expired_token() {
    let mut w = world();
    let now = unix_us(w.now);
    w.token().expires_at_us = now;
    assert_eq!(w.refused(), text(DiscoveryRefusal::Expired));
}

#[test]
fn discovery_refuses_a_token_of_another_role() {
    for role in [TokenRole::Node, TokenRole::Provisioned, TokenRole::Site] {
        let mut w = world();
        w.token().role = role;
        assert_eq!(
            w.refused(),
            text(DiscoveryRefusal::WrongTokenRole),
            "{role:?}"
        );
    }
}

#[test]
fn discovery_refuses_a_token_without_exactly_one_use() {
    for left in [0, 2] {
        let mut w = world();
        w.token().uses_left = left;
        w.token().uses_total = 2;
        assert_eq!(w.refused(), text(DiscoveryRefusal::NotSingleUse));
    }
}

#[test]
fn discovery_refuses_a_token_of_another_site() {
    let mut w = world();
    w.token().site_id = "par1".into();
    assert_eq!(w.refused(), text(DiscoveryRefusal::WrongSite));
}

#[test]
fn discovery_refuses_a_token_bound_to_another_mac() {
    let mut w = world();
    w.token().expect.mac = Some("aa:bb:cc:dd:ee:02".into());
    assert_eq!(w.refused(), text(DiscoveryRefusal::MacMismatch));
    // No expect.mac: nothing to compare.
    w.token().expect.mac = None;
    assert!(w.run().is_ok());
}

#[test]
fn discovery_refuses_an_unknown_signer() {
    let mut w = world();
    w.facts.nodes.clear();
    assert_eq!(w.refused(), text(DiscoveryRefusal::UnknownSigner));
}

#[test]
fn discovery_refuses_a_signer_that_is_no_site_agent_of_the_site() {
    let mut w = world();
    w.signer().role = NodeRole::Node;
    assert_eq!(w.refused(), text(DiscoveryRefusal::SignerNotSite));
    let mut w = world();
    w.signer().site_id = "par1".into();
    assert_eq!(w.refused(), text(DiscoveryRefusal::SignerNotSite));
}

#[test]
fn discovery_refuses_a_retired_signer() {
    for status in [NodeStatus::Retired, NodeStatus::Deleted] {
        let mut w = world();
        w.signer().status = status;
        assert_eq!(w.refused(), text(DiscoveryRefusal::SignerRetired));
    }
}

#[test]
fn discovery_refuses_a_signer_certificate_that_is_not_its_current_stored_one() {
    let want = text(DiscoveryRefusal::SignerCertificate);
    let cases: Vec<(&str, Change)> = vec![
        ("no row", Box::new(|w| w.facts.certificates.clear())),
        ("other bytes", Box::new(|w| w.signer_cert().der.push(0))),
        ("revoked", Box::new(|w| w.signer_cert().revoked = true)),
        (
            "expired",
            Box::new(|w| {
                let now = unix_us(w.now);
                w.signer_cert().not_after_us = now;
            }),
        ),
        (
            "older generation",
            Box::new(|w| w.signer().identity_generation = 2),
        ),
        (
            "another node's row",
            Box::new(|w| w.signer_cert().node_id = "node_other".into()),
        ),
        (
            "not a certificate",
            Box::new(|w| w.site_cert = b"not a certificate".to_vec()),
        ),
    ];
    for (what, change) in cases {
        let mut w = world();
        change(&mut w);
        assert_eq!(w.refused(), want, "{what}");
    }
}

#[test]
fn discovery_refuses_a_signature_by_another_key() {
    let mut w = world();
    w.site_key = PrivateKey::generate(KeyRole::Node).unwrap();
    assert_eq!(w.refused(), text(DiscoveryRefusal::Signature));
    // Bytes changed after signing.
    let w = world();
    let mut signed = w.signed();
    let mut other = w.assertion.clone();
    other.ip = "10.0.0.8".into();
    signed.assertion = prost::Message::encode_to_vec(&other);
    assert_eq!(
        w.run_with(&signed.to_bytes(), Some(&w.secret))
            .unwrap_err()
            .text(),
        text(DiscoveryRefusal::Signature)
    );
}

#[test]
fn discovery_refuses_a_signer_not_holding_the_lease_at_the_epoch() {
    let want = text(DiscoveryRefusal::NotLeaseHolder);
    let cases: Vec<(&str, Change)> = vec![
        (
            "another holder",
            Box::new(|w| w.lease().holder_node_id = Some("node_b".into())),
        ),
        ("a later epoch (fenced)", Box::new(|w| w.lease().epoch = 5)),
        (
            "lapsed",
            Box::new(|w| {
                let now = unix_us(w.now);
                w.lease().expires_at_us = now;
            }),
        ),
        ("released", Box::new(|w| w.lease().holder_node_id = None)),
        ("never held", Box::new(|w| w.facts.site_leases.clear())),
    ];
    for (what, change) in cases {
        let mut w = world();
        change(&mut w);
        assert_eq!(w.refused(), want, "{what}");
    }
}

#[test]
fn discovery_refuses_an_expired_assertion() {
    let mut w = world();
    w.assertion.not_after_ms = ms(w.now);
    assert_eq!(w.refused(), text(DiscoveryRefusal::AssertionExpired));
}

#[test]
fn discovery_caps_an_assertion_at_fifteen_minutes_after_issue() {
    let mut w = world();
    let issued = ms(w.now) - MAX_ASSERTION_AGE_MS;
    w.assertion.issued_at_ms = issued;
    w.assertion.not_after_ms = issued + 3_600_000;
    assert_eq!(w.refused(), text(DiscoveryRefusal::AssertionExpired));
    w.assertion.issued_at_ms = issued + 1;
    let r = w.run().unwrap();
    assert_eq!(
        r.single_use[0].expires_at_us,
        Some((issued + 1 + MAX_ASSERTION_AGE_MS) * 1000)
    );
}

#[test]
fn discovery_refuses_an_assertion_from_the_future() {
    let mut w = world();
    let now = ms(w.now);
    w.assertion.issued_at_ms = now + 60_001;
    w.assertion.not_after_ms = now + 600_000;
    assert_eq!(w.refused(), text(DiscoveryRefusal::AssertionNotYetValid));
    // Up to 60 s ahead is clock skew, admitted.
    w.assertion.issued_at_ms = now + 60_000;
    assert!(w.run().is_ok());
}

#[test]
fn discovery_refuses_a_machine_not_claiming_the_mac() {
    let mut w = world();
    w.claims.macs = vec!["aa:bb:cc:dd:ee:02".into()];
    assert_eq!(w.refused(), text(DiscoveryRefusal::MacNotClaimed));
}

#[test]
fn discovery_refuses_a_machine_with_another_product_uuid() {
    let mut w = world();
    w.claims.product_uuid = Some("00000000-0000-0000-0000-000000000000".into());
    assert_eq!(w.refused(), text(DiscoveryRefusal::ProductUuidMismatch));
    w.claims.product_uuid = None;
    assert_eq!(w.refused(), text(DiscoveryRefusal::ProductUuidMismatch));
    // An assertion that names none asks for none.
    w.assertion.product_uuid.clear();
    assert!(w.run().is_ok());
}

#[test]
fn discovery_refuses_a_reused_assertion() {
    let mut w = world();
    let subject = assertion_subject(&w.signed());
    w.facts.uses.insert(("discovery".into(), subject));
    let r = w.run().unwrap_err();
    assert_eq!(r.text(), text(DiscoveryRefusal::AssertionReused));
    assert_eq!(r.tenant_id.as_deref(), Some("acme"));
}

#[test]
fn discovery_has_one_test_per_reason() {
    // The tests of this file cover every reason of DiscoveryRefusal::ALL, in its order.
    assert_eq!(DiscoveryRefusal::ALL.len(), 20);
}
