//! Pruning expired single-use records: the `attestation_uses` rows whose expiry passed are
//! dropped with one `attestation.uses.pruned` event naming them.

use std::convert::Infallible;

use events::schema::{AttestationUseKey, AttestationUsesPruned};

use crate::decision::Decision;

/// Prunes the expired `attestation_uses` rows `expired` (attestor, subject), as the shell read
/// them at `now_us`: one event naming them all, none when there are none. The outcome is how
/// many were pruned.
pub fn decide_prune(
    expired: Vec<(String, Vec<u8>)>,
    now_us: i64,
) -> Result<Decision<AttestationUsesPruned, u64>, Infallible> {
    if expired.is_empty() {
        return Ok(Decision::unchanged(0));
    }
    let n = expired.len() as u64;
    Ok(Decision {
        events: vec![AttestationUsesPruned {
            expired_before_us: now_us,
            keys: expired
                .into_iter()
                .map(|(attestor, subject)| AttestationUseKey { attestor, subject })
                .collect(),
        }],
        outcome: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_expired_prunes_nothing_and_appends_nothing() {
        let d = decide_prune(Vec::new(), 5).unwrap();
        assert!(d.events.is_empty());
        assert_eq!(d.outcome, 0);
        let d = decide_prune(vec![("renew-pop".into(), vec![1])], 5).unwrap();
        assert_eq!(d.outcome, 1);
        assert_eq!(d.events[0].expired_before_us, 5);
    }
}
