//! One renewal over an open client ([`renew_once`]) and why it failed ([`RenewError`]).
//!
//! `node.key.next` is written before the request, then the answer is checked and stored through
//! [`crate::identity_store::RenewalStore`] (`node.key.next` again, `identity.json`, the rename),
//! so a crash at any step leaves a matching key and certificate.

use time::OffsetDateTime;

use crate::client::{classify, ClientError, NodeClient, CALL_TIMEOUT};
use crate::files::DataDir;
use crate::identity_store::{load, LoadError, LoadedIdentity, StoreError};
use crate::join::CallError;
use crate::renewal::{check_renewal_answer, prepare_renewal, PrepareError, RenewalAnswerError};
use crate::renewal_schedule::Pushback;

/// Why one renewal failed.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    /// Could not connect.
    #[error("renewal: {0}")]
    Connect(#[from] ClientError),
    /// Making the next key or writing `node.key.next`.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The gateway refused or failed the call.
    #[error("renewal: the gateway answered {0}")]
    Call(String, Option<Pushback>),
    /// The answer is not a renewal of this identity.
    #[error(transparent)]
    Answer(#[from] RenewalAnswerError),
    /// The answer carried no certificate.
    #[error("renewal: the answer carries no certificate")]
    Empty,
    /// Storing the new identity failed.
    #[error("renewal: storing the new identity: {0}")]
    Store(#[from] StoreError),
    /// The renewed identity does not load (it should: it was just stored in order).
    #[error("renewal: {0}")]
    Reload(#[from] LoadError),
}

impl RenewError {
    /// The gateway's retry hint, when the call itself failed with one.
    pub(super) fn pushback(&self) -> Option<Pushback> {
        match self {
            RenewError::Call(_, pushback) => *pushback,
            _ => None,
        }
    }
}

/// Renews once over `client`: writes `node.key.next`, sends Renew, checks the answer, stores it
/// in the spec's order, and loads the renewed identity.
pub async fn renew_once(
    client: &mut NodeClient,
    dir: &DataDir,
    current: &LoadedIdentity,
) -> Result<LoadedIdentity, RenewError> {
    let (begun, parts) = prepare_renewal(dir, current, OffsetDateTime::now_utc())?;
    let mut call = tonic::Request::new(proto::RenewRequest {
        csr: parts.csr_der,
        chain: parts.chain,
        client_time_ms: i64::try_from(parts.client_time_ms).unwrap_or(i64::MAX),
        signature: parts.proof.as_bytes().to_vec(),
    });
    call.set_timeout(CALL_TIMEOUT);
    let answer = match client.renew(call).await {
        Ok(answer) => answer.into_inner(),
        Err(status) => {
            // No certificate came back: the next key is not needed.
            let _ = begun.abandon();
            let (message, pushback) = match classify(&status) {
                CallError::Retryable { message, pushback } => (message, pushback),
                CallError::Refused => (
                    "ACCESS_DENIED (the control plane refused this renewal; its reason is in the \
                     server's security.renew.refused events)"
                        .to_owned(),
                    None,
                ),
                CallError::Fatal(message) => (message, None),
                CallError::NotWired => ("not wired".to_owned(), None),
            };
            return Err(RenewError::Call(message, pushback));
        }
    };
    let Some(leaf_der) = answer.certificate_chain.first() else {
        let _ = begun.abandon();
        return Err(RenewError::Empty);
    };
    let new_leaf = match check_renewal_answer(&current.leaf, leaf_der, begun.next_key()) {
        Ok(leaf) => leaf,
        Err(e) => {
            let _ = begun.abandon();
            return Err(e.into());
        }
    };
    let renewed = current
        .stored
        .renewed(&new_leaf, answer.certificate_chain.clone());
    begun.store_certificate(&renewed)?.promote()?;
    Ok(load(dir)?)
}
