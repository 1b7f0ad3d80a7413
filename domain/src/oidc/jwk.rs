//! P-256 public keys as JWKs (RFC 7517, 7518 section 6.2) and their RFC 7638 thumbprints, which
//! are the issuer's key ids.

use sha2::{Digest, Sha256};

use crate::pki::encoding::{b64url, p256_point_of_spki};

/// The `x` and `y` coordinates (32 bytes each) of a P-256 SubjectPublicKeyInfo, if it is one.
pub fn p256_xy(spki_der: &[u8]) -> Option<([u8; 32], [u8; 32])> {
    let point = p256_point_of_spki(spki_der)?;
    p256::PublicKey::from_sec1_bytes(point).ok()?;
    let x = point.get(1..33)?.try_into().ok()?;
    let y = point.get(33..65)?.try_into().ok()?;
    Some((x, y))
}

/// The RFC 7638 thumbprint: unpadded base64url of the SHA-256 of the JWK's required members in
/// lexicographic order, no whitespace (`{"crv":"P-256","kty":"EC","x":"…","y":"…"}`).
pub fn jwk_thumbprint(x: &[u8; 32], y: &[u8; 32]) -> String {
    let canonical = format!(
        r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
        b64url(x),
        b64url(y)
    );
    b64url(&Sha256::digest(canonical.as_bytes()))
}

/// The key id of a P-256 SubjectPublicKeyInfo, if it is one.
pub fn kid_of(spki_der: &[u8]) -> Option<String> {
    p256_xy(spki_der).map(|(x, y)| jwk_thumbprint(&x, &y))
}

/// The public JWK of a signing key: `kty`, `crv`, `x`, `y`, `kid`, `use` (`sig`), `alg` (`ES256`).
pub fn public_jwk(kid: &str, spki_der: &[u8]) -> Option<serde_json::Value> {
    let (x, y) = p256_xy(spki_der)?;
    Some(serde_json::json!({
        "kty": "EC",
        "crv": "P-256",
        "x": b64url(&x),
        "y": b64url(&y),
        "kid": kid,
        "use": "sig",
        "alg": "ES256",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7638 has no P-256 example: the expected value was computed with Python's hashlib
    /// over the canonical member order, for the P-256 key of RFC 7515 appendix A.3.
    #[test]
    fn the_thumbprint_hashes_the_members_in_order() {
        let x = crate::pki::encoding::b64url_decode("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU")
            .expect("x");
        let y = crate::pki::encoding::b64url_decode("x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0")
            .expect("y");
        let t = jwk_thumbprint(&x.try_into().expect("32"), &y.try_into().expect("32"));
        assert_eq!(t, "oKIywvGUpTVTyxMQ3bwIIeQUudfr_CkLMjCE19ECD-U");
    }
}
