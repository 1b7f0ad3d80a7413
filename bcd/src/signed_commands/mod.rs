//! Signed commands on the machine (spec 003 "On the machine"): verify, check the approver
//! quorum, journal, run, answer. (Not the `commands` crate, the control plane's handlers: this
//! folder is only what `bcd node` does with a signed command it receives.)
//!
//! | module | holds |
//! | --- | --- |
//! | this file | [`CommandRunner`]: one command from the wire to its `CommandResult`; [`spawn_runner`] |
//! | [`quorum`] | a destructive command's approver quorum checked under the held approver set |
//! | [`used_approvals`] | what the quorum check remembers: the used batch leaves, the hour's unbatched runs |
//! | [`journal`] | `journal.db`: each command runs at most once across redeliveries and restarts |
//! | [`hooks`] | a destructive kind's hook program (`[commands.hooks]`) |
//! | [`builtins`] | the non-destructive kinds bcd runs itself (`diag.ping`, `inventory.refresh`, `logs.collect`) |
//! | [`settings`] | `[commands]` in `config.toml` |
//!
//! The approver set the quorum is counted against is [`crate::trust::approver_set`]. The
//! session that carries commands and answers is [`crate::node`] (`session.rs`).
//!
//! Nothing here ever runs a command whose signature, signer or body did not verify, runs a
//! destructive command without its hook and a quorum of the held set, or runs a command the
//! journal recorded as started or finished.
//!
//! [`CommandRunner::handle`] answers one `GatewayMessage.command` with one `CommandResult`:
//!
//! 1. `journal.db` first: a command that already finished is answered with its stored result and
//!    not run again; one found `started` (bcd stopped while it ran) is failed, never re-run;
//! 2. the signature, signer and body ([`domain::command::verify_command`] under the held
//!    command-signing roots, this node's trust domain and id, at its trusted time
//!    ([`crate::clock::TrustedClock`]: the later of its own clock and the highest signed time it
//!    has seen, never a Welcome's unsigned server time)), and the wire `command_id` equal to the
//!    body's: else `SIGNATURE_INVALID`. A command that verified raises the signed-time mark to
//!    its issue time (in `journal.db`, so a restart keeps it);
//! 3. the kind is known, this node's role may run it and its certificate's allowed kinds
//!    (`allowedKinds` in identity.json, from the signed join or renewal answer; issue 40 item
//!    16) admit it: else `KIND_UNSUPPORTED`; its payload decodes as the kind's message (no
//!    unknown fields): else `SIGNATURE_INVALID`;
//! 4. a destructive kind needs a hook (`[commands.hooks]`): else `NO_HOOK`; then the quorum
//!    check ([`quorum`]): its refusal's reason and message;
//! 5. recorded `started`, run (a built-in in bcd, a destructive kind's hook), recorded with its
//!    result.
//!
//! A rejection ran nothing. [`spawn_runner`] runs commands one at a time per process on a thread
//! of its own, off the session's select loop.

pub mod builtins;
pub mod hooks;
pub mod journal;
pub mod quorum;
pub mod settings;
pub mod used_approvals;

pub use settings::{CommandSettings, DEFAULT_HOOK_TIMEOUT_SECONDS};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::clock::{SignedTimeMark, TrustedClock};
use crate::files::identity::{read_stored, StoredIdentity};
use crate::files::DataDir;
use domain::attest::kinds::kinds_allow;
use domain::command::payloads::decode_payload;
use domain::command::{kind_spec, verify_command, CommandError, KindSpec, SignedCommand};
use domain::pki::{NodeRole, TrustDomain};
use domain::quorum::{AdmissionClock, BatchId, SetDigest, VerifiedApprovals};
use journal::{Entry, Journal, JournalError, INTERRUPTED_DETAIL};
use quorum::{admit_destructive, ToAdmit};

/// What a runner needs besides the identity on disk.
#[derive(Debug, Clone)]
pub struct CommandContext {
    /// The data directory.
    pub dir: DataDir,
    /// `[commands]`.
    pub settings: CommandSettings,
    /// `approver_set_sha256`, the first-set pin.
    pub pin: Option<SetDigest>,
}

/// Why a runner cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// No identity.
    #[error("commands: this node has not joined (no identity.json)")]
    NotJoined,
    /// identity.json does not load.
    #[error("commands: {0}")]
    Identity(String),
    /// journal.db cannot be used.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

fn rejected(
    command_id: &str,
    reason: proto::CommandRejectReason,
    detail: String,
) -> proto::CommandResult {
    let now = crate::clock::now_ms();
    proto::CommandResult {
        command_id: command_id.to_owned(),
        outcome: proto::CommandOutcome::Rejected as i32,
        reject_reason: reason as i32,
        detail,
        started_at_ms: now,
        finished_at_ms: now,
        ..Default::default()
    }
}

