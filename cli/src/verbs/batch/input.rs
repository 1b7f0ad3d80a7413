//! The inputs the store subcommands share: a batch id from `--batch`, the store from its URL,
//! and the deployment's own trust domain (from its PKI bundle) that approvals are checked in.

use domain::quorum::{BatchId, TrustDomain};
use events::store::EventStore;

use super::error::BatchCmdError;

/// A `--batch` value (64 hex characters).
pub(crate) fn batch_id(text: &str) -> Result<BatchId, BatchCmdError> {
    BatchId::from_hex(text).map_err(|e| BatchCmdError::Input(format!("--batch: {e}")))
}

/// Opens the deployment's store (docs/CLI.md "Finding the deployment"); no key is read. A
/// verb that writes (`write`) may create a SQLite store; one that reads never does.
pub(crate) async fn open(
    args: &super::args::StoreArg,
    write: bool,
) -> Result<EventStore, BatchCmdError> {
    Ok(args.deployment.open_store_as(write).await?)
}

/// The deployment's trust domain, from its PKI bundle's public half (no secret read): what an
/// approval is verified in. Over the admin API it is the server's bundle, whatever the caller
/// says; directly, the bundle `--pki`/`--dir`/`--config`/`BC_PKI_BUNDLE` names.
pub(crate) fn deployment_trust_domain(
    args: &super::args::StoreArg,
) -> Result<TrustDomain, BatchCmdError> {
    let located = args
        .deployment
        .locate()
        .map_err(crate::deployment::OpenError::from)?;
    let loaded = located
        .deployment
        .public_half()
        .map_err(|e| BatchCmdError::NoTrustDomain(e.to_string()))?;
    Ok(loaded.public.trust_domain)
}
