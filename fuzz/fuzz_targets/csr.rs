//! The CSR check (`domain::pki::VerifiedCsr::verify`): any bytes in, a verified P-256 request
//! or a typed refusal out. Accepted implies it re-verifies to the same value, keeps the exact
//! bytes and their SHA-256, and its key reads back from its own SPKI.
#![no_main]

use domain::pki::{PublicKey, VerifiedCsr};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

fuzz_target!(|data: &[u8]| {
    let Ok(csr) = VerifiedCsr::verify(data) else {
        return;
    };
    assert_eq!(csr.der(), data, "a verified CSR keeps its bytes exactly");
    let digest: [u8; 32] = Sha256::digest(data).into();
    assert_eq!(csr.sha256(), &digest);
    let again = VerifiedCsr::verify(csr.der()).expect("an accepted CSR re-verifies");
    assert_eq!(again, csr);
    let key = PublicKey::from_spki_der(csr.spki_der()).expect("its key reads back");
    assert_eq!(&key, csr.public_key());
});
