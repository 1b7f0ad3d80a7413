//! What a batch's bound leaves would run, decoded for the approver (spec 003, `batch approve`):
//! every distinct operation (kind and payload digest) with its subjects, the payload decoded by
//! the kind registry's own type (`domain::command::decode_payload`), never by the type the
//! server labels it.
//!
//! - A payload whose bytes do not hash to the leaf's digest: SCOPE_MISMATCH.
//! - A payload labelled with another type than its kind's, or with fields this build cannot
//!   decode, or whose re-encoding does not give the bytes back: PAYLOAD_REFUSED
//!   (`payload-unknown-fields`).
//! - A payload of a kind the registry does not know is opaque: OPAQUE_PAYLOAD unless
//!   `--allow-opaque` (then shown as hex).
//! - A leaf bound to a digest without carrying the payload is shown by its digest only.
//!
//! `--operations-out FILE` writes them all in full (JSON); the summary shortens long strings in
//! the middle so every field shows.

use std::collections::BTreeMap;
use std::path::Path;

use commands::quorum::ScopeEntry;
use domain::command::kind_spec;
use domain::command::payloads::decode_payload;
use domain::quorum::PayloadDigest;
use serde_json::{json, Value};

use super::display::printable;
use super::error::{io, BatchCmdError};

/// Longest string shown whole in the summary; longer ones keep their start and end.
const SHOWN_CHARS: usize = 60;

/// One distinct operation: a kind and a payload, with every subject it runs on.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    pub kind: String,
    pub digest: PayloadDigest,
    pub type_url: Option<String>,
    /// The decoded payload; `None` when the leaf carries only the digest, or it is opaque.
    pub decoded: Option<Value>,
    /// The payload bytes of an opaque operation, for `--operations-out`.
    pub opaque: Option<Vec<u8>>,
    pub subjects: Vec<String>,
}

