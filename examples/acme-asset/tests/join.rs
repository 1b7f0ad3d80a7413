//! acme-asset through the real JoinService (spec 001 "Testing"), on both backends: registered
//! at start next to the built-ins, a vendor-signed asset tag for this CSR joins the asset's
//! tenant, site and pool and binds the node; a reinstall (new key, fresh proof) comes back as
//! the same node; every refusal is ACCESS_DENIED "Join refused" with the exact event reason and
//! tenant.

use std::sync::Arc;

use acme_asset::{vendor_evidence, ASSET_LIST, ID};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use commands::attest::{AttestorEntries, NewEntry};
use commands::identity::attestors::AttestorRegistry;
use commands::identity::{
    IdentityConfig, IdentityError, JoinAnswer, JoinOutcome, JoinRequest, JoinService, JOIN_REFUSED,
};
use commands::{Clock, SimClock};
use domain::identity::{HardwareClaims, JoinInput};
use domain::pki::{build_csr, KeyRole, KeySet, KeySetLifetimes, PrivateKey, TrustDomain};
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore};
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

const TD: &str = "compute.example.com";

struct Fixture {
    _db: TestDb,
    store: EventStore,
    svc: JoinService,
    vendor: EcdsaKeyPair,
}

fn vendor() -> EcdsaKeyPair {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap()
}

async fn fixture(db: TestDb) -> Fixture {
    let store = db.store().await.expect("store");
    let clock = SimClock::new();
    let td = TrustDomain::new(TD).unwrap();
    let keys = Arc::new(
        KeySet::generate(td.clone(), clock.now(), KeySetLifetimes::default()).expect("keys"),
    );
    let vendor = vendor();
    // The asset, in the operator-managed list (`bcctl attestor entry add --list acme-asset`).
    let entry = NewEntry {
        key: "ASSET-0042".into(),
        tenant_id: "acme".into(),
        site_id: "site-1".into(),
        pool_id: "racks".into(),
        actor: "alice".into(),
        ..NewEntry::default()
    };
    AttestorEntries::new(store.clone(), Arc::new(clock.clone()))
        .add(&ASSET_LIST, &entry)
        .await
        .expect("the asset is listed");
    // Registered at start, next to the built-ins, from its configuration table.
    let table = serde_json::json!({
        "vendor_key": URL_SAFE_NO_PAD.encode(vendor.public_key().as_ref()),
    });
    let mut registry = AttestorRegistry::builtin();
    registry
        .register_factory(&acme_asset::FACTORY, Some(&table))
        .expect("a valid table");
    let svc = JoinService::new(
        store.clone(),
        keys,
        Arc::new(clock.clone()),
        IdentityConfig::new(td),
    )
    .expect("service")
    .with_attestors(registry);
    Fixture {
        _db: db,
        store,
        svc,
        vendor,
    }
}

struct Agent {
    csr: Vec<u8>,
    csr_sha256: [u8; 32],
}

fn agent() -> Agent {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = build_csr(&key).unwrap();
    Agent {
        csr_sha256: domain::identity::sha256(&csr),
        csr,
    }
}

fn request(agent: &Agent, role: &str, evidence: Vec<u8>) -> JoinRequest {
    JoinRequest {
        attestor: ID.into(),
        input: JoinInput {
            csr_der: agent.csr.clone(),
            role: role.into(),
            claims: HardwareClaims::default(),
            attestation: evidence,
            ..JoinInput::default()
        },
    }
}

async fn joined(f: &Fixture, r: &JoinRequest) -> JoinAnswer {
    match f.svc.attest(r).await {
        Ok(JoinOutcome::Joined(a)) => a,
        other => panic!("expected a join, got {other:?}"),
    }
}

/// (tenant, refusal) of every security.join.refused, in log order.
async fn refusals(store: &EventStore) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in store.read_batch(0, 1_000_000).await.unwrap() {
        if e.event_type == "security.join.refused" {
            let p: events::schema::JoinRefused = e.decode().unwrap();
            out.push((e.tenant_id.clone(), p.refusal));
        }
    }
    out
}

