//! The agent-side admission check for destructive commands, as a pure function over a small,
//! persisted state.
//!
//! Spec, "The destructive-batch quorum", on the machine: with approver keys held, a destructive
//! command "with a batch_id runs only with a batch_approval of enough distinct approver signatures
//! (the tier for its scope size, else the threshold, never fewer than one; a kid must be the SHA-256
//! of its key; duplicates count once), not past its not_after in server time, and a batch_proof
//! that proves the command's own (subject, kind) leaf [...]; else it is BATCH_UNAPPROVED. Each leaf
//! runs at most once [...] key a used leaf by the hash of the leaf the proof matched [...] a
//! redelivery or re-execution of the same command keeps its leaf [...] data_dir/batch-leaves.json
//! until the approval's not_after. One without a batch_id counts against a rolling-hour allowance
//! (unbatched_destructive_per_hour, default 0), beyond which it is UNBATCHED_LIMIT; redeliveries do
//! not count twice, and bcd keeps the count in data_dir/unbatched-destructive.json". "The unbatched
//! window counts on the local clock [...]. Approvals still expire in server time." "Nothing is
//! used before admission." The proof may match "either the bound or the unbound leaf"; a command
//! the daemon treats as a write (a non-GET site.httpProxy) "runs only under a leaf bound to its
//! exact payload, never an unbound one, and never unbatched". "Pinning the first set": a daemon
//! with a pin and no keys refuses destructive commands BATCH_UNAPPROVED until it holds a set.
//!
//! [`admit`] takes the command, the daemon's quorum, its [`AdmissionState`] and both clocks, and
//! returns the verdict with the new state. Nothing changes on a refusal, so the caller persists
//! the returned state only after admitting the command. The signature check of the command itself
//! comes before, and non-destructive kinds never come here. bcd stores
//! [`AdmissionState::used_leaves`] in [`BATCH_LEAVES_FILE`] and [`AdmissionState::unbatched`] in
//! [`UNBATCHED_FILE`], as JSON ([`UsedLeaves::to_json`], [`UnbatchedRuns::to_json`]).
//!
//! [`admit_cached`] gives the same verdict as [`admit`] for every input, and keeps the approval
//! signatures it verified in a [`VerifiedApprovals`] memo held in memory beside the state (never
//! persisted: a file must not be able to vouch for a signature). A batch's approval travels with
//! every one of its commands, byte for byte the same, so the daemon verifies its signatures for
//! the first command of the batch and then checks each further command's own Merkle proof, its
//! leaf, and the approval's not_after against the daemon's trusted time. A memo entry is used only when every
//! input of the signature check is identical to the one verified: the approval (batch id, scope
//! root, scope size, not_after and every signature, in order), the held approver set (all its keys,
//! thresholds and tiers) and the trust domain. A changed set, a re-signed approval or another
//! trust domain is verified afresh. Only verdicts that met the requirement are kept.
//!
//! "Server time" above is, on bcd, its trusted time ([`AdmissionClock::trusted_now_us`]): the
//! later of its own clock and the highest signed time it has seen. A Welcome's server time is
//! not signed, so it never enters: a gateway that sent one an hour back could otherwise make a
//! daemon run an approval that had ended (docs/DECISIONS.md "Issue 40: the time a node judges
//! signed things at").

use super::approval::BatchApproval;
use super::approver_set::{ApproverSet, Kid, SetDigest};
use super::scope::{
    leaf_hash, verify_proof, BatchId, PayloadDigest, ProofError, ScopeHash, ScopeProof,
};
use super::trust_domain::TrustDomain;

pub use super::admission_state::{
    AdmissionState, StateFileError, UnbatchedRun, UnbatchedRuns, UsedLeaf, UsedLeaves,
    BATCH_LEAVES_FILE, UNBATCHED_FILE,
};
pub use super::verified_approvals::{VerifiedApprovals, MAX_VERIFIED_APPROVALS};

/// The unbatched allowance's rolling window: one hour, in µs.
pub const UNBATCHED_WINDOW_US: i64 = 3_600_000_000;

/// The quorum a daemon enforces.
#[derive(Debug, Clone, Copy)]
pub struct AgentQuorum<'a> {
    /// The held approver set ([`ApproverSet::none`] without keys).
    pub set: &'a ApproverSet,
    /// The first-set pin from the daemon's configuration, if any.
    pub pin: Option<&'a SetDigest>,
    /// The daemon's own trust domain, from its configuration.
    pub trust_domain: &'a TrustDomain,
}

