//! bcd's check of a Welcome's trust bundle (`bcd::trust::bundle::verify_welcome_trust`).
//!
//! Input: a selector byte, then either a whole encoded `Welcome` (even selector), or the bytes
//! to sign as the bundle (odd): the harness signs them with the fuzz join signing key, so the
//! decoding behind the signature is reached. Accepted implies: the signature verifies under the
//! pinned key, the version is the announced one, the roots are the content's, and the kept
//! `SignedTrustBundle` holds exactly the signed bytes and signature.
#![no_main]

use bcd::trust_bundle::verify_welcome_trust;
use domain::pki::statement::{sign, verify, TrustBundleStatement};
use domain::pki::Signature;
use fuzz_support::{join_signing_key, split_selector, trust_domain};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Some((selector, rest)) = split_selector(data) else {
        return;
    };
    let td = trust_domain();
    let key = join_signing_key();
    let welcome = if selector % 2 == 0 {
        let Ok(w) = proto::Welcome::decode(rest) else {
            return;
        };
        w
    } else {
        let statement = TrustBundleStatement {
            trust_domain: td.as_str(),
            bundle: rest,
        };
        let signature = sign(key, &statement).expect("the join signing key signs");
        let version = proto::TrustBundle::decode(rest).map_or(1, |b| b.version);
        proto::Welcome {
            server_time_ms: 0,
            trust_version: version,
            signed_trust_bundle: rest.to_vec(),
            trust_bundle_signature: signature.as_bytes().to_vec(),
        }
    };
    let Ok(verified) = verify_welcome_trust(key.public_key(), &td, &welcome) else {
        return;
    };
    let Some(bundle) = verified else {
        assert_eq!(welcome.trust_version, 0);
        assert!(welcome.signed_trust_bundle.is_empty());
        return;
    };
    let signature = Signature::from_bytes(&welcome.trust_bundle_signature).expect("64 bytes");
    let statement = TrustBundleStatement {
        trust_domain: td.as_str(),
        bundle: &welcome.signed_trust_bundle,
    };
    assert!(verify(key.public_key(), &statement, &signature).is_ok());
    assert_eq!(bundle.version, welcome.trust_version);
    let roots = proto::TrustBundleRoots::decode(bundle.content.as_slice()).expect("decodes");
    assert_eq!(roots.command_signing_roots, bundle.roots);
    let kept = proto::SignedTrustBundle::decode(bundle.signed.as_slice()).expect("decodes");
    assert_eq!(kept.bundle, welcome.signed_trust_bundle);
    assert_eq!(kept.signature, welcome.trust_bundle_signature);
});
