//! The approver's review (`batch approve`, on the approver's machine): what must hold before an
//! approver signs a batch. The batch takes approvals and the approval's reach is bounded (its
//! window open and closing within the approver's `--max-hours`); the listed scope is the
//! batch's (the root recomputed from the leaves, never the server's word), the one the approver
//! reviewed and expects, every leaf bound to a payload unless unbound leaves are allowed; and a
//! key that already approved signs nothing. Pure: the CLI fetches, calls these and prints.

use std::collections::BTreeSet;

use super::approval::{BatchApprovalState, BatchStatus};
use super::approver_set::Kid;
use super::scope::{BatchId, ScopeHash, ScopeLeaf, ScopeTree, MAX_SCOPE_LEAVES};

/// What `--expect` names: subjects, or (subject, kind) pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    Subjects(BTreeSet<String>),
    Commands(BTreeSet<(String, String)>),
}

/// What the approver pins the scope to.
#[derive(Debug, Clone, Default)]
pub struct ReviewedScope<'a> {
    /// The root the approver reviewed (`--root`, hex, any case).
    pub root: Option<&'a str>,
    /// The subjects or commands the approver expects (`--expect`).
    pub expected: Option<&'a Expected>,
    /// Leaves bound to no payload are allowed (`--allow-unbound`).
    pub allow_unbound: bool,
}

/// Why the approver does not sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewRefusal {
    /// The batch is not pending.
    NotPending(BatchStatus),
    /// The batch claims a scope size it cannot have (the answer is invalid).
    ImpossibleScopeSize(u32),
    /// The batch's window closed at `not_after_us`.
    WindowClosed { not_after_us: i64 },
    /// The window stays open past `--max-hours` from now.
    WindowTooLong { not_after_us: i64, max_hours: u32 },
    /// The listed leaves are not the batch's scope (the text says how).
    ScopeMismatch(String),
    /// The scope is not the one reviewed.
    ScopeChanged { actual: ScopeHash, reviewed: String },
    /// The scope is not the one expected: `missing [..], not expected [..]`.
    Unexpected(String),
    /// Leaves bound to no payload: how many, and the first five (subject, kind).
    Unbound {
        count: usize,
        first: Vec<(String, String)>,
    },
}

/// The batch takes approvals and an approval's reach is bounded: pending, a scope of a size it
/// may have, its window open at `now_us` and closing within `max_hours`.
pub fn review_window(
    state: &BatchApprovalState,
    max_hours: u32,
    now_us: i64,
) -> Result<(), ReviewRefusal> {
    if state.status != BatchStatus::Pending {
        return Err(ReviewRefusal::NotPending(state.status));
    }
    if state.scope_size == 0 || state.scope_size as usize > MAX_SCOPE_LEAVES {
        return Err(ReviewRefusal::ImpossibleScopeSize(state.scope_size));
    }
    if now_us > state.not_after_us {
        return Err(ReviewRefusal::WindowClosed {
            not_after_us: state.not_after_us,
        });
    }
    let max_end = now_us.saturating_add(i64::from(max_hours) * 3_600_000_000);
    if state.not_after_us > max_end {
        return Err(ReviewRefusal::WindowTooLong {
            not_after_us: state.not_after_us,
            max_hours,
        });
    }
    Ok(())
}

/// The listed `leaves` are the batch's scope (they give its root and size), the one reviewed
/// and expected, each bound to a payload unless allowed: [`review_listed`], then
/// [`review_contents`].
pub fn review_scope(
    batch_id: &BatchId,
    state: &BatchApprovalState,
    leaves: &[ScopeLeaf],
    reviewed: &ReviewedScope<'_>,
) -> Result<(), ReviewRefusal> {
    review_listed(batch_id, state, leaves, reviewed.root)?;
    review_contents(leaves, reviewed.expected, reviewed.allow_unbound)
}

/// The listed `leaves` give the batch's root and size, and that root is the one reviewed
/// (`root`, hex, any case).
pub fn review_listed(
    batch_id: &BatchId,
    state: &BatchApprovalState,
    leaves: &[ScopeLeaf],
    root: Option<&str>,
) -> Result<(), ReviewRefusal> {
    let tree = ScopeTree::build(batch_id, leaves)
        .map_err(|e| ReviewRefusal::ScopeMismatch(e.to_string()))?;
    if tree.root() != state.scope_root
        || tree.size() != state.scope_size
        || leaves.len() != state.scope_size as usize
    {
        return Err(ReviewRefusal::ScopeMismatch(format!(
            "the {} listed leaves give root {} over {} distinct leaves, the batch claims {} over {}",
            leaves.len(),
            tree.root(),
            tree.size(),
            state.scope_root,
            state.scope_size
        )));
    }
    if let Some(root) = root {
        if !root.eq_ignore_ascii_case(&state.scope_root.to_hex()) {
            return Err(ReviewRefusal::ScopeChanged {
                actual: state.scope_root,
                reviewed: root.to_string(),
            });
        }
    }
    Ok(())
}

