//! Identity: joins, renewals, revocations and every refusal reason, on Postgres and SQLite.

use crate::identity_support;

use commands::identity::NewToken;
use commands::Clock;
use domain::identity::{ExpectBinding, HardwareClaims};
use domain::pki::{NodeIdentity, TrustDomain};
use events::store::testkit::TestDb;
use identity_support::*;
use projections::identity;

fn claims(uuid: &str, macs: &[&str], hw: &[u8]) -> HardwareClaims {
    HardwareClaims {
        product_uuid: (!uuid.is_empty()).then(|| uuid.to_owned()),
        macs: macs.iter().map(|m| m.to_string()).collect(),
        hardware_key: (!hw.is_empty()).then(|| hw.to_vec()),
    }
}

#[tokio::test]
async fn join_refusals_each_reason() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let created = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let secret = created.secret.clone();

        // bad-csr: the root tenant, no secret matched.
        let agent = Agent::new();
        let mut req = join_request(&f, &agent, &secret, "node", Default::default());
        req.input.csr_der[20] ^= 0xff;
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "root", "join-token:bad-csr").await;
        // The event holds the digest of the CSR as sent, never the CSR or the token.
        let (_, event) = last_join_refusal(&f.store).await;
        assert_eq!(
            event.csr_sha256,
            domain::identity::sha256(&req.input.csr_der).to_vec()
        );
        assert_eq!(event.attestor, "join-token");
        assert!(event.token_id.is_empty() && event.hardware_key_sha256.is_empty());

        // A role the attestor does not list is refused before verify runs: a valid token and a
        // broken CSR still give wrong-role, in the root tenant.
        for role in ["admin", "ramdisk", ""] {
            let mut req = join_request(&f, &agent, &secret, role, Default::default());
            req.input.csr_der[20] ^= 0xff;
            assert_join_denied(f.svc.join(&req).await);
            assert_last_refusal(&f.store, "root", "join-token:wrong-role").await;
        }

        // token-does-not-open: sealed for another CSR.
        let other = Agent::new();
        let mut req = join_request(&f, &agent, &secret, "node", Default::default());
        req.input.csr_der = other.csr.clone();
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "root", "join-token:token-does-not-open").await;

        // unknown-token: a well-formed secret nobody created, in the root tenant.
        let stranger = domain::pki::TokenSecret::generate().unwrap();
        let req = join_request(&f, &agent, stranger.expose(), "node", Default::default());
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "root", "join-token:unknown-token").await;

        // wrong-role: the secret matched, so the token's tenant.
        let req = join_request(&f, &agent, &secret, "site", Default::default());
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "t1", "join-token:wrong-role").await;
        let (_, event) = last_join_refusal(&f.store).await;
        assert_eq!(event.token_id, created.token.token_id);
        assert_eq!(event.csr_sha256, agent.csr_sha256().to_vec());

        // expect binding.
        let bound = f
            .svc
            .create_token(&NewToken {
                expect: ExpectBinding {
                    product_uuid: Some("4C4C4544-0042-3510-8052-B7C04F4E4E01".into()),
                    mac: Some("aa:bb:cc:dd:ee:ff".into()),
                },
                ..token_spec("t1")
            })
            .await
            .unwrap();
        let req = join_request(
            &f,
            &agent,
            &bound.secret,
            "node",
            claims(
                "4c4c4544-0042-3510-8052-000000000000",
                &["aa:bb:cc:dd:ee:ff"],
                b"",
            ),
        );
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "t1", "join:expect-product-uuid").await;
        let req = join_request(
            &f,
            &agent,
            &bound.secret,
            "node",
            claims(
                "4c4c4544-0042-3510-8052-b7c04f4e4e01",
                &["11:22:33:44:55:66"],
                b"",
            ),
        );
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "t1", "join:expect-mac").await;
        // The right machine joins (case-insensitive match).
        let req = join_request(
            &f,
            &agent,
            &bound.secret,
            "node",
            claims(
                "4c4c4544-0042-3510-8052-b7c04f4e4e01",
                &["AA:BB:CC:DD:EE:FF"],
                b"",
            ),
        );
        f.svc.join(&req).await.expect("bound machine joins");

        // no-use-left.
        let single = f
            .svc
            .create_token(&NewToken {
                uses: 1,
                ..token_spec("t2")
            })
            .await
            .unwrap();
        let a = Agent::new();
        f.svc
            .join(&join_request(
                &f,
                &a,
                &single.secret,
                "node",
                Default::default(),
            ))
            .await
            .unwrap();
        let b = Agent::new();
        assert_join_denied(
            f.svc
                .join(&join_request(
                    &f,
                    &b,
                    &single.secret,
                    "node",
                    Default::default(),
                ))
                .await,
        );
        assert_last_refusal(&f.store, "t2", "join-token:no-use-left").await;

        // revoked.
        let revoked = f.svc.create_token(&token_spec("t3")).await.unwrap();
        f.svc
            .revoke_token(&revoked.token.token_id, "leaked")
            .await
            .unwrap();
        let req = join_request(
            &f,
            &Agent::new(),
            &revoked.secret,
            "node",
            Default::default(),
        );
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "t3", "join-token:revoked").await;

        // expired.
        let short = f
            .svc
            .create_token(&NewToken {
                ttl_seconds: 60,
                ..token_spec("t4")
            })
            .await
            .unwrap();
        f.clock.advance_secs(61);
        let req = join_request(&f, &Agent::new(), &short.secret, "node", Default::default());
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "t4", "join-token:expired").await;

        // A claimed hardware key has no power (issue 18): a second machine claiming the same
        // key joins as a node of its own, and nothing is reclaimed.
        let hw = b"ek-public-area-of-machine-7";
        let first = f.svc.create_token(&token_spec("t5")).await.unwrap();
        let m1 = Agent::new();
        let signed = f
            .svc
            .join(&join_request(
                &f,
                &m1,
                &first.secret,
                "node",
                claims("", &[], hw),
            ))
            .await
            .unwrap();
        let joined = open_response(&f, &m1, &signed);
        let m2 = Agent::new();
        let signed = f
            .svc
            .join(&join_request(
                &f,
                &m2,
                &first.secret,
                "node",
                claims("", &[], hw),
            ))
            .await
            .expect("the same claimed key joins as another node");
        let other = open_response(&f, &m2, &signed);
        assert_ne!(other.node_id, joined.node_id);
        assert_eq!(other.identity_generation, 1);
        let detail = f.svc.show_node(&joined.node_id).await.unwrap();
        assert_eq!(detail.node.identity_generation, 1);
        assert!(detail
            .certificates
            .iter()
            .all(|c| c.revoked_at_us.is_none()));

        // reclaim-mismatch: a token that reclaims the node, minted for another pool.
        let elsewhere = f
            .svc
            .create_token(&NewToken {
                uses: 1,
                reclaim_node_id: Some(joined.node_id.clone()),
                pool_id: "pool-2".into(),
                ..token_spec("t5")
            })
            .await
            .unwrap();
        let m3 = Agent::new();
        assert_join_denied(
            f.svc
                .join(&join_request(
                    &f,
                    &m3,
                    &elsewhere.secret,
                    "node",
                    Default::default(),
                ))
                .await,
        );
        assert_last_refusal(&f.store, "t5", "join:reclaim-mismatch").await;
        let (_, event) = last_join_refusal(&f.store).await;
        assert_eq!(event.node_id, joined.node_id);

        // A reclaim token of the same placement re-keys the node in place: same id, a new
        // generation, every older certificate revoked.
        let reclaim = f
            .svc
            .create_token(&NewToken {
                uses: 1,
                reclaim_node_id: Some(joined.node_id.clone()),
                ..token_spec("t5")
            })
            .await
            .unwrap();
        let signed = f
            .svc
            .join(&join_request(
                &f,
                &m3,
                &reclaim.secret,
                "node",
                Default::default(),
            ))
            .await
            .unwrap();
        let again = open_response(&f, &m3, &signed);
        assert_eq!(again.node_id, joined.node_id);
        assert_eq!(again.identity_generation, 2);
        let detail = f.svc.show_node(&joined.node_id).await.unwrap();
        assert_eq!(detail.node.identity_generation, 2);
        assert_eq!(detail.certificates.len(), 2);
        assert!(detail.certificates[0].revoked_at_us.is_some());
        assert!(detail.certificates[1].revoked_at_us.is_none());

        // An unknown attestor is UNSUPPORTED, not a refusal.
        let mut req = join_request(&f, &Agent::new(), &secret, "node", Default::default());
        req.attestor = "tpm".into();
        assert!(matches!(
            f.svc.join(&req).await,
            Err(commands::identity::IdentityError::UnsupportedAttestor(_))
        ));

        // Only the secret's hash is stored.
        let tokens = f.svc.list_tokens(Some("t1")).await.unwrap();
        assert_eq!(tokens.len(), 2);
        let json = serde_json_free(&tokens);
        assert!(!json.contains(&secret[5..]));
    }
}

