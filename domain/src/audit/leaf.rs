//! The audit leaf: a versioned byte encoding that commits to the whole event.
//!
//! Each event of a tenant becomes one leaf of that tenant's Merkle log. The leaf's bytes are the
//! RFC 9162 §2.1.1 input `d`, so its leaf hash is `SHA-256(0x00 || leaf bytes)`
//! ([`super::merkle::leaf_hash`]).
//!
//! # Layout, version 1
//!
//! All integers are big-endian and fixed width. Strings are UTF-8, prefixed by their length in
//! bytes as a u32. Nothing follows the last field.
//!
//! | # | field            | encoding                                              |
//! |---|------------------|-------------------------------------------------------|
//! | 1 | version          | u8, `0x01`                                            |
//! | 2 | tenant id        | u32 length, then the UTF-8 bytes                      |
//! | 3 | tenant index     | u64: the event's dense index in its tenant's log (0-based) |
//! | 4 | global position  | i64: the event's position in the global log           |
//! | 5 | stream id        | u32 length, then the UTF-8 bytes (e.g. `node/<id>`)   |
//! | 6 | stream version   | i64 (1 for a stream's first event)                    |
//! | 7 | event type       | u32 length, then the UTF-8 bytes (e.g. `node.joined`) |
//! | 8 | schema version   | u32                                                   |
//! | 9 | occurred at      | i64: microseconds since the Unix epoch (UTC)          |
//! | 10| event id         | 16 bytes (the UUID's bytes)                           |
//! | 11| payload SHA-256  | 32 bytes: SHA-256 of the payload bytes as stored      |
//!
//! A leaf is therefore `97 + len(tenant) + len(stream) + len(type)` bytes long.
//!
//! # Layout, version 2: an event with an actor
//!
//! An event appended by an authenticated actor (`events::RecordedEvent::actor`: who caused it,
//! and in which role) encodes as version 2: field 1 is `0x02`, fields 2 to 11 are exactly as in
//! version 1, and two fields follow:
//!
//! | # | field            | encoding                                              |
//! |---|------------------|-------------------------------------------------------|
//! | 12| actor id         | u32 length, then the UTF-8 bytes (e.g. `spiffe://td/operator/alice`) |
//! | 13| actor role       | u32 length, then the UTF-8 bytes (e.g. `operator`)    |
//!
//! A version 2 leaf is `105 + len(tenant) + len(stream) + len(type) + len(actor id) + len(actor
//! role)` bytes long. An event without an actor stays version 1, byte for byte: the leaves
//! sequenced before actors were recorded, and the checkpoints over them, stay valid, and
//! changing, adding or removing an event's actor changes its leaf hash. A future version changes
//! the first byte; a verifier refuses versions it does not know.
//!
//! Verifiers must recompute the payload's SHA-256 from the payload bytes themselves
//! ([`AuditLeaf::from_event_recomputed`]), not trust a stored digest column, or a changed payload
//! goes unnoticed.

use sha2::{Digest, Sha256};

use crate::merkle::{Hash, LEAF_PREFIX};

/// The leaf encoding of an event without an actor.
pub const LEAF_VERSION_V1: u8 = 0x01;

/// The leaf encoding of an event with an actor: version 1's fields, then the actor's.
pub const LEAF_VERSION_V2: u8 = 0x02;

/// The highest leaf encoding version this build writes and reads (it reads every version from
/// [`LEAF_VERSION_V1`] up).
pub const LEAF_VERSION: u8 = LEAF_VERSION_V2;

/// Why a leaf could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeafError {
    #[error("leaf field {field} is {len} bytes long; the encoding allows at most 4294967295")]
    FieldTooLong { field: &'static str, len: usize },
    #[error("leaf encoding version {0:#04x} is unknown (this build reads versions 0x01 and 0x02)")]
    UnknownVersion(u8),
    #[error("leaf bytes end inside field {field}")]
    Truncated { field: &'static str },
    #[error("leaf field {field} is not valid UTF-8")]
    NotUtf8 { field: &'static str },
    #[error("{extra} bytes follow the last field of the leaf")]
    TrailingBytes { extra: usize },
}

/// One audit leaf: everything about an event the log commits to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditLeaf<'a> {
    pub tenant_id: &'a str,
    /// Dense per-tenant index, assigned by the sequencer.
    pub index: u64,
    /// Global log position.
    pub position: i64,
    pub stream_id: &'a str,
    pub stream_version: i64,
    pub event_type: &'a str,
    pub schema_version: u32,
    pub occurred_at_us: i64,
    pub event_id: [u8; 16],
    pub payload_sha256: [u8; 32],
    /// Who caused the event; `Some` makes the leaf version 2.
    pub actor: Option<LeafActor<'a>>,
}

/// The actor a version 2 leaf commits to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafActor<'a> {
    pub id: &'a str,
    pub role: &'a str,
}

