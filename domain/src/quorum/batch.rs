//! Creating a batch: the request's limits, its scope, its id and idempotency, and the approvals
//! it needs.
//!
//! Spec, "Who creates batches" and "The destructive-batch quorum": a batch takes "tenantId, a
//! reason shown to approvers (at most 500 characters), the scope leaves ({ subject, kind,
//! payloadSha256?, payload? } [...]; 1 to 50,000 of them), notAfterSeconds (60 s to 72 h, default
//! 24 h) and an idempotencyKey. The batch id derives from the tenant, the caller's identity and the
//! key, [...] a retry returns the same batch [...], while the same key reused for another request
//! is CONFLICT." A leaf's payload is `{ typeUrl, value }`, "at most 64 KiB a leaf, and 8 MiB for all
//! of a batch's leaves: its digest is then derived from those bytes (a payloadSha256 given as well
//! must match)", and its typeUrl is `type.googleapis.com/` plus the kind's payload type (for a
//! kind of the registry, exactly its own; another kind's payload only needs the prefix). A batch
//! "needs requiredApprovals for its size (0 without approver keys)".
//!
//! Our choices where the spec is silent: the reason must not be empty (approvers read it) and is
//! counted in Unicode scalar values; the payload digest is SHA-256 of `value`; a kind outside the
//! registry (whose payloads this build cannot decode) needs only the prefix, a registered kind's
//! other typeUrl is [`BatchRefusal::PayloadTypeMismatch`]; the request digest (for idempotency) is SHA-256 over purpose
//! `batch-request` and `[reason, uint32_be(not_after_seconds), scope root, uint32_be(size),
//! SHA-256 of the leaves' lp(typeUrl) in tree order]` ([`RequestDigest`]); a batch without required
//! approvals is approved at creation.

use sha2::{Digest, Sha256};

use super::approval::BatchStatus;
use super::approver_set::ApproverSet;
use super::bytes32::bytes32_newtype;
use super::scope::{
    BatchId, BatchIdError, PayloadDigest, ScopeError, ScopeHash, ScopeLeaf, ScopeTree,
    MAX_SCOPE_LEAVES,
};
use super::signing::{put_lp, signed_parts};
use crate::command::kinds::kind_spec;

/// The longest reason, in characters.
pub const MAX_REASON_CHARS: usize = 500;
/// The shortest window, in seconds.
pub const MIN_NOT_AFTER_SECONDS: u32 = 60;
/// The longest window, in seconds (72 h).
pub const MAX_NOT_AFTER_SECONDS: u32 = 72 * 3600;
/// The window when none is asked for (24 h).
pub const DEFAULT_NOT_AFTER_SECONDS: u32 = 24 * 3600;
/// The largest inline payload of one leaf (64 KiB).
pub const MAX_LEAF_PAYLOAD_BYTES: usize = 64 * 1024;
/// The largest total of a batch's inline payloads (8 MiB).
pub const MAX_BATCH_PAYLOAD_BYTES: usize = 8 * 1024 * 1024;
/// Every payload typeUrl starts with this.
pub const PAYLOAD_TYPE_URL_PREFIX: &str = "type.googleapis.com/";

bytes32_newtype!(
    /// The digest of a create request: a retry with the same idempotency key must match it.
    RequestDigest
);

/// A payload carried in a leaf so approvers can decode what they sign.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct LeafPayload {
    /// `type.googleapis.com/` plus the kind's payload type.
    pub type_url: String,
    /// The encoded payload (hex in JSON).
    #[serde(with = "crate::quorum::bytes32::hex_bytes")]
    pub value: Vec<u8>,
}

/// One leaf as a create request gives it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScopeLeafRequest {
    /// What the command acts on.
    pub subject: String,
    /// The command kind.
    pub kind: String,
    /// The payload digest the leaf is bound to, if given.
    #[serde(default)]
    pub payload_sha256: Option<PayloadDigest>,
    /// The payload itself, if given.
    #[serde(default)]
    pub payload: Option<LeafPayload>,
}

