//! Where `batch approve` reads a batch and records its approval: the store directly
//! ([`DirectSource`]), or the admin API ([`RemoteSource`]: `batch show`, `batch scope` and
//! `batch submit-approval` as argv calls, so the approver's machine needs no database
//! credentials). Either way the review, the recomputed root and the signature are made here by
//! `approve`; a source only carries what the control plane says and what it answers.
//!
//! The API itself is reached through [`ApiCall`] (one verb call, its output and exit code): the
//! admin client implements it; a test can implement it too.

use commands::quorum::{approve_batch, batch_view, BatchView, ScopeEntry};
use commands::DatabaseClock;
use domain::quorum::{ApprovalSignature, ApproveOutcome, BatchId, TrustDomain};
use events::store::EventStore;
use serde_json::Value;

use super::error::BatchCmdError;
use super::review::{check_order, page_scope};
use super::wire::{encode_sig, entry_from_json, outcome_from_json, view_from_json};

/// What a batch source answers and records.
pub(crate) trait BatchSource {
    /// The batch, and the trust domain the control plane checks approvals in.
    async fn view(&self, id: &BatchId) -> Result<(BatchView, TrustDomain), BatchCmdError>;
    /// Every leaf of the scope (the view claims `size`), in index order.
    async fn scope(&self, id: &BatchId, size: u32) -> Result<Vec<ScopeEntry>, BatchCmdError>;
    /// Records one signature.
    async fn submit(
        &self,
        id: &BatchId,
        signature: &ApprovalSignature,
    ) -> Result<ApproveOutcome, BatchCmdError>;
}

/// The store, with the deployment's trust domain read from its PKI bundle.
pub(crate) struct DirectSource {
    pub store: EventStore,
    pub trust_domain: TrustDomain,
}

impl BatchSource for DirectSource {
    async fn view(&self, id: &BatchId) -> Result<(BatchView, TrustDomain), BatchCmdError> {
        let view = batch_view(&self.store, id)
            .await?
            .ok_or(BatchCmdError::NotFound(*id))?;
        Ok((view, self.trust_domain.clone()))
    }

    async fn scope(&self, id: &BatchId, size: u32) -> Result<Vec<ScopeEntry>, BatchCmdError> {
        page_scope(&self.store, id, size).await
    }

    async fn submit(
        &self,
        id: &BatchId,
        signature: &ApprovalSignature,
    ) -> Result<ApproveOutcome, BatchCmdError> {
        Ok(approve_batch(
            &self.store,
            &DatabaseClock::system(),
            &self.trust_domain,
            id,
            signature,
        )
        .await?)
    }
}

/// One verb's answer over the admin API.
#[derive(Debug, Clone, Default)]
pub(crate) struct ApiReply {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: u32,
}

/// One verb call over the admin API (argv without the program name, no input files).
pub(crate) trait ApiCall {
    async fn run(&self, argv: Vec<String>) -> Result<ApiReply, BatchCmdError>;
}

/// The admin client ([`crate::admin::client`]) as an [`ApiCall`]: one connection for every call.
pub(crate) struct AdminCall(pub tokio::sync::Mutex<crate::admin::client::AdminClient>);

impl ApiCall for AdminCall {
    async fn run(&self, argv: Vec<String>) -> Result<ApiReply, BatchCmdError> {
        let reply = self.0.lock().await.run(&argv, Vec::new()).await?;
        Ok(ApiReply {
            stdout: reply.stdout,
            stderr: reply.stderr,
            exit_code: reply.exit_code,
        })
    }
}

/// The admin API: the server's own verbs, asked with `--json`.
pub(crate) struct RemoteSource<C: ApiCall> {
    pub call: C,
}

impl<C: ApiCall> RemoteSource<C> {
    /// Runs `argv` (with `--json`) and answers its JSON; a failed verb is its message and exit
    /// code, as the server printed them.
    async fn json(&self, mut argv: Vec<String>) -> Result<Value, BatchCmdError> {
        argv.push("--json".into());
        let what = argv[..2.min(argv.len())].join(" ");
        let reply = self.call.run(argv).await?;
        if reply.exit_code != 0 {
            return Err(remote_failure(&reply));
        }
        serde_json::from_slice(&reply.stdout).map_err(|e| {
            BatchCmdError::InvalidResponse(format!("the server's `{what}` is not JSON: {e}"))
        })
    }
}

/// A failed remote verb: the message of its JSON error (or its stderr), with its exit code.
pub(crate) fn remote_failure(reply: &ApiReply) -> BatchCmdError {
    let text = String::from_utf8_lossy(&reply.stderr);
    let parsed: Option<Value> = serde_json::from_str(text.trim()).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            text.trim()
                .strip_prefix("bcctl: ")
                .unwrap_or(text.trim())
                .to_string()
        });
    BatchCmdError::Remote {
        message,
        code: u8::try_from(reply.exit_code).unwrap_or(1),
    }
}

impl<C: ApiCall> BatchSource for RemoteSource<C> {
    async fn view(&self, id: &BatchId) -> Result<(BatchView, TrustDomain), BatchCmdError> {
        let v = self
            .json(vec![
                "batch".into(),
                "show".into(),
                "--batch".into(),
                id.to_hex(),
            ])
            .await?;
        let (view, trust_domain) = view_from_json(&v)?;
        if view.state.batch_id != *id {
            return Err(BatchCmdError::InvalidResponse(format!(
                "asked for batch {id}, the server answered batch {}",
                view.state.batch_id
            )));
        }
        let trust_domain = trust_domain
            .ok_or_else(|| {
                BatchCmdError::InvalidResponse(
                    "the server names no trust domain for its approvals".into(),
                )
            })
            .and_then(|td| {
                TrustDomain::new(td).map_err(|e| {
                    BatchCmdError::InvalidResponse(format!("the server's trust domain: {e}"))
                })
            })?;
        Ok((view, trust_domain))
    }

    async fn scope(&self, id: &BatchId, size: u32) -> Result<Vec<ScopeEntry>, BatchCmdError> {
        let v = self
            .json(vec![
                "batch".into(),
                "scope".into(),
                "--batch".into(),
                id.to_hex(),
            ])
            .await?;
        let listed = v["entries"].as_array().ok_or_else(|| {
            BatchCmdError::InvalidResponse("the server's scope lists no entries".into())
        })?;
        let entries = listed
            .iter()
            .map(entry_from_json)
            .collect::<Result<Vec<_>, _>>()?;
        check_order(&entries, size)?;
        Ok(entries)
    }

    async fn submit(
        &self,
        id: &BatchId,
        signature: &ApprovalSignature,
    ) -> Result<ApproveOutcome, BatchCmdError> {
        let v = self
            .json(vec![
                "batch".into(),
                "submit-approval".into(),
                "--batch".into(),
                id.to_hex(),
                "--kid".into(),
                signature.kid.to_hex(),
                "--sig".into(),
                encode_sig(&signature.sig),
            ])
            .await?;
        outcome_from_json(&v)
    }
}