/// The detail of a command that did not verify: a command issued ahead of this node's time
/// says the clock may be behind (nothing unsigned moves the node's time forward any more).
fn verify_detail(error: &CommandError) -> String {
    match error {
        CommandError::NotYetValid { .. } => format!(
            "{error}; this machine's clock may be behind: bcd doctor compares it with the server's"
        ),
        other => other.to_string(),
    }
}

/// The kind's registry entry, when this node may run it: the kind is known, the node's role
/// runs it, its certificate's allowed kinds (identity.json `allowedKinds`, from the signed join
/// or renewal answer) admit it, and a non-destructive kind is one of bcd's built-ins. Else
/// `KIND_UNSUPPORTED` with the reason.
fn kind_this_node_runs(
    stored: &StoredIdentity,
    kind: &str,
) -> Result<&'static KindSpec, (proto::CommandRejectReason, String)> {
    use proto::CommandRejectReason as R;
    let state = |detail: String| (R::NodeState, detail);
    let spec = kind_spec(kind).ok_or_else(|| {
        (
            R::KindUnsupported,
            format!("kind-unknown: this node does not know kind {kind:?}"),
        )
    })?;
    let role: NodeRole = stored
        .role
        .parse()
        .map_err(|_| state(format!("the stored role {:?} is not valid", stored.role)))?;
    if !spec.allows_role(role) {
        return Err((
            R::KindUnsupported,
            format!("kind-not-allowed: a {role} may not run {}", spec.name),
        ));
    }
    if !kinds_allow(&stored.allowed_kinds, spec.name) {
        return Err((
            R::KindUnsupported,
            format!(
                "kind-not-allowed: this node's certificate allows only {}, not {}",
                stored.allowed_kinds.join(","),
                spec.name
            ),
        ));
    }
    if !spec.destructive && !builtins::is_builtin(spec.name) {
        return Err((
            R::KindUnsupported,
            format!(
                "kind-not-implemented: this bcd has no built-in for {}",
                spec.name
            ),
        ));
    }
    Ok(spec)
}

/// Runs this node's commands (see the module docs).
#[derive(Debug)]
pub struct CommandRunner {
    ctx: CommandContext,
    node_id: String,
    journal: Journal,
    verified: VerifiedApprovals,
    clock: TrustedClock,
    mark: SignedTimeMark,
}

impl CommandRunner {
    /// Opens the journal for the stored identity's node, without sweeping it.
    pub fn open(ctx: CommandContext) -> Result<CommandRunner, RunnerError> {
        let stored = read_stored(&ctx.dir)
            .map_err(|e| RunnerError::Identity(e.to_string()))?
            .ok_or(RunnerError::NotJoined)?;
        let now_unix = crate::clock::now().unix_timestamp();
        let (journal, restarted) =
            Journal::open_or_restart(&ctx.dir.journal(), &stored.node_id, now_unix)?;
        if let Some(r) = restarted {
            crate::node::log::log(format_args!(
                "journal.db was unreadable ({}); moved to {} and started over",
                r.why,
                r.moved_to.display()
            ));
        }
        let mut runner = CommandRunner {
            ctx,
            node_id: stored.node_id.clone(),
            journal,
            verified: VerifiedApprovals::new(),
            clock: TrustedClock::new(),
            mark: SignedTimeMark::default(),
        };
        match runner.journal.signed_time_ms() {
            Ok(Some(ms)) => runner.clock.observe(ms),
            Ok(None) => {}
            Err(e) => crate::node::log::log(format_args!("{e}")),
        }
        runner.observe_stored(&stored);
        Ok(runner)
    }

    /// The runner sharing its signed-time mark with `mark` (the session mirrors it).
    pub fn with_mark(mut self, mark: SignedTimeMark) -> CommandRunner {
        if let Some(ms) = self.clock.highest_signed_ms() {
            mark.raise(ms);
        }
        self.mark = mark;
        self
    }

    /// Takes `identity.json`'s `serverTime` (a signed time: a join or renewal answer's, or a
    /// mirrored mark) into the trusted clock.
    fn observe_stored(&mut self, stored: &StoredIdentity) {
        if let Some(t) = stored.server_time() {
            self.clock.observe(crate::clock::unix_ms(t));
        }
    }

    /// Raises the signed-time mark to a verified command's issue time: the trusted clock, the
    /// journal (durable) and the shared mark.
    fn raise_signed_time(&mut self, ms: i64) {
        self.clock.observe(ms);
        self.mark.raise(ms);
        if let Err(e) = self.journal.raise_signed_time(ms) {
            crate::node::log::log(format_args!("{e}"));
        }
    }

    /// The time commands are judged at when the machine's clock reads `local_now_ms`.
    pub fn trusted_now_ms(&self, local_now_ms: i64) -> i64 {
        self.clock.now_ms(local_now_ms)
    }

