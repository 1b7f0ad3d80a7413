//! The node CA's certificate revocation list: an RFC 5280 v2 CRL of the revoked, unexpired node
//! certificates, signed by the node CA (issue 41 item 4; docs/decisions/0088).
//!
//! Pure: the entries, the log position the list was read at, `now` and the `nextUpdate`
//! interval come in; DER comes out. The list holds each certificate's serial and revocation
//! date, ordered by serial, and the two extensions RFC 5280 §5.2 requires: authorityKeyIdentifier
//! (the node CA certificate's subject key identifier) and cRLNumber.
//!
//! The CRL number ([`CrlNumber`]) is made from the log, not kept in a table of its own: the log's
//! head position when the entries were read, times 10^16, plus `thisUpdate` in microseconds. The
//! head never goes back (the log is append-only, on every replica and across restarts), so a
//! list read later from more of the log always has a higher number; two lists read at the same
//! head hold the same revocations and are ordered by their time. A caller that knows an earlier
//! number (the file it replaces) passes it as a floor, and the number is then at least one above
//! it whatever the clock did.

use rcgen::{
    CertificateRevocationListParams, KeyIdMethod, RevocationReason, RevokedCertParams, SerialNumber,
};
use time::{Duration, OffsetDateTime};
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

use super::ca::{whole_seconds, CaError, NodeCa};
use super::encoding::pem_encode;
use super::leaf::Serial;

/// The factor of the log position in a [`CrlNumber`]: the low 16 decimal digits are the
/// `thisUpdate` microseconds (enough until the year 2286).
const POSITION_FACTOR: u128 = 10_000_000_000_000_000;

/// The longest `nextUpdate` interval accepted: a relying party would otherwise keep a stale
/// list for longer than any node certificate lives.
pub const CRL_MAX_NEXT_UPDATE: Duration = Duration::days(7);

/// A CRL number: only rises (see the module documentation). At most 16 octets, under RFC 5280's
/// 20.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CrlNumber(u128);

impl CrlNumber {
    /// The number of a list read at log head `position` with `thisUpdate` `this_update`, at
    /// least `floor + 1` when an earlier number is known.
    pub fn derive(
        position: i64,
        this_update: OffsetDateTime,
        floor: Option<CrlNumber>,
    ) -> Result<CrlNumber, CrlError> {
        let position = u128::try_from(position).map_err(|_| CrlError::NegativePosition)?;
        let micros = u128::try_from(this_update.unix_timestamp_nanos() / 1_000)
            .ok()
            .filter(|us| *us < POSITION_FACTOR)
            .ok_or(CrlError::TimeOutOfRange)?;
        let number = position
            .checked_mul(POSITION_FACTOR)
            .and_then(|p| p.checked_add(micros))
            .ok_or(CrlError::TimeOutOfRange)?;
        let above_floor = floor.map_or(0, |f| f.0.saturating_add(1));
        Ok(CrlNumber(number.max(above_floor)))
    }

    /// The number as an integer.
    pub fn value(self) -> u128 {
        self.0
    }

    /// Minimal big-endian bytes (at least one).
    fn be_bytes(self) -> Vec<u8> {
        let bytes = self.0.to_be_bytes();
        let start = bytes
            .iter()
            .position(|b| *b != 0)
            .unwrap_or(bytes.len() - 1);
        bytes[start..].to_vec()
    }
}

impl std::fmt::Display for CrlNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One revoked certificate on the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedEntry {
    /// Its serial.
    pub serial: Serial,
    /// When it was revoked (the revocation event's time).
    pub revoked_at: OffsetDateTime,
}

/// What a CRL is built from.
#[derive(Debug, Clone)]
pub struct CrlRequest {
    /// The revoked, unexpired certificates, in any order.
    pub entries: Vec<RevokedEntry>,
    /// The log's head position when the entries were read.
    pub log_position: i64,
    /// The number of a list this one replaces, when known.
    pub floor: Option<CrlNumber>,
    /// How long after `thisUpdate` the next list is due (`nextUpdate`).
    pub next_update_in: Duration,
}

/// A signed CRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCrl {
    /// The CertificateList, DER.
    pub der: Vec<u8>,
    /// Its cRLNumber.
    pub number: CrlNumber,
    /// thisUpdate.
    pub this_update: OffsetDateTime,
    /// nextUpdate.
    pub next_update: OffsetDateTime,
    /// The entries, in the list's order (by serial), their dates in whole seconds.
    pub entries: Vec<RevokedEntry>,
}

impl SignedCrl {
    /// The list as PEM (`X509 CRL`).
    pub fn pem(&self) -> String {
        pem_encode("X509 CRL", &self.der)
    }
}

/// Why a CRL could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrlError {
    /// The interval is not in (0, [`CRL_MAX_NEXT_UPDATE`]].
    #[error("the next-update interval must be more than 0 s and at most 7 days; got {0} s")]
    BadInterval(i64),
    /// The log position is negative (a store bug).
    #[error("the log position is negative")]
    NegativePosition,
    /// A time outside what the list can encode.
    #[error("time out of range for a revocation list")]
    TimeOutOfRange,
    /// The node CA cannot sign (expired, or the build failed).
    #[error(transparent)]
    Ca(#[from] CaError),
}

/// Orders entries by serial (as integers: shorter first, then bytewise).
fn sorted(mut entries: Vec<RevokedEntry>) -> Vec<RevokedEntry> {
    entries.sort_by(|a, b| {
        let (a, b) = (a.serial.as_bytes(), b.serial.as_bytes());
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    });
    entries
}

