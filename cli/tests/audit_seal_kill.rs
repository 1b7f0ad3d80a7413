//! Fault (issue 17): the control plane killed mid-seal never leaves two inconsistent checkpoints
//! signed. A real `bcctl audit seal --all` (which sequences what is new, then seals every grown
//! tenant) is SIGKILLed at pseudo-random points over a large log (20,000 events, then more each round), restarted, killed again, with
//! more events between rounds; then one seal runs to completion. Afterwards, on SQLite and on
//! Postgres: every checkpoint recorded (the `audit_checkpoints` rows and the
//! `audit.checkpoint.sealed` events themselves, which must agree) opens under the key; sizes grow
//! strictly with the checkpoint number and the notes are hash-chained; no size has two roots;
//! every pair of checkpoints of a tenant is consistent by an RFC 9162 consistency proof built
//! from the stored leaves; each checkpoint's root is the root of that many stored leaves; and
//! `bcctl audit verify` accepts every tenant's trail.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use commands::audit::reads;
use domain::audit::trail::note_sha256;
use domain::audit::{merkle, verify_consistency, AuditPublicKey, Checkpoint, Hash};
use domain::pki::{plaintext_bundle, KeySet, KeySetLifetimes, TrustDomain};
use events::schema::AuditCheckpointSealed;
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore};
use events::NewEvent;

const TENANTS: [&str; 3] = ["k0", "k1", "k2"];
const ROUNDS: usize = 16;

/// A small deterministic generator (the seed is printed, so a failing run can be replayed).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

async fn append_events(store: &EventStore, from: u64, count: u64) {
    let batch = 250;
    let mut n = from;
    while n < from + count {
        let tenant = TENANTS[(n / batch) as usize % TENANTS.len()];
        let events: Vec<NewEvent> = (n..(n + batch).min(from + count))
            .map(|i| {
                NewEvent::from_bytes(
                    events::new_event_id(),
                    "test.happened",
                    1,
                    tenant,
                    1_767_225_600_000_000 + i as i64,
                    format!("event {i} of {tenant}").into_bytes(),
                )
            })
            .collect();
        let len = events.len() as u64;
        store
            .append(
                &format!("tenant/{tenant}/b{n}"),
                ExpectedVersion::Any,
                &events,
            )
            .await
            .expect("append");
        n += len;
    }
}

