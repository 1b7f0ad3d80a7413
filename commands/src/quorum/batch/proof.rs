//! Scope proofs as the store hands them out: pages of leaves with their proofs, and one leaf's
//! proof, read from the tree nodes the scope rows store (migration 0005), not recomputed. Rows
//! written before 0005 (no stored nodes) get their batch's tree rebuilt from its leaf hashes.

use std::collections::BTreeMap;

use domain::quorum::{
    assemble_proof, proof_rows, verify_proof, BatchId, PayloadDigest, ScopeHash, ScopeLeaf,
    ScopeProof, ScopeTree,
};
use events::store::{EventStore, LogStore, LogTx, StoreTx};
use projections::quorum::{
    read_batch, read_leaf, read_scope_page, read_tree_range, read_tree_rows, ScopeRow, TreeRow,
};

use crate::quorum::batch::view::require_batch;
use crate::quorum::error::{corrupt, QuorumError};

/// One scope leaf with its stored proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeEntry {
    pub leaf: ScopeLeaf,
    pub leaf_hash: ScopeHash,
    pub payload_type_url: Option<String>,
    pub payload_value: Option<Vec<u8>>,
    pub proof: ScopeProof,
}

/// A scope row's leaf, with the proof assembled by the caller.
fn scope_entry(row: ScopeRow, proof: ScopeProof) -> Result<ScopeEntry, QuorumError> {
    let digest = match &row.payload_sha256 {
        Some(d) => Some(PayloadDigest::from_slice(d).map_err(|e| corrupt("payload_sha256", e))?),
        None => None,
    };
    let leaf =
        ScopeLeaf::new(row.subject, row.kind, digest).map_err(|e| corrupt("scope leaf", e))?;
    Ok(ScopeEntry {
        leaf,
        leaf_hash: ScopeHash::from_slice(&row.leaf_hash).map_err(|e| corrupt("leaf_hash", e))?,
        payload_type_url: row.payload_type_url,
        payload_value: row.payload_value,
        proof,
    })
}

/// The tree nodes of some stored rows, by row index: the leaf hash and the nodes stored with it.
#[derive(Default)]
struct StoredNodes {
    rows: BTreeMap<u32, (ScopeHash, Vec<u8>)>,
    /// A row written before migration 0005 (no nodes) was among them.
    legacy: bool,
}

impl StoredNodes {
    fn add(
        &mut self,
        index: u32,
        leaf_hash: &[u8],
        nodes: Option<&[u8]>,
    ) -> Result<(), QuorumError> {
        let hash = ScopeHash::from_slice(leaf_hash).map_err(|e| corrupt("leaf_hash", e))?;
        match nodes {
            Some(nodes) if nodes.len().is_multiple_of(32) => {
                self.rows.insert(index, (hash, nodes.to_vec()));
            }
            Some(_) => return Err(corrupt("nodes", "not a whole number of 32-byte hashes")),
            None => self.legacy = true,
        }
        Ok(())
    }

    fn add_rows(&mut self, rows: Vec<TreeRow>) -> Result<(), QuorumError> {
        for row in rows {
            self.add(row.leaf_index, &row.leaf_hash, row.nodes.as_deref())?;
        }
        Ok(())
    }

    fn node(&self, level: u32, row: u32) -> Option<ScopeHash> {
        let (leaf, nodes) = self.rows.get(&row)?;
        if level == 0 {
            return Some(*leaf);
        }
        let start = (level as usize - 1) * 32;
        ScopeHash::from_slice(nodes.get(start..start + 32)?).ok()
    }

    fn proof(&self, index: u32, size: u32) -> Result<ScopeProof, QuorumError> {
        assemble_proof(index, size, |level, row| self.node(level, row)).ok_or_else(|| {
            corrupt(
                "command_batch_scope",
                format!("a node of leaf {index}'s proof is missing"),
            )
        })
    }
}

/// The whole tree of a batch whose rows predate migration 0005, rebuilt from its leaf hashes.
async fn legacy_tree(
    tx: &mut StoreTx,
    batch_id: &BatchId,
    size: u32,
) -> Result<ScopeTree, QuorumError> {
    let rows = read_tree_range(tx, batch_id.as_bytes(), 0, size.saturating_sub(1)).await?;
    let hashes = rows
        .iter()
        .map(|r| ScopeHash::from_slice(&r.leaf_hash).map_err(|e| corrupt("leaf_hash", e)))
        .collect::<Result<Vec<_>, _>>()?;
    if hashes.len() != size as usize {
        return Err(corrupt(
            "command_batch_scope",
            format!("{} rows for a scope of {size}", hashes.len()),
        ));
    }
    ScopeTree::from_leaf_hashes(hashes).map_err(|e| corrupt("command_batch_scope", e))
}

