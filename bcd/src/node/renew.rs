//! One renewal over an open client ([`renew_once`]) and why it failed ([`RenewError`]).
//!
//! `node.key.next` is written before the request, then the signed answer is verified
//! ([`crate::renewal::verify`]: the pinned JoinService key, the CSR binding, the identity, the
//! key, the chain to this node's CA, the lifetime) and only then stored through
//! [`crate::files::identity::RenewalStore`] (`node.key.next` again, `identity.json`, the rename),
//! so a crash at any step leaves a matching key and certificate, and a forged answer changes
//! nothing but the removal of `node.key.next`. A call that got no answer ([`may_have_renewed`]:
//! the server may have committed the renewal and lost only its answer) keeps `node.key.next` for
//! the retry, across a restart too; a refusal removes it. The answer's signed server time raises
//! the `serverTime` high-water mark.

use domain::pki::PublicKey;
use prost::Message as _;

use crate::client::{classify, ClientError, NodeClient, CALL_TIMEOUT};
use crate::files::identity::{load_in, LoadError, LoadedIdentity, StoreError};
use crate::files::DataDir;
use crate::join::request::CallError;
use crate::renewal::request::{prepare_renewal, PendingRenewal, PrepareError};
use crate::renewal::schedule::Pushback;
use crate::renewal::verify::{
    verify_renewal, RenewalExpectation, RenewalFields, RenewalRefusal, SignedRenewal,
};

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
    /// The answer did not verify: nothing of it was stored.
    #[error(transparent)]
    Answer(#[from] RenewalRefusal),
    /// No JoinService signing key to verify an answer with: nothing is sent.
    #[error(
        "renewal: join_signing_key_pin is not set (or join-signing.jwk is missing), so a renewal \
         answer cannot be verified and none is asked for; on the control plane `bcctl node \
         config --out DIR` writes both (config.toml and join-signing.jwk): copy them beside \
         bcd's config.toml"
    )]
    NoSigningKey,
    /// Storing the new identity failed.
    #[error("renewal: storing the new identity: {0}")]
    Store(#[from] StoreError),
    /// The renewed identity does not load (it should: it was just stored in order).
    #[error("renewal: {0}")]
    Reload(#[from] LoadError),
}

impl RenewError {
    /// The gateway's retry hint, when the call itself failed with one.
    pub fn pushback(&self) -> Option<Pushback> {
        match self {
            RenewError::Call(_, pushback) => *pushback,
            _ => None,
        }
    }
}

/// Whether a Renew call that failed with `status` may have been committed by the control plane
/// with only its answer lost: no answer came (a cut connection, a timeout, a gateway that lost
/// the api mid-call) or the server failed after deciding. Then the next key is kept for the
/// retry, which the server answers with the committed certificate; any other status is the
/// server's answer that it did not renew (refused, rate-limited, malformed).
pub fn may_have_renewed(status: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(
        status.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Unknown
            | Code::Cancelled
            | Code::Aborted
            | Code::Internal
            | Code::DataLoss
    )
}

/// Decodes a signed `bc.wire.v1.RenewResponse` body into the fields the agent checks.
pub fn decode_renew_body(body: &[u8]) -> Result<RenewalFields, String> {
    let r = proto::RenewResponse::decode(body).map_err(|e| e.to_string())?;
    Ok(RenewalFields {
        csr_sha256: r.csr_sha256,
        trust_domain: r.trust_domain,
        node_id: r.node_id,
        site_id: r.site_id,
        role: r.role,
        chain: r.certificate_chain,
        server_time_ms: r.server_time_ms,
        allowed_kinds: r.allowed_kinds,
    })
}

/// How long after a renewal `bcd helper` is asked to unload the replaced key (spec 002: five
/// minutes, once no session or proof can still be signing with it).
pub const RELEASE_DELAY: std::time::Duration = std::time::Duration::from_secs(300);

/// Renews once over `client`: writes `node.key.next`, sends Renew, verifies the signed answer
/// under `join_signing_key`, stores it in the spec's order, and loads the renewed identity.
/// A fresh next key each call; [`renew_retrying`] keeps it for the retry.
pub async fn renew_once(
    client: &mut NodeClient,
    dir: &DataDir,
    current: &LoadedIdentity,
    join_signing_key: Option<&PublicKey>,
) -> Result<LoadedIdentity, RenewError> {
    let mut pending = PendingRenewal::default();
    renew_retrying(client, dir, current, join_signing_key, &mut pending).await
}

/// [`renew_once`] with the next key of a failed attempt from the same leaf reused (and this
/// attempt's key kept in `pending` when it fails), so a retry after a lost answer certifies
/// the key the server may already have certified.
pub async fn renew_retrying(
    client: &mut NodeClient,
    dir: &DataDir,
    current: &LoadedIdentity,
    join_signing_key: Option<&PublicKey>,
    pending: &mut PendingRenewal,
) -> Result<LoadedIdentity, RenewError> {
    let join_signing_key = join_signing_key.ok_or(RenewError::NoSigningKey)?;
    let (begun, parts) = prepare_renewal(dir, current, crate::clock::now(), pending)?;
    if let Some(warning) = &parts.warning {
        super::log::log(format_args!("renewal: {warning}"));
    }
    // Kept until this attempt stores a certificate for it.
    pending.keep(
        parts.chain.first().map(Vec::as_slice).unwrap_or(&[]),
        begun.next_key(),
    );
    let csr_sha256 = parts.csr_sha256;
    let mut call = tonic::Request::new(proto::RenewRequest {
        csr: parts.csr_der,
        chain: parts.chain,
        client_time_ms: i64::try_from(parts.client_time_ms).unwrap_or(i64::MAX),
        signature: parts.proof.as_bytes().to_vec(),
        key_attestation: parts.key_attestation.map(|a| proto::TpmKeyAttestation {
            ak_public: a.ak_public,
            key_public: a.key_public,
            certify_info: a.certify_info,
            signature: a.signature,
        }),
    });
    call.set_timeout(CALL_TIMEOUT);
    let answer = match client.renew(call).await {
        Ok(answer) => answer.into_inner(),
        Err(status) => {
            // Without an answer the key stays on disk (and in `pending`): the retry asks for it
            // again. The server answered that it did not renew: the key is not needed.
            if !may_have_renewed(&status) {
                pending.forget();
                let _ = begun.abandon();
            }
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
    let signed = SignedRenewal {
        body: answer.response,
        signature: answer.signature,
    };
    let expect = RenewalExpectation {
        join_signing_key,
        csr_sha256,
        current: &current.leaf,
        current_chain: &current.stored.chain,
        next_key: begun.next_key().public_key(),
    };
    let verified = match verify_renewal(&signed, decode_renew_body, &expect) {
        Ok(verified) => verified,
        Err(e) => {
            let _ = begun.abandon();
            return Err(e.into());
        }
    };
    let mut renewed = current.stored.renewed(&verified.leaf, verified.chain);
    // The new certificate's allowed kinds, as the signed answer states them.
    renewed.allowed_kinds = verified.allowed_kinds;
    if let Some(t) = verified.server_time {
        renewed.observe_server_time(t);
    }
    begun.store_certificate(&renewed)?.promote()?;
    *pending = PendingRenewal::default();
    // The replaced key: the helper unloads it once nothing can still be signing with it.
    if let Some(old) = current.key.as_tpm() {
        old.release_after(RELEASE_DELAY);
    }
    Ok(load_in(dir, &current.tpm)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_answer_keeps_the_key_and_a_refusal_drops_it() {
        use tonic::Code;
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Unknown,
            Code::Cancelled,
            Code::Aborted,
            Code::Internal,
            Code::DataLoss,
        ] {
            assert!(may_have_renewed(&tonic::Status::new(code, "x")), "{code:?}");
        }
        for code in [
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::ResourceExhausted,
            Code::InvalidArgument,
            Code::FailedPrecondition,
            Code::NotFound,
            Code::Unimplemented,
        ] {
            assert!(
                !may_have_renewed(&tonic::Status::new(code, "x")),
                "{code:?}"
            );
        }
    }
}
