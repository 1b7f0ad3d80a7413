//! An out-of-process attestor's verdict held to what the built-ins are held to (issue 40 item 9,
//! `docs/DECISIONS.md` "Issue 40: external attestor answers are judged like the built-ins'").
//!
//! A built-in attestor judges its evidence's life at the join's time and names a single-use
//! record that outlives it, gives a challenge a deadline minutes away, and takes its tenant from
//! a record an operator made (a token, a site, an allow-list entry). An attestor outside the
//! process answers what it likes, so the JoinService checks, at the join's time (the database's,
//! one clock for every replica):
//!
//! - a single-use subject expires after the join's time, and at most [`MAX_REMOTE_USE_LIFE_US`]
//!   after it (0, no expiry, keeps the record for good): a record already expired would be
//!   pruned by the next maintenance run, after which the same evidence admits again;
//! - a challenge's deadline is after the join's time and at most
//!   [`MAX_REMOTE_CHALLENGE_LIFE_US`] after it: a deadline already past is never passed on;
//! - a single-use subject is recorded under the attestor's own id, and no token is named (it
//!   never read one);
//! - the tenant is not a reserved one ([`DEPLOYMENT_TENANT`], the root tenant):
//!   `join:reserved-tenant`. That the tenant is one an operator created (a site or a pool of it)
//!   is the admission step's `join:unknown-tenant`, on facts the shell loads.
//!
//! A verdict that breaks the first three is an invalid answer ([`InvalidRemoteAnswer`]: the
//! join fails UNAVAILABLE, nothing recorded or spent), as the `bc.attestor.v1` contract says of
//! every answer it does not allow. A tenant it may not name is a refusal, recorded in the root
//! tenant: the answer is well formed, the control plane will not admit there. A remote
//! attestor's refusal is recorded in the root tenant too, whatever tenant it carries.

use super::admission::ADMISSION;
use super::contract::{AttestorRefusal, Verdict};

/// The tenant of deployment-wide events (the trust bundle, operators, serving certificates):
/// no node joins it.
pub const DEPLOYMENT_TENANT: &str = "deployment";

/// The longest a remote attestor's challenge may live: 15 minutes (the `tpm` attestor's is at
/// most 5; an external one may need a person or slow hardware).
pub const MAX_REMOTE_CHALLENGE_LIFE_US: i64 = 15 * 60 * 1_000_000;

/// The furthest a remote attestor's single-use record may expire: 366 days after the join
/// (an expiry of 0 keeps it for good).
pub const MAX_REMOTE_USE_LIFE_US: i64 = 366 * 24 * 3600 * 1_000_000;

/// Why a remote attestor's verdict is not one its contract allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRemoteAnswer {
    /// It named a token.
    #[error("a remote attestor cannot spend a token")]
    NamesToken,
    /// A single-use subject recorded under another attestor's id.
    #[error("a single_use subject is recorded under attestor {found:?}, not its own {expected:?}")]
    ForeignUse {
        /// The id it named.
        found: String,
        /// Its own id.
        expected: String,
    },
    /// A single-use record that expires at or before the join's time.
    #[error(
        "a single_use expires_at_ms {expires_at_ms} is not after the join's time \
         {now_ms} (the record would be pruned and the same evidence admitted again): name an \
         expiry in the future, or 0 to keep the record for good"
    )]
    UseExpired {
        /// The expiry named, unix ms.
        expires_at_ms: i64,
        /// The join's time, unix ms.
        now_ms: i64,
    },
    /// A single-use record that expires too far after the join's time.
    #[error(
        "a single_use expires_at_ms {expires_at_ms} is more than 366 days after the join's \
         time {now_ms}: at most 366 days, or 0 to keep the record for good"
    )]
    UseTooFar {
        /// The expiry named, unix ms.
        expires_at_ms: i64,
        /// The join's time, unix ms.
        now_ms: i64,
    },
    /// A challenge whose deadline is at or before the join's time.
    #[error(
        "the challenge's not_after_ms {not_after_ms} is not after the join's time {now_ms}: \
         the agent could not answer it in time"
    )]
    ChallengeExpired {
        /// The deadline named, unix ms.
        not_after_ms: i64,
        /// The join's time, unix ms.
        now_ms: i64,
    },
    /// A challenge whose deadline is too far after the join's time.
    #[error(
        "the challenge's not_after_ms {not_after_ms} is more than 15 minutes after the join's \
         time {now_ms}: at most 15 minutes"
    )]
    ChallengeTooFar {
        /// The deadline named, unix ms.
        not_after_ms: i64,
        /// The join's time, unix ms.
        now_ms: i64,
    },
}

/// The tenants no attestor outside the process may admit a node into: [`DEPLOYMENT_TENANT`] and
/// the deployment's root tenant (where unauthenticated refusals are recorded).
pub fn reserved_tenants(root_tenant: &str) -> [&str; 2] {
    [DEPLOYMENT_TENANT, root_tenant]
}

/// `verdict` of the remote attestor `attestor`, checked at the join's time `now_us` against
/// `reserved` tenants (see the module documentation): the verdict to go on with (a reserved
/// tenant's admission becomes `join:reserved-tenant`, a refusal loses its tenant), or why the
/// answer is invalid.
pub fn check_remote_verdict(
    attestor: &str,
    verdict: Verdict,
    now_us: i64,
    reserved: &[&str],
) -> Result<Verdict, InvalidRemoteAnswer> {
    let now_ms = now_us.div_euclid(1000);
    match verdict {
        Verdict::Refuse(refusal) => Ok(Verdict::Refuse(AttestorRefusal::new(
            &refusal.attestor,
            &refusal.reason,
        ))),
        Verdict::Challenge(c) => {
            let not_after_ms = c.not_after_us.div_euclid(1000);
            if c.not_after_us <= now_us {
                return Err(InvalidRemoteAnswer::ChallengeExpired {
                    not_after_ms,
                    now_ms,
                });
            }
            if c.not_after_us.saturating_sub(now_us) > MAX_REMOTE_CHALLENGE_LIFE_US {
                return Err(InvalidRemoteAnswer::ChallengeTooFar {
                    not_after_ms,
                    now_ms,
                });
            }
            Ok(Verdict::Challenge(c))
        }
        Verdict::Admit(result) => {
            if result.token.is_some() {
                return Err(InvalidRemoteAnswer::NamesToken);
            }
            for u in &result.single_use {
                if u.attestor != attestor {
                    return Err(InvalidRemoteAnswer::ForeignUse {
                        found: u.attestor.clone(),
                        expected: attestor.to_owned(),
                    });
                }
                let Some(expires) = u.expires_at_us else {
                    continue;
                };
                let expires_at_ms = expires.div_euclid(1000);
                if expires <= now_us {
                    return Err(InvalidRemoteAnswer::UseExpired {
                        expires_at_ms,
                        now_ms,
                    });
                }
                if expires.saturating_sub(now_us) > MAX_REMOTE_USE_LIFE_US {
                    return Err(InvalidRemoteAnswer::UseTooFar {
                        expires_at_ms,
                        now_ms,
                    });
                }
            }
            if reserved.contains(&result.tenant_id.as_str()) {
                return Ok(Verdict::Refuse(AttestorRefusal::new(
                    ADMISSION,
                    "reserved-tenant",
                )));
            }
            Ok(Verdict::Admit(result))
        }
    }
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