    /// Opens the journal and fails every command a previous run left `started` (start-up).
    pub fn open_at_start(
        ctx: CommandContext,
    ) -> Result<(CommandRunner, Vec<proto::CommandResult>), RunnerError> {
        let mut runner = CommandRunner::open(ctx)?;
        let swept = runner.journal.sweep_interrupted(crate::clock::now_ms())?;
        Ok((runner, swept))
    }

    /// The journal (for inspection).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Answers one command (see the module docs). `local_now_ms`: the machine's clock
    /// ([`crate::clock::now_ms`]); the command is judged at the trusted time it gives.
    pub fn handle(&mut self, command: &proto::Command, local_now_ms: i64) -> proto::CommandResult {
        let id = command.command_id.as_str();
        match self.journal.entry(id) {
            Ok(Some(Entry::Finished(result))) => return result,
            Ok(Some(Entry::Started)) => {
                let now = crate::clock::now_ms();
                let result = proto::CommandResult {
                    command_id: id.to_owned(),
                    outcome: proto::CommandOutcome::Failed as i32,
                    detail: INTERRUPTED_DETAIL.to_owned(),
                    started_at_ms: now,
                    finished_at_ms: now,
                    ..Default::default()
                };
                let _ = self.journal.finish(&result);
                return result;
            }
            Ok(None) => {}
            Err(e) => return rejected(id, proto::CommandRejectReason::NodeState, e.to_string()),
        }
        match self.check_and_run(command, local_now_ms) {
            Ok(result) => result,
            Err((reason, detail)) => rejected(id, reason, detail),
        }
    }

    fn check_and_run(
        &mut self,
        command: &proto::Command,
        local_now_ms: i64,
    ) -> Result<proto::CommandResult, (proto::CommandRejectReason, String)> {
        use proto::CommandRejectReason as R;
        let state = |detail: String| (R::NodeState, detail);
        let stored = read_stored(&self.ctx.dir)
            .map_err(|e| state(e.to_string()))?
            .ok_or_else(|| state("this node has not joined".into()))?;
        if stored.node_id != self.node_id {
            return Err(state(format!(
                "the identity changed to node {} while bcd ran; restart bcd",
                stored.node_id
            )));
        }
        let trust_domain = TrustDomain::new(&stored.trust_domain)
            .map_err(|_| state("the stored trust domain is not valid".into()))?;
        self.observe_stored(&stored);
        let now_ms = self.clock.now_ms(local_now_ms);
        let signed = SignedCommand {
            body: command.body.clone(),
            signature: command.signature.clone(),
            worker_chain: command.signer_chain.clone(),
        };
        let verified = verify_command(
            &signed,
            &stored.trust_roots,
            &trust_domain,
            &self.node_id,
            now_ms,
        )
        .map_err(|e| (R::SignatureInvalid, verify_detail(&e)))?;
        let body = verified.body;
        self.raise_signed_time(body.issued_at_ms);
        if body.command_id != command.command_id {
            return Err((
                R::SignatureInvalid,
                format!(
                    "command-id-mismatch: the signed body is command {:?}, the message says {:?}",
                    body.command_id, command.command_id
                ),
            ));
        }
        let spec = kind_this_node_runs(&stored, &body.kind)?;
        let payload_json = decode_payload(spec.payload_type, &body.payload)
            .map_err(|e| (R::SignatureInvalid, e.to_string()))?;
        let batch = body
            .batch()
            .map_err(|e| (R::SignatureInvalid, e.to_string()))?;
        let hook = if spec.destructive {
            let hook = self.ctx.settings.hooks.get(spec.name).cloned().ok_or_else(|| {
                (
                    R::NoHook,
                    format!(
                        "no-hook: {} is destructive and this node has no hook for it ([commands.hooks] in config.toml)",
                        spec.name
                    ),
                )
            })?;
            let clock = AdmissionClock {
                trusted_now_us: now_ms.saturating_mul(1000),
                local_now_us: local_now_ms.saturating_mul(1000),
            };
            admit_destructive(
                &self.ctx.dir,
                &stored,
                self.ctx.pin.as_ref(),
                &mut self.verified,
                &ToAdmit {
                    command_id: &body.command_id,
                    node_id: &self.node_id,
                    kind: spec.name,
                    payload: &body.payload,
                    batch_id: batch.as_ref(),
                    approval: command.batch_approval.as_ref(),
                    proof: command.batch_proof.as_ref(),
                },
                clock,
            )
            .map_err(|r| (r.reason, r.detail))?;
            Some(hook)
        } else {
            None
        };
        self.execute(
            &body.command_id,
            spec.name,
            hook,
            &body.payload,
            batch,
            &payload_json,
        )
    }

