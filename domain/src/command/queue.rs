//! The queue's decisions on a command's stream (`command/<id>`): a new command enqueued, its
//! dispatch to the node (or its cancellation there, when the node's certificate no longer allows
//! its kind), and the node's answer. Each decider is pure: the shell loads what the
//! log holds of the command and appends what is decided at the stream version it read, so two
//! gateways recording answers for one command race safely (first answer wins).

use std::convert::Infallible;

use events::schema::{
    CommandCancelled, CommandDispatched, CommandEnqueued, CommandRejected, CommandResultRecorded,
};

use super::enqueue::{
    check_kind_allowed, plan_enqueue, EnqueueCommand, EnqueuePlan, EnqueueRefusal, EnqueueState,
    NodeFacts,
};
use super::kinds::{kind_spec, BUILT_IN_KINDS};
use super::wire::{CommandBody, SignedCommand};
use crate::decision::Decision;

/// How much of a command's output the log keeps: its last 4 KiB (the projection keeps the same).
pub const OUTPUT_TAIL_MAX: usize = 4096;

/// The statuses of a command that was answered or will never be sent.
const FINAL: [&str; 4] = ["succeeded", "failed", "rejected", "cancelled"];

/// One event on a command's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum QueueEvent {
    /// The command entered the queue, signed.
    Enqueued(CommandEnqueued),
    /// A gateway sent it to its node.
    Dispatched(CommandDispatched),
    /// The node ran it (succeeded or failed).
    ResultRecorded(CommandResultRecorded),
    /// The node refused it before running anything.
    Rejected(CommandRejected),
    /// It will not be sent: at dispatch the node's certificate no longer allowed its kind.
    Cancelled(CommandCancelled),
}

impl QueueEvent {
    /// The command whose stream it goes to.
    pub fn command_id(&self) -> &str {
        match self {
            QueueEvent::Enqueued(e) => &e.command_id,
            QueueEvent::Dispatched(e) => &e.command_id,
            QueueEvent::ResultRecorded(e) => &e.command_id,
            QueueEvent::Rejected(e) => &e.command_id,
            QueueEvent::Cancelled(e) => &e.command_id,
        }
    }
}

/// What the log holds of a command, as the dispatch and answer deciders read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCommand {
    /// The node it is for.
    pub node_id: String,
    /// Its kind.
    pub kind: String,
    /// Its stored status (`queued`, `held`, `dispatched`, `succeeded`, ...).
    pub status: String,
    /// Whether a node's answer was recorded.
    pub answered: bool,
}

/// What a command cancelled at dispatch says after the refusal's own words.
pub const CANCELLED_AT_DISPATCH: &str =
    "cancelled at dispatch: the node's certificate changed after the command was enqueued";

/// Records the dispatch of `commands` (each with what the log holds of it; `None`: unknown) to
/// `node_id` for `cause` (`ready`, `hello`): one `command.dispatched` each, skipping a command
/// that is unknown, of another node, or already answered or cancelled. The node's role and its
/// newest live certificate's allowed kinds (`node`, as enqueue reads them; `None`: no such
/// node) are checked again (issue 40 item 16): a command they no longer admit is not sent but
/// cancelled (`command.cancelled`, the refusal's words then [`CANCELLED_AT_DISPATCH`]). The
/// outcome is the ids to send, in order.
pub fn decide_dispatched(
    node_id: &str,
    cause: &str,
    node: Option<&NodeFacts>,
    commands: &[(String, Option<StoredCommand>)],
) -> Result<Decision<QueueEvent, Vec<String>>, Infallible> {
    let mut events = Vec::new();
    let mut send = Vec::new();
    for (command_id, stored) in commands {
        let Some(stored) = stored.as_ref() else {
            continue;
        };
        if stored.node_id != node_id || FINAL.contains(&stored.status.as_str()) {
            continue;
        }
        if let Err(refusal) = dispatch_check(node_id, node, &stored.kind) {
            events.push(QueueEvent::Cancelled(CommandCancelled {
                command_id: command_id.clone(),
                node_id: node_id.to_string(),
                reason: format!("{refusal}; {CANCELLED_AT_DISPATCH}"),
                batch_id: Vec::new(),
            }));
            continue;
        }
        events.push(QueueEvent::Dispatched(CommandDispatched {
            command_id: command_id.clone(),
            node_id: node_id.to_string(),
            cause: cause.to_string(),
        }));
        send.push(command_id.clone());
    }
    Ok(Decision {
        events,
        outcome: send,
    })
}

