//! `batch approve`: review a batch's scope against what the control plane claims, then sign.
//! The review's rules are the domain's (`domain::quorum::review`); this file fetches, asks them
//! and prints.
//!
//! The same review runs on either road ([`BatchSource`]): directly against the store, or
//! against the admin API (`--server`/`--profile`), where the scope is fetched, the root
//! recomputed HERE from the listed leaves (the server's root is never trusted), the approval
//! signed here with `--key`, and only the signature submitted.
//!
//! The trust domain signed for is the deployment's own: directly, the PKI bundle's; against a
//! server, the approver's profile's (`trust_domain`, else its operator certificate's SPIFFE ID).
//! `--trust-domain` is only an override that must match it, and a server that says it checks
//! approvals in another trust domain is refused before anything is signed.

use commands::quorum::ScopeEntry;
use commands::{Clock, SystemClock};
use domain::quorum::{
    already_approved, batch_approval_signing_input, review_contents, review_listed, review_window,
    ApprovalSignature, BatchApprovalState, BatchId, ReviewRefusal, ScopeLeaf, TrustDomain,
};
use serde_json::json;

use super::args::ApproveArgs;
use super::display::printable;
use super::error::BatchCmdError;
use super::input::{batch_id, deployment_trust_domain, open};
use super::keys::{load_key, sign};
use super::operations::{
    operations, summary_text as operations_text, to_json as operations_json, write_operations,
};
use super::review::{read_expect, summary};
use super::source::{AdminCall, BatchSource, DirectSource, RemoteSource};
use super::wire::outcome_json;
use crate::admin::client::Remote;

/// The longest window `approve --max-hours` may allow (30 days).
const MAX_MAX_HOURS: u32 = 720;

/// `batch approve`: against the admin API with `--server`/`--profile` (the trust domain is the
/// approver profile's), else directly against the store (the deployment bundle's).
pub(crate) async fn approve(args: ApproveArgs) -> Result<(), BatchCmdError> {
    if let Some(remote) = Remote::from_args(&args.store.deployment.remote)? {
        let own = TrustDomain::new(remote.profile.trust_domain.clone()).map_err(|e| {
            BatchCmdError::Input(format!(
                "{}: trust_domain: {e}",
                remote.profile.path.display()
            ))
        })?;
        let whose = format!("the profile {}'s", remote.profile.path.display());
        let signing = signing_trust_domain(args.trust_domain.as_deref(), &own, &whose)?;
        let client = remote.connect().await?;
        let source = RemoteSource {
            call: AdminCall(tokio::sync::Mutex::new(client)),
        };
        return approve_with(&args, &source, &signing).await;
    }
    let trust_domain = deployment_trust_domain(&args.store)?;
    let signing = signing_trust_domain(
        args.trust_domain.as_deref(),
        &trust_domain,
        "this deployment's (its PKI bundle's)",
    )?;
    let store = open(&args.store, true).await?;
    let source = DirectSource {
        store,
        trust_domain,
    };
    approve_with(&args, &source, &signing).await
}

/// The trust domain to sign for: `own` (the deployment's, or the approver profile's), which a
/// given `--trust-domain` must name.
pub(crate) fn signing_trust_domain(
    given: Option<&str>,
    own: &TrustDomain,
    whose: &str,
) -> Result<TrustDomain, BatchCmdError> {
    match given {
        Some(text) if text != own.as_str() => Err(BatchCmdError::TrustDomainMismatch {
            given: text.to_string(),
            whose: whose.to_string(),
            actual: own.to_string(),
        }),
        _ => Ok(own.clone()),
    }
}