/// A destructive command, as the daemon read it after checking its signature.
#[derive(Debug, Clone, Copy)]
pub struct DestructiveCommand<'a> {
    /// The command's id: a redelivery carries the same one.
    pub command_id: &'a str,
    /// What it acts on, computed by the daemon from the signed body.
    pub subject: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// SHA-256 of its payload.
    pub payload_sha256: &'a PayloadDigest,
    /// The batch id from the signed body.
    pub batch_id: Option<&'a BatchId>,
    /// `Command.batch_approval`, outside the signature.
    pub approval: Option<&'a BatchApproval>,
    /// `Command.batch_proof`, outside the signature.
    pub proof: Option<&'a ScopeProof>,
    /// A write that must run under a leaf bound to its exact payload and never unbatched (a
    /// non-GET site.httpProxy).
    pub bound_leaf_only: bool,
}

/// The two clocks admission reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionClock {
    /// The daemon's trusted time, µs since the Unix epoch: the later of its own clock and the
    /// highest signed time it has seen (never a Welcome's unsigned one). Approvals expire in it.
    pub trusted_now_us: i64,
    /// The daemon's local clock, µs since the Unix epoch: the unbatched window counts in it.
    pub local_now_us: i64,
}

/// Why a command is admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The daemon holds no approver keys and no pin: no quorum applies.
    NoQuorum,
    /// A batched command with its approval and proof.
    Batched {
        /// The leaf it runs on.
        leaf: ScopeHash,
        /// The approvers counted (up to the requirement).
        approvers: Vec<Kid>,
        /// The same command ran on this leaf before (a redelivery).
        redelivery: bool,
    },
    /// An unbatched command within the hourly allowance.
    Unbatched {
        /// Runs in the window, this one included.
        used: u32,
        /// The allowance.
        cap: u32,
        /// The same command was counted before (a redelivery).
        redelivery: bool,
    },
}

/// The wire reject reason of a refusal (`CommandRejectReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// BATCH_UNAPPROVED.
    BatchUnapproved,
    /// UNBATCHED_LIMIT.
    UnbatchedLimit,
}

/// Why a destructive command does not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionRefusal {
    /// The daemon has a first-set pin and holds no set yet.
    #[error("awaiting-pinned-set: this node is pinned to approver set {pin} and holds none yet; destructive commands wait until the pinned set arrives in the trust bundle")]
    AwaitingPinnedSet {
        /// The pinned digest.
        pin: SetDigest,
    },
    /// A batch id without an approval.
    #[error("approval-missing: the command names a batch but carries no batch approval; the gateway sends batched commands only once their batch is approved")]
    ApprovalMissing,
    /// A batch id without a proof.
    #[error("proof-missing: the command names a batch but carries no inclusion proof")]
    ProofMissing,
    /// The approval is for another batch than the signed body names.
    #[error("batch-mismatch: the signed command names batch {command}, the approval is for batch {approval}")]
    BatchMismatch {
        /// The batch in the signed body.
        command: BatchId,
        /// The batch the approval names.
        approval: BatchId,
    },
    /// The approval is past its not_after at the daemon's trusted time.
    #[error("approval-expired: the batch approval ended at {not_after_us} µs, this node's time is {now_us} µs; create and approve a new batch")]
    Expired {
        /// The approval's end.
        not_after_us: i64,
        /// The daemon's trusted time.
        now_us: i64,
    },
    /// Too few distinct valid approvals for the scope's tier.
    #[error("too-few-approvals: {valid} valid distinct approvals for a scope of {scope_size} leaves, {required} needed in trust domain {trust_domain}")]
    TooFewApprovals {
        /// Valid distinct approvals found.
        valid: u32,
        /// Approvals the tier needs.
        required: u32,
        /// The scope size.
        scope_size: u32,
        /// The daemon's trust domain.
        trust_domain: String,
    },
    /// The proof does not prove this command's own leaf.
    #[error("leaf-not-in-scope: the proof does not show ({subject}, {kind}) in the approved scope: {error}")]
    LeafNotInScope {
        /// The command's subject.
        subject: String,
        /// The command's kind.
        kind: String,
        /// Why the proof fails.
        error: ProofError,
    },
    /// A write matched only the unbound leaf.
    #[error("bound-leaf-required: ({subject}, {kind}) is a write and runs only under a leaf bound to its exact payload, not an any-payload leaf")]
    BoundLeafRequired {
        /// The command's subject.
        subject: String,
        /// The command's kind.
        kind: String,
    },
    /// Another command already ran on the leaf.
    #[error("leaf-used: command {used_by} already ran on leaf {leaf}; an approval for N machines is N operations")]
    LeafUsed {
        /// The leaf.
        leaf: ScopeHash,
        /// The command that used it.
        used_by: String,
    },
    /// A write without a batch.
    #[error("unbatched-forbidden: ({subject}, {kind}) is a write and never runs unbatched under a quorum, whatever the hourly allowance; put it in a batch")]
    UnbatchedForbidden {
        /// The command's subject.
        subject: String,
        /// The command's kind.
        kind: String,
    },
    /// The rolling-hour allowance is used up.
    #[error("unbatched-limit: {used} unbatched destructive commands ran in the last hour, the allowance is {cap}; put the command in a batch")]
    UnbatchedLimit {
        /// Runs in the window.
        used: u32,
        /// The allowance.
        cap: u32,
    },
}

