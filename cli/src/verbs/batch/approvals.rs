//! The approvers' verbs besides `approve`: `batch list` (find pending batches), `batch scope`
//! (every leaf, with payload and proof, all pages) and `batch submit-approval` (record a
//! signature made elsewhere). Over the admin API these are what an approver's role may run;
//! `batch approve --server` is built from `show`, `scope` and `submit-approval`.
//!
//! `submit-approval` verifies the signature in the DEPLOYMENT's trust domain (its PKI bundle's;
//! over the API the server's), never one the caller names.

use commands::quorum::{approve_batch, batch_view, list_batches, MAX_BATCH_LIST};
use commands::DatabaseClock;
use domain::quorum::{ApprovalSignature, BatchStatus, Kid};
use serde_json::json;

use super::args::{ListArgs, ScopeArgs, SubmitApprovalArgs};
use super::display::printable;
use super::error::BatchCmdError;
use super::input::{batch_id, deployment_trust_domain, open};
use super::review::page_scope;
use super::wire::{decode_sig, entry_json, outcome_json, view_json};

/// `batch list`: batches newest first, optionally of one status.
pub(crate) async fn list(args: ListArgs) -> Result<(), BatchCmdError> {
    let status = match &args.status {
        None => None,
        Some(text) => Some(BatchStatus::parse(text).ok_or_else(|| {
            BatchCmdError::Input(format!(
                "--status {text:?}: expected pending, approved, expired or cancelled"
            ))
        })?),
    };
    if !(1..=MAX_BATCH_LIST).contains(&args.limit) {
        return Err(BatchCmdError::Input(format!(
            "--limit {} is outside 1 to {MAX_BATCH_LIST}",
            args.limit
        )));
    }
    let store = open(&args.store, false).await?;
    let views = list_batches(&store, status, args.limit).await?;
    if args.json {
        let trust_domain = deployment_trust_domain(&args.store).ok();
        let batches: Vec<_> = views
            .iter()
            .map(|v| view_json(v, trust_domain.as_ref().map(|t| t.as_str())))
            .collect();
        crate::outln!("{}", json!({ "batches": batches }));
        return Ok(());
    }
    if views.is_empty() {
        crate::outln!("no batches");
    }
    for v in &views {
        crate::outln!(
            "{}  {:<9} {}/{} approvals  {} leaves  tenant {}  ends {}  {}",
            v.state.batch_id,
            v.state.status.as_str(),
            v.state.approvals.len(),
            v.state.required,
            v.state.scope_size,
            printable(&v.tenant_id),
            crate::output::rfc3339_us(v.state.not_after_us),
            printable(&v.reason)
        );
    }
    Ok(())
}

/// `batch scope`: every leaf of a batch, paged inside.
pub(crate) async fn scope(args: ScopeArgs) -> Result<(), BatchCmdError> {
    let id = batch_id(&args.batch)?;
    let store = open(&args.store, false).await?;
    let view = batch_view(&store, &id)
        .await?
        .ok_or(BatchCmdError::NotFound(id))?;
    let entries = page_scope(&store, &id, view.state.scope_size).await?;
    if args.json {
        crate::outln!(
            "{}",
            json!({
                "batchId": id.to_hex(),
                "scopeRoot": view.state.scope_root.to_hex(),
                "size": view.state.scope_size,
                "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
            })
        );
        return Ok(());
    }
    crate::outln!(
        "batch {id}: {} leaves, root {}",
        view.state.scope_size,
        view.state.scope_root
    );
    for e in &entries {
        crate::outln!(
            "  {:>5}  {}  {}  {}",
            e.proof.index,
            printable(e.leaf.subject()),
            printable(e.leaf.kind()),
            e.leaf
                .payload_sha256()
                .map(|d| format!("payload {}", d.to_hex()))
                .unwrap_or_else(|| "any payload".into())
        );
    }
    Ok(())
}

/// `batch submit-approval`: records a signature made elsewhere, checked in the deployment's
/// trust domain.
pub(crate) async fn submit_approval(args: SubmitApprovalArgs) -> Result<(), BatchCmdError> {
    let id = batch_id(&args.batch)?;
    let kid = Kid::from_hex(&args.kid).map_err(|e| BatchCmdError::Input(format!("--kid: {e}")))?;
    let sig = decode_sig(&args.sig).ok_or_else(|| {
        BatchCmdError::Input("--sig: not base64url (an ASN.1 DER ECDSA signature)".into())
    })?;
    if sig.is_empty() || sig.len() > 80 {
        return Err(BatchCmdError::Input(format!(
            "--sig: {} bytes; an ECDSA P-256 DER signature is 8 to 80",
            sig.len()
        )));
    }
    let trust_domain = deployment_trust_domain(&args.store)?;
    let store = open(&args.store, true).await?;
    let signature = ApprovalSignature { kid, sig };
    let outcome = approve_batch(
        &store,
        &DatabaseClock::system(),
        &trust_domain,
        &id,
        &signature,
    )
    .await?;
    if args.json {
        crate::outln!("{}", outcome_json(&id, &kid, &outcome));
    } else {
        let already = if outcome.recorded {
            ""
        } else {
            " (this key had already approved: nothing new recorded)"
        };
        crate::outln!(
            "approved batch {id}: {} of {} approvals, {}{already}",
            outcome.held,
            outcome.required,
            outcome.status.as_str()
        );
    }
    Ok(())
}
