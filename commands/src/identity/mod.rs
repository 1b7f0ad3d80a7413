//! Identity command handlers, one type per job: [`Joins`] (joins through the attestors), [`Renewals`],
//! [`NodeAdmin`] (the operator commands on tokens and nodes, which need no key) and
//! [`IdentityMaintenance`]; [`JoinService`] bundles the four for a serving process. Each command
//! runs in one transaction: load the state from the identity projections, let
//! [`domain::identity`] decide, append, apply the projections, commit. Inputs and answers are
//! domain values ([`JoinRequest`], [`JoinAnswer`], ...): the wire messages are the edge's.
//!
//! Every join or renew refusal reaches the caller as the same [`IdentityError::AccessDenied`];
//! the reason goes into a `security.join.refused` / `security.renew.refused` event (see
//! `refusals`), in the token's (or node's) tenant only once its secret (or stored
//! certificate) matched, otherwise in the root tenant.
//!
//! | module | job |
//! | --- | --- |
//! | `join` | joins through any registered attestor, and the admission step ([`Joins`]) |
//! | `renew` | renewals by proof of possession ([`Renewals`]) |
//! | `admin` | operator commands on tokens and nodes ([`NodeAdmin`]) |
//! | `answers` | what a join or renewal is asked and answers |
//! | [`attestors`] | the registry of attestors this control plane runs, in process and remote |
//! | `service` | [`JoinService`]: the four together |
//! | [`maintenance`] | pruning expired proofs, writing suppressed refusal counts |
//! | `refusals` | recording refusals under the per-minute bound, the rest counted in memory ([`RefusalBudget`]) |
//! | `rows` | projection rows ([`projections::identity::read`]) into domain state |
//! | `views` | what the operator commands print |

mod admin;
mod answers;
pub mod attestors;
mod join;
pub mod maintenance;
mod refusals;
mod renew;
pub(crate) mod rows;
mod service;
pub mod views;

use std::sync::Arc;

use domain::identity::{AdminRefusal, ExpectBinding, IdentityEvent, JoinContext, TokenRole};
use domain::pki::{KeySet, TrustDomain};
use events::store::{ExpectedVersion, StoreError, StoreTx, StreamAppend};
use events::{new_event_id, NewEvent};
use projections::ProjectionError;
use time::Duration;

use crate::run::append_streams_and_project;
use crate::{AsConflict, RunError};

pub use admin::NodeAdmin;
pub use answers::{JoinAnswer, JoinOutcome, JoinRequest, RenewAnswer};
pub use attestors::AttestorRegistry;
pub use join::Joins;
pub use maintenance::{
    run_maintenance, IdentityMaintenance, MaintenanceReport, MaintenanceWork, MAINTENANCE_INTERVAL,
    PRUNE_BATCH,
};
pub use refusals::RefusalBudget;
pub use renew::Renewals;
pub use service::JoinService;
pub use views::{CertView, CreatedToken, NodeDetail, NodeView, TokenView};

/// The identity reads the edge runs outside any command (the revocation feed, a session's tenant):
/// the projection's own functions, named here so the gateway depends on `commands` only.
pub mod edge_reads {
    pub use projections::identity::read::{revoked_unexpired, tenant_of, RevokedCertRow};
}

/// The ids of the built-in attestors ([`AttestorRegistry::builtin`]); an empty name means the
/// first. What a service runs is its registry's ([`Joins::attestors`]); an id it does not run is
/// [`IdentityError::UnsupportedAttestor`].
pub const SUPPORTED_ATTESTORS: &[&str] = &[
    domain::identity::JOIN_TOKEN_ATTESTOR,
    domain::attest::x509pop::X509POP_ATTESTOR,
];

/// The message every refused join carries.
pub const JOIN_REFUSED: &str = "Join refused";
/// The message every refused renewal carries.
pub const RENEW_REFUSED: &str = "Renew refused";

/// Settings of the identity handlers.
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    /// The deployment's trust domain (must be the key set's).
    pub trust_domain: TrustDomain,
    /// Lifetime asked for node certificates (the CA caps it at 24 h, 2 h for ramdisks).
    pub leaf_lifetime: Duration,
    /// The tenant unauthenticated refusals are attributed to.
    pub root_tenant: String,
    /// Refusal events per (kind, reason) and minute; more are counted, not recorded one by one.
    pub refusals_per_minute: u32,
    /// The suppressed refusals this process holds until the maintenance flush writes them
    /// (shared by every handler built from clones of this config).
    pub refusal_budget: Arc<RefusalBudget>,
    /// How long after its notAfter a certificate may still re-join with `x509pop` (7 days;
    /// `[attestors.x509pop] grace`).
    pub x509pop_grace: std::time::Duration,
    /// The `discovery` attestor's settings (`[attestors.discovery]`); its `cert_ttl` is also the
    /// lifetime of every ramdisk certificate, at join and at each renewal (at most 2 h).
    pub discovery: domain::attest::DiscoveryConfig,
    /// The retry delay a pending join (one waiting for an operator's approval) answers:
    /// [`domain::attest::JOIN_PENDING_RETRY_SECONDS`] (30 s) by default; `bcctl serve` takes
    /// `BC_JOIN_PENDING_RETRY_SECONDS` (tests set 1 so a released join goes on at once).
    pub pending_retry_seconds: u32,
}

