//! `batch approve`: review a batch's scope against what the control plane claims, then sign.

use commands::quorum::{approve_batch, batch_view};
use commands::{Clock, SystemClock};
use domain::quorum::{
    batch_approval_signing_input, ApprovalSignature, BatchStatus, ScopeLeaf, ScopeTree,
    TrustDomain, MAX_SCOPE_LEAVES,
};
use serde_json::json;

use super::args::ApproveArgs;
use super::display::printable;
use super::error::BatchCmdError;
use super::input::{batch_id, open};
use super::keys::{load_key, sign};
use super::operations::{
    operations, summary_text as operations_text, to_json as operations_json, write_operations,
};
use super::review::{difference, page_scope, read_expect, summary, Expected};

/// The longest window `approve --max-hours` may allow (30 days).
const MAX_MAX_HOURS: u32 = 720;

/// `batch approve`: page and check the scope, show the summary, sign with `--yes`.
pub(crate) async fn approve(args: ApproveArgs) -> Result<(), BatchCmdError> {
    let id = batch_id(&args.batch)?;
    let trust_domain = TrustDomain::new(args.trust_domain.clone())
        .map_err(|e| BatchCmdError::Input(format!("--trust-domain: {e}")))?;
    if !(1..=MAX_MAX_HOURS).contains(&args.max_hours) {
        return Err(BatchCmdError::Input(format!(
            "--max-hours {} is outside 1 to {MAX_MAX_HOURS}",
            args.max_hours
        )));
    }
    let (pair, key) = load_key(&args.key)?;
    let store = open(&args.store, true).await?;
    let view = batch_view(&store, &id)
        .await?
        .ok_or(BatchCmdError::NotFound(id))?;
    let state = &view.state;
    if state.status != BatchStatus::Pending {
        return Err(BatchCmdError::State(format!(
            "batch {id} is {}, not pending: only a pending batch takes approvals",
            state.status.as_str()
        )));
    }
    if state.scope_size == 0 || state.scope_size as usize > MAX_SCOPE_LEAVES {
        return Err(BatchCmdError::InvalidResponse(format!(
            "batch {id} claims a scope of {} leaves",
            state.scope_size
        )));
    }
    let now = SystemClock.now_us();
    if now > state.not_after_us {
        return Err(BatchCmdError::State(format!(
            "batch {id}'s window closed at {}; create a new batch",
            crate::output::rfc3339_us(state.not_after_us)
        )));
    }
    let max_end = now.saturating_add(i64::from(args.max_hours) * 3_600_000_000);
    if state.not_after_us > max_end {
        return Err(BatchCmdError::State(format!(
            "batch {id}'s window stays open until {}, more than --max-hours {} from now; an approval admits its commands until then",
            crate::output::rfc3339_us(state.not_after_us), args.max_hours
        )));
    }
    // Page the scope and recompute the root from the listed leaves.
    let entries = page_scope(&store, &id, state.scope_size).await?;
    let leaves: Vec<ScopeLeaf> = entries.iter().map(|e| e.leaf.clone()).collect();
    let tree =
        ScopeTree::build(&id, &leaves).map_err(|e| BatchCmdError::ScopeMismatch(e.to_string()))?;
    if tree.root() != state.scope_root
        || tree.size() != state.scope_size
        || leaves.len() != state.scope_size as usize
    {
        return Err(BatchCmdError::ScopeMismatch(format!(
            "the {} listed leaves give root {} over {} distinct leaves, the batch claims {} over {}",
            leaves.len(),
            tree.root(),
            tree.size(),
            state.scope_root,
            state.scope_size
        )));
    }
    if let Some(reviewed) = &args.root {
        if !reviewed.eq_ignore_ascii_case(&state.scope_root.to_hex()) {
            return Err(BatchCmdError::ScopeChanged {
                actual: state.scope_root,
                reviewed: reviewed.clone(),
            });
        }
    }
    if let Some(path) = &args.expect {
        let mismatch = match read_expect(path)? {
            Expected::Subjects(want) => {
                let have = leaves.iter().map(|l| l.subject().to_string()).collect();
                difference(&want, &have)
            }
            Expected::Commands(want) => {
                let have = leaves
                    .iter()
                    .map(|l| (l.subject().to_string(), l.kind().to_string()))
                    .collect();
                difference(&want, &have)
            }
        };
        if let Some(m) = mismatch {
            return Err(BatchCmdError::ScopeUnexpected(m));
        }
    }
    let unbound: Vec<&ScopeLeaf> = leaves
        .iter()
        .filter(|l| l.payload_sha256().is_none())
        .collect();
    if !unbound.is_empty() && !args.allow_unbound {
        let sample = unbound
            .iter()
            .take(5)
            .map(|l| format!("{} {}", printable(l.subject()), printable(l.kind())))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(BatchCmdError::Unbound {
            count: unbound.len(),
            sample,
        });
    }
    let ops = operations(&entries, args.allow_opaque)?;
    if let Some(path) = &args.operations_out {
        write_operations(path, &ops)?;
    }
    let (mut text, mut summary_json) = summary(&view, &leaves);
    text.push('\n');
    text.push_str(operations_text(&ops).trim_end());
    summary_json["operations"] = operations_json(&ops);
    if state.approvals.contains_key(&key.kid()) {
        if args.json {
            crate::outln!(
                "{}",
                json!({ "batchId": id.to_hex(), "kid": key.kid().to_hex(), "signed": false,
                        "alreadyApproved": true, "held": state.approvals.len(),
                        "required": state.required, "status": state.status })
            );
        } else {
            crate::outln!(
                "key {} already approved batch {id}; nothing signed",
                key.kid()
            );
        }
        return Ok(());
    }
    if !args.yes {
        if args.json {
            let mut out = summary_json;
            out["signed"] = json!(false);
            crate::outln!("{out}");
        } else {
            crate::outln!(
                "{text}\nnothing signed: re-run with --yes --root {} to sign",
                state.scope_root
            );
        }
        return Ok(());
    }
    if !args.json {
        crate::outln!("{text}");
    }
    let message = batch_approval_signing_input(
        &id,
        &state.scope_root,
        state.scope_size,
        state.not_after_us,
        &trust_domain,
    );
    let signature = ApprovalSignature {
        kid: key.kid(),
        sig: sign(&pair, &message)?,
    };
    let outcome = approve_batch(&store, &SystemClock, &trust_domain, &id, &signature).await?;
    if args.json {
        crate::outln!(
            "{}",
            json!({ "batchId": id.to_hex(), "kid": key.kid().to_hex(), "signed": true,
                    "recorded": outcome.recorded, "held": outcome.held,
                    "required": outcome.required, "status": outcome.status })
        );
    } else {
        // Approving twice with one key is a no-op that succeeds (docs/CLI.md "Idempotency").
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
