//! `bcctl batch keygen | create | show | list | scope | approve | submit-approval |
//! sign-approvers | cancel`: approver keys, destructive batches and approver-set signatures.
//!
//! Approvals are verified in the DEPLOYMENT's trust domain (its PKI bundle's), never one a flag
//! or the approver names; `approve` runs directly against the store or, with `--server` /
//! `--profile`, against the admin API (`source`), reviewing and signing on the approver's
//! machine either way.
//!
//! `approve` never trusts the control plane's word for what a batch holds: it pages the scope,
//! recomputes the root from the listed leaves and refuses a mismatch (SCOPE_MISMATCH), approves
//! only the root reviewed (`--root`, SCOPE_CHANGED) and exactly the subjects expected (`--expect`,
//! SCOPE_UNEXPECTED), refuses leaves that admit any payload unless `--allow-unbound`
//! (UNBOUND_SCOPE), and refuses an approver key file readable by others (INVALID_STATE).
//!
//! Key files are PEM: `PRIVATE KEY` (PKCS#8, mode 0600) and `PUBLIC KEY` (SPKI) in `<key>.pub`.
//!
//! Every error starts with its code (`INVALID_INPUT:`, `INVALID_STATE:`, `CONFLICT:`, ...). Exit
//! codes: 0 done (an `approve` without `--yes` only reviews, signs nothing and exits 0),
//! `EXIT_USAGE` (2) for bad input (INVALID_INPUT, as clap's own usage errors),
//! `EXIT_REVIEW_REFUSED` (3) when `approve`'s review refuses to sign (SCOPE_MISMATCH,
//! SCOPE_CHANGED, SCOPE_UNEXPECTED, UNBOUND_SCOPE, INVALID_RESPONSE, PAYLOAD_REFUSED,
//! OPAQUE_PAYLOAD: the bound payloads, decoded by `operations`), 1 for everything else
//! (INVALID_STATE, NOT_FOUND, CONFLICT, PERMISSION_DENIED, files, the store).
//!
//! One job per file: `args` (the command lines), `error` (errors and exit codes), `keys` (key
//! files, keygen, signing), `show` (create and show), `input` (the batch id, the store and the
//! deployment's trust domain), `review` (what approve checks and shows before signing),
//! `approve`, `approvals` (list, scope, submit-approval), `source` (the store or the API),
//! `wire` (the JSON approvers read, both ways), `sign_approvers`, `display` (server text on a
//! terminal).

mod approvals;
mod approve;
mod args;
mod display;
mod error;
mod input;
mod keys;
mod operations;
mod passphrase;
#[cfg(test)]
mod remote_tests;
mod review;
mod show;
mod sign_approvers;
mod source;
mod wire;

pub use args::BatchCommand;
pub(crate) use error::quorum_message;
pub use error::BatchCmdError;

/// Runs one batch subcommand.
pub async fn run(command: BatchCommand) -> Result<(), BatchCmdError> {
    match command {
        BatchCommand::Keygen(args) => keys::keygen(args),
        BatchCommand::Create(args) => show::create(args).await,
        BatchCommand::Show(args) => show::show(args).await,
        BatchCommand::List(args) => approvals::list(args).await,
        BatchCommand::Scope(args) => approvals::scope(args).await,
        BatchCommand::Approve(args) => approve::approve(args).await,
        BatchCommand::SubmitApproval(args) => approvals::submit_approval(args).await,
        BatchCommand::SignApprovers(args) => sign_approvers::sign_approvers(args),
        BatchCommand::Cancel(args) => show::cancel(args).await,
    }
}
