//! Event types of `proto/bc/events/v1/identity.proto`.

use super::*;

event_payload! {
    JoinTokenCreated => "token.created", version 1;
    JoinTokenRevoked => "token.revoked", version 1;
    JoinTokenUsed => "token.used", version 1;
    NodeJoined => "node.joined", version 1;
    NodeCertificateIssued => "node.certificate.issued", version 1;
    RenewProofUsed => "node.renew_proof.used", version 1;
    NodeIdentityRevoked => "node.identity.revoked", version 1;
    NodeDeleted => "node.deleted", version 1;
    NodeRetired => "node.retired", version 1;
    JoinRefused => "security.join.refused", version 1;
    RenewRefused => "security.renew.refused", version 1;
    RefusalsSuppressed => "security.refusals.suppressed", version 1;
    AttestationUsesPruned => "attestation.uses.pruned", version 1;
}
