//! The audit key, C2SP signed notes and checkpoints: round trips and refusals.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use domain::audit::checkpoint::{audit_origin, Checkpoint, CheckpointError};
use domain::audit::key::{AuditPublicKey, AuditSigner, KeyError, KeyPin};
use domain::audit::merkle::leaf_hash;
use domain::audit::note::{open_note, sign_note, Note, NoteError};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use sha2::{Digest, Sha256};

fn signer() -> AuditSigner {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
    AuditSigner::from_pkcs8(pkcs8.as_ref(), &rng).unwrap()
}

const ORIGIN: &str = "example.org/audit/tenant-1";

fn checkpoint() -> Checkpoint {
    Checkpoint {
        origin: ORIGIN.to_string(),
        size: 42,
        root: leaf_hash(b"root"),
    }
}

#[test]
fn key_id_pin_and_verifier_key() {
    let s = signer();
    let key = s.public_key();
    let spki = key.spki_der();
    assert_eq!(spki.len(), 91);
    // C2SP signed-note, type 0x02: key ID = SHA-256(SPKI DER)[:4].
    assert_eq!(key.key_id(), Sha256::digest(spki)[..4]);
    // Pin: sha256/<base64 std of SHA-256(SPKI DER)>.
    let pin = key.pin();
    assert_eq!(
        pin.to_string(),
        format!("sha256/{}", B64.encode(Sha256::digest(spki)))
    );
    assert_eq!(pin.to_string().parse::<KeyPin>().unwrap(), pin);
    key.check_pin(&pin).unwrap();
    let other = signer();
    assert!(matches!(
        other.public_key().check_pin(&pin),
        Err(KeyError::PinMismatch { .. })
    ));
    // Verifier key string.
    let vkey = key.to_verifier_key();
    assert!(vkey.starts_with(&format!("bc-audit+{}+", hex::encode(key.key_id()))));
    assert_eq!(AuditPublicKey::parse_verifier_key(&vkey).unwrap(), *key);
    assert_eq!(AuditPublicKey::from_spki_der(spki).unwrap(), *key);
}

#[test]
fn bad_pins_and_verifier_keys_are_refused() {
    for bad in [
        "",
        "sha256/",
        "sha1/AAAA",
        "sha256/not base64!",
        "sha256/AAAA",
        "SHA256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
    ] {
        assert!(
            matches!(bad.parse::<KeyPin>(), Err(KeyError::BadPin(_))),
            "{bad:?}"
        );
    }
    let key = signer().public_key().clone();
    let vkey = key.to_verifier_key();
    let parts: Vec<&str> = vkey.splitn(3, '+').collect();
    // Wrong tag, wrong id, wrong type byte, trailing field, not SPKI.
    assert!(
        AuditPublicKey::parse_verifier_key(&format!("other+{}+{}", parts[1], parts[2])).is_err()
    );
    assert!(matches!(
        AuditPublicKey::parse_verifier_key(&format!("bc-audit+00000000+{}", parts[2])),
        Err(KeyError::VerifierKeyIdMismatch { .. })
    ));
    let mut raw = B64.decode(parts[2]).unwrap();
    raw[0] = 0x01;
    assert!(AuditPublicKey::parse_verifier_key(&format!(
        "bc-audit+{}+{}",
        parts[1],
        B64.encode(&raw)
    ))
    .is_err());
    assert!(AuditPublicKey::parse_verifier_key(&format!("{vkey}+x")).is_err());
    assert_eq!(
        AuditPublicKey::from_spki_der(&key.spki_der()[1..]),
        Err(KeyError::NotP256Spki)
    );
}

#[test]
fn note_sign_and_open_round_trip() {
    let s = signer();
    let rng = SystemRandom::new();
    let text = "hello\nworld\n";
    let note = sign_note(text, "example.org/k", &s, &rng).unwrap();
    assert!(note.starts_with("hello\nworld\n\n\u{2014} example.org/k "));
    assert!(note.ends_with('\n'));
    // Signature payload is key ID || DER signature.
    let parsed = Note::parse(&note).unwrap();
    assert_eq!(parsed.text, text);
    assert_eq!(parsed.signatures.len(), 1);
    assert_eq!(parsed.signatures[0].key_id, s.public_key().key_id());
    assert_eq!(parsed.signatures[0].signature[0], 0x30);
    assert_eq!(
        open_note(&note, "example.org/k", s.public_key()).unwrap(),
        text
    );
}

#[test]
fn checkpoint_round_trip_and_body() {
    let s = signer();
    let rng = SystemRandom::new();
    let cp = checkpoint();
    assert_eq!(
        cp.body(),
        format!("{ORIGIN}\n42\n{}\n", B64.encode(leaf_hash(b"root")))
    );
    let note = cp.sign(&s, &rng).unwrap();
    assert_eq!(Checkpoint::open(&note, ORIGIN, s.public_key()).unwrap(), cp);
    assert_eq!(
        audit_origin("example.org", "tenant-1").unwrap(),
        ORIGIN.to_string()
    );
    assert!(audit_origin("example.org", "a b").is_err());
    assert!(audit_origin("example.org", "a+b").is_err());
    assert!(audit_origin("", "t").is_err());
}

