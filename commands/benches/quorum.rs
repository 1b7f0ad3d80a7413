//! Quorum benchmark (issue 6): creating a 50,000-leaf batch through the command layer (decision,
//! scope tree, event append, projection with every leaf's stored proof) on Postgres and SQLite,
//! next to raw SHA-256 of the same leaf bytes; and checking one command's approval and proof
//! with `domain::quorum::admit`, next to the raw ECDSA verifies it needs.
//!
//! Run: `cargo bench -p commands --bench quorum` (DATABASE_URL names the Postgres server).

use std::time::{Duration, Instant};

use commands::quorum::{
    approve_batch, batch_view, create_batch, leaf_proof, settle_trust_bundle, BundleConfig,
};
use commands::{Clock, SimClock};
use domain::quorum::{
    admit, approver_set_signing_input, batch_approval_signing_input, leaf_hash, AdmissionClock,
    AdmissionState, AgentQuorum, ApprovalSignature, ApproverKey, ApproverSet, ApproverSetOffer,
    CreateBatch, DestructiveCommand, PayloadDigest, ScopeLeafRequest, TrustDomain,
};
use events::store::testkit::TestDb;
use events::store::EventStore;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_ASN1,
    ECDSA_P256_SHA256_ASN1_SIGNING,
};
use sha2::{Digest, Sha256};

const LEAVES: usize = 50_000;
const ROUNDS: usize = 5;

const SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn keypair() -> (EcdsaKeyPair, ApproverKey) {
    let rng = SystemRandom::new();
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("keygen");
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .expect("pkcs8");
    let mut spki = SPKI_PREFIX.to_vec();
    spki.extend_from_slice(pair.public_key().as_ref());
    let key = ApproverKey::from_spki(&spki).expect("spki");
    (pair, key)
}

fn request(key: &str) -> CreateBatch {
    CreateBatch {
        tenant: "t1".into(),
        caller: "bench".into(),
        idempotency_key: key.into(),
        reason: "fleet reimage".into(),
        leaves: (0..LEAVES)
            .map(|i| ScopeLeafRequest {
                subject: format!("node-{i:06}"),
                kind: "node.reimage".into(),
                payload_sha256: Some(PayloadDigest::of(format!("image-{i}").as_bytes())),
                payload: None,
            })
            .collect(),
        not_after_seconds: None,
    }
}

/// Raw reference: SHA-256 of every leaf's bytes (what the tree hashes at its leaf level).
fn raw_leaf_hashing(req: &CreateBatch) -> Duration {
    let start = Instant::now();
    let mut acc = 0u8;
    for leaf in &req.leaves {
        let mut h = Sha256::new();
        h.update([0u8]);
        h.update([0u8; 36]);
        h.update(leaf.subject.as_bytes());
        h.update(leaf.kind.as_bytes());
        if let Some(d) = &leaf.payload_sha256 {
            h.update(d.as_bytes());
        }
        acc ^= h.finalize()[0];
    }
    std::hint::black_box(acc);
    start.elapsed()
}

