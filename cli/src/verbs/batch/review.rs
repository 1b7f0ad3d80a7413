//! What `batch approve` checks before it signs: the whole scope paged and its leaves in place,
//! the subjects `--expect` names, and the summary an approver reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use commands::quorum::{scope_page, BatchView, ScopeEntry};
use domain::quorum::{BatchId, Expected, ScopeLeaf};
use events::store::EventStore;
use serde_json::json;

use super::display::printable;
use super::error::{io, BatchCmdError};

/// Leaves per scope page when approving.
const PAGE: u32 = 5000;
/// Subjects shown per kind in the review summary; the rest are counted.
const SUBJECTS_SHOWN_PER_KIND: usize = 12;

pub(crate) fn read_expect(path: &Path) -> Result<Expected, BatchCmdError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let value: serde_json::Value = serde_json::from_str(trimmed)
            .map_err(|e| BatchCmdError::Input(format!("{}: {e}", path.display())))?;
        let items = value.as_array().cloned().unwrap_or_default();
        if items.iter().all(|v| v.is_string()) {
            return Ok(Expected::Subjects(
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
            ));
        }
        let mut pairs = BTreeSet::new();
        for item in items {
            match (item["subject"].as_str(), item["kind"].as_str()) {
                (Some(s), Some(k)) => {
                    pairs.insert((s.to_string(), k.to_string()));
                }
                _ => {
                    return Err(BatchCmdError::Input(format!(
                        "{}: expected subjects or {{ subject, kind }} objects",
                        path.display()
                    )))
                }
            }
        }
        return Ok(Expected::Commands(pairs));
    }
    Ok(Expected::Subjects(
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    ))
}

/// What an approver reviews before signing: the reason, every subject by kind (at most
/// [`SUBJECTS_SHOWN_PER_KIND`] per kind, then a count), the approvals so far and the window.
pub(crate) fn summary(view: &BatchView, leaves: &[ScopeLeaf]) -> (String, serde_json::Value) {
    let state = &view.state;
    let mut by_kind: BTreeMap<&str, Vec<&ScopeLeaf>> = BTreeMap::new();
    for leaf in leaves {
        by_kind.entry(leaf.kind()).or_default().push(leaf);
    }
    let mut text = format!(
        "batch {}\n  tenant {}, created by {}\n  reason: {}\n  {} leaves, root {}\n",
        state.batch_id,
        printable(&view.tenant_id),
        printable(&view.caller),
        printable(&view.reason),
        state.scope_size,
        state.scope_root
    );
    let mut kinds = serde_json::Map::new();
    for (kind, leaves) in by_kind.iter_mut() {
        leaves.sort_by(|a, b| a.subject().cmp(b.subject()));
        let shown: Vec<String> = leaves
            .iter()
            .take(SUBJECTS_SHOWN_PER_KIND)
            .map(|l| match l.payload_sha256() {
                Some(d) => format!("{} (payload {})", printable(l.subject()), &d.to_hex()[..12]),
                None => format!("{} (any payload)", printable(l.subject())),
            })
            .collect();
        let more = leaves.len().saturating_sub(SUBJECTS_SHOWN_PER_KIND);
        text.push_str(&format!(
            "  {} ({} leaves): {}{}\n",
            printable(kind),
            leaves.len(),
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
        kinds.insert(
            kind.to_string(),
            json!({ "count": leaves.len(), "subjects": leaves.iter().take(SUBJECTS_SHOWN_PER_KIND).map(|l| l.subject()).collect::<Vec<_>>() }),
        );
    }
    text.push_str(&format!(
        "  {} of {} approvals so far{}; the window ends at {}",
        state.approvals.len(),
        state.required,
        if state.approvals.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                state
                    .approvals
                    .keys()
                    .map(|k| k.to_hex()[..12].to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        crate::output::rfc3339_us(state.not_after_us)
    ));
    let value = json!({
        "batchId": state.batch_id.to_hex(),
        "tenantId": view.tenant_id,
        "caller": view.caller,
        "reason": view.reason,
        "scopeRoot": state.scope_root.to_hex(),
        "size": state.scope_size,
        "kinds": kinds,
        "held": state.approvals.len(),
        "required": state.required,
        "notAfter": crate::output::rfc3339_us(state.not_after_us),
        "notAfterUs": state.not_after_us,
    });
    (text, value)
}

/// A whole scope as one answer lists it (`batch scope` over the API): every leaf at its own
/// index, and no more leaves than the batch's size.
pub(crate) fn check_order(entries: &[ScopeEntry], size: u32) -> Result<(), BatchCmdError> {
    for (at, entry) in entries.iter().enumerate() {
        if entry.proof.index as usize != at {
            return Err(BatchCmdError::ScopeMismatch(format!(
                "leaf {} listed where {at} was expected",
                entry.proof.index
            )));
        }
    }
    if entries.len() > size as usize {
        return Err(BatchCmdError::ScopeMismatch(format!(
            "more leaves than the size {size}"
        )));
    }
    Ok(())
}

/// Pages the whole scope, refusing an answer that does not advance or lists leaves out of place.
pub(crate) async fn page_scope(
    store: &EventStore,
    id: &BatchId,
    size: u32,
) -> Result<Vec<ScopeEntry>, BatchCmdError> {
    let mut leaves: Vec<ScopeEntry> = Vec::with_capacity(size as usize);
    let mut from = 0u32;
    loop {
        let page = scope_page(store, id, from, PAGE).await?;
        if page.is_empty() {
            return Ok(leaves);
        }
        for entry in &page {
            if entry.proof.index < from {
                return Err(BatchCmdError::InvalidResponse(format!(
                    "the scope page from leaf {from} does not advance (it lists leaf {})",
                    entry.proof.index
                )));
            }
            if entry.proof.index != from {
                return Err(BatchCmdError::ScopeMismatch(format!(
                    "leaf {} listed where {from} was expected",
                    entry.proof.index
                )));
            }
            from += 1;
            leaves.push(entry.clone());
        }
        if leaves.len() > size as usize {
            return Err(BatchCmdError::ScopeMismatch(format!(
                "more leaves than the size {size}"
            )));
        }
    }
}