impl<'a> LeafActor<'a> {
    /// The leaf's view of a recorded actor.
    pub fn of(actor: &'a events::Actor) -> Self {
        LeafActor {
            id: actor.id(),
            role: actor.role(),
        }
    }
}

fn len_u32(field: &'static str, s: &str) -> Result<[u8; 4], LeafError> {
    u32::try_from(s.len())
        .map(u32::to_be_bytes)
        .map_err(|_| LeafError::FieldTooLong {
            field,
            len: s.len(),
        })
}

impl<'a> AuditLeaf<'a> {
    /// The leaf of a stored event at per-tenant `index`, taking the stored payload digest as is.
    /// This is the sequencer's path: the digest was computed from the same bytes when the event was
    /// appended, in the same transaction.
    pub fn from_event(event: &'a events::RecordedEvent, index: u64) -> Self {
        Self::with_digest(event, index, event.payload_sha256)
    }

    /// The leaf of a stored event at per-tenant `index`, with the payload digest recomputed from
    /// the payload bytes. This is the auditor's path.
    pub fn from_event_recomputed(event: &'a events::RecordedEvent, index: u64) -> Self {
        Self::with_digest(event, index, Sha256::digest(&event.payload).into())
    }

    fn with_digest(event: &'a events::RecordedEvent, index: u64, digest: [u8; 32]) -> Self {
        AuditLeaf {
            tenant_id: &event.tenant_id,
            index,
            position: event.position,
            stream_id: &event.stream_id,
            stream_version: event.stream_version,
            event_type: &event.event_type,
            schema_version: event.schema_version,
            occurred_at_us: event.occurred_at_us,
            event_id: event.event_id,
            payload_sha256: digest,
            actor: event.actor.as_ref().map(LeafActor::of),
        }
    }

    /// The encoding version of this leaf: 2 with an actor, 1 without.
    pub fn version(&self) -> u8 {
        if self.actor.is_some() {
            LEAF_VERSION_V2
        } else {
            LEAF_VERSION_V1
        }
    }

    /// The encoded length in bytes.
    pub fn encoded_len(&self) -> usize {
        1 + 4
            + self.tenant_id.len()
            + 8
            + 8
            + 4
            + self.stream_id.len()
            + 8
            + 4
            + self.event_type.len()
            + 4
            + 8
            + 16
            + 32
            + self.actor.map_or(0, |a| 4 + a.id.len() + 4 + a.role.len())
    }

    /// Feeds the encoding, piece by piece, to `sink` (no allocation).
    fn write(&self, mut sink: impl FnMut(&[u8])) -> Result<(), LeafError> {
        let tenant_len = len_u32("tenant_id", self.tenant_id)?;
        let stream_len = len_u32("stream_id", self.stream_id)?;
        let type_len = len_u32("event_type", self.event_type)?;
        let actor = match self.actor {
            Some(a) => Some((
                a,
                len_u32("actor_id", a.id)?,
                len_u32("actor_role", a.role)?,
            )),
            None => None,
        };
        sink(&[self.version()]);
        sink(&tenant_len);
        sink(self.tenant_id.as_bytes());
        sink(&self.index.to_be_bytes());
        sink(&self.position.to_be_bytes());
        sink(&stream_len);
        sink(self.stream_id.as_bytes());
        sink(&self.stream_version.to_be_bytes());
        sink(&type_len);
        sink(self.event_type.as_bytes());
        sink(&self.schema_version.to_be_bytes());
        sink(&self.occurred_at_us.to_be_bytes());
        sink(&self.event_id);
        sink(&self.payload_sha256);
        if let Some((a, id_len, role_len)) = actor {
            sink(&id_len);
            sink(a.id.as_bytes());
            sink(&role_len);
            sink(a.role.as_bytes());
        }
        Ok(())
    }

