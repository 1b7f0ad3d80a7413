//! Pure identity decisions: refusal texts, token decisions and evolve.

use domain::identity::{
    decide_create_token, decide_revoke_identity, evolve_node, evolve_token, AdminRefusal,
    CreateToken, ExpectBinding, IdentityEvent, IdentityRevocation, JoinRefusal, NewestCert,
    RenewRefusal, TokenRole, TokenTargets,
};
use domain::pki::TokenSecret;
use time::OffsetDateTime;

#[test]
fn every_refusal_has_its_own_prefixed_reason() {
    let join: Vec<String> = JoinRefusal::ALL.iter().map(|r| r.reason()).collect();
    let renew: Vec<String> = RenewRefusal::ALL.iter().map(|r| r.reason()).collect();
    assert!(join.iter().all(|r| r.starts_with("join-token:")));
    assert!(renew.iter().all(|r| r.starts_with("renew:")));
    let mut all = join.clone();
    all.extend(renew);
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "reasons are unique");
    assert!(!JoinRefusal::UnknownToken.secret_matched());
    assert!(JoinRefusal::Expired.secret_matched());
}

#[test]
fn create_token_validates_and_evolves() {
    let now = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    let secret = TokenSecret::generate().unwrap();
    let cmd = CreateToken {
        token_id: "tok_1".into(),
        tenant_id: "t1".into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role: TokenRole::Node,
        uses: 2,
        expires_at_us: 1_790_000_060_000_000,
        secret_hash: secret.hash(),
        expect: ExpectBinding::default(),
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
        boot_entry_id: None,
    };
    let events = decide_create_token(&cmd, &TokenTargets::default(), now)
        .unwrap()
        .events;
    let state = events.iter().fold(None, evolve_token).unwrap();
    assert_eq!(state.uses_left, 2);
    assert!(state.secret_hash.matches(&secret));
    assert_eq!(events[0].stream(), "token/tok_1");

    let expired = CreateToken {
        expires_at_us: 1_790_000_000_000_000,
        ..cmd.clone()
    };
    assert!(matches!(
        decide_create_token(&expired, &TokenTargets::default(), now),
        Err(AdminRefusal::Invalid(_))
    ));
    let no_uses = CreateToken { uses: 0, ..cmd };
    assert!(matches!(
        decide_create_token(&no_uses, &TokenTargets::default(), now),
        Err(AdminRefusal::Invalid(_))
    ));
}

