//! Node identity decisions: join tokens, token joins, renewals and the end of an identity.
//!
//! Every decision here is a pure function of (command, state, time): the command layer loads the
//! state from the projections in its transaction, calls a `decide_*` function, appends the
//! events of the [`Decision`] it returns, applies the projections and answers with its outcome. Nothing here reads a clock, a database or the network.
//! Certificates are built by [`crate::pki`] from the decision (only the CSR's public key is
//! taken); the one outside input is the randomness of ECDSA signatures.
//!
//! | module | decides |
//! | --- | --- |
//! | [`join`] | a join with the `join-token` attestor |
//! | [`renew`] | a renewal by proof of possession of the current key |
//! | [`renew_guard`] | the clone signal and the per-node renewal bound |
//! | [`edge_refusal`] | what a renewal refused at the gateway's TLS handshake is recorded as |
//! | [`admin`] | token create / revoke, identity revoke, node delete / retire |
//! | [`names`] | the DNS names and IP addresses a node may serve TLS for |
//! | [`refusal_bound`] | whether a refusal is recorded or counted under the per-minute bound |
//! | [`runtime_report`] | whether a session's bcd version and boot id change what is held |
//! | [`self_report`] | the bounds on what a joining machine says about itself (hostname, serials, versions) |
//!
//! Refusals are typed ([`JoinRefusal`], [`RenewRefusal`]), one variant per reason, each with its
//! `<attestor>:<reason>` text for the `security.*.refused` event; the caller only ever sees
//! ACCESS_DENIED. Bugs (a CA that cannot sign) are [`DecideError::Failed`], never refusals.

pub mod admin;
mod decision;
pub mod edge_refusal;
pub mod join;
mod join_terms;
pub mod names;
pub mod prune;
pub mod refusal_bound;
pub mod renew;
pub mod renew_guard;
pub mod runtime_report;
pub mod self_report;
mod state;

pub use admin::{
    check_token_target, decide_create_token, decide_delete_node, decide_retire_node,
    decide_revoke_identity, decide_revoke_token, identity_revoked, AdminRefusal, CreateToken,
    IdentityRevocation, NewestCert, TokenTargets,
};
pub use decision::{sha256, unix_us, DecideError, Decision, Refused};
pub use edge_refusal::{
    decide_edge_renew_refusal, edge_refusal_subject, EdgeRefusalRecord, EdgeRenewRefusal,
};
pub use join::{
    join_refusal_attribution, open_join, JoinCommand, JoinRefusal, JoinState, OpenedJoin,
};
pub use join_terms::{
    claims_digests, ClaimsDigests, HardwareClaims, JoinContext, JoinInput, Joined,
    JOIN_TOKEN_ATTESTOR,
};
pub use names::{
    decide_node_names, requested_names, ChangeNames, NameHolder, NameKind, NamesChange, NamesFacts,
    NamesOutcome, NamesRefusal, NodeNames, MAX_NODE_NAMES,
};
pub use prune::decide_prune;
pub use refusal_bound::{
    refusal_bound, refusal_lock_key, suppressed_event, window_start, RefusalBound,
};
pub use renew::{
    answer_again, check_key_statements, decide_renew, prepare_renew, proof_use_expiry_us,
    renew_refusal_tenant, PreparedRenew, RenewCommand, RenewInput, RenewRefusal, RenewState,
    Renewed, RENEW_POP_ATTESTOR, RENEW_PROOF_TTL,
};
pub use renew_guard::{renewal_retry_at, RENEWALS_PER_HOUR, RENEWAL_WINDOW};
pub use self_report::{claim_text_ok, SelfReport, SelfReportRefusal};
pub use state::{
    evolve_node, evolve_token, lease_stream, CertState, ExpectBinding, IdentityEvent, NodeState,
    NodeStatus, TokenRole, TokenState, NODE_KEY_UNATTESTED,
};
