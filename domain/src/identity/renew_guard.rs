//! What stops a renewal that proved possession of the key (spec 002, issue 17): a certificate
//! already renewed is never renewed again, and a node renews at most
//! [`RENEWALS_PER_HOUR`] times an hour.
//!
//! A superseded leaf (a newer certificate of the same node and identity generation exists)
//! renewing with a valid proof by its key means two holders of one node key: the renewal is
//! refused as `renew:superseded` and [`super::decide_renew`] flags it (`security.renew.cloned`) and
//! revokes every certificate of the node (`node.identity.revoked`, the generation goes up), so
//! neither holder keeps an identity; the machine joins again with fresh evidence.
//!
//! The bound counts the node's renewals in the hour before `now` as the `node_certs`
//! projection holds them (rebuilt from the log, never a counter in memory); the 7th is refused
//! as `renew:rate-limited` and [`renewal_retry_at`] says when the oldest of the six leaves the
//! window, which the edge sends as `grpc-retry-pushback-ms`.

use events::schema::{NodeIdentityRevoked, RenewCloned};
use time::Duration;

use super::state::{IdentityEvent, NodeState};

/// Renewals a node may make in [`RENEWAL_WINDOW`] (spec 002).
pub const RENEWALS_PER_HOUR: usize = 6;
/// The window the bound counts in.
pub const RENEWAL_WINDOW: Duration = Duration::hours(1);

/// When the next renewal is allowed, µs since the epoch, or `None` when one is allowed now.
/// `recent_us` are the issue times of the node's renewals in the window before `now_us`, in
/// any order.
pub fn renewal_retry_at(recent_us: &[i64], now_us: i64) -> Option<i64> {
    let window = RENEWAL_WINDOW.whole_microseconds() as i64;
    let mut in_window: Vec<i64> = recent_us
        .iter()
        .copied()
        .filter(|t| *t > now_us.saturating_sub(window))
        .collect();
    if in_window.len() < RENEWALS_PER_HOUR {
        return None;
    }
    in_window.sort_unstable();
    // Once every renewal up to this one has left the window, fewer than the bound remain.
    let oldest_that_must_leave = in_window[in_window.len() - RENEWALS_PER_HOUR];
    Some(oldest_that_must_leave.saturating_add(window))
}

/// The events of a cloned certificate, which [`super::decide_renew`] refuses with
/// `renew:superseded`: `security.renew.cloned` naming the superseded leaf, its successor and
/// what is revoked, then `node.identity.revoked` revoking every certificate of the node not yet
/// revoked (`unrevoked_serials`, as the shell loaded them, oldest first).
pub(crate) fn clone_events(
    node: &NodeState,
    presented_serial: &str,
    successor_serial: &str,
    csr_sha256: [u8; 32],
    unrevoked_serials: &[String],
) -> Vec<IdentityEvent> {
    vec![
        IdentityEvent::RenewCloned(RenewCloned {
            node_id: node.node_id.clone(),
            presented_serial: presented_serial.to_owned(),
            successor_serial: successor_serial.to_owned(),
            csr_sha256: csr_sha256.to_vec(),
            revoked_serials: unrevoked_serials.to_vec(),
        }),
        IdentityEvent::IdentityRevoked(NodeIdentityRevoked {
            node_id: node.node_id.clone(),
            reason: format!(
                "cloned certificate: serial {presented_serial} renewed again after \
                 {successor_serial} superseded it"
            ),
            new_identity_generation: node.identity_generation + 1,
            revoked_serials: unrevoked_serials.to_vec(),
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000_000;

    #[test]
    fn six_an_hour_then_the_oldest_must_leave() {
        let now = 10 * H;
        let five: Vec<i64> = (1..=5).map(|i| now - i * 60_000_000).collect();
        assert_eq!(renewal_retry_at(&five, now), None);
        let mut six = five.clone();
        six.push(now - 50 * 60_000_000);
        // The oldest (50 min ago) leaves the window in 10 min.
        assert_eq!(renewal_retry_at(&six, now), Some(now + 10 * 60_000_000));
        // Renewals older than the window do not count.
        let mut old = five;
        old.push(now - H);
        assert_eq!(renewal_retry_at(&old, now), None);
        // Eight in the window: the third oldest must leave too.
        let eight: Vec<i64> = (1..=8).map(|i| now - i * 5 * 60_000_000).collect();
        assert_eq!(
            renewal_retry_at(&eight, now),
            Some(now - 30 * 60_000_000 + H)
        );
    }
}