fn serde_json_free(v: &impl std::fmt::Debug) -> String {
    format!("{v:?}")
}

#[tokio::test]
async fn join_issues_profile_and_openssl_verifies_the_chain() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_agent, body) = join_new(&f, "t1").await;
        assert_eq!(body.trust_domain, TD);
        assert_eq!(body.certificate_chain.len(), 2);
        let leaf = &body.certificate_chain[0];
        let id = NodeIdentity::from_leaf_der(leaf, &TrustDomain::new(TD).unwrap()).unwrap();
        assert_eq!(
            id.spiffe_id.to_string(),
            format!("spiffe://{TD}/site/site-1/node/{}", body.node_id)
        );
        assert_eq!(id.role.as_str(), "node");
        assert!(id.statements.is_empty());
        assert_eq!((id.not_after - id.not_before).whole_hours(), 24);

        // The key set's own root and node CA (not the ones the response carries) verify the
        // leaf.
        let at = f.clock.now_us() / 1_000_000 + 3600;
        openssl_verifies(
            &[leaf.clone(), f.keys.node_ca.cert_der().to_vec()],
            &[f.keys.root_ca.cert_der().to_vec()],
            at,
        );
        let dir = tempfile::tempdir().unwrap();
        let leaf_der = dir.path().join("leaf.der");
        std::fs::write(&leaf_der, leaf).unwrap();
        let text = std::process::Command::new("/usr/bin/openssl")
            .args(["x509", "-inform", "DER", "-noout", "-text", "-in"])
            .arg(&leaf_der)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("OU = bc-role:node"), "{text}");
        assert!(!text.contains("DNS:"), "{text}");

        // What the JoinResponse carries verifies on its own, and so does a renewed certificate
        // with what the RenewResponse carries; the root is the bundle's.
        assert_eq!(body.trust_roots, vec![f.keys.root_ca.cert_der().to_vec()]);
        let now_s = f.clock.now_us() / 1_000_000;
        openssl_verifies(&body.certificate_chain, &body.trust_roots, now_s + 60);
        f.clock.advance_secs(3600);
        let next = Agent::new();
        let renewed = f
            .svc
            .renew(&renew_request(
                &_agent,
                leaf,
                &body.node_id,
                &next,
                now_ms(&f),
            ))
            .await
            .unwrap();
        assert_eq!(renewed.trust_roots, body.trust_roots);
        openssl_verifies(
            &renewed.certificate_chain,
            &renewed.trust_roots,
            now_s + 3600 + 60,
        );
        // And a chain with another CA as intermediate does not.
        let other = domain::pki::KeySet::generate(
            TrustDomain::new(TD).unwrap(),
            f.clock.now(),
            domain::pki::KeySetLifetimes::default(),
        )
        .unwrap();
        let wrong = vec![
            renewed.certificate_chain[0].clone(),
            other.node_ca.cert_der().to_vec(),
        ];
        let verified = std::panic::catch_unwind(|| {
            openssl_verifies(&wrong, &renewed.trust_roots, now_s + 3600 + 60)
        });
        assert!(verified.is_err(), "a foreign intermediate must not verify");
    }
}

