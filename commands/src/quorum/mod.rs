//! Trust bundle and destructive-batch commands (issue 6): the transaction boundary around
//! `domain::quorum`'s decisions.
//!
//! - [`bundle`]: settling the published trust bundle (content-versioned, history-aware, with a
//!   floor), approver-set changes, command-signing root rotation (add, switch, drop) and the
//!   trust versions nodes report.
//! - [`batch`]: creating batches (scope tree and stored proofs), approvals, expiry (a reconciler
//!   the server calls periodically) and cancel, and the reads the CLI and the gateway need.
//!
//! Every refusal is a [`QuorumRefusal`] inside [`QuorumError::Refused`]; store and projection
//! failures are [`QuorumError::Run`] (bugs or outages, not refusals).

pub mod batch;
pub mod bundle;

use domain::quorum::{
    ApprovalRefusal, ApproverSetError, BatchId, BatchRefusal, ScopeTree, SetChangeRefusal,
};
use events::schema::BatchLeaf;
use events::store::StoreError;
use projections::quorum::{
    BatchProjection, NodeTrustProjection, ScopeIndex, TrustBundleProjection,
};
use projections::Projection;

use crate::run::{AsConflict, RunError};

pub use batch::{
    approve_batch, batch_view, cancel_batch, create_batch, expire_due_batches, leaf_proof,
    scope_page, ApproveOutcome, BatchView, CreatedBatch, ScopeEntry,
};
pub use bundle::{
    drop_command_root, published_bundle, report_node_trust, rotate_add_command_root,
    settle_trust_bundle, switch_command_root, BundleConfig, PublishedBundle, SettleOutcome,
    Settled, Switched, TrustReport,
};

/// The stream of the deployment's trust bundle.
pub const TRUST_BUNDLE_STREAM: &str = "trust-bundle";
/// Tenant id for deployment-wide events (the trust bundle).
pub const DEPLOYMENT_TENANT: &str = "deployment";