/// Create a batch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CreateBatch {
    /// The tenant.
    pub tenant: String,
    /// The caller's identity.
    pub caller: String,
    /// The caller's idempotency key.
    pub idempotency_key: String,
    /// The reason shown to approvers.
    pub reason: String,
    /// The scope.
    pub leaves: Vec<ScopeLeafRequest>,
    /// The window in seconds; [`DEFAULT_NOT_AFTER_SECONDS`] when `None`.
    #[serde(default)]
    pub not_after_seconds: Option<u32>,
}

/// One distinct leaf of a planned batch, at its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedLeaf {
    /// The leaf.
    pub leaf: ScopeLeaf,
    /// Its inline payload, if one was given.
    pub payload: Option<LeafPayload>,
    /// Its hash.
    pub hash: ScopeHash,
}

/// A new batch, fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    /// Its id.
    pub batch_id: BatchId,
    /// The request's digest, stored for idempotent retries.
    pub request_digest: RequestDigest,
    /// The reason.
    pub reason: String,
    /// The end, µs since the Unix epoch.
    pub not_after_us: i64,
    /// The distinct leaves in tree order (leaf `i` has proof `tree.proof(i)`).
    pub leaves: Vec<PlannedLeaf>,
    /// The scope tree.
    pub tree: ScopeTree,
    /// Approvals needed.
    pub required_approvals: u32,
    /// `Pending`, or `Approved` when no approvals are needed.
    pub status: BatchStatus,
}

/// The outcome of a create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchCreation {
    /// A new batch.
    New(Box<BatchPlan>),
    /// A retry of the request that created this batch: return it, create nothing.
    Retry {
        /// The existing batch.
        batch_id: BatchId,
    },
}

/// Why a batch is not created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchRefusal {
    /// The batch id cannot be derived.
    #[error(transparent)]
    BatchId(#[from] BatchIdError),
    /// No reason.
    #[error("the batch needs a reason: approvers read it before they sign")]
    ReasonEmpty,
    /// The reason is too long.
    #[error("the reason is {chars} characters long; at most 500 are allowed")]
    ReasonTooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// The window is outside 60 s to 72 h.
    #[error("notAfterSeconds {seconds} is outside 60 to 259200 (72 h)")]
    NotAfterOutOfRange {
        /// The window asked for.
        seconds: u32,
    },
    /// The end does not fit the time range.
    #[error("the batch's end overflows the time range")]
    TimeOverflow,
    /// No leaves, or too many.
    #[error(transparent)]
    Scope(ScopeError),
    /// A leaf is invalid.
    #[error("scope leaf {index}: {error}")]
    Leaf {
        /// The leaf's position in the request.
        index: usize,
        /// What is wrong.
        error: ScopeError,
    },
    /// A leaf's payload is too large.
    #[error("scope leaf {index} carries a {len}-byte payload; at most 65536 bytes are allowed")]
    PayloadTooLarge {
        /// The leaf's position.
        index: usize,
        /// Its payload length.
        len: usize,
    },
    /// The batch's payloads are too large together.
    #[error("the scope's payloads total {total} bytes; at most 8388608 (8 MiB) are allowed: split the batch")]
    BatchPayloadTooLarge {
        /// Their total.
        total: usize,
    },
    /// payloadSha256 is not SHA-256 of the payload.
    #[error("scope leaf {index}: payloadSha256 is not the SHA-256 of its payload")]
    PayloadDigestMismatch {
        /// The leaf's position.
        index: usize,
    },
    /// The typeUrl does not start with `type.googleapis.com/`.
    #[error("scope leaf {index}: payload typeUrl {type_url:?} must be type.googleapis.com/ followed by the kind's payload type")]
    PayloadTypeUrl {
        /// The leaf's position.
        index: usize,
        /// The typeUrl given.
        type_url: String,
    },
    /// A registered kind's payload labelled with another type (spec 003: "The typeUrl must be
    /// type.googleapis.com/ plus the kind's own payload type from the registry").
    #[error("scope leaf {index}: payload typeUrl {type_url:?} is not the payload type of {kind}; {kind} payloads are {expected}")]
    PayloadTypeMismatch {
        /// The leaf's position.
        index: usize,
        /// The leaf's kind.
        kind: String,
        /// The typeUrl given.
        type_url: String,
        /// The registry's typeUrl for the kind.
        expected: String,
    },
    /// A subject names no machine: not a node id, `node:<id>` or `bmc:<agent>/<address>`
    /// (INVALID_INPUT).
    #[error("scope leaf {index}: subject {subject:?} names no machine; use the node id, node:<id> or bmc:<agent>/<address>")]
    SubjectMalformed {
        /// The leaf's position.
        index: usize,
        /// The subject.
        subject: String,
    },
    /// A subject names a node that is unknown or of another tenant (NOT_FOUND).
    #[error("scope leaf {index}: subject {subject:?} names no node of tenant {tenant}; a batch covers only its own tenant's machines")]
    SubjectNotFound {
        /// The leaf's position.
        index: usize,
        /// The subject.
        subject: String,
        /// The batch's tenant.
        tenant: String,
    },
    /// The idempotency key was used for another request (CONFLICT).
    #[error("the idempotency key already created batch {batch_id} from a different request: use a new key")]
    Conflict {
        /// The batch the key created.
        batch_id: BatchId,
    },
}

