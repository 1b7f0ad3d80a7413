//! Identity command handlers, one type per job: [`Joins`] (joins through the attestors), [`Renewals`],
//! [`NodeAdmin`] (the operator commands on tokens and nodes, which need no key) and
//! [`IdentityMaintenance`]; [`JoinService`] bundles the four for a serving process. Each command
//! runs in one transaction ([`crate::run::run`], joins still on [`crate::transaction!`]): load
//! the state from the identity projections, let [`domain::identity`] decide, append, apply the
//! projections, commit. Inputs and answers are
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
//! | `answer_again` | a join whose answer was lost, asked again: the earlier join loaded and answered again |
//! | `renew` | renewals by proof of possession ([`Renewals`]) |
//! | `edge_refusal` | renewals a gateway refused at the TLS handshake, recorded under the bound ([`EdgeRefusals`]) |
//! | `admin` | operator commands on tokens and nodes ([`NodeAdmin`]) |
//! | `names` | the names a node may serve: `node names set|add|remove|show` ([`NodeAdmin::change_names`]) |
//! | `answers` | what a join or renewal is asked and answers |
//! | [`attestors`] | the registry of attestors this control plane runs, in process and remote |
//! | `service` | [`JoinService`]: the four together |
//! | [`maintenance`] | pruning expired proofs, writing suppressed refusal counts |
//! | `refusals` | recording refusals under the per-minute bound, the rest counted in memory ([`RefusalBudget`]) |
//! | [`runtime`] | the bcd version and boot id a node's session reports, recorded when they change |
//! | `rows` | projection rows ([`projections::identity::read`]) into domain state |
//! | `views` | what the operator commands print |

mod admin;
mod answer_again;
mod answers;
mod append;
pub mod attestors;
mod budget;
mod config;
mod context;
mod edge_refusal;
mod error;
mod join;
pub mod maintenance;
mod names;
mod refusals;
mod renew;
pub(crate) mod rows;
pub mod runtime;
mod service;
pub mod views;

pub use admin::{NewToken, NodeAdmin, NodeChange};
pub use answers::{JoinAnswer, JoinOutcome, JoinRequest, RenewAnswer};
pub(crate) use append::{append_decided, fresh_id};
pub use attestors::AttestorRegistry;
pub use budget::RefusalBudget;
pub use config::{
    parse_pending_retry, IdentityConfig, MAX_PENDING_RETRY_SECONDS, PENDING_RETRY_ENV,
};
pub use edge_refusal::EdgeRefusals;
pub use error::{IdentityError, JOIN_REFUSED, RENEW_REFUSED};
pub use join::Joins;
pub use maintenance::{
    run_maintenance, IdentityMaintenance, MaintenanceReport, MaintenanceWork, MAINTENANCE_INTERVAL,
    PRUNE_BATCH,
};
pub use names::NodeNamesView;
pub use renew::Renewals;
pub use service::JoinService;
pub use views::{
    node_status, CertView, CreatedToken, NodeClaimsView, NodeDetail, NodeView, TokenStatus,
    TokenView,
};

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
