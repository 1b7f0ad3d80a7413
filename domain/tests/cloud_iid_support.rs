//! Test support for `cloud-iid`: a cloud of the test's own. RSA keys it made, a JWKS of them,
//! GCP- and OIDC-style tokens it signs, AWS-style identity documents with their signature under
//! a self-signed certificate (rcgen), and Azure-style PKCS#7 attested data (cms). Shared by the
//! domain, commands and cli tests (`#[path]`).

#![allow(dead_code)]

use std::sync::OnceLock;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use der::{Decode as _, Encode as _};
use rsa::pkcs1::EncodeRsaPrivateKey as _;
use rsa::pkcs8::EncodePrivateKey as _;
use rsa::traits::PublicKeyParts as _;
use rsa::{Pkcs1v15Sign, RsaPrivateKey};
use sha2::{Digest as _, Sha256};

/// rand_core on ring's system random generator.
struct SystemRng;

impl rand_core::RngCore for SystemRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), dest)
            .expect("the system random generator");
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rand_core::CryptoRng for SystemRng {}

/// A signing key of the test's cloud, with its `kid`.
pub struct CloudKey {
    pub key: RsaPrivateKey,
    pub kid: String,
}

fn make(kid: &str) -> CloudKey {
    CloudKey {
        key: RsaPrivateKey::new(&mut SystemRng, 2048).expect("an RSA-2048 key"),
        kid: kid.to_owned(),
    }
}

/// The cloud's key (made once per test binary).
pub fn key() -> &'static CloudKey {
    static KEY: OnceLock<CloudKey> = OnceLock::new();
    KEY.get_or_init(|| make("test-key-1"))
}

/// Another key nobody configured (for `signature`).
pub fn other_key() -> &'static CloudKey {
    static KEY: OnceLock<CloudKey> = OnceLock::new();
    KEY.get_or_init(|| make("test-key-1"))
}

impl CloudKey {
    /// The JWKS JSON publishing this key.
    pub fn jwks(&self) -> Vec<u8> {
        let public = self.key.to_public_key();
        serde_json::to_vec(&serde_json::json!({"keys": [{
            "kty": "RSA",
            "alg": "RS256",
            "use": "sig",
            "kid": self.kid,
            "n": URL_SAFE_NO_PAD.encode(public.n().to_bytes_be()),
            "e": URL_SAFE_NO_PAD.encode(public.e().to_bytes_be()),
        }]}))
        .expect("JSON")
    }

    /// An RS256 JWT of `claims`.
    pub fn jwt(&self, claims: &serde_json::Value) -> String {
        let der = self.key.to_pkcs1_der().expect("PKCS#1 DER");
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(
            &header,
            claims,
            &jsonwebtoken::EncodingKey::from_rsa_der(der.as_bytes()),
        )
        .expect("a JWT")
    }

    /// RSA PKCS#1 v1.5 over SHA-256.
    pub fn sign(&self, data: &[u8]) -> Vec<u8> {
        let digest = Sha256::digest(data);
        self.key
            .sign(Pkcs1v15Sign::new::<Sha256>(), &digest)
            .expect("an RSA signature")
    }

    /// A self-signed certificate of this key (DER), valid from an hour ago for a year.
    pub fn certificate(&self, name: &str) -> Vec<u8> {
        let pkcs8 = self.key.to_pkcs8_der().expect("PKCS#8 DER");
        let pair = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(
            &rustls_pki_types::PrivatePkcs8KeyDer::from(pkcs8.as_bytes().to_vec()),
            &rcgen::PKCS_RSA_SHA256,
        )
        .expect("an rcgen key pair");
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(365);
        params
            .self_signed(&pair)
            .expect("a certificate")
            .der()
            .to_vec()
    }

    /// The certificate's PEM.
    pub fn certificate_pem(&self, name: &str) -> String {
        let body = STANDARD.encode(self.certificate(name));
        let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
        for chunk in body.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
        out
    }
}

/// Seconds since the epoch of `t`.
pub fn secs(t: time::OffsetDateTime) -> i64 {
    t.unix_timestamp()
}

/// GCP's identity token claims for (project, instance), issued at `iat`.
pub fn gcp_claims(audience: &str, project: &str, instance: &str, iat: i64) -> serde_json::Value {
    serde_json::json!({
        "iss": "https://accounts.google.com",
        "aud": audience,
        "sub": "107517467455664443765",
        "azp": "107517467455664443765",
        "iat": iat,
        "exp": iat + 3600,
        "google": {"compute_engine": {
            "project_id": project,
            "project_number": 123456789,
            "zone": "europe-west1-b",
            "instance_id": instance,
            "instance_name": "vm-1",
            "instance_creation_timestamp": iat - 100,
        }},
    })
}

