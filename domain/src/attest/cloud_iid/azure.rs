//! Azure's attested data (`/metadata/attested/document`, its `signature` field): a base64
//! PKCS#7 SignedData, parsed with RustCrypto's `cms`, whose signer (named by issuer and serial,
//! its certificate carried in the message) signed the content with RSA PKCS#1 v1.5 over
//! SHA-256 (directly, or through signed attributes whose message digest is the content's). The
//! signer's certificate must be one of the configured certificates, or be issued by one of them
//! through the certificates the message carries, each valid at the request's time. The content
//! is JSON: `subscriptionId` is the account, `vmId` the instance, `timeStamp.createdOn`
//! (`MM/DD/YY HH:MM:SS -0000`) the issue time.

use base64::Engine as _;
use cms::cert::CertificateChoices;
use cms::content_info::ContentInfo;
use cms::signed_data::{SignedData, SignerIdentifier, SignerInfo};
use der::asn1::OctetString;
use der::{Decode as _, Encode as _};
use rsa::{Pkcs1v15Sign, RsaPublicKey};
use serde::Deserialize;
use x509_parser::prelude::{FromDer as _, X509Certificate};

use super::config::AzureConfig;
use super::instance::CloudIdentity;
use super::refusal::CloudIidRefusal;
use super::wire::CloudProvider;
use crate::identity::sha256;

const ID_SIGNED_DATA: der::oid::ObjectIdentifier =
    der::oid::ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.2");
const ID_SHA256: der::oid::ObjectIdentifier =
    der::oid::ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");
const ID_MESSAGE_DIGEST: der::oid::ObjectIdentifier =
    der::oid::ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.4");
/// The longest chain walked from the signer to a configured certificate.
const MAX_CHAIN: usize = 4;

/// The content's fields the attestor reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Attested {
    subscription_id: String,
    vm_id: String,
    time_stamp: TimeStamp,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TimeStamp {
    created_on: String,
}

/// Parses `MM/DD/YY HH:MM:SS ±HHMM` to µs since the epoch.
pub fn parse_created_on(text: &str) -> Option<i64> {
    let mut parts = text.split_whitespace();
    let (date, clock, offset) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let nums = |s: &str, sep: char| -> Option<Vec<u8>> {
        let v: Option<Vec<u8>> = s.split(sep).map(|p| p.parse().ok()).collect();
        v.filter(|v| v.len() == 3)
    };
    let d = nums(date, '/')?;
    let t = nums(clock, ':')?;
    let month = time::Month::try_from(d[0]).ok()?;
    let date = time::Date::from_calendar_date(2000 + i32::from(d[2]), month, d[1]).ok()?;
    let clock = time::Time::from_hms(t[0], t[1], t[2]).ok()?;
    let (sign, hhmm) = match offset.split_at_checked(1)? {
        ("+", rest) => (1i32, rest),
        ("-", rest) => (-1i32, rest),
        _ => return None,
    };
    if hhmm.len() != 4 {
        return None;
    }
    let hours: i32 = hhmm.get(..2)?.parse().ok()?;
    let minutes: i32 = hhmm.get(2..)?.parse().ok()?;
    let offset_s = sign * (hours * 3600 + minutes * 60);
    let at = time::PrimitiveDateTime::new(date, clock).assume_utc();
    Some(crate::identity::unix_us(at) - i64::from(offset_s) * 1_000_000)
}

/// The DER certificates the message carries.
fn carried(sd: &SignedData) -> Vec<Vec<u8>> {
    sd.certificates
        .iter()
        .flat_map(|set| set.0.iter())
        .filter_map(|c| match c {
            CertificateChoices::Certificate(cert) => cert.to_der().ok(),
            CertificateChoices::Other(_) => None,
        })
        .collect()
}

/// The carried certificate `info` names (issuer and serial).
fn signer_certificate(sd: &SignedData, info: &SignerInfo) -> Option<Vec<u8>> {
    let SignerIdentifier::IssuerAndSerialNumber(id) = &info.sid else {
        return None;
    };
    sd.certificates
        .iter()
        .flat_map(|set| set.0.iter())
        .find_map(|c| match c {
            CertificateChoices::Certificate(cert)
                if cert.tbs_certificate.issuer == id.issuer
                    && cert.tbs_certificate.serial_number == id.serial_number =>
            {
                cert.to_der().ok()
            }
            _ => None,
        })
}

