//! The command queue at the edge (issue 21): a runnable command as the `bc.wire.v1.Command` a
//! session sends, and a node's `CommandResult` as the [`NodeAnswer`] the queue records. This is
//! the only place commands cross between the domain and the wire.
//!
//! A result is checked before it reaches the store: its command id must be `cmd_` and 32
//! lower-case hex characters and its outcome one of SUCCEEDED, FAILED or REJECTED; its output
//! tail keeps the last [`MAX_OUTPUT_TAIL`] bytes and its detail the first [`MAX_DETAIL`] bytes.
//! A REJECTED result's reason is the wire enum's name (`BATCH_UNAPPROVED`); an unknown value
//! reads as `COMMAND_REJECT_REASON_UNSPECIFIED` (the node refused, which is what matters).

use commands::command_queue::{NodeAnswer, NodeAnswerOutcome, RunnableCommand};
use proto::{CommandOutcome, CommandRejectReason};

/// Most bytes of a result's output tail kept (the last ones).
pub const MAX_OUTPUT_TAIL: usize = 4096;

/// Most bytes of a result's detail kept (the first ones, cut at a character boundary).
pub const MAX_DETAIL: usize = 4096;

/// The wire message for `command`: the stored body, signature and worker chain unchanged, and
/// for a batched one its batch's approval and its own leaf's proof.
pub fn command_message(command: &RunnableCommand) -> proto::Command {
    proto::Command {
        command_id: command.command_id.clone(),
        body: command.signed.body.clone(),
        signature: command.signed.signature.clone(),
        signer_chain: command.signed.worker_chain.clone(),
        batch_approval: command.approval.as_ref().map(|a| proto::BatchApproval {
            batch_id: a.batch_id.as_bytes().to_vec(),
            scope_root: a.scope_root.as_bytes().to_vec(),
            scope_size: a.scope_size,
            not_after_us: a.not_after_us,
            signatures: a
                .signatures
                .iter()
                .map(|s| proto::ApprovalSignature {
                    kid: s.kid.as_bytes().to_vec(),
                    sig: s.sig.clone(),
                })
                .collect(),
        }),
        batch_proof: command.proof.as_ref().map(|p| proto::BatchProof {
            index: p.index,
            siblings: p.siblings.iter().map(|h| h.as_bytes().to_vec()).collect(),
        }),
    }
}

/// Why a node's result is not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidResult {
    /// The command id is not one the queue hands out.
    #[error("the result's command id {0:?} is not `cmd_` and 32 lower-case hex characters; the node's agent sent a result for no command of this control plane")]
    CommandId(String),
    /// The outcome is UNSPECIFIED or unknown.
    #[error("the result for {command_id} has no outcome (value {value}); the node's agent must answer SUCCEEDED, FAILED or REJECTED")]
    Outcome { command_id: String, value: i32 },
}