impl AdmissionRefusal {
    /// The wire reject reason.
    pub fn reject_reason(&self) -> RejectReason {
        match self {
            AdmissionRefusal::UnbatchedForbidden { .. }
            | AdmissionRefusal::UnbatchedLimit { .. } => RejectReason::UnbatchedLimit,
            _ => RejectReason::BatchUnapproved,
        }
    }

    /// The short reason for logs and refusal events.
    pub fn reason(&self) -> &'static str {
        match self {
            AdmissionRefusal::AwaitingPinnedSet { .. } => "awaiting-pinned-set",
            AdmissionRefusal::ApprovalMissing => "approval-missing",
            AdmissionRefusal::ProofMissing => "proof-missing",
            AdmissionRefusal::BatchMismatch { .. } => "batch-mismatch",
            AdmissionRefusal::Expired { .. } => "approval-expired",
            AdmissionRefusal::TooFewApprovals { .. } => "too-few-approvals",
            AdmissionRefusal::LeafNotInScope { .. } => "leaf-not-in-scope",
            AdmissionRefusal::BoundLeafRequired { .. } => "bound-leaf-required",
            AdmissionRefusal::LeafUsed { .. } => "leaf-used",
            AdmissionRefusal::UnbatchedForbidden { .. } => "unbatched-forbidden",
            AdmissionRefusal::UnbatchedLimit { .. } => "unbatched-limit",
        }
    }
}

/// Decides whether a destructive command runs; on admission returns the state to persist.
pub fn admit(
    command: &DestructiveCommand<'_>,
    quorum: &AgentQuorum<'_>,
    state: &AdmissionState,
    clock: AdmissionClock,
) -> Result<(Admission, AdmissionState), AdmissionRefusal> {
    admit_inner(command, quorum, state, None, clock)
}

/// [`admit`], verifying a batch's approval signatures once: the verdict is kept in `verified`
/// and reused for the batch's further commands while the approval, the held set and the trust
/// domain stay byte for byte the same. Same verdicts as [`admit`] for every input.
pub fn admit_cached(
    command: &DestructiveCommand<'_>,
    quorum: &AgentQuorum<'_>,
    state: &AdmissionState,
    verified: &mut VerifiedApprovals,
    clock: AdmissionClock,
) -> Result<(Admission, AdmissionState), AdmissionRefusal> {
    admit_inner(command, quorum, state, Some(verified), clock)
}

fn admit_inner(
    command: &DestructiveCommand<'_>,
    quorum: &AgentQuorum<'_>,
    state: &AdmissionState,
    verified: Option<&mut VerifiedApprovals>,
    clock: AdmissionClock,
) -> Result<(Admission, AdmissionState), AdmissionRefusal> {
    if quorum.set.is_empty() {
        return match quorum.pin {
            Some(pin) => Err(AdmissionRefusal::AwaitingPinnedSet { pin: *pin }),
            None => Ok((Admission::NoQuorum, state.clone())),
        };
    }
    match command.batch_id {
        Some(batch_id) => admit_batched(command, batch_id, quorum, state, verified, clock),
        None => admit_unbatched(command, quorum, state, clock),
    }
}

/// The distinct valid approvers, up to `required`, from the memo when it holds this exact
/// approval, else verified (and kept when they meet the requirement).
fn approvers_of(
    approval: &BatchApproval,
    quorum: &AgentQuorum<'_>,
    required: u32,
    verified: Option<&mut VerifiedApprovals>,
    now_us: i64,
) -> Vec<Kid> {
    let Some(memo) = verified else {
        return approval.valid_approvers_up_to(quorum.set, quorum.trust_domain, required as usize);
    };
    if let Some(approvers) = memo.lookup(approval, quorum.set, quorum.trust_domain) {
        return approvers.to_vec();
    }
    let approvers =
        approval.valid_approvers_up_to(quorum.set, quorum.trust_domain, required as usize);
    if approvers.len() >= required as usize {
        memo.insert(
            approval,
            quorum.set,
            quorum.trust_domain,
            &approvers,
            now_us,
        );
    }
    approvers
}