/// The scope's leaves are the ones `expected` names, and each is bound to a payload unless
/// `allow_unbound`.
pub fn review_contents(
    leaves: &[ScopeLeaf],
    expected: Option<&Expected>,
    allow_unbound: bool,
) -> Result<(), ReviewRefusal> {
    if let Some(expected) = expected {
        let mismatch = match expected {
            Expected::Subjects(want) => {
                let have = leaves.iter().map(|l| l.subject().to_string()).collect();
                difference(want, &have)
            }
            Expected::Commands(want) => {
                let have = leaves
                    .iter()
                    .map(|l| (l.subject().to_string(), l.kind().to_string()))
                    .collect();
                difference(want, &have)
            }
        };
        if let Some(m) = mismatch {
            return Err(ReviewRefusal::Unexpected(m));
        }
    }
    let unbound: Vec<&ScopeLeaf> = leaves
        .iter()
        .filter(|l| l.payload_sha256().is_none())
        .collect();
    if !unbound.is_empty() && !allow_unbound {
        return Err(ReviewRefusal::Unbound {
            count: unbound.len(),
            first: unbound
                .iter()
                .take(5)
                .map(|l| (l.subject().to_string(), l.kind().to_string()))
                .collect(),
        });
    }
    Ok(())
}

/// Whether `kid` still has to sign: a key that already approved the batch signs nothing.
pub fn already_approved(state: &BatchApprovalState, kid: &Kid) -> bool {
    state.approvals.contains_key(kid)
}

/// How two sets differ (at most five each way), `None` when they are equal.
pub fn difference<T: Ord + std::fmt::Debug>(
    want: &BTreeSet<T>,
    have: &BTreeSet<T>,
) -> Option<String> {
    let missing: Vec<_> = want.difference(have).take(5).collect();
    let extra: Vec<_> = have.difference(want).take(5).collect();
    if missing.is_empty() && extra.is_empty() {
        None
    } else {
        Some(format!("missing {missing:?}, not expected {extra:?}"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const HOUR: i64 = 3_600_000_000;

    fn state(status: BatchStatus, not_after_us: i64) -> BatchApprovalState {
        BatchApprovalState {
            batch_id: BatchId::derive("t1", "ops", "k1").unwrap(),
            scope_root: ScopeHash::from_slice(&[7; 32]).unwrap(),
            scope_size: 2,
            not_after_us,
            required: 2,
            status,
            approvals: BTreeMap::new(),
        }
    }

    #[test]
    fn only_a_pending_batch_closing_within_the_bound_is_signed() {
        let now = 1_000 * HOUR;
        assert_eq!(
            review_window(&state(BatchStatus::Pending, now + HOUR), 24, now),
            Ok(())
        );
        assert_eq!(
            review_window(&state(BatchStatus::Approved, now + HOUR), 24, now),
            Err(ReviewRefusal::NotPending(BatchStatus::Approved))
        );
        assert_eq!(
            review_window(&state(BatchStatus::Pending, now - 1), 24, now),
            Err(ReviewRefusal::WindowClosed {
                not_after_us: now - 1
            })
        );
        assert_eq!(
            review_window(&state(BatchStatus::Pending, now + 25 * HOUR), 24, now),
            Err(ReviewRefusal::WindowTooLong {
                not_after_us: now + 25 * HOUR,
                max_hours: 24
            })
        );
        let mut empty = state(BatchStatus::Pending, now + HOUR);
        empty.scope_size = 0;
        assert_eq!(
            review_window(&empty, 24, now),
            Err(ReviewRefusal::ImpossibleScopeSize(0))
        );
    }

    #[test]
    fn expectations_name_what_is_missing_and_what_is_not_expected() {
        let want: BTreeSet<String> = ["a", "b"].map(String::from).into();
        let have: BTreeSet<String> = ["b", "c"].map(String::from).into();
        assert_eq!(
            difference(&want, &have).as_deref(),
            Some("missing [\"a\"], not expected [\"c\"]")
        );
        assert_eq!(difference(&want, &want), None);
    }
}
