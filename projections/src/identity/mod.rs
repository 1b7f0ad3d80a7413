//! Identity projections: `join_tokens` (+ `join_token_uses`), `nodes`, `node_certs`,
//! `attestation_uses`, `node_bindings`, `refusal_counters` and `node_names`, built only from the events of
//! `events/proto/bc/events/v1/identity.proto`.
//!
//! Every row records the position it reflects (`position`, or `issued_position` /
//! `revoked_position` for certificates); times come from the events (`occurred_at_us` or a field),
//! never from a clock. The unique keys are the race guards of the command layer: a second use of
//! one token use (`join_token_uses` primary key), a second use of one renew proof
//! (`attestation_uses` primary key) and a second active node for one hardware key fail inside the
//! command's transaction, which then retries from a fresh read.

use crate::{Projection, TableSpec};

/// The attestor name a renew proof is recorded under in `attestation_uses`.
pub use events::schema::RENEW_POP_ATTESTOR;

mod bindings;
mod certs;
pub mod names;
mod nodes;
pub mod operator;
pub mod read;
pub mod reference;
mod refusals;
pub mod suppressed;
mod tokens;
mod uses;
mod writes;

pub use bindings::NodeBindings;
pub use certs::NodeCerts;
pub use names::NodeNamesTable;
pub use nodes::Nodes;
pub use refusals::{refusal_totals, RefusalCounters};
pub use tokens::JoinTokens;
pub use uses::AttestationUses;

/// Every identity projection, in the order they are applied (with the attestation plane's
/// `pools`, `join_requests`, `attestor_entries`, `sites`, `boot_entries` and `site_leases`,
/// whose events every identity append may carry).
pub fn all() -> [&'static dyn Projection; 13] {
    [
        &JoinTokens,
        &Nodes,
        &NodeCerts,
        &AttestationUses,
        &NodeBindings,
        &RefusalCounters,
        &NodeNamesTable,
        &crate::attest::Pools,
        &crate::attest::JoinRequests,
        &crate::attest::AttestorEntries,
        &crate::attest::Sites,
        &crate::attest::BootEntries,
        &crate::attest::SiteLeases,
    ]
}

/// Every identity projection table, for digests.
pub fn tables() -> Vec<TableSpec> {
    all()
        .iter()
        .flat_map(|p| p.tables().iter().copied())
        .collect()
}
