//! The end of a batch other than its approval: cancel and expiry.
//!
//! The rules (as the command layer applied them before they moved here): an operator may cancel
//! a pending or an approved batch; a pending batch past its end is expired by the server's
//! reconciler. An expired or cancelled batch
//! stays as it is. Both deciders are pure: status and time come in as values.

use std::convert::Infallible;

use events::schema::{BatchCancelled, BatchExpired};

use super::approval::BatchStatus;
use super::batch_event::BatchEvent;
use super::decision::Decision;
use super::scope::BatchId;

/// Where a batch stands, as cancel and expiry read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchStanding {
    /// The batch.
    pub batch_id: BatchId,
    /// Its status.
    pub status: BatchStatus,
    /// Its end, µs since the Unix epoch.
    pub not_after_us: i64,
}

/// Cancel a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelBatch {
    /// Why (recorded in the event).
    pub reason: String,
    /// Who cancels it.
    pub cancelled_by: String,
}

/// Why a batch is not cancelled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CancelRefusal {
    /// The batch already expired or was cancelled.
    #[error("batch {batch_id} is {status}: only a pending or approved batch can be cancelled", status = .status.as_str())]
    Closed {
        /// The batch.
        batch_id: BatchId,
        /// Its status.
        status: BatchStatus,
    },
}

/// Cancels a pending or approved batch.
pub fn decide_cancel_batch(
    command: &CancelBatch,
    state: &BatchStanding,
) -> Result<Decision<BatchEvent, ()>, CancelRefusal> {
    if !matches!(state.status, BatchStatus::Pending | BatchStatus::Approved) {
        return Err(CancelRefusal::Closed {
            batch_id: state.batch_id,
            status: state.status,
        });
    }
    Ok(Decision {
        events: vec![BatchEvent::Cancelled(BatchCancelled {
            batch_id: state.batch_id.as_bytes().to_vec(),
            reason: command.reason.clone(),
            cancelled_by: command.cancelled_by.clone(),
        })],
        outcome: (),
    })
}

/// Expires a pending batch whose end is before `now_us`; anything else is left as it is (the
/// outcome says whether the batch expired now).
pub fn decide_expire_batch(
    state: &BatchStanding,
    now_us: i64,
) -> Result<Decision<BatchEvent, bool>, Infallible> {
    if state.status != BatchStatus::Pending || state.not_after_us >= now_us {
        return Ok(Decision::unchanged(false));
    }
    Ok(Decision {
        events: vec![BatchEvent::Expired(BatchExpired {
            batch_id: state.batch_id.as_bytes().to_vec(),
            not_after_us: state.not_after_us,
        })],
        outcome: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(status: BatchStatus, not_after_us: i64) -> BatchStanding {
        BatchStanding {
            batch_id: BatchId::derive("t1", "ops", "k1").unwrap(),
            status,
            not_after_us,
        }
    }

    fn cancel() -> CancelBatch {
        CancelBatch {
            reason: "wrong scope".into(),
            cancelled_by: "ops".into(),
        }
    }

    #[test]
    fn pending_and_approved_batches_cancel() {
        for status in [BatchStatus::Pending, BatchStatus::Approved] {
            let state = standing(status, 10);
            let decision = decide_cancel_batch(&cancel(), &state).unwrap();
            assert_eq!(
                decision.events,
                vec![BatchEvent::Cancelled(BatchCancelled {
                    batch_id: state.batch_id.as_bytes().to_vec(),
                    reason: "wrong scope".into(),
                    cancelled_by: "ops".into(),
                })]
            );
        }
    }

    #[test]
    fn an_expired_or_cancelled_batch_is_not_cancelled() {
        for (status, text) in [
            (BatchStatus::Expired, "is expired"),
            (BatchStatus::Cancelled, "is cancelled"),
        ] {
            let refusal = decide_cancel_batch(&cancel(), &standing(status, 10)).unwrap_err();
            assert_eq!(
                refusal,
                CancelRefusal::Closed {
                    batch_id: standing(status, 10).batch_id,
                    status
                }
            );
            assert!(refusal.to_string().contains(text), "{refusal}");
        }
    }

    #[test]
    fn only_a_pending_batch_past_its_end_expires() {
        let due = decide_expire_batch(&standing(BatchStatus::Pending, 10), 11).unwrap();
        assert!(due.outcome);
        assert!(matches!(
            due.events.as_slice(),
            [BatchEvent::Expired(BatchExpired {
                not_after_us: 10,
                ..
            })]
        ));
        // At its end it still runs; approved, cancelled and expired batches stay as they are.
        assert_eq!(
            decide_expire_batch(&standing(BatchStatus::Pending, 10), 10).unwrap(),
            Decision::unchanged(false)
        );
        for status in [
            BatchStatus::Approved,
            BatchStatus::Cancelled,
            BatchStatus::Expired,
        ] {
            assert_eq!(
                decide_expire_batch(&standing(status, 10), 11).unwrap(),
                Decision::unchanged(false)
            );
        }
    }
}
