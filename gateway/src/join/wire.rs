//! The wire of a join: a `bc.wire.v1` JoinRequest decoded into the command layer's join, and
//! its outcome encoded back as the JoinResponse, signed with the JoinService signing key through
//! [`domain::pki::statement::sign`] (purpose `join-response`, bound to the request's CSR
//! SHA-256). Nothing past this module sees a join's `proto` type.
//!
//! An admission's JoinResponse carries the published trust bundle exactly as a Welcome does
//! (`trust_version`, `signed_trust_bundle`, `trust_bundle_signature`; spec 002 "first in
//! JoinResponse and then in Welcome"), no longer the PKI root CA in `trust_roots`; a deferral
//! carries none.

use commands::identity::{IdentityError, JoinAnswer, JoinOutcome, JoinRequest as Join, Joins};
use domain::identity::{HardwareClaims as Claims, JoinInput, SelfReport};
use domain::pki::statement::{sign, JoinResponseStatement};
use domain::pki::PrivateKey;
use prost::Message;
use proto::join_response::Deferral;
use proto::{JoinChallenge, JoinPending, JoinRequest, JoinResponse, SignedJoinResponse};

use crate::trust::bundle::WelcomeTrust;

/// The join a wire JoinRequest asks for (absent or empty claims are no claims).
pub fn join_request(request: &JoinRequest) -> Join {
    let claims = request.claims.clone().unwrap_or_default();
    Join {
        attestor: request.attestor.clone(),
        input: JoinInput {
            csr_der: request.csr.clone(),
            sealed_token: request.sealed_token.clone(),
            role: request.role.clone(),
            claims: Claims {
                product_uuid: (!claims.product_uuid.is_empty()).then_some(claims.product_uuid),
                macs: claims.macs,
                hardware_key: (!claims.hardware_key.is_empty()).then_some(claims.hardware_key),
            },
            attestation: request.attestation.clone(),
            report: SelfReport {
                hostname: claims.hostname,
                product_serial: claims.product_serial,
                board_serial: claims.board_serial,
                chassis_serial: claims.chassis_serial,
                gpu_uuids: claims.gpu_uuids,
                boot_id: claims.boot_id,
                agent_version: request.agent_version.clone(),
            },
        },
    }
}

/// The JoinResponse of an admitted join, carrying `trust` (the Welcome's bundle), encoded and
/// signed by `join_signing`.
pub fn signed_join_response(
    join_signing: &PrivateKey,
    answer: &JoinAnswer,
    trust: &WelcomeTrust,
) -> Result<SignedJoinResponse, IdentityError> {
    let body = JoinResponse {
        csr_sha256: answer.csr_sha256.to_vec(),
        trust_domain: answer.trust_domain.clone(),
        node_id: answer.node_id.clone(),
        site_id: answer.site_id.clone(),
        role: answer.role.clone(),
        certificate_chain: answer.certificate_chain.clone(),
        trust_roots: Vec::new(),
        not_after_ms: answer.not_after_us / 1000,
        server_time_ms: answer.server_time_us / 1000,
        identity_generation: answer.identity_generation,
        deferral: None,
        trust_version: trust.version,
        signed_trust_bundle: trust.bundle.clone(),
        trust_bundle_signature: trust.signature.clone(),
        allowed_kinds: answer.allowed_kinds.clone(),
    };
    sign_join_body(join_signing, answer.csr_sha256, body)
}

/// The JoinResponse of any join outcome, encoded and signed by `join_signing`: an admission as
/// [`signed_join_response`] (carrying `trust`), a deferral with `deferral` set and no node id,
/// chain, roots or trust bundle.
pub fn signed_join_outcome(
    join_signing: &PrivateKey,
    outcome: &JoinOutcome,
    trust: &WelcomeTrust,
) -> Result<SignedJoinResponse, IdentityError> {
    let (csr_sha256, trust_domain, server_time_us, deferral) = match outcome {
        JoinOutcome::Joined(answer) => return signed_join_response(join_signing, answer, trust),
        JoinOutcome::Pending {
            request_id,
            retry_after_seconds,
            csr_sha256,
            trust_domain,
            server_time_us,
        } => (
            *csr_sha256,
            trust_domain,
            *server_time_us,
            Deferral::Pending(JoinPending {
                request_id: request_id.clone(),
                retry_after_seconds: (*retry_after_seconds).max(1),
            }),
        ),
        JoinOutcome::Challenge {
            attestor,
            payload,
            not_after_us,
            csr_sha256,
            trust_domain,
            server_time_us,
        } => (
            *csr_sha256,
            trust_domain,
            *server_time_us,
            Deferral::Challenge(JoinChallenge {
                attestor: attestor.clone(),
                payload: payload.clone(),
                not_after_ms: not_after_us / 1000,
            }),
        ),
    };
    let body = JoinResponse {
        csr_sha256: csr_sha256.to_vec(),
        trust_domain: trust_domain.clone(),
        server_time_ms: server_time_us / 1000,
        deferral: Some(deferral),
        ..JoinResponse::default()
    };
    sign_join_body(join_signing, csr_sha256, body)
}

