//! The C2SP signed-note and checkpoint parsers (`domain::audit::{note, checkpoint}`) and the
//! verifier-key and pin parsers an auditor feeds them.
//!
//! Accepted implies: a parsed note prints back to exactly its bytes (one note, one text); a
//! parsed checkpoint body is exactly `body()`; text the fuzz audit key signs opens under it and
//! only under its own name; a signed checkpoint opens to itself; a verifier key prints back.
#![no_main]

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use domain::audit::{note::Note, open_note, sign_note, AuditPublicKey, Checkpoint, KeyPin};
use fuzz_support::audit_signer;
use libfuzzer_sys::fuzz_target;
use ring::rand::SystemRandom;

fn print_note(note: &Note<'_>) -> String {
    let mut out = format!("{}\n", note.text);
    for sig in &note.signatures {
        let mut raw = sig.key_id.to_vec();
        raw.extend_from_slice(&sig.signature);
        out.push_str(&format!("\u{2014} {} {}\n", sig.key_name, B64.encode(raw)));
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let key = audit_signer().public_key();
    if let Ok(note) = Note::parse(text) {
        assert_eq!(
            print_note(&note),
            text,
            "a parsed note prints back to its bytes"
        );
        if let Ok(opened) = open_note(text, "fuzz", key) {
            assert_eq!(opened, note.text);
        }
    }
    if let Ok(cp) = Checkpoint::parse(text) {
        assert_eq!(cp.body(), text, "a parsed checkpoint is its canonical body");
        let signed = cp
            .sign(audit_signer(), &SystemRandom::new())
            .expect("signs");
        let opened = Checkpoint::open(&signed, &cp.origin, key).expect("own signature opens");
        assert_eq!(opened, cp);
        let other = format!("{}x", cp.origin);
        assert!(Checkpoint::open(&signed, &other, key).is_err());
    }
    // The fuzz text as a note body: what the key signs opens to exactly that text.
    if let Ok(signed) = sign_note(text, "fuzz-key", audit_signer(), &SystemRandom::new()) {
        assert_eq!(open_note(&signed, "fuzz-key", key).expect("opens"), text);
        assert!(open_note(&signed, "other-key", key).is_err());
    }
    if let Ok(parsed) = AuditPublicKey::parse_verifier_key(text) {
        let back = AuditPublicKey::parse_verifier_key(&parsed.to_verifier_key());
        assert_eq!(back.expect("prints back").spki_der(), parsed.spki_der());
    }
    if let Ok(pin) = text.parse::<KeyPin>() {
        assert_eq!(pin.to_string().parse::<KeyPin>().ok(), Some(pin));
    }
});