/// Signs the node CA's revocation list at `now` (see the module documentation).
pub fn sign_crl(
    ca: &NodeCa,
    request: CrlRequest,
    now: OffsetDateTime,
) -> Result<SignedCrl, CrlError> {
    let interval = request.next_update_in;
    if interval <= Duration::ZERO || interval > CRL_MAX_NEXT_UPDATE {
        return Err(CrlError::BadInterval(interval.whole_seconds()));
    }
    if now >= ca.not_after() {
        return Err(CaError::IssuerExpired {
            kind: ca.kind(),
            not_after: ca.not_after().unix_timestamp(),
        }
        .into());
    }
    let this_update = whole_seconds(now);
    let next_update = this_update
        .checked_add(interval)
        .ok_or(CrlError::TimeOutOfRange)?;
    let number = CrlNumber::derive(request.log_position, this_update, request.floor)?;
    // The entries as the list says them: revocation dates in whole seconds.
    let entries: Vec<RevokedEntry> = sorted(request.entries)
        .into_iter()
        .map(|e| RevokedEntry {
            revoked_at: whole_seconds(e.revoked_at),
            ..e
        })
        .collect();
    let params = CertificateRevocationListParams {
        this_update,
        next_update,
        crl_number: SerialNumber::from_slice(&number.be_bytes()),
        issuing_distribution_point: None,
        revoked_certs: entries
            .iter()
            .map(|e| RevokedCertParams {
                serial_number: SerialNumber::from_slice(e.serial.as_bytes()),
                revocation_time: e.revoked_at,
                reason_code: None::<RevocationReason>,
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: match ca.subject_key_id() {
            Some(ski) => KeyIdMethod::PreSpecified(ski.to_vec()),
            None => KeyIdMethod::Sha256,
        },
    };
    let crl = params
        .signed_by(ca.rcgen_issuer())
        .map_err(|e| CaError::Build(e.to_string()))?;
    Ok(SignedCrl {
        der: crl.der().to_vec(),
        number,
        this_update,
        next_update,
        entries,
    })
}

/// Why a revocation list was not taken as the node CA's ([`verify_crl`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrlCheckError {
    /// The bytes are not one DER CertificateList.
    #[error("not a DER certificate revocation list")]
    NotACrl,
    /// The CA certificate given does not parse.
    #[error("the node CA certificate does not parse")]
    BadCaCertificate,
    /// Its issuer is not the node CA's subject.
    #[error("issued by another CA, not this node CA")]
    OtherIssuer,
    /// The node CA's key does not verify its signature.
    #[error("its signature does not verify with the node CA's key")]
    BadSignature,
    /// No cRLNumber, or one over 16 octets (never one this project signs).
    #[error("no CRL number, or one longer than 16 octets")]
    BadNumber,
}

/// What a verified list says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrlFacts {
    /// Its cRLNumber.
    pub number: CrlNumber,
    /// thisUpdate.
    pub this_update: OffsetDateTime,
    /// nextUpdate, when present.
    pub next_update: Option<OffsetDateTime>,
    /// How many certificates it lists.
    pub revoked: usize,
}

/// Checks that `der` is a CRL issued and signed by the CA whose certificate is `ca_cert_der`,
/// and reads its number and dates: what a holder of only the node CA certificate (a split
/// gateway, bcd) checks before it takes a list.
pub fn verify_crl(ca_cert_der: &[u8], der: &[u8]) -> Result<CrlFacts, CrlCheckError> {
    let Ok(([], crl)) = CertificateRevocationList::from_der(der) else {
        return Err(CrlCheckError::NotACrl);
    };
    let ca_cert = super::ca::parse_cert(ca_cert_der).ok_or(CrlCheckError::BadCaCertificate)?;
    if crl.issuer().as_raw() != ca_cert.subject().as_raw() {
        return Err(CrlCheckError::OtherIssuer);
    }
    crl.verify_signature(ca_cert.public_key())
        .map_err(|_| CrlCheckError::BadSignature)?;
    let bytes = crl
        .crl_number()
        .ok_or(CrlCheckError::BadNumber)?
        .to_bytes_be();
    Ok(CrlFacts {
        number: CrlNumber::from_be_bytes(&bytes).ok_or(CrlCheckError::BadNumber)?,
        this_update: crl.last_update().to_datetime(),
        next_update: crl.next_update().map(|t| t.to_datetime()),
        revoked: crl.iter_revoked_certificates().count(),
    })
}

/// The cRLNumber of a DER CRL issued by `ca` whose signature `ca`'s key verifies; `None` for
/// anything else (another CA's list, a damaged file, a number over 16 octets). What a caller
/// replacing a list passes as [`CrlRequest::floor`].
pub fn crl_number_of(ca: &NodeCa, der: &[u8]) -> Option<CrlNumber> {
    verify_crl(ca.cert_der(), der).ok().map(|f| f.number)
}

impl CrlNumber {
    /// Minimal big-endian bytes (what the internal API carries as a floor).
    pub fn to_be_bytes(self) -> Vec<u8> {
        self.be_bytes()
    }

    /// From big-endian bytes (at most 16); `None` when longer.
    pub fn from_be_bytes(bytes: &[u8]) -> Option<CrlNumber> {
        if bytes.len() > 16 {
            return None;
        }
        let mut buf = [0u8; 16];
        buf[16 - bytes.len()..].copy_from_slice(bytes);
        Some(CrlNumber(u128::from_be_bytes(buf)))
    }
}

#[cfg(test)]
#[path = "crl_tests.rs"]
mod tests;