/// The bound leaves' operations, checked as the module doc says.
pub(crate) fn operations(
    entries: &[ScopeEntry],
    allow_opaque: bool,
) -> Result<Vec<Operation>, BatchCmdError> {
    let mut by_op: BTreeMap<(String, [u8; 32]), Operation> = BTreeMap::new();
    let mut opaque: Vec<String> = Vec::new();
    for entry in entries {
        let leaf = &entry.leaf;
        let Some(digest) = leaf.payload_sha256().copied() else {
            continue;
        };
        let key = (leaf.kind().to_string(), *digest.as_bytes());
        if let Some(op) = by_op.get_mut(&key) {
            op.subjects.push(leaf.subject().to_string());
            continue;
        }
        let (decoded, opaque_bytes) = match &entry.payload_value {
            None => (None, None),
            Some(value) => {
                if PayloadDigest::of(value) != digest {
                    return Err(BatchCmdError::ScopeMismatch(format!(
                        "leaf {} ({} {}) carries a payload whose SHA-256 is not its digest {}",
                        entry.proof.index,
                        printable(leaf.subject()),
                        printable(leaf.kind()),
                        digest.to_hex()
                    )));
                }
                let label = entry.payload_type_url.clone().unwrap_or_default();
                match kind_spec(leaf.kind()) {
                    None => {
                        opaque.push(format!(
                            "{} {}",
                            printable(leaf.subject()),
                            printable(leaf.kind())
                        ));
                        (None, Some(value.clone()))
                    }
                    Some(spec) => {
                        if label != spec.type_url() {
                            return Err(BatchCmdError::PayloadRefused(format!(
                                "leaf {} ({}) labels its payload {:?}, but {} payloads are {}: it is never decoded as the type the server names",
                                entry.proof.index,
                                printable(leaf.subject()),
                                printable(&label),
                                spec.name,
                                spec.type_url()
                            )));
                        }
                        let decoded = decode_payload(spec.payload_type, value).map_err(|e| {
                            BatchCmdError::PayloadRefused(format!(
                                "leaf {} ({} {}): {e}",
                                entry.proof.index,
                                printable(leaf.subject()),
                                spec.name
                            ))
                        })?;
                        (Some(decoded), None)
                    }
                }
            }
        };
        by_op.insert(
            key,
            Operation {
                kind: leaf.kind().to_string(),
                digest,
                type_url: entry.payload_type_url.clone(),
                decoded,
                opaque: opaque_bytes,
                subjects: vec![leaf.subject().to_string()],
            },
        );
    }
    if !opaque.is_empty() && !allow_opaque {
        return Err(BatchCmdError::Opaque {
            count: opaque.len(),
            sample: opaque
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let mut ops: Vec<Operation> = by_op.into_values().collect();
    for op in &mut ops {
        op.subjects.sort();
    }
    Ok(ops)
}

/// A string shortened in the middle to at most [`SHOWN_CHARS`] characters.
fn shorten(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= SHOWN_CHARS {
        return printable(text);
    }
    let half = SHOWN_CHARS / 2 - 1;
    let start: String = chars[..half].iter().collect();
    let end: String = chars[chars.len() - half..].iter().collect();
    format!("{}…{}", printable(&start), printable(&end))
}

fn shortened(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}: {}", shortened(v)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        Value::String(s) => format!("{:?}", shorten(s)),
        other => other.to_string(),
    }
}

/// The summary's lines for the operations.
pub(crate) fn summary_text(ops: &[Operation]) -> String {
    let mut text = String::new();
    if ops.is_empty() {
        return text;
    }
    text.push_str("  operations:\n");
    for op in ops {
        let what = match (&op.decoded, &op.opaque) {
            (Some(decoded), _) => shortened(decoded),
            (None, Some(bytes)) => format!("OPAQUE {} bytes", bytes.len()),
            (None, None) => "payload not carried (digest only)".to_string(),
        };
        text.push_str(&format!(
            "    {} payload {}: {what} on {} subject(s)\n",
            printable(&op.kind),
            &op.digest.to_hex()[..12],
            op.subjects.len()
        ));
    }
    text
}

/// Every operation in full, as `--operations-out` writes them.
pub(crate) fn to_json(ops: &[Operation]) -> Value {
    Value::Array(
        ops.iter()
            .map(|op| {
                json!({
                    "kind": op.kind,
                    "payloadSha256": op.digest.to_hex(),
                    "typeUrl": op.type_url,
                    "payload": op.decoded,
                    "opaquePayloadHex": op.opaque.as_ref().map(hex::encode),
                    "subjects": op.subjects,
                })
            })
            .collect(),
    )
}

/// Writes `--operations-out` (replacing the file).
pub(crate) fn write_operations(path: &Path, ops: &[Operation]) -> Result<(), BatchCmdError> {
    let mut text = serde_json::to_string_pretty(&to_json(ops))
        .map_err(|e| BatchCmdError::State(format!("operations: {e}")))?;
    text.push('\n');
    std::fs::write(path, text).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A payload the server labels with another type than its kind's (a server older than its
    /// own check, or one that lies) is refused before anything is decoded or signed.
    #[test]
    fn a_relabelled_payload_is_refused_here_too() {
        use domain::quorum::{BatchId, ScopeLeaf, ScopeProof};
        let id = BatchId::derive("t1", "ops", "k1").expect("id");
        let value = b"not a reboot".to_vec();
        let leaf =
            ScopeLeaf::new("node-1", "node.reboot", Some(PayloadDigest::of(&value))).expect("leaf");
        let entry = ScopeEntry {
            leaf_hash: leaf.hash(&id),
            leaf,
            payload_type_url: Some("type.googleapis.com/bc.command.v1.DiskWipe".into()),
            payload_value: Some(value),
            proof: ScopeProof {
                index: 0,
                siblings: vec![],
            },
        };
        let err = operations(&[entry], false).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "PAYLOAD_REFUSED: leaf 0 (node-1) labels its payload \"type.googleapis.com/bc.command.v1.DiskWipe\", \
             but node.reboot payloads are type.googleapis.com/bc.command.v1.NodeReboot: it is never \
             decoded as the type the server names"
        );
    }

    #[test]
    fn long_strings_are_shortened_in_the_middle() {
        let long = "a".repeat(40) + &"b".repeat(40);
        let s = shorten(&long);
        assert_eq!(s.chars().count(), 59);
        assert!(s.starts_with("aaaa") && s.ends_with("bbbb") && s.contains('…'));
        assert_eq!(shorten("short"), "short");
    }
}