#[tokio::test]
async fn join_events_record_the_attestor_the_unattested_key_and_the_claim_digests() {
    use domain::identity::sha256;
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let created = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let agent = Agent::new();
        let hw = b"an EK public area".to_vec();
        let req = join_request(
            &f,
            &agent,
            &created.secret,
            "node",
            claims(
                "4C4C4544-0042-3510-8052-B7C04F4E4E01",
                &["AA:BB:CC:DD:EE:02", "aa:bb:cc:dd:ee:01"],
                &hw,
            ),
        );
        let body = open_response(&f, &agent, &f.svc.join(&req).await.unwrap());
        let all = all_events(&f.store).await;
        let joined = all
            .iter()
            .find(|e| e.event_type == "node.joined")
            .expect("node.joined");
        let p: events::schema::NodeJoined = joined.decode().unwrap();
        assert_eq!(p.node_id, body.node_id);
        assert_eq!(p.attestor, "join-token");
        assert_eq!(p.node_key, "unattested");
        assert_eq!(p.token_id, created.token.token_id);
        assert_eq!(p.csr_sha256, agent.csr_sha256().to_vec());
        assert_eq!(
            p.product_uuid_sha256,
            sha256(b"4c4c4544-0042-3510-8052-b7c04f4e4e01").to_vec()
        );
        assert_eq!(
            p.macs_sha256,
            sha256(b"aa:bb:cc:dd:ee:01\naa:bb:cc:dd:ee:02").to_vec()
        );
        assert_eq!(p.hardware_key_sha256, sha256(&hw).to_vec());
        assert_eq!(p.allowed_kinds, Vec::<String>::new());
        assert_eq!(p.node_key_uri, "");
        // The join's four events are one transaction's (one commit marker on Postgres), in
        // order, with nothing between them: the node's stream, then the token's.
        let at = all
            .iter()
            .position(|e| e.event_type == "node.joined")
            .unwrap();
        let mine = &all[at..at + 4];
        assert_eq!(
            mine.iter()
                .map(|e| e.event_type.as_str())
                .collect::<Vec<_>>(),
            [
                "node.joined",
                "node.certificate.issued",
                "attestation.evidence.used",
                "token.used"
            ]
        );
        assert!(mine.iter().all(|e| e.tx_id == joined.tx_id));
        assert_eq!(mine[3].position, mine[0].position + 3);
        // The CSR key's use is the evidence.used (attestor join-token, until the token's
        // expiry), not a field of token.used any more.
        let used: events::schema::EvidenceUsed = mine[2].decode().unwrap();
        assert_eq!(used.attestor, "join-token");
        assert_eq!(used.node_id, body.node_id);
        assert_eq!(used.expires_at_us, created.token.expires_at_us);
        let token_used: events::schema::JoinTokenUsed = mine[3].decode().unwrap();
        assert!(token_used.csr_key_sha256.is_empty());

        // A refusal with a claimed hardware key records its digest, in the token's tenant once
        // the secret matched: the same key in another CSR, with the same claims (its key joined
        // already; the same request again is answered again, issue 40).
        let same_key = domain::pki::PrivateKey::from_pkcs8_der(
            domain::pki::KeyRole::Node,
            agent.key.pkcs8_der(),
        )
        .unwrap();
        let mut again = req.clone();
        again.input.csr_der = domain::pki::build_csr(&same_key).unwrap();
        again.input.sealed_token = domain::pki::seal_token(
            f.keys.join_encryption.public_key(),
            &domain::pki::TokenSecret::parse(&created.secret).unwrap(),
            &sha256(&again.input.csr_der),
        )
        .unwrap()
        .as_bytes()
        .to_vec();
        assert_join_denied(f.svc.join(&again).await);
        let (tenant, event) = last_join_refusal(&f.store).await;
        assert_eq!(tenant, "t1");
        assert_eq!(event.refusal, "join-token:csr-key-used");
        assert_eq!(event.hardware_key_sha256, sha256(&hw).to_vec());
        assert_eq!(event.csr_sha256, sha256(&again.input.csr_der).to_vec());
    }
}

