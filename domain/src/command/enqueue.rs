//! The queue's decision on a new command (issue 21 "The queue"): the role's kinds, a ramdisk
//! certificate's allowed kinds, the batch rules (`batch-required` up front with approver keys
//! published and no break-glass allowance; a batched command's (subject, kind) in its batch's
//! scope, the batch of the node's own tenant, pending or approved and unexpired), and whether
//! the command is held until its batch is approved.
//!
//! [`plan_enqueue`] is pure: the shell loads the node, its certificate's allowed kinds, the
//! batch and its scope leaves for (node id, kind), and the published approver set into an
//! [`EnqueueState`]; [`super::queue::decide_enqueue`] signs the body the [`EnqueuePlan`] says
//! with the signer the shell passes and decides the event. A node command's
//! subject (the batch scope leaf's subject) is the node id itself.

use super::kinds::{kind_spec, KindSpec};
use super::payloads::decode_payload;
use super::wire::{MAX_COMMAND_LIFETIME_MS, MAX_PAYLOAD_BYTES};
use crate::pki::NodeRole;
use crate::quorum::{BatchId, BatchStatus, PayloadDigest, ScopeHash, ScopeLeaf};

/// An unbatched command's default lifetime: 24 hours, in µs.
pub const UNBATCHED_LIFETIME_US: i64 = 24 * 3_600_000_000;

/// The longest a command may live, in µs (the wire cap).
pub const MAX_LIFETIME_US: i64 = MAX_COMMAND_LIFETIME_MS * 1000;

/// What the operator asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueCommand {
    /// The node.
    pub node_id: String,
    /// The kind.
    pub kind: String,
    /// The encoded payload (empty: the kind's empty message).
    pub payload: Vec<u8>,
    /// The batch, if any.
    pub batch_id: Option<BatchId>,
    /// How long the command lives, µs (None: 24 hours, or the batch's end).
    pub lifetime_us: Option<i64>,
}

/// The node as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// Its tenant.
    pub tenant_id: String,
    /// Its role's name (`node`, `ramdisk`, ...).
    pub role: String,
    /// `active`, `retired` or `deleted`.
    pub status: String,
    /// Whether it holds a certificate that is neither revoked nor expired.
    pub has_live_certificate: bool,
    /// Its newest certificate's allowed kind patterns (empty: every kind its role allows).
    pub allowed_kinds: Vec<String>,
}

/// One stored scope leaf of the batch for (node id, kind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLeaf {
    /// The payload digest it is bound to, if any.
    pub payload_sha256: Option<PayloadDigest>,
    /// Its stored hash.
    pub leaf_hash: ScopeHash,
}

/// The batch as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchFacts {
    /// Its tenant.
    pub tenant_id: String,
    /// Its status.
    pub status: BatchStatus,
    /// Its end, µs.
    pub not_after_us: i64,
    /// Approvals it needs (0 without approver keys).
    pub required_approvals: u32,
    /// Every scope leaf with subject = the node id and this kind.
    pub leaves: Vec<StoredLeaf>,
}

/// What [`plan_enqueue`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueState {
    /// The node, if it exists.
    pub node: Option<NodeFacts>,
    /// The batch named, if it exists.
    pub batch: Option<BatchFacts>,
    /// Whether the published approver set has keys.
    pub approver_keys_published: bool,
    /// The published break-glass allowance (unbatched destructive commands per hour).
    pub unbatched_per_hour: u32,
    /// Now, µs.
    pub now_us: i64,
}

/// What the shell does with an accepted command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueuePlan {
    /// The node's tenant.
    pub tenant_id: String,
    /// The kind's registry entry.
    pub kind: &'static KindSpec,
    /// `type.googleapis.com/` plus the kind's payload type.
    pub payload_type_url: String,
    /// Whether the kind is destructive.
    pub destructive: bool,
    /// Held until its batch is approved.
    pub held: bool,
    /// The scope leaf it uses (bound to its payload when the scope has one, else unbound).
    pub leaf_hash: Option<ScopeHash>,
    /// The body's end, µs.
    pub not_after_us: i64,
}