/// Whether `id` is a queue command id (`cmd_` + 32 lower-case hex).
pub fn is_command_id(id: &str) -> bool {
    id.strip_prefix("cmd_").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The answer `result` records, bounded; refused when it names no queue command or has no
/// outcome.
pub fn node_answer(result: &proto::CommandResult) -> Result<NodeAnswer, InvalidResult> {
    if !is_command_id(&result.command_id) {
        let shown: String = result.command_id.chars().take(48).collect();
        return Err(InvalidResult::CommandId(shown));
    }
    let outcome = match CommandOutcome::try_from(result.outcome) {
        Ok(CommandOutcome::Succeeded) => NodeAnswerOutcome::Succeeded,
        Ok(CommandOutcome::Failed) => NodeAnswerOutcome::Failed,
        Ok(CommandOutcome::Rejected) => NodeAnswerOutcome::Rejected {
            reason: CommandRejectReason::try_from(result.reject_reason)
                .unwrap_or(CommandRejectReason::Unspecified)
                .as_str_name()
                .to_owned(),
        },
        Ok(CommandOutcome::Unspecified) | Err(_) => {
            return Err(InvalidResult::Outcome {
                command_id: result.command_id.clone(),
                value: result.outcome,
            })
        }
    };
    let tail = &result.output_tail;
    Ok(NodeAnswer {
        command_id: result.command_id.clone(),
        outcome,
        detail: bounded_detail(&result.detail),
        exit_code: result.has_exit_code.then_some(result.exit_code),
        output_tail: tail[tail.len().saturating_sub(MAX_OUTPUT_TAIL)..].to_vec(),
        started_at_ms: result.started_at_ms,
        finished_at_ms: result.finished_at_ms,
    })
}

/// The first [`MAX_DETAIL`] bytes of `detail`, cut at a character boundary.
fn bounded_detail(detail: &str) -> String {
    if detail.len() <= MAX_DETAIL {
        return detail.to_owned();
    }
    let mut end = MAX_DETAIL;
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    detail[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use domain::command::SignedCommand;
    use domain::quorum::{ApprovalSignature, BatchApproval, BatchId, Kid, ScopeHash, ScopeProof};

    use super::*;

    const ID: &str = "cmd_0123456789abcdef0123456789abcdef";

    fn result(outcome: CommandOutcome) -> proto::CommandResult {
        proto::CommandResult {
            command_id: ID.into(),
            outcome: outcome as i32,
            reject_reason: CommandRejectReason::BatchUnapproved as i32,
            detail: "leaf-used: x".into(),
            has_exit_code: false,
            exit_code: 7,
            output_tail: vec![b'a'; 10],
            started_at_ms: 1,
            finished_at_ms: 2,
        }
    }

    #[test]
    fn a_batched_command_carries_its_approval_and_its_own_proof_outside_the_signature() {
        let command = RunnableCommand {
            command_id: ID.into(),
            signed: SignedCommand {
                body: vec![1, 2, 3],
                signature: vec![4; 64],
                worker_chain: vec![vec![5, 6]],
            },
            approval: Some(BatchApproval {
                batch_id: BatchId([7; 32]),
                scope_root: ScopeHash([8; 32]),
                scope_size: 2,
                not_after_us: 9_000,
                signatures: vec![ApprovalSignature {
                    kid: Kid([9; 32]),
                    sig: vec![10, 11],
                }],
            }),
            proof: Some(ScopeProof {
                index: 1,
                siblings: vec![ScopeHash([12; 32])],
            }),
            dispatched_before: false,
        };
        let wire = command_message(&command);
        assert_eq!(wire.command_id, ID);
        assert_eq!(
            (wire.body, wire.signature, wire.signer_chain),
            (vec![1, 2, 3], vec![4; 64], vec![vec![5, 6]])
        );
        let approval = wire.batch_approval.expect("approval");
        assert_eq!(approval.batch_id, vec![7; 32]);
        assert_eq!(approval.scope_root, vec![8; 32]);
        assert_eq!((approval.scope_size, approval.not_after_us), (2, 9_000));
        assert_eq!(approval.signatures.len(), 1);
        assert_eq!(approval.signatures[0].kid, vec![9; 32]);
        assert_eq!(approval.signatures[0].sig, vec![10, 11]);
        let proof = wire.batch_proof.expect("proof");
        assert_eq!((proof.index, proof.siblings), (1, vec![vec![12; 32]]));
        // Unbatched: neither.
        let unbatched = command_message(&RunnableCommand {
            approval: None,
            proof: None,
            ..command
        });
        assert!(unbatched.batch_approval.is_none() && unbatched.batch_proof.is_none());
    }

    #[test]
    fn outcomes_map_and_a_rejection_carries_its_reason_name() {
        let a = node_answer(&result(CommandOutcome::Succeeded)).unwrap();
        assert_eq!(a.outcome, NodeAnswerOutcome::Succeeded);
        assert_eq!(a.exit_code, None);
        assert_eq!(a.detail, "leaf-used: x");
        assert_eq!((a.started_at_ms, a.finished_at_ms), (1, 2));
        let f = node_answer(&proto::CommandResult {
            has_exit_code: true,
            ..result(CommandOutcome::Failed)
        })
        .unwrap();
        assert_eq!(
            (f.outcome, f.exit_code),
            (NodeAnswerOutcome::Failed, Some(7))
        );
        let r = node_answer(&result(CommandOutcome::Rejected)).unwrap();
        assert_eq!(
            r.outcome,
            NodeAnswerOutcome::Rejected {
                reason: "BATCH_UNAPPROVED".into()
            }
        );
        for (value, name) in [
            (
                CommandRejectReason::UnbatchedLimit as i32,
                "UNBATCHED_LIMIT",
            ),
            (
                CommandRejectReason::SignatureInvalid as i32,
                "SIGNATURE_INVALID",
            ),
            (
                CommandRejectReason::KindUnsupported as i32,
                "KIND_UNSUPPORTED",
            ),
            (CommandRejectReason::NoHook as i32, "NO_HOOK"),
            (CommandRejectReason::NodeState as i32, "NODE_STATE"),
            (99, "COMMAND_REJECT_REASON_UNSPECIFIED"),
        ] {
            let r = node_answer(&proto::CommandResult {
                reject_reason: value,
                ..result(CommandOutcome::Rejected)
            })
            .unwrap();
            assert_eq!(
                r.outcome,
                NodeAnswerOutcome::Rejected {
                    reason: name.into()
                }
            );
        }
    }

    #[test]
    fn a_result_without_an_outcome_or_a_queue_id_is_refused() {
        assert_eq!(
            node_answer(&result(CommandOutcome::Unspecified)),
            Err(InvalidResult::Outcome {
                command_id: ID.into(),
                value: 0
            })
        );
        assert_eq!(
            node_answer(&proto::CommandResult {
                outcome: 42,
                ..result(CommandOutcome::Succeeded)
            }),
            Err(InvalidResult::Outcome {
                command_id: ID.into(),
                value: 42
            })
        );
        for bad in [
            "",
            "cmd_",
            "cmd_0123456789ABCDEF0123456789abcdef",
            "cmd_0123456789abcdef0123456789abcde",
            "cmd_0123456789abcdef0123456789abcdef0",
            "job_0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(
                node_answer(&proto::CommandResult {
                    command_id: bad.into(),
                    ..result(CommandOutcome::Succeeded)
                }),
                Err(InvalidResult::CommandId(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_output_tail_keeps_the_last_four_kib_and_the_detail_its_first() {
        let mut output: Vec<u8> = vec![b'x'; 10_000];
        output.extend_from_slice(b"END");
        let detail = "é".repeat(3_000); // 6,000 bytes, two per character
        let a = node_answer(&proto::CommandResult {
            output_tail: output,
            detail,
            ..result(CommandOutcome::Failed)
        })
        .unwrap();
        assert_eq!(a.output_tail.len(), MAX_OUTPUT_TAIL);
        assert!(a.output_tail.ends_with(b"xEND"));
        assert_eq!(a.detail.len(), MAX_DETAIL);
        assert_eq!(a.detail, "é".repeat(2_048));
    }
}
