//! The PKI bundle loader (`domain::pki::open_bundle`), with and without the deployment secret.
//! Accepted implies: only a sealed bundle opened with its secret is authenticated; the public
//! half read without the secret is the same as with it; a bundle that yields keys writes back
//! (plaintext) to one that opens to the same public half and pins.
#![no_main]

use domain::pki::{open_bundle, plaintext_bundle, DeploymentSecret, LoadedBundle, Protection};
use fuzz_support::DEPLOYMENT_SECRET;
use libfuzzer_sys::fuzz_target;

fn check_loaded(loaded: &LoadedBundle, with_secret: bool) {
    assert_eq!(
        loaded.authenticated,
        with_secret && loaded.protection == Protection::Sealed,
        "authenticated exactly when a sealed bundle opened with its secret"
    );
    let Some(keys) = &loaded.keys else {
        assert!(loaded.protection == Protection::Sealed && !with_secret);
        return;
    };
    let again = plaintext_bundle(keys).expect("loaded keys write back");
    let reopened = open_bundle(&again, None).expect("a written bundle opens");
    assert_eq!(
        reopened.public.public_sha256(),
        loaded.public.public_sha256(),
        "the written public half is the one read"
    );
    assert_eq!(
        reopened.public.pins().ok(),
        loaded.public.pins().ok(),
        "the pins survive a write and a read"
    );
}

fuzz_target!(|data: &[u8]| {
    let without = open_bundle(data, None);
    if let Ok(loaded) = &without {
        check_loaded(loaded, false);
    }
    let secret = DeploymentSecret::new(DEPLOYMENT_SECRET).expect("a valid secret");
    if let Ok(loaded) = open_bundle(data, Some(&secret)) {
        check_loaded(&loaded, true);
        let public = without.expect("what opens with the secret reads without it");
        assert_eq!(public.public.public_sha256(), loaded.public.public_sha256());
    }
});