/// Why the queue refuses a command. Each message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnqueueRefusal {
    /// Not a registered kind.
    #[error("unknown-kind: {kind:?} is not a command kind; the kinds are {known}")]
    UnknownKind {
        /// The kind asked for.
        kind: String,
        /// The registry's names.
        known: String,
    },
    /// No such node.
    #[error("node-not-found: there is no node {node_id}; check `bcctl node list`")]
    NodeNotFound {
        /// The node.
        node_id: String,
    },
    /// The node is retired or deleted.
    #[error("node-not-active: node {node_id} is {status}; commands go only to active nodes")]
    NodeNotActive {
        /// The node.
        node_id: String,
        /// Its status.
        status: String,
    },
    /// Every certificate of the node is revoked or expired.
    #[error("node-revoked: node {node_id} holds no certificate that is unrevoked and unexpired, so it cannot receive commands; let it rejoin first")]
    NodeRevoked {
        /// The node.
        node_id: String,
    },
    /// The node's role may not run the kind.
    #[error(
        "role-not-allowed: a {role} node may not run {kind}; the kinds its role runs are {allowed}"
    )]
    RoleNotAllowed {
        /// The kind.
        kind: String,
        /// The node's role.
        role: String,
        /// The kinds the role runs.
        allowed: String,
    },
    /// The node's certificate does not allow the kind.
    #[error("kind-not-allowed: node {node_id}'s certificate allows only {allowed}, not {kind}")]
    KindNotAllowed {
        /// The node.
        node_id: String,
        /// The kind.
        kind: String,
        /// The certificate's allowed kinds, comma-joined.
        allowed: String,
    },
    /// The payload is larger than a command carries.
    #[error("payload-too-large: the payload is {len} bytes; at most 65536 are allowed")]
    PayloadTooLarge {
        /// Its length.
        len: usize,
    },
    /// The payload does not decode as the kind's type.
    #[error("payload-invalid: {why}; give the payload as JSON of the kind's message (bcctl command run --payload-file)")]
    PayloadInvalid {
        /// The decoder's words.
        why: String,
    },
    /// The lifetime asked for is outside (0, 72 h].
    #[error("lifetime-out-of-range: a command lives more than 0 and at most 72 hours, not {lifetime_us} µs")]
    LifetimeOutOfRange {
        /// What was asked.
        lifetime_us: i64,
    },
    /// A destructive kind without a batch while approver keys are published.
    #[error("batch-required: {kind} is destructive and approver keys are published, so it runs only in an approved batch: create one with `bcctl batch create` and pass --batch, or allow unbatched destructive commands with `[quorum] unbatched_per_hour` (break-glass)")]
    BatchRequired {
        /// The kind.
        kind: String,
    },
    /// No such batch, or one of another tenant (NOT_FOUND).
    #[error("batch-not-found: batch {batch_id} not found")]
    BatchNotFound {
        /// The batch, hex.
        batch_id: String,
    },
    /// The batch is expired or cancelled.
    #[error("batch-not-open: batch {batch_id} is {status}; create a new batch")]
    BatchNotOpen {
        /// The batch, hex.
        batch_id: String,
        /// Its status.
        status: String,
    },
    /// The batch has passed its end.
    #[error("batch-expired: batch {batch_id} ended at {not_after_us} µs; create a new batch")]
    BatchExpired {
        /// The batch, hex.
        batch_id: String,
        /// Its end.
        not_after_us: i64,
    },
    /// (node id, kind) is not in the batch's scope (INVALID_INPUT).
    #[error("not-in-scope: ({subject}, {kind}) is not in batch {batch_id}'s scope; create a batch that includes it")]
    NotInScope {
        /// The batch, hex.
        batch_id: String,
        /// The subject (the node id).
        subject: String,
        /// The kind.
        kind: String,
    },
    /// The scope binds (node id, kind) only to other payloads (INVALID_INPUT).
    #[error("payload-not-in-scope: batch {batch_id} binds ({subject}, {kind}) to other payloads than this one (SHA-256 {payload_sha256}); send the payload the approvers signed")]
    PayloadNotInScope {
        /// The batch, hex.
        batch_id: String,
        /// The subject.
        subject: String,
        /// The kind.
        kind: String,
        /// The payload's SHA-256, hex.
        payload_sha256: String,
    },
}