impl IdentityConfig {
    /// 24 h leaves, root tenant `root`, 60 refusals a minute, an empty refusal budget, an x509pop
    /// grace of 7 days, the discovery attestor's defaults, a pending-join retry hint of 30 s.
    pub fn new(trust_domain: TrustDomain) -> Self {
        IdentityConfig {
            trust_domain,
            leaf_lifetime: Duration::hours(24),
            root_tenant: "root".into(),
            refusals_per_minute: 60,
            refusal_budget: Arc::new(RefusalBudget::new()),
            x509pop_grace: domain::attest::x509pop::DEFAULT_GRACE,
            discovery: domain::attest::DiscoveryConfig::default(),
            pending_retry_seconds: domain::attest::JOIN_PENDING_RETRY_SECONDS,
        }
    }
}

/// The environment variable `bcctl serve` reads [`IdentityConfig::pending_retry_seconds`] from.
pub const PENDING_RETRY_ENV: &str = "BC_JOIN_PENDING_RETRY_SECONDS";

/// The longest pending-join retry hint accepted (an hour: a node asks again at least that often).
pub const MAX_PENDING_RETRY_SECONDS: u32 = 3600;

/// Reads a pending-join retry hint as written in [`PENDING_RETRY_ENV`]: `None` (unset) is the
/// default of 30 s; otherwise whole seconds from 1 to [`MAX_PENDING_RETRY_SECONDS`]. The error
/// is a message for the operator, to follow the variable's name.
pub fn parse_pending_retry(value: Option<&str>) -> Result<u32, String> {
    let Some(text) = value else {
        return Ok(domain::attest::JOIN_PENDING_RETRY_SECONDS);
    };
    match text.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_PENDING_RETRY_SECONDS).contains(&n) => Ok(n),
        _ => Err(format!(
            "must be whole seconds from 1 to {MAX_PENDING_RETRY_SECONDS}, got {text:?}; unset \
             it for the default of {} s",
            domain::attest::JOIN_PENDING_RETRY_SECONDS
        )),
    }
}

/// What an identity handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The join or renewal was refused; the reason is only in the refusal event.
    #[error("ACCESS_DENIED: {0}")]
    AccessDenied(&'static str),
    /// The node renewed its bound of times in the last hour (spec 002): retry after
    /// `retry_after_ms` (the edge answers RESOURCE_EXHAUSTED with `grpc-retry-pushback-ms`).
    #[error(
        "RESOURCE_EXHAUSTED: node {node_id} renewed {per_hour} times in the last hour; the next \
         renewal is allowed in {retry_after_ms} ms"
    )]
    RenewalsExhausted {
        /// The node.
        node_id: String,
        /// The bound.
        per_hour: usize,
        /// How long until the next renewal is allowed.
        retry_after_ms: u64,
    },
    /// An attestor this control plane does not run.
    #[error("UNSUPPORTED: attestor {0:?} is not registered")]
    UnsupportedAttestor(String),
    /// [`Joins::join`] was answered a deferral (pending approval or a challenge), not an
    /// admission; [`Joins::attest`] answers it as an outcome.
    #[error("the join was deferred: {}", .0.kind())]
    Deferred(Box<JoinOutcome>),
    /// An operator command was refused (bad input, unknown id, wrong state).
    #[error(transparent)]
    Admin(#[from] AdminRefusal),
    /// The store or a projection failed, or conflicts did not settle.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A projection row that cannot be read back (corruption or a bug).
    #[error("corrupt identity row: {0}")]
    Corrupt(String),
    /// A decision failed for a reason that is not a refusal (the CA cannot sign, randomness).
    #[error("identity decision failed: {0}")]
    Failed(String),
    /// An out-of-process attestor gave no verdict: unreachable, an error status, too slow, or
    /// an answer its contract does not allow. Not a refusal: nothing is recorded or spent, and
    /// the edge answers UNAVAILABLE (the agent retries later).
    #[error(transparent)]
    AttestorUnavailable(#[from] attestors::RemoteAttestorError),
}

impl From<StoreError> for IdentityError {
    fn from(e: StoreError) -> Self {
        IdentityError::Run(RunError::Store(e))
    }
}

impl From<ProjectionError> for IdentityError {
    fn from(e: ProjectionError) -> Self {
        IdentityError::Run(RunError::Projection(e))
    }
}

impl AsConflict for IdentityError {
    /// Expected-version conflicts and unique-key violations of the projections (a token use or
    /// a renew proof spent by a concurrent command) are retried from a fresh read.
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            IdentityError::Run(RunError::Store(e))
            | IdentityError::Run(RunError::Projection(ProjectionError::Store(e)))
                if e.is_unique_violation() =>
            {
                Ok(e)
            }
            IdentityError::Run(r) => r.into_conflict().map_err(IdentityError::Run),
            other => Err(other),
        }
    }
}

