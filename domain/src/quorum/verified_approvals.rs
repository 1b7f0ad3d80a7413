//! The in-memory memo of batch approvals whose signatures were verified, so a daemon verifies a
//! batch's approval once for all its commands (see [`super::admission::admit_cached`]).

use std::collections::BTreeMap;

use super::approval::BatchApproval;
use super::approver_set::{ApproverSet, Kid};
use super::scope::BatchId;
use super::trust_domain::TrustDomain;

/// The most approvals a [`VerifiedApprovals`] memo keeps (one per batch).
pub const MAX_VERIFIED_APPROVALS: usize = 256;

/// Batch approvals whose signatures were verified and met the requirement, one per batch id.
/// In memory only (no serde): see the module docs.
#[derive(Debug, Clone, Default)]
pub struct VerifiedApprovals {
    entries: BTreeMap<BatchId, VerifiedApproval>,
}

#[derive(Debug, Clone)]
struct VerifiedApproval {
    approval: BatchApproval,
    set: ApproverSet,
    trust_domain: TrustDomain,
    approvers: Vec<Kid>,
}

impl VerifiedApprovals {
    /// An empty memo.
    pub fn new() -> Self {
        VerifiedApprovals::default()
    }

    /// How many approvals are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops every entry (for example when the held approver set changes).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The approvers verified for exactly this approval, set and trust domain.
    pub(super) fn lookup(
        &self,
        approval: &BatchApproval,
        set: &ApproverSet,
        trust_domain: &TrustDomain,
    ) -> Option<&[Kid]> {
        let entry = self.entries.get(&approval.batch_id)?;
        (entry.approval == *approval && entry.set == *set && entry.trust_domain == *trust_domain)
            .then_some(entry.approvers.as_slice())
    }

    pub(super) fn insert(
        &mut self,
        approval: &BatchApproval,
        set: &ApproverSet,
        trust_domain: &TrustDomain,
        approvers: &[Kid],
        now_us: i64,
    ) {
        if !self.entries.contains_key(&approval.batch_id)
            && self.entries.len() >= MAX_VERIFIED_APPROVALS
        {
            self.entries
                .retain(|_, entry| entry.approval.not_after_us >= now_us);
            if self.entries.len() >= MAX_VERIFIED_APPROVALS {
                let soonest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, entry)| entry.approval.not_after_us)
                    .map(|(id, _)| *id);
                if let Some(id) = soonest {
                    self.entries.remove(&id);
                }
            }
        }
        self.entries.insert(
            approval.batch_id,
            VerifiedApproval {
                approval: approval.clone(),
                set: set.clone(),
                trust_domain: trust_domain.clone(),
                approvers: approvers.to_vec(),
            },
        );
    }
}