    /// Appends the leaf bytes to `out` (reuse one buffer across leaves).
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), LeafError> {
        out.reserve(self.encoded_len());
        self.write(|b| out.extend_from_slice(b))
    }

    /// The leaf bytes.
    pub fn encode(&self) -> Result<Vec<u8>, LeafError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// The RFC 9162 leaf hash `SHA-256(0x00 || leaf bytes)`, hashed without building the bytes.
    pub fn leaf_hash(&self) -> Result<Hash, LeafError> {
        let mut h = Sha256::new();
        h.update([LEAF_PREFIX]);
        self.write(|b| h.update(b))?;
        Ok(h.finalize().into())
    }

    /// Decodes leaf bytes, strictly: known version (1, or 2 with an actor), every field whole,
    /// valid UTF-8, nothing after.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, LeafError> {
        let mut r = Reader { rest: bytes };
        let version = r.take::<1>("version")?[0];
        if version != LEAF_VERSION_V1 && version != LEAF_VERSION_V2 {
            return Err(LeafError::UnknownVersion(version));
        }
        let tenant_id = r.string("tenant_id")?;
        let index = u64::from_be_bytes(r.take("index")?);
        let position = i64::from_be_bytes(r.take("position")?);
        let stream_id = r.string("stream_id")?;
        let stream_version = i64::from_be_bytes(r.take("stream_version")?);
        let event_type = r.string("event_type")?;
        let schema_version = u32::from_be_bytes(r.take("schema_version")?);
        let occurred_at_us = i64::from_be_bytes(r.take("occurred_at_us")?);
        let event_id = r.take("event_id")?;
        let payload_sha256 = r.take("payload_sha256")?;
        let actor = if version == LEAF_VERSION_V2 {
            Some(LeafActor {
                id: r.string("actor_id")?,
                role: r.string("actor_role")?,
            })
        } else {
            None
        };
        if !r.rest.is_empty() {
            return Err(LeafError::TrailingBytes {
                extra: r.rest.len(),
            });
        }
        Ok(AuditLeaf {
            tenant_id,
            index,
            position,
            stream_id,
            stream_version,
            event_type,
            schema_version,
            occurred_at_us,
            event_id,
            payload_sha256,
            actor,
        })
    }
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], LeafError> {
        if self.rest.len() < n {
            return Err(LeafError::Truncated { field });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn take<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], LeafError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(field, N)?);
        Ok(out)
    }

    fn string(&mut self, field: &'static str) -> Result<&'a str, LeafError> {
        let len = u32::from_be_bytes(self.take(field)?) as usize;
        std::str::from_utf8(self.bytes(field, len)?).map_err(|_| LeafError::NotUtf8 { field })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::merkle::leaf_hash;

    fn sample() -> AuditLeaf<'static> {
        AuditLeaf {
            tenant_id: "t1",
            index: 7,
            position: 42,
            stream_id: "node/n1",
            stream_version: 3,
            event_type: "node.joined",
            schema_version: 1,
            occurred_at_us: 1_700_000_000_000_000,
            event_id: [0xab; 16],
            payload_sha256: [0xcd; 32],
            actor: None,
        }
    }

    #[test]
    fn layout_is_as_documented() {
        let l = sample();
        let b = l.encode().unwrap();
        assert_eq!(b.len(), l.encoded_len());
        assert_eq!(b.len(), 97 + 2 + 7 + 11);
        let mut expected = vec![0x01, 0, 0, 0, 2, b't', b'1'];
        expected.extend_from_slice(&7u64.to_be_bytes());
        expected.extend_from_slice(&42i64.to_be_bytes());
        expected.extend_from_slice(&[0, 0, 0, 7]);
        expected.extend_from_slice(b"node/n1");
        expected.extend_from_slice(&3i64.to_be_bytes());
        expected.extend_from_slice(&[0, 0, 0, 11]);
        expected.extend_from_slice(b"node.joined");
        expected.extend_from_slice(&1u32.to_be_bytes());
        expected.extend_from_slice(&1_700_000_000_000_000i64.to_be_bytes());
        expected.extend_from_slice(&[0xab; 16]);
        expected.extend_from_slice(&[0xcd; 32]);
        assert_eq!(b, expected);
        assert_eq!(l.leaf_hash().unwrap(), leaf_hash(&b));
    }

    /// The version 1 leaf hash of [`sample`], pinned: events without an actor keep the exact
    /// bytes (and hashes) they had before leaves could carry one.
    #[test]
    fn version_1_is_unchanged() {
        let l = sample();
        assert_eq!(l.version(), 1);
        assert_eq!(
            hex::encode(l.leaf_hash().unwrap()),
            "0f86c1fb8b0eb789781cbcf894514525e0dde857320712d2e4eaaab90a42cfe5"
        );
    }

    /// Golden vector for version 2: [`sample`] with an actor, bytes and leaf hash pinned
    /// (computed independently of this code, from the layout in the module doc).
    #[test]
    fn version_2_golden() {
        let l = AuditLeaf {
            actor: Some(LeafActor {
                id: "spiffe://td.example/operator/alice",
                role: "operator",
            }),
            ..sample()
        };
        let b = l.encode().unwrap();
        assert_eq!(l.version(), 2);
        assert_eq!(b.len(), l.encoded_len());
        assert_eq!(b.len(), 105 + 2 + 7 + 11 + 34 + 8);
        assert_eq!(
            hex::encode(&b),
            concat!(
                "020000000274310000000000000007000000000000002a000000076e6f64652f6e31000000000000",
                "00030000000b6e6f64652e6a6f696e65640000000100060a24181e4000ababababababababababab",
                "abababababcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd000000",
                "227370696666653a2f2f74642e6578616d706c652f6f70657261746f722f616c696365000000086f",
                "70657261746f72",
            )
        );
        // Field 1 aside, the first 117 bytes are version 1's.
        assert_eq!(b[1..117], sample().encode().unwrap()[1..]);
        assert_eq!(
            hex::encode(l.leaf_hash().unwrap()),
            "d8b83c35f2a67dab82e59671cbe8461937fb15f63e8cd614c0baaf583fd6405d"
        );
        assert_eq!(l.leaf_hash().unwrap(), leaf_hash(&b));
        assert_eq!(AuditLeaf::decode(&b).unwrap(), l);
        for cut in 117..b.len() {
            assert!(matches!(
                AuditLeaf::decode(&b[..cut]),
                Err(LeafError::Truncated { .. })
            ));
        }
        // A changed actor is a changed leaf.
        let other = AuditLeaf {
            actor: Some(LeafActor {
                id: "spiffe://td.example/operator/alice",
                role: "admin",
            }),
            ..l
        };
        assert_ne!(other.leaf_hash().unwrap(), l.leaf_hash().unwrap());
    }

    #[test]
    fn events_with_an_actor_make_version_2_leaves() {
        let mut ev = events::RecordedEvent {
            position: 5,
            stream_id: "node/a".into(),
            stream_version: 1,
            event_id: [1; 16],
            event_type: "node.joined".into(),
            schema_version: 1,
            tenant_id: "t".into(),
            occurred_at_us: 9,
            payload: b"payload".to_vec(),
            payload_sha256: Sha256::digest(b"payload").into(),
            tx_id: None,
            actor: None,
        };
        let without = AuditLeaf::from_event(&ev, 0).leaf_hash().unwrap();
        ev.actor = Some(events::Actor::new("local:root@h", "admin").unwrap());
        let leaf = AuditLeaf::from_event_recomputed(&ev, 0);
        assert_eq!(
            leaf.actor,
            Some(LeafActor {
                id: "local:root@h",
                role: "admin"
            })
        );
        assert_eq!(leaf.encode().unwrap()[0], 0x02);
        assert_ne!(leaf.leaf_hash().unwrap(), without);
    }

    #[test]
    fn decode_round_trips_and_is_strict() {
        let l = sample();
        let b = l.encode().unwrap();
        assert_eq!(AuditLeaf::decode(&b).unwrap(), l);
        let mut v3 = b.clone();
        v3[0] = 3;
        assert_eq!(AuditLeaf::decode(&v3), Err(LeafError::UnknownVersion(3)));
        // A version 1 leaf relabelled version 2 lacks the actor.
        let mut v2 = b.clone();
        v2[0] = 2;
        assert_eq!(
            AuditLeaf::decode(&v2),
            Err(LeafError::Truncated { field: "actor_id" })
        );
        let mut extra = b.clone();
        extra.push(0);
        assert_eq!(
            AuditLeaf::decode(&extra),
            Err(LeafError::TrailingBytes { extra: 1 })
        );
        for cut in 0..b.len() {
            assert!(matches!(
                AuditLeaf::decode(&b[..cut]),
                Err(LeafError::Truncated { .. })
            ));
        }
        let mut bad = b.clone();
        bad[5] = 0xff;
        assert_eq!(
            AuditLeaf::decode(&bad),
            Err(LeafError::NotUtf8 { field: "tenant_id" })
        );
    }

    #[test]
    fn recomputed_digest_catches_a_changed_payload() {
        let mut ev = events::RecordedEvent {
            position: 5,
            stream_id: "node/a".into(),
            stream_version: 1,
            event_id: [1; 16],
            event_type: "node.joined".into(),
            schema_version: 1,
            tenant_id: "t".into(),
            occurred_at_us: 9,
            payload: b"payload".to_vec(),
            payload_sha256: Sha256::digest(b"payload").into(),
            tx_id: None,
            actor: None,
        };
        let honest = AuditLeaf::from_event(&ev, 0).leaf_hash().unwrap();
        assert_eq!(
            AuditLeaf::from_event_recomputed(&ev, 0)
                .leaf_hash()
                .unwrap(),
            honest
        );
        ev.payload[0] ^= 1;
        assert_ne!(
            AuditLeaf::from_event_recomputed(&ev, 0)
                .leaf_hash()
                .unwrap(),
            honest
        );
    }
}
