//! The operator's TPM allow-list (`bcctl tpm allow|list|revoke`, spec 000 "tpm") on the generic
//! attestor entries ([`crate::attest::entries`]): an entry names one endorsement key by the
//! SHA-256 of its TPMT_PUBLIC (lower-case hex) and the tenant, site and pool a machine proving
//! it joins, when the EK is bound to no node yet.

use crate::attest::entries::{no_role, EntryList};
use crate::attest::pools::AttestAdminRefusal;

/// The TPM allow-list: list `tpm-allow`, ids `tpma_…`, streams `tpm-ek/<hex>` (those of the
/// `tpm.ek.allowed` events written before the generic list, so one stream guards each EK).
pub const TPM_ALLOW_LIST: EntryList = EntryList {
    name: "tpm-allow",
    id_prefix: "tpma",
    stream_prefix: Some("tpm-ek"),
    noun: "tpm allow-list entry",
    removed: "revoked",
    key: ek_key,
    role: no_role,
    exists: |key, id| format!("EK {key} is already allowed by {id} (revoke it first)"),
};

/// Parses an EK SHA-256 given as 64 hex digits (either case).
pub fn parse_ek_sha256(text: &str) -> Result<[u8; 32], AttestAdminRefusal> {
    let bad = || {
        AttestAdminRefusal::Invalid(format!(
            "the EK SHA-256 {text:?} must be 64 hex digits (the SHA-256 of the EK's TPMT_PUBLIC)"
        ))
    };
    if text.len() != 64 {
        return Err(bad());
    }
    let bytes = hex::decode(text).map_err(|_| bad())?;
    bytes.as_slice().try_into().map_err(|_| bad())
}

/// The list key of an EK SHA-256: lower-case hex.
pub fn ek_key(text: &str) -> Result<String, AttestAdminRefusal> {
    parse_ek_sha256(text).map(hex::encode)
}
