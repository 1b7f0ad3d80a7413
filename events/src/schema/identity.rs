//! Event types of `proto/bc/events/v1/identity.proto`.

use super::*;

/// The `attestation_uses.attestor` a `node.renew_proof.used` event's proof is recorded under.
pub const RENEW_POP_ATTESTOR: &str = "renew-pop";

/// The `attestation_uses.attestor` a `token.used` event's node key is recorded under (subject:
/// SHA-256 of the CSR's SubjectPublicKeyInfo), so one key joins once while the token lives.
pub const JOIN_KEY_ATTESTOR: &str = super::attestor_ids::JOIN_TOKEN;

event_payload! {
    JoinTokenCreated => "token.created", version 1;
    JoinTokenRevoked => "token.revoked", version 1;
    JoinTokenUsed => "token.used", version 1;
    NodeJoined => "node.joined", version 1;
    NodeCertificateIssued => "node.certificate.issued", version 1;
    RenewProofUsed => "node.renew_proof.used", version 1;
    NodeIdentityRevoked => "node.identity.revoked", version 2;
    NodeDeleted => "node.deleted", version 1;
    NodeRetired => "node.retired", version 1;
    JoinRefused => "security.join.refused", version 1;
    RenewRefused => "security.renew.refused", version 1;
    RefusalsSuppressed => "security.refusals.suppressed", version 1;
    AttestationUsesPruned => "attestation.uses.pruned", version 1;
    RenewCloned => "security.renew.cloned", version 1;
    EvidenceUsed => "attestation.evidence.used", version 1;
    NodeBound => "node.bound", version 1;
    NodeRuntimeReported => "node.runtime.reported", version 1;
    PoolCreated => "pool.created", version 1;
    PoolUpdated => "pool.updated", version 1;
    JoinRequestCreated => "join_request.created", version 1;
    JoinRequestApproved => "join_request.approved", version 1;
    JoinRequestRejected => "join_request.rejected", version 1;
    JoinRequestConsumed => "join_request.consumed", version 1;
    JoinRequestExpired => "join_request.expired", version 1;
    TpmEkAllowed => "tpm.ek.allowed", version 1;
    TpmEkAllowRevoked => "tpm.ek.allow.revoked", version 1;
    NodeNamesSet => "node.names.set", version 1;
}

/// Which certificates a `node.identity.revoked` event revokes: the upcast of its schema 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokedCertificates<'a> {
    /// Schema 2 on: exactly these serials (none when the node had no open certificate).
    Named(&'a [String]),
    /// Schema 1, written before the event named its serials: every certificate of the node not
    /// yet revoked at the event's position, the rule its rows were built by. An upcast from the
    /// event alone cannot name them (that needs the node's certificates), so these events keep
    /// that rule, which gives their tables exactly as before.
    EveryUnrevokedOfNode,
}

impl NodeIdentityRevoked {
    /// The certificates this event revokes, given the schema version it was written with.
    pub fn revoked_certificates(&self, schema_version: u32) -> RevokedCertificates<'_> {
        if schema_version >= 2 {
            RevokedCertificates::Named(&self.revoked_serials)
        } else {
            RevokedCertificates::EveryUnrevokedOfNode
        }
    }
}