/// Page and check the scope from `source`, show the summary, sign for `trust_domain` with
/// `--yes` and record the signature through `source`.
pub(crate) async fn approve_with<S: BatchSource>(
    args: &ApproveArgs,
    source: &S,
    trust_domain: &TrustDomain,
) -> Result<(), BatchCmdError> {
    let id = batch_id(&args.batch)?;
    if !(1..=MAX_MAX_HOURS).contains(&args.max_hours) {
        return Err(BatchCmdError::Input(format!(
            "--max-hours {} is outside 1 to {MAX_MAX_HOURS}",
            args.max_hours
        )));
    }
    let (pair, key) = load_key(&args.key)?;
    let (view, checked_in) = source.view(&id).await?;
    if checked_in != *trust_domain {
        return Err(BatchCmdError::State(format!(
            "the control plane checks approvals in trust domain {checked_in}, this approver signs for {trust_domain}: an approval for {trust_domain} would never admit a command there; check the server and profile you approve against"
        )));
    }
    let state = &view.state;
    check_window(args, &id, state)?;
    // Page the scope and recompute the root from the listed leaves.
    let entries = source.scope(&id, state.scope_size).await?;
    let leaves = check_scope(args, &id, state, &entries)?;
    let ops = operations(&entries, args.allow_opaque)?;
    if let Some(path) = &args.operations_out {
        write_operations(path, &ops)?;
    }
    let (mut text, mut summary_json) = summary(&view, &leaves);
    text.push('\n');
    text.push_str(operations_text(&ops).trim_end());
    summary_json["operations"] = operations_json(&ops);
    if already_approved(state, &key.kid()) {
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
        trust_domain,
    );
    let signature = ApprovalSignature {
        kid: key.kid(),
        sig: sign(&pair, &message)?,
    };
    let outcome = source.submit(&id, &signature).await?;
    if args.json {
        crate::outln!("{}", outcome_json(&id, &key.kid(), &outcome));
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

/// The approver's review of the batch's window (`domain::quorum::review_window`), its refusals
/// worded for the approver.
fn check_window(
    args: &ApproveArgs,
    id: &BatchId,
    state: &BatchApprovalState,
) -> Result<(), BatchCmdError> {
    review_window(state, args.max_hours, SystemClock.now_us()).map_err(|r| refusal(id, r))
}

/// The approver's review of the listed scope (`domain::quorum::review`): the leaves are the
/// batch's scope and the one reviewed (`--root`), then the ones expected (`--expect`), each
/// bound to a payload unless `--allow-unbound`.
fn check_scope(
    args: &ApproveArgs,
    id: &BatchId,
    state: &BatchApprovalState,
    entries: &[ScopeEntry],
) -> Result<Vec<ScopeLeaf>, BatchCmdError> {
    let leaves: Vec<ScopeLeaf> = entries.iter().map(|e| e.leaf.clone()).collect();
    review_listed(id, state, &leaves, args.root.as_deref()).map_err(|r| refusal(id, r))?;
    let expected = match &args.expect {
        Some(path) => Some(read_expect(path)?),
        None => None,
    };
    review_contents(&leaves, expected.as_ref(), args.allow_unbound).map_err(|r| refusal(id, r))?;
    Ok(leaves)
}

/// A refusal of the review, as `batch approve` reports it.
fn refusal(id: &BatchId, refusal: ReviewRefusal) -> BatchCmdError {
    match refusal {
        ReviewRefusal::NotPending(status) => BatchCmdError::State(format!(
            "batch {id} is {}, not pending: only a pending batch takes approvals",
            status.as_str()
        )),
        ReviewRefusal::ImpossibleScopeSize(size) => {
            BatchCmdError::InvalidResponse(format!("batch {id} claims a scope of {size} leaves"))
        }
        ReviewRefusal::WindowClosed { not_after_us } => BatchCmdError::State(format!(
            "batch {id}'s window closed at {}; create a new batch",
            crate::output::rfc3339_us(not_after_us)
        )),
        ReviewRefusal::WindowTooLong {
            not_after_us,
            max_hours,
        } => BatchCmdError::State(format!(
            "batch {id}'s window stays open until {}, more than --max-hours {max_hours} from now; an approval admits its commands until then",
            crate::output::rfc3339_us(not_after_us)
        )),
        ReviewRefusal::ScopeMismatch(why) => BatchCmdError::ScopeMismatch(why),
        ReviewRefusal::ScopeChanged { actual, reviewed } => {
            BatchCmdError::ScopeChanged { actual, reviewed }
        }
        ReviewRefusal::Unexpected(why) => BatchCmdError::ScopeUnexpected(why),
        ReviewRefusal::Unbound { count, first } => BatchCmdError::Unbound {
            count,
            sample: first
                .iter()
                .map(|(subject, kind)| format!("{} {}", printable(subject), printable(kind)))
                .collect::<Vec<_>>()
                .join(", "),
        },
    }
}