/// Encodes `body` and signs it (purpose `join-response`, bound to `csr_sha256`).
fn sign_join_body(
    join_signing: &PrivateKey,
    csr_sha256: [u8; 32],
    body: JoinResponse,
) -> Result<SignedJoinResponse, IdentityError> {
    let body = body.encode_to_vec();
    let signature = sign(
        join_signing,
        &JoinResponseStatement {
            csr_sha256,
            response: &body,
        },
    )
    .map_err(|e| IdentityError::Failed(format!("signing the JoinResponse: {e}")))?;
    Ok(SignedJoinResponse {
        response: body,
        signature: signature.as_bytes().to_vec(),
    })
}

/// A wire Join through `joins`, answered with the signed JoinResponse (an admission or a
/// deferral) carrying no trust bundle: for tests and benchmarks that only need the identity.
/// The server answers through [`join_carrying`].
pub async fn join(
    joins: &Joins,
    request: &JoinRequest,
) -> Result<SignedJoinResponse, IdentityError> {
    join_carrying(joins, request, &WelcomeTrust::default()).await
}

/// A wire Join through `joins`, answered with the signed JoinResponse; an admission carries
/// `trust` (the bundle a Welcome would carry now).
pub async fn join_carrying(
    joins: &Joins,
    request: &JoinRequest,
    trust: &WelcomeTrust,
) -> Result<SignedJoinResponse, IdentityError> {
    let outcome = joins.attest(&join_request(request)).await?;
    signed_join_outcome(&joins.keys().join_signing, &outcome, trust)
}

#[cfg(test)]
pub(crate) mod tests {
    use domain::pki::statement::verify;
    use domain::pki::{KeySet, KeySetLifetimes, Signature, TrustDomain};
    use proto::RenewRequest;

    use super::*;
    use crate::renew::wire::renew_input;

    pub(crate) fn answer() -> JoinAnswer {
        JoinAnswer {
            csr_sha256: [7; 32],
            trust_domain: "compute.example.com".into(),
            node_id: "node_a".into(),
            site_id: "site-1".into(),
            role: "node".into(),
            identity_generation: 3,
            certificate_chain: vec![vec![1, 2], vec![3]],
            trust_roots: vec![vec![4]],
            not_after_us: 5_000_999,
            server_time_us: 2_000_999,
            allowed_kinds: vec!["diag.*".into()],
        }
    }

    #[test]
    fn the_join_response_is_signed_over_its_bytes_and_bound_to_the_csr() {
        let td = TrustDomain::new("compute.example.com").unwrap();
        let now = time::OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap();
        let keys = KeySet::generate(td, now, KeySetLifetimes::default()).unwrap();
        let trust = WelcomeTrust {
            version: 4,
            bundle: vec![1, 2, 3],
            signature: vec![9; 64],
        };
        let signed = signed_join_response(&keys.join_signing, &answer(), &trust).unwrap();
        let sig = Signature::from_bytes(&signed.signature).expect("64-byte signature");
        verify(
            keys.join_signing.public_key(),
            &JoinResponseStatement {
                csr_sha256: [7; 32],
                response: &signed.response,
            },
            &sig,
        )
        .expect("verifies over the exact bytes");
        // Bound to the CSR: another CSR's digest does not verify.
        assert!(verify(
            keys.join_signing.public_key(),
            &JoinResponseStatement {
                csr_sha256: [8; 32],
                response: &signed.response,
            },
            &sig,
        )
        .is_err());
        let body = JoinResponse::decode(signed.response.as_slice()).unwrap();
        assert_eq!(body.csr_sha256, vec![7; 32]);
        assert_eq!(body.node_id, "node_a");
        assert_eq!(body.site_id, "site-1");
        assert_eq!(body.role, "node");
        assert_eq!(body.identity_generation, 3);
        assert_eq!(body.certificate_chain, vec![vec![1, 2], vec![3]]);
        // The PKI root no longer travels; the Welcome's bundle does, byte for byte.
        assert!(body.trust_roots.is_empty());
        assert_eq!(body.trust_version, 4);
        assert_eq!(body.signed_trust_bundle, vec![1, 2, 3]);
        assert_eq!(body.trust_bundle_signature, vec![9; 64]);
        assert_eq!((body.not_after_ms, body.server_time_ms), (5_000, 2_000));
        // Signed with the rest: bcd enforces them (issue 40 item 16).
        assert_eq!(body.allowed_kinds, ["diag.*"]);
    }

