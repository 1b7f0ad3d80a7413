//! The worker of a bcd built without the `tpm` feature: opening it fails with
//! [`TpmError::Unavailable`], so no [`Worker`] ever exists (the type has no values) and its
//! methods, which keep the signatures of the real worker's, are never called.

use super::answers::{Certification, DerivedKey, QuoteResult};
use super::error::TpmError;
use super::templates::EkKind;

/// No TPM connection: a type with no values.
pub(super) enum Worker {}

impl Worker {
    /// Refuses: this bcd has no TPM client.
    pub fn open(tcti: &str) -> Result<Worker, TpmError> {
        Err(TpmError::Unavailable {
            tcti: tcti.to_owned(),
            reason: "this bcd was built without TPM support (feature tpm)".into(),
        })
    }

    pub fn random(&mut self, _len: usize) -> Result<Vec<u8>, TpmError> {
        match *self {}
    }

    pub fn ak_public(&mut self) -> Result<Vec<u8>, TpmError> {
        match *self {}
    }

    pub fn ek_certificate(
        &mut self,
        _forced: Option<EkKind>,
    ) -> Result<(EkKind, Vec<u8>), TpmError> {
        match *self {}
    }

    pub fn set_ek(&mut self, _kind: EkKind) -> Result<(), TpmError> {
        match *self {}
    }

    pub fn ek_public(&mut self, _kind: EkKind) -> Result<Vec<u8>, TpmError> {
        match *self {}
    }

    pub fn derive_node_key(&mut self, _unique: &[u8; 32]) -> Result<DerivedKey, TpmError> {
        match *self {}
    }

    pub fn release(&mut self, _unique: &[u8; 32]) -> Result<(), TpmError> {
        match *self {}
    }

    pub fn sign(
        &mut self,
        _unique: &[u8; 32],
        _public_area: &[u8],
        _digest: &[u8; 32],
    ) -> Result<[u8; 64], TpmError> {
        match *self {}
    }

    pub fn certify(
        &mut self,
        _unique: &[u8; 32],
        _public_area: &[u8],
        _qualifying: &[u8; 32],
    ) -> Result<Certification, TpmError> {
        match *self {}
    }

    pub fn answer(
        &mut self,
        _credential_blob: &[u8],
        _encrypted_secret: &[u8],
        _pcrs: &[u32],
        _csr_sha256: &[u8; 32],
        _node: Option<(&[u8; 32], &[u8])>,
    ) -> Result<(Vec<u8>, QuoteResult, Option<Certification>), TpmError> {
        match *self {}
    }
}
