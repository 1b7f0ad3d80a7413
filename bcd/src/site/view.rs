//! The boot lease as the site agent last heard it ([`LeaseView`], pure: no I/O, no clock of its
//! own): whether it may vouch now, judged by the server's clock as estimated from the last
//! answer, when to call next, and what an answer changed ([`LeaseChange`], for the log).

use std::time::Duration as StdDuration;

use crate::node::{rfc3339, time_of_ms};

/// The renewal interval when an answer names none (the agreed default: 20 s).
pub const DEFAULT_RENEW_EVERY: StdDuration = StdDuration::from_secs(20);
/// The shortest wait between two lease calls.
pub const MIN_LEASE_WAIT: StdDuration = StdDuration::from_millis(200);

/// The lease as the last answer described it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseView {
    /// This agent holds it (as of the last answer, and until `expires_at_ms`).
    pub held: bool,
    /// The lease's epoch (0: never held).
    pub epoch: u64,
    /// When the current holding lapses, the server's clock (unix ms; 0: free).
    pub expires_at_ms: i64,
    /// The holder (empty: free).
    pub holder_node_id: String,
    /// The server's clock minus the local one, milliseconds (see the module documentation).
    pub offset_ms: i64,
    /// How often to renew, milliseconds.
    pub renew_every_ms: i64,
}

/// What an answer changed, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseChange {
    /// This agent now holds the lease at a new epoch.
    Acquired {
        /// The epoch.
        epoch: u64,
        /// Its expiry, server clock.
        expires_at_ms: i64,
    },
    /// Another agent holds it (or nobody does): this agent does not.
    NotHeld {
        /// The lease's epoch.
        epoch: u64,
        /// Its holder (empty: free).
        holder: String,
    },
    /// The epoch moved while this agent did not hold the lease.
    Epoch {
        /// The old one.
        from: u64,
        /// The new one.
        to: u64,
        /// Its holder.
        holder: String,
    },
}

impl LeaseView {
    /// The server's clock now, estimated.
    pub fn server_now_ms(&self, local_now_ms: i64) -> i64 {
        local_now_ms.saturating_add(self.offset_ms)
    }

    /// The epoch this agent may vouch at now: held and not lapsed by the server's clock.
    pub fn live_epoch(&self, local_now_ms: i64) -> Option<u64> {
        (self.held && self.server_now_ms(local_now_ms) < self.expires_at_ms).then_some(self.epoch)
    }

    /// Takes an answer sent at `sent_local_ms`; returns what changed.
    pub fn apply(
        &mut self,
        answer: &proto::SiteLeaseResponse,
        sent_local_ms: i64,
    ) -> Option<LeaseChange> {
        let was = self.clone();
        self.held = answer.held;
        self.epoch = answer.epoch;
        self.expires_at_ms = answer.expires_at_ms;
        self.holder_node_id = answer.holder_node_id.clone();
        if answer.server_time_ms > 0 {
            self.offset_ms = answer.server_time_ms.saturating_sub(sent_local_ms);
        }
        self.renew_every_ms = answer.renew_every_ms;
        match (was.held, answer.held) {
            (_, true) if !was.held || was.epoch != answer.epoch => Some(LeaseChange::Acquired {
                epoch: answer.epoch,
                expires_at_ms: answer.expires_at_ms,
            }),
            (true, false) => Some(LeaseChange::NotHeld {
                epoch: answer.epoch,
                holder: answer.holder_node_id.clone(),
            }),
            (false, false) if was.epoch != answer.epoch => Some(LeaseChange::Epoch {
                from: was.epoch,
                to: answer.epoch,
                holder: answer.holder_node_id.clone(),
            }),
            _ => None,
        }
    }

    /// Marks the lease not held (a RELEASE, a refused boot token): the agent stops vouching.
    pub fn drop_holding(&mut self) {
        self.held = false;
    }

    /// How often to renew.
    pub fn renew_every(&self) -> StdDuration {
        u64::try_from(self.renew_every_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(StdDuration::from_millis)
            .unwrap_or(DEFAULT_RENEW_EVERY)
    }

    /// How long to wait before the next lease call, from `local_now_ms`: the renewal interval
    /// while held (never more than half of what is left), else until the other holding lapses
    /// (bounded by the renewal interval, so a release is noticed soon).
    pub fn next_call_in(&self, local_now_ms: i64) -> StdDuration {
        let every = self.renew_every();
        let left = self
            .expires_at_ms
            .saturating_sub(self.server_now_ms(local_now_ms));
        let left = StdDuration::from_millis(u64::try_from(left).unwrap_or(0));
        let wait = if self.held {
            every.min(left / 2)
        } else if self.expires_at_ms > 0 {
            every.min(left)
        } else {
            every
        };
        wait.max(MIN_LEASE_WAIT)
    }

    /// `{"held": …, "epoch": …, "expiresAt": …}` for `GET /healthz`.
    pub fn health_json(&self, local_now_ms: i64) -> serde_json::Value {
        let live = self.live_epoch(local_now_ms).is_some();
        serde_json::json!({
            "held": live,
            "epoch": self.epoch,
            "expiresAt": if live { Some(show_ms(self.expires_at_ms)) } else { None },
            "holder": self.holder_node_id,
        })
    }
}

/// A server time in RFC 3339.
pub fn show_ms(ms: i64) -> String {
    time_of_ms(ms)
        .map(rfc3339)
        .unwrap_or_else(|| format!("{ms} ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(held: bool, epoch: u64, expires: i64, server: i64) -> proto::SiteLeaseResponse {
        proto::SiteLeaseResponse {
            held,
            epoch,
            expires_at_ms: expires,
            holder_node_id: if held {
                "node_me".into()
            } else {
                "node_other".into()
            },
            server_time_ms: server,
            renew_every_ms: 1_000,
        }
    }

    #[test]
    fn the_lapse_is_judged_by_the_servers_clock() {
        let mut view = LeaseView::default();
        // The server is 10 s ahead of this machine.
        let change = view.apply(&answer(true, 1, 70_000, 20_000), 10_000);
        assert_eq!(
            change,
            Some(LeaseChange::Acquired {
                epoch: 1,
                expires_at_ms: 70_000
            })
        );
        assert_eq!(view.live_epoch(59_999), Some(1));
        assert_eq!(view.live_epoch(60_000), None);
        // A renewal at the same epoch is no change.
        assert_eq!(view.apply(&answer(true, 1, 90_000, 40_000), 30_000), None);
        assert_eq!(
            view.apply(&answer(false, 2, 99_000, 41_000), 31_000),
            Some(LeaseChange::NotHeld {
                epoch: 2,
                holder: "node_other".into()
            })
        );
        assert_eq!(view.live_epoch(31_000), None);
        assert_eq!(
            view.apply(&answer(false, 3, 99_000, 42_000), 32_000),
            Some(LeaseChange::Epoch {
                from: 2,
                to: 3,
                holder: "node_other".into()
            })
        );
    }

    #[test]
    fn waits_are_bounded() {
        let mut view = LeaseView::default();
        view.apply(&answer(true, 1, 3_000, 0), 0);
        assert_eq!(view.next_call_in(0), StdDuration::from_millis(1_000));
        assert_eq!(view.next_call_in(2_800), MIN_LEASE_WAIT);
        view.apply(&answer(false, 2, 2_500, 2_000), 2_000);
        assert_eq!(view.next_call_in(2_000), StdDuration::from_millis(500));
    }
}