    #[test]
    fn a_deferral_is_signed_like_an_admission_and_issues_nothing() {
        let td = TrustDomain::new("compute.example.com").unwrap();
        let now = time::OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap();
        let keys = KeySet::generate(td, now, KeySetLifetimes::default()).unwrap();
        let trust = WelcomeTrust {
            version: 4,
            bundle: vec![1, 2, 3],
            signature: vec![9; 64],
        };
        // The admitted outcome is byte for byte the admission's response.
        let joined =
            signed_join_outcome(&keys.join_signing, &JoinOutcome::Joined(answer()), &trust)
                .unwrap()
                .response;
        let direct = signed_join_response(&keys.join_signing, &answer(), &trust)
            .unwrap()
            .response;
        assert_eq!(joined, direct);
        let pending = JoinOutcome::Pending {
            request_id: "jr_1".into(),
            retry_after_seconds: 30,
            csr_sha256: [5; 32],
            trust_domain: "compute.example.com".into(),
            server_time_us: 2_000_999,
        };
        let challenge = JoinOutcome::Challenge {
            attestor: "tpm".into(),
            payload: vec![1, 2, 3],
            not_after_us: 9_000_999,
            csr_sha256: [5; 32],
            trust_domain: "compute.example.com".into(),
            server_time_us: 2_000_999,
        };
        for outcome in [pending, challenge] {
            let signed = signed_join_outcome(&keys.join_signing, &outcome, &trust).unwrap();
            let sig = Signature::from_bytes(&signed.signature).expect("64-byte signature");
            verify(
                keys.join_signing.public_key(),
                &JoinResponseStatement {
                    csr_sha256: [5; 32],
                    response: &signed.response,
                },
                &sig,
            )
            .expect("bound to the CSR");
            let body = JoinResponse::decode(signed.response.as_slice()).unwrap();
            assert_eq!(body.csr_sha256, vec![5; 32]);
            assert!(body.node_id.is_empty() && body.certificate_chain.is_empty());
            assert!(body.trust_roots.is_empty());
            // A deferral carries no trust bundle.
            assert_eq!(body.trust_version, 0);
            assert!(body.signed_trust_bundle.is_empty() && body.trust_bundle_signature.is_empty());
            match (&outcome, body.deferral) {
                (JoinOutcome::Pending { .. }, Some(Deferral::Pending(p))) => {
                    assert_eq!((p.request_id.as_str(), p.retry_after_seconds), ("jr_1", 30));
                }
                (JoinOutcome::Challenge { .. }, Some(Deferral::Challenge(c))) => {
                    assert_eq!(c.attestor, "tpm");
                    assert_eq!(c.payload, vec![1, 2, 3]);
                    assert_eq!(c.not_after_ms, 9_000);
                }
                (o, d) => panic!("{o:?} encoded as {d:?}"),
            }
        }
    }

    #[test]
    fn the_self_report_is_taken_as_sent() {
        let req = JoinRequest {
            role: "node".into(),
            claims: Some(proto::HardwareClaims {
                hostname: "rack4-n17".into(),
                product_serial: "PS1".into(),
                board_serial: "BS1".into(),
                chassis_serial: "CS1".into(),
                gpu_uuids: vec!["GPU-1".into()],
                boot_id: "b00t".into(),
                ..Default::default()
            }),
            agent_version: "9.9.9".into(),
            ..Default::default()
        };
        let report = join_request(&req).input.report;
        assert_eq!(
            report,
            SelfReport {
                hostname: "rack4-n17".into(),
                product_serial: "PS1".into(),
                board_serial: "BS1".into(),
                chassis_serial: "CS1".into(),
                gpu_uuids: vec!["GPU-1".into()],
                boot_id: "b00t".into(),
                agent_version: "9.9.9".into(),
            }
        );
        assert_eq!(
            join_request(&JoinRequest::default()).input.report,
            SelfReport::default()
        );
    }

    #[test]
    fn empty_wire_claims_are_no_claims() {
        let req = JoinRequest {
            csr: vec![1],
            attestor: "join-token".into(),
            sealed_token: vec![2],
            role: "node".into(),
            claims: Some(proto::HardwareClaims {
                product_uuid: String::new(),
                macs: vec!["aa:bb".into()],
                hardware_key: Vec::new(),
                ..Default::default()
            }),
            attestation: Vec::new(),
            agent_version: String::new(),
        };
        let join = join_request(&req);
        assert_eq!(join.attestor, "join-token");
        assert_eq!(join.input.claims.product_uuid, None);
        assert_eq!(join.input.claims.hardware_key, None);
        assert_eq!(join.input.claims.macs, vec!["aa:bb".to_owned()]);
        let renew = renew_input(&RenewRequest {
            csr: vec![1],
            chain: vec![vec![2]],
            client_time_ms: -5,
            signature: vec![3],
            key_attestation: None,
        });
        assert_eq!(renew.client_time_ms, 0);
    }
}