async fn bench_create(name: &str, store: &EventStore, clock: &SimClock) {
    let mut ours = Vec::new();
    let mut raw = Vec::new();
    for round in 0..ROUNDS {
        let req = request(&format!("{name}-{round}"));
        raw.push(raw_leaf_hashing(&req));
        let start = Instant::now();
        let created = create_batch(store, clock, &req).await.expect("create");
        ours.push(start.elapsed());
        assert_eq!(created.scope_size as usize, LEAVES);
    }
    let (o, r) = (median(ours), median(raw));
    println!(
        "create 50,000-leaf batch [{name}]: median {:.1} ms (target <= 1000 ms); raw SHA-256 of the leaf bytes {:.2} ms; ratio {:.0}x",
        o.as_secs_f64() * 1e3,
        r.as_secs_f64() * 1e3,
        o.as_secs_f64() / r.as_secs_f64()
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let clock = SimClock::new();
    let td = TrustDomain::new("prod.example.org").expect("td");
    let (p0, k0) = keypair();
    let (p1, k1) = keypair();
    let (_p2, k2) = keypair();
    let set = ApproverSet::new(vec![k0.clone(), k1.clone(), k2], 2, vec![], 0).expect("set");
    let config = BundleConfig {
        trust_domain: td.clone(),
        command_signing_roots: vec![vec![1, 2, 3]],
        active_root: vec![1, 2, 3],
        approvers: ApproverSetOffer {
            set: set.clone(),
            epoch: 1,
            signatures: vec![],
        },
        floor: 0,
        pin: None,
    };
    let _ = approver_set_signing_input;

    let pg = TestDb::postgres().await.expect("postgres test database");
    let sqlite = TestDb::sqlite().expect("sqlite test database");
    let mut approval = None;
    for (name, db) in [("postgres", &pg), ("sqlite", &sqlite)] {
        let store = db.store().await.expect("store");
        settle_trust_bundle(&store, &clock, &config)
            .await
            .expect("settle");
        bench_create(name, &store, &clock).await;
        if approval.is_none() {
            let created = create_batch(&store, &clock, &request("admit"))
                .await
                .expect("create");
            let id = created.batch_id;
            for pair in [&p0, &p1] {
                let msg = batch_approval_signing_input(
                    &id,
                    &created.scope_root,
                    created.scope_size,
                    created.not_after_us,
                    &td,
                );
                let sig = pair
                    .sign(&SystemRandom::new(), &msg)
                    .expect("sign")
                    .as_ref()
                    .to_vec();
                let kid = if std::ptr::eq(pair, &p0) {
                    k0.kid()
                } else {
                    k1.kid()
                };
                approve_batch(&store, &clock, &td, &id, &ApprovalSignature { kid, sig })
                    .await
                    .expect("approve");
            }
            let view = batch_view(&store, &id).await.expect("view").expect("batch");
            let subject = "node-012345".to_string();
            let digest = PayloadDigest::of(b"image-12345");
            let leaf = leaf_hash(&id, &subject, "node.reimage", Some(&digest));
            let proof = leaf_proof(&store, &id, &leaf)
                .await
                .expect("proof")
                .expect("leaf");
            approval = Some((view.approval(), proof, subject, digest, id));
        }
    }

    // Admission: one command's approval (2 signatures) and proof (16 siblings).
    let (approval, proof, subject, digest, id) = approval.expect("approval");
    let quorum = AgentQuorum {
        set: &set,
        pin: None,
        trust_domain: &td,
    };
    let now = clock.now_us();
    let admission_clock = AdmissionClock {
        server_now_us: now,
        local_now_us: now,
    };
    let state = AdmissionState::default();
    let command = DestructiveCommand {
        command_id: "cmd-1",
        subject: &subject,
        kind: "node.reimage",
        payload_sha256: &digest,
        batch_id: Some(&id),
        approval: Some(&approval),
        proof: Some(&proof),
        bound_leaf_only: true,
    };
    let message = approval.signing_input(&td);
    let keys: Vec<Vec<u8>> = [&k0, &k1]
        .iter()
        .map(|k| k.spki_der()[26..].to_vec())
        .collect();
    const BATCH: usize = 200;
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..25 {
        let start = Instant::now();
        for _ in 0..BATCH {
            let verdict = admit(&command, &quorum, &state, admission_clock);
            std::hint::black_box(verdict.expect("admitted"));
        }
        ours.push(start.elapsed() / BATCH as u32);
        let start = Instant::now();
        for _ in 0..BATCH {
            for (key, sig) in keys.iter().zip(&approval.signatures) {
                let ok = UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, key)
                    .verify(&message, &sig.sig)
                    .is_ok();
                std::hint::black_box(ok);
            }
        }
        raw.push(start.elapsed() / BATCH as u32);
    }
    let (o, r) = (median(ours), median(raw));
    println!(
        "admit one command (2 approvals, proof of {} siblings): median {:.1} µs (target <= 100 µs); raw ring ECDSA P-256 verify x2 {:.1} µs; ratio {:.2}x",
        proof.siblings.len(),
        o.as_secs_f64() * 1e6,
        r.as_secs_f64() * 1e6,
        o.as_secs_f64() / r.as_secs_f64()
    );
}
