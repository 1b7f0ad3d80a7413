//! The published content as the `trust.bundle.published` event carries it
//! (`events::schema::TrustBundleContent`), built from domain values and read back into them.

use events::schema::{ApproverKeyEntry, QuorumSignature, QuorumTier, TrustBundleContent};

use super::digest::sorted_roots;
use crate::quorum::{ApproverKey, ApproverSet, HeldApproverSet, Kid, SetSignature, Tier};

/// A published content read back: its roots, the approver set with its epoch, and the set's
/// signatures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedContent {
    /// Command-signing root certificates (DER), in ascending order of their SHA-256.
    pub command_signing_roots: Vec<Vec<u8>>,
    /// The approver set and its epoch.
    pub held: HeldApproverSet,
    /// The signatures the set was published with.
    pub signatures: Vec<SetSignature>,
}

/// Why a stored content cannot be read back (a bug or a corrupt row, never a refusal).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    /// An approver key does not parse or its kid is not SHA-256 of its key.
    #[error("published approver key: {0}")]
    ApproverKey(String),
    /// The approver set is not a valid set.
    #[error("published approver set: {0}")]
    ApproverSet(String),
    /// A set signature's kid is malformed.
    #[error("published set signature: {0}")]
    SetSignature(String),
}

/// The content to publish: roots sorted by hash, the set's keys, thresholds and tiers, its epoch
/// and signatures.
pub fn content_of(
    roots: &[Vec<u8>],
    set: &ApproverSet,
    epoch: u64,
    signatures: &[SetSignature],
) -> TrustBundleContent {
    TrustBundleContent {
        command_signing_roots: sorted_roots(roots),
        approver_keys: set
            .keys()
            .iter()
            .map(|k| ApproverKeyEntry {
                kid: k.kid().as_bytes().to_vec(),
                spki_der: k.spki_der().to_vec(),
            })
            .collect(),
        approver_threshold: set.threshold(),
        quorum_tiers: set
            .tiers()
            .iter()
            .map(|t| QuorumTier {
                max_scope_size: t.max_scope_size,
                threshold: t.threshold,
            })
            .collect(),
        unbatched_destructive_per_hour: set.unbatched_per_hour(),
        approver_set_epoch: epoch,
        approver_set_signatures: signatures
            .iter()
            .map(|s| QuorumSignature {
                kid: s.kid.as_bytes().to_vec(),
                sig: s.sig.clone(),
            })
            .collect(),
    }
}

/// Reads a published content back into domain values.
pub fn read_content(content: TrustBundleContent) -> Result<PublishedContent, ContentError> {
    let keys = content
        .approver_keys
        .iter()
        .map(|k| ApproverKey::from_wire(&k.kid, &k.spki_der))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ContentError::ApproverKey(e.to_string()))?;
    let set = if keys.is_empty() {
        ApproverSet::none()
    } else {
        ApproverSet::new(
            keys,
            content.approver_threshold,
            content
                .quorum_tiers
                .iter()
                .map(|t| Tier {
                    max_scope_size: t.max_scope_size,
                    threshold: t.threshold,
                })
                .collect(),
            content.unbatched_destructive_per_hour,
        )
        .map_err(|e| ContentError::ApproverSet(e.to_string()))?
    };
    let signatures = content
        .approver_set_signatures
        .iter()
        .map(|s| {
            Kid::from_slice(&s.kid)
                .map(|kid| SetSignature {
                    kid,
                    sig: s.sig.clone(),
                })
                .map_err(|e| ContentError::SetSignature(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PublishedContent {
        command_signing_roots: content.command_signing_roots,
        held: HeldApproverSet {
            set,
            epoch: content.approver_set_epoch,
        },
        signatures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_without_keys_reads_back_as_no_quorum() {
        let content = content_of(&[b"root".to_vec()], &ApproverSet::none(), 0, &[]);
        let read = read_content(content).unwrap();
        assert_eq!(read.command_signing_roots, vec![b"root".to_vec()]);
        assert_eq!(read.held, HeldApproverSet::initial());
        assert!(read.signatures.is_empty());
    }

    #[test]
    fn a_key_whose_kid_is_not_its_hash_is_corrupt() {
        let mut content = content_of(&[], &ApproverSet::none(), 0, &[]);
        content.approver_keys.push(ApproverKeyEntry {
            kid: vec![0; 32],
            spki_der: b"not a key".to_vec(),
        });
        assert!(matches!(
            read_content(content),
            Err(ContentError::ApproverKey(_))
        ));
    }

    #[test]
    fn a_short_signature_kid_is_corrupt() {
        let mut content = content_of(&[], &ApproverSet::none(), 0, &[]);
        content.approver_set_signatures.push(QuorumSignature {
            kid: vec![1; 3],
            sig: Vec::new(),
        });
        assert!(matches!(
            read_content(content),
            Err(ContentError::SetSignature(_))
        ));
    }
}
