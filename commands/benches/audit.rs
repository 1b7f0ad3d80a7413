//! Audit benchmark (issue 5): sequencing and hashing 1,000,000 events, verifying a
//! 1,000,000-event export, each next to raw SHA-256 of the same leaf bytes in the same run; proof
//! sizes and times at 1,000,000 events.
//!
//! Run: `cargo build --release -p cli && cargo bench -p commands --bench audit` (Postgres from
//! DATABASE_URL; the export/verify part runs the release `bcctl` of the same target directory, or
//! `$BCCTL_BIN`). `AUDIT_BENCH_EVENTS` changes the size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::audit::{reads, Sealer, SealerOptions, Sequencer, SequencerOptions};
use domain::audit::tree::consistency_plan;
use domain::audit::{leaf_hash, AuditLeaf, AuditSigner, Frontier};
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore};
use events::{NewEvent, RecordedEvent};
use sha2::{Digest, Sha256};

fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(run());
}

fn sample_event(i: u64) -> RecordedEvent {
    let payload = format!(
        "{{\"node\":\"node-{i}\",\"site\":\"site-{}\",\"n\":{i}}}",
        i % 97
    )
    .into_bytes();
    RecordedEvent {
        position: i as i64 + 1,
        stream_id: format!("node/{:016x}", i / 4),
        stream_version: (i % 4) as i64 + 1,
        event_id: *uuid::Uuid::from_u128(u128::from(i)).as_bytes(),
        event_type: "node.joined".into(),
        schema_version: 1,
        tenant_id: "tenant-bench".into(),
        occurred_at_us: 1_767_225_600_000_000 + i as i64,
        payload_sha256: Sha256::digest(&payload).into(),
        payload,
        tx_id: None,
        actor: None,
    }
}

