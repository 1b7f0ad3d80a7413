//! Quorum benchmark (issue 6).
//!
//! 1. Creating a 50,000-leaf batch through the command layer (decision, scope tree, event append,
//!    projection with every leaf's stored proof nodes, commit) on Postgres and SQLite. References
//!    in the same run: raw SHA-256 of the same leaf bytes, and the raw SQL insert of the same
//!    50,000 scope rows into a scratch table in one transaction (no event, no tree). Phases of the
//!    CPU side are printed beside it (the pure decision, the projection's indexer).
//! 2. Checking one command's approval and proof (`domain::quorum::admit`): the first command of a
//!    batch (two ECDSA verifies and a proof of 16 siblings) next to two raw ring verifies, and the
//!    steady state (`admit_cached` with the batch's approval already verified: each command checks
//!    only its own proof) next to raw SHA-256 of the proof path. Each iteration of the steady
//!    state admits a different leaf of the batch.
//!
//! Run: `cargo bench -p commands --bench quorum` (DATABASE_URL names the Postgres server;
//! QUORUM_BENCH_ROUNDS sets the create rounds, default 7).

use std::time::{Duration, Instant};

use commands::quorum::{
    approve_batch, batch_view, create_batch, leaf_proof, scope_indexer, settle_trust_bundle,
    BundleConfig,
};
use commands::{Clock, SimClock};
use domain::quorum::{
    admit, admit_cached, batch_approval_signing_input, leaf_hash, plan_create_batch,
    AdmissionClock, AdmissionState, AgentQuorum, ApprovalSignature, ApproverKey, ApproverSet,
    ApproverSetOffer, BatchCreation, BatchId, CreateBatch, DestructiveCommand, PayloadDigest,
    ScopeLeafRequest, ScopeProof, TrustDomain, VerifiedApprovals,
};
use events::schema::BatchLeaf;
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore, LogTx};
use projections::quorum::support::{
    create_raw_scope_table, insert_raw_scope_rows, RawInsert, RawScopeRows,
};
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_ASN1,
    ECDSA_P256_SHA256_ASN1_SIGNING,
};
use sha2::{Digest, Sha256};

const LEAVES: usize = 50_000;

const SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
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

/// Raw reference: the same 50,000 scope rows (leaf hash, subject, kind, digest, 32 bytes of
/// nodes) inserted into a scratch table with the same keys in one committed transaction
/// (`projections::quorum::support::insert_raw_scope_rows`: on Postgres one UNNEST statement or,
/// with `copy`, one binary COPY; on SQLite multi-row statements of 3,000 rows).
async fn raw_insert(store: &EventStore, round: usize, req: &CreateBatch, copy: bool) -> Duration {
    let batch_id = Sha256::digest(format!("raw-{round}-{copy}")).to_vec();
    let hashes: Vec<Vec<u8>> = (0..LEAVES)
        .map(|i| Sha256::digest(i.to_be_bytes()).to_vec())
        .collect();
    let digests: Vec<Vec<u8>> = req
        .leaves
        .iter()
        .map(|l| {
            l.payload_sha256
                .map(|d| d.as_bytes().to_vec())
                .unwrap_or_default()
        })
        .collect();
    let nodes = vec![0u8; 32];
    let rows = RawScopeRows {
        batch_id: &batch_id,
        leaf_hashes: &hashes,
        subjects: req.leaves.iter().map(|l| l.subject.as_str()).collect(),
        kinds: req.leaves.iter().map(|l| l.kind.as_str()).collect(),
        digests: &digests,
        nodes: &nodes,
    };
    let how = if copy {
        RawInsert::Copy
    } else {
        RawInsert::Unnest
    };
    let start = Instant::now();
    let mut tx = store.begin().await.expect("begin");
    insert_raw_scope_rows(&mut tx, &rows, how)
        .await
        .expect("raw insert");
    tx.commit().await.expect("commit");
    start.elapsed()
}

/// The CPU side alone: the pure decision (leaf hashes, sort, tree, request digest) and the
/// projection's indexer (leaf hashes again, tree, stored nodes), on the event's leaves.
fn cpu_phases(req: &CreateBatch) -> (Duration, Duration) {
    let start = Instant::now();
    let decision = plan_create_batch(req, None, &ApproverSet::none(), 0).expect("decide");
    let decide = start.elapsed();
    let BatchCreation::New(plan) = decision else {
        panic!("a new batch");
    };
    let leaves: Vec<BatchLeaf> = plan
        .leaves
        .iter()
        .map(|p| BatchLeaf {
            subject: p.leaf.subject().to_string(),
            kind: p.leaf.kind().to_string(),
            payload_sha256: p
                .leaf
                .payload_sha256()
                .map_or_else(Vec::new, |d| d.as_bytes().to_vec()),
            payload_type_url: String::new(),
            payload_value: Vec::new(),
            has_payload: false,
        })
        .collect();
    let start = Instant::now();
    let index = scope_indexer(plan.batch_id.as_bytes(), &leaves).expect("index");
    let indexer = start.elapsed();
    assert_eq!(index.root, plan.tree.root().0);
    (decide, indexer)
}