/// Why a quorum command was refused. Each names its way out.
#[derive(Debug, thiserror::Error)]
pub enum QuorumRefusal {
    /// The configuration cannot be published (INVALID_CONFIG).
    #[error("invalid trust bundle configuration: {0}")]
    InvalidConfig(String),
    /// The approver set is invalid (INVALID_CONFIG).
    #[error("invalid approver set: {0}")]
    ApproverSet(#[from] ApproverSetError),
    /// The approver-set change is not taken (stale-epoch, approver-set-unsigned, pin-mismatch).
    #[error("approver set change refused ({reason}): {0}", reason = .0.reason())]
    SetChange(#[from] SetChangeRefusal),
    /// A step out of order (INVALID_STATE).
    #[error("invalid state: {0}")]
    InvalidState(String),
    /// Connected nodes do not hold the version the switch needs (INVALID_STATE; `--force` skips).
    #[error("Not switching: {behind} of {connected} connected node(s) have not applied trust version {version} ({sample}); wait for them or use --force")]
    NodesBehind {
        behind: usize,
        connected: usize,
        version: u64,
        sample: String,
    },
    /// The batch request is refused (INVALID_INPUT, or CONFLICT for a reused idempotency key).
    #[error(transparent)]
    Batch(#[from] BatchRefusal),
    /// The approval is refused.
    #[error(transparent)]
    Approval(#[from] ApprovalRefusal),
    /// No such batch (NOT_FOUND).
    #[error("batch {0} not found")]
    BatchNotFound(BatchId),
}

impl QuorumRefusal {
    /// Whether the refusal is a CONFLICT (an idempotency key reused for another request).
    pub fn is_conflict(&self) -> bool {
        matches!(self, QuorumRefusal::Batch(BatchRefusal::Conflict { .. }))
    }

    /// The refusal's code, as the CLI and the API name it: `INVALID_CONFIG`, `INVALID_STATE`,
    /// `INVALID_INPUT`, `CONFLICT`, `NOT_FOUND` or `PERMISSION_DENIED` (an approval by a key
    /// outside the published set, or one that does not verify).
    pub fn code(&self) -> &'static str {
        match self {
            QuorumRefusal::InvalidConfig(_)
            | QuorumRefusal::ApproverSet(_)
            | QuorumRefusal::SetChange(_) => "INVALID_CONFIG",
            QuorumRefusal::InvalidState(_) | QuorumRefusal::NodesBehind { .. } => "INVALID_STATE",
            QuorumRefusal::Batch(BatchRefusal::Conflict { .. }) => "CONFLICT",
            QuorumRefusal::Batch(_) => "INVALID_INPUT",
            QuorumRefusal::Approval(
                ApprovalRefusal::NotPending { .. } | ApprovalRefusal::Expired { .. },
            ) => "INVALID_STATE",
            QuorumRefusal::Approval(
                ApprovalRefusal::UnknownApprover { .. } | ApprovalRefusal::BadSignature { .. },
            ) => "PERMISSION_DENIED",
            QuorumRefusal::BatchNotFound(_) => "NOT_FOUND",
        }
    }
}

/// What a quorum command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("refused: {0}")]
    Refused(#[from] QuorumRefusal),
    #[error("{0}")]
    Run(#[from] RunError),
    /// Stored state that cannot be read back (a bug or a corrupt row).
    #[error("stored quorum state is unreadable: {0}")]
    Corrupt(String),
}

impl QuorumError {
    /// The refusal, if this is one.
    pub fn refusal(&self) -> Option<&QuorumRefusal> {
        match self {
            QuorumError::Refused(r) => Some(r),
            _ => None,
        }
    }
}

impl From<StoreError> for QuorumError {
    fn from(e: StoreError) -> Self {
        QuorumError::Run(RunError::Store(e))
    }
}

impl AsConflict for QuorumError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            QuorumError::Run(run) => run.into_conflict().map_err(QuorumError::Run),
            other => Err(other),
        }
    }
}

fn refused<T>(refusal: impl Into<QuorumRefusal>) -> Result<T, QuorumError> {
    Err(QuorumError::Refused(refusal.into()))
}

/// Leaf hashes of a batch's leaves, computed on up to two threads for large batches (hashing is
/// pure, so the result is the same on any number of threads).
fn leaf_hashes(
    batch_id: &BatchId,
    leaves: &[BatchLeaf],
) -> Result<Vec<domain::quorum::ScopeHash>, String> {
    fn hash_all(
        batch_id: &BatchId,
        leaves: &[BatchLeaf],
    ) -> Result<Vec<domain::quorum::ScopeHash>, String> {
        leaves
            .iter()
            .map(|leaf| {
                let digest = if leaf.payload_sha256.is_empty() {
                    None
                } else {
                    Some(
                        domain::quorum::PayloadDigest::from_slice(&leaf.payload_sha256)
                            .map_err(|e| e.to_string())?,
                    )
                };
                Ok(domain::quorum::leaf_hash(
                    batch_id,
                    &leaf.subject,
                    &leaf.kind,
                    digest.as_ref(),
                ))
            })
            .collect()
    }
    const PARALLEL_FROM: usize = 8192;
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

/// Builds the scope tree of a `batch.created` event's leaves with `domain::quorum`'s maths, for
/// the batch projection: each row's leaf hash and the tree's nodes stored with it
/// ([`ScopeTree::stored_nodes_into`]).
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

static TRUST_BUNDLE: TrustBundleProjection = TrustBundleProjection;
static NODE_TRUST: NodeTrustProjection = NodeTrustProjection;
static BATCHES: BatchProjection = BatchProjection::new(scope_indexer);

/// The quorum projections, inline and for rebuilds.
pub fn projections() -> [&'static dyn Projection; 3] {
    [&TRUST_BUNDLE, &NODE_TRUST, &BATCHES]
}

/// Every table the quorum projections own (for digests).
pub fn tables() -> Vec<projections::TableSpec> {
    projections()
        .iter()
        .flat_map(|p| p.tables().iter().copied())
        .collect()
}

fn new_event_id() -> [u8; 16] {
    events::envelope::new_event_id()
}