/// Decides a create request. `existing` is the stored request digest of the batch with the derived
/// id, if there is one.
pub fn plan_create_batch(
    command: &CreateBatch,
    existing: Option<&RequestDigest>,
    set: &ApproverSet,
    now_us: i64,
) -> Result<BatchCreation, BatchRefusal> {
    let plan = plan_request(command, set, now_us)?;
    match existing {
        None => Ok(BatchCreation::New(Box::new(plan))),
        Some(digest) => {
            check_retry(digest, &plan)?;
            Ok(BatchCreation::Retry {
                batch_id: plan.batch_id,
            })
        }
    }
}

/// The batch a create request asks for, whether or not one exists under its id.
pub(crate) fn plan_request(
    command: &CreateBatch,
    set: &ApproverSet,
    now_us: i64,
) -> Result<BatchPlan, BatchRefusal> {
    let batch_id = BatchId::derive(&command.tenant, &command.caller, &command.idempotency_key)?;
    plan_batch(batch_id, command, set, now_us)
}

/// A request whose id is taken is a retry only with the same request digest (else CONFLICT).
pub(crate) fn check_retry(stored: &RequestDigest, plan: &BatchPlan) -> Result<(), BatchRefusal> {
    if *stored == plan.request_digest {
        Ok(())
    } else {
        Err(BatchRefusal::Conflict {
            batch_id: plan.batch_id,
        })
    }
}