#[test]
fn a_discovery_token_is_single_use_names_its_boot_entry_and_expects_a_mac() {
    let now = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    let secret = TokenSecret::generate().unwrap();
    let cmd = CreateToken {
        token_id: "tok_d".into(),
        tenant_id: "t1".into(),
        site_id: "par1".into(),
        pool_id: "pool-1".into(),
        role: TokenRole::Discovery,
        uses: 1,
        expires_at_us: 1_790_000_060_000_000,
        secret_hash: secret.hash(),
        expect: ExpectBinding {
            product_uuid: None,
            mac: Some("aa:bb:cc:dd:ee:ff".into()),
        },
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
        boot_entry_id: Some("boot_1".into()),
    };
    let events = decide_create_token(&cmd, &TokenTargets::default(), now)
        .unwrap()
        .events;
    match events.as_slice() {
        [IdentityEvent::TokenCreated(e)] => {
            assert_eq!((e.role.as_str(), e.uses), ("discovery", 1));
            assert_eq!(e.boot_entry_id, "boot_1");
            assert_eq!(e.expect_mac, "aa:bb:cc:dd:ee:ff");
        }
        other => panic!("events {other:?}"),
    }
    let refused = |c: CreateToken| match decide_create_token(&c, &TokenTargets::default(), now) {
        Err(AdminRefusal::Invalid(why)) => why,
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(
        refused(CreateToken {
            boot_entry_id: None,
            ..cmd.clone()
        }),
        "a discovery token is minted for one boot entry by its site's boot server (bcctl site \
         boot add), never by hand"
    );
    assert_eq!(
        refused(CreateToken {
            uses: 2,
            ..cmd.clone()
        }),
        "a discovery token admits exactly one boot: uses must be 1, not 2"
    );
    assert_eq!(
        refused(CreateToken {
            expect: ExpectBinding::default(),
            ..cmd.clone()
        }),
        "a discovery token must expect its boot entry's MAC"
    );
    assert!(refused(CreateToken {
        require_approval: true,
        ..cmd.clone()
    })
    .starts_with("a discovery token neither reclaims"));
    assert_eq!(
        refused(CreateToken {
            role: TokenRole::Node,
            expect: ExpectBinding::default(),
            ..cmd
        }),
        "a boot entry id applies to role discovery only"
    );
}

#[test]
fn revoking_an_unknown_node_is_not_found() {
    assert_eq!(
        decide_revoke_identity("node_x", None, None, &[], "r"),
        Err(AdminRefusal::UnknownNode("node_x".into()))
    );
    assert!(evolve_node(None, &IdentityEvent::NodeDeleted(Default::default())).is_none());
}

fn active_node() -> domain::identity::NodeState {
    domain::identity::NodeState {
        node_id: "node_a".into(),
        tenant_id: "t1".into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role: "node".parse().unwrap(),
        status: domain::identity::NodeStatus::Active,
        identity_generation: 4,
        hardware_key_sha256: None,
        product_uuid_sha256: None,
    }
}

#[test]
fn a_renew_refusal_names_the_node_tenant_only_once_the_leaf_matched() {
    use domain::identity::renew_refusal_tenant;
    let node = active_node();
    for refusal in RenewRefusal::ALL {
        let unmatched = matches!(
            refusal,
            RenewRefusal::BadCsr
                | RenewRefusal::BadCertificate
                | RenewRefusal::UnknownCertificate
                | RenewRefusal::CertificateMismatch
        );
        let want = if unmatched { None } else { Some("t1") };
        assert_eq!(
            renew_refusal_tenant(refusal, Some(&node)),
            want,
            "{refusal}"
        );
        assert_eq!(renew_refusal_tenant(refusal, None), None, "{refusal}");
    }
}

#[test]
fn a_join_refusal_names_the_token_only_once_its_secret_matched() {
    use domain::identity::{join_refusal_attribution, TokenState};
    let secret = TokenSecret::generate().unwrap();
    let token = TokenState {
        token_id: "tok_1".into(),
        tenant_id: "t1".into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role: TokenRole::Node,
        uses_total: 1,
        uses_left: 1,
        expires_at_us: 0,
        secret_hash: secret.hash(),
        expect: ExpectBinding::default(),
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
        revoked: false,
    };
    for refusal in JoinRefusal::ALL {
        let want = refusal.secret_matched().then_some(("t1", "tok_1"));
        assert_eq!(join_refusal_attribution(refusal, Some(&token)), want);
        assert_eq!(join_refusal_attribution(refusal, None), None);
    }
}

#[test]
fn revoking_an_identity_names_the_serials_it_revokes() {
    let node = active_node();
    let serials = vec!["0a".to_owned(), "0b".to_owned()];
    let events = decide_revoke_identity("node_a", Some(&node), None, &serials, "compromised")
        .unwrap()
        .events;
    let [IdentityEvent::IdentityRevoked(e)] = events.as_slice() else {
        panic!("one node.identity.revoked: {events:?}");
    };
    assert_eq!(e.revoked_serials, serials);
    assert_eq!(e.new_identity_generation, 5);
    assert_eq!(e.reason, "compromised");
}

#[test]
fn an_identity_revoked_already_is_left_as_it_is() {
    let node = active_node();
    let revoked = NewestCert {
        revoked: true,
        identity_generation: node.identity_generation,
    };
    let older = NewestCert {
        revoked: false,
        identity_generation: node.identity_generation - 1,
    };
    let live = NewestCert {
        revoked: false,
        identity_generation: node.identity_generation,
    };
    for newest in [revoked, older] {
        let d = decide_revoke_identity("node_a", Some(&node), Some(&newest), &[], "again").unwrap();
        assert!(d.events.is_empty());
        assert_eq!(d.outcome, IdentityRevocation::AlreadyRevoked);
    }
    // A live newest certificate, or an open one left, or none at all: revoked now.
    for (newest, open) in [
        (Some(live), Vec::new()),
        (Some(revoked), vec!["0a".to_owned()]),
        (None, Vec::new()),
    ] {
        let d =
            decide_revoke_identity("node_a", Some(&node), newest.as_ref(), &open, "now").unwrap();
        assert_eq!(d.outcome, IdentityRevocation::Revoked);
        assert_eq!(d.events.len(), 1);
    }
}