/// What the signature covers: the DER SET of signed attributes (whose message digest must be
/// the content's), or the content itself.
fn signed_bytes(info: &SignerInfo, content: &[u8]) -> Option<Vec<u8>> {
    let Some(attrs) = &info.signed_attrs else {
        return Some(content.to_vec());
    };
    let digest = attrs
        .iter()
        .find(|a| a.oid == ID_MESSAGE_DIGEST)?
        .values
        .iter()
        .next()?
        .decode_as::<OctetString>()
        .ok()?;
    (digest.as_bytes() == sha256(content).as_slice()).then_some(())?;
    attrs.to_der().ok()
}

fn parse(der: &[u8]) -> Option<X509Certificate<'_>> {
    X509Certificate::from_der(der).ok().map(|(_, c)| c)
}

fn valid_at(cert: &X509Certificate<'_>, now: time::OffsetDateTime) -> bool {
    x509_parser::time::ASN1Time::from_timestamp(now.unix_timestamp())
        .is_ok_and(|t| cert.validity().is_valid_at(t))
}

/// Whether `issuer` issued `cert` (names and signature).
fn issued_by(cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> bool {
    cert.issuer() == issuer.subject() && cert.verify_signature(Some(issuer.public_key())).is_ok()
}

/// Whether the signer's certificate is configured, or chains to a configured one through the
/// carried certificates, every link valid at `now`.
fn trusted(
    signer: &[u8],
    carried: &[Vec<u8>],
    config: &AzureConfig,
    now: time::OffsetDateTime,
) -> bool {
    let anchors: Vec<X509Certificate<'_>> = config
        .certificates
        .iter()
        .filter_map(|d| parse(d))
        .collect();
    let pool: Vec<X509Certificate<'_>> = carried.iter().filter_map(|d| parse(d)).collect();
    let Some(mut current) = parse(signer) else {
        return false;
    };
    for _ in 0..MAX_CHAIN {
        if !valid_at(&current, now) {
            return false;
        }
        if config
            .certificates
            .iter()
            .any(|a| a.as_slice() == current.as_raw())
            || anchors.iter().any(|a| issued_by(&current, a))
        {
            return true;
        }
        match pool
            .iter()
            .find(|p| p.as_raw() != current.as_raw() && issued_by(&current, p))
        {
            Some(next) => current = next.clone(),
            None => return false,
        }
    }
    false
}

/// Verifies an attested data document.
pub fn verify(
    document: &str,
    config: &AzureConfig,
    now: time::OffsetDateTime,
) -> Result<CloudIdentity, CloudIidRefusal> {
    let compact: String = document
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|_| CloudIidRefusal::Malformed)?;
    let info = ContentInfo::from_der(&der).map_err(|_| CloudIidRefusal::Malformed)?;
    if info.content_type != ID_SIGNED_DATA {
        return Err(CloudIidRefusal::Malformed);
    }
    let sd: SignedData = info
        .content
        .decode_as()
        .map_err(|_| CloudIidRefusal::Malformed)?;
    let econtent = sd
        .encap_content_info
        .econtent
        .as_ref()
        .ok_or(CloudIidRefusal::Malformed)?;
    let content = match econtent.decode_as::<OctetString>() {
        Ok(octets) => octets.as_bytes().to_vec(),
        Err(_) => econtent.value().to_vec(),
    };
    let carried = carried(&sd);
    let verified = sd.signer_infos.0.iter().any(|signer| {
        signer.digest_alg.oid == ID_SHA256
            && signer_certificate(&sd, signer).is_some_and(|cert| {
                let Ok(key) = super::certs::rsa_key_of(&cert) else {
                    return false;
                };
                let Some(signed) = signed_bytes(signer, &content) else {
                    return false;
                };
                key_verifies(&key, &signed, signer.signature.as_bytes())
                    && trusted(&cert, &carried, config, now)
            })
    });
    if !verified {
        return Err(CloudIidRefusal::Signature);
    }
    let attested: Attested =
        serde_json::from_slice(&content).map_err(|_| CloudIidRefusal::Malformed)?;
    if attested.subscription_id.is_empty() || attested.vm_id.is_empty() {
        return Err(CloudIidRefusal::Malformed);
    }
    let issued_at_us =
        parse_created_on(&attested.time_stamp.created_on).ok_or(CloudIidRefusal::Malformed)?;
    Ok(CloudIdentity {
        provider: CloudProvider::Azure,
        account: attested.subscription_id,
        instance: attested.vm_id,
        issued_at_us,
    })
}

fn key_verifies(key: &RsaPublicKey, signed: &[u8], signature: &[u8]) -> bool {
    key.verify(
        Pkcs1v15Sign::new::<sha2::Sha256>(),
        &sha256(signed),
        signature,
    )
    .is_ok()
}
