//! A Welcome's signed trust bundle on real files: verified under the pinned join signing key and
//! stored in identity.json (0600) only when newer; a tampered, relabelled, foreign or wrongly
//! signed bundle is refused and leaves identity.json byte for byte as it was.

use crate::common;

use bcd::trust::bundle::{apply_welcome_trust, TrustBundleRefusal, TrustError, TrustUpdate};
use common::*;
use domain::pki::statement::{sign, TrustBundleStatement};
use domain::pki::{KeySet, PrivateKey};
use prost::Message;

/// Some TrustBundleContent bytes: field 1 (command_signing_roots) twice, field 3 (threshold).
fn content(roots: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in roots {
        out.push(0x0a);
        out.push(u8::try_from(r.len()).unwrap());
        out.extend_from_slice(r);
    }
    out.extend_from_slice(&[0x18, 0x02]);
    out
}

fn welcome_signed_by(
    key: &PrivateKey,
    version: u64,
    signed_version: u64,
    trust_domain: &str,
    content: Vec<u8>,
) -> proto::Welcome {
    let bundle = proto::TrustBundle {
        version: signed_version,
        trust_domain: trust_domain.into(),
        content,
    }
    .encode_to_vec();
    let signature = sign(
        key,
        &TrustBundleStatement {
            trust_domain,
            bundle: &bundle,
        },
    )
    .unwrap();
    proto::Welcome {
        server_time_ms: 1,
        trust_version: version,
        signed_trust_bundle: bundle,
        trust_bundle_signature: signature.as_bytes().to_vec(),
    }
}

fn welcome(ks: &KeySet, version: u64) -> proto::Welcome {
    welcome_signed_by(
        &ks.join_signing,
        version,
        version,
        ks.trust_domain.as_str(),
        content(&[b"root-one", b"root-two"]),
    )
}

fn refused(result: Result<TrustUpdate, TrustError>) -> TrustBundleRefusal {
    match result {
        Err(TrustError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_verified_newer_bundle_is_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let (data, _, _) = joined(tmp.path(), &ks, "n1");
    let key = ks.join_signing.public_key();
    let w = welcome(&ks, 3);
    assert_eq!(
        apply_welcome_trust(&data, key, &w).unwrap(),
        TrustUpdate::Stored {
            previous: 0,
            version: 3
        }
    );
    let stored = bcd::files::identity::read_stored(&data).unwrap().unwrap();
    assert_eq!(stored.trust_version, 3);
    assert_eq!(
        stored.trust_roots,
        vec![b"root-one".to_vec(), b"root-two".to_vec()]
    );
    assert_eq!(
        stored.trust_bundle,
        Some(content(&[b"root-one", b"root-two"]))
    );
    let signed =
        proto::SignedTrustBundle::decode(stored.signed_trust_bundle.unwrap().as_slice()).unwrap();
    assert_eq!(signed.bundle, w.signed_trust_bundle);
    assert_eq!(signed.signature, w.trust_bundle_signature);
    assert_eq!(data.mode("identity.json"), Some(0o600));
    // The identity still loads.
    bcd::files::identity::load(&data).unwrap();

    // The same or an older version is not taken again; a newer one is.
    let before = std::fs::read(data.identity()).unwrap();
    assert_eq!(
        apply_welcome_trust(&data, key, &welcome(&ks, 3)).unwrap(),
        TrustUpdate::NotNewer {
            held: 3,
            offered: 3
        }
    );
    assert_eq!(
        apply_welcome_trust(&data, key, &welcome(&ks, 2)).unwrap(),
        TrustUpdate::NotNewer {
            held: 3,
            offered: 2
        }
    );
    assert_eq!(std::fs::read(data.identity()).unwrap(), before);
    assert_eq!(
        apply_welcome_trust(&data, key, &welcome(&ks, 4)).unwrap(),
        TrustUpdate::Stored {
            previous: 3,
            version: 4
        }
    );
}

#[test]
fn nothing_published_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let (data, _, _) = joined(tmp.path(), &ks, "n1");
    let before = std::fs::read(data.identity()).unwrap();
    let empty = proto::Welcome {
        server_time_ms: 1,
        ..Default::default()
    };
    assert_eq!(
        apply_welcome_trust(&data, ks.join_signing.public_key(), &empty).unwrap(),
        TrustUpdate::NonePublished
    );
    assert_eq!(std::fs::read(data.identity()).unwrap(), before);
}

#[test]
fn tampered_relabelled_foreign_or_unpinned_bundles_are_refused_and_not_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let (data, _, _) = joined(tmp.path(), &ks, "n1");
    let key = ks.join_signing.public_key();
    let before = std::fs::read(data.identity()).unwrap();
    let unchanged = || assert_eq!(std::fs::read(data.identity()).unwrap(), before);

    // One byte of the signed bundle changed (a root swapped by a relay).
    let mut w = welcome(&ks, 2);
    let last = w.signed_trust_bundle.len() - 3;
    w.signed_trust_bundle[last] ^= 0x01;
    assert_eq!(
        refused(apply_welcome_trust(&data, key, &w)),
        TrustBundleRefusal::Signature
    );
    unchanged();

    // The signature changed, or missing.
    let mut w = welcome(&ks, 2);
    w.trust_bundle_signature[10] ^= 0x80;
    assert_eq!(
        refused(apply_welcome_trust(&data, key, &w)),
        TrustBundleRefusal::Signature
    );
    let mut w = welcome(&ks, 2);
    w.trust_bundle_signature.clear();
    assert_eq!(
        refused(apply_welcome_trust(&data, key, &w)),
        TrustBundleRefusal::Signature
    );
    unchanged();

    // Signed by a key other than the pinned one (another deployment's JoinService).
    let other = keyset();
    let w = welcome(&other, 2);
    let w = welcome_signed_by(
        &other.join_signing,
        2,
        2,
        ks.trust_domain.as_str(),
        w.signed_trust_bundle,
    );
    assert_eq!(
        refused(apply_welcome_trust(&data, key, &w)),
        TrustBundleRefusal::Signature
    );
    unchanged();

    // An old signed bundle relabelled with a higher version in the (unsigned) Welcome field.
    let w = welcome_signed_by(
        &ks.join_signing,
        9,
        1,
        ks.trust_domain.as_str(),
        content(&[b"old-root"]),
    );
    assert_eq!(
        refused(apply_welcome_trust(&data, key, &w)),
        TrustBundleRefusal::VersionMismatch {
            announced: 9,
            signed: 1
        }
    );
    unchanged();

    // Signed for another trust domain: the signature is bound to this node's, so it fails.
    let w = welcome_signed_by(&ks.join_signing, 2, 2, "staging.example", content(&[b"r"]));
    assert_eq!(
        refused(apply_welcome_trust(&data, key, &w)),
        TrustBundleRefusal::Signature
    );
    unchanged();

    // Signed bytes that are not a TrustBundle.
    let garbage = vec![0xff, 0xff, 0xff];
    let signature = sign(
        &ks.join_signing,
        &TrustBundleStatement {
            trust_domain: ks.trust_domain.as_str(),
            bundle: &garbage,
        },
    )
    .unwrap();
    let w = proto::Welcome {
        server_time_ms: 1,
        trust_version: 2,
        signed_trust_bundle: garbage,
        trust_bundle_signature: signature.as_bytes().to_vec(),
    };
    assert!(matches!(
        refused(apply_welcome_trust(&data, key, &w)),
        TrustBundleRefusal::Malformed(_)
    ));
    unchanged();
}