/// The inclusive index ranges of the rows the proofs of leaves `first..=last` read, merged.
fn proof_ranges(first: u32, last: u32, size: u32) -> Vec<(u32, u32)> {
    let mut ranges = Vec::new();
    let (mut a, mut b, mut len) = (first, last, size);
    while len > 1 {
        ranges.push((a.saturating_sub(1), (b + 1).min(len - 1)));
        a /= 2;
        b /= 2;
        len = len.div_ceil(2);
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Up to `limit` leaves from `from_index` on, with their proofs (read from the stored tree
/// nodes, not recomputed).
pub async fn scope_page(
    store: &EventStore,
    batch_id: &BatchId,
    from_index: u32,
    limit: u32,
) -> Result<Vec<ScopeEntry>, QuorumError> {
    let mut tx = store.begin().await?;
    let result = scope_page_in(&mut tx, batch_id, from_index, limit).await;
    let _ = tx.rollback().await;
    result
}

async fn scope_page_in(
    tx: &mut StoreTx,
    batch_id: &BatchId,
    from_index: u32,
    limit: u32,
) -> Result<Vec<ScopeEntry>, QuorumError> {
    let Some(batch) = read_batch(tx, batch_id.as_bytes()).await? else {
        return Ok(Vec::new());
    };
    let size = batch.scope_size;
    let rows = read_scope_page(tx, batch_id.as_bytes(), from_index, limit).await?;
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Ok(Vec::new());
    };
    if last.leaf_index >= size {
        return Err(corrupt(
            "command_batch_scope",
            format!("leaf {} in a scope of {size}", last.leaf_index),
        ));
    }
    let mut stored = StoredNodes::default();
    for (start, end) in proof_ranges(first.leaf_index, last.leaf_index, size) {
        stored.add_rows(read_tree_range(tx, batch_id.as_bytes(), start, end).await?)?;
    }
    for row in &rows {
        stored.add(row.leaf_index, &row.leaf_hash, row.nodes.as_deref())?;
    }
    let legacy = if stored.legacy {
        Some(legacy_tree(tx, batch_id, size).await?)
    } else {
        None
    };
    rows.into_iter()
        .map(|row| {
            let proof = match &legacy {
                Some(tree) => tree
                    .proof(row.leaf_index)
                    .ok_or_else(|| corrupt("command_batch_scope", "leaf index past the scope"))?,
                None => stored.proof(row.leaf_index, size)?,
            };
            scope_entry(row, proof)
        })
        .collect()
}

/// The stored proof of the leaf with this hash (what the gateway sends with a command), read
/// from at most 17 rows and checked against the batch's root before it is handed out.
pub async fn leaf_proof(
    store: &EventStore,
    batch_id: &BatchId,
    leaf_hash: &ScopeHash,
) -> Result<Option<ScopeProof>, QuorumError> {
    let mut tx = store.begin().await?;
    let result = leaf_proof_in(&mut tx, batch_id, leaf_hash).await;
    let _ = tx.rollback().await;
    result
}

async fn leaf_proof_in(
    tx: &mut StoreTx,
    batch_id: &BatchId,
    leaf_hash: &ScopeHash,
) -> Result<Option<ScopeProof>, QuorumError> {
    let Some(row) = read_leaf(tx, batch_id.as_bytes(), leaf_hash.as_bytes()).await? else {
        return Ok(None);
    };
    let batch = require_batch(tx, batch_id).await?;
    let size = batch.scope_size;
    let root = ScopeHash::from_slice(&batch.scope_root).map_err(|e| corrupt("scope_root", e))?;
    let index = row.leaf_index;
    let proof = if row.nodes.is_none() {
        legacy_tree(tx, batch_id, size)
            .await?
            .proof(index)
            .ok_or_else(|| corrupt("command_batch_scope", "leaf index past the scope"))?
    } else {
        let wanted: Vec<u32> = proof_rows(index, size)
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        let mut stored = StoredNodes::default();
        stored.add_rows(read_tree_rows(tx, batch_id.as_bytes(), &wanted).await?)?;
        if stored.legacy {
            legacy_tree(tx, batch_id, size)
                .await?
                .proof(index)
                .ok_or_else(|| corrupt("command_batch_scope", "leaf index past the scope"))?
        } else {
            stored.proof(index, size)?
        }
    };
    verify_proof(leaf_hash, &proof, size, &root).map_err(|e| {
        corrupt(
            "command_batch_scope",
            format!("the stored proof of leaf {index}: {e}"),
        )
    })?;
    Ok(Some(proof))
}
