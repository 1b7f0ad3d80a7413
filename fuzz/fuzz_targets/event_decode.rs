//! The protobuf event decoders (`events::RecordedEvent::decode` for every event type), the
//! schema-1 upcast of `node.identity.revoked`, the published trust-bundle content reader and the
//! audit leaf of the event.
//!
//! Input: one byte choosing the event type, one byte of schema version, the payload. Accepted
//! implies: re-encoding is canonical (decode ∘ encode is the identity on what decoded, and a
//! second encoding is byte-identical), another type name is refused as `WrongType`, a newer
//! schema as `UnsupportedSchema`, and the event's audit leaf decodes back to the same fields.
#![no_main]

use domain::audit::AuditLeaf;
use events::envelope::DecodeError;
use events::schema::*;
use events::{EventPayload, RecordedEvent};
use libfuzzer_sys::fuzz_target;

fn event(event_type: &str, schema_version: u32, payload: &[u8]) -> RecordedEvent {
    use sha2::{Digest, Sha256};
    RecordedEvent {
        position: 7,
        stream_id: "node/n1".into(),
        stream_version: 1,
        event_id: [9; 16],
        event_type: event_type.into(),
        schema_version,
        tenant_id: "t1".into(),
        occurred_at_us: 1_700_000_000_000_000,
        payload: payload.to_vec(),
        payload_sha256: Sha256::digest(payload).into(),
        tx_id: None,
        actor: None,
    }
}

/// Decodes `payload` as `P` and checks the round trip and the envelope's refusals.
fn decode_as<P: EventPayload + PartialEq + std::fmt::Debug>(
    schema: u32,
    payload: &[u8],
) -> Option<P> {
    let e = event(P::EVENT_TYPE, schema, payload);
    let decoded = match e.decode::<P>() {
        Ok(p) => p,
        Err(DecodeError::UnsupportedSchema {
            found, supported, ..
        }) => {
            assert!(found > supported && supported == P::SCHEMA_VERSION);
            return None;
        }
        Err(DecodeError::Protobuf { .. }) => return None,
        Err(other) => panic!("unexpected refusal for {}: {other}", P::EVENT_TYPE),
    };
    assert!(schema <= P::SCHEMA_VERSION);
    let bytes = decoded.encode_to_vec();
    let again = P::decode(bytes.as_slice()).expect("a re-encoded payload decodes");
    assert_eq!(
        again,
        decoded,
        "decode(encode(p)) == p for {}",
        P::EVENT_TYPE
    );
    assert_eq!(
        again.encode_to_vec(),
        bytes,
        "a second encoding is byte-identical"
    );
    let wrong = event("no.such.type", schema, payload);
    assert!(matches!(
        wrong.decode::<P>(),
        Err(DecodeError::WrongType { .. })
    ));
    check_leaf(&e);
    Some(decoded)
}

fn check_leaf(e: &RecordedEvent) {
    let leaf = AuditLeaf::from_event(e, 3);
    let bytes = leaf.encode().expect("a small event's leaf encodes");
    let back = AuditLeaf::decode(&bytes).expect("an encoded leaf decodes");
    assert_eq!(back.encode().expect("re-encodes"), bytes);
    assert_eq!(back.leaf_hash().ok(), leaf.leaf_hash().ok());
}

fn revoked(schema: u32, payload: &[u8]) {
    let Some(p) = decode_as::<NodeIdentityRevoked>(schema, payload) else {
        return;
    };
    match p.revoked_certificates(schema) {
        RevokedCertificates::Named(serials) => {
            assert!(schema >= 2);
            assert_eq!(serials, p.revoked_serials.as_slice());
        }
        RevokedCertificates::EveryUnrevokedOfNode => assert!(schema < 2),
    }
}

fn published(schema: u32, payload: &[u8]) {
    use domain::trust_bundle::content::{content_of, read_content};
    let Some(p) = decode_as::<TrustBundlePublished>(schema, payload) else {
        return;
    };
    let Some(content) = p.content else { return };
    let Ok(read) = read_content(content) else {
        return;
    };
    let written = content_of(
        &read.command_signing_roots,
        &read.held.set,
        read.held.epoch,
        &read.signatures,
    );
    let reread = read_content(written).expect("a content written from a read one reads");
    assert_eq!(reread.held, read.held);
    assert_eq!(reread.signatures, read.signatures);
    assert_eq!(
        reread.command_signing_roots,
        domain::trust_bundle::sorted_roots(&read.command_signing_roots)
    );
}

fuzz_target!(|data: &[u8]| {
    let [kind, schema, payload @ ..] = data else {
        return;
    };
    let schema = u32::from(*schema);
    match kind % 25 {
        0 => drop(decode_as::<JoinTokenCreated>(schema, payload)),
        1 => drop(decode_as::<JoinTokenRevoked>(schema, payload)),
        2 => drop(decode_as::<JoinTokenUsed>(schema, payload)),
        3 => drop(decode_as::<NodeJoined>(schema, payload)),
        4 => drop(decode_as::<NodeCertificateIssued>(schema, payload)),
        5 => drop(decode_as::<RenewProofUsed>(schema, payload)),
        6 => revoked(schema, payload),
        7 => drop(decode_as::<NodeDeleted>(schema, payload)),
        8 => drop(decode_as::<NodeRetired>(schema, payload)),
        9 => drop(decode_as::<JoinRefused>(schema, payload)),
        10 => drop(decode_as::<RenewRefused>(schema, payload)),
        11 => drop(decode_as::<RefusalsSuppressed>(schema, payload)),
        12 => drop(decode_as::<AttestationUsesPruned>(schema, payload)),
        13 => published(schema, payload),
        14 => drop(decode_as::<ApproverSetChanged>(schema, payload)),
        15 => drop(decode_as::<CommandRootAdded>(schema, payload)),
        16 => drop(decode_as::<CommandRootSwitched>(schema, payload)),
        17 => drop(decode_as::<CommandRootDropped>(schema, payload)),
        18 => drop(decode_as::<NodeTrustReported>(schema, payload)),
        19 => drop(decode_as::<BatchCreated>(schema, payload)),
        20 => drop(decode_as::<BatchApprovalRecorded>(schema, payload)),
        21 => drop(decode_as::<BatchApproved>(schema, payload)),
        22 => drop(decode_as::<BatchExpired>(schema, payload)),
        23 => drop(decode_as::<BatchCancelled>(schema, payload)),
        _ => drop(decode_as::<AuditCheckpointSealed>(schema, payload)),
    }
});
