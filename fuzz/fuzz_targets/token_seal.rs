//! The sealed join token (`domain::pki::token_seal`): the wire bytes and the base64url text form
//! are parsed, then opened with the fuzz JoinService key for the fuzz CSR hash. Accepted implies:
//! the text form round-trips, what opens is a token secret that parses again, and the same
//! sealed bytes do not open for any other CSR (the seal binds the CSR).
#![no_main]

use domain::pki::token::TokenSecret;
use domain::pki::SealedToken;
use fuzz_support::{csr_sha256, join_encryption_key};
use libfuzzer_sys::fuzz_target;

fn check(sealed: &SealedToken) {
    let text = sealed.to_base64url();
    assert_eq!(
        &SealedToken::from_base64url(&text).expect("own text form parses"),
        sealed
    );
    let csr = csr_sha256();
    let Ok(secret) = join_encryption_key().open(sealed, &csr) else {
        return;
    };
    let reparsed = TokenSecret::parse(secret.expose()).expect("an opened secret parses again");
    assert!(reparsed == secret, "an opened secret parses to itself");
    let mut other = csr;
    other[0] ^= 1;
    assert!(
        join_encryption_key().open(sealed, &other).is_err(),
        "a sealed token opened for a CSR it was not bound to"
    );
}

fuzz_target!(|data: &[u8]| {
    if let Ok(sealed) = SealedToken::from_bytes(data) {
        assert_eq!(sealed.as_bytes(), data);
        check(&sealed);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(sealed) = SealedToken::from_base64url(text) {
            check(&sealed);
        }
    }
});
