//! Signed parts: the exact bytes every quorum signature covers, and its verification.
//!
//! Spec ("Signed intent" and DESIGN "Crypto and PKI"): every signature names its purpose and what
//! binds it, so no signature can be replayed as another. "Changing the approver set": set
//! signatures are "purpose approver-set over [uint64_be(epoch), SHA-256(approverSetInput),
//! trust_domain]"; "The destructive-batch quorum": approvals are "signed under the purpose
//! batch-approval, and the signed parts end with the deployment's trust domain".
//!
//! The spec names the purpose and the parts but not how they are framed. We frame them as
//!
//! ```text
//! signing input = lp(purpose) ‖ lp(part_1) ‖ … ‖ lp(part_n)
//! lp(x)         = uint32_be(len(x)) ‖ x
//! ```
//!
//! the same length prefix as `approverSetInput` and the scope leaves. Every element is
//! length-prefixed, so the framing is injective: no two (purpose, parts) lists share bytes.
//!
//! Signatures are ECDSA P-256 with SHA-256 in ASN.1 DER (ring's `ECDSA_P256_SHA256_ASN1`), the
//! form `openssl dgst -sha256 -sign`, Go's `ecdsa.SignASN1` and Node's `crypto.sign` produce, so an
//! approver can sign offline with ordinary tools. The spec does not fix the form; this is our
//! choice. ring is the verifier because it is several times faster than RustCrypto `p256`.

use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_ASN1};

/// The purpose of an approver-set signature.
pub const PURPOSE_APPROVER_SET: &str = "approver-set";
/// The purpose of a batch approval.
pub const PURPOSE_BATCH_APPROVAL: &str = "batch-approval";

/// Appends `lp(bytes)`: the length as a big-endian u32, then the bytes.
///
/// Callers pass only values whose length the types bound far below 4 GiB (keys, digests, trust
/// domains, validated subjects and kinds).
pub(crate) fn put_lp(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    debug_assert!(
        len < u32::MAX,
        "length prefix overflow: callers bound their values"
    );
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Frames a purpose and its parts as `lp(purpose) ‖ lp(part_1) ‖ … ‖ lp(part_n)`.
pub fn signed_parts(purpose: &str, parts: &[&[u8]]) -> Vec<u8> {
    let total = 4 + purpose.len() + parts.iter().map(|p| 4 + p.len()).sum::<usize>();
    let mut out = Vec::with_capacity(total);
    put_lp(&mut out, purpose.as_bytes());
    for part in parts {
        put_lp(&mut out, part);
    }
    out
}

/// Verifies an ASN.1 DER ECDSA P-256/SHA-256 signature by an uncompressed SEC1 point.
pub(crate) fn verify_p256(point: &[u8], message: &[u8], signature: &[u8]) -> bool {
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, point)
        .verify(message, signature)
        .is_ok()
}