/// An AWS identity document's text for (account, instance), pending since `pending`.
pub fn aws_document(account: &str, instance: &str, pending: time::OffsetDateTime) -> String {
    let pending = pending
        .replace_nanosecond(0)
        .expect("zero nanoseconds")
        .format(&time::format_description::well_known::Rfc3339)
        .expect("RFC 3339");
    serde_json::to_string_pretty(&serde_json::json!({
        "accountId": account,
        "architecture": "x86_64",
        "availabilityZone": "us-east-1a",
        "imageId": "ami-0123456789abcdef0",
        "instanceId": instance,
        "instanceType": "t3.micro",
        "pendingTime": pending,
        "privateIp": "10.0.0.12",
        "region": "us-east-1",
        "version": "2017-09-30",
    }))
    .expect("JSON")
}

/// Azure's `createdOn` format.
pub fn azure_time(t: time::OffsetDateTime) -> String {
    format!(
        "{:02}/{:02}/{:02} {:02}:{:02}:{:02} -0000",
        u8::from(t.month()),
        t.day(),
        t.year() % 100,
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Azure's attested data content for (subscription, vm), created at `created`.
pub fn azure_content(subscription: &str, vm: &str, created: time::OffsetDateTime) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "licenseType": "",
        "nonce": "20201130-211924",
        "plan": {"name": "", "product": "", "publisher": ""},
        "sku": "18.04-LTS",
        "subscriptionId": subscription,
        "timeStamp": {
            "createdOn": azure_time(created),
            "expiresOn": azure_time(created + time::Duration::hours(6)),
        },
        "vmId": vm,
    }))
    .expect("JSON")
}

const OID_DATA: &str = "1.2.840.113549.1.7.1";
const OID_SIGNED_DATA: &str = "1.2.840.113549.1.7.2";
const OID_SHA256: &str = "2.16.840.1.101.3.4.2.1";
const OID_RSA: &str = "1.2.840.113549.1.1.1";

fn alg(oid: &str, null: bool) -> x509_cert::spki::AlgorithmIdentifierOwned {
    x509_cert::spki::AlgorithmIdentifierOwned {
        oid: der::oid::ObjectIdentifier::new_unwrap(oid),
        parameters: if null {
            der::Any::encode_from(&der::asn1::Null).ok()
        } else {
            None
        },
    }
}

/// A base64 PKCS#7 SignedData of `content`, signed by `signer` with `certificate` (DER) in it.
pub fn azure_document(content: &[u8], signer: &CloudKey, certificate: &[u8]) -> String {
    use cms::cert::{CertificateChoices, IssuerAndSerialNumber};
    use cms::content_info::{CmsVersion, ContentInfo};
    use cms::signed_data::{
        CertificateSet, EncapsulatedContentInfo, SignedData, SignerIdentifier, SignerInfo,
        SignerInfos,
    };
    let cert = x509_cert::Certificate::from_der(certificate).expect("a certificate");
    let info = SignerInfo {
        version: CmsVersion::V1,
        sid: SignerIdentifier::IssuerAndSerialNumber(IssuerAndSerialNumber {
            issuer: cert.tbs_certificate.issuer.clone(),
            serial_number: cert.tbs_certificate.serial_number.clone(),
        }),
        digest_alg: alg(OID_SHA256, false),
        signed_attrs: None,
        signature_algorithm: alg(OID_RSA, true),
        signature: der::asn1::OctetString::new(signer.sign(content)).expect("octets"),
        unsigned_attrs: None,
    };
    let sd = SignedData {
        version: CmsVersion::V1,
        digest_algorithms: vec![alg(OID_SHA256, false)].try_into().expect("a set"),
        encap_content_info: EncapsulatedContentInfo {
            econtent_type: der::oid::ObjectIdentifier::new_unwrap(OID_DATA),
            econtent: Some(
                der::Any::encode_from(&der::asn1::OctetString::new(content).expect("octets"))
                    .expect("any"),
            ),
        },
        certificates: Some(CertificateSet(
            vec![CertificateChoices::Certificate(cert)]
                .try_into()
                .expect("a set"),
        )),
        crls: None,
        signer_infos: SignerInfos(vec![info].try_into().expect("a set")),
    };
    let ci = ContentInfo {
        content_type: der::oid::ObjectIdentifier::new_unwrap(OID_SIGNED_DATA),
        content: der::Any::encode_from(&sd).expect("any"),
    };
    STANDARD.encode(ci.to_der().expect("DER"))
}