fn seal_command(pki: &Path, url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bcctl"));
    cmd.args(["audit", "seal", "--all", "--pki"])
        .arg(pki)
        .args(["--database-url", url])
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Every checkpoint of `tenant` (rows and events agree), with every property of the module doc.
async fn check_tenant(store: &EventStore, tenant: &str, key: &AuditPublicKey) -> usize {
    let origin = format!("audit.example.org/audit/{tenant}");
    let rows = reads::checkpoints(store, tenant)
        .await
        .expect("checkpoints");
    let events = store
        .read_stream(&format!("audit/{tenant}"))
        .await
        .expect("sealed events");
    assert_eq!(
        rows.len(),
        events.len(),
        "{tenant}: every sealed event is projected, nothing else"
    );
    let mut leaves: Vec<Hash> = Vec::new();
    let mut from = 0u64;
    loop {
        let page = reads::leaves(store, tenant, from, 10_000)
            .await
            .expect("leaves");
        let Some(last) = page.last() else { break };
        from = last.index + 1;
        leaves.extend(page.iter().map(|r| r.leaf_hash));
    }
    let mut heads: Vec<(u64, Hash)> = Vec::new();
    let mut by_size: HashMap<u64, Hash> = HashMap::new();
    let mut previous_note: Option<Hash> = None;
    for (k, (row, event)) in rows.iter().zip(&events).enumerate() {
        let sealed: AuditCheckpointSealed = event.decode().expect("sealed event decodes");
        assert_eq!(row.seq, k as u64 + 1);
        assert_eq!(event.stream_version, k as i64 + 1);
        assert_eq!(
            sealed.signed_note,
            row.signed_note.as_bytes(),
            "{tenant} #{k}"
        );
        let cp = Checkpoint::open(&row.signed_note, &origin, key).expect("signature opens");
        assert_eq!((cp.size, cp.root), (row.tree_size, row.root_hash));
        assert_eq!(
            row.previous_note_sha256, previous_note,
            "{tenant} #{k}: chain"
        );
        previous_note = Some(note_sha256(&row.signed_note));
        if let Some(root) = by_size.insert(cp.size, cp.root) {
            assert_eq!(
                root, cp.root,
                "{tenant}: size {} signed with two roots",
                cp.size
            );
        }
        if let Some(&(size, _)) = heads.last() {
            assert!(cp.size > size, "{tenant}: checkpoint #{k} does not grow");
        }
        let size = usize::try_from(cp.size).expect("size");
        assert!(
            size <= leaves.len(),
            "{tenant}: signed beyond the stored leaves"
        );
        assert_eq!(
            merkle::root(&leaves[..size]),
            cp.root,
            "{tenant} #{k}: root"
        );
        heads.push((cp.size, cp.root));
    }
    for (i, &(old, old_root)) in heads.iter().enumerate() {
        for &(new, new_root) in &heads[i + 1..] {
            let proof = merkle::consistency_proof(&leaves[..new as usize], old).expect("proof");
            verify_consistency(old, new, &old_root, &new_root, &proof)
                .unwrap_or_else(|e| panic!("{tenant}: {old} and {new} inconsistent: {e}"));
        }
    }
    heads.len()
}

async fn killed_mid_seal(postgres: bool) {
    let db = if postgres {
        TestDb::postgres().await.expect("pg")
    } else {
        TestDb::sqlite().expect("sqlite")
    };
    let store = db.store().await.expect("store");
    let dir = tempfile::tempdir().expect("dir");
    let keys = KeySet::generate(
        TrustDomain::new("audit.example.org").expect("td"),
        time::OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )
    .expect("keys");
    let pki = dir.path().join("pki.json");
    std::fs::write(&pki, plaintext_bundle(&keys).expect("bundle")).expect("bundle");
    let key =
        AuditPublicKey::from_spki_der(keys.audit_signing.public_key().spki_der()).expect("key");

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(17, |d| d.as_nanos() as u64);
    eprintln!("killed_mid_seal(postgres: {postgres}): seed {seed}");
    let mut rng = Lcg(seed);

    // A large log and one full seal; then rounds of more events and a seal killed at a point
    // drawn over the length of the last seal that ran to its end (timed only to spread the kill
    // points over a whole run: start-up, sequencing, each tenant's signing and commit).
    let mut appended = 0u64;
    append_events(&store, appended, 20_000).await;
    appended += 20_000;
    let status = seal_command(&pki, db.url()).status().expect("seal");
    assert!(status.success(), "the first seal runs to completion");
    let mut span = 200u64;

    let mut killed = 0;
    for _ in 0..ROUNDS {
        let more = 500 + rng.below(2_500);
        append_events(&store, appended, more).await;
        appended += more;
        let start = Instant::now();
        let mut child = seal_command(&pki, db.url()).spawn().expect("spawn bcctl");
        std::thread::sleep(Duration::from_millis(rng.below(span)));
        if child.try_wait().expect("wait").is_none() {
            child.kill().expect("SIGKILL");
            killed += 1;
            // Reach further next time, until a seal ends before its kill.
            span = span * 5 / 4;
        } else {
            span = (start.elapsed().as_millis() as u64).max(20);
        }
        let _ = child.wait();
    }
    eprintln!("killed {killed} of {ROUNDS} seals");
    let out = seal_command(&pki, db.url())
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("seal");
    let last_seal = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "a seal after the kills completes: {last_seal} {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut counts = Vec::new();
    for tenant in TENANTS {
        counts.push(check_tenant(&store, tenant, &key).await);
        let out = Command::new(env!("CARGO_BIN_EXE_bcctl"))
            .args([
                "audit",
                "verify",
                "--tenant",
                tenant,
                "--allow-unsealed",
                "--json",
            ])
            .args(["--database-url", db.url(), "--pki"])
            .arg(&pki)
            .env_remove("BC_DEPLOYMENT_SECRET")
            .output()
            .expect("verify");
        assert!(
            out.status.success(),
            "{tenant}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    eprintln!("checkpoints per tenant: {counts:?}");
    assert!(
        counts.iter().all(|&n| n >= 2),
        "the first and the last seal each signed every tenant: {counts:?}; last seal: {last_seal}"
    );
}

#[tokio::test]
async fn killed_mid_seal_sqlite() {
    killed_mid_seal(false).await;
}

#[tokio::test]
async fn killed_mid_seal_postgres() {
    killed_mid_seal(true).await;
}
