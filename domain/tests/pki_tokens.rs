//! Sealed join tokens and purpose-bound signatures.

use domain::pki::csr::{build_csr, VerifiedCsr};
use domain::pki::keys::{KeyError, KeyRole, PrivateKey};
use domain::pki::spiffe::NodeId;
use domain::pki::statement::{
    self, check_clock_window, ClockWindowError, JoinResponseStatement, RenewPop, Statement,
    StatementError, X509Pop,
};
use domain::pki::token::{TokenHash, TokenSecret};
use domain::pki::token_seal::{seal_token, JoinEncryptionKey, SealError, SealedToken};
use time::OffsetDateTime;

fn join_key() -> JoinEncryptionKey {
    JoinEncryptionKey::new(PrivateKey::generate(KeyRole::JoinEncryption).unwrap()).unwrap()
}

fn csr_sha256() -> [u8; 32] {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    *VerifiedCsr::verify(&build_csr(&key).unwrap())
        .unwrap()
        .sha256()
}

#[test]
fn pki_token_seal_open_round_trip() {
    let server = join_key();
    let secret = TokenSecret::generate().unwrap();
    let stored: TokenHash = secret.hash();
    let csr = csr_sha256();
    let sealed = seal_token(server.public_key(), &secret, &csr).unwrap();
    assert_eq!(sealed.as_bytes()[0], 1);
    assert_eq!(sealed.as_bytes().len(), 1 + 65 + 12 + 48 + 16);
    // travels as base64url
    let wire = SealedToken::from_base64url(&sealed.to_base64url()).unwrap();
    let opened = server.open(&wire, &csr).unwrap();
    assert_eq!(opened, secret);
    assert!(stored.matches(&opened));
    // two seals of the same token differ (fresh ephemeral key and nonce)
    assert_ne!(
        seal_token(server.public_key(), &secret, &csr).unwrap(),
        sealed
    );
}

#[test]
fn pki_token_bound_to_csr_and_recipient() {
    let server = join_key();
    let secret = TokenSecret::generate().unwrap();
    let csr = csr_sha256();
    let sealed = seal_token(server.public_key(), &secret, &csr).unwrap();
    assert_eq!(
        server.open(&sealed, &csr_sha256()).unwrap_err(),
        SealError::DoesNotOpen
    );
    assert_eq!(
        join_key().open(&sealed, &csr).unwrap_err(),
        SealError::DoesNotOpen
    );
}

#[test]
fn pki_token_tampering_refused() {
    let server = join_key();
    let csr = csr_sha256();
    let sealed = seal_token(server.public_key(), &TokenSecret::generate().unwrap(), &csr).unwrap();
    let bytes = sealed.as_bytes().to_vec();
    // every byte of the nonce, ciphertext and tag is covered
    for i in 66..bytes.len() {
        let mut t = bytes.clone();
        t[i] ^= 0x01;
        let t = SealedToken::from_bytes(&t).unwrap();
        assert_eq!(
            server.open(&t, &csr).unwrap_err(),
            SealError::DoesNotOpen,
            "byte {i}"
        );
    }
    // a changed ephemeral key is either off the curve or opens nothing
    let mut t = bytes.clone();
    t[10] ^= 0x01;
    let err = server
        .open(&SealedToken::from_bytes(&t).unwrap(), &csr)
        .unwrap_err();
    assert!(matches!(
        err,
        SealError::BadEphemeralKey | SealError::DoesNotOpen
    ));
    // shape
    let mut v2 = bytes.clone();
    v2[0] = 2;
    assert_eq!(
        SealedToken::from_bytes(&v2).unwrap_err(),
        SealError::Malformed
    );
    assert_eq!(
        SealedToken::from_bytes(&bytes[..90]).unwrap_err(),
        SealError::Malformed
    );
}

#[test]
fn pki_only_the_encryption_key_opens_tokens() {
    let signing = PrivateKey::generate(KeyRole::JoinSigning).unwrap();
    assert_eq!(
        JoinEncryptionKey::new(signing).unwrap_err(),
        KeyError::WrongRole {
            expected: KeyRole::JoinEncryption,
            actual: KeyRole::JoinSigning
        }
    );
}

fn renew(node: &str, t: u64) -> RenewPop {
    RenewPop {
        csr_sha256: [7; 32],
        node_id: NodeId::new(node).unwrap(),
        client_time_ms: t,
    }
}

#[test]
fn pki_purpose_bound_signatures() {
    let node = PrivateKey::generate(KeyRole::Node).unwrap();
    let proof = renew("node_1", 1_790_000_000_000);
    let sig = statement::sign(&node, &proof).unwrap();
    statement::verify(node.public_key(), &proof, &sig).unwrap();

    // the same fields under another purpose do not verify
    let as_x509pop = X509Pop {
        csr_sha256: proof.csr_sha256,
        node_id: proof.node_id.clone(),
        client_time_ms: proof.client_time_ms,
    };
    assert_eq!(
        statement::verify(node.public_key(), &as_x509pop, &sig).unwrap_err(),
        StatementError::BadSignature { purpose: "x509pop" }
    );
    assert_ne!(as_x509pop.replay_key(), proof.replay_key());

    // any bound field changed
    for other in [
        renew("node_2", proof.client_time_ms),
        renew("node_1", proof.client_time_ms + 1),
    ] {
        assert!(statement::verify(node.public_key(), &other, &sig).is_err());
    }
    // another key
    let other_key = PrivateKey::generate(KeyRole::Node).unwrap();
    assert!(statement::verify(other_key.public_key(), &proof, &sig).is_err());
}

#[test]
fn pki_each_purpose_has_one_signer_role() {
    let body = b"encoded JoinResponseBody";
    let stmt = JoinResponseStatement {
        csr_sha256: [1; 32],
        response: body,
    };
    let join = PrivateKey::generate(KeyRole::JoinSigning).unwrap();
    let sig = statement::sign(&join, &stmt).unwrap();
    statement::verify(join.public_key(), &stmt, &sig).unwrap();
    let other_csr = JoinResponseStatement {
        csr_sha256: [2; 32],
        response: body,
    };
    assert!(statement::verify(join.public_key(), &other_csr, &sig).is_err());

    for role in [
        KeyRole::Node,
        KeyRole::JoinEncryption,
        KeyRole::NodeCa,
        KeyRole::AuditSigning,
    ] {
        let key = PrivateKey::generate(role).unwrap();
        assert!(matches!(
            statement::sign(&key, &stmt),
            Err(StatementError::WrongSigner { .. })
        ));
    }
    assert!(matches!(
        statement::sign(&join, &renew("n", 1)),
        Err(StatementError::WrongSigner { .. })
    ));
}

#[test]
fn pki_renew_window() {
    let now = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    let ms = 1_790_000_000_000u64;
    assert!(check_clock_window(ms - 60_000, now).is_ok());
    assert!(matches!(
        check_clock_window(ms - 61_000, now),
        Err(ClockWindowError::TooOld { .. })
    ));
    assert!(matches!(
        check_clock_window(ms + 61_000, now),
        Err(ClockWindowError::InFuture { .. })
    ));
}