    /// Runs a command that passed every check (its hook, or the built-in of its kind),
    /// journalling its start and its result.
    fn execute(
        &mut self,
        command_id: &str,
        kind: &'static str,
        hook: Option<PathBuf>,
        payload: &[u8],
        batch: Option<BatchId>,
        payload_json: &serde_json::Value,
    ) -> Result<proto::CommandResult, (proto::CommandRejectReason, String)> {
        let state = |detail: String| (proto::CommandRejectReason::NodeState, detail);
        let started_at_ms = crate::clock::now_ms();
        self.journal
            .start(command_id, kind, started_at_ms)
            .map_err(|e| state(e.to_string()))?;
        let mut result = proto::CommandResult {
            command_id: command_id.to_owned(),
            started_at_ms,
            ..Default::default()
        };
        let (success, detail, tail, exit) = match hook {
            Some(program) => {
                let batch_hex = batch.map(|b| b.to_hex()).unwrap_or_default();
                let json = payload_json.to_string();
                let run = hooks::run_hook(
                    &program,
                    &hooks::HookInput {
                        command_id,
                        kind,
                        node_id: &self.node_id,
                        batch_id_hex: &batch_hex,
                        payload_json: &json,
                        payload,
                    },
                    self.ctx.settings.hook_timeout,
                );
                (run.success, run.detail, run.output_tail, run.exit_code)
            }
            None => {
                let run =
                    builtins::run_builtin(kind, payload, self.ctx.settings.log_file.as_deref());
                (run.success, run.detail, run.output_tail, None)
            }
        };
        result.outcome = if success {
            proto::CommandOutcome::Succeeded
        } else {
            proto::CommandOutcome::Failed
        } as i32;
        result.detail = detail;
        result.output_tail = tail;
        result.has_exit_code = exit.is_some();
        result.exit_code = exit.unwrap_or(0);
        result.finished_at_ms = crate::clock::now_ms();
        if let Err(e) = self.journal.finish(&result) {
            crate::node::log::log(format_args!(
                "{e}; the result of {} is sent but not journalled",
                result.command_id
            ));
        }
        Ok(result)
    }
}

/// One command for the runner thread.
#[derive(Debug)]
pub struct Job {
    /// The command.
    pub command: proto::Command,
}

/// One command at a time per process, across sessions.
static RUNNING: Mutex<()> = Mutex::new(());
/// The journal is swept once per process (a later session's runner must not fail a command an
/// earlier session's runner is still running).
static SWEPT: AtomicBool = AtomicBool::new(false);

/// Starts the runner thread for a session: it answers each [`Job`] with a `CommandResult` on
/// `results` (after first sending the results of commands a previous run was interrupted in),
/// raising `mark` with the signed times it sees. It ends when the job sender is dropped (after
/// the command it is running).
pub fn spawn_runner(
    ctx: CommandContext,
    results: tokio::sync::mpsc::Sender<proto::NodeMessage>,
    mark: SignedTimeMark,
) -> tokio::sync::mpsc::UnboundedSender<Job> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
    std::thread::spawn(move || {
        let send = |result: proto::CommandResult| {
            let message = proto::NodeMessage {
                body: Some(proto::node_message::Body::Result(result)),
            };
            results.blocking_send(message).is_ok()
        };
        let opened = {
            let _guard = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
            if SWEPT.swap(true, Ordering::SeqCst) {
                CommandRunner::open(ctx).map(|r| (r, Vec::new()))
            } else {
                CommandRunner::open_at_start(ctx)
            }
        };
        let mut runner = match opened {
            Ok((runner, swept)) => {
                let runner = runner.with_mark(mark);
                for result in swept {
                    crate::node::log::log(format_args!(
                        "command {} was running when bcd stopped: reported failed",
                        result.command_id
                    ));
                    send(result);
                }
                Some(runner)
            }
            Err(e) => {
                crate::node::log::log(format_args!("{e}"));
                None
            }
        };
        while let Some(job) = rx.blocking_recv() {
            let result = match runner.as_mut() {
                Some(runner) => {
                    let _guard = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
                    runner.handle(&job.command, crate::clock::now_ms())
                }
                None => rejected(
                    &job.command.command_id,
                    proto::CommandRejectReason::NodeState,
                    "journal-unusable: bcd could not open journal.db (see its log)".into(),
                ),
            };
            crate::node::log::log(format_args!(
                "command {}: {}{}",
                result.command_id,
                outcome_name(result.outcome),
                if result.detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", result.detail)
                }
            ));
            if !send(result) {
                break;
            }
        }
    });
    tx
}

fn outcome_name(outcome: i32) -> &'static str {
    match proto::CommandOutcome::try_from(outcome) {
        Ok(proto::CommandOutcome::Succeeded) => "succeeded",
        Ok(proto::CommandOutcome::Failed) => "failed",
        Ok(proto::CommandOutcome::Rejected) => "rejected",
        _ => "unknown",
    }
}