fn admit_batched(
    command: &DestructiveCommand<'_>,
    batch_id: &BatchId,
    quorum: &AgentQuorum<'_>,
    state: &AdmissionState,
    verified: Option<&mut VerifiedApprovals>,
    clock: AdmissionClock,
) -> Result<(Admission, AdmissionState), AdmissionRefusal> {
    let approval = command.approval.ok_or(AdmissionRefusal::ApprovalMissing)?;
    let proof = command.proof.ok_or(AdmissionRefusal::ProofMissing)?;
    if approval.batch_id != *batch_id {
        return Err(AdmissionRefusal::BatchMismatch {
            command: *batch_id,
            approval: approval.batch_id,
        });
    }
    if clock.trusted_now_us > approval.not_after_us {
        return Err(AdmissionRefusal::Expired {
            not_after_us: approval.not_after_us,
            now_us: clock.trusted_now_us,
        });
    }
    let leaf = proven_leaf(command, batch_id, approval, proof)?;
    let used = state.used_leaves.leaves.get(&leaf);
    if let Some(used) = used {
        if used.command_id != command.command_id {
            return Err(AdmissionRefusal::LeafUsed {
                leaf,
                used_by: used.command_id.clone(),
            });
        }
    }
    let required = quorum.set.required_approvals(approval.scope_size);
    let approvers = approvers_of(approval, quorum, required, verified, clock.trusted_now_us);
    if approvers.len() < required as usize {
        return Err(AdmissionRefusal::TooFewApprovals {
            valid: approvers.len() as u32,
            required,
            scope_size: approval.scope_size,
            trust_domain: quorum.trust_domain.to_string(),
        });
    }
    let mut next = state.clone();
    next.used_leaves
        .leaves
        .retain(|_, entry| entry.not_after_us >= clock.trusted_now_us);
    next.used_leaves.leaves.insert(
        leaf,
        UsedLeaf {
            command_id: command.command_id.to_string(),
            not_after_us: approval
                .not_after_us
                .max(used.map_or(i64::MIN, |u| u.not_after_us)),
        },
    );
    Ok((
        Admission::Batched {
            leaf,
            approvers,
            redelivery: used.is_some(),
        },
        next,
    ))
}

/// The leaf the proof proves: the one bound to the payload, else (unless the command is a write)
/// the unbound one.
fn proven_leaf(
    command: &DestructiveCommand<'_>,
    batch_id: &BatchId,
    approval: &BatchApproval,
    proof: &ScopeProof,
) -> Result<ScopeHash, AdmissionRefusal> {
    let bound = leaf_hash(
        batch_id,
        command.subject,
        command.kind,
        Some(command.payload_sha256),
    );
    let bound_error = match verify_proof(&bound, proof, approval.scope_size, &approval.scope_root) {
        Ok(()) => return Ok(bound),
        Err(error) => error,
    };
    let unbound = leaf_hash(batch_id, command.subject, command.kind, None);
    if verify_proof(&unbound, proof, approval.scope_size, &approval.scope_root).is_ok() {
        if command.bound_leaf_only {
            return Err(AdmissionRefusal::BoundLeafRequired {
                subject: command.subject.to_string(),
                kind: command.kind.to_string(),
            });
        }
        return Ok(unbound);
    }
    Err(AdmissionRefusal::LeafNotInScope {
        subject: command.subject.to_string(),
        kind: command.kind.to_string(),
        error: bound_error,
    })
}

fn admit_unbatched(
    command: &DestructiveCommand<'_>,
    quorum: &AgentQuorum<'_>,
    state: &AdmissionState,
    clock: AdmissionClock,
) -> Result<(Admission, AdmissionState), AdmissionRefusal> {
    if command.bound_leaf_only {
        return Err(AdmissionRefusal::UnbatchedForbidden {
            subject: command.subject.to_string(),
            kind: command.kind.to_string(),
        });
    }
    let cap = quorum.set.unbatched_per_hour();
    let window_start = clock.local_now_us.saturating_sub(UNBATCHED_WINDOW_US);
    let mut next = state.clone();
    next.unbatched.runs.retain(|run| run.at_us > window_start);
    let in_window = u32::try_from(next.unbatched.runs.len()).unwrap_or(u32::MAX);
    if next
        .unbatched
        .runs
        .iter()
        .any(|run| run.command_id == command.command_id)
    {
        return Ok((
            Admission::Unbatched {
                used: in_window,
                cap,
                redelivery: true,
            },
            next,
        ));
    }
    if in_window >= cap {
        return Err(AdmissionRefusal::UnbatchedLimit {
            used: in_window,
            cap,
        });
    }
    next.unbatched.runs.push(UnbatchedRun {
        command_id: command.command_id.to_string(),
        at_us: clock.local_now_us,
    });
    Ok((
        Admission::Unbatched {
            used: in_window + 1,
            cap,
            redelivery: false,
        },
        next,
    ))
}