async fn run() {
    let n: u64 = std::env::var("AUDIT_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    println!("# audit benchmark, {n} events");

    // 1. Hashing in memory: the sequencer's per-event work vs raw SHA-256 of the same leaf bytes.
    let events: Vec<RecordedEvent> = (0..n).map(sample_event).collect();
    let leaf_bytes: Vec<Vec<u8>> = events
        .iter()
        .enumerate()
        .map(|(i, e)| AuditLeaf::from_event(e, i as u64).encode().expect("leaf"))
        .collect();
    let t = Instant::now();
    let mut acc = [0u8; 32];
    for b in &leaf_bytes {
        let h: [u8; 32] = Sha256::digest(b).into();
        acc[0] ^= h[0];
    }
    let raw = t.elapsed();
    let t = Instant::now();
    let mut f = Frontier::new();
    for (i, e) in events.iter().enumerate() {
        let h = AuditLeaf::from_event(e, i as u64)
            .leaf_hash()
            .expect("leaf");
        f.push(h, |_, _| {});
    }
    let seq_hash = t.elapsed();
    let t = Instant::now();
    let mut g = Frontier::new();
    for (i, e) in events.iter().enumerate() {
        let h = AuditLeaf::from_event_recomputed(e, i as u64)
            .leaf_hash()
            .expect("leaf");
        g.push(h, |_, _| {});
    }
    let verify_hash = t.elapsed();
    assert_eq!(f.root(), g.root());
    let _ = leaf_hash(&leaf_bytes[0]);
    println!(
        "raw SHA-256 of the leaf bytes: {:.0} leaves/s ({:?}, acc {})",
        rate(n, raw),
        raw,
        acc[0]
    );
    println!(
        "leaf hash + tree append (sequencer's hashing): {:.0} leaves/s, {:.2}x raw",
        rate(n, seq_hash),
        seq_hash.as_secs_f64() / raw.as_secs_f64()
    );
    println!(
        "payload SHA-256 + leaf hash + tree (verifier's hashing): {:.0} leaves/s, {:.2}x raw",
        rate(n, verify_hash),
        verify_hash.as_secs_f64() / raw.as_secs_f64()
    );
    drop(leaf_bytes);

    // 2. Sequencing from the database (Postgres).
    let db = TestDb::postgres().await.expect("pg");
    let store: EventStore = db.store().await.expect("store");
    let t = Instant::now();
    let batch = 10_000u64;
    let mut i = 0u64;
    while i < n {
        let evs: Vec<NewEvent> = (i..(i + batch).min(n))
            .map(|k| {
                let e = &events[k as usize];
                NewEvent::from_bytes(
                    events::new_event_id(),
                    e.event_type.clone(),
                    1,
                    "tenant-bench",
                    e.occurred_at_us,
                    e.payload.clone(),
                )
            })
            .collect();
        store
            .append(&format!("bench/{i}"), ExpectedVersion::NoStream, &evs)
            .await
            .expect("append");
        i += batch;
    }
    println!("appended {n} events in {:?}", t.elapsed());
    drop(events);
    let mut seq = Sequencer::new(
        store.clone(),
        SequencerOptions {
            batch: 10_000,
            ..Default::default()
        },
    );
    let t = Instant::now();
    let done = seq.catch_up().await.expect("sequence");
    let d = t.elapsed();
    println!(
        "sequenced {done} events from Postgres (tail, leaf hash, tree, store leaves+nodes+cursor): {:.0} events/s ({d:?})",
        rate(done, d)
    );

    // 3. Seal, proofs.
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        &rng,
    )
    .expect("key");
    let signer = Arc::new(AuditSigner::from_pkcs8(pkcs8.as_ref(), &rng).expect("signer"));
    let sealer = Sealer::new(
        store.clone(),
        signer.clone(),
        Arc::new(commands::SimClock::new()),
        SealerOptions::new("bench.example.org"),
    );
    let t = Instant::now();
    sealer.seal_tenant("tenant-bench").await.expect("seal");
    println!("sealed a checkpoint at {n}: {:?}", t.elapsed());
    let head = store.head_position().await.expect("head");
    let mut times = Vec::new();
    let mut len = 0;
    for k in 0..100i64 {
        let position = 1 + (k * 9_973) % head.min(n as i64);
        let t = Instant::now();
        let p = reads::prove(&store, "tenant-bench", position)
            .await
            .expect("prove");
        times.push(t.elapsed());
        len = len.max(p.proof.len());
        domain::audit::verify_inclusion(
            &p.leaf.leaf_hash,
            p.leaf.index,
            p.checkpoint.tree_size,
            &p.proof,
            &p.checkpoint.root_hash,
        )
        .expect("inclusion");
    }
    times.sort();
    println!(
        "inclusion proof at {n}: at most {len} hashes ({} bytes), median {:?}, p99 {:?} (from Postgres)",
        len * 32,
        times[times.len() / 2],
        times[times.len() * 99 / 100]
    );
    let c = consistency_plan(n / 3, n).expect("plan");
    println!(
        "consistency proof {} -> {n}: {} hashes, {} stored nodes to read",
        n / 3,
        c.len(),
        c.node_ids().len()
    );

    // 4. Export and verify a 1M-event trail with the real binary.
    // The release bcctl: $BCCTL_BIN, else the release binary of $CARGO_TARGET_DIR or ./target.
    let bin = std::env::var_os("BCCTL_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
                });
            target.join("release/bcctl")
        });
    if !bin.exists() {
        println!(
            "(skipping export/verify: build the release bcctl first: cargo build --release -p cli; looked for {})",
            bin.display()
        );
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let out = dir.path().join("trail.jsonl");
    let t = Instant::now();
    let s = std::process::Command::new(&bin)
        .args(["audit", "export", "--tenant", "tenant-bench", "--out"])
        .arg(&out)
        .args(["--database-url", db.url()])
        .status()
        .expect("export");
    assert!(s.success());
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    println!("exported in {:?} ({} MiB)", t.elapsed(), size >> 20);
    let pin = signer.public_key().pin().to_string();
    let t = Instant::now();
    let o = std::process::Command::new(&bin)
        .args(["audit", "verify", "--json", "--pin", &pin, "--bundle"])
        .arg(&out)
        .output()
        .expect("verify");
    let d = t.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    println!(
        "verified the {n}-event export (parse JSON, base64, payload SHA-256, leaf hash, tree, signature): {:.0} events/s ({d:?}), {:.2}x raw SHA-256 of the leaf bytes",
        rate(n, d),
        d.as_secs_f64() / raw.as_secs_f64()
    );
}