async fn bench_create(name: &str, store: &EventStore, clock: &SimClock, rounds: usize) {
    create_raw_scope_table(store).await.expect("scratch table");
    let (mut ours, mut hashing, mut insert, mut copied, mut decide, mut indexer) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let postgres = matches!(store, EventStore::Postgres(_));
    for round in 0..rounds {
        let req = request(&format!("{name}-{round}"));
        hashing.push(raw_leaf_hashing(&req));
        let (d, i) = cpu_phases(&req);
        decide.push(d);
        indexer.push(i);
        insert.push(raw_insert(store, round, &req, false).await);
        if postgres {
            copied.push(raw_insert(store, round, &req, true).await);
        }
        let start = Instant::now();
        let created = create_batch(store, clock, &req).await.expect("create");
        ours.push(start.elapsed());
        assert_eq!(created.scope_size as usize, LEAVES);
    }
    let (o, h, r) = (median(ours), median(hashing), median(insert));
    let copy_line = if copied.is_empty() {
        String::new()
    } else {
        let c = median(copied);
        format!(
            "; raw binary COPY of them {:.1} ms (ratio {:.2}x)",
            ms(c),
            o.as_secs_f64() / c.as_secs_f64()
        )
    };
    println!(
        "create 50,000-leaf batch [{name}]: median {:.1} ms over {rounds} rounds (target <= 1000 ms)\n  \
         reference raw SHA-256 of the leaf bytes {:.2} ms (ratio {:.0}x); raw multi-row insert of \
         the 50,000 scope rows {:.1} ms (ratio {:.2}x){copy_line}\n  CPU phases: decide {:.1} ms, \
         projection indexer {:.1} ms",
        ms(o),
        ms(h),
        o.as_secs_f64() / h.as_secs_f64(),
        ms(r),
        o.as_secs_f64() / r.as_secs_f64(),
        ms(median(decide)),
        ms(median(indexer)),
    );
}

/// One approved batch for the admission benchmark, with the proofs the store hands out.
struct Approved {
    approval: domain::quorum::BatchApproval,
    id: BatchId,
    commands: Vec<(String, String, PayloadDigest, ScopeProof)>,
}

async fn approved_batch(
    store: &EventStore,
    clock: &SimClock,
    td: &TrustDomain,
    signers: [(&EcdsaKeyPair, &ApproverKey); 2],
) -> Approved {
    let created = create_batch(store, clock, &request("admit"))
        .await
        .expect("create");
    let id = created.batch_id;
    for (pair, key) in signers {
        let msg = batch_approval_signing_input(
            &id,
            &created.scope_root,
            created.scope_size,
            created.not_after_us,
            td,
        );
        let sig = pair
            .sign(&SystemRandom::new(), &msg)
            .expect("sign")
            .as_ref()
            .to_vec();
        approve_batch(
            store,
            clock,
            td,
            &id,
            &ApprovalSignature {
                kid: key.kid(),
                sig,
            },
        )
        .await
        .expect("approve");
    }
    let view = batch_view(store, &id).await.expect("view").expect("batch");
    let mut commands = Vec::new();
    for i in (0..LEAVES).step_by(LEAVES / 200) {
        let subject = format!("node-{i:06}");
        let digest = PayloadDigest::of(format!("image-{i}").as_bytes());
        let leaf = leaf_hash(&id, &subject, "node.reimage", Some(&digest));
        let proof = leaf_proof(store, &id, &leaf)
            .await
            .expect("proof")
            .expect("leaf");
        commands.push((format!("cmd-{i}"), subject, digest, proof));
    }
    Approved {
        approval: view.approval(),
        id,
        commands,
    }
}

