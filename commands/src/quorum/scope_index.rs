//! The scope tree the batch projection stores with a `batch.created` event's leaves, built with
//! `domain::quorum`'s maths (the projection itself stays free of the domain).

use domain::quorum::{leaf_hash, BatchId, PayloadDigest, ScopeHash, ScopeTree};
use events::schema::BatchLeaf;
use projections::quorum::ScopeIndex;

/// From this many leaves on, the leaf hashes are computed on two threads.
const PARALLEL_FROM: usize = 8192;

/// Leaf hashes of a batch's leaves, computed on up to two threads for large batches (hashing is
/// pure, so the result is the same on any number of threads).
fn leaf_hashes(batch_id: &BatchId, leaves: &[BatchLeaf]) -> Result<Vec<ScopeHash>, String> {
    fn hash_all(batch_id: &BatchId, leaves: &[BatchLeaf]) -> Result<Vec<ScopeHash>, String> {
        leaves
            .iter()
            .map(|leaf| {
                let digest = if leaf.payload_sha256.is_empty() {
                    None
                } else {
                    Some(
                        PayloadDigest::from_slice(&leaf.payload_sha256)
                            .map_err(|e| e.to_string())?,
                    )
                };
                Ok(leaf_hash(
                    batch_id,
                    &leaf.subject,
                    &leaf.kind,
                    digest.as_ref(),
                ))
            })
            .collect()
    }
    if leaves.len() < PARALLEL_FROM {
        return hash_all(batch_id, leaves);
    }
    let (first, second) = leaves.split_at(leaves.len() / 2);
    let (a, b) = std::thread::scope(|scope| {
        let other = scope.spawn(|| hash_all(batch_id, second));
        let mine = hash_all(batch_id, first);
        (mine, other.join())
    });
    let mut hashes = a?;
    hashes.extend(b.map_err(|_| "leaf hashing thread panicked".to_string())??);
    Ok(hashes)
}

/// Builds the scope tree of a `batch.created` event's leaves for the batch projection: each
/// row's leaf hash and the tree's nodes stored with it ([`ScopeTree::stored_nodes_into`]).
pub fn scope_indexer(batch_id: &[u8], leaves: &[BatchLeaf]) -> Result<ScopeIndex, String> {
    let batch_id = BatchId::from_slice(batch_id).map_err(|e| e.to_string())?;
    let hashes = leaf_hashes(&batch_id, leaves)?;
    if hashes.windows(2).any(|w| w[0] >= w[1]) {
        return Err("the leaves are not distinct and in hash order".to_string());
    }
    let leaf_hashes: Vec<[u8; 32]> = hashes.iter().map(|h| h.0).collect();
    let tree = ScopeTree::from_leaf_hashes(hashes).map_err(|e| e.to_string())?;
    let nodes = (0..leaf_hashes.len())
        .map(|index| {
            let mut bytes = Vec::new();
            tree.stored_nodes_into(index, &mut bytes);
            bytes
        })
        .collect();
    Ok(ScopeIndex {
        root: tree.root().0,
        leaf_hashes,
        nodes,
    })
}
