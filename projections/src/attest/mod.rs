//! Attestation-plane projections: `pools` (from `pool.created` / `pool.updated`),
//! `join_requests` (from `join_request.created|approved|rejected|consumed|expired`) and
//! `attestor_entries` (every operator-managed attestor list: `attestor.entry.added|removed`,
//! and the TPM allow-list's and cloud accounts' events of before), built only
//! from the events of `events/proto/bc/events/v1/identity.proto`, and `sites`, `boot_entries`
//! and `site_leases` (issue 20, from `events/proto/bc/events/v1/sites.proto`), applied with every
//! identity append (`crate::identity::all()` lists them).
//!
//! Each run of events folds into one insert of the rows created in it (with their later
//! changes) and one checked update per older row: an update of a row no created event made is
//! inapplicable (the log is broken), not silently dropped.

mod attestor_entries;
mod join_requests;
mod pools;
pub mod read;
mod site_leases;
pub mod site_read;
mod sites;
mod writes;

pub use attestor_entries::{AttestorEntries, LEGACY_CLOUD_LIST, LEGACY_TPM_LIST};
pub use join_requests::JoinRequests;
pub use pools::Pools;
pub use site_leases::SiteLeases;
pub use sites::{BootEntries, Sites};