#[test]
fn a_note_signed_by_another_key_is_refused() {
    let (s, other) = (signer(), signer());
    let rng = SystemRandom::new();
    let forged = checkpoint().sign(&other, &rng).unwrap();
    assert!(matches!(
        Checkpoint::open(&forged, ORIGIN, s.public_key()),
        Err(CheckpointError::Note(NoteError::UnknownKeyId { .. }))
    ));
    // Signed by another key under another name: no signature from the pinned key at all.
    let elsewhere = sign_note(&checkpoint().body(), "other.example/log", &other, &rng).unwrap();
    assert!(matches!(
        Checkpoint::open(&elsewhere, ORIGIN, s.public_key()),
        Err(CheckpointError::Note(NoteError::NotSignedByKey { .. }))
    ));
    // Our signature plus a stranger's under our name: refused (strict, see note.rs).
    let ours = checkpoint().sign(&s, &rng).unwrap();
    let theirs = checkpoint().sign(&other, &rng).unwrap();
    let both = format!("{ours}{}", theirs.rsplit_once("\n\n").unwrap().1);
    assert!(matches!(
        Checkpoint::open(&both, ORIGIN, s.public_key()),
        Err(CheckpointError::Note(NoteError::UnknownKeyId { .. }))
    ));
    // A cosignature under another name is ignored.
    let cosig = sign_note(&checkpoint().body(), "witness.example/w1", &other, &rng).unwrap();
    let with_cosig = format!("{ours}{}", cosig.rsplit_once("\n\n").unwrap().1);
    assert_eq!(
        Checkpoint::open(&with_cosig, ORIGIN, s.public_key()).unwrap(),
        checkpoint()
    );
}

#[test]
fn an_altered_signature_or_text_is_refused() {
    let s = signer();
    let rng = SystemRandom::new();
    let note = checkpoint().sign(&s, &rng).unwrap();
    let (text, line) = note.rsplit_once("\n\n").unwrap();
    let b64 = line.trim_end().rsplit_once(' ').unwrap().1;
    let mut raw = B64.decode(b64).unwrap();
    let last = raw.len() - 1;
    raw[last] ^= 1;
    let altered = format!("{text}\n\n\u{2014} {ORIGIN} {}\n", B64.encode(&raw));
    assert!(matches!(
        Checkpoint::open(&altered, ORIGIN, s.public_key()),
        Err(CheckpointError::Note(NoteError::BadSignature { .. }))
    ));
    // The text changed under an intact signature.
    let grown = note.replacen("\n42\n", "\n43\n", 1);
    assert!(matches!(
        Checkpoint::open(&grown, ORIGIN, s.public_key()),
        Err(CheckpointError::Note(NoteError::BadSignature { .. }))
    ));
    // A valid note for another origin.
    let other_origin = Checkpoint {
        origin: "example.org/audit/tenant-2".into(),
        ..checkpoint()
    }
    .sign(&s, &rng)
    .unwrap();
    assert!(Checkpoint::open(&other_origin, ORIGIN, s.public_key()).is_err());
}

#[test]
fn malformed_notes_are_refused() {
    let s = signer();
    let rng = SystemRandom::new();
    let note = checkpoint().sign(&s, &rng).unwrap();
    let key = s.public_key();
    let (text, line) = note.rsplit_once("\n\n").unwrap();
    let text = format!("{text}\n");
    let cases: Vec<(String, &str)> = vec![
        (text.clone(), "no signature block"),
        (format!("{text}\n"), "empty signature block"),
        (format!("{text}\n{}", line.trim_end()), "no final newline"),
        (
            format!("{text}\n{}", line.replacen('\u{2014}', "--", 1)),
            "not an em dash",
        ),
        (
            format!("{text}\n{}", line.replacen(' ', "", 1)),
            "no space after dash",
        ),
        (
            format!("{text}\n\u{2014} {ORIGIN} AAAA\n"),
            "short signature",
        ),
        (format!("{text}\n\u{2014} {ORIGIN} !!!!\n"), "not base64"),
        (format!("{text}\n\u{2014} {ORIGIN}\n"), "no signature"),
        (format!("{text}\n{line}\n"), "blank line after signatures"),
        (note.replacen("42", "4\t2", 1), "control character"),
        (note.replacen('\n', "\r\n", 1), "carriage return"),
    ];
    for (bad, why) in cases {
        assert!(open_note(&bad, ORIGIN, key).is_err(), "accepted: {why}");
    }
    let many = format!("{text}\n{}", line.repeat(101));
    assert!(matches!(
        Note::parse(&many),
        Err(NoteError::TooManySignatures(_))
    ));
}

#[test]
fn malformed_checkpoint_bodies_are_refused() {
    let root = B64.encode([7u8; 32]);
    let bad = [
        format!("{ORIGIN}\n42\n{root}"),
        format!("{ORIGIN}\n042\n{root}\n"),
        format!("{ORIGIN}\n-1\n{root}\n"),
        format!("{ORIGIN}\n+1\n{root}\n"),
        format!("{ORIGIN}\n\n{root}\n"),
        format!("{ORIGIN}\n18446744073709551616\n{root}\n"),
        format!("{ORIGIN}\n42\n{}\n", B64.encode([7u8; 31])),
        format!("{ORIGIN}\n42\n{}\n", &root[..43]),
        format!("{ORIGIN}\n42\n{root}\nextension\n"),
        format!("\n42\n{root}\n"),
        format!("a b\n42\n{root}\n"),
        format!("{ORIGIN}\n42\n"),
    ];
    for body in bad {
        assert!(Checkpoint::parse(&body).is_err(), "accepted {body:?}");
    }
    assert_eq!(
        Checkpoint::parse(&format!("{ORIGIN}\n0\n{root}\n"))
            .unwrap()
            .size,
        0
    );
}