async fn assert_refused(f: &Fixture, r: &JoinRequest, tenant: &str, reason: &str) {
    match f.svc.attest(r).await {
        Err(IdentityError::AccessDenied(m)) => assert_eq!(m, JOIN_REFUSED),
        other => panic!("expected ACCESS_DENIED for {reason}, got {other:?}"),
    }
    let all = refusals(&f.store).await;
    let last = all.last().expect("a refusal event");
    assert_eq!(
        (last.0.as_str(), last.1.as_str()),
        (tenant, reason),
        "refusals so far: {all:?}"
    );
}

#[tokio::test]
async fn a_vendor_signed_asset_joins_binds_its_node_and_comes_back_as_it() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let a = agent();
        let evidence = vendor_evidence(&f.vendor, "ASSET-0042", &a.csr_sha256).unwrap();
        let first = joined(&f, &request(&a, "node", evidence)).await;
        assert_eq!(first.csr_sha256, a.csr_sha256);
        assert_eq!(first.site_id, "site-1");
        assert_eq!(first.role, "node");
        assert_eq!(first.identity_generation, 1);

        let log = f.store.read_batch(0, 1_000_000).await.unwrap();
        let joined_event = log
            .iter()
            .find(|e| e.event_type == "node.joined")
            .expect("node.joined");
        assert_eq!(joined_event.tenant_id, "acme");
        let payload: events::schema::NodeJoined = joined_event.decode().unwrap();
        assert_eq!(payload.attestor, ID);
        assert_eq!(payload.pool_id, "racks");
        assert!(log.iter().any(|e| e.event_type == "node.bound"));
        assert!(log
            .iter()
            .any(|e| e.event_type == "attestation.evidence.used"));

        // Reinstalled: a new key, a fresh proof for it, the same node, one generation on.
        let b = agent();
        let evidence = vendor_evidence(&f.vendor, "ASSET-0042", &b.csr_sha256).unwrap();
        let again = joined(&f, &request(&b, "node", evidence)).await;
        assert_eq!(again.node_id, first.node_id);
        assert_eq!(again.identity_generation, 2);
    }
}

#[tokio::test]
async fn every_refusal_is_access_denied_with_its_reason() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let a = agent();
        let good = vendor_evidence(&f.vendor, "ASSET-0042", &a.csr_sha256).unwrap();

        assert_refused(
            &f,
            &request(&a, "node", b"{not json".to_vec()),
            "root",
            "acme-asset:malformed",
        )
        .await;
        let sig =
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, [1u8; 64]);
        let unbound = serde_json::json!({"assetTag": "ASSET-0042", "sig": sig}).to_string();
        assert_refused(
            &f,
            &request(&a, "node", unbound.into_bytes()),
            "root",
            "acme-asset:no-csr-binding",
        )
        .await;
        // A proof for another CSR.
        let other = agent();
        let for_other = vendor_evidence(&f.vendor, "ASSET-0042", &other.csr_sha256).unwrap();
        assert_refused(
            &f,
            &request(&a, "node", for_other),
            "root",
            "acme-asset:csr-mismatch",
        )
        .await;
        let forged = vendor_evidence(&vendor(), "ASSET-0042", &a.csr_sha256).unwrap();
        assert_refused(
            &f,
            &request(&a, "node", forged),
            "root",
            "acme-asset:bad-signature",
        )
        .await;
        let unknown = vendor_evidence(&f.vendor, "ASSET-0999", &a.csr_sha256).unwrap();
        assert_refused(
            &f,
            &request(&a, "node", unknown),
            "root",
            "acme-asset:unknown-asset",
        )
        .await;
        assert_refused(
            &f,
            &request(&a, "site", good.clone()),
            "root",
            "acme-asset:wrong-role",
        )
        .await;

        // Nothing above spent the proof: it joins once. The same request again (its answer
        // lost) gets the identity it was issued; once that identity is revoked, a replay is
        // refused.
        let first = joined(&f, &request(&a, "node", good.clone())).await;
        let again = joined(&f, &request(&a, "node", good.clone())).await;
        assert_eq!(again.certificate_chain, first.certificate_chain);
        f.svc.revoke_identity(&first.node_id, "test").await.unwrap();
        assert_refused(&f, &request(&a, "node", good), "acme", "acme-asset:reused").await;
    }
}