/// A token to create.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewToken {
    /// Tenant.
    pub tenant_id: String,
    /// Site.
    pub site_id: String,
    /// Pool.
    pub pool_id: String,
    /// Role admitted.
    pub role: TokenRole,
    /// Uses.
    pub uses: u32,
    /// Lifetime from now, seconds.
    pub ttl_seconds: i64,
    /// Expect binding.
    #[serde(default)]
    pub expect: ExpectBinding,
    /// The pre-issue-18 "reclaim whichever node holds the claimed hardware key": refused
    /// (INVALID_INPUT pointing at `reclaim_node_id`); a claimed hardware key has no power.
    #[serde(default)]
    pub allow_reclaim: bool,
    /// The one node the token re-keys in place (`--reclaim NODE`): uses must be 1, the node
    /// must exist and be active.
    #[serde(default)]
    pub reclaim_node_id: Option<String>,
    /// Role provisioned: the node the token is minted for (`--for-node NODE`).
    #[serde(default)]
    pub for_node_id: Option<String>,
    /// A join with this token waits for an operator's approval (`--approval`).
    #[serde(default)]
    pub require_approval: bool,
}

/// Groups decided events by stream, keeping their order, streams in order of first appearance.
fn by_stream(events: Vec<IdentityEvent>) -> Vec<(String, Vec<IdentityEvent>)> {
    let mut out: Vec<(String, Vec<IdentityEvent>)> = Vec::new();
    for e in events {
        let s = e.stream();
        match out.iter_mut().find(|(name, _)| *name == s) {
            Some((_, list)) => list.push(e),
            None => out.push((s, vec![e])),
        }
    }
    out
}

fn expected(version: Option<i64>) -> ExpectedVersion {
    match version {
        None | Some(0) => ExpectedVersion::NoStream,
        Some(v) => ExpectedVersion::Exact(u64::try_from(v).unwrap_or(0)),
    }
}

/// Appends decided events: each stream at the version its state was read at, all streams in
/// one append ([`crate::run::append_streams_and_project`]).
pub(crate) async fn append_decided(
    tx: &mut StoreTx,
    events: Vec<IdentityEvent>,
    tenant: &str,
    now_us: i64,
    versions: &[(String, Option<i64>)],
) -> Result<(), IdentityError> {
    let grouped: Vec<(String, ExpectedVersion, Vec<NewEvent>)> = by_stream(events)
        .into_iter()
        .map(|(stream, list)| {
            let version = versions
                .iter()
                .find(|(s, _)| *s == stream)
                .and_then(|(_, v)| *v);
            let new = list
                .iter()
                .map(|e| e.to_new_event(new_event_id(), tenant, now_us))
                .collect();
            (stream, expected(version), new)
        })
        .collect();
    let appends: Vec<StreamAppend<'_>> = grouped
        .iter()
        .map(|(stream, expected, events)| StreamAppend {
            stream,
            expected: *expected,
            events,
        })
        .collect();
    append_streams_and_project(tx, &projections::identity::all(), &appends).await?;
    Ok(())
}

pub(crate) fn fresh_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn digest_vec(d: Option<[u8; 32]>) -> Vec<u8> {
    d.map(|d| d.to_vec()).unwrap_or_default()
}

/// Refuses a config whose trust domain is not the key set's.
fn check_trust_domain(keys: &KeySet, config: &IdentityConfig) -> Result<(), IdentityError> {
    if keys.trust_domain != config.trust_domain {
        return Err(IdentityError::Failed(format!(
            "INVALID_CONFIG: the configured trust domain {} is not the PKI bundle's {}",
            config.trust_domain, keys.trust_domain
        )));
    }
    Ok(())
}

/// What the join and renew decisions need of the key set and the config.
fn context<'a>(keys: &'a KeySet, config: &'a IdentityConfig) -> JoinContext<'a> {
    JoinContext {
        trust_domain: &config.trust_domain,
        node_ca: &keys.node_ca,
        join_encryption: &keys.join_encryption,
        leaf_lifetime: config.leaf_lifetime,
        ramdisk_lifetime: config.discovery.ramdisk_lifetime(),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_pending_retry;

    #[test]
    fn the_pending_retry_hint_defaults_to_30_s_and_takes_1_to_3600() {
        assert_eq!(parse_pending_retry(None), Ok(30));
        assert_eq!(parse_pending_retry(Some("1")), Ok(1));
        assert_eq!(parse_pending_retry(Some(" 3600 ")), Ok(3600));
        for bad in ["0", "3601", "-1", "1.5", "", "30s"] {
            assert_eq!(
                parse_pending_retry(Some(bad)),
                Err(format!(
                    "must be whole seconds from 1 to 3600, got {bad:?}; unset it for the \
                     default of 30 s"
                )),
                "{bad:?}"
            );
        }
    }
}
