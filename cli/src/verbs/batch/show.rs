//! `batch create`, `batch show` and `batch cancel`. Who creates or cancels is the caller's
//! identity ([`crate::invocation::actor`]: the operator certificate's SPIFFE ID over the admin
//! API, `local:<user>@<host>` directly), never a flag.

use commands::quorum::{batch_view, cancel_batch, create_batch};
use commands::DatabaseClock;
use domain::quorum::{CreateBatch, ScopeLeafRequest};
use serde_json::json;

use super::args::{CancelArgs, CreateArgs, ShowArgs};
use super::display::printable;
use super::error::{io, BatchCmdError};
use super::input::{batch_id, deployment_trust_domain, open};
use super::wire::view_json;

/// `batch create`: a batch from a JSON file of leaves.
pub(crate) async fn create(args: CreateArgs) -> Result<(), BatchCmdError> {
    // Over the admin API the leaves file is the one the caller sent, never the server's.
    let text = crate::invocation::read_file_to_string(&args.leaves).map_err(io(&args.leaves))?;
    let leaves: Vec<ScopeLeafRequest> = serde_json::from_str(&text)
        .map_err(|e| BatchCmdError::Input(format!("{}: {e}", args.leaves.display())))?;
    let store = open(&args.store, true).await?;
    let created = create_batch(
        &store,
        &DatabaseClock::system(),
        &CreateBatch {
            tenant: args.tenant,
            caller: crate::invocation::actor().id().to_string(),
            idempotency_key: args.idempotency_key,
            reason: args.reason,
            leaves,
            not_after_seconds: args.not_after_seconds,
        },
    )
    .await?;
    let out = json!({
        "batchId": created.batch_id.to_hex(),
        "scopeRoot": created.scope_root.to_hex(),
        "size": created.scope_size,
        "required": created.required_approvals,
        "notAfter": crate::output::rfc3339_us(created.not_after_us),
        "notAfterUs": created.not_after_us,
        "status": created.status,
        "retry": created.retry,
    });
    if args.json {
        crate::outln!("{out}");
    } else {
        crate::outln!(
            "batch {} ({} leaves, {} approvals needed, {}{})",
            created.batch_id,
            created.scope_size,
            created.required_approvals,
            created.status.as_str(),
            if created.retry { ", existing" } else { "" }
        );
    }
    Ok(())
}

/// `batch show`: status, scope root and size, approvals.
pub(crate) async fn show(args: ShowArgs) -> Result<(), BatchCmdError> {
    let id = batch_id(&args.batch)?;
    let store = open(&args.store, false).await?;
    let view = batch_view(&store, &id)
        .await?
        .ok_or(BatchCmdError::NotFound(id))?;
    // The deployment's trust domain, the one approvals are checked in (absent when the bundle
    // cannot be read: showing a batch needs only the store).
    let trust_domain = deployment_trust_domain(&args.store).ok();
    let out = view_json(&view, trust_domain.as_ref().map(|t| t.as_str()));
    if args.json {
        crate::outln!("{out}");
    } else {
        crate::outln!(
            "batch {id}\n  tenant {}  by {}\n  reason: {}\n  status {}, {} of {} approvals\n  root {} ({} leaves), ends at {}",
            printable(&view.tenant_id),
            printable(&view.caller),
            printable(&view.reason),
            view.state.status.as_str(),
            view.state.approvals.len(),
            view.state.required,
            view.state.scope_root,
            view.state.scope_size,
            crate::output::rfc3339_us(view.state.not_after_us)
        );
    }
    Ok(())
}

/// `batch cancel`: a pending batch is cancelled (its held commands with it).
pub(crate) async fn cancel(args: CancelArgs) -> Result<(), BatchCmdError> {
    let id = batch_id(&args.batch)?;
    if args.reason.trim().is_empty() || args.reason.chars().count() > 500 {
        return Err(BatchCmdError::Input(
            "--reason must say why, in 1 to 500 characters".into(),
        ));
    }
    let caller = crate::invocation::actor().id().to_string();
    let store = open(&args.store, true).await?;
    // Cancelling a cancelled batch is a no-op that succeeds and says so (docs/CLI.md
    // "Idempotency"); an expired batch is still refused (it ended otherwise).
    let before = batch_view(&store, &id)
        .await?
        .ok_or(BatchCmdError::NotFound(id))?;
    if before.state.status.as_str() == "cancelled" {
        if args.json {
            crate::outln!(
                "{}",
                json!({ "batchId": id.to_hex(), "status": before.state.status, "alreadyCancelled": true })
            );
        } else {
            crate::outln!("batch {id} already cancelled: nothing to do");
        }
        return Ok(());
    }
    cancel_batch(&store, &DatabaseClock::system(), &id, &args.reason, &caller).await?;
    let view = batch_view(&store, &id)
        .await?
        .ok_or(BatchCmdError::NotFound(id))?;
    if args.json {
        crate::outln!(
            "{}",
            json!({ "batchId": id.to_hex(), "status": view.state.status, "cancelledBy": caller, "alreadyCancelled": false })
        );
    } else {
        crate::outln!(
            "batch {id} {}: its held commands are cancelled",
            view.state.status.as_str()
        );
    }
    Ok(())
}
