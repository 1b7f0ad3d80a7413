//! The wire of a renewal: a `bc.wire.v1` RenewRequest decoded into the command layer's
//! [`RenewInput`], and its answer encoded back as the RenewResponse, signed with the JoinService
//! signing key through [`domain::pki::statement::sign`] (purpose `renew-response`, bound to the
//! new CSR's SHA-256); and the RESOURCE_EXHAUSTED a node over its renewal bound gets, with the
//! time to wait. Nothing past this module sees a renewal's `proto` type.

use commands::identity::{IdentityError, RenewAnswer, Renewals};
use domain::identity::RenewInput;
use domain::pki::statement::{sign, RenewResponseStatement};
use domain::pki::PrivateKey;
use prost::Message;
use proto::{RenewRequest, RenewResponse, SignedRenewResponse};
use tonic::Status;

/// The renewal a wire RenewRequest asks for (a negative client time reads as 0, which the clock
/// window then refuses).
pub fn renew_input(request: &RenewRequest) -> RenewInput {
    RenewInput {
        csr_der: request.csr.clone(),
        chain: request.chain.clone(),
        client_time_ms: u64::try_from(request.client_time_ms).unwrap_or(0),
        signature: request.signature.clone(),
        key_attestation: request.key_attestation.as_ref().map(|a| {
            domain::attest::tpm::TpmKeyAttestation {
                ak_public: a.ak_public.clone(),
                key_public: a.key_public.clone(),
                certify_info: a.certify_info.clone(),
                signature: a.signature.clone(),
            }
        }),
    }
}

/// The RenewResponse of an admitted renewal, encoded and signed by `join_signing` (purpose
/// `renew-response`, bound to the new CSR's SHA-256).
pub fn signed_renew_response(
    join_signing: &PrivateKey,
    answer: RenewAnswer,
) -> Result<SignedRenewResponse, IdentityError> {
    let body = RenewResponse {
        certificate_chain: answer.certificate_chain,
        trust_roots: answer.trust_roots,
        not_after_ms: answer.not_after_us / 1000,
        server_time_ms: answer.server_time_us / 1000,
        csr_sha256: answer.csr_sha256.to_vec(),
        trust_domain: answer.trust_domain,
        node_id: answer.node_id,
        site_id: answer.site_id,
        role: answer.role,
        identity_generation: answer.identity_generation,
        allowed_kinds: answer.allowed_kinds,
    }
    .encode_to_vec();
    let signature = sign(
        join_signing,
        &RenewResponseStatement {
            csr_sha256: answer.csr_sha256,
            response: &body,
        },
    )
    .map_err(|e| IdentityError::Failed(format!("signing the RenewResponse: {e}")))?;
    Ok(SignedRenewResponse {
        response: body,
        signature: signature.as_bytes().to_vec(),
    })
}

/// A wire Renew through `renewals`, answered with the signed RenewResponse.
pub async fn renew(
    renewals: &Renewals,
    request: &RenewRequest,
) -> Result<SignedRenewResponse, IdentityError> {
    let answer = renewals.renew(&renew_input(request)).await?;
    signed_renew_response(&renewals.keys().join_signing, answer)
}

/// The metadata key of the retry hint a RESOURCE_EXHAUSTED renewal carries (bcd waits it out
/// exactly).
pub const PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";

/// RESOURCE_EXHAUSTED for a node over its renewal bound, `grpc-retry-pushback-ms` saying when
/// the next renewal is allowed.
pub fn renewals_exhausted(per_hour: usize, retry_after_ms: u64) -> Status {
    with_pushback_ms(
        Status::resource_exhausted(format!(
            "this node renewed {per_hour} times in the last hour; retry in {retry_after_ms} ms"
        )),
        retry_after_ms,
    )
}

/// `status` with a retry hint: `grpc-retry-pushback-ms` (bcd waits it out; on the session wire
/// the End frame carries it, `proto::session_wire`).
pub fn with_pushback_ms(mut status: Status, retry_after_ms: u64) -> Status {
    if let Ok(value) = retry_after_ms.to_string().parse() {
        status.metadata_mut().insert(PUSHBACK_HEADER, value);
    }
    status
}

#[cfg(test)]
mod tests {
    use domain::pki::statement::{verify, JoinResponseStatement};
    use domain::pki::{KeySet, KeySetLifetimes, Signature, TrustDomain};

    use super::*;
    use crate::join::wire::tests::answer;

    #[test]
    fn the_renew_response_is_signed_under_its_own_purpose_and_bound_to_the_csr() {
        let td = TrustDomain::new("compute.example.com").unwrap();
        let now = time::OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap();
        let keys = KeySet::generate(td, now, KeySetLifetimes::default()).unwrap();
        let a = answer();
        let renew = RenewAnswer {
            csr_sha256: [9; 32],
            trust_domain: a.trust_domain,
            node_id: a.node_id,
            site_id: a.site_id,
            role: a.role,
            identity_generation: 4,
            certificate_chain: vec![vec![1]],
            trust_roots: vec![vec![2]],
            not_after_us: 7_000_000,
            server_time_us: 3_000_000,
            allowed_kinds: vec!["diag.*".into()],
        };
        let signed = signed_renew_response(&keys.join_signing, renew).unwrap();
        let sig = Signature::from_bytes(&signed.signature).expect("64-byte signature");
        let statement = |csr_sha256| RenewResponseStatement {
            csr_sha256,
            response: &signed.response,
        };
        verify(keys.join_signing.public_key(), &statement([9; 32]), &sig).expect("verifies");
        assert!(verify(keys.join_signing.public_key(), &statement([8; 32]), &sig).is_err());
        // Not a JoinResponse signature over the same bytes.
        assert!(verify(
            keys.join_signing.public_key(),
            &JoinResponseStatement {
                csr_sha256: [9; 32],
                response: &signed.response,
            },
            &sig,
        )
        .is_err());
        let body = RenewResponse::decode(signed.response.as_slice()).unwrap();
        assert_eq!(body.csr_sha256, vec![9; 32]);
        assert_eq!(
            (
                body.node_id.as_str(),
                body.site_id.as_str(),
                body.role.as_str()
            ),
            ("node_a", "site-1", "node")
        );
        assert_eq!(body.identity_generation, 4);
        assert_eq!((body.not_after_ms, body.server_time_ms), (7_000, 3_000));
        // Signed with the rest: bcd enforces them (issue 40 item 16).
        assert_eq!(body.allowed_kinds, ["diag.*"]);
    }
}
