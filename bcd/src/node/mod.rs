//! `bcd node`: hold the session, renew the certificate, stop for good on a revocation.
//!
//! [`run_node`] loops:
//!
//! 1. load the identity in the spec's three steps ([`crate::files::identity::load`]); an expired
//!    certificate ends the loop ([`NodeExit::Expired`]), and `bcd node` then re-joins by x509pop
//!    from the identity on disk ([`rejoin_if_expired`], also run before the loop starts) before
//!    giving up with the way back;
//! 2. when the renewal is due (60% of the leaf's lifetime, or the retry time after a failure),
//!    renew over mTLS with the current certificate ([`renew_once`]): `node.key.next` is written
//!    before the request, then the answer is checked and stored through
//!    [`crate::files::identity::RenewalStore`] (`node.key.next` again, `identity.json`, the
//!    rename), so a crash at any step leaves a matching key and certificate. A failed renewal is
//!    retried with [`crate::renewal::schedule::next_renewal_attempt`] (30 s doubling to 10 min, a
//!    gateway's pushback waited out exactly);
//! 3. otherwise open the session with the current certificate: `Hello` with the trust version
//!    held, then a `StatusReport` every [`NodeOptions::status_interval`], until the renewal is
//!    due (the session is then closed, the certificate renewed, and the session reopened with the
//!    new one) or the session ends (reconnect with [`Backoff`]: decorrelated jitter from 1 s, at
//!    most 30 s, the first wait in `[1 s, 3 s)`, starting over after a session that stayed open
//!    10 s after its `Welcome`);
//! 4. a `RevocationNotice` ends [`run_node`] with [`NodeExit::Revoked`]: bcd never redials with
//!    that certificate. So does a session the gateway refuses at the handshake with the TLS
//!    alert `certificate_revoked` (a revocation that happened while bcd was disconnected); the
//!    alert comes over the connection pinned to the serving CA, so no one else can forge it.
//!
//! A `Welcome`'s server time is logged but never raises the `serverTime` high-water mark: it is
//! not signed, so a gateway could push it to any date. The mark is raised only from the signed
//! server time of a verified renewal answer. A `Welcome`'s signed trust bundle, once verified
//! under the pinned join signing key and only when newer than the one held, is stored in
//! `identity.json` ([`crate::trust::bundle`]); the next `StatusReport` carries the new version.
//!
//! [`NetworkDoctor`] is `bcd doctor`'s network half: a pinned TLS handshake with the gateway, and
//! the clock against the `Welcome` of a real session.
//!
//! | module    | job                                                                   |
//! |-----------|-----------------------------------------------------------------------|
//! | `command` | `bcd node` and `bcd site` as commands ([`run_agent`]): pins, runtime, re-joins |
//! | `run`     | the loop ([`run_node`]), its options and how it ends                  |
//! | `backoff` | the reconnect policy ([`Backoff`]): jitter, growth, cap, reset         |
//! | `renew`   | one renewal ([`renew_once`]) and its errors                           |
//! | `rejoin`  | the x509pop re-join of an expired identity ([`rejoin_if_expired`])     |
//! | `session` | one session ([`hold_session`]) and the server time it records         |
//! | `doctor`  | [`NetworkDoctor`]                                                     |
//! | `log`     | the log line format                                                   |
//!
//! Every item is re-exported here, so callers name `crate::node::X` whatever file holds it.
//!
//! `bcd node` never redials with a certificate the gateway revoked, never raises the server-time
//! mark from an unsigned time, and never stores an answer or a trust bundle it has not verified
//! (the checks are [`crate::renewal`] and [`crate::trust`]; the signed commands a session
//! carries are run by [`crate::signed_commands`]).

mod backoff;
mod command;
mod doctor;
pub mod log;
mod rejoin;
mod renew;
mod run;
mod session;

pub use backoff::{Backoff, SplitMix64, LASTING_SESSION, RECONNECT_MAX, RECONNECT_MIN};
pub use command::{check_node_user, run_agent, STATUS_INTERVAL_ENV};
pub use doctor::{welcome_time, NetworkDoctor, WelcomeError, CLOCK_SKEW_FAIL};
pub use log::{log, rfc3339};
pub use rejoin::{rejoin_if_expired, rejoin_x509pop, RejoinError, Rejoined};
pub use renew::{decode_renew_body, renew_once, renew_retrying, RenewError};
pub use run::{run_node, NodeExit, NodeOptions, PUSHBACK_MAX, REVOKED_EXIT_MESSAGE};
pub use session::{
    hold_session, now_ms, settle_stored_set, time_of_ms, Held, SessionEnd, WELCOME_TIMEOUT,
};
