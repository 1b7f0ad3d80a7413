//! `verify --checkpoint FILE`: a checkpoint the auditor saw before, read back from the file they
//! kept (the signed note itself, or any JSON object carrying it as `signed_note`: an export's
//! checkpoint line, an inclusion proof, an earlier `verify --json` report), and opened with the
//! trail's key under the tenant's origin.

use std::path::Path;

use domain::audit::{AuditPublicKey, Checkpoint, TreeHead};

use super::error::{read_file, AuditCmdError};

/// The signed note a `--checkpoint` file holds.
pub(super) fn read_known_note(path: &Path) -> Result<String, AuditCmdError> {
    let bytes = read_file(&path.to_path_buf())?;
    let usage = |why: String| {
        AuditCmdError::Usage(format!(
            "--checkpoint {}: {why}; give a signed checkpoint note, or a JSON object with a \"signed_note\" field",
            path.display()
        ))
    };
    let text = String::from_utf8(bytes).map_err(|_| usage("not UTF-8 text".into()))?;
    if !text.trim_start().starts_with('{') {
        return Ok(text);
    }
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| usage(format!("not valid JSON: {e}")))?;
    // `signed_note` in the export and proof files, `signedNote` in a `verify --json` report.
    let note = value.get("signed_note").or_else(|| value.get("signedNote"));
    match note.and_then(|v| v.as_str()) {
        Some(note) => Ok(note.to_string()),
        None => Err(usage(
            "the JSON object has no \"signed_note\" string".into(),
        )),
    }
}

/// The tree head of the known checkpoint, its signature checked by `key` under `origin`. A note
/// that does not open is a usage error: the auditor's own reference is wrong, not the trail.
/// Without a key (a trail with no checkpoint, verified with `--pin` alone) only its size and root
/// are read; such a trail fails as truncated or unsigned whatever the note says.
pub(super) fn open_known(
    note: &str,
    origin: &str,
    key: Option<&AuditPublicKey>,
) -> Result<TreeHead, AuditCmdError> {
    let usage = |why: String| AuditCmdError::Usage(format!("--checkpoint: {why}"));
    let cp = match key {
        Some(key) => Checkpoint::open(note, origin, key).map_err(|e| {
            usage(format!(
                "not a checkpoint of {origin} signed by the pinned audit key: {e}"
            ))
        })?,
        None => {
            let body = note.split_once("\n\n").map_or(note, |(body, _)| body);
            Checkpoint::parse(&format!("{}\n", body.trim_end_matches('\n')))
                .map_err(|e| usage(format!("not a checkpoint: {e}")))?
        }
    };
    Ok(TreeHead {
        size: cp.size,
        root: cp.root,
    })
}
