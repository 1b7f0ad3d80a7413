//! What `bcctl audit verify` reports: the JSON object (`--json`) or the text, the fault kinds, and
//! the error (and so the exit code) each class of fault ends the command with.

use domain::audit::{CoverageFault, TrailFault, TrailSummary};
use serde::Serialize;

use super::error::AuditCmdError;

/// What `verify` reports. Where the trail verified, the summary fields are there even when it
/// is not entirely covered (`fault` then says why), so partial coverage can be read off.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Report {
    /// Every leaf is covered by a verified checkpoint signature (or, with --allow-unsealed,
    /// every signed thing verifies and the unsealed tail is reported).
    pub(super) ok: bool,
    pub(super) tenant: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) leaves: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) checkpoints: Option<usize>,
    /// The leaves the last checkpoint covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) signed_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) signed_root: Option<String>,
    /// Leaves after the last checkpoint: covered by no signature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) unsealed_leaves: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) unsealed_from_index: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) unsealed_from_position: Option<i64>,
    /// The last checkpoint's signed note: keep the report, give it to the next `verify` as
    /// `--checkpoint` to catch a truncation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) signed_note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) fault: Option<FaultReport>,
}

/// Which exit a fault ends `verify` with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FaultClass {
    /// Exit 3: something does not verify.
    Tampered,
    /// Exit 4: leaves after the last checkpoint.
    Unsealed,
    /// Exit 5: no checkpoint at all.
    NoCheckpoint,
    /// Exit 6: smaller than what the auditor saw before.
    Truncated,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FaultReport {
    pub(super) kind: &'static str,
    pub(super) message: String,
    pub(super) index: Option<u64>,
    pub(super) position: Option<i64>,
    /// The checkpoint concerned, numbered from 1 as the export's `seq`.
    pub(super) checkpoint: Option<usize>,
    #[serde(skip)]
    pub(super) class: FaultClass,
}

impl FaultReport {
    /// A fault found while reading the trail or its key (always a tampering class).
    pub(super) fn tampered(
        kind: &'static str,
        message: String,
        index: Option<u64>,
        position: Option<i64>,
    ) -> Self {
        FaultReport {
            kind,
            message,
            index,
            position,
            checkpoint: None,
            class: FaultClass::Tampered,
        }
    }

    pub(super) fn of_trail(f: &TrailFault) -> Self {
        FaultReport {
            kind: fault_kind(f),
            message: f.to_string(),
            index: Some(f.index()),
            position: f.position(),
            // Numbered as the export numbers them (`seq`, from 1), not by list index.
            checkpoint: f.checkpoint().map(|i| i + 1),
            class: FaultClass::Tampered,
        }
    }

    pub(super) fn of_coverage(f: &CoverageFault) -> Self {
        let (kind, class, index, position, hint) = match f {
            CoverageFault::Truncated { signed_size, .. } => (
                "truncated",
                FaultClass::Truncated,
                Some(*signed_size),
                None,
                "",
            ),
            CoverageFault::NoCheckpoint { .. } => (
                "no_checkpoint",
                FaultClass::NoCheckpoint,
                Some(0),
                None,
                "",
            ),
            CoverageFault::Unsealed {
                from_index,
                from_position,
                ..
            } => (
                "unsealed_leaves",
                FaultClass::Unsealed,
                Some(*from_index),
                *from_position,
                "; seal them (bcctl audit seal), export without --include-unsealed, or accept them with --allow-unsealed",
            ),
        };
        FaultReport {
            kind,
            message: format!("{f}{hint}"),
            index,
            position,
            checkpoint: None,
            class,
        }
    }
}

fn fault_kind(f: &TrailFault) -> &'static str {
    match f {
        TrailFault::TamperedLeaf { .. } => "tampered_leaf",
        TrailFault::MissingLeaf { .. } => "missing_leaf",
        TrailFault::ExtraLeaf { .. } => "extra_leaf",
        TrailFault::RootMismatch { .. } => "root_mismatch",
        TrailFault::BadSignature { .. } => "bad_signature",
        TrailFault::WrongKey { .. } => "wrong_key",
        TrailFault::MalformedCheckpoint { .. } => "malformed_checkpoint",
        TrailFault::Fork { .. } => "fork",
        TrailFault::NotExtension { .. } => "not_extension",
        TrailFault::BrokenChain { .. } => "broken_chain",
        TrailFault::CheckpointRemoved { .. } => "checkpoint_removed",
        TrailFault::CheckpointMismatch { .. } => "checkpoint_mismatch",
        TrailFault::InconsistentWithKnown { .. } => "inconsistent_with_checkpoint",
    }
}

