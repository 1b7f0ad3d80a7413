//! The inputs the store subcommands share: a batch id from `--batch`, the store from its URL.

use domain::quorum::BatchId;
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
