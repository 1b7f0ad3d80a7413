//! The crypto a TPM join cannot avoid, done alone with the crates the verifier uses: the EK
//! chain's two signature verifications (webpki's own algorithms), MakeCredential's seed
//! encryption (RSA-2048 OAEP with `rsa`, or an ephemeral P-384 ECDH with ring), the P-256
//! verifies of the quote, the certification and the CSR (ring), and the P-256 signature of the
//! certificate (ring). Everything is parsed and prepared in [`Floor::new`]; the timed
//! functions do the crypto and nothing else.

use domain::attest::tpm::attest::EcdsaSignature;
use domain::attest::tpm::public::{KeyDetail, TpmPublic};
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{self as sig, EcdsaKeyPair, UnparsedPublicKey};
use rustls_pki_types::SignatureVerificationAlgorithm;

use super::Fallible;

/// One DER element: its tag, its content, the whole element, and what follows it.
struct Tlv<'a> {
    tag: u8,
    content: &'a [u8],
    whole: &'a [u8],
    rest: &'a [u8],
}

impl<'a> Tlv<'a> {
    fn parse(input: &'a [u8]) -> Option<Tlv<'a>> {
        let (&tag, after_tag) = input.split_first()?;
        let (&first, after_len) = after_tag.split_first()?;
        let (len, body) = if first < 0x80 {
            (usize::from(first), after_len)
        } else {
            let n = usize::from(first & 0x7f);
            let bytes = after_len.get(..n)?;
            let len = bytes.iter().fold(0usize, |a, b| (a << 8) | usize::from(*b));
            (len, after_len.get(n..)?)
        };
        let header = input.len() - body.len();
        Some(Tlv {
            tag,
            content: body.get(..len)?,
            whole: input.get(..header + len)?,
            rest: body.get(len..)?,
        })
    }
}

/// A signed DER object (certificate, CSR): the signed part, the signature algorithm's
/// contents, and the signature bits.
struct Signed<'a> {
    tbs: &'a [u8],
    algorithm: &'a [u8],
    signature: &'a [u8],
}

fn signed(der: &[u8]) -> Fallible<Signed<'_>> {
    let outer = Tlv::parse(der).ok_or("not DER")?;
    let tbs = Tlv::parse(outer.content).ok_or("no signed part")?;
    let algorithm = Tlv::parse(tbs.rest).ok_or("no signature algorithm")?;
    let bits = Tlv::parse(algorithm.rest).ok_or("no signature")?;
    if bits.tag != 0x03 {
        return Err("the signature is not a BIT STRING".into());
    }
    Ok(Signed {
        tbs: tbs.whole,
        algorithm: algorithm.content,
        signature: bits.content.get(1..).ok_or("an empty BIT STRING")?,
    })
}

/// A certificate's SubjectPublicKeyInfo: the algorithm's contents and the key bits.
fn spki(cert: &[u8]) -> Fallible<(Vec<u8>, Vec<u8>)> {
    let outer = Tlv::parse(cert).ok_or("not DER")?;
    let tbs = Tlv::parse(outer.content).ok_or("no TBSCertificate")?;
    // version [0], serial, signature, issuer, validity, subject, subjectPublicKeyInfo
    let mut rest = tbs.content;
    let first = Tlv::parse(rest).ok_or("an empty TBSCertificate")?;
    if first.tag == 0xa0 {
        rest = first.rest;
    }
    for _ in 0..5 {
        rest = Tlv::parse(rest).ok_or("a short TBSCertificate")?.rest;
    }
    let info = Tlv::parse(rest).ok_or("no SubjectPublicKeyInfo")?;
    let algorithm = Tlv::parse(info.content).ok_or("no key algorithm")?;
    let bits = Tlv::parse(algorithm.rest).ok_or("no key")?;
    let key = bits.content.get(1..).ok_or("an empty key")?;
    Ok((algorithm.content.to_vec(), key.to_vec()))
}