/// Enqueue's node rules that can change after a command was enqueued: the kind is still
/// registered and the node's role and certificate still admit it.
fn dispatch_check(
    node_id: &str,
    node: Option<&NodeFacts>,
    kind: &str,
) -> Result<(), EnqueueRefusal> {
    let spec = kind_spec(kind).ok_or_else(|| EnqueueRefusal::UnknownKind {
        kind: kind.to_string(),
        known: BUILT_IN_KINDS
            .iter()
            .map(|k| k.name)
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    let node = node.ok_or_else(|| EnqueueRefusal::NodeNotFound {
        node_id: node_id.to_string(),
    })?;
    check_kind_allowed(node_id, node, spec)
}

/// What a node answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAnswerOutcome {
    /// It ran and succeeded.
    Succeeded,
    /// It ran and failed.
    Failed,
    /// It refused before running anything; the reason is the wire enum's name
    /// (`BATCH_UNAPPROVED`).
    Rejected {
        /// `CommandRejectReason` name.
        reason: String,
    },
}

/// A node's `CommandResult`, as the gateway decoded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAnswer {
    /// The command.
    pub command_id: String,
    /// What happened.
    pub outcome: NodeAnswerOutcome,
    /// The node's words.
    pub detail: String,
    /// The program's exit status.
    pub exit_code: Option<i32>,
    /// The output's tail (at most 4 KiB kept).
    pub output_tail: Vec<u8>,
    /// Node clock, Unix ms.
    pub started_at_ms: i64,
    /// Node clock, Unix ms.
    pub finished_at_ms: i64,
}

/// Records `node_id`'s answer for a command (`stored`: what the log holds of it, `None` when
/// unknown): `command.rejected` for a refusal, else `command.result.recorded` with the last
/// [`OUTPUT_TAIL_MAX`] bytes of output. An answer for an unknown command (a node cannot make
/// the gateway fail), a command of another node, one already answered or a cancelled one
/// records nothing; the outcome says whether it was recorded.
pub fn decide_node_answer(
    node_id: &str,
    answer: &NodeAnswer,
    stored: Option<&StoredCommand>,
) -> Result<Decision<QueueEvent, bool>, Infallible> {
    let Some(stored) = stored else {
        return Ok(Decision::unchanged(false));
    };
    if stored.node_id != node_id || stored.answered || stored.status == "cancelled" {
        return Ok(Decision::unchanged(false));
    }
    let event = match &answer.outcome {
        NodeAnswerOutcome::Rejected { reason } => QueueEvent::Rejected(CommandRejected {
            command_id: answer.command_id.clone(),
            node_id: node_id.to_string(),
            reason: reason.clone(),
            detail: answer.detail.clone(),
        }),
        outcome => QueueEvent::ResultRecorded(CommandResultRecorded {
            command_id: answer.command_id.clone(),
            node_id: node_id.to_string(),
            outcome: if *outcome == NodeAnswerOutcome::Succeeded {
                "succeeded"
            } else {
                "failed"
            }
            .to_string(),
            has_exit_code: answer.exit_code.is_some(),
            exit_code: answer.exit_code.unwrap_or_default(),
            output_tail: answer.output_tail
                [answer.output_tail.len().saturating_sub(OUTPUT_TAIL_MAX)..]
                .to_vec(),
            detail: answer.detail.clone(),
            started_at_ms: answer.started_at_ms,
            finished_at_ms: answer.finished_at_ms,
        }),
    };
    Ok(Decision {
        events: vec![event],
        outcome: true,
    })
}