fn plan_batch(
    batch_id: BatchId,
    command: &CreateBatch,
    set: &ApproverSet,
    now_us: i64,
) -> Result<BatchPlan, BatchRefusal> {
    let chars = command.reason.chars().count();
    if chars == 0 {
        return Err(BatchRefusal::ReasonEmpty);
    }
    if chars > MAX_REASON_CHARS {
        return Err(BatchRefusal::ReasonTooLong { chars });
    }
    let seconds = command
        .not_after_seconds
        .unwrap_or(DEFAULT_NOT_AFTER_SECONDS);
    if !(MIN_NOT_AFTER_SECONDS..=MAX_NOT_AFTER_SECONDS).contains(&seconds) {
        return Err(BatchRefusal::NotAfterOutOfRange { seconds });
    }
    let not_after_us = now_us
        .checked_add(i64::from(seconds) * 1_000_000)
        .ok_or(BatchRefusal::TimeOverflow)?;
    if command.leaves.is_empty() {
        return Err(BatchRefusal::Scope(ScopeError::Empty));
    }
    if command.leaves.len() > MAX_SCOPE_LEAVES {
        return Err(BatchRefusal::Scope(ScopeError::TooManyLeaves {
            count: command.leaves.len(),
            max: MAX_SCOPE_LEAVES,
        }));
    }
    let mut total_payload = 0usize;
    let mut planned = Vec::with_capacity(command.leaves.len());
    for (index, request) in command.leaves.iter().enumerate() {
        let digest = match &request.payload {
            None => request.payload_sha256,
            Some(payload) => {
                if payload.value.len() > MAX_LEAF_PAYLOAD_BYTES {
                    return Err(BatchRefusal::PayloadTooLarge {
                        index,
                        len: payload.value.len(),
                    });
                }
                total_payload += payload.value.len();
                if total_payload > MAX_BATCH_PAYLOAD_BYTES {
                    return Err(BatchRefusal::BatchPayloadTooLarge {
                        total: total_payload,
                    });
                }
                let suffix = payload.type_url.strip_prefix(PAYLOAD_TYPE_URL_PREFIX);
                if payload.type_url.len() > 1024
                    || suffix.is_none_or(|s| s.is_empty() || s.chars().any(char::is_control))
                {
                    return Err(BatchRefusal::PayloadTypeUrl {
                        index,
                        type_url: payload.type_url.chars().take(200).collect(),
                    });
                }
                if let Some(spec) = kind_spec(&request.kind) {
                    let expected = spec.type_url();
                    if payload.type_url != expected {
                        return Err(BatchRefusal::PayloadTypeMismatch {
                            index,
                            kind: request.kind.clone(),
                            type_url: payload.type_url.chars().take(200).collect(),
                            expected,
                        });
                    }
                }
                let derived = PayloadDigest::of(&payload.value);
                if request.payload_sha256.is_some_and(|given| given != derived) {
                    return Err(BatchRefusal::PayloadDigestMismatch { index });
                }
                Some(derived)
            }
        };
        let leaf = ScopeLeaf::new(request.subject.clone(), request.kind.clone(), digest)
            .map_err(|error| BatchRefusal::Leaf { index, error })?;
        let hash = leaf.hash(&batch_id);
        planned.push(PlannedLeaf {
            leaf,
            payload: request.payload.clone(),
            hash,
        });
    }
    // One leaf per distinct hash; a copy that carries the payload wins over one that does not.
    planned.sort_by(|a, b| {
        a.hash
            .cmp(&b.hash)
            .then_with(|| b.payload.is_some().cmp(&a.payload.is_some()))
    });
    planned.dedup_by(|later, kept| later.hash == kept.hash);
    let tree = ScopeTree::from_leaf_hashes(planned.iter().map(|p| p.hash).collect())
        .map_err(BatchRefusal::Scope)?;
    let request_digest = request_digest(&command.reason, seconds, &tree, &planned);
    let required_approvals = set.required_approvals(tree.size());
    let status = if required_approvals == 0 {
        BatchStatus::Approved
    } else {
        BatchStatus::Pending
    };
    Ok(BatchPlan {
        batch_id,
        request_digest,
        reason: command.reason.clone(),
        not_after_us,
        leaves: planned,
        tree,
        required_approvals,
        status,
    })
}

fn request_digest(
    reason: &str,
    seconds: u32,
    tree: &ScopeTree,
    leaves: &[PlannedLeaf],
) -> RequestDigest {
    let mut type_urls = Vec::new();
    for leaf in leaves {
        put_lp(
            &mut type_urls,
            leaf.payload
                .as_ref()
                .map_or(&b""[..], |p| p.type_url.as_bytes()),
        );
    }
    let type_urls_digest: [u8; 32] = Sha256::digest(&type_urls).into();
    let framed = signed_parts(
        "batch-request",
        &[
            reason.as_bytes(),
            &seconds.to_be_bytes(),
            tree.root().as_bytes(),
            &tree.size().to_be_bytes(),
            &type_urls_digest,
        ],
    );
    RequestDigest(Sha256::digest(framed).into())
}