#[tokio::test]
async fn renewal_keeps_identity_and_refuses_each_reason() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let node = body.node_id.clone();
        let leaf = body.certificate_chain[0].clone();
        let td = TrustDomain::new(TD).unwrap();

        // A renewal keeps node, site, role and trust domain.
        f.clock.advance_secs(3600);
        let next = Agent::new();
        let req = renew_request(&agent, &leaf, &node, &next, now_ms(&f));
        let renewed = f.svc.renew(&req).await.expect("renewal");
        let new_leaf = renewed.certificate_chain[0].clone();
        let old_id = NodeIdentity::from_leaf_der(&leaf, &td).unwrap();
        let new_id = NodeIdentity::from_leaf_der(&new_leaf, &td).unwrap();
        assert_eq!(new_id.spiffe_id, old_id.spiffe_id);
        assert_eq!(new_id.role, old_id.role);
        assert_ne!(new_id.serial, old_id.serial);
        assert_eq!(new_id.public_key, *next.key.public_key());

        // replay: the same captured request again.
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "t1", "renew:replay").await;

        // The old certificate renewing again is a clone: crate::renew_guard.

        // clock-window: a proof 61 s old.
        let n2 = Agent::new();
        let stale = renew_request(&next, &new_leaf, &node, &n2, now_ms(&f) - 61_000);
        assert_renew_denied(f.svc.renew(&stale).await);
        assert_last_refusal(&f.store, "t1", "renew:clock-window").await;

        // bad-proof: signed by another key.
        let thief = Agent::new();
        let forged = renew_request(&thief, &new_leaf, &node, &n2, now_ms(&f));
        assert_renew_denied(f.svc.renew(&forged).await);
        assert_last_refusal(&f.store, "t1", "renew:bad-proof").await;

        // bad-csr.
        let mut bad = renew_request(&next, &new_leaf, &node, &n2, now_ms(&f));
        bad.csr_der[30] ^= 0x01;
        assert_renew_denied(f.svc.renew(&bad).await);
        assert_last_refusal(&f.store, "root", "renew:bad-csr").await;
        // The event names the node and serial the leaf claims, and the CSR as sent.
        let (_, event) = last_renew_refusal(&f.store).await;
        assert_eq!(event.node_id, node);
        assert_eq!(event.serial, new_id.serial.to_hex());
        assert_eq!(
            event.csr_sha256,
            domain::identity::sha256(&bad.csr_der).to_vec()
        );

        // bad-proof: a valid proof for another CSR (the proof binds the CSR's SHA-256).
        let mut swapped = renew_request(&next, &new_leaf, &node, &n2, now_ms(&f));
        swapped.csr_der = Agent::new().csr;
        assert_renew_denied(f.svc.renew(&swapped).await);
        assert_last_refusal(&f.store, "t1", "renew:bad-proof").await;
        let (_, event) = last_renew_refusal(&f.store).await;
        assert_eq!(
            (event.node_id.as_str(), event.serial.clone()),
            (node.as_str(), new_id.serial.to_hex())
        );

        // bad-certificate: no chain.
        let mut none = renew_request(&next, &new_leaf, &node, &n2, now_ms(&f));
        none.chain.clear();
        assert_renew_denied(f.svc.renew(&none).await);
        assert_last_refusal(&f.store, "root", "renew:bad-certificate").await;

        // certificate-mismatch: same serial and identity, not byte for byte the stored one.
        let mut altered = new_leaf.clone();
        let last = altered.len() - 1;
        altered[last] ^= 0x01; // inside the CA signature
        NodeIdentity::from_leaf_der(&altered, &td).expect("still parses");
        let req = renew_request(&next, &altered, &node, &n2, now_ms(&f));
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "root", "renew:certificate-mismatch").await;

        // unknown-certificate: a certificate of our CA that was never recorded.
        let rogue = {
            use domain::pki::{
                issue_node_certificate, NodeCertificateDecision, NodeId, NodeRole, Serial, SiteId,
                SpiffeId, VerifiedCsr,
            };
            let csr = VerifiedCsr::verify(&thief.csr).unwrap();
            issue_node_certificate(
                &f.keys.node_ca,
                &csr,
                &NodeCertificateDecision {
                    spiffe_id: SpiffeId::new(
                        td.clone(),
                        SiteId::new("site-1").unwrap(),
                        NodeId::new(&node).unwrap(),
                    ),
                    role: NodeRole::Node,
                    serial: Serial::generate().unwrap(),
                    requested_lifetime: None,
                    statements: vec![],
                },
                f.clock.now(),
            )
            .unwrap()
            .der
        };
        let req = renew_request(&thief, &rogue, &node, &n2, now_ms(&f));
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "root", "renew:unknown-certificate").await;

        // expired: 25 h later nothing renews.
        f.clock.advance_secs(25 * 3600);
        let req = renew_request(&next, &new_leaf, &node, &n2, now_ms(&f));
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "t1", "renew:expired").await;
    }
}

