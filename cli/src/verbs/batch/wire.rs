//! The JSON forms approvers read over the admin API, both ways: `batch show --json` and
//! `batch scope --json` as the verbs print them, and as `batch approve --server` reads them back
//! into the same values a direct run has (a [`BatchView`], [`ScopeEntry`]s), so the review and
//! the recomputed root are the same code on either road.
//!
//! Reading back checks shape only (hex lengths, base64, known status): what the answer MEANS is
//! checked by the review, which recomputes the root from the listed leaves and never trusts the
//! server's root. A malformed answer is INVALID_RESPONSE.

use std::collections::BTreeMap;

use base64::Engine;
use commands::quorum::{BatchView, ScopeEntry};
use domain::quorum::{
    ApprovalSignature, ApproveOutcome, BatchApprovalState, BatchId, BatchStatus, Kid,
    PayloadDigest, ScopeHash, ScopeLeaf, ScopeProof,
};
use serde_json::{json, Value};

use super::error::BatchCmdError;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn bad(what: &str) -> BatchCmdError {
    BatchCmdError::InvalidResponse(format!("the server's answer has no valid {what}"))
}

fn text<'a>(v: &'a Value, key: &str) -> Result<&'a str, BatchCmdError> {
    v[key].as_str().ok_or_else(|| bad(key))
}

fn int(v: &Value, key: &str) -> Result<i64, BatchCmdError> {
    v[key].as_i64().ok_or_else(|| bad(key))
}

fn uint(v: &Value, key: &str) -> Result<u32, BatchCmdError> {
    v[key]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| bad(key))
}

fn hex32<T>(
    v: &Value,
    key: &str,
    parse: impl Fn(&str) -> Result<T, domain::quorum::Bytes32Error>,
) -> Result<T, BatchCmdError> {
    parse(text(v, key)?).map_err(|_| bad(key))
}

/// `batch show --json`: the batch, its status and approvals.
pub(crate) fn view_json(view: &BatchView, trust_domain: Option<&str>) -> Value {
    json!({
        "batchId": view.state.batch_id.to_hex(),
        "tenantId": view.tenant_id,
        "caller": view.caller,
        "reason": view.reason,
        "trustDomain": trust_domain,
        "createdAtUs": view.created_at_us,
        "approverSetEpoch": view.approver_set_epoch,
        "status": view.state.status,
        "scopeRoot": view.state.scope_root.to_hex(),
        "size": view.state.scope_size,
        "notAfter": crate::output::rfc3339_us(view.state.not_after_us),
        "notAfterUs": view.state.not_after_us,
        "required": view.state.required,
        "held": view.state.approvals.len(),
        "approvers": view.state.approvals.keys().map(|k| k.to_hex()).collect::<Vec<_>>(),
    })
}

/// A view read back from [`view_json`], with the trust domain the server names. The approvals'
/// signatures are not carried (only their kids): an approver needs to know who approved.
pub(crate) fn view_from_json(v: &Value) -> Result<(BatchView, Option<String>), BatchCmdError> {
    let status = BatchStatus::parse(text(v, "status")?).ok_or_else(|| bad("status"))?;
    let mut approvals = BTreeMap::new();
    for kid in v["approvers"].as_array().ok_or_else(|| bad("approvers"))? {
        let kid = Kid::from_hex(kid.as_str().ok_or_else(|| bad("approvers"))?)
            .map_err(|_| bad("approvers"))?;
        approvals.insert(kid, ApprovalSignature { kid, sig: vec![] });
    }
    let view = BatchView {
        tenant_id: text(v, "tenantId")?.to_string(),
        caller: text(v, "caller")?.to_string(),
        reason: text(v, "reason")?.to_string(),
        created_at_us: int(v, "createdAtUs")?,
        approver_set_epoch: v["approverSetEpoch"]
            .as_u64()
            .ok_or_else(|| bad("approverSetEpoch"))?,
        approvals_held: approvals.len() as u32,
        state: BatchApprovalState {
            batch_id: hex32(v, "batchId", BatchId::from_hex)?,
            scope_root: hex32(v, "scopeRoot", ScopeHash::from_hex)?,
            scope_size: uint(v, "size")?,
            not_after_us: int(v, "notAfterUs")?,
            required: uint(v, "required")?,
            status,
            approvals,
        },
    };
    let trust_domain = v["trustDomain"].as_str().map(str::to_string);
    Ok((view, trust_domain))
}

