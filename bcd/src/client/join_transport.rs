//! [`GrpcJoinTransport`]: [`crate::join::request::JoinTransport`] over gRPC, on a private
//! current-thread runtime (the join loop itself stays synchronous and testable with a stand-in
//! transport).

use domain::pki::Pin;
use prost::Message as _;

use super::connect::{connect, NodeClient, CALL_TIMEOUT};
use super::retry::classify;
use crate::join::request::{CallError, JoinRequestParts, JoinTransport};
use crate::join::verify::{DeferralFields, JoinResponseFields, SignedJoinResponse};

/// Decodes a signed `bc.wire.v1.JoinResponse` body into the fields the agent checks.
pub fn decode_join_body(body: &[u8]) -> Result<JoinResponseFields, String> {
    let response = proto::JoinResponse::decode(body).map_err(|e| e.to_string())?;
    let mut chain = response.certificate_chain.into_iter();
    // A deferral carries none; the verifier refuses a join without one.
    let leaf_der = chain.next().unwrap_or_default();
    let deferral = response.deferral.map(|d| match d {
        proto::join_response::Deferral::Pending(p) => DeferralFields::Pending {
            request_id: p.request_id,
            retry_after_seconds: p.retry_after_seconds,
        },
        proto::join_response::Deferral::Challenge(c) => DeferralFields::Challenge {
            attestor: c.attestor,
            payload: c.payload,
            not_after_ms: c.not_after_ms,
        },
    });
    Ok(JoinResponseFields {
        node_id: response.node_id,
        deferral,
        csr_sha256: response.csr_sha256,
        trust_domain: response.trust_domain,
        leaf_der,
        chain_ders: chain.collect(),
        trust_version: response.trust_version,
        trust_roots: response.trust_roots,
        trust_bundle: None,
        signed_trust_bundle: response.signed_trust_bundle,
        trust_bundle_signature: response.trust_bundle_signature,
        server_time_ms: response.server_time_ms,
        allowed_kinds: response.allowed_kinds,
    })
}

/// [`JoinTransport`] over gRPC: pinned TLS, no client certificate.
pub struct GrpcJoinTransport {
    runtime: tokio::runtime::Runtime,
    server: String,
    serving_ca: Pin,
    signer_spki_der: Vec<u8>,
    client: Option<NodeClient>,
}

impl std::fmt::Debug for GrpcJoinTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcJoinTransport")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl GrpcJoinTransport {
    /// A transport to `server`, pinned to `serving_ca`. The JoinService signing key's SPKI
    /// (from `join-signing.jwk`, checked against its pin by the caller) is attached to every
    /// answer so [`crate::join::verify`] checks the signature under it.
    pub fn new(
        server: &str,
        serving_ca: Pin,
        signer_spki_der: Vec<u8>,
    ) -> Result<GrpcJoinTransport, std::io::Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(GrpcJoinTransport {
            runtime,
            server: server.to_owned(),
            serving_ca,
            signer_spki_der,
            client: None,
        })
    }
}

impl JoinTransport for GrpcJoinTransport {
    fn join(&mut self, request: &JoinRequestParts) -> Result<SignedJoinResponse, CallError> {
        let wire = proto::JoinRequest {
            csr: request.csr_der.clone(),
            attestor: request.attestor.clone(),
            sealed_token: request
                .sealed_token
                .as_ref()
                .map(|t| t.as_bytes().to_vec())
                .unwrap_or_default(),
            role: request.role.to_string(),
            claims: Some(proto::HardwareClaims {
                product_uuid: request.claims.product_uuid.clone().unwrap_or_default(),
                macs: request.claims.macs.clone(),
                hardware_key: Vec::new(),
                hostname: request.claims.hostname.clone(),
                product_serial: request.claims.product_serial.clone(),
                board_serial: request.claims.board_serial.clone(),
                chassis_serial: request.claims.chassis_serial.clone(),
                gpu_uuids: request.claims.gpu_uuids.clone(),
                boot_id: request.claims.boot_id.clone(),
            }),
            attestation: request.evidence.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        let server = self.server.clone();
        let pin = self.serving_ca;
        let cached = self.client.take();
        let result = self.runtime.block_on(async move {
            let mut client = match cached {
                Some(client) => client,
                None => match connect(&server, pin, None).await {
                    Ok(client) => client,
                    Err(e) if e.is_retryable() => {
                        return Err(CallError::Retryable {
                            message: e.to_string(),
                            pushback: None,
                        })
                    }
                    Err(e) => return Err(CallError::Fatal(e.to_string())),
                },
            };
            let mut call = tonic::Request::new(wire);
            call.set_timeout(CALL_TIMEOUT);
            match client.join(call).await {
                Ok(answer) => Ok((client, answer.into_inner())),
                Err(status) => Err(classify(&status)),
            }
        });
        match result {
            Ok((client, answer)) => {
                self.client = Some(client);
                Ok(SignedJoinResponse {
                    body: answer.response,
                    signature: answer.signature,
                    signer_spki_der: self.signer_spki_der.clone(),
                })
            }
            // A failed call drops the connection; the next attempt dials again.
            Err(e) => Err(e),
        }
    }

    fn decode_body(&self, body: &[u8]) -> Result<JoinResponseFields, String> {
        decode_join_body(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferral_decodes_with_no_certificate() {
        let body = proto::JoinResponse {
            csr_sha256: vec![1; 32],
            trust_domain: "td.example".into(),
            deferral: Some(proto::join_response::Deferral::Pending(
                proto::JoinPending {
                    request_id: "jr_1".into(),
                    retry_after_seconds: 30,
                },
            )),
            ..Default::default()
        }
        .encode_to_vec();
        let fields = decode_join_body(&body).unwrap();
        assert!(fields.leaf_der.is_empty() && fields.node_id.is_empty());
        assert_eq!(
            fields.deferral,
            Some(DeferralFields::Pending {
                request_id: "jr_1".into(),
                retry_after_seconds: 30
            })
        );
        let body = proto::JoinResponse {
            csr_sha256: vec![1; 32],
            deferral: Some(proto::join_response::Deferral::Challenge(
                proto::JoinChallenge {
                    attestor: "tpm".into(),
                    payload: vec![9],
                    not_after_ms: 5,
                },
            )),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(
            decode_join_body(&body).unwrap().deferral,
            Some(DeferralFields::Challenge {
                attestor: "tpm".into(),
                payload: vec![9],
                not_after_ms: 5
            })
        );
        let body = proto::JoinResponse {
            node_id: "n1".into(),
            certificate_chain: vec![vec![1], vec![2]],
            ..Default::default()
        }
        .encode_to_vec();
        let fields = decode_join_body(&body).unwrap();
        assert_eq!(
            (
                fields.leaf_der,
                fields.chain_ders,
                fields.node_id,
                fields.deferral
            ),
            (vec![1], vec![vec![2]], "n1".to_owned(), None)
        );
    }
}
