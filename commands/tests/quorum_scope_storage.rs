//! Scope proofs as the store hands them out (migration 0005 keeps each tree node once): every
//! leaf's proof read from the rows equals the tree's own and verifies; rows written before 0005
//! (no stored nodes) still give the right proofs; a corrupted node is reported, never handed out.
//! Both backends.

use commands::quorum::{create_batch, leaf_proof, scope_page, QuorumError};
use commands::SimClock;
use domain::quorum::{
    verify_proof, CreateBatch, PayloadDigest, ScopeLeaf, ScopeLeafRequest, ScopeTree,
};
use events::store::testkit::TestDb;
use events::store::EventStore;
use projections::quorum::support::{forget_stored_nodes, overwrite_stored_nodes};

const N: usize = 37;

fn request() -> CreateBatch {
    CreateBatch {
        tenant: "t1".into(),
        caller: "ops".into(),
        idempotency_key: "k1".into(),
        reason: "reimage".into(),
        leaves: (0..N)
            .map(|i| ScopeLeafRequest {
                subject: format!("node-{i}"),
                kind: "node.reimage".into(),
                payload_sha256: Some(PayloadDigest::of(format!("image-{i}").as_bytes())),
                payload: None,
            })
            .collect(),
        not_after_seconds: None,
    }
}

/// Every leaf's proof, from pages of 10 and one by one, equals the tree's and verifies.
async fn all_proofs_match(store: &EventStore, created: &commands::quorum::CreatedBatch) {
    let id = created.batch_id;
    let leaves: Vec<ScopeLeaf> = request()
        .leaves
        .iter()
        .map(|l| ScopeLeaf::new(l.subject.clone(), l.kind.clone(), l.payload_sha256).unwrap())
        .collect();
    let tree = ScopeTree::build(&id, &leaves).unwrap();
    assert_eq!(tree.root(), created.scope_root);
    let mut from = 0u32;
    loop {
        let page = scope_page(store, &id, from, 10).await.unwrap();
        if page.is_empty() {
            break;
        }
        for entry in &page {
            assert_eq!(entry.proof.index, from);
            assert_eq!(Some(entry.proof.clone()), tree.proof(from));
            verify_proof(
                &entry.leaf_hash,
                &entry.proof,
                N as u32,
                &created.scope_root,
            )
            .unwrap();
            let single = leaf_proof(store, &id, &entry.leaf_hash).await.unwrap();
            assert_eq!(single, tree.proof(from));
            from += 1;
        }
    }
    assert_eq!(from as usize, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_scope_proofs_read_back_on_both_backends() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        crate::quorum_support::seed_nodes(&store, "t1", N).await;
        let clock = SimClock::new();
        let created = create_batch(&store, &clock, &request()).await.unwrap();
        all_proofs_match(&store, &created).await;
        // An unknown leaf has no proof; a page past the end is empty.
        let outside = domain::quorum::leaf_hash(&created.batch_id, "node-x", "k", None);
        assert_eq!(
            leaf_proof(&store, &created.batch_id, &outside)
                .await
                .unwrap(),
            None
        );
        assert!(scope_page(&store, &created.batch_id, N as u32, 10)
            .await
            .unwrap()
            .is_empty());

        // Rows as written before migration 0005 (no stored nodes), all or some of them.
        let id = created.batch_id.as_bytes().to_vec();
        forget_stored_nodes(&store, &id, Some(5)).await.unwrap();
        all_proofs_match(&store, &created).await;
        forget_stored_nodes(&store, &id, None).await.unwrap();
        all_proofs_match(&store, &created).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_stored_node_is_reported_not_handed_out() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        crate::quorum_support::seed_nodes(&store, "t1", N).await;
        let clock = SimClock::new();
        let created = create_batch(&store, &clock, &request()).await.unwrap();
        let id = created.batch_id;
        let page = scope_page(&store, &id, 0, 100).await.unwrap();
        // Leaf 2's level-1 sibling is the node stored with row 0.
        let nodes_of_0 = page[0].proof.siblings.len();
        assert!(nodes_of_0 > 1);
        overwrite_stored_nodes(&store, id.as_bytes(), 0, &vec![0xee; 32 * nodes_of_0])
            .await
            .unwrap();
        match leaf_proof(&store, &id, &page[2].leaf_hash).await {
            Err(QuorumError::Corrupt(why)) => {
                assert!(why.contains("the stored proof of leaf 2"), "{why}")
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // A truncated node list is reported too.
        overwrite_stored_nodes(&store, id.as_bytes(), 0, &[0xee; 31])
            .await
            .unwrap();
        assert!(matches!(
            leaf_proof(&store, &id, &page[2].leaf_hash).await,
            Err(QuorumError::Corrupt(_))
        ));
    }
}
