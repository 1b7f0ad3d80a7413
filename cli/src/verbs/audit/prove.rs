//! `bcctl audit prove` and `verify-proof`: the inclusion proof of one event against a tenant's
//! latest checkpoint, written as JSON, and checked offline.

use commands::audit::reads;
use domain::audit::{verify_inclusion, Checkpoint};
use serde::{Deserialize, Serialize};

use super::args::{ProveArgs, VerifyProofArgs};
use super::error::{read_file, AuditCmdError};
use super::format::{hex_array, EventLine, PROOF_FORMAT};
use super::trust::{trust, Trust};

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProofFile {
    pub(super) format: String,
    pub(super) version: u32,
    pub(super) tenant: String,
    pub(super) origin: String,
    pub(super) verifier_key: String,
    pub(super) signed_note: String,
    pub(super) tree_size: u64,
    pub(super) root_hash: String,
    pub(super) index: u64,
    pub(super) position: i64,
    pub(super) leaf_hash: String,
    pub(super) proof: Vec<String>,
    pub(super) event: serde_json::Value,
}

pub(super) async fn prove(args: ProveArgs) -> Result<(), AuditCmdError> {
    let store = args.db.deployment.connect_store().await?;
    let p = reads::prove(&store, &args.tenant, args.position).await?;
    let Some(event) = &p.leaf.event else {
        return Err(AuditCmdError::Tampered(format!(
            "leaf {} (position {}): its event is gone from the log",
            p.leaf.index, p.leaf.position
        )));
    };
    let event_line = serde_json::to_value(EventLine::of(event, p.leaf.index, &p.leaf.leaf_hash))
        .map_err(|e| AuditCmdError::Other(e.to_string()))?;
    let file = ProofFile {
        format: PROOF_FORMAT.into(),
        version: 1,
        tenant: args.tenant.clone(),
        origin: p.checkpoint.origin.clone(),
        verifier_key: p.checkpoint.verifier_key.clone(),
        signed_note: p.checkpoint.signed_note.clone(),
        tree_size: p.checkpoint.tree_size,
        root_hash: hex::encode(p.checkpoint.root_hash),
        index: p.leaf.index,
        position: p.leaf.position,
        leaf_hash: hex::encode(p.leaf.leaf_hash),
        proof: p.proof.iter().map(hex::encode).collect(),
        event: event_line,
    };
    let text =
        serde_json::to_string_pretty(&file).map_err(|e| AuditCmdError::Other(e.to_string()))?;
    match &args.out {
        Some(path) => {
            crate::output::write_out(path, format!("{text}\n").as_bytes()).map_err(|source| {
                AuditCmdError::Io {
                    what: "cannot write",
                    path: path.clone(),
                    source,
                }
            })
        }
        None => {
            crate::outln!("{text}");
            Ok(())
        }
    }
}

pub(super) fn verify_proof(args: VerifyProofArgs) -> Result<(), AuditCmdError> {
    let located = args
        .deployment
        .locate()
        .map_err(|e| AuditCmdError::Other(e.to_string()))?;
    let trust = trust(args.pin.as_deref(), Some(&located.deployment), None)?;
    let bytes = read_file(&args.file)?;
    let file: ProofFile = serde_json::from_slice(&bytes).map_err(|e| {
        AuditCmdError::Usage(format!("{} is not a proof file: {e}", args.file.display()))
    })?;
    if file.format != PROOF_FORMAT || file.version != 1 {
        return Err(AuditCmdError::Usage(format!(
            "{} is not a {PROOF_FORMAT} version 1 file",
            args.file.display()
        )));
    }
    let result = check_proof(&trust, &file);
    if args.json {
        crate::outln!(
            "{}",
            serde_json::json!({
                "ok": result.is_ok(), "tenant": file.tenant, "index": file.index,
                "position": file.position, "treeSize": file.tree_size,
                "error": result.as_ref().err().map(|e| e.to_string()),
            })
        );
    } else if result.is_ok() {
        crate::outln!(
            "OK: event at position {} is leaf {} of tenant {}'s log, in the signed checkpoint of size {}",
            file.position, file.index, file.tenant, file.tree_size
        );
    }
    result
}

pub(super) fn check_proof(trust: &Trust, file: &ProofFile) -> Result<(), AuditCmdError> {
    let tampered = |m: String| AuditCmdError::Tampered(m);
    let key = trust
        .key_for(Some(&file.verifier_key))?
        .ok_or_else(|| tampered("the proof carries no verifier key".into()))?;
    let origin = trust.origin_for(&file.tenant, Some(&file.origin))?;
    let cp = Checkpoint::open(&file.signed_note, &origin, &key)
        .map_err(|e| tampered(format!("the checkpoint does not verify: {e}")))?;
    if cp.size != file.tree_size || Some(cp.root) != hex_array::<32>(&file.root_hash) {
        return Err(tampered(
            "tree_size or root_hash differ from the signed checkpoint".into(),
        ));
    }
    let event_text = file.event.to_string();
    let ev: EventLine<'_> = serde_json::from_str(&event_text)
        .map_err(|e| tampered(format!("the event is malformed: {e}")))?;
    if ev.index != file.index || ev.position != file.position || ev.tenant_id != file.tenant {
        return Err(tampered(
            "the event's index, position or tenant differ from the proof's".into(),
        ));
    }
    let leaf = ev
        .recompute(&mut Vec::new())
        .map_err(|e| tampered(format!("the event is malformed: {e}")))?;
    if Some(leaf) != hex_array::<32>(&file.leaf_hash) {
        return Err(tampered(format!(
            "leaf {} (position {}): the event does not hash to the stated leaf",
            file.index, file.position
        )));
    }
    let proof = file
        .proof
        .iter()
        .map(|h| {
            hex_array::<32>(h).ok_or_else(|| tampered("a proof hash is not 64 hex digits".into()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    verify_inclusion(&leaf, file.index, cp.size, &proof, &cp.root).map_err(|e| {
        tampered(format!(
            "leaf {} (position {}) is not in the signed tree: {e}",
            file.index, file.position
        ))
    })
}