/// One certificate signature as webpki checks it.
struct ChainSignature {
    algorithm: &'static dyn SignatureVerificationAlgorithm,
    public_key: Vec<u8>,
    message: Vec<u8>,
    signature: Vec<u8>,
}

impl ChainSignature {
    /// `cert`'s signature by `issuer`'s key, with the webpki algorithm webpki would pick.
    fn new(cert: &[u8], issuer: &[u8]) -> Fallible<ChainSignature> {
        let s = signed(cert)?;
        let (key_alg, public_key) = spki(issuer)?;
        let algorithm = webpki::ALL_VERIFICATION_ALGS
            .iter()
            .copied()
            .find(|a| {
                a.signature_alg_id().as_ref() == s.algorithm
                    && a.public_key_alg_id().as_ref() == key_alg.as_slice()
            })
            .ok_or("no webpki algorithm for the EK chain's signature")?;
        let out = ChainSignature {
            algorithm,
            public_key,
            message: s.tbs.to_vec(),
            signature: s.signature.to_vec(),
        };
        out.verify()?;
        Ok(out)
    }

    fn verify(&self) -> Fallible<()> {
        self.algorithm
            .verify_signature(&self.public_key, &self.message, &self.signature)
            .map_err(|_| "a chain signature does not verify".into())
    }
}

/// ring's randomness for the `rsa` crate.
struct RingRng(SystemRandom);

impl rand_core::RngCore for RingRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill_bytes(&mut b);
        u32::from_be_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_be_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        if self.0.fill(dest).is_err() {
            dest.fill(0);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rand_core::CryptoRng for RingRng {}

/// The EK's seed encryption.
enum Seed {
    /// RSA-2048 OAEP-SHA-256 of a 32-byte seed (label "IDENTITY\0").
    Rsa { modulus: Vec<u8>, exponent: u32 },
    /// Ephemeral ECDH with the P-384 EK point.
    P384 { point: Vec<u8> },
}

/// A P-256 ECDSA verification.
struct Verify {
    algorithm: &'static sig::EcdsaVerificationAlgorithm,
    point: Vec<u8>,
    message: Vec<u8>,
    signature: Vec<u8>,
}

impl Verify {
    /// A TPMT_SIGNATURE (ECDSA-SHA256) by `point` over `message`, as r || s.
    fn tpm(point: &[u8], message: &[u8], signature: &[u8]) -> Fallible<Verify> {
        let parsed = EcdsaSignature::parse(signature).map_err(|e| format!("{e:?}"))?;
        let mut rs = vec![0u8; 64];
        rs[32 - parsed.r.len()..32].copy_from_slice(&parsed.r);
        rs[64 - parsed.s.len()..].copy_from_slice(&parsed.s);
        let out = Verify {
            algorithm: &sig::ECDSA_P256_SHA256_FIXED,
            point: point.to_vec(),
            message: message.to_vec(),
            signature: rs,
        };
        out.verify()?;
        Ok(out)
    }

    fn verify(&self) -> Fallible<()> {
        UnparsedPublicKey::new(self.algorithm, &self.point)
            .verify(&self.message, &self.signature)
            .map_err(|_| "a P-256 signature does not verify".into())
    }
}

/// Everything prepared for the floor's operations.
pub struct Floor {
    chain: Vec<ChainSignature>,
    seed: Seed,
    quote: Verify,
    certify: Verify,
    csr: Verify,
    ca: EcdsaKeyPair,
    tbs: Vec<u8>,
    rng: SystemRandom,
}

/// What [`Floor::new`] reads.
pub struct FloorInput<'a> {
    pub ek_public: &'a [u8],
    pub ek_certificate: &'a [u8],
    pub issuer: &'a [u8],
    pub root: &'a [u8],
    pub ak_point: &'a [u8],
    pub quote: (&'a [u8], &'a [u8]),
    pub certify: (&'a [u8], &'a [u8]),
    pub csr_der: &'a [u8],
    pub csr_point: &'a [u8],
}