/// One scope entry as `batch scope --json` lists it.
pub(crate) fn entry_json(entry: &ScopeEntry) -> Value {
    let payload = match (&entry.payload_type_url, &entry.payload_value) {
        (None, None) => Value::Null,
        (type_url, value) => json!({
            "typeUrl": type_url,
            "value": value.as_ref().map(|v| b64().encode(v)),
        }),
    };
    json!({
        "index": entry.proof.index,
        "subject": entry.leaf.subject(),
        "kind": entry.leaf.kind(),
        "payloadSha256": entry.leaf.payload_sha256().map(|d| d.to_hex()),
        "leafHash": entry.leaf_hash.to_hex(),
        "payload": payload,
        "proof": entry.proof.siblings.iter().map(|h| h.to_hex()).collect::<Vec<_>>(),
    })
}

/// A scope entry read back from [`entry_json`].
pub(crate) fn entry_from_json(v: &Value) -> Result<ScopeEntry, BatchCmdError> {
    let digest = match &v["payloadSha256"] {
        Value::Null => None,
        d => Some(
            PayloadDigest::from_hex(d.as_str().ok_or_else(|| bad("payloadSha256"))?)
                .map_err(|_| bad("payloadSha256"))?,
        ),
    };
    let leaf = ScopeLeaf::new(text(v, "subject")?, text(v, "kind")?, digest)
        .map_err(|e| BatchCmdError::InvalidResponse(format!("a scope leaf: {e}")))?;
    let (payload_type_url, payload_value) = match &v["payload"] {
        Value::Null => (None, None),
        p => {
            let value = match &p["value"] {
                Value::Null => None,
                s => Some(
                    b64()
                        .decode(s.as_str().ok_or_else(|| bad("payload value"))?)
                        .map_err(|_| bad("payload value"))?,
                ),
            };
            (p["typeUrl"].as_str().map(str::to_string), value)
        }
    };
    let mut siblings = Vec::new();
    for h in v["proof"].as_array().ok_or_else(|| bad("proof"))? {
        siblings.push(
            ScopeHash::from_hex(h.as_str().ok_or_else(|| bad("proof"))?)
                .map_err(|_| bad("proof"))?,
        );
    }
    Ok(ScopeEntry {
        leaf,
        leaf_hash: hex32(v, "leafHash", ScopeHash::from_hex)?,
        payload_type_url,
        payload_value,
        proof: ScopeProof {
            index: uint(v, "index")?,
            siblings,
        },
    })
}

/// `batch approve --json` and `batch submit-approval --json`: what recording the approval did.
pub(crate) fn outcome_json(id: &BatchId, kid: &Kid, outcome: &ApproveOutcome) -> Value {
    json!({ "batchId": id.to_hex(), "kid": kid.to_hex(), "signed": true,
            "recorded": outcome.recorded, "held": outcome.held,
            "required": outcome.required, "status": outcome.status })
}

/// An outcome read back from [`outcome_json`].
pub(crate) fn outcome_from_json(v: &Value) -> Result<ApproveOutcome, BatchCmdError> {
    Ok(ApproveOutcome {
        recorded: v["recorded"].as_bool().ok_or_else(|| bad("recorded"))?,
        held: uint(v, "held")?,
        required: uint(v, "required")?,
        status: BatchStatus::parse(text(v, "status")?).ok_or_else(|| bad("status"))?,
    })
}

/// A `--sig` value: base64url (padded or not; standard base64 is accepted too).
pub(crate) fn decode_sig(text: &str) -> Option<Vec<u8>> {
    let trimmed = text.trim().trim_end_matches('=');
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(trimmed)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(trimmed))
        .ok()
}

/// A signature as `--sig` takes it.
pub(crate) fn encode_sig(sig: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig)
}