/// Joins the batches' subjects (`node-000000` ..) as nodes of `t1` (bare `node.joined` events,
/// 1,000 streams a transaction), so the batches pass the subject rule (issue 21: every subject
/// names a node of the batch's own tenant). Batch creation's time includes reading them back.
async fn seed_nodes(store: &EventStore) {
    use events::store::{ExpectedVersion, LogStore, LogTx, StreamAppend};
    let ids: Vec<String> = (0..LEAVES).map(|i| format!("node-{i:06}")).collect();
    for chunk in ids.chunks(1000) {
        let streams: Vec<String> = chunk.iter().map(|id| format!("node/{id}")).collect();
        let events: Vec<[events::NewEvent; 1]> = chunk
            .iter()
            .map(|id| {
                [events::NewEvent::from_payload(
                    events::new_event_id(),
                    "t1",
                    1_800_000_000_000_000,
                    &events::schema::NodeJoined {
                        node_id: id.clone(),
                        tenant_id: "t1".into(),
                        site_id: "s1".into(),
                        pool_id: "p1".into(),
                        role: "node".into(),
                        attestor: "join-token".into(),
                        node_key: "unattested".into(),
                        token_id: "tok_bench".into(),
                        identity_generation: 1,
                        ..Default::default()
                    },
                )]
            })
            .collect();
        let appends: Vec<StreamAppend<'_>> = streams
            .iter()
            .zip(&events)
            .map(|(stream, evs)| StreamAppend {
                stream,
                expected: ExpectedVersion::NoStream,
                events: evs,
            })
            .collect();
        let mut tx = store.begin().await.expect("begin");
        commands::append_streams_and_project(&mut tx, &projections::identity::all(), &appends)
            .await
            .expect("seed nodes");
        tx.commit().await.expect("commit");
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds: usize = std::env::var("QUORUM_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
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

    let pg = TestDb::postgres().await.expect("postgres test database");
    let sqlite = TestDb::sqlite().expect("sqlite test database");
    let mut approved = None;
    for (name, db) in [("postgres", &pg), ("sqlite", &sqlite)] {
        let store = db.store().await.expect("store");
        settle_trust_bundle(&store, &clock, &config)
            .await
            .expect("settle");
        seed_nodes(&store).await;
        bench_create(name, &store, &clock, rounds).await;
        if approved.is_none() {
            approved = Some(approved_batch(&store, &clock, &td, [(&p0, &k0), (&p1, &k1)]).await);
        }
    }
    let approved = approved.expect("approved batch");

    let quorum = AgentQuorum {
        set: &set,
        pin: None,
        trust_domain: &td,
    };
    let now = clock.now_us();
    let admission_clock = AdmissionClock {
        trusted_now_us: now,
        local_now_us: now,
    };
    let state = AdmissionState::default();
    let cmds = &approved.commands;
    fn command<'a>(
        approved: &'a Approved,
        c: &'a (String, String, PayloadDigest, ScopeProof),
    ) -> DestructiveCommand<'a> {
        DestructiveCommand {
            command_id: &c.0,
            subject: &c.1,
            kind: "node.reimage",
            payload_sha256: &c.2,
            batch_id: Some(&approved.id),
            approval: Some(&approved.approval),
            proof: Some(&c.3),
            bound_leaf_only: true,
        }
    }
    let view = |c| command(&approved, c);
    let message = approved.approval.signing_input(&td);
    let keys: Vec<Vec<u8>> = [&k0, &k1]
        .iter()
        .map(|k| k.spki_der()[26..].to_vec())
        .collect();
    let siblings = cmds[0].3.siblings.len();
    const BATCH: usize = 200;
    const ROUNDS: usize = 25;

    // First command of a batch: `admit` verifies the signatures every time.
    let (mut first, mut raw_verify) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for c in cmds.iter().take(BATCH) {
            let verdict = admit(&view(c), &quorum, &state, admission_clock);
            std::hint::black_box(verdict.expect("admitted"));
        }
        first.push(start.elapsed() / BATCH as u32);
        let start = Instant::now();
        for _ in 0..BATCH {
            for (key, sig) in keys.iter().zip(&approved.approval.signatures) {
                let ok = UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, key)
                    .verify(&message, &sig.sig)
                    .is_ok();
                std::hint::black_box(ok);
            }
        }
        raw_verify.push(start.elapsed() / BATCH as u32);
    }

    // Steady state: the batch's approval is verified once; each command checks its own proof.
    let mut memo = VerifiedApprovals::new();
    admit_cached(&view(&cmds[0]), &quorum, &state, &mut memo, admission_clock).expect("warm");
    let (mut steady, mut raw_hash) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for c in cmds.iter().take(BATCH) {
            let verdict = admit_cached(&view(c), &quorum, &state, &mut memo, admission_clock);
            std::hint::black_box(verdict.expect("admitted"));
        }
        steady.push(start.elapsed() / BATCH as u32);
        // Reference: SHA-256 of the leaf and of each node on its path (what a proof check hashes).
        let start = Instant::now();
        for c in cmds.iter().take(BATCH) {
            let mut h: [u8; 32] = Sha256::digest(c.1.as_bytes()).into();
            for s in &c.3.siblings {
                let mut hasher = Sha256::new();
                hasher.update([1u8]);
                hasher.update(h);
                hasher.update(s.as_bytes());
                h = hasher.finalize().into();
            }
            std::hint::black_box(h);
        }
        raw_hash.push(start.elapsed() / BATCH as u32);
    }
    let (f, rv, s, rh) = (
        median(first),
        median(raw_verify),
        median(steady),
        median(raw_hash),
    );
    println!(
        "admit, first command of a batch (2 approvals verified, proof of {siblings} siblings): median {:.1} µs (target <= 100 µs)\n  \
         reference raw ring ECDSA P-256 verify x2 {:.1} µs; ratio {:.2}x",
        us(f),
        us(rv),
        f.as_secs_f64() / rv.as_secs_f64()
    );
    println!(
        "admit, steady state (approval verified once per batch, each command's own proof checked): median {:.2} µs (target <= 100 µs)\n  \
         reference raw SHA-256 of the leaf and its {siblings} path nodes {:.2} µs; ratio {:.2}x",
        us(s),
        us(rh),
        s.as_secs_f64() / rh.as_secs_f64()
    );
}
