//! What the TPM thread answers the [`super::Tpm`] methods: a derived node key, a quote, a
//! certification (the worker builds them, with or without the `tpm` feature).

/// A node key as the worker derived it: its TPMT_PUBLIC marshalled and its uncompressed point.
pub(super) struct DerivedKey {
    pub(super) public_area: Vec<u8>,
    pub(super) point: Vec<u8>,
}

/// What the worker's quote answers.
pub(super) struct QuoteResult {
    pub(super) quote: Vec<u8>,
    pub(super) signature: Vec<u8>,
    pub(super) pcrs: Vec<(u32, Vec<u8>)>,
}

/// The worker's certification: the TPMS_ATTEST and its signature, marshalled.
pub(super) struct Certification {
    pub(super) attest: Vec<u8>,
    pub(super) signature: Vec<u8>,
}