impl EnqueueRefusal {
    /// The stable kebab-case reason.
    pub fn reason(&self) -> &'static str {
        match self {
            EnqueueRefusal::UnknownKind { .. } => "unknown-kind",
            EnqueueRefusal::NodeNotFound { .. } => "node-not-found",
            EnqueueRefusal::NodeNotActive { .. } => "node-not-active",
            EnqueueRefusal::NodeRevoked { .. } => "node-revoked",
            EnqueueRefusal::RoleNotAllowed { .. } => "role-not-allowed",
            EnqueueRefusal::KindNotAllowed { .. } => "kind-not-allowed",
            EnqueueRefusal::PayloadTooLarge { .. } => "payload-too-large",
            EnqueueRefusal::PayloadInvalid { .. } => "payload-invalid",
            EnqueueRefusal::LifetimeOutOfRange { .. } => "lifetime-out-of-range",
            EnqueueRefusal::BatchRequired { .. } => "batch-required",
            EnqueueRefusal::BatchNotFound { .. } => "batch-not-found",
            EnqueueRefusal::BatchNotOpen { .. } => "batch-not-open",
            EnqueueRefusal::BatchExpired { .. } => "batch-expired",
            EnqueueRefusal::NotInScope { .. } => "not-in-scope",
            EnqueueRefusal::PayloadNotInScope { .. } => "payload-not-in-scope",
        }
    }

    /// The code the CLI and the API name it by: `NOT_FOUND`, `INVALID_INPUT`, `INVALID_STATE`
    /// or `PERMISSION_DENIED`.
    pub fn code(&self) -> &'static str {
        match self {
            EnqueueRefusal::NodeNotFound { .. } | EnqueueRefusal::BatchNotFound { .. } => {
                "NOT_FOUND"
            }
            EnqueueRefusal::NodeNotActive { .. }
            | EnqueueRefusal::NodeRevoked { .. }
            | EnqueueRefusal::BatchNotOpen { .. }
            | EnqueueRefusal::BatchExpired { .. } => "INVALID_STATE",
            EnqueueRefusal::RoleNotAllowed { .. } | EnqueueRefusal::KindNotAllowed { .. } => {
                "PERMISSION_DENIED"
            }
            _ => "INVALID_INPUT",
        }
    }
}

use crate::attest::kinds::kinds_allow;
pub use crate::attest::kinds::pattern_allows;

/// Whether `command` enters the queue, and how: the queue's rules, a pure calculation that
/// [`super::queue::decide_enqueue`] turns into the signed `command.enqueued`.
pub fn plan_enqueue(
    command: &EnqueueCommand,
    state: &EnqueueState,
) -> Result<EnqueuePlan, EnqueueRefusal> {
    let kind = kind_spec(&command.kind).ok_or_else(|| EnqueueRefusal::UnknownKind {
        kind: command.kind.clone(),
        known: super::kinds::BUILT_IN_KINDS
            .iter()
            .map(|k| k.name)
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    let node = check_node(command, state, kind)?;
    if command.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(EnqueueRefusal::PayloadTooLarge {
            len: command.payload.len(),
        });
    }
    decode_payload(kind.payload_type, &command.payload)
        .map_err(|e| EnqueueRefusal::PayloadInvalid { why: e.to_string() })?;
    if let Some(lifetime_us) = command.lifetime_us {
        if lifetime_us <= 0 || lifetime_us > MAX_LIFETIME_US {
            return Err(EnqueueRefusal::LifetimeOutOfRange { lifetime_us });
        }
    }
    let asked_end = |default: i64| {
        state
            .now_us
            .saturating_add(command.lifetime_us.unwrap_or(default))
    };
    let base = |held, leaf_hash, not_after_us| EnqueuePlan {
        tenant_id: node.tenant_id.clone(),
        kind,
        payload_type_url: kind.type_url(),
        destructive: kind.destructive,
        held,
        leaf_hash,
        not_after_us,
    };
    let Some(batch_id) = command.batch_id else {
        if kind.destructive && state.approver_keys_published && state.unbatched_per_hour == 0 {
            return Err(EnqueueRefusal::BatchRequired {
                kind: kind.name.to_string(),
            });
        }
        return Ok(base(false, None, asked_end(UNBATCHED_LIFETIME_US)));
    };
    let hex = batch_id.to_hex();
    let batch = match &state.batch {
        Some(b) if b.tenant_id == node.tenant_id => b,
        _ => return Err(EnqueueRefusal::BatchNotFound { batch_id: hex }),
    };
    match batch.status {
        BatchStatus::Pending | BatchStatus::Approved => {}
        other => {
            return Err(EnqueueRefusal::BatchNotOpen {
                batch_id: hex,
                status: other.as_str().to_string(),
            })
        }
    }
    if batch.not_after_us <= state.now_us {
        return Err(EnqueueRefusal::BatchExpired {
            batch_id: hex,
            not_after_us: batch.not_after_us,
        });
    }
    let leaf = choose_leaf(
        &batch_id,
        &command.node_id,
        kind.name,
        &command.payload,
        batch,
    )?;
    let held = batch.status == BatchStatus::Pending && batch.required_approvals > 0;
    let not_after_us = batch
        .not_after_us
        .min(asked_end(MAX_LIFETIME_US))
        .min(state.now_us.saturating_add(MAX_LIFETIME_US));
    Ok(base(held, Some(leaf), not_after_us))
}

/// The node a command is for: it exists, is active, holds a live certificate, and its role and
/// its certificate's allowed kinds admit the command's kind.
fn check_node<'s>(
    command: &EnqueueCommand,
    state: &'s EnqueueState,
    kind: &KindSpec,
) -> Result<&'s NodeFacts, EnqueueRefusal> {
    let node = state
        .node
        .as_ref()
        .ok_or_else(|| EnqueueRefusal::NodeNotFound {
            node_id: command.node_id.clone(),
        })?;
    if node.status != "active" {
        return Err(EnqueueRefusal::NodeNotActive {
            node_id: command.node_id.clone(),
            status: node.status.clone(),
        });
    }
    if !node.has_live_certificate {
        return Err(EnqueueRefusal::NodeRevoked {
            node_id: command.node_id.clone(),
        });
    }
    check_kind_allowed(&command.node_id, node, kind)?;
    Ok(node)
}

