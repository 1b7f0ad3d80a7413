//! Shared helpers of the audit tests: keys, appending, and verifying a tenant's whole trail from
//! the store with the domain's one verifier.
#![allow(dead_code)]

use std::sync::Arc;

use commands::audit::{reads, Sealer, SealerOptions};
use commands::SimClock;
use domain::audit::trail::note_sha256;
use domain::audit::{
    verify_trail, AuditLeaf, AuditSigner, TrailCheckpoint, TrailLeaf, TrailSummary,
};
use events::store::{EventStore, ExpectedVersion};
use events::NewEvent;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};

pub const TRUST_DOMAIN: &str = "audit.example.org";

pub fn signer() -> Arc<AuditSigner> {
    let rng = SystemRandom::new();
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("keygen");
    Arc::new(AuditSigner::from_pkcs8(pkcs8.as_ref(), &rng).expect("signer"))
}

pub fn sealer(store: &EventStore, signer: Arc<AuditSigner>) -> Sealer {
    Sealer::new(
        store.clone(),
        signer,
        Arc::new(SimClock::new()),
        SealerOptions::new(TRUST_DOMAIN),
    )
}

/// An event with a recognisable payload.
pub fn event(tenant: &str, n: u64) -> NewEvent {
    NewEvent::from_bytes(
        events::new_event_id(),
        "test.happened",
        1,
        tenant,
        1_767_225_600_000_000 + n as i64,
        format!("payload {tenant} {n}").into_bytes(),
    )
}

pub async fn append(store: &EventStore, stream: &str, events: &[NewEvent]) {
    store
        .append(stream, ExpectedVersion::Any, events)
        .await
        .expect("append");
}

/// Verifies a tenant's trail from the store: every leaf recomputed from its event, every
/// checkpoint against `key`.
pub async fn verify_tenant(
    store: &EventStore,
    tenant: &str,
    key: &domain::audit::AuditPublicKey,
) -> TrailSummary {
    let mut leaves = Vec::new();
    let mut from = 0u64;
    loop {
        let page = reads::leaves(store, tenant, from, 10_000)
            .await
            .expect("leaves");
        if page.is_empty() {
            break;
        }
        for row in &page {
            let event = row.event.as_ref().expect("every leaf has its event");
            let hash = AuditLeaf::from_event_recomputed(event, row.index)
                .leaf_hash()
                .expect("leaf");
            leaves.push(TrailLeaf {
                index: row.index,
                position: row.position,
                leaf_hash: hash,
                recorded_leaf_hash: Some(row.leaf_hash),
                sealed: domain::audit::sealed_leaf(event, tenant).expect("sealed event decodes"),
            });
        }
        from = page.last().map_or(from, |r| r.index + 1);
    }
    let checkpoints: Vec<TrailCheckpoint> = reads::checkpoints(store, tenant)
        .await
        .expect("checkpoints")
        .into_iter()
        .map(|c| {
            assert_eq!(note_sha256(&c.signed_note), c.note_sha256);
            TrailCheckpoint {
                signed_note: c.signed_note,
                previous_note_sha256: c.previous_note_sha256,
                consistency_proof: Some(c.consistency_proof),
            }
        })
        .collect();
    let origin = format!("{TRUST_DOMAIN}/audit/{tenant}");
    verify_trail(&origin, key, leaves, &checkpoints, &mut |_| {}).expect("trail verifies")
}

/// Every committed event is in its tenant's tree exactly once, with dense indexes.
pub async fn assert_exactly_once(url: &str) {
    let store = EventStore::connect(url).await.expect("connect");
    let coverage = projections::inspect::audit_coverage(&store)
        .await
        .expect("query");
    if coverage.missing != 0 || coverage.not_dense != 0 || coverage.leaves != coverage.events {
        // What the next failure needs to be told apart: which transactions' events are missing,
        // where the stored cursor is, what each sequencer commit delivered.
        let gaps = projections::inspect::audit_gaps(&store)
            .await
            .expect("gaps");
        eprintln!("audit coverage {coverage:?}\n{gaps}");
    }
    assert_eq!(coverage.missing, 0, "events not in any tree");
    assert_eq!(coverage.wrong_tenant, 0, "events in another tenant's tree");
    assert_eq!(coverage.not_dense, 0, "indexes not dense");
    assert_eq!(coverage.leaves, coverage.events);
}