impl Floor {
    pub fn new(input: &FloorInput<'_>) -> Fallible<Floor> {
        let chain = vec![
            ChainSignature::new(input.ek_certificate, input.issuer)?,
            ChainSignature::new(input.issuer, input.root)?,
        ];
        let ek = TpmPublic::parse(input.ek_public).map_err(|e| format!("{e:?}"))?;
        let seed = match &ek.detail {
            KeyDetail::Rsa {
                exponent, modulus, ..
            } => Seed::Rsa {
                modulus: modulus.clone(),
                exponent: if *exponent == 0 { 65_537 } else { *exponent },
            },
            KeyDetail::Ecc { .. } => Seed::P384 {
                point: ek.ecc_point(48).ok_or("not a P-384 EK")?,
            },
        };
        let csr = signed(input.csr_der)?;
        let csr = Verify {
            algorithm: &sig::ECDSA_P256_SHA256_ASN1,
            point: input.csr_point.to_vec(),
            message: csr.tbs.to_vec(),
            signature: csr.signature.to_vec(),
        };
        csr.verify()?;
        let rng = SystemRandom::new();
        let alg = &sig::ECDSA_P256_SHA256_ASN1_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).map_err(|_| "a CA key")?;
        let ca = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).map_err(|_| "a CA key")?;
        let floor = Floor {
            chain,
            seed,
            quote: Verify::tpm(input.ak_point, input.quote.0, input.quote.1)?,
            certify: Verify::tpm(input.ak_point, input.certify.0, input.certify.1)?,
            csr,
            ca,
            // A leaf's TBSCertificate is a few hundred bytes, as the CSR is.
            tbs: input.csr_der.to_vec(),
            rng,
        };
        floor.seed()?;
        Ok(floor)
    }

    /// The EK chain's two signature verifications.
    pub fn chain(&self) -> Fallible<()> {
        for s in &self.chain {
            s.verify()?;
        }
        Ok(())
    }

    /// MakeCredential's seed: RSA-OAEP encryption, or ephemeral ECDH.
    pub fn seed(&self) -> Fallible<()> {
        match &self.seed {
            Seed::Rsa { modulus, exponent } => {
                let n = rsa::BigUint::from_bytes_be(modulus);
                let key = rsa::RsaPublicKey::new(n, rsa::BigUint::from(*exponent))?;
                let mut seed = [0u8; 32];
                self.rng.fill(&mut seed).map_err(|_| "random")?;
                let padding = rsa::Oaep::new_with_label::<sha2::Sha256, _>("IDENTITY\0");
                let out = key.encrypt(&mut RingRng(self.rng.clone()), padding, &seed)?;
                std::hint::black_box(out);
            }
            Seed::P384 { point } => {
                use ring::agreement::{self as agree, EphemeralPrivateKey};
                let private = EphemeralPrivateKey::generate(&agree::ECDH_P384, &self.rng)
                    .map_err(|_| "an ephemeral key")?;
                let public = private.compute_public_key().map_err(|_| "its public key")?;
                std::hint::black_box(public.as_ref());
                let peer = agree::UnparsedPublicKey::new(&agree::ECDH_P384, point);
                agree::agree_ephemeral(private, &peer, |z| std::hint::black_box(z.len()))
                    .map_err(|_| "ECDH with the EK")?;
            }
        }
        Ok(())
    }

    /// The quote's P-256 verification by the AK.
    pub fn quote_verify(&self) -> Fallible<()> {
        self.quote.verify()
    }

    /// The node key certification's P-256 verification by the AK.
    pub fn certify_verify(&self) -> Fallible<()> {
        self.certify.verify()
    }

    /// The CSR's P-256 verification (done by the join service, before the attestor).
    pub fn csr_verify(&self) -> Fallible<()> {
        self.csr.verify()
    }

    /// The certificate's P-256 signature (done by the join service, after the attestor).
    pub fn cert_sign(&self) -> Fallible<()> {
        let s = self.ca.sign(&self.rng, &self.tbs).map_err(|_| "signing")?;
        std::hint::black_box(s.as_ref());
        Ok(())
    }
}
