//! The same ECDSA P-256/SHA-256 (ASN.1 DER) verification with ring, aws-lc-rs and RustCrypto
//! `p256`, over the same batch-approval-sized message and signatures, interleaved round by round
//! so the three see the same machine load. Prints the median per verify of each and the ratios.

use std::time::{Duration, Instant};

use p256::ecdsa::signature::Verifier;

const ROUNDS: usize = 41;
const PER_ROUND: usize = 200;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        &rng,
    )
    .expect("keygen");
    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        pkcs8.as_ref(),
        &rng,
    )
    .expect("pkcs8");
    use ring::signature::KeyPair;
    let point = pair.public_key().as_ref().to_vec();
    // A batch approval's signing input is about 150 bytes.
    let message = vec![0x5a; 150];
    let sig = pair.sign(&rng, &message).expect("sign").as_ref().to_vec();

    let ring_key =
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_ASN1, &point);
    let aws_key = aws_lc_rs::signature::UnparsedPublicKey::new(
        &aws_lc_rs::signature::ECDSA_P256_SHA256_ASN1,
        &point,
    );
    let rc_key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point).expect("sec1");
    let rc_sig = p256::ecdsa::Signature::from_der(&sig).expect("der");
    assert!(ring_key.verify(&message, &sig).is_ok());
    assert!(aws_key.verify(&message, &sig).is_ok());
    assert!(rc_key.verify(&message, &rc_sig).is_ok());

    let (mut ring_t, mut aws_t, mut rc_t, mut rc_parse_t) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..PER_ROUND {
            std::hint::black_box(ring_key.verify(&message, &sig).is_ok());
        }
        ring_t.push(start.elapsed() / PER_ROUND as u32);
        let start = Instant::now();
        for _ in 0..PER_ROUND {
            std::hint::black_box(aws_key.verify(&message, &sig).is_ok());
        }
        aws_t.push(start.elapsed() / PER_ROUND as u32);
        let start = Instant::now();
        for _ in 0..PER_ROUND {
            std::hint::black_box(rc_key.verify(&message, &rc_sig).is_ok());
        }
        rc_t.push(start.elapsed() / PER_ROUND as u32);
        // As the domain would use it: parse key and DER signature every time.
        let start = Instant::now();
        for _ in 0..PER_ROUND {
            let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point).expect("sec1");
            let s = p256::ecdsa::Signature::from_der(&sig).expect("der");
            std::hint::black_box(key.verify(&message, &s).is_ok());
        }
        rc_parse_t.push(start.elapsed() / PER_ROUND as u32);
    }
    let (r, a, c, cp) = (
        median(ring_t),
        median(aws_t),
        median(rc_t),
        median(rc_parse_t),
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("ECDSA P-256/SHA-256 verify, median of {ROUNDS} rounds x {PER_ROUND}:");
    println!("  ring 0.17           {:7.1} µs  (reference)", us(r));
    println!(
        "  aws-lc-rs           {:7.1} µs  ({:.2}x ring)",
        us(a),
        a.as_secs_f64() / r.as_secs_f64()
    );
    println!(
        "  p256 (RustCrypto)   {:7.1} µs  ({:.2}x ring), {:.1} µs parsing key and signature each time",
        us(c),
        c.as_secs_f64() / r.as_secs_f64(),
        us(cp)
    );
}