#[tokio::test]
async fn revocation_raises_generation_and_old_certificates_never_renew() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let node = body.node_id.clone();
        let leaf = body.certificate_chain[0].clone();

        // old-generation: after revokeIdentity the node is at generation 2.
        let view = f.svc.revoke_identity(&node, "compromised").await.unwrap();
        assert_eq!(view.identity_generation, 2);
        let detail = f.svc.show_node(&node).await.unwrap();
        assert_eq!(detail.certificates.len(), 1);
        assert!(detail
            .certificates
            .iter()
            .all(|c| c.revoked_at_us == Some(f.clock.now_us())
                && c.revoke_reason.as_deref() == Some("identity revoked: compromised")));
        let req = renew_request(&agent, &leaf, &node, &Agent::new(), now_ms(&f));
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "t1", "renew:old-generation").await;

        // revoked: retiring a node revokes its current-generation certificate.
        let (a2, b2) = join_new(&f, "t1").await;
        let retired = f
            .svc
            .retire_node(&b2.node_id, "decommissioned")
            .await
            .unwrap();
        assert_eq!(retired.status, "retired");
        assert_eq!(retired.status_reason.as_deref(), Some("decommissioned"));
        let certs = f.svc.show_node(&b2.node_id).await.unwrap().certificates;
        assert_eq!(
            certs[0].revoke_reason.as_deref(),
            Some("node retired: decommissioned")
        );
        let req = renew_request(
            &a2,
            &b2.certificate_chain[0],
            &b2.node_id,
            &Agent::new(),
            now_ms(&f),
        );
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "t1", "renew:revoked").await;

        // delete: revoked too, and the node is gone from active use; its hardware key may
        // join again (as a new node) with a token that does not allow reclaim.
        let hw = b"the deleted machine's EK".to_vec();
        let token = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let a3 = Agent::new();
        let signed = f
            .svc
            .join(&join_request(
                &f,
                &a3,
                &token.secret,
                "node",
                claims("", &[], &hw),
            ))
            .await
            .unwrap();
        let b3 = open_response(&f, &a3, &signed);
        let deleted = f.svc.delete_node(&b3.node_id, "gone").await.unwrap();
        assert_eq!(deleted.status, "deleted");
        let certs = f.svc.show_node(&b3.node_id).await.unwrap().certificates;
        assert_eq!(
            certs[0].revoke_reason.as_deref(),
            Some("node deleted: gone")
        );
        let req = renew_request(
            &a3,
            &b3.certificate_chain[0],
            &b3.node_id,
            &Agent::new(),
            now_ms(&f),
        );
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "t1", "renew:revoked").await;
        assert!(matches!(
            f.svc.delete_node(&b3.node_id, "again").await,
            Err(commands::identity::IdentityError::Admin(_))
        ));
        let again = Agent::new();
        let signed = f
            .svc
            .join(&join_request(
                &f,
                &again,
                &token.secret,
                "node",
                claims("", &[], &hw),
            ))
            .await
            .expect("a deleted node's hardware key joins again");
        let rejoined = open_response(&f, &again, &signed);
        assert_ne!(
            rejoined.node_id, b3.node_id,
            "a new node, not the deleted one"
        );
        let nodes = f.svc.list_nodes(Some("t1")).await.unwrap();
        assert_eq!(nodes.len(), 4);
    }
}

