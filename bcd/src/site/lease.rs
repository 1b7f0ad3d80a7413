//! The task that holds the boot lease ([`hold_lease`]; the pure view of it is [`super::view`]):
//! ACQUIRE at start and whenever it is not held, RENEW every `renew_every_ms`,
//! RELEASE when told to stop. Every change of epoch or of holding is logged.
//!
//! Whether the agent may vouch is decided locally, on every request: it holds the lease, and the
//! lease's `expires_at_ms` (the server's clock) has not passed by the server's clock as estimated
//! from the last answer's `server_time_ms`. The offset is taken against the local time the
//! request was *sent*, which can only put the estimated server time later than the real one: the
//! agent stops vouching at the lapse or a little before it, never after.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use domain::site::SiteCall;
use proto::site_lease_request::Action;
use tokio::sync::watch;

use super::agent::{SiteAgent, SiteShared};
use super::log_line::site_log;
pub use super::view::{show_ms, LeaseChange, LeaseView, DEFAULT_RENEW_EVERY, MIN_LEASE_WAIT};
use crate::client::{describe_status, CALL_TIMEOUT};
use crate::files::DataDir;
use crate::node::{now_ms, NodeOptions};

/// How long a RELEASE may take on the way out.
pub const RELEASE_TIMEOUT: StdDuration = StdDuration::from_secs(5);

/// The local clock in unix ms.
pub fn local_now_ms() -> i64 {
    now_ms(crate::clock::now())
}

fn log_change(change: &LeaseChange) {
    match change {
        LeaseChange::Acquired {
            epoch,
            expires_at_ms,
        } => site_log(format_args!(
            "boot lease held at epoch {epoch} (until {}); vouching",
            show_ms(*expires_at_ms)
        )),
        LeaseChange::NotHeld { epoch, holder } if holder.is_empty() => site_log(format_args!(
            "boot lease not held (epoch {epoch}, free); not vouching"
        )),
        LeaseChange::NotHeld { epoch, holder } => site_log(format_args!(
            "boot lease not held: epoch {epoch} is held by {holder}; not vouching"
        )),
        LeaseChange::Epoch { from, to, holder } => site_log(format_args!(
            "boot lease epoch {from} -> {to} (held by {})",
            if holder.is_empty() { "nobody" } else { holder }
        )),
    }
}

async fn call(
    agent: &SiteAgent,
    action: Action,
    epoch: u64,
) -> Result<proto::SiteLeaseResponse, String> {
    let mut client = agent.client.clone();
    let call = match action {
        Action::Renew => SiteCall::LeaseRenew { epoch },
        Action::Release => SiteCall::LeaseRelease { epoch },
        Action::Acquire | Action::Unspecified => SiteCall::LeaseAcquire,
    };
    let (client_time_ms, signature) = agent.prove(call)?;
    let request = proto::SiteLeaseRequest {
        action: action as i32,
        epoch,
        client_time_ms,
        signature,
    };
    match tokio::time::timeout(CALL_TIMEOUT, client.site_lease(request)).await {
        Ok(Ok(answer)) => Ok(answer.into_inner()),
        Ok(Err(status)) => Err(describe_status(&status)),
        Err(_) => Err(format!("no answer within {} s", CALL_TIMEOUT.as_secs())),
    }
}

/// Holds the boot lease until `stop` turns true, then releases it (when held).
pub async fn hold_lease(
    dir: DataDir,
    options: NodeOptions,
    shared: Arc<SiteShared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut lapsed_logged = false;
    let mut failures = 0u32;
    let mut immediate = false;
    loop {
        if *stop.borrow() {
            break;
        }
        let agent = match shared.agent_for(&dir, &options).await {
            Ok(agent) => agent,
            Err(e) => {
                failures += 1;
                site_log(format_args!("boot lease: {e}; retrying"));
                wait_or_stop(&mut stop, backoff(failures)).await;
                continue;
            }
        };
        let view = shared.view();
        let now = local_now_ms();
        let (action, epoch) = match view.live_epoch(now) {
            Some(epoch) => (Action::Renew, epoch),
            None => {
                if view.held && !lapsed_logged {
                    site_log(format_args!(
                        "boot lease epoch {} lapsed at {} with no renewal answered; not vouching",
                        view.epoch,
                        show_ms(view.expires_at_ms)
                    ));
                    lapsed_logged = true;
                }
                (Action::Acquire, 0)
            }
        };
        match call(&agent, action, epoch).await {
            Ok(answer) => {
                failures = 0;
                if let Some(change) = shared.apply(&answer, now) {
                    log_change(&change);
                }
                if answer.held {
                    lapsed_logged = false;
                }
                // A RENEW answered held=false: ACQUIRE at once (once; then wait as usual).
                if action == Action::Renew && !answer.held && !immediate {
                    immediate = true;
                    continue;
                }
                immediate = false;
            }
            Err(e) => {
                failures += 1;
                site_log(format_args!("boot lease {}: {e}", action.as_str_name()));
                shared.forget_agent();
                let view = shared.view();
                let wait = backoff(failures).min(view.next_call_in(local_now_ms()));
                wait_or_stop(&mut stop, wait).await;
                continue;
            }
        }
        let view = shared.view();
        let now = local_now_ms();
        let mut wait = view.next_call_in(now);
        if let Some(_epoch) = view.live_epoch(now) {
            // Wake at the local lapse too, to log it the moment it happens.
            let left = view.expires_at_ms.saturating_sub(view.server_now_ms(now));
            wait = wait.min(StdDuration::from_millis(u64::try_from(left).unwrap_or(0)));
        }
        wait_or_stop(&mut stop, wait.max(MIN_LEASE_WAIT)).await;
    }
    release(&dir, &options, &shared).await;
}

/// RELEASE on the way out, when this agent believes it holds the lease (redialling once when
/// the last call dropped the connection).
async fn release(dir: &DataDir, options: &NodeOptions, shared: &SiteShared) {
    let view = shared.view();
    shared.drop_holding();
    if !view.held {
        return;
    }
    let released = async {
        let agent = shared
            .agent_for(dir, options)
            .await
            .map_err(|e| e.to_string())?;
        call(&agent, Action::Release, view.epoch).await
    };
    match tokio::time::timeout(RELEASE_TIMEOUT, released).await {
        Ok(Ok(_)) => site_log(format_args!("boot lease released (epoch {})", view.epoch)),
        Ok(Err(e)) => site_log(format_args!(
            "boot lease RELEASE of epoch {} failed: {e}; it lapses at {}",
            view.epoch,
            show_ms(view.expires_at_ms)
        )),
        Err(_) => site_log(format_args!(
            "boot lease RELEASE of epoch {} took too long; it lapses at {}",
            view.epoch,
            show_ms(view.expires_at_ms)
        )),
    }
}

fn backoff(failures: u32) -> StdDuration {
    let doublings = failures.saturating_sub(1).min(5);
    StdDuration::from_millis(500u64 << doublings).min(StdDuration::from_secs(10))
}

async fn wait_or_stop(stop: &mut watch::Receiver<bool>, wait: StdDuration) {
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = stop.changed() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_calls_back_off_up_to_ten_seconds() {
        assert_eq!(backoff(1), StdDuration::from_millis(500));
        assert_eq!(backoff(30), StdDuration::from_secs(10));
    }
}
