//! Signed-command benchmark (issue 21): what one command costs to sign and to check, next to
//! the raw ES256 operations (ring) it is made of.
//!
//! 1. Signing: `domain::command::sign_command` (encode the body, the `command` statement's signed
//!    input, one ES256 signature) next to a raw ring ES256 sign of the same number of bytes.
//! 2. Verifying on the node: `domain::command::verify_command` (decode the body, parse and check
//!    the worker certificate against the command-signing root at the issue time: one ECDSA
//!    verify; the body's signature: a second one; the node, lifetime and payload-type checks)
//!    next to one and two raw ring ES256 verifies.
//! 3. Admission of a batched destructive command (`node.reboot`, a 2-of-3 quorum, a scope of 100
//!    leaves, so a proof of 7 siblings): `domain::quorum::admit` (the two approval signatures
//!    verified every time) next to two raw verifies, and `admit_cached` (the batch's approval
//!    verified once, each command checking its own proof) next to raw SHA-256 of the proof path.
//!    Each iteration admits a different leaf of the batch.
//! 4. The node's whole check of one batched command in the steady state: `verify_command` then
//!    `admit_cached`.
//!
//! Run: `cargo bench -p commands --bench commands` (no database; COMMANDS_BENCH_ROUNDS sets the
//! rounds, default 25, each of 100 commands). Ours and its reference take turns within each
//! round; the figures are medians, the ratio the median of the rounds' own ratios.

use std::time::{Duration, Instant};

use domain::command::{sign_command, verify_command, CommandBody, SignedCommand};
use domain::pki::statement::Statement;
use domain::pki::{issue_worker_certificate, KeyRole, KeySet, KeySetLifetimes, PrivateKey, Serial};
use domain::quorum::{
    admit, admit_cached, AdmissionClock, AdmissionState, AgentQuorum, ApprovalSignature,
    ApproverKey, ApproverSet, BatchApproval, BatchId, DestructiveCommand, PayloadDigest, ScopeLeaf,
    ScopeProof, ScopeTree, VerifiedApprovals,
};
use prost::Message as _;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_ASN1,
    ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING,
};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

/// Commands per timed round (one per leaf of the batch).
const LEAVES: usize = 100;
const KIND: &str = "node.reboot";
const TRUST_DOMAIN: &str = "prod.example.org";

const SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// One figure: ours and its reference, per command, medians over the rounds.
struct Paired {
    ours: Duration,
    reference: Duration,
    /// The median of the rounds' own ratios (the host drifts between rounds, less within one).
    ratio: f64,
}

/// Times `ours` and then `reference` over the `LEAVES` commands, taking turns, `rounds` times.
fn paired(rounds: usize, mut ours: impl FnMut(usize), mut reference: impl FnMut(usize)) -> Paired {
    let time = |op: &mut dyn FnMut(usize)| {
        let start = Instant::now();
        for i in 0..LEAVES {
            op(i);
        }
        start.elapsed() / LEAVES as u32
    };
    let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let x = time(&mut ours);
        let y = time(&mut reference);
        r.push(ratio(x, y));
        a.push(x);
        b.push(y);
    }
    r.sort_by(f64::total_cmp);
    Paired {
        ours: median(a),
        reference: median(b),
        ratio: r[r.len() / 2],
    }
}