#[tokio::test]
async fn refusals_over_sixty_a_minute_are_counted_not_lost() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let agent = Agent::new();
        let stranger = domain::pki::TokenSecret::generate().unwrap();
        let req = join_request(&f, &agent, stranger.expose(), "node", Default::default());
        for _ in 0..61 {
            assert_join_denied(f.svc.join(&req).await);
        }
        let recorded = refusals(&f.store).await;
        assert_eq!(recorded.len(), 60, "the 61st is not an event of its own");
        // The minute ends; the suppressed count is written as one event.
        f.clock.advance_secs(60);
        assert_eq!(f.svc.flush_suppressed_refusals().await.unwrap(), 1);
        let suppressed: Vec<_> = all_events(&f.store)
            .await
            .into_iter()
            .filter(|e| e.event_type == "security.refusals.suppressed")
            .map(|e| e.decode::<events::schema::RefusalsSuppressed>().unwrap())
            .collect();
        assert_eq!(suppressed.len(), 1);
        assert_eq!(suppressed[0].count, 1);
        assert_eq!(suppressed[0].refusal, "join-token:unknown-token");
        // The bound is per (attestor, reason): another reason in the same minute is recorded.
        let mut bad = join_request(&f, &agent, stranger.expose(), "node", Default::default());
        bad.input.csr_der[20] ^= 0xff;
        assert_join_denied(f.svc.join(&bad).await);
        assert_last_refusal(&f.store, "root", "join-token:bad-csr").await;
        assert_eq!(refusals(&f.store).await.len(), 61);
        // A new minute records again.
        assert_join_denied(f.svc.join(&req).await);
        assert_eq!(refusals(&f.store).await.len(), 62);
        let digest_before = projections::digest_tables(&f.store, &identity::tables())
            .await
            .unwrap();
        assert!(!digest_before.is_empty());
    }
}

