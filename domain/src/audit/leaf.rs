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
//! A leaf is therefore `97 + len(tenant) + len(stream) + len(type)` bytes long. A future version
//! changes the first byte; a verifier refuses versions it does not know.
//!
//! Verifiers must recompute the payload's SHA-256 from the payload bytes themselves
//! ([`AuditLeaf::from_event_recomputed`]), not trust a stored digest column, or a changed payload
//! goes unnoticed.

use sha2::{Digest, Sha256};

use crate::merkle::{Hash, LEAF_PREFIX};

/// The only leaf encoding version this build writes and reads.
pub const LEAF_VERSION: u8 = 0x01;

/// Why a leaf could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeafError {
    #[error("leaf field {field} is {len} bytes long; the encoding allows at most 4294967295")]
    FieldTooLong { field: &'static str, len: usize },
    #[error("leaf encoding version {0:#04x} is unknown (this build reads version 0x01)")]
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
    }

    /// Feeds the encoding, piece by piece, to `sink` (no allocation).
    fn write(&self, mut sink: impl FnMut(&[u8])) -> Result<(), LeafError> {
        let tenant_len = len_u32("tenant_id", self.tenant_id)?;
        let stream_len = len_u32("stream_id", self.stream_id)?;
        let type_len = len_u32("event_type", self.event_type)?;
        sink(&[LEAF_VERSION]);
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

    /// Decodes leaf bytes, strictly: known version, every field whole, valid UTF-8, nothing after.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, LeafError> {
        let mut r = Reader { rest: bytes };
        let version = r.take::<1>("version")?[0];
        if version != LEAF_VERSION {
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

    #[test]
    fn decode_round_trips_and_is_strict() {
        let l = sample();
        let b = l.encode().unwrap();
        assert_eq!(AuditLeaf::decode(&b).unwrap(), l);
        let mut v2 = b.clone();
        v2[0] = 2;
        assert_eq!(AuditLeaf::decode(&v2), Err(LeafError::UnknownVersion(2)));
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
