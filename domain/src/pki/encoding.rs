//! Small encodings shared by the PKI modules: length prefixes, PEM, base64, SHA-256 and the
//! fixed DER prefix of a P-256 SubjectPublicKeyInfo.
//!
//! Everything here is internal plumbing; the public types of the other modules are the API.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// DER of `SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING (0 unused bits) ... }`
/// up to the 65-byte uncompressed point. Every P-256 SPKI this crate accepts is exactly this
/// prefix followed by `04 || X || Y`, 91 bytes in all.
pub(crate) const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Length of an uncompressed P-256 point (`04 || X || Y`).
pub(crate) const P256_POINT_LEN: usize = 65;

/// SHA-256 of `data`.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Appends `u32_be(len(field)) || field` to `out`.
///
/// Fields longer than `u32::MAX` bytes cannot occur here (they would not fit in memory as a
/// certificate, CSR or identifier), so the length is saturated rather than made an error.
pub(crate) fn put_lp(out: &mut Vec<u8>, field: &[u8]) {
    let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(field);
}

pub(crate) fn b64(data: &[u8]) -> String {
    STANDARD.encode(data)
}

pub(crate) fn b64_decode(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}

pub(crate) fn b64url(data: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(data)
}

pub(crate) fn b64url_decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

/// PEM-encodes `der` under `label`, 64 base64 characters a line, with a final newline.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    let body = b64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        // base64 output is ASCII, so every chunk is valid UTF-8.
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Decodes exactly one PEM block with `label`; surrounding whitespace is ignored, anything else
/// (another block, text before or after) is refused with `None`.
pub(crate) fn pem_decode(label: &str, text: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let text = text.trim();
    let inner = text.strip_prefix(&begin)?.strip_suffix(&end)?;
    if inner.contains("-----") {
        return None;
    }
    let body: String = inner.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    b64_decode(&body)
}

/// Every PEM block with `label` in `text`, decoded, in order; `None` when a block is cut short or
/// is not base64 (a half-written file).
pub fn pem_blocks(label: &str, text: &str) -> Option<Vec<Vec<u8>>> {
    read_pem_blocks(label, text).ok()
}

/// Every PEM block with `label` in `text`, decoded, in order, or what is wrong with the text for
/// an operator (a block cut short, a body that is not base64). Text outside the blocks is
/// ignored; no block at all is an empty list.
pub fn read_pem_blocks(label: &str, text: &str) -> Result<Vec<Vec<u8>>, String> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(&begin) {
        let after = &rest[at + begin.len()..];
        let stop = after
            .find(&end)
            .ok_or_else(|| format!("a {label} block has no END line"))?;
        let body: String = after[..stop].split_whitespace().collect();
        out.push(
            STANDARD
                .decode(body)
                .map_err(|e| format!("a {label} block is not base64: {e}"))?,
        );
        rest = &after[stop + end.len()..];
    }
    Ok(out)
}

/// Wraps an uncompressed P-256 point into its SubjectPublicKeyInfo DER.
pub(crate) fn p256_spki_from_point(point: &[u8]) -> Vec<u8> {
    let mut spki = Vec::with_capacity(P256_SPKI_PREFIX.len() + point.len());
    spki.extend_from_slice(&P256_SPKI_PREFIX);
    spki.extend_from_slice(point);
    spki
}

/// The uncompressed point of a P-256 SPKI in the one encoding this crate accepts, or `None`.
/// The point is not checked to be on the curve here; see [`super::keys::PublicKey`].
pub(crate) fn p256_point_of_spki(spki: &[u8]) -> Option<&[u8]> {
    let point = spki.strip_prefix(&P256_SPKI_PREFIX[..])?;
    (point.len() == P256_POINT_LEN && point[0] == 0x04).then_some(point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_round_trip_and_refusals() {
        let der = vec![7u8; 100];
        let pem = pem_encode("CERTIFICATE", &der);
        assert_eq!(pem_decode("CERTIFICATE", &pem), Some(der.clone()));
        assert_eq!(pem_decode("PUBLIC KEY", &pem), None);
        let two = format!("{pem}{pem}");
        assert_eq!(pem_decode("CERTIFICATE", &two), None);
    }

    #[test]
    fn lp_is_u32_big_endian() {
        let mut out = Vec::new();
        put_lp(&mut out, b"abc");
        assert_eq!(out, [0, 0, 0, 3, b'a', b'b', b'c']);
    }
}