#[tokio::test]
async fn rebuild_from_the_log_gives_the_same_tables() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let (_a2, b2) = join_new(&f, "t2").await;
        f.clock.advance_secs(600);
        let next = Agent::new();
        let req = renew_request(
            &agent,
            &body.certificate_chain[0],
            &body.node_id,
            &next,
            now_ms(&f),
        );
        f.svc.renew(&req).await.unwrap();
        assert_renew_denied(f.svc.renew(&req).await);
        f.svc.revoke_identity(&b2.node_id, "test").await.unwrap();
        let t = f.svc.create_token(&token_spec("t3")).await.unwrap();
        f.svc.revoke_token(&t.token.token_id, "test").await.unwrap();
        assert_join_denied(
            f.svc
                .join(&join_request(
                    &f,
                    &Agent::new(),
                    &t.secret,
                    "node",
                    Default::default(),
                ))
                .await,
        );
        // Prune the expired renew proof (an event, so the rebuild prunes it too).
        f.clock.advance_secs(121);
        assert_eq!(f.svc.prune_attestation_uses(5000).await.unwrap(), 1);
        f.svc.retire_node(&body.node_id, "test").await.unwrap();

        let tables = identity::tables();
        let inline = projections::digest_tables(&f.store, &tables).await.unwrap();
        let all = identity::all();
        let read = projections::rebuild(&f.store, &all, None, 1000, |_| {})
            .await
            .unwrap();
        assert!(read > 10);
        let rebuilt = projections::digest_tables(&f.store, &tables).await.unwrap();
        assert_eq!(
            inline, rebuilt,
            "rebuilt identity tables differ from the inline ones"
        );
    }
}