/// Whether `node`'s role and its newest live certificate's allowed kinds admit `kind`: checked
/// at enqueue and again at dispatch (issue 40 item 16), when the node's certificate may have
/// changed since (a ramdisk that re-joined with narrower allowed kinds).
pub fn check_kind_allowed(
    node_id: &str,
    node: &NodeFacts,
    kind: &KindSpec,
) -> Result<(), EnqueueRefusal> {
    let role_allows = node
        .role
        .parse::<NodeRole>()
        .map(|role| kind.allows_role(role))
        .unwrap_or(false);
    if !role_allows {
        return Err(EnqueueRefusal::RoleNotAllowed {
            kind: kind.name.to_string(),
            role: node.role.clone(),
            allowed: kinds_of_role(&node.role),
        });
    }
    if !kinds_allow(&node.allowed_kinds, kind.name) {
        return Err(EnqueueRefusal::KindNotAllowed {
            node_id: node_id.to_owned(),
            kind: kind.name.to_string(),
            allowed: node.allowed_kinds.join(","),
        });
    }
    Ok(())
}

/// The leaf a batched command uses: the one bound to its payload's SHA-256 when the scope has
/// it, else the unbound one. The hash is recomputed, so a stored hash that disagrees with its
/// leaf is never used.
fn choose_leaf(
    batch_id: &BatchId,
    subject: &str,
    kind: &str,
    payload: &[u8],
    batch: &BatchFacts,
) -> Result<ScopeHash, EnqueueRefusal> {
    let digest = PayloadDigest::of(payload);
    let hash_of = |d: Option<PayloadDigest>| {
        ScopeLeaf::new(subject, kind, d)
            .ok()
            .map(|leaf| leaf.hash(batch_id))
    };
    let has =
        |want: Option<ScopeHash>| want.filter(|w| batch.leaves.iter().any(|l| l.leaf_hash == *w));
    if let Some(bound) = has(hash_of(Some(digest))) {
        return Ok(bound);
    }
    if let Some(unbound) = has(hash_of(None)) {
        return Ok(unbound);
    }
    if batch.leaves.iter().any(|l| l.payload_sha256.is_some()) {
        return Err(EnqueueRefusal::PayloadNotInScope {
            batch_id: batch_id.to_hex(),
            subject: subject.to_string(),
            kind: kind.to_string(),
            payload_sha256: hex::encode(digest.as_bytes()),
        });
    }
    Err(EnqueueRefusal::NotInScope {
        batch_id: batch_id.to_hex(),
        subject: subject.to_string(),
        kind: kind.to_string(),
    })
}

fn kinds_of_role(role: &str) -> String {
    let Ok(role) = role.parse::<NodeRole>() else {
        return "none (not an agent role)".to_string();
    };
    super::kinds::BUILT_IN_KINDS
        .iter()
        .filter(|k| k.allows_role(role))
        .map(|k| k.name)
        .collect::<Vec<_>>()
        .join(", ")
}