fn approver() -> (EcdsaKeyPair, ApproverKey) {
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

fn node(i: usize) -> String {
    format!("node_{i:04}")
}

/// The reboot payload every command of the batch carries.
fn payload() -> Vec<u8> {
    domain::command::payloads::NodeReboot {
        reason: "kernel update".into(),
        delay_seconds: 30,
    }
    .encode_to_vec()
}

fn body(i: usize, batch: &BatchId, issued_at_ms: i64) -> CommandBody {
    CommandBody {
        command_id: format!("cmd_{i:032x}"),
        node_id: node(i),
        tenant_id: "t1".into(),
        kind: KIND.into(),
        payload_type_url: "type.googleapis.com/bc.command.v1.NodeReboot".into(),
        payload: payload(),
        batch_id: batch.as_bytes().to_vec(),
        issued_at_ms,
        not_after_ms: issued_at_ms + 24 * 3_600_000,
    }
}

/// The batch: 100 `node.reboot` leaves, one per node, approved by two of the three approvers.
struct Batch {
    id: BatchId,
    approval: BatchApproval,
    proofs: Vec<ScopeProof>,
    digest: PayloadDigest,
}

fn batch(signers: [&EcdsaKeyPair; 2], keys: [&ApproverKey; 2], now_us: i64) -> Batch {
    let td = domain::quorum::TrustDomain::new(TRUST_DOMAIN).expect("td");
    let id = BatchId::derive("t1", "user:ops", "bench-reboot").expect("batch id");
    let digest = PayloadDigest::of(&payload());
    let leaves: Vec<ScopeLeaf> = (0..LEAVES)
        .map(|i| ScopeLeaf::new(node(i), KIND, Some(digest)).expect("leaf"))
        .collect();
    let tree = ScopeTree::build(&id, &leaves).expect("tree");
    let proofs = leaves
        .iter()
        .map(|l| {
            let index = tree.index_of(&l.hash(&id)).expect("leaf in tree");
            tree.proof(index).expect("proof")
        })
        .collect();
    let mut approval = BatchApproval {
        batch_id: id,
        scope_root: tree.root(),
        scope_size: tree.size(),
        not_after_us: now_us + 24 * 3_600_000_000,
        signatures: vec![],
    };
    let message = approval.signing_input(&td);
    approval.signatures = signers
        .iter()
        .zip(keys)
        .map(|(pair, key)| ApprovalSignature {
            kid: key.kid(),
            sig: pair
                .sign(&SystemRandom::new(), &message)
                .expect("sign")
                .as_ref()
                .to_vec(),
        })
        .collect();
    Batch {
        id,
        approval,
        proofs,
        digest,
    }
}

fn main() {
    let rounds: usize = std::env::var("COMMANDS_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25);
    let now = OffsetDateTime::now_utc();
    let now_ms = now.unix_timestamp() * 1000;
    let now_us = now_ms * 1000;
    let td = domain::pki::TrustDomain::new(TRUST_DOMAIN).expect("td");
    let keys = KeySet::generate(td.clone(), now, KeySetLifetimes::default()).expect("key set");
    let worker_key = PrivateKey::generate(KeyRole::Worker).expect("worker key");
    let worker = issue_worker_certificate(
        &keys.command_signing_root,
        worker_key.public_key(),
        "bench-worker",
        &Serial::generate().expect("serial"),
        time::Duration::hours(24),
        now - time::Duration::minutes(1),
    )
    .expect("worker certificate");
    let roots = vec![keys.command_signing_root.cert_der().to_vec()];

    let (p0, k0) = approver();
    let (p1, k1) = approver();
    let (_p2, k2) = approver();
    let set = ApproverSet::new(vec![k0.clone(), k1.clone(), k2], 2, vec![], 0).expect("set");
    let b = batch([&p0, &p1], [&k0, &k1], now_us);
    let bodies: Vec<CommandBody> = (0..LEAVES).map(|i| body(i, &b.id, now_ms)).collect();
    let nodes: Vec<String> = (0..LEAVES).map(node).collect();

    // What the references need: the signed commands, the exact signed input of each, a ring
    // key of the same curve, its signatures over those inputs.
    let signed: Vec<SignedCommand> = bodies
        .iter()
        .map(|body| sign_command(&worker_key, &worker.der, body, &td).expect("sign"))
        .collect();
    let inputs: Vec<Vec<u8>> = signed
        .iter()
        .map(|s| {
            domain::command::CommandStatement {
                body: &s.body,
                trust_domain: TRUST_DOMAIN,
            }
            .signed_input()
        })
        .collect();
    let rng = SystemRandom::new();
    let raw_pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("keygen");
    let raw_pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, raw_pkcs8.as_ref(), &rng)
            .expect("pkcs8");
    let raw_sigs: Vec<Vec<u8>> = inputs
        .iter()
        .map(|m| raw_pair.sign(&rng, m).expect("sign").as_ref().to_vec())
        .collect();
    let raw_public = raw_pair.public_key().as_ref().to_vec();
    let raw_verify = |i: usize| {
        let ok = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &raw_public)
            .verify(&inputs[i], &raw_sigs[i])
            .is_ok();
        assert!(ok);
        std::hint::black_box(ok);
    };

    // 1. Signing, next to one raw ring ES256 signature over the same signed input.
    let sign = paired(
        rounds,
        |i| {
            let s = sign_command(&worker_key, &worker.der, &bodies[i], &td).expect("sign");
            std::hint::black_box(s);
        },
        |i| {
            let sig = raw_pair.sign(&rng, &inputs[i]).expect("sign");
            std::hint::black_box(sig);
        },
    );

    // 2. The node's signature check, next to one and to two raw verifies.
    let node_verify = |i: usize| {
        let ok = verify_command(&signed[i], &roots, &td, &nodes[i], now_ms).expect("verifies");
        std::hint::black_box(ok);
    };
    let verify_1 = paired(rounds, node_verify, raw_verify);
    let verify_2 = paired(rounds, node_verify, |i| {
        raw_verify(i);
        raw_verify(i);
    });

    // 3. Admission of the batched destructive command.
    let qtd = domain::quorum::TrustDomain::new(TRUST_DOMAIN).expect("td");
    let quorum = AgentQuorum {
        set: &set,
        pin: None,
        trust_domain: &qtd,
    };
    let clock = AdmissionClock {
        trusted_now_us: now_us,
        local_now_us: now_us,
    };
    let state = AdmissionState::default();
    let ids: Vec<String> = bodies.iter().map(|b| b.command_id.clone()).collect();
    let view = |i: usize| DestructiveCommand {
        command_id: &ids[i],
        subject: &nodes[i],
        kind: KIND,
        payload_sha256: &b.digest,
        batch_id: Some(&b.id),
        approval: Some(&b.approval),
        proof: Some(&b.proofs[i]),
        bound_leaf_only: true,
    };
    let message = b.approval.signing_input(&qtd);
    let approver_keys: Vec<Vec<u8>> = [&k0, &k1]
        .iter()
        .map(|k| k.spki_der()[SPKI_PREFIX.len()..].to_vec())
        .collect();
    let admit_first = paired(
        rounds,
        |i| {
            let verdict = admit(&view(i), &quorum, &state, clock).expect("admitted");
            std::hint::black_box(verdict);
        },
        |_| {
            for (key, sig) in approver_keys.iter().zip(&b.approval.signatures) {
                let ok = UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, key)
                    .verify(&message, &sig.sig)
                    .is_ok();
                assert!(ok);
                std::hint::black_box(ok);
            }
        },
    );
    let mut memo = VerifiedApprovals::new();
    admit_cached(&view(0), &quorum, &state, &mut memo, clock).expect("warm");
    let siblings = b.proofs[0].siblings.len();
    let admit_steady = paired(
        rounds,
        |i| {
            let verdict =
                admit_cached(&view(i), &quorum, &state, &mut memo, clock).expect("admitted");
            std::hint::black_box(verdict);
        },
        // SHA-256 of the leaf and of each node on its path (what a proof check hashes).
        |i| {
            let mut h: [u8; 32] = Sha256::digest(nodes[i].as_bytes()).into();
            for s in &b.proofs[i].siblings {
                let mut hasher = Sha256::new();
                hasher.update([1u8]);
                hasher.update(h);
                hasher.update(s.as_bytes());
                h = hasher.finalize().into();
            }
            std::hint::black_box(h);
        },
    );

    // 4. The node's whole check in the steady state, next to two raw verifies.
    let whole = paired(
        rounds,
        |i| {
            node_verify(i);
            let verdict =
                admit_cached(&view(i), &quorum, &state, &mut memo, clock).expect("admitted");
            std::hint::black_box(verdict);
        },
        |i| {
            raw_verify(i);
            raw_verify(i);
        },
    );

    println!(
        "signed commands, {LEAVES} commands a round, {rounds} rounds, ours and the reference \
         taking turns; medians (µs per command; the ratio is the median of the rounds' own):"
    );
    let line = |what: &str, p: &Paired, reference: &str| {
        println!(
            "  {what} {:.2} µs; {reference} {:.2} µs; ratio {:.2}x",
            us(p.ours),
            us(p.reference),
            p.ratio
        );
    };
    line("sign_command", &sign, "raw ring ES256 sign");
    line(
        "verify_command (worker chain + signature)",
        &verify_1,
        "raw ring ES256 verify x1",
    );
    line(
        "verify_command (worker chain + signature)",
        &verify_2,
        "raw ring ES256 verify x2",
    );
    line(
        &format!(
            "admit, 2-of-3 approvals verified each time ({LEAVES}-leaf scope, proof of \
             {siblings} siblings)"
        ),
        &admit_first,
        "raw ring verify x2",
    );
    line(
        "admit_cached, approval verified once per batch",
        &admit_steady,
        &format!("raw SHA-256 of the leaf and its {siblings} path nodes"),
    );
    line(
        "node check, steady state (verify_command + admit_cached)",
        &whole,
        "raw ring ES256 verify x2",
    );
}