impl Report {
    pub(super) fn new(tenant: &str) -> Self {
        Report {
            ok: false,
            tenant: tenant.to_string(),
            leaves: None,
            checkpoints: None,
            signed_size: None,
            signed_root: None,
            unsealed_leaves: None,
            unsealed_from_index: None,
            unsealed_from_position: None,
            signed_note: None,
            fault: None,
        }
    }

    /// The figures of a trail that verified (covered or not).
    pub(super) fn summary(&mut self, s: &TrailSummary, last_note: Option<&str>) {
        self.leaves = Some(s.leaves);
        self.checkpoints = Some(s.checkpoints);
        self.signed_size = Some(s.signed_size);
        self.signed_root = Some(hex::encode(s.signed_root));
        self.unsealed_leaves = Some(s.unsealed_leaves);
        if s.unsealed_leaves > 0 {
            self.unsealed_from_index = Some(s.signed_size);
            self.unsealed_from_position = s.first_unsealed_position;
        }
        self.signed_note = last_note.map(str::to_string);
    }

    /// Prints the report, then ends the command with the error its fault class calls for.
    pub(super) fn finish(&self, json: bool) -> Result<(), AuditCmdError> {
        self.print(json)?;
        let Some(f) = &self.fault else {
            return Ok(());
        };
        let message = f.message.clone();
        Err(match f.class {
            FaultClass::Tampered => AuditCmdError::Tampered(message),
            FaultClass::Unsealed => AuditCmdError::Unsealed(message),
            FaultClass::NoCheckpoint => AuditCmdError::NoCheckpoint(message),
            FaultClass::Truncated => AuditCmdError::Truncated(message),
        })
    }

    fn print(&self, json: bool) -> Result<(), AuditCmdError> {
        if json {
            let text =
                serde_json::to_string(self).map_err(|e| AuditCmdError::Other(e.to_string()))?;
            crate::outln!("{text}");
            return Ok(());
        }
        let leaves = self.leaves.unwrap_or(0);
        let signed = self.signed_size.unwrap_or(0);
        let figures = format!(
            "{leaves} leaves, {} checkpoints, signed size {signed} root {}",
            self.checkpoints.unwrap_or(0),
            self.signed_root.as_deref().unwrap_or("-"),
        );
        let tail = match (self.unsealed_leaves, self.unsealed_from_position) {
            (Some(n), Some(p)) if n > 0 => format!(
                "; {n} leaves from index {signed} (position {p}) are covered by no signature"
            ),
            _ => String::new(),
        };
        match &self.fault {
            None if tail.is_empty() => crate::outln!(
                "OK: tenant {}: every leaf is covered by a verified signature: {figures}",
                self.tenant
            ),
            None => crate::outln!(
                "OK (--allow-unsealed): tenant {}: {figures}{tail}",
                self.tenant
            ),
            Some(f) => {
                let head = match f.class {
                    FaultClass::Tampered => "TAMPERED",
                    FaultClass::Unsealed | FaultClass::NoCheckpoint => "NOT COVERED",
                    FaultClass::Truncated => "CUT BACK",
                };
                crate::outln!("{head} ({}): {}", f.kind, f.message);
                if f.class == FaultClass::Tampered {
                    let show = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                    crate::outln!(
                        "first bad index: {}, position: {}, checkpoint: {}",
                        show(f.index.map(|v| v.to_string())),
                        show(f.position.map(|v| v.to_string())),
                        show(f.checkpoint.map(|v| v.to_string()))
                    );
                } else if self.leaves.is_some() {
                    crate::outln!("verified: tenant {}: {figures}{tail}", self.tenant);
                }
            }
        }
        Ok(())
    }
}