/// A command to enqueue under its fresh id, and who asks.
#[derive(Debug, Clone, Copy)]
pub struct Enqueue<'a> {
    /// What is asked.
    pub command: &'a EnqueueCommand,
    /// Its id (`cmd_…`, drawn by the shell).
    pub command_id: &'a str,
    /// Who asks.
    pub caller: &'a str,
}

/// Why a command did not enter the queue: refused, or the signer (the worker key) failed.
#[derive(Debug)]
pub enum EnqueueFailure<E> {
    /// The queue's refusal.
    Refused(EnqueueRefusal),
    /// Signing failed: an error, not a refusal.
    Signer(E),
}

/// Enqueues a command: the queue's rules ([`plan_enqueue`]), then the body signed by `sign`
/// (the worker key the shell holds, valid at the body's issue time) and the one
/// `command.enqueued` event. The outcome is the plan.
pub fn decide_enqueue<E>(
    enqueue: &Enqueue<'_>,
    state: &EnqueueState,
    sign: impl FnOnce(&CommandBody) -> Result<SignedCommand, E>,
) -> Result<Decision<QueueEvent, EnqueuePlan>, EnqueueFailure<E>> {
    let command = enqueue.command;
    let plan = plan_enqueue(command, state).map_err(EnqueueFailure::Refused)?;
    let body = CommandBody {
        command_id: enqueue.command_id.to_string(),
        node_id: command.node_id.clone(),
        tenant_id: plan.tenant_id.clone(),
        kind: plan.kind.name.to_string(),
        payload_type_url: plan.payload_type_url.clone(),
        payload: command.payload.clone(),
        batch_id: command
            .batch_id
            .map(|b| b.as_bytes().to_vec())
            .unwrap_or_default(),
        issued_at_ms: state.now_us.div_euclid(1000),
        not_after_ms: plan.not_after_us.div_euclid(1000),
    };
    let signed = sign(&body).map_err(EnqueueFailure::Signer)?;
    let event = CommandEnqueued {
        command_id: enqueue.command_id.to_string(),
        node_id: command.node_id.clone(),
        tenant_id: plan.tenant_id.clone(),
        kind: body.kind,
        payload_type_url: body.payload_type_url,
        payload: body.payload,
        batch_id: body.batch_id,
        body: signed.body,
        signature: signed.signature,
        worker_certificate: signed.worker_chain.into_iter().next().unwrap_or_default(),
        caller: enqueue.caller.to_string(),
        held: plan.held,
        leaf_hash: plan
            .leaf_hash
            .map(|h| h.as_bytes().to_vec())
            .unwrap_or_default(),
        not_after_us: plan.not_after_us,
        destructive: plan.destructive,
    };
    Ok(Decision {
        events: vec![QueueEvent::Enqueued(event)],
        outcome: plan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(node: &str, status: &str, answered: bool) -> StoredCommand {
        StoredCommand {
            node_id: node.into(),
            kind: "diag.ping".into(),
            status: status.into(),
            answered,
        }
    }

    fn answer(outcome: NodeAnswerOutcome, tail: usize) -> NodeAnswer {
        NodeAnswer {
            command_id: "cmd_1".into(),
            outcome,
            detail: "done".into(),
            exit_code: Some(0),
            output_tail: vec![7; tail],
            started_at_ms: 1,
            finished_at_ms: 2,
        }
    }

    #[test]
    fn only_the_first_answer_of_the_commands_own_node_is_recorded() {
        let ok = answer(NodeAnswerOutcome::Succeeded, 5000);
        let d = decide_node_answer("n1", &ok, Some(&stored("n1", "dispatched", false))).unwrap();
        assert!(d.outcome);
        match d.events.as_slice() {
            [QueueEvent::ResultRecorded(r)] => {
                assert_eq!(r.outcome, "succeeded");
                assert_eq!(r.output_tail.len(), OUTPUT_TAIL_MAX);
            }
            other => panic!("{other:?}"),
        }
        for (node, s) in [
            ("n2", stored("n1", "dispatched", false)),
            ("n1", stored("n1", "succeeded", true)),
            ("n1", stored("n1", "cancelled", false)),
        ] {
            let d = decide_node_answer(node, &ok, Some(&s)).unwrap();
            assert_eq!(d, Decision::unchanged(false));
        }
        assert_eq!(
            decide_node_answer("n1", &ok, None).unwrap(),
            Decision::unchanged(false)
        );
        let no = answer(
            NodeAnswerOutcome::Rejected {
                reason: "BATCH_UNAPPROVED".into(),
            },
            0,
        );
        let d = decide_node_answer("n1", &no, Some(&stored("n1", "queued", false))).unwrap();
        assert!(
            matches!(d.events.as_slice(), [QueueEvent::Rejected(r)] if r.reason == "BATCH_UNAPPROVED")
        );
    }

    #[test]
    fn a_dispatch_skips_unknown_foreign_and_final_commands() {
        let commands = vec![
            ("a".to_string(), Some(stored("n1", "queued", false))),
            ("b".to_string(), None),
            ("c".to_string(), Some(stored("n2", "queued", false))),
            ("d".to_string(), Some(stored("n1", "rejected", true))),
            ("e".to_string(), Some(stored("n1", "dispatched", false))),
        ];
        let d = decide_dispatched("n1", "hello", Some(&facts(&[])), &commands).unwrap();
        let ids: Vec<&str> = d.events.iter().map(QueueEvent::command_id).collect();
        assert_eq!(ids, ["a", "e"]);
        assert_eq!(d.outcome, ["a", "e"]);
    }

    fn facts(kinds: &[&str]) -> NodeFacts {
        NodeFacts {
            tenant_id: "t1".into(),
            role: "ramdisk".into(),
            status: "active".into(),
            has_live_certificate: true,
            allowed_kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    #[test]
    fn a_dispatch_cancels_what_the_nodes_certificate_no_longer_allows() {
        let mut wipe = stored("n1", "dispatched", false);
        wipe.kind = "disk.wipe".into();
        let mut reboot = stored("n1", "queued", false);
        reboot.kind = "node.reboot".into();
        let commands = vec![
            ("a".to_string(), Some(stored("n1", "queued", false))),
            ("w".to_string(), Some(wipe)),
            ("r".to_string(), Some(reboot)),
        ];
        let d = decide_dispatched("n1", "ready", Some(&facts(&["diag.*"])), &commands).unwrap();
        assert_eq!(d.outcome, ["a"]);
        let reasons: Vec<(&str, String)> = d
            .events
            .iter()
            .filter_map(|e| match e {
                QueueEvent::Cancelled(c) => Some((c.command_id.as_str(), c.reason.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    "w",
                    format!(
                        "kind-not-allowed: node n1's certificate allows only diag.*, not \
                         disk.wipe; {CANCELLED_AT_DISPATCH}"
                    )
                ),
                (
                    "r",
                    format!(
                        "role-not-allowed: a ramdisk node may not run node.reboot; the kinds its \
                         role runs are boot.kexec, deploy.image, diag.ping, disk.wipe, \
                         inventory.refresh, logs.collect; {CANCELLED_AT_DISPATCH}"
                    )
                ),
            ]
        );
        // No node: nothing is sent, each command cancelled as node-not-found.
        let d = decide_dispatched("n1", "ready", None, &commands[..1]).unwrap();
        assert!(d.outcome.is_empty());
        assert!(
            matches!(&d.events[..], [QueueEvent::Cancelled(c)] if c.reason.starts_with("node-not-found: "))
        );
    }
}
